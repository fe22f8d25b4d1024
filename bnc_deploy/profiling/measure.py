"""One profiled row per (file, runtime, threads): the file opened in the runtime, its test error
on the test split and its latency (:mod:`bnc_deploy.profiling.latency`) written into the row."""

from __future__ import annotations

import numpy as np

from bnc_deploy.errors import InputError, RuntimeLoadError
from bnc_deploy.profiling.facts import ModelFacts
from bnc_deploy.profiling.latency import measure_accuracy, measure_latency
from bnc_deploy.profiling.options import TestSplit, TimingSettings
from bnc_deploy.runtimes.base import load_runtime

#: Seeded random rows timed when no --data is given.
RANDOM_ROWS = 1000


def measure_runtime(
    path,
    runtime: str,
    threads: int | None,
    facts: ModelFacts,
    row: dict,
    data: TestSplit | None,
    timing: TimingSettings,
    load_options: dict | None = None,
) -> dict:
    """Accuracy and latency of one (file, runtime, threads), written into ``row``; return it.

    ``load_options``: keyword arguments of :func:`bnc_deploy.runtimes.base.load_runtime`.
    """
    try:
        adapter = load_runtime(path, runtime, threads=threads, **(load_options or {}))
    except ImportError as exc:
        raise RuntimeLoadError(f"{path}: runtime {runtime!r} is not available ({exc})") from None
    row.update(runtime=runtime, threads=threads if runtime != "numpy" else None)
    if data is not None:
        try:
            acc = measure_accuracy(adapter, data.x, data.y)
        except InputError as exc:  # the adapter's input check: codes outside the model's features
            raise InputError(f"{path}: --data does not fit this model: {exc}") from None
        row.update(test_error=acc["test_error"], test_error_source=f"{runtime} on the test split")
        timed, how = data.x, "test split rows"
    else:
        timed, how = random_codes(facts), f"{RANDOM_ROWS} seeded random valid codes (no --data)"
    if timing.latency:
        t = measure_latency(
            adapter,
            timed,
            runs=timing.runs,
            warmup=timing.warmup,
            repeats=timing.repeats,
            throughput_repeats=timing.throughput_repeats,
            mode=timing.mode,
        )
        row.update(
            latency_mode=timing.mode,
            latency_input=how,
            latency_us_p50_batch1=round(t.p50_us, 2),
            latency_us_p99_batch1=round(t.p99_us, 2),
            latency_us_mean_batch1=round(t.mean_us, 2),
            latency_runs=t.runs * t.repeats,
            throughput_rows_per_s=None if t.throughput_rows_per_s is None else round(t.throughput_rows_per_s),
            throughput_batch=t.throughput_batch,
        )
    return row


def random_codes(facts: ModelFacts, n: int = RANDOM_ROWS, seed: int = 0) -> np.ndarray:
    """Rows to time without --data: a ``.bnc`` model's check rows, else ``n`` seeded random valid codes."""
    artifact = facts.artifact
    if artifact is not None and artifact.check_x is not None and len(artifact.check_x):
        return np.asarray(artifact.check_x, dtype=np.int64)
    cards = np.asarray(facts.cardinalities, dtype=np.int64)
    return (np.random.default_rng(seed).random((n, cards.size)) * cards).astype(np.int64)
