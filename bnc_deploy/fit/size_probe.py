"""What a DNN file costs beyond its weights, measured before sizing: DNN cells fill a flash or file limit.

Contract
--------
* A DNN cell under a ``--max-flash`` or ``--max-file-bytes`` limit is sized from the number of
  weights the limit holds (:mod:`bnc_deploy.fit.dnn_space`). Without a measurement that number
  is the limit over the bytes one stored weight takes: a bound that ignores what the file adds
  (biases, the graph or code, metadata, alignment), so the widest cells measure over the limit
  and are trained for nothing.
* A file's size does not depend on its trained values: the same shapes and types give the same
  bytes, up to metadata of varying length. So, per DNN family and weight storage
  (:func:`~bnc_deploy.fit.dnn_space.stored_bytes`: one byte per weight up to 7 bits, two at 8),
  two networks (:func:`probe_widths`: the width the bound sizes to and an eighth of it) train for
  :data:`PROBE_EPOCHS` epoch through the sweep engine (``out_dir/size-probe``, resumed by a
  rerun), are exported for each of the target's variants and measured on the limited axes. The
  smallest variant's sizes give a line, ``bytes = fixed + per_parameter x parameters``
  (:class:`SizeLine`), per axis.
* Sizing then asks for the parameters ``(limit x (1 - MARGIN) - fixed) / per_parameter``
  (:func:`SizeModel.parameters_within`); the cells' other scales stay as fallbacks. The chosen model is
  measured again like any candidate: what is reported as fitting has been measured to fit.
* ``report.json`` has the lines under ``size_probe``.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bnc_deploy.artifacts import load_artifact
from bnc_deploy.costs import analytic_costs
from bnc_deploy.errors import BncDeployError
from bnc_deploy.fit.space import DNN_FAMILIES, SearchSpace, SpaceSettings, variants_for
from bnc_deploy.fit.sweeps import SweepPlace, train_probes
from bnc_deploy.targets.base import Target
from bnc_deploy.targets.budget import Budget

#: Budget axes a DNN is sized on whose measured cost exceeds the analytic weight bytes.
MEASURED_SIZE_AXES = ("flash", "file_bytes")
#: Epochs a probe network trains: its values do not matter, only that the sweep writes it.
PROBE_EPOCHS = 1
#: Share of a limit left free when sizing from a measured line (metadata lengths vary a little).
MARGIN = 0.02
#: The smaller probe network's width, as a share of the larger one's.
SMALL_SHARE = 1 / 8
PROBE_DIR = "size-probe"


@dataclass(frozen=True)
class SizeLine:
    """``bytes = fixed + per_parameter x parameters`` on one axis, from two measured networks."""

    fixed: float
    per_parameter: float

    def parameters_within(self, limit: float) -> int:
        """The most parameters whose bytes stay within ``limit`` less :data:`MARGIN` (0 when none)."""
        room = limit * (1 - MARGIN) - self.fixed
        return max(0, int(room / self.per_parameter)) if self.per_parameter > 0 else 0


@dataclass(frozen=True)
class SizeModel:
    """``lines``: ``(family, stored bytes per weight, axis)`` -> its :class:`SizeLine`."""

    lines: Mapping[tuple[str, int, str], SizeLine] = field(default_factory=dict)

    def line(self, family: str, storage: int, axis: str) -> SizeLine | None:
        return self.lines.get((family, storage, axis))

    def to_dict(self) -> dict:
        return {
            f"{family} {storage}-byte weights {axis}": dataclasses.asdict(line)
            for (family, storage, axis), line in self.lines.items()
        }


def needs_probe(target: Target, budget: Budget, space: SearchSpace) -> bool:
    """A flash or file limit the target measures, and DNN cells to size to it."""
    limited = [a for a in MEASURED_SIZE_AXES if a in budget.limits() and a in target.axes]
    return bool(limited) and any(c.family in DNN_FAMILIES for c in space.cells if not c.refused)


def probe_widths(widths: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The two probe sizes of a cell sized by the weight bound: an eighth of it, and it."""
    small = tuple(max(1, int(w * SMALL_SHARE)) for w in widths)
    return small, widths


def probe_sizes(
    space: SearchSpace, target: Target, budget: Budget, settings: SpaceSettings, place: SweepPlace
) -> SizeModel:
    """Train and measure two networks per DNN family and weight storage of ``space``'s cells (sized
    by the weight bound), and fit their :class:`SizeLine` per limited axis (see the module docstring)."""
    from bnc_deploy.fit.dnn_space import dnn_records, stored_bytes

    axes = tuple(a for a in MEASURED_SIZE_AXES if a in budget.limits() and a in target.axes)
    widest: dict[tuple[str, int], tuple[int, tuple[int, ...]]] = {}  # (family, storage) -> (bits, widths)
    for cell in space.cells:
        if cell.family in DNN_FAMILIES and not cell.refused:
            key = (cell.family, stored_bytes(cell.bits))
            if key not in widest or (cell.bits, cell.widths) > widest[key]:
                widest[key] = (cell.bits, cell.widths)
    short = dataclasses.replace(settings, lrs=settings.lrs[:1], epochs=PROBE_EPOCHS, halving=False)
    probes = {}  # (family, storage, size index) -> record
    for (family, storage), (bits, widths) in widest.items():
        for k, size in enumerate(dict.fromkeys(probe_widths(widths))):
            probes[(family, storage, k)] = dnn_records(family, bits, size, short)[0]
    if not probes:
        return SizeModel()
    paths = train_probes(probes, short, place, PROBE_DIR)
    points: dict[tuple[str, int, str], list[tuple[int, float]]] = {}
    for (family, storage, _), path in paths.items():
        if path is None:
            continue
        artifact = load_artifact(path)
        sizes = _smallest(artifact, target, axes, place.out / PROBE_DIR / "measure")
        parameters = int(analytic_costs(artifact).n_parameters)
        for axis, value in sizes.items():
            points.setdefault((family, storage, axis), []).append((parameters, value))
    return SizeModel({key: _line(pts) for key, pts in points.items() if len(pts) == 2})


def _line(points: list[tuple[int, float]]) -> SizeLine:
    (n0, b0), (n1, b1) = sorted(points)
    per = (b1 - b0) / (n1 - n0) if n1 != n0 else 0.0
    return SizeLine(fixed=b1 - per * n1, per_parameter=per)


def _smallest(artifact, target: Target, axes: tuple[str, ...], workdir: Path) -> dict[str, float]:
    """Per axis, the smallest size over the target's export variants (a failing export gives none)."""
    found: dict[str, float] = {}
    for variant in variants_for(target, artifact.kind):
        folder = workdir / f"{artifact.content_sha256[:12]}-{variant.label}"
        shutil.rmtree(folder, ignore_errors=True)
        try:
            m = variant.target.measure(artifact, folder, axes=axes)
        except BncDeployError:
            continue
        for axis in axes:
            value = m.measured.get(axis)
            if value is not None and (axis not in found or value < found[axis]):
                found[axis] = float(value)
    return found


def probe_text(model: SizeModel) -> str:
    """One line: each family and storage's fixed bytes and bytes per parameter."""
    parts = [
        f"{family} ({storage} B/weight) {axis}: {line.fixed:,.0f} B + {line.per_parameter:.2f} B/parameter"
        for (family, storage, axis), line in model.lines.items()
    ]
    return "size probe: " + ("; ".join(parts) or "nothing measured")
