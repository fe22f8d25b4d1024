"""``bnc-serve``: an Open Inference Protocol (KServe V2) server for exported model files.

Modules, one job each:

* :mod:`~bnc_deploy.serve.errors` - error types with their HTTP status and gRPC code;
* :mod:`~bnc_deploy.serve.protocol` - V2 datatype <-> NumPy tables, shared by REST and gRPC;
* :mod:`~bnc_deploy.serve.model` - one loaded, checked model file (``ServedModel.infer``);
* :mod:`~bnc_deploy.serve.batching` - the opt-in dynamic batcher behind ``infer``;
* :mod:`~bnc_deploy.serve.repository` - the model directory: load, check, atomic swap, poll;
* :mod:`~bnc_deploy.serve.versions` - the layout (flat files, version directories), the version policy;
* :mod:`~bnc_deploy.serve.keys` - which key a signed model file is checked with;
* :mod:`~bnc_deploy.serve.metrics`, :mod:`~bnc_deploy.serve.auth`, :mod:`~bnc_deploy.serve.accesslog`;
* :mod:`~bnc_deploy.serve.limits` - what one client may cost: rows, sizes, timeouts, connections;
* :mod:`~bnc_deploy.serve.connections` - uvicorn's HTTP protocol with header/body timeouts and a
  connection cap;
* :mod:`~bnc_deploy.serve.rest_codec` - the REST infer body to :class:`InferRequest` and back;
* :mod:`~bnc_deploy.serve.app` - the REST front end (an ASGI app on Starlette);
* ``grpc_server`` - the gRPC front end (``inference.GRPCInferenceService``), its statistics, model
  configuration and trace RPCs in :mod:`~bnc_deploy.serve.grpc_extensions`;
* :mod:`~bnc_deploy.serve.tls` - the certificate, key and client CA of both front ends;
* :mod:`~bnc_deploy.serve.health` - ``grpc.health.v1.Health``, readiness and the shutdown sequence;
* :mod:`~bnc_deploy.serve.statistics` - Triton's statistics and model configuration extensions;
* :mod:`~bnc_deploy.serve.tracing` - OpenTelemetry spans and the trace setting (extra ``otel``);
* :mod:`~bnc_deploy.serve.engines` - the same models on KServe, MLServer and Ray Serve.

Stage "serve": may import runtimes, formats, artifacts, reference and the foundations, never
torch, ``train``, ``models`` or ``cli``. Nothing here is imported by the base package, so the
web/gRPC dependencies (extra ``serve``) are needed only to serve.
"""
