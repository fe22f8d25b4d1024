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

5. operator versions: each operator code's version in the file against what TF Lite 2.5.0
   runs (:data:`OP_VERSION_MIN_RUNTIME`): the TF Lite runtime the last Edge TPU release (compiler
   16, runtime 14, July 2021) pairs with is ``tflite_runtime`` 2.5.0 (Coral's release notes; not
   re-checked here), and the CPU part of a compiled file runs there. The versions of an operator
   TF Lite 2.5.0 registers are those whose minimum runtime in TensorFlow's
   ``tensorflow/lite/tools/versioning/runtime_version.cc`` is <= 2.5.0 (the table is append-only;
   the entries used here are copied from it). What the Edge TPU *compiler* 16 accepts for the ops
   it maps is not documented: "limit unknown". The converter's own ``min_runtime_version``
   metadata (the same table over the whole file) is reported too.

This is a static approximation: the real compiler can still refuse an op for reasons not
documented (size limits, "unspecified limitation"), so treat "mapped" as "may be mapped". The
mapped prefix can be *run* on the LiteRT CPU int8 kernels against the reference with
``--model MODEL.bnc`` (:mod:`bnc_deploy.targets.edgetpu_prefix`): that checks the arithmetic of
the ops the Edge TPU would run, on CPU kernels, not the Edge TPU itself.
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
    "CONCATENATION": (
        "Concatenation",
        "all",
        "No fused activation function. If any input is a compile-time "
        "constant tensor, there must be only 2 inputs, and this constant tensor must be all zeroes.",
    ),
    "CONV_2D": ("Conv2d", "all", "Must use the same dilation in x and y dimensions."),
    "DEPTHWISE_CONV_2D": ("DepthwiseConv2d", "all", "Must use the same dilation in x and y dimensions (13+)."),
    "EXPAND_DIMS": ("ExpandDims", "13+", ""),
    "FULLY_CONNECTED": (
        "FullyConnected",
        "all",
        "Only the default format is supported for fully-connected weights. Output tensor is one-dimensional.",
    ),
    "L2_NORMALIZATION": ("L2Normalization", "all", ""),
    "LOGISTIC": ("Logistic", "all", ""),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("LSTM", "14+", "Unidirectional LSTM only."),
    "MAXIMUM": ("Maximum", "all", ""),
    "MAX_POOL_2D": ("MaxPool2d", "all", "No fused activation function."),
    "MEAN": (
        "Mean",
        "all",
        "No reduction in batch dimension. If a z-reduction, the z-dimension must be multiple of 4 (13+).",
    ),
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
    "STRIDED_SLICE": (
        "StridedSlice",
        "all",
        "Supported only when all strides are equal to 1, with ellipsis-axis-mask == 0 and new-axis-mask == 0.",
    ),
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
    "FULLY_CONNECTED": {2},
    "CONV_2D": {2},
    "DEPTHWISE_CONV_2D": {2},
    "TRANSPOSE_CONV": {0, 3},
    "RESHAPE": {1},
    "STRIDED_SLICE": {1, 2, 3},
    "SLICE": {1, 2},
    "SUM": {1},
    "MEAN": {1},
    "REDUCE_MAX": {1},
    "REDUCE_MIN": {1},
    "PAD": {1},
    "EXPAND_DIMS": {1},
    "SPLIT": {0},
    "TRANSPOSE": {1},
    "RESIZE_BILINEAR": {1},
    "RESIZE_NEAREST_NEIGHBOR": {1},
}
#: TF Lite runtime paired with Edge TPU runtime 14 / compiler 16 (``tflite_runtime`` 2.5.0).
EDGETPU_TFLITE_RUNTIME = "2.5.0"
#: Minimum TF Lite runtime of each operator version, ``op -> (version 1, version 2, ...)``, copied
#: from TensorFlow's ``tensorflow/lite/tools/versioning/runtime_version.cc``
#: (``FindMinimumRuntimeVersionForOp``; the copy read lists versions up to TF 2.13) for the Edge
#: TPU table's operators and the CPU tail ops our exports use. A version past the end of a tuple is
#: newer than that table (so newer than 2.5.0).
OP_VERSION_MIN_RUNTIME: dict[str, tuple[str, ...]] = {
    "ABS": ("1.13.0", "2.4.0", "2.5.0", "2.6.0", "2.12.0"),
    "ADD": ("1.5.0", "1.14.0", "2.4.0", "2.6.0"),
    "ARG_MAX": ("1.9.0", "1.14.0", "2.9.0"),
    "ARG_MIN": ("1.9.0", "1.14.0", "2.9.0"),
    "AVERAGE_POOL_2D": ("1.5.0", "1.14.0", "2.3.0"),
    "CAST": ("1.5.0", "2.7.0", "2.8.0", "2.9.0", "2.12.0"),
    "CONCATENATION": ("1.5.0", "1.14.0", "2.3.0"),
    "CONV_2D": ("1.5.0", "1.14.0", "1.14.0", "2.3.0", "2.4.0", "2.9.0", "2.11.0"),
    "DEPTHWISE_CONV_2D": ("1.5.0", "1.12.0", "1.14.0", "2.2.0", "2.3.0", "2.3.0", "2.11.0"),
    "DEQUANTIZE": ("1.13.1", "1.14.0", "1.15.0", "2.2.0", "2.7.0"),
    "EQUAL": ("1.14.0", "1.14.0", "2.3.0"),
    "EXPAND_DIMS": ("1.10.0",),
    "FULLY_CONNECTED": ("1.5.0", "1.10.0", "1.14.0", "1.14.0", "2.0.0", "2.1.0", "2.3.0", "2.3.0", "2.3.0", "2.11.0"),
    "GATHER": ("1.6.0", "1.14.0", "1.15.0", "2.4.0", "2.5.0"),
    "GREATER": ("1.14.0", "1.14.0"),
    "L2_NORMALIZATION": ("1.5.0", "1.14.0"),
    "LOGICAL_AND": ("1.11.0",),
    "LOGICAL_NOT": ("1.11.0",),
    "LOGICAL_OR": ("1.11.0",),
    "LOGISTIC": ("1.14.0", "1.14.0", "2.3.0"),
    "MAXIMUM": ("1.14.0", "1.14.0", "2.3.0", "2.3.0"),
    "MAX_POOL_2D": ("1.5.0", "1.14.0", "2.3.0"),
    "MEAN": ("1.6.0", "1.14.0", "2.4.0"),
    "MINIMUM": ("1.14.0", "1.14.0", "2.3.0", "2.3.0"),
    "MUL": ("1.5.0", "1.14.0", "1.15.0", "2.3.0", "2.6.0", "2.11.0"),
    "NOT_EQUAL": ("1.14.0", "1.14.0", "2.3.0"),
    "PACK": ("1.11.0", "1.14.0", "2.3.0"),
    "PAD": ("1.5.0", "1.14.0", "2.4.0", "2.6.0"),
    "PRELU": ("1.8.0",),
    "QUANTIZE": ("1.14.0", "1.15.0", "2.7.0"),
    "REDUCE_ANY": ("1.11.0",),
    "REDUCE_MAX": ("1.11.0", "1.14.0", "2.5.0"),
    "REDUCE_MIN": ("1.11.0", "1.14.0", "2.5.0"),
    "RELU": ("1.5.0", "2.1.0", "2.5.0"),
    "RELU6": ("1.5.0", "1.14.0", "2.5.0"),
    "RELU_N1_TO_1": ("1.5.0",),
    "RESHAPE": ("1.5.0",),
    "RESIZE_BILINEAR": ("1.7.0", "1.14.0", "2.2.0", "2.5.0"),
    "RESIZE_NEAREST_NEIGHBOR": ("1.13.1", "1.14.0", "2.3.0", "2.4.0"),
    "RSQRT": ("1.10.0", "2.5.0"),
    "SELECT_V2": ("2.2.0",),
    "SLICE": ("1.14.0", "1.14.0", "1.14.0", "2.4.0", "2.5.0"),
    "SOFTMAX": ("1.5.0", "1.14.0", "2.3.0"),
    "SPACE_TO_DEPTH": ("1.5.0", "1.14.0"),
    "SPLIT": ("1.5.0", "1.14.0", "1.14.0", "2.3.0"),
    "SQUARED_DIFFERENCE": ("1.13.1", "2.5.0"),
    "SQUEEZE": ("1.6.0", "2.5.0"),
    "STRIDED_SLICE": ("1.6.0", "1.14.0", "2.1.0", "2.2.0", "2.5.0", "2.6.0"),
    "SUB": ("1.6.0", "1.14.0", "2.3.0", "2.4.0", "2.4.0"),
    "SUM": ("1.10.0", "1.15.0"),
    "TANH": ("1.14.0", "1.14.0", "2.3.0"),
    "TRANSPOSE": ("1.6.0", "1.14.0", "1.15.0", "2.3.0", "2.4.0", "2.12.0"),
    "TRANSPOSE_CONV": ("1.9.0", "2.2.0", "2.3.0", "2.13.0"),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("1.13.1", "1.14.0", "2.3.0", "2.12.0"),
}
RUNTIME_VERSION_SOURCE = "tensorflow/lite/tools/versioning/runtime_version.cc (FindMinimumRuntimeVersionForOp)"
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
    CPU), ``static_shapes``, ``dynamic_tensors``, ``fully_8bit``, ``source``; ``op_versions`` (one
    entry per operator code, :func:`op_versions`), ``op_versions_ok`` (True: every version runs on
    TF Lite :data:`EDGETPU_TFLITE_RUNTIME`; False: one does not; None: one is not in our table),
    ``runtime_reference`` and ``min_runtime_version`` (the converter's metadata string, or None);
    ``boundary``: the tensors the mapped part hands to the CPU (``tensor``, ``dtype``, ``shape``,
    ``read_by``: operator indices), empty when nothing is mapped.
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
    from bnc_deploy.targets.edgetpu_prefix import boundary_tensors

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
        "op_versions": (versions := op_versions(summary, entries)),
        "op_versions_ok": (
            False
            if any(v["runtime_ok"] is False for v in versions)
            else None
            if any(v["runtime_ok"] is None for v in versions)
            else True
        ),
        "runtime_reference": f"TF Lite {EDGETPU_TFLITE_RUNTIME} (Edge TPU runtime 14 / compiler 16); "
        f"per-version minimum runtimes from {RUNTIME_VERSION_SOURCE}",
        "min_runtime_version": _min_runtime_version(summary),
        "boundary": [
            {
                "tensor": summary.tensors[i].name,
                "dtype": summary.tensors[i].dtype,
                "shape": list(summary.tensors[i].shape),
                "read_by": [op.index for op in summary.ops if i in op.inputs],
            }
            for i in boundary_tensors(summary, {"ops": entries})
        ],
    }


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def op_versions(summary, entries: list[dict] | None = None) -> list[dict]:
    """One entry per (operator, version) in the file: ``op``, ``version``, ``count``,
    ``min_runtime`` (the TF Lite version that introduced it; None if the op is not in our table,
    ``"> 2.13"`` past its end), ``runtime_max_version`` (the op's largest version TF Lite 2.5.0 runs,
    None if unknown), ``runtime_ok`` (True/False, None: unknown), ``placement`` (``edgetpu`` if any
    instance is mapped) and ``compiler_limit`` (always ``"unknown"``: not documented for compiler 16).
    """
    limit = _version_key(EDGETPU_TFLITE_RUNTIME)
    placed: dict[str, set] = {}
    for e in entries or []:
        placed.setdefault(e["op"], set()).add(e["placement"])
    counts = Counter((op.name, op.version) for op in summary.ops)
    out = []
    for (name, version), count in sorted(counts.items()):
        table = OP_VERSION_MIN_RUNTIME.get(name)
        if table is None:
            min_runtime, max_ok, ok = None, None, None
        else:
            max_ok = max((v + 1 for v, r in enumerate(table) if _version_key(r) <= limit), default=0)
            min_runtime = table[version - 1] if 1 <= version <= len(table) else "> 2.13"
            ok = version <= max_ok
        out.append(
            {
                "op": name,
                "version": int(version),
                "count": count,
                "min_runtime": min_runtime,
                "runtime_max_version": max_ok,
                "runtime_ok": ok,
                "placement": "edgetpu" if "edgetpu" in placed.get(name, ()) else "cpu",
                "compiler_limit": "unknown",
            }
        )
    return out


def _min_runtime_version(summary) -> str | None:
    raw = summary.metadata.get("min_runtime_version")
    text = raw.split(b"\0", 1)[0].decode("ascii", errors="replace").strip() if raw else ""
    return text or None


def _check_op(summary, op) -> dict:
    """Table membership, tensor types, static shapes and op-specific limits of one operator."""
    documented = EDGETPU_SUPPORTED_OPS.get(op.name)
    dtype, shape = _tensor_problems(summary, op)
    limits = _op_limitations(summary, op) if documented else []
    table = [] if documented else [f"{op.name} is not in the Edge TPU supported-operations table"]
    # The first failing requirement names the status (table > data type > shapes > op limits).
    status = (
        STATUS_NOT_IN_TABLE
        if table
        else STATUS_DTYPE
        if dtype
        else STATUS_DYNAMIC
        if shape
        else STATUS_LIMITATION
        if limits
        else None
    )
    problems = table + dtype + shape + limits
    return {
        "index": op.index,
        "op": op.name,
        "edgetpu_name": documented[0] if documented else None,
        "in_table": documented is not None,
        "problems": problems,
        "supported": not problems,
        "status": status,
        "placement": None,
        "reason": None,
    }


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
        if constants and (
            len(op.inputs) != 2 or any(np.frombuffer(summary.tensors[i].data, np.uint8).any() for i in constants)
        ):
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
    for b in report.get("boundary", []):
        lines.append(
            f"  Edge TPU part hands to the CPU: {b['tensor']!r} {b['dtype']} {b['shape']} "
            f"(read by op{'s' if len(b['read_by']) > 1 else ''} "
            f"{', '.join('#' + str(k) for k in b['read_by'])})"
        )
    if "op_versions" in report:
        ok = {True: "yes", False: "NO", None: "unknown for some ops"}[report["op_versions_ok"]]
        lines.append(
            f"  op versions run on TF Lite {EDGETPU_TFLITE_RUNTIME} (Edge TPU runtime 14's CPU side): {ok}; "
            f"converter's min_runtime_version: {report['min_runtime_version']}; "
            "Edge TPU compiler 16's own version limits: unknown"
        )
        for v in report["op_versions"]:
            limit = "limit unknown" if v["runtime_max_version"] is None else f"<= v{v['runtime_max_version']} on 2.5.0"
            lines.append(
                f"    {v['op']:<24} v{v['version']:<3} introduced in TF Lite {v['min_runtime'] or '?'}"
                f" ({limit}){'' if v['runtime_ok'] is not False else '  TOO NEW'}"
            )
    prefix = report.get("prefix")
    if prefix is not None:
        verdict = (
            "EXACT" if prefix["exact"] else "not exact" if prefix["exact_claimed"] else "compared (not claimed exact)"
        )
        lines.append(
            f"  mapped prefix on {prefix['runtime']} vs the reference, {prefix['rows']} rows "
            f"({prefix['rows_from']}): {verdict}; class scores from the prefix = reference: "
            f"{prefix['class_scores_equal']}; out-of-range rows flagged: {prefix['invalid_rows_flagged']}"
        )
        for b in prefix["boundary"]:
            lines.append(
                f"    TPU -> CPU tensor {b['tensor']!r} {b['dtype']} {b['shape']}: "
                + (
                    f"{b['compared_as']}, max |diff| {b['max_abs_diff']:g} code units"
                    if b["compared_as"]
                    else "not compared"
                )
            )
    lines += ["  (static, compiler not run)", "", f"  {'Operator':<24}{'Count':>6}  Status"]
    rows = Counter((e["op"], e["status"]) for e in report["ops"])
    for (name, status), count in sorted(rows.items(), key=lambda item: (item[0][1] != STATUS_MAPPED, item[0])):
        lines.append(f"  {name:<24}{count:>6}  {status}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bnc_deploy.targets.edgetpu FILE.tflite [--model MODEL.bnc] [--json]``: print the
    report; with ``--model``, also run the mapped prefix on the LiteRT CPU kernels against it."""
    from bnc_deploy.formats.checkset import N_RANDOM_ROWS

    parser = argparse.ArgumentParser(
        description="Static Edge TPU compatibility report of a TFLite file (static, the Edge TPU compiler is not run)."
    )
    parser.add_argument("tflite", help="a .tflite file")
    parser.add_argument(
        "--model",
        help="the .bnc model file it was exported from: run the mapped prefix on the "
        "LiteRT CPU int8 kernels and compare it with the reference",
    )
    parser.add_argument(
        "--random-rows",
        type=int,
        default=N_RANDOM_ROWS,
        help=f"random valid rows added to the stored check rows for --model (default {N_RANDOM_ROWS})",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    try:
        report = edgetpu_compatibility(args.tflite)
        if args.model:
            from bnc_deploy.artifacts import load_artifact
            from bnc_deploy.targets.edgetpu_prefix import run_prefix

            report["prefix"] = run_prefix(args.tflite, load_artifact(args.model), report, n_random=args.random_rows)
        if args.json:
            import json

            print(json.dumps(report, indent=1))
        else:
            print(format_report(report))
    except (OSError, ValueError) as exc:
        print(f"edgetpu-report: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
