"""How long a sweep will take, said before it starts: its configuration-epochs and a timed probe.

* :func:`planned_config_epochs`: the configuration-epochs a plan trains, exactly as the chunks
  will run them: every configuration's epochs, or with successive halving the survivors of each
  selection group between rungs (``ceil(n / rate**k)`` per group and chunk, as ``tasks`` keeps
  them). An upper bound only in that a resumed sweep skips what is done.
* :func:`probe`: times a few configurations of each kind (model, and structure of a TAN) on the
  chosen device, without data loading, model building and evaluation. The batched BN trainer runs
  a chunk of up to :data:`BNC_PROBE_CONFIGS` configurations for 2 epochs (on a GPU the first chunk
  whole, as it will run) and the second epoch is the cost; the single-run trainers (FC/CNN,
  structure learning) run up to :data:`SINGLE_PROBE_CONFIGS` configurations spread over the plan
  (their sizes differ) for 1 and 3 epochs after a warm-up, and half the difference is the cost.

The estimate is the probe's seconds per configuration-epoch times the planned configuration-
epochs, per kind, plus the probe's fixed cost per configuration for the single-run trainers. It
is a forecast for this machine and device, reported as such: small chunks, a loaded machine or a
very uneven grid move it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from bnc_deploy.errors import ConfigError
from bnc_deploy.sweep.tasks import run_chunk

#: Configurations of one batched BN probe on the CPU (its cost per configuration-epoch is flat
#: beyond a cache block; on a GPU the chunk is probed whole).
BNC_PROBE_CONFIGS = 64
#: Configurations probed per single-run kind (spread over the plan: the budgets differ).
SINGLE_PROBE_CONFIGS = 3


@dataclass
class FamilyEstimate:
    family: str  # the kind of configuration (:func:`kind_of`)
    configurations: int
    config_epochs: int
    probed: int  # configurations in the probe
    seconds_per_config_epoch: float
    seconds_per_config: float  # fixed cost per configuration (single-run trainers)
    seconds: float  # the forecast


def planned_config_epochs(task) -> int:
    """Configuration-epochs of one chunk task, with its halving schedule."""
    epochs = [int(r["epochs"]) for r in task.records]
    if not task.halving or not task.halving.get("rungs"):
        return sum(epochs)
    rate = float(task.halving["rate"])
    rungs = list(task.halving["rungs"])
    sizes: dict = {}
    for group in task.groups:
        sizes[group] = sizes.get(group, 0) + 1
    total, end = 0, max(epochs)
    for n in sizes.values():
        alive, start = n, 0
        for rung in rungs + [end]:
            total += alive * (rung - start)
            start = rung
            alive = max(1, math.ceil(alive / rate))
    return total


def probe(tasks: list, *, device: str = "cpu") -> list[FamilyEstimate]:
    """One :class:`FamilyEstimate` per family in ``tasks`` (see the module's docstring)."""
    by_kind: dict[str, list] = {}
    for task in tasks:
        by_kind.setdefault(kind_of(task), []).append(task)
    out = []
    for kind, members in by_kind.items():
        family = members[0].family
        planned = sum(planned_config_epochs(t) for t in members)
        n_configs = sum(len(t.records) for t in members)
        if family == "bnc":
            first = members[0]
            limit = len(first.records) if device not in ("cpu", "auto") else BNC_PROBE_CONFIGS
            records = first.records[:limit]
            per_epoch = _epoch_seconds(first, records) / len(records)
            fixed = 0.0
        else:
            records = _spread([r for t in members for r in t.records], SINGLE_PROBE_CONFIGS)
            _chunk_seconds(members[0], records[:1], 1)  # warm-up (first-call costs)
            one = [_chunk_seconds(members[0], [r], 1) for r in records]
            three = [_chunk_seconds(members[0], [r], 3) for r in records]
            per_epoch = max(0.0, sum(b - a for a, b in zip(one, three)) / (2 * len(records)))
            fixed = max(0.0, sum(one) / len(records) - per_epoch)
        out.append(
            FamilyEstimate(
                family=kind,
                configurations=n_configs,
                config_epochs=planned,
                probed=len(records),
                seconds_per_config_epoch=per_epoch,
                seconds_per_config=fixed,
                seconds=per_epoch * planned + fixed * n_configs,
            )
        )
    return out


def kind_of(task) -> str:
    """What costs alike: the model, and the structure of a TAN (``"nb"``, ``"tan authors"``, ``"fc"``)."""
    first = task.records[0]
    structure = first.get("structure") if first["model"] == "tan" else None
    return first["model"] + (f" {structure}" if structure else "")


def describe(estimates: list[FamilyEstimate], device: str) -> str:
    """``"estimated 2.3 h on cpu (bnc: 64 configurations probed, 9.1 ms per configuration-epoch; …)"``."""
    total = sum(e.seconds for e in estimates)
    parts = [
        f"{e.family}: {e.config_epochs:,} configuration-epochs x "
        f"{_duration(e.seconds_per_config_epoch)} (probe of {e.probed})"
        + (f" + {_duration(e.seconds_per_config)} per configuration" if e.seconds_per_config else "")
        for e in estimates
    ]
    return f"estimated time on {device}: {_duration(total)} ({'; '.join(parts)})"


def _spread(records: list, k: int) -> list:
    if len(records) <= k:
        return list(records)
    return [records[round(i * (len(records) - 1) / (k - 1))] for i in range(k)]


def _probe_task(task, records: list, epochs: int):
    records = [{**r, "epochs": epochs} for r in records]
    return replace(
        task,
        records=records,
        groups=task.groups[: len(records)] if task.family == "bnc" else ["probe"] * len(records),
        checkpoints=[epochs],
        halving=None,
        keep="none",
        thresholds={},
    )


def _chunk_seconds(task, records: list, epochs: int) -> float:
    outcome = run_chunk(_probe_task(task, records, epochs))
    failed = [row for row in outcome.rows if row["status"] == "failed"]
    if failed:
        raise ConfigError(f"the time probe failed on configuration {failed[0]['id']}: {failed[0]['error']}")
    return sum(row["seconds"] for row in outcome.rows)


def _epoch_seconds(task, records: list) -> float:
    """Seconds of the second epoch of a 2-epoch batched run (the first warms up)."""
    stamps = []
    run_chunk(_probe_task(task, records, 2), on_epoch=lambda epoch, active: stamps.append(time.perf_counter()))
    return stamps[-1] - stamps[-2] if len(stamps) >= 2 else float("nan")


def _duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "unknown"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
