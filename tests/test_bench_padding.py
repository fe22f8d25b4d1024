"""Smoke test of ``benchmarks/bench_padding.py`` (a mixed-width DNN bucket as one padded program
against the programs ``width_programs`` cuts it into): on the CPU, one round of 2 epochs of the
letter paper FC program with the smallest nets (5 weight layers, batch norm), both ways reported
with the JSON keys it writes. Needs the letter dataset (``../shared``); no timing assertions."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from bnc_deploy.datasets import load_dataset
from bnc_deploy.errors import BncDeployError

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_padding.py"


def test_bench_padding_reports_both_ways(tmp_path, capsys):
    try:
        load_dataset("letter")
    except BncDeployError as exc:
        pytest.skip(f"letter dataset not available ({exc}); CI provides ../shared beside the clone")
    spec = importlib.util.spec_from_file_location("bench_padding_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "padding.json"
    argv = ["--layers", "5", "--batch-norm", "true", "--epochs", "2", "--repeats", "1", "--json", str(out)]
    assert module.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["configurations"] == 192 and report["epochs"] == 2
    assert set(report["rates"]) == set(report["chunks"]) == {"padded", "cut"}
    assert all(rate > 0 for rate in report["rates"].values())
    assert report["chunks"]["cut"] >= report["chunks"]["padded"] >= 1
    assert report["speedup"] == report["rates"]["cut"] / report["rates"]["padded"]
    assert "cut / padded" in capsys.readouterr().out
