"""Latency before training: cells whose architecture is measured too slow are pruned untrained.

Contract
--------
* Sizes and operations are known from a configuration; latency is not, but it does not depend on
  the trained values: a model of the same architecture runs the same operations on the same
  shapes. So, with a ``--max-latency-us`` budget on a target that measures latency, one
  configuration per **architecture** (:func:`architecture_key`: the family and a DNN's widths;
  not the bit width, which changes neither a DNN's float graph nor a BN model's table type) is
  trained for :data:`PROBE_EPOCHS` epoch through the sweep engine (``out_dir/latency-probe``,
  resumed by a rerun), exported for each of the target's variants and timed by the target like
  any candidate. The fastest variant's latency is the architecture's.
* A cell is pruned when its architecture's latency exceeds :data:`PRUNE_FACTOR` times the limit:
  the factor keeps timing noise from pruning a cell that could fit; a cell within it trains and
  its chosen model is measured again, so what is reported as fitting has been measured to fit.
  A learned TAN's structure is unknown before training: its cells are never probed.
* The pruned cells carry ``("latency_us", latency, limit)`` like a size bound (report: the cell's
  ``pruned``), and the probe's figures are in :attr:`LatencyProbe.latencies`.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bnc_deploy.artifacts import load_artifact
from bnc_deploy.errors import BncDeployError
from bnc_deploy.fit.space import (
    LEARN_FAMILY,
    Cell,
    SearchSpace,
    SpaceSettings,
    hybrid_draws,
    records_of_cell,
    variants_for,
)
from bnc_deploy.fit.sweeps import SweepPlace, train_probes
from bnc_deploy.targets.base import Target
from bnc_deploy.targets.budget import Budget

#: Epochs a probe configuration trains: its values do not matter, only that the sweep writes it.
PROBE_EPOCHS = 1
#: A cell is pruned when its architecture measured over this multiple of the latency limit.
PRUNE_FACTOR = 2.0
PROBE_DIR = "latency-probe"


@dataclass(frozen=True)
class LatencyProbe:
    """``latencies``: architecture label -> fastest variant's latency (us; None: not measured);
    ``pruned``: cell label -> the ``(axis, value, limit)`` it is pruned with."""

    latencies: Mapping[str, float | None] = field(default_factory=dict)
    pruned: Mapping[str, tuple[tuple[str, float, float], ...]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"prune_factor": PRUNE_FACTOR, "latencies_us": dict(self.latencies), "pruned": sorted(self.pruned)}


def architecture_key(cell: Cell) -> str:
    """The family and a DNN's widths: the cells that run the same operations on the same shapes."""
    return cell.family + (f" {'x'.join(str(w) for w in cell.widths)}" if cell.widths else "")


def needs_probe(target: Target, budget: Budget) -> bool:
    return budget.max_latency_us is not None and "latency_us" in target.axes


def probe_latency(
    space: SearchSpace, target: Target, budget: Budget, settings: SpaceSettings, place: SweepPlace
) -> LatencyProbe:
    """Train one short configuration per architecture of the kept cells, time it on ``target``,
    and name the cells to prune (see the module docstring)."""
    limit = float(budget.max_latency_us or 0.0)
    probes: dict[str, Cell] = {}
    for cell in space.kept:
        if cell.family != LEARN_FAMILY:
            best = probes.get(architecture_key(cell))
            if best is None or cell.bits > best.bits:
                probes[architecture_key(cell)] = cell
    if not probes:
        return LatencyProbe()
    short = dataclasses.replace(settings, draws=1, lrs=settings.lrs[:1], epochs=PROBE_EPOCHS, halving=False)
    draws = hybrid_draws(1, place.seed)
    records = {key: records_of_cell(cell, short, draws)[0] for key, cell in probes.items()}
    paths = train_probes(records, short, place, PROBE_DIR)
    latencies: dict[str, float | None] = {
        key: None if path is None else _fastest(path, target, place.out / PROBE_DIR / "measure")
        for key, path in paths.items()
    }
    pruned = {
        cell.label: (("latency_us", latencies[architecture_key(cell)], limit),)
        for cell in space.kept
        if (lat := latencies.get(architecture_key(cell))) is not None and lat > PRUNE_FACTOR * limit
    }
    return LatencyProbe(latencies, pruned)


def _fastest(model_path: str, target: Target, workdir: Path) -> float | None:
    """The smallest latency of the model at ``model_path`` over the target's export variants."""
    artifact = load_artifact(model_path)
    found = []
    for variant in variants_for(target, artifact.kind):
        folder = workdir / f"{Path(model_path).stem}-{variant.label}"
        shutil.rmtree(folder, ignore_errors=True)
        try:
            m = variant.target.measure(artifact, folder, axes=("latency_us",))
        except BncDeployError:
            continue  # an export that fails here fails as a candidate too; it prunes nothing
        if m.ok and m.measured.latency_us is not None:
            found.append(float(m.measured.latency_us))
    return min(found) if found else None


def probe_text(probe: LatencyProbe) -> str:
    """One line: each architecture's latency and how many cells it pruned."""
    timed = ", ".join(f"{k} {'-' if v is None else f'{v:.2f} us'}" for k, v in probe.latencies.items())
    pruned = f"{len(probe.pruned)} cells pruned (over {PRUNE_FACTOR:g}x the limit)"
    return f"latency probe: {timed or 'nothing to time'}; {pruned}"
