"""Plain helpers the tests import by name (``from support import ...``).

Kept out of ``conftest.py``: every folder's conftest is imported as the top-level module
``conftest``, so ``from conftest import ...`` would depend on which folder's conftest pytest loaded
last (``tests/reliability/`` has its own).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bnc_deploy.datasets.base import DiscreteDataset

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATASETS = REPO_ROOT.parent / "shared" / "datasets"


def make_synthetic_dataset(
    n_train=300, n_test=150, cardinalities=(3, 4, 2, 5, 1, 3), n_classes=3, seed=0, name="synthetic"
) -> DiscreteDataset:
    """A small learnable problem: each feature is a noisy function of the class (and its left neighbour)."""
    rng = np.random.default_rng(seed)
    cards = np.asarray(cardinalities)
    n = n_train + n_test
    y = rng.integers(0, n_classes, n)
    x = np.zeros((n, len(cards)), dtype=np.int64)
    for i, k in enumerate(cards):
        signal = (y + (x[:, i - 1] if i else 0)) % k
        noise = rng.integers(0, k, n)
        x[:, i] = np.where(rng.random(n) < 0.7, signal, noise)
    return DiscreteDataset(
        name=name,
        x_train=x[:n_train],
        y_train=y[:n_train],
        x_test=x[n_train:],
        y_test=y[n_train:],
        cardinalities=cards,
        class_names=[f"c{c}" for c in range(n_classes)],
        feature_names=[f"f{i}" for i in range(len(cards))],
        source="synthetic",
    )
