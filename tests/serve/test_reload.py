"""Reload: a changed file is loaded and checked beside the serving one, then swapped atomically.

Under concurrent inference (threads calling the core, as both front ends do) 20 swaps between two
models give zero failed requests and every response entirely from the old or the new version; a
file that fails to load keeps the old version serving with the error in the index; polling picks
up files published by write-then-rename and ignores temporary names.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

pytest.importorskip("starlette", reason="bnc-serve needs the 'serve' extra")


from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.serve.model import ModelLoadError, file_version
from bnc_deploy.serve.repository import ModelRepository
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.verify import build


@pytest.fixture(scope="module")
def two_versions():
    """Bytes of two different NB models with the same inputs and classes (A and B)."""
    cards = [3, 4, 2, 5]
    a = random_bnc_artifact(np.random.default_rng(1), cardinalities=cards, n_classes=3, tan=False, bits=3, int_bits=2)
    b = random_bnc_artifact(np.random.default_rng(2), cardinalities=cards, n_classes=3, tan=False, bits=3, int_bits=2)
    return build(a, "onnx")[0], build(b, "onnx")[0]


def publish(folder, name: str, data: bytes) -> None:
    """Write-then-rename, the documented way to publish into a served directory."""
    tmp = folder / f".{name}.partial.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, folder / name)


def expected_outputs(tmp_path, data: bytes, x) -> tuple:
    p = tmp_path / "expected.onnx"
    p.write_bytes(data)
    scores, labels = load_runtime(p).run(x)
    p.unlink()
    return scores.astype(np.float32), labels


def test_twenty_swaps_under_load_lose_no_request_and_never_mix(tmp_path, two_versions):
    folder = tmp_path / "repo"
    folder.mkdir()
    publish(folder, "m.onnx", two_versions[0])
    repo = ModelRepository(folder)
    repo.load_all()
    x = np.array([[0, 0, 0, 0], [2, 3, 1, 4], [1, 2, 0, 3], [2, 0, 1, 1]], dtype=np.int64)
    expected = {file_version(d): expected_outputs(tmp_path, d, x) for d in two_versions}
    assert len(expected) == 2 and not np.array_equal(*[e[0] for e in expected.values()])
    stop = threading.Event()
    seen, failures = [], []

    def client():
        while not stop.is_set():
            try:
                model = repo.get("m")
                out = dict(model.infer({"x": x}))
                seen.append((model.version, out["log_joint"], out["label"]))
            except Exception as exc:  # noqa: BLE001 - every failure is a test failure
                failures.append(repr(exc))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        versions = []
        for i in range(20):
            publish(folder, "m.onnx", two_versions[(i + 1) % 2])
            versions.append(repo.load("m").version)
            time.sleep(0.01)
    finally:
        stop.set()
        for t in threads:
            t.join()
    repo.close()
    assert failures == []
    assert versions == [file_version(two_versions[(i + 1) % 2]) for i in range(20)]
    assert len(seen) > 20
    counts = {v: 0 for v in expected}
    for version, scores, labels in seen:
        want_scores, want_labels = expected[version]  # KeyError: a version never published
        np.testing.assert_array_equal(scores, want_scores)  # all rows from one version: no mix
        np.testing.assert_array_equal(labels, want_labels)
        counts[version] += 1
    assert all(counts.values()), counts  # both versions answered


def test_a_failed_reload_keeps_the_old_version_and_shows_the_error(tmp_path, two_versions):
    folder = tmp_path / "repo"
    folder.mkdir()
    publish(folder, "m.onnx", two_versions[0])
    repo = ModelRepository(folder)
    repo.load_all()
    old = repo.get("m")
    publish(folder, "m.onnx", two_versions[1][:-40] + bytes(40))  # damaged: integrity seal fails
    with pytest.raises(ModelLoadError, match="m.onnx"):
        repo.load("m")
    assert repo.get("m") is old and repo.ready()
    (entry,) = repo.index()
    assert entry["version"] == old.version and entry["state"] == "READY"
    assert entry["reason"].startswith(f"load failed, still serving version {old.version}")
    assert dict(old.infer({"x": np.zeros((1, 4), np.int64)}))["label"].shape == (1,)
    publish(folder, "m.onnx", two_versions[1])
    assert repo.load("m").version == file_version(two_versions[1])
    assert repo.index()[0]["reason"] == ""
    assert repo.load("m") is repo.get("m")  # same content: no new load
    repo.close()


def test_polling_loads_published_files_and_ignores_partial_ones(tmp_path, two_versions):
    folder = tmp_path / "repo"
    folder.mkdir()
    publish(folder, "m.onnx", two_versions[0])
    repo = ModelRepository(folder)
    repo.load_all()
    repo.start_polling(0.05)
    try:
        (folder / ".n.onnx.abc.tmp.onnx").write_bytes(two_versions[1][:100])  # a file being written
        publish(folder, "m.onnx", two_versions[1])
        publish(folder, "n.onnx", two_versions[0])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            index = {e["name"]: e for e in repo.index()}
            if index.get("n", {}).get("state") == "READY" and index["m"]["version"] == file_version(two_versions[1]):
                break
            time.sleep(0.05)
        assert {e["name"] for e in repo.index()} == {"m", "n"}
        assert repo.get("m").version == file_version(two_versions[1])
        assert repo.get("n").version == file_version(two_versions[0])
        (folder / "n.onnx").unlink()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and repo.index()[-1]["state"] == "READY":
            time.sleep(0.05)
        assert repo.index()[-1] == {"name": "n", "version": "", "state": "UNAVAILABLE", "reason": "model file removed"}
        assert repo.ready()  # a removed model does not make the server unready
        publish(folder, "n.onnx", two_versions[1])  # it comes back
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and repo.index()[-1]["state"] != "READY":
            time.sleep(0.05)
        assert repo.get("n").version == file_version(two_versions[1])
    finally:
        repo.close()
