"""Concurrent writers to one path (issue 11 item 1): N ``bnc-train``/``bnc-export`` processes with the
same ``-o``, started together, repeated. Used by ``test_concurrent_writers.py`` (a few trials) and
run as a script for the acceptance numbers::

    python tests/reliability/writers.py --trials 100 [--procs 2] [--what train export]

A trial passes when:

* every process exits 0 and reports what it wrote (``--json``): its file's SHA-256 and ``owned``;
* the file on disk is complete and valid: a model file loads (its content hash checks) and has the
  bit width its writer reported; an export loads in onnxruntime, has the lowering its writer
  reported, and reproduces the model's reference scores and labels bit for bit;
* the file's SHA-256 is the one some process reported (the last complete writer wins), and that
  process did not say it was replaced;
* a process that printed the "was replaced by another writer" warning reported ``owned: false``
  and vice versa, and its bytes are not on disk (unless another writer wrote identical bytes);
* no temporary file (``.NAME.*.tmp*``) is left.

A *false report* is any of these failing. Not a false report: a process that reported ``owned:
true`` whose file a later writer replaced after the report ("overwritten later", counted): the
last complete writer wins, and no process can vouch for the file after it has reported.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

BITS = (3, 4, 5, 6, 7, 8)
LOWERINGS = ("gather", "onehot-fc")
REPLACED = "was replaced by another writer after this one"


@dataclass
class Trial:
    ok: bool = True
    problems: list = field(default_factory=list)
    warned: int = 0  # processes that said their file was replaced
    overwritten_later: int = 0  # processes that reported owned, replaced after their report
    seconds: float = 0.0

    def fail(self, text: str) -> None:
        self.ok = False
        self.problems.append(text)


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS="1")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _launch(commands: list[list[str]]) -> list[tuple[int, str, str]]:
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()) for cmd in commands
    ]
    return [(p.wait(), *p.communicate()) for p in procs]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_reports(trial: Trial, results, sha_key: str, target: Path) -> tuple[str | None, list[dict]]:
    """Common checks; returns the final file's digest and the parsed reports."""
    reports = []
    for i, (code, out, err) in enumerate(results):
        if code != 0:
            trial.fail(f"process {i} exited {code}: {err.strip().splitlines()[-1:] or ''}")
            reports.append(None)
            continue
        try:
            report = json.loads(out)
        except json.JSONDecodeError:
            trial.fail(f"process {i}: no JSON report")
            reports.append(None)
            continue
        warned = REPLACED in err
        if warned != (report.get("owned") is False):
            trial.fail(f"process {i}: warning printed {warned} but owned={report.get('owned')}")
        trial.warned += warned
        reports.append(report)
    leftovers = [p.name for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.")]
    if leftovers:
        trial.fail(f"temporary files left: {leftovers}")
    if not target.is_file():
        trial.fail("no file at the target")
        return None, reports
    final = _sha256(target)
    shas = [r[sha_key] for r in reports if r is not None]
    if final not in shas:
        trial.fail("the file on disk is no process's reported file")
    for i, r in enumerate(reports):
        if r is None:
            continue
        if r[sha_key] == final and r["owned"] is False and shas.count(final) == 1:
            trial.fail(f"process {i} said its file was replaced, but the file on disk is its")
        if r[sha_key] != final and r["owned"] is True:
            trial.overwritten_later += 1
    return final, reports


def train_trial(folder: Path, n_procs: int = 2) -> Trial:
    """``n_procs`` ``bnc-train --bits B -o same.bnc`` (different B each) at once."""
    from bnc_deploy.artifacts import ArtifactError, load_artifact

    trial, start = Trial(), time.perf_counter()
    target = folder / "same.bnc"
    commands = [
        [
            sys.executable,
            "-m",
            "bnc_deploy.cli.train",
            "--data",
            "digits",
            "--model",
            "nb",
            "--init",
            "ml",
            "--epochs",
            "0",
            "--bits",
            str(BITS[i % len(BITS)]),
            "-o",
            str(target),
            "--json",
            "--quiet",
        ]
        for i in range(n_procs)
    ]
    final, reports = _check_reports(trial, _launch(commands), "file_sha256", target)
    if final is not None:
        try:
            artifact = load_artifact(target)
        except ArtifactError as exc:
            trial.fail(f"corrupt model file: {exc}")
        else:
            winners = [r for r in reports if r is not None and r["file_sha256"] == final]
            bits = artifact.quantizer.total_bits if artifact.quantizer is not None else None
            if winners and any(w["bits"] != bits for w in winners):
                trial.fail(f"the file has {bits} bits, its writer reported {winners[0]['bits']}")
    trial.seconds = time.perf_counter() - start
    return trial


def make_export_model(path: Path) -> Path:
    """A small quantized BN (digits, 3 bits) to export."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bnc_deploy.cli.train",
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
            str(path),
            "--quiet",
        ],
        check=True,
        env=_env(),
        stdout=subprocess.DEVNULL,
    )
    return path


def export_trial(folder: Path, model: Path, n_procs: int = 2) -> Trial:
    """``n_procs`` ``bnc-export --format onnx --lowering L -o same.onnx`` (alternating L) at once."""
    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.errors import RuntimeLoadError
    from bnc_deploy.reference import reference_predictor
    from bnc_deploy.runtimes.base import load_runtime
    from bnc_deploy.verify import verification_rows

    trial, start = Trial(), time.perf_counter()
    target = folder / "same.onnx"
    commands = [
        [
            sys.executable,
            "-m",
            "bnc_deploy.cli.export",
            str(model),
            "--format",
            "onnx",
            "--lowering",
            LOWERINGS[i % len(LOWERINGS)],
            "-o",
            str(target),
            "--json",
        ]
        for i in range(n_procs)
    ]
    final, reports = _check_reports(trial, _launch(commands), "sha256", target)
    for i, r in enumerate(reports):
        if r is not None and not (r["published"] and r["exact"]):
            trial.fail(f"process {i} reported published={r['published']} exact={r['exact']}")
    if final is not None:
        try:
            rt = load_runtime(target, threads=1)
        except RuntimeLoadError as exc:
            trial.fail(f"unloadable export: {exc}")
        else:
            winners = [r for r in reports if r is not None and r["sha256"] == final]
            if winners and any(w["lowering"] != rt.metadata["lowering"] for w in winners):
                trial.fail(
                    f"the file is the {rt.metadata['lowering']} lowering, its writer reported {winners[0]['lowering']}"
                )
            artifact = load_artifact(model)
            x, _ = verification_rows(artifact)
            scores, label = rt.run(x)
            ref = reference_predictor(artifact).log_joint(x)
            if not (np.array_equal(scores, ref) and np.array_equal(label, np.argmax(ref, axis=1))):
                trial.fail("the export on disk is not exact")
    trial.seconds = time.perf_counter() - start
    return trial


def run_trials(what: str, trials: int, n_procs: int, folder: Path, log=None) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    model = make_export_model(folder / "model.bnc") if what == "export" else None
    summary = {
        "what": what,
        "trials": trials,
        "procs": n_procs,
        "passed": 0,
        "false_reports": 0,
        "warned": 0,
        "overwritten_later": 0,
        "seconds": 0.0,
        "problems": [],
    }
    for k in range(trials):
        work = folder / f"{what}-{k}"
        work.mkdir()
        trial = train_trial(work, n_procs) if what == "train" else export_trial(work, model, n_procs)
        summary["passed"] += trial.ok
        summary["false_reports"] += len(trial.problems)
        summary["warned"] += trial.warned
        summary["overwritten_later"] += trial.overwritten_later
        summary["seconds"] += trial.seconds
        summary["problems"] += [f"trial {k}: {p}" for p in trial.problems]
        if log:
            log(
                f"{what} trial {k + 1}/{trials}: {'ok' if trial.ok else 'FAILED ' + '; '.join(trial.problems)} "
                f"({trial.seconds:.1f} s)"
            )
    summary["seconds"] = round(summary["seconds"], 1)
    return summary


def main(argv=None) -> int:
    import tempfile

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--what", nargs="+", choices=("train", "export"), default=["train", "export"])
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for what in args.what:
            s = run_trials(
                what,
                args.trials,
                args.procs,
                Path(tmp) / what,
                log=(lambda text: print(text, flush=True)) if args.verbose else None,
            )
            print(
                f"{what}: {s['trials']} trials x {s['procs']} processes: {s['passed']} passed, "
                f"{s['false_reports']} false reports / corrupt files, {s['warned']} 'replaced' warnings, "
                f"{s['overwritten_later']} reported-then-overwritten, {s['seconds']} s",
                flush=True,
            )
            for problem in s["problems"]:
                print("  " + problem)
            failed |= s["passed"] != s["trials"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    raise SystemExit(main())
