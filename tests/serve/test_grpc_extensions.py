"""Triton's statistics, model configuration and trace extensions over gRPC
(bnc_deploy/serve/grpc_extensions.py), with the generated stub (no tritonclient needed).

``ModelStatistics`` and ``ModelConfig`` answer what REST answers, message for JSON (every model,
one, one version); ``TraceSetting`` reads, updates and clears (an empty value list) the settings
REST reads; unknown models and versions are NOT_FOUND, bad settings INVALID_ARGUMENT, a missing
token UNAUTHENTICATED. tritonclient's own calls over gRPC: test_statistics.py, test_tracing.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("starlette", reason="bnc-serve needs the 'serve' extra")
pytest.importorskip("starlette.testclient", reason="Starlette's TestClient needs httpx2 (extra 'test')")
grpc = pytest.importorskip("grpc", reason="the 'serve' extra (grpcio) is not installed")

import serve_support as ss
from google.protobuf import json_format
from starlette.testclient import TestClient

from bnc_deploy.serve import tracing
from bnc_deploy.serve.app import create_app
from bnc_deploy.serve.grpc_extensions import trace_changes
from bnc_deploy.serve.grpc_server import start_grpc_server
from bnc_deploy.serve.proto import grpc_service_pb2 as pb
from bnc_deploy.serve.proto import grpc_service_pb2_grpc as pb_grpc
from bnc_deploy.serve.proto import model_config_pb2

KEY = b"grpc-extensions-key-0123456789ab"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(files, repository, stub, secured stub, REST client)`` over one repository."""
    with ss.loaded_repository(tmp_path_factory.mktemp("grpc_extensions") / "repo") as (files, repository):
        server = start_grpc_server(repository, "127.0.0.1:0", workers=2)
        secured = start_grpc_server(repository, "127.0.0.1:0", workers=2, api_keys=[KEY])
        channel = grpc.insecure_channel(f"127.0.0.1:{server.bound_port}")
        secured_channel = grpc.insecure_channel(f"127.0.0.1:{secured.bound_port}")
        try:
            with TestClient(create_app(repository, access_log=False, close_repository=False)) as rest:
                stub = pb_grpc.GRPCInferenceServiceStub(channel)
                yield files, repository, stub, pb_grpc.GRPCInferenceServiceStub(secured_channel), rest
        finally:
            channel.close()
            secured_channel.close()
            server.stop(1).wait()
            secured.stop(1).wait()


@pytest.fixture
def clean_trace_settings():
    tracing.STATE.reset()
    try:
        yield
    finally:
        tracing.STATE.reset()


def _code(call):
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


def _infer(stub, name: str, x: np.ndarray) -> None:
    request = pb.ModelInferRequest(model_name=name)
    request.inputs.add(name="x", datatype="INT64", shape=list(x.shape))
    request.raw_input_contents.append(x.tobytes())
    stub.ModelInfer(request)


def _trace_request(model: str = "", **settings) -> pb.TraceSettingRequest:
    request = pb.TraceSettingRequest(model_name=model)
    for key, values in settings.items():
        request.settings[key].value.extend(values)
    return request


def _as_rest(response: pb.TraceSettingResponse) -> dict:
    """A TraceSettingResponse as REST writes the settings (``trace_level`` a list, the others strings)."""
    return {k: list(v.value) if k == "trace_level" else v.value[0] for k, v in response.settings.items()}


def test_statistics_and_config_are_the_rest_answers(served):
    files, repository, stub, _, rest = served
    for name in ("nb_onnx", "tan_onnx"):
        _infer(stub, name, ss.valid_rows(files[name], n=3))
    version = repository.get("tan_onnx").version
    for request, path in (
        (pb.ModelStatisticsRequest(), "/v2/models/stats"),
        (pb.ModelStatisticsRequest(name="tan_onnx"), "/v2/models/tan_onnx/stats"),
        (pb.ModelStatisticsRequest(name="tan_onnx", version=version), f"/v2/models/tan_onnx/versions/{version}/stats"),
    ):
        answer = stub.ModelStatistics(request)
        assert answer == json_format.ParseDict(rest.get(path).json(), pb.ModelStatisticsResponse()), path
    (entry,) = stub.ModelStatistics(pb.ModelStatisticsRequest(name="nb_onnx")).model_stats
    assert (entry.inference_count, entry.execution_count, entry.inference_stats.success.count) == (3, 1, 1)
    assert entry.inference_stats.compute_infer.ns > 0 and entry.last_inference > 0
    assert not entry.batch_stats and not entry.memory_usage and not entry.response_stats
    for name in files:
        config = stub.ModelConfig(pb.ModelConfigRequest(name=name)).config
        want = json_format.ParseDict({"config": rest.get(f"/v2/models/{name}/config").json()}, pb.ModelConfigResponse())
        assert config == want.config, name
    config = stub.ModelConfig(pb.ModelConfigRequest(name="nb_onnx", version=repository.get("nb_onnx").version)).config
    assert [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in config.output] == [
        ("log_joint", "TYPE_FP32", [-1, files["nb_onnx"].artifact.n_classes]),
        ("label", "TYPE_INT64", [-1]),
    ]
    assert config.parameters["runtime"].string_value == "onnxruntime" and config.backend == "onnxruntime"


def test_unknown_models_are_not_found(served):
    _, _, stub, _, _ = served
    for call in (
        lambda: stub.ModelStatistics(pb.ModelStatisticsRequest(name="no_such_model")),
        lambda: stub.ModelStatistics(pb.ModelStatisticsRequest(name="nb_onnx", version="000000000000")),
        lambda: stub.ModelConfig(pb.ModelConfigRequest(name="no_such_model")),
        lambda: stub.ModelConfig(pb.ModelConfigRequest(name="nb_onnx", version="000000000000")),
        lambda: stub.ModelConfig(pb.ModelConfigRequest()),
        lambda: stub.TraceSetting(_trace_request("no_such_model")),
        lambda: stub.TraceSetting(_trace_request("no_such_model", trace_rate=["2"])),
    ):
        code, message = _code(call)
        assert code == grpc.StatusCode.NOT_FOUND and message, message


def test_trace_settings_read_update_and_clear_as_rest(served, clean_trace_settings):
    _, _, stub, _, rest = served
    assert _as_rest(stub.TraceSetting(_trace_request())) == rest.get("/v2/trace/setting").json()
    own = stub.TraceSetting(_trace_request("tan_onnx", trace_rate=["3"], trace_count=["5"]))
    assert _as_rest(own) == rest.get("/v2/models/tan_onnx/trace/setting").json()
    assert (own.settings["trace_rate"].value, own.settings["trace_count"].value) == (["3"], ["5"])
    assert list(own.settings["trace_level"].value) == ["OFF"] and own.settings["trace_mode"].value == ["opentelemetry"]
    assert rest.get("/v2/trace/setting").json()["trace_rate"] == "1"  # the model's own, not the global one
    glob = stub.TraceSetting(_trace_request(trace_count=["7"], trace_mode=["opentelemetry"]))
    assert glob.settings["trace_count"].value == ["7"]
    cleared = stub.TraceSetting(_trace_request("tan_onnx", trace_rate=[], trace_count=[]))  # tritonclient's None
    assert _as_rest(cleared) == _as_rest(stub.TraceSetting(_trace_request()))  # back to the global settings
    assert _as_rest(stub.TraceSetting(_trace_request(trace_count=[]))) == {**_as_rest(glob), "trace_count": "-1"}


def test_bad_trace_settings_are_invalid_argument_and_change_nothing(served, clean_trace_settings):
    _, _, stub, _, _ = served
    before = _as_rest(stub.TraceSetting(_trace_request()))
    for settings in (
        {"trace_level": ["TENSORS"]},
        {"trace_rate": ["0"]},
        {"trace_rate": ["2", "3"]},
        {"trace_count": ["x"]},
        {"trace_file": ["f"]},
        {"trace_rate": ["2"], "trace_level": ["BOGUS"]},  # all or nothing: the good rate is not kept
        {"trace_mode": ["triton"]},
    ):
        code, message = _code(lambda settings=settings: stub.TraceSetting(_trace_request(**settings)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and message, settings
        code, _ = _code(lambda settings=settings: stub.TraceSetting(_trace_request("nb_onnx", **settings)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, settings
    assert _as_rest(stub.TraceSetting(_trace_request())) == before


def test_a_level_where_spans_cannot_be_made_is_invalid_argument(served, clean_trace_settings, monkeypatch):
    _, _, stub, _, rest = served
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    code, message = _code(lambda: stub.TraceSetting(_trace_request(trace_level=["TIMESTAMPS"])))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "OTEL_SDK_DISABLED" in message
    answer = _as_rest(stub.TraceSetting(_trace_request()))
    assert answer == rest.get("/v2/trace/setting").json() and answer["trace_available"] == "false"
    assert "trace" not in stub.ServerMetadata(pb.ServerMetadataRequest()).extensions
    assert not tracing.STATE.active


def test_the_extension_rpcs_need_the_token(served):
    _, _, _, secured, _ = served
    good = [("authorization", "Bearer " + KEY.decode())]
    for call in (
        lambda md: secured.ModelStatistics(pb.ModelStatisticsRequest(), metadata=md),
        lambda md: secured.ModelConfig(pb.ModelConfigRequest(name="nb_onnx"), metadata=md),
        lambda md: secured.TraceSetting(_trace_request(), metadata=md),
    ):
        assert _code(lambda call=call: call(None))[0] == grpc.StatusCode.UNAUTHENTICATED
        call(good)


def test_trace_changes_are_the_rest_update():
    request = _trace_request(trace_level=["TIMESTAMPS"], trace_rate=["2"], trace_count=[], trace_mode=["a", "b"])
    assert trace_changes(request) == {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "2",
        "trace_count": None,
        "trace_mode": ["a", "b"],
    }
    assert trace_changes(pb.TraceSettingRequest(model_name="m")) == {}
    assert json.loads(json.dumps(trace_changes(_trace_request(trace_level=[])))) == {"trace_level": None}
