"""How long a sweep will take, said before it starts: its configuration-epochs and a timed probe.

* :func:`planned_config_epochs`: the configuration-epochs a plan trains, exactly as the chunks
  will run them: every configuration's epochs, or with successive halving the survivors of each
  selection group between rungs (``ceil(n / rate**k)`` per group and chunk, as ``tasks`` keeps
  them). An upper bound only in that a resumed sweep skips what is done.
* :func:`measure_rates`: times a few configurations of each kind (model, and structure of a TAN)
  on the chosen device, without data loading, model building and evaluation, and returns its
  :class:`Rates`. The batched trainers run a chunk of up to :data:`BNC_PROBE_CONFIGS`
  configurations (on a GPU the first chunk whole, as it will run) and one of an eighth of that
  (:data:`SMALL_PROBE_SHARE`) for 3 epochs each; the second epochs (after the first, which warms
  up, and before the last, which also evaluates) give a line: a chunk's epoch costs a part that
  does not grow with its configurations (data passes, per-step overhead) plus a part per
  configuration. Evaluation is left out: a sweep evaluates at its checkpoints only. DNN programs
  differ in size (the budgets), so up to :data:`SINGLE_PROBE_CONFIGS` of them, spread over the
  plan, are probed so and averaged; a DNN chunk's programs (:func:`dnn_bucket`) run back to back,
  each stepping its own epochs.
* :func:`price`: the forecast of any plan of the same kinds from those rates, without running
  anything: per kind, seconds per configuration-epoch times the planned configuration-epochs, plus
  the chunk part times the epochs each batched chunk runs (its longest configuration's: a halved
  chunk keeps stepping its survivors), plus the fixed cost per configuration. So a plan narrowed
  after the probe (``bnc-fit``'s time budget) is priced as it will run.
* :func:`probe` is both on one plan.

It is a forecast for this machine and device, reported as such: a loaded machine or a very uneven
grid move it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from bnc_deploy.sweep.tasks import run_chunk

#: Configurations of one batched BN probe on the CPU (its cost per configuration-epoch is flat
#: beyond a cache block; on a GPU the chunk is probed whole).
BNC_PROBE_CONFIGS = 64
#: The second batched probe's configurations, as a share of the first's (at least one).
SMALL_PROBE_SHARE = 1 / 8
#: DNN programs probed per kind (spread over the plan: the budgets differ).
SINGLE_PROBE_CONFIGS = 3
#: Epochs of each probe; the second is timed.
PROBE_EPOCHS = 3


@dataclass(frozen=True)
class Rates:
    """Measured costs of one kind of configuration (:func:`measure_rates`)."""

    seconds_per_config_epoch: float
    seconds_per_chunk_epoch: float  # batched: the part of a chunk's epoch its configurations share
    seconds_per_config: float  # fixed cost per configuration (0: every trainer is batched)
    probed: int  # configurations in the (largest) probe


@dataclass
class FamilyEstimate:
    family: str  # the kind of configuration (:func:`kind_of`)
    configurations: int
    config_epochs: int
    probed: int  # configurations in the probe
    seconds_per_config_epoch: float
    seconds_per_config: float  # fixed cost per configuration (0: every trainer is batched)
    seconds: float  # the forecast
    chunk_epochs: int = 0  # epochs the batched chunks run (each chunk its longest configuration's)
    seconds_per_chunk_epoch: float = 0.0  # the part of a batched chunk's epoch its configurations share


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


#: Record keys that decide a DNN's architecture (its widths), and so its batched program on the
#: CPU; on a GPU widths mix (``train.dnn_batched``'s ``mix_widths``) and only the shape keys split.
DNN_WIDTH_KEYS = ("weight_bits", "hidden", "match_bits", "match_ops")
DNN_SHAPE_KEYS = ("model", "layers", "batch_norm", "activation", "one_hot", "image_shape", "pixel_order")
DNN_STEP_KEYS = ("epochs", "batch_size")


def dnn_bucket(record: dict, device: str) -> tuple:
    """The batched program a DNN record trains in (``train.dnn_batched.bucket_key``, from the record)."""
    keys = DNN_SHAPE_KEYS + DNN_STEP_KEYS + (() if _gpu(device) else DNN_WIDTH_KEYS)
    return tuple(str(record.get(k)) for k in keys)


def _gpu(device: str) -> bool:
    return str(device).startswith("cuda")


def chunk_epochs(task) -> int:
    """Epochs a batched chunk steps: its longest configuration's (DNNs: summed over the chunk's
    programs, which run back to back)."""
    if task.family in ("bnc", "learn"):
        return max(int(r["epochs"]) for r in task.records)
    if task.family == "dnn":
        buckets: dict[tuple, int] = {}
        for r in task.records:
            key = dnn_bucket(r, task.device)
            buckets[key] = max(buckets.get(key, 0), int(r["epochs"]))
        return sum(buckets.values())
    return 0


def measure_rates(tasks: list, *, device: str = "cpu") -> dict[str, Rates]:
    """The :class:`Rates` of each kind of configuration in ``tasks`` (see the module's docstring)."""
    rates = {}
    for kind, members in _by_kind(tasks).items():
        if members[0].family == "dnn":
            rates[kind] = _dnn_rates(members, device)
        else:
            rates[kind] = _batched_rates(members[0], members[0].records, device)
    return rates


def _batched_rates(task, records: list, device: str) -> Rates:
    """Two probes of one batched program (``records``: one chunk's worth), :data:`PROBE_EPOCHS` each."""
    limit = len(records) if _gpu(device) else BNC_PROBE_CONFIGS
    large = records[:limit]
    small = large[: max(1, round(len(large) * SMALL_PROBE_SHARE))]
    t_large = _epoch_seconds(task, large)
    if len(small) == len(large):
        return Rates(t_large / len(large), 0.0, 0.0, len(large))
    t_small = _epoch_seconds(task, small)
    per_config = max(0.0, (t_large - t_small) / (len(large) - len(small)))
    per_chunk = max(0.0, t_large - per_config * len(large))
    return Rates(per_config, per_chunk, 0.0, len(large))


def _dnn_rates(members: list, device: str) -> Rates:
    """DNN programs differ in size (the budgets): probe up to :data:`SINGLE_PROBE_CONFIGS` of them,
    spread over the plan, and average their rates."""
    programs: dict[tuple, tuple] = {}
    for task in members:
        for r in task.records:
            programs.setdefault(dnn_bucket(r, task.device), (task, []))[1].append(r)
    probed = [
        _batched_rates(task, records, device)
        for task, records in _spread(list(programs.values()), SINGLE_PROBE_CONFIGS)
    ]
    return Rates(
        sum(r.seconds_per_config_epoch for r in probed) / len(probed),
        sum(r.seconds_per_chunk_epoch for r in probed) / len(probed),
        0.0,
        max(r.probed for r in probed),
    )


def price(tasks: list, rates: dict[str, Rates]) -> list[FamilyEstimate]:
    """One :class:`FamilyEstimate` per kind in ``tasks``, priced with ``rates`` (a kind without
    rates raises ``KeyError``: probe the plan it comes from)."""
    out = []
    for kind, members in _by_kind(tasks).items():
        rate = rates[kind]
        planned = sum(planned_config_epochs(t) for t in members)
        n_configs = sum(len(t.records) for t in members)
        steps = sum(chunk_epochs(t) for t in members)
        out.append(
            FamilyEstimate(
                family=kind,
                configurations=n_configs,
                config_epochs=planned,
                probed=rate.probed,
                seconds_per_config_epoch=rate.seconds_per_config_epoch,
                seconds_per_config=rate.seconds_per_config,
                seconds=rate.seconds_per_config_epoch * planned
                + rate.seconds_per_chunk_epoch * steps
                + rate.seconds_per_config * n_configs,
                chunk_epochs=steps,
                seconds_per_chunk_epoch=rate.seconds_per_chunk_epoch,
            )
        )
    return out


def probe(tasks: list, *, device: str = "cpu") -> list[FamilyEstimate]:
    """:func:`price` of ``tasks`` with the :func:`measure_rates` of ``tasks``."""
    return price(tasks, measure_rates(tasks, device=device))


def _by_kind(tasks: list) -> dict[str, list]:
    by_kind: dict[str, list] = {}
    for task in tasks:
        by_kind.setdefault(kind_of(task), []).append(task)
    return by_kind


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
        + (
            f" + {e.chunk_epochs:,} chunk-epochs x {_duration(e.seconds_per_chunk_epoch)}"
            if e.seconds_per_chunk_epoch
            else ""
        )
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
        groups=["probe"] * len(records),
        checkpoints=[epochs],
        halving=None,
        keep="none",
        thresholds={},
    )


def _epoch_seconds(task, records: list) -> float:
    """Seconds of the second epoch of a :data:`PROBE_EPOCHS`-epoch batched run: the first warms up
    (compiles, captures, allocates) and the last evaluates."""
    stamps = []
    run_chunk(
        _probe_task(task, records, PROBE_EPOCHS), on_epoch=lambda epoch, active: stamps.append(time.perf_counter())
    )
    return stamps[1] - stamps[0] if len(stamps) == PROBE_EPOCHS else float("nan")


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
