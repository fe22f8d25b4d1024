"""DNN roles for the forward pass (graphs whose metadata says ``model_kind = "dnn"``).

Contract: :class:`DnnOpRules` is :class:`~.rules.OpRules` with DNN roles in four places:

* encoded inputs (lookups of the input-code table, one-hots) and the outputs of products are
  activations (``value``), not scores;
* a product with constant weights is a *weight product* whatever its input is (one-hot inputs
  too: full MACs, no effective-addition shortcut); they are collected in ``products`` in
  execution order for :mod:`.dnn_layers`;
* a comparison of a layer's values with a per-unit constant that feeds ``Where(cond, const,
  const)`` is a sign activation: it carries data (it is not a guard condition);
* an ``Add``/``Mul`` of the logits with the invalid-row penalty or mask is guard work.
"""

from __future__ import annotations

from bnc_deploy.profiling.graph_count.op_counts import product_macs
from bnc_deploy.profiling.graph_count.rules import OpRules
from bnc_deploy.profiling.graph_count.state import CountState


class DnnOpRules(OpRules):
    """The BN rules with the DNN roles above; ``products`` lists the weight products."""

    def __init__(self, state: CountState) -> None:
        super().__init__(state)
        self.products: list = []

    def on_gather(self, node, rec, roles):
        super().on_gather(node, rec, roles)
        if self.state.role.get(node.outputs[0]) == "score":
            self.state.set_role(node, "value")
            rec.note = f"encoding lookup: {rec.lookups} values per row from a constant table (no arithmetic)"

    def on_matmul(self, node, rec, roles):
        weight = node.inputs[1] if len(node.inputs) > 1 else ""
        if weight and self.state.is_const(weight) and not self.state.is_const(node.inputs[0]):
            rec.category, rec.macs = "arithmetic", product_macs(self.state, node)
            rec.ops = rec.macs
            rec.note = "weight layer"
            self.state.set_role(node, "value")
            self.products.append(node)
            return
        super().on_matmul(node, rec, roles)

    on_conv = on_matmul

    def on_compare(self, node, rec, roles):
        data = self.state.data_inputs(node)
        consts = [i for i in node.inputs if i and self.state.is_const(i)]
        if (
            len(data) == 1
            and consts
            and self.state.role.get(data[0]) == "value"
            and self.state.numel(node.outputs[0]) == self.state.numel(data[0])
        ):
            rec.category, rec.ops, rec.note = "free", 0, "threshold of a sign activation"
            self.state.set_role(node, "threshold")
            return
        super().on_compare(node, rec, roles)

    def on_where(self, node, rec, roles):
        cond, branches = node.inputs[0], [i for i in node.inputs[1:3]]
        constant_branches = len(branches) == 2 and all(self.state.is_const(b) for b in branches)
        if self.state.role.get(cond) == "threshold" and constant_branches:
            rec.category, rec.ops, rec.note = "free", 0, "sign activation: +-1 by the threshold (free)"
            self.state.set_role(node, "value")
            return
        super().on_where(node, rec, roles)

    def _penalty(self, node, rec, roles) -> bool:
        """Logits combined with the invalid-row penalty or mask: guard work (True if so)."""
        if "value" in roles and ("penalty" in roles or "mask" in roles):
            rec.category, rec.ops = "guard", self.state.numel(node.outputs[0])
            rec.note = "applies the invalid-row penalty / mask to the logits (NaN for invalid rows)"
            self.state.set_role(node, "value")
            return True
        return False

    def on_add(self, node, rec, roles):
        if not self._penalty(node, rec, roles):
            super().on_add(node, rec, roles)

    def on_mul(self, node, rec, roles):
        if not self._penalty(node, rec, roles):
            super().on_mul(node, rec, roles)
