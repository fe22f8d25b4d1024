"""Triton's statistics and model configuration extensions: what each served model has done, and
how it is declared.

Statistics (``GET /v2/models/stats``, ``/v2/models/{m}[/versions/{v}]/stats``; over gRPC the
``ModelStatistics`` RPC, this JSON as Triton's messages: :mod:`~bnc_deploy.serve.grpc_extensions`),
in Triton's JSON::

    {"model_stats": [{"name", "version", "last_inference", "inference_count", "execution_count",
                      "inference_stats": {"success", "fail", "queue", "compute_input",
                                          "compute_infer", "compute_output",
                                          "cache_hit", "cache_miss"}: {"count", "ns"}}]}

* ``success`` / ``fail``: inference requests answered / failed once their model was found (a bad
  tensor, an out-of-range code, a client gone; unknown models count nowhere), with their time from
  the model lookup to the answer handed to the transport;
* ``queue``: waiting in the dynamic batcher, or for the lock of a runtime that is not thread-safe
  (0 for the others when not batching);
* ``compute_input``: decoding the request (JSON, binary tensors, protobuf) and validating it (the
  range check of the codes runs here when batching, and inside the runtime call otherwise, where
  the adapter does it on the way);
* ``compute_infer``: the runtime call (a batched request: its whole batch's call, as Triton counts);
* ``compute_output``: the outputs' conversion (classification) and the answer's encoding;
* ``cache_hit`` / ``cache_miss``: always 0 (there is no response cache; Triton's clients expect them);
* ``inference_count``: rows of successful requests; ``execution_count``: runtime calls that served
  them (a batch of several requests is one); ``last_inference``: milliseconds since the epoch of
  the last success (0: none yet).

``queue`` and the ``compute_*`` count successful requests only, as Triton's do. Counters belong to
a model version: a reload starts the new version at zero, and the old version's leave with it, as
Triton's unloaded versions do. They are per process (``--workers N``: each process its own).

Cost, per request: one :class:`InferRecord` (slots), a few ``perf_counter_ns`` reads, and one
acquisition of the model's counter lock at the end. The record also carries the request's trace
span (:mod:`~bnc_deploy.serve.tracing`), so front ends wire both with :func:`begin` and :func:`end`.

Model configuration (``GET /v2/models/{m}[/versions/{v}]/config``; gRPC ``ModelConfig``): Triton's
model config JSON, from the model's metadata: ``name``, ``platform`` (the V2 metadata's),
``backend`` (the runtime), ``max_batch_size`` 0 with ``dims`` that include the row dimension as -1
(every model takes any number of rows; Triton's implicit batch dimension would hide the ``label``
output's shape ``[-1]``), ``input``/``output`` with Triton's ``data_type`` names (``TYPE_INT64``,
``TYPE_FP32``, ...), and ``parameters`` (``{"string_value"}`` each): the runtime, the format, the
batcher's ``max_batch`` and ``max_queue_delay_ms``. A key added here must be added to
``proto/model_config.proto`` too (the gRPC answer refuses keys it cannot carry).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from bnc_deploy.serve import tracing

T = TypeVar("T")
_now = time.perf_counter_ns
#: The stages of ``inference_stats``, in Triton's order.
STAGES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


class InferRecord:
    """One request's stage times (ns), rows, runtime calls and trace span, filled in by the front
    end (decoding, encoding) and the core (validation, queue, runtime call)."""

    __slots__ = ("stats", "start", "input_ns", "queue_ns", "infer_ns", "output_ns", "rows", "executions", "span")

    def __init__(self, stats: ModelStatistics) -> None:
        self.stats = stats
        self.start = _now()
        self.input_ns = self.queue_ns = self.infer_ns = self.output_ns = 0
        self.rows = self.executions = 0
        self.span: Any = None

    def timed_input(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, its time counted as ``compute_input``."""
        t = _now()
        out = fn(*args)
        self.input_ns += _now() - t
        return out

    async def timed_input_async(self, awaitable: Awaitable[T]) -> T:
        t = _now()
        out = await awaitable
        self.input_ns += _now() - t
        return out

    def timed_output(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, its time counted as ``compute_output``."""
        t = _now()
        out = fn(*args)
        self.output_ns += _now() - t
        return out

    def ran(self, queued_at: int, began: int, ended: int, batch_rows: int, executions: int = 1) -> None:
        """The runtime call that served this request: queued at ``queued_at``, ran from ``began`` to
        ``ended`` (``perf_counter_ns`` stamps) on ``batch_rows`` rows; ``executions``: 1 for the
        one request of a batch that counts its call, else 0."""
        self.queue_ns += began - queued_at
        self.infer_ns += ended - began
        self.executions += executions
        if self.span is not None:
            tracing.STATE.stage_spans(
                self.span, self.stats.name, self.stats.version, queued_at, began, ended, batch_rows
            )


class ModelStatistics:
    """The counters of one model version (see the module docstring)."""

    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version
        self._lock = threading.Lock()
        self.success_count = self.success_ns = self.fail_count = self.fail_ns = 0
        self.queue_ns = self.input_ns = self.infer_ns = self.output_ns = 0
        self.inference_count = self.execution_count = self.last_end = 0

    def finish(self, record: InferRecord, error_code: str | None, end: int) -> None:
        """Count the request of ``record``, ended at ``end``: a success, or a failure (``error_code``)."""
        took = end - record.start
        if error_code is not None:
            with self._lock:
                self.fail_count += 1
                self.fail_ns += took
            return
        with self._lock:
            self.success_count += 1
            self.success_ns += took
            self.queue_ns += record.queue_ns
            self.input_ns += record.input_ns
            self.infer_ns += record.infer_ns
            self.output_ns += record.output_ns
            self.inference_count += record.rows
            self.execution_count += record.executions
            self.last_end = end  # perf_counter_ns: the epoch's milliseconds only when asked (as_json)

    def as_json(self) -> dict[str, Any]:
        """Triton's ``model_stats`` entry of this version."""
        with self._lock:
            n = self.success_count
            pairs = (
                (n, self.success_ns),
                (self.fail_count, self.fail_ns),
                (n, self.queue_ns),
                (n, self.input_ns),
                (n, self.infer_ns),
                (n, self.output_ns),
                (0, 0),
                (0, 0),
            )
            last = (self.last_end + tracing.EPOCH_OFFSET_NS) // 1_000_000 if self.success_count else 0
            head = (last, self.inference_count, self.execution_count)
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": head[0],
            "inference_count": head[1],
            "execution_count": head[2],
            "inference_stats": {stage: {"count": c, "ns": ns} for stage, (c, ns) in zip(STAGES, pairs, strict=True)},
        }


def begin(model: Any, protocol: str, carrier: Any = None) -> InferRecord:
    """The record of one inference request of ``model`` (a ServedModel), started now; traced when
    the trace settings pick it, as a child of the context in ``carrier`` (REST headers, gRPC
    metadata or the call that returns it)."""
    record = InferRecord(model.statistics)
    if tracing.STATE.active:
        record.span = tracing.STATE.start_request(model.name, model.version, protocol, carrier, record.start)
    return record


def end(record: InferRecord | None, error_code: str | None = None) -> None:
    """Count ``record``'s request (None: it never reached a model) and end its span."""
    if record is None:
        return
    t = _now()
    record.stats.finish(record, error_code, t)
    if record.span is not None:
        tracing.STATE.end_request(record.span, error_code, t)


def server_extensions(base: Iterable[str]) -> list[str]:
    """The server metadata's ``extensions`` (REST and gRPC: both serve these): ``base``, statistics
    and model configuration, and ``trace`` where spans can be made (:func:`tracing.available`)."""
    return [*base, "statistics", "model_configuration", *(["trace"] if tracing.available() else [])]


def stats_json(models: Iterable[Any]) -> dict[str, Any]:
    """Triton's statistics answer for ``models`` (ServedModels), by name."""
    return {"model_stats": [m.statistics.as_json() for m in sorted(models, key=lambda m: m.name)]}


#: V2 datatype -> Triton's model config ``data_type``.
CONFIG_TYPES = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "BYTES": "TYPE_STRING",
}


def model_config(model: Any) -> dict[str, Any]:
    """Triton's model config JSON of ``model`` (a ServedModel; see the module docstring)."""
    meta = model.metadata()

    def tensors(kind: str) -> list[dict[str, Any]]:
        return [
            {"name": t["name"], "data_type": CONFIG_TYPES[t["datatype"]], "dims": [int(d) for d in t["shape"]]}
            for t in meta[kind]
        ]

    parameters = {
        "runtime": model.runtime,
        "format": str(model.metadata_raw.get("format")),
        "max_batch": str(model.max_batch),
        "max_queue_delay_ms": f"{model.max_queue_delay_ms:g}",
    }
    return {
        "name": model.name,
        "platform": meta["platform"],
        "backend": model.runtime,
        "max_batch_size": 0,
        "input": [{**t, "format": "FORMAT_NONE"} for t in tensors("inputs")],
        "output": tensors("outputs"),
        "parameters": {k: {"string_value": v} for k, v in parameters.items()},
    }


__all__ = [
    "CONFIG_TYPES",
    "STAGES",
    "InferRecord",
    "ModelStatistics",
    "begin",
    "end",
    "model_config",
    "server_extensions",
    "stats_json",
]
