"""Bounded memory for big inputs: validate and evaluate rows a slice at a time.

The reference predictors and the runtime adapters (:mod:`bnc_deploy.runtimes.base`) run their
inputs through :func:`run_in_chunks`: every slice of ``chunk_rows`` rows is validated (so an
int32 or uint8 input is widened to int64 one slice at a time, not as a whole), evaluated, and
written into outputs preallocated for all rows. The memory beyond the input and the outputs is
that of one slice, whatever the number of rows; the results are the same as in one call, because
every output row depends on its input row only.

An invalid value is reported as if the whole input had been checked at once: the row is counted
from the start of the input, and the count of bad values is over the whole input.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from bnc_deploy.errors import InputError

__all__ = ["run_in_chunks", "rows_per_chunk"]


def rows_per_chunk(bytes_per_row: int, budget_bytes: int, lo: int = 64, hi: int = 65536) -> int:
    """Rows per slice so that a temporary of ``bytes_per_row`` per row stays near ``budget_bytes``."""
    return int(min(hi, max(lo, budget_bytes // max(1, int(bytes_per_row)))))


def run_in_chunks(
    x,
    check: Callable,
    evaluate: Callable,
    chunk_rows: int | None,
    *,
    n_features: int,
    kinds: str = "iu",
    cardinalities=None,
) -> tuple:
    """``evaluate(check(rows), first_row)`` over slices of ``chunk_rows`` rows of ``x``, joined.

    ``evaluate`` returns a tuple of arrays with one row per input row (or None entries, passed
    through); the result is the same tuple for all rows of ``x``, in arrays preallocated at the
    first slice. One call (no slicing, the exact old behaviour) when ``chunk_rows`` is None, ``x``
    has at most ``chunk_rows`` rows or is not an (n, ``n_features``) array of a dtype kind in
    ``kinds`` (a shape or dtype error is then reported by ``check`` for the whole input). ``cardinalities`` (codes
    inputs) lets a bad value in a later slice be reported with the whole input's count.
    """
    arr = np.asarray(x)
    if (
        chunk_rows is None
        or arr.ndim != 2
        or arr.shape[0] <= chunk_rows
        or arr.shape[1] != n_features
        or arr.dtype.kind not in kinds
    ):
        return tuple(evaluate(check(arr), 0))
    n = arr.shape[0]
    outputs = None
    for start in range(0, n, chunk_rows):
        try:
            checked = check(arr[start : start + chunk_rows])
        except InputError as exc:
            raise _whole_input_error(exc, arr, start, chunk_rows, cardinalities) from None
        parts = tuple(evaluate(checked, start))
        if outputs is None:
            outputs = tuple(None if p is None else np.empty((n,) + p.shape[1:], dtype=p.dtype) for p in parts)
        stop = start + checked.shape[0]
        for out, part in zip(outputs, parts):
            if out is not None:
                out[start:stop] = part
    return outputs


def _whole_input_error(exc: InputError, arr: np.ndarray, start: int, chunk_rows: int, cardinalities) -> InputError:
    """The InputError of the slice at ``start`` (every earlier row passed) as the whole input's."""
    message = str(exc)
    rows = list(re.finditer(r" in row (\d+)", message))
    if start == 0 or not rows:
        return exc
    m = rows[-1]  # the message's row is its last " in row N" (a feature name may contain one too)
    message = f"{message[: m.start(1)]}{int(m.group(1)) + start}{message[m.end(1) :]}"
    counts = list(re.finditer(r"\((\d+) bad value\(s\) in all\)", message))
    if counts and cardinalities is not None:
        cards = np.asarray(cardinalities, dtype=np.int64)[None, :]
        bad = 0
        for i in range(start, arr.shape[0], chunk_rows):
            part = arr[i : i + chunk_rows]
            if part.dtype.kind == "u":  # compared unsigned, as the check does (no uint64 wrap-around)
                bad += int((part.astype(np.uint64, copy=False) >= cards.astype(np.uint64)).sum())
            else:
                part = part.astype(np.int64, copy=False)
                bad += int(((part < 0) | (part >= cards)).sum())
        m = counts[-1]
        message = f"{message[: m.start(1)]}{bad}{message[m.end(1) :]}"
    return type(exc)(message)
