"""A large request does not stall the server: decoding, the model call and encoding run off the
event loop (``serve.app.WorkerPools``), so liveness answers within 100 ms (99th percentile of
probes every 20 ms) while a JSON request of 10^6 rows of 16 features (48 MB) is served, and its
answer is the runtime's."""

from __future__ import annotations

import http.client
import json
import threading
import time

import numpy as np
import pytest
from serve_support import ServerProcess

from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.validation import random_valid_codes
from bnc_deploy.verify import export_path

ROWS = 10**6
CARDS = [4, 3, 5, 2, 4, 3, 6, 2, 3, 4, 5, 2, 3, 4, 2, 3]  # 16 features, as letter
LIVENESS_BUDGET_S = 0.1


@pytest.mark.slow
def test_liveness_answers_within_100_ms_while_a_million_row_json_request_is_served(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    art = random_bnc_artifact(
        np.random.default_rng(3), n_classes=26, tan=False, bits=3, int_bits=2, cardinalities=CARDS
    )
    path = export_path(art, repo / "big.onnx", "onnx")
    x = random_valid_codes(np.asarray(CARDS), ROWS, 5)
    body = json.dumps(
        {
            "inputs": [{"name": "x", "datatype": "INT64", "shape": list(x.shape), "data": x.ravel().tolist()}],
            "outputs": [{"name": "label"}],
        }
    ).encode()
    assert len(body) > 40e6
    with ServerProcess(repo, args=["--threads", "2"]) as proc:
        result: dict = {}

        def big() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", proc.http_port, timeout=300)
            conn.request("POST", "/v2/models/big/infer", body=body)
            r = conn.getresponse()
            result["status"], result["body"] = r.status, r.read()
            conn.close()

        sender = threading.Thread(target=big)
        probe = http.client.HTTPConnection("127.0.0.1", proc.http_port, timeout=30)
        probe.request("GET", "/v2/health/live")
        probe.getresponse().read()  # connected and warm
        sender.start()
        latencies = []
        while sender.is_alive():
            t0 = time.perf_counter()
            probe.request("GET", "/v2/health/live")
            r = probe.getresponse()
            r.read()
            latencies.append(time.perf_counter() - t0)
            assert r.status == 200
            time.sleep(0.02)
        sender.join()
        probe.close()
        assert result["status"] == 200, result["body"][:500]
        assert len(latencies) >= 20, "the large request was served too fast to measure anything"
        # p99, not the maximum: on an oversubscribed machine (the decoder process, the server and
        # this test share 2 cores) the OS may hold back any one probe; a blocked event loop holds
        # back every probe for seconds (10.6 s here before the work left the loop).
        p99 = float(np.percentile(latencies, 99))
        assert p99 < LIVENESS_BUDGET_S and max(latencies) < 5 * LIVENESS_BUDGET_S, (
            f"liveness p99 {p99 * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms "
            f"(p50 {np.median(latencies) * 1000:.1f} ms, {len(latencies)} probes)"
        )
        labels = np.asarray(json.loads(result["body"])["outputs"][0]["data"])
        np.testing.assert_array_equal(labels, load_runtime(path).predict(x))
        assert proc.stop() == 0


@pytest.mark.parametrize("rows", [3, 40_000])
@pytest.mark.parametrize("binary_label", [False, True])
def test_chunked_response_is_the_bytes_of_one_json_dumps(rows, binary_label):
    """The response written in slices and chunks (``rest_codec``) is byte for byte the one-piece answer."""
    from bnc_deploy.serve.protocol import datatype_of, tensor_to_bytes, tensor_to_json_data
    from bnc_deploy.serve.rest_codec import RESPONSE_CHUNK_BYTES, InferRequest, encode_infer_body

    rng = np.random.default_rng(rows)
    scores = rng.standard_normal((rows, 26)).astype(np.float32)
    labels = np.argmax(scores, axis=1).astype(np.int64)
    request = InferRequest({}, has_id=True, id='tricky "data":null id', binary_of={"label": binary_label})
    status, chunks, headers = encode_infer_body("m", "abc", request, [("log_joint", scores), ("label", labels)])
    outputs = [
        {"name": "log_joint", "datatype": "FP32", "shape": [rows, 26], "data": tensor_to_json_data(scores)},
        {"name": "label", "datatype": datatype_of(labels.dtype), "shape": [rows]},
    ]
    if binary_label:
        outputs[1]["parameters"] = {"binary_data_size": labels.nbytes}
    else:
        outputs[1]["data"] = tensor_to_json_data(labels)
    head = json.dumps(
        {"model_name": "m", "model_version": "abc", "outputs": outputs, "id": request.id}, separators=(",", ":")
    ).encode()
    expected = head + (tensor_to_bytes(labels) if binary_label else b"")
    assert status == 200 and b"".join(chunks) == expected
    assert max(len(c) for c in chunks) <= 2 * RESPONSE_CHUNK_BYTES + labels.nbytes
    if rows > 10_000:
        assert len(chunks) > 2, "a large body is handed over in chunks"
    if binary_label:
        assert dict(headers)[b"inference-header-content-length"] == str(len(head)).encode()


@pytest.mark.parametrize("values", [[0, 3, 255], [-1, 5], [-(2**40), 2**40], [2**63 - 1, -(2**63)]])
def test_inputs_narrowed_for_the_trip_from_the_decoder_process_come_back_exact(values):
    from bnc_deploy.serve.app import _parse_narrowed, _widened

    body = json.dumps({"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, len(values)], "data": values}]})
    request, dtypes = _parse_narrowed(body.encode(), None, 10)
    x = _widened(request.inputs, dtypes)["x"]
    assert x.dtype == np.int64 and x.ravel().tolist() == values
