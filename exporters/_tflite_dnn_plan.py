"""The plan of the TFLite DNN export (NumPy only): what every int8 tensor holds, its scale, or
the calibrated ranges of a ReLU network. The graph built from it and the lowerings are described
in :mod:`bnc_deploy.exporters.tflite_dnn`; the plan's types are in ``_tflite_dnn_contract``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from bnc_deploy.artifacts.dnn import accumulator_bound, sign_thresholds
from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._tflite import INT8_WEIGHT_MAX
from bnc_deploy.exporters._tflite_dnn_contract import (
    LOWERING_PTQ,
    LOWERING_SIGN,
    SIGN_ACTIVATION_SCALE,
    DNNTFLitePlan,
    SignLayerPlan,
)
from bnc_deploy.limits import FLOAT32_EXACT_LIMIT, INT32_LIMIT
from bnc_deploy.validation import random_valid_codes

if TYPE_CHECKING:
    from bnc_deploy.artifacts.dnn import DNNArtifact, DNNLayer

#: How a ReLU network's output layer is computed (sign networks: always float32).
OUTPUT_LAYERS = ("int8", "float32")
#: Random rows to calibrate a ReLU network on when the artifact has no check set.
RANDOM_CALIBRATION_ROWS = 256


def plan_tflite_dnn(
    artifact: DNNArtifact, *, representative: ArrayLike | None = None, output_layer: str = "int8"
) -> DNNTFLitePlan:
    """Choose every int8 tensor's contents and scale (sign) or calibrate the ranges (ReLU)."""
    if getattr(artifact, "kind", None) != "dnn":
        raise ExportError("the TFLite DNN exporter takes a DNN artifact (use exporters.tflite_bnc for BN classifiers)")
    if output_layer not in OUTPUT_LAYERS:
        raise ExportError(f"unknown output layer {output_layer!r}; choose one of {', '.join(OUTPUT_LAYERS)}")
    permutations = _flatten_permutations(artifact)
    if artifact.activation == "sign":
        return _sign_plan(artifact, permutations)
    return _relu_plan(artifact, permutations, representative, output_layer)


def _flatten_permutations(artifact: DNNArtifact) -> dict[int, np.ndarray]:
    """``{k: perm}`` for the dense layer right after the image part: column ``i`` of the NHWC
    flatten is column ``perm[i]`` of the artifact's (C, H, W) flatten."""
    if artifact.architecture != "cnn":
        return {}
    shapes = artifact.spatial_shapes()
    channels = artifact.input_channels
    for k, layer in enumerate(artifact.layers):
        if layer.type == "dense":
            h, w = shapes[k]
            c = channels
            hh, ww, cc = np.meshgrid(np.arange(h), np.arange(w), np.arange(c), indexing="ij")
            return {k: (cc * h * w + hh * w + ww).reshape(-1)}
        channels = layer.n_out
    return {}


def tflite_codes(layer: DNNLayer, perm: np.ndarray | None) -> np.ndarray:
    """The layer's codes in TFLite layout: dense [out, in] (columns permuted), conv OHWI, int64."""
    codes: np.ndarray = layer.codes.astype(np.int64)
    if layer.type == "conv2d":
        return np.transpose(codes, (0, 2, 3, 1))
    return codes[:, perm] if perm is not None else codes


def split_codes(codes: np.ndarray, copies: int) -> np.ndarray:
    """``copies`` integer parts of every code, each within +-127, summing to the code.

    Returns int64 of shape ``(copies,) + codes.shape``: ``c = copies * q + r`` (floor division,
    ``0 <= r < copies``) and part ``i`` is ``q + (i < r)``.
    """
    codes = np.asarray(codes, dtype=np.int64)
    q, r = np.divmod(codes, copies)
    parts = np.stack([q + (i < r) for i in range(copies)])
    if np.abs(parts).max(initial=0) > INT8_WEIGHT_MAX:
        raise ExportError(f"cannot split codes up to {int(np.abs(codes).max())} into {copies} int8 parts")
    return parts


def _sign_plan(artifact: DNNArtifact, permutations: dict[int, np.ndarray]) -> DNNTFLitePlan:
    hidden = []
    n_hidden = len(artifact.layers) - 1
    s_in = artifact.input_scale / 2.0 if artifact.input_encoding == "standardized" else SIGN_ACTIVATION_SCALE
    for k, layer in enumerate(artifact.layers[:-1]):
        direction, threshold = sign_thresholds(artifact, k)
        codes = tflite_codes(layer, permutations.get(k))
        codes = codes * direction.reshape((-1,) + (1,) * (codes.ndim - 1))
        copies = max(1, math.ceil(int(np.abs(codes).max(initial=1)) / INT8_WEIGHT_MAX))
        parts = split_codes(codes, copies)
        weights = np.concatenate(list(parts), axis=-1).astype(np.int8)  # copy b = input block b
        bias = 1 - 2 * threshold
        bound = accumulator_bound(artifact, k)
        if np.abs(bias).max() >= FLOAT32_EXACT_LIMIT or 2 * bound.max() + np.abs(bias).max() > INT32_LIMIT:
            raise ExportError(
                f"layer {k}: accumulators up to {int(bound.max())} are too wide for the int8 sign "
                "lowering (the bias must be an exact float32 integer)"
            )
        s_w = 1.0 / s_in  # s_in * s_w = 1: M = 2
        hidden.append(
            SignLayerPlan(
                k,
                layer.type,
                codes,
                weights,
                copies,
                direction,
                threshold,
                bias.astype(np.int32),
                float(s_in),
                float(s_w),
                bool(layer.pool),
            )
        )
        s_in = SIGN_ACTIVATION_SCALE
    last = artifact.layers[-1]
    out_codes = tflite_codes(last, permutations.get(len(artifact.layers) - 1))
    if accumulator_bound(artifact, len(artifact.layers) - 1).max() >= FLOAT32_EXACT_LIMIT:
        raise ExportError("the output layer's accumulator can exceed 2**24: float32 sums would round")
    s_last = artifact.layer_input_scales()[-1]
    assert s_last is not None  # a sign network's layers take integer inputs
    unit = float(np.float32(artifact.weight_scale * s_last))
    return DNNTFLitePlan(
        lowering=LOWERING_SIGN,
        exact=True,
        encoding_scale=(hidden[0].input_scale if n_hidden else None),
        hidden=hidden,
        output_codes=out_codes,
        output_unit=unit,
        permutations=permutations,
    )


def _relu_plan(
    artifact: DNNArtifact, permutations: dict[int, np.ndarray], representative: ArrayLike | None, output_layer: str
) -> DNNTFLitePlan:
    from bnc_deploy.reference.dnn import DNNReferencePredictor

    if representative is not None:
        rows, source = np.asarray(representative), "caller"
    elif artifact.check_x is not None and len(artifact.check_x):
        rows, source = artifact.check_x, "check set"
    else:
        rows, source = random_valid_codes(artifact.cardinalities, RANDOM_CALIBRATION_ROWS), "random codes"
    reference = DNNReferencePredictor(artifact)
    try:
        rows = reference.check(rows)
    except ValueError as exc:
        raise ExportError(f"representative rows: {exc}") from None
    if len(rows) == 0:
        raise ExportError("calibrating a ReLU network needs at least one representative row")
    pre = reference.pre_activations(rows)
    ranges = []
    for k, layer in enumerate(artifact.layers[:-1]):
        z = pre[k]
        if layer.scale is not None:
            shape = (1, -1) + (1,) * (z.ndim - 2)
            z = z * layer.scale.astype(np.float64).reshape(shape) + layer.shift.astype(np.float64).reshape(shape)
        top = float(np.max(z, initial=0.0))
        ranges.append((0.0, top if top > 0 else 1.0))
    logits = reference.logits(rows)
    lo, hi = min(float(logits.min()), 0.0), max(float(logits.max()), 0.0)
    if hi - lo <= 0:
        hi = lo + 1.0
    last = artifact.layers[-1]
    out_codes = tflite_codes(last, permutations.get(len(artifact.layers) - 1))
    top_code = int(np.abs(out_codes).max(initial=1))
    s_out_w = artifact.weight_scale * max(1.0, top_code / INT8_WEIGHT_MAX)
    calibration = {
        "rows": int(len(rows)),
        "source": source,
        "statistic": "min/max",
        "ranges": [list(r) for r in ranges],
    }
    if output_layer == "int8":
        calibration["logit_range"] = [lo, hi]
    return DNNTFLitePlan(
        lowering=LOWERING_PTQ,
        exact=False,
        encoding_scale=artifact.input_scale,
        output_codes=out_codes,
        output_weight_scale=float(s_out_w),
        relu_ranges=ranges,
        output_dtype=output_layer,
        output_unit=float(np.float32(artifact.weight_scale)),
        logit_range=(lo, hi) if output_layer == "int8" else None,
        permutations=permutations,
        calibration=calibration,
    )
