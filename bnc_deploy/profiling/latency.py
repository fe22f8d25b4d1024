"""Latency, throughput and accuracy of a model file in each runtime, and the machine it ran on.

Every adapter is timed through its public two-step interface only (``RuntimeAdapter.prepare`` /
``invoke``, see ``bnc_deploy.runtimes.base``): this module never touches a runtime's session or
interpreter and never branches on the runtime's name, so a newly registered adapter is timed the
same way as the built-in ones.

What is timed (``mode="session"``, the default): ``adapter.invoke(prepared)``, the bare runtime
call on input already validated, converted to the file's dtype and allocated for by
``adapter.prepare`` outside the timed region - ``InferenceSession.run`` (onnxruntime),
``set_tensor + invoke + get_tensor`` (LiteRT), the reference predictor's ``log_joint + argmax``
(numpy; a DNN's reference predictor gives its logits there). So the number is the runtime's.
``mode="adapter"`` times ``adapter.run(x)`` instead (validation, conversion and output checks
included), which is what an application calling the adapter sees.

Protocol: ``warmup`` untimed calls, then ``repeats`` blocks of ``runs`` batch-1 calls, each on the
next test row (cycling), timed one by one with ``perf_counter_ns``; p50/p99/mean are over all
``repeats * runs`` calls, and the per-block medians show the spread. Throughput: the whole batch
(every row given) in one call - in session mode, for a file with a static batch
(``adapter.static_batch``, e.g. TFLite ``onehot-fc`` batch 1), one call per full chunk of that
size - after one warm-up pass, the median of ``throughput_repeats`` passes.

Accuracy always goes through the adapter (validated input), exactly as a user would run it.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path

import numpy as np

from bnc_deploy.errors import ConfigError

#: Runtime -> thread settings profiled (None = the runtime's default), per the profiling issue; any
#: other runtime: 1 thread. Which runtime reads a file: bnc_deploy.runtimes.base.default_runtime.
THREAD_CONFIGS = {"numpy": (None,), "onnxruntime": (1, None), "litert": (1,)}
MODES = ("session", "adapter")
#: Distributions whose versions are recorded.
VERSIONED = ("bnc-deploy", "numpy", "onnx", "onnxruntime", "ai-edge-litert", "tensorflow", "tensorflow-cpu", "torch")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else ``platform.processor()``, else the machine."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def environment() -> dict:
    """Where the numbers were measured: CPU, core counts, OS, Python and library versions."""
    versions = {}
    for dist in VERSIONED:
        try:
            versions[dist] = importlib_metadata.version(dist)
        except importlib_metadata.PackageNotFoundError:
            continue
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        usable = os.cpu_count()
    return {
        "cpu": cpu_model(),
        "processor": platform.processor(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "versions": versions,
    }


@dataclass
class Timing:
    """Latency (microseconds, batch 1) and throughput (rows per second) of one runtime setting."""

    runtime: str
    threads: int | None
    mode: str
    warmup: int
    runs: int
    repeats: int
    p50_us: float
    p99_us: float
    mean_us: float
    min_us: float
    block_p50_us: list = field(default_factory=list)
    throughput_rows_per_s: float | None = None
    throughput_rows: int = 0
    throughput_batch: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _timed_call(adapter, mode: str):
    """``(prepare, call)`` for ``mode``: ``prepare`` runs outside the timed region on checked rows,
    ``call`` is what is timed. Only the adapter's public interface is used."""
    if mode == "session":
        return adapter.prepare, adapter.invoke
    if mode == "adapter":
        # run() validates and converts on every call: that cost is what this mode measures.
        return np.ascontiguousarray, adapter.run
    raise ConfigError(f"unknown latency mode {mode!r}; choose one of {', '.join(MODES)}")


def measure_latency(
    adapter,
    x: np.ndarray,
    *,
    runs: int = 200,
    warmup: int = 20,
    repeats: int = 3,
    throughput_repeats: int = 5,
    mode: str = "session",
) -> Timing:
    """Time ``adapter`` on rows of ``x`` (validated codes or raw values, shape (n, D)).

    Parameters
    ----------
    adapter : RuntimeAdapter
        From ``load_runtime(path, runtime, threads=...)``; any registered adapter.
    x : ndarray (n, D)
        Input rows (a test split); batch-1 calls cycle through them.
    runs, warmup, repeats : int
        Batch-1 protocol (see the module docstring); ``runs >= 1``.
    throughput_repeats : int
        Full-batch passes timed (0: skip throughput).
    mode : ``"session"`` or ``"adapter"``
    """
    if runs < 1 or repeats < 1 or warmup < 0:
        raise ConfigError(f"need runs >= 1, repeats >= 1 and warmup >= 0 (got {runs}, {repeats}, {warmup})")
    prepare, call = _timed_call(adapter, mode)
    x = adapter.check(x)  # invalid input would make the bare runtime call meaningless
    if x.shape[0] == 0:
        raise ValueError("no rows to time")
    # Prepared before timing; a runtime that allocates per batch size is left allocated for 1 row.
    rows = [prepare(x[i : i + 1]) for i in range(min(len(x), runs))]
    for k in range(warmup):
        call(rows[k % len(rows)])
    samples = np.empty((repeats, runs), dtype=np.float64)
    clock = time.perf_counter_ns
    for r in range(repeats):
        for k in range(runs):
            row = rows[(r * runs + k) % len(rows)]
            start = clock()
            call(row)
            samples[r, k] = (clock() - start) / 1e3
    flat = samples.reshape(-1)
    timing = Timing(
        runtime=adapter.name,
        threads=adapter.threads,
        mode=mode,
        warmup=warmup,
        runs=runs,
        repeats=repeats,
        p50_us=float(np.percentile(flat, 50)),
        p99_us=float(np.percentile(flat, 99)),
        mean_us=float(flat.mean()),
        min_us=float(flat.min()),
        block_p50_us=[float(np.median(b)) for b in samples],
    )
    if throughput_repeats > 0:
        static = adapter.static_batch if mode == "session" else None
        timing.throughput_rows_per_s, timing.throughput_batch = _throughput(
            prepare, call, x, static, throughput_repeats
        )
        timing.throughput_rows = int(len(x))
    return timing


def _throughput(prepare, call, x: np.ndarray, static: int | None, repeats: int) -> tuple[float, str]:
    """Rows per second over the whole of ``x`` (median of ``repeats`` timed passes).

    ``static``: the file's fixed batch size in session mode - one call per full chunk of that
    size, as a deployed caller of such a file would make them (a partial last chunk is left out).
    """
    if static:
        batches = [prepare(x[i : i + static]) for i in range(0, len(x) - len(x) % static, static)]
        n, how = len(batches) * static, f"static batch {static}: {len(batches)} calls"
    else:
        batches = [prepare(x)]
        n, how = len(x), f"one call of {len(x)} rows"

    def one_pass():
        for batch in batches:
            call(batch)

    one_pass()  # warm-up at this batch size
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        one_pass()
        seconds.append(time.perf_counter() - start)
    return float(n / max(np.median(seconds), 1e-12)), how


def measure_accuracy(adapter, x: np.ndarray, y: np.ndarray) -> dict:
    """Test error of ``adapter`` on ``(x, y)``, through the adapter (validated input)."""
    y = np.asarray(y).reshape(-1)
    if len(y) != len(x):
        raise ValueError(f"{len(x)} rows but {len(y)} labels")
    predicted = adapter.predict(x)
    errors = int(np.count_nonzero(predicted != y))
    return {"n_rows": int(len(y)), "errors": errors, "test_error": errors / len(y) if len(y) else None}
