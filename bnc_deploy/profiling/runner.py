"""Profile model files on this host: every runtime setting that reads a file gives one row
(costs, test error, latency); JSON result files of earlier runs are taken as they are.

Each model file runs in its default runtime (:func:`bnc_deploy.runtimes.base.default_runtime`:
``.bnc`` -> numpy, ``.onnx``/``.ort`` -> onnxruntime, ``.tflite`` -> litert, ``.h`` -> native)
when that runtime is selected, with each thread setting of
:data:`bnc_deploy.profiling.latency.THREAD_CONFIGS` (default: 1 thread), and also as served by an
Open Inference Protocol server when a :class:`ServedModel` is given (runtime ``http``).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from bnc_deploy.profiling.facts import model_facts
from bnc_deploy.profiling.files import is_result_file
from bnc_deploy.profiling.latency import THREAD_CONFIGS
from bnc_deploy.profiling.measure import measure_runtime
from bnc_deploy.profiling.options import LoadOptions, ServedModel, TestSplit, TimingSettings
from bnc_deploy.profiling.pareto import load_records, mark_pareto
from bnc_deploy.profiling.rows import base_row, copy_row
from bnc_deploy.runtimes.base import default_runtime

#: Runtimes a run selects when the caller names none (``bnc-profile`` without ``--runtime``).
DEFAULT_RUNTIMES = ("numpy", "onnxruntime", "litert", "native")


class ProfileRun(NamedTuple):
    """The rows of a run (one per file, runtime and threads) and the per-node tables (``nodes``);
    :class:`bnc_deploy.profiling.result.Profile` types one row."""

    rows: list[dict]
    tables: list[str]


class ModelProfile(NamedTuple):
    """The rows of one model file (one per runtime and threads) and its per-node table ("" if none)."""

    rows: list[dict]
    table: str


def profile_files(
    files,
    runtimes: list[str],
    data: TestSplit | None,
    *,
    env: dict,
    timing: TimingSettings,
    nodes: bool = False,
    load_options: LoadOptions | None = None,
    http_options: ServedModel | None = None,
) -> ProfileRun:
    """Profile every model file and read every result file, in order; mark the Pareto-optimal rows."""
    rows, tables = [], []
    for f in files:
        if is_result_file(f):
            rows.extend(load_records([f]))
            continue
        model_rows, table = profile_model(
            f, runtimes, data, env=env, nodes=nodes, load_options=load_options, http_options=http_options, timing=timing
        )
        rows.extend(model_rows)
        if table:
            tables.append(table)
    mark_pareto(rows, by="dataset")
    return ProfileRun(rows, tables)


def runtimes_for(path, selected, served: ServedModel | None = None) -> list[str]:
    """The runtimes of ``selected`` that run ``path``: its default runtime, and ``http`` when served."""
    wanted = [r for r in (default_runtime(path),) if r in selected]
    if served is not None:  # a served model runs whatever the file's type
        wanted.append("http")
    return wanted


def profile_model(
    path,
    runtimes,
    data: TestSplit | None,
    *,
    env: dict,
    latency: bool = True,
    runs: int = 200,
    warmup: int = 20,
    repeats: int = 3,
    throughput_repeats: int = 5,
    mode: str = "session",
    nodes: bool = False,
    load_options: LoadOptions | None = None,
    http_options: ServedModel | None = None,
    timing: TimingSettings | None = None,
) -> ModelProfile:
    """Rows (one per runtime setting that reads the file) and the per-node table (if ``nodes``; else "").

    ``load_options``: the integrity check of exported files (default: check, no key).
    ``http_options``: the server serving ``path`` when ``runtimes`` has ``http`` (the file gives
    the costs, the server the accuracy and latency). ``timing``: the latency protocol; without it,
    ``latency``, ``runs``, ``warmup``, ``repeats``, ``throughput_repeats`` and ``mode`` give it.
    """
    if timing is None:
        timing = TimingSettings(
            latency=latency, runs=runs, warmup=warmup, repeats=repeats, throughput_repeats=throughput_repeats, mode=mode
        )
    data = None if data is None else TestSplit(*data)
    load_kwargs = {} if load_options is None else load_options.for_file(path)
    facts = model_facts(path, **load_kwargs)
    base = base_row(facts, env)
    if data is not None:
        base.update(dataset=data.name, fold=data.fold, n_test_rows=int(len(data.y)))
    elif facts.stored_test_error is not None:
        base.update(
            dataset=facts.stored_dataset,
            fold=facts.stored_fold,
            test_error=facts.stored_test_error,
            test_error_source="model metadata",
        )
    table = facts.graph.table() if nodes and facts.graph is not None else ""
    if nodes and facts.graph is not None:
        base["graph_nodes"] = [vars(n) for n in facts.graph.nodes]
    wanted = runtimes_for(path, runtimes, http_options)
    if not wanted:
        base["notes"].append(f"no selected runtime reads {Path(path).suffix} files")
        return ModelProfile([base], table)
    if facts.input != "codes":
        base["notes"].append(
            "raw-input file: costs only, not run (datasets give codes; profile the .bnc model "
            "or a codes export for accuracy and latency)"
        )
        return ModelProfile([base], table)
    rows = []
    for runtime in wanted:
        served = runtime == "http" and http_options is not None
        options = dict(load_kwargs, **http_options.options()) if served and http_options else load_kwargs
        for threads in THREAD_CONFIGS.get(runtime, (1,)):
            rows.append(measure_runtime(path, runtime, threads, facts, copy_row(base), data, timing, options))
    return ModelProfile(rows, table)
