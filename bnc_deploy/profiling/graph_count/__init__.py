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
             condition of a select or a comparison (see :mod:`.data_use`)
argmax       the final ``ArgMax``/``ArgMin`` (``C - 1`` comparisons per row), reported apart
rescale      multiplying scores by a constant (integer code sums -> log-probabilities)
load-time    nodes whose inputs are all constants: runtimes fold them once when the session
             is created (dequantizing tables, unpacking bit-planes, folding the prior)
free         data movement: casts, reshapes, slices, concat, (de)quantize, gathers (counted
             as *lookups*, not operations), activations and pooling (the DNN convention)
unknown      an op type without a rule: listed, its count is None, never silently 0
============ ================================================================================

The paper's operations from the graph
-------------------------------------
``paper_ops = arithmetic (effective additions for one-hot products) + folded``, where
``folded`` counts constant additions the exporter folded into a lookup table at load time
(:mod:`.parameters`). For every BNC export this equals the analytic ``D * C``: ONNX gather
``(D - 1) * C`` (``ReduceSum`` over ``D`` rows) + ``C`` folded; ONNX gather-grouped
``(G - 1) * C`` (``Sum`` or ``ReduceSum`` over ``G`` group rows) + ``(D - G) * C`` folded
(each merged group table is a broadcast sum of its members' rows) + ``C`` folded; TFLite gather ``(D - 1) * C``
(``SUM``) + ``C`` (``ADD`` prior); ONNX onehot-fc ``(D - 1) * C`` effective (``MatMul``; the
counting column's ``D - 1`` is guard) + ``C`` folded; TFLite onehot-fc ``sum_g (d_g - 1) * C``
(one ``FULLY_CONNECTED`` per group of ``d_g`` features) + ``(G - 1) * C`` (``SUM`` over the
``G`` groups) + ``C`` (``ADD`` prior; ``--onehot edgetpu``: group 0's FC bias, one addition per
output); ORT lookup graph (the ``.ort`` of a quantized NB or TAN) ``(D - 1) * C`` (``ReduceSum`` of the
``GatherBlockQuantized`` rows) + ``C`` folded at export (the prior in feature 0's rows, declared by
the metadata's ``prior_folded_into_feature``; the NaN-scale guard row is not a parameter). DNN
graphs (``model_kind = "dnn"`` in the metadata) count
MACs + batch-norm outputs + bias outputs per layer instead (:mod:`.dnn_layers`).

Modules, in the order data flows through them
---------------------------------------------
* :mod:`.ir` - the format-neutral graph; :mod:`.readers` - ``.onnx``/``.tflite`` -> graph;
* :mod:`.op_counts` - op -> kind table and per-row element counts;
* :mod:`.state` - what the passes share; :mod:`.movement` - data movement replayed on arrays;
* :mod:`.intervals` - index ranges; :mod:`.selectors` - one-hot structure;
* :mod:`.rules` / :mod:`.dnn_rules` - the forward pass (categories and roles);
* :mod:`.data_use` - the backward pass (guard work);
* :mod:`.parameters` (BN) / :mod:`.dnn_layers` (DNN) - parameter bits and the paper's terms;
* :mod:`.results` - :class:`GraphCount` and its totals, table and JSON form;
* :mod:`.count` - :func:`count_graph`, which runs the passes in order.

The package never imports torch, the exporters or the command line; ONNX is imported only to
read an ONNX file, TFLite files are read with :mod:`bnc_deploy.formats.tflite`.
"""

from bnc_deploy.profiling.graph_count.count import count_graph
from bnc_deploy.profiling.graph_count.ir import GNode, Graph, GTensor
from bnc_deploy.profiling.graph_count.op_counts import KINDS
from bnc_deploy.profiling.graph_count.readers import load_graph
from bnc_deploy.profiling.graph_count.results import CATEGORIES, GraphCount, NodeCount, ParamTensor

__all__ = [
    "CATEGORIES",
    "KINDS",
    "GNode",
    "GTensor",
    "Graph",
    "GraphCount",
    "NodeCount",
    "ParamTensor",
    "count_graph",
    "load_graph",
]
