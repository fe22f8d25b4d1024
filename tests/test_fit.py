"""``bnc-fit`` (issue 27): pruning before training, strict measured budgets, the infeasible exit,
resume, end-to-end runs on the built-in digits for ``x86-64``, ``cortex-m4``, ``tflm`` and ``web``,
and a toy target registered from a test.

Every run is tiny (1..2 bits, 2 epochs, one hybrid draw): the tests check the search's contract,
not its accuracy. The Cortex-M run is skipped without the toolchain (as in
``tests/test_deploy_targets.py``), the web run without TensorFlow and LiteRT.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os

import pytest

from bnc_deploy.cli.fit import main
from bnc_deploy.fit import InfeasibleBudget, SpaceSettings, fit_to_budget
from bnc_deploy.sweep.estimate import Rates
from bnc_deploy.sweep.table import ResultsTable
from bnc_deploy.targets import cortex_m_build
from bnc_deploy.targets.base import Export, Target, register_target, unregister_target

pytest.importorskip("torch")

MISSING = cortex_m_build.tools_available()
REQUIRED = os.environ.get("BNC_DEPLOY_REQUIRE_CORTEX_M", "") not in ("", "0")
needs_toolchain = pytest.mark.skipif(
    MISSING is not None and not REQUIRED, reason=f"Cortex-M toolchain not installed: {MISSING}"
)
_TFLITE = [m for m in ("tensorflow", "ai_edge_litert") if importlib.util.find_spec(m) is None]
needs_tflite = pytest.mark.skipif(bool(_TFLITE), reason=f"TFLite export needs {', '.join(_TFLITE)}")
needs_tflm = pytest.mark.skipif(
    bool(_TFLITE) or importlib.util.find_spec("tflite_micro") is None, reason="needs TensorFlow, LiteRT, tflite-micro"
)

#: Tiny BN searches without the time budget's probe (tested on its own below).
TINY = "--epochs 2 --draws 1 --bits 1..2 --families nb,tan --time-budget none --quiet --json".split()
SMALL = SpaceSettings(bits=(1, 2), int_bits=(1,), lrs=(3e-2,), draws=1, epochs=2)
#: digits: 64 features of 17 values, 10 classes -> 10 x (1 + 64 x 17) table entries for NB.
NB_ENTRIES = 10 * (1 + 64 * 17)


def run_cli(capsys, *args: str) -> tuple[int, dict | None, str]:
    """``(exit status, the --json output or None, stderr)``."""
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out.strip() else None), captured.err


def trained_configs(sweep_dir: str) -> list[dict]:
    table = ResultsTable(sweep_dir)
    try:
        return [r["config"] for r in table.rows()]
    finally:
        table.close()


@pytest.fixture(scope="module")
def x86_fit(tmp_path_factory):
    """One digits fit for x86-64 under a generous file budget (reused: resume, one byte below)."""
    out = tmp_path_factory.mktemp("fit-x86")
    args = ["--data", "digits", "--target", "x86-64", "--max-file-bytes", "1MiB", "-o", str(out), *TINY]
    return out, args


def test_pruned_configurations_are_never_trained(tmp_path):
    # Only NB at 1 bit has at most NB_ENTRIES bits; NB 2-bit and every TAN are pruned.
    result = fit_to_budget(
        "digits",
        "x86-64",
        out_dir=tmp_path,
        settings=SMALL,
        families=["nb", "tan"],
        time_budget=None,
        max_bits=NB_ENTRIES,
    )
    pruned = {(c["family"], c["bits"]) for c in result.cells if c["pruned"]}
    assert pruned == {("nb", 2), ("tan", 1), ("tan", 2)}
    assert all(p["axis"] == "bits" for c in result.cells for p in c["pruned"])
    configs = trained_configs(result.sweep_dir)
    assert configs and {(c["model"], c["bits"]) for c in configs} == {("nb", 1)}
    assert result.trained == len(configs)
    assert result.fits and result.chosen.measured.bits <= NB_ENTRIES


def test_x86_64_end_to_end(capsys, x86_fit):
    out, args = x86_fit
    code, report, _ = run_cli(capsys, *args)
    assert code == 0 and report["fits"]
    chosen = report["chosen"]
    assert chosen["fits"] and chosen["measured"]["file_bytes"] <= 2**20
    assert chosen["candidate"]["val_error"] is not None and chosen["candidate"]["test_error"] is not None
    assert [os.path.basename(f) for f in report["files"]] == ["x86-64.h"]  # BN models run native on x86-64
    for name in ("model.bnc", "report.json", "report.md", "x86-64.h", "pareto.png", "pareto.svg"):
        assert (out / name).is_file(), name
    assert "<svg" in (out / "pareto.svg").read_text()[:2000]
    assert {str(out / "pareto.png"), str(out / "pareto.svg")} <= set(report["reports"])
    assert json.loads((out / "report.json").read_text())["chosen"]["candidate"]["id"] == chosen["candidate"]["id"]
    ranked = [c["val_error"] for c in report["candidates"]]
    assert ranked == sorted(ranked)  # taken in order of validation error


def test_a_rerun_resumes_and_trains_nothing(capsys, x86_fit):
    out, args = x86_fit
    first = run_cli(capsys, *args)[1]
    again = run_cli(capsys, *args)[1]
    assert again["trained"] == 0 and again["skipped"] == first["trained"] + first["skipped"]
    assert again["sweep_dir"] == first["sweep_dir"]
    assert again["chosen"]["candidate"]["id"] == first["chosen"]["candidate"]["id"]


def test_a_budget_one_byte_below_the_measured_cost_never_fits(capsys, x86_fit):
    out, args = x86_fit
    first = run_cli(capsys, *args)[1]
    cost = first["chosen"]["measured"]["file_bytes"]
    tighter = [a if a != "1MiB" else str(cost - 1) for a in args]
    code, report, err = run_cli(capsys, *tighter)
    assert report["trained"] == 0  # the same kept cells: the sweep resumes
    assert any(a["measured"]["file_bytes"] == cost and not a["fits"] for a in report["attempts"])
    for attempt in report["attempts"]:
        assert attempt["fits"] == (attempt["measured"]["file_bytes"] <= cost - 1 and not attempt["problems"])
    if code == 0:
        assert report["chosen"]["measured"]["file_bytes"] <= cost - 1
    else:
        assert code == 2 and "relax --max-file-bytes" in err and not (out / "model.bnc").exists()


def test_an_infeasible_budget_exits_2_naming_the_smallest_cost_and_the_flag(capsys, tmp_path):
    # Before training: no configuration has 100 bits or fewer.
    code, report, err = run_cli(
        capsys, "--data", "digits", "--target", "x86-64", "--max-bits", "100", "-o", str(tmp_path / "a"), *TINY
    )
    assert code == 2 and report["fits"] is False and report["trained"] == 0
    (line,) = err.strip().splitlines()
    assert f"bits needs at least {NB_ENTRIES:,} bits (nb 1-bit) > 100 bits" in line
    assert line.endswith("relax --max-bits")
    assert (tmp_path / "a" / "report.md").is_file() and not (tmp_path / "a" / "model.bnc").exists()
    # After measuring: NB 1-bit's table bound (1,362 B) fits 1,400 B, its files do not.
    code, report, err = run_cli(
        capsys, "--data", "digits", "--target", "x86-64", "--max-file-bytes", "1400", "-o", str(tmp_path / "b"), *TINY
    )
    assert code == 2 and report["trained"] > 0 and report["attempts"]
    smallest = min(a["measured"]["file_bytes"] for a in report["attempts"])
    (line,) = err.strip().splitlines()
    assert f"the smallest file_bytes measured was {smallest:,} B" in line and line.endswith("relax --max-file-bytes")
    with pytest.raises(InfeasibleBudget, match="relax --max-file-bytes") as exc:
        fit_to_budget(
            "digits",
            "x86-64",
            out_dir=tmp_path / "b",
            settings=SMALL,
            families=["nb", "tan"],
            time_budget=None,
            max_file_bytes=1400,
        )
    assert exc.value.result is not None and not exc.value.result.fits


@needs_toolchain
def test_cortex_m4_end_to_end_measures_flash_on_the_toolchain(capsys, tmp_path):
    common = ["--data", "digits", "--target", "cortex-m4", "-o", str(tmp_path), *TINY]
    code, report, _ = run_cli(capsys, *common, "--max-flash", "2KiB")
    assert code == 0, report["message"]
    flash = report["chosen"]["measured"]["flash"]
    assert flash <= 2048 and report["chosen"]["variant"] == "packed"  # 10,890 unpacked entries cannot fit
    assert (tmp_path / "cortex-m4.h").is_file() and (tmp_path / "model.bnc").is_file()
    code, report, err = run_cli(capsys, *common, "--max-flash", str(flash - 1))
    assert code == 2 and not report["fits"] and report["trained"] == 0
    assert f"flash measured was {flash:,} B" in err and "relax --max-flash" in err


@needs_tflite
def test_web_end_to_end(capsys, tmp_path):
    code, report, _ = run_cli(
        capsys, "--data", "digits", "--target", "web", "--max-file-bytes", "256KiB", "-o", str(tmp_path), *TINY,
        "--families", "nb",
    )  # fmt: skip
    assert code == 0 and report["chosen"]["measured"]["file_bytes"] <= 256 * 1024
    assert {os.path.basename(f) for f in report["files"]} == {"web.tflite", "web.onnx"}


@needs_tflm
def test_tflm_end_to_end_measures_the_arena_and_refuses_one_byte_less(capsys, tmp_path):
    common = ["--data", "digits", "--target", "tflm", "-o", str(tmp_path), *TINY, "--families", "nb"]
    code, report, _ = run_cli(capsys, *common, "--max-ram", "64KiB")
    assert code == 0, report["message"]
    arena = report["chosen"]["measured"]["ram"]
    assert 0 < arena <= 64 * 1024
    assert [os.path.basename(f) for f in report["files"]] == ["tflm.tflite"]
    code, report, err = run_cli(capsys, *common, "--max-ram", str(arena - 1))
    assert code == 2 and not report["fits"] and report["trained"] == 0
    assert f"ram measured was {arena:,} B" in err and "relax --max-ram" in err


def test_a_toy_target_registered_from_a_test_is_a_valid_target(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--data", "digits", "--target", "toy-fit-target", "-o", str(tmp_path), *TINY)
    assert code == 2 and "unknown target 'toy-fit-target'" in err
    register_target(Target(name="toy-fit-target", description="a toy", exports=(Export("onnx"),)))
    try:
        code, report, _ = run_cli(
            capsys, "--data", "digits", "--target", "toy-fit-target", "--max-bits", str(NB_ENTRIES),
            "-o", str(tmp_path), *TINY,
        )  # fmt: skip
        assert code == 0 and report["target"] == "toy-fit-target"
        assert [os.path.basename(f) for f in report["files"]] == ["toy-fit-target.onnx"]
        code, _, err = run_cli(capsys, "--data", "digits", "--target", "toy-fit-target", "--max-flash", "1KiB")
        assert code == 2 and "target toy-fit-target cannot measure --max-flash" in err
    finally:
        unregister_target("toy-fit-target")


#: Probe rates of a batched NB chunk: 0.3 s per chunk-epoch whatever its configurations, plus 70 s
#: per 1,200 configuration-epochs. The wide grid below (12 configurations, one chunk, 100 epochs)
#: then costs 30 + 70 = 100 s, and n of its configurations 30 + 70 n / 12.
FAKE_RATES = {"nb": Rates(70 / 1200, 0.3, 0.0, 12)}


def fake_probe(monkeypatch, probes: list | None = None) -> None:
    from bnc_deploy.sweep import estimate

    def measure_rates(tasks, device="cpu"):
        if probes is not None:
            probes.append(len(tasks))
        return FAKE_RATES

    monkeypatch.setattr(estimate, "measure_rates", measure_rates)


def test_a_time_budget_narrows_draws_then_learning_rates_then_epochs(tmp_path, monkeypatch):
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.fit import plan
    from bnc_deploy.fit.space import plan_space
    from bnc_deploy.targets.base import get_target
    from bnc_deploy.targets.budget import Budget

    wide = SpaceSettings(bits=(1, 2), int_bits=(1,), lrs=(3e-2, 3e-3), draws=3, epochs=100, halving=False)
    space = plan_space(load_dataset("digits", validation_fraction=0.2), get_target("x86-64"), Budget(), ["nb"], wide)
    n = plan.n_configurations(space, wide, 0)
    assert n == 2 * 2 * 3
    probes: list = []
    fake_probe(monkeypatch, probes)
    cost = plan.forecast(space, wide, "digits", 0, "cpu")
    assert probes == [1] and cost(wide) == pytest.approx(100.0)
    # The chunk part does not shrink with the configurations; everything scales with the epochs.
    assert cost(dataclasses.replace(wide, draws=1)) == pytest.approx(30 + 70 * 4 / 12)
    assert cost(dataclasses.replace(wide, epochs=50)) == pytest.approx(50.0)
    assert plan.narrow(wide, cost, allowed=100.0) == wide
    fewer = plan.narrow(wide, cost, allowed=60.0)  # 4 configurations: 53 s
    assert (fewer.draws, fewer.lrs, fewer.epochs) == (1, (3e-2, 3e-3), 100)
    only = plan.narrow(wide, cost, allowed=45.0)  # 2 configurations: 42 s
    assert (only.draws, only.lrs, only.epochs) == (1, (3e-2,), 100)
    # Draws are kept down to DRAW_EPOCHS (50) epochs: 9 draws -> 3, one learning rate, 6 configurations
    # cost 0.65 s an epoch; 61 epochs fit 40 s.
    assert plan.narrow(dataclasses.replace(wide, draws=9), cost, allowed=40.0).epochs == 61
    kept_draws = plan.narrow(dataclasses.replace(wide, draws=9), cost, allowed=40.0)
    assert (kept_draws.draws, kept_draws.lrs) == (3, (3e-2,))
    cut = plan.narrow(wide, cost, allowed=5.2)  # 0.417 s an epoch: 12 epochs
    assert (cut.draws, cut.lrs, cut.epochs) == (1, (3e-2,), 12)
    assert plan.narrow(wide, cost, allowed=0.1).epochs == plan.MIN_EPOCHS
    # Room to spare: more epochs, up to max_epochs, the most within WIDEN_MARGIN (0.7) of the allowed time.
    assert plan.narrow(wide, cost, allowed=210.0).epochs == 147
    assert plan.narrow(wide, cost, allowed=10_000.0).epochs == wide.max_epochs == 500
    kept = dataclasses.replace(wide, max_epochs=100)  # --epochs given: never raised
    assert plan.narrow(kept, cost, allowed=10_000.0) == kept
    probes.clear()
    for _ in range(2):  # the second call reads plan.json: same inputs, same grid, no probe
        got = plan.fit_time_budget(space, wide, "digits", 0, 45.0, out_dir=tmp_path)
        assert got == only
    assert probes == [1] and (tmp_path / plan.PLAN_FILE).is_file()


def test_the_default_time_budget_covers_the_search_less_a_measurement_allowance(tmp_path, monkeypatch):
    import inspect

    from bnc_deploy.cli.fit import build_parser, parse_duration
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.fit import plan
    from bnc_deploy.fit.space import plan_space
    from bnc_deploy.targets.base import get_target
    from bnc_deploy.targets.budget import Budget

    assert inspect.signature(fit_to_budget).parameters["time_budget"].default == plan.DEFAULT_TIME_BUDGET == 720
    assert parse_duration(None) == 720 and parse_duration("none") is None and parse_duration("90s") == 90
    assert "(default 12m)" in " ".join(build_parser().format_help().split())
    wide = SpaceSettings(bits=(1, 2), int_bits=(1,), lrs=(3e-2, 3e-3), draws=3, epochs=100, halving=False)
    data = load_dataset("digits", validation_fraction=0.2)
    cortex = plan_space(data, get_target("cortex-m4"), Budget(), ["nb"], wide)
    # 2 kept cells x (default, packed) measurements, each estimated for a Cortex-M build and run.
    assert plan.measure_allowance(cortex, get_target("cortex-m4")) == 4 * plan.MEASURE_SECONDS["cortex-m"]
    space = plan_space(data, get_target("x86-64"), Budget(), ["nb"], wide)
    fake_probe(monkeypatch)  # the wide grid: 100 s
    # 160 s less 100 s spent and set aside leave 60 s: one draw, both learning rates (53 s).
    got = plan.fit_time_budget(space, wide, "digits", 0, 160.0, out_dir=tmp_path, reserve=100.0)
    assert (got.draws, got.lrs, got.epochs) == (1, (3e-2, 3e-3), 100)
    stored = json.loads((tmp_path / plan.PLAN_FILE).read_text())
    assert stored["reserve_seconds"] == 100.0 and 59.0 < stored["training_seconds_allowed"] <= 60.0
    assert stored["forecast_seconds"] == pytest.approx(100.0)
    assert stored["rates"]["nb"]["seconds_per_chunk_epoch"] == 0.3
    assert stored["planned_seconds"] == pytest.approx(30 + 70 * 4 / 12)
    # A reserve beyond the budget still leaves MIN_TRAIN_SHARE of it to training (30 s of 120 s):
    # 0.4167 s an epoch for 2 configurations, 72 epochs.
    floor = plan.fit_time_budget(space, wide, "digits", 0, 120.0, reserve=1000.0)
    assert (floor.lrs, floor.epochs) == ((3e-2,), 72)


def test_progress_lines_name_each_stage_and_the_best_fit_so_far(capsys, tmp_path):
    # The default time budget: the sweep's probe plans the (tiny) grid; plan.json records it.
    args = ["--data", "digits", "--target", "x86-64", "--max-file-bytes", "1MiB", "-o", str(tmp_path)]
    args += ["--epochs", "2", "--draws", "1", "--bits", "1", "--families", "nb"]
    assert main(args) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("bnc-fit: ")]
    assert lines[0] == "bnc-fit: digits on x86-64, budget file_bytes <= 1,048,576 B; families nb"
    assert lines[1] == "bnc-fit: time budget 12.0 min: probing the training speed"
    assert lines[2].startswith("bnc-fit: plan: ") and "min of training forecast (allowed " in lines[2]
    assert lines[3] == "bnc-fit: search space: 1 cells, 0 pruned before training; 2 configurations x 2 epochs to train"
    measured = [line for line in lines if line.startswith("bnc-fit: measured nb 1-bit default")]
    assert len(measured) == 1 and ": fits; best so far that fits: nb 1-bit default, val " in measured[0]
    assert lines[-1].startswith("bnc-fit: done in ") and "file_bytes" in lines[-1]
    assert captured.out.startswith("bnc-fit: digits on x86-64: fits")
    assert (tmp_path / "plan.json").is_file()
    assert main([*args, "--quiet"]) == 0
    assert "bnc-fit: " not in capsys.readouterr().err


def test_dnn_cells_are_sized_to_the_budget_and_refused_where_the_target_takes_no_dnn():
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.errors import ConfigError
    from bnc_deploy.fit.dnn_space import dnn_costs_of
    from bnc_deploy.fit.space import check_families, plan_space
    from bnc_deploy.targets.base import get_target
    from bnc_deploy.targets.budget import Budget

    x86, cortex = get_target("x86-64"), get_target("cortex-m4")
    assert check_families(None, x86, image=True) == ("nb", "tan", "fc", "cnn")
    assert check_families(None, x86, image=False) == ("nb", "tan", "fc")
    assert check_families(None, cortex, image=True) == ("nb", "tan")
    with pytest.raises(ConfigError, match="cnn needs image data"):
        check_families(["cnn"], x86, image=False)
    with pytest.raises(ConfigError, match="target cortex-m4 takes bnc models"):
        check_families(["fc"], cortex, image=True)
    data = load_dataset("digits", validation_fraction=0.2)
    settings = SpaceSettings(bits=(1, 2, 8), lrs=(3e-2,))
    # An exact axis: one size per weight bit width, the widest the matcher rounds to within the limit.
    space = plan_space(data, x86, Budget(max_bits=8_000), ["fc", "cnn"], settings)
    assert [(c.family, c.bits) for c in space.cells] == [(f, b) for f in ("fc", "cnn") for b in (1, 2, 8)]
    for cell in space.cells:
        assert cell.kept and 0.8 * 8_000 < cell.costs.size_bits <= 8_000, cell.label
        assert cell.costs.size_bits == dnn_costs_of(cell.family, data, cell.widths, cell.bits, settings).size_bits
    assert {r["hidden"] for r in space.records} == {",".join(map(str, c.widths)) for c in space.cells}
    # A measured axis: F bytes hold F int8 weights (F / 2 int16 ones above 7 bits), and half that size.
    space = plan_space(data, x86, Budget(max_file_bytes=16_384), ["fc"], settings)
    widths = {b: [c.widths[0] for c in space.cells if c.bits == b] for b in (1, 2, 8)}
    assert widths[2] == [219, 109] and widths[8] == [110, 55]  # 74 weights per unit, 10 biases
    # A target without DNN exports: the DNN cells are listed, refused, never trained.
    space = plan_space(data, cortex, Budget(max_flash=4096), ["nb", "fc"], SpaceSettings(bits=(1, 2)))
    refused = [c for c in space.cells if c.family == "fc"]
    assert refused and all(c.refused == "target cortex-m4 takes no dnn models" and not c.kept for c in refused)
    assert {r["model"] for r in space.records} == {"nb"}


def test_fc_and_cnn_train_through_the_sweep_and_a_network_is_chosen(capsys, tmp_path):
    args = ["--data", "digits", "--target", "x86-64", "--max-bits", "8000", "--families", "fc,cnn", "--bits", "2"]
    args += ["--epochs", "2", "--time-budget", "none", "--quiet", "--json", "-o", str(tmp_path)]
    code, report, _ = run_cli(capsys, *args)
    assert code == 0 and report["chosen"]["candidate"]["config"]["model"] in ("fc", "cnn")
    assert report["chosen"]["measured"]["bits"] <= 8_000
    (sweep,) = report["sweep_dirs"]
    configs = trained_configs(sweep)
    cells = {(c["family"], ",".join(map(str, c["widths"]))) for c in report["cells"]}
    assert {(c["model"], c["hidden"]) for c in configs} == cells and len(configs) == 2 * len(cells)  # 2 rates
    assert len(report["candidates"]) == len(cells)  # the best of each cell
    again = run_cli(capsys, *args)[1]
    assert again["trained"] == 0 and again["chosen"]["candidate"]["id"] == report["chosen"]["candidate"]["id"]


def test_learned_tan_cells_are_bounded_by_nb_and_train_per_size_penalty(tmp_path):
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.fit.space import plan_space
    from bnc_deploy.targets.base import get_target
    from bnc_deploy.targets.budget import Budget

    settings = SpaceSettings(bits=(1, 2), int_bits=(1,), lrs=(3e-2,), draws=1, epochs=2, size_penalties=(1e-3, 1e-1))
    data = load_dataset("digits", validation_fraction=0.2)
    space = plan_space(data, get_target("x86-64"), Budget(max_bits=NB_ENTRIES), ["tan-learn"], settings)
    # Its structure is learned: the bound is NB's, so only the 1-bit cells (one per lambda_MS) survive.
    assert [(c.bits, c.size_penalty, c.kept) for c in space.cells] == [
        (1, 1e-3, True), (1, 1e-1, True), (2, 1e-3, False), (2, 1e-1, False)
    ]  # fmt: skip
    assert [(r["structure"], r["size_penalty"]) for r in space.records] == [("learn", 1e-3), ("learn", 1e-1)]
    one = dataclasses.replace(settings, bits=(1,), size_penalties=(1e-3,))
    result = fit_to_budget(
        "digits", "x86-64", out_dir=tmp_path, settings=one, families=["tan-learn"], time_budget=None,
        max_file_bytes="1MiB",
    )  # fmt: skip
    (config,) = trained_configs(result.sweep_dir)
    assert (config["model"], config["structure"], config["size_penalty"]) == ("tan", "learn", 1e-3)
    assert result.fits and result.chosen.candidate.short == "tan-learn 1-bit lambda_MS 0.001"
    assert result.chosen.measured.bits >= NB_ENTRIES


def test_a_latency_budget_prunes_slow_architectures_before_training(tmp_path, monkeypatch):
    from bnc_deploy.fit import latency_probe

    timed = []

    def fake_fastest(model_path, target, workdir):  # a DNN 100 us, a BN model 1 us
        artifact = latency_probe.load_artifact(model_path)
        timed.append(artifact.kind)
        return 100.0 if artifact.kind == "dnn" else 1.0

    monkeypatch.setattr(latency_probe, "_fastest", fake_fastest)
    monkeypatch.setattr("bnc_deploy.fit.search.measured_axes", lambda target, budget: ("file_bytes",))
    budget = {"max_latency_us": 5}
    with pytest.raises(InfeasibleBudget):  # file_bytes only is measured: latency stays unmeasured, nothing fits
        fit_to_budget(
            "digits", "x86-64", out_dir=tmp_path, settings=SMALL, families=["nb", "fc"], time_budget=None, **budget
        )
    report = json.loads((tmp_path / "report.json").read_text())
    assert sorted(timed) == ["bnc", "dnn", "dnn"]  # one per architecture: nb; fc at its two widths
    probe = report["latency_probe"]
    assert probe["latencies_us"] == {"nb": 1.0, **{k: 100.0 for k in probe["latencies_us"] if k.startswith("fc")}}
    fc_cells = [c for c in report["cells"] if c["family"] == "fc"]
    assert fc_cells and all(c["pruned"] == [{"axis": "latency_us", "lower_bound": 100.0, "limit": 5}] for c in fc_cells)
    assert all(not c["pruned"] for c in report["cells"] if c["family"] == "nb")
    configs = trained_configs(report["sweep_dir"])
    assert configs and {c["model"] for c in configs} == {"nb"}  # no DNN trained in the search


@pytest.mark.skipif(os.uname().machine.lower() not in ("x86_64", "amd64"), reason="x86-64 times latency there only")
def test_a_latency_no_architecture_meets_exits_2_before_the_search(capsys, tmp_path):
    code, report, err = run_cli(
        capsys, "--data", "digits", "--target", "x86-64", "--max-latency-us", "0.001", "-o", str(tmp_path), *TINY
    )
    assert code == 2 and report["trained"] == 0 and report["sweep_dir"] is None
    assert set(report["latency_probe"]["latencies_us"]) == {"nb", "tan"}
    assert all(c["pruned"][0]["axis"] == "latency_us" for c in report["cells"])
    assert "relax --max-latency-us" in err


def test_device_and_backend_reach_the_sweep_engine(tmp_path, monkeypatch):
    import bnc_deploy.sweep.runner as runner

    seen = []
    real = runner.run_sweep

    def spy(spec, options, **kw):
        seen.append((options.device, options.backend, options.resume, options.select))
        return real(spec, dataclasses.replace(options, backend="local"), **kw)  # Ray itself: tests/sweep

    monkeypatch.setattr(runner, "run_sweep", spy)
    fit_to_budget(
        "digits", "x86-64", out_dir=tmp_path, settings=SMALL, families=["nb"], time_budget=None,
        max_bits=NB_ENTRIES, backend="ray", device="cpu",
    )  # fmt: skip
    assert seen == [("cpu", "ray", True, "validation")]


def test_dnn_cells_are_sized_to_the_measured_file_bytes_and_fit(capsys, tmp_path):
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.fit import dnn_space
    from bnc_deploy.targets.budget import Budget

    limit = 12 * 1024
    code, report, err = run_cli(
        capsys, "--data", "digits", "--target", "x86-64", "--max-file-bytes", str(limit), "-o", str(tmp_path),
        "--epochs", "2", "--draws", "1", "--bits", "2,8", "--families", "fc", "--time-budget", "none", "--json",
    )  # fmt: skip
    assert code == 0, err
    lines = report["size_probe"]
    assert set(lines) == {"fc 1-byte weights file_bytes", "fc 2-byte weights file_bytes"}
    assert all(line["fixed"] > 0 and line["per_parameter"] > 0 for line in lines.values())
    # Sized by the measured line, every network measured fits; the weight bound alone sizes wider.
    fc = [a for a in report["attempts"] if a["candidate"]["config"]["model"] == "fc"]
    assert fc and all(a["fits"] and a["measured"]["file_bytes"] <= limit for a in fc)
    data = load_dataset("digits", validation_fraction=0.2)
    settings = SpaceSettings(bits=(2, 8))
    for bits in (2, 8):
        sized = [c["widths"] for c in report["cells"] if c["family"] == "fc" and c["bits"] == bits]
        bound = dnn_space.dnn_widths("fc", data, bits, Budget(max_file_bytes=limit), settings)
        assert max(tuple(w) for w in sized) < bound[0]
