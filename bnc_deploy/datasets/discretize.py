"""Fayyad–Irani MDL supervised discretization (Fayyad & Irani, IJCAI 1993).

Each feature is cut independently. The recursive procedure picks, inside the current interval,
the cut point that minimises the class-information entropy of the induced two-way partition and
keeps it only if the MDL criterion accepts it::

    Gain(A, T; S) > log2(N - 1) / N + Delta(A, T; S) / N
    Delta = log2(3**k - 2) - [k * Ent(S) - k1 * Ent(S1) - k2 * Ent(S2)]

with ``N = |S|`` and ``k, k1, k2`` the numbers of classes present in ``S, S1, S2``. Candidate
cut points are the midpoints between adjacent distinct training values.

Bin rule (the exporters replicate it with comparisons): the code of ``x`` for a feature with
sorted cut points ``c`` is the number of cut points strictly less than ``x``, i.e.
``np.searchsorted(c, x, side="left")``. A value equal to a cut point therefore falls in the lower
bin; this never happens for training values because a cut lies strictly between two of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnc_deploy.errors import ArtifactError, DatasetError, InputError

#: Candidate cuts whose weighted entropy is within this many bits of the minimum count as ties,
#: broken towards the smallest cut point; this makes the choice independent of float summation order.
ENTROPY_TIE_TOLERANCE = 1e-9

BIN_RULE = "code = number of cut points strictly less than x (np.searchsorted(cuts, x, side='left'))"


def _xlog2x(counts: np.ndarray) -> np.ndarray:
    """Elementwise ``c * log2(c)`` with ``0 log 0 = 0``."""
    counts = np.asarray(counts, dtype=np.float64)
    return counts * np.log2(np.maximum(counts, 1.0))


def _entropy(counts: np.ndarray) -> float:
    """Class entropy in bits of one class-count vector of shape (n_classes,)."""
    total = float(counts.sum())
    if total == 0:
        return 0.0
    return float((_xlog2x(total) - _xlog2x(counts).sum()) / total)


def _midpoint(a: float, b: float) -> float:
    """Cut point between adjacent distinct values ``a < b``: ``(a + b) / 2``.

    Falls back to ``a`` when the midpoint is not in ``[a, b)`` (``a, b`` adjacent floats, or
    overflow), so that the bin rule still separates ``a`` from ``b``.
    """
    mid = (a + b) / 2.0
    return float(mid) if a <= mid < b else float(a)


def _best_split(cum: np.ndarray, lo: int, hi: int) -> int | None:
    """Best MDL-accepted boundary of the distinct-value interval ``[lo, hi)``, or None.

    Parameters
    ----------
    cum : ndarray of shape (n_distinct + 1, n_classes)
        Cumulative class counts over the sorted distinct values (``cum[0] = 0``).
    lo, hi : int
        Interval of distinct-value indices; boundary ``i`` cuts between values ``i - 1`` and ``i``.
    """
    if hi - lo < 2:
        return None
    total = cum[hi] - cum[lo]
    n = float(total.sum())
    left = cum[lo + 1 : hi] - cum[lo]  # (n_candidates, n_classes): all boundaries at once
    right = total - left
    n_left = left.sum(axis=1)
    n_right = n - n_left
    # N * weighted entropy = sum over both sides of (n_s log n_s - sum_c c log c)
    n_ent = _xlog2x(n_left) - _xlog2x(left).sum(axis=1) + _xlog2x(n_right) - _xlog2x(right).sum(axis=1)
    weighted = n_ent / n
    best = int(np.flatnonzero(weighted <= weighted.min() + ENTROPY_TIE_TOLERANCE)[0])
    ent_s = _entropy(total)
    gain = ent_s - float(weighted[best])
    s1, s2 = left[best], right[best]
    k, k1, k2 = (int(np.count_nonzero(c)) for c in (total, s1, s2))
    delta = np.log2(3.0**k - 2.0) - (k * ent_s - k1 * _entropy(s1) - k2 * _entropy(s2))
    threshold = (np.log2(n - 1.0) + delta) / n
    return lo + 1 + best if gain > threshold else None


def _feature_cut_points(values: np.ndarray, labels: np.ndarray, n_classes: int) -> np.ndarray:
    """MDL cut points of one feature.

    Parameters
    ----------
    values : ndarray of shape (n_samples,), float64
    labels : ndarray of shape (n_samples,), int64 in ``0 .. n_classes - 1``

    Returns
    -------
    cuts : ndarray of shape (n_cuts,), float64, strictly increasing
    """
    distinct, inverse = np.unique(values, return_inverse=True)
    m = distinct.shape[0]
    # (distinct value x class) count table, built once; the recursion only slices its cumsum.
    table = np.bincount(inverse.ravel() * n_classes + labels, minlength=m * n_classes)
    cum = np.zeros((m + 1, n_classes), dtype=np.int64)
    np.cumsum(table.reshape(m, n_classes), axis=0, out=cum[1:])
    boundaries = []
    stack = [(0, m)]
    while stack:
        lo, hi = stack.pop()
        cut = _best_split(cum, lo, hi)
        if cut is not None:
            boundaries.append(cut)
            stack.extend(((lo, cut), (cut, hi)))
    boundaries.sort()
    return np.array([_midpoint(distinct[i - 1], distinct[i]) for i in boundaries], dtype=np.float64)


def _check_finite(x: np.ndarray, what: str, error: type[ValueError] = ValueError) -> None:
    """Raise ``error`` naming the first row/feature of ``x`` that is NaN or infinite."""
    bad = ~np.isfinite(x)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise error(f"{what}: feature {col} has non-finite value {x[row, col]} in row {row}")


def _as_float_matrix(x: Any, what: str, error: type[ValueError] = ValueError) -> np.ndarray:
    """``x`` as a finite float64 array of shape (n_samples, n_features), or ``error`` naming the problem."""
    try:
        x = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise error(f"{what}: features must be numeric ({exc})") from None
    if x.ndim != 2:
        raise error(f"{what}: expected features of shape (n_samples, n_features), got shape {x.shape}")
    _check_finite(x, what, error)
    return x


class FayyadIraniDiscretizer:
    """Supervised MDL discretizer of continuous features into integer codes (scikit-learn style).

    Attributes (after ``fit``)
    --------------------------
    cut_points_ : list of ndarray, one per feature, each of shape (n_cuts_i,), float64, sorted
    n_values_ : ndarray of shape (n_features,), int64
        Number of codes of each feature, ``len(cut_points_[i]) + 1``.
    n_features_in_ : int
    """

    def fit(self, X: Any, y: Any) -> FayyadIraniDiscretizer:
        """Learn the cut points.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), finite floats
        y : array-like of shape (n_samples,), class labels (any hashable values)
        """
        x = _as_float_matrix(X, "fit", DatasetError)
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            raise DatasetError(f"fit: expected labels of shape ({x.shape[0]},), got shape {y.shape}")
        if x.shape[0] == 0:
            raise DatasetError("fit: no training rows")
        classes, labels = np.unique(y, return_inverse=True)
        labels = labels.ravel().astype(np.int64)
        self.cut_points_ = [_feature_cut_points(x[:, j], labels, len(classes)) for j in range(x.shape[1])]
        self._set_derived()
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Map values to codes with the bin rule of the module docstring.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_), finite floats

        Returns
        -------
        codes : ndarray of shape (n_samples, n_features_in_), int64, ``0 .. n_values_[i] - 1``
        """
        if not hasattr(self, "cut_points_"):
            raise ValueError("transform: the discretizer is not fitted; call fit first")
        x = _as_float_matrix(X, "transform", InputError)
        if x.shape[1] != self.n_features_in_:
            raise InputError(
                f"transform: expected {self.n_features_in_} features, got {x.shape[1]} (X of shape {x.shape})"
            )
        codes = np.empty(x.shape, dtype=np.int64)
        for j, cuts in enumerate(self.cut_points_):
            codes[:, j] = np.searchsorted(cuts, x[:, j], side="left")
        return codes

    def fit_transform(self, X: Any, y: Any) -> np.ndarray:
        """``fit(X, y)`` then ``transform(X)``; returns int64 codes of shape (n_samples, n_features)."""
        return self.fit(X, y).transform(X)

    # -- storage ------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-safe description (floats round-trip exactly through ``json`` since it uses repr)."""
        if not hasattr(self, "cut_points_"):
            raise ValueError("to_dict: the discretizer is not fitted")
        return {
            "method": "fayyad-irani-mdl",
            "bin_rule": BIN_RULE,
            "n_features_in": int(self.n_features_in_),
            "cut_points": [[float(c) for c in cuts] for cuts in self.cut_points_],
        }

    @classmethod
    def from_dict(cls, data: dict) -> FayyadIraniDiscretizer:
        """Rebuild a fitted discretizer from ``to_dict()`` output (as stored in a model file); ArtifactError
        if it is inconsistent."""
        try:
            n_features = int(data["n_features_in"])
            raw_cuts = data["cut_points"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"from_dict: expected keys 'n_features_in' and 'cut_points' ({exc!r})") from None
        if data.get("method", "fayyad-irani-mdl") != "fayyad-irani-mdl":
            raise ArtifactError(f"from_dict: unknown method {data.get('method')!r}")
        if len(raw_cuts) != n_features:
            raise ArtifactError(f"from_dict: n_features_in is {n_features} but {len(raw_cuts)} cut lists are given")
        cut_points = []
        for j, cuts in enumerate(raw_cuts):
            cuts = np.asarray(cuts, dtype=np.float64).reshape(-1)
            if not np.all(np.isfinite(cuts)) or np.any(np.diff(cuts) <= 0):
                raise ArtifactError(
                    f"from_dict: cut points of feature {j} must be finite and strictly increasing, got {cuts.tolist()}"
                )
            cut_points.append(cuts)
        model = cls()
        model.cut_points_ = cut_points
        model._set_derived()
        return model

    def _set_derived(self) -> None:
        self.n_features_in_ = len(self.cut_points_)
        self.n_values_ = np.array([len(c) + 1 for c in self.cut_points_], dtype=np.int64)

    def __repr__(self) -> str:
        if not hasattr(self, "cut_points_"):
            return "FayyadIraniDiscretizer()"
        return (
            f"FayyadIraniDiscretizer(n_features_in_={self.n_features_in_}, "
            f"mean_values={float(self.n_values_.mean()) if self.n_features_in_ else 0.0:.2f})"
        )
