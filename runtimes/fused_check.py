"""The fused input check of the small-batch path of :meth:`RuntimeAdapter.run` and ``predict``.

``FusedCheck(cardinalities, raw)(x)`` returns exactly what :meth:`RuntimeAdapter.check` returns
for ``x`` (codes: int64 of shape (n, D), ``x`` itself or a view of it when ``x`` is int64, as
:func:`~bnc_deploy.validation.check_codes` returns; raw: a new float32 array of shape (n, D), as
:func:`~bnc_deploy.runtimes.base.check_raw` returns) when ``x`` is a NumPy array of 1 to
:data:`FAST_ROWS` rows (shape (n, D), or one row of shape (D,)) of a native-byte-order integer
(codes) or real (raw) dtype and every value passes the check. Otherwise it returns None and the
caller runs the full check, which raises the error for a bad input: a bad input gets the same
exception and message on either path, because only the full path ever reports one.

The check is conservative: None for an input the full check would accept costs speed only (e.g.
uint8 codes of a feature with 256 values; float64 raw values within half a float32 ulp of the
float32 maximum); an array for an input the full check would refuse never happens.

Codes, one comparison: the input viewed as unsigned integers of its own width (a negative value of
width w becomes at least 2^(w-1)) against per-feature upper bounds in that dtype, built once per
dtype and cached: ``min(|X_i|, 2^(w-1))`` for signed inputs, ``min(|X_i|, 2^w - 1)`` for unsigned
ones, so a value passes only if ``0 <= v < |X_i|``. Raw values: the float32 conversion, then a
count of non-finite values (float32 and narrower floats); for wider floats ``|x| <= float32 max``
is checked before the conversion instead, so it cannot overflow (NaN fails the comparison);
integers are always finite float32 numbers.

Thread-safe: a gate never changes once built, and two threads that build the same dtype's gate at
once build equal ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["FAST_ROWS", "FusedCheck"]

#: Most rows the small-batch path takes; larger inputs take the chunked path (the per-call costs
#: this path saves are then a small part of the call).
FAST_ROWS = 64
_F32_MAX = float(np.finfo(np.float32).max)

_Gate = Callable[[NDArray[Any]], NDArray[Any] | None]


class FusedCheck:
    """The small-batch check of one adapter's inputs (see the module docstring)."""

    __slots__ = ("cardinalities", "raw", "n_features", "_gates")

    def __init__(self, cardinalities: NDArray[np.int64], raw: bool) -> None:
        #: The adapter's array (the adapter rebuilds its check when it holds another one).
        self.cardinalities = cardinalities
        self.raw = raw
        self.n_features = int(cardinalities.shape[0])
        self._gates: dict[np.dtype[Any], _Gate | None] = {}

    def __call__(self, x: object) -> NDArray[Any] | None:
        """The checked rows of a small valid batch ``x``; None when ``x`` needs the full check."""
        if type(x) is not np.ndarray:
            return None
        shape = x.shape
        if len(shape) == 1:
            if shape[0] != self.n_features:
                return None
            x = x[None, :]  # one row, as the full checks take it
        elif len(shape) != 2 or shape[1] != self.n_features or not 0 < shape[0] <= FAST_ROWS:
            return None
        try:
            gate = self._gates[x.dtype]
        except KeyError:
            gate = self._gates[x.dtype] = self._gate(x.dtype)
        return None if gate is None else gate(x)

    def _gate(self, dtype: np.dtype[Any]) -> _Gate | None:
        """The check for inputs of ``dtype`` (None: the dtype always takes the full check)."""
        if not dtype.isnative:
            return None
        if self.raw:
            if dtype.kind in "iu":
                return _raw_integers
            if dtype.kind == "f":
                return _raw_narrow_floats if dtype.itemsize <= 4 else _raw_wide_floats
            return None
        if dtype.kind not in "iu":
            return None
        bits = 8 * dtype.itemsize
        unsigned = np.dtype(f"u{dtype.itemsize}")
        top = 2 ** (bits - 1) if dtype.kind == "i" else 2**bits - 1
        # In Python integers: 2^63 does not fit the int64 cardinalities.
        bounds = np.array([[min(int(c), top) for c in self.cardinalities]], dtype=unsigned)
        bounds.flags.writeable = False

        def codes(x: NDArray[Any]) -> NDArray[np.int64] | None:
            if np.count_nonzero(x.view(unsigned) >= bounds):
                return None
            return x.astype(np.int64, copy=False)

        return codes


def _raw_integers(x: NDArray[Any]) -> NDArray[np.float32]:
    return x.astype(np.float32)


def _raw_narrow_floats(x: NDArray[Any]) -> NDArray[np.float32] | None:
    values = x.astype(np.float32)
    return values if np.count_nonzero(np.isfinite(values)) == values.size else None


def _raw_wide_floats(x: NDArray[Any]) -> NDArray[np.float32] | None:
    if np.count_nonzero(np.abs(x) <= _F32_MAX) != x.size:
        return None
    return x.astype(np.float32)
