"""Analytic cost model: size in bits and operations per input row, the paper's conventions.

This module is the one place the conventions are written down; everything else (``bnc-train``
summaries, the export metadata, the graph counter's cross-check) agrees with it.

Bayesian network classifiers (NB and TAN)
-----------------------------------------
``D`` features, ``C`` classes, ``B`` bits per parameter (32 for a float model).

* **Size** = ``B`` x the number of table entries, class prior included:
  ``n_parameters = C * (1 + sum_i |X_i| * |X_pa(i)|)`` (``|X_pa(i)| = 1`` for the class only).
* **Operations** = ``D * C`` additions: ``D + 1`` terms (prior and one entry per feature) are
  accumulated for each class.
* **Argmax** = ``C - 1`` comparisons, reported on its own line, not in the operations.
* **Addressing** (index arithmetic: feature offsets, parent strides) is reported on its own line
  and not counted as operations. Feature ``i`` reads row ``offset_i + x_i * |X_pa(i)| + x_pa(i)``:
  1 addition without a parent, 1 multiplication + 2 additions with one, so
  ``D + 2 * #(features with a parent)`` per row.

Deep neural networks (:func:`dnn_costs`; DNN artifacts register as ``"dnn"``)
-----------------------------------------------------------------------------
* ``B`` bits per weight, 64 bits per batch-norm unit (scale and shift, folded), 32 bits per
  output bias;
* one operation per multiply-accumulate, one per batch-norm output, one per output bias;
* pooling and activations are free.

For a two-layer fully connected network with ``D`` inputs, ``H`` hidden units (with batch norm
when ``bn = 1``) and ``C`` outputs (with bias)::

    bits = B * (D*H + H*C) + 64 * H * bn + 32 * C
    ops  = D*H + H*C + H * bn + C

Cost functions register by artifact kind in :data:`COST_MODELS` (``"bnc"``, ``"dnn"``);
:func:`costs_from_metadata` gives the same figures from an exported file's metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, SupportsInt

from bnc_deploy.errors import ArtifactError
from bnc_deploy.registry import claim

#: Bits of a float32 parameter.
FLOAT_BITS = 32
#: DNN conventions (paper): bits per batch-norm unit and per output bias.
DNN_BATCH_NORM_BITS = 64
DNN_BIAS_BITS = 32


@dataclass
class CostReport:
    """Analytic costs of one model, per input row.

    Attributes
    ----------
    kind : str
        Artifact kind (``"bnc"``, later ``"dnn"``).
    n_parameters : int
        Stored parameters the size counts (BN: table entries incl. the prior; DNN: weights).
    bits_per_parameter : int
        ``B`` (32 for float).
    size_bits : int
        Total parameter memory in bits (the paper's size).
    n_ops : int
        Operations per row (the paper's count: BN additions; DNN MACs + BN outputs + biases).
    argmax_comparisons : int
        ``C - 1`` comparisons of the final argmax, not in ``n_ops``.
    addressing_ops : int
        Index arithmetic per row (not in ``n_ops``; 0 for DNNs).
    lines : list of (label, value, note)
        The breakdown, one line per term, for tables and docs.
    """

    kind: str
    n_parameters: int
    bits_per_parameter: int
    size_bits: int
    n_ops: int
    argmax_comparisons: int = 0
    addressing_ops: int = 0
    lines: list[tuple[str, int, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def format(self) -> str:
        """Human-readable breakdown, one term a line."""
        width = max([len(label) for label, _, _ in self.lines] + [10])
        return "\n".join(f"  {label:<{width}}  {value:>12,}  {note}" for label, value, note in self.lines)


#: Artifact kind -> cost function(artifact) -> CostReport. Each function takes the artifacts of its
#: own kind (their classes are not imported here), hence ``Any``.
COST_MODELS: dict[str, Callable[[Any], CostReport]] = {}
#: Artifact kind -> cost function(an exported file's metadata dict) -> CostReport.
METADATA_COST_MODELS: dict[str, Callable[[Mapping[str, Any]], CostReport]] = {}


def register_cost_model(
    kind: str,
    function: Callable[[Any], CostReport],
    from_metadata: Callable[[Mapping[str, Any]], CostReport] | None = None,
    *,
    overwrite: bool = False,
) -> None:
    """Add the cost functions of an artifact kind (from the artifact, from a file's metadata);
    ConfigError for a kind that has them unless ``overwrite`` (:func:`bnc_deploy.registry.claim`)."""
    claim(COST_MODELS, kind, what=f"a cost model of kind {kind!r}", overwrite=overwrite)
    COST_MODELS[kind] = function
    if from_metadata is not None:
        METADATA_COST_MODELS[kind] = from_metadata


def analytic_costs(artifact: object) -> CostReport:
    """Costs of an artifact by its kind; ArtifactError naming the kind if none is registered."""
    kind = getattr(artifact, "kind", None)
    if kind not in COST_MODELS:
        raise ArtifactError(f"no cost model for artifact kind {kind!r} (known: {', '.join(sorted(COST_MODELS))})")
    return COST_MODELS[kind](artifact)


# -- Bayesian network classifiers -------------------------------------------------------------------
def bnc_cost_terms(
    cardinalities: Iterable[SupportsInt], parents: Iterable[SupportsInt], n_classes: int, bits: int
) -> CostReport:
    """BNC costs from the structure alone (pure function: no artifact needed).

    Parameters
    ----------
    cardinalities : sequence of int, length D
    parents : sequence of int, length D (-1: class only)
    n_classes : int
    bits : int
        Bits per parameter (32 for float models).
    """
    cards = [int(c) for c in cardinalities]
    pa = [int(p) for p in parents]
    d, c = len(cards), int(n_classes)
    rows = sum(card * (cards[p] if p >= 0 else 1) for card, p in zip(cards, pa))
    n_parameters = c * (1 + rows)
    n_with_parent = sum(p >= 0 for p in pa)
    addressing = d + 2 * n_with_parent
    report = CostReport(
        kind="bnc",
        n_parameters=n_parameters,
        bits_per_parameter=int(bits),
        size_bits=n_parameters * int(bits),
        n_ops=d * c,
        argmax_comparisons=max(c - 1, 0),
        addressing_ops=addressing,
    )
    report.lines = [
        ("table entries", c * rows, f"C x sum_i |X_i|*|X_pa(i)| = {c} x {rows}"),
        ("class prior", c, "C"),
        ("parameters", n_parameters, ""),
        ("size (bits)", report.size_bits, f"{bits} bits x {n_parameters:,} parameters"),
        ("operations", report.n_ops, f"D x C additions = {d} x {c} (D + 1 terms per class)"),
        ("argmax", report.argmax_comparisons, "C - 1 comparisons (not in operations)"),
        (
            "addressing",
            addressing,
            f"index arithmetic: {d} offset adds + 2 x {n_with_parent} parent terms (not in operations)",
        ),
    ]
    return report


class BNCStructure(Protocol):
    """What :func:`bnc_costs` reads of a BNC artifact (a protocol: this module imports no artifact code)."""

    @property
    def cardinalities(self) -> Iterable[SupportsInt]: ...

    @property
    def parents(self) -> Iterable[SupportsInt]: ...

    @property
    def n_classes(self) -> int: ...

    @property
    def bits_per_parameter(self) -> int: ...


def bnc_costs(artifact: BNCStructure) -> CostReport:
    """Costs of a :class:`~bnc_deploy.artifacts.bnc.BNCArtifact` (agrees with its ``size_bits``/``n_ops``)."""
    return bnc_cost_terms(artifact.cardinalities, artifact.parents, artifact.n_classes, artifact.bits_per_parameter)


def bnc_costs_from_metadata(meta: Mapping[str, Any]) -> CostReport:
    """Costs from an exported file's ``bnc_deploy`` metadata (cardinalities, parents, classes, bits)."""
    return bnc_cost_terms(meta["cardinalities"], meta["parents"], len(meta["class_names"]), int(meta["bits"]))


register_cost_model("bnc", bnc_costs, bnc_costs_from_metadata)


# -- DNNs (pure functions over a layer list; no artifact kind yet) -----------------------------------
@dataclass(frozen=True)
class Dense:
    """Fully connected layer ``n_in -> n_out``, optionally followed by batch norm and/or a bias."""

    n_in: int
    n_out: int
    batch_norm: bool = False
    bias: bool = False


@dataclass(frozen=True)
class Conv2D:
    """2-D convolution: ``in_channels -> out_channels`` with a ``kernel`` (kh, kw) over an output of
    ``out_hw`` (oh, ow) positions; ``groups`` as in ONNX (depthwise: groups = in_channels)."""

    in_channels: int
    out_channels: int
    kernel: tuple[int, int]
    out_hw: tuple[int, int]
    groups: int = 1
    batch_norm: bool = False
    bias: bool = False


@dataclass(frozen=True)
class Free:
    """Pooling, activations, reshapes: no parameters, no operations (the paper's convention)."""

    name: str = "activation"


def dnn_costs(layers: Sequence[Dense | Conv2D | Free], bits: int) -> CostReport:
    """DNN costs for a layer list (``Dense``, ``Conv2D``, ``Free``) at ``bits`` bits per weight.

    bits = B x weights + 64 x batch-norm units + 32 x biases;
    ops  = MACs + batch-norm outputs + bias outputs (pooling/activations free).
    """
    weights = macs = bn_units = bn_outputs = biases = bias_outputs = 0
    lines: list[tuple[str, int, str]] = []
    for k, layer in enumerate(layers):
        if isinstance(layer, Dense):
            w, m, outputs, units = layer.n_in * layer.n_out, layer.n_in * layer.n_out, layer.n_out, layer.n_out
            what = f"dense {layer.n_in}->{layer.n_out}"
        elif isinstance(layer, Conv2D):
            kh, kw = layer.kernel
            oh, ow = layer.out_hw
            if layer.in_channels % layer.groups or layer.out_channels % layer.groups:
                raise ValueError(f"layer {k}: groups={layer.groups} does not divide the channels")
            w = kh * kw * (layer.in_channels // layer.groups) * layer.out_channels
            m, units = w * oh * ow, layer.out_channels
            outputs = layer.out_channels * oh * ow
            what = f"conv {kh}x{kw} {layer.in_channels}->{layer.out_channels} @{oh}x{ow}"
        elif isinstance(layer, Free):
            lines.append((f"layer {k}", 0, f"{layer.name}: free"))
            continue
        else:
            raise TypeError(f"layer {k}: unknown layer type {type(layer).__name__}")
        weights, macs = weights + w, macs + m
        note = f"{what}: {w:,} weights, {m:,} MACs"
        if layer.batch_norm:
            bn_units, bn_outputs = bn_units + units, bn_outputs + outputs
            note += f", batch norm ({units} units)"
        if layer.bias:
            biases, bias_outputs = biases + units, bias_outputs + outputs
            note += f", bias ({units})"
        lines.append((f"layer {k}", m, note))
    size = int(bits) * weights + DNN_BATCH_NORM_BITS * bn_units + DNN_BIAS_BITS * biases
    ops = macs + bn_outputs + bias_outputs
    widths = [
        layer.n_out if isinstance(layer, Dense) else layer.out_channels
        for layer in layers
        if isinstance(layer, (Dense, Conv2D))
    ]
    report = CostReport(
        kind="dnn",
        n_parameters=weights,
        bits_per_parameter=int(bits),
        size_bits=size,
        n_ops=ops,
        argmax_comparisons=max(widths[-1] - 1, 0) if widths else 0,
    )
    report.lines = lines + [
        ("weights", weights, f"x {bits} bits"),
        ("batch-norm units", bn_units, f"x {DNN_BATCH_NORM_BITS} bits, {bn_outputs:,} ops"),
        ("biases", biases, f"x {DNN_BIAS_BITS} bits, {bias_outputs:,} ops"),
        ("size (bits)", size, ""),
        ("operations", ops, "MACs + batch-norm outputs + bias outputs"),
    ]
    return report


def fc_dnn_costs(
    n_inputs: int, hidden: Iterable[int], n_classes: int, bits: int, batch_norm: bool = True
) -> CostReport:
    """The paper's fully connected DNN: hidden layers with batch norm, output layer with bias."""
    sizes = [n_inputs, *hidden, n_classes]
    layers = [
        Dense(a, b, batch_norm=batch_norm and i < len(sizes) - 2, bias=i == len(sizes) - 2)
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))
    ]
    return dnn_costs(layers, bits)


# -- DNN artifacts and exported DNN files ----------------------------------------------------------
class CostedArtifact(Protocol):
    """An artifact that computes its own costs (a DNN artifact from its layer list)."""

    def costs(self) -> CostReport: ...


def dnn_artifact_costs(artifact: CostedArtifact) -> CostReport:
    """Costs of a :class:`~bnc_deploy.artifacts.dnn.DNNArtifact` (its layer list, ``B`` bits)."""
    return artifact.costs()


def dnn_layers_from_metadata(meta: Mapping[str, Any]) -> list[Dense | Conv2D | Free]:
    """The cost layer list of an exported DNN from its metadata (``layers``, ``image_shape``).

    Convolutions are 3x3 'same' (output = input positions), pooled 2x2 (floor) when ``pool``.
    Missing keys raise KeyError (reported as incomplete metadata), ``image_shape`` too when a
    convolution needs it.
    """
    layers: list[Dense | Conv2D | Free] = []
    hw: tuple[int, int] | None = tuple(meta["image_shape"]) if meta.get("image_shape") else None
    for spec in meta["layers"]:
        if spec["type"] == "conv2d":
            if hw is None:  # was a TypeError on None further on; callers report a KeyError as a missing key
                raise KeyError("image_shape")
            layers.append(Conv2D(spec["in"], spec["out"], (3, 3), hw, batch_norm=spec["batch_norm"], bias=spec["bias"]))
            layers.append(Free(f"{spec['activation']} + 2x2 max-pool" if spec["pool"] else str(spec["activation"])))
            if spec["pool"]:
                hw = (hw[0] // 2, hw[1] // 2)
        else:
            layers.append(Dense(spec["in"], spec["out"], batch_norm=spec["batch_norm"], bias=spec["bias"]))
            if spec.get("activation"):
                layers.append(Free(spec["activation"]))
    return layers


def dnn_costs_from_metadata(meta: Mapping[str, Any]) -> CostReport:
    """Costs from an exported DNN file's ``bnc_deploy`` metadata."""
    return dnn_costs(dnn_layers_from_metadata(meta), int(meta["weight_bits"]))


def costs_from_metadata(meta: Mapping[str, Any]) -> CostReport:
    """Analytic costs of an exported file of any kind, from its metadata (``model_kind``; absent: BN)."""
    kind = meta.get("model_kind", "bnc")
    if kind not in METADATA_COST_MODELS:
        raise ArtifactError(f"no cost model for model kind {kind!r} (known: {', '.join(sorted(METADATA_COST_MODELS))})")
    return METADATA_COST_MODELS[kind](meta)


register_cost_model("dnn", dnn_artifact_costs, dnn_costs_from_metadata)
