"""DNN layers: match the weight products with the metadata's layers and count the paper's terms.

Every *weight product* (``Gemm``/``MatMul``/``FullyConnected``/``Conv``/``DepthwiseConv`` with
constant weights, in execution order; see :mod:`.dnn_rules`) is matched with the metadata's
``layers`` one to one, by position and type (a different number of products, or a dense layer
carried by a ``Conv``, leaves the layer uncounted: ``ops`` None, ``complete`` False,
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
bits per element of the output bias (:mod:`bnc_deploy.costs`' conventions). Not parameters: the
input-code table (preprocessing, like the BN exporters' cut points), the guard's constants, the
output scale, the ``direction``/``bn_scale`` halves (their storage is listed with the batch-norm
entry). What comes from the metadata: ``B``, the per-layer ``batch_norm``/``bias`` flags and
their order (``layers``), and the cross-check of ``input_copies``; everything else is read off
the graph.

Contract: :func:`count_layers` runs after data use (it reads ``state.used``) and rewrites the
records of the products and their tails; its parameters replace the BN parameter search.
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.costs import DNN_BATCH_NORM_BITS, DNN_BIAS_BITS
from bnc_deploy.profiling.graph_count.ir import FUSED_ACTIVATIONS
from bnc_deploy.profiling.graph_count.op_counts import CONV_OPS, DENSE_OPS, KINDS, has_bias
from bnc_deploy.profiling.graph_count.parameters import storage_entries, storage_of
from bnc_deploy.profiling.graph_count.results import ParamTensor, format_count
from bnc_deploy.profiling.graph_count.state import CountState


def count_layers(state: CountState, products: list) -> tuple[list[ParamTensor], dict]:
    """Count the layers of the weight ``products``; return the parameters and the breakdown."""
    layers = _LayerPass(state, products)
    layers.run()
    return layers.params, layers.breakdown()


class _LayerPass:
    """One pass over the weight products; collects per-layer facts, parameters and problems."""

    def __init__(self, state: CountState, products: list) -> None:
        self.state = state
        self.products = products
        self.facts: list[dict] = []
        self.params: list[ParamTensor] = []
        self.problems: list[str] = []
        self.position = {n.index: k for k, n in enumerate(state.graph.nodes)}

    def run(self) -> None:
        """Match the weight products with the metadata's layers one to one, in order."""
        meta = self.state.graph.metadata or {}
        specs = list(meta.get("layers") or [])
        if len(self.products) != len(specs):
            msg = f"the graph has {len(self.products)} products with constant weights, the metadata {len(specs)} layers"
            self.problems.append(msg)
            for node in self.products:
                rec = self.state.records[node.index]
                rec.ops, rec.note = None, f"cannot match the layers: {msg}"
            return
        bits = meta.get("weight_bits", meta.get("bits"))
        tflite_layers = meta.get("tflite_layers") or []
        for k, (node, spec) in enumerate(zip(self.products, specs)):
            following = self.products[k + 1] if k + 1 < len(self.products) else None
            extra = tflite_layers[k] if k < len(tflite_layers) and isinstance(tflite_layers[k], dict) else {}
            self.facts.append(self.count_layer(k, node, spec, following, extra, bits))

    def input_copies(self, node) -> int:
        """``c`` when the product's input is a ``Concat`` of one tensor ``c`` times (TFLite B = 8)."""
        src = self.state.producer.get(node.inputs[0])
        if src is None or src.op != "Concat" or src.index in self.state.load_time:
            return 1
        parts = [i for i in src.inputs if i]
        rank = len(self.state.shape(src.outputs[0]) or ())
        axis = int(src.attrs.get("axis", -1))
        if len(parts) > 1 and len(set(parts)) == 1 and rank and axis % rank == rank - 1:
            return len(parts)
        return 1

    def tail(self, node, following) -> list:
        """Per-row nodes fed (through data) by a product, up to the next weight product."""
        reach, out = set(node.outputs), []
        for n in self.state.graph.nodes[self.position[node.index] + 1 :]:
            if following is not None and n.index == following.index:
                break
            if n.index in self.state.load_time or not any(i in reach for i in n.inputs if i):
                continue
            out.append(n)
            reach.update(n.outputs)
        return out

    def affine(self, n) -> bool:
        """An elementwise ``Add``/``Sub``/``Mul``/``Div``/comparison of layer values with a constant."""
        if KINDS.get(n.op) not in ("add", "mul", "compare") or self.state.records[n.index].category == "guard":
            return False
        data = self.state.data_inputs(n)
        return (
            len(data) == 1
            and self.state.role.get(data[0]) == "value"
            and any(i and self.state.is_const(i) for i in n.inputs)
        )

    def constant_operand(self, n) -> str:
        """The constant of an affine node, or a product's bias."""
        if KINDS.get(n.op) in ("matmul", "conv"):
            return n.inputs[2]
        return next(i for i in n.inputs if i and self.state.is_const(i))

    def count_layer(self, k, node, spec, following, extra, bits) -> dict:
        """Decide layer ``k``'s MACs, weights and batch-norm / bias term; its facts for the breakdown."""
        rec = self.state.records[node.index]
        n_out = self.state.numel(node.outputs[0])
        problems: list[str] = []
        copies, graph_macs, macs, notes = self.count_macs(k, node, spec, extra, problems)
        bn, bias = bool(spec.get("batch_norm")), bool(spec.get("bias"))
        if bn and bias:
            problems.append("a layer with both batch norm and a bias has no counting rule")
        term = "batch_norm" if bn else ("bias" if bias else None)
        carrier, before, after = self.term_nodes(node, following)

        fact = {
            "layer": k,
            "type": spec.get("type"),
            "node": node.index,
            "op": node.source_op,
            "input_copies": copies,
            "graph_macs": graph_macs,
            "macs": macs,
            "outputs": n_out,
            "batch_norm_outputs": 0,
            "bias_outputs": 0,
            "weights": None,
            "batch_norm_units": 0,
            "biases": 0,
            "term_node": None,
        }
        fact["weights"] = self.weight_param(k, node, copies, bits, problems)

        if term is not None and carrier is None:
            problems.append(
                f"the metadata says {term.replace('_', ' ')}, but no per-unit addition, threshold or "
                "bias follows the product"
            )
        elif term is not None:
            self.count_term(k, node, term, carrier, before, macs, n_out, fact, notes)
        elif carrier is not None and carrier is not node:
            self.count_unexplained(k, carrier)
        elif carrier is node:
            notes.append(
                "its bias is no paper term (the metadata has no batch norm or output bias here: a sign "
                "threshold, or the converter's bias): free"
            )
        self.count_scales(k, term, carrier, before, after)
        if problems:
            rec.ops = None
            self.problems.extend(f"layer {k}: {p}" for p in problems)
            notes.append("NOT COUNTED: " + "; ".join(problems))
        act = node.attrs.get("fusedActivationFunction")
        if act in FUSED_ACTIVATIONS:
            notes.append(f"fused {FUSED_ACTIVATIONS[act]} (free)")
        rec.note = "; ".join(notes)
        return fact

    def count_macs(self, k, node, spec, extra, problems: list) -> tuple:
        """Match the product with metadata layer ``k`` and count its logical MACs on its record;
        ``(input copies, graph MACs, MACs, notes)``, problems appended to ``problems``."""
        rec = self.state.records[node.index]
        out = node.outputs[0]
        n_out = self.state.numel(out)
        layer_type = spec.get("type")
        if node.op not in (CONV_OPS if layer_type == "conv2d" else DENSE_OPS):
            problems.append(f"metadata layer {k} is {layer_type!r}, the graph has {node.source_op}")
        if out in self.state.used and not self.state.used[out].any():
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
        notes = [f"layer {k} ({what}): {format_count(macs)} MACs"]
        if copies > 1:
            notes.append(
                f"graph MACs {format_count(graph_macs)} = {copies} input copies (B = 8 split weights) "
                f"x {format_count(macs)} of the layer"
            )
        return copies, graph_macs, macs, notes

    def term_nodes(self, node, following) -> tuple:
        """The product's tail: ``(carrier, before, after)``: the node that carries a batch-norm /
        bias term (the last per-unit addition or comparison, else the product's own bias, else
        None) and the constant scalings before and after it. Additions before the carrier are
        counted as arithmetic (nothing in the metadata explains them)."""
        tail = self.tail(node, following)
        candidates = [n for n in tail if self.affine(n)]
        shifts = [n for n in candidates if KINDS[n.op] in ("add", "compare")]
        carrier = shifts[-1] if shifts else (node if has_bias(node) else None)
        for n in shifts[:-1]:  # nothing in the metadata explains a second addition
            r = self.state.records[n.index]
            r.category, r.ops = "arithmetic", self.state.numel(n.outputs[0])
            r.note = "per-row addition on the data path that no metadata term explains (counted, so it shows)"
        before = [n for n in candidates if KINDS[n.op] == "mul" and (not shifts or n.index < shifts[-1].index)]
        after = [n for n in candidates if KINDS[n.op] == "mul" and shifts and n.index > shifts[-1].index]
        return carrier, before, after

    def count_term(self, k, node, term, carrier, before, macs, n_out, fact: dict, notes: list) -> None:
        """Count layer ``k``'s batch-norm or output-bias ``term`` at ``carrier`` and record its parameters."""
        rec = self.state.records[node.index]
        n_term = n_out if carrier is node else self.state.numel(carrier.outputs[0])
        const = self.constant_operand(carrier)
        value = self.state.value(const)
        units = int(value.size) if value is not None else self.state.numel(const)
        per_unit = DNN_BATCH_NORM_BITS if term == "batch_norm" else DNN_BIAS_BITS
        label = "batch-norm" if term == "batch_norm" else "output-bias"
        fact["term_node"] = carrier.index
        fact["batch_norm_outputs" if term == "batch_norm" else "bias_outputs"] = n_term
        fact["batch_norm_units" if term == "batch_norm" else "biases"] = units
        if carrier is node:
            rec.ops = None if macs is None or n_term is None else macs + n_term
            notes.append(f"+ {format_count(n_term)} {label} outputs (in its bias)")
        else:
            r = self.state.records[carrier.index]
            r.category, r.ops = "arithmetic", n_term
            r.note = f"layer {k} {label}: 1 op per output" + (
                f" (with the scale #{', #'.join(str(n.index) for n in before)})"
                if before and term == "batch_norm"
                else ""
            )
        # the batch norm's other half (scale / direction) is stored with it, not a parameter apart
        storage_names = storage_of(self.state, const)
        if term == "batch_norm":
            for n in before:
                storage_names += storage_of(self.state, self.constant_operand(n))
        self.params.append(
            ParamTensor(
                const,
                self.state.shape(const),
                units,
                per_unit,
                None if units is None else units * per_unit,
                storage_entries(self.state, storage_names),
                f"layer {k} {label} ({per_unit} bits per unit)",
            )
        )

    def count_unexplained(self, k, carrier) -> None:
        """A per-unit node after a layer whose metadata has no term: a sign threshold (free) or an
        unexplained addition (counted, so it shows)."""
        r = self.state.records[carrier.index]
        if KINDS[carrier.op] == "compare":
            r.category, r.ops = "free", 0
            r.note = f"layer {k} sign activation threshold (no batch norm: part of the activation, free)"
        else:
            r.category, r.ops = "arithmetic", self.state.numel(carrier.outputs[0])
            r.note = "per-row addition on the data path that no metadata term explains (counted, so it shows)"

    def count_scales(self, k, term, carrier, before, after) -> None:
        """Constant scalings: a batch norm's scale / direction (0 ops, with its shift), else rescales."""
        for n in before + after:
            r = self.state.records[n.index]
            if term == "batch_norm" and n in before:
                r.category, r.ops = "arithmetic", 0
                r.note = f"layer {k} batch-norm scale / direction: with #{carrier.index} 1 op per output"
            else:
                r.category, r.ops = "rescale", self.state.numel(n.outputs[0])
                r.note = f"layer {k}: scales by a constant (a rescale, not a paper op)"

    def weight_param(self, k, node, copies, bits, problems) -> int | None:
        """Record layer ``k``'s weights (``B`` bits each); return their number (None: unknown shape).

        The ``c`` int8 parts of a B = 8 TFLite layer (``copies``) are one weight.
        """
        weight = node.inputs[1]
        value = self.state.value(weight)
        w_elements = value.size if value is not None else self.state.numel(weight)
        if w_elements is not None:
            if w_elements % copies:
                problems.append(f"{w_elements} weights do not split into {copies} input copies")
            w_elements //= copies
        w_bits = int(bits) if bits else np.dtype(self.state.tensors[weight].dtype).itemsize * 8
        self.params.append(
            ParamTensor(
                weight,
                self.state.shape(weight),
                w_elements,
                w_bits,
                None if w_elements is None else w_elements * w_bits,
                storage_entries(self.state, storage_of(self.state, weight)),
                f"layer {k} weights ({w_bits} bits each from the metadata)"
                + (f"; {copies} int8 parts per weight" if copies > 1 else ""),
            )
        )
        return w_elements

    def breakdown(self) -> dict:
        """Per-layer facts and their totals (``GraphCount.breakdown``)."""
        facts = self.facts

        def total(key):
            values = [f[key] for f in facts]
            return None if any(v is None for v in values) else int(sum(values))

        return {
            "layers": facts,
            "macs": total("macs"),
            "graph_macs": total("graph_macs"),
            "batch_norm_outputs": total("batch_norm_outputs"),
            "bias_outputs": total("bias_outputs"),
            "weights": total("weights"),
            "batch_norm_units": total("batch_norm_units"),
            "biases": total("biases"),
            "weight_bits": (self.state.graph.metadata or {}).get("weight_bits"),
            "problems": list(self.problems),
        }
