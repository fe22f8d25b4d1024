"""``fit_to_budget``: from a dataset, a target and a budget to the most accurate model measured to fit.

Contract
--------
1. The budget is checked against the target (:meth:`~bnc_deploy.targets.base.Target.check_budget`:
   an axis the target cannot measure is refused before anything runs).
2. The search space (:mod:`bnc_deploy.fit.space`) is planned on the training split: BN cells per
   bit width, DNN cells per weight bit width sized to the budget; cells whose lower bounds exceed
   the budget under every export variant are pruned, cells of a model kind the target does not
   take are refused: neither is **ever trained**. Nothing left:
   :class:`~bnc_deploy.fit.result.InfeasibleBudget` naming the smallest lower bound.
3. With a time budget (default :data:`~bnc_deploy.fit.plan.DEFAULT_TIME_BUDGET`), the search
   space is narrowed to the sweep's forecast (:mod:`bnc_deploy.fit.plan`): the budget covers the
   whole search, so the time spent planning, the probe and an allowance for the measurements are
   deducted before the training is fitted in.
4. The kept configurations train through the sweep engine (``sweep.runner.run_sweep``: batched
   for BN models, one after another for DNNs, resumable, ``device``/``backend``), one sweep per
   record shape (BN, DNN) in ``out_dir/sweep/<id>``, where ``<id>`` hashes the configurations and
   the data settings: the same command resumes (trains nothing twice), another search space gets
   its own directory. Selection is on the validation split; the test error is reported, never
   used to choose.
5. Candidates (the best configuration of each cell) are taken in order of validation error (ties:
   smaller model first), exported for each variant of the target that differs for their model
   kind and measured (:meth:`~bnc_deploy.targets.base.Target.measure`); the first measurement that
   :meth:`~bnc_deploy.targets.base.TargetMeasurement.fits` is chosen. **What is reported as
   fitting has been measured to fit**: a candidate one unit over any limit is passed over.
6. ``out_dir`` gets ``model.bnc``, the deployable file(s) of the chosen variant, ``report.json``,
   ``report.md`` (and ``pareto.png``, ``pareto.svg`` with matplotlib), also when nothing fits
   (then without the model files, and :class:`InfeasibleBudget` is raised after the reports are
   written).
7. With ``progress``, each stage and each measurement is a line on stderr
   (:mod:`bnc_deploy.fit.progress`), the sweep's bar between them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bnc_deploy.artifacts import load_artifact, save_artifact
from bnc_deploy.datasets import load_dataset
from bnc_deploy.errors import BncDeployError, ConfigError
from bnc_deploy.fit.dnn_space import image_shape_of
from bnc_deploy.fit.latency_probe import LatencyProbe, needs_probe, probe_latency, probe_text
from bnc_deploy.fit.plan import DEFAULT_TIME_BUDGET, PLAN_FILE
from bnc_deploy.fit.progress import Progress, describe_fit
from bnc_deploy.fit.result import Attempt, Candidate, FitResult, InfeasibleBudget
from bnc_deploy.fit.size_probe import SizeModel, probe_sizes
from bnc_deploy.fit.size_probe import needs_probe as needs_size_probe
from bnc_deploy.fit.size_probe import probe_text as size_probe_text
from bnc_deploy.fit.space import BN_FAMILIES, SearchSpace, SpaceSettings, check_families, plan_space, variants_for
from bnc_deploy.fit.sweeps import SweepPlace, ranked_candidates, run_search_sweeps
from bnc_deploy.targets.base import Target, get_target
from bnc_deploy.targets.budget import AXES, Budget

#: Axes measured on every candidate besides the budget's (cheap: no emulator, no timing loop).
CHEAP_AXES = ("flash", "ops", "bits", "file_bytes")


def fit_to_budget(
    data: str | os.PathLike[str],
    target: str | Target,
    *,
    budget: Budget | None = None,
    out_dir: str | os.PathLike[str],
    families: Iterable[str] | None = None,
    seed: int = 0,
    time_budget: float | None = DEFAULT_TIME_BUDGET,
    settings: SpaceSettings | None = None,
    device: str = "cpu",
    backend: str = "local",
    progress: bool = False,
    **budget_flags: Any,
) -> FitResult:
    """The most accurate model (on the validation split) that ``target`` measured within ``budget``.

    ``budget`` or ``budget_flags`` (``max_flash="2KiB"``, ...: :meth:`Budget.from_flags`), not both;
    ``families``: ``nb``, ``tan``, ``fc``, ``cnn`` (default: ``nb`` and ``tan``, plus ``fc`` and, on
    image data, ``cnn`` when the target takes DNN models; :func:`~bnc_deploy.fit.space.check_families`);
    ``settings``: the search's width (epochs, bit widths, draws); ``time_budget`` (seconds, default
    :data:`~bnc_deploy.fit.plan.DEFAULT_TIME_BUDGET` = 12 minutes; None: no limit): the wall time
    of the whole search, to which ``settings`` is scaled down from the sweep's probe after
    deducting the time spent and an allowance for the measurements
    (:func:`bnc_deploy.fit.plan.fit_time_budget`); ``progress``: a line per stage and per measured
    candidate on stderr (:class:`~bnc_deploy.fit.progress.Progress`) and the sweep's progress bar.
    See the module docstring for the steps. Raises ConfigError for a bad budget, target or family;
    :class:`InfeasibleBudget` (a ConfigError) when nothing fits, after writing the reports."""
    started = time.perf_counter()
    say = Progress(progress)
    target = get_target(target) if isinstance(target, str) else target
    budget = resolve_budget(budget, budget_flags)
    target.check_budget(budget)
    settings = settings or SpaceSettings()
    data_spec = data_spec_of(data)
    dataset = load_dataset(data_spec, seed=seed, validation_fraction=settings.validation)
    if families is None and device not in ("cpu", "auto"):
        families = BN_FAMILIES  # the DNN trainer runs on the CPU only
    chosen_families = check_families(families, target, image_shape_of(dataset) is not None)
    say.line(f"{data_spec} on {target.name}, budget {budget_text(budget)}; families {', '.join(chosen_families)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    search = _Search(dataset, data_spec, target, budget, chosen_families, seed, out, device, backend, say)
    space, settings, probe, sizes = search.plan(settings, time_budget, started)
    say.line(space_text(space, settings))
    base = {
        "data": data_spec,
        "target": target.name,
        "budget": budget,
        "cells": tuple(c.to_dict() for c in space.cells),
        "out_dir": str(out),
        "settings": {**dataclasses.asdict(settings), "seed": seed, "families": list(chosen_families)},
        "latency_probe": probe.to_dict() if probe.latencies else None,
        "size_probe": sizes.to_dict() if sizes.lines else None,
    }
    if not space.records:
        message = pruned_message(space, budget, target)
        raise InfeasibleBudget(message, _finish(base, out, target, started, message=message))
    sweep_dirs, trained, skipped = run_search_sweeps(space, settings, data_spec, seed, out, device, backend, progress)
    candidates = ranked_candidates(sweep_dirs)
    say.line(f"measuring {len(candidates)} candidates on {target.name}, best validation error first")
    attempts = measure_in_order(candidates, target, budget, out / "measure", on_attempt=say.measured)
    chosen = attempts[-1] if attempts and attempts[-1].fits else None
    message = "" if chosen else measured_message(attempts, budget, target, space)
    dirs = tuple(str(d) for d in sweep_dirs)
    result = _finish(
        {**base, "sweep_dir": dirs[0], "sweep_dirs": dirs, "trained": trained, "skipped": skipped},
        out,
        target,
        started,
        chosen=chosen,
        attempts=tuple(attempts),
        candidates=tuple(candidates),
        message=message,
    )
    say.line(f"done in {result.seconds:.1f} s: " + (describe_fit(chosen, budget) if chosen else "nothing fits"))
    if chosen is None:
        raise InfeasibleBudget(message, result)
    return result


@dataclasses.dataclass(frozen=True)
class _Search:
    """What a search is planned from: the data, the target and its budget, the families, where."""

    dataset: Any
    data_spec: str
    target: Target
    budget: Budget
    families: tuple[str, ...]
    seed: int
    out: Path
    device: str
    backend: str
    say: Progress

    def space(self, settings: SpaceSettings, measured=None, sizes: SizeModel | None = None) -> SearchSpace:
        return plan_space(
            self.dataset, self.target, self.budget, self.families, settings, self.seed, measured, size_model=sizes
        )

    def plan(
        self, settings: SpaceSettings, time_budget: float | None, started: float
    ) -> tuple[SearchSpace, SpaceSettings, LatencyProbe, SizeModel]:
        """The search space after the size probe (DNN cells under a flash or file limit), the
        latency probe (with a latency limit) and the time budget."""
        space, probe, sizes = self.space(settings), LatencyProbe(), SizeModel()
        where = SweepPlace(self.data_spec, self.seed, self.out, self.device, self.backend)
        if needs_size_probe(self.target, self.budget, space):
            self.say.line("size budget: measuring two networks per DNN family and weight storage on the target")
            sizes = probe_sizes(space, self.target, self.budget, settings, where)
            self.say.line(size_probe_text(sizes))
            space = self.space(settings, sizes=sizes)
        if needs_probe(self.target, self.budget) and space.records:
            self.say.line("latency budget: timing a 1-epoch model of each architecture on the target")
            probe = probe_latency(space, self.target, self.budget, settings, where)
            self.say.line(probe_text(probe))
            space = self.space(settings, probe.pruned, sizes)
        if time_budget is not None and space.records:
            spent = time.perf_counter() - started
            settings = planned_settings(
                space,
                self.target,
                settings,
                self.data_spec,
                self.seed,
                time_budget,
                self.device,
                self.out,
                spent,
                self.say,
            )
            space = self.space(settings, probe.pruned, sizes)
        return space, settings, probe, sizes


def planned_settings(
    space: SearchSpace,
    target: Target,
    settings: SpaceSettings,
    data_spec: str,
    seed: int,
    time_budget: float,
    device: str,
    out: Path,
    spent: float,
    say: Progress,
) -> SpaceSettings:
    """``settings`` scaled to ``time_budget`` less the ``spent`` seconds and the measurement
    allowance (:func:`bnc_deploy.fit.plan.fit_time_budget`)."""
    from bnc_deploy.fit.plan import fit_time_budget, measure_allowance

    say.line(f"time budget {time_budget / 60:.1f} min: probing the training speed")
    reserve = spent + measure_allowance(space, target)
    chosen = fit_time_budget(space, settings, data_spec, seed, time_budget, device=device, out_dir=out, reserve=reserve)
    try:
        plan = json.loads((out / PLAN_FILE).read_text())
        say.line(
            f"plan: {plan['planned_seconds'] / 60:.1f} min of training forecast "
            f"(allowed {plan['training_seconds_allowed'] / 60:.1f} min)"
        )
    except (OSError, ValueError, KeyError):
        pass  # the line is informative only
    return chosen


def budget_text(budget: Budget) -> str:
    """``flash <= 2,048 B, ram <= 1,024 B`` (``unlimited`` without a limit)."""
    return ", ".join(f"{a} <= {_show(a, v)}" for a, v in budget.limits().items()) or "unlimited"


def space_text(space: SearchSpace, settings: SpaceSettings) -> str:
    """One line: cells kept, pruned and refused; configurations and epochs to train."""
    refused = sum(1 for c in space.cells if c.refused)
    pruned = len(space.pruned) - refused
    text = f"search space: {len(space.cells)} cells, {pruned} pruned before training"
    text += f", {refused} refused by the target" if refused else ""
    return text + f"; {len(space.records)} configurations x {settings.epochs} epochs to train"


def _finish(fields: dict, out: Path, target: Target, started: float, **more: Any) -> FitResult:
    """Publish the chosen model's files (or remove stale ones), write the reports, return the result."""
    from bnc_deploy.fit.report import write_reports

    model_path, files = publish(more.get("chosen"), out, target)
    values = {"chosen": None, "attempts": (), "candidates": (), "sweep_dir": None, "trained": 0, "skipped": 0}
    values.update(fields)
    values.update(more)
    result = FitResult(**values, model_path=model_path, files=files, seconds=time.perf_counter() - started)
    return dataclasses.replace(result, reports=tuple(write_reports(result, out)))


def resolve_budget(budget: Budget | None, flags: Mapping[str, Any]) -> Budget:
    """``budget``, or one from ``flags`` (:meth:`Budget.from_flags`); ConfigError for both or a bad flag."""
    given = {k: v for k, v in flags.items() if v is not None}
    if budget is not None and given:
        raise ConfigError(f"give budget= or budget flags ({', '.join(given)}), not both")
    if budget is not None:
        return budget
    try:
        return Budget.from_flags(given)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def data_spec_of(data: str | os.PathLike[str]) -> str:
    """The dataset as the sweep records name it: a dataset name as given, a file as an absolute path
    (the workers and a rerun from another folder load the same file)."""
    text = os.fspath(data)
    return str(Path(text).resolve()) if isinstance(data, os.PathLike) or os.path.exists(text) else text


def measured_axes(target: Target, budget: Budget) -> tuple[str, ...]:
    """The budget's axes and the cheap ones the target measures, in :data:`AXES` order."""
    wanted = set(budget.axes()) | (set(CHEAP_AXES) & set(target.axes))
    return tuple(a for a in AXES if a in wanted)


def measure_in_order(
    candidates: list[Candidate], target: Target, budget: Budget, workdir: Path, on_attempt=None
) -> list[Attempt]:
    """Measure each candidate under each export variant of its kind (:func:`variants_for`) until
    one fits (then it is the last attempt); ``on_attempt(attempt, budget)`` after each.

    A variant whose lower bounds (from the trained model) already exceed the budget is not exported."""
    axes = measured_axes(target, budget)
    attempts: list[Attempt] = []
    for candidate in candidates:
        artifact = load_artifact(candidate.model_path)
        for variant in variants_for(target, artifact.kind):
            if variant.target.cannot_fit(budget, artifact):
                continue
            attempt = measure_one(candidate, artifact, variant.label, variant.target, budget, axes, workdir)
            attempts.append(attempt)
            if on_attempt is not None:
                on_attempt(attempt, budget)
            if attempt.fits:
                return attempts
    return attempts


def measure_one(candidate: Candidate, artifact, label: str, target: Target, budget: Budget, axes, workdir: Path):
    """One export + measurement as an :class:`Attempt`; an export the verifier refuses does not fit."""
    from bnc_deploy.targets.budget import Measured

    folder = workdir / f"{candidate.id}-{label}"
    if folder.exists():
        shutil.rmtree(folder)  # a rerun measures afresh: no stale file is ever measured or shipped
    started = time.perf_counter()
    try:
        m = target.measure(artifact, folder, axes=axes)
    except BncDeployError as exc:
        problem = f"export failed: {exc}"
        seconds = time.perf_counter() - started
        return Attempt(candidate, label, Measured(), False, (problem,), (), problems=(problem,), seconds=seconds)
    why = tuple(m.problems) + tuple(budget.describe(m.measured))
    details = json.loads(json.dumps(m.to_dict(), default=str))
    files = tuple(str(f.path) for f in m.files)
    fits, seconds = m.fits(budget), time.perf_counter() - started
    return Attempt(candidate, label, m.measured, fits, why, files, details, tuple(m.problems), seconds)


def publish(chosen: Attempt | None, out: Path, target: Target) -> tuple[str | None, tuple[str, ...]]:
    """Copy the chosen model and its measured files into ``out``; without one, remove those a
    previous fit left there (so ``out`` never holds a model that does not fit this budget)."""
    model = out / "model.bnc"
    if chosen is None:
        model.unlink(missing_ok=True)
        for export in target.exports:
            (out / f"{target.name}{export.extension}").unlink(missing_ok=True)
        return None, ()
    save_artifact(load_artifact(chosen.candidate.model_path), model)
    files = []
    for path in chosen.files:
        dest = out / Path(path).name
        shutil.copyfile(path, dest)
        files.append(str(dest))
    return str(model), tuple(files)


def _flag(axis: str) -> str:
    return "--max-" + axis.replace("_", "-")


def _show(axis: str, value: float) -> str:
    from bnc_deploy.targets.budget import UNITS

    return f"{value:,.0f} {UNITS[axis]}" if float(value).is_integer() else f"{value:,.2f} {UNITS[axis]}"


def pruned_message(space: SearchSpace, budget: Budget, target: Target) -> str:
    """One line: every configuration was pruned; the smallest lower bound per exceeded axis, the flags."""
    from bnc_deploy.fit.space import smallest_bounds

    smallest = smallest_bounds(space.cells, budget)
    limits = budget.limits()
    over = [(a, v, cell) for a, (v, cell) in smallest.items() if v > limits[a]]
    if not over:  # each axis is reachable alone, never all at once
        cell = min((c for c in space.cells if not c.refused), key=lambda c: len(c.pruned))
        over = [(a, v, cell) for a, v, _ in cell.pruned]
    parts = "; ".join(f"{a} needs at least {_show(a, v)} ({cell.label}) > {_show(a, limits[a])}" for a, v, cell in over)
    flags = " or ".join(_flag(a) for a, _, _ in over)
    return f"no configuration can fit {target.name}'s budget before training: {parts}; relax {flags}"


def measured_message(attempts: list[Attempt], budget: Budget, target: Target, space: SearchSpace) -> str:
    """One line: no measured candidate fits; the smallest measured cost per exceeded axis, the flags."""
    if not attempts:
        return (
            f"no trained candidate could be measured on {target.name}: every configuration failed to train or its "
            f"trained model's lower bounds exceed the budget (see the sweep table)"
        )
    limits = budget.limits()
    smallest: dict[str, tuple[float, Attempt]] = {}
    for a in attempts:
        for axis in limits:
            value = a.measured.get(axis)
            if value is not None and (axis not in smallest or value < smallest[axis][0]):
                smallest[axis] = (value, a)
    over = [(axis, v, a) for axis, (v, a) in smallest.items() if v > limits[axis]]
    if not over:
        problems = [p for a in attempts for p in a.problems]
        if problems:
            return f"no candidate deployed on {target.name} within the budget: {problems[0]}"
        flags = " or ".join(_flag(a) for a in limits)
        return f"no candidate meets every limit of {target.name}'s budget at once; relax {flags}"
    parts = "; ".join(
        f"the smallest {axis} measured was {_show(axis, v)} ({a.candidate.short}, {a.variant}) "
        f"> {_show(axis, limits[axis])}"
        for axis, v, a in over
    )
    return f"no candidate fits {target.name}'s budget: {parts}; relax {' or '.join(_flag(x) for x, _, _ in over)}"
