"""Sweep grids: which configurations to train.

Contract
--------
* A grid's records are configuration records (:mod:`bnc_deploy.sweep.records`: their keys,
  defaults, value normalization and content-hash ids).
* A :class:`GridSpec` has ``axes`` (key -> list of values, full product, in the order given, the
  last axis fastest), ``draws`` (columns that vary jointly, innermost) and ``fixed`` (key -> one
  value). :func:`expand` gives ``product(axes) x draws``, each record merged with ``fixed``; a
  record from a draw carries ``draw``. A key may appear in one section only.
* **Draws.** Either explicit columns of equal length (``{"hybrid_lambda": [...], "hybrid_gamma":
  [...]}``) or distributions with ``n`` and ``seed``: ``{"n": 100, "seed": 0, "hybrid_lambda":
  {"log10_uniform": [1, 3]}}`` (also ``uniform: [lo, hi]`` and ``choice: [v, ...]``); both may be
  mixed. Distributions are sampled from one ``numpy.random.default_rng(seed)``, **row by row**:
  for draw index 0, 1, ..., one value per distribution column in sorted key order. So a grid is
  reproducible, and the first k draws do not depend on ``n`` (raising ``n`` only adds draws).
  In ``[draws]``, ``n`` and ``seed`` are the generator's settings; the training seed cannot be a
  draw column (make it an axis).
* Values are normalized on the way in (:func:`~bnc_deploy.sweep.records.normalize_value`); an
  axis written as one string is read by :func:`~bnc_deploy.sweep.records.parse_values`.
* :func:`expand` refuses a grid in which two records are the same configuration (same id).
* Errors are :class:`~bnc_deploy.errors.ConfigError` naming the flag or file, the key and the
  value (with a did-you-mean for misspelt keys).

The paper's grids (presets) are in :mod:`bnc_deploy.sweep.paper`. This module imports neither
torch nor the trainers.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bnc_deploy.errors import ConfigError
from bnc_deploy.sweep.records import (
    KEYS,
    LABEL_KEYS,
    check_key,
    config_id,
    did_you_mean,
    normalize_value,
    parse_values,
    show_value,
)

__all__ = ["GridSpec", "count", "describe", "expand", "load_grid_file"]


# -- grid specs ------------------------------------------------------------------------------------
_DISTRIBUTIONS = ("uniform", "log10_uniform", "choice")
_SECTIONS = ("axes", "draws", "fixed")


@dataclass
class GridSpec:
    """What to run: ``axes`` (full product), ``draws`` (jointly varying), ``fixed`` (every record).

    See the module docstring for the forms. :meth:`normalized` checks and normalizes a spec
    (every entry point calls it); :meth:`to_dict`/:meth:`from_dict` round-trip it through JSON.
    """

    axes: dict = field(default_factory=dict)
    draws: dict = field(default_factory=dict)
    fixed: dict = field(default_factory=dict)

    def normalized(self, where: str = "grid") -> GridSpec:
        """A checked copy with every value in canonical form; ConfigError naming ``where``, key, value."""
        for section in _SECTIONS:
            if not isinstance(getattr(self, section), dict):
                raise ConfigError(
                    f"{where}: [{section}] must be a table of keys, got {type(getattr(self, section)).__name__}"
                )
        seen: dict[str, str] = {}
        axes = {}
        for name, values in self.axes.items():
            spec_where = f"{where}: axes.{name}"
            _check_label(name, where, "axes")
            check_key(name, f"{where}: [axes]")
            if isinstance(values, str):
                values = parse_values(values, name, flag=spec_where)
            elif isinstance(values, (list, tuple)):
                values = [normalize_value(name, v, f"{where}: axes") for v in values]
            else:
                raise ConfigError(
                    f"{spec_where} = {show_value(values)}: an axis is a list of values or a string like "
                    '"1..8" or "3e-2,3e-3"'
                )
            if not values:
                raise ConfigError(f"{spec_where} is empty (an empty axis would give no configurations)")
            for i, v in enumerate(values):
                if v in values[:i]:
                    raise ConfigError(f"{spec_where}: the value {show_value(v)} appears twice")
            axes[name] = values
            seen[name] = "axes"
        draws = _normalize_draws(self.draws, where, seen)
        fixed = {}
        for name, value in self.fixed.items():
            _check_label(name, where, "fixed")
            check_key(name, f"{where}: [fixed]")
            if name in seen:
                raise ConfigError(f"{where}: key {name!r} is in both [{seen[name]}] and [fixed]; give it in one")
            if isinstance(value, (list, tuple, dict)) and name != "hidden":
                raise ConfigError(
                    f"{where}: fixed.{name} = {show_value(value)}: a fixed value is one value (to vary "
                    f"it, move it to [axes])"
                )
            fixed[name] = normalize_value(name, value, f"{where}: fixed")
        return GridSpec(axes=axes, draws=draws, fixed=fixed)

    def draw_rows(self) -> list[dict]:
        """The draws as records (each with its ``draw`` index); ``[]`` when there are none."""
        return _draw_rows(self.normalized().draws)

    def to_dict(self) -> dict:
        spec = self.normalized()
        return {"axes": spec.axes, "draws": spec.draws, "fixed": spec.fixed}

    def to_json(self) -> str:
        """JSON of the normalized spec (axes keep their order; that order is the expansion order)."""
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict, where: str = "grid") -> GridSpec:
        """A spec from ``{"axes": ..., "draws": ..., "fixed": ...}`` (all optional); unknown sections refused."""
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: a grid is a table with [axes], [draws], [fixed]; got {type(data).__name__}")
        for name in data:
            if name not in _SECTIONS:
                raise ConfigError(
                    f"{where}: unknown section {name!r}{did_you_mean(name, _SECTIONS)}; a grid has "
                    "[axes], [draws] and [fixed]"
                )
        return cls(axes=data.get("axes", {}), draws=data.get("draws", {}), fixed=data.get("fixed", {})).normalized(
            where
        )


def _check_label(name, where: str, section: str) -> None:
    if name in LABEL_KEYS:
        raise ConfigError(f"{where}: [{section}] {name!r} is set by the grid itself (the index of a draw)")


def _normalize_draws(draws: dict, where: str, seen: dict) -> dict:
    if not draws:
        return {}
    out: dict = {}
    n = draws.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ConfigError(f"{where}: draws.n = {show_value(n)}: the number of draws must be an integer >= 1")
    seed = draws.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        why = " (to vary the training seed, make seed an axis)" if isinstance(seed, (list, tuple)) else ""
        raise ConfigError(
            f"{where}: draws.seed = {show_value(seed)}: the draws' random seed must be an integer >= 0{why}"
        )
    lengths: dict[str, int] = {}
    random_columns = []
    for name, column in draws.items():
        if name in ("n", "seed"):
            continue
        _check_label(name, where, "draws")
        check_key(name, f"{where}: [draws]")
        if name in seen:
            raise ConfigError(f"{where}: key {name!r} is in both [{seen[name]}] and [draws]; give it in one")
        seen[name] = "draws"
        col_where = f"{where}: draws.{name}"
        if isinstance(column, (list, tuple)):
            out[name] = [normalize_value(name, v, f"{where}: draws") for v in column]
            lengths[name] = len(column)
        elif isinstance(column, dict):
            out[name] = _normalize_distribution(name, column, col_where)
            random_columns.append(name)
        else:
            raise ConfigError(
                f"{col_where} = {show_value(column)}: a draw column is a list of values or a "
                'distribution like {"log10_uniform": [1, 3]}'
            )
    if not out:
        raise ConfigError(f"{where}: [draws] has no columns (only n/seed)")
    if random_columns and (n is None or seed is None):
        raise ConfigError(
            f"{where}: [draws] with distributions ({', '.join(random_columns)}) needs n (how many "
            "draws) and seed (for numpy.random.default_rng)"
        )
    if not random_columns and seed is not None:
        raise ConfigError(f"{where}: draws.seed is given but every draw column is an explicit list (nothing to draw)")
    expected = n if n is not None else next(iter(lengths.values()))
    for name, length in lengths.items():
        if length != expected:
            what = "n" if n is not None else f"draws.{next(iter(lengths))} ({expected})"
            raise ConfigError(
                f"{where}: draws.{name} has {length} values, but {what} = {expected}; draw columns "
                "vary jointly and need one value per draw"
            )
    if n is not None:
        out["n"] = n
    if seed is not None:
        out["seed"] = seed
    return out


def _normalize_distribution(name: str, column: dict, where: str) -> dict:
    if len(column) != 1 or next(iter(column)) not in _DISTRIBUTIONS:
        raise ConfigError(
            f"{where} = {show_value(column)}: a distribution is one of "
            + ", ".join(f'{{"{d}": [...]}}' for d in _DISTRIBUTIONS)
        )
    ((kind, args),) = column.items()
    if kind == "choice":
        if not isinstance(args, (list, tuple)) or not args:
            raise ConfigError(f"{where}: choice needs a non-empty list of values, got {show_value(args)}")
        return {"choice": [normalize_value(name, v, where) for v in args]}
    if KEYS[name].kind != "float":
        raise ConfigError(f"{where}: {kind} gives fractional values, but {name} is {KEYS[name].kind}; use choice")
    ok = (
        isinstance(args, (list, tuple))
        and len(args) == 2
        and all(isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a) for a in args)
    )
    if not ok or args[0] > args[1]:
        raise ConfigError(f"{where}: {kind} needs [low, high] with low <= high, got {show_value(args)}")
    return {kind: [float(args[0]), float(args[1])]}


def _draw_rows(draws: dict) -> list[dict]:
    """Rows of the normalized ``draws``: distributions sampled row by row, columns in sorted order."""
    if not draws:
        return []
    columns = {k: v for k, v in draws.items() if k not in ("n", "seed")}
    n = draws.get("n") or len(next(v for v in columns.values() if isinstance(v, list)))
    rng = np.random.default_rng(draws["seed"]) if "seed" in draws else None
    random_columns = sorted(k for k, v in columns.items() if isinstance(v, dict))
    rows = []
    for index in range(n):
        row = {}
        # Sorted-key order, one row at a time: changing n or adding an explicit column never
        # changes the values of an existing draw index.
        for name in random_columns:
            ((kind, args),) = columns[name].items()
            if kind == "uniform":
                value = float(rng.uniform(args[0], args[1]))
            elif kind == "log10_uniform":
                value = float(10.0 ** rng.uniform(args[0], args[1]))
            else:
                value = args[int(rng.integers(len(args)))]
            row[name] = normalize_value(name, value, "draws")
        for name, column in columns.items():
            if isinstance(column, list):
                row[name] = column[index]
        rows.append({**{k: row[k] for k in columns}, "draw": index})
    return rows


# -- expansion -------------------------------------------------------------------------------------
def expand(spec: GridSpec) -> list[dict]:
    """All records of ``spec``: ``product(axes) x draws`` (axes in order, last fastest; draws
    innermost), each merged with ``fixed``. ConfigError when a record is invalid or two records
    are the same configuration."""
    spec = spec.normalized()
    names = list(spec.axes)
    draw_rows = _draw_rows(spec.draws) or [{}]
    records = []
    for combo in itertools.product(*(spec.axes[name] for name in names)):
        base = {**spec.fixed, **dict(zip(names, combo))}
        for row in draw_rows:
            records.append({**base, **row})
    first_index: dict[str, int] = {}
    for i, record in enumerate(records):
        ident = config_id(record, f"grid configuration #{i} {show_value(record)}")
        if ident in first_index:
            j = first_index[ident]
            raise ConfigError(
                f"grid configurations #{j} {show_value(records[j])} and #{i} {show_value(record)} are "
                f"the same configuration (id {ident}; omitted keys mean their defaults)"
            )
        first_index[ident] = i
    return records


def count(spec: GridSpec) -> int:
    """How many records :func:`expand` gives (without expanding)."""
    spec = spec.normalized()
    return math.prod(len(v) for v in spec.axes.values()) * (len(_draw_rows(spec.draws)) or 1)


def describe(spec: GridSpec) -> str:
    """One line: ``"9,600 configurations: bits 8 × int_bits 6 × lr 2 × 100 draws"`` (expansion order)."""
    spec = spec.normalized()
    parts = [f"{name} {len(values)}" for name, values in spec.axes.items()]
    n_draws = len(_draw_rows(spec.draws))
    if n_draws:
        parts.append(f"{n_draws} draws")
    total = count(spec)
    noun = "configuration" if total == 1 else "configurations"
    return f"{total:,} {noun}" + (f": {' × '.join(parts)}" if parts else "")


# -- grid files ------------------------------------------------------------------------------------
def load_grid_file(path: str | os.PathLike) -> GridSpec:
    """A :class:`GridSpec` from a TOML (``.toml``) or JSON (``.json``) file with ``[axes]``,
    ``[draws]``, ``[fixed]``. An axis may be a list or a flag string (``bits = "1..8"``). In TOML,
    write ``bits = "float"`` for a float model (TOML has no null). ConfigError names the file."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"grid file {path} is a directory")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"grid file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"grid file {path}: cannot read ({exc.strerror or exc})") from None
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ConfigError(f"grid file {path}: unknown format {suffix or '(no suffix)'}; use .toml or .json")
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except UnicodeDecodeError:
        raise ConfigError(f"grid file {path} is not UTF-8 text") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"grid file {path}: not valid {suffix[1:].upper()} ({exc})") from None
    return GridSpec.from_dict(data, where=f"grid file {path}")
