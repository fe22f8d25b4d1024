"""NumPy reference predictor: the ground truth every exported model is checked against.

It needs only the artifact. Quantized models accumulate their integer codes exactly (int64) and
convert once: ``log p(c, x) = -(code_c + sum_i code_{row_i, c}) * 2**-B_F``; float models sum
float64 log-probabilities. Ties go to the first class (as ``torch.argmax`` and ONNX ``ArgMax``).

Big inputs are evaluated a slice of rows at a time (:mod:`bnc_deploy.reference.chunks`): the
table lookup's temporary is (rows, features, classes), so a slice holds about
:data:`CHUNK_BYTES` of it; every row's result is the same as in one call.
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.artifacts.bnc import BNCArtifact
from bnc_deploy.errors import InputError
from bnc_deploy.reference.chunks import rows_per_chunk, run_in_chunks
from bnc_deploy.validation import check_codes

#: Bytes of the per-slice temporaries the predictors aim at (a slice has at least 64 rows).
CHUNK_BYTES = 16 * 2**20


class PredictorMixin:
    """What every reference predictor derives from its class scores: ``log_joint`` (n, C), labels
    (first maximum), softmax probabilities, and raw inputs through a stored discretizer.

    A predictor implements ``check(x)`` (validated int64 codes), ``_scores(codes)`` (the scores
    of checked rows, float64) and ``chunk_rows`` (rows per slice); the mixin runs inputs through
    them a slice at a time, into preallocated outputs.
    """

    artifact: object
    _discretizer = None
    #: Rows per slice (set by the predictor; None: all rows in one slice).
    chunk_rows: int | None = None

    def _chunked(self, x, evaluate) -> np.ndarray:
        a = self.artifact
        return run_in_chunks(
            x,
            self.check,
            lambda codes, first: (evaluate(codes),),
            self.chunk_rows,
            n_features=a.n_features,
            cardinalities=a.cardinalities,
        )[0]

    def log_joint(self, x) -> np.ndarray:
        """Class scores (BN: ``log p(c, x)``; DNN: the logits), shape (n, C), float64."""
        return self._chunked(x, self._scores)

    def predict(self, x) -> np.ndarray:
        """Most probable class per row (first maximum), shape (n,), int64."""
        return self._chunked(x, lambda codes: np.argmax(self._scores(codes), axis=1).astype(np.int64))

    def predict_proba(self, x) -> np.ndarray:
        """Softmax of the scores (BN: ``p(c | x)``), shape (n, C), float64."""
        return self._chunked(x, lambda codes: _softmax(self._scores(codes)))

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
        # The lookup's temporary is (rows, features, classes) 8-byte values.
        self.chunk_rows = rows_per_chunk(8 * artifact.n_features * artifact.n_classes, CHUNK_BYTES)

    def check(self, x) -> np.ndarray:
        a = self.artifact
        return check_codes(x, a.cardinalities, a.feature_names, where="reference predictor input")

    def integer_scores(self, x) -> np.ndarray:
        """Quantized models only: ``sum of codes`` per class, shape (n, C), int64 (lower is likelier)."""
        if self.artifact.quantizer is None:
            raise ValueError("integer_scores is defined for quantized models only")
        return self._chunked(x, self._integer_scores)

    def _integer_scores(self, codes: np.ndarray) -> np.ndarray:
        a = self.artifact
        rows = a.row_indices(codes)
        return a.class_codes.astype(np.int64)[None, :] + a.table_codes.astype(np.int64)[rows].sum(axis=1)

    def _scores(self, codes: np.ndarray) -> np.ndarray:
        """``log p(c, x)`` of checked codes, shape (n, C), float64."""
        a = self.artifact
        if a.quantizer is not None:
            return -self._integer_scores(codes).astype(np.float64) * a.quantizer.step
        rows = a.row_indices(codes)
        class_logp, table_logp = a.log_tables()
        return class_logp[None, :] + table_logp[rows].sum(axis=1)

    # -- raw inputs ----------------------------------------------------------------------------
    def log_joint_raw(self, x_raw) -> np.ndarray:
        return self.log_joint(self.discretize(x_raw))


def _softmax(scores: np.ndarray) -> np.ndarray:
    scores = scores - scores.max(axis=1, keepdims=True)
    p = np.exp(scores)
    return p / p.sum(axis=1, keepdims=True)
