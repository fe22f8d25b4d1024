"""What the counting passes learn about one graph, shared between them.

Contract: one :class:`CountState` per count. The forward pass (:mod:`.rules`) fills ``role``,
``interval``, ``select``, ``records``, ``load_time`` and ``control_inputs`` node by node in
execution order (and grows ``const`` with load-time outputs); the backward pass
(:mod:`.data_use`) then sets ``used``; later passes read all of it and may adjust ``records``.
The tensor queries answer None for a tensor that is absent or whose shape/value is unknown.

Roles (``role``): ``index`` (integer codes and what is computed from them), ``value`` (raw
values; in DNN graphs: activations), ``mask``, ``select`` (a one-hot selector), ``score``
(looked-up table values and their sums), ``bins``, ``label``, ``penalty`` and, in DNN graphs,
``threshold`` (a sign activation's comparison).
"""

from __future__ import annotations

from bnc_deploy.profiling.graph_count.ir import Graph


class CountState:
    """The graph under count and the per-tensor / per-node facts the passes share."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.tensors = graph.tensors
        self.producer = {o: n for n in graph.nodes for o in n.outputs}
        self.const = {name for name, t in self.tensors.items() if t.value is not None}
        self.role: dict[str, str] = {}
        self.interval: dict[str, tuple] = {}  # index tensors: (lo, hi) row-shaped float arrays
        self.select: dict[str, dict] = {}  # selectors: owner/possible/hots (see selectors)
        self.records: dict = {}  # node index -> NodeCount
        self.load_time: set[int] = set()  # nodes whose inputs are all constants
        self.control_inputs: dict[int, set] = {}  # node index -> inputs read as conditions, not data
        self.used: dict = {}  # tensor -> per last-axis column: reaches outputs as data

    def shape(self, name):
        """Row shape of a tensor (batch dimension as 1), None if unknown."""
        t = self.tensors.get(name)
        return None if t is None else t.row_shape

    def numel(self, name):
        t = self.tensors.get(name)
        return None if t is None else t.numel

    def value(self, name):
        t = self.tensors.get(name)
        return None if t is None else t.value

    def is_const(self, name) -> bool:
        """Constants, load-time results, and the empty name of an absent optional input."""
        return name == "" or name in self.const

    def data_inputs(self, node) -> list:
        return [i for i in node.inputs if i and not self.is_const(i)]

    def set_role(self, node, role) -> None:
        for o in node.outputs:
            self.role[o] = role
