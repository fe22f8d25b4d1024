"""The one dataset type of the toolkit: discrete features, labels, cardinalities, one fold."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bnc_deploy.errors import DatasetError, InputError
from bnc_deploy.validation import check_codes, out_of_range

__all__ = ["DatasetError", "DiscreteDataset"]


@dataclass
class DiscreteDataset:
    """One train/test fold of a dataset whose features are discrete.

    Feature ``i`` takes values ``0 .. cardinalities[i] - 1``; labels take ``0 .. n_classes - 1``.

    Attributes
    ----------
    name : str
        Short name (``"letter"``, ``"digits"``, a file stem, ...).
    x_train, x_test : ndarray of shape (n_rows, n_features), dtype int64
    y_train, y_test : ndarray of shape (n_rows,), dtype int64
    cardinalities : ndarray of shape (n_features,), dtype int64
        Number of values of each feature (at least 1).
    class_names : list of str, length n_classes
    feature_names : list of str, length n_features
    x_val, y_val : ndarray or None
        Optional validation split carved from the training part (see ``with_validation``).
    fold, n_folds : int
        1-based fold index and number of folds of the protocol (1 and 1 for a single split).
    discretizer : object or None
        The fitted discretizer (``bnc_deploy.datasets.discretize.FayyadIraniDiscretizer``) that mapped raw
        values to these codes, or None when the data came discrete.
    source : str
        Where the data came from (path or ``"sklearn:digits"``), for the model's metadata.
    info : dict
        Loader-specific facts (split seed, protocol, ...), stored in the model's metadata.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    cardinalities: np.ndarray
    class_names: list[str]
    feature_names: list[str]
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None
    fold: int = 1
    n_folds: int = 1
    discretizer: Any = None
    source: str = ""
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cardinalities = np.asarray(self.cardinalities, dtype=np.int64)
        for part in ("train", "test", "val"):
            x = getattr(self, f"x_{part}")
            y = getattr(self, f"y_{part}")
            if x is None and y is None and part == "val":
                continue
            x = np.asarray(x)
            y = np.asarray(y)
            if not (np.issubdtype(x.dtype, np.integer) and np.issubdtype(y.dtype, np.integer)):
                raise DatasetError(
                    f"{self.name}: {part} features and labels must be integers, got {x.dtype} and {y.dtype}"
                )
            self.validate_rows(x, y, part)  # before the cast: a uint64 above 2^63 - 1 would wrap
            setattr(self, f"x_{part}", x.astype(np.int64, copy=False))
            setattr(self, f"y_{part}", y.astype(np.int64, copy=False))

    # -- shape facts --------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return int(self.cardinalities.shape[0])

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    # -- validation ---------------------------------------------------------------------------
    def validate_rows(self, x: np.ndarray, y: np.ndarray | None, part: str = "data") -> None:
        """Raise DatasetError naming the first bad row/feature/value of ``x`` (and ``y``)."""
        try:
            check_codes(x, self.cardinalities, self.feature_names, where=f"{self.name} {part}")
        except InputError as exc:
            raise DatasetError(str(exc)) from None
        if y is not None and (y.ndim != 1 or y.shape[0] != x.shape[0]):
            raise DatasetError(f"{self.name} {part}: {x.shape[0]} feature rows but labels of shape {y.shape}")
        bad = out_of_range(np.asarray(y), self.n_classes) if y is not None and y.size else None
        if bad is not None and bad.any():
            row = int(np.argmax(bad))
            raise DatasetError(
                f"{self.name} {part}: label {np.asarray(y)[row].item()} in row {row} is outside 0..{self.n_classes - 1}"
            )

    # -- protocol helpers ---------------------------------------------------------------------
    def with_validation(self, fraction: float, seed: int = 0) -> DiscreteDataset:
        """Return a copy whose ``x_val/y_val`` are a seeded ``fraction`` of the training rows.

        The rows move out of ``x_train``; the test split is untouched.
        """
        if not 0.0 < fraction < 1.0:
            raise DatasetError(f"validation fraction must be in (0, 1), got {fraction}")
        n = self.x_train.shape[0]
        n_val = int(round(fraction * n))
        if n_val < 1 or n_val >= n:
            raise DatasetError(
                f"{self.name}: validation fraction {fraction} of {n} training rows is empty or everything"
            )
        order = np.random.default_rng(seed).permutation(n)
        val, train = order[:n_val], order[n_val:]
        info = dict(self.info, validation_fraction=fraction, validation_seed=seed)
        return DiscreteDataset(
            name=self.name,
            x_train=self.x_train[train],
            y_train=self.y_train[train],
            x_test=self.x_test,
            y_test=self.y_test,
            cardinalities=self.cardinalities,
            class_names=self.class_names,
            feature_names=self.feature_names,
            x_val=self.x_train[val],
            y_val=self.y_train[val],
            fold=self.fold,
            n_folds=self.n_folds,
            discretizer=self.discretizer,
            source=self.source,
            info=info,
        )

    def describe(self) -> dict:
        """Facts for a model's metadata (JSON-serialisable)."""
        return {
            "name": self.name,
            "source": self.source,
            "fold": self.fold,
            "n_folds": self.n_folds,
            "n_train": int(self.x_train.shape[0]),
            "n_test": int(self.x_test.shape[0]),
            "n_val": 0 if self.x_val is None else int(self.x_val.shape[0]),
            "n_features": self.n_features,
            "n_classes": self.n_classes,
            "mean_values_per_feature": float(self.cardinalities.mean()) if self.n_features else 0.0,
            **self.info,
        }
