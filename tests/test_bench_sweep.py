"""Smoke test of ``benchmarks/bench_sweep.py`` (batched against single-run trainers, issues 12 and 30).

Runs the script's ``main`` on tiny synthetic stand-ins for letter (16 features) and usps (256
features, the 16x16 image layout), one epoch, M in {1, 2}, on the CPU: every kind that runs must
report a positive rate, single-run rate and speed-up (``ratio``) for each (kind, device, M), with
the JSON keys the benchmark has always written. Structure learning runs where
``bnc_deploy.train.structure_batched`` imports (with small settings instead of the paper's, which
are for the real letter), and otherwise must be reported as skipped with the reason; that report
is also checked on its own by hiding the module. The paper's letter settings are checked where the
paper structures folder is present (skipped otherwise). No timing assertions.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from support import make_synthetic_dataset

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_sweep.py"
#: Small structure-learning settings for the synthetic letter (the paper's are for the real one).
SMALL_STRUCTURE = {
    "model": "tan",
    "bits": None,
    "loss": "hybrid",
    "hybrid_lambda": 100.0,
    "hybrid_gamma": 10.0,
    "hybrid_eta": 10.0,
    "candidates": 3,
}


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_sweep_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_load_dataset(name, *, validation_fraction=0.0, seed=0, **_):
    shapes = {"letter": ((3,) * 16, 4, 300), "usps": ((3,) * 256, 10, 200)}
    cards, n_classes, n_train = shapes[name]
    dataset = make_synthetic_dataset(n_train=n_train, n_test=60, cardinalities=cards, n_classes=n_classes, name=name)
    return dataset.with_validation(validation_fraction, seed) if validation_fraction else dataset


@pytest.fixture
def bench(monkeypatch):
    module = _load_bench()
    monkeypatch.setattr(module, "load_dataset", _fake_load_dataset)
    monkeypatch.setattr(module, "structure_settings", lambda data: dict(SMALL_STRUCTURE))
    return module


def _structure_importable() -> bool:
    try:
        importlib.import_module("bnc_deploy.train.structure_batched").train_learned_tan_batched  # noqa: B018
    except Exception:
        return False
    return True


def test_bench_sweep_reports_every_kind(bench, tmp_path, capsys):
    out = tmp_path / "sweep.json"
    argv = ["--models", "nb,fc,cnn,structure", "--sizes", "1,2", "--epochs", "1", "--devices", "cpu"]
    bench.main(argv + ["--json", str(out)])
    report = json.loads(out.read_text())
    assert {"data", "epochs", "torch", "threads", "results"} <= set(report)
    assert report["datasets"] == {"nb": "letter", "fc": "letter", "cnn": "usps", "structure": "letter"}
    runs = {"nb", "fc", "cnn"} | ({"structure"} if _structure_importable() else set())
    seen = {(r["model"], r["M"]) for r in report["results"]}
    assert seen == {(kind, m) for kind in runs for m in (1, 2)}
    for r in report["results"]:
        assert r["device"].startswith("cpu")
        assert r["rate"] > 0 and r["per_run_rate"] > 0 and r["seconds"] > 0, r
        assert r["ratio"] == pytest.approx(r["rate"] / r["per_run_rate"])
    table = capsys.readouterr().out
    assert "cfg-epochs/s" in table
    if "structure" not in runs:
        (skip,) = [s for s in report["skipped"] if s["model"] == "structure"]
        assert skip["status"].startswith("skipped: ") and "structure_batched" in skip["status"]
        assert "skipped: " in table


def test_bench_sweep_skips_structure_without_the_batched_trainer(bench, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "bnc_deploy.train.structure_batched", None)  # import fails
    out = tmp_path / "sweep.json"
    bench.main(["--models", "structure", "--sizes", "1", "--epochs", "1", "--devices", "cpu,cuda", "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["results"] == []
    by_model = {s["model"]: s for s in report["skipped"]}
    assert by_model["structure"]["status"].startswith("skipped: bnc_deploy.train.structure_batched unavailable")
    table = capsys.readouterr().out
    assert "structure" in table and "skipped: " in table
    if not bench.torch.cuda.is_available():
        assert by_model[None]["device"] == "cuda" and by_model[None]["status"].startswith("skipped: ")


def test_structure_configs_use_the_paper_settings_for_letter():
    paper = pytest.importorskip("bnc_deploy.sweep.paper")
    try:
        paper.find_structures_dir()
    except Exception as exc:
        pytest.skip(f"paper structures folder not found: {exc}")
    bench = _load_bench()
    settings = bench.structure_settings("letter")
    preset = paper.preset("icpr2020-structure", data="letter").fixed
    assert settings["candidates_file"] == preset["candidates_file"] and settings["batch_size"] == 100
    pairs = bench.structure_configs(settings, 4, 2)
    assert [c.lr for c, _ in pairs] == [3e-2, 3e-3, 3e-2, 3e-3]
    assert [sl.size_penalty for _, sl in pairs] == pytest.approx(np.logspace(-7, 1, 4).tolist())
    for config, sl in pairs:
        assert config.bits is None and config.seed == 0 and config.epochs == 2 and config.loss == "hybrid"
        assert config.hybrid_lambda == preset["hybrid_lambda"] and sl.candidates_file == preset["candidates_file"]


def test_repeats_take_rounds_in_turn_and_report_medians(bench, monkeypatch, tmp_path, capsys):
    """``--repeats 3``: after the warm-ups, three rounds in turn (the single run, then the batched run);
    the row's rates are the medians, and every round's rates are kept."""
    calls: list[str] = []
    single = iter([99.0, 5.0, 1.0, 3.0])  # the warm-up, then three rounds: median 3
    batched = iter([30.0, 10.0, 20.0])  # M = 1, one epoch: rate = 1 / seconds; median 20

    def fake_single(dataset, kind, epochs, *rest, **kw):
        calls.append(f"single{epochs}")
        return next(single)

    def fake_seconds(dataset, kind, m, epochs, *rest, **kw):
        if m == 2:
            calls.append("warm-up")
            return 1.0
        calls.append("batched")
        return 1.0 / next(batched)

    monkeypatch.setattr(bench, "per_run_rate", fake_single)
    monkeypatch.setattr(bench, "batched_seconds", fake_seconds)
    out = tmp_path / "sweep.json"
    argv = ["--models", "fc", "--sizes", "1", "--epochs", "1", "--devices", "cpu", "--repeats", "3"]
    bench.main(argv + ["--json", str(out)])
    assert calls == ["single1", "single1", "warm-up", "batched", "single1", "batched", "single1", "batched"]
    (row,) = json.loads(out.read_text())["results"]
    assert row["rates"] == [30.0, 10.0, 20.0] and row["per_run_rates"] == [5.0, 1.0, 3.0]
    assert row["rate"] == 20.0 and row["per_run_rate"] == 3.0 and row["ratio"] == pytest.approx(20.0 / 3.0)
    assert "rounds 6.0x to 10.0x" in capsys.readouterr().out  # per round: 30/5, 10/1, 20/3
    with pytest.raises(SystemExit):
        bench.main(["--models", "fc", "--repeats", "0"])
