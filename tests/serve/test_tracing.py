"""OpenTelemetry spans of inference requests and Triton's trace settings (bnc_deploy/serve/tracing.py).

A request carrying a W3C ``traceparent`` (REST header, gRPC metadata; from tritonclient too) makes
``InferRequest`` -> ``queue`` and ``compute`` spans in the header's trace, parented on its span,
with the model's name and version; batched requests too; failures are ERROR spans. The settings
(level, rate, count, per-model overrides) decide which requests are traced; without the SDK, or
with ``OTEL_SDK_DISABLED``, tracing is off, says why, and costs no tracing call. tritonclient's
trace settings calls work over REST and gRPC alike. The exporter comes from the standard
``OTEL_*`` variables (checked end to end with ``bnc-serve`` and the console exporter). Spans are
read from the SDK's ``InMemorySpanExporter``.
"""

from __future__ import annotations

import json
import secrets
import threading

import pytest

pytest.importorskip("starlette", reason="bnc-serve needs the 'serve' extra")
pytest.importorskip("starlette.testclient", reason="Starlette's TestClient needs httpx2 (extra 'test')")

import serve_support as ss
from starlette.testclient import TestClient
from test_statistics import InProcessServer, infer_body

from bnc_deploy.errors import ConfigError, MissingExtraError
from bnc_deploy.serve import statistics, tracing
from bnc_deploy.serve.app import create_app
from bnc_deploy.serve.model import ServedModel
from bnc_deploy.serve.repository import ModelRepository


def _otel():
    pytest.importorskip("opentelemetry.sdk.trace", reason="the 'otel' extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return TracerProvider, SimpleSpanProcessor, InMemorySpanExporter


@pytest.fixture
def exporter():
    """Spans of this test, in memory; tracing on (TIMESTAMPS) for its length."""
    TracerProvider, SimpleSpanProcessor, InMemorySpanExporter = _otel()
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.STATE.use_provider(provider)
    tracing.STATE.update(None, {"trace_level": ["TIMESTAMPS"]})
    try:
        yield memory
    finally:
        tracing.STATE.reset()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with ss.loaded_repository(tmp_path_factory.mktemp("tracing") / "repo") as loaded:
        yield loaded


def traceparent(sampled: bool = True) -> tuple[int, int, str]:
    trace_id, span_id = secrets.randbits(128) | 1, secrets.randbits(64) | 1
    return trace_id, span_id, f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def check_trace(spans, trace_id: int, parent_id: int, model, protocol: str, batch_rows: int | None = None):
    """The three spans of one request in ``trace_id``, parented and timed as the module docstring says."""
    from opentelemetry.trace import SpanKind

    mine = {s.name: s for s in spans if s.context.trace_id == trace_id}
    assert sorted(mine) == ["InferRequest", "compute", "queue"], [s.name for s in spans]
    request, queue, compute = mine["InferRequest"], mine["queue"], mine["compute"]
    assert request.parent is not None and request.parent.span_id == parent_id and request.parent.is_remote
    assert request.kind == SpanKind.SERVER
    assert queue.parent.span_id == compute.parent.span_id == request.context.span_id
    for span in mine.values():
        assert span.attributes["bnc.model_name"] == model.name
        assert span.attributes["bnc.model_version"] == model.version
    assert request.attributes["bnc.protocol"] == protocol
    assert request.start_time <= queue.start_time <= queue.end_time == compute.start_time
    assert compute.start_time < compute.end_time <= request.end_time
    if batch_rows is not None:
        assert compute.attributes["bnc.batch_rows"] == batch_rows


def test_a_traceparent_makes_three_spans_in_its_trace(served, exporter):
    files, repository = served
    model = repository.get("tan_onnx")
    trace_id, span_id, header = traceparent()
    x = ss.valid_rows(files["tan_onnx"], n=3)
    record = statistics.begin(model, "rest", [(b"content-length", b"1"), (b"traceparent", header.encode())])
    model.infer({"x": x}, record=record)
    statistics.end(record)
    check_trace(exporter.get_finished_spans(), trace_id, span_id, model, "rest", batch_rows=3)


def test_batched_requests_each_get_their_spans(tmp_path, exporter):
    files = ss.build_repository(tmp_path / "repo", tflite=False)
    model = ServedModel("nb_onnx", files["nb_onnx"].path, max_batch=2, max_queue_delay_ms=5000)
    x = ss.valid_rows(files["nb_onnx"], n=2)
    traces = [traceparent() for _ in range(2)]

    def one(i: int) -> None:  # gRPC metadata: (str, str) pairs, behind the call that returns them
        record = statistics.begin(model, "grpc", lambda: (("traceparent", traces[i][2]),))
        model.infer({"x": x[i : i + 1]}, record=record)
        statistics.end(record)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    model.close()
    for trace_id, span_id, _ in traces:  # one batch of both: each request's compute span says 2 rows
        check_trace(exporter.get_finished_spans(), trace_id, span_id, model, "grpc", batch_rows=2)


def test_a_failed_request_is_an_error_span(served, exporter):
    from opentelemetry.trace import StatusCode

    files, repository = served
    trace_id, _, header = traceparent()
    bad = ss.valid_rows(files["nb_onnx"], n=2)
    bad[0, 0] = 10**6
    with TestClient(create_app(repository, access_log=False, close_repository=False)) as client:
        r = client.post("/v2/models/nb_onnx/infer", content=infer_body(bad), headers={"traceparent": header})
    assert r.status_code == 400
    (request,) = [s for s in exporter.get_finished_spans() if s.context.trace_id == trace_id]
    assert request.name == "InferRequest" and request.status.status_code == StatusCode.ERROR
    assert request.attributes["bnc.status"] == "400"


def test_tritonclient_requests_over_rest_and_grpc_join_their_traces(tmp_path, exporter):
    from tritonclient_support import client_python, run_plan

    client_python()
    files = ss.build_repository(tmp_path / "repo", tflite=False)
    repository = ModelRepository(tmp_path / "repo")
    repository.load_all()
    model = repository.get("tan_onnx")
    server = InProcessServer(repository)
    rest, grpc_, unsampled = traceparent(), traceparent(), traceparent(sampled=False)
    xin = [{"name": "x", "datatype": "INT64", "array": "x"}]
    base = {"op": "infer", "model": "tan_onnx", "inputs": xin}
    steps = [
        {**base, "protocol": "http", "headers": {"traceparent": rest[2]}},
        {**base, "protocol": "grpc", "headers": {"traceparent": grpc_[2]}},
        {**base, "protocol": "http-json", "headers": {"traceparent": unsampled[2]}},
        {**base, "protocol": "http"},  # no parent: a trace of its own
        {"protocol": "http", "op": "trace_settings"},
        {"protocol": "http", "op": "trace_settings", "model": "tan_onnx", "settings": {"trace_rate": "3"}},
    ]
    try:
        results, _ = run_plan(steps, tmp_path, server=server, arrays={"x": ss.valid_rows(files["tan_onnx"], n=4)})
    finally:
        server.stop()
        repository.close()
    assert all(r["ok"] for r in results), results
    spans = exporter.get_finished_spans()
    check_trace(spans, rest[0], rest[1], model, "rest", batch_rows=4)
    check_trace(spans, grpc_[0], grpc_[1], model, "grpc", batch_rows=4)
    assert not [s for s in spans if s.context.trace_id == unsampled[0]]  # the caller did not sample it
    roots = [s for s in spans if s.name == "InferRequest" and s.parent is None]
    assert len(roots) == 1 and roots[0].attributes["bnc.protocol"] == "rest"
    global_settings, model_settings = results[4]["value"], results[5]["value"]
    assert global_settings["trace_level"] == ["TIMESTAMPS"] and global_settings["trace_mode"] == "opentelemetry"
    assert model_settings["trace_rate"] == "3" and model_settings["trace_level"] == ["TIMESTAMPS"]


def test_tritonclient_reads_and_updates_the_settings_over_grpc(tmp_path, served, exporter):
    from tritonclient_support import client_python, run_plan

    client_python()
    _, repository = served
    server = InProcessServer(repository)
    op = {"protocol": "grpc", "op": "trace_settings"}
    steps = [
        op,
        {**op, "model": "tan_onnx", "settings": {"trace_rate": "3", "trace_count": "5"}},
        {"protocol": "http", "op": "trace_settings", "model": "tan_onnx"},  # REST reads what gRPC set
        {**op, "model": "tan_onnx", "settings": {"trace_rate": None}},  # tritonclient's None: an empty list
        {**op, "settings": {"trace_level": ["TENSORS"]}},
        {**op, "settings": {"trace_rate": "0"}},
        {**op, "model": "no_such_model"},
        {**op, "settings": {"trace_level": ["OFF"]}},
    ]
    try:
        results, _ = run_plan(steps, tmp_path, server=server)
    finally:
        server.stop()

    def settings(r: dict) -> dict:  # TraceSettingResponse (MessageToDict) as REST writes it
        assert r["ok"], r
        return {k: v["value"] if k == "trace_level" else v["value"][0] for k, v in r["value"]["settings"].items()}

    assert settings(results[0]) == {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1",
        "trace_count": "-1",
        "trace_mode": "opentelemetry",
        "trace_available": "true",
    }
    own = settings(results[1])
    assert (own["trace_level"], own["trace_rate"], own["trace_count"]) == (["TIMESTAMPS"], "3", "5")
    assert results[2]["value"] == own
    assert (settings(results[3])["trace_rate"], settings(results[3])["trace_count"]) == ("1", "5")
    for r in results[4:6]:
        assert not r["ok"] and r["error"]["status"] == "StatusCode.INVALID_ARGUMENT", r
    assert not results[6]["ok"] and results[6]["error"]["status"] == "StatusCode.NOT_FOUND"
    assert settings(results[7])["trace_level"] == ["OFF"] and not tracing.STATE.active


def _post(client, path: str, settings) -> tuple[int, dict]:
    r = client.post(path, content=json.dumps(settings))
    return r.status_code, r.json()


def test_settings_pick_the_traced_requests(served, exporter):
    files, repository = served
    x = {name: infer_body(ss.valid_rows(files[name], n=1)) for name in ("tan_onnx", "nb_onnx")}

    def traced(name: str, n: int) -> int:
        exporter.clear()
        for _ in range(n):
            assert client.post(f"/v2/models/{name}/infer", content=x[name]).status_code == 200
        return sum(s.name == "InferRequest" for s in exporter.get_finished_spans())

    with TestClient(create_app(repository, access_log=False, close_repository=False)) as client:
        glob = client.get("/v2/trace/setting").json()
        assert glob == {
            "trace_level": ["TIMESTAMPS"],
            "trace_rate": "1",
            "trace_count": "-1",
            "trace_mode": "opentelemetry",
            "trace_available": "true",
        }
        assert _post(client, "/v2/trace/setting", {"trace_rate": "2"})[0] == 200
        assert traced("nb_onnx", 6) == 3
        status, own = _post(client, "/v2/models/tan_onnx/trace/setting", {"trace_rate": 1, "trace_count": "2"})
        assert status == 200 and (own["trace_rate"], own["trace_count"]) == ("1", "2")
        assert traced("tan_onnx", 5) == 2
        assert client.get("/v2/models/tan_onnx/trace/setting").json()["trace_count"] == "0"
        assert client.get("/v2/trace/setting").json()["trace_count"] == "-1"  # the model's own count ran out
        assert traced("nb_onnx", 4) == 2  # other models still follow the global rate
        status, own = _post(
            client, "/v2/models/tan_onnx/trace/setting", {"trace_rate": None, "trace_count": None, "trace_level": None}
        )
        assert status == 200 and own == client.get("/v2/trace/setting").json()  # back to the global settings
        for bad in ({"trace_level": ["TENSORS"]}, {"trace_rate": "0"}, {"trace_count": "x"}, {"trace_file": "f"}, [1]):
            status, body = _post(client, "/v2/trace/setting", bad)
            assert status == 400 and "error" in body, bad
        assert client.get("/v2/models/no_such_model/trace/setting").status_code == 404
        assert _post(client, "/v2/trace/setting", {"trace_level": ["OFF"]})[0] == 200
        assert not tracing.STATE.active
        assert traced("nb_onnx", 2) == 0


def test_off_or_unavailable_costs_no_tracing_call_and_says_why(served, monkeypatch):
    files, repository = served
    body = infer_body(ss.valid_rows(files["nb_onnx"], n=1))

    def never(*args, **kwargs):
        raise AssertionError("a tracing call while tracing is off")

    monkeypatch.setattr(tracing.STATE, "start_request", never)
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    try:
        with TestClient(create_app(repository, access_log=False, close_repository=False)) as client:
            r = client.post("/v2/models/nb_onnx/infer", content=body, headers={"traceparent": traceparent()[2]})
            assert r.status_code == 200
            settings = client.get("/v2/trace/setting").json()
            assert settings["trace_level"] == ["OFF"] and settings["trace_available"] == "false"
            assert "OTEL_SDK_DISABLED" in settings["trace_unavailable_reason"]
            status, answer = _post(client, "/v2/trace/setting", {"trace_level": ["TIMESTAMPS"]})
            assert status == 400 and "OTEL_SDK_DISABLED" in answer["error"]
            assert "trace" not in client.get("/v2").json()["extensions"]
        assert not tracing.STATE.active
        monkeypatch.delenv("OTEL_SDK_DISABLED")
        find_spec = tracing.importlib.util.find_spec  # as without the extra:
        monkeypatch.setattr(
            tracing.importlib.util,
            "find_spec",
            lambda name, *a: None if "opentelemetry" in name else find_spec(name, *a),
        )
        assert "pip install 'bnc-deploy[otel]'" in tracing.unavailable_reason()
        with pytest.raises(MissingExtraError, match="otel"):
            tracing.configure("TIMESTAMPS")
        tracing.configure("OFF")  # turning nothing on needs nothing
    finally:
        tracing.STATE.reset()


def test_the_exporter_comes_from_the_otel_environment():
    _otel()
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    def names(env):
        found = tracing.exporters_from_env(env)
        for e in found:
            e.shutdown()
        return [f"{type(e).__module__}.{type(e).__name__}" for e in found]

    assert names({"OTEL_TRACES_EXPORTER": "none"}) == []
    assert names({"OTEL_TRACES_EXPORTER": "console"}) == [f"{ConsoleSpanExporter.__module__}.ConsoleSpanExporter"]
    assert ".grpc." in names({})[0]  # the default: otlp over gRPC
    assert ".http." in names({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})[0]
    assert len(names({"OTEL_TRACES_EXPORTER": "console, otlp_proto_http"})) == 2
    with pytest.raises(ConfigError, match="no span exporter"):
        names({"OTEL_TRACES_EXPORTER": "no_such_exporter"})
    with pytest.raises(ConfigError, match="OTLP protocol"):
        names({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "carrier-pigeon"})


def test_bnc_serve_exports_spans_as_the_environment_says(tmp_path):
    _otel()
    files = ss.build_repository(tmp_path / "repo", tflite=False)
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "bnc-serve-test"}
    trace_id, span_id, header = traceparent()
    server = ss.ServerProcess(tmp_path / "repo", args=["--trace-level", "timestamps", "--no-access-log"], env=env)
    try:
        body = infer_body(ss.valid_rows(files["nb_onnx"], n=2))
        status, _, _ = server.request("POST", "/v2/models/nb_onnx/infer", body, {"traceparent": header})
        assert status == 200
    finally:
        assert server.stop() == 0, server.log()  # the provider flushes its batch on the way out
    text, spans, decoder, pos = server.stdout_path.read_text(), [], json.JSONDecoder(), 0
    while (start := text.find("{", pos)) >= 0:
        span, pos = decoder.raw_decode(text, start)
        spans.append(span)
    mine = {s["name"]: s for s in spans if s["context"]["trace_id"] == f"0x{trace_id:032x}"}
    assert sorted(mine) == ["InferRequest", "compute", "queue"], server.log()
    assert mine["InferRequest"]["parent_id"] == f"0x{span_id:016x}"
    assert mine["InferRequest"]["resource"]["attributes"]["service.name"] == "bnc-serve-test"
