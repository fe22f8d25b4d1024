"""Conformance: the official tritonclient (HTTP JSON, HTTP binary, gRPC) against ``bnc-serve``.

Every endpoint, for BN (NB, TAN) and DNN (sign FC) models exported as .onnx, .tflite and .bnc:
outputs bit-identical to ``load_runtime(file).run(x)`` (same values, the file's datatype), output
subsets, the classification extension, explicit versions, the repository extension (index,
unload, load), and the error cases (shape, datatype, out-of-range code naming feature and row,
unknown model or version, missing token) as 400/404/401 and INVALID_ARGUMENT/NOT_FOUND/
UNAUTHENTICATED. The client runs in its own venv (see tritonclient_support.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from serve_support import ModelFile, ServerProcess, build_repository, valid_rows
from tritonclient_support import client_python, run_plan

from bnc_deploy.artifacts import save_artifact
from bnc_deploy.runtimes.base import load_runtime

PROTOCOLS = ("http", "http-json", "grpc")
API_KEY = "conformance-test-key-0123456789"


def _build_repository(root):
    """``{name: ModelFile}``: the shared test repository (BN NB/TAN in .onnx/.tflite, NB .bnc, a
    raw-input BN, sign-FC DNNs) plus the TAN and the DNN as ``.bnc`` model files."""
    models = build_repository(root)
    dnn_bnc = root / "dnn_bnc.bnc"
    save_artifact(models["dnn_onnx"].artifact, dnn_bnc)
    models["dnn_bnc"] = ModelFile("dnn_bnc", dnn_bnc, models["dnn_onnx"].artifact, "bnc")
    tan_bnc = root / "tan_bnc.bnc"
    save_artifact(models["tan_onnx"].artifact, tan_bnc)
    models["tan_bnc"] = ModelFile("tan_bnc", tan_bnc, models["tan_onnx"].artifact, "bnc")
    return models


def _rows(model, seed=0, n=25):
    return valid_rows(model, n=n, seed=seed)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    client_python()  # skip before exporting anything when the client is absent
    tmp = tmp_path_factory.mktemp("conformance")
    models = _build_repository(tmp / "repo")
    keys = tmp / "keys.txt"
    keys.write_text(f"# test key\n{API_KEY}\n")
    server = ServerProcess(tmp / "repo", grpc=True, args=["--api-key-file", keys])
    try:
        yield tmp, models, server
    finally:
        assert server.stop() == 0, server.log()  # SIGTERM: a clean, drained exit


AUTH = {"Authorization": f"Bearer {API_KEY}"}


def _expected(path, x):
    """``(scores in the file's dtype, label)`` straight from the local runtime."""
    rt = load_runtime(path)
    scores64, label = rt.run(x)
    raw_scores, _ = rt.invoke(rt.prepare(x))
    return np.asarray(raw_scores), scores64, label, rt


def test_every_endpoint_every_protocol_bit_identical(served):
    tmp, models, server = served
    arrays, steps, checks, expected = {}, [], [], {}
    for protocol in PROTOCOLS:
        steps += [{"protocol": protocol, "op": op} for op in ("live", "ready", "server_metadata", "index")]
    for seed, (name, model) in enumerate(models.items()):
        path, art = model.path, model.artifact
        x = _rows(model, seed)
        raw_input = x.dtype.kind == "f"
        arrays[f"{name}_x"] = x
        arrays[f"{name}_x32"] = x.astype(np.float64 if raw_input else np.int32)
        raw, scores64, label, rt = _expected(path, x)
        scores_name, label_name = ("logits" if art.kind == "dnn" else "log_joint"), "label"
        for protocol in PROTOCOLS:
            base = {"protocol": protocol, "model": name}
            xin = [{"name": "x", "datatype": "FP32" if raw_input else "INT64", "array": f"{name}_x"}]
            steps.append({**base, "op": "model_ready"})
            checks.append(("ready", name, protocol, len(steps) - 1))
            steps.append({**base, "op": "model_metadata"})
            checks.append(("metadata", name, protocol, len(steps) - 1))
            steps.append({**base, "op": "infer", "inputs": xin})  # all outputs (none named)
            checks.append(("all", name, protocol, len(steps) - 1))
            steps.append({**base, "op": "infer", "inputs": xin, "outputs": [label_name]})
            checks.append(("label-only", name, protocol, len(steps) - 1))
            # Another datatype of the same values: INT32 codes; raw values as FP64 (run as float32).
            steps.append(
                {
                    **base,
                    "op": "infer",
                    "inputs": [{**xin[0], "datatype": "FP64" if raw_input else "INT32", "array": f"{name}_x32"}],
                    "outputs": [scores_name, label_name],
                }
            )
            checks.append(("int32", name, protocol, len(steps) - 1))
            steps.append({**base, "op": "infer", "inputs": xin, "outputs": [scores_name], "classification": 2})
            checks.append(("top2", name, protocol, len(steps) - 1))
            steps.append({**base, "op": "infer", "inputs": xin, "outputs": [label_name], "classification": 1})
            checks.append(("class-names", name, protocol, len(steps) - 1))
        expected[name] = (path, art, x, raw, scores64, label, rt, scores_name)
    results, saved = run_plan(steps, tmp, server=server, arrays=arrays, headers=AUTH)

    for i in range(len(PROTOCOLS)):
        live, ready, meta, index = results[4 * i : 4 * i + 4]
        assert live == {"ok": True, "value": True} and ready == {"ok": True, "value": True}
        assert meta["ok"] and meta["value"]["name"] == "bnc-serve"
        assert {"binary_tensor_data", "classification", "model_repository"} <= set(meta["value"]["extensions"])
        entries = {m["name"]: m for m in index["value"]}
        assert set(entries) == set(models) and all(m["state"] == "READY" for m in entries.values())

    for what, name, protocol, i in checks:
        r = results[i]
        path, art, x, raw, scores64, label, rt, scores_name = expected[name]
        where = f"{what} {name} over {protocol}"
        assert r["ok"], f"{where}: {r}"
        if what == "ready":
            assert r["value"] is True, where
            continue
        if what == "metadata":
            meta = r["value"]
            assert meta["name"] == name, where
            assert [(t["name"], t["datatype"], [int(s) for s in t["shape"]]) for t in meta["inputs"]] == [
                (
                    "x",
                    "FP32" if x.dtype.kind == "f" else rt.metadata.get("input_dtype", "int64").upper(),
                    [-1, x.shape[1]],
                )
            ], where
            score_type = {"float32": "FP32", "float64": "FP64"}[raw.dtype.name]
            assert [(t["name"], t["datatype"], [int(s) for s in t["shape"]]) for t in meta["outputs"]] == [
                (scores_name, score_type, [-1, rt.n_classes]),
                ("label", "INT64", [-1]),
            ], where
            continue
        out = {k: saved[v] for k, v in r["outputs"].items()}
        assert r["model_name"] == name, where
        if what in ("all", "int32"):
            assert list(out) == [scores_name, "label"], where
            s, lab = out[scores_name], out["label"]
            assert s.dtype == raw.dtype and s.shape == raw.shape, where  # the file's datatype and [N, C]
            assert np.array_equal(s, raw) and np.array_equal(s.astype(np.float64), scores64), where
            assert lab.dtype == np.int64 and lab.shape == (len(x),) and np.array_equal(lab, label), where
            assert r["shapes"] == {scores_name: list(raw.shape), "label": [len(x)]}, where
        elif what == "label-only":
            assert list(out) == ["label"] and np.array_equal(out["label"], label), where
        elif what == "top2":
            top = out[scores_name]
            assert r["datatypes"] == {scores_name: "BYTES"} and top.shape == (len(x), 2), where
            order = np.argsort(-raw, axis=1, kind="stable")[:, :2]
            for row in range(len(x)):
                for j in range(2):
                    value, index, cls = _text(top[row, j]).split(":", 2)
                    c = order[row, j]
                    assert (int(index), cls) == (c, rt.class_names[c]), where
                    assert raw.dtype.type(float(value)) == raw[row, c], where
        elif what == "class-names":
            names = [_text(v) for v in out["label"].reshape(-1)]
            assert names == [rt.class_names[k] for k in label], where

    # Both front ends count their requests in the one Prometheus registry.
    status, _, body = server.request("GET", "/metrics", headers=AUTH)
    assert status == 200
    counts = {
        protocol: sum(
            float(line.rsplit(" ", 1)[1])
            for line in body.decode().splitlines()
            if line.startswith("bnc_serve_requests_total{") and f'protocol="{protocol}"' in line
        )
        for protocol in ("rest", "grpc")
    }
    per_protocol = len(models) * 5  # five infer steps per model and protocol
    assert counts["grpc"] >= per_protocol and counts["rest"] >= 2 * per_protocol, counts


def _text(value) -> str:
    """A BYTES element as tritonclient gives it: bytes (binary data) or str (JSON data)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _error_steps(models):
    """``[(step, expected HTTP status, expected gRPC code, message fragments)]`` for one protocol."""
    name = "nb_onnx"
    art = models[name].artifact
    d = len(art.cardinalities)
    bad = np.zeros((3, d), dtype=np.int64)
    bad[2, 1] = int(art.cardinalities[1])  # one past feature 1's range, in row 2
    cases = [
        (
            {"model": name, "inputs": [{"name": "x", "datatype": "INT64", "array": "bad"}]},
            "400",
            "INVALID_ARGUMENT",
            ["feature 1", "row 2", str(int(art.cardinalities[1]))],
        ),
        (
            {"model": name, "inputs": [{"name": "x", "datatype": "INT64", "array": "neg"}]},
            "400",
            "INVALID_ARGUMENT",
            ["feature 0", "row 0", "-1"],
        ),
        (
            {"model": name, "inputs": [{"name": "x", "datatype": "INT64", "array": "wide"}]},
            "400",
            "INVALID_ARGUMENT",
            [str(d)],
        ),
        (
            {"model": name, "inputs": [{"name": "x", "datatype": "FP32", "array": "float"}]},
            "400",
            "INVALID_ARGUMENT",
            [],
        ),
        (
            {"model": name, "inputs": [{"name": "y", "datatype": "INT64", "array": "ok"}]},
            "400",
            "INVALID_ARGUMENT",
            ["'x'"],
        ),
        (
            {"model": name, "inputs": [{"name": "x", "datatype": "INT64", "array": "ok"}], "outputs": ["nope"]},
            "400",
            "INVALID_ARGUMENT",
            ["nope"],
        ),
        (
            {"model": "no_such_model", "inputs": [{"name": "x", "datatype": "INT64", "array": "ok"}]},
            "404",
            "NOT_FOUND",
            ["no_such_model"],
        ),
        (
            {"model": name, "version": "000000000000", "inputs": [{"name": "x", "datatype": "INT64", "array": "ok"}]},
            "404",
            "NOT_FOUND",
            ["000000000000"],
        ),
        (
            {
                "model": name,
                "inputs": [{"name": "x", "datatype": "INT64", "array": "ok"}],
                "headers": {"Authorization": "Bearer wrong-key-wrong-key-wrong"},
            },
            "401",
            "UNAUTHENTICATED",
            [],
        ),
    ]
    arrays = {
        "bad": bad,
        "neg": np.where(np.arange(d) == 0, -1, 0)[None, :].astype(np.int64),
        "wide": np.zeros((2, d + 1), dtype=np.int64),
        "float": np.zeros((2, d), dtype=np.float32),
        "ok": np.zeros((2, d), dtype=np.int64),
    }
    return cases, arrays


def test_errors_are_400_404_401_and_invalid_argument_not_found(served):
    tmp, models, server = served
    cases, arrays = _error_steps(models)
    steps = [{**step, "protocol": protocol, "op": "infer"} for protocol in PROTOCOLS for step, *_ in cases]
    steps += [{"protocol": p, "op": "model_metadata", "model": "no_such_model"} for p in PROTOCOLS]
    steps += [{"protocol": p, "op": "index", "headers": {"Authorization": "Bearer x"}} for p in PROTOCOLS]
    steps += [{"protocol": p, "op": "live", "headers": {"Authorization": "Bearer x"}} for p in PROTOCOLS]
    results, _ = run_plan(steps, tmp, server=server, arrays=arrays, headers=AUTH)
    k = 0
    for protocol in PROTOCOLS:
        for step, status, code, fragments in cases:
            r = results[k]
            k += 1
            where = f"{step} over {protocol}: {r}"
            assert not r["ok"], where
            expected = f"StatusCode.{code}" if protocol == "grpc" else status
            assert r["error"]["status"] == expected, where
            for fragment in fragments:
                assert fragment in r["error"]["message"], where
    for _protocol in PROTOCOLS:  # unknown model's metadata
        r = results[k]
        k += 1
        assert not r["ok"] and r["error"]["status"] in ("404", "StatusCode.NOT_FOUND"), r
    for _protocol in PROTOCOLS:  # a wrong token is refused everywhere but liveness
        r = results[k]
        k += 1
        assert not r["ok"] and r["error"]["status"] in ("401", "StatusCode.UNAUTHENTICATED"), r
    for _protocol in PROTOCOLS:
        assert results[k] == {"ok": True, "value": True}
        k += 1


def test_explicit_version_and_repository_unload_load(served):
    tmp, models, server = served
    name = "tan_onnx"
    x = _rows(models[name], 1)
    version_steps = [{"protocol": "http", "op": "model_metadata", "model": name}]
    (meta,), _ = run_plan(version_steps, tmp, server=server, headers=AUTH)
    version = meta["value"]["versions"][0]
    xin = [{"name": "x", "datatype": "INT64", "array": "x"}]
    steps = []
    for protocol in PROTOCOLS:
        steps += [
            {"protocol": protocol, "op": "infer", "model": name, "version": version, "inputs": xin},
            {"protocol": protocol, "op": "unload", "model": name},
            {"protocol": protocol, "op": "model_ready", "model": name},
            {"protocol": protocol, "op": "infer", "model": name, "inputs": xin},
            {"protocol": protocol, "op": "index"},
            {"protocol": protocol, "op": "load", "model": name},
            {"protocol": protocol, "op": "model_ready", "model": name},
            {"protocol": protocol, "op": "infer", "model": name, "inputs": xin},
        ]
    results, saved = run_plan(steps, tmp, server=server, arrays={"x": x}, headers=AUTH)
    raw, _, label, _ = _expected(models[name].path, x)
    for i, protocol in enumerate(PROTOCOLS):
        pinned, unload, ready_after_unload, infer_unloaded, index, load, ready, infer = results[8 * i : 8 * i + 8]
        where = f"over {protocol}"
        assert pinned["ok"] and pinned["model_version"] == version, where
        assert np.array_equal(saved[pinned["outputs"]["label"]], label), where
        assert unload == {"ok": True} and load == {"ok": True}, where
        # Unloaded: not ready (tritonclient's is_model_ready is False), inference 503/UNAVAILABLE.
        if ready_after_unload["ok"]:
            assert ready_after_unload["value"] is False, where
        assert not infer_unloaded["ok"], where
        assert infer_unloaded["error"]["status"] in ("503", "StatusCode.UNAVAILABLE"), where
        states = {m["name"]: m["state"] for m in index["value"]}
        assert states[name] != "READY" and states["nb_onnx"] == "READY", where
        assert ready["value"] is True and infer["ok"] and infer["model_version"] == version, where
        assert np.array_equal(saved[infer["outputs"]["log_joint"]], raw), where


_FIELDS = r'''
def fields(m, prefix=""):
    """{full message name: sorted [name, number, type, repeated, message type]} of ``m`` and its nested types."""
    out = {}
    name = prefix + m.name
    rows = []
    for f in m.fields:
        repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == 3
        rows.append([f.name, f.number, f.type, bool(repeated), f.message_type.full_name if f.message_type else ""])
    out[name] = sorted(rows)
    for n in m.nested_types:
        out.update(fields(n, name + "."))
    return out
'''
_DUMP = (
    "import json\nfrom tritonclient.grpc import service_pb2\n"
    + _FIELDS
    + r"""
d = service_pb2.DESCRIPTOR
msgs = {}
for m in d.message_types_by_name.values():
    msgs.update(fields(m))
svc = d.services_by_name["GRPCInferenceService"]
methods = {m.name: [m.input_type.full_name, m.output_type.full_name, m.client_streaming, m.server_streaming]
           for m in svc.methods}
print(json.dumps({"package": d.package, "messages": msgs, "methods": methods}))
"""
)


def test_proto_is_tritons_field_for_field():
    """Every message and RPC of our grpc_service.proto is Triton's (as generated into tritonclient):
    same package, names, numbers, types and labels, nested messages and map entries included."""
    import json
    import subprocess

    from bnc_deploy.serve.proto import grpc_service_pb2

    done = subprocess.run([str(client_python()), "-c", _DUMP], capture_output=True, text=True, check=True)
    theirs = json.loads(done.stdout)
    namespace: dict = {}
    exec(_FIELDS, namespace)  # noqa: S102 - the same function on our side (the project's protobuf)
    d = grpc_service_pb2.DESCRIPTOR
    ours = {}
    for m in d.message_types_by_name.values():
        ours.update(namespace["fields"](m))
    assert d.package == theirs["package"] == "inference"
    assert len(ours) >= 25, sorted(ours)
    for name, fields in ours.items():
        assert fields == theirs["messages"].get(name), f"message {name} differs from tritonclient's"
    svc = d.services_by_name["GRPCInferenceService"]
    for m in svc.methods:
        assert [m.input_type.full_name, m.output_type.full_name, m.client_streaming, m.server_streaming] == theirs[
            "methods"
        ][m.name], m.name
    assert len(svc.methods) == 12  # health, metadata, infer, repository, statistics, config, trace


_CONFIG_FIELDS = r'''
def config_fields(d):
    """{full name: [[field, number, type, repeated, message or enum type]] of each message, {value: number}
    of each enum} of the file descriptor ``d``, nested ones included."""
    out = {}

    def enum(e):
        out[e.full_name] = {v.name: v.number for v in e.values}

    def message(m):
        rows = []
        for f in m.fields:
            repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == 3
            kind = f.message_type or f.enum_type
            rows.append([f.name, f.number, f.type, bool(repeated), kind.full_name if kind else ""])
        out[m.full_name] = rows
        for e in m.enum_types:
            enum(e)
        for n in m.nested_types:
            message(n)

    for m in d.message_types_by_name.values():
        message(m)
    for e in d.enum_types_by_name.values():
        enum(e)
    return out
'''


def test_model_config_is_a_subset_of_tritons():
    """Our model_config.proto is a wire-compatible subset of Triton's: every message is Triton's and
    each field we declare has Triton's name, number, type and label; every enum is Triton's whole."""
    import json
    import subprocess

    from bnc_deploy.serve.proto import model_config_pb2

    code = "import json\nfrom tritonclient.grpc import model_config_pb2\n" + _CONFIG_FIELDS
    code += "print(json.dumps(config_fields(model_config_pb2.DESCRIPTOR)))"
    done = subprocess.run([str(client_python()), "-c", code], capture_output=True, text=True, check=True)
    theirs = json.loads(done.stdout)
    namespace: dict = {}
    exec(_CONFIG_FIELDS, namespace)  # noqa: S102 - the same function on our side (the project's protobuf)
    ours = namespace["config_fields"](model_config_pb2.DESCRIPTOR)
    assert {"inference.ModelConfig", "inference.ModelInput", "inference.DataType"} <= set(ours)
    for name, mine in ours.items():
        assert name in theirs, name
        if isinstance(mine, dict):
            assert mine == theirs[name], f"enum {name} differs from tritonclient's"
        else:
            assert [row for row in mine if row not in theirs[name]] == [], f"message {name}: fields not Triton's"
