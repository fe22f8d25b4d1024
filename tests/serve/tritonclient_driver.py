"""Drive a V2 server with the official ``tritonclient``; runs in the tritonclient venv, not the project's.

tritonclient[grpc] pins protobuf < 7 and tritonclient pins ml-dtypes <= 0.5.4, while the project's
environment runs protobuf 7 and ml-dtypes 0.6 (tensorflow/onnx), so the client lives in its own
venv (``.venv-tritonclient``; see tests/serve/tritonclient_support.py). This script imports only
tritonclient and numpy; the pytest side (project venv) builds the plan, starts ``bnc-serve`` and
compares what comes back with the local runtimes.

Usage::

    python tritonclient_driver.py plan.json result.json

``plan.json``::

    {"arrays": "inputs.npz",                  # the request tensors, by key
     "http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001", "headers": {...},
     "tls": null | {"ca": PEM file | null, "cert": PEM file | null, "key": PEM file | null},
     "steps": [{"protocol": "http"|"http-json"|"grpc", "op": "infer"|"live"|"ready"|"server_metadata"|
                "model_ready"|"model_metadata"|"index"|"load"|"unload"|"latency"|"loop"|
                "stats"|"config"|"trace_settings"|"load_config", ...}]}

Each step's result is a JSON object: ``ok`` and either the call's value (metadata dicts, booleans,
``model_version`` and ``outputs``: output name -> key of an array in ``result.npz`` beside
``result.json``) or ``error``: ``{"status": ..., "message": ...}`` as tritonclient reports them
(the HTTP status code, or the gRPC ``StatusCode.NAME``); a failure below the protocol (a TLS
handshake refused, a connection closed) is ``{"status": "transport", "message": "Type: text"}``.

``tls`` (the plan's, or a step's own ``"tls"``, which may be null: plain text) makes every client
speak TLS: HTTPS with ``ca`` as the trusted roots (the certifi bundle without it) and the host name
checked, gRPC with ``root_certificates`` (gRPC's bundled roots without it); ``cert`` and ``key``
are the client's certificate for mutual TLS.

``latency``: ``n`` sequential batch-1 requests after ``warmup`` (``"call": "live"``: liveness
requests instead, the client + transport floor); returns each round trip in seconds. ``loop``: ``clients`` threads,
each with its own client, send requests for ``seconds``
(from ``start_at``, a ``time.time()``, when given, so that several driver processes run together);
returns counts, failures (with their messages) and, with ``record``, every response's
``model_version`` and a digest of its outputs (for the reload test).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf.json_format import MessageToDict
from tritonclient.utils import InferenceServerException


def _client(step: dict, plan: dict, concurrency: int = 1):
    tls = step["tls"] if "tls" in step else plan.get("tls")
    if step["protocol"] == "grpc":
        if tls:
            return grpcclient.InferenceServerClient(
                url=plan["grpc"],
                ssl=True,
                root_certificates=tls.get("ca"),
                private_key=tls.get("key"),
                certificate_chain=tls.get("cert"),
            )
        return grpcclient.InferenceServerClient(url=plan["grpc"])
    secure = {}
    if tls:
        options = {"ca_certs": tls.get("ca"), "certfile": tls.get("cert"), "keyfile": tls.get("key")}
        secure = {"ssl": True, "ssl_options": {k: v for k, v in options.items() if v}}
    return httpclient.InferenceServerClient(
        url=plan["http"], concurrency=concurrency, connection_timeout=30.0, network_timeout=30.0, **secure
    )


def _headers(step: dict, plan: dict) -> dict | None:
    headers = dict(plan.get("headers") or {})
    headers.update(step.get("headers") or {})
    if step["protocol"] == "grpc":  # gRPC metadata keys are lower case
        headers = {k.lower(): v for k, v in headers.items()}
    return headers or None


def _request(step: dict, arrays) -> tuple[list, list | None]:
    grpc = step["protocol"] == "grpc"
    binary = step["protocol"] != "http-json"
    mod = grpcclient if grpc else httpclient
    inputs = []
    for spec in step["inputs"]:
        data = arrays[spec["array"]]
        shape = spec.get("shape", list(data.shape))
        tensor = mod.InferInput(spec["name"], shape, spec["datatype"])
        if grpc:
            tensor.set_data_from_numpy(data)
        else:
            tensor.set_data_from_numpy(data, binary_data=binary)
        inputs.append(tensor)
    outputs = None
    if step.get("outputs") is not None:
        outputs = []
        for name in step["outputs"]:
            k = int(step.get("classification", 0))
            if grpc:
                outputs.append(mod.InferRequestedOutput(name, class_count=k))
            else:
                outputs.append(mod.InferRequestedOutput(name, binary_data=binary, class_count=k))
    return inputs, outputs


def _error(exc: InferenceServerException) -> dict:
    return {"status": str(exc.status()), "message": exc.message()}


def _infer(client, step: dict, plan: dict, arrays):
    inputs, outputs = _request(step, arrays)
    return client.infer(
        step["model"],
        inputs,
        model_version=step.get("version", ""),
        outputs=outputs,
        headers=_headers(step, plan),
        parameters=step.get("parameters"),
    )


def _as_json(value, grpc: bool):
    if grpc and value is not None and not isinstance(value, (bool, dict, list)):
        return MessageToDict(value, preserving_proto_field_name=True)
    return value


def run_step(step: dict, plan: dict, arrays, saved: dict, index: int) -> dict:
    grpc = step["protocol"] == "grpc"
    op = step["op"]
    if op == "latency":
        return _latency(step, plan, arrays)
    if op == "loop":
        return _loop(step, plan, arrays)
    client = _client(step, plan)
    headers = _headers(step, plan)
    try:
        if op == "infer":
            result = _infer(client, step, plan, arrays)
            response = result.get_response()
            response = _as_json(response, grpc)
            names = [o["name"] for o in response.get("outputs", [])]
            out = {}
            for j, name in enumerate(names):
                key = f"s{index}_o{j}"
                saved[key] = result.as_numpy(name)
                out[name] = key
            datatypes = {o["name"]: o["datatype"] for o in response.get("outputs", [])}
            shapes = {o["name"]: [int(s) for s in o["shape"]] for o in response.get("outputs", [])}
            return {
                "ok": True,
                "model_name": response.get("model_name"),
                "model_version": response.get("model_version"),
                "outputs": out,
                "datatypes": datatypes,
                "shapes": shapes,
                "id": response.get("id"),
            }
        if op == "live":
            return {"ok": True, "value": client.is_server_live(headers=headers)}
        if op == "ready":
            return {"ok": True, "value": client.is_server_ready(headers=headers)}
        if op == "server_metadata":
            return {"ok": True, "value": _as_json(client.get_server_metadata(headers=headers), grpc)}
        if op == "model_ready":
            return {"ok": True, "value": client.is_model_ready(step["model"], step.get("version", ""), headers=headers)}
        if op == "model_metadata":
            return {
                "ok": True,
                "value": _as_json(
                    client.get_model_metadata(step["model"], step.get("version", ""), headers=headers), grpc
                ),
            }
        if op == "index":
            value = client.get_model_repository_index(headers=headers)
            value = _as_json(value, grpc)
            if grpc:
                value = value.get("models", [])
            return {"ok": True, "value": value}
        if op == "load":
            client.load_model(step["model"], headers=headers)
            return {"ok": True}
        if op == "unload":
            client.unload_model(step["model"], headers=headers)
            return {"ok": True}
        if op == "load_config":  # Triton's load with a model configuration ("config": its version_policy)
            client.load_model(step["model"], config=json.dumps(step["config"]), headers=headers)
            return {"ok": True}
        if op in EXTENSION_OPS:
            return {"ok": True, "value": _as_json(_extension(client, step, headers), grpc)}
        raise SystemExit(f"unknown op {op!r}")
    except InferenceServerException as exc:
        return {"ok": False, "error": _error(exc)}
    except Exception as exc:  # noqa: BLE001 - below the protocol: a refused TLS handshake, a closed connection
        return {"ok": False, "error": {"status": "transport", "message": f"{type(exc).__name__}: {exc}"}}
    finally:
        client.close()


#: Triton's statistics, model configuration and trace extensions, through tritonclient's own calls:
#: ``stats`` (``model``, ``version``: "" for all), ``config``, ``trace_settings`` (``model``: None
#: for the global settings; with ``settings``: the update, answered with the settings in force).
EXTENSION_OPS = ("stats", "config", "trace_settings")


def _extension(client, step: dict, headers):
    op = step["op"]
    if op == "stats":
        return client.get_inference_statistics(step.get("model", ""), step.get("version", ""), headers=headers)
    if op == "config":
        return client.get_model_config(step["model"], step.get("version", ""), headers=headers)
    if step.get("settings") is not None:
        return client.update_trace_settings(model_name=step.get("model"), settings=step["settings"], headers=headers)
    return client.get_trace_settings(model_name=step.get("model"), headers=headers)


def _latency(step: dict, plan: dict, arrays) -> dict:
    client = _client(step, plan)
    try:
        headers = _headers(step, plan)
        if step.get("call") == "live":  # the transport + client floor: a round trip with no work

            def call():
                client.is_server_live(headers=headers)
        else:
            inputs, outputs = _request(step, arrays)

            def call():
                client.infer(step["model"], inputs, outputs=outputs, headers=headers)

        for _ in range(int(step.get("warmup", 200))):
            call()
        times = []
        for _ in range(int(step["n"])):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        return {"ok": True, "seconds": times}
    finally:
        client.close()


def _digest(result, names) -> str:
    h = hashlib.sha256()
    for name in names:
        arr = result.as_numpy(name)
        h.update(name.encode() + str(arr.dtype).encode() + str(arr.shape).encode() + arr.tobytes())
    return h.hexdigest()


def _loop(step: dict, plan: dict, arrays) -> dict:
    clients = int(step.get("clients", 4))
    seconds = float(step["seconds"])
    record = bool(step.get("record", False))
    stop_file = step.get("stop_file")
    names = step.get("digest_outputs") or []
    per_client = [{"count": 0, "failures": [], "records": []} for _ in range(clients)]
    start = threading.Barrier(clients + 1)

    def work(slot: dict) -> None:
        client = _client(step, plan)
        inputs, outputs = _request(step, arrays)
        headers = _headers(step, plan)
        start.wait()
        if step.get("start_at"):  # several driver processes start their loops together
            time.sleep(max(0.0, float(step["start_at"]) - time.time()))
        end = time.perf_counter() + seconds
        try:
            while time.perf_counter() < end and not (stop_file and Path(stop_file).exists()):
                try:
                    result = client.infer(step["model"], inputs, outputs=outputs, headers=headers)
                except InferenceServerException as exc:
                    slot["failures"].append(_error(exc))
                    continue
                slot["count"] += 1
                if record:
                    response = result.get_response()
                    version = (
                        response.model_version if hasattr(response, "model_version") else response.get("model_version")
                    )
                    slot["records"].append([version, _digest(result, names)])
        finally:
            client.close()

    threads = [threading.Thread(target=work, args=(slot,)) for slot in per_client]
    for t in threads:
        t.start()
    start.wait()
    if step.get("start_at"):
        time.sleep(max(0.0, float(step["start_at"]) - time.time()))
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return {
        "ok": True,
        "elapsed": elapsed,
        "count": sum(s["count"] for s in per_client),
        "failures": [f for s in per_client for f in s["failures"]],
        "records": [r for s in per_client for r in s["records"]],
    }


def main(argv: list[str]) -> int:
    plan_path, result_path = map(Path, argv[1:3])
    plan = json.loads(plan_path.read_text())
    arrays = dict(np.load(plan["arrays"])) if plan.get("arrays") else {}
    saved: dict = {}
    results = [run_step(step, plan, arrays, saved, i) for i, step in enumerate(plan["steps"])]
    np.savez(result_path.with_suffix(".npz"), **saved)
    result_path.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
