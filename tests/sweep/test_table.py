"""The sweep results table: round trip, duplicate ids refused, batches all-or-nothing, durable under
kill -9, spec mismatch explained, CSV export columns, keep-best model paths."""

from __future__ import annotations

import csv
import json
import math
import os
import random
import selectors
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest
from support import REPO_ROOT

from bnc_deploy.errors import ConfigError
from bnc_deploy.sweep.table import TABLE_FILE, DuplicateResultError, ResultsTable

SPEC = {"axes": {"lr": [0.03, 0.003], "bits": [1, 2]}, "draws": {}, "fixed": {"model": "nb"}}


def make_row(ident: str, **changes) -> dict:
    row = {
        "id": ident,
        "config": {"model": "nb", "bits": 2, "lr": 0.003, "hybrid_lambda": 18.7, "draw": 3},
        "status": "done",
        "error": None,
        "checkpoints": [
            {"epoch": 10, "train_error": 0.3, "train_loss": 1.5, "val_error": 0.31, "test_error": 0.32},
            {"epoch": 20, "train_error": 0.2, "train_loss": 1.1, "val_error": 0.21, "test_error": 0.22},
        ],
        "final": {"train": 0.2, "val": 0.21, "test": 0.22},
        "size_bits": 7644,
        "n_parameters": 3822,
        "ops": 416,
        "seconds": 1.25,
        "model_path": "models/a.bnc",
        "device": "cpu",
        "backend": "local",
        "select": "validation",
    }
    row.update(changes)
    return row


def test_round_trip(tmp_path):
    directory = tmp_path / "sweep" / "one"  # created, parents too
    rows = [
        make_row("a"),
        make_row("b", status="stopped", model_path=None, final={}, checkpoints=[]),
        make_row(
            "c",
            status="failed",
            error="FloatingPointError: nan loss",
            size_bits=None,
            n_parameters=None,
            ops=None,
            seconds=None,
            select=None,
            device=None,
            backend=None,
        ),
    ]
    with ResultsTable(directory, SPEC) as table:
        table.add(rows[:2])
        table.add(rows[2:])
        assert table.rows() == rows
        assert table.done_ids() == {"a", "b", "c"} and len(table) == 3
        assert table.spec == SPEC
        created = table.created
    with ResultsTable.open_existing(directory) as again:
        assert again.rows() == rows and again.created == created and again.spec == SPEC
    assert (directory / TABLE_FILE).is_file()
    db = sqlite3.connect(directory / TABLE_FILE)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_numpy_values_nan_errors_and_omitted_fields(tmp_path):
    row = {
        "id": "n",
        "config": {"bits": np.int64(3), "lr": np.float32(0.5)},
        "status": "done",
        "checkpoints": [{"epoch": np.int64(5), "val_error": float("nan"), "test_error": np.float64(0.25)}],
        "final": {"val": float("nan"), "test": np.float32(0.25)},
        "size_bits": np.int64(12),
        "seconds": np.float64(2),
    }
    with ResultsTable(tmp_path) as table:
        table.add([row])
        (got,) = table.rows()
    assert got["config"] == {"bits": 3, "lr": 0.5} and got["size_bits"] == 12 and got["seconds"] == 2.0
    assert math.isnan(got["checkpoints"][0]["val_error"]) and got["checkpoints"][0]["epoch"] == 5
    assert math.isnan(got["final"]["val"]) and got["final"]["test"] == 0.25
    assert got["model_path"] is None and got["error"] is None


def test_duplicate_id_is_an_error_and_the_batch_is_not_written(tmp_path):
    with ResultsTable(tmp_path) as table:
        table.add([make_row("a")])
        with pytest.raises(
            DuplicateResultError,
            match=r"result id a is already in .*results.sqlite; nothing of this "
            r"batch of 2 rows was written",
        ):
            table.add([make_row("b"), make_row("a", seconds=9.0)])
        assert table.done_ids() == {"a"}  # b rolled back with the batch
        assert table.rows()[0]["seconds"] == 1.25  # a untouched
        with pytest.raises(DuplicateResultError, match=r"result id c appears twice in one batch"):
            table.add([make_row("c"), make_row("c")])
        assert table.done_ids() == {"a"}
        table.add([make_row("b")])  # the table still works after a refusal
        assert table.done_ids() == {"a", "b"}
    assert issubclass(DuplicateResultError, ConfigError)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"status": "finished"}, r"result x: status 'finished' is not one of done, stopped, failed"),
        ({"status": "failed", "error": None}, r"result x: a failed row needs its error message"),
        ({"id": ""}, r"result row #1: id must be a non-empty string"),
        ({"config": "lr=1"}, r"result x: config must be a dict"),
        ({"config": {"lr": float("nan")}}, r"result x: not JSON-serializable"),
        ({"checkpoints": [{"val_error": 0.1}]}, r"result x: a checkpoint is a dict with epoch"),
        ({"checkpoints": [{"epoch": 1}, {"epoch": 1}]}, r"result x: checkpoint epoch 1 appears twice"),
        ({"checkpoints": [{"epoch": 1, "val_error": "low"}]}, r"result x: checkpoint 1 val_error must be a number"),
        ({"size_bits": 1.5}, r"result x: size_bits must be an integer or None, got 1.5"),
        ({"select": "train"}, r"result x: select 'train' is not one of validation, test"),
        ({"epochs_run": 3}, r"result x: unknown field\(s\) epochs_run"),
    ],
)
def test_malformed_rows_are_refused_by_id_and_field(tmp_path, changes, message):
    with ResultsTable(tmp_path) as table:
        with pytest.raises(ConfigError, match=message):
            table.add([make_row("ok"), make_row("x", **changes)])
        assert table.done_ids() == set()


# -- durability ------------------------------------------------------------------------------------
WRITER = r"""
import sys
from bnc_deploy.sweep.table import ResultsTable

table = ResultsTable(sys.argv[1])
batch = int(sys.argv[2])
start = len(table)
assert start % batch == 0, start
i = start // batch
while True:
    rows = []
    for j in range(batch):
        k = i * batch + j
        rows.append({"id": f"r{k:06d}", "config": {"k": k, "pad": "x" * 3000}, "status": "done",
                     "checkpoints": [{"epoch": e, "val_error": k + e / 1000, "test_error": k} for e in range(60)],
                     "final": {"test": k}, "size_bits": k, "seconds": 0.5})
    table.add(rows)
    print(i, flush=True)          # batch i is committed
    i += 1
"""


def _write_until_killed(directory, batch: int, batches: int) -> int:
    """Run the writer, SIGKILL it after it reported ``batches`` more commits; the last batch it reported."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(directory), str(batch)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO_ROOT,
        env=env,
        text=True,
    )
    reported, seen = -1, 0
    try:
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + 120
        while seen < batches:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                pytest.fail(f"the writer reported {seen} commits in 120 s")
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"the writer died: {proc.stderr.read()}")
            reported, seen = int(line), seen + 1
        # Kill at a random point of a later batch (a fixed delay tends to land between batches every
        # time, and then a writer that committed row by row would pass).
        time.sleep(random.uniform(0, 0.03))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return reported


def _check_complete(directory, batch: int) -> int:
    db = sqlite3.connect(directory / TABLE_FILE)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    with ResultsTable.open_existing(directory) as table:
        rows = table.rows()
        assert table.done_ids() == {row["id"] for row in rows}
    n = len(rows)
    assert n % batch == 0, f"{n} rows: a batch was partly written"
    assert [row["id"] for row in rows] == [f"r{k:06d}" for k in range(n)]
    for k, row in enumerate(rows):  # every row complete and readable
        assert row["config"] == {"k": k, "pad": "x" * 3000}
        assert len(row["checkpoints"]) == 60 and row["checkpoints"][-1] == {
            "epoch": 59,
            "val_error": k + 0.059,
            "test_error": k,
        }
        assert row["final"] == {"test": k} and row["size_bits"] == k and row["status"] == "done"
    return n


def test_kill_9_loses_no_committed_batch_and_leaves_no_partial_row(tmp_path):
    batch = 7
    for _ in range(4):  # kill, reopen, resume, kill again
        last = _write_until_killed(tmp_path, batch, batches=20)
        n = _check_complete(tmp_path, batch)
        assert n >= (last + 1) * batch, f"batch {last} was reported committed but is missing ({n} rows)"


# -- spec -----------------------------------------------------------------------------------------
def test_spec_mismatch_says_what_differs_and_suggests_a_new_directory(tmp_path):
    ResultsTable(tmp_path, json.dumps(SPEC)).close()
    ResultsTable(tmp_path, SPEC).close()  # dict or JSON: same spec
    reordered = '{"fixed": {"model": "nb"}, "draws": {}, "axes": {"bits": [1, 2], "lr": [3e-2, 3e-3]}}'
    ResultsTable(tmp_path, reordered).close()  # key order, number spelling
    other = {**SPEC, "axes": {"lr": [0.03], "bits": [1, 2]}, "fixed": {"model": "tan"}}
    with pytest.raises(ConfigError) as info:
        ResultsTable(tmp_path, other)
    message = str(info.value)
    assert f"sweep directory {tmp_path} holds results of another grid" in message
    assert "axes.lr: stored [0.03, 0.003], given [0.03]" in message
    assert 'fixed.model: stored "nb", given "tan"' in message
    assert "give a new directory" in message
    with ResultsTable.open_existing(tmp_path) as table:
        with pytest.raises(ConfigError, match=r"draws: stored \{\}, not given"):
            table.check_spec({"axes": SPEC["axes"], "fixed": SPEC["fixed"]})
        table.check_spec(SPEC)


def test_spec_is_stored_when_the_table_has_none(tmp_path):
    ResultsTable(tmp_path).close()
    with ResultsTable(tmp_path, SPEC) as table:
        assert table.spec == SPEC
    with pytest.raises(ConfigError, match=r"grid spec is not valid JSON"):
        ResultsTable(tmp_path, "{axes")


def test_open_existing_and_bad_files(tmp_path):
    with pytest.raises(ConfigError, match=r"no sweep results in .*nothing \(expected .*nothing/results.sqlite\)"):
        ResultsTable.open_existing(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / TABLE_FILE).write_bytes(b"this is not a database, just some bytes" * 100)
    with pytest.raises(ConfigError, match=r"sweep results table .*junk/results.sqlite: cannot open"):
        ResultsTable.open_existing(tmp_path / "junk")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"sweep directory .*file is a file"):
        ResultsTable(tmp_path / "file")


# -- keep best ------------------------------------------------------------------------------------
def test_model_paths(tmp_path):
    with ResultsTable(tmp_path) as table:
        table.add([make_row("a", model_path=None), make_row("b", model_path=None)])
        table.set_model_path("a", tmp_path / "a.bnc")
        assert {r["id"]: r["model_path"] for r in table.rows()} == {"a": str(tmp_path / "a.bnc"), "b": None}
        table.set_model_path("b", "b.bnc", replaces="a")  # hand-over in one transaction
        assert {r["id"]: r["model_path"] for r in table.rows()} == {"a": None, "b": "b.bnc"}
        table.clear_model_path("b")
        assert all(r["model_path"] is None for r in table.rows())
        with pytest.raises(ConfigError, match=r"no result with id 'zz' in .*results.sqlite"):
            table.set_model_path("zz", "z.bnc")
        with pytest.raises(ConfigError, match=r"no result with id 'zz'"):
            table.set_model_path("a", "a2.bnc", replaces="zz")
        assert table.rows()[0]["model_path"] is None  # rolled back with the failed hand-over
        with pytest.raises(ConfigError, match=r"no result with id 'zz'"):
            table.clear_model_path("zz")


# -- CSV --------------------------------------------------------------------------------------------
def test_export_csv_columns(tmp_path):
    rows = [
        make_row("a"),
        make_row(
            "b",
            config={"model": "tan", "lr": 0.03, "structure": "authors", "status": "x"},
            checkpoints=[{"epoch": 5, "val_error": 0.5}],
            final={"test": 0.4, "auc": 0.9},
        ),
        make_row("c", status="failed", error="boom, with a comma", checkpoints=[], final={}, model_path=None),
    ]
    with ResultsTable(tmp_path / "sweep") as table:
        table.add(rows)
        out = table.export_csv(tmp_path / "sweep" / "results.csv")
    with open(out, newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        got = list(reader)
    assert header == [
        "id",
        "bits",
        "draw",
        "hybrid_lambda",
        "lr",
        "model",
        "config.status",
        "structure",  # config, sorted
        "status",
        "error",
        "train_error",
        "val_error",
        "test_error",
        "auc",
        "train_error@5",
        "val_error@5",
        "test_error@5",
        "train_error@10",
        "val_error@10",
        "test_error@10",
        "train_error@20",
        "val_error@20",
        "test_error@20",
        "size_bits",
        "n_parameters",
        "ops",
        "seconds",
        "model_path",
        "select",
        "device",
        "backend",
    ]
    a, b, c = got
    assert (a["bits"], a["lr"], a["draw"], a["structure"], a["config.status"]) == ("2", "0.003", "3", "", "")
    assert (a["test_error"], a["val_error@10"], a["test_error@20"], a["val_error@5"]) == ("0.22", "0.31", "0.22", "")
    assert (b["structure"], b["config.status"], b["val_error@5"], b["auc"], b["train_error"]) == (
        "authors",
        "x",
        "0.5",
        "0.9",
        "",
    )
    assert (c["status"], c["error"], c["model_path"], c["size_bits"]) == ("failed", "boom, with a comma", "", "7644")
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.name.startswith(".")) == []  # no temporaries


def test_export_csv_of_an_empty_table(tmp_path):
    with ResultsTable(tmp_path) as table:
        path = table.export_csv(tmp_path / "empty.csv")
    assert path.read_text().splitlines() == [
        "id,status,error,size_bits,n_parameters,ops,seconds,model_path,select,device,backend"
    ]
