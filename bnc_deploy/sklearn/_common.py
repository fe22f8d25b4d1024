"""What the two classifiers share: integer-code input checks, label encoding, the training data set,
the seed, and the prediction surface computed from an artifact's reference predictor.

Input contract (``fit`` and every prediction method): ``X`` of shape (n_samples, n_features) holds
non-negative integer codes, feature ``i`` in ``0 .. n_values_[i] - 1``. Integer and boolean dtypes
are taken as they are; object arrays are read as floats; floats are accepted only when every value
is a whole number (then they are cast exactly), any other float raises a ValueError naming the
feature, row and value, because rounding would hide a missing discretization step. Out-of-range
codes at prediction raise the reference predictor's :class:`~bnc_deploy.errors.InputError` (a
ValueError) naming the feature.

Labels: any values ``np.unique`` can sort (ints, strings, ...); ``classes_`` is that order and the
artifact stores ``class_names = [str(c) for c in classes_]``. The original labels are also stored,
JSON-safe, in ``metadata["sklearn"]["classes"]`` so :func:`bnc_deploy.sklearn.from_artifact`
restores them (see :mod:`bnc_deploy.sklearn.convert` for the rule).

Binary decision function: scikit-learn's convention, ``scores[:, 1] - scores[:, 0]`` of shape
(n_samples,), positive for ``classes_[1]`` (a tie, 0, is ``classes_[0]``, as ``predict``'s first
maximum); with more classes the (n_samples, n_classes) scores themselves. The scores are what
:class:`~bnc_deploy.reference.bnc.ReferencePredictor` / :class:`~bnc_deploy.reference.dnn.DNNReferencePredictor`
return (``log_joint`` / ``logits``), which are the exported graphs' outputs.
"""

from __future__ import annotations

import json
import numbers

import numpy as np
from scipy.special import logsumexp
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from bnc_deploy.datasets.base import DiscreteDataset

#: Name of the data set an estimator trains on (the model file's ``metadata["data"]["name"]``).
DATASET_NAME = "sklearn"
#: Rows of the training set kept as the artifact's check set (the trainers' "test" split).
CHECK_ROWS = 1000


def as_codes(x: np.ndarray, where: str) -> np.ndarray:
    """Validated 2-D ``x`` as int64 codes; ValueError for non-integer floats or negative values.

    An object array is converted to float64 first (a non-numeric entry raises NumPy's TypeError or
    ValueError), then checked like floats.
    """
    if x.dtype == object:
        x = x.astype(np.float64)
    if x.dtype == bool:
        return x.astype(np.int64)
    if np.issubdtype(x.dtype, np.floating):
        whole = x == np.floor(x)
        if not whole.all():
            row, col = map(int, np.argwhere(~whole)[0])
            raise ValueError(
                f"{where}: feature {col} has non-integer value {x[row, col].item()!r} in row {row}; this estimator "
                "takes integer codes (discretize continuous features first, e.g. with FayyadIraniDiscretizer)"
            )
        if x.size and np.abs(x).max() >= 2.0**53:
            raise ValueError(f"{where}: codes must be below 2**53 when given as floats")
    elif not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"{where}: features must be integer codes, got dtype {x.dtype}")
    if np.issubdtype(x.dtype, np.unsignedinteger):
        if x.size and x.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{where}: code {x.max()} does not fit int64")
    elif x.size and x.min() < 0:
        row, col = map(int, np.argwhere(x < 0)[0])
        # scikit-learn's wording for positive-only estimators, then which value it was.
        raise ValueError(
            f"Negative values in data passed to {where}: feature {col} has value {x[row, col].item()!r} "
            f"in row {row}; codes are >= 0"
        )
    return x.astype(np.int64)


def check_input(estimator, X, y=None, *, fit: bool):
    """``validate_data`` then :func:`as_codes`; returns ``codes`` (predicting) or ``(codes, y)`` (fitting)."""
    where = f"{type(estimator).__name__}.{'fit' if fit else 'predict'}"
    if not fit:
        x = validate_data(estimator, X, reset=False, dtype=None, ensure_all_finite=True)
        return as_codes(np.asarray(x), where)
    x, y = validate_data(estimator, X, y, dtype=None, ensure_all_finite=True)
    return as_codes(np.asarray(x), where), y


def encode_labels(y) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, encoded)``: sorted distinct labels and each row's index into them (int64)."""
    check_classification_targets(y)
    classes, encoded = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(f"a classifier needs at least 2 classes in y, got 1 class ({classes[0]!r})")
    return classes, encoded.ravel().astype(np.int64)


def resolve_n_values(n_values, codes: np.ndarray) -> np.ndarray:
    """Cardinalities: ``n_values`` (int or one per feature) checked against the codes, or max code + 1."""
    d = codes.shape[1]
    seen = codes.max(axis=0) + 1 if codes.shape[0] else np.ones(d, dtype=np.int64)
    if n_values is None:
        return np.maximum(seen, 1).astype(np.int64)
    if isinstance(n_values, numbers.Integral):
        cards = np.full(d, int(n_values), dtype=np.int64)
    else:
        cards = np.asarray(n_values)
        if cards.shape != (d,) or not np.issubdtype(cards.dtype, np.integer):
            raise ValueError(f"n_values must be an int or {d} integers, got {n_values!r}")
        cards = cards.astype(np.int64)
    if cards.min(initial=1) < 1:
        raise ValueError(f"n_values must be >= 1, got {cards.tolist()}")
    bad = np.flatnonzero(seen > cards)
    if bad.size:
        j = int(bad[0])
        raise ValueError(f"feature {j} has value {int(seen[j]) - 1} in the training data, outside n_values {cards[j]}")
    return cards


def seed_of(random_state) -> int:
    """Training seed: ``random_state`` itself if an int, 0 for None (fits are reproducible), else a draw."""
    if random_state is None:
        return 0
    if isinstance(random_state, numbers.Integral):
        return int(random_state)
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


def training_dataset(estimator, codes, y_enc, cardinalities, classes, seed: int) -> DiscreteDataset:
    """The trainers' data set: all rows train; up to :data:`CHECK_ROWS` seeded training rows form the
    "test" split, which the trainers store as the check set the exporters verify against."""
    n = codes.shape[0]
    rows = np.sort(np.random.default_rng(seed).permutation(n)[:CHECK_ROWS])
    names = getattr(estimator, "feature_names_in_", None)
    feature_names = [str(f) for f in names] if names is not None else [f"x{i}" for i in range(codes.shape[1])]
    return DiscreteDataset(
        name=DATASET_NAME,
        x_train=codes,
        y_train=y_enc,
        x_test=codes[rows],
        y_test=y_enc[rows],
        cardinalities=cardinalities,
        class_names=[str(c) for c in classes],
        feature_names=feature_names,
        source=f"scikit-learn estimator {type(estimator).__name__}",
        info={"test_split": f"none: the test rows are up to {CHECK_ROWS} seeded training rows (the check set)"},
    )


def fit_data(estimator, X, y) -> tuple[DiscreteDataset, np.ndarray, int]:
    """What every estimator's ``fit`` starts from: the checked codes and labels as the trainers'
    data set (:func:`training_dataset`), the classes (``classes_``) and the training seed."""
    codes, y = check_input(estimator, X, y, fit=True)
    classes, y_enc = encode_labels(y)
    cardinalities = resolve_n_values(estimator.n_values, codes)
    seed = seed_of(estimator.random_state)
    return training_dataset(estimator, codes, y_enc, cardinalities, classes, seed), classes, seed


def json_safe_classes(classes: np.ndarray) -> list | None:
    """``classes_`` as a JSON list that :func:`restore_classes` turns back into an equal array, or None."""
    values = classes.tolist()
    kinds = {type(v) for v in values}
    if kinds <= {int} or kinds <= {str} or kinds <= {bool}:
        return values
    if kinds <= {float} and all(np.isfinite(values)):
        return values
    return None


JSON_SCALARS = (str, int, float, bool, type(None))


def json_params(params: dict) -> dict:
    """The hyper-parameters that are JSON values (arrays and tuples as lists) for the model file's
    metadata; others (a RandomState, objects) are left out, so restoring them keeps the default."""
    out = {}
    for key, value in params.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, JSON_SCALARS):
            out[key] = value
        elif isinstance(value, (list, tuple, np.ndarray)) and np.asarray(value).dtype.kind in "biuf":
            out[key] = np.asarray(value).tolist()
        elif isinstance(value, dict) and all(isinstance(v, JSON_SCALARS) for v in value.values()):
            out[key] = {str(k): v for k, v in value.items()}
    return out


def attach_metadata(estimator, artifact, classes) -> None:
    """Add ``metadata["sklearn"]`` to a fitted estimator's artifact: its class, labels (JSON-safe, or
    None), hyper-parameters, and whether it saw string feature names. The trainers' ``errors["test"]``
    is renamed ``errors["check_set"]``: an estimator has no test split, and those rows are training
    rows, so nothing reads it as a test error (``bnc-profile`` reports none without ``--data``).

    The metadata is passed through JSON, so the artifact in memory holds what a model file of it
    holds (e.g. plain strings instead of torch's version object, which would make a pickled
    estimator import torch).
    """
    info = {
        "estimator": type(estimator).__name__,
        "classes": json_safe_classes(np.asarray(classes)),
        "params": json_params(estimator.get_params()),
        "feature_names_in": hasattr(estimator, "feature_names_in_"),
    }
    metadata = {**artifact.metadata, "sklearn": info}
    errors = dict(metadata.get("errors") or {})
    if "test" in errors:  # the trainers' "test" split is training rows here: not a test error
        errors["check_set"] = errors.pop("test")
        metadata["errors"] = errors
    artifact.metadata = json.loads(json.dumps(metadata))


def batch_size_for(batch_size: int, n: int) -> int:
    """The trainers drop the last incomplete batch; with fewer rows than a batch, one batch of all rows."""
    return max(1, min(int(batch_size), n))


class ScoresClassifierMixin:
    """``predict``, ``predict_proba``, ``predict_log_proba``, ``decision_function`` from
    ``self._scores(X)`` (the reference predictor's (n, C) scores of validated codes)."""

    def _predictor(self):
        raise NotImplementedError

    def _scores(self, X) -> np.ndarray:
        check_is_fitted(self, "artifact_")
        codes = check_input(self, X, fit=False)
        return self._predictor().log_joint(codes)

    def predict(self, X) -> np.ndarray:
        """Class labels (``classes_``), the first maximum of the scores as every exported model."""
        scores = self._scores(X)
        return self.classes_[np.argmax(scores, axis=1)]

    def predict_log_proba(self, X) -> np.ndarray:
        """Log of the softmax of the scores, computed stably; shape (n_samples, n_classes)."""
        scores = self._scores(X)
        return scores - logsumexp(scores, axis=1, keepdims=True)

    def predict_proba(self, X) -> np.ndarray:
        """Softmax of the scores (rows sum to one); shape (n_samples, n_classes)."""
        return np.exp(self.predict_log_proba(X))

    def decision_function(self, X) -> np.ndarray:
        """Scores: (n_samples,) ``s[:, 1] - s[:, 0]`` for two classes (scikit-learn's convention,
        positive means ``classes_[1]``), else the (n_samples, n_classes) scores themselves."""
        scores = self._scores(X)
        return scores[:, 1] - scores[:, 0] if scores.shape[1] == 2 else scores
