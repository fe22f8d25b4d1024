"""Latency, throughput and accuracy of a model file in each runtime, and the machine it ran on.

What is timed (``mode="session"``, the default): the bare runtime call on input already converted
to the file's dtype - ``InferenceSession.run`` (onnxruntime), ``set_tensor + invoke + get_tensor``
(LiteRT), ``ReferencePredictor.log_joint + argmax`` (numpy; a DNN's reference predictor gives its
logits there). The outputs are the ones the file's metadata names (BN: ``log_joint``, DNN: ``logits``;
and ``label``). The adapters' input validation and dtype conversion are excluded, so the number is
the runtime's. ``mode="adapter"`` times
``adapter.run(x)`` instead (validation included), which is what an application calling the
adapter sees.

Protocol: ``warmup`` untimed calls, then ``repeats`` blocks of ``runs`` batch-1 calls, each on the
next test row (cycling), timed one by one with ``perf_counter_ns``; p50/p99/mean are over all
``repeats * runs`` calls, and the per-block medians show the spread. Throughput: the whole batch
(every row given) in one call - row by row for a static batch-1 file (TFLite ``onehot-fc``) -
after one warm-up call, the median of ``throughput_repeats`` calls.

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

#: Runtime -> thread settings profiled (None = the runtime's default), per the profiling issue.
THREAD_CONFIGS = {"numpy": (None,), "onnxruntime": (1, None), "litert": (1,)}
#: File extension -> runtimes that read it.
RUNTIMES_FOR_SUFFIX = {".bnc": ("numpy",), ".onnx": ("onnxruntime",), ".tflite": ("litert",)}
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
    return {"cpu": cpu_model(), "processor": platform.processor(), "machine": platform.machine(),
            "cpu_count": os.cpu_count(), "usable_cpus": usable, "platform": platform.platform(),
            "python": sys.version.split()[0], "versions": versions}


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


class _Caller:
    """The bare runtime call of an adapter on prepared input (see the module docstring).

    Uses only the adapters' public handles (``session``, ``interpreter``, ``predictor``) and the
    file contract's tensor names, so it does not depend on adapter internals.
    """

    _ORT_DTYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32}

    def __init__(self, adapter, mode: str) -> None:
        from bnc_deploy.formats.metadata import INPUT_NAME
        from bnc_deploy.formats.metadata import contract_outputs

        if mode not in MODES:
            raise ValueError(f"unknown latency mode {mode!r}; choose one of {', '.join(MODES)}")
        self.adapter, self.mode, self.static_batch, self._rows = adapter, mode, None, None
        if adapter.name == "onnxruntime":
            inputs = {i.name: i for i in adapter.session.get_inputs()}
            self.dtype = self._ORT_DTYPES[inputs[INPUT_NAME].type]
        elif adapter.name == "litert":
            it = adapter.interpreter
            x = next(d for d in it.get_input_details() if d["name"] == INPUT_NAME)
            outputs = {d["name"]: d["index"] for d in it.get_output_details()}
            self.input_index, self.dtype = x["index"], np.dtype(x["dtype"])
            # BN exports: log_joint/label; DNN exports: logits/label (the metadata's ``outputs``)
            self.output_indices = [outputs[name] for name in contract_outputs(getattr(adapter, "metadata", None))]
            signature = x.get("shape_signature", x["shape"])
            self.static_batch = None if int(signature[0]) == -1 else int(x["shape"][0])
        else:
            self.dtype = None

    def prepare(self, x: np.ndarray) -> np.ndarray:
        """Convert once, outside the timed region (what a deployed caller would hold already)."""
        if self.mode == "adapter" or self.dtype is None:
            return np.ascontiguousarray(x)
        return np.ascontiguousarray(x.astype(self.dtype))

    def resize(self, n_rows: int) -> None:
        """LiteRT: (re)allocate for ``n_rows`` outside the timed region."""
        if self.mode != "session" or self.adapter.name != "litert" or self._rows == n_rows:
            return
        it = self.adapter.interpreter
        if self.static_batch is None:
            it.resize_tensor_input(self.input_index, [n_rows, self.adapter.n_features], strict=True)
        it.allocate_tensors()
        # The adapter tracks its own allocation; make it re-allocate on its next call.
        if hasattr(self.adapter, "_allocated_rows"):
            self.adapter._allocated_rows = None
        self._rows = n_rows

    def __call__(self, x: np.ndarray):
        a = self.adapter
        if self.mode == "adapter":
            return a.run(x)
        if a.name == "onnxruntime":
            return a.session.run(None, {"x": x})
        if a.name == "litert":
            it = a.interpreter
            it.set_tensor(self.input_index, x)
            it.invoke()
            return [it.get_tensor(i) for i in self.output_indices]
        scores = a.predictor.log_joint(x)      # DNNReferencePredictor: log_joint is its logits
        return scores, np.argmax(scores, axis=1)


def measure_latency(adapter, x: np.ndarray, *, runs: int = 200, warmup: int = 20, repeats: int = 3,
                    throughput_repeats: int = 5, mode: str = "session") -> Timing:
    """Time ``adapter`` on rows of ``x`` (validated codes or raw values, shape (n, D)).

    Parameters
    ----------
    adapter : RuntimeAdapter
        From ``load_runtime(path, runtime, threads=...)``.
    x : ndarray (n, D)
        Input rows (a test split); batch-1 calls cycle through them.
    runs, warmup, repeats : int
        Batch-1 protocol (see the module docstring); ``runs >= 1``.
    throughput_repeats : int
        Full-batch calls timed (0: skip throughput).
    mode : ``"session"`` or ``"adapter"``
    """
    if runs < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"need runs >= 1, repeats >= 1 and warmup >= 0 (got {runs}, {repeats}, {warmup})")
    x = adapter.check(x)      # invalid input would make the bare runtime call meaningless
    if x.shape[0] == 0:
        raise ValueError("no rows to time")
    call = _Caller(adapter, mode)
    prepared = call.prepare(x)
    rows = [prepared[i:i + 1] for i in range(min(len(prepared), max(runs, 1)))]
    call.resize(1)
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
    timing = Timing(runtime=adapter.name, threads=adapter.threads, mode=mode, warmup=warmup, runs=runs,
                    repeats=repeats, p50_us=float(np.percentile(flat, 50)), p99_us=float(np.percentile(flat, 99)),
                    mean_us=float(flat.mean()), min_us=float(flat.min()),
                    block_p50_us=[float(np.median(b)) for b in samples])
    if throughput_repeats > 0:
        timing.throughput_rows_per_s, timing.throughput_batch = _throughput(call, prepared, throughput_repeats)
        timing.throughput_rows = int(len(prepared))
    return timing


def _throughput(call: _Caller, x: np.ndarray, repeats: int) -> tuple[float, str]:
    """Rows per second over the whole of ``x`` (median of ``repeats`` timed passes)."""
    static = call.static_batch if call.mode == "session" else None
    if static:
        chunks = [x[i:i + static] for i in range(0, len(x) - len(x) % static, static)]
        call.resize(static)

        def one_pass():
            for chunk in chunks:
                call(chunk)
        n, how = len(chunks) * static, f"static batch {static}: {len(chunks)} calls"
    else:
        call.resize(len(x))

        def one_pass():
            call(x)
        n, how = len(x), f"one call of {len(x)} rows"
    one_pass()                                   # warm-up at this batch size
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
