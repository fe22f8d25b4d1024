"""Triton's statistics and model configuration extensions (bnc_deploy/serve/statistics.py).

Counts and cumulative stage times grow on success and failure, over REST and gRPC; a batch of
requests is one execution; unknown models and versions are 404; the model configuration matches
the model's tensors; both front ends' server metadata advertise both extensions; tritonclient's
own ``get_inference_statistics`` / ``get_model_config`` read the REST and the gRPC answers, which
agree (the gRPC RPCs themselves: test_grpc_extensions.py).
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

pytest.importorskip("starlette", reason="bnc-serve needs the 'serve' extra")
pytest.importorskip("starlette.testclient", reason="Starlette's TestClient needs httpx2 (extra 'test')")
grpc = pytest.importorskip("grpc", reason="the 'serve' extra (grpcio) is not installed")

import serve_support as ss
import uvicorn
from google.protobuf import json_format
from starlette.testclient import TestClient

from bnc_deploy.serve import statistics
from bnc_deploy.serve.app import create_app
from bnc_deploy.serve.grpc_server import InferenceServicer, start_grpc_server
from bnc_deploy.serve.model import ServedModel
from bnc_deploy.serve.proto import grpc_service_pb2 as pb
from bnc_deploy.serve.proto import grpc_service_pb2_grpc as pb_grpc
from bnc_deploy.serve.repository import ModelRepository

STAGES = ("queue", "compute_input", "compute_infer", "compute_output")


class InProcessServer:
    """REST (uvicorn in a thread) and gRPC on free loopback ports, in the test's own process, so
    that a test reads the counters and spans the tritonclient driver's requests leave behind."""

    def __init__(self, repository) -> None:
        self.http_port = ss.free_port()
        app = create_app(repository, access_log=False, close_repository=False, threads=2)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.http_port, log_level="warning", lifespan="on")
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.uvicorn.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        self.grpc = start_grpc_server(repository, "127.0.0.1:0", workers=2)
        self.grpc_address = f"127.0.0.1:{self.grpc.bound_port}"

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(30)
        self.grpc.stop(1).wait()


def infer_body(x: np.ndarray) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "x", "datatype": "INT64", "shape": list(x.shape), "data": x.ravel().tolist()}]}
    ).encode()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with ss.loaded_repository(tmp_path_factory.mktemp("stats") / "repo") as loaded:
        yield loaded


def _stats(client, path: str) -> dict:
    r = client.get(path)
    assert r.status_code == 200, r.text
    (entry,) = r.json()["model_stats"]
    return entry


def _delta(after: dict, before: dict, stage: str, key: str) -> int:
    return after["inference_stats"][stage][key] - before["inference_stats"][stage][key]


def test_counts_and_times_grow_on_success_and_failure(served):
    files, repository = served
    x = ss.valid_rows(files["tan_onnx"], n=3)
    bad = x.copy()
    bad[1, 0] = 10**6  # out of range: the adapter's 400
    with TestClient(create_app(repository, access_log=False, close_repository=False)) as client:
        before = _stats(client, "/v2/models/tan_onnx/stats")
        t0 = time.time_ns() // 10**6
        for _ in range(4):
            assert client.post("/v2/models/tan_onnx/infer", content=infer_body(x)).status_code == 200
        t1 = time.time_ns() // 10**6
        assert client.post("/v2/models/tan_onnx/infer", content=infer_body(bad)).status_code == 400
        assert client.post("/v2/models/tan_onnx/infer", content=b"{not json").status_code == 400
        assert client.post("/v2/models/no_such_model/infer", content=infer_body(x)).status_code == 404
        after = _stats(client, "/v2/models/tan_onnx/stats")

    model = repository.get("tan_onnx")
    assert (after["name"], after["version"]) == ("tan_onnx", model.version)
    assert _delta(after, before, "success", "count") == 4
    assert _delta(after, before, "fail", "count") == 2
    assert _delta(after, before, "fail", "ns") > 0
    for stage in STAGES:
        assert _delta(after, before, stage, "count") == 4, stage
    for stage in ("success", "compute_input", "compute_infer", "compute_output"):
        assert _delta(after, before, stage, "ns") > 0, stage
    # onnxruntime is thread-safe and nothing batches: no request waited.
    assert _delta(after, before, "queue", "ns") == 0
    # Every stage lies inside its request.
    inside = sum(_delta(after, before, stage, "ns") for stage in STAGES)
    assert _delta(after, before, "success", "ns") >= inside
    assert after["inference_count"] - before["inference_count"] == 12  # rows
    assert after["execution_count"] - before["execution_count"] == 4
    assert t0 - 2 <= after["last_inference"] <= t1 + 2  # ms; stamped on the monotonic clock, moved to the epoch
    assert after["inference_stats"]["cache_hit"] == after["inference_stats"]["cache_miss"] == {"count": 0, "ns": 0}


def test_grpc_requests_are_counted_too(served):
    files, repository = served
    x = ss.valid_rows(files["nb_onnx"], n=2)
    server = start_grpc_server(repository, "127.0.0.1:0", workers=2)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.bound_port}")
    try:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        before = repository.get("nb_onnx").statistics.as_json()
        request = pb.ModelInferRequest(model_name="nb_onnx")
        request.inputs.add(name="x", datatype="INT64", shape=list(x.shape))
        request.raw_input_contents.append(x.tobytes())
        stub.ModelInfer(request)
        request.inputs[0].shape[:] = [3, x.shape[1]]  # 3 rows announced, 2 sent: INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as failed:
            stub.ModelInfer(request)
        assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        after = repository.get("nb_onnx").statistics.as_json()
    finally:
        channel.close()
        server.stop(1).wait()
    assert _delta(after, before, "success", "count") == 1
    assert _delta(after, before, "fail", "count") == 1
    assert _delta(after, before, "compute_input", "ns") > 0 and _delta(after, before, "compute_output", "ns") > 0
    assert after["inference_count"] - before["inference_count"] == 2


def test_a_batch_is_one_execution_and_its_requests_queue(tmp_path):
    files = ss.build_repository(tmp_path / "repo", tflite=False)
    # 4 one-row requests fill max_batch=4: one batch, whatever the threads' timing (the delay is long).
    model = ServedModel("nb_onnx", files["nb_onnx"].path, max_batch=4, max_queue_delay_ms=5000)
    x = ss.valid_rows(files["nb_onnx"], n=4)
    records = [statistics.begin(model, "rest") for _ in range(4)]

    def one(i: int) -> None:
        model.infer({"x": x[i : i + 1]}, record=records[i])
        statistics.end(records[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    model.close()
    stats = model.statistics.as_json()
    assert stats["inference_stats"]["success"]["count"] == 4
    assert (stats["inference_count"], stats["execution_count"]) == (4, 1)
    # Each request counts its batch's whole call (as Triton does); the first waited for the others.
    batch_ns = {r.infer_ns for r in records}
    assert len(batch_ns) == 1 and stats["inference_stats"]["compute_infer"]["ns"] == 4 * batch_ns.pop()
    assert stats["inference_stats"]["queue"]["ns"] > 0
    config = statistics.model_config(model)
    assert config["parameters"]["max_batch"] == {"string_value": "4"}
    assert config["parameters"]["max_queue_delay_ms"] == {"string_value": "5000"}


def test_unknown_models_and_versions_are_404(served):
    files, repository = served
    version = repository.get("nb_onnx").version
    with TestClient(create_app(repository, access_log=False, close_repository=False)) as client:
        for path in (
            "/v2/models/no_such_model/stats",
            "/v2/models/nb_onnx/versions/000000000000/stats",
            "/v2/models/no_such_model/config",
            "/v2/models/nb_onnx/versions/000000000000/config",
        ):
            r = client.get(path)
            assert r.status_code == 404 and "error" in r.json(), path
        assert _stats(client, f"/v2/models/nb_onnx/versions/{version}/stats")["version"] == version
        everything = client.get("/v2/models/stats").json()["model_stats"]
    assert [s["name"] for s in everything] == sorted(files)


def test_config_matches_the_model_tensors(served):
    files, repository = served
    with TestClient(create_app(repository, access_log=False, close_repository=False)) as client:
        for name in files:
            meta = client.get(f"/v2/models/{name}").json()
            config = client.get(f"/v2/models/{name}/config").json()
            model = repository.get(name)
            assert (config["name"], config["platform"], config["backend"]) == (name, meta["platform"], model.runtime)
            assert config["max_batch_size"] == 0
            for field, declared in (("input", "inputs"), ("output", "outputs")):
                got = [(t["name"], t["data_type"], t["dims"]) for t in config[field]]
                want = [(t["name"], "TYPE_" + t["datatype"], t["shape"]) for t in meta[declared]]
                assert got == want, name
    assert config["parameters"]["max_batch"] == {"string_value": "0"}
    # The datatypes the models really declare: FP64 scores of .bnc files, FP32 raw inputs.
    nb_bnc = statistics.model_config(repository.get("nb_bnc"))
    assert [t["data_type"] for t in nb_bnc["output"]] == ["TYPE_FP64", "TYPE_INT64"]
    assert statistics.model_config(repository.get("raw_onnx"))["input"][0]["data_type"] == "TYPE_FP32"


def test_both_front_ends_advertise_the_extensions(served):
    _, repository = served
    with TestClient(create_app(repository, access_log=False, close_repository=False)) as client:
        rest = client.get("/v2").json()["extensions"]
    grpc_meta = InferenceServicer(repository).ServerMetadata(pb.ServerMetadataRequest(), None)
    assert {"statistics", "model_configuration"} <= set(rest)
    assert list(grpc_meta.extensions) == rest


def test_tritonclient_reads_statistics_and_config(tmp_path):
    from tritonclient_support import client_python, run_plan

    client_python()  # skip before starting anything when the client is absent
    files = ss.build_repository(tmp_path / "repo", tflite=False)
    repository = ModelRepository(tmp_path / "repo")
    repository.load_all()
    server = InProcessServer(repository)
    x = ss.valid_rows(files["tan_onnx"], n=5)
    version = repository.get("tan_onnx").version
    xin = [{"name": "x", "datatype": "INT64", "array": "x"}]
    steps = [{"protocol": p, "op": "infer", "model": "tan_onnx", "inputs": xin} for p in ("http", "http", "grpc")]
    steps += [
        {"protocol": "http", "op": "stats", "model": "tan_onnx"},
        {"protocol": "http", "op": "stats"},
        {"protocol": "http", "op": "stats", "model": "no_such_model"},
        {"protocol": "http", "op": "config", "model": "tan_onnx"},
        {"protocol": "grpc", "op": "stats", "model": "tan_onnx"},
        {"protocol": "grpc", "op": "config", "model": "tan_onnx"},
        {"protocol": "grpc", "op": "stats"},
        {"protocol": "grpc", "op": "stats", "model": "tan_onnx", "version": version},
        {"protocol": "grpc", "op": "stats", "model": "no_such_model"},
        {"protocol": "grpc", "op": "config", "model": "tan_onnx", "version": "000000000000"},
    ]
    try:
        results, _ = run_plan(steps, tmp_path, server=server, arrays={"x": x})
    finally:
        server.stop()
        repository.close()
    assert all(r["ok"] for r in results[:3]), results[:3]
    one, every, unknown, config, grpc_stats, grpc_config, grpc_every, grpc_version, *grpc_unknown = results[3:]
    (entry,) = one["value"]["model_stats"]
    assert entry["inference_stats"]["success"]["count"] == 3  # two REST requests, one gRPC
    assert (entry["inference_count"], entry["execution_count"]) == (15, 3)
    assert [s["name"] for s in every["value"]["model_stats"]] == sorted(files)
    assert not unknown["ok"] and unknown["error"]["status"] == "404"
    assert [t["name"] for t in config["value"]["output"]] == ["log_joint", "label"]
    assert config["value"]["input"][0] == {
        "name": "x",
        "data_type": "TYPE_INT64",
        "dims": [-1, x.shape[1]],
        "format": "FORMAT_NONE",
    }
    # tritonclient.grpc parsed our messages into its own (its field names and numbers): the same
    # answers as REST's, read back into our messages (MessageToDict wrote its int64s as strings).
    for r in (grpc_stats, grpc_config, grpc_every, grpc_version):
        assert r["ok"], r
    stats, configs = pb.ModelStatisticsResponse, pb.ModelConfigResponse
    assert json_format.ParseDict(grpc_stats["value"], stats()) == json_format.ParseDict(one["value"], stats())
    assert int(grpc_stats["value"]["model_stats"][0]["inference_count"]) == 15
    want = json_format.ParseDict({"config": config["value"]}, configs())
    assert json_format.ParseDict(grpc_config["value"], configs()) == want
    assert [s["name"] for s in grpc_every["value"]["model_stats"]] == sorted(files)
    assert grpc_version["value"] == grpc_stats["value"]
    for r in grpc_unknown:
        assert not r["ok"] and r["error"]["status"] == "StatusCode.NOT_FOUND", r
