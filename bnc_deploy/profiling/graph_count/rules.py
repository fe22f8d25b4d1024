"""The forward pass: per-op rules that give each node its category and each output its role.

Contract: :meth:`OpRules.forward` is called once per node in execution order. It records a
:class:`~.results.NodeCount` in ``state.records``, sets the roles of the node's outputs, and
keeps intervals (index tensors) and selectors (one-hot tensors) up to date. A node whose inputs
are all constants is load-time work; an op without a rule is "unknown" (ops None).

Per-op rules (counts per row; ``numel`` excludes the batch dimension)
--------------------------------------------------------------------
* elementwise ``Add``/``Sub``/``Mul``/``Div``/comparisons/logic/``Where``/clamps: ``numel(out)``;
  the n-ary ``Sum`` of ``k`` inputs: ``(k - 1) * numel(out)``;
* ``ReduceSum``/``ReduceAny``/``ArgMax``: ``numel(in) - numel(out)`` (``k`` terms: ``k - 1``);
* ``MatMul``/``Gemm``/``FullyConnected``: MACs = ``numel(out) * K`` (+ ``numel(out)`` bias adds);
  an ONNX ``MatMul``/``Gemm`` of codes and constants (ONNX has no fused activations) is index
  arithmetic (addressing) whose result stays an index (the merged-group rows of
  ``gather-grouped``);
  ``Conv``: ``numel(out) * K_h * K_w * C_in / groups``; ``BatchNormalization``: ``numel(out)``;
* ``Gather`` of a constant table with per-row indices: ``numel(out)`` lookups, 0 operations;
* ``OneHot`` and an ``Equal`` that broadcasts indices against a constant build one-hots
  (addressing, ``numel(out)``); a product whose input is such a one-hot counts its MACs *and*
  its **effective additions**: with ``h`` possibly-nonzero one-hot entries per row (one per index,
  positions that an index can never reach excluded by interval analysis), ``(h - 1) * M`` for
  ``M`` output columns, the additions a gather + sum would do (None if ``h`` is not derivable);
* a product of codes, or of one-hots with a bias and a fused ReLU (the Edge TPU ``relu``
  builder), builds one-hots: addressing, MACs + biases; the one-hot structure is followed when
  every output reads one input, or is an AND of inputs (weights ``w``, bias ``-(k - 1) * w``);
* a comparison that broadcasts raw values against constants (cut points) is binning, and so
  is the ``ReduceSum`` counting its results.

Roles decide the category: a tensor is a constant, an *index* (integer codes and what is
computed from them), a raw *value*, a *mask*, a one-hot *selector*, a *score* (looked-up
table values and their sums) or a *label*. ``Add`` on scores is arithmetic, on indices
addressing; ``Mul`` of a score by a constant is a rescale; a clamp of an index is a guard.
These are the BN-graph rules; :mod:`.dnn_rules` overrides some of them for DNN graphs.
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.profiling.graph_count.intervals import propagate_interval
from bnc_deploy.profiling.graph_count.ir import FUSED_ACTIVATIONS, GNode
from bnc_deploy.profiling.graph_count.op_counts import (
    GATHER_BLOCK_QUANTIZED,
    KINDS,
    element_ops,
    has_bias,
    product_macs,
)
from bnc_deploy.profiling.graph_count.results import NodeCount
from bnc_deploy.profiling.graph_count.selectors import (
    effective_additions,
    equal_onehot,
    onnx_onehot,
    product_select,
    propagate_select,
    selector,
    unknown_select,
)
from bnc_deploy.profiling.graph_count.state import CountState


def merge_roles(roles) -> str:
    """The role of a tensor built from several: the most 'semantic' one wins."""
    for r in ("score", "select", "index", "bins", "value", "label", "penalty", "mask"):
        if r in roles:
            return r
    return roles[0] if roles else "value"


class OpRules:
    """Per-op rules of BN graphs: one ``on_<kind>`` method per kind of :data:`~.op_counts.KINDS`."""

    def __init__(self, state: CountState) -> None:
        self.state = state

    def forward(self, node: GNode) -> None:
        """Count one node: unknown op, load-time work, or the ``on_<kind>`` rule of its op."""
        out = node.outputs[0] if node.outputs else ""
        shape = self.state.tensors[out].shape if out in self.state.tensors else None
        shape = None if shape is None else tuple("N" if d is None else int(d) for d in shape)
        rec = NodeCount(node.index, node.op, node.source_op, out, "free", shape)
        self.state.records[node.index] = rec
        kind = KINDS.get(node.op)
        inputs = [i for i in node.inputs if i]
        if kind is None:
            rec.category, rec.ops = "unknown", None
            rec.note = f"no counting rule for op {node.source_op!r}"
            role = next((self.state.role.get(i, "value") for i in self.state.data_inputs(node)), "value")
            for o in node.outputs:
                self.state.role[o] = role
            return
        if inputs and all(self.state.is_const(i) for i in inputs) or (not inputs and kind == "move"):
            self.state.load_time.add(node.index)
            self.state.const.update(node.outputs)
            rec.category = "load-time"
            rec.ops = 0 if kind in ("move", "gather", "activation") else element_ops(self.state, node, kind)
            rec.note = "constant inputs: runs once at load"
            return
        roles = [self.state.role.get(i, "value") for i in self.state.data_inputs(node)]
        getattr(self, f"on_{kind}")(node, rec, roles)
        if rec.category == "free" and rec.ops is None:
            rec.ops = 0
        # fused activations (TFLite) are free by convention: just say so
        act = node.attrs.get("fusedActivationFunction")
        if act in FUSED_ACTIVATIONS:
            rec.note = (rec.note + "; " if rec.note else "") + f"fused {FUSED_ACTIVATIONS[act]} (free)"

    def on_move(self, node, rec, roles):
        role = merge_roles(roles)
        self.state.set_role(node, role)
        rec.category, rec.ops = "free", 0
        if role == "index":
            propagate_interval(self.state, node)
        elif role == "select":
            propagate_select(self.state, node)

    def on_activation(self, node, rec, roles):
        self.state.set_role(node, merge_roles(roles))
        rec.category, rec.ops = "free", 0
        rec.note = "activation/pooling: free by convention"

    def on_gather(self, node, rec, roles):
        data, indices = node.inputs[0], node.inputs[1]
        rec.category, rec.ops = "free", 0
        table = self.state.value(data)
        if (
            node.op == "GatherElements"
            and table is not None
            and np.issubdtype(table.dtype, np.integer)
            and not self.state.is_const(indices)
        ):
            # a constant index map (ORT lookup graph: clipped code of feature i -> its table row or
            # the NaN row): one lookup per index, no arithmetic; the result is again an index
            self.state.set_role(node, "index")
            rec.category, rec.note = "addressing", "index map lookup (code -> table row; no arithmetic)"
            rs = self.state.shape(node.outputs[0])
            if rs is not None:
                self.state.interval[node.outputs[0]] = (
                    np.full(rs, float(table.min())),
                    np.full(rs, float(table.max())),
                )
            return
        if self.state.is_const(data) and not self.state.is_const(indices):
            self.state.set_role(node, "score")
            rec.lookups = self.state.numel(node.outputs[0]) or 0
            rows = self.state.numel(indices)
            width = (
                self.state.tensors[node.outputs[0]].last_dim
                if node.op == GATHER_BLOCK_QUANTIZED
                else self.state.tensors[data].last_dim
            )
            rec.note = f"table lookup: {rows} rows x {width} (no arithmetic)" + (
                " dequantized by the row's scale" if node.op == GATHER_BLOCK_QUANTIZED else ""
            )
        else:
            role = self.state.role.get(data, "value")
            self.state.set_role(node, role)
            if role == "index":
                propagate_interval(self.state, node)
            elif role == "select":
                propagate_select(self.state, node)
            rec.note = "selects elements along an axis"

    # arithmetic-like ---------------------------------------------------------------------------------
    def on_add(self, node, rec, roles):
        n = self.state.numel(node.outputs[0])
        sign = "subtractions" if node.op == "Sub" else "additions"
        if "score" in roles:
            other = [self.state.role.get(i) for i in self.state.data_inputs(node) if self.state.role.get(i) != "score"]
            if other and other[0] in ("penalty", "mask"):
                rec.category, rec.ops, rec.note = "guard", n, "adds the invalid-row penalty (0 or NaN)"
            else:
                rec.category, rec.ops = "arithmetic", n
                rec.note = f"{n} {sign} of scores"
            self.state.set_role(node, "score")
        elif "select" in roles:
            rec.category, rec.ops, rec.note = "addressing", n, "combines one-hots"
            self.state.set_role(node, "select")
            self.state.select[node.outputs[0]] = unknown_select()
        elif "index" in roles:
            rec.category, rec.ops, rec.note = "addressing", n, "index arithmetic"
            self.state.set_role(node, "index")
            propagate_interval(self.state, node)
        elif "bins" in roles:
            rec.category, rec.ops = "binning", n
            self.state.set_role(node, "bins")
        elif "value" in roles:
            rec.category, rec.ops = "arithmetic", n
            self.state.set_role(node, "value")
        else:
            rec.category, rec.ops = "guard", n
            self.state.set_role(node, "penalty")

    def on_sum(self, node, rec, roles):
        """n-ary Sum: ``(k - 1) * numel(out)`` additions, categorized like a binary Add."""
        terms = len([i for i in node.inputs if i])
        self.on_add(node, rec, roles)
        if rec.ops is not None:
            rec.ops = element_ops(self.state, node, "sum")
            if rec.category == "arithmetic" and "score" in roles:
                rec.note = f"sum of {terms} looked-up rows: {rec.ops} additions"

    def on_mul(self, node, rec, roles):
        n = self.state.numel(node.outputs[0])
        consts = [i for i in node.inputs if i and self.state.is_const(i)]
        if "score" in roles:
            if consts and len(roles) == 1:
                rec.category, rec.ops, rec.note = "rescale", n, "scales scores by a constant (not a paper op)"
            else:
                rec.category, rec.ops = "arithmetic", n
            self.state.set_role(node, "score")
        elif "select" in roles:
            rec.category, rec.ops = "addressing", n
            self.state.set_role(node, "select")
            self.state.select[node.outputs[0]] = unknown_select()
        elif "index" in roles:
            rec.category, rec.ops, rec.note = "addressing", n, "index arithmetic"
            self.state.set_role(node, "index")
            propagate_interval(self.state, node)
        elif "value" in roles:
            rec.category, rec.ops = "arithmetic", n
            self.state.set_role(node, "value")
        else:
            rec.category, rec.ops = "guard", n
            self.state.set_role(node, "penalty")

    def on_unary(self, node, rec, roles):
        """Abs/Neg/BitShift: like a multiplication by a constant (a sign flip of scores is a rescale)."""
        self.on_mul(node, rec, roles)
        if "score" in roles:
            rec.category = "rescale"

    def on_reduce_sum(self, node, rec, roles):
        ops = element_ops(self.state, node, "reduce_sum")
        role = roles[0] if roles else "value"
        terms = None
        n_in, n_out = self.state.numel(node.inputs[0]), self.state.numel(node.outputs[0])
        if n_in and n_out:
            terms = n_in // n_out
        if role == "score":
            rec.category, rec.ops = "arithmetic", ops
            rec.note = f"sum of {terms} terms x {n_out}: ({terms} - 1) x {n_out} additions" if terms else ""
            self.state.set_role(node, "score")
        elif role == "select":
            rec.category, rec.ops, rec.note = "addressing", ops, "merges one-hots"
            self.state.set_role(node, "select")
            propagate_select(self.state, node)
        elif role == "index":
            rec.category, rec.ops, rec.note = "addressing", ops, "index arithmetic"
            self.state.set_role(node, "index")
            propagate_interval(self.state, node)
        elif role == "bins":
            rec.category, rec.ops, rec.note = "binning", ops, "counts cut points below each value"
            self.state.set_role(node, "index")
            rs = self.state.shape(node.outputs[0])
            if rs is not None:
                n_in_shape = self.state.shape(node.inputs[0])
                hi = float(np.prod(n_in_shape) // max(np.prod(rs), 1)) if n_in_shape else np.inf
                self.state.interval[node.outputs[0]] = (np.zeros(rs), np.full(rs, hi))
        elif role == "value":
            rec.category, rec.ops = "arithmetic", ops
            self.state.set_role(node, "value")
        else:
            rec.category, rec.ops = "guard", ops
            self.state.set_role(node, "penalty")

    def on_matmul(self, node, rec, roles):
        out = node.outputs[0]
        macs = product_macs(self.state, node)
        bias = self.state.numel(out) if has_bias(node) else 0
        rec.macs = macs
        total = None if macs is None else macs + (bias or 0)
        first = node.inputs[0]
        role = self.state.role.get(first, "value") if not self.state.is_const(first) else merge_roles(roles)
        relu = node.attrs.get("fusedActivationFunction") in (1, 3)
        thresholded = relu or bool(bias)
        # A one-hot x table FC may carry the class prior as its bias (TFLite onehot-fc ``edgetpu``:
        # group 0's int32 bias) - no fused ReLU, so it combines nothing: one addition per output.
        table_with_prior = (
            role == "select" and bool(bias) and not relu and node.attrs.get("fusedActivationFunction") in (None, 0)
        )
        if role == "select" and (not thresholded or table_with_prior):
            info = self.state.select.get(node.inputs[0]) or unknown_select()
            rec.category = "arithmetic"
            ops = effective_additions(self.state, node, info)
            rec.effective_additions = rec.ops = None if ops is None else ops + (bias if table_with_prior else 0)
            rec.note = (
                "one-hot x table: MACs shown; ops = effective additions"
                + (" + one per bias (the prior)" if table_with_prior else "")
                + ("" if ops is not None else " (unknown: the one-hot's structure is not derivable)")
            )
            self.state.set_role(node, "score")
        elif (
            role == "index"
            and node.op in ("MatMul", "Gemm")
            and self.state.graph.format == "onnx"
            and not node.attrs.get("fusedActivationFunction")
        ):
            # codes times a constant stride matrix: the mixed-radix rows of merged feature groups
            # (ONNX gather-grouped). Index work whose result is again an index, not a one-hot.
            rec.category, rec.ops, rec.note = "addressing", total, "index arithmetic (rows of merged feature groups)"
            self.state.set_role(node, "index")
        elif role in ("select", "index"):
            # A product of codes, or of one-hots with a bias and a ReLU, builds (combines) one-hots
            # (the Edge TPU ``relu`` builder): index work, and its output is again a selector.
            rec.category, rec.ops = "addressing", total
            rec.note = "builds a one-hot from codes" if role == "index" else "combines one-hots (bias + ReLU)"
            self.state.set_role(node, "select")
            self.state.select[out] = product_select(self.state, node, role)
        elif role in ("score", "value"):
            rec.category, rec.ops = "arithmetic", total
            rec.note = "one op per MAC" + (" + one per bias" if bias else "")
            self.state.set_role(node, role)
        else:
            rec.category, rec.ops = "guard", total
            self.state.set_role(node, "penalty")

    on_conv = on_matmul

    def on_batchnorm(self, node, rec, roles):
        rec.category, rec.ops = "arithmetic", self.state.numel(node.outputs[0])
        rec.note = "one op per batch-norm output"
        self.state.set_role(node, merge_roles(roles))

    def on_compare(self, node, rec, roles):
        out = node.outputs[0]
        n_out = self.state.numel(out)
        n_ins = [self.state.numel(i) for i in self.state.data_inputs(node)]
        expanding = n_out is not None and all(n is not None and n < n_out for n in n_ins)
        if expanding and roles and roles[0] == "index":
            rec.category, rec.ops = "addressing", n_out
            self.state.set_role(node, "select")
            if node.op == "Equal":
                self.state.select[out] = equal_onehot(self.state, node)
                rec.note = "one-hot by comparing indices with a constant pattern"
            else:
                self.state.select[out] = unknown_select()
        elif expanding and roles and roles[0] == "value":
            rec.category, rec.ops, rec.note = "binning", n_out, "compares raw values with cut points"
            self.state.set_role(node, "bins")
        else:
            rec.category, rec.ops = "guard", n_out
            self.state.set_role(node, "mask")
            self.state.control_inputs[node.index] = set(node.inputs)

    def on_logic(self, node, rec, roles):
        rec.category, rec.ops = "guard", self.state.numel(node.outputs[0])
        self.state.set_role(node, "mask")
        self.state.control_inputs[node.index] = set(node.inputs)

    def on_reduce_logic(self, node, rec, roles):
        rec.category, rec.ops = "guard", element_ops(self.state, node, "reduce_logic")
        self.state.set_role(node, "mask")
        self.state.control_inputs[node.index] = set(node.inputs)

    def on_where(self, node, rec, roles):
        rec.category, rec.ops = "guard", self.state.numel(node.outputs[0])
        data = [i for i in node.inputs[1:] if i and not self.state.is_const(i)]
        role = merge_roles([self.state.role.get(i, "value") for i in data]) if data else "penalty"
        self.state.set_role(node, role)
        self.state.control_inputs[node.index] = {node.inputs[0]}
        if role == "index":
            propagate_interval(self.state, node)
        rec.note = "selects by a validity mask"

    def on_clamp(self, node, rec, roles):
        role = merge_roles(roles)
        n = self.state.numel(node.outputs[0])
        if role == "index":
            rec.category, rec.ops, rec.note = "guard", n, "clamps indices into range"
            self.state.set_role(node, "index")
            propagate_interval(self.state, node)
        elif role == "select":
            rec.category, rec.ops, rec.note = "addressing", n, "combines one-hots"
            self.state.set_role(node, "select")
            parts = [self.state.select.get(i) for i in self.state.data_inputs(node)]
            same = (
                len(parts) == 2
                and all(p is not None and p["owner"] is not None for p in parts)
                and np.array_equal(parts[0]["owner"], parts[1]["owner"])
            )
            # the minimum of two one-hots over the same owners is hot where both can be
            self.state.select[node.outputs[0]] = (
                selector(parts[0]["owner"], parts[0]["possible"] & parts[1]["possible"])
                if same and node.op == "Min"
                else unknown_select()
            )
        elif role in ("mask", "penalty"):
            rec.category, rec.ops = "guard", n
            self.state.set_role(node, role)
        else:
            rec.category, rec.ops, rec.note = "free", 0, "activation: free by convention"
            self.state.set_role(node, role)

    def on_argmax(self, node, rec, roles):
        rec.category, rec.ops = "argmax", element_ops(self.state, node, "argmax")
        rec.note = "comparisons of the final argmax (reported separately)"
        self.state.set_role(node, "label")

    def on_onehot(self, node, rec, roles):
        out = node.outputs[0]
        rec.category, rec.ops, rec.note = "addressing", self.state.numel(out), "one-hot of indices"
        self.state.set_role(node, "select")
        self.state.select[out] = onnx_onehot(self.state, node)
