"""Smoke test of ``benchmarks/bench_mcu.py`` (ours against emlearn on emulated Cortex-M, issue 29 item 7).

Runs the benchmark on the built-in ``digits`` data, 20 test rows, one board (M4), with NB and one
emlearn tree and Gaussian NB: every model must build, run, give the host's label on every row and
report FLASH, RAM and instructions. Needs the Cortex-M toolchain (skipped with the reason when
missing, failed under ``BNC_DEPLOY_REQUIRE_CORTEX_M=1``), torch (``bnc-train``) and emlearn. emlearn
is only in the optional ``bench`` extra, which CI does not install: without it the test is skipped,
even under ``BNC_DEPLOY_REQUIRE_CORTEX_M=1``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bnc_deploy.targets import cortex_m_build

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "bench_mcu.py"
#: CI sets this after installing the Debian packages: then a missing tool fails instead of skipping.
REQUIRED = os.environ.get("BNC_DEPLOY_REQUIRE_CORTEX_M", "") not in ("", "0")


def _require() -> None:
    missing = cortex_m_build.tools_available()
    if missing is not None:
        if REQUIRED:
            pytest.fail(f"Cortex-M toolchain not installed: {missing} - required by BNC_DEPLOY_REQUIRE_CORTEX_M=1")
        pytest.skip(f"Cortex-M toolchain not installed: {missing}")
    for module, extra in (("emlearn", "bench"), ("sklearn", "bench"), ("torch", "train")):
        if importlib.util.find_spec(module) is None:
            # Not a Cortex-M tool: skipped even under BNC_DEPLOY_REQUIRE_CORTEX_M=1 (optional extra).
            pytest.skip(f"{module} not installed (pip install 'bnc-deploy[{extra}]'); the benchmark compares with it")


def test_bench_mcu_digits_smoke(tmp_path):
    _require()
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(BENCH), "--datasets", "digits", "--rows", "20", "--boards", "mps2-an386"]
    cmd += ["--ours", "nb", "--emlearn", "gnb,dt", "--epochs", "2", "--json", str(out)]
    cmd += ["--work", str(tmp_path / "work")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| dataset | model | input | board |" in done.stdout
    report = json.loads(out.read_text())
    assert report["emlearn_version"]
    results = report["results"]
    assert [(r["family"], r["input"]) for r in results] == [
        ("ours", "codes"),
        ("emlearn", "raw float32"),
        ("emlearn", "raw float32"),
    ]
    for r in results:
        assert r["board"] == "mps2-an386" and r["n_rows"] == 20 and not r["errors"], r
        assert r["disagreements"] == 0, r  # the board's labels are the host model's
        assert r["test_error"] == pytest.approx(r["host_test_error"])
        assert r["footprint"]["flash_bytes"] > 0 and r["footprint"]["ram_bytes"] > 0
        assert r["instructions"]["available"] and r["instructions"]["predict_per_row"] > 0
    ours = results[0]["footprint"]
    assert ours["external_calls"] == [] and ours["data_bss_bytes"] == 0  # integer tables in flash, no state
