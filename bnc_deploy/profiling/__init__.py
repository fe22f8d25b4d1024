"""Profiling: analytic costs, graph op counts, latency and accuracy, Pareto reports (``bnc-profile``).

One job per module:

* :mod:`~bnc_deploy.costs` - the paper's cost conventions (size in bits, operations),
  a registry of cost functions by artifact kind (``"bnc"``; the DNN formula is ready as a pure
  function over a layer list);
* :mod:`~bnc_deploy.profiling.graph_count` - per-node operations and parameter bits of exported
  ONNX/TFLite graphs, by generic per-op rules; unknown ops are reported, never counted as 0
  (a package: graph reader, op table, forward rules, interval / one-hot / data-use passes, parameters);
* :mod:`~bnc_deploy.profiling.latency` - batch-1 p50/p99 latency, throughput, accuracy per runtime,
  and the machine and library versions;
* :mod:`~bnc_deploy.profiling.pareto` - the non-dominated set in (size, ops, error) and the plots;
* :mod:`~bnc_deploy.profiling.files` - which files are model files and which JSON result files;
* :mod:`~bnc_deploy.profiling.facts` - what one model file is and costs (:class:`ModelFacts`),
  analytic and counted, before anything runs it;
* :mod:`~bnc_deploy.profiling.options` - the typed inputs of a run: :class:`TestSplit`,
  :class:`LoadOptions`, :class:`ServedModel`, :class:`TimingSettings`;
* :mod:`~bnc_deploy.profiling.rows` - the ``--json`` row: its keys (a contract) and the part every
  row of a file shares;
* :mod:`~bnc_deploy.profiling.result` - the row typed (:class:`Profile`, what :func:`bnc_deploy.api.profile`
  returns; its ``to_dict()`` is the ``--json`` row);
* :mod:`~bnc_deploy.profiling.measure` - one (file, runtime, threads) row: test error and latency;
* :mod:`~bnc_deploy.profiling.runner` - every file in every runtime that reads it (:func:`profile_files`);
* :mod:`~bnc_deploy.profiling.target_rows` - the rows of files run on an emulated target (``--target``);
* :mod:`~bnc_deploy.profiling.table` - the text table.

The command line is ``bnc_deploy.cli.profile`` (``bnc-profile``): arguments, then these modules.
"""

from bnc_deploy.costs import CostReport, analytic_costs, dnn_costs, register_cost_model
from bnc_deploy.profiling.graph_count import GraphCount, count_graph
from bnc_deploy.profiling.latency import environment, measure_accuracy, measure_latency
from bnc_deploy.profiling.pareto import mark_pareto, pareto_front, plot_all, plot_overview

__all__ = [
    "CostReport",
    "GraphCount",
    "analytic_costs",
    "count_graph",
    "dnn_costs",
    "environment",
    "mark_pareto",
    "measure_accuracy",
    "measure_latency",
    "pareto_front",
    "plot_all",
    "plot_overview",
    "register_cost_model",
]
