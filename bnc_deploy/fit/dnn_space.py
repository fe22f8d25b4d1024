"""DNN cells of ``bnc-fit``'s search space: FC and CNN networks per weight bit width, sized to the budget.

Contract
--------
* A DNN cell is a family (``fc``: the paper's FC NN with ``SpaceSettings.fc_layers`` weight layers;
  ``cnn``: ``SpaceSettings.cnn_layers`` 3x3 convolutions, image data only) at one weight bit
  width ``B`` and one size. Inputs are standardized (one column per feature; a CNN sees the
  dataset's known image layout, ``artifacts.encoding.image_layout``, as one channel), no batch norm,
  ReLU: the DNN trainer's defaults.
* **Sizing** uses the DNN baselines' matcher (``train.sizing.match_fc`` / ``match_cnn``, the
  paper's cost polynomials), once per size limit of the budget:

  - ``max_bits``: that many bits; ``max_ops``: that many operations (both exact axes);
  - ``max_flash`` / ``max_file_bytes`` ``F``: the bits of the weights the file holds. Measured
    (:mod:`bnc_deploy.fit.size_probe`: the target's file or flash bytes of two probe networks per
    family and weight storage, a line in the parameters), the parameters that line puts within
    ``F``; otherwise the bound ``F / s(B)``, where ``s(B)`` is the bytes the exporters store one
    weight code in (:func:`stored_bytes`): a file of at most ``F`` bytes holds at most that many weights.

  The smallest widths over the limits are taken; without a size limit (``ram``, ``latency_us``,
  ``instructions`` or none) the widths of :attr:`SpaceSettings.dnn_widths` are used instead. When
  the sizes come from a measured axis (flash, file bytes), each is also tried scaled by
  :attr:`SpaceSettings.dnn_scales` (a smaller network to fall back on when the file's own
  overhead does not fit). Widths are capped (FC: :attr:`SpaceSettings.max_width`; CNN channels:
  a sixteenth of it) and, while the exact analytic bits or operations exceed their limits,
  reduced; a cell whose one-unit network still exceeds them is pruned like any other.
* The cell's costs are ``costs.dnn_costs`` of its layer list, so pruning
  (:meth:`~bnc_deploy.targets.base.Target.cannot_fit`) sees the exact bits and operations the trained
  model will have.

This module imports no torch: the matcher is integer arithmetic (``train.sizing`` is imported lazily).
"""

from __future__ import annotations

from bnc_deploy.costs import CostReport
from bnc_deploy.errors import ConfigError
from bnc_deploy.targets.budget import Budget

#: Weight bit widths the exporters store in one byte (int8 codes); wider ones take two (int16).
INT8_MAX_BITS = 7
#: Budget axes that size a network from their limit, and whether the cost on it is exact analytically.
SIZE_AXES = {"bits": True, "ops": True, "flash": False, "file_bytes": False}


def stored_bytes(bits: int) -> int:
    """Bytes one ``bits``-bit weight code takes in the exported files (int8, int16 above 7 bits)."""
    return 1 if bits <= INT8_MAX_BITS else 2


def image_shape_of(dataset) -> tuple[int, int] | None:
    """The dataset's known image layout ``(H, W)``, or None when it is not image data."""
    from bnc_deploy.artifacts.encoding import image_layout

    try:
        shape, _ = image_layout(dataset.name, dataset.n_features)
    except ConfigError:
        return None
    return tuple(shape)


def dnn_costs_of(family: str, dataset, widths: tuple[int, ...], bits: int, settings) -> CostReport:
    """Exact analytic costs of the ``family`` network with ``widths`` on ``dataset``."""
    from bnc_deploy.train import sizing  # integer arithmetic, no torch

    if family == "fc":
        hidden = widths * (settings.fc_layers - 1) if len(widths) == 1 else widths
        return sizing.fc_costs(dataset.n_features, hidden, dataset.n_classes, bits, False)
    return sizing.cnn_costs(image_shape_of(dataset), 1, widths, dataset.n_classes, bits, False)


def _match(family: str, dataset, bits: int, settings, kind: str, target: int) -> tuple[int, ...]:
    """Widths matched to ``target`` ``kind`` (bits or ops); one unit when the target is below it."""
    from bnc_deploy.train import sizing

    try:
        if family == "fc":
            found = sizing.match_fc(
                dataset.n_features, dataset.n_classes, settings.fc_layers, bits, False, **{f"target_{kind}": target}
            )
            return tuple(found.widths[:1])
        shape, n_conv = image_shape_of(dataset), settings.cnn_layers
        found = sizing.match_cnn(shape, 1, dataset.n_classes, n_conv, bits, False, **{f"target_{kind}": target})
        return tuple(found.widths)
    except ConfigError:  # the target rounds to 0 units: the smallest network (pruned if it cannot fit)
        return (1,) if family == "fc" or settings.cnn_layers == 1 else (1, 2)


def _size_targets(budget: Budget, bits: int, family: str = "", size_model=None) -> list[tuple[str, int, bool]]:
    """``(kind, target, exact)`` per size limit of ``budget`` (see the module docstring);
    ``size_model``: the measured :class:`~bnc_deploy.fit.size_probe.SizeModel`, or None."""
    out = []
    for axis, limit in budget.limits().items():
        if axis not in SIZE_AXES:
            continue
        if axis in ("bits", "ops"):
            out.append((axis, int(limit), True))
            continue
        line = None if size_model is None else size_model.line(family, stored_bytes(bits), axis)
        parameters = int(limit) // stored_bytes(bits) if line is None else line.parameters_within(limit)
        out.append(("bits", max(1, parameters * bits), False))
    return out


def _capped(family: str, widths: tuple[int, ...], settings) -> tuple[int, ...]:
    cap = settings.max_width if family == "fc" else max(1, settings.max_width // 16)
    return tuple(min(cap * (2 if i else 1), max(1, w)) for i, w in enumerate(widths))


def _shrink(family: str, dataset, widths: tuple[int, ...], bits: int, settings, budget: Budget) -> tuple[int, ...]:
    """``widths`` reduced until the exact bits and operations are within the budget's limits."""
    limits = budget.limits()
    while True:
        costs = dnn_costs_of(family, dataset, widths, bits, settings)
        over = ("bits" in limits and costs.size_bits > limits["bits"]) or (
            "ops" in limits and costs.n_ops > limits["ops"]
        )
        smaller = tuple(max(1, min(w - 1, int(w * 0.97))) for w in widths)
        if not over or smaller == widths:
            return widths
        widths = smaller


def dnn_widths(family: str, dataset, bits: int, budget: Budget, settings, size_model=None) -> list[tuple[int, ...]]:
    """The sizes (widths or channels) of the ``family`` cells at ``bits``, largest first, distinct
    (``size_model``: the measured file sizes, :mod:`bnc_deploy.fit.size_probe`)."""
    targets = _size_targets(budget, bits, family, size_model)
    if not targets:
        base = [(w,) if family == "fc" or settings.cnn_layers == 1 else (w, 2 * w) for w in settings.dnn_widths]
        sizes = [_capped(family, tuple(max(1, w // (1 if family == "fc" else 8)) for w in b), settings) for b in base]
    else:
        matched = [_match(family, dataset, bits, settings, kind, target) for kind, target, _ in targets]
        widest = tuple(min(ws) for ws in zip(*matched))
        scales = (1.0,) if all(exact for _, _, exact in targets) else settings.dnn_scales
        sizes = [_capped(family, tuple(max(1, int(w * s)) for w in widest), settings) for s in scales]
    sizes = [_shrink(family, dataset, w, bits, settings, budget) for w in sizes]
    return sorted(dict.fromkeys(sizes), reverse=True)


def dnn_records(family: str, bits: int, widths: tuple[int, ...], settings) -> list[dict]:
    """The sweep records of one kept DNN cell: one per learning rate."""
    layers = settings.fc_layers if family == "fc" else settings.cnn_layers
    hidden = ",".join(str(w) for w in widths)
    return [
        {"model": family, "weight_bits": bits, "layers": layers, "hidden": hidden, "lr": float(lr)}
        for lr in settings.lrs
    ]
