"""The integer plan of a ReLU DNN's C export: LiteRT's int8 file, read back, as C tables.

A ReLU network has no exact integer form of its float reference; its deployable integer form is the
full-integer TFLite file of :mod:`bnc_deploy.exporters.tflite_dnn` (lowering ``int8-ptq``, int8
output layer). The C export computes *that file* as LiteRT's reference kernels do: this module
builds the file (same options: the calibration rows), reads every int8 tensor, scale and zero point
back from the flatbuffer (:func:`bnc_deploy.formats.tflite.inspect_tflite`) and derives what the
kernels derive at prepare time, in the same double arithmetic:

* per output channel ``effective = double(s_in) * double(s_w[c]) / double(s_out)`` (per-tensor
  weights: the product rounded to float32 first, as ``GetQuantizedConvolutionMultipler``) and
  ``QuantizeMultiplier`` (``frexp``, ``round(q * 2^31)`` half away from zero, ``2^31`` -> ``2^30``
  and one more shift, shifts below -31 -> multiplier 0); the header requantizes CONV_2D with the
  reference kernel's double rounding and FULLY_CONNECTED with one rounding (``c_dnn.h``,
  section ``requantize``): what LiteRT computes, checked on random models and rows by the tests;
* the fused activation's clamp: RELU ``[max(-128, zp_out), 127]``, NONE ``[-128, 127]``;
* the output: ``DEQUANTIZE`` ``float32(double(s) * (q - zp))``, one rounding of an exact product,
  which the header's binary32 integer rounding reproduces (the logit function with zero biases).

NHWC is the file's layout; the header keeps the artifact's (C, H, W): convolution weights are
transposed to ``[out][in][3][3]`` and the first dense layer after the image part gets its columns
back in (C, H, W) order (integer sums do not depend on the order). Everything the header assumes of
the file (operator sequence, the encoding's table and scale, zero weight zero points) is checked
here; a file of another shape is an ExportError, never a wrong header.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._c_dnn_common import array, forward_body, input_arrays, logit_arrays

if TYPE_CHECKING:
    from bnc_deploy.artifacts.dnn import DNNArtifact

MAC_OPS = ("FULLY_CONNECTED", "CONV_2D")


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's ``QuantizeMultiplier``: ``(multiplier, shift)`` with ``real ~ multiplier * 2^(shift - 31)``."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    fixed = int(math.floor(abs(q) * 2**31 + 0.5)) * (1 if q > 0 else -1)  # std::round: half away from zero
    if fixed == 2**31:
        fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return fixed, shift


@dataclass
class ReluLayer:
    """One int8 MAC layer of the file, in the header's layout."""

    type: str  # "dense" or "conv2d"
    weights: np.ndarray  # int8, [out][in] or [out][in][3][3]
    bias: np.ndarray  # int32 (out,)
    multiplier: np.ndarray  # int32 (out,)
    shift: np.ndarray  # int32 (out,)
    in_zero: int
    out_zero: int
    act_min: int
    act_max: int
    pool: bool = False


@dataclass
class ReluPlan:
    """The file's integer computation: encoding scale, layers, the output's dequantization."""

    layers: list[ReluLayer] = field(default_factory=list)
    out_scale: float = 1.0
    out_zero: int = 0
    tflite_bytes: int = 0
    facts: dict[str, Any] = field(default_factory=dict)


def plan_relu_c(artifact: DNNArtifact, representative: Any = None) -> ReluPlan:
    """Build the int8 TFLite file of ``artifact`` and read its integer computation back."""
    from bnc_deploy.exporters._tflite_dnn_contract import fused_activations
    from bnc_deploy.exporters._tflite_dnn_plan import plan_tflite_dnn
    from bnc_deploy.exporters.tflite_dnn import build_tflite_dnn
    from bnc_deploy.formats.tflite import inspect_tflite

    data = build_tflite_dnn(artifact, representative=representative)
    summary, fused = inspect_tflite(data), fused_activations(data)
    permutations = plan_tflite_dnn(artifact, representative=representative).permutations
    tensors, ops = summary.tensors, summary.ops
    macs = [op for op in ops if op.name in MAC_OPS]
    if len(macs) != len(artifact.layers):
        raise ExportError(f"the int8 TFLite file has {len(macs)} MAC layers, the model {len(artifact.layers)}")
    _check_encoding(artifact, tensors[macs[0].inputs[0]])
    plan = ReluPlan(tflite_bytes=len(data))
    for k, op in enumerate(macs):
        layer = artifact.layers[k]
        plan.layers.append(_layer(layer.type, op, tensors, fused.get(op.index, "NONE"), permutations.get(k)))
        after = [o for o in ops if o.index > op.index and o.inputs and o.inputs[0] == op.outputs[0]]
        plan.layers[-1].pool = bool(after and after[0].name == "MAX_POOL_2D")
        if plan.layers[-1].pool != bool(layer.pool):
            raise ExportError(f"layer {k}: the TFLite file's pooling differs from the model's")
    dequantize = [op for op in ops if op.name == "DEQUANTIZE"]
    if len(dequantize) != 1 or dequantize[0].inputs[0] != macs[-1].outputs[0]:
        raise ExportError("the int8 TFLite file does not dequantize its int8 logits once")
    logits = tensors[macs[-1].outputs[0]]
    plan.out_scale, plan.out_zero = float(np.float32(logits.scale[0])), int(logits.zero_point[0])
    plan.facts = {"tflite_ops": [op.name for op in ops], "tflite_bytes": len(data)}
    return plan


def _check_encoding(artifact: DNNArtifact, first_input: Any) -> None:
    """The first layer's int8 input must be the artifact's integer encoding itself (zero point 0)."""
    expected = artifact.input_scale if artifact.input_encoding == "standardized" else 1.0
    scale = first_input.scale[0] if first_input.scale else None
    if scale is None or float(scale) != expected or int(first_input.zero_point[0]) != 0:
        raise ExportError(f"the TFLite encoding has scale {scale}, not the model's integer encoding {expected}")


def _layer(kind: str, op: Any, tensors: list[Any], activation: str, permutation: np.ndarray | None) -> ReluLayer:
    t_in, t_w, t_b, t_out = (tensors[i] for i in (*op.inputs[:3], op.outputs[0]))
    w = np.frombuffer(t_w.data, dtype=np.int8).reshape(t_w.shape).astype(np.int64)
    if any(int(z) != 0 for z in t_w.zero_point):
        raise ExportError("int8 weights with a nonzero zero point")
    n_out = w.shape[0]
    if kind == "conv2d":
        w = w.transpose(0, 3, 1, 2)  # OHWI -> [out][in][3][3]
    elif permutation is not None:
        unpermuted = np.empty_like(w)
        unpermuted[:, permutation] = w  # column i of the NHWC flatten is column perm[i] of (C, H, W)
        w = unpermuted
    bias = np.frombuffer(t_b.data, dtype=np.int32).astype(np.int64) if t_b.data else np.zeros(n_out, np.int64)
    s_in, s_out = np.float32(t_in.scale[0]), np.float32(t_out.scale[0])
    if len(t_w.scale) == n_out and n_out > 1:  # per channel: double(s_in) * double(s_w[c]) / double(s_out)
        reals = [float(s_in) * float(np.float32(s)) / float(s_out) for s in t_w.scale]
    else:  # per tensor (GetQuantizedConvolutionMultipler): the product rounded to float32 first
        reals = [float(np.float32(s_in * np.float32(t_w.scale[0]))) / float(s_out)] * n_out
    pairs = [quantize_multiplier(real) for real in reals]
    out_zero = int(t_out.zero_point[0])
    if activation not in ("RELU", "NONE"):
        raise ExportError(f"unexpected fused activation {activation}")
    return ReluLayer(
        type=kind,
        weights=w,
        bias=bias,
        multiplier=np.array([p[0] for p in pairs], dtype=np.int64),
        shift=np.array([p[1] for p in pairs], dtype=np.int64),
        in_zero=int(t_in.zero_point[0]),
        out_zero=out_zero,
        act_min=max(-128, out_zero) if activation == "RELU" else -128,
        act_max=127,
    )


def relu_parts(
    artifact: DNNArtifact, name: str, representative: Any
) -> tuple[dict[str, object], list[str], dict[str, Any]]:
    """ReLU networks: the header's placeholders, its layer sections and the metadata's extra facts."""
    plan = plan_relu_c(artifact, representative)
    shapes = artifact.spatial_shapes()

    def call(k: int, src: str, dst: str) -> str:
        layer, q = artifact.layers[k], plan.layers[k]
        tables = f"{name}_w{k}, {name}_bias{k}, {name}_m{k}, {name}_shift{k}"
        zeros = f"{q.in_zero}, {q.out_zero}, {q.act_min}"
        if layer.type == "dense":
            return f"    {name}_dense_int8({tables}, {layer.n_in}, {layer.n_out}, {zeros}, {src}, {dst});"
        (h, w), pool = shapes[k], int(layer.pool)
        dims = f"{layer.n_in}, {layer.n_out}, {h}, {w}, {pool}"
        return f"    {name}_conv_int8({tables}, {dims}, {zeros}, {src}, {dst});"

    body, max_act = forward_body(artifact, name, call)
    lines: list[str] = []
    for k, q in enumerate(plan.layers):
        what = f"Layer {k} ({q.type}, TFLite int8"
        lines += array(
            "int8_t",
            f"{name}_w{k}",
            q.weights,
            f"{what} weights), [out][in]" + ("[3][3]." if q.type == "conv2d" else "."),
        )
        lines += array("int32_t", f"{name}_bias{k}", q.bias, f"{what} int32 bias).")
        lines += array("int32_t", f"{name}_m{k}", q.multiplier, f"{what} requantization multiplier, Q31).")
        lines += array("int8_t", f"{name}_shift{k}", q.shift, f"{what} requantization shift).")
    lines += logit_arrays(name, plan.out_scale, np.zeros(artifact.n_classes), "of DEQUANTIZE")
    kinds = {layer.type for layer in artifact.layers[:-1]}
    sections = ["requantize", "dense_relu"] + (["conv_relu"] if "conv2d" in kinds else []) + ["output_relu"]
    values: dict[str, object] = {
        "arrays": "\n".join(input_arrays(artifact, name) + lines),
        "layer_calls": "\n".join(body),
        "max_activations": max_act,
        "description": f"{artifact.architecture.upper()} ReLU network, TFLite's int8 kernels",
        "activations_text": "activations int8 with TFLite's zero points",
        "logit_text": "The int8 TFLite file's logit: DEQUANTIZE of its int8 logit q[c], float32(scale * (q[c] - zero\n"
        " *     point)), as LiteRT computes it with the file's requantization of every layer.",
        "last_in_zero": plan.layers[-1].in_zero,
        "out_zero": plan.out_zero,
    }
    weight_bytes = int(sum(q.weights.size for q in plan.layers))
    extra = {
        "lowering": "int8-ptq",
        "exact": False,
        "weight_storage": "int8",
        "weight_bytes": weight_bytes,
        "tflite_equal": "the int8-ptq TFLite file (output layer int8) with the same calibration rows, "
        "as LiteRT's reference kernels compute it",
        **plan.facts,
    }
    return values, sections, extra
