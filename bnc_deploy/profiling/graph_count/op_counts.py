"""The op table (canonical op -> kind) and how many element operations a node does per row.

Contract: :data:`KINDS` maps every canonical op with a counting rule to its kind; an op missing
here is counted as "unknown" (ops None), never as 0. The counts below are raw per-row element
operations; which category they belong to is decided by the rules (:mod:`.rules`).

* elementwise ops: ``numel(out)``; the n-ary ``Sum`` of ``k`` inputs: ``(k - 1) * numel(out)``;
* reductions (``ReduceSum``/``ReduceAny``/``ArgMax``): ``numel(in) - numel(out)`` (``k`` terms:
  ``k - 1``);
* products (``MatMul``/``Gemm``/``FullyConnected``): MACs = ``numel(out) * K``; ``Conv``:
  ``numel(out) * K_h * K_w * C_in / groups``; the bias is not included.
"""

from __future__ import annotations

import numpy as np

# ONNX names are canonical; TFLite builtins are mapped onto them by the reader.
KINDS = {
    **dict.fromkeys(
        [
            "Cast",
            "Reshape",
            "Squeeze",
            "Unsqueeze",
            "Flatten",
            "Identity",
            "Transpose",
            "Slice",
            "StridedSlice",
            "Concat",
            "Pack",
            "Expand",
            "Quantize",
            "Dequantize",
            "QuantizeLinear",
            "DequantizeLinear",
            "Tile",
            "Pad",
            "Shape",
            "Size",
            "ConstantOfShape",
            "Split",
        ],
        "move",
    ),
    "Gather": "gather",
    # GatherElements of a constant index map (ORT lookup graph: clipped code -> table row) and the
    # dequantizing lookup of com.microsoft GatherBlockQuantized (the ORT lookup graph's table)
    "GatherElements": "gather",
    "com.microsoft:GatherBlockQuantized": "gather",
    "Add": "add",
    "Sub": "add",
    "Sum": "sum",  # n-ary elementwise sum (ONNX gather-grouped adds its G looked-up rows)
    "Mul": "mul",
    "Div": "mul",
    "Neg": "unary",
    "Abs": "unary",
    "BitShift": "unary",
    "Floor": "unary",  # --pack-words unpacks its bit fields with Floor
    "Mod": "mul",
    "ReduceSum": "reduce_sum",
    "MatMul": "matmul",
    "Gemm": "matmul",
    "FullyConnected": "matmul",
    "Conv": "conv",
    "DepthwiseConv": "conv",
    "BatchNormalization": "batchnorm",
    **dict.fromkeys(["Equal", "NotEqual", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"], "compare"),
    **dict.fromkeys(["And", "Or", "Not", "Xor", "IsNaN", "IsInf"], "logic"),
    # ReduceMax/Min reduce 0/1 flags in the micro-profile guard (TFLM has no REDUCE_ANY): a guard
    # op like ReduceAny, counted the same way.
    **dict.fromkeys(["ReduceAny", "ReduceAll", "ReduceMax", "ReduceMin"], "reduce_logic"),
    "Where": "where",
    **dict.fromkeys(["Min", "Max", "Clip", "Relu", "Relu6"], "clamp"),
    "ArgMax": "argmax",
    "ArgMin": "argmax",
    "OneHot": "onehot",
    **dict.fromkeys(
        [
            "Sigmoid",
            "Tanh",
            "Softmax",
            "LogSoftmax",
            "LeakyRelu",
            "MaxPool",
            "AveragePool",
            "GlobalAveragePool",
            "GlobalMaxPool",
            "ReduceMean",
        ],
        "activation",
    ),
}

#: The canonical name of com.microsoft GatherBlockQuantized (readers prefix custom domains).
GATHER_BLOCK_QUANTIZED = "com.microsoft:GatherBlockQuantized"

#: Products that carry a dense / convolution layer's MACs.
DENSE_OPS = ("Gemm", "MatMul", "FullyConnected")
CONV_OPS = ("Conv", "DepthwiseConv")


def element_ops(state, node, kind) -> int | None:
    """Element operations per row: ``numel(out)``; reductions ``numel(in) - numel(out)``; MACs."""
    n_out = state.numel(node.outputs[0])
    if kind in ("reduce_sum", "reduce_logic", "argmax"):
        n_in = state.numel(node.inputs[0])
        return None if n_in is None or n_out is None else n_in - n_out
    if kind in ("matmul", "conv"):
        return product_macs(state, node)
    if kind == "sum":
        terms = len([i for i in node.inputs if i])
        return None if n_out is None else n_out * max(terms - 1, 0)
    return n_out


def product_macs(state, node) -> int | None:
    """MACs per row of MatMul/Gemm/FullyConnected/Conv (bias excluded)."""
    n_out = state.numel(node.outputs[0])
    if n_out is None:
        return None
    w = state.shape(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    a = state.shape(node.inputs[0])
    if node.op == "FullyConnected":
        k = None if w is None else w[-1]
    elif node.op == "Gemm":
        k = None if a is None else (a[-2] if node.attrs.get("transA") else a[-1])
    elif node.op == "MatMul":
        k = None if a is None else a[-1]
    elif node.op == "Conv":  # ONNX OIHW weights: K = C_in/groups * kh * kw
        k = None if w is None else int(np.prod(w[1:]))
    elif node.op == "DepthwiseConv":  # TFLite [1, kh, kw, C_out]
        k = None if w is None else int(w[1] * w[2])
    else:
        k = None
    if node.op == "Conv" and state.graph.format == "tflite" and w is not None:
        k = int(np.prod(w[1:]))  # TFLite OHWI
    return None if k is None else int(n_out * k)


def has_bias(node) -> bool:
    """Whether a product node has a (non-empty) bias input."""
    if node.op in ("FullyConnected", "Conv", "DepthwiseConv", "Gemm"):
        return len(node.inputs) > 2 and bool(node.inputs[2])
    return False
