"""The habits the code keeps, checked on every run: ruff's lint rules and format, and mypy.

Configured in ``pyproject.toml`` (``[tool.ruff]``, ``[tool.mypy]``); the same commands run from
``.pre-commit-config.yaml``. mypy checks the *installed* layout: the repository keeps
``exporters/`` and ``runtimes/`` beside ``bnc_deploy/`` and installs them as its subpackages
(``[tool.setuptools] package-dir``), which mypy cannot map, so :func:`installed_layout` builds that
tree from symbolic links in a temporary folder and mypy runs there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Folders installed as subpackages of bnc_deploy ([tool.setuptools] package-dir).
SUBPACKAGES = ("exporters", "runtimes")


def _tool(name: str) -> str:
    """The tool from this interpreter's environment (the test extra installs both)."""
    path = Path(sys.executable).with_name(name)
    if path.is_file():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return found


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)


def test_ruff_lint_is_clean():
    done = _run([_tool("ruff"), "check", "--no-cache", "."], REPO)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_ruff_format_is_kept():
    done = _run([_tool("ruff"), "format", "--check", "--no-cache", "."], REPO)
    assert done.returncode == 0, "run 'ruff format .':\n" + done.stdout[-4000:] + done.stderr[-2000:]


def installed_layout(folder: Path) -> Path:
    """``folder/bnc_deploy``: links to every entry of the repository's ``bnc_deploy/`` plus
    ``exporters`` and ``runtimes`` as subpackages, as the package is installed."""
    package = folder / "bnc_deploy"
    package.mkdir()
    for entry in (REPO / "bnc_deploy").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name in SUBPACKAGES:
        (package / name).symlink_to(REPO / name)
    return package


@pytest.mark.skipif(os.name != "posix", reason="builds the installed layout from symbolic links")
def test_mypy_is_clean(tmp_path):
    installed_layout(tmp_path)
    # The files to check are [tool.mypy] files, paths of the installed layout.
    done = _run(
        [_tool("mypy"), "--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache")], tmp_path
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
