"""Count one graph: run the passes in order and assemble the :class:`~.results.GraphCount`.

Order (each pass reads what the earlier ones wrote into the :class:`~.state.CountState`):

1. roles of the graph inputs (bnc-deploy metadata says whether they are codes or raw values);
2. forward, node by node in execution order: category, roles, intervals, one-hot structure
   (:mod:`.rules`; :mod:`.dnn_rules` for ``model_kind = "dnn"``);
3. backward: which columns reach the outputs as data (:mod:`.data_use`), then per node the
   guard work that this reveals;
4. parameters: BN graphs trace the tables back to their decoded sources (:mod:`.parameters`);
   DNN graphs match the weight products with the metadata's layers (:mod:`.dnn_layers`).
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.profiling.graph_count.data_use import apply_data_use, backward
from bnc_deploy.profiling.graph_count.dnn_layers import count_layers
from bnc_deploy.profiling.graph_count.dnn_rules import DnnOpRules
from bnc_deploy.profiling.graph_count.intervals import unbounded
from bnc_deploy.profiling.graph_count.ir import Graph
from bnc_deploy.profiling.graph_count.parameters import find_params
from bnc_deploy.profiling.graph_count.readers import load_graph
from bnc_deploy.profiling.graph_count.results import GraphCount
from bnc_deploy.profiling.graph_count.rules import OpRules
from bnc_deploy.profiling.graph_count.state import CountState


def count_graph(source) -> GraphCount:
    """Count a file (``.onnx``/``.tflite``), bytes, ModelProto or :class:`Graph`.

    Files whose metadata says ``model_kind = "dnn"`` get the DNN rules (:mod:`.dnn_layers`).
    """
    graph = source if isinstance(source, Graph) else load_graph(source)
    dnn = (graph.metadata or {}).get("model_kind") == "dnn"
    state = CountState(graph)
    rules = DnnOpRules(state) if dnn else OpRules(state)
    _seed_input_roles(state)
    for node in graph.nodes:
        rules.forward(node)
    state.used = backward(state)
    for node in graph.nodes:
        apply_data_use(state, node)
    if dnn:
        params, breakdown = count_layers(state, rules.products)
    else:
        params, breakdown = find_params(state), None
    nodes = [state.records[n.index] for n in graph.nodes]
    return GraphCount(graph.path, graph.format, nodes, params, graph.metadata, breakdown)


def _seed_input_roles(state: CountState) -> None:
    """Graph inputs are indices (codes, interval unknown) or raw values."""
    meta = state.graph.metadata or {}
    for name in state.graph.inputs:
        t = state.tensors[name]
        try:
            is_int = np.issubdtype(np.dtype(t.dtype), np.integer)
        except TypeError:
            is_int = False
        # bnc-deploy files say what their input is; other graphs: integers are codes
        codes = meta["input"] == "codes" if "input" in meta else is_int
        state.role[name] = "index" if codes else "value"
        if state.role[name] == "index" and t.row_shape is not None:
            state.interval[name] = unbounded(t.row_shape)
