"""Shared helpers of the server tests (both engineers' files import this; no conftest magic).

* :func:`build_repository` - a model repository folder of small real exports: BN naive Bayes and
  TAN (ONNX, TFLite, ``.bnc``), a raw-input BN (ONNX), sign-FC DNNs (ONNX, TFLite). Returns
  ``{name: ModelFile}`` with the artifact, so tests compare with ``load_runtime(path).run(x)``.
* :func:`valid_rows` - seeded valid input rows for one model file.
* :func:`free_port`, :class:`ServerProcess` / :func:`start_server` - ``bnc-serve`` as a
  subprocess on free loopback ports, waited for until ready, stopped with SIGTERM.

Import from a test in ``tests/serve/`` with ``import serve_support`` (pytest puts the test's
folder on ``sys.path``; from elsewhere insert ``tests/serve`` first).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import numpy as np

from bnc_deploy.artifacts import save_artifact
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact, random_dnn_artifact
from bnc_deploy.verify import export_path

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The bnc-serve entry point of the environment running the tests (the venv's script, else ``-m``).
BNC_SERVE = [sys.executable, "-m", "bnc_deploy.cli.serve"]


@dataclass
class ModelFile:
    name: str
    path: Path
    artifact: object
    format: str


def bn_artifacts() -> dict[str, object]:
    """Small BN artifacts: 3-bit NB, 4-bit TAN, and a 3-bit NB with a discretizer (raw inputs)."""
    rng = np.random.default_rng(13)
    raw = random_bnc_artifact(
        rng,
        d=3,
        n_classes=3,
        tan=False,
        bits=3,
        int_bits=2,
        cardinalities=[3, 2, 4],
        discretizer=discretizer_dict([[-1.0, 0.5], [0.25], [-2.0, 0.0, 2.0]]),
    )
    raw.check_x = None  # the discretizer's codes define the rows here; the check set comes from random rows
    raw.check_y = None
    return {
        "nb": random_bnc_artifact(rng, d=6, n_classes=4, tan=False, bits=3, int_bits=2, max_card=5),
        "tan": random_bnc_artifact(rng, d=5, n_classes=3, tan=True, bits=4, int_bits=2, max_card=4),
        "raw": raw,
    }


def dnn_artifact():
    """A sign FC network (exact in both formats)."""
    return random_dnn_artifact(5, architecture="fc", activation="sign", bits=2)


#: tflite flag -> (folder of the exported files, {name: ModelFile}): exported once per process.
_BUILT: dict[bool, tuple[Path, dict]] = {}


def build_repository(folder, *, tflite: bool = True) -> dict[str, ModelFile]:
    """Export the test models into ``folder`` (created); ``{name: ModelFile}``.

    Names: ``nb_onnx``, ``nb_tflite``, ``nb_bnc``, ``tan_onnx``, ``tan_tflite``, ``raw_onnx``,
    ``dnn_onnx``, ``dnn_tflite`` (TFLite files only when ``tflite`` and TensorFlow is installed).
    The files are exported once per process (TFLite conversion takes seconds) and copied.
    """
    import shutil
    import tempfile

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if tflite not in _BUILT:
        source = Path(tempfile.mkdtemp(prefix="bnc-serve-models-"))
        _BUILT[tflite] = (source, _export_all(source, tflite))
    source, files = _BUILT[tflite]
    out = {}
    for name, mf in files.items():
        shutil.copyfile(mf.path, folder / mf.path.name)
        out[name] = ModelFile(name, folder / mf.path.name, mf.artifact, mf.format)
    return out


def _export_all(folder: Path, tflite: bool) -> dict[str, ModelFile]:
    bn = bn_artifacts()
    dnn = dnn_artifact()
    plan = [
        ("nb_onnx", bn["nb"], "onnx", {}),
        ("tan_onnx", bn["tan"], "onnx", {}),
        ("raw_onnx", bn["raw"], "onnx", {"raw_inputs": True}),
        ("dnn_onnx", dnn, "onnx", {}),
    ]
    if tflite and _has_tensorflow():
        plan += [
            ("nb_tflite", bn["nb"], "tflite", {}),
            ("tan_tflite", bn["tan"], "tflite", {}),
            ("dnn_tflite", dnn, "tflite", {}),
        ]
    out = {}
    for name, art, fmt, options in plan:
        path = export_path(art, folder / f"{name}.{fmt}", fmt, **options)
        out[name] = ModelFile(name, path, art, fmt)
    bnc_path = folder / "nb_bnc.bnc"
    save_artifact(bn["nb"], bnc_path)
    out["nb_bnc"] = ModelFile("nb_bnc", bnc_path, bn["nb"], "bnc")
    return out


def _has_tensorflow() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None and importlib.util.find_spec("ai_edge_litert") is not None


def valid_rows(model: ModelFile, n: int = 7, seed: int = 0) -> np.ndarray:
    """``n`` seeded valid input rows of ``model`` (int64 codes; float32 raw values for raw files)."""
    from bnc_deploy.formats.bnc import raw_representatives
    from bnc_deploy.validation import random_valid_codes

    codes = random_valid_codes(model.artifact.cardinalities, n, seed)
    if model.name.startswith("raw"):
        return raw_representatives(model.artifact, codes)
    return codes


# -- the server as a subprocess -----------------------------------------------------------------
def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound and released; the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def loaded_repository(folder):
    """``(files, repository)``: :func:`build_repository` in ``folder``, loaded in-process
    (a :class:`~bnc_deploy.serve.repository.ModelRepository`, closed on exit)."""
    from bnc_deploy.serve.repository import ModelRepository

    files = build_repository(folder, tflite=False)
    repository = ModelRepository(folder)
    repository.load_all()
    try:
        yield files, repository
    finally:
        repository.close()


class ServerProcess:
    """``bnc-serve`` running in a subprocess; a context manager that stops it with SIGTERM.

    ``url`` is ``http://127.0.0.1:PORT`` (None without HTTP); ``grpc_address`` ``127.0.0.1:PORT``
    (None without gRPC); ``stderr_path`` holds the server's log, ``stdout_path`` its JSON access log.
    ``context``: the client's ``ssl.SSLContext`` of a server behind TLS (``tls_support.TlsServer``
    sets it before starting; ``url`` is then ``https://``), None for plain HTTP.
    """

    context: ssl.SSLContext | None = None

    def __init__(
        self,
        repository,
        *,
        http: bool = True,
        grpc: bool = False,
        args=(),
        env=None,
        log_dir=None,
        ready_timeout: float = 60.0,
        wait_ready: bool = True,
    ) -> None:
        self.repository = Path(repository)
        self.http_port = free_port() if http else None
        self.grpc_port = free_port() if grpc else None
        scheme = "http" if self.context is None else "https"
        self.url = f"{scheme}://127.0.0.1:{self.http_port}" if http else None
        self.grpc_address = f"127.0.0.1:{self.grpc_port}" if grpc else None
        cmd = [*BNC_SERVE, "--repository", str(self.repository)]
        if http:
            cmd += ["--http", f"127.0.0.1:{self.http_port}"]
        if grpc:
            cmd += ["--grpc", self.grpc_address]
        cmd += [str(a) for a in args]
        self.cmd = cmd
        log_dir = Path(log_dir) if log_dir else self.repository.parent
        self.stderr_path = log_dir / f"bnc-serve-{self.http_port or self.grpc_port}.log"
        self.stdout_path = log_dir / f"bnc-serve-{self.http_port or self.grpc_port}.access.log"
        # Open for the process's life, closed in stop().
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115
        self._stdout = open(self.stdout_path, "wb")  # noqa: SIM115
        full_env = dict(os.environ, **(env or {}))
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(cmd, stdout=self._stdout, stderr=self._stderr, env=full_env, cwd=str(REPO_ROOT))
        if wait_ready:
            self.wait_until(ready_timeout)

    def log(self) -> str:
        """The server's stderr (its messages and errors)."""
        return self.stderr_path.read_text(errors="replace")

    def access_log(self) -> list[dict]:
        """The JSON access log lines the server wrote to stdout so far."""
        return [
            json.loads(line)
            for line in self.stdout_path.read_text(errors="replace").splitlines()
            if line.startswith("{")
        ]

    def wait_until(self, timeout: float, path: str = "/v2/health/live") -> None:
        """Wait until the server answers (HTTP: ``path`` returns 200; gRPC only: the port accepts)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bnc-serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if self.url:
                    with urllib.request.urlopen(self.url + path, timeout=2, context=self.context) as r:
                        if r.status == 200:
                            return
                else:
                    with socket.create_connection(("127.0.0.1", self.grpc_port), timeout=1):
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"bnc-serve did not answer within {timeout} s:\n{self.log()}")

    def request(self, method: str, path: str, body: bytes | None = None, headers=None, timeout: float = 30):
        """``(status, headers with lower-case names, body bytes)`` of one HTTP(S) request
        (http.client: no Content-Type is added, as tritonclient sends none)."""
        if self.context is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=timeout)
        else:
            conn = http.client.HTTPSConnection("127.0.0.1", self.http_port, timeout=timeout, context=self.context)
        try:
            conn.request(method, path, body=body, headers=dict(headers or {}))
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, obj=None, headers=None):
        """``(status, parsed JSON or None)``."""
        status, _, body = self.request(method, path, None if obj is None else json.dumps(obj).encode(), headers)
        return status, (json.loads(body) if body else None)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait (drains requests in flight); SIGKILL after ``timeout``. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        self._stdout.close()
        return self.proc.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_server(repository, **kwargs) -> ServerProcess:
    """Start ``bnc-serve`` on ``repository`` (see :class:`ServerProcess`); use as a context manager."""
    return ServerProcess(repository, **kwargs)
