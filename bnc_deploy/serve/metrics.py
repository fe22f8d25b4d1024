"""Prometheus metrics of the server (``GET /metrics``), on prometheus_client.

Per model (label ``model``): requests and failures by protocol (``rest``/``grpc``), request
duration (the whole request as the front end sees it), queue duration (waiting for the batcher
or the runtime's lock) and compute duration (the runtime call; one observation per batch, with
the batch's rows in ``bnc_serve_batch_rows``). Per server: REST connections closed by a limit,
by reason (``bnc_serve_connections_closed_total``). Both front ends call :func:`observe_request` once
per inference request; the core (:mod:`~bnc_deploy.serve.model`) observes queue and compute.

Per model version: ``bnc_serve_model_ready{model, version}`` is 1 while that version serves (the
version's number: ``1`` for a flat file), else 0 (:func:`set_version_ready`, called by the repository).

The metrics live in a registry of their own (:data:`REGISTRY`), created once per process, so
several apps in one process (tests) share them instead of registering twice.

Several processes (``bnc-serve --workers N``): prometheus_client's multiprocess mode. The parent
creates an empty directory and sets ``PROMETHEUS_MULTIPROC_DIR`` to it before the workers start
(:func:`multiprocess_dir`, which removes it when they have stopped); every worker then writes its
values there (prometheus_client picks the mode when it is imported, from that variable), and
``/metrics``, whichever worker answers it, reads every worker's values through
``MultiProcessCollector`` (:func:`exposition`): counters and histograms are summed; the ready
gauge is the minimum over the live workers (``livemin``: 1 only when every worker serves the
version). A worker that stops marks its gauge values dead (:func:`process_exit`). The same works
under any server that sets the variable (``uvicorn --factory ... --workers N``, gunicorn).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: The environment variable of prometheus_client's multiprocess mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

REGISTRY = CollectorRegistry(auto_describe=True)
#: Sub-millisecond buckets: a letter-sized model answers in tens of microseconds.
_BUCKETS = (2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

REQUESTS = Counter("bnc_serve_requests", "Inference requests", ["model", "protocol"], registry=REGISTRY)
FAILURES = Counter(
    "bnc_serve_request_failures", "Inference requests that failed", ["model", "protocol", "code"], registry=REGISTRY
)
REQUEST_SECONDS = Histogram(
    "bnc_serve_request_duration_seconds",
    "Inference request duration",
    ["model", "protocol"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
QUEUE_SECONDS = Histogram(
    "bnc_serve_queue_duration_seconds",
    "Time a request waited for the batcher/runtime",
    ["model"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
COMPUTE_SECONDS = Histogram(
    "bnc_serve_compute_duration_seconds",
    "Runtime call duration (per batch)",
    ["model"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
CONNECTIONS_CLOSED = Counter(
    "bnc_serve_connections_closed",
    "REST connections the server closed by a limit (header_timeout, body_timeout, evicted, busy)",
    ["reason"],
    registry=REGISTRY,
)
BATCH_ROWS = Histogram(
    "bnc_serve_batch_rows",
    "Rows per runtime call",
    ["model"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096),
    registry=REGISTRY,
)
MODEL_READY = Gauge(
    "bnc_serve_model_ready",
    "1 while the model version is serving (several workers: in every live worker)",
    ["model", "version"],
    multiprocess_mode="livemin",
    registry=REGISTRY,
)


#: Model names seen loaded (:func:`register_model`); requests for other names are counted under
#: :data:`UNKNOWN_MODEL`, so random names (a fuzzer, a typo loop) cannot grow the label set.
_KNOWN: set[str] = set()
UNKNOWN_MODEL = "_unknown"
#: (model, protocol) -> bound (requests, duration) children (``labels()`` costs microseconds per call).
_REQUEST_CHILDREN: dict = {}


def register_model(name: str) -> None:
    """Let ``name`` be a ``model`` label value (called when a model file loads)."""
    _KNOWN.add(name)


def observe_request(model: str, protocol: str, seconds: float, error_code: str | None = None) -> None:
    """Count one inference request of ``model`` over ``protocol`` (``"rest"``/``"grpc"``) that
    took ``seconds``; ``error_code`` (e.g. ``"400"``, ``"INVALID_ARGUMENT"``) marks a failure.
    Names that never loaded are counted as :data:`UNKNOWN_MODEL`."""
    if model not in _KNOWN:
        model = UNKNOWN_MODEL
    children = _REQUEST_CHILDREN.get((model, protocol))
    if children is None:
        children = _REQUEST_CHILDREN[(model, protocol)] = (
            REQUESTS.labels(model, protocol),
            REQUEST_SECONDS.labels(model, protocol),
        )
    children[0].inc()
    children[1].observe(seconds)
    if error_code is not None:
        FAILURES.labels(model, protocol, str(error_code)).inc()


class ModelMetrics:
    """The per-model children of the histograms, bound once (``labels()`` costs microseconds per call)."""

    def __init__(self, model: str) -> None:
        register_model(model)
        self.queue = QUEUE_SECONDS.labels(model)
        self.compute = COMPUTE_SECONDS.labels(model)
        self.rows = BATCH_ROWS.labels(model)

    def observe_run(self, queue_seconds: float, compute_seconds: float, rows: int) -> None:
        self.queue.observe(queue_seconds)
        self.compute.observe(compute_seconds)
        self.rows.observe(rows)


def observe_compute(model: str, seconds: float, rows: int) -> None:
    """One runtime call of ``model`` that took ``seconds`` for ``rows`` rows."""
    COMPUTE_SECONDS.labels(model).observe(seconds)
    BATCH_ROWS.labels(model).observe(rows)


def observe_queue(model: str, seconds: float) -> None:
    """Queue time of one request (the batcher calls this per request of a batch)."""
    QUEUE_SECONDS.labels(model).observe(seconds)


def connection_closed(reason: str) -> None:
    """Count one connection closed by a limit of :mod:`bnc_deploy.serve.connections`."""
    CONNECTIONS_CLOSED.labels(reason).inc()


def set_version_ready(model: str, version: str, ready: bool) -> None:
    """``bnc_serve_model_ready{model, version}``: 1 while that version serves, else 0."""
    MODEL_READY.labels(model, version).set(1 if ready else 0)


def multiprocess() -> bool:
    """Whether this process runs in prometheus_client's multiprocess mode (module docstring)."""
    return bool(os.environ.get(MULTIPROC_ENV))


def exposition() -> tuple[bytes, str]:
    """``(body, content_type)`` of the Prometheus text exposition: this process's metrics, or
    every worker's in multiprocess mode."""
    if multiprocess():
        from prometheus_client import multiprocess as mp

        registry = CollectorRegistry()  # a fresh one per scrape, as prometheus_client documents
        mp.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def process_exit() -> None:
    """In multiprocess mode, drop this process's live gauge values (a stopping worker calls it)."""
    if multiprocess():
        from prometheus_client import multiprocess as mp

        mp.mark_process_dead(os.getpid())


@contextlib.contextmanager
def multiprocess_dir():
    """For the parent of several workers: an empty temporary directory as ``PROMETHEUS_MULTIPROC_DIR``
    while the block runs (the workers it starts inherit it); removed afterwards, the variable restored."""
    path = tempfile.mkdtemp(prefix="bnc-serve-metrics-")
    before = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = path
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = before
        shutil.rmtree(path, ignore_errors=True)
