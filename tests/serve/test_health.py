"""Health: ``grpc.health.v1.Health`` follows the repository (load, unload, reload, a removed or
broken file), the REST and V2 readiness agree with it, and the shutdown sequence turns readiness
off before the server stops answering - in process, and in a ``bnc-serve`` process on SIGTERM."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

grpc = pytest.importorskip("grpc", reason="the 'serve' extra (grpcio) is not installed")
pytest.importorskip("grpc_health", reason="the 'serve' extra (grpcio-health-checking) is not installed")
pytest.importorskip("starlette.testclient", reason="Starlette's TestClient needs httpx2 (extra 'test')")

import serve_support as ss
from grpc_health.v1 import health_pb2, health_pb2_grpc
from starlette.testclient import TestClient

from bnc_deploy.serve.app import create_app
from bnc_deploy.serve.grpc_server import start_grpc_server
from bnc_deploy.serve.health import INFERENCE_SERVICE, ServingHealth, ShutdownSequence
from bnc_deploy.serve.proto import grpc_service_pb2 as pb
from bnc_deploy.serve.proto import grpc_service_pb2_grpc as pb_grpc
from bnc_deploy.serve.repository import ModelRepository

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def served(tmp_path):
    """A repository of small ONNX/.bnc models behind gRPC (health syncing every 50 ms) and the REST app."""
    files = ss.build_repository(tmp_path / "repo", tflite=False)
    repo = ModelRepository(tmp_path / "repo")
    repo.load_all()
    health = ServingHealth(repo, sync_seconds=0.05)
    server = start_grpc_server(repo, "127.0.0.1:0", health=health)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.bound_port}")
    rest = TestClient(create_app(repo, health=health, access_log=False, close_repository=False))
    try:
        yield repo, health, health_pb2_grpc.HealthStub(channel), pb_grpc.GRPCInferenceServiceStub(channel), rest, files
    finally:
        channel.close()
        server.stop(1).wait()
        repo.close()


def check(stub, service: str):
    """The Check status of ``service``, or the gRPC code when it fails."""
    try:
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
    except grpc.RpcError as exc:
        return exc.code()


def infer_request(files, name="nb_onnx"):
    x = ss.valid_rows(files[name], n=2)
    req = pb.ModelInferRequest(model_name=name)
    req.inputs.add(name="x", datatype="INT64", shape=list(x.shape))
    req.raw_input_contents.append(np.ascontiguousarray(x, dtype=np.int64).tobytes())
    return req


def test_check_follows_load_unload_reload_and_broken_files(served):
    repo, _, stub, v2, rest, files = served
    assert check(stub, "") == check(stub, INFERENCE_SERVICE) == SERVING
    assert all(check(stub, name) == SERVING for name in files)
    assert check(stub, "no_such_model") == grpc.StatusCode.NOT_FOUND  # the protocol's answer for unknown names

    v2.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="nb_onnx"))
    assert check(stub, "nb_onnx") == NOT_SERVING  # at once: Check reads the repository
    assert check(stub, "") == SERVING and v2.ServerReady(pb.ServerReadyRequest()).ready  # unloaded: not counted
    v2.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="nb_onnx"))
    assert check(stub, "nb_onnx") == SERVING

    folder = files["tan_onnx"].path.parent
    os.replace(files["nb_bnc"].path, folder / "nb_bnc_renamed.bnc")  # a reload by polling: one gone, one new
    repo.poll_once()
    assert check(stub, "nb_bnc") == NOT_SERVING and check(stub, "nb_bnc_renamed") == SERVING

    (folder / "broken.onnx").write_bytes(b"not a model")
    with pytest.raises(Exception, match="broken"):
        repo.load("broken")
    assert check(stub, "broken") == NOT_SERVING
    # A model that failed to load makes the server not ready: every readiness says so.
    assert check(stub, "") == check(stub, INFERENCE_SERVICE) == NOT_SERVING
    assert not v2.ServerReady(pb.ServerReadyRequest()).ready
    assert rest.get("/v2/health/ready").status_code == 503 and rest.get("/v2/health/live").status_code == 200
    assert check(stub, "tan_onnx") == SERVING  # the others are unaffected


def _watch(stub, service: str, seen: list, done: threading.Event):
    def run():
        try:
            for response in stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=30):
                seen.append(response.status)
        except grpc.RpcError as exc:
            seen.append(exc.code())
        done.set()

    threading.Thread(target=run, daemon=True).start()


def _wait_for(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_watch_streams_hear_changes_and_end_at_shutdown(served):
    repo, health, stub, v2, rest, files = served
    seen, done = [], threading.Event()
    _watch(stub, "tan_onnx", seen, done)
    assert _wait_for(lambda: seen == [SERVING]), seen
    repo.unload("tan_onnx")  # the repository's own API: the sync thread tells the stream
    assert _wait_for(lambda: seen == [SERVING, NOT_SERVING]), seen
    repo.load("tan_onnx")
    assert _wait_for(lambda: seen == [SERVING, NOT_SERVING, SERVING]), seen
    unknown, unknown_done = [], threading.Event()
    _watch(stub, "no_such_model", unknown, unknown_done)
    assert _wait_for(lambda: unknown == [health_pb2.HealthCheckResponse.SERVICE_UNKNOWN]), unknown

    health.begin_shutdown()
    assert _wait_for(lambda: seen[-1:] == [NOT_SERVING]), seen
    assert not done.is_set()  # still open: only close() ends the streams
    health.close()
    assert done.wait(5) and unknown_done.wait(5), (seen, unknown)
    assert seen == [SERVING, NOT_SERVING, SERVING, NOT_SERVING]  # ended with OK, no error code


def test_shutdown_flips_readiness_but_keeps_serving(served):
    repo, health, stub, v2, rest, files = served
    assert rest.get("/v2/health/ready").status_code == 200
    health.begin_shutdown()
    assert rest.get("/v2/health/ready").status_code == 503 and rest.get("/v2/health/live").status_code == 200
    assert not v2.ServerReady(pb.ServerReadyRequest()).ready and v2.ServerLive(pb.ServerLiveRequest()).live
    assert {check(stub, s) for s in ("", INFERENCE_SERVICE, *files)} == {NOT_SERVING}
    repo.load("nb_onnx")  # nothing brings it back
    assert check(stub, "nb_onnx") == NOT_SERVING and check(stub, "no_such_model") == grpc.StatusCode.NOT_FOUND
    # Requests are still answered until the server stops: load balancers leave first.
    response = v2.ModelInfer(infer_request(files))
    assert response.model_name == "nb_onnx" and len(response.raw_output_contents) == 2


def test_shutdown_sequence_flips_first_and_drains_after_the_delay(served):
    repo, health, stub, v2, rest, files = served
    drained_at = []
    sequence = ShutdownSequence(health, delay=0.5)
    sequence.on_drain(lambda: drained_at.append(time.monotonic()))
    start = time.monotonic()
    sequence.signal(signal.SIGTERM, None)
    assert _wait_for(lambda: not health.ready(), timeout=0.4) and not drained_at  # flipped, not drained yet
    assert check(stub, "") == NOT_SERVING
    assert sequence.drained.wait(5) and drained_at[0] - start >= 0.5
    late = []
    sequence.on_drain(lambda: late.append(1))  # registered after the drain: runs at once
    assert late == [1] and len(drained_at) == 1

    other = ShutdownSequence(ServingHealth(repo), delay=60)
    other.signal()
    other.signal()  # a second signal cuts the delay short
    assert other.drained.wait(5)


def test_sigterm_turns_readiness_off_before_the_process_stops(tmp_path):
    """bnc-serve --shutdown-delay: after SIGTERM, REST ready is 503 and gRPC health NOT_SERVING while
    inference is still answered; then it exits 0, without waiting the grace period for an open Watch."""
    files = ss.build_repository(tmp_path / "repo", tflite=False)
    args = ["--shutdown-delay", "1.5", "--graceful-timeout", "25"]
    with ss.start_server(tmp_path / "repo", grpc=True, args=args) as server:
        channel = grpc.insecure_channel(server.grpc_address)
        stub = health_pb2_grpc.HealthStub(channel)
        assert check(stub, "") == SERVING and check(stub, "nb_onnx") == SERVING
        seen, done = [], threading.Event()
        _watch(stub, "", seen, done)
        assert _wait_for(lambda: seen == [SERVING]), seen
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert _wait_for(lambda: server.request("GET", "/v2/health/ready")[0] == 503, timeout=1.0), server.log()
        assert check(stub, "") == NOT_SERVING and check(stub, "nb_onnx") == NOT_SERVING
        assert _wait_for(lambda: seen == [SERVING, NOT_SERVING], timeout=1.0), seen
        assert server.proc.poll() is None  # the flip is visible while the server still runs ...
        status, _, body = server.request(
            "POST", "/v2/models/nb_onnx/infer", infer_body(ss.valid_rows(files["nb_onnx"], n=2))
        )
        assert status == 200, body  # ... and answers
        assert grpc_live(channel)
        code = server.proc.wait(20)
        elapsed = time.monotonic() - start
        channel.close()
    assert code == 0, server.log()
    assert done.wait(5) and seen == [SERVING, NOT_SERVING]
    assert 1.5 <= elapsed < 15, elapsed  # the delay, then no 25 s wait for the Watch stream
    log = server.log()
    assert "shutting down: not ready" in log and log.rstrip().endswith("bnc-serve: stopped"), log


def infer_body(x) -> bytes:
    import json

    return json.dumps(
        {"inputs": [{"name": "x", "datatype": "INT64", "shape": list(x.shape), "data": x.ravel().tolist()}]}
    ).encode()


def grpc_live(channel) -> bool:
    return pb_grpc.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=5).live


def test_health_needs_no_token_where_the_v2_service_does(served):
    """Kubernetes' gRPC probes send no metadata: with API keys, health answers, ServerReady does not."""
    repo = served[0]
    server = start_grpc_server(repo, "127.0.0.1:0", api_keys=[b"health-test-key-0123456789"])
    channel = grpc.insecure_channel(f"127.0.0.1:{server.bound_port}")
    try:
        assert check(health_pb2_grpc.HealthStub(channel), "") == SERVING
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.GRPCInferenceServiceStub(channel).ServerReady(pb.ServerReadyRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        channel.close()
        server.stop(1).wait()


def test_rest_readiness_without_a_shared_health_is_the_repository_s(tmp_path):
    """create_app without ``health`` (app_from_env, --workers) keeps the repository's readiness."""
    ss.build_repository(tmp_path / "repo", tflite=False)
    repo = ModelRepository(tmp_path / "repo")
    repo.load_all()
    with TestClient(create_app(repo, access_log=False)) as client:
        assert client.get("/v2/health/ready").status_code == 200
        repo.close()
        assert client.get("/v2/health/ready").status_code == 503
