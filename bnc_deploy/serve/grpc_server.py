"""The gRPC front end: ``inference.GRPCInferenceService`` of the Open Inference Protocol (KServe V2).

::

    server = start_grpc_server(repository, "127.0.0.1:8001", api_keys=keys)   # started
    server = start_grpc_server(repository, address, tls=load_tls(cert, key))   # TLS (serve.tls)
    ...
    server.stop(grace=5.0).wait()        # the caller stops it (drains requests in flight)

RPCs (messages of :mod:`bnc_deploy.serve.proto`, field for field Triton's, so the official
``tritonclient.grpc`` works unchanged): ``ServerLive``, ``ServerReady``, ``ServerMetadata``,
``ModelReady``, ``ModelMetadata``, ``ModelInfer``, the repository extension
``RepositoryIndex``, ``RepositoryModelLoad``, ``RepositoryModelUnload`` (parameters ``version``
and ``config``: :mod:`~bnc_deploy.serve.versions`), and the statistics, model
configuration and trace extensions ``ModelStatistics``, ``ModelConfig``, ``TraceSetting``
(:mod:`~bnc_deploy.serve.grpc_extensions`: REST's answers as protobuf). Other RPCs of Triton's
service (streaming, shared memory, log settings) answer ``UNIMPLEMENTED``. The same port serves
the standard ``grpc.health.v1.Health`` service (:mod:`bnc_deploy.serve.health`: the server, the V2
service and each model by name), without a token, as Kubernetes' gRPC probes send none.

With ``tls`` (:func:`bnc_deploy.serve.tls.load_tls`) the port speaks only TLS; with a client CA
only to clients presenting a certificate it signed (mutual TLS).

``ModelInfer`` takes each input either as ``raw_input_contents`` (one little-endian buffer per
input, in input order: what tritonclient sends) or as typed ``contents`` (``int64_contents``
for INT64, ...), never a mix; it answers every output in ``raw_output_contents`` (what
tritonclient reads). Outputs are those the request names (all by default), in the model's
declared datatype and shape (:meth:`ServedModel.infer`). The classification extension: an
output's ``parameters["classification"] = k`` (tritonclient's ``class_count=k``), or the
request's ``parameters["classification"]``, asks for the top ``k`` classes as BYTES strings.

Errors are gRPC status codes with the core's one-line messages (:func:`errors.status_of`):
``INVALID_ARGUMENT`` (bad tensor, shape, dtype, an out-of-range code naming feature, value and
row), ``NOT_FOUND`` (unknown model or version), ``UNAVAILABLE`` (not ready, shutting down),
``UNAUTHENTICATED`` (with ``api_keys``: every RPC but ``ServerLive`` needs the metadata
``authorization: Bearer <key>``), ``RESOURCE_EXHAUSTED`` (a message over ``max_message_bytes``,
enforced by gRPC itself). Anything else is a bug: ``INTERNAL`` with a generic message, the
traceback in the log. Each inference request is counted in :mod:`bnc_deploy.serve.metrics`
(protocol ``grpc``) and :mod:`~bnc_deploy.serve.statistics` (both front ends serve the statistics), and
traced (:mod:`~bnc_deploy.serve.tracing`) as a child of its metadata's ``traceparent``.

Concurrency: a synchronous ``grpc.server`` whose ``workers`` threads run the handlers; the model
call itself is thread-safe and blocking (``ServedModel.infer``, batched there when enabled).

Latency: grpcio in Python has an empty-call floor of ~0.4 ms per round trip, whatever the handler
does. Measured on a 2-core AMD EPYC VM (grpcio 1.85.3 both sides, tritonclient 2.73, load ~1):
tritonclient ``is_server_live`` against a *minimal* grpcio server (generic handler, raw bytes,
no protobuf, no work) p50 405-415 us with 1, 2 or 8 workers, ``grpc.optimization_target=latency``
or ``GRPC_POLL_STRATEGY=poll`` (``grpc.http2.bdp_probe=0``: no change either); 425 us with
``grpc.aio``, 366-370 us with ``grpc.aio`` on uvloop; against this server 394-427 us. A raw grpcio
stub call costs the same, so tritonclient's own wrapper adds ~10 us. Per empty call the grpcio
client uses ~200 us CPU and the server ~270 us (a Python TCP ping-pong is 14 us); strace counts
~35 futex, 3 epoll_wait and 2 eventfd wake-ups per call in the server: the hand-offs between
grpc's event-engine threads, the Python polling thread and the handler thread. ``ModelInfer``
adds ~130 us of handler (80 us ``ServedModel.infer``, of which 17 us is the runtime call; ~20 us
decode, encode and metrics here), p50 ~650 us in all. Tried and dropped: a ``grpc.aio`` server
with the model call inline on the event loop (uvloop) was no faster for ``ModelInfer`` (p50 of five
interleaved pairs at load 4-6: aio 709, 711, 725, 685, 644 us; sync 648, 689, 699, 666, 633 us);
an executor running handlers on the polling thread deadlocks (the handler waits for a send
completion that only that thread delivers).
"""

from __future__ import annotations

import logging
import math
import time
from concurrent import futures

import grpc
import numpy as np
from grpc_health.v1 import health_pb2_grpc

from bnc_deploy.serve import auth as serve_auth
from bnc_deploy.serve import grpc_extensions, metrics, statistics, versions
from bnc_deploy.serve.errors import BadRequest, Unauthenticated, status_of
from bnc_deploy.serve.health import ServingHealth
from bnc_deploy.serve.limits import ServeLimits, check_count, check_rows
from bnc_deploy.serve.proto import grpc_service_pb2 as pb
from bnc_deploy.serve.proto import grpc_service_pb2_grpc as pb_grpc
from bnc_deploy.serve.protocol import (
    SERVER_EXTENSIONS,
    SERVER_NAME,
    check_shape,
    datatype_of,
    dtype_of,
    tensor_from_bytes,
    tensor_to_bytes,
)
from bnc_deploy.version import __version__

log = logging.getLogger("bnc_deploy.serve.grpc")

#: Default limit on one gRPC message, either way (gRPC's own default is 4 MiB received).
DEFAULT_MAX_MESSAGE_BYTES = ServeLimits.max_request_bytes

# Typed ``contents`` field of each datatype (FP16 has none: raw contents only).
_CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def tensor_from_contents(name: str, datatype: str, shape, contents: pb.InferTensorContents) -> np.ndarray:
    """The array of an input sent as typed ``contents``; BadRequest when the field does not match
    the datatype, the count is not ``prod(shape)`` or a value does not fit a narrower type."""
    where = f"input {name!r}"
    dtype = dtype_of(datatype, where)
    shape = check_shape(shape, where)
    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise BadRequest(f"{where}: datatype {datatype} can only be sent in raw_input_contents")
    others = [f.name for f, _ in contents.ListFields() if f.name != field]
    if others:
        raise BadRequest(f"{where}: datatype {datatype} takes its data in contents.{field}, got {', '.join(others)}")
    values = getattr(contents, field)
    n = math.prod(shape)
    if len(values) != n:
        raise BadRequest(f"{where}: shape {list(shape)} needs {n} elements, contents.{field} has {len(values)}")
    if datatype == "BYTES":
        out = np.empty(n, dtype=object)
        out[:] = list(values)
        return out.reshape(shape)
    wide = np.asarray(values, dtype={"b": np.bool_, "i": np.int64, "u": np.uint64, "f": np.float64}[dtype.kind])
    if dtype.kind in "iu" and wide.size and dtype.itemsize < 8:
        info = np.iinfo(dtype)
        bad = wide[(wide < info.min) | (wide > info.max)]
        if bad.size:
            raise BadRequest(f"{where}: value {int(bad[0])} does not fit datatype {datatype}")
    # float64 -> FP32 for fp32_contents is exact (protobuf stores them as float32 already).
    return wide.astype(dtype, copy=False).reshape(shape)


def decode_inputs(request: pb.ModelInferRequest, max_rows: int = ServeLimits.max_rows) -> dict[str, np.ndarray]:
    """``{input name: array}`` of a ModelInferRequest (raw or typed contents; see the module docstring).
    Too many inputs or outputs, or an input of more than ``max_rows`` rows, raise PayloadTooLarge
    (RESOURCE_EXHAUSTED) before any tensor is decoded."""
    raw = request.raw_input_contents
    check_count(request.inputs, "inputs")
    check_count(request.outputs, "outputs")
    if raw and len(raw) != len(request.inputs):
        raise BadRequest(f"raw_input_contents has {len(raw)} buffers for {len(request.inputs)} inputs")
    for tensor in request.inputs:
        where = f"input {tensor.name!r}"
        check_rows(check_shape(list(tensor.shape), where), max_rows, where)
    inputs: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(request.inputs):
        if tensor.name in inputs:
            raise BadRequest(f"input {tensor.name!r} is given twice")
        shape = list(tensor.shape)
        if raw:
            if tensor.HasField("contents"):
                raise BadRequest(f"input {tensor.name!r}: contents and raw_input_contents must not be mixed")
            inputs[tensor.name] = tensor_from_bytes(tensor.name, tensor.datatype, shape, raw[i])
        else:
            inputs[tensor.name] = tensor_from_contents(tensor.name, tensor.datatype, shape, tensor.contents)
    return inputs


def _int_parameter(param: pb.InferParameter, where: str) -> int:
    kind = param.WhichOneof("parameter_choice")
    if kind not in ("int64_param", "uint64_param"):
        raise BadRequest(f"{where}: classification must be an integer parameter, got {kind or 'nothing'}")
    value = getattr(param, kind)
    if value < 0:
        raise BadRequest(f"{where}: classification must be >= 0, got {value}")
    return int(value)


def classification_of(request: pb.ModelInferRequest):
    """The classification asked for, as :meth:`ServedModel.infer` takes it: ``{output: k}`` from the
    outputs' ``classification`` parameters (the request's parameter filling in the other named
    outputs), the request's ``k`` for all outputs when no output carries one, else 0."""
    per_output = {
        o.name: _int_parameter(o.parameters["classification"], f"output {o.name!r} parameter")
        for o in request.outputs
        if "classification" in o.parameters
    }
    if "classification" in request.parameters:
        k = _int_parameter(request.parameters["classification"], "request parameter")
        if not per_output:
            return k
        for o in request.outputs:
            per_output.setdefault(o.name, k)
    return per_output or 0


#: NumPy dtype -> V2 datatype, memoized: a batch-1 request's whole handler takes ~100 us, and
#: datatype_of's dtype-name lookups were a tenth of it (profiled).
_DATATYPE_OF: dict = {}


def _datatype(dtype: np.dtype) -> str:
    name = _DATATYPE_OF.get(dtype)
    if name is None:
        name = _DATATYPE_OF[dtype] = datatype_of(dtype)
    return name


def encode_outputs(response: pb.ModelInferResponse, outputs) -> None:
    """Append ``[(name, array)]`` to ``response`` as output tensors with ``raw_output_contents``."""
    for name, array in outputs:
        tensor = response.outputs.add()
        tensor.name = name
        tensor.datatype = _datatype(array.dtype)
        tensor.shape.extend(array.shape)
        response.raw_output_contents.append(tensor_to_bytes(array))


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """``inference.GRPCInferenceService`` over a :class:`~bnc_deploy.serve.repository.ModelRepository`."""

    def __init__(
        self,
        repository,
        *,
        api_keys=None,
        server_name: str = SERVER_NAME,
        limits: ServeLimits | None = None,
        health: ServingHealth | None = None,
    ) -> None:
        self.repository = repository
        self.health = health or ServingHealth(repository)  # ServerReady: false once shutdown began
        self.limits = limits or ServeLimits()
        self.api_keys = list(api_keys) if api_keys else None
        self.server_name = server_name

    # -- plumbing ---------------------------------------------------------------------------------
    def _authorize(self, context) -> None:
        if self.api_keys is None:
            return
        value = None
        for key, val in context.invocation_metadata():
            if key == "authorization":
                value = val
                break
        if not serve_auth.token_ok(value, self.api_keys):
            raise Unauthenticated("missing or wrong bearer token (metadata 'authorization: Bearer <key>')")

    @staticmethod
    def _abort(context, exc: BaseException):
        _, code, message = status_of(exc)
        if code == "INTERNAL":
            log.exception("gRPC handler failed", exc_info=exc)
        context.abort(getattr(grpc.StatusCode, code, grpc.StatusCode.INTERNAL), message)

    def _call(self, context, fn, *, auth: bool = True):
        try:
            if auth:
                self._authorize(context)
            return fn()
        except Exception as exc:  # noqa: BLE001 - every error becomes a status (status_of)
            self._abort(context, exc)

    # -- health and metadata ----------------------------------------------------------------------
    def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)  # liveness never needs a token

    def ServerReady(self, request, context):
        return self._call(context, lambda: pb.ServerReadyResponse(ready=self.health.ready()))

    def ServerMetadata(self, request, context):
        return self._call(
            context,
            lambda: pb.ServerMetadataResponse(
                name=self.server_name, version=__version__, extensions=statistics.server_extensions(SERVER_EXTENSIONS)
            ),
        )

    def ModelReady(self, request, context):
        def ready():
            try:
                self.repository.get(request.name, request.version or None)
            except Exception as exc:
                if status_of(exc)[1] != "UNAVAILABLE":
                    raise  # unknown model/version: NOT_FOUND, as the REST front end's 404
                return pb.ModelReadyResponse(ready=False)
            return pb.ModelReadyResponse(ready=True)

        return self._call(context, ready)

    def ModelMetadata(self, request, context):
        def metadata():
            meta = self.repository.get(request.name, request.version or None).metadata()
            response = pb.ModelMetadataResponse(
                name=meta["name"],
                versions=[str(v) for v in meta.get("versions", [])],
                platform=str(meta.get("platform", "")),
            )
            for field in ("inputs", "outputs"):
                for t in meta.get(field, []):
                    getattr(response, field).add(
                        name=t["name"], datatype=t["datatype"], shape=[int(s) for s in t["shape"]]
                    )
            return response

        return self._call(context, metadata)

    # -- inference --------------------------------------------------------------------------------
    def ModelInfer(self, request, context):
        start = time.perf_counter()
        model_name = "(unknown)"  # a metrics label only for models that exist: random names must not grow it
        record = None
        try:
            self._authorize(context)
            model = self.repository.get(request.model_name, request.model_version or None)
            model_name = model.name
            record = statistics.begin(model, "grpc", context.invocation_metadata)  # stage times; span (traceparent)
            inputs = record.timed_input(decode_inputs, request, self.limits.max_rows)
            wanted = [o.name for o in request.outputs] or None
            outputs = model.infer(inputs, wanted, classification=classification_of(request), record=record)
            response = pb.ModelInferResponse(model_name=model.name, model_version=str(model.version), id=request.id)
            record.timed_output(encode_outputs, response, outputs)
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            code = status_of(exc)[1]
            metrics.observe_request(model_name, "grpc", time.perf_counter() - start, code)
            statistics.end(record, code)
            self._abort(context, exc)
        metrics.observe_request(model_name, "grpc", time.perf_counter() - start)
        statistics.end(record)
        return response

    # -- model repository extension ---------------------------------------------------------------
    def RepositoryIndex(self, request, context):
        def index():
            response = pb.RepositoryIndexResponse()
            for entry in self.repository.index():
                if request.ready and entry.get("state") != "READY":
                    continue
                response.models.add(
                    name=str(entry.get("name", "")),
                    version=str(entry.get("version") or ""),
                    state=str(entry.get("state") or ""),
                    reason=str(entry.get("reason") or ""),
                )
            return response

        return self._call(context, index)

    def RepositoryModelLoad(self, request, context):
        def load():  # parameters "config" (its version_policy) and "version": serve.versions
            options = versions.load_options(versions.grpc_parameters(request.parameters))
            self.repository.load(request.model_name, **options)
            return pb.RepositoryModelLoadResponse()

        return self._call(context, load)

    def RepositoryModelUnload(self, request, context):
        def unload():
            options = versions.unload_options(versions.grpc_parameters(request.parameters))
            self.repository.unload(request.model_name, **options)
            return pb.RepositoryModelUnloadResponse()

        return self._call(context, unload)

    # -- statistics, model configuration and trace extensions (serve.grpc_extensions) -------------
    def ModelStatistics(self, request, context):
        return self._call(context, lambda: grpc_extensions.model_statistics(self.repository, request))

    def ModelConfig(self, request, context):
        return self._call(context, lambda: grpc_extensions.model_config(self.repository, request))

    def TraceSetting(self, request, context):
        return self._call(context, lambda: grpc_extensions.trace_setting(self.repository, request))


def grpc_options(limits: ServeLimits, max_message_bytes: int | None = None) -> list[tuple[str, int]]:
    """grpcio server options enforcing ``limits`` (:mod:`bnc_deploy.serve.limits`)."""
    size = int(max_message_bytes or limits.max_request_bytes)
    ms = lambda seconds: int(seconds * 1000)  # noqa: E731 - gRPC takes milliseconds
    return [
        ("grpc.max_receive_message_length", size),
        ("grpc.max_send_message_length", size),
        ("grpc.so_reuseport", 0),  # a second server on the same port must fail, not share it
        # Refused before the handshake: idle sockets cannot exhaust the descriptors.
        ("grpc.max_allowed_incoming_connections", int(limits.max_connections)),
        ("grpc.server_handshake_timeout_ms", ms(limits.header_timeout)),
        ("grpc.keepalive_time_ms", ms(limits.grpc_keepalive_time)),
        ("grpc.keepalive_timeout_ms", ms(limits.grpc_keepalive_timeout)),
        ("grpc.max_connection_idle_ms", ms(limits.grpc_max_connection_idle)),
        ("grpc.max_connection_age_ms", ms(limits.grpc_max_connection_age)),
        # Calls in flight when a connection reaches its age get the body timeout to finish.
        ("grpc.max_connection_age_grace_ms", ms(limits.body_timeout)),
    ]


def start_grpc_server(
    repository,
    address: str = "127.0.0.1:8001",
    *,
    api_keys=None,
    workers: int = 8,
    max_message_bytes: int | None = None,
    limits: ServeLimits | None = None,
    tls=None,
    health: ServingHealth | None = None,
) -> grpc.Server:
    """Serve ``repository`` over gRPC on ``address`` (``HOST:PORT``; port 0 picks a free one, read
    back from ``server.bound_port``); returns the started server. ``api_keys``: the keys of
    :func:`bnc_deploy.serve.auth.load_api_keys` (None: no authentication). ``workers``: handler
    threads. ``limits``: :class:`~bnc_deploy.serve.limits.ServeLimits` (``max_message_bytes``
    overrides its ``max_request_bytes``). ``tls``: a :class:`~bnc_deploy.serve.tls.TlsConfig`
    (None: plain text). ``health``: the :class:`~bnc_deploy.serve.health.ServingHealth` shared with
    the REST front end (default: one of its own; ``server.health`` either way). Raises
    :class:`~bnc_deploy.errors.ConfigError` when the address cannot be bound."""
    from bnc_deploy.errors import ConfigError

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"gRPC workers must be a positive integer, got {workers!r}")
    limits = limits or ServeLimits()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bnc-grpc"),
        options=grpc_options(limits, max_message_bytes),
        maximum_concurrent_rpcs=None,
    )
    health = health or ServingHealth(repository)
    servicer = InferenceServicer(repository, api_keys=api_keys, limits=limits, health=health)
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(health.servicer(), server)
    try:
        if tls is None:
            port = server.add_insecure_port(address)
        else:
            credentials = grpc.ssl_server_credentials(
                [(tls.key_pem, tls.cert_pem)], root_certificates=tls.client_ca_pem, require_client_auth=tls.mutual
            )
            port = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise ConfigError(f"--grpc {address}: cannot bind ({exc})") from None
    if port == 0:
        raise ConfigError(f"--grpc {address}: cannot bind (address in use or invalid)")
    server.bound_port = port
    server.health = health
    server.start()
    log.info("gRPC listening on %s", address.rsplit(":", 1)[0] + f":{port}")
    return server


__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "InferenceServicer",
    "classification_of",
    "decode_inputs",
    "encode_outputs",
    "grpc_options",
    "start_grpc_server",
    "tensor_from_contents",
]
