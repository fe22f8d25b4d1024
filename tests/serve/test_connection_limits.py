"""Connection limits of ``bnc-serve`` (``bnc_deploy.serve.connections``, ``serve.limits``): idle,
slow and flooding sockets cannot starve a normal client, are closed by the header, body and
keep-alive timeouts, and the server's file descriptors return to their baseline."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
from serve_support import ServerProcess, build_repository, valid_rows

from bnc_deploy.serve.limits import ServeLimits


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _infer_body(model, n: int = 2) -> bytes:
    x = valid_rows(model, n)
    return json.dumps(
        {"inputs": [{"name": "x", "datatype": "INT64", "shape": list(x.shape), "data": x.ravel().tolist()}]}
    ).encode()


def _wait_fds(pid: int, most: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    n = _fds(pid)
    while n > most and time.monotonic() < deadline:
        time.sleep(0.2)
        n = _fds(pid)
    return n


def _read_all(sock: socket.socket, timeout: float) -> bytes:
    """What the server sends until it closes the connection (or ``timeout``)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def _closed_by_server(sock: socket.socket, timeout: float) -> bool:
    """Whether the server closes ``sock`` within ``timeout`` (whatever it sent before)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("repo")
    models = build_repository(folder, tflite=False)
    for path in folder.iterdir():  # one small model keeps the server's start quick
        if path.stem != "nb_onnx":
            path.unlink()
    return folder, models["nb_onnx"]


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")


def test_thousands_of_idle_sockets_cannot_starve_a_client_and_descriptors_return(repo):
    folder, model = repo
    body = _infer_body(model)
    with ServerProcess(folder, args=["--max-connections", "200", "--header-timeout", "3"]) as proc:
        assert proc.request("POST", "/v2/models/nb_onnx/infer", body)[0] == 200
        baseline = _fds(proc.proc.pid)
        idle = []
        try:
            for _ in range(3000):  # far more than the cap; each sends nothing
                idle.append(socket.create_connection(("127.0.0.1", proc.http_port), timeout=5))
            assert _fds(proc.proc.pid) <= baseline + 200 + 20, "the cap bounds the server's descriptors"
            for _ in range(20):  # a normal client is served while the idle sockets are open
                status, _, out = proc.request("POST", "/v2/models/nb_onnx/infer", body, timeout=10)
                assert status == 200, out
            status, _, _ = proc.request("GET", "/v2/health/live", timeout=10)
            assert status == 200
        finally:
            for s in idle:
                s.close()
        assert _wait_fds(proc.proc.pid, baseline + 2, 15) <= baseline + 2
        metrics = proc.request("GET", "/metrics")[2].decode()
        assert 'bnc_serve_connections_closed_total{reason="evicted"}' in metrics
        assert proc.stop() == 0


def test_slow_header_and_body_senders_are_cut_off_with_408(repo):
    folder, model = repo
    body = _infer_body(model)
    with ServerProcess(folder, args=["--header-timeout", "1.5", "--body-timeout", "1.5"]) as proc:
        baseline = _fds(proc.proc.pid)
        # A body trickled at 10 B/s: 408 once the body timeout has passed, then the connection closes.
        slow = socket.create_connection(("127.0.0.1", proc.http_port))
        slow.sendall(b"POST /v2/models/nb_onnx/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        t0 = time.monotonic()
        try:
            for i in range(40):
                slow.sendall(body[i : i + 1])
                time.sleep(0.1)
        except OSError:
            pass  # closed by the server mid-way
        answer = _read_all(slow, 5)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert time.monotonic() - t0 < 6
        slow.close()
        # Headers trickled a byte at a time: closed after the header timeout, with 408.
        trickle = socket.create_connection(("127.0.0.1", proc.http_port))
        t0 = time.monotonic()
        try:
            for b in b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                trickle.sendall(bytes([b]))
                time.sleep(0.05)
        except OSError:
            pass
        answer = _read_all(trickle, 5)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert time.monotonic() - t0 < 6
        trickle.close()
        # A connection that never sends anything: closed without an answer.
        silent = socket.create_connection(("127.0.0.1", proc.http_port))
        assert _read_all(silent, 5) == b""
        silent.close()
        # Meanwhile a normal client is answered as usual.
        assert proc.request("POST", "/v2/models/nb_onnx/infer", body)[0] == 200
        assert _wait_fds(proc.proc.pid, baseline + 2, 10) <= baseline + 2
        text = proc.request("GET", "/metrics")[2].decode()
        for reason in ("header_timeout", "body_timeout"):
            assert f'bnc_serve_connections_closed_total{{reason="{reason}"}}' in text
        assert proc.stop() == 0


def test_keep_alive_connections_close_after_the_keep_alive_timeout(repo):
    folder, _ = repo
    with ServerProcess(folder, args=["--keep-alive-timeout", "1"]) as proc:
        s = socket.create_connection(("127.0.0.1", proc.http_port))
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        t0 = time.monotonic()
        data = _read_all(s, 5)
        assert data.startswith(b"HTTP/1.1 200")
        assert 0.5 < time.monotonic() - t0 < 4, "closed by the keep-alive timeout"
        s.close()
        assert proc.stop() == 0


def test_grpc_idle_sockets_are_closed_by_the_handshake_timeout(repo):
    grpc = pytest.importorskip("grpc")
    folder, _ = repo
    with ServerProcess(
        folder, http=False, grpc=True, args=["--header-timeout", "1", "--max-connections", "50"]
    ) as proc:
        time.sleep(0.5)
        baseline = _fds(proc.proc.pid)
        idle = [socket.create_connection(("127.0.0.1", proc.grpc_port), timeout=5) for _ in range(300)]
        try:
            assert _fds(proc.proc.pid) <= baseline + 50 + 20, "the cap bounds the server's descriptors"
        finally:
            closed = sum(1 for s in idle if _closed_by_server(s, 4))
            for s in idle:
                s.close()
        assert closed == len(idle), "every idle socket is closed by the server"
        assert _wait_fds(proc.proc.pid, baseline + 2, 10) <= baseline + 2
        from bnc_deploy.serve.proto import grpc_service_pb2 as pb
        from bnc_deploy.serve.proto import grpc_service_pb2_grpc as pb_grpc

        with grpc.insecure_channel(proc.grpc_address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
        assert proc.stop() == 0


def test_limits_come_back_from_the_environment():
    limits = ServeLimits(max_rows=10, header_timeout=2.5, max_connections=7)
    assert ServeLimits.from_env(limits.to_env()) == limits


@pytest.mark.parametrize("field,value", [("max_rows", 0), ("header_timeout", -1.0), ("max_connections", 1.5)])
def test_bad_limits_are_refused_naming_the_flag(field, value):
    from bnc_deploy.errors import ConfigError

    with pytest.raises(ConfigError, match=f"--{field.replace('_', '-')}"):
        ServeLimits(**{field: value})


def test_rows_over_the_limit_are_refused_before_decoding(repo):
    folder, model = repo
    x = valid_rows(model, 3)
    body = json.dumps(
        {"inputs": [{"name": "x", "datatype": "INT64", "shape": [3, x.shape[1]], "data": x.ravel().tolist()}]}
    ).encode()
    many = json.dumps(
        {"inputs": [{"name": f"x{i}", "datatype": "INT64", "shape": [1], "data": [0]} for i in range(200_000)]}
    ).encode()
    with ServerProcess(folder, args=["--max-rows", "2"]) as proc:
        status, _, out = proc.request("POST", "/v2/models/nb_onnx/infer", body)
        assert status == 413 and b"--max-rows" in out, out
        status, _, out = proc.request("POST", "/v2/models/nb_onnx/infer", many)
        assert status == 413 and len(out) < 4200, out[:300]
        assert proc.request("POST", "/v2/models/nb_onnx/infer", _infer_body(model, 2))[0] == 200
        assert proc.stop() == 0


def test_a_client_that_leaves_early_is_logged_as_499_not_500(repo):
    folder, model = repo
    body = _infer_body(model)
    with ServerProcess(folder) as proc:
        for path in ("/v2/models/nb_onnx/infer", "/v2/repository/index"):
            s = socket.create_connection(("127.0.0.1", proc.http_port))
            s.sendall(
                b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (path.encode(), len(body)) + body[:5]
            )
            time.sleep(0.3)
            s.close()

        def statuses():
            return [(line["path"], line["status"]) for line in proc.access_log() if "/health/" not in line["path"]]

        deadline = time.monotonic() + 10
        while len(statuses()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        statuses = statuses()
        assert statuses == [("/v2/models/nb_onnx/infer", 499), ("/v2/repository/index", 499)], statuses
        assert proc.stop() == 0
        assert "internal error" not in proc.log() and "Traceback" not in proc.log(), proc.log()[-2000:]


def test_error_messages_are_capped():
    from bnc_deploy.serve.errors import MAX_ERROR_CHARS, BadRequest, status_of

    status, code, message = status_of(BadRequest("x" * 2_000_000))
    assert (status, code) == (400, "INVALID_ARGUMENT")
    assert len(message) <= MAX_ERROR_CHARS and message.endswith("more characters)")
    assert status_of(BadRequest("short"))[2] == "short"
