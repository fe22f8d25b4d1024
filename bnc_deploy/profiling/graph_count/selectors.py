"""One-hot structure of selector tensors: which index owns each position, which positions can be hot.

Why: a product of a one-hot with a table is a gather + sum in disguise; the paper counts the
additions of that sum, ``(h - 1) * M`` for ``h`` hot entries per row vector and ``M`` output
columns, so ``h`` must be read off the graph.

Contract: a selector ``info`` is ``{"owner", "possible", "hots"}``. ``owner`` (row-shaped ints)
says which index a position belongs to (``-1``: none, ``-2``: several, after a merge);
``possible`` (row-shaped bools) whether an index can make it hot (from :mod:`.intervals`);
``hots`` the number of distinct owners that can be hot, None when not derivable. Every field is
None when the structure is unknown (:func:`unknown_select`), and then counts that need it are None.
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.profiling.graph_count.intervals import bounds, unbounded
from bnc_deploy.profiling.graph_count.movement import emulate_move, fit, reduce_axes
from bnc_deploy.profiling.graph_count.op_counts import has_bias


def unknown_select() -> dict:
    return {"owner": None, "possible": None, "hots": None}


def selector(owner, possible) -> dict:
    """A selector from its owner and possible arrays (``hots`` counted from them)."""
    owner, possible = np.asarray(owner), np.asarray(possible, dtype=bool)
    reach = owner[possible]
    hots = None if np.any(reach == -2) else int(len(np.unique(reach[reach >= 0])))
    return {"owner": owner, "possible": possible, "hots": hots}


# -- selectors built from indices ---------------------------------------------------------------------
def equal_onehot(state, node) -> dict:
    """Owner/possible arrays of ``Equal(index, constant)`` broadcast into a larger tensor."""
    out_rs = state.shape(node.outputs[0])
    idx = next(i for i in node.inputs if not state.is_const(i))
    const = next((i for i in node.inputs if i != idx and state.is_const(i)), None)
    idx_rs = state.shape(idx)
    if out_rs is None or idx_rs is None or const is None or state.value(const) is None:
        return unknown_select()
    try:
        owner = np.broadcast_to(
            np.arange(int(np.prod(idx_rs))).reshape(idx_rs), np.broadcast_shapes(idx_rs, state.value(const).shape)
        )
        pattern = np.broadcast_to(state.value(const).astype(np.float64), owner.shape)
        lo, hi = bounds(state, idx) or unbounded(idx_rs)
        lo, hi = np.broadcast_to(lo, owner.shape), np.broadcast_to(hi, owner.shape)
        possible = (pattern >= lo) & (pattern <= hi)
        owner, possible = owner.reshape(out_rs), possible.reshape(out_rs)
    except ValueError:
        return unknown_select()
    return selector(owner, possible)


def onnx_onehot(state, node) -> dict:
    """Owner/possible arrays of an ONNX ``OneHot`` (last axis) of an index."""
    idx = node.inputs[0]
    idx_rs, out_rs = state.shape(idx), state.shape(node.outputs[0])
    axis = node.attrs.get("axis", -1)
    depth = state.value(node.inputs[1]) if len(node.inputs) > 1 else None
    if idx_rs is None or out_rs is None or depth is None or axis not in (-1, len(idx_rs)):
        return unknown_select()
    depth = int(np.asarray(depth).reshape(-1)[0])
    lo, hi = bounds(state, idx) or unbounded(idx_rs)
    owner = np.broadcast_to(np.arange(int(np.prod(idx_rs))).reshape(idx_rs + (1,)), idx_rs + (depth,))
    j = np.arange(depth).reshape((1,) * len(idx_rs) + (depth,))
    # ONNX OneHot wraps negative indices (-depth..-1): an unbounded interval reaches everything anyway
    reach = (j >= lo[..., None]) & (j <= hi[..., None])
    wrapped = (j - depth >= lo[..., None]) & (j - depth <= hi[..., None])
    return selector(owner.reshape(out_rs), (reach | wrapped).reshape(out_rs))


def product_select(state, node, role) -> dict:
    """One-hot structure of a product that builds or combines one-hots.

    Each output reads one input (weights with one nonzero per output): it belongs to that
    input's owner. Or it is an AND of one-hot inputs (equal weights ``w``, bias
    ``-(k - 1) * w``, ReLU): it belongs to the *set* of its inputs' owners, and outputs with
    the same owner set are exclusive when they read different input positions.
    """
    weights = state.tensors[node.inputs[1]].real_value()
    a, o = state.shape(node.inputs[0]), state.shape(node.outputs[0])
    if weights is None or weights.ndim != 2 or a is None or o is None or int(np.prod(a)) != a[-1]:
        return unknown_select()
    w = weights if node.op == "FullyConnected" else weights.T  # [M, K]
    if w.shape != (o[-1], a[-1]):
        return unknown_select()
    if role == "index":
        in_owner = np.arange(a[-1])
    else:
        info = state.select.get(node.inputs[0]) or unknown_select()
        if info["owner"] is None or np.any(info["owner"] < 0):
            return unknown_select()
        in_owner = info["owner"].reshape(-1)
    nonzero = w != 0
    nnz = nonzero.sum(axis=1)
    if np.all(nnz == 1):
        return selector(in_owner[nonzero.argmax(axis=1)].reshape(o), np.ones(o, dtype=bool))
    bias = state.tensors[node.inputs[2]].real_value() if has_bias(node) else None
    relu = node.attrs.get("fusedActivationFunction") in (1, 3)
    if role != "select" or bias is None or not relu or bias.shape != (o[-1],):
        return unknown_select()
    unit = np.where(nonzero, w, 0).max(axis=1)
    is_and = (
        np.all((w == unit[:, None]) | ~nonzero)
        and np.all(unit > 0)
        and np.allclose(bias, -(nnz - 1) * unit, rtol=1e-6, atol=1e-9)
    )
    if not is_and:
        return unknown_select()
    groups: dict = {}
    owner = np.empty(o[-1], dtype=np.int64)
    for m in range(o[-1]):
        ks = np.flatnonzero(nonzero[m])
        key = tuple(sorted(set(in_owner[ks].tolist())))
        seen = groups.setdefault(key, (len(groups), set()))
        if tuple(ks) in seen[1]:
            return unknown_select()  # two identical outputs would both be hot
        seen[1].add(tuple(ks))
        owner[m] = seen[0]
    return selector(owner.reshape(o), np.ones(o, dtype=bool))


# -- selectors carried through data movement ------------------------------------------------------------
def propagate_select(state, node) -> None:
    """Set the selector of ``node``'s first output from its input selector(s)."""
    out = node.outputs[0]
    info = state.select.get(node.inputs[0]) if node.inputs else None
    if info is None:
        state.select[out] = unknown_select()
        return
    if node.op == "ReduceSum":
        state.select[out] = reduce_select(state, node, info)
        return
    if node.op == "Concat":
        state.select[out] = _concat_select(state, node)
        return
    owner = emulate_move(state, node, info["owner"]) if info["owner"] is not None else None
    possible = emulate_move(state, node, info["possible"]) if info["possible"] is not None else None
    if owner is None or possible is None:
        same = state.numel(out) == state.numel(node.inputs[0])
        state.select[out] = {"owner": None, "possible": None, "hots": info["hots"] if same else None}
        return
    result = selector(owner, possible)
    if np.any(owner[possible] == -2):
        same = state.numel(out) == state.numel(node.inputs[0])
        result["hots"] = info["hots"] if same else None
    state.select[out] = result


def _concat_select(state, node) -> dict:
    parts = [state.select.get(i) for i in node.inputs if i]
    if all(p is not None and p["owner"] is not None for p in parts):
        offset, owners, poss = 0, [], []
        for p in parts:  # owners of different inputs are different indices
            owners.append(np.where(p["owner"] >= 0, p["owner"] + offset, p["owner"]))
            offset += int(p["owner"].max(initial=-1)) + 1
            poss.append(p["possible"])
        axis = node.attrs.get("axis", 0)
        try:
            return selector(np.concatenate(owners, axis=axis), np.concatenate(poss, axis=axis))
        except ValueError:
            pass
    return unknown_select()


def reduce_select(state, node, info) -> dict:
    """A sum over one-hots: positions with one possible owner keep it, several become ``-2``."""
    owner, possible = info["owner"], info["possible"]
    rs = state.shape(node.outputs[0])
    if owner is None or possible is None or rs is None:
        return {"owner": None, "possible": None, "hots": info["hots"]}
    axes, keep = reduce_axes(state, node)
    count = np.sum(possible, axis=axes, keepdims=keep)
    single = np.max(np.where(possible, owner, -1), axis=axes, keepdims=keep)
    merged = np.where(count == 0, -1, np.where(count == 1, single, -2))
    return {"owner": fit(merged, rs), "possible": fit(count > 0, rs), "hots": info["hots"]}


# -- what a product of a one-hot costs --------------------------------------------------------------------
def effective_additions(state, node, info) -> int | None:
    """``sum_v max(h_v - 1, 0) * M`` over the one-hot row vectors of a product's input."""
    a, out = state.shape(node.inputs[0]), state.shape(node.outputs[0])
    if a is None or out is None:
        return None
    k, m = a[-1], out[-1]
    n_vectors = int(np.prod(a)) // k
    owner, possible = info.get("owner"), info.get("possible")
    if n_vectors == 1 and info.get("hots") is not None:
        return max(info["hots"] - 1, 0) * m
    if owner is None or possible is None or np.any(owner[possible] == -2):
        return None
    owner, possible = owner.reshape(n_vectors, k), possible.reshape(n_vectors, k)
    hots = [len(np.unique(owner[v][possible[v]])) for v in range(n_vectors)]
    return int(sum(max(h - 1, 0) for h in hots) * m)


def reachable_rows(state, node):
    """For a one-hot product: which K rows of the weights an index can select (else None)."""
    info = state.select.get(node.inputs[0])
    a = state.shape(node.inputs[0])
    if info is None or info.get("possible") is None or a is None:
        return None
    return info["possible"].reshape(-1, a[-1]).any(axis=0)
