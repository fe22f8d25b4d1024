"""Replay data movement on row-shaped arrays (what interval, one-hot and data-use passes share).

Contract: :func:`emulate_move` applies a data-movement node (cast, reshape, transpose, slice,
gather of constant indices, ...) to an array shaped like the node's input row and returns the
array shaped like its output row, or None when the node cannot be replayed (unknown shapes,
dynamic indices, an op it does not know). Nothing here changes the state.
"""

from __future__ import annotations

import math

import numpy as np

_PASS_THROUGH = ("Cast", "Identity", "Quantize", "Dequantize", "QuantizeLinear", "DequantizeLinear")
_RESHAPES = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")


def emulate_move(state, node, array):
    """Apply a data-movement node to a row-shaped array; None if it cannot be emulated."""
    out_rs = state.shape(node.outputs[0])
    if array is None or out_rs is None:
        return None
    op = node.op
    try:
        if op in _PASS_THROUGH:
            result = array
        elif op in _RESHAPES:
            result = array.reshape(out_rs)
        elif op == "Expand":
            result = np.broadcast_to(array, out_rs)
        elif op == "Transpose":
            perm = node.attrs.get("perm")
            if perm is None and len(node.inputs) > 1 and node.inputs[1]:
                perm = state.value(node.inputs[1])
            result = np.transpose(array, None if perm is None else [int(p) for p in perm])
        elif op == "Slice":
            result = array[slices(state, node, array.ndim)]
        elif op == "StridedSlice":
            result = strided_slice(state, node, array)
        elif op == "Gather":
            indices = state.value(node.inputs[1])
            if indices is None:
                return None
            axis = node.attrs.get("axis", 0)
            result = np.take(array, indices.astype(np.int64), axis=int(axis))
        else:
            return None
    except (ValueError, IndexError, TypeError):
        return None
    return result if result is not None and tuple(result.shape) == tuple(out_rs) else None


def reduce_axes(state, node) -> tuple[tuple, bool]:
    """Axes and keep-dims flag of a reduction (ONNX attrs or input, TFLite input and options)."""
    rank = len(state.shape(node.inputs[0]) or ())
    if node.op == "ReduceSum" and state.graph.format == "onnx":
        axes = state.value(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else node.attrs.get("axes")
        keep = bool(node.attrs.get("keepdims", 1))
    else:
        axes = state.value(node.inputs[1]) if len(node.inputs) > 1 else None
        keep = bool(node.attrs.get("keepDims", False))
    if axes is None:
        axes = list(range(rank))
    axes = tuple(int(a) % rank for a in np.asarray(axes).reshape(-1)) if rank else ()
    return axes, keep


def slices(state, node, rank) -> tuple:
    """Python slices of an ONNX Slice (starts, ends, axes, steps; TFLite SLICE: begin, size)."""
    if state.graph.format == "tflite":
        begin, size = state.value(node.inputs[1]), state.value(node.inputs[2])
        return tuple(slice(int(b), None if int(s) == -1 else int(b) + int(s)) for b, s in zip(begin, size))
    vals = [state.value(i) if k < len(node.inputs) and i else None for k, i in enumerate(node.inputs)]
    starts, ends = vals[1], vals[2]
    axes = vals[3] if len(vals) > 3 and vals[3] is not None else np.arange(len(starts))
    steps = vals[4] if len(vals) > 4 and vals[4] is not None else np.ones(len(starts), dtype=np.int64)
    sl = [slice(None)] * rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        sl[int(a) % rank] = slice(int(s), int(e), int(st))
    return tuple(sl)


def strided_slice(state, node, array):
    """A TFLite STRIDED_SLICE (begin/end/shrink masks, offset) applied to ``array``; None if unsupported."""
    a = node.attrs
    if a.get("ellipsisMask") or a.get("newAxisMask"):
        return None
    begin, end, strides = (state.value(i) for i in node.inputs[1:4])
    if begin is None or end is None or strides is None:
        return None
    index = []
    for d in range(len(begin)):
        b, e, s = int(begin[d]), int(end[d]), int(strides[d])
        if a.get("offset"):
            e = b + e
        if (a.get("shrinkAxisMask", 0) >> d) & 1:
            index.append(b)
            continue
        index.append(
            slice(None if (a.get("beginMask", 0) >> d) & 1 else b, None if (a.get("endMask", 0) >> d) & 1 else e, s)
        )
    return array[tuple(index)]


def fit(array, rs):
    """``array`` as row shape ``rs`` (same shape, same size reshaped, or broadcast)."""
    array = np.asarray(array)
    if array.shape == tuple(rs):
        return array
    if array.size == math.prod(rs):
        return array.reshape(rs)
    return np.broadcast_to(array, rs).copy()
