"""Helpers and fixtures of the reliability suite: CLI subprocesses, a read-only folder, a tiny full
file system.

Not a ``conftest.py``: the suite's other tests import ``tests/conftest.py`` as ``conftest``, and a
second module of that name here would shadow it. ``tests/conftest.py`` registers it as a plugin,
so the fixtures are available to every test without an import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cli(module: str, *args, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``python -m bnc_deploy.cli.MODULE ARGS`` from the checkout; returns the completed process."""
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    return subprocess.run(
        [sys.executable, "-m", f"bnc_deploy.cli.{module}", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def fill(folder: Path, leave_bytes: int = 4096) -> None:
    """Fill the file system of ``folder`` until at most ``leave_bytes`` are free."""
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    with open(folder / "filler", "wb") as f:
        try:
            f.write(b"\0" * max(0, free - leave_bytes))
        except OSError:
            pass


@pytest.fixture(scope="session")
def digits_model(tmp_path_factory) -> Path:
    """A small quantized BN (digits, 3 bits, maximum likelihood) written by bnc-train."""
    path = tmp_path_factory.mktemp("model") / "digits-nb3.bnc"
    done = cli(
        "train",
        "--data",
        "digits",
        "--model",
        "nb",
        "--init",
        "ml",
        "--epochs",
        "0",
        "--bits",
        "3",
        "-o",
        path,
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture
def immutable_folder(tmp_path):
    """A folder nobody can create files in, root included (``chattr +i`` on ext4/xfs/btrfs).

    Root ignores permission bits, so ``chmod 0555`` would not do; skipped where chattr is
    unavailable or refused (the mocked ``os.access`` tests cover those machines).
    """
    folder = tmp_path / "read-only"
    folder.mkdir()
    (folder / "old.bnc").write_bytes(b"old file")
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i refused here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=False)


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs (needs mount rights: root in a privileged container), filled up to 4 KiB free.

    Yields the mount point; skipped where tmpfs cannot be mounted (the mocked ENOSPC tests cover it).
    """
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
