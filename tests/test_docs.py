"""The documentation site: it builds with every warning an error, its command-line reference lists
every option of every command, and every tutorial runs as written.

* ``mkdocs build --strict`` (``mkdocs.yml``: broken links, anchors and pages left out of the nav
  are errors). The command pages are generated from the parsers (``docs/hooks/cli_reference.py``);
  this test checks each page against its parser, option by option.
* Each ``docs/tutorials/*.md`` runs in a fresh temporary folder: its ```` ```bash ````,
  ```` ```console ```` (the ``$ `` lines) and ```` ```python ```` blocks in order, bash blocks with
  ``bash -euo pipefail`` and the virtual environment's ``bin/`` first on ``PATH``, python blocks
  in one interpreter per tutorial (names defined by one block are there in the next). A block is
  left out only after an explicit marker on the line before it: ``<!-- not executed: REASON -->``,
  or ``<!-- requires: CMD ... -->`` (run when every command is on ``PATH``); the test prints what
  it left out and why. ``<!-- tutorial requires: CMD ... -->`` anywhere in a page skips the whole
  tutorial, with the reason, where a command is missing.
* The README stays short, and no page narrates the machine it was written on.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = sorted((DOCS / "tutorials").glob("*.md"))
VENV_BIN = Path(sys.executable).parent
BLOCK_TIMEOUT_S = 300

#: Phrases that narrate a machine or the history of a measurement instead of saying how to reproduce it.
NARRATION = [
    "other sweeps were running",
    "another sweep ran",
    "while another sweep",
    "busy with",
    "this machine",
    "still means what it did",
    "was measured on",
    "the dev vm",
    "other jobs paused",
]


def _cli_reference():
    spec = importlib.util.spec_from_file_location("cli_reference", DOCS / "hooks" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cli_reference"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


# --- the site ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return out


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def test_site_builds_strict(site):
    for page in ["index.html", "getting-started/index.html", "reference/api/index.html", "reference/cli/index.html"]:
        assert (site / page).is_file(), page
    for tutorial in TUTORIALS:
        assert (site / "tutorials" / tutorial.stem / "index.html").is_file(), tutorial.name


def test_cli_reference_lists_every_option(site):
    reference = _cli_reference()
    commands = reference.commands(ROOT)
    assert len(commands) >= 10
    index = _text(site / "reference" / "cli" / "index.html")
    for command in commands:
        page = site / "reference" / "cli" / command.name / "index.html"
        assert page.is_file(), f"no reference page for {command.name}"
        text = _text(page)
        missing = sorted(option for option in reference.option_strings(command.parser) if option not in text)
        assert not missing, f"{command.name}: options missing from its reference page: {missing}"
        assert command.name in index


# --- the tutorials ----------------------------------------------------------------------------------


@dataclass
class Block:
    language: str
    code: str
    line: int
    skip: str | None = None  # why it is not run


_FENCE = re.compile(r"^```([\w-]*)\s*$")
_NOT_EXECUTED = re.compile(r"<!--\s*not executed:\s*(.+?)\s*-->")
_REQUIRES = re.compile(r"<!--\s*requires:\s*(.+?)\s*-->")
_TUTORIAL_REQUIRES = re.compile(r"<!--\s*tutorial requires:\s*(.+?)\s*-->")
EXECUTED = {"bash", "console", "python"}


def parse_blocks(text: str) -> list[Block]:
    """The executable fenced blocks of a page (top level, in order), with their opt-out markers."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    previous = ""
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            if lines[i].strip():
                previous = lines[i]
            i += 1
            continue
        start, language, body = i, match.group(1), []
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        if language in EXECUTED:
            block = Block(language, "\n".join(body) + "\n", start + 1)
            if m := _NOT_EXECUTED.search(previous):
                block.skip = f"not executed: {m.group(1)}"
            elif m := _REQUIRES.search(previous):
                absent = [cmd for cmd in m.group(1).split() if shutil.which(cmd) is None]
                if absent:
                    block.skip = f"needs {', '.join(absent)} (not on PATH)"
            blocks.append(block)
        previous = ""
    return blocks


def _console_commands(code: str) -> str:
    return "\n".join(line[2:] for line in code.splitlines() if line.startswith("$ ")) + "\n"


#: The persistent interpreter: reads {"code", "name"} lines on stdin, runs each in one namespace,
#: answers {"ok"} on the descriptor it was started with; the code's own output goes to a log.
_DRIVER = r"""
import json, os, sys, traceback
answers = os.fdopen(os.dup(1), "w")
log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
os.dup2(log, 1); os.dup2(log, 2)
namespace = {"__name__": "__main__"}
for line in sys.stdin:
    message = json.loads(line)
    ok = True
    try:
        exec(compile(message["code"], message["name"], "exec"), namespace)
    except SystemExit as exc:
        ok = exc.code in (0, None)
    except BaseException:
        traceback.print_exc()
        ok = False
    sys.stdout.flush(); sys.stderr.flush()
    answers.write(json.dumps({"ok": ok}) + "\n"); answers.flush()
"""


class TutorialRun:
    """Runs one tutorial's blocks in order in ``workdir``; kills what it started when done."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.env = {
            **os.environ,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "MPLBACKEND": "Agg",
            "PYTHONUNBUFFERED": "1",
        }
        self.groups: list[int] = []
        self.python: subprocess.Popen | None = None
        self.log = workdir.parent / f"{workdir.name}-python.log"

    def bash(self, code: str, name: str) -> None:
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", code],
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: whatever it leaves running is stopped at the end
        )
        self.groups.append(process.pid)
        try:
            output, _ = process.communicate(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            pytest.fail(f"{name} ran past {BLOCK_TIMEOUT_S} s:\n{output[-6000:]}")
        assert process.returncode == 0, f"{name} exited {process.returncode}:\n{output[-6000:]}"

    def run_python(self, code: str, name: str) -> None:
        if self.python is None:
            self.python = subprocess.Popen(
                [sys.executable, "-c", _DRIVER, str(self.log)],
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            self.groups.append(self.python.pid)
        self.python.stdin.write(json.dumps({"code": code, "name": name}) + "\n")
        self.python.stdin.flush()
        answer = self.python.stdout.readline()
        log = self.log.read_text(errors="replace") if self.log.exists() else ""
        assert answer, f"{name}: the interpreter died:\n{log[-6000:]}"
        assert json.loads(answer)["ok"], f"{name} failed:\n{log[-6000:]}"

    def close(self) -> None:
        if self.python is not None and self.python.poll() is None:
            self.python.stdin.close()
            try:
                self.python.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        for group in self.groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_tutorials_found():
    names = {path.name for path in TUTORIALS}
    assert {"csv-to-cortex-m.md", "serving.md", "mobile-and-web.md", "reproduce-paper.md", "python-api.md"} <= names
    for path in TUTORIALS:
        assert [b for b in parse_blocks(path.read_text()) if b.skip is None], f"{path.name} runs nothing"


@pytest.mark.slow
@pytest.mark.parametrize("tutorial", TUTORIALS, ids=[path.stem for path in TUTORIALS])
def test_tutorial_runs(tutorial: Path, tmp_path, capsys):
    text = tutorial.read_text()
    if m := _TUTORIAL_REQUIRES.search(text):
        absent = [cmd for cmd in m.group(1).split() if shutil.which(cmd) is None]
        if absent:
            pytest.skip(f"{tutorial.name} needs {', '.join(absent)} (not on PATH)")
    blocks = parse_blocks(text)
    workdir = tmp_path / "work"
    workdir.mkdir()
    run = TutorialRun(workdir)
    skipped, timings, started = [], [], time.perf_counter()
    try:
        for block in blocks:
            name = f"{tutorial.name}:{block.line} ({block.language})"
            if block.skip:
                skipped.append(f"{name}: {block.skip}")
                continue
            block_started = time.perf_counter()
            if block.language == "python":
                run.run_python(block.code, name)
            else:
                run.bash(_console_commands(block.code) if block.language == "console" else block.code, name)
            timings.append(f"line {block.line} {time.perf_counter() - block_started:.1f} s")
    finally:
        run.close()
    with capsys.disabled():
        total = time.perf_counter() - started
        print(f"\n{tutorial.name}: {len(timings)} blocks in {total:.1f} s ({', '.join(timings)})")
        for line in skipped:
            print(f"  left out {line}")


def test_block_markers():
    blocks = parse_blocks(
        "x\n```bash\necho a\n```\n<!-- not executed: needs a GPU -->\n```bash\nnvidia-smi\n```\n"
        "<!-- requires: no-such-command-xyz -->\n\n```python\nprint(1)\n```\n```text\nout\n```\n"
    )
    assert [(b.language, b.skip) for b in blocks] == [
        ("bash", None),
        ("bash", "not executed: needs a GPU"),
        ("python", "needs no-such-command-xyz (not on PATH)"),
    ]


# --- README and wording -----------------------------------------------------------------------------


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_no_machine_narration():
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    found = [
        f"{page.relative_to(ROOT)}:{number}: {phrase!r}"
        for page in pages
        for number, line in enumerate(page.read_text().splitlines(), 1)
        for phrase in NARRATION
        if phrase in line.lower()
    ]
    assert not found, "pages narrate the machine instead of saying how to reproduce:\n" + "\n".join(found)
