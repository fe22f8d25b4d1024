"""Data use: which values reach the outputs as data, and the guard work that the rest is.

A backward pass marks, per last-axis column, which values reach the outputs through data inputs
(not through a select's condition or a comparison). Per-row nodes whose outputs are not used
that way are guard work; a product some of whose output columns are only used by the guard
(ONNX ``onehot-fc``: the column counting valid features) moves those columns' share to guard.

Contract: :func:`backward` runs after the forward pass (it needs ``state.control_inputs``) and
returns the ``used`` map for ``state.used``; :func:`apply_data_use` then adjusts one node's
record (category, ``ops`` and ``guard_share``). Load-time and unknown nodes are left alone.
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.profiling.graph_count.movement import emulate_move, reduce_axes
from bnc_deploy.profiling.graph_count.op_counts import KINDS


def backward(state) -> dict:
    """Per tensor, which last-axis columns reach the graph outputs through data inputs."""
    used = {name: np.zeros(max(t.last_dim, 1), dtype=bool) for name, t in state.tensors.items()}
    for name in state.graph.outputs:
        if name in used:
            used[name][:] = True
    for node in reversed(state.graph.nodes):
        outs = [used[o] for o in node.outputs if o in used]
        if not outs or not any(o.any() for o in outs):
            continue
        out_used = outs[0] if len(outs) == 1 else np.ones_like(outs[0]) * any(o.any() for o in outs)
        control = state.control_inputs.get(node.index, set())
        for k, name in enumerate(node.inputs):
            if not name or name not in used or name in control:
                continue  # conditions and guard comparisons do not carry data
            mask = input_use(state, node, k, name, out_used)
            if mask is not None and mask.shape == used[name].shape:
                used[name] |= mask
            else:
                used[name] |= out_used.any()
    return used


def input_use(state, node, k, name, out_used):
    """Columns of input ``k`` that the used output columns need (None: all if any)."""
    n_in = state.tensors[name].last_dim
    n_out = out_used.shape[0]
    everything = np.full(n_in, out_used.any())
    kind = KINDS.get(node.op)
    in_rs, out_rs = state.shape(name), state.shape(node.outputs[0])
    if in_rs is None or out_rs is None:
        return everything
    if node.op == "Concat":
        axis = int(node.attrs.get("axis", 0)) % max(len(out_rs), 1)
        if axis != len(out_rs) - 1:
            return everything
        start = sum(state.tensors[i].last_dim for i in node.inputs[:k] if i)
        return out_used[start : start + n_in].copy()
    if node.op in ("Slice", "StridedSlice") and k == 0:
        idx = np.arange(n_in).reshape((1,) * (len(in_rs) - 1) + (n_in,)) if in_rs else None
        if idx is None:
            return everything
        picked = emulate_move(state, node, np.broadcast_to(idx, in_rs))
        if picked is None or picked.ndim == 0 or picked.shape[-1] != n_out:
            return everything
        mask = np.zeros(n_in, dtype=bool)
        cols = picked.reshape(-1, n_out)[0]
        mask[cols[out_used]] = True
        return mask
    if kind == "matmul":
        if node.op == "MatMul" and k == 1 and n_in == n_out:
            return out_used.copy()
        if node.op in ("FullyConnected", "Conv", "DepthwiseConv", "Gemm") and k == 2 and n_in == n_out:
            return out_used.copy()
        return everything
    if kind == "gather" and k == 0 and node.attrs.get("axis", 0) == 0 and len(in_rs) >= 2 and n_in == n_out:
        return out_used.copy()
    if kind == "reduce_sum" or kind == "reduce_logic":
        axes, _ = reduce_axes(state, node)
        return out_used.copy() if len(in_rs) - 1 not in axes and n_in == n_out else everything
    if kind in ("add", "mul", "unary", "clamp", "where", "compare", "logic", "activation", "batchnorm") or node.op in (
        "Cast",
        "Quantize",
        "Dequantize",
        "Identity",
        "Expand",
        "Squeeze",
        "Unsqueeze",
    ):
        if n_in == n_out:
            return out_used.copy()
        return everything
    return everything


def apply_data_use(state, node) -> None:
    """Per-row work that reaches the outputs only through conditions is guard work."""
    rec = state.records[node.index]
    if node.index in state.load_time or rec.category in ("unknown",):
        return
    outs = [state.used[o] for o in node.outputs if o in state.used]
    if not outs:
        return
    used = outs[0]
    if not used.any():
        if rec.category == "free":
            rec.note = "validation path" + (f"; {rec.note}" if rec.note else "")
            rec.lookups = 0
        elif rec.category != "guard":
            rec.note = f"validation path (would be {rec.category})"
            rec.category = "guard"
        return
    if rec.category in ("arithmetic", "rescale", "addressing") and rec.ops and not used.all():
        share = rec.ops * int((~used).sum()) // used.shape[0]
        rec.ops -= share
        rec.guard_share = share
        if rec.effective_additions is not None:
            rec.effective_additions = rec.ops
        rec.note += f"; {share:,} of its ops feed only guard columns (counted as guard)"
