"""The REST front end: the Open Inference Protocol (KServe V2) over HTTP, as an ASGI app (Starlette).

``create_app(repository, api_keys=None, max_request_bytes=...)`` returns the app; ``bnc-serve``
runs it in uvicorn, and any ASGI server or wrapper (several uvicorn workers via
:func:`app_from_env`, Ray Serve, a KServe custom predictor) can run it too.

Routes::

    GET  /v2/health/live                      200 (no auth: a liveness probe)
    GET  /v2/health/ready                     200 when every model is loaded and checked, else 503
                                              (503 too once shutdown began: ServingHealth)
    GET  /v2                                  server metadata (name, version, extensions)
    GET  /v2/models/{m}[/versions/{v}]        model metadata (ServedModel.metadata)
    GET  /v2/models/{m}[/versions/{v}]/ready  200, 503 (not ready), 404 (unknown)
    POST /v2/models/{m}[/versions/{v}]/infer  inference (JSON, or the binary tensor data extension)
    GET  /v2/models[/{m}[/versions/{v}]]/stats  Triton's statistics (serve.statistics)
    GET  /v2/models/{m}[/versions/{v}]/config Triton's model configuration (serve.statistics)
    GET|POST /v2[/models/{m}]/trace/setting   Triton's trace settings (serve.tracing)
    POST /v2/repository/index                 [{"name", "version", "state", "reason"}]
    POST /v2/repository/models/{m}/load       (re)load from the files: 200, or 400 with the error
                                              (parameters "version", "config": serve.versions)
    POST /v2/repository/models/{m}/unload     200 (parameter "version": that version only)
    GET  /metrics                             Prometheus text

Inference body: JSON ``{"id"?, "parameters"?, "inputs": [{"name", "datatype", "shape", "data" |
"parameters": {"binary_data_size": n}}], "outputs"?: [{"name", "parameters"?: {"binary_data":
bool, "classification": k}}]}``. With the binary extension the JSON is the first
``Inference-Header-Content-Length`` bytes of the body and the binary tensors follow in input
order. The Content-Type header is not required (tritonclient sends none). Outputs are binary when
the output asks (``binary_data``) or the request says ``"parameters": {"binary_data_output":
true}``; the response then carries ``Inference-Header-Content-Length``. ``Content-Encoding``
other than identity is refused (400).

Errors are ``{"error": message}`` with the status of :func:`bnc_deploy.serve.errors.status_of`
(400 bad request with the adapters' feature/value/row message, 404 unknown model/version, 413 over
``max_request_bytes`` - checked from Content-Length before the body is read, and while reading a
body without one -, over ``max_rows`` rows or too many inputs/outputs, 401 without a valid bearer
token when ``api_keys`` is set, 503 not ready), messages capped at a few KB. A client that goes
away before its answer is logged and counted as 499 (nginx's "client closed request"), not as an
error of the server.

The infer path is kept lean (the model call takes tens of microseconds): a pure ASGI route,
``json`` from the standard library, no per-request validation models. Small requests run on the
event loop; large ones in worker threads and processes (:class:`InferFastPath`), so that a
request of a million rows does not stall liveness or other clients. The request codec is
:mod:`bnc_deploy.serve.rest_codec`; the limits are :class:`~bnc_deploy.serve.limits.ServeLimits`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from bnc_deploy.serve import accesslog, auth, metrics, statistics, tracing, versions
from bnc_deploy.serve.accesslog import AccessLogMiddleware
from bnc_deploy.serve.errors import BadRequest, PayloadTooLarge, status_of
from bnc_deploy.serve.health import ServingHealth
from bnc_deploy.serve.limits import ServeLimits
from bnc_deploy.serve.protocol import SERVER_EXTENSIONS, SERVER_NAME
from bnc_deploy.serve.rest_codec import InferRequest, encode_infer_body, parse_infer_request
from bnc_deploy.version import __version__

log = logging.getLogger("bnc_deploy.serve")

#: Default ``--max-request-bytes`` (64 MiB: about 500k rows of letter's 16 int64 features).
DEFAULT_MAX_REQUEST_BYTES = ServeLimits.max_request_bytes
#: Requests up to this size are decoded on the event loop (a JSON body of this size decodes in ~1 ms).
INLINE_BODY_BYTES = 64 * 2**10
#: ... and run there when they have at most this many rows (a thread hop costs more than such a call).
INLINE_ROWS = 64
#: JSON heads over this size are decoded in a worker process (:class:`WorkerPools`).
PROCESS_JSON_BYTES = 2**20
#: The access log's and metrics' status of a request whose client went away first (nginx's 499).
DISCONNECTED = accesslog.DISCONNECTED
_JSON = "application/json"


def _json_response(obj, status: int = 200) -> Response:
    return Response(json.dumps(obj, separators=(",", ":")), status_code=status, media_type=_JSON)


def error_body(exc: BaseException) -> tuple[int, bytes]:
    """``(status, JSON body)`` of the error answer to ``exc``: the one place errors are rendered
    and internal errors logged (a client's disconnect is neither: :data:`DISCONNECTED`)."""
    status, _, message = status_of(exc)
    if status >= 500 and status != 503:
        log.error("internal error", exc_info=exc)
    return status, json.dumps({"error": message}, separators=(",", ":")).encode()


def answers_errors(route):
    """A route method whose exceptions become their error answers (:func:`error_body`)."""

    @functools.wraps(route)
    async def wrapped(self, request: Request) -> Response:
        try:
            return await route(self, request)
        except ClientDisconnect:
            return Response(b"", status_code=DISCONNECTED)  # nobody reads it; the access log says 499
        except Exception as exc:  # noqa: BLE001 - every error becomes its status
            status, body = error_body(exc)
            return Response(body, status_code=status, media_type=_JSON)

    return wrapped


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes before reading them (Content-Length)
    and while reading a body without one (PayloadTooLarge)."""
    check_content_length(request.headers.get("content-length"), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def check_content_length(length: str | None, limit: int) -> None:
    """BadRequest for a malformed Content-Length, PayloadTooLarge for one over ``limit``."""
    if length is None:
        return
    if not length.isdigit():
        raise BadRequest(f"bad Content-Length {length!r}")
    if int(length) > limit:
        raise PayloadTooLarge(f"request body of {int(length)} bytes exceeds the limit of {limit} bytes")


class Routes:
    """The Starlette routes of everything but inference (:class:`InferFastPath`), over one repository."""

    def __init__(self, repository, limit: int, pools: WorkerPools, health: ServingHealth | None = None) -> None:
        self.repository, self.limit, self.pools = repository, limit, pools
        self.health = health or ServingHealth(repository)

    def model_of(self, request: Request):
        p = request.path_params
        return self.repository.get(p["model"], p.get("version"))

    async def live(self, request: Request) -> Response:
        return Response(b"", status_code=200)

    async def ready(self, request: Request) -> Response:
        return Response(b"", status_code=200 if self.health.ready() else 503)

    async def server_metadata(self, request: Request) -> Response:
        extensions = statistics.server_extensions(SERVER_EXTENSIONS)
        return _json_response({"name": SERVER_NAME, "version": __version__, "extensions": extensions})

    @answers_errors
    async def model_metadata(self, request: Request) -> Response:
        return _json_response(self.model_of(request).metadata())

    @answers_errors
    async def model_stats(self, request: Request) -> Response:
        models = [self.model_of(request)] if "model" in request.path_params else self.repository.models()
        return _json_response(statistics.stats_json(models))

    @answers_errors
    async def model_config(self, request: Request) -> Response:
        return _json_response(statistics.model_config(self.model_of(request)))

    @answers_errors
    async def trace_setting(self, request: Request) -> Response:
        model = request.path_params.get("model")
        if model is not None:
            self.repository.get(model)  # an unknown model is 404, as everywhere
        body = await read_body(request, self.limit) if request.method == "POST" else None
        return _json_response(tracing.STATE.answer(model, body))

    @answers_errors
    async def model_ready(self, request: Request) -> Response:
        self.model_of(request)
        return Response(b"", status_code=200)

    @answers_errors
    async def repo_index(self, request: Request) -> Response:
        body = await read_body(request, self.limit)
        only_ready = False
        if body.strip():
            try:
                req = json.loads(body)
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                raise BadRequest(f"malformed JSON request: {exc}") from None
            if not isinstance(req, dict):
                raise BadRequest("the request must be a JSON object")
            only_ready = req.get("ready", False) is True
        index = self.repository.index()
        if only_ready:
            index = [e for e in index if e["state"] == "READY"]
        return _json_response(index)

    @answers_errors
    async def repo_load(self, request: Request) -> Response:
        # Triton's load parameters: "config" (its version_policy) and "version" (serve.versions).
        options = versions.load_options(versions.rest_parameters(await read_body(request, self.limit)))
        # In a worker thread (a C file compiles on load), awaited: the swap happens before 200.
        await self.pools.run(functools.partial(self.repository.load, request.path_params["model"], **options))
        return _json_response({})

    @answers_errors
    async def repo_unload(self, request: Request) -> Response:
        options = versions.unload_options(versions.rest_parameters(await read_body(request, self.limit)))
        await self.pools.run(functools.partial(self.repository.unload, request.path_params["model"], **options))
        return _json_response({})

    async def prometheus(self, request: Request) -> Response:
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    def table(self) -> list[Route]:
        return [
            Route("/v2/health/live", self.live, methods=["GET"]),
            Route("/v2/health/ready", self.ready, methods=["GET"]),
            Route("/v2", self.server_metadata, methods=["GET"]),
            Route("/v2/models/stats", self.model_stats, methods=["GET"]),  # before /v2/models/{model}, as Triton's
            Route("/v2/models/{model}/stats", self.model_stats, methods=["GET"]),
            Route("/v2/models/{model}/versions/{version}/stats", self.model_stats, methods=["GET"]),
            Route("/v2/models/{model}/config", self.model_config, methods=["GET"]),
            Route("/v2/models/{model}/versions/{version}/config", self.model_config, methods=["GET"]),
            Route("/v2/trace/setting", self.trace_setting, methods=["GET", "POST"]),
            Route("/v2/models/{model}/trace/setting", self.trace_setting, methods=["GET", "POST"]),
            Route("/v2/models/{model}", self.model_metadata, methods=["GET"]),
            Route("/v2/models/{model}/versions/{version}", self.model_metadata, methods=["GET"]),
            Route("/v2/models/{model}/ready", self.model_ready, methods=["GET"]),
            Route("/v2/models/{model}/versions/{version}/ready", self.model_ready, methods=["GET"]),
            Route("/v2/repository/index", self.repo_index, methods=["POST"]),
            Route("/v2/repository/models/{model}/load", self.repo_load, methods=["POST"]),
            Route("/v2/repository/models/{model}/unload", self.repo_unload, methods=["POST"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
        ]


def create_app(
    repository,
    *,
    api_keys=None,
    max_request_bytes: int | None = None,
    access_log: bool = True,
    close_repository: bool = True,
    limits: ServeLimits | None = None,
    threads: int | None = None,
    health: ServingHealth | None = None,
):
    """The ASGI app over ``repository`` (see the module docstring).

    ``api_keys``: list of bytes (``auth.load_api_keys``); ``access_log``: True (stdout), a text
    stream, or False - the JSON access log middleware; ``close_repository``: close the repository
    (drain batchers, stop polling) on the ASGI lifespan shutdown; ``limits``: the request limits
    (:class:`~bnc_deploy.serve.limits.ServeLimits`; ``max_request_bytes`` overrides its field);
    ``threads``: the worker pool's size (default: the CPU count); ``health``: the
    :class:`~bnc_deploy.serve.health.ServingHealth` behind ``/v2/health/ready`` (shared with the
    gRPC front end; default: one of its own).
    """
    limits = limits or ServeLimits()
    if max_request_bytes is not None:
        limits = dataclasses.replace(limits, max_request_bytes=int(max_request_bytes))
    pools = WorkerPools(threads)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        pools.warm()
        yield
        pools.close()
        if close_repository:
            repository.close()

    routes = Routes(repository, limits.max_request_bytes, pools, health)
    app = Starlette(routes=routes.table(), lifespan=lifespan)
    asgi = InferFastPath(app, repository, limits, pools)
    if api_keys:
        asgi = BearerAuthMiddleware(asgi, list(api_keys))
    if access_log:
        asgi = AccessLogMiddleware(asgi, None if access_log is True else access_log)
    return asgi


class _Disconnected(Exception):
    """The client went away before its body arrived (nothing to answer)."""


class WorkerPools:
    """Where request work runs off the event loop, so that one large request never stalls the others
    (liveness included): a thread pool of ``threads`` workers (default: the CPU count) for
    decoding, the model call and encoding, and a process pool of as many workers, started on first
    use, for JSON heads over :data:`PROCESS_JSON_BYTES`: ``json.loads`` holds the GIL for its whole
    run (1.5 s for a 48 MB request of 10^6 rows), so a thread would still stall the loop."""

    def __init__(self, threads: int | None = None) -> None:
        self.size = int(threads or os.cpu_count() or 1)
        self.threads = ThreadPoolExecutor(self.size, thread_name_prefix="bnc-serve")
        self._processes: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    async def run(self, fn, *args):
        """``fn(*args)`` in a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self.threads, fn, *args)

    async def parse(self, body: bytes, header_length: str | None, max_rows: int) -> InferRequest:
        """:func:`parse_infer_request` in a thread, or in a process for a large JSON head."""
        head = len(body) if header_length is None or not header_length.isdigit() else int(header_length)
        if head <= PROCESS_JSON_BYTES:
            return await self.run(parse_infer_request, body, header_length, max_rows)
        request, dtypes = await asyncio.get_running_loop().run_in_executor(
            self._process_pool(), _parse_narrowed, body, header_length, max_rows
        )
        if dtypes:  # widen back in a thread (NumPy's cast gives the GIL back; the unpickling did not)
            request.inputs = await self.run(_widened, request.inputs, dtypes)
        return request

    def warm(self) -> None:
        """Start a decoder process now, in the background, so that the first large JSON request
        does not wait for it (a spawned interpreter takes about a second to import)."""
        self._process_pool().submit(os.getpid)

    def _process_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._processes is None:
                # spawn: a fork of a process with running threads (uvicorn, onnxruntime) is unsafe.
                self._processes = ProcessPoolExecutor(self.size, mp_context=multiprocessing.get_context("spawn"))
            return self._processes

    def close(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)
        if self._processes is not None:
            self._processes.shutdown(wait=False, cancel_futures=True)


class InferFastPath:
    """Pure ASGI: ``POST /v2/models/{m}[/versions/{v}]/infer`` handled here, everything else by
    the Starlette app. The infer route is the hot path (a letter-sized model runs in tens of
    microseconds): skipping Starlette's request/response objects and router saved about a third
    of the server's time per request in a measurement (docs/guide/serve.md).

    Where the work runs: a request of at most :data:`INLINE_BODY_BYTES` is decoded on the event
    loop (microseconds), and run there too when it has at most :data:`INLINE_ROWS` rows (a thread
    hop would cost more than the model call); anything larger is decoded, run and encoded in the
    :class:`WorkerPools`."""

    def __init__(self, app, repository, limits: ServeLimits, pools: WorkerPools) -> None:
        self.app, self.repository, self.limits, self.pools = app, repository, limits, pools
        self.limit = limits.max_request_bytes

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and path.endswith("/infer")
            and path.startswith("/v2/models/")
        ):
            parts = path.split("/")
            if len(parts) == 5 and parts[3]:
                return await self.infer(scope, receive, send, parts[3], None)
            if len(parts) == 7 and parts[4] == "versions" and parts[3] and parts[5]:
                return await self.infer(scope, receive, send, parts[3], parts[5])
        return await self.app(scope, receive, send)

    async def _body(self, receive, content_length: bytes | None) -> bytes:
        check_content_length(None if content_length is None else content_length.decode("latin-1"), self.limit)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                raise PayloadTooLarge(f"request body exceeds the limit of {self.limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _answer(
        self, model, body: bytes, header_length: str | None, record: statistics.InferRecord
    ) -> tuple[int, list[bytes], list]:
        """Decode, run and encode one request, each where it belongs (class docstring); ``record``
        gets the stage times."""
        max_rows = self.limits.max_rows
        if len(body) <= INLINE_BODY_BYTES:
            request = record.timed_input(parse_infer_request, body, header_length, max_rows)
            if request.rows <= INLINE_ROWS:
                outputs = await model.infer_async(
                    request.inputs, request.output_names or None, classification=request.classification, record=record
                )
                return record.timed_output(encode_infer_body, model.name, model.version, request, outputs)
        else:
            request = await record.timed_input_async(self.pools.parse(body, header_length, max_rows))
        return await self.pools.run(_run_and_encode, model, request, record)

    async def infer(self, scope, receive, send, name: str, version: str | None) -> None:
        start = time.perf_counter()
        content_length = header_length = None
        encoding = b"identity"
        for k, v in scope["headers"]:
            if k == b"content-length":
                content_length = v
            elif k == b"inference-header-content-length":
                header_length = v
            elif k == b"content-encoding":
                encoding = v.lower()
        code, record = None, None
        try:
            model = self.repository.get(name, version)
            record = statistics.begin(model, "rest", scope["headers"])  # stage times; span (traceparent)
            if encoding not in (b"identity", b""):
                raise BadRequest("compressed request bodies (Content-Encoding) are not supported")
            body = await self._body(receive, content_length)
            status, chunks, headers = await self._answer(
                model, body, None if header_length is None else header_length.decode("latin-1"), record
            )
        except _Disconnected:
            metrics.observe_request(name, "rest", time.perf_counter() - start, str(DISCONNECTED))
            statistics.end(record, str(DISCONNECTED))
            return
        except Exception as exc:
            status, content = error_body(exc)
            chunks, headers = [content], [(b"content-type", b"application/json")]
            code = str(status)
        headers.append((b"content-length", str(sum(len(c) for c in chunks)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        last = len(chunks) - 1
        for i, chunk in enumerate(chunks):  # a large body chunk by chunk: the server's flow control paces it
            await send({"type": "http.response.body", "body": chunk, "more_body": i < last})
        metrics.observe_request(name, "rest", time.perf_counter() - start, code)
        statistics.end(record, code)


def _parse_narrowed(body: bytes, header_length: str | None, max_rows: int) -> tuple[InferRequest, dict]:
    """:func:`parse_infer_request` in a worker process, its integer inputs sent back in the smallest
    integer dtype that holds their values (exact; 10^6 x 16 codes: 16 MB to unpickle instead of
    128 MB, which would hold the GIL for ~60 ms); ``{input name: original dtype}`` to widen them."""
    request = parse_infer_request(body, header_length, max_rows)
    dtypes = {}
    for name, array in request.inputs.items():
        if array.dtype.kind in "iu" and array.size:
            small = np.result_type(np.min_scalar_type(int(array.min())), np.min_scalar_type(int(array.max())))
            if small.itemsize < array.dtype.itemsize:
                dtypes[name] = array.dtype
                request.inputs[name] = array.astype(small)
    return request, dtypes


def _widened(inputs: dict, dtypes: dict) -> dict:
    return {name: a.astype(dtypes[name]) if name in dtypes else a for name, a in inputs.items()}


def _run_and_encode(model, request: InferRequest, record: statistics.InferRecord) -> tuple[int, list[bytes], list]:
    """The blocking model call and the response's encoding, in a worker thread."""
    outputs = model.infer(
        request.inputs, request.output_names or None, classification=request.classification, record=record
    )
    return record.timed_output(encode_infer_body, model.name, model.version, request, outputs)


class BearerAuthMiddleware:
    """Pure ASGI: 401 unless ``Authorization: Bearer <key>`` matches; liveness is open."""

    OPEN_PATHS = frozenset({"/v2/health/live"})

    def __init__(self, app, keys: list[bytes]) -> None:
        self.app, self.keys = app, keys

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") in self.OPEN_PATHS:
            return await self.app(scope, receive, send)
        value = None
        for k, v in scope.get("headers", ()):
            if k == b"authorization":
                value = v
                break
        if auth.token_ok(value, self.keys):
            return await self.app(scope, receive, send)
        body = b'{"error":"missing or invalid bearer token (Authorization: Bearer <key>)"}'
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def app_from_env():
    """An app built from environment variables, for ASGI servers that import an app factory
    (``uvicorn --factory bnc_deploy.serve.app:app_from_env --workers N``; Ray Serve, gunicorn):
    ``BNC_SERVE_REPOSITORY`` (required), ``BNC_SERVE_RUNTIME``, ``BNC_SERVE_THREADS``,
    ``BNC_SERVE_MAX_BATCH``, ``BNC_SERVE_MAX_QUEUE_DELAY_MS``, ``BNC_SERVE_API_KEY_FILE``,
    ``BNC_SERVE_POLL``, ``BNC_SERVE_ACCESS_LOG`` (``1``/``0``), ``BNC_SERVE_VERSION_POLICY``,
    ``BNC_SERVE_KEY_FILE``, and the limits
    ``BNC_SERVE_<FIELD>`` of :class:`~bnc_deploy.serve.limits.ServeLimits` (``BNC_SERVE_MAX_REQUEST_BYTES``,
    ``BNC_SERVE_MAX_ROWS``, ...), and the trace settings ``BNC_SERVE_TRACE_LEVEL``, ``_RATE``,
    ``_COUNT`` (:func:`bnc_deploy.serve.tracing.configure_from_env`). Every process loads and
    checks the models itself."""
    from bnc_deploy.errors import ConfigError
    from bnc_deploy.serve.repository import ModelRepository

    env = os.environ
    root = env.get("BNC_SERVE_REPOSITORY")
    if not root:
        raise ConfigError("BNC_SERVE_REPOSITORY is not set (the model repository directory)")

    def number(key, cast, default):
        try:
            return cast(env[key]) if env.get(key) else default
        except ValueError:
            raise ConfigError(f"{key}={env[key]!r} is not a number") from None

    repository = ModelRepository(
        root,
        runtime=env.get("BNC_SERVE_RUNTIME") or None,
        threads=number("BNC_SERVE_THREADS", int, None),
        max_batch=number("BNC_SERVE_MAX_BATCH", int, 0),
        max_queue_delay_ms=number("BNC_SERVE_MAX_QUEUE_DELAY_MS", float, 0.0),
        **ModelRepository.options_from_env(env),  # BNC_SERVE_VERSION_POLICY, BNC_SERVE_KEY_FILE
    )
    repository.load_all()
    poll = number("BNC_SERVE_POLL", float, 0.0)
    if poll:
        repository.start_polling(poll)
    keys = auth.load_api_keys(env["BNC_SERVE_API_KEY_FILE"]) if env.get("BNC_SERVE_API_KEY_FILE") else None
    tracing.configure_from_env(env)
    access = env.get("BNC_SERVE_ACCESS_LOG", "1") == "1"  # one JSON line per request on stdout
    return create_app(
        repository,
        api_keys=keys,
        access_log=access,
        limits=ServeLimits.from_env(env),
        threads=number("BNC_SERVE_THREADS", int, None),
    )
