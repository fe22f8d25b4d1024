"""Count operations and parameter bits of an exported ONNX or TFLite graph, node by node.

The counter reads a file into a small format-neutral graph (canonical op names, constant
values, per-row shapes: the batch dimension is symbolic and counted as 1) and applies one rule
table to it. Every count is **per input row**.

Categories
----------
============ ================================================================================
arithmetic   the paper's operations: additions of table terms (``Add``/``Sub``/``ReduceSum`` on
             looked-up scores), multiply-accumulates of products (``MatMul``/``Gemm``/
             ``FullyConnected``/``Conv``), batch-norm outputs, biases
addressing   index arithmetic (feature offsets, parent strides) and one-hot construction
binning      discretization of raw inputs in the graph (comparisons with cut points, counts)
guard        input validation: range checks, clamps of indices, ``Where``/``Select``, NaN
             tests, and any per-row work whose results reach the outputs only through the
             condition of a select or a comparison (see *data use* below)
argmax       the final ``ArgMax``/``ArgMin`` (``C - 1`` comparisons per row), reported apart
rescale      multiplying scores by a constant (integer code sums -> log-probabilities)
load-time    nodes whose inputs are all constants: runtimes fold them once when the session
             is created (dequantizing tables, unpacking bit-planes, folding the prior)
free         data movement: casts, reshapes, slices, concat, (de)quantize, gathers (counted
             as *lookups*, not operations), activations and pooling (the DNN convention)
unknown      an op type without a rule: listed, its count is None, never silently 0
============ ================================================================================

Per-op rules (counts per row; ``numel`` excludes the batch dimension)
--------------------------------------------------------------------
* elementwise ``Add``/``Sub``/``Mul``/``Div``/comparisons/logic/``Where``/clamps: ``numel(out)``;
* ``ReduceSum``/``ReduceAny``/``ArgMax``: ``numel(in) - numel(out)`` (``k`` terms: ``k - 1``);
* ``MatMul``/``Gemm``/``FullyConnected``: MACs = ``numel(out) * K`` (+ ``numel(out)`` bias adds);
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

Data use. A backward pass marks, per last-axis column, which values reach the outputs through
data inputs (not through a select's condition or a comparison). Per-row nodes whose outputs are
not used that way are guard work; a product some of whose output columns are only used by the
guard (ONNX ``onehot-fc``: the column counting valid features) moves those columns' share to
guard.

The paper's operations from the graph
-------------------------------------
``paper_ops = arithmetic (effective additions for one-hot products) + folded``, where
``folded`` counts constant additions the exporter folded into a lookup table at load time:
a load-time ``Add``/``Sub`` of two parameter tensors of different sizes (ONNX adds the class
prior ``[C]`` to feature 0's rows ``[|X_0|, C]``) stands for ``numel(smaller operand)`` per-row
additions, since every row reads exactly one of the folded rows. For every BNC export this
equals the analytic ``D * C``: ONNX gather ``(D - 1) * C`` (``ReduceSum`` over ``D`` rows) +
``C`` folded; TFLite gather ``(D - 1) * C`` (``SUM``) + ``C`` (``ADD`` prior); ONNX onehot-fc
``(D - 1) * C`` effective (``MatMul``; the counting column's ``D - 1`` is guard) + ``C`` folded;
TFLite onehot-fc ``sum_g (d_g - 1) * C`` (one ``FULLY_CONNECTED`` per group of ``d_g`` features)
+ ``(G - 1) * C`` (``SUM`` over the ``G`` groups) + ``C`` (``ADD`` prior).

Parameter bits from the graph
-----------------------------
Parameter tensors are found from the per-row arithmetic that reads them (table of a lookup
``Gather``, weights/bias of a product, constant addend of a score), traced back through
load-time structure (``Slice``, ``Concat``, folding ``Add``; a scalar ``Expand`` is a fill, not
a parameter) to the first decoded tensor (after ``Cast``/``Mul`` by the step, bit-plane
unpacking). Elements = that tensor's size, restricted to used columns and, for a one-hot
product's weights, to rows an index can reach (the ``equal-cast`` padding is not counted).
``param_bits = elements * bits`` (the metadata's ``bits``; else the tensor's dtype width);
``storage_bits`` are the stored initializers' bytes (uint8 codes, int32 prior, bit-planes).

DNN graphs (``model_kind = "dnn"`` in the metadata)
-------------------------------------------------
The same forward/backward passes, with DNN roles: encoded inputs (lookups of the input-code table,
one-hots) and the outputs of products are activations; a comparison of a layer's values with a
per-unit constant that feeds ``Where(cond, const, const)`` is a sign activation and carries data
(it is not a guard condition); an ``Add``/``Mul`` of the logits with the invalid-row penalty or
mask is guard work. Then every *weight product* (``Gemm``/``MatMul``/``FullyConnected``/
``Conv``/``DepthwiseConv`` with constant weights, in execution order) is matched with the
metadata's ``layers`` one to one, by position and type (a different number of products, or a
dense layer carried by a ``Conv``, leaves the layer uncounted: ``ops`` None, ``complete`` False,
``breakdown["problems"]`` says why). Per layer ``k``, with ``n`` = the product's output elements
per row (conv: channels x output positions, before pooling):

* **MACs** (graph): ``numel(out) x K`` of the product, ``K`` = its reduction length (ONNX Conv
  ``C_in/groups x 3 x 3`` from the OIHW weights, TFLite CONV_2D ``3 x 3 x C_in`` from OHWI).
  One-hot inputs count their full MACs (the paper's convention; no effective-addition shortcut).
  A product whose input is a ``Concat`` of one tensor ``c`` times along the last axis (TFLite
  B = 8: codes split into ``c`` int8 parts that sum to the code) does ``c`` times the layer's
  MACs: the paper counts the logical layer, so its MACs are divided by ``c`` and its ``c`` weight
  parts are one weight. ``c`` comes from the graph and must equal the metadata's
  ``tflite_layers[k]["input_copies"]`` where that is given (else the layer is not counted).
  ``macs``/``graph_macs`` keep the executed MACs; ``ops`` and ``breakdown["macs"]`` the logical ones.
* **Batch norm** (metadata ``layers[k].batch_norm``): ``n`` ops, one per output, counted at the
  node that adds the folded shift: the last ``Add``/``Sub``/comparison of the layer's values
  with a constant before the next product (ONNX ReLU: ``layer{k}/bn_shift``, its ``bn_scale``
  ``Mul`` being the other half of the pair, 0 ops; ONNX sign: the ``layer{k}/threshold``
  comparison, the ``direction`` ``Mul`` 0 ops), else the product's own bias (TFLite: batch norm
  folded into the weights and the int32 bias). Without batch norm the same threshold comparison
  (threshold of ``y = z``) and a hidden product's bias are part of the activation: free.
* **Output bias** (metadata ``layers[k].bias``): ``n`` ops at the same kind of node (ONNX
  ``layer{L}/bias``; TFLite float output ``ADD``, int8 output the ``FULLY_CONNECTED``'s int32
  bias). A ``Mul`` by a constant before it (sign nets' ``output_scale``) is a rescale.
* Anything else: activations, pooling, flatten, (de)quantize and the encoding are free (lookups
  of the input-code table are reported as lookups, index offsets and one-hot construction as
  addressing); the guard (range checks, clamps, NaN penalty / mask, label select) is guard; the
  argmax is reported apart. A second per-unit addition in a layer, or one in a layer whose
  metadata has neither batch norm nor bias, has no paper meaning and is counted as arithmetic,
  so that a graph/analytic mismatch shows instead of vanishing.

``paper_ops`` = MACs + batch-norm outputs + bias outputs (``breakdown`` has the per-layer terms).
Parameter bits: weights x ``B`` (``weight_bits`` from the metadata: the stored int8/int16/float32
codes do not say ``B``), 64 bits per element of the constant that carries a layer's folded batch
norm (ONNX ``bn_shift`` or ``threshold``, TFLite the int32 bias; one element per channel), 32
bits per element of the output bias. Not parameters: the input-code table (preprocessing, like
the BN exporters' cut points), the guard's constants, the output scale, the ``direction``/
``bn_scale`` halves (their storage is listed with the batch-norm entry).
What comes from the metadata: ``B``, the per-layer ``batch_norm``/``bias`` flags and their order
(``layers``), and the cross-check of ``input_copies``; everything else is read off the graph.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from bnc_deploy.profiling.graph_ir import FUSED_ACTIVATIONS, GNode, Graph, load_graph  # noqa: F401 (load_graph re-exported)

# ================================================================================================
# Op rule table: canonical op -> kind. ONNX names are canonical; TFLite builtins map onto them.
# ================================================================================================
KINDS = {
    **dict.fromkeys(["Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Transpose", "Slice",
                     "StridedSlice", "Concat", "Pack", "Expand", "Quantize", "Dequantize", "QuantizeLinear",
                     "DequantizeLinear", "Tile", "Pad", "Shape", "Size", "ConstantOfShape", "Split"], "move"),
    "Gather": "gather",
    "Add": "add", "Sub": "add",
    "Mul": "mul", "Div": "mul",
    "Neg": "unary", "Abs": "unary",
    "BitShift": "unary", "Mod": "mul",
    "ReduceSum": "reduce_sum",
    "MatMul": "matmul", "Gemm": "matmul", "FullyConnected": "matmul",
    "Conv": "conv", "DepthwiseConv": "conv",
    "BatchNormalization": "batchnorm",
    **dict.fromkeys(["Equal", "NotEqual", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"], "compare"),
    **dict.fromkeys(["And", "Or", "Not", "Xor", "IsNaN", "IsInf"], "logic"),
    **dict.fromkeys(["ReduceAny", "ReduceAll"], "reduce_logic"),
    "Where": "where",
    **dict.fromkeys(["Min", "Max", "Clip", "Relu", "Relu6"], "clamp"),
    "ArgMax": "argmax", "ArgMin": "argmax",
    "OneHot": "onehot",
    **dict.fromkeys(["Sigmoid", "Tanh", "Softmax", "LogSoftmax", "LeakyRelu", "MaxPool", "AveragePool",
                     "GlobalAveragePool", "GlobalMaxPool", "ReduceMean"], "activation"),
}

CATEGORIES = ("arithmetic", "addressing", "binning", "guard", "argmax", "rescale", "load-time", "free", "unknown")


# ================================================================================================
# Results
# ================================================================================================
@dataclass
class NodeCount:
    """Counts of one node (per input row). ``ops`` is None when the node could not be counted."""

    index: int
    op: str
    source_op: str
    output: str
    category: str
    shape: tuple | None
    ops: int | None = 0
    macs: int | None = None
    effective_additions: int | None = None
    lookups: int = 0
    folded: int = 0
    guard_share: int = 0
    note: str = ""


@dataclass
class ParamTensor:
    """A parameter tensor found in the graph."""

    name: str
    shape: tuple | None
    elements: int | None      # None: the tensor's shape is unknown
    bits_per_element: int
    param_bits: int | None
    storage: list             # [(initializer, dtype, elements, bits)]
    note: str = ""


@dataclass
class GraphCount:
    """Per-node counts and totals of one graph (all per input row)."""

    path: str
    format: str
    nodes: list
    params: list
    metadata: dict | None = None
    breakdown: dict | None = None   # DNN graphs: per-layer MACs, batch-norm and bias terms

    # -- totals -----------------------------------------------------------------------------------
    def total(self, category: str) -> int | None:
        """Sum of ``ops`` over nodes of ``category`` (None if one of them is uncountable)."""
        values = [n.ops for n in self.nodes if n.category == category]
        if category == "guard":
            values += [n.guard_share for n in self.nodes]
        return None if any(v is None for v in values) else int(sum(values))

    @property
    def unknown_ops(self) -> list[str]:
        return sorted({n.source_op for n in self.nodes if n.category == "unknown"})

    @property
    def complete(self) -> bool:
        """True when every node has a rule and a count, and every parameter a size."""
        return (not self.unknown_ops and all(n.ops is not None for n in self.nodes)
                and all(p.elements is not None for p in self.params))

    @property
    def per_row_additions(self) -> int | None:
        return self.total("arithmetic")

    @property
    def folded_additions(self) -> int:
        return int(sum(n.folded for n in self.nodes))

    @property
    def paper_ops(self) -> int | None:
        """Arithmetic per row (effective additions for one-hot products) + folded additions."""
        per_row = self.per_row_additions
        return None if per_row is None or self.unknown_ops else per_row + self.folded_additions

    @property
    def macs(self) -> int:
        return int(sum(n.macs or 0 for n in self.nodes if n.category == "arithmetic"))

    @property
    def lookups(self) -> int:
        return int(sum(n.lookups for n in self.nodes))

    @property
    def param_elements(self) -> int | None:
        values = [p.elements for p in self.params]
        return None if None in values else int(sum(values))

    @property
    def param_bits(self) -> int | None:
        values = [p.param_bits for p in self.params]
        return None if None in values else int(sum(values))

    @property
    def storage_bits(self) -> int:
        seen = {}
        for p in self.params:
            for name, _, elements, bits in p.storage:
                seen[name] = elements * bits
        return int(sum(seen.values()))

    def totals(self) -> dict:
        """JSON-ready totals (per row)."""
        out = {c: self.total(c) for c in CATEGORIES if c not in ("unknown", "free")}
        out.update(paper_ops=self.paper_ops, per_row_additions=self.per_row_additions,
                   folded_additions=self.folded_additions, macs=self.macs, lookups=self.lookups,
                   param_elements=self.param_elements, param_bits=self.param_bits, storage_bits=self.storage_bits,
                   n_nodes=len(self.nodes), n_load_time_nodes=sum(n.category == "load-time" for n in self.nodes),
                   unknown_ops=self.unknown_ops, complete=self.complete)
        return out

    def compare(self, size_bits: int | None = None, n_ops: int | None = None) -> dict:
        """Check the graph against analytic numbers (defaults: the file's metadata)."""
        meta = self.metadata or {}
        size_bits = meta.get("size_bits") if size_bits is None else size_bits
        n_ops = meta.get("n_ops") if n_ops is None else n_ops
        return {"size_bits": {"graph": self.param_bits, "analytic": size_bits,
                              "equal": size_bits is not None and self.param_bits == size_bits},
                "n_ops": {"graph": self.paper_ops, "analytic": n_ops,
                          "equal": n_ops is not None and self.paper_ops == n_ops}}

    def to_dict(self) -> dict:
        out = {"path": self.path, "format": self.format, "totals": self.totals(), "check": self.compare(),
               "nodes": [asdict(n) for n in self.nodes], "params": [asdict(p) for p in self.params]}
        if self.breakdown is not None:
            out["breakdown"] = self.breakdown
        return out

    def table(self) -> str:
        """Per-node table and totals, for people."""
        head = f"{'#':>3} {'op':<16} {'category':<11} {'row shape':<14} {'ops':>8} {'MACs':>8} {'eff.add':>8} " \
               f"{'lookups':>7} {'folded':>6}  note"
        lines = [f"{self.path or '(graph)'} [{self.format}]", head, "-" * len(head)]
        for n in self.nodes:
            shape = "?" if n.shape is None else "x".join(str(d) for d in n.shape) or "scalar"
            ops = "?" if n.ops is None else f"{n.ops:,}"
            lines.append(f"{n.index:>3} {n.source_op[:16]:<16} {n.category:<11} {shape[:14]:<14} {ops:>8} "
                         f"{'' if n.macs is None else f'{n.macs:,}':>8} "
                         f"{'' if n.effective_additions is None else f'{n.effective_additions:,}':>8} "
                         f"{n.lookups or '':>7} {n.folded or '':>6}  {n.note}")
        t = self.totals()
        lines.append("-" * len(head))
        cats = ", ".join(f"{c} {_fmt(t[c])}" for c in
                         ("arithmetic", "addressing", "binning", "guard", "argmax", "rescale", "load-time"))
        lines.append(f"per row: {cats}; {t['lookups']:,} lookups; {t['macs']:,} MACs in products")
        lines.append(f"paper operations = arithmetic {_fmt(t['arithmetic'])} "
                     f"+ folded at load {t['folded_additions']:,} = {_fmt(t['paper_ops'])}")
        lines.append(f"parameters: {_fmt(t['param_elements'])} elements, {_fmt(t['param_bits'])} parameter bits "
                     f"({t['storage_bits']:,} bits stored)")
        b = self.breakdown
        if b is not None:
            macs = _fmt(b["macs"]) + ("" if b["graph_macs"] == b["macs"] else f" (graph {_fmt(b['graph_macs'])})")
            lines.append(f"DNN: ops = MACs {macs} + batch-norm outputs {_fmt(b['batch_norm_outputs'])} "
                         f"+ bias outputs {_fmt(b['bias_outputs'])}; bits = {_fmt(b['weights'])} weights x "
                         f"{b['weight_bits']} + {_fmt(b['batch_norm_units'])} batch-norm units x 64 "
                         f"+ {_fmt(b['biases'])} biases x 32")
            lines += [f"NOT COUNTED: {p}" for p in b["problems"]]
        check = self.compare()
        if check["n_ops"]["analytic"] is not None:
            verdict = {True: "equal", False: "DIFFERENT"}
            lines.append(f"analytic: size {_fmt(check['size_bits']['analytic'])} bits "
                         f"({verdict[check['size_bits']['equal']]}), "
                         f"ops {_fmt(check['n_ops']['analytic'])} ({verdict[check['n_ops']['equal']]})")
        if self.unknown_ops:
            lines.append(f"INCOMPLETE: no counting rule for {', '.join(self.unknown_ops)} (counted as unknown, not 0)")
        return "\n".join(lines)


# ================================================================================================
# Analysis
# ================================================================================================
def count_graph(source) -> GraphCount:
    """Count a file (``.onnx``/``.tflite``), bytes, ModelProto or :class:`Graph`.

    Files whose metadata says ``model_kind = "dnn"`` get the DNN rules (module docstring).
    """
    graph = source if isinstance(source, Graph) else load_graph(source)
    if (graph.metadata or {}).get("model_kind") == "dnn":
        return _DNNCounter(graph).run()
    return _Counter(graph).run()


class _Counter:
    """One pass forward (roles, intervals, one-hot structure), one backward (data use), then counts."""

    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.t = graph.tensors
        self.producer = {o: n for n in graph.nodes for o in n.outputs}
        self.const = {name for name, t in self.t.items() if t.value is not None}
        self.role: dict[str, str] = {}
        self.interval: dict[str, tuple] = {}     # index tensors: (lo, hi) row-shaped float arrays
        self.select: dict[str, dict] = {}        # selectors: owner/possible/hots
        self.records: dict[int, NodeCount] = {}
        self.load_time: set[int] = set()
        self.control_inputs: dict[int, set] = {}

    # -- helpers ------------------------------------------------------------------------------------
    def shape(self, name):
        t = self.t.get(name)
        return None if t is None else t.row_shape

    def numel(self, name):
        t = self.t.get(name)
        return None if t is None else t.numel

    def value(self, name):
        t = self.t.get(name)
        return None if t is None else t.value

    def is_const(self, name) -> bool:
        return name == "" or name in self.const

    def data_inputs(self, node):
        return [i for i in node.inputs if i and not self.is_const(i)]

    # -- driver -------------------------------------------------------------------------------------
    def run(self) -> GraphCount:
        meta = self.g.metadata or {}
        for name in self.g.inputs:
            t = self.t[name]
            try:
                is_int = np.issubdtype(np.dtype(t.dtype), np.integer)
            except TypeError:
                is_int = False
            # bnc-deploy files say what their input is; other graphs: integers are codes
            codes = meta["input"] == "codes" if "input" in meta else is_int
            self.role[name] = "index" if codes else "value"
            if self.role[name] == "index" and t.row_shape is not None:
                self.interval[name] = (np.full(t.row_shape, -np.inf), np.full(t.row_shape, np.inf))
        for node in self.g.nodes:
            self.forward(node)
        self.used = self.backward()
        for node in self.g.nodes:
            self.apply_data_use(node)
        self.post_pass()
        params = self.find_params()
        nodes = [self.records[n.index] for n in self.g.nodes]
        return GraphCount(self.g.path, self.g.format, nodes, params, self.g.metadata, self.breakdown())

    def post_pass(self) -> None:
        """Model-kind specific pass after data use (BN graphs: none)."""

    def breakdown(self) -> dict | None:
        """Model-kind specific breakdown of the paper's operations and bits (BN graphs: none)."""
        return None

    # -- forward ------------------------------------------------------------------------------------
    def forward(self, node: GNode) -> None:
        out = node.outputs[0] if node.outputs else ""
        shape = self.t[out].shape if out in self.t else None
        shape = None if shape is None else tuple("N" if d is None else int(d) for d in shape)
        rec = NodeCount(node.index, node.op, node.source_op, out, "free", shape)
        self.records[node.index] = rec
        kind = KINDS.get(node.op)
        inputs = [i for i in node.inputs if i]
        if kind is None:
            rec.category, rec.ops = "unknown", None
            rec.note = f"no counting rule for op {node.source_op!r}"
            role = next((self.role.get(i, "value") for i in self.data_inputs(node)), "value")
            for o in node.outputs:
                self.role[o] = role
            return
        if inputs and all(self.is_const(i) for i in inputs) or (not inputs and kind == "move"):
            self.load_time.add(node.index)
            self.const.update(node.outputs)
            rec.category = "load-time"
            rec.ops = 0 if kind in ("move", "gather", "activation") else self.elementwise_ops(node, kind)
            rec.note = "constant inputs: runs once at load"
            return
        roles = [self.role.get(i, "value") for i in self.data_inputs(node)]
        getattr(self, f"_f_{kind}")(node, rec, roles)
        if rec.category == "free" and rec.ops is None:
            rec.ops = 0
        # fused activations (TFLite) are free by convention: just say so
        act = node.attrs.get("fusedActivationFunction")
        if act in FUSED_ACTIVATIONS:
            rec.note = (rec.note + "; " if rec.note else "") + f"fused {FUSED_ACTIVATIONS[act]} (free)"

    def set_role(self, node, role):
        for o in node.outputs:
            self.role[o] = role

    def elementwise_ops(self, node, kind):
        """Element operations per row: ``numel(out)``; reductions ``numel(in) - numel(out)``; MACs."""
        n_out = self.numel(node.outputs[0])
        if kind in ("reduce_sum", "reduce_logic", "argmax"):
            n_in = self.numel(node.inputs[0])
            return None if n_in is None or n_out is None else n_in - n_out
        if kind in ("matmul", "conv"):
            return self.product_macs(node)
        return n_out

    # move/gather/activation ------------------------------------------------------------------------
    def _f_move(self, node, rec, roles):
        role = _merge_roles(roles)
        self.set_role(node, role)
        rec.category, rec.ops = "free", 0
        if role == "index":
            self.propagate_interval(node)
        elif role == "select":
            self.propagate_select(node)

    def _f_activation(self, node, rec, roles):
        self.set_role(node, _merge_roles(roles))
        rec.category, rec.ops = "free", 0
        rec.note = "activation/pooling: free by convention"

    def _f_gather(self, node, rec, roles):
        data, indices = node.inputs[0], node.inputs[1]
        rec.category, rec.ops = "free", 0
        if self.is_const(data) and not self.is_const(indices):
            self.set_role(node, "score")
            rec.lookups = self.numel(node.outputs[0]) or 0
            rows = self.numel(indices)
            rec.note = f"table lookup: {rows} rows x {self.t[data].last_dim} (no arithmetic)"
        else:
            role = self.role.get(data, "value")
            self.set_role(node, role)
            if role == "index":
                self.propagate_interval(node)
            elif role == "select":
                self.propagate_select(node)
            rec.note = "selects elements along an axis"

    # arithmetic-like ---------------------------------------------------------------------------------
    def _f_add(self, node, rec, roles):
        n = self.numel(node.outputs[0])
        sign = "subtractions" if node.op == "Sub" else "additions"
        if "score" in roles:
            other = [self.role.get(i) for i in self.data_inputs(node) if self.role.get(i) != "score"]
            if other and other[0] in ("penalty", "mask"):
                rec.category, rec.ops, rec.note = "guard", n, "adds the invalid-row penalty (0 or NaN)"
            else:
                rec.category, rec.ops = "arithmetic", n
                rec.note = f"{n} {sign} of scores"
            self.set_role(node, "score")
        elif "select" in roles:
            rec.category, rec.ops, rec.note = "addressing", n, "combines one-hots"
            self.set_role(node, "select")
            self.select[node.outputs[0]] = _unknown_select()
        elif "index" in roles:
            rec.category, rec.ops, rec.note = "addressing", n, "index arithmetic"
            self.set_role(node, "index")
            self.propagate_interval(node)
        elif "bins" in roles:
            rec.category, rec.ops = "binning", n
            self.set_role(node, "bins")
        elif "value" in roles:
            rec.category, rec.ops = "arithmetic", n
            self.set_role(node, "value")
        else:
            rec.category, rec.ops = "guard", n
            self.set_role(node, "penalty")

    def _f_mul(self, node, rec, roles):
        n = self.numel(node.outputs[0])
        consts = [i for i in node.inputs if i and self.is_const(i)]
        if "score" in roles:
            if consts and len(roles) == 1:
                rec.category, rec.ops, rec.note = "rescale", n, "scales scores by a constant (not a paper op)"
            else:
                rec.category, rec.ops = "arithmetic", n
            self.set_role(node, "score")
        elif "select" in roles:
            rec.category, rec.ops = "addressing", n
            self.set_role(node, "select")
            self.select[node.outputs[0]] = _unknown_select()
        elif "index" in roles:
            rec.category, rec.ops, rec.note = "addressing", n, "index arithmetic"
            self.set_role(node, "index")
            self.propagate_interval(node)
        elif "value" in roles:
            rec.category, rec.ops = "arithmetic", n
            self.set_role(node, "value")
        else:
            rec.category, rec.ops = "guard", n
            self.set_role(node, "penalty")

    def _f_unary(self, node, rec, roles):
        """Abs/Neg/BitShift: like a multiplication by a constant (a sign flip of scores is a rescale)."""
        self._f_mul(node, rec, roles)
        if "score" in roles:
            rec.category = "rescale"

    def _f_reduce_sum(self, node, rec, roles):
        ops = self.elementwise_ops(node, "reduce_sum")
        role = roles[0] if roles else "value"
        terms = None
        n_in, n_out = self.numel(node.inputs[0]), self.numel(node.outputs[0])
        if n_in and n_out:
            terms = n_in // n_out
        if role == "score":
            rec.category, rec.ops = "arithmetic", ops
            rec.note = f"sum of {terms} terms x {n_out}: ({terms} - 1) x {n_out} additions" if terms else ""
            self.set_role(node, "score")
        elif role == "select":
            rec.category, rec.ops, rec.note = "addressing", ops, "merges one-hots"
            self.set_role(node, "select")
            self.propagate_select(node)
        elif role == "index":
            rec.category, rec.ops, rec.note = "addressing", ops, "index arithmetic"
            self.set_role(node, "index")
            self.propagate_interval(node)
        elif role == "bins":
            rec.category, rec.ops, rec.note = "binning", ops, "counts cut points below each value"
            self.set_role(node, "index")
            rs = self.shape(node.outputs[0])
            if rs is not None:
                n_in_shape = self.shape(node.inputs[0])
                hi = float(np.prod(n_in_shape) // max(np.prod(rs), 1)) if n_in_shape else np.inf
                self.interval[node.outputs[0]] = (np.zeros(rs), np.full(rs, hi))
        elif role == "value":
            rec.category, rec.ops = "arithmetic", ops
            self.set_role(node, "value")
        else:
            rec.category, rec.ops = "guard", ops
            self.set_role(node, "penalty")

    def product_macs(self, node):
        """MACs per row of MatMul/Gemm/FullyConnected/Conv (bias excluded)."""
        n_out = self.numel(node.outputs[0])
        if n_out is None:
            return None
        w = self.shape(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        a = self.shape(node.inputs[0])
        if node.op == "FullyConnected":
            k = None if w is None else w[-1]
        elif node.op == "Gemm":
            k = None if a is None else (a[-2] if node.attrs.get("transA") else a[-1])
        elif node.op == "MatMul":
            k = None if a is None else a[-1]
        elif node.op == "Conv":           # ONNX OIHW weights: K = C_in/groups * kh * kw
            k = None if w is None else int(np.prod(w[1:]))
        elif node.op == "DepthwiseConv":  # TFLite [1, kh, kw, C_out]
            k = None if w is None else int(w[1] * w[2])
        else:
            k = None
        if node.op == "Conv" and self.g.format == "tflite" and w is not None:
            k = int(np.prod(w[1:]))       # TFLite OHWI
        return None if k is None else int(n_out * k)

    def has_bias(self, node) -> bool:
        if node.op in ("FullyConnected", "Conv", "DepthwiseConv", "Gemm"):
            return len(node.inputs) > 2 and bool(node.inputs[2])
        return False

    def _f_matmul(self, node, rec, roles):
        out = node.outputs[0]
        macs = self.product_macs(node)
        bias = self.numel(out) if self.has_bias(node) else 0
        rec.macs = macs
        total = None if macs is None else macs + (bias or 0)
        role = self.role.get(node.inputs[0], "value") if not self.is_const(node.inputs[0]) else _merge_roles(roles)
        thresholded = node.attrs.get("fusedActivationFunction") in (1, 3) or bool(bias)
        if role == "select" and not thresholded:
            info = self.select.get(node.inputs[0]) or _unknown_select()
            rec.category = "arithmetic"
            rec.effective_additions = rec.ops = self.effective_additions(node, info)
            rec.note = "one-hot x table: MACs shown; ops = effective additions" + \
                ("" if rec.ops is not None else " (unknown: the one-hot's structure is not derivable)")
            self.set_role(node, "score")
        elif role in ("select", "index"):
            # A product of codes, or of one-hots with a bias and a ReLU, builds (combines) one-hots
            # (the Edge TPU ``relu`` builder): index work, and its output is again a selector.
            rec.category, rec.ops = "addressing", total
            rec.note = "builds a one-hot from codes" if role == "index" else "combines one-hots (bias + ReLU)"
            self.set_role(node, "select")
            self.select[out] = self.product_select(node, role)
        elif role in ("score", "value"):
            rec.category, rec.ops = "arithmetic", total
            rec.note = "one op per MAC" + (" + one per bias" if bias else "")
            self.set_role(node, role)
        else:
            rec.category, rec.ops = "guard", total
            self.set_role(node, "penalty")

    def product_select(self, node, role) -> dict:
        """One-hot structure of a product that builds or combines one-hots.

        Each output reads one input (weights with one nonzero per output): it belongs to that
        input's owner. Or it is an AND of one-hot inputs (equal weights ``w``, bias
        ``-(k - 1) * w``, ReLU): it belongs to the *set* of its inputs' owners, and outputs with
        the same owner set are exclusive when they read different input positions.
        """
        weights, a, o = self.t[node.inputs[1]].real_value(), self.shape(node.inputs[0]), self.shape(node.outputs[0])
        if weights is None or weights.ndim != 2 or a is None or o is None or int(np.prod(a)) != a[-1]:
            return _unknown_select()
        w = weights if node.op == "FullyConnected" else weights.T         # [M, K]
        if w.shape != (o[-1], a[-1]):
            return _unknown_select()
        if role == "index":
            in_owner = np.arange(a[-1])
        else:
            info = self.select.get(node.inputs[0]) or _unknown_select()
            if info["owner"] is None or np.any(info["owner"] < 0):
                return _unknown_select()
            in_owner = info["owner"].reshape(-1)
        nonzero = w != 0
        nnz = nonzero.sum(axis=1)
        if np.all(nnz == 1):
            return _select(in_owner[nonzero.argmax(axis=1)].reshape(o), np.ones(o, dtype=bool))
        bias = self.t[node.inputs[2]].real_value() if self.has_bias(node) else None
        relu = node.attrs.get("fusedActivationFunction") in (1, 3)
        if role != "select" or bias is None or not relu or bias.shape != (o[-1],):
            return _unknown_select()
        unit = np.where(nonzero, w, 0).max(axis=1)
        is_and = np.all((w == unit[:, None]) | ~nonzero) and np.all(unit > 0) and \
            np.allclose(bias, -(nnz - 1) * unit, rtol=1e-6, atol=1e-9)
        if not is_and:
            return _unknown_select()
        groups: dict = {}
        owner = np.empty(o[-1], dtype=np.int64)
        for m in range(o[-1]):
            ks = np.flatnonzero(nonzero[m])
            key = tuple(sorted(set(in_owner[ks].tolist())))
            seen = groups.setdefault(key, (len(groups), set()))
            if tuple(ks) in seen[1]:
                return _unknown_select()   # two identical outputs would both be hot
            seen[1].add(tuple(ks))
            owner[m] = seen[0]
        return _select(owner.reshape(o), np.ones(o, dtype=bool))

    _f_conv = _f_matmul

    def _f_batchnorm(self, node, rec, roles):
        rec.category, rec.ops, rec.note = "arithmetic", self.numel(node.outputs[0]), "one op per batch-norm output"
        self.set_role(node, _merge_roles(roles))

    def effective_additions(self, node, info) -> int | None:
        """``sum_v max(h_v - 1, 0) * M`` over the one-hot row vectors of a product's input."""
        a, out = self.shape(node.inputs[0]), self.shape(node.outputs[0])
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

    # comparisons, logic, selects ---------------------------------------------------------------------
    def _f_compare(self, node, rec, roles):
        out = node.outputs[0]
        n_out = self.numel(out)
        n_ins = [self.numel(i) for i in self.data_inputs(node)]
        expanding = n_out is not None and all(n is not None and n < n_out for n in n_ins)
        if expanding and roles and roles[0] == "index":
            rec.category, rec.ops = "addressing", n_out
            self.set_role(node, "select")
            if node.op == "Equal":
                self.select[out] = self.equal_onehot(node)
                rec.note = "one-hot by comparing indices with a constant pattern"
            else:
                self.select[out] = _unknown_select()
        elif expanding and roles and roles[0] == "value":
            rec.category, rec.ops, rec.note = "binning", n_out, "compares raw values with cut points"
            self.set_role(node, "bins")
        else:
            rec.category, rec.ops = "guard", n_out
            self.set_role(node, "mask")
            self.control_inputs[node.index] = set(node.inputs)

    def _f_logic(self, node, rec, roles):
        rec.category, rec.ops = "guard", self.numel(node.outputs[0])
        self.set_role(node, "mask")
        self.control_inputs[node.index] = set(node.inputs)

    def _f_reduce_logic(self, node, rec, roles):
        rec.category, rec.ops = "guard", self.elementwise_ops(node, "reduce_logic")
        self.set_role(node, "mask")
        self.control_inputs[node.index] = set(node.inputs)

    def _f_where(self, node, rec, roles):
        rec.category, rec.ops = "guard", self.numel(node.outputs[0])
        data = [i for i in node.inputs[1:] if i and not self.is_const(i)]
        role = _merge_roles([self.role.get(i, "value") for i in data]) if data else "penalty"
        self.set_role(node, role)
        self.control_inputs[node.index] = {node.inputs[0]}
        if role == "index":
            self.propagate_interval(node)
        rec.note = "selects by a validity mask"

    def _f_clamp(self, node, rec, roles):
        role = _merge_roles(roles)
        n = self.numel(node.outputs[0])
        if role == "index":
            rec.category, rec.ops, rec.note = "guard", n, "clamps indices into range"
            self.set_role(node, "index")
            self.propagate_interval(node)
        elif role == "select":
            rec.category, rec.ops, rec.note = "addressing", n, "combines one-hots"
            self.set_role(node, "select")
            parts = [self.select.get(i) for i in self.data_inputs(node)]
            same = len(parts) == 2 and all(p is not None and p["owner"] is not None for p in parts) and \
                np.array_equal(parts[0]["owner"], parts[1]["owner"])
            self.select[node.outputs[0]] = _select(parts[0]["owner"], parts[0]["possible"] & parts[1]["possible"]) \
                if same and node.op == "Min" else _unknown_select()
        elif role in ("mask", "penalty"):
            rec.category, rec.ops = "guard", n
            self.set_role(node, role)
        else:
            rec.category, rec.ops, rec.note = "free", 0, "activation: free by convention"
            self.set_role(node, role)

    def _f_argmax(self, node, rec, roles):
        rec.category, rec.ops = "argmax", self.elementwise_ops(node, "argmax")
        rec.note = "comparisons of the final argmax (reported separately)"
        self.set_role(node, "label")

    def _f_onehot(self, node, rec, roles):
        out = node.outputs[0]
        rec.category, rec.ops, rec.note = "addressing", self.numel(out), "one-hot of indices"
        self.set_role(node, "select")
        self.select[out] = self.onnx_onehot(node)

    # -- intervals (index tensors) --------------------------------------------------------------------
    def bounds(self, name):
        """(lo, hi) float arrays of an index or constant tensor, None if unknown."""
        if self.value(name) is not None:
            v = self.value(name).astype(np.float64)
            return v, v
        return self.interval.get(name)

    def propagate_interval(self, node) -> None:
        out = node.outputs[0]
        rs = self.shape(out)
        if rs is None:
            return
        result = None
        try:
            result = self._interval(node, rs)
        except (ValueError, IndexError, TypeError):
            result = None
        if result is None or result[0].shape != rs:
            result = (np.full(rs, -np.inf), np.full(rs, np.inf))
        self.interval[out] = result

    def _interval(self, node, rs):
        op = node.op
        ins = [self.bounds(i) if i else None for i in node.inputs]
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
            return _fit(lo, rs), _fit(hi, rs)
        if op in ("Relu", "Relu6", "Clip") and ins[0] is not None:
            lo, hi = ins[0]
            top = 6.0 if op == "Relu6" else np.inf
            low = 0.0
            if op == "Clip":
                low = -np.inf if len(ins) < 2 or ins[1] is None else ins[1][0]
                top = np.inf if len(ins) < 3 or ins[2] is None else ins[2][1]
            return _fit(np.clip(lo, low, top), rs), _fit(np.clip(hi, low, top), rs)
        if op == "Where" and ins[1] is not None and ins[2] is not None:
            return _fit(np.minimum(ins[1][0], ins[2][0]), rs), _fit(np.maximum(ins[1][1], ins[2][1]), rs)
        if op == "ReduceSum" and ins[0] is not None:
            axes, keep = self.reduce_axes(node)
            lo, hi = ins[0]
            return (_fit(np.sum(lo, axis=axes, keepdims=keep), rs), _fit(np.sum(hi, axis=axes, keepdims=keep), rs))
        if KINDS.get(op) in ("move", "gather") and ins[0] is not None:
            lo = self.emulate_move(node, ins[0][0])
            hi = self.emulate_move(node, ins[0][1])
            if lo is not None and hi is not None:
                return lo, hi
        return None

    # -- one-hot structure -----------------------------------------------------------------------------
    def equal_onehot(self, node) -> dict:
        """Owner/possible arrays of ``Equal(index, constant)`` broadcast into a larger tensor."""
        out_rs = self.shape(node.outputs[0])
        idx = next(i for i in node.inputs if not self.is_const(i))
        const = next((i for i in node.inputs if i != idx and self.is_const(i)), None)
        idx_rs = self.shape(idx)
        if out_rs is None or idx_rs is None or const is None or self.value(const) is None:
            return _unknown_select()
        try:
            owner = np.broadcast_to(np.arange(int(np.prod(idx_rs))).reshape(idx_rs),
                                    np.broadcast_shapes(idx_rs, self.value(const).shape))
            pattern = np.broadcast_to(self.value(const).astype(np.float64), owner.shape)
            lo, hi = self.bounds(idx) or (np.full(idx_rs, -np.inf), np.full(idx_rs, np.inf))
            lo, hi = np.broadcast_to(lo, owner.shape), np.broadcast_to(hi, owner.shape)
            possible = (pattern >= lo) & (pattern <= hi)
            owner, possible = owner.reshape(out_rs), possible.reshape(out_rs)
        except ValueError:
            return _unknown_select()
        return _select(owner, possible)

    def onnx_onehot(self, node) -> dict:
        idx = node.inputs[0]
        idx_rs, out_rs = self.shape(idx), self.shape(node.outputs[0])
        axis = node.attrs.get("axis", -1)
        depth = self.value(node.inputs[1]) if len(node.inputs) > 1 else None
        if idx_rs is None or out_rs is None or depth is None or axis not in (-1, len(idx_rs)):
            return _unknown_select()
        depth = int(np.asarray(depth).reshape(-1)[0])
        lo, hi = self.bounds(idx) or (np.full(idx_rs, -np.inf), np.full(idx_rs, np.inf))
        owner = np.broadcast_to(np.arange(int(np.prod(idx_rs))).reshape(idx_rs + (1,)), idx_rs + (depth,))
        j = np.arange(depth).reshape((1,) * len(idx_rs) + (depth,))
        # ONNX OneHot wraps negative indices (-depth..-1): an unbounded interval reaches everything anyway
        reach = (j >= lo[..., None]) & (j <= hi[..., None])
        wrapped = (j - depth >= lo[..., None]) & (j - depth <= hi[..., None])
        return _select(owner.reshape(out_rs), (reach | wrapped).reshape(out_rs))

    def propagate_select(self, node) -> None:
        out = node.outputs[0]
        info = self.select.get(node.inputs[0]) if node.inputs else None
        if info is None:
            self.select[out] = _unknown_select()
            return
        if node.op == "ReduceSum":
            self.select[out] = self.reduce_select(node, info)
            return
        if node.op == "Concat":
            parts = [self.select.get(i) for i in node.inputs if i]
            if all(p is not None and p["owner"] is not None for p in parts):
                offset, owners, poss = 0, [], []
                for p in parts:      # owners of different inputs are different indices
                    owners.append(np.where(p["owner"] >= 0, p["owner"] + offset, p["owner"]))
                    offset += int(p["owner"].max(initial=-1)) + 1
                    poss.append(p["possible"])
                axis = node.attrs.get("axis", 0)
                try:
                    self.select[out] = _select(np.concatenate(owners, axis=axis), np.concatenate(poss, axis=axis))
                    return
                except ValueError:
                    pass
            self.select[out] = _unknown_select()
            return
        owner = self.emulate_move(node, info["owner"]) if info["owner"] is not None else None
        possible = self.emulate_move(node, info["possible"]) if info["possible"] is not None else None
        if owner is None or possible is None:
            same = self.numel(out) == self.numel(node.inputs[0])
            self.select[out] = {"owner": None, "possible": None, "hots": info["hots"] if same else None}
            return
        result = _select(owner, possible)
        if np.any(owner[possible] == -2):
            same = self.numel(out) == self.numel(node.inputs[0])
            result["hots"] = info["hots"] if same else None
        self.select[out] = result

    def reduce_select(self, node, info) -> dict:
        owner, possible = info["owner"], info["possible"]
        rs = self.shape(node.outputs[0])
        if owner is None or possible is None or rs is None:
            return {"owner": None, "possible": None, "hots": info["hots"]}
        axes, keep = self.reduce_axes(node)
        count = np.sum(possible, axis=axes, keepdims=keep)
        single = np.max(np.where(possible, owner, -1), axis=axes, keepdims=keep)
        merged = np.where(count == 0, -1, np.where(count == 1, single, -2))
        return {"owner": _fit(merged, rs), "possible": _fit(count > 0, rs), "hots": info["hots"]}

    # -- data movement emulation (row-shaped arrays) -----------------------------------------------------
    def reduce_axes(self, node):
        rank = len(self.shape(node.inputs[0]) or ())
        if node.op == "ReduceSum" and self.g.format == "onnx":
            axes = self.value(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else node.attrs.get("axes")
            keep = bool(node.attrs.get("keepdims", 1))
        else:
            axes = self.value(node.inputs[1]) if len(node.inputs) > 1 else None
            keep = bool(node.attrs.get("keepDims", False))
        if axes is None:
            axes = list(range(rank))
        axes = tuple(int(a) % rank for a in np.asarray(axes).reshape(-1)) if rank else ()
        return axes, keep

    def emulate_move(self, node, array):
        """Apply a data-movement node to a row-shaped array; None if it cannot be emulated."""
        out_rs = self.shape(node.outputs[0])
        if array is None or out_rs is None:
            return None
        op = node.op
        try:
            if op in ("Cast", "Identity", "Quantize", "Dequantize", "QuantizeLinear", "DequantizeLinear"):
                result = array
            elif op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten"):
                result = array.reshape(out_rs)
            elif op == "Expand":
                result = np.broadcast_to(array, out_rs)
            elif op == "Transpose":
                perm = node.attrs.get("perm")
                if perm is None and len(node.inputs) > 1 and node.inputs[1]:
                    perm = self.value(node.inputs[1])
                result = np.transpose(array, None if perm is None else [int(p) for p in perm])
            elif op == "Slice":
                result = array[self.slices(node, array.ndim)]
            elif op == "StridedSlice":
                result = self.strided_slice(node, array)
            elif op == "Gather":
                indices = self.value(node.inputs[1])
                if indices is None:
                    return None
                axis = node.attrs.get("axis", 0)
                result = np.take(array, indices.astype(np.int64), axis=int(axis))
            else:
                return None
        except (ValueError, IndexError, TypeError):
            return None
        return result if result is not None and tuple(result.shape) == tuple(out_rs) else None

    def slices(self, node, rank):
        """Python slices of an ONNX Slice (starts, ends, axes, steps; TFLite SLICE: begin, size)."""
        if self.g.format == "tflite":
            begin, size = self.value(node.inputs[1]), self.value(node.inputs[2])
            return tuple(slice(int(b), None if int(s) == -1 else int(b) + int(s)) for b, s in zip(begin, size))
        vals = [self.value(i) if k < len(node.inputs) and i else None for k, i in enumerate(node.inputs)]
        starts, ends = vals[1], vals[2]
        axes = vals[3] if len(vals) > 3 and vals[3] is not None else np.arange(len(starts))
        steps = vals[4] if len(vals) > 4 and vals[4] is not None else np.ones(len(starts), dtype=np.int64)
        sl = [slice(None)] * rank
        for s, e, a, st in zip(starts, ends, axes, steps):
            sl[int(a) % rank] = slice(int(s), int(e), int(st))
        return tuple(sl)

    def strided_slice(self, node, array):
        a = node.attrs
        if a.get("ellipsisMask") or a.get("newAxisMask"):
            return None
        begin, end, strides = (self.value(i) for i in node.inputs[1:4])
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
            index.append(slice(None if (a.get("beginMask", 0) >> d) & 1 else b,
                               None if (a.get("endMask", 0) >> d) & 1 else e, s))
        return array[tuple(index)]

    # -- backward: which last-axis columns reach the outputs as data --------------------------------------
    def backward(self) -> dict:
        used = {name: np.zeros(max(t.last_dim, 1), dtype=bool) for name, t in self.t.items()}
        for name in self.g.outputs:
            if name in used:
                used[name][:] = True
        for node in reversed(self.g.nodes):
            outs = [used[o] for o in node.outputs if o in used]
            if not outs or not any(o.any() for o in outs):
                continue
            out_used = outs[0] if len(outs) == 1 else np.ones_like(outs[0]) * any(o.any() for o in outs)
            control = self.control_inputs.get(node.index, set())
            for k, name in enumerate(node.inputs):
                if not name or name not in used or name in control:
                    continue   # conditions and guard comparisons do not carry data
                mask = self.input_use(node, k, name, out_used)
                if mask is not None and mask.shape == used[name].shape:
                    used[name] |= mask
                else:
                    used[name] |= out_used.any()
        return used

    def input_use(self, node, k, name, out_used):
        """Columns of input ``k`` that the used output columns need (None: all if any)."""
        n_in = self.t[name].last_dim
        n_out = out_used.shape[0]
        everything = np.full(n_in, out_used.any())
        kind = KINDS.get(node.op)
        in_rs, out_rs = self.shape(name), self.shape(node.outputs[0])
        if in_rs is None or out_rs is None:
            return everything
        if node.op == "Concat":
            axis = int(node.attrs.get("axis", 0)) % max(len(out_rs), 1)
            if axis != len(out_rs) - 1:
                return everything
            start = sum(self.t[i].last_dim for i in node.inputs[:k] if i)
            return out_used[start:start + n_in].copy()
        if node.op in ("Slice", "StridedSlice") and k == 0:
            idx = np.arange(n_in).reshape((1,) * (len(in_rs) - 1) + (n_in,)) if in_rs else None
            if idx is None:
                return everything
            picked = self.emulate_move(node, np.broadcast_to(idx, in_rs))
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
            axes, _ = self.reduce_axes(node)
            return out_used.copy() if len(in_rs) - 1 not in axes and n_in == n_out else everything
        if kind in ("add", "mul", "unary", "clamp", "where", "compare", "logic", "activation", "batchnorm") or \
                node.op in ("Cast", "Quantize", "Dequantize", "Identity", "Expand", "Squeeze", "Unsqueeze"):
            if n_in == n_out:
                return out_used.copy()
            return everything
        return everything

    def apply_data_use(self, node) -> None:
        """Per-row work that reaches the outputs only through conditions is guard work."""
        rec = self.records[node.index]
        if node.index in self.load_time or rec.category in ("unknown",):
            return
        outs = [self.used[o] for o in node.outputs if o in self.used]
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

    # -- parameters -------------------------------------------------------------------------------------
    def find_params(self) -> list[ParamTensor]:
        """Trace the tables that per-row arithmetic reads back to their decoded sources."""
        sources: dict[str, dict] = {}
        for node in self.g.nodes:
            rec = self.records[node.index]
            if node.index in self.load_time or rec.category != "arithmetic":
                continue
            operands = []
            if KINDS.get(node.op) in ("matmul", "conv"):
                weight = node.inputs[1] if len(node.inputs) > 1 else ""
                rows = self.reachable_rows(node)
                operands = [(weight, rows)] + [(b, None) for b in node.inputs[2:3] if b]
            elif KINDS.get(node.op) in ("add", "mul", "batchnorm"):
                operands = [(i, None) for i in node.inputs if i and self.is_const(i)]
            for name, rows in operands:
                if name and self.is_const(name):
                    self.trace_param(name, rows, sources, node)
        # the lookup tables of Gather nodes are classified free; their tables are parameters too
        for node in self.g.nodes:
            rec = self.records[node.index]
            if node.op == "Gather" and node.index not in self.load_time and rec.lookups and \
                    self.is_const(node.inputs[0]):
                self.trace_param(node.inputs[0], None, sources, node)
        meta_bits = (self.g.metadata or {}).get("bits")
        params = []
        for name, info in sources.items():
            t = self.t[name]
            used = self.used.get(name)
            frac_cols = 1.0 if used is None or used.shape[0] != t.last_dim else used.sum() / used.shape[0]
            elements = t.numel if t.value is None else int(t.value.size)
            if info["rows"] is not None and t.value is not None and t.value.ndim == 2:
                # FullyConnected weights are [M, K], MatMul weights [K, M]: count the reachable K rows
                m = t.value.shape[0] if info["fc"] else int(round(t.value.shape[1] * frac_cols))
                elements = int(info["rows"].sum()) * m
            elif elements is not None:
                elements = int(round(elements * frac_cols))
            bits = int(meta_bits) if meta_bits else np.dtype(t.dtype).itemsize * 8
            storage = [(s, self.t[s].dtype, int(self.t[s].value.size), np.dtype(self.t[s].dtype).itemsize * 8)
                       for s in self.storage_of(name)]
            params.append(ParamTensor(name, t.row_shape, elements, bits, None if elements is None else elements * bits,
                                      storage, info["note"] if elements is not None else "size unknown (no shape)"))
        return params

    def reachable_rows(self, node):
        """For a one-hot product: which K rows of the weights an index can select (else None)."""
        info = self.select.get(node.inputs[0])
        a = self.shape(node.inputs[0])
        if info is None or info.get("possible") is None or a is None:
            return None
        return info["possible"].reshape(-1, a[-1]).any(axis=0)

    def trace_param(self, name, rows, sources, consumer) -> None:
        """Walk back through load-time structure (Slice, Concat, folding Add) to decoded tensors."""
        node = self.producer.get(name)
        if node is None or node.index not in self.load_time:
            if name not in sources:
                direct = self.producer.get(name) is None and rows is not None
                sources[name] = {"rows": rows if direct else None, "fc": consumer.op == "FullyConnected",
                                 "note": f"read by {consumer.source_op} #{consumer.index}"}
            return
        op = node.op
        if op in ("Slice", "StridedSlice", "Identity", "Squeeze", "Unsqueeze"):
            self.trace_param(node.inputs[0], None, sources, consumer)
        elif op == "Concat":
            for i in node.inputs:
                if i and self.used.get(i, np.ones(1, bool)).any():
                    self.trace_param(i, None, sources, consumer)
        elif op in ("Add", "Sub"):
            a, b = node.inputs[0], node.inputs[1]
            for i in (a, b):
                self.trace_param(i, None, sources, consumer)
            na, nb = self.numel(a), self.numel(b)
            rec = self.records[node.index]
            if na is not None and nb is not None and na != nb and self.used[node.outputs[0]].any():
                rec.folded = min(na, nb)
                rec.note = f"folds a {min(na, nb)}-term addend into a lookup table: {min(na, nb)} per-row " \
                           "additions done once at load"
        elif op in ("Expand", "ConstantOfShape", "Tile") and (self.numel(node.inputs[0]) or 0) <= 1:
            return   # a fill (the NaN row), not a parameter
        else:
            if name not in sources:
                sources[name] = {"rows": None, "fc": False, "note": f"decoded at load by {node.source_op}"}

    def storage_of(self, name) -> list[str]:
        """Stored initializers behind a (decoded) parameter: follow the largest operand of decode ops."""
        node = self.producer.get(name)
        if node is None:
            return [name] if self.value(name) is not None else []
        operands = [i for i in node.inputs if i and self.is_const(i)]
        if not operands:
            return []
        if node.op in ("Concat", "Add", "Sub"):
            return [s for i in operands for s in self.storage_of(i)]
        largest = max(operands, key=lambda i: self.numel(i) or 0)
        return self.storage_of(largest)


# ================================================================================================
# DNN graphs (model_kind "dnn"): the same passes, DNN roles, then one pass per weight layer
# ================================================================================================
#: Products that carry a dense / convolution layer's MACs.
DENSE_OPS = ("Gemm", "MatMul", "FullyConnected")
CONV_OPS = ("Conv", "DepthwiseConv")
#: Bits per batch-norm unit and per output bias (the paper's DNN conventions, profiling.costs).
DNN_BATCH_NORM_BITS = 64
DNN_BIAS_BITS = 32


class _DNNCounter(_Counter):
    """Counts an exported DNN (see *DNN graphs* in the module docstring).

    Forward roles differ from BN graphs in four places: encoded inputs (table lookups, one-hots)
    and products are activations (``value``), not scores; a product with constant weights is a
    weight layer whatever its input is (one-hot inputs too: full MACs); a comparison of a layer's
    values with a per-unit constant feeding ``Where(cond, const, const)`` is a sign activation,
    which carries data (not a guard condition); and an ``Add``/``Mul`` of the logits with the
    invalid-row penalty or mask is guard work. :meth:`post_pass` then matches the weight
    products with the metadata's ``layers`` in order and decides each layer's terms.
    """

    def __init__(self, graph: Graph) -> None:
        super().__init__(graph)
        self.products: list[GNode] = []
        self.layer_facts: list[dict] = []
        self.dnn_params: list[ParamTensor] = []
        self.problems: list[str] = []
        self.position = {n.index: k for k, n in enumerate(graph.nodes)}

    # -- forward: DNN roles ---------------------------------------------------------------------------
    def _f_gather(self, node, rec, roles):
        super()._f_gather(node, rec, roles)
        if self.role.get(node.outputs[0]) == "score":
            self.set_role(node, "value")
            rec.note = f"encoding lookup: {rec.lookups} values per row from a constant table (no arithmetic)"

    def _f_matmul(self, node, rec, roles):
        weight = node.inputs[1] if len(node.inputs) > 1 else ""
        if weight and self.is_const(weight) and not self.is_const(node.inputs[0]):
            rec.category, rec.macs = "arithmetic", self.product_macs(node)
            rec.ops = rec.macs
            rec.note = "weight layer"
            self.set_role(node, "value")
            self.products.append(node)
            return
        super()._f_matmul(node, rec, roles)

    _f_conv = _f_matmul

    def _f_compare(self, node, rec, roles):
        data = self.data_inputs(node)
        consts = [i for i in node.inputs if i and self.is_const(i)]
        if len(data) == 1 and consts and self.role.get(data[0]) == "value" \
                and self.numel(node.outputs[0]) == self.numel(data[0]):
            rec.category, rec.ops, rec.note = "free", 0, "threshold of a sign activation"
            self.set_role(node, "threshold")
            return
        super()._f_compare(node, rec, roles)

    def _f_where(self, node, rec, roles):
        cond, branches = node.inputs[0], [i for i in node.inputs[1:3]]
        if self.role.get(cond) == "threshold" and len(branches) == 2 and all(self.is_const(b) for b in branches):
            rec.category, rec.ops, rec.note = "free", 0, "sign activation: +-1 by the threshold (free)"
            self.set_role(node, "value")
            return
        super()._f_where(node, rec, roles)

    def _penalty(self, node, rec, roles) -> bool:
        if "value" in roles and ("penalty" in roles or "mask" in roles):
            rec.category, rec.ops = "guard", self.numel(node.outputs[0])
            rec.note = "applies the invalid-row penalty / mask to the logits (NaN for invalid rows)"
            self.set_role(node, "value")
            return True
        return False

    def _f_add(self, node, rec, roles):
        if not self._penalty(node, rec, roles):
            super()._f_add(node, rec, roles)

    def _f_mul(self, node, rec, roles):
        if not self._penalty(node, rec, roles):
            super()._f_mul(node, rec, roles)

    # -- layers ------------------------------------------------------------------------------------------
    def post_pass(self) -> None:
        meta = self.g.metadata or {}
        specs = list(meta.get("layers") or [])
        if len(self.products) != len(specs):
            msg = (f"the graph has {len(self.products)} products with constant weights, the metadata "
                   f"{len(specs)} layers")
            self.problems.append(msg)
            for node in self.products:
                rec = self.records[node.index]
                rec.ops, rec.note = None, f"cannot match the layers: {msg}"
            return
        bits = meta.get("weight_bits", meta.get("bits"))
        tflite_layers = meta.get("tflite_layers") or []
        for k, (node, spec) in enumerate(zip(self.products, specs)):
            following = self.products[k + 1] if k + 1 < len(self.products) else None
            extra = tflite_layers[k] if k < len(tflite_layers) and isinstance(tflite_layers[k], dict) else {}
            self.layer_facts.append(self.count_layer(k, node, spec, following, extra, bits))

    def input_copies(self, node) -> int:
        """``c`` when the product's input is a ``Concat`` of one tensor ``c`` times (TFLite B = 8)."""
        src = self.producer.get(node.inputs[0])
        if src is None or src.op != "Concat" or src.index in self.load_time:
            return 1
        parts = [i for i in src.inputs if i]
        rank = len(self.shape(src.outputs[0]) or ())
        axis = int(src.attrs.get("axis", -1))
        if len(parts) > 1 and len(set(parts)) == 1 and rank and axis % rank == rank - 1:
            return len(parts)
        return 1

    def tail(self, node, following) -> list:
        """Per-row nodes fed (through data) by a product, up to the next weight product."""
        reach, out = set(node.outputs), []
        for n in self.g.nodes[self.position[node.index] + 1:]:
            if following is not None and n.index == following.index:
                break
            if n.index in self.load_time or not any(i in reach for i in n.inputs if i):
                continue
            out.append(n)
            reach.update(n.outputs)
        return out

    def affine(self, n) -> bool:
        """An elementwise ``Add``/``Sub``/``Mul``/``Div``/comparison of layer values with a constant."""
        if KINDS.get(n.op) not in ("add", "mul", "compare") or self.records[n.index].category == "guard":
            return False
        data = self.data_inputs(n)
        return len(data) == 1 and self.role.get(data[0]) == "value" and any(i and self.is_const(i) for i in n.inputs)

    def constant_operand(self, n) -> str:
        if KINDS.get(n.op) in ("matmul", "conv"):
            return n.inputs[2]
        return next(i for i in n.inputs if i and self.is_const(i))

    def count_layer(self, k, node, spec, following, extra, bits) -> dict:
        rec = self.records[node.index]
        out = node.outputs[0]
        n_out = self.numel(out)
        problems = []
        layer_type = spec.get("type")
        if node.op not in (CONV_OPS if layer_type == "conv2d" else DENSE_OPS):
            problems.append(f"metadata layer {k} is {layer_type!r}, the graph has {node.source_op}")
        if out in self.used and not self.used[out].any():
            problems.append("its output does not reach the logits as data")
        copies = self.input_copies(node)
        meta_copies = extra.get("input_copies")
        if meta_copies is not None and int(meta_copies) != copies:
            problems.append(f"input copies: {copies} in the graph, {meta_copies} in the metadata")
        graph_macs = rec.macs
        macs = None
        if graph_macs is None or n_out is None:
            problems.append("shapes unknown")
        elif graph_macs % copies:
            problems.append(f"{graph_macs} MACs do not split into {copies} input copies")
        else:
            macs = graph_macs // copies
        rec.category = "arithmetic"
        rec.guard_share = 0
        rec.effective_additions = None
        rec.ops = macs
        what = "conv" if node.op in CONV_OPS else "dense"
        notes = [f"layer {k} ({what}): {_fmt(macs)} MACs"]
        if copies > 1:
            notes.append(f"graph MACs {_fmt(graph_macs)} = {copies} input copies (B = 8 split weights) "
                         f"x {_fmt(macs)} of the layer")

        bn, bias = bool(spec.get("batch_norm")), bool(spec.get("bias"))
        if bn and bias:
            problems.append("a layer with both batch norm and a bias has no counting rule")
        term = "batch_norm" if bn else ("bias" if bias else None)
        tail = self.tail(node, following)
        candidates = [n for n in tail if self.affine(n)]
        shifts = [n for n in candidates if KINDS[n.op] in ("add", "compare")]
        carrier = shifts[-1] if shifts else (node if self.has_bias(node) else None)
        for n in shifts[:-1]:               # nothing in the metadata explains a second addition
            r = self.records[n.index]
            r.category, r.ops = "arithmetic", self.numel(n.outputs[0])
            r.note = "per-row addition on the data path that no metadata term explains (counted, so it shows)"
        before = [n for n in candidates if KINDS[n.op] == "mul" and (not shifts or n.index < shifts[-1].index)]
        after = [n for n in candidates if KINDS[n.op] == "mul" and shifts and n.index > shifts[-1].index]

        fact = {"layer": k, "type": layer_type, "node": node.index, "op": node.source_op, "input_copies": copies,
                "graph_macs": graph_macs, "macs": macs, "outputs": n_out, "batch_norm_outputs": 0,
                "bias_outputs": 0, "weights": None, "batch_norm_units": 0, "biases": 0, "term_node": None}
        # weights: B bits each (metadata); split parts of a B = 8 TFLite layer are one weight
        weight = node.inputs[1]
        w_elements = self.t[weight].value.size if self.value(weight) is not None else self.numel(weight)
        if w_elements is not None:
            if w_elements % copies:
                problems.append(f"{w_elements} weights do not split into {copies} input copies")
            w_elements //= copies
        w_bits = int(bits) if bits else np.dtype(self.t[weight].dtype).itemsize * 8
        fact["weights"] = w_elements
        self.dnn_params.append(ParamTensor(
            weight, self.shape(weight), w_elements, w_bits, None if w_elements is None else w_elements * w_bits,
            [(s, self.t[s].dtype, int(self.t[s].value.size), np.dtype(self.t[s].dtype).itemsize * 8)
             for s in self.storage_of(weight)],
            f"layer {k} weights ({w_bits} bits each from the metadata)"
            + (f"; {copies} int8 parts per weight" if copies > 1 else "")))

        if term is not None and carrier is None:
            problems.append(f"the metadata says {term.replace('_', ' ')}, but no per-unit addition, threshold or "
                            "bias follows the product")
        elif term is not None:
            n_term = n_out if carrier is node else self.numel(carrier.outputs[0])
            const = self.constant_operand(carrier)
            units = int(self.value(const).size) if self.value(const) is not None else self.numel(const)
            per_unit = DNN_BATCH_NORM_BITS if term == "batch_norm" else DNN_BIAS_BITS
            label = "batch-norm" if term == "batch_norm" else "output-bias"
            fact["term_node"] = carrier.index
            fact["batch_norm_outputs" if term == "batch_norm" else "bias_outputs"] = n_term
            fact["batch_norm_units" if term == "batch_norm" else "biases"] = units
            if carrier is node:
                rec.ops = None if macs is None or n_term is None else macs + n_term
                notes.append(f"+ {_fmt(n_term)} {label} outputs (in its bias)")
            else:
                r = self.records[carrier.index]
                r.category, r.ops = "arithmetic", n_term
                r.note = f"layer {k} {label}: 1 op per output" + (
                    f" (with the scale #{', #'.join(str(n.index) for n in before)})"
                    if before and term == "batch_norm" else "")
            storage_names = self.storage_of(const)
            if term == "batch_norm":
                for n in before:
                    storage_names += self.storage_of(self.constant_operand(n))
            self.dnn_params.append(ParamTensor(
                const, self.shape(const), units, per_unit, None if units is None else units * per_unit,
                [(s, self.t[s].dtype, int(self.t[s].value.size), np.dtype(self.t[s].dtype).itemsize * 8)
                 for s in storage_names],
                f"layer {k} {label} ({per_unit} bits per unit)"))
        elif carrier is not None and carrier is not node:
            r = self.records[carrier.index]
            if KINDS[carrier.op] == "compare":
                r.category, r.ops = "free", 0
                r.note = f"layer {k} sign activation threshold (no batch norm: part of the activation, free)"
            else:
                r.category, r.ops = "arithmetic", self.numel(carrier.outputs[0])
                r.note = "per-row addition on the data path that no metadata term explains (counted, so it shows)"
        elif carrier is node:
            notes.append("its bias is no paper term (the metadata has no batch norm or output bias here: a sign "
                         "threshold, or the converter's bias): free")
        for n in before + after:
            r = self.records[n.index]
            if term == "batch_norm" and n in before:
                r.category, r.ops = "arithmetic", 0
                r.note = f"layer {k} batch-norm scale / direction: with #{carrier.index} 1 op per output"
            else:
                r.category, r.ops = "rescale", self.numel(n.outputs[0])
                r.note = f"layer {k}: scales by a constant (a rescale, not a paper op)"
        if problems:
            rec.ops = None
            self.problems.extend(f"layer {k}: {p}" for p in problems)
            notes.append("NOT COUNTED: " + "; ".join(problems))
        act = node.attrs.get("fusedActivationFunction")
        if act in FUSED_ACTIVATIONS:
            notes.append(f"fused {FUSED_ACTIVATIONS[act]} (free)")
        rec.note = "; ".join(notes)
        return fact

    def find_params(self) -> list[ParamTensor]:
        return self.dnn_params

    def breakdown(self) -> dict | None:
        facts = self.layer_facts

        def total(key):
            values = [f[key] for f in facts]
            return None if any(v is None for v in values) else int(sum(values))

        return {"layers": facts, "macs": total("macs"), "graph_macs": total("graph_macs"),
                "batch_norm_outputs": total("batch_norm_outputs"), "bias_outputs": total("bias_outputs"),
                "weights": total("weights"), "batch_norm_units": total("batch_norm_units"),
                "biases": total("biases"), "weight_bits": (self.g.metadata or {}).get("weight_bits"),
                "problems": list(self.problems)}


# ================================================================================================
# small helpers
# ================================================================================================
def _fmt(value) -> str:
    return "?" if value is None else f"{value:,}"


def _merge_roles(roles) -> str:
    """The role of a tensor built from several: the most 'semantic' one wins."""
    for r in ("score", "select", "index", "bins", "value", "label", "penalty", "mask"):
        if r in roles:
            return r
    return roles[0] if roles else "value"


def _unknown_select() -> dict:
    return {"owner": None, "possible": None, "hots": None}


def _select(owner, possible) -> dict:
    owner, possible = np.asarray(owner), np.asarray(possible, dtype=bool)
    reach = owner[possible]
    hots = None if np.any(reach == -2) else int(len(np.unique(reach[reach >= 0])))
    return {"owner": owner, "possible": possible, "hots": hots}


def _fit(array, rs):
    """``array`` as row shape ``rs`` (same shape, same size reshaped, or broadcast)."""
    array = np.asarray(array)
    if array.shape == tuple(rs):
        return array
    if array.size == math.prod(rs):
        return array.reshape(rs)
    return np.broadcast_to(array, rs).copy()
