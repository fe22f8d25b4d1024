"""Exported models on KServe, MLServer and Ray Serve (``bnc_deploy/serve/engines/``), conformance-checked.

Each engine is started locally as a subprocess (its own session, free loopback ports) on a model
directory holding a BN export (a 3-bit naive Bayes trained on the built-in digits dataset, as
.onnx) and a DNN export (a 2-bit sign FC network trained on digits, as .onnx), waited for until
every model is ready, then driven by the official tritonclient (its own venv, the same driver as
test_tritonclient_conformance.py) over REST (binary tensors and JSON) and gRPC where the engine
offers them: health, server and model metadata, model ready, inference with all outputs, a
subset, another input datatype, the classification extension, and the error cases (an
out-of-range code, a wrong width, a float for codes, an unknown model) with the engine's 400 /
INVALID_ARGUMENT and 404 / NOT_FOUND. Outputs are bit-identical to ``load_runtime(file).run(x)``
(values, the file's datatype, shape) and every response names the file's version. On Ray Serve,
4 clients per protocol at once go through ``@serve.batch``, every answer equal to the unbatched
one. KServe and MLServer are also started as docs/guide/engines.md's ServingRuntime manifests
start them (one file in a folder, served under the InferenceService's name). Each engine is
stopped with SIGTERM and must exit 0 by itself.

Where each engine runs: KServe and MLServer pin protobuf < 7 (and pandas < 3, starlette < 0.47,
ml-dtypes <= 0.5.4), which the project's environment does not allow, so each has a venv made by
.ci/run (``.venv-kserve``, ``.venv-mlserver``: ``pip install -r tests/serve/engines/<engine>-
requirements.txt`` and ``pip install --no-deps -e .``); Ray Serve fits the project's environment
(extra ``ray-serve``). ``BNC_DEPLOY_<ENGINE>_PYTHON`` names another interpreter. An engine that is
not installed skips its test, saying how to install it, unless ``BNC_DEPLOY_REQUIRE_<ENGINE>=1``
(CI) makes that a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from serve_support import REPO_ROOT, free_port
from tritonclient_support import client_python, run_plan

from bnc_deploy.runtimes.base import load_runtime

REQUIREMENTS = Path(__file__).resolve().parent / "engines"


@dataclass(frozen=True)
class Engine:
    name: str  # also the venv's suffix and the environment variables' stem (KSERVE, MLSERVER, RAYSERVE)
    imports: str  # what the interpreter must import
    protocols: tuple[str, ...]  # the driver's protocols the engine offers
    server_name: str  # its V2 server metadata name
    own_venv: bool = True
    #: Headers of tritonclient's JSON requests (which carry no Content-Type): KServe reads a body
    #: without ``Content-Type: application/json`` as binary tensors and then wants their header.
    json_headers: tuple[tuple[str, str], ...] = ()


ENGINES = {
    "kserve": Engine(
        "kserve",
        "kserve, bnc_deploy.serve.engines.kserve",
        ("http", "http-json", "grpc"),
        "kserve",
        json_headers=(("Content-Type", "application/json"),),
    ),
    # MLServer's REST front end has no binary tensor extension: JSON only.
    "mlserver": Engine("mlserver", "mlserver, bnc_deploy.serve.engines.mlserver", ("http-json", "grpc"), "mlserver"),
    "rayserve": Engine(
        "rayserve", "ray.serve, bnc_deploy.serve.engines.rayserve", ("http", "http-json", "grpc"), "bnc-serve", False
    ),
}


def engine_python(engine: Engine) -> Path:
    """The engine's interpreter; skips (or fails under BNC_DEPLOY_REQUIRE_<ENGINE>=1) when absent."""
    stem = engine.name.upper()
    configured = os.environ.get(f"BNC_DEPLOY_{stem}_PYTHON")
    if configured:
        path = Path(configured)
    elif engine.own_venv:
        path = REPO_ROOT / f".venv-{engine.name}" / "bin" / "python"
    else:
        path = Path(sys.executable)
    done = path.is_file() and subprocess.run(
        [str(path), "-c", f"import {engine.imports}"], capture_output=True, text=True, check=False
    )
    if not done or done.returncode != 0:
        if engine.own_venv:
            venv = f".venv-{engine.name}"
            how = (
                f"python3 -m venv {venv} && {venv}/bin/pip install -r {REQUIREMENTS.relative_to(REPO_ROOT)}/"
                f"{engine.name}-requirements.txt && {venv}/bin/pip install --no-deps -e ."
            )
        else:
            how = "pip install -c constraints.txt -e '.[ray-serve]'"
        why = done.stderr.strip().splitlines()[-1] if done else "no such interpreter"
        reason = f"{engine.name} is not usable at {path} ({why}); install: {how}"
        if os.environ.get(f"BNC_DEPLOY_REQUIRE_{stem}") == "1":
            pytest.fail(f"{reason} - required by BNC_DEPLOY_REQUIRE_{stem}=1")
        pytest.skip(reason)
    return path


# -- the models -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def train_digits_models(tmp_path_factory):
    """A function giving ``{"nb": .onnx, "dnn": .onnx}``: small models trained on the built-in digits
    dataset, once per module, on first call (after the test checked that its engine is installed:
    a skipped test trains nothing)."""
    built: dict[str, Path] = {}

    def get() -> dict[str, Path]:
        if not built:
            built.update(_train_digits_models(tmp_path_factory.mktemp("engine-models")))
        return built

    return get


def _train_digits_models(folder: Path) -> dict[str, Path]:
    pytest.importorskip("torch", reason="training the test models needs the train extra")
    pytest.importorskip("sklearn", reason="the digits dataset needs scikit-learn")
    from sklearn.datasets import load_digits

    import bnc_deploy
    from bnc_deploy.sklearn import BNClassifier, DNNClassifier

    x, y = load_digits(return_X_y=True)
    x = x.astype(np.int64)  # pixel intensities 0..16: integer codes already
    nb = BNClassifier(bits=3, epochs=0, n_values=17).fit(x, y)  # maximum likelihood, rounded to 3 bits
    dnn = DNNClassifier(hidden=32, activation="sign", bits=2, epochs=3, n_values=17, random_state=0).fit(x, y)
    out = {"nb": folder / "nb.onnx", "dnn": folder / "dnn.onnx"}
    bnc_deploy.export(nb, out["nb"])
    bnc_deploy.export(dnn, out["dnn"])
    return out


def _repository(models: dict[str, Path], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, path in models.items():
        (folder / f"{name}.onnx").write_bytes(path.read_bytes())
    return folder


# -- the engine as a subprocess -------------------------------------------------------------------
class EngineProcess:
    """An engine serving ``repository`` on free loopback ports (``http_port``, ``grpc_address``, as
    the tritonclient driver's plan needs), in a session of its own; :meth:`stop` sends SIGTERM."""

    def __init__(self, engine: Engine, python: Path, repository: Path, workdir: Path, *, manifest: str = "") -> None:
        self.engine, self.workdir = engine, workdir
        self.http_port, self.grpc_port = free_port(), free_port()
        self.grpc_address = f"127.0.0.1:{self.grpc_port}"
        self.log_path = workdir / f"{engine.name}.log"
        cmd, extra = (
            self.manifest_command(python, repository, manifest) if manifest else self.command(python, repository)
        )
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - open for the process's life, closed in stop()
        env = dict(os.environ, PYTHONUNBUFFERED="1", RAY_USAGE_STATS_ENABLED="0", **extra)
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=str(workdir), env=env, start_new_session=True
        )

    def command(self, python: Path, repository: Path) -> tuple[list[str], dict]:
        """The command (and environment) the docs give to run each engine locally (docs/guide/engines.md)."""
        http, grpc = str(self.http_port), str(self.grpc_port)
        if self.engine.name == "kserve":
            module = "bnc_deploy.serve.engines.kserve"
            return [
                str(python),
                "-m",
                module,
                "--model_dir",
                str(repository),
                "--http_port",
                http,
                "--grpc_port",
                grpc,
            ], {}
        if self.engine.name == "mlserver":
            settings = self.workdir / "mlserver-models"
            module = "bnc_deploy.serve.engines.mlserver"
            subprocess.run([str(python), "-m", module, str(repository), str(settings)], check=True)
            server = {"host": "127.0.0.1", "http_port": self.http_port, "grpc_port": self.grpc_port}
            server.update(metrics_port=free_port(), parallel_workers=0)  # inference in the server process
            (settings / "settings.json").write_text(json.dumps(server))
            return [str(python.parent / "mlserver"), "start", str(settings)], {}
        module = "bnc_deploy.serve.engines.rayserve"
        address = f"127.0.0.1:{self.http_port}"
        return [
            str(python),
            "-m",
            module,
            "--repository",
            str(repository),
            "--http",
            address,
            "--grpc",
            self.grpc_address,
        ], {}

    def manifest_command(self, python: Path, repository: Path, name: str) -> tuple[list[str], dict]:
        """The command (and environment) of the docs' KServe ServingRuntime: one model file in
        ``repository`` (KServe's /mnt/models), served as ``name`` (the InferenceService's)."""
        if self.engine.name == "kserve":
            module = "bnc_deploy.serve.engines.kserve"
            args = [f"--model_name={name}", f"--model_dir={repository}", f"--http_port={self.http_port}"]
            return [str(python), "-m", module, *args, f"--grpc_port={self.grpc_port}"], {}
        assert self.engine.name == "mlserver", self.engine
        env = {
            "MLSERVER_HTTP_PORT": str(self.http_port),
            "MLSERVER_GRPC_PORT": str(self.grpc_port),
            "MLSERVER_METRICS_PORT": str(free_port()),
            "MLSERVER_HOST": "127.0.0.1",
            "MLSERVER_PARALLEL_WORKERS": "0",
            "MLSERVER_MODEL_NAME": name,
            "MLSERVER_MODEL_IMPLEMENTATION": "bnc_deploy.serve.engines.mlserver.BncModel",
            "MLSERVER_MODEL_URI": str(repository),
        }
        return [str(python.parent / "mlserver"), "start", str(repository)], env

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def wait_ready(self, models, timeout: float = 120.0) -> float:
        """Seconds until every model answers ``/v2/models/<m>/ready`` with 200."""
        start = time.monotonic()
        pending = list(models)
        while pending:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.engine.name} exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() - start > timeout:
                raise AssertionError(f"{self.engine.name}: {pending} not ready within {timeout} s:\n{self.log()}")
            try:
                url = f"http://127.0.0.1:{self.http_port}/v2/models/{pending[0]}/ready"
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        pending.pop(0)
                        continue
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.25)
        return time.monotonic() - start

    def stop(self, timeout: float = 45.0) -> int | None:
        """SIGTERM to the engine's main process; its exit code (None if it had to be killed). Whatever
        is left of its session is killed afterwards."""
        code = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        else:
            code = self.proc.returncode
        _kill_session(self.proc.pid)  # leftovers of a shutdown that went wrong (Ray's actors: own groups)
        if self.proc.poll() is None:
            self.proc.wait()
        self._log.close()
        return code


def _kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` (Linux /proc): Ray's workers each lead a process
    group of their own, so a group kill would miss them."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # after "pid (comm)": state, ppid, pgrp, session
                os.kill(int(stat.parent.name), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass


# -- the conformance plan -------------------------------------------------------------------------
@dataclass
class Expected:
    x: np.ndarray
    raw: np.ndarray  # scores in the file's datatype
    scores64: np.ndarray
    label: np.ndarray
    class_names: list
    scores_name: str
    version: str
    n_features: int
    cardinality1: int


def _expected(path: Path, seed: int) -> Expected:
    from bnc_deploy.validation import random_valid_codes

    rt = load_runtime(path)
    cards = rt.metadata["cardinalities"]
    x = random_valid_codes(cards, 25, seed)
    scores64, label = rt.run(x)
    raw, _ = rt.invoke(rt.prepare(x))
    name = "logits" if rt.metadata["model_kind"] == "dnn" else "log_joint"
    version = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return Expected(x, np.asarray(raw), scores64, label, list(rt.class_names), name, version, x.shape[1], int(cards[1]))


def _model_steps(name: str, e: Expected, protocol: str, headers: dict) -> list[tuple[str, dict]]:
    base = {"protocol": protocol, "model": name, "headers": headers}
    xin = [{"name": "x", "datatype": "INT64", "array": f"{name}_x"}]
    return [
        ("ready", {**base, "op": "model_ready"}),
        ("metadata", {**base, "op": "model_metadata"}),
        ("all", {**base, "op": "infer", "inputs": xin}),
        ("label-only", {**base, "op": "infer", "inputs": xin, "outputs": ["label"]}),
        (
            "int32",
            {
                **base,
                "op": "infer",
                "inputs": [{"name": "x", "datatype": "INT32", "array": f"{name}_x32"}],
                "outputs": [e.scores_name, "label"],
            },
        ),
        ("top2", {**base, "op": "infer", "inputs": xin, "outputs": [e.scores_name], "classification": 2}),
        ("class-names", {**base, "op": "infer", "inputs": xin, "outputs": ["label"], "classification": 1}),
        ("bad-code", {**base, "op": "infer", "inputs": [{"name": "x", "datatype": "INT64", "array": f"{name}_bad"}]}),
        ("wide", {**base, "op": "infer", "inputs": [{"name": "x", "datatype": "INT64", "array": f"{name}_wide"}]}),
        ("float", {**base, "op": "infer", "inputs": [{"name": "x", "datatype": "FP32", "array": f"{name}_float"}]}),
    ]


def _arrays(name: str, e: Expected) -> dict[str, np.ndarray]:
    bad = np.zeros((3, e.n_features), dtype=np.int64)
    bad[2, 1] = e.cardinality1  # one past feature 1's range, in row 2
    return {
        f"{name}_x": e.x,
        f"{name}_x32": e.x.astype(np.int32),
        f"{name}_bad": bad,
        f"{name}_wide": np.zeros((2, e.n_features + 1), dtype=np.int64),
        f"{name}_float": e.x[:2].astype(np.float32),
    }


def _check_model_step(what: str, r: dict, e: Expected, saved, where: str) -> None:
    if what in ("bad-code", "wide", "float"):
        assert not r["ok"], where
        assert r["error"]["status"] in ("400", "StatusCode.INVALID_ARGUMENT"), where
        if what == "bad-code":
            assert "feature 1" in r["error"]["message"] and "row 2" in r["error"]["message"], where
        return
    assert r["ok"], where
    if what == "ready":
        assert r["value"] is True, where
        return
    if what == "metadata":
        meta = r["value"]
        tensors = [(t["name"], t["datatype"], [int(s) for s in t["shape"]]) for t in meta["inputs"] + meta["outputs"]]
        score_type = {"float32": "FP32", "float64": "FP64"}[e.raw.dtype.name]
        assert tensors == [
            ("x", "INT64", [-1, e.n_features]),
            (e.scores_name, score_type, [-1, len(e.class_names)]),
            ("label", "INT64", [-1]),
        ], where
        return
    out = {k: saved[v] for k, v in r["outputs"].items()}
    assert r["model_version"] == e.version, where
    if what in ("all", "int32"):
        assert list(out) == [e.scores_name, "label"], where
        s, lab = out[e.scores_name], out["label"]
        assert s.dtype == e.raw.dtype and s.shape == e.raw.shape, where  # the file's datatype and [N, C]
        assert np.array_equal(s, e.raw) and np.array_equal(s.astype(np.float64), e.scores64), where
        assert lab.dtype == np.int64 and np.array_equal(lab, e.label), where
    elif what == "label-only":
        assert list(out) == ["label"] and np.array_equal(out["label"], e.label), where
    elif what == "top2":
        top = out[e.scores_name]
        assert r["datatypes"] == {e.scores_name: "BYTES"} and top.shape == (len(e.x), 2), where
        order = np.argsort(-e.raw, axis=1, kind="stable")[:, :2]
        for row in range(len(e.x)):
            for j in range(2):
                value, index, cls = _text(top[row, j]).split(":", 2)
                c = order[row, j]
                assert (int(index), cls) == (c, e.class_names[c]), where
                assert e.raw.dtype.type(float(value)) == e.raw[row, c], where
    elif what == "class-names":
        assert [_text(v) for v in out["label"].reshape(-1)] == [e.class_names[k] for k in e.label], where


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def run_conformance(engine: Engine, server: EngineProcess, models: dict[str, Path], tmp: Path) -> None:
    """The V2 conformance steps over every protocol the engine offers, checked (see the module docstring)."""
    expected = {name: _expected(path, seed) for seed, (name, path) in enumerate(models.items())}
    arrays: dict[str, np.ndarray] = {}
    steps: list[dict] = []
    checks: list[tuple[str, str, str]] = []
    for protocol in engine.protocols:
        headers = dict(engine.json_headers) if protocol == "http-json" else {}
        for op in ("live", "ready", "server_metadata"):
            steps.append({"protocol": protocol, "op": op})
            checks.append((op, "", protocol))
        steps.append({"protocol": protocol, "op": "model_metadata", "model": "no_such_model"})
        checks.append(("unknown-model", "", protocol))
        for name, e in expected.items():
            arrays.update(_arrays(name, e))
            for what, step in _model_steps(name, e, protocol, headers):
                steps.append(step)
                checks.append((what, name, protocol))
    results, saved = run_plan(steps, tmp, server=server, arrays=arrays, timeout=120)
    for (what, name, protocol), r in zip(checks, results, strict=True):
        where = f"{engine.name}: {what} {name} over {protocol}: {r}"
        if what in ("live", "ready"):
            assert r == {"ok": True, "value": True}, where
        elif what == "server_metadata":
            assert r["ok"] and r["value"]["name"] == engine.server_name, where
        elif what == "unknown-model":
            assert not r["ok"] and r["error"]["status"] in ("404", "StatusCode.NOT_FOUND"), where
        else:
            _check_model_step(what, r, expected[name], saved, where)


@pytest.mark.parametrize("name", list(ENGINES))
def test_engine_passes_v2_conformance_bit_identical(name, train_digits_models, tmp_path):
    engine = ENGINES[name]
    python = engine_python(engine)
    client_python()  # skips (or fails in CI) before the engine starts when the client is absent
    digits_models = train_digits_models()
    repository = _repository(digits_models, tmp_path / "models")
    server = EngineProcess(engine, python, repository, tmp_path)
    try:
        server.wait_ready(list(digits_models))
        run_conformance(engine, server, digits_models, tmp_path)
        if name == "rayserve":
            _check_batched_under_load(server, digits_models["nb"], tmp_path)
    finally:
        code = server.stop()
    assert code == 0, f"{name} exited with {code} (None: not within 45 s) after SIGTERM:\n{server.log()}"


def _digest(arrays: dict[str, np.ndarray], names: list[str]) -> str:
    """The driver's digest of one response (tritonclient_driver._digest)."""
    h = hashlib.sha256()
    for name in names:
        a = arrays[name]
        h.update(name.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()


def _check_batched_under_load(server: EngineProcess, path: Path, tmp: Path) -> None:
    """Ray Serve's @serve.batch: 4 clients per protocol at once; every answer equal to the unbatched one."""
    e = _expected(path, 7)
    rows = e.x[:3]
    names = ["log_joint", "label"]
    want = _digest({"log_joint": e.raw[:3], "label": e.label[:3]}, names)
    xin = [{"name": "x", "datatype": "INT64", "array": "x"}]
    steps = [
        {"protocol": p, "op": "loop", "model": "nb", "inputs": xin, "outputs": names, "clients": 4}
        | {"seconds": 1.5, "record": True, "digest_outputs": names}
        for p in ("http", "grpc")
    ]
    results, _ = run_plan(steps, tmp, server=server, arrays={"x": rows}, timeout=120)
    for p, r in zip(("http", "grpc"), results, strict=True):
        assert r["ok"] and not r["failures"] and r["count"] > 0, (p, r["failures"][:3])
        assert {d for _, d in r["records"]} == {want}, p
        assert {v for v, _ in r["records"]} == {e.version}, p


@pytest.mark.parametrize("name", ["kserve", "mlserver"])
def test_engine_started_as_its_kserve_serving_runtime(name, train_digits_models, tmp_path):
    """The docs' ServingRuntime starts KServe (``--model_name={{.Name}} --model_dir=/mnt/models``)
    and MLServer (``MLSERVER_MODEL_*`` environment, ``mlserver start /mnt/models``) on a folder of
    one model file, served under the InferenceService's name: ready, and bit-identical over REST
    (JSON) and gRPC. No Kubernetes here: the same process, started as the manifest starts it."""
    engine = ENGINES[name]
    python = engine_python(engine)
    client_python()
    digits_models = train_digits_models()
    mnt = tmp_path / "mnt-models"
    mnt.mkdir()
    (mnt / "nb.onnx").write_bytes(digits_models["nb"].read_bytes())
    server = EngineProcess(engine, python, mnt, tmp_path, manifest="digits-nb")
    try:
        server.wait_ready(["digits-nb"])
        e = _expected(digits_models["nb"], 3)
        xin = [{"name": "x", "datatype": "INT64", "array": "x"}]
        headers = dict(engine.json_headers)
        steps = [
            {"protocol": "http-json", "op": "infer", "model": "digits-nb", "inputs": xin, "headers": headers},
            {"protocol": "grpc", "op": "infer", "model": "digits-nb", "inputs": xin},
        ]
        results, saved = run_plan(steps, tmp_path, server=server, arrays={"x": e.x}, timeout=120)
        for r in results:
            _check_model_step("all", r, e, saved, f"{name} as ServingRuntime: {r}")
    finally:
        code = server.stop()
    assert code == 0, f"{name} exited with {code} (None: not within 45 s) after SIGTERM:\n{server.log()}"
