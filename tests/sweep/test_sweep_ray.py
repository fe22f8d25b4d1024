"""``bnc-sweep --backend ray``: the same rows as the local backend, and Ray gone afterwards.

One local Ray instance for the whole module (the fixture runs the CLI twice: Ray, then local).
Ray's session files go to a fresh ``RAY_TMPDIR``, so the test can tell its own Ray processes from
any others on the machine and check that none outlives the command.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from bnc_deploy.cli.bnc_sweep import main
from bnc_deploy.sweep.table import ResultsTable

#: 8 configurations in chunks of 2: four Ray tasks, two at a time on 2 CPUs. (--quiet last: the Ray run drops it.)
GRID = (
    "--data",
    "digits",
    "--bits",
    "2,3",
    "--int-bits",
    "1..2",
    "--lr",
    "3e-2,3e-3",
    "--epochs",
    "3",
    "--batch-size",
    "50",
    "--max-configs",
    "2",
    "--quiet",
)
#: Everything a row reproduces whichever backend ran it.
SAME = ("config", "status", "error", "checkpoints", "final", "size_bits", "n_parameters", "ops", "device", "select")


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(
                (line for line in (entry / "status").read_text().splitlines() if line.startswith("State:")), ""
            )
        except OSError:
            continue
        if text in cmdline and "zombie" not in state:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("needs /proc to check for stray Ray processes")
    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; the test needs to start its own")
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as Ray's workers run (one CPU each); tiny models gain nothing from more
    root = tmp_path_factory.mktemp("ray")
    # Short: Ray's Unix socket paths live under it (at most ~107 characters).
    ray_tmp = tempfile.mkdtemp(prefix="bncray", dir="/tmp")
    saved = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = ray_tmp
    try:
        started = time.perf_counter()
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):  # the progress bar (no --quiet here)
            assert main([*GRID[:-1], "--backend", "ray", "--ray-cpus", "2", "-o", str(root / "ray")]) == 0
        ray_seconds = time.perf_counter() - started
        initialized_after = ray.is_initialized()
        started = time.perf_counter()
        assert main([*GRID, "-o", str(root / "local")]) == 0
        local_seconds = time.perf_counter() - started
        # Ray's processes may take a moment to exit after shutdown: poll with a deadline.
        deadline = time.monotonic() + 90  # longer on a loaded machine; no cost when they exit at once
        while (stray := _processes_mentioning(ray_tmp)) and time.monotonic() < deadline:
            time.sleep(0.2)
        print(f"\nbnc-sweep --backend ray: {ray_seconds:.1f} s, local: {local_seconds:.1f} s")
        yield {
            "root": root,
            "initialized_after": initialized_after,
            "stray": stray,
            "ray_seconds": ray_seconds,
            "stderr": stderr.getvalue(),
        }
    finally:
        torch.set_num_threads(threads)
        if saved is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = saved
        if ray.is_initialized():  # only if the CLI failed to shut it down
            ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _rows(directory) -> dict:
    with ResultsTable.open_existing(directory) as table:
        rows = table.rows()
    assert len({row["id"] for row in rows}) == len(rows)
    return {row["id"]: row for row in rows}


def test_ray_and_local_backends_give_the_same_rows(sweeps):
    on_ray, local = _rows(sweeps["root"] / "ray"), _rows(sweeps["root"] / "local")
    assert len(on_ray) == 8 and set(on_ray) == set(local)
    for rid, row in local.items():
        for name in SAME:
            assert on_ray[rid][name] == row[name], (
                f"row {rid}: {name} differs on Ray: {on_ray[rid][name]!r} != {row[name]!r}"
            )
    assert {row["backend"] for row in on_ray.values()} == {"ray"}
    assert {row["backend"] for row in local.values()} == {"local"}


def test_ray_summary_and_kept_models(sweeps):
    directory = sweeps["root"] / "ray"
    summary = json.loads((directory / "summary.json").read_text())
    assert (summary["backend"], summary["configurations"], summary["trained"], summary["config_epochs"]) == (
        "ray",
        8,
        8,
        8 * 3,
    )
    rows = _rows(directory)
    named = {row["model_path"] for row in rows.values() if row["model_path"]}
    assert named == {f"models/{p.name}" for p in (directory / "models").iterdir()}
    # Keep best, whatever order the chunks came back in: one file per bits group, a best row's.
    assert len(named) == 2
    for bits in (2, 3):
        group = [row for row in rows.values() if row["config"]["bits"] == bits]
        (kept,) = [row for row in group if row["model_path"]]
        assert kept["final"]["val_error"] == min(row["final"]["val_error"] for row in group)


def test_ray_progress_bar_reaches_the_end(sweeps):
    # Ray workers cannot report epochs to the driver's bar: each finished chunk must count in full.
    bars = [line for line in sweeps["stderr"].replace("\r", "\n").splitlines() if line.startswith("sweep:")]
    assert bars and "| 24/24 [" in bars[-1] and "configs=8/8" in bars[-1], bars[-1:] or sweeps["stderr"]


def test_ray_is_shut_down_after_the_command(sweeps):
    assert not sweeps["initialized_after"], "RayBackend.close() did not shut down the Ray it started"
    assert sweeps["stray"] == [], "Ray processes outlived bnc-sweep:\n" + "\n".join(sweeps["stray"])
