"""Generated gRPC code of the Open Inference Protocol ("KServe V2"), package ``inference``.

``grpc_service.proto`` is the protocol's ``inference.GRPCInferenceService`` with Triton's model
repository, statistics, model configuration and trace extensions: names and field numbers of
Triton's ``grpc_service.proto`` (the definition the official ``tritonclient`` is generated from),
restricted to the RPCs bnc-serve implements; ``model_config.proto`` is the subset of Triton's
``model_config.proto`` that ``ModelConfigResponse`` carries. ``grpc_service_pb2.py`` /
``grpc_service_pb2_grpc.py`` / ``model_config_pb2.py`` are generated from them and committed, so
the server needs no code generator at run time. Regenerate them after editing a .proto, from
the repository root, with grpcio-tools 1.74.0 (it bundles protoc for protobuf 6.31.1)::

    python -m venv /tmp/gt && /tmp/gt/bin/pip install grpcio-tools==1.74.0
    /tmp/gt/bin/python -m grpc_tools.protoc -I. --python_out=. bnc_deploy/serve/proto/model_config.proto
    /tmp/gt/bin/python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. \\
        bnc_deploy/serve/proto/grpc_service.proto

(``model_config.proto`` defines no service: no ``_pb2_grpc`` module for it.)

The version matters: generated code refuses a protobuf runtime older than the protoc that wrote
it, and a grpcio older than the grpcio-tools. Generated with 1.74.0, the modules run on
protobuf >= 6.31.1 (6.x and 7.x; protobuf 7 accepts gencode one major older) and grpcio >= 1.74,
which the ``serve`` extra declares. Do not regenerate with a newer grpcio-tools unless the extra's
lower bounds move with it.

The descriptors live in protobuf's default pool under the name
``bnc_deploy/serve/proto/grpc_service.proto`` (and ``.../model_config.proto``), package
``inference``: importing these modules and tritonclient's ``service_pb2`` into one process would
define the ``inference.*`` messages twice, which protobuf refuses. The server never imports
tritonclient (the tests run it in its own venv).
"""
