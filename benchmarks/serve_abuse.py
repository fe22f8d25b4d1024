"""``bnc-serve`` under hostile-but-fair clients: each scenario of an outside stress test, measured.

Scenarios (each against a fresh server on loopback, default flags unless said):

* ``inplace``: a served ``.tflite`` (and ``.onnx``) changed in place while requests run - ``cp``
  of another version over it (truncate + write, same inode), one byte flipped, a region zeroed.
  Reports whether the server survived, the statuses, and answers whose outputs differ from the
  version they name.
* ``idle``: 1,000 connections that send nothing: how many the server still holds after 15 s.
* ``slow-body``: a 740-byte infer body sent at 10 B/s: the status and when it came.
* ``flood``: ``--flood`` idle sockets (split over REST and gRPC): whether a normal REST and gRPC
  client are answered meanwhile, and the server's open descriptors.
* ``big-json``: one JSON request of 10^6 rows x 16 features (48 MB) while liveness is probed
  every 20 ms: the slowest liveness answer, and the request's own time and status.
* ``disconnect``: a client that closes mid-body: the status in the access log.
* ``many-inputs``: a request naming 200,000 inputs: status, answer size, time.

``--tree DIR`` serves from another checkout of the project (e.g. an older commit, to rerun the
same scenarios against it: ``git worktree add /tmp/old <commit>``, then link ``exporters`` and
``runtimes`` into ``/tmp/old/bnc_deploy/`` so that the checkout imports as a whole)::

    python benchmarks/serve_abuse.py [--tree DIR] [--only big-json,idle] [--flood 19000] [--json out.json]

Loopback only; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CARDS = [4, 3, 5, 2, 4, 3, 6, 2, 3, 4, 5, 2, 3, 4, 2, 3]  # letter's shape: 16 features, 26 classes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``bnc-serve`` from ``tree`` on free loopback ports (HTTP, and gRPC when asked)."""

    def __init__(self, tree: Path, repo: Path, args=(), grpc: bool = False) -> None:
        self.port, self.grpc_port = free_port(), (free_port() if grpc else None)
        cmd = [
            sys.executable,
            "-m",
            "bnc_deploy.cli.serve",
            "--repository",
            str(repo),
            "--http",
            f"127.0.0.1:{self.port}",
            *map(str, args),
        ]
        if grpc:
            cmd += ["--grpc", f"127.0.0.1:{self.grpc_port}"]
        env = dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")
        self.log = tempfile.NamedTemporaryFile(prefix="bnc-serve-", suffix=".log", delete=False)
        self.access = tempfile.NamedTemporaryFile(prefix="bnc-serve-", suffix=".access", delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.access, stderr=self.log, env=env, cwd=str(tree))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bnc-serve exited: {Path(self.log.name).read_text()[-2000:]}")
            try:
                if self.request("GET", "/v2/health/live", timeout=2)[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("bnc-serve did not start")

    def request(self, method, path, body=None, timeout=30.0):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def export(art, path: Path, fmt: str) -> bytes:
    from bnc_deploy.verify import export_path

    return export_path(art, path, fmt).read_bytes()


def artifacts(n: int = 2):
    from bnc_deploy.testing import random_bnc_artifact

    rng = np.random.default_rng(0)
    return [
        random_bnc_artifact(rng, n_classes=26, tan=False, bits=3, int_bits=2, cardinalities=CARDS) for _ in range(n)
    ]


def json_body(x: np.ndarray, outputs=None) -> bytes:
    req = {"inputs": [{"name": "x", "datatype": "INT64", "shape": list(x.shape), "data": x.ravel().tolist()}]}
    if outputs:
        req["outputs"] = [{"name": o} for o in outputs]
    return json.dumps(req).encode()


# -- scenarios ----------------------------------------------------------------------------------
def inplace(tree: Path, work: Path) -> dict:
    from bnc_deploy.runtimes.base import load_runtime
    from bnc_deploy.validation import random_valid_codes

    a_art, b_art = artifacts()
    out = {}
    for fmt in ("tflite", "onnx"):
        repo = work / f"inplace-{fmt}"
        repo.mkdir()
        stage = work / f"stage-{fmt}"
        stage.mkdir()
        a, b = export(a_art, stage / f"a.{fmt}", fmt), export(b_art, stage / f"b.{fmt}", fmt)
        x = random_valid_codes(np.asarray(CARDS), 4, 1)
        labels = {
            hashlib.sha256(d).hexdigest()[:12]: load_runtime(stage / f"{t}.{fmt}").predict(x).tolist()
            for t, d in (("a", a), ("b", b))
        }
        target = repo / f"m.{fmt}"
        target.write_bytes(a)
        body = json_body(x, ["label"])
        for how in ("cp", "flip", "zero"):
            target.write_bytes(a)
            server = Server(tree, repo, ["--poll", "0.2"])
            statuses, wrong, t_end = {}, 0, time.monotonic() + 3
            server.request("POST", "/v2/models/m/infer", body)
            if how == "cp":
                with open(target, "r+b") as f:
                    f.truncate(0)
                    f.write(b)
            else:
                size = target.stat().st_size
                with open(target, "r+b") as f:
                    if how == "flip":
                        f.seek(size // 2)
                        c = f.read(1)
                        f.seek(size // 2)
                        f.write(bytes([c[0] ^ 0xFF]))
                    else:
                        f.seek(size // 4)
                        f.write(b"\0" * (size // 2))
            while time.monotonic() < t_end and server.alive():
                try:
                    status, data = server.request("POST", "/v2/models/m/infer", body, timeout=5)
                except OSError as exc:
                    statuses[type(exc).__name__] = statuses.get(type(exc).__name__, 0) + 1
                    continue
                statuses[status] = statuses.get(status, 0) + 1
                if status == 200:
                    res = json.loads(data)
                    if labels.get(res["model_version"]) != res["outputs"][0]["data"]:
                        wrong += 1
                time.sleep(0.02)
            alive = server.alive()
            code = server.stop()
            out[f"{fmt} {how}"] = {
                "alive": alive,
                "exit": code,
                "statuses": {str(k): v for k, v in statuses.items()},
                "wrong_outputs": wrong,
            }
    return out


def idle(tree: Path, repo: Path) -> dict:
    server = Server(tree, repo)
    socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(1000)]
    base = server.fds()
    time.sleep(15)
    held = 0
    for s in socks:
        s.setblocking(False)
        try:
            held += s.recv(1) != b""  # b"" = closed by the server
        except BlockingIOError:
            held += 1
        except OSError:
            pass
        s.close()
    server.stop()
    return {"opened": 1000, "server_fds_with_them": base, "held_after_15s": held}


def slow_body(tree: Path, repo: Path) -> dict:
    server = Server(tree, repo)
    body = json_body(np.zeros((20, 16), dtype=np.int64))[:740]
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
    t0 = time.monotonic()
    s.settimeout(0.1)
    answer = b""
    for i in range(len(body)):
        try:
            s.sendall(body[i : i + 1])
        except OSError:
            break
        try:
            answer += s.recv(4096)
        except (TimeoutError, BlockingIOError):
            pass
        except OSError:
            break
        if answer:
            break
    s.settimeout(5)
    try:
        answer += s.recv(4096)
    except OSError:
        pass
    s.close()
    server.stop()
    return {
        "status_line": answer.split(b"\r\n", 1)[0].decode(errors="replace"),
        "seconds": round(time.monotonic() - t0, 1),
    }


def flood(tree: Path, repo: Path, n: int) -> dict:
    import grpc

    from bnc_deploy.serve.proto import grpc_service_pb2 as pb
    from bnc_deploy.serve.proto import grpc_service_pb2_grpc as pb_grpc

    server = Server(tree, repo, grpc=True)
    base = server.fds()
    socks, refused = [], 0
    for i in range(n):
        port = server.port if i % 2 == 0 else server.grpc_port
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            refused += 1
    peak = server.fds()
    t0 = time.monotonic()
    try:
        rest = server.request("GET", "/v2/health/live", timeout=10)[0]
    except OSError as exc:
        rest = type(exc).__name__
    rest_s = time.monotonic() - t0
    t0 = time.monotonic()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            live = pb_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest(), timeout=10).live
            grpc_status = "live" if live else "not live"
    except grpc.RpcError as exc:
        grpc_status = exc.code().name
    grpc_s = time.monotonic() - t0
    for s in socks:
        s.close()
    time.sleep(2)
    after = server.fds()
    server.stop()
    return {
        "sockets": n,
        "client_refused": refused,
        "server_fds": {"baseline": base, "flooded": peak, "after": after},
        "rest_live": rest,
        "rest_seconds": round(rest_s, 3),
        "grpc_live": grpc_status,
        "grpc_seconds": round(grpc_s, 3),
    }


def big_json(tree: Path, repo: Path) -> dict:
    from bnc_deploy.validation import random_valid_codes

    x = random_valid_codes(np.asarray(CARDS), 10**6, 2)
    body = json_body(x)
    server = Server(tree, repo)
    result = {}

    def send():
        t0 = time.monotonic()
        status, data = server.request("POST", "/v2/models/m/infer", body, timeout=600)
        result.update(status=status, seconds=round(time.monotonic() - t0, 2), response_mb=round(len(data) / 1e6, 1))

    t = threading.Thread(target=send)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    t.start()
    lat = []
    while t.is_alive():
        t0 = time.perf_counter()
        conn.request("GET", "/v2/health/live")
        conn.getresponse().read()
        lat.append(time.perf_counter() - t0)
        time.sleep(0.02)
    t.join()
    conn.close()
    rss = None
    try:
        rss = (
            int(
                [
                    ln
                    for ln in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines()
                    if ln.startswith("VmHWM")
                ][0].split()[1]
            )
            // 1024
        )
    except (OSError, IndexError):
        pass
    server.stop()
    return {
        "request_mb": round(len(body) / 1e6, 1),
        **result,
        "liveness_probes": len(lat),
        "liveness_max_ms": round(max(lat) * 1000, 1),
        "liveness_p50_ms": round(float(np.median(lat)) * 1000, 2),
        "server_peak_rss_mb": rss,
    }


def disconnect(tree: Path, repo: Path) -> dict:
    server = Server(tree, repo)
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b'POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"inputs"')
    time.sleep(0.3)
    s.close()
    time.sleep(0.5)
    server.stop()
    lines = [json.loads(line) for line in Path(server.access.name).read_text().splitlines() if line.startswith("{")]
    return {
        "logged_status": [ln["status"] for ln in lines if ln["path"].endswith("/infer")],
        "server_log_mentions_error": "error" in Path(server.log.name).read_text().lower(),
    }


def many_inputs(tree: Path, repo: Path) -> dict:
    body = json.dumps(
        {"inputs": [{"name": f"x{i}", "datatype": "INT64", "shape": [1], "data": [0]} for i in range(200_000)]}
    ).encode()
    server = Server(tree, repo)
    t0 = time.monotonic()
    status, data = server.request("POST", "/v2/models/m/infer", body, timeout=120)
    seconds = time.monotonic() - t0
    server.stop()
    return {"status": status, "answer_bytes": len(data), "seconds": round(seconds, 3)}


SCENARIOS = ("inplace", "idle", "slow-body", "flood", "big-json", "disconnect", "many-inputs")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--tree", type=Path, default=REPO, help="checkout whose bnc-serve to run (default: this one)")
    p.add_argument("--only", help=f"comma-separated scenarios of {', '.join(SCENARIOS)}")
    p.add_argument("--flood", type=int, default=19000, help="sockets of the flood scenario (default 19000)")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    chosen = args.only.split(",") if args.only else list(SCENARIOS)
    work = Path(tempfile.mkdtemp(prefix="bnc-abuse-"))
    repo = work / "repo"
    repo.mkdir()
    export(artifacts(1)[0], repo / "m.onnx", "onnx")
    runs = {
        "inplace": lambda: inplace(args.tree, work),
        "idle": lambda: idle(args.tree, repo),
        "slow-body": lambda: slow_body(args.tree, repo),
        "flood": lambda: flood(args.tree, repo, args.flood),
        "big-json": lambda: big_json(args.tree, repo),
        "disconnect": lambda: disconnect(args.tree, repo),
        "many-inputs": lambda: many_inputs(args.tree, repo),
    }
    results = {}
    for name in chosen:
        t0 = time.monotonic()
        results[name] = runs[name]()
        print(f"{name} ({time.monotonic() - t0:.0f} s): {json.dumps(results[name])}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"tree": str(args.tree), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
