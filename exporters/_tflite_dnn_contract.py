"""The TFLite DNN exporter's contract: the plan's types (:class:`DNNTFLitePlan`, one
:class:`SignLayerPlan` per hidden sign layer; :mod:`bnc_deploy.exporters.tflite_dnn` fills them in)
and the check that re-reads a converted flatbuffer (no TensorFlow, the schema only) and asserts
every op, dtype, scale, zero point, bias and fused activation the plan promises. Split from
``tflite_dnn`` to keep each module to one job; this module sits below it and never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import DTypeLike

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._tflite import (
    COMPARISON_OPS,
    FORBIDDEN_OPS,
    MICRO_BATCH,
    WEB_BATCH,
    check_micro_contract,
    check_web_contract,
)
from bnc_deploy.formats.dnn import OUTPUT_LOGITS
from bnc_deploy.formats.metadata import INPUT_NAME, OUTPUT_LABEL
from bnc_deploy.formats.tflite import (
    ModelSource,
    OpInfo,
    TensorInfo,
    TFLiteSummary,
    inspect_tflite,
    load_model_t,
    model_bytes,
)

if TYPE_CHECKING:
    from bnc_deploy.artifacts.dnn import DNNArtifact

LOWERING_SIGN = "int8-sign"
LOWERING_PTQ = "int8-ptq"
#: Real value of one int8 step of a sign activation: +-1 is stored as +-2.
SIGN_ACTIVATION_SCALE = 0.5
#: Requantization multiplier of every int8 sign layer (``s_in * s_w / SIGN_ACTIVATION_SCALE``).
SIGN_REQUANT_MULTIPLIER = 2.0
#: Ops that carry a layer's multiply-accumulates.
MAC_OPS = ("FULLY_CONNECTED", "CONV_2D")


@dataclass
class SignLayerPlan:
    """One hidden layer of a sign network as an int8 FULLY_CONNECTED / CONV_2D.

    ``weights``: int8 in TFLite layout (dense ``[out, copies * in]``, conv OHWI
    ``[out, 3, 3, copies * in]``); ``codes``: the artifact's codes times ``direction``, columns
    permuted for an NHWC flatten, in the same layout with one copy (int64); the ``copies``
    parts of ``weights`` sum to ``codes``. ``bias``: int32 ``1 - 2 * threshold``.
    """

    index: int
    type: str
    codes: np.ndarray
    weights: np.ndarray
    copies: int
    direction: np.ndarray
    threshold: np.ndarray
    bias: np.ndarray
    input_scale: float
    weight_scale: float
    pool: bool

    @property
    def output_scale(self) -> float:
        return SIGN_ACTIVATION_SCALE

    def describe(self) -> dict[str, Any]:
        return {
            "layer": self.index,
            "op": "FULLY_CONNECTED" if self.type == "dense" else "CONV_2D",
            "dtype": "int8",
            "input_scale": self.input_scale,
            "weight_scale": self.weight_scale,
            "output_scale": self.output_scale,
            "input_copies": self.copies,
            "fused_activation": "RELU_N1_TO_1",
            "bias": "int32 1 - 2 * threshold (batch norm + sign)",
            "pool": "MAX_POOL_2D" if self.pool else None,
        }


@dataclass
class DNNTFLitePlan:
    """Everything the exporter decides before tracing (NumPy only).

    ``encoding_scale``: int8 scale of the encoded input (None: float32 integers, a sign network
    without hidden layers). ``hidden``: a :class:`SignLayerPlan` per hidden layer (sign; empty
    for ReLU, whose hidden layers are described by ``relu_ranges``, the calibrated int8 range of
    each ReLU output). ``output_dtype``: ``"float32"`` (float FULLY_CONNECTED on the integer
    codes, then MUL ``output_unit`` and ADD bias) or ``"int8"`` (ReLU, full-integer: weights
    with scale ``output_weight_scale``, logits in ``logit_range``). ``output_codes``: the output
    layer's codes [C, K], columns permuted for an NHWC flatten (int64).
    """

    lowering: str
    exact: bool
    encoding_scale: float | None
    hidden: list[SignLayerPlan] = field(default_factory=list)
    output_codes: np.ndarray | None = None
    output_unit: float = 1.0
    output_dtype: str = "float32"
    output_weight_scale: float = 1.0
    relu_ranges: list[tuple[float, float]] = field(default_factory=list)
    logit_range: tuple[float, float] | None = None
    calibration: dict[str, Any] | None = None
    permutations: dict[int, np.ndarray] = field(default_factory=dict)
    profile: str = "default"
    #: Static batch of a web-profile file (``profile == "web"``).
    web_batch: int = WEB_BATCH
    #: Also write the standard TFLITE_METADATA and labels file.
    standard_metadata: bool = False

    def describe(self, artifact: DNNArtifact) -> list[dict[str, Any]]:
        """Per weight layer: the TFLite op carrying its MACs and how it is stored (metadata)."""
        layers: list[dict[str, Any]] = []
        for k, layer in enumerate(artifact.layers):
            last = k == len(artifact.layers) - 1
            if self.lowering == LOWERING_SIGN and not last:
                layers.append(self.hidden[k].describe())
            elif last and self.output_dtype == "float32":
                layers.append(
                    {
                        "layer": k,
                        "op": "FULLY_CONNECTED",
                        "dtype": "float32",
                        "weights": "integer codes",
                        "scale": "MUL float32(s_w * s_in)",
                        "bias": "ADD float32",
                    }
                )
            else:
                entry: dict[str, Any] = {
                    "layer": k,
                    "op": "FULLY_CONNECTED" if layer.type == "dense" else "CONV_2D",
                    "dtype": "int8",
                    "bias": "int32 (batch-norm shift folded)" if layer.batch_norm else ("int32" if last else None),
                    "weights": "int8 per-channel, batch norm folded (converter)"
                    if not last
                    else f"int8 codes, per-tensor scale {self.output_weight_scale!r}",
                }
                if not last:
                    entry.update(
                        fused_activation="RELU",
                        output_range=list(self.relu_ranges[k]),
                        pool="MAX_POOL_2D" if layer.pool else None,
                    )
                else:
                    assert self.logit_range is not None  # an int8 output layer is calibrated
                    entry["output_range"] = list(self.logit_range)
                layers.append(entry)
        return layers


def _activation_names() -> dict[int, str]:
    from bnc_deploy.formats.tflite import enum_names, schema_module

    return enum_names(schema_module().ActivationFunctionType)


def fused_activations(model: ModelSource) -> dict[int, str]:
    """``{op index: fused activation name}`` of every operator with a fused activation option."""
    _, m = load_model_t(model_bytes(model))
    names = _activation_names()
    out = {}
    for k, op in enumerate(m.subgraphs[0].operators or []):
        options = op.builtinOptions
        if options is not None and hasattr(options, "fusedActivationFunction"):
            out[k] = names.get(int(options.fusedActivationFunction), str(options.fusedActivationFunction))
    return out


def _constant(tensor: TensorInfo, dtype: DTypeLike) -> np.ndarray:
    return np.frombuffer(tensor.data, dtype=dtype).reshape(tensor.shape)


def check_dnn_contract(model: bytes, artifact: DNNArtifact, plan: DNNTFLitePlan) -> TFLiteSummary:
    """Check a converted DNN model against the contract; raise ExportError naming what is wrong.

    Builtins only, no comparison on int8 operands, I/O names/dtypes/shapes and a dynamic batch
    (micro profile: static [1, D], int32 label, TFLM operators, no int64/uint8 tensors; web
    profile: static [web_batch, D], int32 label, no int64 tensors), no
    hybrid (float-activation, int8-weight) layer, and per lowering:

    * ``int8-sign``: one int8 FULLY_CONNECTED/CONV_2D per hidden layer, in order, with input
      scale ``s_in``, weights = the planned codes (scale ``s_in**-1``, zero point 0), int32 bias =
      ``1 - 2 * threshold`` (scale 1), output int8 scale 0.5 zero point 0, fused RELU_N1_TO_1
      (multiplier 2); the output layer one float32 FULLY_CONNECTED without bias whose weights
      are the integer codes.
    * ``int8-ptq``: every FULLY_CONNECTED/CONV_2D all-int8 (one per layer), the output layer's
      weights the artifact's codes (B <= 7), logits int8 before a DEQUANTIZE, no SELECT on int8.
    """
    summary = inspect_tflite(model)
    t = summary.tensors
    bad = [n for n in summary.op_names if n.startswith("CUSTOM") or n in FORBIDDEN_OPS or "FLEX" in n.upper()]
    if bad:
        raise ExportError(f"converted model uses non-builtin or forbidden operators {sorted(set(bad))}")
    for op in summary.ops:
        if op.name in COMPARISON_OPS + ("SELECT", "SELECT_V2") and any(
            i >= 0 and t[i].dtype == "INT8" for i in op.inputs
        ):
            raise ExportError(
                f"the converter left {op.name} (op #{op.index}) on int8 operands; please report "
                "this with your TensorFlow version"
            )
    x, logits, label = t[summary.inputs[0]], t[summary.outputs[0]], t[summary.outputs[1]]
    d, c = artifact.n_features, artifact.n_classes
    profile = getattr(plan, "profile", "default")
    micro = profile == "micro"
    expected = [
        (x, INPUT_NAME, "INT32", d),
        (logits, OUTPUT_LOGITS, "FLOAT32", c),
        (label, OUTPUT_LABEL, "INT64" if profile == "default" else "INT32", None),
    ]
    for tensor, name, dtype, last in expected:
        if tensor.name != name or tensor.dtype != dtype or (last is not None and tensor.shape[-1] != last):
            raise ExportError(
                f"converted model has I/O tensor {tensor.name!r} {tensor.dtype} {tensor.shape}, "
                f"expected {name!r} {dtype} with last dimension {last}"
            )
    if micro:
        check_micro_contract(summary, [MICRO_BATCH, d])
    elif profile == "web":
        check_web_contract(summary, [int(getattr(plan, "web_batch", WEB_BATCH)), d])
    elif x.shape_signature[0] != -1:
        raise ExportError(f"input batch dimension is static ({x.shape_signature}), expected dynamic")
    macs = [op for op in summary.ops if op.name in MAC_OPS]
    for op in macs:
        dtypes = {t[op.inputs[0]].dtype, t[op.inputs[1]].dtype, t[op.outputs[0]].dtype}
        if len(dtypes) != 1 or dtypes.pop() not in ("INT8", "FLOAT32"):
            raise ExportError(
                f"{op.name} #{op.index} mixes {[t[i].dtype for i in op.inputs[:2] + op.outputs]} "
                "(hybrid quantization is not part of the contract)"
            )
    int8_macs = [op for op in macs if t[op.inputs[1]].dtype == "INT8"]
    float_macs = [op for op in macs if t[op.inputs[1]].dtype == "FLOAT32"]
    n_hidden = len(artifact.layers) - 1
    n_float = 1 if plan.output_dtype == "float32" else 0
    if len(int8_macs) != n_hidden + 1 - n_float or len(float_macs) != n_float:
        raise ExportError(
            f"expected {n_hidden + 1 - n_float} int8 and {n_float} float32 FULLY_CONNECTED/CONV_2D, "
            f"got {len(int8_macs)} and {len(float_macs)}"
        )
    if plan.lowering == LOWERING_SIGN:
        _check_sign(summary, plan, int8_macs, fused_activations(model))
    else:
        _check_ptq(summary, artifact, plan, int8_macs)
    if float_macs:
        _check_float_output(summary, plan, float_macs[0])
    return summary


def _check_sign(summary: TFLiteSummary, plan: DNNTFLitePlan, int8_macs: list[OpInfo], fused: dict[int, str]) -> None:
    t = summary.tensors
    for op, layer in zip(int8_macs, plan.hidden):
        xin, w, out = t[op.inputs[0]], t[op.inputs[1]], t[op.outputs[0]]
        bias = t[op.inputs[2]] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        where = f"layer {layer.index} ({op.name} #{op.index})"
        want = "FULLY_CONNECTED" if layer.type == "dense" else "CONV_2D"
        problems = []
        if op.name != want:
            problems.append(f"op {op.name}, expected {want}")
        if xin.scale != [np.float32(layer.input_scale)] or xin.zero_point != [0]:
            problems.append(f"input scale/zp {xin.scale}/{xin.zero_point}, expected {layer.input_scale}/0")
        if (
            w.scale != [np.float32(layer.weight_scale)]
            or w.zero_point != [0]
            or w.shape != list(layer.weights.shape)
            or not np.array_equal(_constant(w, np.int8), layer.weights)
        ):
            problems.append(f"weights {w.shape} scale {w.scale} zp {w.zero_point} are not the planned int8 codes")
        if (
            bias is None
            or bias.dtype != "INT32"
            or bias.scale != [1.0]
            or not np.array_equal(_constant(bias, np.int32), layer.bias)
        ):
            problems.append("int32 bias is not 1 - 2 * threshold with scale 1")
        if out.dtype != "INT8" or out.scale != [SIGN_ACTIVATION_SCALE] or out.zero_point != [0]:
            problems.append(f"output {out.dtype} scale {out.scale} zp {out.zero_point}, expected int8 0.5/0")
        if fused.get(op.index) != "RELU_N1_TO_1":
            problems.append(f"fused activation {fused.get(op.index)}, expected RELU_N1_TO_1")
        multiplier = xin.scale[0] * w.scale[0] / out.scale[0] if xin.scale and w.scale and out.scale else 0.0
        if multiplier < SIGN_REQUANT_MULTIPLIER:
            problems.append(f"requantization multiplier {multiplier} < {SIGN_REQUANT_MULTIPLIER}")
        if problems:
            raise ExportError(f"{where} is not the exact int8 sign layer: " + "; ".join(problems))


def _check_float_output(summary: TFLiteSummary, plan: DNNTFLitePlan, op: OpInfo) -> None:
    w = summary.tensors[op.inputs[1]]
    assert plan.output_codes is not None  # every plan sets them
    has_bias = len(op.inputs) > 2 and op.inputs[2] >= 0
    if (
        op.name != "FULLY_CONNECTED"
        or has_bias
        or w.shape != list(plan.output_codes.shape)
        or not np.array_equal(_constant(w, np.float32), plan.output_codes.astype(np.float32))
    ):
        raise ExportError(
            f"output {op.name} #{op.index} is not the float32 integer-code layer without bias "
            "(the converter folded or re-quantized it)"
        )


def _check_ptq(summary: TFLiteSummary, artifact: DNNArtifact, plan: DNNTFLitePlan, int8_macs: list[OpInfo]) -> None:
    t = summary.tensors
    for op in int8_macs:
        w = t[op.inputs[1]]
        if any(z != 0 for z in w.zero_point):
            raise ExportError(f"{op.name} #{op.index}: int8 weights with zero points {w.zero_point}")
    if plan.output_dtype != "int8":
        return
    out = int8_macs[-1]
    w, logits = t[out.inputs[1]], t[out.outputs[0]]
    assert plan.output_codes is not None  # every plan sets them
    if artifact.weight_bits <= 7:
        # The converter derives the scale from the fake-quant range in float32 (one ulp off 1/3).
        if (
            len(w.scale) != 1
            or not np.isclose(w.scale[0], plan.output_weight_scale, rtol=1e-6)
            or not np.array_equal(_constant(w, np.int8), plan.output_codes.astype(np.int8))
        ):
            raise ExportError("the output layer's int8 weights are not the artifact's codes")
    if logits.dtype != "INT8":
        raise ExportError(f"output layer produces {logits.dtype}, expected int8 logits")
