"""``bnc-serve --workers 2``: ``/metrics`` reports every worker (prometheus_client's multiprocess mode
in a temporary directory the parent creates and removes). Requests are sent on new connections
until both workers have answered some (each connection's worker found through ``/proc``); then a
scrape answered by either worker counts every request, and the ready gauge is the minimum over the
workers (a version unloaded in one worker reads 0 from both)."""

from __future__ import annotations

import http.client
import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("uvicorn", reason="bnc-serve needs the 'serve' extra")
from prometheus_client.parser import text_string_to_metric_families
from serve_support import ServerProcess

from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.verify import export_path

pytestmark = pytest.mark.skipif(
    not Path("/proc/net/tcp").exists(), reason="finds each connection's worker process through /proc (Linux)"
)

X = np.array([[0, 1, 2], [2, 0, 1]], dtype=np.int64)
BODY = json.dumps({"inputs": [{"name": "x", "datatype": "INT64", "shape": [2, 3], "data": X.ravel().tolist()}]})


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _worker_of(server_pid: int, server_port: int, conn: http.client.HTTPConnection) -> int | None:
    """The worker process holding the server's end of ``conn`` (/proc/net/tcp: its socket inode)."""
    client_port = conn.sock.getsockname()[1]
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
            inode = fields[9]
    for pid in _children(server_pid):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == f"socket:[{inode}]":
                    return pid
            except OSError:
                continue
    return None


def _call(conn: http.client.HTTPConnection, method: str, path: str, body: str | None = None) -> bytes:
    conn.request(method, path, body)
    response = conn.getresponse()
    data = response.read()
    assert response.status == 200, (path, response.status, data)
    return data


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.slow
def test_metrics_of_two_workers_add_up(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    art = random_bnc_artifact(
        np.random.default_rng(3), n_classes=3, tan=False, bits=3, int_bits=2, cardinalities=[3, 3, 3]
    )
    export_path(art, repo / "m.onnx", "onnx")
    with ServerProcess(repo, args=["--workers", "2", "--no-access-log"], ready_timeout=180) as server:
        server.wait_until(180, "/v2/health/ready")
        folder = Path(re.search(r"metrics in (\S+)", server.log()).group(1))
        assert folder.is_dir()
        by_worker: dict[int, http.client.HTTPConnection] = {}
        sent = 0
        deadline = time.monotonic() + 90
        while len(by_worker) < 2 and time.monotonic() < deadline:
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
            _call(conn, "POST", "/v2/models/m/infer", BODY)
            sent += 1
            pid = _worker_of(server.proc.pid, server.http_port, conn)
            assert pid is not None, "no worker process holds the connection"
            if pid in by_worker:
                conn.close()
            else:
                by_worker[pid] = conn
        assert len(by_worker) == 2, f"one worker answered all {sent} connections"
        for k, conn in enumerate(by_worker.values()):
            for _ in range(3 + 2 * k):  # unequal shares: a worker's own count is never the sum
                _call(conn, "POST", "/v2/models/m/infer", BODY)
                sent += 1
        first = next(iter(by_worker.values()))
        _call(first, "POST", "/v2/repository/models/m/unload", "{}")  # in one worker only
        for pid, conn in by_worker.items():
            samples = _samples(_call(conn, "GET", "/metrics").decode())
            assert _worker_of(server.proc.pid, server.http_port, conn) == pid  # answered by that worker
            labels = (("model", "m"), ("protocol", "rest"))
            assert samples[("bnc_serve_requests_total", labels)] == sent, (pid, sent)
            assert samples[("bnc_serve_request_duration_seconds_count", labels)] == sent
            assert samples[("bnc_serve_model_ready", (("model", "m"), ("version", "1")))] == 0.0
        for conn in by_worker.values():
            conn.close()
        assert server.stop() == 0, server.log()
    assert not folder.exists(), "the parent removes the metrics directory"
