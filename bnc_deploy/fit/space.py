"""The search space of ``bnc-fit``: candidate configurations per family and bit width, pruned before training.

Contract
--------
* A **cell** is one point of a size curve: a family at one bit width ``B``. BN families: ``nb``,
  ``tan`` (Chow-Liu TAN). Their analytic costs (``costs.bnc_cost_terms``) are known before
  training: the cardinalities and class count come from the data, the parents from the structure
  (none for NB; the Chow-Liu tree of the training split for TAN, the same split and seed the
  sweep's workers use, so the structure estimated here is the one trained). ``tan-learn`` (a TAN
  whose structure is learned with the size penalty lambda_MS, ``train.structure_learning``): one
  cell per bit width and :attr:`SpaceSettings.size_penalties` value; its structure is unknown
  before training, so its lower bounds are those of NB at the same bit width (parents only add
  parameters) and the measurement decides the rest. DNN families (``fc``, ``cnn``): one cell per
  weight bit width and size, sized to the budget (:mod:`bnc_deploy.fit.dnn_space`), with the
  exact costs of their layer lists.
* **Families** (:func:`check_families`): by default ``nb`` and ``tan``, plus ``fc`` (and ``cnn``
  on image data) when the target takes DNN models; ``tan-learn`` only when asked for (its
  configurations cost the most per epoch). A family the target takes no models of is
  **refused**: its cells are listed with the reason and never trained.
* **Pruning.** A cell is pruned when, under every export variant of the target
  (:func:`export_variants`), :meth:`~bnc_deploy.targets.base.Target.cannot_fit` says a lower
  bound already exceeds the budget. A pruned or refused cell contributes no configuration to
  the sweep: it is never trained.
* **Configurations** of a surviving BN cell: every integer-bit width ``B_I`` of
  :attr:`SpaceSettings.int_bits` at most ``B`` (at least one), times the learning rates, times the
  hybrid-loss draws (the trainer's default ``(lambda, gamma)`` first, then draws from the paper's
  distributions, ``lambda = 10^U(1, 3)``, ``gamma = 10^U(-1, 2)``, seeded by the fit's seed). A
  surviving DNN or learned TAN cell: one configuration per learning rate. Records are flat sweep records
  (``sweep.records``) without the dataset keys, which the search fixes for the whole sweep;
  BN, learned TAN and DNN records go to separate sweeps (:func:`search_specs`: their keys differ).

This module imports no torch: the Chow-Liu structure is numpy code (``train.chow_liu``), the DNN
sizing integer arithmetic (``train.sizing``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bnc_deploy.costs import CostReport, bnc_cost_terms
from bnc_deploy.errors import ConfigError
from bnc_deploy.targets.base import Target
from bnc_deploy.targets.budget import Budget, Measured

#: BN families (the batched trainer) and DNN families (the single-run DNN trainer).
BN_FAMILIES = ("nb", "tan")
DNN_FAMILIES = ("fc", "cnn")
#: The learned TAN (structure learning with the size penalty lambda_MS; single-run trainer, opt-in).
LEARN_FAMILY = "tan-learn"
#: Families searched, in report order.
FAMILIES = BN_FAMILIES + (LEARN_FAMILY,) + DNN_FAMILIES
#: Families the issue asks for that the search does not cover yet (refused by name).
PLANNED_FAMILIES: tuple[str, ...] = ()
#: The trainer's default hybrid-loss weights (``train.bnc.TrainConfig``): the first draw.
DEFAULT_HYBRID = (18.70, 0.1277)
#: BN configurations start from maximum likelihood: at the search's epoch counts a uniform start
#: (the paper's, which trains 500 epochs) ends far from a good model (docs/guide/train.md).
BN_INIT = "ml"


@dataclass(frozen=True)
class SpaceSettings:
    """How wide the search is. ``draws``: hybrid-loss ``(lambda, gamma)`` pairs per configuration
    (the first is the trainer's default); ``halving``: the sweep's successive halving within each
    cell (BN families), as the paper's quick protocol; ``validation``: fraction of the training rows held out
    for selection. DNN cells: ``fc_layers`` weight layers, ``cnn_layers`` convolutions, sizes
    scaled by ``dnn_scales`` under flash/file limits, ``dnn_widths`` without a size limit, FC
    widths at most ``max_width`` (:mod:`bnc_deploy.fit.dnn_space`)."""

    bits: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    int_bits: tuple[int, ...] = (1, 2, 3)
    lrs: tuple[float, ...] = (3e-2, 3e-3)
    draws: int = 20
    halving: bool = True  # successive halving within each cell (the sweep's): many draws, few full runs
    epochs: int = 100
    max_epochs: int = 500  # a time budget with room to spare trains up to this many (the paper's 500)
    batch_size: int = 100
    validation: float = 0.2
    fc_layers: int = 2
    cnn_layers: int = 1
    dnn_scales: tuple[float, ...] = (1.0, 0.5)
    dnn_widths: tuple[int, ...] = (16, 64)
    max_width: int = 1024
    size_penalties: tuple[float, ...] = (1e-5, 1e-3, 1e-1)

    def __post_init__(self) -> None:
        if not self.bits or any(not 1 <= b <= 8 for b in self.bits):
            raise ConfigError(f"bit widths must be in 1..8, got {self.bits}")
        if not self.int_bits or any(not 1 <= b <= 6 for b in self.int_bits):
            raise ConfigError(f"integer bits must be in 1..6, got {self.int_bits}")
        if self.draws < 1 or self.epochs < 1 or self.batch_size < 1 or not self.lrs or self.max_epochs < 1:
            raise ConfigError("draws, epochs and batch size must be >= 1 and at least one learning rate given")
        if not 0 < self.validation < 1:
            raise ConfigError(f"the validation fraction must be in (0, 1), got {self.validation}")
        if not 2 <= self.fc_layers <= 5 or self.cnn_layers not in (1, 2):
            raise ConfigError(f"fc_layers must be in 2..5, cnn_layers 1 or 2: got {self.fc_layers}, {self.cnn_layers}")
        if not self.dnn_scales or any(not 0 < s <= 1 for s in self.dnn_scales):
            raise ConfigError(f"dnn_scales must be in (0, 1], got {self.dnn_scales}")
        if not self.dnn_widths or min(self.dnn_widths) < 1 or self.max_width < 1:
            raise ConfigError("dnn_widths and max_width must be >= 1")
        if not self.size_penalties or any(not v >= 0 for v in self.size_penalties):
            raise ConfigError(f"size_penalties (lambda_MS) must be >= 0, got {self.size_penalties}")


@dataclass(frozen=True)
class Variant:
    """One way to ship a model on the target: ``label`` and the target with its export options."""

    label: str
    target: Target


@dataclass(frozen=True)
class Cell:
    """One family at one bit width (a DNN: and one size, ``widths``): its costs, the lower bound per
    variant, why it was pruned (exceeded axes) or refused (the target takes no such models)."""

    family: str
    bits: int
    costs: CostReport
    bounds: dict[str, Measured]  # variant label -> lower bounds
    pruned: tuple[tuple[str, int | float, int | float], ...] = ()  # the best variant's exceeded axes
    widths: tuple[int, ...] = ()  # DNN hidden widths / channels
    refused: str = ""  # why the target cannot take this family
    size_penalty: float | None = None  # a learned TAN's lambda_MS

    @property
    def label(self) -> str:
        size = f" {'x'.join(str(w) for w in self.widths)}" if self.widths else ""
        penalty = f" lambda_MS {self.size_penalty:g}" if self.size_penalty is not None else ""
        return f"{self.family} {self.bits}-bit{size}{penalty}"

    @property
    def kept(self) -> bool:
        return not self.pruned and not self.refused

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "bits": self.bits,
            "size_bits": int(self.costs.size_bits),
            "ops": int(self.costs.n_ops),
            "n_parameters": int(self.costs.n_parameters),
            "lower_bounds": {k: v.to_dict() for k, v in self.bounds.items()},
            "pruned": [{"axis": a, "lower_bound": v, "limit": lim} for a, v, lim in self.pruned],
            "widths": list(self.widths),
            "refused": self.refused,
            "size_penalty": self.size_penalty,
        }


@dataclass(frozen=True)
class SearchSpace:
    """The cells (pruned and kept) and the records of the kept ones."""

    cells: tuple[Cell, ...]
    records: tuple[dict, ...] = field(default=())

    @property
    def kept(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.kept)

    @property
    def pruned(self) -> tuple[Cell, ...]:
        """Cells not trained: pruned by a bound or refused by the target."""
        return tuple(c for c in self.cells if not c.kept)


def export_variants(target: Target) -> tuple[Variant, ...]:
    """The target as registered, then (for a C export without it) with ``pack_bits``: B-bit codes
    packed into the tables, smaller flash at the price of unpacking in ``predict``."""
    variants = [Variant("default", target)]
    for export in target.exports:
        if export.format == "c" and not export.option_dict().get("pack_bits", False):
            variants.append(Variant("packed", target.with_options("c", pack_bits=True)))
            break
    return tuple(variants)


def model_kind(family: str) -> str:
    """The artifact kind a family trains: ``bnc`` or ``dnn``."""
    return "dnn" if family in DNN_FAMILIES else "bnc"


def check_families(families: Iterable[str] | None, target: Target, image: bool = False) -> tuple[str, ...]:
    """The families to search. Default: the BN families, plus ``fc`` (and ``cnn`` when ``image``:
    the data has a known image layout) when ``target`` takes DNN models. ConfigError for an
    unknown family, one not searched yet, ``cnn`` without image data, or a selection the target
    takes no model of (a selection it takes only some of: the others are refused cells)."""
    if families is None:
        chosen = BN_FAMILIES
        if "dnn" in target.kinds():
            chosen += DNN_FAMILIES if image else ("fc",)
    else:
        chosen = tuple(dict.fromkeys(f.strip() for f in families if f.strip()))
    for name in chosen:
        if name in PLANNED_FAMILIES:
            raise ConfigError(f"--families: {name} is not searched yet (searched: {', '.join(FAMILIES)})")
        if name not in FAMILIES:
            raise ConfigError(f"--families: unknown family {name!r}; families: {', '.join(FAMILIES)}")
    if not chosen:
        raise ConfigError("--families: no family given")
    if "cnn" in chosen and not image:
        raise ConfigError("--families: cnn needs image data (a dataset with a known image layout, e.g. digits, usps)")
    if not any(model_kind(f) in target.kinds() for f in chosen):
        raise ConfigError(
            f"target {target.name} takes {', '.join(target.kinds())} models; none of the families "
            f"{', '.join(chosen)} trains one"
        )
    return chosen


def variants_for(target: Target, kind: str) -> tuple[Variant, ...]:
    """The export variants that differ for ``kind`` models (``packed`` changes only BN C files)."""
    out, seen = [], []
    for variant in export_variants(target):
        exports = tuple(e for e in variant.target.exports if kind in e.kinds)
        if exports and exports not in seen:
            seen.append(exports)
            out.append(variant)
    return tuple(out)


def structure_of(family: str, dataset) -> np.ndarray:
    """Parents of ``family`` on ``dataset``'s training split (the sweep's workers compute the same);
    a learned TAN's lower bound: no parents (its structure is learned in training)."""
    if family in ("nb", LEARN_FAMILY):
        return np.full(dataset.n_features, -1, dtype=np.int64)
    from bnc_deploy.train.chow_liu import chow_liu_parents  # numpy only, no torch

    return chow_liu_parents(dataset.x_train, dataset.y_train, dataset.cardinalities, dataset.n_classes)


def plan_space(
    dataset,
    target: Target,
    budget: Budget,
    families: Sequence[str],
    settings: SpaceSettings,
    seed: int = 0,
    measured: Mapping[str, tuple[tuple[str, int | float, int | float], ...]] | None = None,
    size_model=None,
) -> SearchSpace:
    """Every cell of ``families`` x ``settings.bits`` (DNNs: x their sizes) with its lower bounds,
    the pruned and refused ones marked, and the sweep records of the kept ones (see the module
    docstring). ``measured``: cell label -> exceeded axes measured before training (the latency
    probe, :mod:`bnc_deploy.fit.latency_probe`), pruning those cells too; ``size_model``: the measured
    file sizes DNN cells are sized with (:mod:`bnc_deploy.fit.size_probe`)."""
    from bnc_deploy.fit import dnn_space

    target.check_budget(budget)
    cells, records = [], []
    hybrid = hybrid_draws(settings.draws, seed)
    for family in families:
        kind = model_kind(family)
        refused = "" if kind in target.kinds() else f"target {target.name} takes no {kind} models"
        variants = variants_for(target, kind) or export_variants(target)
        parents = structure_of(family, dataset) if kind == "bnc" else None
        for bits in sorted(set(settings.bits)):
            if kind == "dnn":
                sizes = dnn_space.dnn_widths(family, dataset, bits, budget, settings, size_model)
                sized = [(w, None, dnn_space.dnn_costs_of(family, dataset, w, bits, settings)) for w in sizes]
            else:  # a learned TAN costs at least the NB of its bit width: the bound prunes on that
                costs = bnc_cost_terms(dataset.cardinalities, parents, dataset.n_classes, bits)
                penalties = settings.size_penalties if family == LEARN_FAMILY else (None,)
                sized = [((), penalty, costs) for penalty in penalties]
            for widths, penalty, costs in sized:
                bounds = {v.label: v.target.estimate(costs) for v in variants}
                exceeded = [v.target.cannot_fit(budget, costs) for v in variants]
                pruned = () if any(not e for e in exceeded) else tuple(min(exceeded, key=_overshoot))
                cell = Cell(family, bits, costs, bounds, pruned, widths, refused, penalty)
                if cell.kept and measured and cell.label in measured:
                    cell = dataclasses.replace(cell, pruned=measured[cell.label])
                cells.append(cell)
                if cell.kept:
                    records += records_of_cell(cell, settings, hybrid)
    return SearchSpace(tuple(cells), tuple(records))


def _overshoot(exceeded: list[tuple[str, int | float, int | float]]) -> float:
    """How far a variant is from fitting (the largest ratio bound/limit), to report the closest."""
    return max(value / max(limit, 1e-12) for _, value, limit in exceeded)


def hybrid_draws(n: int, seed: int) -> list[tuple[float, float]]:
    """``n`` hybrid-loss ``(lambda, gamma)`` pairs: the trainer's default, then the authors' ICPR 2020
    draws in their order (``../shared/paper/structures``, :func:`bnc_deploy.sweep.paper.icpr2020_draws`),
    else draws from the paper's distributions (seeded).

    The draws decide much of a quantized model's error: on letter (NB, 3 bits, 100 epochs, ML start)
    the trainer's default gives 21-22 % test error and the best of the authors' first 20 draws 17 %.
    """
    draws = [DEFAULT_HYBRID]
    for lam, gamma in _authors_draws()[: n - 1]:
        draws.append((round(lam, 4), round(gamma, 4)))
    rng = np.random.default_rng(seed)
    while len(draws) < n:
        lam = float(10.0 ** rng.uniform(1, 3))
        gamma = float(10.0 ** rng.uniform(-1, 2))
        draws.append((round(lam, 4), round(gamma, 4)))
    return draws


def _authors_draws() -> list[tuple[float, float]]:
    """The authors' (lambda, gamma) draws, or none when their files are absent."""
    from bnc_deploy.sweep.paper import icpr2020_draws

    try:
        columns = icpr2020_draws()
    except (ConfigError, OSError):
        return []
    return list(zip(columns["hybrid_lambda"], columns["hybrid_gamma"]))


def records_of_cell(cell: Cell, settings: SpaceSettings, hybrid: list[tuple[float, float]]) -> list[dict]:
    """The sweep records of one kept cell, whatever its family."""
    from bnc_deploy.fit.dnn_space import dnn_records

    if cell.family in DNN_FAMILIES:
        return dnn_records(cell.family, cell.bits, cell.widths, settings)
    if cell.family == LEARN_FAMILY:
        return learn_records(cell, settings)
    return cell_records(cell, settings, hybrid)


def learn_records(cell: Cell, settings: SpaceSettings) -> list[dict]:
    """A learned TAN cell's records: one per learning rate (the trainer's B_I, hybrid loss and
    structure-learning settings; ``size_penalty`` is the cell's lambda_MS)."""
    return [
        {"model": "tan", "structure": "learn", "bits": cell.bits, "lr": float(lr), "size_penalty": cell.size_penalty}
        for lr in settings.lrs
    ]


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
                        "init": BN_INIT,
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
        if cell.refused:
            continue
        for bound in cell.bounds.values():
            for axis in budget.axes():
                value = bound.get(axis)
                if value is not None and (axis not in best or value < best[axis][0]):
                    best[axis] = (value, cell)
    return best


def with_settings(settings: SpaceSettings, **changes: Any) -> SpaceSettings:
    """``settings`` with ``changes`` (checked again)."""
    return dataclasses.replace(settings, **changes)


def search_specs(space: SearchSpace, settings: SpaceSettings, data_spec: str, seed: int) -> list:
    """The sweep grids: the kept records as joint columns, one grid per record shape (BN, then DNN),
    the data settings fixed."""
    from bnc_deploy.sweep.grid import GridSpec

    shapes: dict[tuple[str, ...], list[dict]] = {}
    for record in space.records:
        shapes.setdefault(tuple(record), []).append(record)
    fixed = {
        "data": data_spec,
        "validation": settings.validation,
        "seed": seed,
        "epochs": settings.epochs,
        "batch_size": settings.batch_size,
    }
    return [
        GridSpec(axes={}, draws={key: [r[key] for r in records] for key in keys}, fixed=fixed).normalized(
            "bnc-fit search space"
        )
        for keys, records in shapes.items()
    ]
