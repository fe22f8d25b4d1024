"""The gRPC front end with the generated stub (no tritonclient needed): typed and raw contents,
the message checks, auth metadata, the message size limit, UNIMPLEMENTED for RPCs left out, and
the generated code against the protobuf/grpcio the ``serve`` extra allows."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

grpc = pytest.importorskip("grpc", reason="the 'serve' extra (grpcio) is not installed")

from serve_support import build_repository, valid_rows

from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.serve.grpc_server import start_grpc_server
from bnc_deploy.serve.proto import grpc_service_pb2 as pb
from bnc_deploy.serve.proto import grpc_service_pb2_grpc as pb_grpc
from bnc_deploy.serve.repository import ModelRepository

ROOT = Path(__file__).resolve().parents[2]
KEY = b"grpc-test-key-0123456789abcdef"


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc") / "repo"
    models = build_repository(root, tflite=False)
    repo = ModelRepository(root)
    repo.load_all()
    server = start_grpc_server(repo, "127.0.0.1:0", max_message_bytes=1 << 20)
    secured = start_grpc_server(repo, "127.0.0.1:0", api_keys=[KEY])
    channel = grpc.insecure_channel(
        f"127.0.0.1:{server.bound_port}", options=[("grpc.max_send_message_length", 8 << 20)]
    )
    secured_channel = grpc.insecure_channel(f"127.0.0.1:{secured.bound_port}")
    try:
        yield (
            pb_grpc.GRPCInferenceServiceStub(channel),
            pb_grpc.GRPCInferenceServiceStub(secured_channel),
            channel,
            models,
        )
    finally:
        channel.close()
        secured_channel.close()
        server.stop(1).wait()
        secured.stop(1).wait()
        repo.close()


def _request(model, x, *, raw=True, datatype="INT64", outputs=()):
    req = pb.ModelInferRequest(model_name=model, id="req-1")
    tensor = req.inputs.add(name="x", datatype=datatype, shape=list(x.shape))
    if raw:
        req.raw_input_contents.append(np.ascontiguousarray(x).tobytes())
    else:
        field = {"INT64": "int64_contents", "INT32": "int_contents", "FP32": "fp32_contents"}[datatype]
        getattr(tensor.contents, field).extend(x.reshape(-1).tolist())
    for name in outputs:
        req.outputs.add(name=name)
    return req


def _outputs(response):
    types = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64}
    return {
        t.name: np.frombuffer(raw, types[t.datatype]).reshape(tuple(t.shape))
        for t, raw in zip(response.outputs, response.raw_output_contents)
    }


def _code(call):
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


def test_raw_and_typed_contents_give_the_local_runtime_outputs(stub):
    client, _, _, models = stub
    for name in ("nb_onnx", "tan_onnx", "dnn_onnx", "nb_bnc", "raw_onnx"):
        model = models[name]
        x = valid_rows(model, n=9, seed=3)
        scores, label = load_runtime(model.path).run(x)
        datatype = "FP32" if x.dtype.kind == "f" else "INT64"
        for raw in (True, False):
            response = client.ModelInfer(_request(name, x, raw=raw, datatype=datatype))
            out = _outputs(response)
            assert response.model_name == name and response.id == "req-1" and len(response.model_version) == 12
            assert len(response.raw_output_contents) == len(response.outputs) == 2
            scores_name = "logits" if name.startswith("dnn") else "log_joint"
            assert list(out) == [scores_name, "label"]
            assert np.array_equal(out[scores_name].astype(np.float64), scores), name
            assert np.array_equal(out["label"], label), name
    # INT32 typed contents of codes: the same answer
    x = valid_rows(models["nb_onnx"], n=4)
    out = _outputs(
        client.ModelInfer(_request("nb_onnx", x.astype(np.int32), raw=False, datatype="INT32", outputs=["label"]))
    )
    assert list(out) == ["label"] and np.array_equal(out["label"], load_runtime(models["nb_onnx"].path).run(x)[1])


def test_malformed_requests_are_invalid_argument_with_a_reason(stub):
    client, _, _, models = stub
    x = valid_rows(models["nb_onnx"], n=3)
    d = x.shape[1]

    req = _request("nb_onnx", x)
    req.raw_input_contents[0] = req.raw_input_contents[0][:-1]  # one byte short
    code, details = _code(lambda: client.ModelInfer(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "bytes" in details

    req = _request("nb_onnx", x)
    req.raw_input_contents.append(b"\0" * 8)  # more buffers than inputs
    code, details = _code(lambda: client.ModelInfer(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "raw_input_contents" in details

    req = _request("nb_onnx", x, raw=False)
    req.inputs[0].contents.fp32_contents.append(1.0)  # a second, wrong contents field
    code, details = _code(lambda: client.ModelInfer(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "int64_contents" in details

    req = _request("nb_onnx", x, raw=False)
    del req.inputs[0].contents.int64_contents[-1]  # count != prod(shape)
    code, details = _code(lambda: client.ModelInfer(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and f"{3 * d}" in details

    bad = x.copy()
    bad[1, 2] = 1000
    code, details = _code(lambda: client.ModelInfer(_request("nb_onnx", bad)))
    assert (
        code == grpc.StatusCode.INVALID_ARGUMENT and "feature 2" in details and "row 1" in details and "1000" in details
    )

    req = _request("nb_onnx", x.astype(np.int32), raw=False, datatype="INT32")
    req.inputs[0].contents.int_contents[0] = 2**31 - 1  # fits INT32, far outside the feature's range
    code, details = _code(lambda: client.ModelInfer(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "feature 0" in details

    req = _request("nb_onnx", x)
    req.inputs.add(name="x", datatype="INT64", shape=list(x.shape))
    req.raw_input_contents.append(x.tobytes())
    code, details = _code(lambda: client.ModelInfer(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "twice" in details

    req = _request("nb_onnx", x)
    req.inputs[0].datatype = "INT128"
    code, details = _code(lambda: client.ModelInfer(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "INT128" in details

    req = _request("nb_onnx", x, outputs=["log_joint"])
    req.outputs[0].parameters["classification"].string_param = "two"
    code, details = _code(lambda: client.ModelInfer(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "classification" in details

    code, details = _code(lambda: client.ModelInfer(_request("missing", x)))
    assert code == grpc.StatusCode.NOT_FOUND and "missing" in details
    code, _ = _code(lambda: client.ModelMetadata(pb.ModelMetadataRequest(name="missing")))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = _code(lambda: client.ModelReady(pb.ModelReadyRequest(name="nb_onnx", version="ffffffffffff")))
    assert code == grpc.StatusCode.NOT_FOUND


def test_classification_parameter_on_the_request_or_the_output(stub):
    client, _, _, models = stub
    x = valid_rows(models["nb_onnx"], n=5)
    rt = load_runtime(models["nb_onnx"].path)
    _, label = rt.run(x)
    req = _request("nb_onnx", x, outputs=["label"])
    req.parameters["classification"].int64_param = 1
    response = client.ModelInfer(req)
    assert [(t.name, t.datatype, list(t.shape)) for t in response.outputs] == [("label", "BYTES", [5])]
    from bnc_deploy.serve.protocol import deserialize_bytes

    names = [b.decode() for b in deserialize_bytes(response.raw_output_contents[0])]
    assert names == [rt.class_names[k] for k in label]
    req = _request("nb_onnx", x, outputs=["log_joint", "label"])
    req.outputs[0].parameters["classification"].int64_param = 3  # only the scores output
    response = client.ModelInfer(req)
    assert [(t.datatype, list(t.shape)) for t in response.outputs] == [("BYTES", [5, 3]), ("INT64", [5])]


def test_health_metadata_and_repository_rpcs(stub):
    client, _, _, models = stub
    assert client.ServerLive(pb.ServerLiveRequest()).live
    assert client.ServerReady(pb.ServerReadyRequest()).ready
    meta = client.ServerMetadata(pb.ServerMetadataRequest())
    assert meta.name == "bnc-serve" and "model_repository" in meta.extensions
    m = client.ModelMetadata(pb.ModelMetadataRequest(name="dnn_onnx"))
    assert [(t.name, t.datatype, list(t.shape)) for t in m.outputs] == [
        ("logits", "FP32", [-1, 3]),
        ("label", "INT64", [-1]),
    ]
    index = {e.name: e for e in client.RepositoryIndex(pb.RepositoryIndexRequest()).models}
    assert set(index) == set(models) and all(e.state == "READY" for e in index.values())
    assert client.ModelReady(pb.ModelReadyRequest(name="tan_onnx", version=index["tan_onnx"].version)).ready
    client.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="tan_onnx"))
    try:
        assert not client.ModelReady(pb.ModelReadyRequest(name="tan_onnx")).ready
        ready_only = {e.name for e in client.RepositoryIndex(pb.RepositoryIndexRequest(ready=True)).models}
        assert "tan_onnx" not in ready_only and "nb_onnx" in ready_only
        code, _ = _code(lambda: client.ModelInfer(_request("tan_onnx", valid_rows(models["tan_onnx"]))))
        assert code == grpc.StatusCode.UNAVAILABLE
    finally:
        client.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="tan_onnx"))
    assert client.ModelReady(pb.ModelReadyRequest(name="tan_onnx")).ready
    code, _ = _code(lambda: client.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="no_such_file")))
    assert code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)


def test_rpcs_left_out_are_unimplemented_and_big_messages_exhausted(stub):
    client, _, channel, models = stub
    call = channel.unary_unary(  # shared memory: in Triton's service, not in ours
        "/inference.GRPCInferenceService/SystemSharedMemoryStatus",
        request_serializer=lambda m: b"",
        response_deserializer=lambda b: b,
    )
    code, _ = _code(lambda: call(None))
    assert code == grpc.StatusCode.UNIMPLEMENTED
    # Statistics answer now (test_grpc_extensions.py checks them), as the metadata advertises.
    (entry,) = client.ModelStatistics(pb.ModelStatisticsRequest(name="nb_onnx")).model_stats
    assert entry.name == "nb_onnx" and "statistics" in client.ServerMetadata(pb.ServerMetadataRequest()).extensions
    d = len(models["nb_onnx"].artifact.cardinalities)
    big = np.zeros(((1 << 20) // (8 * d) + 10, d), dtype=np.int64)  # just over the server's 1 MiB limit
    code, _ = _code(lambda: client.ModelInfer(_request("nb_onnx", big)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert client.ServerLive(pb.ServerLiveRequest()).live  # still serving


def test_bearer_token_on_every_rpc_but_liveness(stub):
    _, secured, _, models = stub
    assert secured.ServerLive(pb.ServerLiveRequest()).live
    x = valid_rows(models["nb_onnx"], n=2)
    for call in (
        lambda md: secured.ServerReady(pb.ServerReadyRequest(), metadata=md),
        lambda md: secured.ModelInfer(_request("nb_onnx", x), metadata=md),
        lambda md: secured.RepositoryIndex(pb.RepositoryIndexRequest(), metadata=md),
    ):
        for md in (None, [("authorization", "Bearer wrong-wrong-wrong-wrong")], [("authorization", KEY.decode())]):
            code, _ = _code(lambda call=call, md=md: call(md))
            assert code == grpc.StatusCode.UNAUTHENTICATED
        call([("authorization", f"Bearer {KEY.decode()}")])  # accepted


def test_generated_code_matches_the_serve_extra_lower_bounds():
    """The committed modules check protobuf >= the protoc that wrote them and grpcio >= the
    grpcio-tools: the ``serve`` extra must not allow older ones."""
    proto_dir = ROOT / "bnc_deploy" / "serve" / "proto"
    text = (proto_dir / "grpc_service_pb2.py").read_text()
    gen = tuple(int(v) for v in re.search(r"Protobuf Python Version: (\d+)\.(\d+)\.(\d+)", text).groups())
    grpc_gen = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", (proto_dir / "grpc_service_pb2_grpc.py").read_text())
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("serve", "all"):
        reqs = {re.split(r"[<>=\[ ]", r, maxsplit=1)[0]: r for r in extras[extra]}
        low = _version(re.search(r">=([\d.]+)", reqs["protobuf"]).group(1))
        assert low >= gen, f"[{extra}] allows protobuf {low} older than the gencode {gen}"
        grpc_low = _version(re.search(r">=([\d.]+)", reqs["grpcio"]).group(1))
        assert grpc_low >= _version(grpc_gen.group(1)), f"[{extra}] allows grpcio {grpc_low} older than the gencode"


def _version(text: str) -> tuple[int, int, int]:
    parts = [int(v) for v in text.split(".")][:3]
    return tuple(parts + [0] * (3 - len(parts)))


def test_an_address_in_use_is_a_config_error(tmp_path):
    import socket

    from bnc_deploy.errors import ConfigError

    repo = ModelRepository(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(ConfigError, match="cannot bind"):
            start_grpc_server(repo, f"127.0.0.1:{s.getsockname()[1]}")
    with pytest.raises(ConfigError, match="workers"):
        start_grpc_server(repo, "127.0.0.1:0", workers=0)
