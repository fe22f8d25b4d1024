"""Scaling ``bnc-fit``'s search to a time budget with the sweep's probe (``sweep.estimate``).

Contract
--------
* The time budget is the whole search's wall time: loading and planning, the probe, training,
  exporting and measuring. Its default is :data:`DEFAULT_TIME_BUDGET`.
* The forecast is the sweep's: :func:`bnc_deploy.sweep.estimate.probe` times a short run of each
  kind of configuration on this machine and device, times the planned configuration-epochs.
  Training may take what is left of the time budget after the time already spent (``spent``:
  loading, planning), the probe's own time and the **measurement allowance**
  (:func:`measure_allowance`: the estimated seconds of one export and measurement on the target,
  :func:`seconds_per_measurement`, times the measurements the kept cells can need, at most
  :data:`MAX_PLANNED_MEASUREMENTS`), but never less than :data:`MIN_TRAIN_SHARE` of the budget.
* When the forecast is over, the search narrows in this order, each step only while still over:
  a third of the hybrid-loss draws, one draw (the trainer's default), one learning rate (the first), then fewer epochs
  (proportionally, never below :data:`MIN_EPOCHS`). The bit widths and families are never cut:
  they are the size curve the budget selects on. The forecast scales linearly in epochs and, for
  the single-run trainers, in configurations; a batched BN chunk's epoch has a part that does not
  shrink with fewer configurations (:data:`BATCH_FIXED_SHARE`, :func:`scaled_forecast`).
* When the forecast leaves room (under :data:`WIDEN_MARGIN` of what training may take), the
  epochs grow in proportion, up to ``settings.max_epochs`` (the paper's 500; the epochs given on
  the command line are kept as they are): a longer training of the same configurations is what
  closes most of the gap to the paper's fronts at a fixed size.
* The choice is stored in ``out_dir/plan.json`` with what it was made from (search space, data,
  seed, device, time budget); the same command reuses it without probing, so a rerun plans the
  same grid and resumes its sweep instead of starting another.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from bnc_deploy.fileio import atomic_write_bytes
from bnc_deploy.fit.space import (
    LEARN_FAMILY,
    SearchSpace,
    SpaceSettings,
    hybrid_draws,
    model_kind,
    records_of_cell,
    search_specs,
    variants_for,
)

#: The default time budget (seconds) of a whole search: 12 minutes.
DEFAULT_TIME_BUDGET = 12 * 60.0
#: Share of a batched BN chunk's epoch that does not shrink with its configurations (data passes,
#: per-step overhead). On letter (NB, 2 CPU cores) an epoch costs about 4 s + 0.3 s per
#: configuration: 36 configurations 0.41 s each, 9 about 0.75 s each.
BATCH_FIXED_SHARE = 0.3
#: Share of the time budget the training may take at least, whatever the allowances.
MIN_TRAIN_SHARE = 0.25
#: Estimated seconds of one export + measurement, by target name prefix (cross-compiling and
#: emulating a Cortex-M board, finding a TFLM arena, converting TFLite), else :data:`DEFAULT_MEASURE_SECONDS`.
MEASURE_SECONDS = {"cortex-m": 5.0, "tflm": 8.0, "edgetpu": 6.0, "web": 6.0, "android": 6.0, "aarch64": 6.0}
DEFAULT_MEASURE_SECONDS = 2.0
#: Measurements the allowance plans for at most (the first candidate that fits ends the search).
MAX_PLANNED_MEASUREMENTS = 12
#: Fewest epochs a time budget cuts a configuration to.
MIN_EPOCHS = 10
#: Share of the allowed training time a widened plan aims at (forecasts err on the short side).
WIDEN_MARGIN = 0.7
PLAN_FILE = "plan.json"


def seconds_per_measurement(target_name: str) -> float:
    """Estimated seconds of one export + measurement on ``target_name`` (:data:`MEASURE_SECONDS`)."""
    for prefix, seconds in MEASURE_SECONDS.items():
        if target_name.startswith(prefix):
            return seconds
    return DEFAULT_MEASURE_SECONDS


def measure_allowance(space: SearchSpace, target) -> float:
    """Seconds set aside for measuring: one per kept cell and export variant, at most
    :data:`MAX_PLANNED_MEASUREMENTS`, times :func:`seconds_per_measurement`."""
    n = sum(len(variants_for(target, model_kind(c.family))) for c in space.kept)
    return seconds_per_measurement(target.name) * min(n, MAX_PLANNED_MEASUREMENTS)


def forecast_seconds(space: SearchSpace, settings: SpaceSettings, data_spec: str, seed: int, device: str) -> float:
    """Seconds the sweeps of ``space`` are forecast to train, probed on ``device``."""
    from bnc_deploy.sweep.estimate import probe
    from bnc_deploy.sweep.runner import SweepOptions, plan_chunks, records_of

    total = 0.0
    for spec in search_specs(space, settings, data_spec, seed):
        options = SweepOptions(directory=Path("."), device=device, halving=settings.halving)
        tasks = plan_chunks(records_of(spec), options)
        total += sum(e.seconds for e in probe(tasks, device=device))
    return total


def n_configurations(space: SearchSpace, settings: SpaceSettings, seed: int) -> int:
    """Configurations the kept cells of ``space`` have under ``settings``."""
    draws = hybrid_draws(settings.draws, seed)
    return sum(len(records_of_cell(cell, settings, draws)) for cell in space.kept)


def scaled_forecast(
    space: SearchSpace, base: SpaceSettings, seed: int, seconds: float, settings: SpaceSettings
) -> float:
    """The forecast ``seconds`` of ``base`` scaled to ``settings``: linear in epochs; in
    configurations linear but for :data:`BATCH_FIXED_SHARE` when BN cells train batched."""
    batched = any(model_kind(c.family) == "bnc" and c.family != LEARN_FAMILY for c in space.kept)
    share = BATCH_FIXED_SHARE if batched else 0.0
    configs = n_configurations(space, settings, seed) / max(1, n_configurations(space, base, seed))
    return seconds * settings.epochs / base.epochs * (share + (1 - share) * configs)


def narrow(space: SearchSpace, settings: SpaceSettings, seed: int, seconds: float, allowed: float) -> SpaceSettings:
    """``settings`` narrowed (see the module docstring) until the scaled forecast is within ``allowed``."""
    base = settings

    def cost(s: SpaceSettings) -> float:
        return scaled_forecast(space, base, seed, seconds, s)

    for change in ({"draws": max(1, settings.draws // 3)}, {"draws": 1}, {"lrs": settings.lrs[:1]}):
        if cost(settings) <= allowed:
            return widen(settings, cost(settings), allowed)
        settings = dataclasses.replace(settings, **change)
    if cost(settings) > allowed:
        epochs = int(settings.epochs * allowed / cost(settings))
        settings = dataclasses.replace(settings, epochs=max(MIN_EPOCHS, min(settings.epochs, epochs)))
    return widen(settings, cost(settings), allowed)


def widen(settings: SpaceSettings, forecast: float, allowed: float) -> SpaceSettings:
    """More epochs (up to ``settings.max_epochs``) while the forecast stays under
    :data:`WIDEN_MARGIN` of ``allowed``; ``settings`` unchanged when there is no such room."""
    room = WIDEN_MARGIN * allowed / max(forecast, 1e-9)
    epochs = min(settings.max_epochs, int(settings.epochs * room))
    return dataclasses.replace(settings, epochs=epochs) if epochs > settings.epochs else settings


def fit_time_budget(
    space: SearchSpace,
    settings: SpaceSettings,
    data_spec: str,
    seed: int,
    time_budget: float,
    *,
    device: str = "cpu",
    out_dir: str | Path | None = None,
    reserve: float = 0.0,
) -> SpaceSettings:
    """Settings whose forecast training time fits ``time_budget`` seconds less ``reserve`` (the
    time spent so far and the measurement allowance) and the probe's time, at least
    ``MIN_TRAIN_SHARE x time_budget`` (reused from ``out_dir/plan.json`` when it was planned from
    the same inputs)."""
    key = {
        "cells": [c.label for c in space.kept],
        "settings": json.loads(json.dumps(dataclasses.asdict(settings))),
        "data": data_spec,
        "seed": seed,
        "device": device,
        "time_budget": time_budget,
    }
    path = None if out_dir is None else Path(out_dir) / PLAN_FILE
    if path is not None and path.is_file():
        try:
            stored = json.loads(path.read_text())
            if stored.get("key") == key:
                values = stored["settings"].items()
                return SpaceSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in values})
        except (OSError, ValueError, TypeError, KeyError):
            pass  # an unreadable plan is planned again
    started = time.perf_counter()
    seconds = forecast_seconds(space, settings, data_spec, seed, device)
    probe_seconds = time.perf_counter() - started
    allowed = max(MIN_TRAIN_SHARE * time_budget, time_budget - reserve - probe_seconds)
    chosen = narrow(space, settings, seed, seconds, allowed)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "key": key,
            "forecast_seconds": seconds,
            "probe_seconds": probe_seconds,
            "reserve_seconds": reserve,
            "training_seconds_allowed": allowed,
            "planned_seconds": scaled_forecast(space, settings, seed, seconds, chosen),
            "settings": dataclasses.asdict(chosen),
        }
        atomic_write_bytes(path, (json.dumps(record, indent=2) + "\n").encode())
    return chosen
