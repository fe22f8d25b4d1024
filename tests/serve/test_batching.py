"""Dynamic batching (--max-batch/--max-queue-delay-ms): concurrent requests run together, and every
request gets exactly the result it gets unbatched (exact files: identical scores and labels)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("starlette", reason="bnc-serve needs the 'serve' extra")

import serve_support as ss

from bnc_deploy.serve import metrics
from bnc_deploy.serve.batching import Batcher
from bnc_deploy.serve.repository import ModelRepository


@pytest.fixture(scope="module")
def repo_files(tmp_path_factory):
    return ss.build_repository(tmp_path_factory.mktemp("batch") / "repo")


def batch_rows_sum(name: str) -> tuple[float, float]:
    reg = metrics.REGISTRY
    return (
        reg.get_sample_value("bnc_serve_batch_rows_sum", {"model": name}) or 0.0,
        reg.get_sample_value("bnc_serve_batch_rows_count", {"model": name}) or 0.0,
    )


def test_batched_results_equal_unbatched(repo_files):
    folder = next(iter(repo_files.values())).path.parent
    plain = ModelRepository(folder)
    plain.load_all()
    batched = ModelRepository(folder, max_batch=16, max_queue_delay_ms=20)
    batched.load_all()
    names = [n for n in ("nb_onnx", "tan_tflite", "dnn_onnx", "dnn_tflite", "raw_onnx", "nb_bnc") if n in repo_files]
    requests = {n: [ss.valid_rows(repo_files[n], n=1 + i % 3, seed=i) for i in range(24)] for n in names}
    results, errors = {}, []
    before = {n: batch_rows_sum(n) for n in names}

    def worker(name, k):
        try:
            for i in range(k, 24, 6):
                results[(name, i)] = dict(batched.get(name).infer({"x": requests[name][i]}))
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(n, k)) for n in names for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    after = {n: batch_rows_sum(n) for n in names}
    merged = 0
    for name in names:
        for i, x in enumerate(requests[name]):
            want = dict(plain.get(name).infer({"x": x}))
            got = results[(name, i)]
            assert list(got) == list(want)
            for key, value in want.items():
                assert got[key].dtype == value.dtype and got[key].shape == value.shape
                np.testing.assert_array_equal(got[key], value)
        rows_sum, calls = (a - b for a, b in zip(after[name], before[name]))
        assert rows_sum == sum(len(x) for x in requests[name])  # every row went through the batcher once
        merged += calls < 24  # fewer runtime calls than requests: requests met in a batch
    assert merged, "no model ever ran two requests in one batch"
    plain.close()
    batched.close()


def test_batcher_limits_rows_and_drains_on_close():
    calls = []

    def run(x):
        calls.append(len(x))
        return x * 2.0, x[:, 0].copy()

    b = Batcher(run, max_batch=4, max_queue_delay_ms=50)
    futures = [b.submit(np.full((n, 1), i)) for i, n in enumerate([1, 2, 3, 5, 1])]
    b.close()  # drains everything queued
    for i, (fut, n) in enumerate(zip(futures, [1, 2, 3, 5, 1])):
        scores, labels = fut.result(timeout=5)
        assert scores.shape == (n, 1) and (scores == 2 * i).all() and (labels == i).all()
    assert sum(calls) == 12 and max(calls) == 5  # a request over max_batch runs alone, never split
    assert all(c <= 4 for c in calls if c != 5)
    late = b.submit(np.ones((2, 1)))  # after close: runs on the caller's thread
    assert late.result(timeout=1)[0].tolist() == [[2.0], [2.0]]


def test_batcher_passes_runtime_errors_to_every_waiting_request():
    def run(x):
        raise RuntimeError("runtime broke")

    b = Batcher(run, max_batch=8, max_queue_delay_ms=30)
    futures = [b.submit(np.ones((1, 1))) for _ in range(3)]
    for f in futures:
        with pytest.raises(RuntimeError, match="runtime broke"):
            f.result(timeout=5)
    b.close()
