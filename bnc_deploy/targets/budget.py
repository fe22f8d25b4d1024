"""Device budgets and measured costs: what a model may cost on a target, and what it was measured to cost.

Axes (one name each; the budget's field is ``max_<axis>``, the flag ``--max-<axis>`` with dashes):

============== ======================= =========================================================
axis           unit                    meaning
============== ======================= =========================================================
flash          bytes                   code + constant tables the target keeps in flash/ROM
ram            bytes                   static data + worst-case stack, or an interpreter's arena
ops            operations per row      the analytic operations of one prediction (``costs.py``)
bits           bits                    the model's size in bits (``B x |theta|``, ``costs.py``)
file_bytes     bytes                   size of the exported file(s)
latency_us     microseconds            batch-1 latency measured on this host
instructions   instructions per row    executed instructions of one prediction (emulated)
============== ======================= =========================================================

Sizes accept units (:func:`parse_size`): ``B``, ``kB`` = 1000, ``KiB`` = 1024, ``MB``, ``MiB``,
``GB``, ``GiB``; counts accept ``k``/``M``/``G`` (powers of 1000); times ``us``, ``ms``, ``s``.

A budget is **strict**: a measured cost fits when it is at most the limit; one unit more is
exceeded (:meth:`Budget.exceeded`). An axis the budget limits but the measurement left ``None``
is *unmeasured* (:meth:`Budget.unmeasured`) and never fits (:meth:`Budget.fits`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

#: Axis names, in report order.
AXES = ("flash", "ram", "ops", "bits", "file_bytes", "latency_us", "instructions")
#: Axis -> unit, for messages and tables.
UNITS = {
    "flash": "B",
    "ram": "B",
    "ops": "ops/row",
    "bits": "bits",
    "file_bytes": "B",
    "latency_us": "us",
    "instructions": "instr/row",
}

_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2, "gb": 1000**3, "gib": 1024**3}
_COUNT_UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3}
_TIME_UNITS = {"": 1.0, "us": 1.0, "µs": 1.0, "ms": 1000.0, "s": 1e6}
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-zµ]*)\s*$")


def _flag(axis_or_flag: str) -> str:
    name = axis_or_flag.lstrip("-")
    if not name.startswith("max"):
        name = f"max_{name}"
    return "--" + name.replace("_", "-")


def _split(value: Any, flag: str, what: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise ValueError(f"{flag}: expected {what}, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{flag}: expected {what} >= 0, got {value}")
        return float(value), ""
    m = _NUMBER.match(str(value))
    if m is None:
        raise ValueError(f"{flag}: expected {what}, got {value!r}")
    return float(m.group(1)), m.group(2).lower()


def parse_size(value: Any, flag: str = "--max-flash") -> int:
    """Bytes from ``value``: a non-negative int, or a number with a unit (``2KiB`` -> 2048, ``1.5kB``
    -> 1500, ``512B``, ``4MiB``; a bare ``K``/``M``/``G`` is refused as ambiguous). A fraction of a byte is refused.
    ValueError naming ``flag`` and the value otherwise."""
    what = "a size in bytes (e.g. 2048, 2KiB, 1.5kB, 1MiB)"
    number, unit = _split(value, flag, what)
    if unit not in _SIZE_UNITS:
        raise ValueError(f"{flag}: unknown size unit {unit!r} in {value!r}; {what}")
    total = number * _SIZE_UNITS[unit]
    if total != math.floor(total):
        raise ValueError(f"{flag}: {value!r} is not a whole number of bytes")
    return int(total)


def parse_count(value: Any, flag: str = "--max-ops") -> int:
    """A non-negative whole count: an int, or a number with ``k``/``M``/``G`` (powers of 1000:
    ``20k`` -> 20000). ValueError naming ``flag`` and the value otherwise."""
    what = "a whole count (e.g. 5000, 20k, 1.5M)"
    number, unit = _split(value, flag, what)
    if unit not in _COUNT_UNITS:
        raise ValueError(f"{flag}: unknown count unit {unit!r} in {value!r}; {what}")
    total = number * _COUNT_UNITS[unit]
    if total != math.floor(total):
        raise ValueError(f"{flag}: {value!r} is not a whole count")
    return int(total)


def parse_time_us(value: Any, flag: str = "--max-latency-us") -> float:
    """Microseconds: a non-negative number (read as microseconds) or one with ``us``, ``ms`` or
    ``s`` (``1.5ms`` -> 1500.0). ValueError naming ``flag`` and the value otherwise."""
    what = "a time (e.g. 250, 250us, 1.5ms, 0.01s)"
    if isinstance(value, float) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{flag}: expected {what} >= 0, got {value!r}")
        return value
    number, unit = _split(value, flag, what)
    if unit not in _TIME_UNITS:
        raise ValueError(f"{flag}: unknown time unit {unit!r} in {value!r}; {what}")
    return number * _TIME_UNITS[unit]


#: Axis -> parser of a limit for it.
PARSERS = {
    "flash": parse_size,
    "ram": parse_size,
    "ops": parse_count,
    "bits": parse_count,
    "file_bytes": parse_size,
    "latency_us": parse_time_us,
    "instructions": parse_count,
}


@dataclass(frozen=True)
class Measured:
    """Costs of one model on one target, one field per axis (None: not measured).

    Bytes, counts and bits are ints; ``latency_us`` a float. ``Target.estimate`` returns lower
    bounds in the same shape (``flash``/``file_bytes`` at least the table bytes)."""

    flash: int | None = None
    ram: int | None = None
    ops: int | None = None
    bits: int | None = None
    file_bytes: int | None = None
    latency_us: float | None = None
    instructions: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{axis: value}`` for every axis, None included (JSON-ready)."""
        return asdict(self)

    def get(self, axis: str) -> int | float | None:
        """The value of ``axis``; ValueError naming the axes for an unknown one."""
        if axis not in AXES:
            raise ValueError(f"unknown budget axis {axis!r}; axes: {', '.join(AXES)}")
        return getattr(self, axis)

    def measured_axes(self) -> tuple[str, ...]:
        """Axes with a value, in :data:`AXES` order."""
        return tuple(a for a in AXES if getattr(self, a) is not None)


@dataclass(frozen=True)
class Budget:
    """Limits on a model's costs, one optional field per axis (None: unlimited).

    Build it from flag values with :meth:`from_flags` (units parsed) or with numbers directly
    (checked: non-negative ints, a non-negative finite latency)."""

    max_flash: int | None = None
    max_ram: int | None = None
    max_ops: int | None = None
    max_bits: int | None = None
    max_file_bytes: int | None = None
    max_latency_us: float | None = None
    max_instructions: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            axis = f.name[len("max_") :]
            if axis == "latency_us":
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                ok = ok and value >= 0
            else:
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            if not ok:
                raise ValueError(f"{_flag(axis)}: expected a non-negative {UNITS[axis]} limit, got {value!r}")

    @classmethod
    def from_flags(cls, values: Mapping[str, Any]) -> Budget:
        """A budget from flag values: keys are axes (``flash``), fields (``max_flash``) or flags
        (``--max-flash``); values are strings with units or numbers; None values are skipped.
        ValueError naming the flag for an unknown key or a bad value."""
        limits: dict[str, Any] = {}
        for key, value in values.items():
            if value is None:
                continue
            name = key.lstrip("-").replace("-", "_")
            axis = name[len("max_") :] if name.startswith("max_") else name
            if axis not in AXES:
                known = ", ".join(_flag(a) for a in AXES)
                raise ValueError(f"unknown budget {key!r}; budgets: {known}")
            limits[f"max_{axis}"] = PARSERS[axis](value, _flag(axis))
        return cls(**limits)

    def limits(self) -> dict[str, int | float]:
        """``{axis: limit}`` of the limited axes, in :data:`AXES` order."""
        return {a: getattr(self, f"max_{a}") for a in AXES if getattr(self, f"max_{a}") is not None}

    def axes(self) -> tuple[str, ...]:
        """The limited axes, in :data:`AXES` order."""
        return tuple(self.limits())

    def exceeded(self, measured: Measured) -> list[tuple[str, int | float, int | float]]:
        """``(axis, measured, limit)`` for each limited axis whose measured value is **greater**
        than the limit (equal fits; one more is exceeded). Unmeasured axes are not listed here:
        see :meth:`unmeasured`."""
        out = []
        for axis, limit in self.limits().items():
            value = measured.get(axis)
            if value is not None and value > limit:
                out.append((axis, value, limit))
        return out

    def unmeasured(self, measured: Measured) -> list[str]:
        """Limited axes that ``measured`` has no value for (they cannot be reported as fitting)."""
        return [axis for axis in self.axes() if measured.get(axis) is None]

    def fits(self, measured: Measured) -> bool:
        """True when every limited axis was measured and none is exceeded."""
        return not self.exceeded(measured) and not self.unmeasured(measured)

    def describe(self, measured: Measured) -> list[str]:
        """One line per exceeded or unmeasured axis (``flash 2049 B > 2048 B``), for reports."""
        lines = [f"{a} {v:g} {UNITS[a]} > {lim:g} {UNITS[a]}" for a, v, lim in self.exceeded(measured)]
        return lines + [f"{a} not measured" for a in self.unmeasured(measured)]

    def to_dict(self) -> dict[str, int | float | None]:
        """``{max_axis: limit or None}`` (JSON-ready)."""
        return asdict(self)


__all__ = ["AXES", "UNITS", "Budget", "Measured", "parse_count", "parse_size", "parse_time_us"]
