"""``bnc-fit`` (issue 27): pruning before training, strict measured budgets, the infeasible exit,
resume, end-to-end runs on the built-in digits for ``x86-64``, ``cortex-m4`` and ``web``, and a
toy target registered from a test.

Every run is tiny (1..2 bits, 2 epochs, one hybrid draw): the tests check the search's contract,
not its accuracy. The Cortex-M run is skipped without the toolchain (as in
``tests/test_deploy_targets.py``), the web run without TensorFlow and LiteRT.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from bnc_deploy.cli.fit import main
from bnc_deploy.fit import InfeasibleBudget, SpaceSettings, fit_to_budget
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

TINY = ["--epochs", "2", "--draws", "1", "--bits", "1..2", "--quiet", "--json"]
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
    result = fit_to_budget("digits", "x86-64", out_dir=tmp_path, settings=SMALL, max_bits=NB_ENTRIES)
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
    assert {os.path.basename(f) for f in report["files"]} <= {"x86-64.onnx", "x86-64.h"}
    for name in ("model.bnc", "report.json", "report.md", "x86-64.onnx"):
        assert (out / name).is_file(), name
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
        fit_to_budget("digits", "x86-64", out_dir=tmp_path / "b", settings=SMALL, max_file_bytes=1400)
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
        capsys, "--data", "digits", "--target", "web", "--max-file-bytes", "256KiB", "--families", "nb", "-o",
        str(tmp_path), *TINY,
    )  # fmt: skip
    assert code == 0 and report["chosen"]["measured"]["file_bytes"] <= 256 * 1024
    assert {os.path.basename(f) for f in report["files"]} == {"web.tflite", "web.onnx"}


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


def test_a_time_budget_narrows_draws_then_learning_rates_then_epochs(tmp_path, monkeypatch):
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.fit import plan
    from bnc_deploy.fit.space import plan_space
    from bnc_deploy.targets.base import get_target
    from bnc_deploy.targets.budget import Budget

    wide = SpaceSettings(bits=(1, 2), int_bits=(1,), lrs=(3e-2, 3e-3), draws=3, epochs=100)
    space = plan_space(load_dataset("digits", validation_fraction=0.2), get_target("x86-64"), Budget(), ["nb"], wide)
    n = plan.n_configurations(space, wide, 0)
    assert n == 2 * 2 * 3
    seconds = 100.0  # the forecast of the wide grid: 1/12 s per configuration of 100 epochs x 12
    assert plan.narrow(space, wide, 0, seconds, allowed=100.0) == wide
    assert plan.narrow(space, wide, 0, seconds, allowed=40.0).draws == 1  # 4 configurations: 33 s
    only = plan.narrow(space, wide, 0, seconds, allowed=20.0)
    assert (only.draws, only.lrs, only.epochs) == (1, (3e-2,), 100)  # 2 configurations: 17 s
    cut = plan.narrow(space, wide, 0, seconds, allowed=5.0)
    assert (cut.draws, cut.lrs, cut.epochs) == (1, (3e-2,), 30)
    assert plan.narrow(space, wide, 0, seconds, allowed=0.1).epochs == plan.MIN_EPOCHS
    probes = []
    monkeypatch.setattr(plan, "forecast_seconds", lambda *a, **k: probes.append(1) or seconds)
    for _ in range(2):  # the second call reads plan.json: same inputs, same grid, no probe
        got = plan.fit_time_budget(space, wide, "digits", 0, 25.0, out_dir=tmp_path)
        assert got == only
    assert probes == [1] and (tmp_path / plan.PLAN_FILE).is_file()
