"""NumPy reference predictor: the ground truth every exported model is checked against.

It needs only the artifact. Quantized models accumulate their integer codes exactly (int64) and
convert once: ``log p(c, x) = -(code_c + sum_i code_{row_i, c}) * 2**-B_F``; float models sum
float64 log-probabilities. Ties go to the first class (as ``torch.argmax`` and ONNX ``ArgMax``).
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.artifacts.bnc import BNCArtifact
from bnc_deploy.errors import InputError
from bnc_deploy.validation import check_codes


class PredictorMixin:
    """What every reference predictor derives from its ``log_joint`` (class scores, (n, C)):
    labels (first maximum), softmax probabilities, and raw inputs through a stored discretizer."""

    artifact: object
    _discretizer = None

    def predict(self, x) -> np.ndarray:
        """Most probable class per row (first maximum), shape (n,), int64."""
        return np.argmax(self.log_joint(x), axis=1).astype(np.int64)

    def predict_proba(self, x) -> np.ndarray:
        """Softmax of the scores (BN: ``p(c | x)``), shape (n, C), float64."""
        scores = self.log_joint(x)
        scores = scores - scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        return p / p.sum(axis=1, keepdims=True)

    def discretize(self, x_raw) -> np.ndarray:
        """Raw values (n, D) -> codes with the artifact's fitted discretizer."""
        if self.artifact.discretizer is None:
            raise InputError("this model was trained on discrete data and stores no discretizer")
        if self._discretizer is None:
            from bnc_deploy.datasets.discretize import FayyadIraniDiscretizer

            self._discretizer = FayyadIraniDiscretizer.from_dict(self.artifact.discretizer)
        return self._discretizer.transform(x_raw)

    def predict_raw(self, x_raw) -> np.ndarray:
        return self.predict(self.discretize(x_raw))


class ReferencePredictor(PredictorMixin):
    """Predict with a :class:`BNCArtifact`.

    Methods take ``x`` of shape (n, n_features) with integer codes (or a single row), and raw
    values via ``*_raw`` when the artifact stores a discretizer.
    """

    def __init__(self, artifact: BNCArtifact) -> None:
        self.artifact = artifact

    def check(self, x) -> np.ndarray:
        a = self.artifact
        return check_codes(x, a.cardinalities, a.feature_names, where="reference predictor input")

    def integer_scores(self, x) -> np.ndarray:
        """Quantized models only: ``sum of codes`` per class, shape (n, C), int64 (lower is likelier)."""
        a = self.artifact
        if a.quantizer is None:
            raise ValueError("integer_scores is defined for quantized models only")
        rows = a.row_indices(self.check(x))
        return a.class_codes.astype(np.int64)[None, :] + a.table_codes.astype(np.int64)[rows].sum(axis=1)

    def log_joint(self, x) -> np.ndarray:
        """``log p(c, x)`` for every class, shape (n, C), float64."""
        a = self.artifact
        if a.quantizer is not None:
            return -self.integer_scores(x).astype(np.float64) * a.quantizer.step
        rows = a.row_indices(self.check(x))
        class_logp, table_logp = a.log_tables()
        return class_logp[None, :] + table_logp[rows].sum(axis=1)

    # -- raw inputs ----------------------------------------------------------------------------
    def log_joint_raw(self, x_raw) -> np.ndarray:
        return self.log_joint(self.discretize(x_raw))
