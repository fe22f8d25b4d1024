"""Scaling ``bnc-fit``'s search to a time budget with the sweep's probe (``sweep.estimate``).

Contract
--------
* The time budget is the whole search's wall time: loading and planning, the probe, training,
  exporting and measuring. Its default is :data:`DEFAULT_TIME_BUDGET`.
* The forecast is the sweep's: :func:`bnc_deploy.sweep.estimate.measure_rates` times a short run
  of each kind of configuration of the wide grid on this machine and device, and
  :func:`bnc_deploy.sweep.estimate.price` prices any narrowed grid from those rates as its chunks
  will run (:func:`forecast`): configuration-epochs, plus the part of each batched chunk's epoch
  that does not shrink with fewer configurations.
  Training may take what is left of the time budget after the time already spent (``spent``:
  loading, planning), the probe's own time and the **measurement allowance**
  (:func:`measure_allowance`: the estimated seconds of one export and measurement on the target,
  :func:`seconds_per_measurement`, times the measurements the kept cells can need, at most
  :data:`MAX_PLANNED_MEASUREMENTS`), but never less than :data:`MIN_TRAIN_SHARE` of the budget.
* When the forecast is over, the search narrows in this order, each step only while still over:
  a third of the hybrid-loss draws, one learning rate (the first), fewer epochs down to
  :data:`DRAW_EPOCHS`, one draw (the trainer's default), then fewer epochs (the most that fits,
  never below :data:`MIN_EPOCHS`). Draws go last but one because they decide more of a quantized
  model's error than epochs do (:data:`DRAW_EPOCHS`), and with successive halving a draw costs a
  few epochs of a full run. The bit widths and families are never cut:
  they are the size curve the budget selects on.
* When the forecast leaves room (under :data:`WIDEN_MARGIN` of what training may take), the
  epochs grow to the most the margin prices, up to ``settings.max_epochs`` (the paper's 500; the epochs given on
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
from collections.abc import Callable
from pathlib import Path

from bnc_deploy.fileio import atomic_write_bytes
from bnc_deploy.fit.space import (
    SearchSpace,
    SpaceSettings,
    hybrid_draws,
    model_kind,
    records_of_cell,
    search_specs,
    variants_for,
)

#: What a plan costs: settings -> forecast seconds of training.
Cost = Callable[[SpaceSettings], float]

#: The default time budget (seconds) of a whole search: 12 minutes.
DEFAULT_TIME_BUDGET = 12 * 60.0
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
#: Epochs a narrowed plan keeps its hybrid-loss draws down to. On letter (Chow-Liu TAN, 4 bits, B_I 3,
#: lr 3e-2, ML start) the best of the authors' first 4 draws reaches 11.1 % test error in 100 epochs,
#: the trainer's default draw 14-16 % (``bnc-sweep --data letter --model tan --structure chow-liu
#: --bits 4 --int-bits 1,2,3 --lr 3e-2,3e-3 --draws icpr2020:4 --epochs 100 --init ml``).
DRAW_EPOCHS = 50
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


def planned_tasks(space: SearchSpace, settings: SpaceSettings, data_spec: str, seed: int, device: str) -> list:
    """The sweep's chunk tasks for the kept cells of ``space`` under ``settings`` (nothing runs)."""
    from bnc_deploy.sweep.runner import SweepOptions, plan_chunks, records_of

    draws = hybrid_draws(settings.draws, seed)
    records = tuple(r for cell in space.kept for r in records_of_cell(cell, settings, draws))
    planned = dataclasses.replace(space, records=records)
    tasks = []
    for spec in search_specs(planned, settings, data_spec, seed):
        options = SweepOptions(directory=Path("."), device=device, halving=settings.halving)
        tasks += plan_chunks(records_of(spec), options)
    return tasks


@dataclasses.dataclass(frozen=True)
class Forecast:
    """What any settings of one search space cost, priced from the rates probed on its wide grid."""

    space: SearchSpace
    data_spec: str
    seed: int
    device: str
    rates: dict  # kind -> bnc_deploy.sweep.estimate.Rates

    def __call__(self, settings: SpaceSettings) -> float:
        from bnc_deploy.sweep.estimate import price

        tasks = planned_tasks(self.space, settings, self.data_spec, self.seed, self.device)
        return sum(e.seconds for e in price(tasks, self.rates))


def forecast(space: SearchSpace, settings: SpaceSettings, data_spec: str, seed: int, device: str) -> Forecast:
    """Probe ``space`` under ``settings`` on ``device`` once; the :class:`Forecast` of its settings."""
    from bnc_deploy.sweep.estimate import measure_rates

    rates = measure_rates(planned_tasks(space, settings, data_spec, seed, device), device=device)
    return Forecast(space, data_spec, seed, device, rates)


def n_configurations(space: SearchSpace, settings: SpaceSettings, seed: int) -> int:
    """Configurations the kept cells of ``space`` have under ``settings``."""
    draws = hybrid_draws(settings.draws, seed)
    return sum(len(records_of_cell(cell, settings, draws)) for cell in space.kept)


def narrow(settings: SpaceSettings, cost: Cost, allowed: float) -> SpaceSettings:
    """``settings`` narrowed (see the module docstring) until ``cost`` is within ``allowed``."""

    def fewer_epochs(s: SpaceSettings) -> SpaceSettings:
        return dataclasses.replace(s, epochs=most_epochs(s, cost, allowed, min(s.epochs, DRAW_EPOCHS), s.epochs))

    steps: tuple[Callable[[SpaceSettings], SpaceSettings], ...] = (
        lambda s: dataclasses.replace(s, draws=max(1, s.draws // 3)),
        lambda s: dataclasses.replace(s, lrs=s.lrs[:1]),
        fewer_epochs,
        lambda s: dataclasses.replace(s, draws=1),
    )
    for step in steps:
        if cost(settings) <= allowed:
            return widen(settings, cost, allowed)
        settings = step(settings)
    if cost(settings) > allowed:
        return dataclasses.replace(settings, epochs=most_epochs(settings, cost, allowed, MIN_EPOCHS, settings.epochs))
    return widen(settings, cost, allowed)


def widen(settings: SpaceSettings, cost: Cost, allowed: float) -> SpaceSettings:
    """More epochs (up to ``settings.max_epochs``) while ``cost`` stays under
    :data:`WIDEN_MARGIN` of ``allowed``; ``settings`` unchanged when there is no such room."""
    if settings.max_epochs <= settings.epochs or cost(settings) > WIDEN_MARGIN * allowed:
        return settings
    epochs = most_epochs(settings, cost, WIDEN_MARGIN * allowed, settings.epochs, settings.max_epochs)
    return dataclasses.replace(settings, epochs=epochs)


def most_epochs(settings: SpaceSettings, cost: Cost, allowed: float, low: int, high: int) -> int:
    """The most epochs in ``[low, high]`` whose ``cost`` is within ``allowed`` (``low`` when none
    is): a bisection, as a halved plan's cost is monotone but not linear in its epochs."""

    def fits(epochs: int) -> bool:
        return cost(dataclasses.replace(settings, epochs=epochs)) <= allowed

    if fits(high):
        return high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


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
    cost = forecast(space, settings, data_spec, seed, device)
    probe_seconds = time.perf_counter() - started
    allowed = max(MIN_TRAIN_SHARE * time_budget, time_budget - reserve - probe_seconds)
    chosen = narrow(settings, cost, allowed)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "key": key,
            "forecast_seconds": cost(settings),
            "probe_seconds": probe_seconds,
            "reserve_seconds": reserve,
            "training_seconds_allowed": allowed,
            "planned_seconds": cost(chosen),
            "rates": {kind: dataclasses.asdict(rate) for kind, rate in cost.rates.items()},
            "settings": dataclasses.asdict(chosen),
        }
        atomic_write_bytes(path, (json.dumps(record, indent=2) + "\n").encode())
    return chosen
