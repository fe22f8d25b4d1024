"""``bnc-serve`` latency and throughput with the official tritonclient, beside the local runtime call.

One run measures, on one machine and model (letter NB, 3 bits, ONNX in onnxruntime):

* **local**: the runtime call itself (``rt.invoke(rt.prepare(row))``, 1 thread), the adapter
  call with validation (``rt.run(row)``, the fused small-batch check) and the same with the full
  check (the path a batch the fused check declines takes), batch 1, interleaved
  (benchmarks/bench_run_overhead.py) - the floor a server adds its overhead to;
* **batch-1 round trip** p50/p99 of tritonclient over loopback: HTTP binary tensors (tritonclient's
  default), HTTP JSON, gRPC; and the project's own ``http`` runtime adapter (stdlib client); and
  the floor of each protocol: tritonclient's ``is_server_live`` (a round trip with no work);
* **throughput** of a bounded load loop: ``--clients`` tritonclient processes x ``--seconds``, over
  HTTP and gRPC, without batching and with ``--max-batch N --max-queue-delay-ms T``.

Targets (issue 13): HTTP p50 <= 0.5 ms, gRPC p50 <= 0.4 ms. The server and the clients share the
machine's cores, so throughput is what this machine sustains with both, not the server alone.

    python benchmarks/bench_serve.py [--model letter_nb.onnx] [--n 3000] [--seconds 10] [--clients 4]
        [--max-batch 16 --max-queue-delay-ms 1] [--json out.json]

Without ``--model`` it trains and exports one (needs the letter data, ../shared/datasets)::

    bnc-train --data letter --model nb --init ml --bits 3 --int-bits 2 --epochs 0 -o DIR/letter_nb.bnc
    bnc-export DIR/letter_nb.bnc --format onnx -o DIR/repo/letter_nb.onnx

(``--init ml --epochs 0``: maximum-likelihood tables quantized to 3 bits, no gradient epochs - a
quick model with letter's exact shape: 16 features, 26 classes; latency does not depend on the
table values). tritonclient runs in its own venv (``.venv-tritonclient``, or
``BNC_DEPLOY_TRITONCLIENT_PYTHON``; see tests/serve/tritonclient_support.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_run_overhead, beside this file
DRIVER = ROOT / "tests" / "serve" / "tritonclient_driver.py"


def client_python() -> str:
    configured = os.environ.get("BNC_DEPLOY_TRITONCLIENT_PYTHON")
    path = Path(configured) if configured else ROOT / ".venv-tritonclient" / "bin" / "python"
    if not path.is_file():
        sys.exit(
            f"bench_serve: no tritonclient venv at {path} (python3 -m venv .venv-tritonclient && "
            ".venv-tritonclient/bin/pip install -r tests/serve/tritonclient-requirements.txt)"
        )
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(folder: Path) -> Path:
    bnc = folder / "letter_nb.bnc"
    out = folder / "repo" / "letter_nb.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    subprocess.run(
        [
            str(bin_dir / "bnc-train"),
            "--data",
            "letter",
            "--model",
            "nb",
            "--init",
            "ml",
            "--bits",
            "3",
            "--int-bits",
            "2",
            "--epochs",
            "0",
            "-o",
            str(bnc),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [str(bin_dir / "bnc-export"), str(bnc), "--format", "onnx", "-o", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


class Server:
    def __init__(self, repository: Path, *args: str) -> None:
        self.http, self.grpc = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        cmd = [
            sys.executable,
            "-m",
            "bnc_deploy.cli.serve",
            "--repository",
            str(repository),
            "--http",
            self.http,
            "--grpc",
            self.grpc,
            "--no-access-log",
            "--log-level",
            "warning",
            *args,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.http}/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"bnc-serve exited: {self.proc.stderr.read().decode()}") from None
            time.sleep(0.1)
        raise RuntimeError("bnc-serve did not become ready")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def driver(plan: dict, tmp: Path, background: bool = False):
    tag = time.monotonic_ns()
    plan_path, result_path = tmp / f"plan-{tag}.json", tmp / f"result-{tag}.json"
    plan_path.write_text(json.dumps(plan))
    cmd = [client_python(), str(DRIVER), str(plan_path), str(result_path)]
    if background:
        return subprocess.Popen(cmd), result_path
    subprocess.run(cmd, check=True)
    return json.loads(result_path.read_text())


def percentiles(seconds) -> dict:
    us = np.asarray(seconds) * 1e6
    return {
        "p50_us": round(float(np.percentile(us, 50)), 1),
        "p99_us": round(float(np.percentile(us, 99)), 1),
        "n": len(us),
    }


def local_latency(model: Path, x: np.ndarray, n: int) -> dict:
    """The runtime call and the validated adapter call, interleaved (benchmarks/bench_run_overhead.py)."""
    from bench_run_overhead import side_by_side

    from bnc_deploy.runtimes.base import load_runtime

    rt = load_runtime(model, threads=1)
    rt_full = load_runtime(model, threads=1)
    rt_full._fused_check = lambda rows: None  # the full check's column: what run costs without the fused one
    times = side_by_side(rt, rt_full, x, n)
    names = {
        "invoke": "local runtime call (invoke)",
        "run": "local adapter call (run, validated)",
        "run, full check": "local adapter call (run, full check)",
    }
    return {label: percentiles(times[key]) for key, label in names.items()}


def adapter_latency(url: str, x: np.ndarray, n: int) -> dict:
    from bnc_deploy.runtimes.http_adapter import HttpAdapter

    rt = HttpAdapter(url=url, model="letter_nb")
    rows = [rt.prepare(x[i : i + 1]) for i in range(256)]
    for k in range(200):
        rt.invoke(rows[k % len(rows)])
    times = []
    for k in range(n):
        t0 = time.perf_counter()
        rt.invoke(rows[k % len(rows)])
        times.append(time.perf_counter() - t0)
    rt.close()
    return percentiles(times)


def load_loop(server: Server, protocol: str, clients: int, seconds: float, tmp: Path, arrays: str) -> dict:
    start_at = time.time() + 4.0  # every client process imported tritonclient and connected by then
    step = {
        "protocol": protocol,
        "op": "loop",
        "model": "letter_nb",
        "clients": 1,
        "seconds": seconds,
        "start_at": start_at,
        "inputs": [{"name": "x", "datatype": "INT64", "array": "x1"}],
        "outputs": ["log_joint", "label"],
    }
    plan = {"arrays": arrays, "http": server.http, "grpc": server.grpc, "steps": [step]}
    runs = [driver(plan, tmp, background=True) for _ in range(clients)]
    results = []
    for popen, path in runs:
        popen.wait()
        results.append(json.loads(path.read_text())[0])
    count = sum(r["count"] for r in results)
    failures = sum(len(r["failures"]) for r in results)
    elapsed = max(r["elapsed"] for r in results)
    return {
        "requests": count,
        "failures": failures,
        "seconds": round(elapsed, 2),
        "requests_per_s": round(count / elapsed, 1),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="letter NB .onnx (default: train and export one)")
    p.add_argument("--n", type=int, default=3000, help="timed batch-1 requests per protocol (default 3000)")
    p.add_argument("--seconds", type=float, default=10.0, help="load loop duration (default 10)")
    p.add_argument("--clients", type=int, default=4, help="load loop client processes (default 4)")
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--max-queue-delay-ms", type=float, default=1.0)
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)

    from bnc_deploy.datasets import load_dataset

    tmp = Path(tempfile.mkdtemp(prefix="bench_serve_"))
    try:
        if args.model is None:
            model = make_model(tmp)
        else:
            (tmp / "repo").mkdir()
            model = tmp / "repo" / "letter_nb.onnx"
            shutil.copyfile(args.model, model)
        x = load_dataset("letter").x_test.astype(np.int64)
        arrays = tmp / "inputs.npz"
        np.savez(arrays, x1=x[:1])
        results = {
            "model": str(args.model or "letter_nb.onnx (trained by the benchmark)"),
            "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg(),
        }
        results["latency"] = local_latency(model, x, args.n)

        server = Server(model.parent)
        try:
            steps = [
                {
                    "protocol": proto,
                    "op": "latency",
                    "model": "letter_nb",
                    "n": args.n,
                    "warmup": 300,
                    "inputs": [{"name": "x", "datatype": "INT64", "array": "x1"}],
                }
                for proto in ("http", "http-json", "grpc")
            ]
            steps += [
                {"protocol": proto, "op": "latency", "call": "live", "n": args.n, "warmup": 300}
                for proto in ("http", "grpc")
            ]
            plan = {"arrays": str(arrays), "http": server.http, "grpc": server.grpc, "steps": steps}
            names = (
                "tritonclient HTTP binary",
                "tritonclient HTTP JSON",
                "tritonclient gRPC",
                "floor: tritonclient HTTP is_server_live",
                "floor: tritonclient gRPC is_server_live",
            )
            for proto, r in zip(names, driver(plan, tmp)):
                results["latency"][proto] = percentiles(r["seconds"])
            results["latency"]["bnc-deploy http runtime (stdlib client)"] = adapter_latency(server.http, x, args.n)
            results["throughput"] = {
                f"{proto}, no batching": load_loop(server, proto, args.clients, args.seconds, tmp, str(arrays))
                for proto in ("http", "grpc")
            }
        finally:
            server.stop()
        server = Server(
            model.parent, "--max-batch", str(args.max_batch), "--max-queue-delay-ms", str(args.max_queue_delay_ms)
        )
        try:
            batching = f"--max-batch {args.max_batch} --max-queue-delay-ms {args.max_queue_delay_ms:g}"
            for proto in ("http", "grpc"):
                results["throughput"][f"{proto}, {batching}"] = load_loop(
                    server, proto, args.clients, args.seconds, tmp, str(arrays)
                )
        finally:
            server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(
        f"letter NB 3-bit (ONNX, onnxruntime), batch 1, loopback; {results['cpu_count']} CPUs, "
        f"load average {results['load_average'][0]:.2f}"
    )
    print(f"{'':44} {'p50 us':>8} {'p99 us':>8}")
    for name, r in results["latency"].items():
        print(f"{name:44} {r['p50_us']:8.1f} {r['p99_us']:8.1f}")
    lat = results["latency"]
    ratio = lat["local adapter call (run, validated)"]["p50_us"] / lat["local runtime call (invoke)"]["p50_us"]
    above = lat["tritonclient HTTP binary"]["p50_us"] - lat["floor: tritonclient HTTP is_server_live"]["p50_us"]
    print(f"run p50 / invoke p50: {ratio:.2f}; HTTP binary p50 above the HTTP empty-call floor: {above:.1f} us")
    print(f"\nload loop: {args.clients} tritonclient processes x {args.seconds:g} s, batch-1 requests")
    for name, r in results["throughput"].items():
        print(f"{name:44} {r['requests_per_s']:10.1f} req/s  ({r['requests']} requests, {r['failures']} failed)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
