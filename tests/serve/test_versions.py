"""Model versions (Triton's layout ``DIR/<name>/<version>/model.<ext>`` beside flat files): several
versions served at once, each answer naming its version and equal to that version's outputs (REST,
gRPC, tritonclient); the version policies; per-version load/unload/reload that leaves the other
versions alone; a newer version that fails leaves the older one serving; Triton's load ``config``
(its version_policy); reloads of versions under load with zero failed requests.

The versions are naive Bayes models with the same features and classes and different tables, so
every answer shows which version computed it."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette", reason="bnc-serve needs the 'serve' extra")
pytest.importorskip("starlette.testclient", reason="Starlette's TestClient needs httpx2 (extra 'test')")
grpc = pytest.importorskip("grpc", reason="the gRPC front end needs the 'serve' extra")

from serve_support import ServerProcess
from starlette.testclient import TestClient
from tritonclient_support import run_plan

from bnc_deploy.errors import ConfigError
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.serve.app import create_app
from bnc_deploy.serve.errors import BadRequest, ModelNotFound, ModelNotReady
from bnc_deploy.serve.grpc_server import start_grpc_server
from bnc_deploy.serve.health import ServingHealth
from bnc_deploy.serve.model import ModelLoadError, file_version
from bnc_deploy.serve.proto import grpc_service_pb2 as pb
from bnc_deploy.serve.proto import grpc_service_pb2_grpc as pb_grpc
from bnc_deploy.serve.repository import ModelRepository
from bnc_deploy.serve.versions import VersionPolicy, load_options, rest_parameters
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.verify import export_path

CARDS = [4, 3, 5, 2, 4, 3]
X = (np.random.default_rng(1).random((9, len(CARDS))) * CARDS).astype(np.int64)


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> dict[str, tuple[bytes, tuple[np.ndarray, np.ndarray]]]:
    """``{tag: (ONNX bytes, (scores, labels) of X)}`` of four different NB models ``a``..``d``."""
    folder = tmp_path_factory.mktemp("versions-staged")
    rng = np.random.default_rng(28)
    out = {}
    for tag in "abcd":
        art = random_bnc_artifact(rng, n_classes=4, tan=False, bits=3, int_bits=2, cardinalities=CARDS)
        path = export_path(art, folder / f"{tag}.onnx", "onnx")
        scores, labels = load_runtime(path).run(X)
        out[tag] = (path.read_bytes(), (np.asarray(scores, np.float32), np.asarray(labels, np.int64)))
    assert len({o[0].tobytes() for _, o in out.values()}) == 4, "the versions must answer differently"
    return out


def publish(root: Path, rel: str, data: bytes) -> None:
    """Write-then-rename, as a publisher does."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)


def repository(tmp_path: Path, staged, layout: dict[str, str], policy: str = "all") -> ModelRepository:
    root = tmp_path / "repo"
    root.mkdir(exist_ok=True)
    for rel, tag in layout.items():
        publish(root, rel, staged[tag][0])
    repo = ModelRepository(root, version_policy=policy)
    repo.load_all()
    return repo


def assert_answers(model, staged, tag: str) -> None:
    out = dict(model.infer({"x": X}))
    np.testing.assert_array_equal(out["log_joint"], staged[tag][1][0])
    np.testing.assert_array_equal(out["label"], staged[tag][1][1])


def states(repo: ModelRepository) -> dict[str, str]:
    return {e["version"]: e["state"] for e in repo.index()}


def test_two_versions_served_at_once_each_answer_names_its_version(tmp_path, staged):
    repo = repository(tmp_path, staged, {"m/1/model.onnx": "a", "m/2/model.onnx": "b"})
    assert repo.index() == [
        {"name": "m", "version": "1", "state": "READY", "reason": ""},
        {"name": "m", "version": "2", "state": "READY", "reason": ""},
    ]
    assert repo.get("m", "1").version == "1" and repo.get("m", "2").version == "2"
    assert repo.get("m") is repo.get("m", "2")  # no version: the latest serving
    assert_answers(repo.get("m", "1"), staged, "a")
    assert_answers(repo.get("m", "2"), staged, "b")
    assert repo.get("m", "1").metadata()["versions"] == ["1", "2"]
    with pytest.raises(ModelNotFound, match="no version '3'"):
        repo.get("m", "3")

    body = {"inputs": [{"name": "x", "datatype": "INT64", "shape": list(X.shape), "data": X.ravel().tolist()}]}
    with TestClient(create_app(repo, access_log=False, close_repository=False)) as client:
        for path, version, tag in [("/versions/1", "1", "a"), ("/versions/2", "2", "b"), ("", "2", "b")]:
            r = client.post(f"/v2/models/m{path}/infer", json=body)
            assert r.status_code == 200, r.text
            answer = r.json()
            assert answer["model_version"] == version
            outputs = {o["name"]: o["data"] for o in answer["outputs"]}
            np.testing.assert_array_equal(
                np.asarray(outputs["log_joint"], np.float32).ravel(), staged[tag][1][0].ravel()
            )
            assert outputs["label"] == staged[tag][1][1].tolist()
        assert client.post("/v2/models/m/versions/3/infer", json=body).status_code == 404
        assert client.get("/v2/models/m/versions/1").json()["versions"] == ["1", "2"]
        assert client.get("/v2/models/m/versions/1/ready").status_code == 200
        assert client.get("/v2/models/m/versions/7/ready").status_code == 404

    server = start_grpc_server(repo, "127.0.0.1:0")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.bound_port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            for version, answered, tag in [("1", "1", "a"), ("2", "2", "b"), ("", "2", "b")]:
                request = pb.ModelInferRequest(model_name="m", model_version=version)
                request.inputs.add(name="x", datatype="INT64", shape=list(X.shape))
                request.raw_input_contents.append(X.tobytes())
                response = stub.ModelInfer(request)
                assert response.model_version == answered
                scores = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(X.shape[0], -1)
                np.testing.assert_array_equal(scores, staged[tag][1][0])
            assert list(stub.ModelMetadata(pb.ModelMetadataRequest(name="m", version="1")).versions) == ["1", "2"]
            rows = stub.RepositoryIndex(pb.RepositoryIndexRequest()).models
            assert [(r.name, r.version, r.state) for r in rows] == [("m", "1", "READY"), ("m", "2", "READY")]
    finally:
        server.stop(1).wait()
        repo.close()


@pytest.mark.parametrize(
    ("policy", "ready"),
    [("latest:1", {"3"}), ("latest:2", {"2", "3"}), ("all", {"1", "2", "3"}), ("specific:1,3", {"1", "3"})],
)
def test_version_policies_select_the_versions_served(tmp_path, staged, policy, ready):
    layout = {"m/1/model.onnx": "a", "m/2/model.onnx": "b", "m/3/model.onnx": "c", "m/04/model.onnx": "d"}
    repo = repository(tmp_path, staged, layout, policy)  # "04" is no version (leading zero): ignored
    index = repo.index()
    assert [e["version"] for e in index] == ["1", "2", "3"]
    assert {e["version"] for e in index if e["state"] == "READY"} == ready
    for e in index:
        if e["state"] != "READY":
            assert e["reason"] == f"not selected by the version policy {policy}"
            with pytest.raises(ModelNotFound):
                repo.get("m", e["version"])
    assert repo.get("m").version == max(ready)
    assert repo.ready()
    repo.close()


def test_version_policy_texts_and_triton_configs():
    assert str(VersionPolicy.parse("latest:3")) == "latest:3" and str(VersionPolicy.parse("latest")) == "latest:1"
    assert VersionPolicy.parse("specific: 3, 1,3").versions == (1, 3)
    assert VersionPolicy.parse("ALL").select([5, 1]) == {1, 5}
    for bad in ["latest:0", "latest:-1", "specific:", "specific:01", "specific:a", "newest:1", "all:2", ""]:
        with pytest.raises(ConfigError, match="bad version policy"):
            VersionPolicy.parse(bad)
    assert VersionPolicy.from_config({"latest": {"num_versions": 2}}) == VersionPolicy("latest", 2)
    assert VersionPolicy.from_config({"specific": {"versions": [2, 1]}}) == VersionPolicy("specific", versions=(1, 2))
    assert VersionPolicy.from_config({"all": {}}) == VersionPolicy("all")
    for bad in [{"latest": {"num_versions": 0}}, {"specific": {}}, {"newest": {}}, "all", {}]:
        with pytest.raises(BadRequest, match="version_policy"):
            VersionPolicy.from_config(bad)
    config = json.dumps({"name": "m", "version_policy": {"all": {}}, "max_batch_size": 0})
    assert load_options(rest_parameters(json.dumps({"parameters": {"config": config}}).encode())) == {
        "version": None,
        "policy": VersionPolicy("all"),
    }
    assert load_options({"version": 2})["version"] == "2"
    for body in [b"[", b"[1]", b'{"parameters": 3}']:
        with pytest.raises(BadRequest):
            rest_parameters(body)
    for parameters in [{"version": True}, {"version": [1]}, {"config": "{"}, {"config": "[1]"}]:
        with pytest.raises(BadRequest):
            load_options(parameters)


def test_a_flat_file_is_version_one_and_keeps_its_digest(tmp_path, staged):
    repo = repository(tmp_path, staged, {"m.onnx": "a", "m/2/model.onnx": "b"})
    digest = file_version(staged["a"][0])
    assert repo.index() == [
        {"name": "m", "version": digest, "state": "READY", "reason": ""},
        {"name": "m", "version": "2", "state": "READY", "reason": ""},
    ]
    assert repo.get("m", "1") is repo.get("m", digest) and repo.get("m", "1").version == digest
    assert repo.get("m").version == "2"
    assert_answers(repo.get("m", digest), staged, "a")
    repo.unload("m", digest)  # a flat version is named by its digest too
    assert repo.index()[0] == {"name": "m", "version": "", "state": "UNAVAILABLE", "reason": "unloaded"}
    publish(repo.root, "m/1/model.onnx", staged["c"][0])  # a second version 1
    with pytest.raises(ModelLoadError, match="ambiguous: m/1/model.onnx, m.onnx"):
        repo.load("m", "1")
    assert repo.get("m").version == "2"  # untouched
    repo.close()


def test_per_version_unload_and_reload_leave_the_other_versions_alone(tmp_path, staged):
    repo = repository(tmp_path, staged, {"m/1/model.onnx": "a", "m/2/model.onnx": "b"})
    health = ServingHealth(repo)
    v1 = repo.get("m", "1")
    repo.unload("m", "2")
    assert repo.get("m") is v1 and repo.ready() and health.statuses()["m"]
    assert repo.index()[1] == {"name": "m", "version": "2", "state": "UNAVAILABLE", "reason": "unloaded"}
    with pytest.raises(ModelNotReady, match="version 2 is not ready: unloaded"):
        repo.get("m", "2")
    repo.poll_once()  # polling leaves a version unloaded on request alone
    assert states(repo) == {"1": "READY", "2": "UNAVAILABLE"}
    assert repo.load("m", "2").version == "2" and repo.get("m") is repo.get("m", "2")
    publish(repo.root, "m/2/model.onnx", staged["c"][0])  # replaced in place: version 2, new content
    repo.load("m", "2")
    assert_answers(repo.get("m", "2"), staged, "c")
    old = repo.get("m", "2")
    publish(repo.root, "m/2/model.onnx", staged["d"][0][:-40] + bytes(40))  # damaged: fails its seal
    with pytest.raises(ModelLoadError, match="modified after export"):
        repo.load("m", "2")
    assert repo.get("m", "2") is old and repo.index()[1]["reason"].startswith("load failed, still serving version 2")
    assert repo.get("m", "1") is v1  # never touched
    repo.unload("m")
    assert states(repo) == {"1": "UNAVAILABLE", "2": "UNAVAILABLE"} and not health.statuses()["m"]
    assert repo.ready()  # unloaded on request: not waited for
    publish(repo.root, "m/2/model.onnx", staged["b"][0])
    repo.load("m")
    assert states(repo) == {"1": "READY", "2": "READY"} and health.statuses()["m"]
    for call in (repo.unload, repo.load):
        with pytest.raises(ModelNotFound, match="no version"):
            call("m", "9")
    repo.close()


def test_a_newer_version_that_fails_leaves_the_older_one_serving(tmp_path, staged):
    repo = repository(tmp_path, staged, {"m/1/model.onnx": "a"}, "latest:1")
    publish(repo.root, "m/2/model.onnx", staged["b"][0][:-40] + bytes(40))
    repo.poll_once()
    one, two = repo.index()
    assert one["state"] == "READY" and one["reason"] == "kept serving until version 2 loads (not selected by latest:1)"
    assert two["state"] == "UNAVAILABLE" and "modified after export" in two["reason"]
    assert repo.get("m").version == "1"
    publish(repo.root, "m/2/model.onnx", staged["b"][0])
    repo.poll_once()
    assert repo.get("m").version == "2" and states(repo) == {"1": "UNAVAILABLE", "2": "READY"}
    assert repo.index()[0]["reason"] == "not selected by the version policy latest:1"
    shutil.rmtree(repo.root / "m" / "2")  # the latest version goes away: the one before serves again
    repo.poll_once()
    assert repo.get("m").version == "1"
    assert repo.index()[1] == {"name": "m", "version": "2", "state": "UNAVAILABLE", "reason": "model file removed"}
    publish(repo.root, "m/3/model.onnx", staged["c"][0])
    with pytest.raises(BadRequest, match="not selected by the version policy latest:1"):
        repo.load("m", "1")
    repo.close()


def test_load_config_sets_a_models_version_policy_over_rest_and_grpc(tmp_path, staged):
    repo = repository(tmp_path, staged, {"m/1/model.onnx": "a", "m/2/model.onnx": "b"}, "latest:1")
    assert states(repo) == {"1": "UNAVAILABLE", "2": "READY"}
    server = start_grpc_server(repo, "127.0.0.1:0")
    try:
        with TestClient(create_app(repo, access_log=False, close_repository=False)) as client:
            config = json.dumps({"version_policy": {"specific": {"versions": [1]}}})
            r = client.post("/v2/repository/models/m/load", json={"parameters": {"config": config}})
            assert r.status_code == 200, r.text
            assert states(repo) == {"1": "READY", "2": "UNAVAILABLE"} and repo.get("m").version == "1"
            r = client.post("/v2/repository/models/m/load", json={"parameters": {"version": "2"}})
            assert r.status_code == 400 and "not selected by the version policy specific:1" in r.json()["error"]
            assert client.post("/v2/repository/models/m/load", content=b"{").status_code == 400
            config = json.dumps({"version_policy": {"all": {}}})
            assert (
                client.post("/v2/repository/models/m/load", json={"parameters": {"config": config}}).status_code == 200
            )
            assert states(repo) == {"1": "READY", "2": "READY"}
            assert client.post("/v2/repository/models/m/unload", json={"parameters": {"version": 1}}).status_code == 200
            assert client.get("/v2/models/m/versions/1/ready").status_code == 503
        with grpc.insecure_channel(f"127.0.0.1:{server.bound_port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            request = pb.RepositoryModelLoadRequest(model_name="m")
            request.parameters["version"].int64_param = 1
            stub.RepositoryModelLoad(request)
            assert states(repo) == {"1": "READY", "2": "READY"}
            request = pb.RepositoryModelUnloadRequest(model_name="m")
            request.parameters["version"].string_param = "2"
            stub.RepositoryModelUnload(request)
            assert states(repo) == {"1": "READY", "2": "UNAVAILABLE"}
            assert not stub.ModelReady(pb.ModelReadyRequest(name="m", version="2")).ready
            with pytest.raises(grpc.RpcError) as info:
                stub.ModelReady(pb.ModelReadyRequest(name="m", version="5"))
            assert info.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        server.stop(1).wait()
        repo.close()


def test_tritonclient_names_versions_over_rest_and_grpc(tmp_path, staged):
    root = tmp_path / "repo"
    for rel, tag in {"m/1/model.onnx": "a", "m/2/model.onnx": "b", "m/3/model.onnx": "c"}.items():
        publish(root, rel, staged[tag][0])
    with ServerProcess(root, grpc=True, args=["--version-policy", "latest:2"]) as proc:
        infer = {"op": "infer", "model": "m", "inputs": [{"name": "x", "datatype": "INT64", "array": "x"}]}
        steps = []
        for protocol in ("http", "http-json", "grpc"):
            steps += [{**infer, "protocol": protocol, "version": v} for v in ("2", "3", "")]
            steps += [
                {"op": "model_ready", "protocol": protocol, "model": "m", "version": "3"},
                {"op": "model_metadata", "protocol": protocol, "model": "m", "version": "2"},
            ]
        steps += [
            {"op": "load_config", "protocol": "grpc", "model": "m", "config": {"version_policy": {"all": {}}}},
            {**infer, "protocol": "grpc", "version": "1"},
            {"op": "load_config", "protocol": "http", "model": "m", "config": {"version_policy": {"latest": {}}}},
            {**infer, "protocol": "http", "version": "2"},
            {"op": "index", "protocol": "http"},
        ]
        results, arrays = run_plan(steps, tmp_path, server=proc, arrays={"x": X})
        assert proc.stop() == 0, proc.log()
    expected = {"1": "a", "2": "b", "3": "c"}
    for k in range(3):
        answers, (ready, meta) = results[5 * k : 5 * k + 3], results[5 * k + 3 : 5 * k + 5]
        for result, version in zip(answers, ("2", "3", "3")):
            assert result["ok"] and result["model_version"] == version, result
            scores = arrays[result["outputs"]["log_joint"]]
            np.testing.assert_array_equal(scores, staged[expected[version]][1][0])
        assert ready["value"] is True
        assert meta["value"]["versions"] == ["2", "3"]
    assert results[16]["ok"] and results[16]["model_version"] == "1"  # served after loading with "all"
    np.testing.assert_array_equal(arrays[results[16]["outputs"]["log_joint"]], staged["a"][1][0])
    assert not results[18]["ok"] and results[18]["error"]["status"] == "404"  # latest:1 retired version 2
    index = [(e["version"], e["state"]) for e in results[19]["value"]]
    assert index == [("1", "UNAVAILABLE"), ("2", "UNAVAILABLE"), ("3", "READY")]


def _digest(scores, labels) -> str:
    return hashlib.sha256(np.asarray(scores, np.float32).tobytes() + np.asarray(labels, np.int64).tobytes()).hexdigest()


class _Client(threading.Thread):
    """Requests version ``version`` ("" for the latest) over REST or gRPC until stopped; records
    each answer's ``(model_version, digest)`` and every failure."""

    def __init__(self, proc: ServerProcess, protocol: str, version: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.proc, self.protocol, self.version, self.stop = proc, protocol, version, stop
        self.answers: list[tuple[str, str]] = []
        self.failures: list[str] = []

    def run(self) -> None:
        call = self._rest() if self.protocol == "rest" else self._grpc()
        while not self.stop.is_set():
            try:
                self.answers.append(call())
            except Exception as exc:  # noqa: BLE001 - every failure is what the test counts
                self.failures.append(f"{type(exc).__name__}: {exc}"[:300])

    def _rest(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.proc.http_port, timeout=30)
        path = f"/v2/models/m{'/versions/' + self.version if self.version else ''}/infer"
        body = json.dumps(
            {"inputs": [{"name": "x", "datatype": "INT64", "shape": list(X.shape), "data": X.ravel().tolist()}]}
        )

        def call():
            conn.request("POST", path, body)
            response = conn.getresponse()
            answer = response.read()
            if response.status != 200:
                raise RuntimeError(f"{response.status} {answer[:200]!r}")
            parsed = json.loads(answer)
            outputs = {o["name"]: o["data"] for o in parsed["outputs"]}
            return parsed["model_version"], _digest(outputs["log_joint"], outputs["label"])

        return call

    def _grpc(self):
        stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(self.proc.grpc_address))
        request = pb.ModelInferRequest(model_name="m", model_version=self.version)
        request.inputs.add(name="x", datatype="INT64", shape=list(X.shape))
        request.raw_input_contents.append(X.tobytes())

        def call():
            response = stub.ModelInfer(request, timeout=30)
            scores = np.frombuffer(response.raw_output_contents[0], np.float32)
            return response.model_version, _digest(scores, np.frombuffer(response.raw_output_contents[1], np.int64))

        return call


@pytest.mark.slow
def test_reloading_versions_under_load_fails_no_request(tmp_path, staged):
    """REST and gRPC clients ask for versions 1, 2 and the latest while version 2 is replaced in place
    and reloaded, and version 3 is loaded and unloaded: no request fails, every answer is the outputs
    of the version it names, and the latest moves between 2 and 3."""
    root = tmp_path / "repo"
    publish(root, "m/1/model.onnx", staged["a"][0])
    publish(root, "m/2/model.onnx", staged["b"][0])
    allowed = {"1": {"a"}, "2": {"b", "d"}, "3": {"c"}}
    digests = {tag: _digest(*out) for tag, (_, out) in staged.items()}
    with ServerProcess(root, grpc=True, args=["--version-policy", "all", "--no-access-log"]) as proc:
        stop = threading.Event()
        clients = [_Client(proc, p, v, stop) for p in ("rest", "grpc") for v in ("1", "2", "")]
        for c in clients:
            c.start()
        time.sleep(1.0)
        for k in range(6):
            publish(root, "m/2/model.onnx", staged["d" if k % 2 == 0 else "b"][0])
            assert proc.json("POST", "/v2/repository/models/m/load", {"parameters": {"version": "2"}})[0] == 200
            if k == 0:
                publish(root, "m/3/model.onnx", staged["c"][0])
            assert proc.json("POST", "/v2/repository/models/m/load", {"parameters": {"version": "3"}})[0] == 200
            time.sleep(0.3)
            assert proc.json("POST", "/v2/repository/models/m/unload", {"parameters": {"version": "3"}})[0] == 200
            time.sleep(0.3)
        stop.set()
        for c in clients:
            c.join(60)
        assert proc.stop() == 0, proc.log()
    seen: dict[str, set[str]] = {"1": set(), "2": set(), "3": set()}
    for c in clients:
        assert c.failures == [], f"{c.protocol} v{c.version or 'latest'}: {len(c.failures)} failed: {c.failures[:3]}"
        assert c.answers, f"{c.protocol} v{c.version or 'latest'} got no answer"
        for version, digest in c.answers:
            assert version == c.version or (not c.version and version in ("2", "3")), (c.version, version)
            tags = [t for t in allowed[version] if digests[t] == digest]
            assert tags, f"{c.protocol}: an answer of version {version} has outputs of no version {version}"
            seen[version].update(tags)
    assert seen == {"1": {"a"}, "2": {"b", "d"}, "3": {"c"}}, seen
    print(", ".join(f"{c.protocol} v{c.version or 'latest'}: {len(c.answers)}" for c in clients), "answers, 0 failed")
