"""Sweep forecasts (``sweep.estimate``): planned configuration-epochs equal what a sweep trains,
halving included, and ``bnc-reproduce --estimate`` probes every kind of configuration without
writing anything."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from bnc_deploy.cli.reproduce import main as reproduce
from bnc_deploy.sweep.estimate import Rates, chunk_epochs, planned_config_epochs, price
from bnc_deploy.sweep.grid import GridSpec
from bnc_deploy.sweep.runner import SweepOptions, check_plan, records_of, run_sweep


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("halving, min_rung", [(False, 5), (True, 1), (True, 2)])
def test_planned_config_epochs_are_what_the_sweep_trains(tmp_path, halving, min_rung):
    # Two bit-width groups of 12 (uneven survivors at rate 3: 12 -> 4 -> 2), and a float group
    # of 4 in its own chunk.
    spec = GridSpec(
        axes={"bits": [2, 3], "int_bits": [1, 2, 3], "lr": [3e-2, 3e-3]},
        draws={
            "n": 2,
            "seed": 0,
            "hybrid_lambda": {"log10_uniform": [1, 2]},
            "hybrid_gamma": {"log10_uniform": [-1, 1]},
        },
        fixed={"data": "digits", "model": "nb", "epochs": 7, "batch_size": 50, "validation": 0.2},
    ).normalized()
    options = SweepOptions(directory=tmp_path / "sweep", halving=halving, min_rung=min_rung, keep="none")
    planned = sum(planned_config_epochs(task) for task in check_plan(records_of(spec), options))
    summary = run_sweep(spec, options)
    assert summary.config_epochs == planned
    assert (planned < 24 * 7) == halving


def test_estimate_probes_each_kind_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "figs"
    assert (
        reproduce(
            ["fig3", "--data", "digits", "--protocol", "smoke", "--dry-run", "--estimate", "-o", str(out), "--json"]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert not out.exists()
    estimate = plan["estimate"]
    assert set(estimate["families"]) == {"nb", "fc"}
    nb, fc = estimate["families"]["nb"], estimate["families"]["fc"]
    assert 1 <= nb["probed"] and 1 <= fc["probed"] <= fc["configurations"]
    assert nb["seconds_per_config_epoch"] > 0 and fc["seconds_per_config_epoch"] >= 0
    assert nb["chunk_epochs"] > 0 and nb["seconds_per_chunk_epoch"] >= 0
    # FC nets train batched too: one program per architecture, each stepping its own epochs.
    assert fc["chunk_epochs"] > 0 and fc["seconds_per_config"] == 0
    assert nb["config_epochs"] + fc["config_epochs"] == plan["planned_config_epochs"]
    assert estimate["seconds"] == pytest.approx(sum(f["seconds"] for f in estimate["families"].values()))
    assert estimate["text"].startswith("estimated time on cpu: ") and estimate["text"] in plan["sweeps"]


@pytest.mark.parametrize("halving", [False, True])
def test_price_adds_the_chunk_part_once_per_chunk_epoch(tmp_path, halving):
    # Two chunks (batch sizes differ) of 6 configurations, 9 epochs each: the chunk part is paid
    # for every epoch a chunk steps, whatever its configurations; halving cuts only the rest.
    spec = GridSpec(
        axes={"bits": [2, 3], "lr": [3e-2, 3e-3, 1e-3], "batch_size": [50, 100]},
        fixed={"data": "digits", "model": "nb", "epochs": 9, "validation": 0.2},
    ).normalized()
    tasks = check_plan(records_of(spec), SweepOptions(directory=tmp_path, halving=halving, min_rung=1))
    assert len(tasks) == 2 and [chunk_epochs(t) for t in tasks] == [9, 9]
    (estimate,) = price(tasks, {"nb": Rates(0.5, 2.0, 0.0, 6)})
    config_epochs = sum(planned_config_epochs(t) for t in tasks)
    assert (config_epochs < 12 * 9) == halving
    assert estimate.seconds == pytest.approx(0.5 * config_epochs + 2.0 * 18)
    assert (estimate.configurations, estimate.chunk_epochs) == (12, 18)
    with pytest.raises(KeyError):
        price(tasks, {})  # a kind never probed is not guessed


def test_a_dnn_chunk_steps_each_of_its_programs():
    """A DNN chunk runs one batched program per architecture, back to back: on the CPU the widths
    (budgets, bits) split programs; on a GPU they share one (padded), only shapes split."""
    from bnc_deploy.sweep.tasks import ChunkTask

    def record(bits, layers, epochs=10):
        return {
            "model": "fc",
            "layers": layers,
            "weight_bits": bits,
            "match_bits": 5000,
            "epochs": epochs,
            "batch_size": 100,
            "batch_norm": True,
            "activation": "relu",
            "one_hot": False,
        }

    records = [record(1, 2), record(1, 2), record(2, 2), record(1, 3, epochs=20)]
    cpu = ChunkTask(family="dnn", data={}, records=records, groups=["g"] * 4, device="cpu")
    gpu = ChunkTask(family="dnn", data={}, records=records, groups=["g"] * 4, device="cuda")
    assert chunk_epochs(cpu) == 10 + 10 + 20
    assert chunk_epochs(gpu) == 10 + 20


def test_the_probe_times_an_epoch_that_neither_warms_up_nor_evaluates(monkeypatch):
    """A probe runs PROBE_EPOCHS epochs and times the second: the first compiles or captures, the
    last evaluates, and a sweep evaluates only at its checkpoints."""
    from bnc_deploy.sweep import estimate
    from bnc_deploy.sweep.tasks import ChunkTask

    clock = iter([10.0, 11.0, 30.0])  # the ends of a warm-up epoch, a plain one (1 s), an evaluating one (19 s)
    ran = []

    def fake_run_chunk(task, on_epoch):
        ran.append(task)
        for epoch in range(1, int(task.records[0]["epochs"]) + 1):
            on_epoch(epoch, len(task.records))

    monkeypatch.setattr(estimate, "run_chunk", fake_run_chunk)
    monkeypatch.setattr(estimate.time, "perf_counter", lambda: next(clock))
    task = ChunkTask(family="bnc", data={}, records=[{"epochs": 500}], groups=["g"], device="cpu", checkpoints=[500])
    assert estimate.PROBE_EPOCHS == 3
    assert estimate._epoch_seconds(task, task.records) == 1.0
    assert ran[0].checkpoints == [3] and ran[0].records[0]["epochs"] == 3
