"""Run the official tritonclient (in its own venv) against a ``bnc-serve`` subprocess.

Why a second venv: ``tritonclient[grpc]`` 2.73 pins ``protobuf<7`` and ``tritonclient`` pins
``ml-dtypes<=0.5.4``; the project's environment runs protobuf 7 and ml-dtypes 0.6 (tensorflow,
onnx). Installing the client into the project's venv would downgrade them, so the client lives in
``.venv-tritonclient`` (or the interpreter named by ``BNC_DEPLOY_TRITONCLIENT_PYTHON``)::

    python3 -m venv .venv-tritonclient
    .venv-tritonclient/bin/pip install -r tests/serve/tritonclient-requirements.txt

Tests that need it skip, saying so, when it is absent, unless ``BNC_DEPLOY_REQUIRE_TRITONCLIENT=1``
(CI) makes that a failure. The client runs ``tests/serve/tritonclient_driver.py`` with a JSON plan;
the pytest side (project venv) builds the plan, starts the server (``serve_support.ServerProcess``)
and compares.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().parent / "tritonclient_driver.py"
REQUIREMENTS = Path(__file__).resolve().parent / "tritonclient-requirements.txt"


def client_python() -> Path:
    """The tritonclient venv's interpreter; skips (or fails under BNC_DEPLOY_REQUIRE_TRITONCLIENT=1)."""
    configured = os.environ.get("BNC_DEPLOY_TRITONCLIENT_PYTHON")
    path = Path(configured) if configured else ROOT / ".venv-tritonclient" / "bin" / "python"
    ok = (
        path.is_file()
        and subprocess.run(
            [str(path), "-c", "import tritonclient.http, tritonclient.grpc"], capture_output=True, check=False
        ).returncode
        == 0
    )
    if not ok:
        reason = (
            f"tritonclient is not installed at {path} (python3 -m venv .venv-tritonclient && "
            f".venv-tritonclient/bin/pip install -r {REQUIREMENTS.relative_to(ROOT)}; or set "
            "BNC_DEPLOY_TRITONCLIENT_PYTHON)"
        )
        if os.environ.get("BNC_DEPLOY_REQUIRE_TRITONCLIENT") == "1":
            pytest.fail(reason + " - required by BNC_DEPLOY_REQUIRE_TRITONCLIENT=1")
        pytest.skip(reason)
    return path


def run_plan(
    steps: list[dict],
    tmp_path: Path,
    *,
    server,
    arrays: dict | None = None,
    headers: dict | None = None,
    timeout: float = 300.0,
    background: bool = False,
):
    """Run ``steps`` in the tritonclient driver against ``server`` (a ``serve_support.ServerProcess``);
    ``(results, saved arrays)`` (or the Popen and the result path when ``background``). A server
    with a ``tls`` attribute (``{"ca", "cert", "key"}`` file names, see tritonclient_driver.py) is
    spoken to over TLS."""
    python = client_python()
    tag = f"{time.monotonic_ns()}"
    arrays_path = tmp_path / f"plan-{tag}-inputs.npz"
    np.savez(arrays_path, **(arrays or {}))
    plan = {
        "arrays": str(arrays_path),
        "http": f"127.0.0.1:{server.http_port}",
        "grpc": server.grpc_address,
        "headers": headers or {},
        "tls": getattr(server, "tls", None),
        "steps": steps,
    }
    plan_path = tmp_path / f"plan-{tag}.json"
    result_path = tmp_path / f"result-{tag}.json"
    plan_path.write_text(json.dumps(plan))
    cmd = [str(python), str(DRIVER), str(plan_path), str(result_path)]
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT), result_path
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"tritonclient driver failed:\n{done.stdout}\n{done.stderr}"
    return read_result(result_path)


def read_result(result_path: Path):
    results = json.loads(result_path.read_text())
    with np.load(result_path.with_suffix(".npz"), allow_pickle=True) as saved:
        arrays = {k: saved[k] for k in saved.files}
    return results, arrays
