"""Chow-Liu TAN structure: conditional mutual information given the class, maximum spanning tree.

Works on numpy only (no torch), so the structure can be learned and inspected anywhere.
"""

from __future__ import annotations

import numpy as np


def conditional_mutual_information(
    x: np.ndarray, y: np.ndarray, cardinalities: np.ndarray, n_classes: int
) -> np.ndarray:
    """Empirical ``I(X_i; X_j | C)`` for every feature pair, in nats.

    Parameters
    ----------
    x : ndarray (n, d) of int codes; y : ndarray (n,) of int labels.

    Returns
    -------
    ndarray (d, d), symmetric, zero diagonal.

    All pairwise joint counts come from one matrix product per class of the stacked one-hot
    encoding (``sum_i |X_i|`` columns), so there is no Python loop over feature pairs.
    """
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    cardinalities = np.asarray(cardinalities, dtype=np.int64)
    n, d = x.shape
    offsets = np.concatenate([[0], np.cumsum(cardinalities)[:-1]])
    width = int(cardinalities.sum())
    cmi = np.zeros((d, d))
    for c in range(n_classes):
        rows = x[y == c]
        n_c = rows.shape[0]
        if n_c == 0:
            continue
        onehot = np.zeros((n_c, width), dtype=np.float32)
        onehot[np.arange(n_c)[:, None], offsets[None, :] + rows] = 1.0
        joint = (onehot.T @ onehot).astype(np.float64)  # counts N(x_i=a, x_j=b, c)
        marginal = onehot.sum(axis=0).astype(np.float64)  # counts N(x_i=a, c)
        # p(a,b,c) * log( p(a,b|c) / (p(a|c) p(b|c)) ) = N_abc/n * log(N_abc * N_c / (N_ac N_bc))
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = joint / n * np.log(joint * n_c / np.outer(marginal, marginal))
        terms[joint == 0] = 0.0
        # Sum the block of each (feature i, feature j) pair (blocks are contiguous, non-empty).
        cmi += np.add.reduceat(np.add.reduceat(terms, offsets, axis=0), offsets, axis=1)
    np.fill_diagonal(cmi, 0.0)
    return np.maximum(cmi, 0.0)  # clamp float noise below zero


def maximum_spanning_tree_parents(weights: np.ndarray, root: int = 0) -> np.ndarray:
    """Prim's algorithm on a dense symmetric weight matrix; edges directed away from ``root``.

    Returns ``parents`` of shape (d,) with ``parents[root] = -1``. Ties go to the lowest index,
    so the result is deterministic.
    """
    d = weights.shape[0]
    parents = np.full(d, -1, dtype=np.int64)
    if d == 0:
        return parents
    if not 0 <= root < d:
        raise ValueError(f"root {root} outside 0..{d - 1}")
    in_tree = np.zeros(d, dtype=bool)
    in_tree[root] = True
    best = weights[root].astype(np.float64).copy()
    best_from = np.full(d, root, dtype=np.int64)
    for _ in range(d - 1):
        candidates = np.where(in_tree, -np.inf, best)
        node = int(np.argmax(candidates))
        in_tree[node] = True
        parents[node] = best_from[node]
        better = (~in_tree) & (weights[node] > best)
        best[better] = weights[node][better]
        best_from[better] = node
    return parents


def chow_liu_parents(
    x: np.ndarray, y: np.ndarray, cardinalities: np.ndarray, n_classes: int, root: int = 0
) -> np.ndarray:
    """Chow-Liu TAN parents (Friedman et al. 1997): ``-1`` for the root, else the parent feature."""
    cmi = conditional_mutual_information(x, y, cardinalities, n_classes)
    return maximum_spanning_tree_parents(cmi, root=root)
