"""``bnc-reproduce``: the figure pipeline end to end on the built-in digits (smoke protocol), its
resume, and the quick/paper plans on the real data (skipped without ../shared)."""

from __future__ import annotations

import csv
import json

import pytest
from support import SHARED_DATASETS

from bnc_deploy.cli.reproduce import main


def _run(capsys, *argv) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("reproduce")
    assert main(["all", "--data", "digits", "--protocol", "smoke", "-o", str(out), "--quiet"]) == 0
    return out


def test_every_figure_is_written_with_points_csv_and_plot(smoke):
    for fig in ("fig3", "fig5", "fig6", "fig7"):
        for suffix in (".csv", ".json", ".png", ".svg"):
            assert (smoke / f"{fig}{suffix}").stat().st_size > 0, f"{fig}{suffix}"
    assert not (smoke / "fig4.csv").exists()  # digits is not one of the paper's image datasets
    with open(smoke / "fig6.csv") as f:
        rows = list(csv.DictReader(f))
    groups = {r["group"] for r in rows}
    assert groups == {"NB", "TAN (Chow-Liu)"}
    # One point per bit width (2, 3) and one float point per family; all labelled with the selection.
    assert sorted(r["bits"] for r in rows if r["group"] == "NB") == ["", "2", "3"]
    assert {r["selection"] for r in rows} == {"selected on the validation split"}
    fig3 = json.loads((smoke / "fig3.json").read_text())
    assert {p["group"] for p in fig3["points"]} == {"NB", "FC relu", "FC sign"}
    fig5 = json.loads((smoke / "fig5.json").read_text())
    assert sorted(p["size_penalty"] for p in fig5["points"]) == [1e-3, 1e-1]
    fig7 = json.loads((smoke / "fig7.json").read_text())
    assert any(p["pareto"] for p in fig7["points"]) and not all(p["pareto"] for p in fig7["points"])


def test_each_point_is_the_best_of_its_group_on_validation(smoke):
    from bnc_deploy.sweep.table import ResultsTable

    points = json.loads((smoke / "fig6.json").read_text())["points"]
    table = ResultsTable(smoke / "sweeps" / "nb-quantized")
    try:
        rows = [r for r in table.rows() if r["status"] == "done"]
    finally:
        table.close()
    for bits in (2, 3):
        best = min((r for r in rows if r["config"]["bits"] == bits), key=lambda r: r["final"]["val_error"])
        [point] = [p for p in points if p["group"] == "NB" and p["bits"] == bits]
        assert point["val_error"] == best["final"]["val_error"]


def test_rerun_resumes_and_trains_nothing(smoke, capsys):
    code, summary = _run(capsys, "fig6", "--data", "digits", "--protocol", "smoke", "-o", str(smoke))
    assert code == 0
    assert all(s["trained"] == 0 and s["skipped"] == s["configurations"] for s in summary["sweeps"].values())


def test_a_resumed_run_forecasts_only_what_it_has_left(smoke, capsys):
    code, plan = _run(
        capsys, "fig6", "--data", "digits", "--protocol", "smoke", "-o", str(smoke), "--dry-run", "--estimate"
    )
    assert code == 0
    # Every configuration has a row: nothing is probed and nothing is left to forecast.
    assert plan["estimate"]["families"] == {} and plan["estimate"]["seconds"] == 0
    assert plan["planned_config_epochs"] > 0  # the plan itself still lists the whole grid


def test_bad_requests_are_refused_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fig9", "--data", "digits", "-o", str(tmp_path)])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["fig4", "--data", "digits", "--protocol", "smoke", "-o", str(tmp_path)])
    assert exc.value.code == 2
    assert "fig4 (operations budget, CNNs) needs an image dataset" in capsys.readouterr().err


@pytest.mark.skipif(not (SHARED_DATASETS / "discretized").is_dir(), reason="../shared/datasets not found")
def test_quick_and_paper_plans_on_letter(capsys, tmp_path):
    code, plan = _run(capsys, "fig6", "--data", "letter", "--dry-run", "-o", str(tmp_path / "x"))
    assert code == 0 and not (tmp_path / "x").exists()
    # quick: 8 bit widths x B_I {2,3,4} x 20 draws x 2 lr, NB and TAN, plus 20 x 2 float each.
    assert plan["config_epochs"] == 2 * (960 + 40) * 500
    code, plan = _run(capsys, "fig6", "--data", "letter", "--protocol", "paper", "--dry-run", "-o", str(tmp_path))
    assert plan["config_epochs"] == 2 * (9600 + 200) * 500
    # Successive halving (rate 3, rungs 6/19/56/167 of 500): per group of 120, 120 x 6 + 40 x 13
    # + 14 x 37 + 5 x 111 + 2 x 333 = 2,979 epochs; 8 bit widths, and the float group of 40.
    code, plan = _run(capsys, "fig6", "--data", "letter", "--dry-run", "-o", str(tmp_path / "x"))
    assert plan["planned_config_epochs"] == 2 * (8 * 2979 + (40 * 6 + 14 * 13 + 5 * 37 + 2 * 111 + 333))


@pytest.mark.skipif(not (SHARED_DATASETS / "discretized").is_dir(), reason="../shared/datasets not found")
def test_quick_plan_of_a_wide_dataset_keeps_10_draws_and_trains_cnns_100_epochs(capsys, tmp_path):
    code, plan = _run(capsys, "fig3", "--data", "usps", "--dry-run", "-o", str(tmp_path / "x"))
    assert code == 0
    # usps has 256 features: 8 x 3 x 10 draws x 2 lr quantized NB, 10 x 2 float; FC 2 x 8 at 500
    # epochs; CNN 2 x 8 at 100.
    assert plan["config_epochs"] == (480 + 20) * 500 + 16 * 500 + 16 * 100


@pytest.mark.skipif(not (SHARED_DATASETS / "discretized").is_dir(), reason="../shared/datasets not found")
def test_fig3_cnns_sit_on_the_nb_memory_and_fig4_cnns_on_operation_budgets():
    from bnc_deploy.sweep import paper

    nb, d, c = paper.nb_parameters("usps")
    for protocol, bit_widths, factors in (
        ("paper", range(1, 9), [2**k for k in range(1, 9)]),
        ("quick", [1, 2, 4, 8], [2, 8, 32, 128]),
    ):
        fig3 = {s.name: s for s in paper.plan("fig3", "usps", protocol).sweeps}
        fig4 = {s.name: s for s in paper.plan("fig4", "usps", protocol).sweeps}
        fig7 = {s.name for s in paper.plan("fig7", "usps", protocol).sweeps}
        for activation in ("relu", "sign"):
            memory, ops = fig3[f"cnn-{activation}-memory"], fig4[f"cnn-{activation}"]
            assert f"cnn-{activation}" not in fig3 and f"cnn-{activation}-memory" not in fig4
            assert {memory.name, ops.name} <= fig7
            # The same budgets as the NB and FC points of Fig. 3 (the paper's x-axis).
            assert memory.spec.axes["match_bits"] == fig3[f"fc-{activation}"].spec.axes["match_bits"]
            assert memory.spec.axes["match_bits"] == [nb * b for b in bit_widths]
            assert "match_ops" not in memory.spec.axes and memory.x == "size_bits"
            assert ops.spec.axes["match_ops"] == [f * c * d for f in factors] and ops.x == "n_ops"
            for sweep in (memory, ops):
                assert sweep.group_by[-1] in sweep.spec.axes and sweep.family == f"CNN {activation}"
                if protocol == "paper":  # the paper's CNNs: one or two convolution layers
                    assert sweep.spec.axes["layers"] == [1, 2] and len(sweep.spec.axes["seed"]) == 5
                else:
                    assert sweep.spec.fixed["layers"] == 1 and sweep.spec.fixed["epochs"] == 100
