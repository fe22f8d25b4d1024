"""The search space of ``bnc-fit``: candidate configurations per family and bit width, pruned before training.

Contract
--------
* A **cell** is one point of a size curve: a family (``nb``, ``tan``: Chow-Liu TAN) at one bit
  width ``B``. Its analytic costs (``costs.bnc_cost_terms``) are known before training: the
  cardinalities and class count come from the data, the parents from the structure (none for
  NB; the Chow-Liu tree of the training split for TAN, the same split and seed the sweep's
  workers use, so the structure estimated here is the one trained).
* **Pruning.** A cell is pruned when, under every export variant of the target
  (:func:`export_variants`), :meth:`~bnc_deploy.targets.base.Target.cannot_fit` says a lower
  bound already exceeds the budget. A pruned cell contributes no configuration to the sweep:
  it is never trained.
* **Configurations** of a surviving cell: every integer-bit width ``B_I`` of
  :attr:`SpaceSettings.int_bits` at most ``B`` (at least one), times the learning rates, times the
  hybrid-loss draws (the trainer's default ``(lambda, gamma)`` first, then draws from the paper's
  distributions, ``lambda = 10^U(1, 3)``, ``gamma = 10^U(-1, 2)``, seeded by the fit's seed).
  Records are flat sweep records (``sweep.records``) without the dataset keys, which the search
  fixes for the whole sweep.

This module imports no torch: the Chow-Liu structure is numpy code (``train.chow_liu``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bnc_deploy.costs import CostReport, bnc_cost_terms
from bnc_deploy.errors import ConfigError
from bnc_deploy.targets.base import Target
from bnc_deploy.targets.budget import Budget, Measured

#: Families searched in this version, in report order.
FAMILIES = ("nb", "tan")
#: Families the issue asks for that the search does not cover yet (refused by name).
PLANNED_FAMILIES = ("tan-learn", "fc", "cnn")
#: The trainer's default hybrid-loss weights (``train.bnc.TrainConfig``): the first draw.
DEFAULT_HYBRID = (18.70, 0.1277)


@dataclass(frozen=True)
class SpaceSettings:
    """How wide the search is. ``draws``: hybrid-loss ``(lambda, gamma)`` pairs per configuration
    (the first is the trainer's default); ``validation``: fraction of the training rows held out
    for selection."""

    bits: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    int_bits: tuple[int, ...] = (1, 2, 3)
    lrs: tuple[float, ...] = (3e-2, 3e-3)
    draws: int = 2
    epochs: int = 100
    batch_size: int = 100
    validation: float = 0.2

    def __post_init__(self) -> None:
        if not self.bits or any(not 1 <= b <= 8 for b in self.bits):
            raise ConfigError(f"bit widths must be in 1..8, got {self.bits}")
        if not self.int_bits or any(not 1 <= b <= 6 for b in self.int_bits):
            raise ConfigError(f"integer bits must be in 1..6, got {self.int_bits}")
        if self.draws < 1 or self.epochs < 1 or self.batch_size < 1 or not self.lrs:
            raise ConfigError("draws, epochs and batch size must be >= 1 and at least one learning rate given")
        if not 0 < self.validation < 1:
            raise ConfigError(f"the validation fraction must be in (0, 1), got {self.validation}")


@dataclass(frozen=True)
class Variant:
    """One way to ship a model on the target: ``label`` and the target with its export options."""

    label: str
    target: Target


@dataclass(frozen=True)
class Cell:
    """One family at one bit width: its costs, the lower bound per variant, why it was pruned."""

    family: str
    bits: int
    costs: CostReport
    bounds: dict[str, Measured]  # variant label -> lower bounds
    pruned: tuple[tuple[str, int | float, int | float], ...] = ()  # the best variant's exceeded axes

    @property
    def label(self) -> str:
        return f"{self.family} {self.bits}-bit"

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "bits": self.bits,
            "size_bits": int(self.costs.size_bits),
            "ops": int(self.costs.n_ops),
            "n_parameters": int(self.costs.n_parameters),
            "lower_bounds": {k: v.to_dict() for k, v in self.bounds.items()},
            "pruned": [{"axis": a, "lower_bound": v, "limit": lim} for a, v, lim in self.pruned],
        }


@dataclass(frozen=True)
class SearchSpace:
    """The cells (pruned and kept) and the records of the kept ones."""

    cells: tuple[Cell, ...]
    records: tuple[dict, ...] = field(default=())

    @property
    def kept(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if not c.pruned)

    @property
    def pruned(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.pruned)


def export_variants(target: Target) -> tuple[Variant, ...]:
    """The target as registered, then (for a C export without it) with ``pack_bits``: B-bit codes
    packed into the tables, smaller flash at the price of unpacking in ``predict``."""
    variants = [Variant("default", target)]
    for export in target.exports:
        if export.format == "c" and not export.option_dict().get("pack_bits", False):
            variants.append(Variant("packed", target.with_options("c", pack_bits=True)))
            break
    return tuple(variants)


def check_families(families: Iterable[str] | None, target: Target) -> tuple[str, ...]:
    """The families to search (default: all of :data:`FAMILIES`); ConfigError for an unknown one,
    one not searched yet, or a target that takes no BN models."""
    chosen = tuple(FAMILIES if families is None else dict.fromkeys(f.strip() for f in families if f.strip()))
    for name in chosen:
        if name in PLANNED_FAMILIES:
            raise ConfigError(f"--families: {name} is not searched yet (searched: {', '.join(FAMILIES)})")
        if name not in FAMILIES:
            raise ConfigError(f"--families: unknown family {name!r}; families: {', '.join(FAMILIES)}")
    if not chosen:
        raise ConfigError("--families: no family given")
    if "bnc" not in target.kinds():
        raise ConfigError(f"target {target.name} takes {', '.join(target.kinds())} models; bnc-fit searches BN models")
    return chosen


def structure_of(family: str, dataset) -> np.ndarray:
    """Parents of ``family`` on ``dataset``'s training split (the sweep's workers compute the same)."""
    if family == "nb":
        return np.full(dataset.n_features, -1, dtype=np.int64)
    from bnc_deploy.train.chow_liu import chow_liu_parents  # numpy only, no torch

    return chow_liu_parents(dataset.x_train, dataset.y_train, dataset.cardinalities, dataset.n_classes)


def plan_space(
    dataset, target: Target, budget: Budget, families: Sequence[str], settings: SpaceSettings, seed: int = 0
) -> SearchSpace:
    """Every cell of ``families`` x ``settings.bits`` with its lower bounds, the pruned ones marked,
    and the sweep records of the kept ones (see the module docstring)."""
    target.check_budget(budget)
    variants = export_variants(target)
    cells, records = [], []
    hybrid = hybrid_draws(settings.draws, seed)
    for family in families:
        parents = structure_of(family, dataset)
        for bits in sorted(set(settings.bits)):
            costs = bnc_cost_terms(dataset.cardinalities, parents, dataset.n_classes, bits)
            bounds = {v.label: v.target.estimate(costs) for v in variants}
            exceeded = [v.target.cannot_fit(budget, costs) for v in variants]
            pruned = () if any(not e for e in exceeded) else tuple(min(exceeded, key=_overshoot))
            cell = Cell(family, bits, costs, bounds, pruned)
            cells.append(cell)
            if not pruned:
                records += cell_records(cell, settings, hybrid)
    return SearchSpace(tuple(cells), tuple(records))


def _overshoot(exceeded: list[tuple[str, int | float, int | float]]) -> float:
    """How far a variant is from fitting (the largest ratio bound/limit), to report the closest."""
    return max(value / max(limit, 1e-12) for _, value, limit in exceeded)


def hybrid_draws(n: int, seed: int) -> list[tuple[float, float]]:
    """``n`` hybrid-loss ``(lambda, gamma)`` pairs: the trainer's default, then the paper's distributions."""
    rng = np.random.default_rng(seed)
    draws = [DEFAULT_HYBRID]
    for _ in range(n - 1):
        lam = float(10.0 ** rng.uniform(1, 3))
        gamma = float(10.0 ** rng.uniform(-1, 2))
        draws.append((round(lam, 4), round(gamma, 4)))
    return draws


def cell_records(cell: Cell, settings: SpaceSettings, hybrid: list[tuple[float, float]]) -> list[dict]:
    """The sweep records of one kept cell (model, bits, B_I, learning rate, hybrid weights)."""
    int_bits = sorted({min(b, cell.bits) for b in settings.int_bits})
    out = []
    for b_i in int_bits:
        for lr in settings.lrs:
            for lam, gamma in hybrid:
                out.append(
                    {
                        "model": cell.family,
                        "bits": cell.bits,
                        "int_bits": b_i,
                        "lr": float(lr),
                        "hybrid_lambda": float(lam),
                        "hybrid_gamma": float(gamma),
                    }
                )
    return out


def smallest_bounds(cells: Iterable[Cell], budget: Budget) -> dict[str, tuple[int | float, Cell]]:
    """Per limited axis, the smallest lower bound any cell (under any variant) has, and that cell."""
    best: dict[str, tuple[int | float, Cell]] = {}
    for cell in cells:
        for bound in cell.bounds.values():
            for axis in budget.axes():
                value = bound.get(axis)
                if value is not None and (axis not in best or value < best[axis][0]):
                    best[axis] = (value, cell)
    return best


def with_settings(settings: SpaceSettings, **changes: Any) -> SpaceSettings:
    """``settings`` with ``changes`` (checked again)."""
    return dataclasses.replace(settings, **changes)


def search_spec(space: SearchSpace, settings: SpaceSettings, data_spec: str, seed: int):
    """The sweep's grid: the kept records as joint columns, the data settings fixed."""
    from bnc_deploy.sweep.grid import GridSpec

    keys = list(space.records[0])
    draws = {key: [r[key] for r in space.records] for key in keys}
    fixed = {
        "data": data_spec,
        "validation": settings.validation,
        "seed": seed,
        "epochs": settings.epochs,
        "batch_size": settings.batch_size,
    }
    return GridSpec(axes={}, draws=draws, fixed=fixed).normalized("bnc-fit search space")
