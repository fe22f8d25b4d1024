"""NumPy reference predictor for DNN artifacts: the ground truth exported DNNs are checked against.

It implements the computation written down in :mod:`bnc_deploy.artifacts.dnn`, from the artifact
alone (no torch):

* **sign networks** run as integer machines: int64 accumulators and the shared integer
  thresholds of :func:`~bnc_deploy.artifacts.dnn.sign_thresholds`; only the output layer is real:
  ``logits = float32(acc) * float32(s_w * s_in) + bias`` in float32, one rounding per operation,
  the way the exported graphs compute it;
* **ReLU networks** run in float64 (weights ``codes * s_w``, batch norm as scale and shift).

Labels are the first maximum of the logits (as ``numpy.argmax``, ``torch.argmax`` and ONNX
``ArgMax``).
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.artifacts.dnn import DNNArtifact, sign_thresholds
from bnc_deploy.reference.bnc import PredictorMixin
from bnc_deploy.validation import check_codes

#: Rows per chunk: the convolution's window view is (rows, C, H, W, 3, 3).
CHUNK_ROWS = 256


def conv3x3_same(a: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """'Same' 3x3 convolution (cross-correlation, as torch/ONNX Conv), zero padding.

    a : (n, C_in, H, W); codes : (C_out, C_in, 3, 3). Returns (n, C_out, H, W) in the common
    dtype (int64 stays exact).
    """
    padded = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # (n, C, H, W, 3, 3)
    return np.einsum("nchwij,ocij->nohw", windows, codes, optimize=True)


def max_pool2(a: np.ndarray) -> np.ndarray:
    """2x2 max-pool, stride 2, floor (odd trailing rows/columns dropped). (n, C, H, W) -> (n, C, H//2, W//2)."""
    n, c, h, w = a.shape
    a = a[:, :, : h // 2 * 2, : w // 2 * 2]
    return a.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


class DNNReferencePredictor(PredictorMixin):
    """Predict with a :class:`DNNArtifact`.

    Methods take ``x`` of shape (n, n_features) with integer codes (or one row).
    """

    #: Rows validated per slice (each slice runs CHUNK_ROWS rows at a time through the layers).
    chunk_rows = 65536

    def __init__(self, artifact: DNNArtifact) -> None:
        self.artifact = artifact
        self._thresholds = {}
        if artifact.activation == "sign":
            for k in range(len(artifact.layers) - 1):
                self._thresholds[k] = sign_thresholds(artifact, k)

    def check(self, x) -> np.ndarray:
        a = self.artifact
        return check_codes(x, a.cardinalities, a.feature_names, where="reference predictor input")

    # -- forward ----------------------------------------------------------------------------------
    def logits(self, x) -> np.ndarray:
        """Output-layer values, shape (n, C), float64 (:data:`CHUNK_ROWS` rows at a time)."""
        return self._chunked(x, self._scores)

    def _scores(self, codes: np.ndarray) -> np.ndarray:
        if codes.shape[0] == 0:
            return np.zeros((0, self.artifact.n_classes))
        if codes.shape[0] <= CHUNK_ROWS:
            return self._logits(codes)
        out = np.empty((codes.shape[0], self.artifact.n_classes))
        for i in range(0, codes.shape[0], CHUNK_ROWS):
            out[i : i + CHUNK_ROWS] = self._logits(codes[i : i + CHUNK_ROWS])
        return out

    def hidden_activations(self, x) -> list[np.ndarray]:
        """Every hidden layer's output (after activation and pooling), for debugging and tests."""
        return self._forward(self.check(x))[1]

    def _logits(self, x: np.ndarray) -> np.ndarray:
        return self._forward(x)[0]

    def pre_activations(self, x) -> list[np.ndarray]:
        """Every layer's real pre-activation ``z = s_w * s_in * acc`` (before batch norm), float64."""
        captured: list[np.ndarray] = []
        self._forward(self.check(x), capture=captured)
        return captured

    def _forward(self, x: np.ndarray, capture: list | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        art = self.artifact
        sign = art.activation == "sign"
        a = art.encode_integer(x)
        if not sign:
            a = a.astype(np.float64) * art.input_scale
        hidden = []
        for k, layer in enumerate(art.layers):
            if layer.type == "dense" and a.ndim == 4:
                a = a.reshape(a.shape[0], -1)  # flatten (C, H, W)
            codes = layer.codes.astype(np.int64 if sign else np.float64)
            if layer.type == "dense":
                acc = a @ codes.T
            else:
                acc = conv3x3_same(a, codes)
            if capture is not None:
                s_in = art.layer_input_scales()[k] if sign else 1.0
                capture.append(acc.astype(np.float64) * (art.weight_scale * s_in))
            if layer.activation is None:  # output layer
                if sign:
                    # float32, one rounding per operation, as the exported graphs compute it:
                    # float32(acc) is exact (|acc| < 2**24, checked by the exporters), then
                    # one multiply by the float32 scale and one add of the float32 bias.
                    unit = np.float32(art.weight_scale * art.layer_input_scales()[k])
                    z = acc.astype(np.float32) * unit + layer.bias[None, :]
                    return z.astype(np.float64), hidden
                z = acc * art.weight_scale
                return z + layer.bias.astype(np.float64)[None, :], hidden
            if sign:
                direction, threshold = self._thresholds[k]
                shape = (1, -1) + (1,) * (acc.ndim - 2)
                a = np.where(direction.reshape(shape) * acc >= threshold.reshape(shape), 1, -1).astype(np.int64)
            else:
                z = acc * art.weight_scale
                if layer.scale is not None:
                    shape = (1, -1) + (1,) * (z.ndim - 2)
                    z = z * layer.scale.astype(np.float64).reshape(shape) + layer.shift.astype(np.float64).reshape(
                        shape
                    )
                a = np.maximum(z, 0.0)
            if layer.pool:
                a = max_pool2(a)
            hidden.append(a)
        raise AssertionError("unreachable: the last layer is the output layer")

    # Same name as the BN reference, so adapters, reports and PredictorMixin treat both alike.
    log_joint = logits
