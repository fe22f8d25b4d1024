"""The REST front end in-process (Starlette's TestClient): every V2 route, JSON and binary tensors,
requests without Content-Type, output subsets, classification, and the 400/404/413 answers."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("starlette", reason="bnc-serve needs the 'serve' extra")
pytest.importorskip("starlette.testclient", reason="Starlette's TestClient needs httpx2 (extra 'test')")

import serve_support as ss
from starlette.testclient import TestClient

from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.serve.app import create_app
from bnc_deploy.serve.repository import ModelRepository

LIMIT = 64 * 1024
BIN48 = b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 6], "parameters": {"binary_data_size": 48}}]}'
BIN2 = b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 6], "parameters": {"binary_data_size": 2}}]}'


@pytest.fixture(scope="module")
def repo_files(tmp_path_factory):
    return ss.build_repository(tmp_path_factory.mktemp("rest") / "repo")


@pytest.fixture(scope="module")
def client(repo_files):
    repo = ModelRepository(next(iter(repo_files.values())).path.parent)
    repo.load_all()
    with TestClient(create_app(repo, max_request_bytes=LIMIT, access_log=False)) as c:
        c.repo = repo
        yield c


def json_request(x: np.ndarray, datatype: str, outputs=None, **params) -> dict:
    req = {
        "id": "r1",
        "inputs": [{"name": "x", "datatype": datatype, "shape": list(x.shape), "data": x.ravel().tolist()}],
    }
    if outputs is not None:
        req["outputs"] = outputs
    if params:
        req["parameters"] = params
    return req


def binary_request(x: np.ndarray, datatype: str, outputs=None, binary_output=True) -> tuple[bytes, dict]:
    """What tritonclient sends by default: JSON header + raw tensor bytes, no Content-Type."""
    data = np.ascontiguousarray(x).tobytes()
    req = {
        "inputs": [
            {"name": "x", "datatype": datatype, "shape": list(x.shape), "parameters": {"binary_data_size": len(data)}}
        ]
    }
    if outputs is not None:
        req["outputs"] = outputs
    else:
        req["parameters"] = {"binary_data_output": binary_output}
    head = json.dumps(req).encode()
    return head + data, {"Inference-Header-Content-Length": str(len(head))}


def decode_binary(response) -> dict:
    n = int(response.headers["inference-header-content-length"])
    head = json.loads(response.content[:n])
    out, pos = {}, n
    for o in head["outputs"]:
        dt = {"FP32": "<f4", "FP64": "<f8", "INT64": "<i8"}[o["datatype"]]
        size = o["parameters"]["binary_data_size"]
        out[o["name"]] = np.frombuffer(response.content[pos : pos + size], dtype=dt).reshape(o["shape"])
        pos += size
    assert pos == len(response.content)
    return head, out


def test_health_server_and_model_metadata(client, repo_files):
    assert client.get("/v2/health/live").status_code == 200
    assert client.get("/v2/health/ready").status_code == 200
    server = client.get("/v2").json()
    assert server["name"] == "bnc-serve" and "binary_tensor_data" in server["extensions"]
    for name in repo_files:
        meta = client.get(f"/v2/models/{name}").json()
        assert meta == client.repo.get(name).metadata()
        v = meta["versions"][0]
        assert client.get(f"/v2/models/{name}/versions/{v}").json() == meta
        assert client.get(f"/v2/models/{name}/ready").status_code == 200
        assert client.get(f"/v2/models/{name}/versions/{v}/ready").status_code == 200
    assert client.get("/v2/models/nope").status_code == 404
    assert client.get("/v2/models/nope/ready").status_code == 404
    assert client.get("/v2/models/nb_onnx/versions/000000000000").status_code == 404


def test_json_and_binary_infer_are_bit_identical_to_the_runtime(client, repo_files):
    for name, mf in repo_files.items():
        model = client.repo.get(name)
        x = ss.valid_rows(mf, n=5, seed=11)
        dt = model.metadata()["inputs"][0]["datatype"]
        x = x.astype({"INT64": np.int64, "INT32": np.int32, "FP32": np.float32}[dt])
        scores, labels = load_runtime(mf.path).run(x)
        r = client.post(f"/v2/models/{name}/infer", content=json.dumps(json_request(x, dt)).encode())
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model_name"] == name and body["model_version"] == model.version and body["id"] == "r1"
        out = {o["name"]: o for o in body["outputs"]}
        assert out["label"]["shape"] == [5] and out["label"]["data"] == labels.tolist()
        s = out[model.scores_name]
        assert s["shape"] == [5, len(mf.artifact.class_names)]
        # JSON floats are the shortest repr of the float32/float64 value: they read back exactly.
        np.testing.assert_array_equal(np.array(s["data"], dtype=np.float64).reshape(s["shape"]), scores)
        content, headers = binary_request(x, dt)
        r = client.post(f"/v2/models/{name}/versions/{model.version}/infer", content=content, headers=headers)
        assert r.status_code == 200, r.text
        assert "content-type" not in {k.lower() for k in headers}
        _head, arrays = decode_binary(r)
        np.testing.assert_array_equal(arrays[model.scores_name].astype(np.float64), scores)
        np.testing.assert_array_equal(arrays["label"], labels)
        assert arrays["label"].shape == (5,)


def test_output_subset_mixed_binary_and_classification(client, repo_files):
    mf = repo_files["tan_onnx"]
    x = ss.valid_rows(mf, n=3)
    scores, labels = load_runtime(mf.path).run(x)
    content, headers = binary_request(x, "INT64", outputs=[{"name": "label", "parameters": {"binary_data": True}}])
    head, arrays = decode_binary(client.post("/v2/models/tan_onnx/infer", content=content, headers=headers))
    assert [o["name"] for o in head["outputs"]] == ["label"] and arrays["label"].tolist() == labels.tolist()
    req = json_request(
        x,
        "INT64",
        outputs=[
            {"name": "log_joint", "parameters": {"classification": 2}},
            {"name": "label", "parameters": {"binary_data": False}},
        ],
    )
    body = client.post("/v2/models/tan_onnx/infer", json=req).json()
    cls, lab = body["outputs"]
    assert cls["datatype"] == "BYTES" and cls["shape"] == [3, 2]
    assert lab["data"] == labels.tolist()
    names = mf.artifact.class_names
    for r in range(3):
        value, index, cname = cls["data"][2 * r].split(":")
        assert int(index) == labels[r] and cname == names[labels[r]]
        assert np.float32(value) == np.float32(scores[r, labels[r]])


@pytest.mark.parametrize(
    ("body", "headers", "status", "match"),
    [
        (b"{not json", {}, 400, "malformed JSON"),
        (b"[]", {}, 400, "JSON object"),
        (b'{"inputs": []}', {}, 400, "non-empty 'inputs'"),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 6], "data": [0, 0, 0]}]}',
            {},
            400,
            "needs 6 elements",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 6], "data": [0, 0, 0, 0, 0, 1.5]}]}',
            {},
            400,
            "needs integers",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT8", "shape": [1, 6], "data": [0, 0, 0, 0, 0, 300]}]}',
            {},
            400,
            "does not fit",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 6], "data": [0, 0, 0, 0, 0, "a"]}]}',
            {},
            400,
            "needs integers",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT65", "shape": [1, 6], "data": [0, 0, 0, 0, 0, 0]}]}',
            {},
            400,
            "unknown datatype",
        ),
        (b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, -6], "data": []}]}', {}, 400, "non-negative"),
        (
            b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 6], "data": [0, 0, 0, 0, 0, 0]}]}',
            {},
            400,
            "integer dtype",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 6], "data": [0, 0, 0, 0, 0, -1]}]}',
            {},
            400,
            r"feature 5 \('feat5'\) has value -1 in row 0",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [6], "data": [0, 0, 0, 0, 0, 0]}]}',
            {},
            400,
            "expected shape",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 6], '
            b'"parameters": {"binary_data_size": 48}}]}',
            {"Inference-Header-Content-Length": "200"},
            400,
            "does not fit a body",
        ),
        (BIN48 + b"xx", {"Inference-Header-Content-Length": str(len(BIN48))}, 400, "binary_data_size 48 does not fit"),
        (BIN2 + b"xx", {"Inference-Header-Content-Length": str(len(BIN2))}, 400, "needs 48 bytes"),
        (BIN48 + bytes(49), {"Inference-Header-Content-Length": str(len(BIN48))}, 400, "1 binary bytes after"),
        (
            (
                b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 6], "data": [0, 0, 0, 0, 0, 0]}], '
                b'"outputs": [{"name": "nope"}]}'
            ),
            {},
            400,
            "no output",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 6], "data": [0, 0, 0, 0, 0, 0]}]}',
            {"Inference-Header-Content-Length": "abc"},
            400,
            "Inference-Header-Content-Length",
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 6], "data": [0, 0, 0, 0, 0, 0]}]}',
            {"Content-Encoding": "gzip"},
            400,
            "Content-Encoding",
        ),
    ],
)
def test_malformed_requests_answer_400_naming_the_problem(client, body, headers, status, match):
    import re

    r = client.post("/v2/models/nb_onnx/infer", content=body, headers=headers)
    assert r.status_code == status, r.text
    assert re.search(match, r.json()["error"]), r.json()


def test_nan_raw_value_is_400_naming_feature_and_row(client):
    req = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 3], "data": [0.0, 0.0, 0.0, 0.0, float("nan"), 0.0]}]
    }
    r = client.post("/v2/models/raw_onnx/infer", content=json.dumps(req).encode())
    assert r.status_code == 400 and "feature 1" in r.json()["error"] and "row 1" in r.json()["error"]


def test_unknown_model_version_and_oversized_body(client):
    req = json.dumps(json_request(np.zeros((1, 6), np.int64), "INT64")).encode()
    assert client.post("/v2/models/nope/infer", content=req).status_code == 404
    assert client.post("/v2/models/nb_onnx/versions/0/infer", content=req).status_code == 404
    r = client.post("/v2/models/nb_onnx/infer", content=b" " * (LIMIT + 1))
    assert r.status_code == 413 and "exceeds the limit" in r.json()["error"]

    def chunks():  # no Content-Length: the limit applies while reading
        for _ in range(LIMIT // 1024 + 2):
            yield b" " * 1024

    r = client.post("/v2/models/nb_onnx/infer", content=chunks())
    assert r.status_code == 413
    assert client.get("/v2/health/live").status_code == 200  # still serving


def test_repository_extension(client):
    index = client.post("/v2/repository/index").json()
    assert {e["name"] for e in index} == {e["name"] for e in client.repo.index()}
    assert all(set(e) == {"name", "version", "state", "reason"} for e in index)
    assert client.post("/v2/repository/models/dnn_onnx/unload").status_code == 200
    assert client.get("/v2/models/dnn_onnx/ready").status_code == 503
    assert client.get("/v2/health/ready").status_code == 200  # an unloaded model does not make the server unready
    assert [
        e for e in client.post("/v2/repository/index", json={"ready": True}).json() if e["name"] == "dnn_onnx"
    ] == []
    r = client.post("/v2/repository/models/dnn_onnx/load")
    assert r.status_code == 200, r.text
    assert client.get("/v2/models/dnn_onnx/ready").status_code == 200
    assert client.get("/v2/health/ready").status_code == 200
    assert client.post("/v2/repository/models/nope/load").status_code == 404
    assert client.post("/v2/repository/models/nope/unload").status_code == 404


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"[" * 30_000 + b"]" * 30_000, "malformed JSON"),  # nesting deeper than the parser's recursion limit
        (b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1e999999, 0, 0]}]}', "finite"),
        (
            b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [' + b"9" * 400 + b", 0, 0]}]}",
            "does not fit",
        ),
        (b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 3], "data": [[0, [0]], 0]}]}', "ragged"),
        (b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [4294967296, 4294967296], "data": []}]}', "too many"),
        (b'{"inputs": [{"name": "x", "datatype": ["FP32"], "shape": [1, 3], "data": [0, 0, 0]}]}', "unknown datatype"),
    ],
)
def test_hostile_bodies_are_400_not_500(client, body, match):
    r = client.post("/v2/models/raw_onnx/infer", content=body)
    assert r.status_code == 400, r.text
    assert match in r.json()["error"]


def test_hostile_header_length_is_400(client):
    r = client.post("/v2/models/nb_onnx/infer", content=b"{}", headers={"Inference-Header-Content-Length": b"\xb2"})
    assert r.status_code == 400
