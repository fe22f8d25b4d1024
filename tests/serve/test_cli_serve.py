"""``bnc-serve`` as a process: start on free loopback ports, serve, access log, SIGTERM drains and
exits 0; bad arguments exit 2 with one line; several uvicorn workers behind one port."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import numpy as np
import pytest

pytest.importorskip("uvicorn", reason="bnc-serve needs the 'serve' extra")

import serve_support as ss

from bnc_deploy.runtimes.base import load_runtime


@pytest.fixture(scope="module")
def repo_files(tmp_path_factory):
    return ss.build_repository(tmp_path_factory.mktemp("cli") / "repo", tflite=False)


def binary_infer(server, name, x, headers=None):
    data = np.ascontiguousarray(x, dtype=np.int64).tobytes()
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "INT64",
                    "shape": list(x.shape),
                    "parameters": {"binary_data_size": len(data)},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    return server.request(
        "POST",
        f"/v2/models/{name}/infer",
        head + data,
        {"Inference-Header-Content-Length": str(len(head)), **(headers or {})},
    )


def test_serves_logs_and_stops_on_sigterm(repo_files):
    folder = repo_files["nb_onnx"].path.parent
    with ss.start_server(folder) as server:
        assert server.request("GET", "/v2/health/ready")[0] == 200
        x = ss.valid_rows(repo_files["nb_onnx"], n=4)
        status, headers, body = binary_infer(server, "nb_onnx", x)  # http.client: no Content-Type header
        assert status == 200, body
        n = int(headers["inference-header-content-length"])
        head = json.loads(body[:n])
        scores, labels = load_runtime(repo_files["nb_onnx"].path).run(x)
        sizes = [o["parameters"]["binary_data_size"] for o in head["outputs"]]
        got_scores = np.frombuffer(body[n : n + sizes[0]], "<f4").reshape(head["outputs"][0]["shape"])
        got_labels = np.frombuffer(body[n + sizes[0] :], "<i8")
        np.testing.assert_array_equal(got_scores.astype(np.float64), scores)
        np.testing.assert_array_equal(got_labels, labels)
        assert server.json("POST", "/v2/models/nope/infer", {})[0] == 404
        code = server.stop()
        log = server.log()
        access = server.access_log()
    assert code == 0, log
    assert "bnc-serve: model nb_onnx: READY" in log and "bnc-serve: stopped" in log
    infer = [a for a in access if a["path"] == "/v2/models/nb_onnx/infer"]
    assert infer and infer[0]["status"] == 200 and infer[0]["method"] == "POST" and infer[0]["ms"] >= 0
    assert any(a["status"] == 404 for a in access)


def test_sigterm_drains_a_request_in_flight(repo_files, tmp_path):
    """A request waiting in the batcher's queue when SIGTERM arrives still gets its answer."""
    folder = repo_files["nb_onnx"].path.parent
    keys = tmp_path / "keys"
    keys.write_text("a-long-enough-api-key-123\n")
    auth = {"Authorization": "Bearer a-long-enough-api-key-123"}
    server = ss.start_server(
        folder, args=["--max-batch", "1000", "--max-queue-delay-ms", "1500", "--api-key-file", keys]
    )
    try:
        assert server.request("GET", "/v2/health/live")[0] == 200
        assert server.request("GET", "/v2/health/ready")[0] == 401
        assert server.request("GET", "/v2/health/ready", headers=auth)[0] == 200
        result = {}
        x = ss.valid_rows(repo_files["tan_onnx"], n=2)
        t = threading.Thread(target=lambda: result.update(r=binary_infer(server, "tan_onnx", x, auth)))
        start = time.monotonic()
        t.start()
        time.sleep(0.5)  # the request is queued (1.5 s delay) when the signal comes
        code = server.stop()
        t.join(10)
        elapsed = time.monotonic() - start
    finally:
        server.stop()
    assert code == 0, server.log()
    assert result["r"][0] == 200, result
    assert elapsed >= 1.0  # it waited for the request, not killed it


def test_bad_arguments_exit_2_with_one_line(tmp_path):
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    for args, match in [
        (["--repository", str(tmp_path), "--http", f"127.0.0.1:{port}"], "cannot listen"),
        (["--repository", str(tmp_path / "missing")], "must be a directory"),
        (["--repository", str(tmp_path), "--workers", "2", "--grpc", "127.0.0.1:0"], "--workers"),
        (["--repository", str(tmp_path), "--runtime", "nope"], "nope"),
        (["--repository", str(tmp_path), "--http", "host:port"], "bad address"),
        (["--repository", str(tmp_path), "--api-key-file", str(tmp_path / "none")], "cannot read"),
    ]:
        r = subprocess.run([*ss.BNC_SERVE, *args], check=False, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, (args, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert lines[-1].startswith("bnc-serve: error:") and match in lines[-1], r.stderr
    taken.close()


@pytest.mark.slow
def test_two_workers_answer_behind_one_port(repo_files):
    """--workers 2: uvicorn's process manager runs the app factory (bnc_deploy.serve.app:app_from_env)."""
    folder = repo_files["nb_onnx"].path.parent
    with ss.start_server(folder, args=["--workers", "2"], ready_timeout=120) as server:
        server.wait_until(120, "/v2/health/ready")
        x = ss.valid_rows(repo_files["dnn_onnx"], n=3)
        _, labels = load_runtime(repo_files["dnn_onnx"].path).run(x)
        for _ in range(10):
            status, _, body = server.request(
                "POST",
                "/v2/models/dnn_onnx/infer",
                json.dumps(
                    {"inputs": [{"name": "x", "datatype": "INT64", "shape": list(x.shape), "data": x.ravel().tolist()}]}
                ).encode(),
            )
            assert status == 200 and json.loads(body)["outputs"][1]["data"] == labels.tolist()
        code = server.stop()
    assert code == 0, server.log()
