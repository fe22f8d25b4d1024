"""Reload under load: tritonclient load loops (HTTP and gRPC, two clients each) run while the model
file is replaced (write-then-rename) and ``load``ed 20 times. Zero failed requests; every response
is exactly the old or the new version's outputs, as its ``model_version`` says, never a mix."""

from __future__ import annotations

import hashlib
import os
import time

import numpy as np
import pytest
from serve_support import ServerProcess
from tritonclient_support import client_python, read_result, run_plan

from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.verify import export_path

RELOADS = 20


def _digest(outputs) -> str:
    """The driver's digest of a response: name, dtype, shape and bytes of each output in order."""
    h = hashlib.sha256()
    for name, arr in outputs:
        h.update(name.encode() + str(arr.dtype).encode() + str(arr.shape).encode() + arr.tobytes())
    return h.hexdigest()


@pytest.mark.slow
def test_reload_twenty_times_under_load_never_fails_or_mixes(tmp_path):
    client_python()
    rng = np.random.default_rng(20)
    cards = [4, 3, 5, 2, 4, 3]
    staged = {}
    for tag in ("a", "b"):  # same features and classes, different tables: different outputs
        art = random_bnc_artifact(rng, n_classes=4, tan=tag == "b", bits=3, int_bits=2, cardinalities=cards)
        staged[tag] = export_path(art, tmp_path / f"stage_{tag}.onnx", "onnx").read_bytes()
    x = (np.random.default_rng(1).random((16, len(cards))) * cards).astype(np.int64)
    expected = {}
    for tag, data in staged.items():
        path = tmp_path / f"check_{tag}.onnx"
        path.write_bytes(data)
        rt = load_runtime(path)
        scores, label = rt.invoke(rt.prepare(x))
        version = hashlib.sha256(data).hexdigest()[:12]
        expected[version] = _digest([("log_joint", np.asarray(scores)), ("label", np.asarray(label, np.int64))])
    assert len(set(expected.values())) == 2, "the two versions must answer differently"

    repo = tmp_path / "repo"
    repo.mkdir()
    target = repo / "m.onnx"
    target.write_bytes(staged["a"])
    stop = tmp_path / "stop"
    with ServerProcess(repo, grpc=True) as proc:
        loop = {
            "op": "loop",
            "model": "m",
            "clients": 2,
            "seconds": 60,
            "record": True,
            "stop_file": str(stop),
            "inputs": [{"name": "x", "datatype": "INT64", "array": "x"}],
            "outputs": ["log_joint", "label"],
            "digest_outputs": ["log_joint", "label"],
        }
        runs = [
            run_plan([{**loop, "protocol": p}], tmp_path, server=proc, arrays={"x": x}, background=True)
            for p in ("http", "grpc")
        ]
        time.sleep(3.0)  # the clients are up and requesting
        loads = []
        for k in range(RELOADS):
            tmp = repo / ".m.onnx.tmp"  # hidden and .tmp: never picked up half-written
            tmp.write_bytes(staged["b" if k % 2 == 0 else "a"])
            os.replace(tmp, target)
            t0 = time.perf_counter()
            status, _, body = proc.request("POST", "/v2/repository/models/m/load", b"{}")
            loads.append(time.perf_counter() - t0)
            assert status == 200, body
            time.sleep(0.15)  # requests on the new version before the next swap
        stop.touch()
        results = []
        for popen, result_path in runs:
            out, _ = popen.communicate(timeout=120)
            assert popen.returncode == 0, out
            results.append(read_result(result_path)[0][0])
        assert proc.stop() == 0, proc.log()

    seen = set()
    for protocol, r in zip(("http", "grpc"), results):
        assert r["failures"] == [], f"{protocol}: {len(r['failures'])} failed requests, e.g. {r['failures'][:3]}"
        assert r["count"] == len(r["records"]) > 0
        for version, digest in r["records"]:
            assert version in expected, f"{protocol}: unknown version {version}"
            assert digest == expected[version], f"{protocol}: a response of version {version} has other outputs"
            seen.add(version)
        print(f"{protocol}: {r['count']} requests in {r['elapsed']:.1f} s, 0 failed")
    assert seen == set(expected), "both versions served during the reloads"
    print(f"{RELOADS} loads: median {np.median(loads) * 1e3:.1f} ms, max {max(loads) * 1e3:.1f} ms")
