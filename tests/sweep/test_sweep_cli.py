"""``bnc-sweep`` end to end on the built-in digits data (issue 12): every configuration exactly once
across a ``kill -9`` and ``--resume``, refusals in one line before anything is written, the JSON
summary and results.csv, the keep policies, successive halving, a batch of one equal to
``bnc-train``, and the DNN / structure-learning configurations through the same runner.

Grids are small (a few configurations, 2-6 epochs) so each test takes seconds. The Ray backend is
tested in ``test_sweep_ray.py``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict

import numpy as np
import pytest
from support import REPO_ROOT

pytest.importorskip("torch")

from bnc_deploy.artifacts import load_artifact
from bnc_deploy.cli.bnc_sweep import main
from bnc_deploy.sweep.records import config_id
from bnc_deploy.sweep.table import TABLE_FILE, ResultsTable

#: What a row must reproduce across runs (``seconds`` is a measurement, ``model_path`` a policy).
SAME = (
    "config",
    "status",
    "error",
    "checkpoints",
    "final",
    "size_bits",
    "n_parameters",
    "ops",
    "device",
    "backend",
    "select",
)
JSON_KEYS = {
    "configurations",
    "trained",
    "skipped",
    "stopped",
    "failed",
    "select",
    "protocol",
    "device",
    "backend",
    "seconds",
    "config_epochs",
    "config_epochs_per_second",
    "best",
    "table",
    "csv",
}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Torch on one thread: these tiny models gain nothing from more, and on a busy machine two
    threads spin-wait for each other (several times slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run_json(capsys, *args) -> dict:
    """``bnc-sweep ARGS --json --quiet`` in this process; its summary."""
    assert main([*args, "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


def refused(capsys, *args) -> str:
    """``bnc-sweep ARGS`` must exit 2 with one line on stderr (and nothing on stdout); that line."""
    with pytest.raises(SystemExit) as info:
        main([*args, "--quiet"])
    out, err = capsys.readouterr()
    assert info.value.code == 2, f"exit status {info.value.code}, stderr: {err}"
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bnc-sweep: error: "), f"not one error line: {err!r}"
    return lines[0]


def rows_by_id(directory) -> dict[str, dict]:
    with ResultsTable.open_existing(directory) as table:
        rows = table.rows()
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids)), f"duplicate rows: {[i for i, n in Counter(ids).items() if n > 1]}"
    return {row["id"]: row for row in rows}


def assert_same_rows(got: dict, expected: dict, fields=SAME) -> None:
    assert set(got) == set(expected), (
        f"ids differ: only in got {set(got) - set(expected)}, only in expected {set(expected) - set(got)}"
    )
    for rid in expected:
        for name in fields:
            assert got[rid][name] == expected[rid][name], (
                f"row {rid}: {name} differs: {got[rid][name]!r} != {expected[rid][name]!r}"
            )


def grid_ids(*args) -> set[str]:
    """Config ids of the grid that ``bnc-sweep ARGS`` runs (the CLI's own expansion)."""
    from bnc_deploy.cli.bnc_sweep import build_parser, grid_from_args
    from bnc_deploy.sweep.grid import expand

    spec = grid_from_args(build_parser().parse_args([*args, "-o", "unused"]))
    return {config_id(record) for record in expand(spec)}


def temporaries(directory) -> list[str]:
    """Leftovers of atomic writes (``.NAME.*.tmp*``) anywhere under ``directory``."""
    return sorted(str(p) for p in directory.rglob(".*") if ".tmp" in p.name)


def model_files(directory) -> set[str]:
    models = directory / "models"
    return {f"models/{p.name}" for p in models.iterdir()} if models.is_dir() else set()


def check_models_match_rows(directory, rows: dict) -> None:
    """Every model file is named by exactly one row and every named file exists."""
    named = [row["model_path"] for row in rows.values() if row["model_path"]]
    assert len(named) == len(set(named))
    assert set(named) == model_files(directory), "model files and the table's model_path disagree"


def sweep_env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}


def run_cli(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bnc_deploy.cli.bnc_sweep", *args],
        cwd=REPO_ROOT,
        env=sweep_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def count_rows(path) -> int:
    """Rows committed so far, read like any reader would while the driver writes (read-only)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.OperationalError:
        return 0
    try:
        return db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        db.close()


# -- resume after kill -9 ---------------------------------------------------------------------------
# 12 configurations, chunks of 2 (one commit each); enough epochs that a chunk takes ~0.3 s.
KILL_GRID = (
    "--data",
    "digits",
    "--bits",
    "2,3",
    "--int-bits",
    "1..3",
    "--lr",
    "3e-2,3e-3",
    "--epochs",
    "12",
    "--batch-size",
    "50",
    "--max-configs",
    "2",
    "--threads",
    "1",
)


#: The same for FC nets (the batched DNN trainer): 12 configurations, chunks of 2.
KILL_GRID_DNN = (
    "--data",
    "digits",
    "--model",
    "fc",
    "--hidden",
    "8",
    "--weight-bits",
    "1,2",
    "--lr",
    "3e-2,3e-3,3e-4",
    "--seed",
    "0,1",
    "--epochs",
    "12",
    "--batch-size",
    "50",
    "--max-configs",
    "2",
    "--threads",
    "1",
)


@pytest.mark.parametrize("grid", [KILL_GRID, KILL_GRID_DNN], ids=["bnc", "dnn"])
def test_resume_after_kill_9_trains_every_configuration_exactly_once(tmp_path, capsys, grid):
    KILL_GRID = grid  # noqa: N806 (the grid of this run)
    ids = grid_ids(*KILL_GRID)
    assert len(ids) == 12
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bnc_deploy.cli.bnc_sweep", *KILL_GRID, "-o", str(killed), "--quiet"],
        cwd=REPO_ROOT,
        env=sweep_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while count_rows(killed / TABLE_FILE) < 2:
            if proc.poll() is not None:
                pytest.fail(f"bnc-sweep ended (status {proc.returncode}) before it was killed: {proc.stderr.read()}")
            if time.monotonic() > deadline:
                pytest.fail("bnc-sweep committed no chunk in 120 s")
            time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, "bnc-sweep finished before the kill; raise --epochs in KILL_GRID"
    committed = rows_by_id(killed)
    assert 2 <= len(committed) < 12 and len(committed) % 2 == 0, f"{len(committed)} rows: a chunk was half written"
    # What a kill can leave besides the table: a temporary file of an atomic write, and a model file
    # saved just before its chunk's rows (no row names it). The resume must clean up both.
    (killed / "models").mkdir(exist_ok=True)
    (killed / "models" / ".0123456789abcdef.bnc.x1y2.tmp.bnc").write_bytes(b"half a model")
    (killed / "models" / "0123456789abcdef.bnc").write_bytes(b"an orphan")
    (killed / ".results.csv.a1b2.tmp.csv").write_text("half a csv")

    done = run_cli(*KILL_GRID, "-o", str(killed), "--resume", "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["configurations"], summary["skipped"], summary["trained"]) == (
        12,
        len(committed),
        12 - len(committed),
    )
    full = run_cli(*KILL_GRID, "-o", str(reference), "--json", "--quiet")
    assert full.returncode == 0, full.stderr

    got, expected = rows_by_id(killed), rows_by_id(reference)
    assert set(got) == ids, "every configuration of the grid has exactly one row"
    for rid, row in committed.items():  # rows committed before the kill are untouched
        assert got[rid]["checkpoints"] == row["checkpoints"] and got[rid]["final"] == row["final"]
    assert_same_rows(got, expected, SAME + ("model_path",))  # deterministic: same rows, same kept models
    assert temporaries(killed) == [] and temporaries(reference) == []
    check_models_match_rows(killed, got)
    assert model_files(killed) == model_files(reference)
    assert len(model_files(killed)) == 2  # keep best: one per bits group

    # A finished sweep: --resume trains nothing and changes nothing.
    again = run_json(capsys, *KILL_GRID, "-o", str(killed), "--resume")
    assert (again["trained"], again["skipped"], again["configurations"], again["config_epochs"]) == (0, 12, 12, 0)
    assert_same_rows(rows_by_id(killed), got, SAME + ("model_path", "seconds"))


# -- refusals ---------------------------------------------------------------------------------------
TINY = ("--data", "digits", "--bits", "2,3", "--epochs", "2", "--batch-size", "50")


@pytest.fixture
def finished(tmp_path, capsys):
    """A finished tiny sweep (2 configurations) in tmp_path/done."""
    directory = tmp_path / "done"
    assert run_json(capsys, *TINY, "-o", str(directory))["trained"] == 2
    return directory


def test_existing_directory_needs_resume(finished, capsys):
    before = rows_by_id(finished)
    line = refused(capsys, *TINY, "-o", str(finished))
    assert f"{finished} already holds a sweep; add --resume" in line
    assert_same_rows(rows_by_id(finished), before, SAME + ("seconds", "model_path"))


@pytest.mark.parametrize(
    "change, differs",
    [
        (("--bits", "2,4"), "grid.axes.bits: stored [2, 3], given [2, 4]"),
        (("--lr", "3e-2"), "grid.fixed.lr: not stored, given 0.03"),
        (("--select", "test"), 'select: stored "validation", given "test"'),
        (("--halving",), "halving: stored false, given true"),
    ],
)
def test_resume_with_another_grid_names_what_differs(finished, capsys, change, differs):
    line = refused(capsys, *TINY, *change, "-o", str(finished), "--resume")
    assert f"sweep directory {finished} holds results of another grid" in line
    assert differs in line
    assert len(rows_by_id(finished)) == 2


def test_resume_keeps_the_halving_protocol(tmp_path, capsys):
    # Halving ranks within a chunk from --min-rung on: a resume that changed either would stop other
    # configurations than the first run did.
    directory = tmp_path / "sweep"
    halving = (*TINY, "--lr", "3e-2,3e-3", "--halving", "--min-rung", "1")
    assert run_json(capsys, *halving, "-o", str(directory))["stopped"] > 0
    assert "min_rung: stored 1, given 2" in refused(
        capsys, *TINY, "--lr", "3e-2,3e-3", "--halving", "--min-rung", "2", "-o", str(directory), "--resume"
    )
    assert "max_configs: stored null, given 1" in refused(
        capsys, *halving, "--max-configs", "1", "-o", str(directory), "--resume"
    )
    assert run_json(capsys, *halving, "-o", str(directory), "--resume")["skipped"] == 4


def test_grid_file_values_stay_unless_a_flag_overrides_them(tmp_path, capsys):
    grid = tmp_path / "grid.toml"
    grid.write_text('[axes]\nbits = [2, 3]\n[fixed]\ndata = "digits"\nvalidation = 0.3\nepochs = 2\nbatch_size = 50\n')
    run_json(capsys, "--grid", str(grid), "-o", str(tmp_path / "file"))
    assert {row["config"]["validation"] for row in rows_by_id(tmp_path / "file").values()} == {0.3}
    run_json(capsys, "--grid", str(grid), "--validation", "0.25", "--bits", "4", "-o", str(tmp_path / "flags"))
    rows = rows_by_id(tmp_path / "flags").values()
    assert [(row["config"]["validation"], row["config"]["bits"]) for row in rows] == [(0.25, 4)]


@pytest.mark.parametrize(
    "args, message",
    [
        (("--validation", "0"), "--select validation needs a validation split: give --validation F"),
        (("--preset", "icpr2020-nope"), "unknown preset 'icpr2020-nope' (did you mean 'icpr2020-nb'?); presets: "),
        (("--bits", "1..x"), "--bits '1..x': bad value '1..x': not an integer"),
        (("--draws", "0"), "--draws: 0 draws out of range"),
        (("--draws", "many"), "--draws: 'many' is not a number of draws"),
        (("--bits", "2,9"), "bits=9, int_bits=3, lr=0.003, epochs=2): unsupported bit width B=9"),
        (
            ("--model", "fc", "--weight-bits", "1,2"),
            ("(model=fc, lr=0.003, weight_bits=1, epochs=2): give exactly one of explicit widths (--hidden)"),
        ),
        (("--data", "no-such-dataset"), "unknown dataset 'no-such-dataset'"),
        (("--max-configs", "0"), "--max-configs must be >= 1, got 0"),
        (("--group-by", "model,bitz"), "--group-by 'model,bitz': unknown key 'bitz'"),
    ],
)
def test_refusals_are_one_line_and_write_nothing(tmp_path, capsys, args, message):
    directory = tmp_path / "sweep"
    base = ("--epochs", "2", "--batch-size", "50") + (("--data", "digits") if "--data" not in args else ())
    line = refused(capsys, *base, *args, "-o", str(directory))
    assert message in line
    assert not directory.exists(), f"a refused sweep left {sorted(p.name for p in directory.iterdir())}"


def test_cuda_without_a_gpu_is_refused(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    line = refused(capsys, *TINY, "--device", "cuda", "-o", str(tmp_path / "sweep"))
    assert "--device cuda: torch sees no CUDA GPU here" in line
    assert not (tmp_path / "sweep").exists()


def test_a_ray_clusters_gpus_are_not_looked_for_on_this_machine(tmp_path, capsys):
    # With --address the chunks run on the cluster's machines: this one needs no GPU (a dry run
    # connects to nothing).
    plan = run_json(
        capsys,
        *TINY,
        "--device",
        "cuda",
        "--backend",
        "ray",
        "--address",
        "auto",
        "--dry-run",
        "-o",
        str(tmp_path / "sweep"),
    )
    assert plan["configurations"] == 2 and "device cuda, backend ray" in plan["plan"]
    assert not (tmp_path / "sweep").exists()


def test_every_family_trains_on_a_gpu(tmp_path, capsys):
    # DNNs and structure learning train batched on either device, as the BN classifiers do. (Through
    # a dry run on a Ray cluster, so the check does not depend on this machine's GPU.)
    cluster = ("--backend", "ray", "--address", "auto", "--device", "cuda", "--dry-run")
    families = {"fc": ("--model", "fc", "--hidden", "16"), "learn": ("--model", "tan", "--structure", "learn")}
    for name, args in families.items():
        assert main([*TINY[:2], *args, "--epochs", "2", *cluster, "-o", str(tmp_path / name)]) == 0
        assert "device cuda" in capsys.readouterr().out


def test_ray_tasks_ask_for_a_gpu_for_cuda_and_for_auto_on_a_gpu_cluster():
    from bnc_deploy.sweep.backends import gpus_per_task

    assert [gpus_per_task(d, 0) for d in ("cpu", "auto", "cuda", "cuda:1")] == [0, 0, 1, 1]
    assert [gpus_per_task(d, 2.0) for d in ("cpu", "auto", "cuda")] == [0, 1, 1]


def test_a_refused_sweep_leaves_the_directory_free_for_the_corrected_command(tmp_path, capsys):
    directory = tmp_path / "sweep"
    directory.mkdir()  # given by the user: kept
    refused(capsys, *TINY, "--data", "no-such-dataset", "-o", str(directory))
    assert directory.is_dir() and list(directory.iterdir()) == []
    assert run_json(capsys, *TINY, "-o", str(directory))["trained"] == 2  # no --resume needed


# -- outputs ----------------------------------------------------------------------------------------
def test_json_summary_and_the_test_selected_protocol(tmp_path, capsys):
    directory = tmp_path / "sweep"
    summary = run_json(capsys, *TINY, "--lr", "3e-2,3e-3", "--select", "test", "-o", str(directory))
    assert JSON_KEYS <= set(summary), f"missing keys {JSON_KEYS - set(summary)}"
    assert summary["select"] == "test" and "TEST split" in summary["protocol"]
    assert (
        summary["configurations"],
        summary["trained"],
        summary["skipped"],
        summary["failed"],
        summary["stopped"],
    ) == (4, 4, 0, 0, 0)
    assert summary["config_epochs"] == 4 * 2 and summary["config_epochs_per_second"] > 0
    assert summary["backend"] == "local" and summary["device"].startswith("cpu") and summary["seconds"] > 0
    assert summary["table"] == str(directory / TABLE_FILE) and summary["csv"] == str(directory / "results.csv")
    assert json.loads((directory / "summary.json").read_text()) == summary
    rows = rows_by_id(directory)
    assert {row["select"] for row in rows.values()} == {"test"}
    assert all(row["config"]["validation"] == 0.0 for row in rows.values())  # --select test: no split needed
    for row in rows.values():  # no validation split
        assert row["final"]["val_error"] is None or math.isnan(row["final"]["val_error"])
    with open(directory / "results.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert {r["id"] for r in table} == set(rows) and {r["select"] for r in table} == {"test"}
    # The best per group is ranked on the test error, and says so.
    assert len(summary["best"]) == 2
    for best in summary["best"].values():
        group = [r for r in rows.values() if r["config"]["bits"] == best["config"]["bits"]]
        assert best["final"]["test_error"] == min(r["final"]["test_error"] for r in group)


def test_validation_protocol_is_labelled(tmp_path, capsys):
    summary = run_json(capsys, *TINY, "-o", str(tmp_path / "sweep"))
    assert summary["select"] == "validation" and summary["protocol"] == "selected on the validation split"
    assert {r["select"] for r in rows_by_id(tmp_path / "sweep").values()} == {"validation"}


# 8 configurations in two bits groups; chunks of 3 mix the groups, so the keep-best hand-over
# crosses chunks (a later chunk's better model replaces an earlier file).
KEEP_GRID = (
    "--data",
    "digits",
    "--bits",
    "2,3",
    "--int-bits",
    "1..2",
    "--lr",
    "3e-2,3e-3",
    "--epochs",
    "4",
    "--batch-size",
    "50",
    "--max-configs",
    "3",
    "--seeds",
    "0",
)


def test_keep_best_keeps_one_loadable_model_per_group_the_best_one(tmp_path, capsys):
    directory = tmp_path / "sweep"
    summary = run_json(capsys, *KEEP_GRID, "--keep", "best", "-o", str(directory))
    rows = rows_by_id(directory)
    assert len(rows) == 8
    check_models_match_rows(directory, rows)
    groups = defaultdict(list)
    for row in rows.values():
        groups[row["config"]["bits"]].append(row)
    assert len(model_files(directory)) == len(groups) == 2
    for bits, members in groups.items():
        kept = [r for r in members if r["model_path"]]
        assert len(kept) == 1, f"bits {bits}: {len(kept)} model files"
        (kept,) = kept
        assert kept["status"] == "done"
        best = min(r["final"]["val_error"] for r in members if r["status"] == "done")
        assert kept["final"]["val_error"] == best, f"bits {bits}: kept val {kept['final']['val_error']}, best {best}"
        first = next(r for r in members if r["final"]["val_error"] == best)  # ties: the first one stays
        assert kept["id"] == first["id"]
        artifact = load_artifact(directory / kept["model_path"])
        assert artifact.metadata["config"]["bits"] == bits
        assert artifact.metadata["errors"]["val"] == pytest.approx(kept["final"]["val_error"], abs=1e-6)
        assert artifact.metadata["errors"]["test"] == pytest.approx(kept["final"]["test_error"], abs=1e-6)
        assert summary["best"][next(g for g in summary["best"] if f'"bits": {bits}' in g)]["id"] == kept["id"]
    assert temporaries(directory) == []


def test_interrupted_keep_best_hand_over_leaves_one_model_per_group(tmp_path, capsys, monkeypatch):
    """A stop in the middle of a hand-over (a later chunk beat a kept model): after --resume, still
    exactly one model file per group, the same as an uninterrupted run's."""
    calls = []

    def interrupt(self, rid):
        calls.append(rid)
        raise KeyboardInterrupt  # stands for a kill at this point: nothing after it runs

    monkeypatch.setattr(ResultsTable, "clear_model_path", interrupt)
    with pytest.raises(SystemExit) as info:
        main([*KEEP_GRID, "-o", str(tmp_path / "stopped"), "--quiet"])
    assert info.value.code == 130 and calls, "KEEP_GRID has no keep-best hand-over between chunks any more"
    monkeypatch.undo()
    capsys.readouterr()
    interrupted = rows_by_id(tmp_path / "stopped")
    named = Counter(row["config"]["bits"] for row in interrupted.values() if row["model_path"])
    assert interrupted and max(named.values()) == 1, f"model files per bits group: {dict(named)}"
    assert all(
        (tmp_path / "stopped" / row["model_path"]).is_file() for row in interrupted.values() if row["model_path"]
    )

    run_json(capsys, *KEEP_GRID, "-o", str(tmp_path / "stopped"), "--resume")
    run_json(capsys, *KEEP_GRID, "-o", str(tmp_path / "reference"))
    got, expected = rows_by_id(tmp_path / "stopped"), rows_by_id(tmp_path / "reference")
    assert_same_rows(got, expected, SAME + ("model_path",))
    check_models_match_rows(tmp_path / "stopped", got)
    assert model_files(tmp_path / "stopped") == model_files(tmp_path / "reference")
    assert temporaries(tmp_path / "stopped") == []


def test_keep_all_and_keep_none(tmp_path, capsys):
    run_json(capsys, *KEEP_GRID, "--keep", "all", "-o", str(tmp_path / "all"))
    rows = rows_by_id(tmp_path / "all")
    assert all(row["model_path"] == f"models/{rid}.bnc" for rid, row in rows.items())
    check_models_match_rows(tmp_path / "all", rows)
    for row in rows.values():
        artifact = load_artifact(tmp_path / "all" / row["model_path"])
        assert artifact.metadata["errors"]["val"] == pytest.approx(row["final"]["val_error"], abs=1e-6)

    run_json(capsys, *KEEP_GRID, "--keep", "none", "-o", str(tmp_path / "none"))
    none = rows_by_id(tmp_path / "none")
    assert all(row["model_path"] is None for row in none.values()) and model_files(tmp_path / "none") == set()
    assert_same_rows(none, rows)  # the policy changes which files are written, not what is trained


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    directory = tmp_path / "sweep"
    plan = run_json(capsys, *KEEP_GRID, "--draws", "3", "--dry-run", "-o", str(directory))
    assert (plan["configurations"], plan["config_epochs"]) == (24, 24 * 4)
    assert "24 configurations: bits 2 × int_bits 2 × lr 2 × 3 draws" in plan["plan"]
    assert not directory.exists()


# -- successive halving -----------------------------------------------------------------------------
# Two bits groups of 12; rungs at round(6/3) = 2 and round(6/9) = 1 epochs: 12 -> 4 -> 2 per group.
HALVING_GRID = (
    "--data",
    "digits",
    "--bits",
    "2,3",
    "--int-bits",
    "1..3",
    "--lr",
    "3e-2,3e-3",
    "--draws",
    "2",
    "--epochs",
    "6",
    "--batch-size",
    "50",
    "--keep",
    "none",
)


def test_halving_stops_weak_configurations_and_saves_epochs(tmp_path, capsys):
    full = run_json(capsys, *HALVING_GRID, "-o", str(tmp_path / "full"))
    halved = run_json(capsys, *HALVING_GRID, "--halving", "--min-rung", "1", "-o", str(tmp_path / "halved"))
    assert full["config_epochs"] == 24 * 6 and full["stopped"] == 0
    # 24 configurations to epoch 1, 8 on to epoch 2, 4 to the end.
    assert halved["config_epochs"] == 24 * 1 + 8 * 1 + 4 * 4 < full["config_epochs"]
    rows = rows_by_id(tmp_path / "halved")
    statuses = Counter(row["status"] for row in rows.values())
    assert statuses == {"stopped": 20, "done": 4} and halved["stopped"] == 20 and halved["trained"] == 24
    by_group = defaultdict(Counter)
    for row in rows.values():
        by_group[row["config"]["bits"]][row["status"]] += 1
    assert all(counts["done"] == 2 for counts in by_group.values()), dict(by_group)
    # A survivor trains exactly as it would have alone: its final errors are the full run's.
    reference = rows_by_id(tmp_path / "full")
    for rid, row in rows.items():
        if row["status"] == "done":
            assert row["final"] == reference[rid]["final"], rid
        else:
            assert row["checkpoints"] and row["checkpoints"][-1]["epoch"] in (1, 2)
    # The survivors of each group are the best at the last rung (epoch 2) among those that reached it.
    for bits in (2, 3):
        at_two = {
            rid: next(c["val_error"] for c in r["checkpoints"] if c["epoch"] == 2)
            for rid, r in rows.items()
            if r["config"]["bits"] == bits and any(c["epoch"] == 2 for c in r["checkpoints"])
        }
        survivors = {rid for rid in at_two if rows[rid]["status"] == "done"}
        assert len(at_two) == 4 and len(survivors) == 2
        assert max(at_two[r] for r in survivors) <= min(at_two[r] for r in set(at_two) - survivors)


# -- a batch of one is bnc-train ----------------------------------------------------------------------
def test_one_configuration_sweep_equals_bnc_train(tmp_path, capsys):
    from bnc_deploy.cli.train import main as train_main

    common = [
        "--data",
        "digits",
        "--bits",
        "3",
        "--int-bits",
        "2",
        "--lr",
        "3e-2",
        "--epochs",
        "3",
        "--batch-size",
        "50",
        "--validation",
        "0.2",
        "--hybrid-lambda",
        "30",
        "--hybrid-gamma",
        "0.5",
    ]
    run_json(capsys, *common, "--seeds", "1", "--keep", "all", "-o", str(tmp_path / "sweep"))
    (row,) = rows_by_id(tmp_path / "sweep").values()
    swept = load_artifact(tmp_path / "sweep" / row["model_path"])
    # A sweep starts uniform (the paper's start); bnc-train from maximum likelihood unless told (issue 26).
    single_args = [*common, "--init", "uniform", "--seed", "1", "--quiet", "-o", str(tmp_path / "single.bnc")]
    assert train_main(single_args) == 0
    capsys.readouterr()
    single = load_artifact(tmp_path / "single.bnc")
    assert swept.is_quantized and single.is_quantized
    np.testing.assert_array_equal(swept.table_codes, single.table_codes)
    np.testing.assert_array_equal(swept.class_codes, single.class_codes)
    np.testing.assert_array_equal(swept.parents, single.parents)
    assert swept.metadata["errors"] == single.metadata["errors"]
    assert row["final"]["val_error"] == pytest.approx(single.metadata["errors"]["val"], abs=1e-6)
    assert row["final"]["test_error"] == pytest.approx(single.metadata["errors"]["test"], abs=1e-6)


# -- DNN and structure-learning configurations --------------------------------------------------------
def test_dnn_configurations_run_through_the_runner(tmp_path, capsys):
    directory = tmp_path / "sweep"
    summary = run_json(
        capsys,
        "--data",
        "digits",
        "--model",
        "fc",
        "--weight-bits",
        "1,2",
        "--hidden",
        "16",
        "--epochs",
        "2",
        "--batch-size",
        "50",
        "--keep",
        "all",
        "-o",
        str(directory),
    )
    assert (summary["trained"], summary["failed"], summary["config_epochs"]) == (2, 0, 4)
    rows = rows_by_id(directory)
    assert sorted(row["config"]["weight_bits"] for row in rows.values()) == [1, 2]
    for row in rows.values():
        assert row["status"] == "done", row["error"]
        assert row["size_bits"] > 0 and row["ops"] > 0 and row["n_parameters"] > 0
        assert 0 <= row["final"]["val_error"] <= 1 and 0 <= row["final"]["test_error"] <= 1
        assert [c["epoch"] for c in row["checkpoints"]] == [2]
        artifact = load_artifact(directory / row["model_path"])
        assert artifact.metadata["errors"]["test"] == row["final"]["test_error"]
    sizes = {row["config"]["weight_bits"]: row["size_bits"] for row in rows.values()}
    assert sizes[1] < sizes[2]


def test_seeds_with_one_split_seed_train_in_one_chunk_as_each_would_alone(tmp_path, capsys):
    # Three seeds split by seed 0: one data split, so one chunk (one batched program), and on the
    # CPU each configuration's row is what it gets alone. Seed 0 with split seed 0 is the plain
    # seed-0 configuration (one id, one row).
    from bnc_deploy.cli.bnc_sweep import build_parser, grid_from_args
    from bnc_deploy.sweep.runner import SweepOptions, check_plan, records_of

    common = ["--data", "digits", "--model", "fc", "--hidden", "8", "--epochs", "2", "--batch-size", "50"]
    common += ["--validation", "0.2", "--keep", "none"]
    spec = grid_from_args(build_parser().parse_args([*common, "--seeds", "0..2", "--split-seed", "0", "-o", "x"]))
    tasks = check_plan(records_of(spec), SweepOptions(directory=tmp_path / "plan"))
    assert len(tasks) == 1 and tasks[0].data["seed"] == 0 and len(tasks[0].records) == 3
    own = grid_from_args(build_parser().parse_args([*common, "--seeds", "0..2", "-o", "x"]))
    assert [t.data["seed"] for t in check_plan(records_of(own), SweepOptions(directory=tmp_path / "plan"))] == [0, 1, 2]

    together = tmp_path / "together"
    assert run_json(capsys, *common, "--seeds", "0..2", "--split-seed", "0", "-o", str(together))["trained"] == 3
    rows = rows_by_id(together)
    alone = {}
    for seed in (0, 2):
        directory = tmp_path / f"seed{seed}"
        run_json(capsys, *common, "--seeds", str(seed), "--split-seed", "0", "-o", str(directory))
        alone.update(rows_by_id(directory))
    assert set(alone) <= set(rows)
    assert_same_rows({rid: rows[rid] for rid in alone}, alone, fields=("config", "status", "checkpoints", "final"))
    plain = tmp_path / "plain"
    run_json(capsys, *common, "--seeds", "0", "-o", str(plain))
    assert set(rows_by_id(plain)) == set(rows_by_id(tmp_path / "seed0"))
    # Seeds split their own way see other validation rows: seed 2's validation error differs.
    own_dir = tmp_path / "own"
    run_json(capsys, *common, "--seeds", "2", "-o", str(own_dir))
    (mine,) = rows_by_id(own_dir).values()
    (shared,) = rows_by_id(tmp_path / "seed2").values()
    assert mine["id"] != shared["id"] and mine["final"]["val_error"] != shared["final"]["val_error"]


def test_a_dnn_chunk_is_one_program_unless_halving_ranks_across_programs(tmp_path):
    # Without halving each GPU program (here: depth x batch norm) commits on its own, so an
    # interrupted sweep keeps the programs that finished; halving keeps a group's programs together.
    from bnc_deploy.cli.bnc_sweep import build_parser, grid_from_args
    from bnc_deploy.sweep.runner import SweepOptions, check_plan, records_of

    args = [
        "--data",
        "digits",
        "--model",
        "fc",
        "--layers",
        "2,3",
        "--batch-norm",
        "true,false",
        "--weight-bits",
        "1,2",
        "--match-bits",
        "4000",
    ]
    spec = grid_from_args(build_parser().parse_args([*args, "--validation", "0.2", "-o", "x"]))
    tasks = check_plan(records_of(spec), SweepOptions(directory=tmp_path))
    assert len(tasks) == 4 and all(len(t.records) == 2 for t in tasks)
    assert all(len({(r["layers"], r["batch_norm"]) for r in t.records}) == 1 for t in tasks)
    halved = check_plan(records_of(spec), SweepOptions(directory=tmp_path, halving=True))
    assert len(halved) == 1 and len(halved[0].records) == 8


def test_progress_bar_counts_configurations_trained_one_after_another(tmp_path, capsys):
    # DNN (and structure-learning) chunks report no per-epoch progress; the bar must still reach the end.
    assert (
        main(
            [
                "--data",
                "digits",
                "--model",
                "fc",
                "--weight-bits",
                "1,2",
                "--hidden",
                "16",
                "--epochs",
                "2",
                "--batch-size",
                "50",
                "--keep",
                "none",
                "-o",
                str(tmp_path / "sweep"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert err.startswith("2 configurations: weight_bits 2; 4 configuration-epochs; selected on the validation split")
    last_bar = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("sweep:")][-1]
    assert "| 4/4 [" in last_bar and "configs=2/2" in last_bar, last_bar


LEARN_GRID = (
    "--data",
    "digits",
    "--model",
    "tan",
    "--structure",
    "learn",
    "--size-penalty",
    "1e-3,1e-1",
    "--epochs",
    "2",
    "--batch-size",
    "50",
)


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    directory = tmp_path_factory.mktemp("learn") / "sweep"
    assert main([*LEARN_GRID, "-o", str(directory), "--quiet"]) == 0
    return directory, json.loads((directory / "summary.json").read_text())


def test_structure_learning_configurations_run_through_the_runner(learned):
    directory, summary = learned
    assert (summary["trained"], summary["failed"]) == (2, 0)
    rows = rows_by_id(directory)
    assert sorted(row["config"]["size_penalty"] for row in rows.values()) == [1e-3, 1e-1]
    for row in rows.values():
        assert row["status"] == "done", row["error"]
        assert row["config"]["structure"] == "learn"
        assert row["size_bits"] > 0 and row["ops"] > 0
        assert set(row["final"]) >= {"train_error", "val_error", "test_error"}
    check_models_match_rows(directory, rows)
    assert len(model_files(directory)) == 1  # one group (tan, learn, float)


def test_structure_learning_counts_its_epochs(learned):
    directory, summary = learned
    assert summary["config_epochs"] == 2 * 2
    for row in rows_by_id(directory).values():
        assert [c["epoch"] for c in row["checkpoints"]] == [2]
