"""A Ray Serve deployment of a model directory, speaking V2 over HTTP and gRPC, with ``@serve.batch``.

::

    python -m bnc_deploy.serve.engines.rayserve --repository models/ [--http 127.0.0.1:8000]
        [--grpc 127.0.0.1:9000] [--max-batch-size 32] [--batch-wait-timeout-s 0.002]

starts a local Ray instance and Serve, deploys :class:`V2Deployment` as the one application and
blocks until SIGTERM/SIGINT (then shuts Serve and Ray down). On a running cluster, ``serve run``
or ``serve deploy`` a config naming :func:`build_app` (``import_path:
bnc_deploy.serve.engines.rayserve:build_app``, ``args: {repository: /models}``) and, for gRPC,
``grpc_options.grpc_servicer_functions`` ``[bnc_deploy.serve.proto.grpc_service_pb2_grpc.
add_GRPCInferenceServiceServicer_to_server]``: see docs/guide/engines.md.

Ray Serve has no V2 protocol of its own, so the deployment answers it with bnc-serve's parts:
the model directory is a :class:`~bnc_deploy.serve.repository.ModelRepository` (each file a
checked :class:`~bnc_deploy.serve.model.ServedModel`), REST bodies go through
:mod:`~bnc_deploy.serve.rest_codec` (JSON and the binary tensor extension) and gRPC messages
(Triton's ``inference.GRPCInferenceService``, routed by Ray's gRPC proxy to the methods of the same
name) through :mod:`~bnc_deploy.serve.grpc_server`'s decode/encode functions. Routes: health,
server and model metadata, model ready, infer (a model's latest version, or the version named);
no repository extension (Ray Serve redeploys instead). Errors are bnc-serve's
(:func:`~bnc_deploy.serve.errors.status_of`): HTTP status with ``{"error": message}``, on gRPC the
status code set on Ray's ``grpc_context``.

Batching: requests queue in ``@serve.batch`` (``max_batch_size`` requests, waiting at most
``batch_wait_timeout_s``); each batch runs one :meth:`ServedModel.infer` per model and request
shape (same outputs and classification) over the requests' rows concatenated, split back by rows.
If that call fails (one request's bad row), each request of the group runs alone, so a bad request
fails alone. Results are those of unbatched calls for exact files, as with bnc-serve's batcher.
Tested with ray[serve] 2.60 (in the project's environment: extra ``ray-serve``).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import threading

import numpy as np

from bnc_deploy.serve.errors import ModelNotFound, status_of
from bnc_deploy.serve.protocol import SERVER_NAME
from bnc_deploy.serve.repository import ModelRepository
from bnc_deploy.serve.rest_codec import encode_infer_body, parse_infer_request
from bnc_deploy.version import __version__

log = logging.getLogger("bnc_deploy.serve")

#: What this front end implements of the V2 protocol's extensions (no repository extension).
EXTENSIONS = ("binary_tensor_data", "classification")
#: The gRPC servicer function a Serve config's ``grpc_options`` names.
GRPC_SERVICER = "bnc_deploy.serve.proto.grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server"
_ROUTE = re.compile(r"^/v2(?:/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?(?P<action>/ready|/infer)?)?/?$")
_JSON = {"content-type": "application/json"}


def _json(obj, status: int = 200) -> tuple[int, list[bytes], dict]:
    return status, [json.dumps(obj, separators=(",", ":")).encode()], _JSON


def _status(exc: BaseException) -> tuple[int, str, str]:
    """:func:`status_of`, logging the traceback of an internal error (the client gets a generic message)."""
    status, code, message = status_of(exc)
    if code == "INTERNAL":
        log.error("internal error", exc_info=exc)
    return status, code, message


class V2Deployment:
    """The V2 protocol over one model directory (see the module docstring); the class that
    ``serve.deployment`` wraps."""

    def __init__(
        self,
        repository: str,
        *,
        runtime: str | None = None,
        threads: int | None = None,
        max_batch_size: int = 32,
        batch_wait_timeout_s: float = 0.002,
        max_rows: int = 1 << 20,
    ) -> None:
        from ray import serve  # lazy: the optional engine

        self.repository = ModelRepository(repository, runtime=runtime, threads=threads)
        self.repository.load_all()
        self.max_rows = max_rows
        # Decorated here rather than at the class: the batch settings are the application's arguments.
        self._batched = serve.batch(max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_timeout_s)(
            self._run_batch
        )

    # -- batching -----------------------------------------------------------------------------------
    async def _run_batch(self, calls: list[tuple]) -> list:
        """``[(model, inputs, names, classification)]`` -> each call's outputs or exception."""
        results: list = [None] * len(calls)
        groups: dict[tuple, list[int]] = {}
        for i, (model, inputs, names, classification) in enumerate(calls):
            key = (id(model), tuple(sorted(inputs)), tuple(names or ()), repr(classification))
            groups.setdefault(key, []).append(i)
        for members in groups.values():
            model, inputs, names, classification = calls[members[0]]
            try:
                joined = {k: np.concatenate([calls[i][1][k] for i in members]) for k in inputs}
                outputs = model.infer(joined, names, classification=classification)
            except Exception as exc:  # noqa: BLE001 - handed back to the callers, never raised here
                # One bad request (a row out of range, another width): each runs alone, fails alone.
                for i in members:
                    results[i] = exc if len(members) == 1 else self._alone(calls[i])
                continue
            start = 0
            for i in members:
                rows = max(len(a) for a in calls[i][1].values())
                results[i] = [(n, a[start : start + rows]) for n, a in outputs]
                start += rows
        return results

    @staticmethod
    def _alone(call: tuple):
        model, inputs, names, classification = call
        try:
            return model.infer(inputs, names, classification=classification)
        except Exception as exc:  # noqa: BLE001 - handed back to that request's caller
            return exc

    async def _infer(self, model, inputs: dict, names, classification) -> list:
        outputs = await self._batched((model, inputs, names, classification))
        if isinstance(outputs, Exception):
            raise outputs
        return outputs

    # -- HTTP -----------------------------------------------------------------------------------------
    async def __call__(self, request):
        """Ray Serve's HTTP entry: the V2 REST routes (a Starlette request -> response)."""
        from starlette.responses import Response  # Ray Serve's HTTP proxy runs on Starlette

        try:
            status, chunks, headers = await self._http(request)
        except Exception as exc:  # noqa: BLE001 - every error becomes its status
            status, _, message = _status(exc)
            status, chunks, headers = _json({"error": message}, status)
        return Response(b"".join(chunks), status_code=status, headers=dict(headers))

    async def _http(self, request) -> tuple[int, list[bytes], dict]:
        path = request.url.path[len(request.scope.get("root_path", "")) :] or "/"
        if path in ("/v2/health/live", "/v2/health/ready"):
            ready = path.endswith("live") or self.repository.ready()
            return 200 if ready else 503, [b""], {}
        match = _ROUTE.match(path)
        if match is None:
            raise ModelNotFound(f"no route {request.method} {path}")
        name, version, action = match.group("model", "version", "action")
        if name is None:
            return _json({"name": SERVER_NAME, "version": __version__, "extensions": list(EXTENSIONS)})
        model = self.repository.get(name, version)
        if action is None:
            return _json(model.metadata())
        if action == "/ready":
            return 200, [b""], {}
        body = await request.body()
        req = parse_infer_request(body, request.headers.get("inference-header-content-length"), self.max_rows)
        outputs = await self._infer(model, req.inputs, req.output_names or None, req.classification)
        status, chunks, head = encode_infer_body(model.name, str(model.version), req, outputs)
        return status, chunks, {k.decode(): v.decode() for k, v in head}

    # -- gRPC (inference.GRPCInferenceService, routed here by method name) ---------------------------------
    @staticmethod
    def _failed(grpc_context, exc: BaseException, empty):
        import grpc

        _, code, message = _status(exc)
        grpc_context.set_code(getattr(grpc.StatusCode, code, grpc.StatusCode.INTERNAL))
        grpc_context.set_details(message)
        return empty

    async def ServerLive(self, request):
        from bnc_deploy.serve.proto import grpc_service_pb2 as pb

        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request):
        from bnc_deploy.serve.proto import grpc_service_pb2 as pb

        return pb.ServerReadyResponse(ready=self.repository.ready())

    async def ServerMetadata(self, request):
        from bnc_deploy.serve.proto import grpc_service_pb2 as pb

        return pb.ServerMetadataResponse(name=SERVER_NAME, version=__version__, extensions=list(EXTENSIONS))

    async def ModelReady(self, request, grpc_context=None):
        from bnc_deploy.serve.proto import grpc_service_pb2 as pb

        try:
            self.repository.get(request.name, request.version or None)
        except Exception as exc:  # noqa: BLE001 - not ready is an answer; unknown is NOT_FOUND
            if status_of(exc)[1] == "UNAVAILABLE":
                return pb.ModelReadyResponse(ready=False)
            return self._failed(grpc_context, exc, pb.ModelReadyResponse())
        return pb.ModelReadyResponse(ready=True)

    async def ModelMetadata(self, request, grpc_context=None):
        from bnc_deploy.serve.proto import grpc_service_pb2 as pb

        try:
            meta = self.repository.get(request.name, request.version or None).metadata()
        except Exception as exc:  # noqa: BLE001 - every error becomes its status
            return self._failed(grpc_context, exc, pb.ModelMetadataResponse())
        response = pb.ModelMetadataResponse(name=meta["name"], versions=meta["versions"], platform=meta["platform"])
        for field in ("inputs", "outputs"):
            for t in meta[field]:
                getattr(response, field).add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        return response

    async def ModelInfer(self, request, grpc_context=None):
        from bnc_deploy.serve.grpc_server import classification_of, decode_inputs, encode_outputs
        from bnc_deploy.serve.proto import grpc_service_pb2 as pb

        try:
            model = self.repository.get(request.model_name, request.model_version or None)
            inputs = decode_inputs(request, self.max_rows)
            names = [o.name for o in request.outputs] or None
            outputs = await self._infer(model, inputs, names, classification_of(request))
        except Exception as exc:  # noqa: BLE001 - every error becomes its status
            return self._failed(grpc_context, exc, pb.ModelInferResponse())
        response = pb.ModelInferResponse(model_name=model.name, model_version=str(model.version), id=request.id)
        encode_outputs(response, outputs)
        return response


def build_app(args: dict):
    """The Serve application (an app builder: ``serve run bnc_deploy.serve.engines.rayserve:build_app
    repository=models``): ``args`` are :class:`V2Deployment`'s keyword arguments, ``repository``
    required; ``num_replicas`` (default 1) is the deployment's."""
    from ray import serve  # lazy: the optional engine

    options = dict(args)
    replicas = int(options.pop("num_replicas", 1))
    for key, cast in (("threads", int), ("max_batch_size", int), ("batch_wait_timeout_s", float), ("max_rows", int)):
        if isinstance(options.get(key), str):
            options[key] = cast(options[key])  # `serve run ... key=value` passes strings
    repository = options.pop("repository")
    # Ray's default of 5 requests in flight per replica would cap every batch at 5.
    ongoing = 2 * int(options.get("max_batch_size", 32))
    deployment = serve.deployment(V2Deployment, name="bnc-serve", num_replicas=replicas, max_ongoing_requests=ongoing)
    return deployment.bind(repository, **options)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> None:
    """``python -m bnc_deploy.serve.engines.rayserve``: a local Ray instance, Serve on the given
    addresses, :func:`build_app` deployed; runs until SIGTERM/SIGINT."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bnc_deploy.serve.engines.rayserve",
        description="Serve exported bnc-deploy models with Ray Serve (V2 REST and gRPC, @serve.batch).",
    )
    parser.add_argument("--repository", required=True, help="folder of model files")
    parser.add_argument("--http", default="127.0.0.1:8000", help="HOST:PORT of Serve's HTTP proxy")
    parser.add_argument("--grpc", default=None, help="HOST:PORT... only the port is used: Serve's gRPC proxy")
    parser.add_argument("--runtime", default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--batch-wait-timeout-s", type=float, default=0.002)
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray instance")
    args = parser.parse_args(argv)

    import ray  # lazy: the optional engine
    from ray import serve

    ray.init(num_cpus=args.num_cpus, include_dashboard=False)
    host, port = _address(args.http)
    grpc_options = {"port": _address(args.grpc)[1], "grpc_servicer_functions": [GRPC_SERVICER]} if args.grpc else None
    serve.start(http_options={"host": host, "port": port}, grpc_options=grpc_options)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        app_args = {"repository": args.repository, "max_batch_size": args.max_batch_size}
        app_args.update(batch_wait_timeout_s=args.batch_wait_timeout_s, runtime=args.runtime, threads=args.threads)
        serve.run(build_app(app_args), name="bnc-serve", route_prefix="/")
        print(f"ready: http://{host}:{port}" + (f", gRPC {args.grpc}" if args.grpc else ""), flush=True)
        stop.wait()
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()


__all__ = ["EXTENSIONS", "GRPC_SERVICER", "V2Deployment", "build_app", "main"]
