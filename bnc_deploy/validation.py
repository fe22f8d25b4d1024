"""Input checks shared by datasets, the reference predictor and runtime adapters.

Every message names the feature (index and name) and the offending value and row, so a user can
find the bad input; nothing is clipped or wrapped silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from bnc_deploy.errors import InputError

__all__ = ["InputError", "check_codes", "out_of_range"]


def check_codes(
    x: ArrayLike, cardinalities: ArrayLike, feature_names: Sequence[str] | None = None, where: str = "input"
) -> NDArray[np.int64]:
    """Validate discrete feature codes; return them as an int64 array of shape (n, n_features).

    Parameters
    ----------
    x : array-like of shape (n, n_features) or (n_features,)
        Integer codes, feature ``i`` in ``0 .. cardinalities[i] - 1``. A single row is accepted.
    cardinalities : ndarray of shape (n_features,)
    feature_names : list of str, optional
    where : str
        Prefix for messages (e.g. the file or data set being checked).
    """
    cardinalities = np.asarray(cardinalities, dtype=np.int64)
    d = cardinalities.shape[0]
    arr = np.asarray(x)
    if arr.ndim == 1 and arr.shape[0] == d:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != d:
        raise InputError(f"{where}: expected discrete features of shape (n, {d}), got shape {arr.shape}")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        if (
            np.issubdtype(arr.dtype, np.floating)
            and arr.size
            and np.all(np.isfinite(arr))
            and np.all(arr == np.round(arr))
        ):
            hint = " (whole-valued floats: cast with .astype(int) if they are codes)"
        else:
            hint = ""
        raise InputError(f"{where}: discrete features must have an integer dtype, got {arr.dtype}{hint}")
    # Compare in the input's own dtype: a uint64 above 2^63 - 1 would wrap to a negative int64.
    bad = out_of_range(arr, cardinalities[None, :])
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        name = f" ({feature_names[col]!r})" if feature_names is not None else ""
        raise InputError(
            f"{where}: feature {col}{name} has value {arr[row, col].item()} in row {row}, "
            f"outside its range 0..{int(cardinalities[col]) - 1} ({int(bad.sum())} bad value(s) in all)"
        )
    return arr.astype(np.int64, copy=False)


def out_of_range(values: NDArray[np.integer[Any]], limits: ArrayLike) -> NDArray[np.bool_]:
    """Mask of integer ``values`` outside ``0 .. limits - 1`` (broadcast), exact for every integer dtype.

    Unsigned values are compared as unsigned (no wrap-around of uint64 values above 2^63 - 1), signed
    ones as int64; ``limits`` are positive.
    """
    bounds = np.asarray(limits, dtype=np.int64)
    if np.issubdtype(values.dtype, np.unsignedinteger):
        return values.astype(np.uint64, copy=False) >= np.maximum(bounds, 0).astype(np.uint64)
    values = values.astype(np.int64, copy=False)
    return (values < 0) | (values >= bounds)


def random_valid_codes(cardinalities: ArrayLike, n: int, seed: int = 0) -> NDArray[np.int64]:
    """``n`` seeded random valid code rows, int64 (n, D), for verifying and calibrating exports.

    The first two rows are the all-zero and the all-maximum codes (the first and last rows of
    every table). The draw is ``floor(u * |X_i|)`` with ``u ~ U[0, 1)`` from
    ``default_rng(seed).random``, so the rows are the same on every platform and version.
    """
    cards = np.asarray(cardinalities, dtype=np.int64)
    rng = np.random.default_rng(seed)
    rows = (rng.random((n, cards.shape[0])) * cards[None, :]).astype(np.int64)
    if n >= 2:
        rows[0], rows[1] = 0, cards - 1
    return rows
