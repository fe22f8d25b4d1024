"""Scaling ``bnc-fit``'s search to a time budget with the sweep's probe (``sweep.estimate``).

Contract
--------
* The forecast is the sweep's: :func:`bnc_deploy.sweep.estimate.probe` times a short run of each
  kind of configuration on this machine and device, times the planned configuration-epochs.
  Training may take :data:`TRAIN_SHARE` of the time budget; the rest is left for exporting and
  measuring the candidates.
* When the forecast is over, the search narrows in this order, each step only while still over:
  one hybrid-loss draw (the trainer's default), one learning rate (the first), then fewer epochs
  (proportionally, never below :data:`MIN_EPOCHS`). The bit widths and families are never cut:
  they are the size curve the budget selects on. The forecast scales linearly in configurations
  and epochs (the batched trainer's cost per configuration-epoch is flat).
* The choice is stored in ``out_dir/plan.json`` with what it was made from (search space, data,
  seed, device, time budget); the same command reuses it without probing, so a rerun plans the
  same grid and resumes its sweep instead of starting another.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from bnc_deploy.fileio import atomic_write_bytes
from bnc_deploy.fit.space import SearchSpace, SpaceSettings, cell_records, hybrid_draws, search_spec

#: Share of the time budget the training may take.
TRAIN_SHARE = 0.8
#: Fewest epochs a time budget cuts a configuration to.
MIN_EPOCHS = 10
PLAN_FILE = "plan.json"


def forecast_seconds(space: SearchSpace, settings: SpaceSettings, data_spec: str, seed: int, device: str) -> float:
    """Seconds the sweep of ``space`` is forecast to train, probed on ``device``."""
    from bnc_deploy.sweep.estimate import probe
    from bnc_deploy.sweep.runner import SweepOptions, plan_chunks, records_of

    records = records_of(search_spec(space, settings, data_spec, seed))
    tasks = plan_chunks(records, SweepOptions(directory=Path("."), device=device))
    return sum(e.seconds for e in probe(tasks, device=device))


def n_configurations(space: SearchSpace, settings: SpaceSettings, seed: int) -> int:
    """Configurations the kept cells of ``space`` have under ``settings``."""
    draws = hybrid_draws(settings.draws, seed)
    return sum(len(cell_records(cell, settings, draws)) for cell in space.kept)


def narrow(space: SearchSpace, settings: SpaceSettings, seed: int, seconds: float, allowed: float) -> SpaceSettings:
    """``settings`` narrowed (see the module docstring) until the scaled forecast is within ``allowed``."""
    per_config_epoch = seconds / max(1, n_configurations(space, settings, seed) * settings.epochs)

    def cost(s: SpaceSettings) -> float:
        return per_config_epoch * n_configurations(space, s, seed) * s.epochs

    for change in ({"draws": 1}, {"lrs": settings.lrs[:1]}):
        if cost(settings) <= allowed:
            return settings
        settings = dataclasses.replace(settings, **change)
    if cost(settings) > allowed:
        epochs = int(settings.epochs * allowed / cost(settings))
        settings = dataclasses.replace(settings, epochs=max(MIN_EPOCHS, min(settings.epochs, epochs)))
    return settings


def fit_time_budget(
    space: SearchSpace,
    settings: SpaceSettings,
    data_spec: str,
    seed: int,
    time_budget: float,
    *,
    device: str = "cpu",
    out_dir: str | Path | None = None,
) -> SpaceSettings:
    """Settings whose forecast training time fits ``TRAIN_SHARE x time_budget`` seconds (reused from
    ``out_dir/plan.json`` when it was planned from the same inputs)."""
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
    seconds = forecast_seconds(space, settings, data_spec, seed, device)
    chosen = narrow(space, settings, seed, seconds, TRAIN_SHARE * time_budget)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"key": key, "forecast_seconds": seconds, "settings": dataclasses.asdict(chosen)}
        atomic_write_bytes(path, (json.dumps(record, indent=2) + "\n").encode())
    return chosen
