"""Interval analysis of index tensors: the range each element of an integer code can take.

Why: a one-hot built from an index only has hot positions the index can reach, so a product
reading it adds fewer terms (effective additions), and weight rows no index can select are not
parameters (the ``equal-cast`` padding). Contract: ``state.interval[name]`` is a pair of float
arrays ``(lo, hi)`` shaped like the tensor's row; inputs start at ``(-inf, inf)``; an op whose
range cannot be derived gives ``(-inf, inf)`` too, so an interval is always a safe over-estimate.
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.profiling.graph_count.movement import emulate_move, fit, reduce_axes
from bnc_deploy.profiling.graph_count.op_counts import KINDS


def unbounded(rs) -> tuple:
    """The interval of an index nothing is known about."""
    return np.full(rs, -np.inf), np.full(rs, np.inf)


def bounds(state, name):
    """(lo, hi) float arrays of an index or constant tensor, None if unknown."""
    if state.value(name) is not None:
        v = state.value(name).astype(np.float64)
        return v, v
    return state.interval.get(name)


def propagate_interval(state, node) -> None:
    """Set the interval of ``node``'s first output from its inputs' intervals."""
    out = node.outputs[0]
    rs = state.shape(out)
    if rs is None:
        return
    result = None
    try:
        result = _interval(state, node, rs)
    except (ValueError, IndexError, TypeError):
        result = None
    if result is None or result[0].shape != rs:
        result = unbounded(rs)
    state.interval[out] = result


def _interval(state, node, rs):
    op = node.op
    ins = [bounds(state, i) if i else None for i in node.inputs]
    if op in ("Add", "Sub", "Mul", "Min", "Max") and len(ins) >= 2 and ins[0] is not None and ins[1] is not None:
        (la, ha), (lb, hb) = ins[0], ins[1]
        with np.errstate(invalid="ignore"):
            if op == "Add":
                lo, hi = la + lb, ha + hb
            elif op == "Sub":
                lo, hi = la - hb, ha - lb
            elif op == "Min":
                lo, hi = np.minimum(la, lb), np.minimum(ha, hb)
            elif op == "Max":
                lo, hi = np.maximum(la, lb), np.maximum(ha, hb)
            else:
                corners = np.stack(np.broadcast_arrays(la * lb, la * hb, ha * lb, ha * hb))
                corners = np.nan_to_num(corners, nan=0.0, posinf=np.inf, neginf=-np.inf)
                lo, hi = corners.min(axis=0), corners.max(axis=0)
        return fit(lo, rs), fit(hi, rs)
    if op in ("Relu", "Relu6", "Clip") and ins[0] is not None:
        lo, hi = ins[0]
        top = 6.0 if op == "Relu6" else np.inf
        low = 0.0
        if op == "Clip":
            low = -np.inf if len(ins) < 2 or ins[1] is None else ins[1][0]
            top = np.inf if len(ins) < 3 or ins[2] is None else ins[2][1]
        return fit(np.clip(lo, low, top), rs), fit(np.clip(hi, low, top), rs)
    if op == "Where" and ins[1] is not None and ins[2] is not None:
        return fit(np.minimum(ins[1][0], ins[2][0]), rs), fit(np.maximum(ins[1][1], ins[2][1]), rs)
    if op == "ReduceSum" and ins[0] is not None:
        axes, keep = reduce_axes(state, node)
        lo, hi = ins[0]
        return fit(np.sum(lo, axis=axes, keepdims=keep), rs), fit(np.sum(hi, axis=axes, keepdims=keep), rs)
    if KINDS.get(op) in ("move", "gather") and ins[0] is not None:
        lo = emulate_move(state, node, ins[0][0])
        hi = emulate_move(state, node, ins[0][1])
        if lo is not None and hi is not None:
            return lo, hi
    return None
