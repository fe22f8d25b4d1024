"""Prometheus metrics over REST: per-model request counts, failures, request/queue/compute histograms;
unknown model names cannot grow the label set."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("starlette", reason="bnc-serve needs the 'serve' extra")
pytest.importorskip("starlette.testclient", reason="Starlette's TestClient needs httpx2 (extra 'test')")

import serve_support as ss
from starlette.testclient import TestClient

from bnc_deploy.serve.app import create_app
from bnc_deploy.serve.repository import ModelRepository


def sample(text: str, name: str, **labels) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        if m and m.group(1) == name and ",".join(sorted(m.group(2).split(","))) == want:
            return float(m.group(3))
    return 0.0


def test_metrics_count_requests_failures_and_durations(tmp_path):
    files = ss.build_repository(tmp_path / "repo", tflite=False)
    repo = ModelRepository(tmp_path / "repo")
    repo.load_all()
    with TestClient(create_app(repo, access_log=False)) as client:
        before = client.get("/metrics").text
        x = ss.valid_rows(files["tan_onnx"], n=2)
        ok = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [2, x.shape[1]], "data": x.ravel().tolist()}]}
        bad = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, x.shape[1]], "data": [-1] * x.shape[1]}]}
        for _ in range(3):
            assert client.post("/v2/models/tan_onnx/infer", content=json.dumps(ok)).status_code == 200
        assert client.post("/v2/models/tan_onnx/infer", content=json.dumps(bad)).status_code == 400
        for i in range(5):
            assert client.post(f"/v2/models/random{i}/infer", content=b"{}").status_code == 404
        r = client.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        after = r.text

    def delta(name, **labels):
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("bnc_serve_requests_total", model="tan_onnx", protocol="rest") == 4
    assert delta("bnc_serve_request_failures_total", model="tan_onnx", protocol="rest", code="400") == 1
    assert delta("bnc_serve_request_duration_seconds_count", model="tan_onnx", protocol="rest") == 4
    assert delta("bnc_serve_compute_duration_seconds_count", model="tan_onnx") == 3  # the bad one never ran
    assert delta("bnc_serve_queue_duration_seconds_count", model="tan_onnx") == 3
    assert delta("bnc_serve_batch_rows_sum", model="tan_onnx") == 6
    assert delta("bnc_serve_requests_total", model="_unknown", protocol="rest") == 5
    assert "random0" not in after
    assert np.isfinite(sample(after, "bnc_serve_request_duration_seconds_sum", model="tan_onnx", protocol="rest"))
    repo.close()
