"""What ``bnc-fit`` found: the candidates it measured, the one that fits, and why others did not.

* :class:`Candidate`: one trained configuration (the best of its cell on the validation split),
  as the sweep table has it: configuration, errors, analytic size and operations, model file.
* :class:`Attempt`: one candidate exported for one variant of the target and measured there;
  ``fits`` is :meth:`~bnc_deploy.targets.base.TargetMeasurement.fits` of that measurement.
* :class:`FitResult`: the whole answer. ``chosen`` is an attempt that was measured to fit (None
  when none did); ``to_dict()`` is what ``report.json`` and ``bnc-fit --json`` write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bnc_deploy.errors import ConfigError
from bnc_deploy.targets.budget import Budget, Measured


class InfeasibleBudget(ConfigError):
    """No candidate was measured (or, before training, bounded) to fit the budget. ``result`` is
    the :class:`FitResult` (``chosen`` None), already reported to disk; the message is one line
    naming the smallest cost reached and the flag to relax."""

    def __init__(self, message: str, result: FitResult | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class Candidate:
    """A trained configuration: the sweep row's ``id``, ``config``, errors and costs, model file."""

    id: str
    config: dict
    val_error: float | None
    test_error: float | None
    size_bits: int
    ops: int
    model_path: str

    @property
    def bits(self) -> int | None:
        """Bits per parameter: ``bits`` of a BN model, ``weight_bits`` of a DNN."""
        return self.config.get("bits", self.config.get("weight_bits"))

    @property
    def short(self) -> str:
        """``nb 3-bit``; a DNN with its widths: ``fc 2-bit 37``; a learned TAN with its lambda_MS:
        ``tan-learn 3-bit lambda_MS 0.001``."""
        c = self.config
        if c.get("structure") == "learn":
            return f"tan-learn {self.bits}-bit lambda_MS {c.get('size_penalty'):g}"
        hidden = c.get("hidden")
        return f"{c['model']} {self.bits}-bit" + (f" {hidden.replace(',', 'x')}" if hidden else "")

    @property
    def label(self) -> str:
        c = self.config
        if c.get("int_bits") is not None:
            return f"{self.short} (B_I {c.get('int_bits')}, lr {c.get('lr'):g})"
        return f"{self.short} (lr {c.get('lr'):g})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "label": self.label,
            "config": dict(self.config),
            "val_error": self.val_error,
            "test_error": self.test_error,
            "size_bits": self.size_bits,
            "ops": self.ops,
            "model_path": self.model_path,
        }


@dataclass(frozen=True)
class Attempt:
    """``candidate`` exported for the target's ``variant`` and measured: the costs, whether it fits,
    the exceeded or unmeasured axes and the failed checks (``why``), the files (kept under the
    fit's ``measure/``)."""

    candidate: Candidate
    variant: str
    measured: Measured
    fits: bool
    why: tuple[str, ...]
    files: tuple[str, ...]
    measurement: dict = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # the target's checks or the export that failed (part of ``why``)
    seconds: float = 0.0  # export + measurement wall time

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate.to_dict(),
            "variant": self.variant,
            "measured": self.measured.to_dict(),
            "fits": self.fits,
            "why": list(self.why),
            "files": list(self.files),
            "measurement": self.measurement,
            "problems": list(self.problems),
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class FitResult:
    """The answer of :func:`bnc_deploy.fit.fit_to_budget` (see the module docstring).

    ``files``: the deployable file(s) copied to ``out_dir`` (empty when nothing fits);
    ``model_path``: ``out_dir/model.bnc`` (None when nothing fits); ``attempts``: every measurement,
    in the order taken; ``candidates``: every trained candidate, best validation error first;
    ``cells``: the search space (pruned cells marked; ``space.Cell.to_dict``); ``sweep_dirs``: the
    sweeps trained (BN, then DNN; ``sweep_dir`` is the first); ``latency_probe``: with a latency
    budget, each architecture's latency timed before training and the cells it pruned
    (:class:`bnc_deploy.fit.latency_probe.LatencyProbe`), else None; ``size_probe``: with a flash
    or file limit and DNN cells, the measured bytes per family and weight storage that sized them
    (:class:`bnc_deploy.fit.size_probe.SizeModel`), else None."""

    data: str
    target: str
    budget: Budget
    chosen: Attempt | None
    attempts: tuple[Attempt, ...]
    candidates: tuple[Candidate, ...]
    cells: tuple[dict, ...]
    out_dir: str
    sweep_dir: str | None
    model_path: str | None
    files: tuple[str, ...]
    trained: int
    skipped: int
    seconds: float
    settings: dict = field(default_factory=dict)
    message: str = ""
    reports: tuple[str, ...] = ()
    sweep_dirs: tuple[str, ...] = ()
    latency_probe: dict | None = None
    size_probe: dict | None = None

    @property
    def fits(self) -> bool:
        return self.chosen is not None

    @property
    def runner_ups(self) -> tuple[Candidate, ...]:
        """Candidates ranked after the chosen one (all of them when nothing fits)."""
        if self.chosen is None:
            return self.candidates
        ids = [c.id for c in self.candidates]
        return self.candidates[ids.index(self.chosen.candidate.id) + 1 :]

    def to_dict(self) -> dict[str, Any]:
        return {
            "data": self.data,
            "target": self.target,
            "budget": self.budget.to_dict(),
            "fits": self.fits,
            "chosen": None if self.chosen is None else self.chosen.to_dict(),
            "attempts": [a.to_dict() for a in self.attempts],
            "candidates": [c.to_dict() for c in self.candidates],
            "cells": list(self.cells),
            "out_dir": self.out_dir,
            "sweep_dir": self.sweep_dir,
            "sweep_dirs": list(self.sweep_dirs),
            "model_path": self.model_path,
            "files": list(self.files),
            "trained": self.trained,
            "skipped": self.skipped,
            "seconds": self.seconds,
            "settings": dict(self.settings),
            "message": self.message,
            "selection": "validation split (test error reported, never used to choose)",
            "reports": list(self.reports),
            "latency_probe": self.latency_probe,
            "size_probe": self.size_probe,
        }
