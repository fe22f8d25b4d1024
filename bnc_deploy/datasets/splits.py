"""The paper's split protocols, and discretization fitted on the training part only.

* hold-out (letter, usps, mnist-mean2x2): a seeded random permutation; its first ``round(2N/3)`` rows
  train, the rest test.
* 5-fold cross-validation (satimage): a seeded permutation cut into 5 near-equal consecutive
  chunks (``np.array_split``); fold ``k`` (1-based) tests on chunk ``k`` and trains on the rest.
* the source's own train/test split (mnist: 60,000 / 10,000): rows ``0 .. n_train - 1`` train,
  the rest test, in file order; one fold, and the seed plays no part.

The first two use ``np.random.default_rng(seed).permutation``.
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.errors import InputError

from .base import DatasetError, DiscreteDataset
from .discretize import FayyadIraniDiscretizer
from .loaders import RawData

HOLDOUT_PROTOCOL = "2/3-1/3"
CV_PROTOCOL = "5-fold CV"
#: The source's fixed split (``RawData.n_train``), e.g. MNIST's standard 60,000 / 10,000.
TRAIN_TEST_PROTOCOL = "standard train/test"


def holdout_indices(n_rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the 2/3 train, 1/3 test split.

    Returns
    -------
    train, test : ndarray of shape (round(2 n / 3),) and (n - round(2 n / 3),), int64
    """
    if n_rows < 2:
        raise DatasetError(f"cannot split {n_rows} rows into a training and a test part")
    order = np.random.default_rng(seed).permutation(n_rows)
    n_train = (2 * n_rows + 1) // 3  # round(2n/3); 2n/3 never ends in .5, so this is exact
    return order[:n_train], order[n_train:]


def kfold_indices(n_rows: int, n_folds: int, fold: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of fold ``fold`` (1-based) of seeded ``n_folds``-fold cross-validation.

    Returns
    -------
    train, test : ndarray of int64; test is the fold's chunk (size ``n // n_folds`` or one more),
        train the other chunks in permutation order.
    """
    if not 1 <= fold <= n_folds:
        raise DatasetError(f"fold {fold} out of range, valid folds are 1..{n_folds}")
    if n_rows < n_folds:
        raise DatasetError(f"cannot cut {n_rows} rows into {n_folds} folds")
    chunks = np.array_split(np.random.default_rng(seed).permutation(n_rows), n_folds)
    test = chunks[fold - 1]
    train = np.concatenate([c for k, c in enumerate(chunks) if k != fold - 1])
    return train, test


def train_test_indices(n_rows: int, n_train: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of a fixed split: ``0 .. n_train - 1`` train, ``n_train .. n_rows - 1`` test."""
    if n_train is None:
        raise DatasetError(
            f"the {TRAIN_TEST_PROTOCOL!r} protocol needs data with a fixed training part "
            f"(RawData.n_train), and this data has none"
        )
    if not 1 <= n_train < n_rows:
        raise DatasetError(f"fixed split of {n_rows} rows with {n_train} training rows leaves a part empty")
    return np.arange(n_train), np.arange(n_train, n_rows)


def split_indices(
    n_rows: int, protocol: str, fold: int, seed: int, n_train: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Dispatch on ``protocol`` (``HOLDOUT_PROTOCOL``, ``CV_PROTOCOL`` or ``TRAIN_TEST_PROTOCOL``,
    which takes its split from ``n_train``); fold is 1-based."""
    if protocol in (HOLDOUT_PROTOCOL, TRAIN_TEST_PROTOCOL):
        if fold != 1:
            raise DatasetError(f"fold {fold} out of range, valid folds are 1..1 ({protocol} split)")
        return holdout_indices(n_rows, seed) if protocol == HOLDOUT_PROTOCOL else train_test_indices(n_rows, n_train)
    if protocol == CV_PROTOCOL:
        return kfold_indices(n_rows, 5, fold, seed)
    raise DatasetError(
        f"unknown split protocol {protocol!r}, expected {HOLDOUT_PROTOCOL!r}, {CV_PROTOCOL!r} "
        f"or {TRAIN_TEST_PROTOCOL!r}"
    )


def _protocol_info(raw: RawData, protocol: str, seed: int, n_rows: int) -> dict:
    # A fixed split ignores the seed: recording one would suggest another seed gives another split.
    seed_info = {} if protocol == TRAIN_TEST_PROTOCOL else {"split_seed": seed}
    return {**raw.info, "protocol": protocol, **seed_info, "n_rows_total": n_rows}


def discretize_split(name: str, raw: RawData, protocol: str, *, fold: int = 1, seed: int = 0) -> DiscreteDataset:
    """Split ``raw`` by ``protocol`` and discretize with Fayyad–Irani fitted on the training part.

    The test part is coded with the training cut points (so unseen values fall into the bins of
    the training data); ``cardinalities`` are the discretizer's ``n_values_``.
    """
    train, test = split_indices(raw.x.shape[0], protocol, fold, seed, raw.n_train)
    try:
        discretizer = FayyadIraniDiscretizer().fit(raw.x[train], raw.y[train])
        x_train, x_test = discretizer.transform(raw.x[train]), discretizer.transform(raw.x[test])
    except (DatasetError, InputError) as exc:  # fit: the training part; transform: the test part
        raise DatasetError(f"{raw.source}: {exc}") from None
    info = _protocol_info(raw, protocol, seed, raw.x.shape[0])
    info["discretization"] = "Fayyad-Irani MDL fitted on the training part"
    return DiscreteDataset(
        name=name,
        x_train=x_train,
        y_train=raw.y[train],
        x_test=x_test,
        y_test=raw.y[test],
        cardinalities=discretizer.n_values_,
        class_names=raw.class_names,
        feature_names=raw.feature_names,
        fold=fold,
        n_folds=5 if protocol == CV_PROTOCOL else 1,
        discretizer=discretizer,
        source=raw.source,
        info=info,
    )


def discrete_split(
    name: str, raw: RawData, cardinality: int, protocol: str, *, fold: int = 1, seed: int = 0
) -> DiscreteDataset:
    """Split data that is already discrete with the declared value range ``0 .. cardinality - 1``."""
    codes = raw.x.astype(np.int64)
    if not np.array_equal(codes, raw.x):
        raise DatasetError(f"{raw.source}: features must be integers to be used without discretization")
    train, test = split_indices(raw.x.shape[0], protocol, fold, seed, raw.n_train)
    info = _protocol_info(raw, protocol, seed, raw.x.shape[0])
    info["discretization"] = "none (already discrete)"
    return DiscreteDataset(
        name=name,
        x_train=codes[train],
        y_train=raw.y[train],
        x_test=codes[test],
        y_test=raw.y[test],
        cardinalities=np.full(raw.x.shape[1], cardinality, dtype=np.int64),
        class_names=raw.class_names,
        feature_names=raw.feature_names,
        fold=fold,
        n_folds=5 if protocol == CV_PROTOCOL else 1,
        source=raw.source,
        info=info,
    )
