"""The REST front end: the Open Inference Protocol (KServe V2) over HTTP, as an ASGI app (Starlette).

``create_app(repository, api_keys=None, max_request_bytes=...)`` returns the app; ``bnc-serve``
runs it in uvicorn, and any ASGI server or wrapper (several uvicorn workers via
:func:`app_from_env`, Ray Serve, a KServe custom predictor) can run it too.

Routes::

    GET  /v2/health/live                      200 (no auth: a liveness probe)
    GET  /v2/health/ready                     200 when every model is loaded and checked, else 503
    GET  /v2                                  server metadata (name, version, extensions)
    GET  /v2/models/{m}[/versions/{v}]        model metadata (ServedModel.metadata)
    GET  /v2/models/{m}[/versions/{v}]/ready  200, 503 (not ready), 404 (unknown)
    POST /v2/models/{m}[/versions/{v}]/infer  inference (JSON, or the binary tensor data extension)
    POST /v2/repository/index                 [{"name", "version", "state", "reason"}]
    POST /v2/repository/models/{m}/load       (re)load from the file: 200, or 400 with the error
    POST /v2/repository/models/{m}/unload     200
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
body without one -, 401 without a valid bearer token when ``api_keys`` is set, 503 not ready).

The infer path is kept lean (the model call takes tens of microseconds): a plain Starlette
route, ``json`` from the standard library, no per-request validation models, no thread hop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import bnc_deploy
from bnc_deploy.serve import auth, metrics
from bnc_deploy.serve.accesslog import AccessLogMiddleware
from bnc_deploy.serve.errors import (
    BadRequest,
    PayloadTooLarge,
    status_of,
)
from bnc_deploy.serve.protocol import (
    SERVER_EXTENSIONS,
    SERVER_NAME,
    datatype_of,
    tensor_from_bytes,
    tensor_from_json,
    tensor_to_bytes,
    tensor_to_json_data,
)

log = logging.getLogger("bnc_deploy.serve")

#: Default ``--max-request-bytes`` (64 MiB: about 500k rows of letter's 16 int64 features).
DEFAULT_MAX_REQUEST_BYTES = 64 * 2**20
HEADER_LENGTH = "inference-header-content-length"
_JSON = "application/json"


def _json_response(obj, status: int = 200) -> Response:
    return Response(json.dumps(obj, separators=(",", ":")), status_code=status, media_type=_JSON)


def _error(exc: BaseException) -> Response:
    status, _, message = status_of(exc)
    if status >= 500 and status != 503:
        log.error("internal error", exc_info=exc)
    return _json_response({"error": message}, status)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes before reading them (Content-Length)
    and while reading a body without one (PayloadTooLarge)."""
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise BadRequest(f"bad Content-Length {length!r}")
        if int(length) > limit:
            raise PayloadTooLarge(f"request body of {int(length)} bytes exceeds the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _parameters(obj, where: str) -> dict:
    params = obj.get("parameters", {})
    if not isinstance(params, dict):
        raise BadRequest(f"{where}: 'parameters' must be an object")
    return params


def parse_infer_request(body: bytes, header_length: str | None) -> tuple[dict, dict, list, dict, bool, dict]:
    """``(request JSON, inputs {name: array}, output names, classification {name: k},
    binary-by-default, binary {output name: bool})`` of an infer body (BadRequest when malformed)."""
    if header_length is not None:
        if not (header_length.isascii() and header_length.isdigit()) or int(header_length) > len(body):
            raise BadRequest(f"Inference-Header-Content-Length {header_length!r} does not fit a body of "
                             f"{len(body)} bytes")
        n = int(header_length)
        head, binary = body[:n], memoryview(body)[n:]
    else:
        head, binary = body, memoryview(b"")
    try:
        req = json.loads(head)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: JSON nested too deep
        raise BadRequest(f"malformed JSON request: {exc}") from None
    if not isinstance(req, dict):
        raise BadRequest("the request must be a JSON object")
    params = _parameters(req, "request")
    binary_default = params.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise BadRequest("'binary_data_output' must be true or false")
    raw_inputs = req.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise BadRequest("the request needs a non-empty 'inputs' list")
    inputs, pos = {}, 0
    for item in raw_inputs:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise BadRequest("each input needs a 'name'")
        name = item["name"]
        where = f"input {name!r}"
        if name in inputs:
            raise BadRequest(f"{where} appears twice")
        size = _parameters(item, where).get("binary_data_size")
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0 or pos + size > len(binary):
                raise BadRequest(f"{where}: binary_data_size {size!r} does not fit the {len(binary) - pos} "
                                 "binary bytes left in the body")
            if "data" in item:
                raise BadRequest(f"{where}: both 'data' and binary_data_size")
            inputs[name] = tensor_from_bytes(name, item.get("datatype"), item.get("shape"), binary[pos:pos + size])
            pos += size
        else:
            if "data" not in item:
                raise BadRequest(f"{where} has neither 'data' nor binary_data_size")
            inputs[name] = tensor_from_json(name, item.get("datatype"), item.get("shape"), item["data"])
    if pos != len(binary):
        raise BadRequest(f"{len(binary) - pos} binary bytes after the inputs' binary_data_size")
    names, classification, binary_of = [], {}, {}
    raw_outputs = req.get("outputs", [])
    if not isinstance(raw_outputs, list):
        raise BadRequest("'outputs' must be a list")
    for item in raw_outputs:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise BadRequest("each requested output needs a 'name'")
        name = item["name"]
        oparams = _parameters(item, f"output {name!r}")
        b = oparams.get("binary_data", binary_default)
        if not isinstance(b, bool):
            raise BadRequest(f"output {name!r}: binary_data must be true or false")
        binary_of[name] = b
        if "classification" in oparams:
            classification[name] = oparams["classification"]
        names.append(name)
    return req, inputs, names, classification, binary_default, binary_of


def encode_infer_body(model, req: dict, outputs, binary_default: bool, binary_of: dict) -> tuple[int, bytes, list]:
    """``(status, body, headers)`` of the V2 infer response: JSON, or JSON + binary tensors with
    ``Inference-Header-Content-Length``."""
    items, chunks = [], []
    for name, array in outputs:
        entry = {"name": name, "datatype": datatype_of(array.dtype), "shape": list(array.shape)}
        if binary_of.get(name, binary_default):
            data = tensor_to_bytes(array)
            entry["parameters"] = {"binary_data_size": len(data)}
            chunks.append(data)
        else:
            entry["data"] = tensor_to_json_data(array)
        items.append(entry)
    obj = {"model_name": model.name, "model_version": model.version, "outputs": items}
    if "id" in req:
        obj["id"] = req["id"]
    head = json.dumps(obj, separators=(",", ":")).encode()
    if not chunks:
        return 200, head, [(b"content-type", b"application/json")]
    return 200, b"".join([head, *chunks]), [(b"content-type", b"application/octet-stream"),
                                            (b"inference-header-content-length", str(len(head)).encode())]


def create_app(repository, *, api_keys=None, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
               access_log: bool = True, close_repository: bool = True):
    """The ASGI app over ``repository`` (see the module docstring).

    ``api_keys``: list of bytes (``auth.load_api_keys``); ``access_log``: True (stdout), a text
    stream, or False - the JSON access log middleware; ``close_repository``: close the repository (drain batchers, stop polling) on
    the ASGI lifespan shutdown.
    """
    limit = int(max_request_bytes)

    def model_of(request: Request):
        p = request.path_params
        return repository.get(p["model"], p.get("version"))

    async def live(request: Request) -> Response:
        return Response(b"", status_code=200)

    async def ready(request: Request) -> Response:
        return Response(b"", status_code=200 if repository.ready() else 503)

    async def server_metadata(request: Request) -> Response:
        return _json_response({"name": SERVER_NAME, "version": bnc_deploy.__version__,
                               "extensions": list(SERVER_EXTENSIONS)})

    async def model_metadata(request: Request) -> Response:
        try:
            return _json_response(model_of(request).metadata())
        except Exception as exc:  # noqa: BLE001 - every error becomes its status
            return _error(exc)

    async def model_ready(request: Request) -> Response:
        try:
            model_of(request)
            return Response(b"", status_code=200)
        except Exception as exc:  # noqa: BLE001
            return _error(exc)

    async def repo_index(request: Request) -> Response:
        try:
            body = await read_body(request, limit)
            only_ready = False
            if body.strip():
                try:
                    req = json.loads(body)
                except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                    raise BadRequest(f"malformed JSON request: {exc}") from None
                if not isinstance(req, dict):
                    raise BadRequest("the request must be a JSON object")
                only_ready = req.get("ready", False) is True
            index = repository.index()
            if only_ready:
                index = [e for e in index if e["state"] == "READY"]
            return _json_response(index)
        except Exception as exc:  # noqa: BLE001
            return _error(exc)

    async def repo_load(request: Request) -> Response:
        try:
            await read_body(request, limit)  # a body (Triton's load parameters) is read and ignored
            repository.load(request.path_params["model"])  # blocking by design: the swap happens before 200
            return _json_response({})
        except Exception as exc:  # noqa: BLE001
            return _error(exc)

    async def repo_unload(request: Request) -> Response:
        try:
            await read_body(request, limit)
            repository.unload(request.path_params["model"])
            return _json_response({})
        except Exception as exc:  # noqa: BLE001
            return _error(exc)

    async def prometheus(request: Request) -> Response:
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    routes = [
        Route("/v2/health/live", live, methods=["GET"]),
        Route("/v2/health/ready", ready, methods=["GET"]),
        Route("/v2", server_metadata, methods=["GET"]),
        Route("/v2/models/{model}", model_metadata, methods=["GET"]),
        Route("/v2/models/{model}/versions/{version}", model_metadata, methods=["GET"]),
        Route("/v2/models/{model}/ready", model_ready, methods=["GET"]),
        Route("/v2/models/{model}/versions/{version}/ready", model_ready, methods=["GET"]),
        Route("/v2/repository/index", repo_index, methods=["POST"]),
        Route("/v2/repository/models/{model}/load", repo_load, methods=["POST"]),
        Route("/v2/repository/models/{model}/unload", repo_unload, methods=["POST"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        if close_repository:
            repository.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    asgi = InferFastPath(app, repository, limit)
    if api_keys:
        asgi = BearerAuthMiddleware(asgi, list(api_keys))
    if access_log:
        asgi = AccessLogMiddleware(asgi, None if access_log is True else access_log)
    return asgi


class _Disconnected(Exception):
    """The client went away before its body arrived (nothing to answer)."""


class InferFastPath:
    """Pure ASGI: ``POST /v2/models/{m}[/versions/{v}]/infer`` handled here, everything else by
    the Starlette app. The infer route is the hot path (a letter-sized model runs in tens of
    microseconds); skipping Starlette's request/response objects and router saved about a third
    of the server's time per request in a measurement (``README``: Serve)."""

    def __init__(self, app, repository, limit: int) -> None:
        self.app, self.repository, self.limit = app, repository, limit

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if scope["type"] == "http" and scope["method"] == "POST" and path.endswith("/infer") \
                and path.startswith("/v2/models/"):
            parts = path.split("/")
            if len(parts) == 5 and parts[3]:
                return await self.infer(scope, receive, send, parts[3], None)
            if len(parts) == 7 and parts[4] == "versions" and parts[3] and parts[5]:
                return await self.infer(scope, receive, send, parts[3], parts[5])
        return await self.app(scope, receive, send)

    async def _body(self, receive, content_length: bytes | None) -> bytes:
        if content_length is not None:
            if not content_length.isdigit():
                raise BadRequest(f"bad Content-Length {content_length.decode('latin-1')!r}")
            if int(content_length) > self.limit:
                raise PayloadTooLarge(f"request body of {int(content_length)} bytes exceeds the limit of "
                                      f"{self.limit} bytes")
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
        code = None
        try:
            model = self.repository.get(name, version)
            if encoding not in (b"identity", b""):
                raise BadRequest("compressed request bodies (Content-Encoding) are not supported")
            body = await self._body(receive, content_length)
            req, inputs, names, classification, binary_default, binary_of = parse_infer_request(
                body, None if header_length is None else header_length.decode("latin-1"))
            outputs = await model.infer_async(inputs, names or None, classification=classification)
            status, content, headers = encode_infer_body(model, req, outputs, binary_default, binary_of)
        except _Disconnected:
            return
        except Exception as exc:
            status, _, message = status_of(exc)
            if status >= 500 and status != 503:
                log.error("internal error", exc_info=exc)
            content = json.dumps({"error": message}, separators=(",", ":")).encode()
            headers = [(b"content-type", b"application/json")]
            code = str(status)
        headers.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})
        metrics.observe_request(name, "rest", time.perf_counter() - start, code)


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
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})


def app_from_env():
    """An app built from environment variables, for ASGI servers that import an app factory
    (``uvicorn --factory bnc_deploy.serve.app:app_from_env --workers N``; Ray Serve, gunicorn):
    ``BNC_SERVE_REPOSITORY`` (required), ``BNC_SERVE_RUNTIME``, ``BNC_SERVE_THREADS``,
    ``BNC_SERVE_MAX_BATCH``, ``BNC_SERVE_MAX_QUEUE_DELAY_MS``, ``BNC_SERVE_API_KEY_FILE``,
    ``BNC_SERVE_MAX_REQUEST_BYTES``, ``BNC_SERVE_POLL``, ``BNC_SERVE_ACCESS_LOG`` (``1``/``0``). Every
    process loads and checks the models itself."""
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

    repository = ModelRepository(root, runtime=env.get("BNC_SERVE_RUNTIME") or None,
                                 threads=number("BNC_SERVE_THREADS", int, None),
                                 max_batch=number("BNC_SERVE_MAX_BATCH", int, 0),
                                 max_queue_delay_ms=number("BNC_SERVE_MAX_QUEUE_DELAY_MS", float, 0.0))
    repository.load_all()
    poll = number("BNC_SERVE_POLL", float, 0.0)
    if poll:
        repository.start_polling(poll)
    keys = auth.load_api_keys(env["BNC_SERVE_API_KEY_FILE"]) if env.get("BNC_SERVE_API_KEY_FILE") else None
    access = env.get("BNC_SERVE_ACCESS_LOG", "1") == "1"  # one JSON line per request on stdout
    return create_app(repository, api_keys=keys, access_log=access,
                      max_request_bytes=number("BNC_SERVE_MAX_REQUEST_BYTES", int, DEFAULT_MAX_REQUEST_BYTES))
