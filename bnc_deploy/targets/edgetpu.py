"""Static Edge TPU compatibility report for a TFLite file (the Edge TPU compiler is not run).

What the Edge TPU compiler requires (coral.ai "TensorFlow models on the Edge TPU"), checked here
from the flatbuffer alone:

1. every operator is in the documented supported-operations table (:data:`EDGETPU_SUPPORTED_OPS`)
   and meets the limitations we can check statically (:func:`_op_limitations`);
2. tensors are 8-bit quantized (int8/uint8 with quantization parameters): activations, inputs and
   outputs of mapped ops; constant int32 operands are allowed only as biases and shape/axis/index
   parameters;
3. tensor sizes are constant at compile time (no -1 in any shape signature) and only the three
   innermost dimensions of a tensor may be larger than 1;
4. the compiler maps **one** subgraph: "as soon as an unsupported operation occurs, that
   operation and everything after it executes on the CPU, even if supported operations occur
   later" (same page). We therefore place on the Edge TPU only the supported operators *before*
   the first unsupported one, in the file's execution order. The compiler's experimental
   ``-a``/``--enable_multiple_subgraphs`` option can map later runs too; the report counts those
   separately (``supported_anywhere``).

This is a static approximation: the real compiler can still refuse an op for reasons not
documented (size limits, "unspecified limitation"), so treat "mapped" as "may be mapped".
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import numpy as np

#: Edge TPU supported operations, TFLite builtin name -> (documented name, minimum Edge TPU runtime,
#: documented limitation). Source: https://coral.ai/docs/edgetpu/models-intro/#supported-operations
#: (table for Edge TPU Compiler v16 / runtime v14, the last release); entries through ReLUN1To1
#: cross-checked against Axis' ARTPEC-7 (Edge TPU based DLPU) copy of the same table,
#: https://developer.axis.com/computer-vision/on-device/system-on-chip/artpec-7/supported-ops/ ,
#: and the Slice..StridedSlice limitations against the 2019 version of the coral table.
#: Anything not listed (GATHER, EQUAL, CAST, ARG_MAX, SELECT_V2, DEQUANTIZE, ...) runs on the CPU.
EDGETPU_SUPPORTED_OPS: dict[str, tuple[str, str, str]] = {
    "ADD": ("Add", "all", ""),
    "AVERAGE_POOL_2D": ("AveragePool2d", "all", "No fused activation function."),
    "CONCATENATION": ("Concatenation", "all", "No fused activation function. If any input is a compile-time "
                      "constant tensor, there must be only 2 inputs, and this constant tensor must be all zeroes."),
    "CONV_2D": ("Conv2d", "all", "Must use the same dilation in x and y dimensions."),
    "DEPTHWISE_CONV_2D": ("DepthwiseConv2d", "all", "Must use the same dilation in x and y dimensions (13+)."),
    "EXPAND_DIMS": ("ExpandDims", "13+", ""),
    "FULLY_CONNECTED": ("FullyConnected", "all", "Only the default format is supported for fully-connected "
                        "weights. Output tensor is one-dimensional."),
    "L2_NORMALIZATION": ("L2Normalization", "all", ""),
    "LOGISTIC": ("Logistic", "all", ""),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("LSTM", "14+", "Unidirectional LSTM only."),
    "MAXIMUM": ("Maximum", "all", ""),
    "MAX_POOL_2D": ("MaxPool2d", "all", "No fused activation function."),
    "MEAN": ("Mean", "all", "No reduction in batch dimension. If a z-reduction, the z-dimension must be "
             "multiple of 4 (13+)."),
    "MINIMUM": ("Minimum", "all", ""),
    "MUL": ("Mul", "all", ""),
    "PACK": ("Pack", "13+", "No packing in batch dimension."),
    "PAD": ("Pad", "all", "No padding in batch dimension (13+)."),
    "PRELU": ("PReLU", "13+", "Alpha must be 1-dimensional."),
    "QUANTIZE": ("Quantize", "13+", ""),
    "REDUCE_MAX": ("ReduceMax", "14+", "Cannot operate on the batch dimension."),
    "REDUCE_MIN": ("ReduceMin", "14+", "Cannot operate on the batch dimension."),
    "RELU": ("ReLU", "all", ""),
    "RELU6": ("ReLU6", "all", ""),
    "RELU_N1_TO_1": ("ReLUN1To1", "all", ""),
    "RESHAPE": ("Reshape", "all", "Certain reshapes might not be mapped for large tensor sizes."),
    "RESIZE_BILINEAR": ("ResizeBilinear", "all", "Input/output is a 3-dimensional tensor."),
    "RESIZE_NEAREST_NEIGHBOR": ("ResizeNearestNeighbor", "all", "Input/output is a 3-dimensional tensor."),
    "RSQRT": ("Rsqrt", "14+", ""),
    "SLICE": ("Slice", "all", ""),
    "SOFTMAX": ("Softmax", "all", "Supports only 1-D input tensor with a max of 16,000 elements."),
    "SPACE_TO_DEPTH": ("SpaceToDepth", "all", ""),
    "SPLIT": ("Split", "all", "No splitting in batch dimension."),
    "SQUEEZE": ("Squeeze", "all", "Before runtime 13: only when the squeezed dimensions are leading 1s."),
    "STRIDED_SLICE": ("StridedSlice", "all", "Supported only when all strides are equal to 1, with "
                      "ellipsis-axis-mask == 0 and new-axis-mask == 0."),
    "SUB": ("Sub", "all", ""),
    "SUM": ("Sum", "13+", "Cannot operate on the batch dimension."),
    "SQUARED_DIFFERENCE": ("SquaredDifference", "14+", ""),
    "TANH": ("Tanh", "all", ""),
    "TRANSPOSE": ("Transpose", "14+", ""),
    "TRANSPOSE_CONV": ("TransposeConv", "13+", ""),
}
SOURCE_URL = "https://coral.ai/docs/edgetpu/models-intro/#supported-operations"
#: Short statuses, worded like the Edge TPU compiler's operation log.
STATUS_MAPPED = "Mapped to Edge TPU"
STATUS_AFTER_CPU = "More than one subgraph is not supported"
STATUS_NOT_IN_TABLE = "Operation not supported"
STATUS_DTYPE = "Operation is working on an unsupported data type"
STATUS_DYNAMIC = "Dynamic-sized tensors are not supported"
STATUS_LIMITATION = "Operation is otherwise supported, but not mapped (documented limitation)"
EIGHT_BIT = ("INT8", "UINT8")
#: Operand positions that may hold int32 constants (bias; shape/axis/begin/end/stride parameters).
_INT32_PARAM_OPERANDS = {
    "FULLY_CONNECTED": {2}, "CONV_2D": {2}, "DEPTHWISE_CONV_2D": {2}, "TRANSPOSE_CONV": {0, 3},
    "RESHAPE": {1}, "STRIDED_SLICE": {1, 2, 3}, "SLICE": {1, 2}, "SUM": {1}, "MEAN": {1}, "REDUCE_MAX": {1},
    "REDUCE_MIN": {1}, "PAD": {1}, "EXPAND_DIMS": {1}, "SPLIT": {0}, "TRANSPOSE": {1},
    "RESIZE_BILINEAR": {1}, "RESIZE_NEAREST_NEIGHBOR": {1},
}
#: Operators whose axis operand must not include the batch dimension (0).
_NO_BATCH_AXIS = ("SUM", "MEAN", "REDUCE_MAX", "REDUCE_MIN")


def edgetpu_compatibility(tflite_path) -> dict:
    """Check a TFLite file (path or bytes) against the Edge TPU's documented requirements.

    Returns a dict with
    ``ops``: one entry per operator in execution order — ``index``, ``op``, ``edgetpu_name``,
    ``in_table``, ``problems`` (list of str), ``supported`` (in the table and no problem),
    ``status`` (compiler-style, see ``STATUS_*``), ``placement`` (``"edgetpu"`` or ``"cpu"``) and
    ``reason`` (status and first problem);
    ``n_ops``, ``n_mapped``, ``n_cpu``, ``first_cpu_op`` (index or None), ``supported_anywhere``
    (ops supported in isolation, what ``-a`` could map), ``fallback_ops`` (op name -> count on the
    CPU), ``static_shapes``, ``dynamic_tensors``, ``fully_8bit``, ``source``.
    """
    from bnc_deploy.formats.tflite import inspect_tflite

    summary = inspect_tflite(tflite_path)
    entries = [_check_op(summary, op) for op in summary.ops]
    first_cpu = next((e["index"] for e in entries if not e["supported"]), None)
    for e in entries:
        if e["supported"] and (first_cpu is None or e["index"] < first_cpu):
            e["placement"], e["status"] = "edgetpu", STATUS_MAPPED
        elif e["supported"]:
            e["placement"], e["status"] = "cpu", STATUS_AFTER_CPU
        else:
            e["placement"] = "cpu"
    for e in entries:
        e["reason"] = e["status"] if not e["problems"] else f"{e['status']}: {e['problems'][0]}"
    dynamic = [t.name for t in summary.tensors if any(int(s) < 0 for s in t.shape_signature)]
    activations = [t for t in summary.tensors if not t.is_constant]
    return {
        "file": str(tflite_path) if not isinstance(tflite_path, (bytes, bytearray)) else "<bytes>",
        "source": SOURCE_URL,
        "ops": entries,
        "n_ops": len(entries),
        "n_mapped": sum(e["placement"] == "edgetpu" for e in entries),
        "n_cpu": sum(e["placement"] == "cpu" for e in entries),
        "first_cpu_op": first_cpu,
        "supported_anywhere": sum(e["supported"] for e in entries),
        "fallback_ops": dict(Counter(e["op"] for e in entries if e["placement"] == "cpu")),
        "static_shapes": not dynamic,
        "dynamic_tensors": dynamic,
        "fully_8bit": all(t.dtype in EIGHT_BIT and t.scale for t in activations),
    }


def _check_op(summary, op) -> dict:
    """Table membership, tensor types, static shapes and op-specific limits of one operator."""
    documented = EDGETPU_SUPPORTED_OPS.get(op.name)
    dtype, shape = _tensor_problems(summary, op)
    limits = _op_limitations(summary, op) if documented else []
    table = [] if documented else [f"{op.name} is not in the Edge TPU supported-operations table"]
    # The first failing requirement names the status (table > data type > shapes > op limits).
    status = (STATUS_NOT_IN_TABLE if table else STATUS_DTYPE if dtype else STATUS_DYNAMIC if shape
              else STATUS_LIMITATION if limits else None)
    problems = table + dtype + shape + limits
    return {"index": op.index, "op": op.name, "edgetpu_name": documented[0] if documented else None,
            "in_table": documented is not None, "problems": problems, "supported": not problems,
            "status": status, "placement": None, "reason": None}


def _tensor_problems(summary, op) -> tuple[list[str], list[str]]:
    """``(data-type problems, shape problems)``: 8-bit quantized operands; static shapes with at
    most 3 innermost dimensions larger than 1."""
    dtype, shape = [], []
    params = _INT32_PARAM_OPERANDS.get(op.name, set())
    for position, index in enumerate(op.inputs):
        if index < 0:
            continue
        t = summary.tensors[index]
        if t.is_constant and t.dtype == "INT32" and position in params:
            continue  # a bias or a shape/axis parameter
        if t.dtype not in EIGHT_BIT:
            dtype.append(f"input {t.name!r} is {t.dtype}, not 8-bit quantized")
        elif not t.scale:
            dtype.append(f"input {t.name!r} is {t.dtype} without quantization parameters")
    for index in op.outputs:
        t = summary.tensors[index]
        if t.dtype not in EIGHT_BIT:
            dtype.append(f"output {t.name!r} is {t.dtype}, not 8-bit quantized")
    for index in [i for i in op.inputs if i >= 0] + list(op.outputs):
        t = summary.tensors[index]
        if any(int(s) < 0 for s in t.shape_signature):
            shape.append(f"tensor {t.name!r} has a dynamic shape {t.shape_signature}")
        if len(t.shape) > 3 and any(int(s) > 1 for s in t.shape[:-3]):
            shape.append(f"tensor {t.name!r} of shape {t.shape} has a dimension > 1 outside the 3 innermost")
    return dtype, shape


def _constant_ints(summary, index: int) -> np.ndarray | None:
    t = summary.tensors[index]
    if not t.is_constant or t.dtype != "INT32":
        return None
    return np.frombuffer(t.data, dtype=np.int32)


def _op_limitations(summary, op) -> list[str]:
    """The documented per-op limitations that can be checked from the file."""
    problems = []
    if op.name == "FULLY_CONNECTED":
        out = summary.tensors[op.outputs[0]]
        if int(np.prod(out.shape[:-1])) != 1:
            problems.append(f"FullyConnected output {out.shape} is not one-dimensional (batch must be 1)")
    if op.name == "STRIDED_SLICE" and len(op.inputs) > 3:
        strides = _constant_ints(summary, op.inputs[3])
        if strides is None or np.any(strides != 1):
            problems.append("StridedSlice with strides other than 1")
    if op.name in _NO_BATCH_AXIS and len(op.inputs) > 1:
        axes = _constant_ints(summary, op.inputs[1])
        rank = len(summary.tensors[op.inputs[0]].shape)
        if axes is None or np.any(np.mod(axes, max(rank, 1)) == 0):
            problems.append(f"{op.name} reduces over the batch dimension")
    if op.name == "CONCATENATION":
        constants = [i for i in op.inputs if summary.tensors[i].is_constant]
        if constants and (len(op.inputs) != 2 or any(np.frombuffer(summary.tensors[i].data, np.uint8).any()
                                                      for i in constants)):
            problems.append("Concatenation with a constant input that is not an all-zero padding")
    return problems


def format_report(report: dict) -> str:
    """Human-readable report: summary lines and an ``Operator Count Status`` table (compiler style)."""
    dynamic = ", ".join(report["dynamic_tensors"][:4])
    lines = [
        f"Edge TPU compatibility (static check against {report['source']})",
        f"  file: {report['file']}",
        f"  operations: {report['n_ops']} total, {report['n_mapped']} would be mapped to the Edge TPU, "
        f"{report['n_cpu']} would run on the CPU",
        f"  supported in isolation (what -a/--enable_multiple_subgraphs could map): "
        f"{report['supported_anywhere']} of {report['n_ops']}",
        f"  static shapes: {'yes' if report['static_shapes'] else 'NO (' + dynamic + ')'}"
        f"; all activations 8-bit quantized: {'yes' if report['fully_8bit'] else 'NO'}",
    ]
    if report["first_cpu_op"] is not None:
        first = report["ops"][report["first_cpu_op"]]
        lines.append(f"  first CPU operation: #{first['index']} {first['op']} ({first['reason']})")
    lines += ["", f"  {'Operator':<24}{'Count':>6}  Status"]
    rows = Counter((e["op"], e["status"]) for e in report["ops"])
    for (name, status), count in sorted(rows.items(), key=lambda item: (item[0][1] != STATUS_MAPPED, item[0])):
        lines.append(f"  {name:<24}{count:>6}  {status}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bnc_deploy.targets.edgetpu FILE.tflite``: print the report."""
    parser = argparse.ArgumentParser(description="Static Edge TPU compatibility report of a TFLite file.")
    parser.add_argument("tflite", help="a .tflite file")
    args = parser.parse_args(argv)
    try:
        print(format_report(edgetpu_compatibility(args.tflite)))
    except (OSError, ValueError) as exc:
        print(f"edgetpu-report: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
