"""Run exported files on aarch64 (emulated: qemu-user in an arm64 Debian root) and compare with x86_64.

Android phones, the Coral Dev Board's CPU and Raspberry-Pi-class boards run aarch64 kernels of
the same runtimes (onnxruntime, LiteRT, a C compiler). This target runs each file there, in the
aarch64 builds of those runtimes from PyPI (and Debian's aarch64 gcc for C exports), under
``qemu-aarch64-static``, and compares with the same file run on this x86_64 host::

    bnc-target setup --target aarch64 [--cache DIR] [--mirror URL] [--force] [--json]
    bnc-target run --target aarch64 FILE... [--data NAME [--fold K]] [--json]
    (or: python -m bnc_deploy.targets.aarch64 setup|run ...)

``setup`` builds and caches the root (:mod:`bnc_deploy.targets.aarch64_root`: debootstrap,
binfmt, pip inside; idempotent). ``run`` needs it (a one-line error says to run ``setup``).

What is compared, per FILE (``.onnx``, ``.ort``, ``.tflite``, ``.h``, and ``.bnc`` in NumPy)
--------------------------------------------------------------------------------------------
Rows: the test split of ``--data`` (``--fold``), for files that take codes; else, and for raw-input
files, the check set stored in the file (metadata ``check``; a ``.bnc``: its check rows).

* **x86_64 reference**: the same file through :func:`bnc_deploy.runtimes.base.load_runtime` on
  this host (its default runtime, 1 thread, integrity seal checked). On aarch64 the same code
  runs it: this package is copied into the root's job folder in its installed layout and
  :mod:`bnc_deploy.targets.aarch64_worker` calls ``load_runtime`` there.
* **label agreement** (rows with the same label on both), **exact** (every score bit-identical
  and every label equal), **max |delta score|** (largest absolute difference of scores: log
  joints, or logits for DNNs).
* **model reference**: when a ``.bnc`` among the FILEs is the model a file was exported from
  (metadata ``artifact_sha256``), the aarch64 scores are also compared with its NumPy reference
  predictor (computed here), the ground truth.
* **check set**: the file's stored check set reproduced on aarch64
  (:func:`bnc_deploy.formats.checkset.compare_check`; exact files: the scores' hash).

A file passes (``ok``) when it loads and runs on aarch64, reproduces its check set, and, if its
metadata promises exactness (``exact``; a ``.bnc``: when its reference computes on integers, a
quantized BN or a sign network), is bit-identical with x86_64 and with the model reference (when
given); a file that is not exact by design (float tables, ReLU networks) must
give the same labels as on x86_64, and its max |delta score| is reported.

Not latency: qemu-user translates instructions; its timings say nothing about an aarch64 CPU,
so none are reported (``bnc-profile --target aarch64`` reports the analytic operation counts).

Exit status: 0 every file passes; 1 some file fails; 2 usage or setup errors (not root, a missing
Debian package, no root set up, a bad file).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from bnc_deploy.errors import BncDeployError, ConfigError, InputError, RuntimeLoadError
from bnc_deploy.targets import aarch64_root
from bnc_deploy.targets.aarch64_root import TargetSetupError

TARGET = "aarch64"
METHOD = (
    "emulated: qemu-aarch64-static (user mode) in a Debian 12 arm64 root, the aarch64 wheels of the "
    "runtimes from PyPI; results are the aarch64 kernels', timings are not an aarch64 CPU's (no latency)"
)
SUFFIXES = (".bnc", ".onnx", ".ort", ".tflite", ".h")
#: Per-file keys of the report (scripts rely on them; only ever added to).
FILE_KEYS = (
    "file",
    "format",
    "runtime",
    "model_kind",
    "structure",
    "lowering",
    "bits",
    "exact_expected",
    "rows_source",
    "n_rows",
    "test_error",
    "label_agreement",
    "label_mismatches",
    "exact",
    "max_abs_score_diff",
    "reference",
    "check_set",
    "error",
    "ok",
)


# ================================================================================================
# Rows and the host's results
# ================================================================================================
def _rows_for(rt, data, artifact, given=None) -> tuple[np.ndarray, str]:
    from bnc_deploy.formats.checkset import N_RANDOM_ROWS, check_inputs, random_rows

    if given is not None:
        return np.asarray(given), "given rows"
    if data is not None and not rt.raw_inputs:
        x, _, name, fold = data
        return np.asarray(x, dtype=np.int64), f"{name} test split, fold {fold}"
    stored = check_inputs(rt.metadata, where=str(rt.path))
    if stored is not None:
        return stored, "check set stored in the file" + (" (raw inputs)" if rt.raw_inputs else "")
    if getattr(artifact, "check_x", None) is not None and not rt.raw_inputs:
        return np.asarray(artifact.check_x, dtype=np.int64), "check rows of the model file"
    if rt.raw_inputs:
        raise InputError(f"{rt.path}: a raw-input file without a stored check set; re-export it")
    # No given, data or stored rows: the verifier's seeded random rows alone.
    return random_rows(rt), f"{N_RANDOM_ROWS} seeded random valid rows"


def _references(paths: list[Path]) -> dict:
    """``artifact_sha256 -> (path, artifact)`` of the ``.bnc`` FILEs (the model references)."""
    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.formats.metadata import artifact_hash

    refs = {}
    for p in paths:
        if p.suffix.lower() == ".bnc":
            artifact = load_artifact(p)
            refs[artifact_hash(artifact)] = (p, artifact)
    return refs


def _reference_scores(artifact, rows: np.ndarray, raw: bool) -> np.ndarray:
    from bnc_deploy.reference import reference_predictor

    ref = reference_predictor(artifact)
    codes = ref.discretize(rows.astype(np.float64)) if raw else rows
    return ref.log_joint(codes)


def _integer_arithmetic(artifact) -> bool:
    """Whether a model file's NumPy reference computes on integers (quantized BN code sums, sign
    networks), so that it must give identical scores on every CPU. Float models are not held to
    that: NumPy's float64 matrix products go through BLAS kernels whose summation order differs
    between x86_64 and aarch64 (a letter ReLU net's logits differ by 4.4e-16), as exports are not."""
    if artifact.kind == "dnn":
        return getattr(artifact, "activation", None) == "sign"
    return bool(artifact.is_quantized)


def _compare(scores: np.ndarray, labels: np.ndarray, want_scores: np.ndarray, want_labels: np.ndarray) -> dict:
    same = labels == want_labels
    diff = np.abs(scores - want_scores)
    return {
        "label_agreement": float(np.mean(same)) if same.size else None,
        "label_mismatches": int((~same).sum()),
        # array_equal on the float64 widening of float32 scores: bit-identical float32 values
        "exact": bool(np.array_equal(scores, want_scores) and same.all()),
        "max_abs_score_diff": float(np.max(diff, initial=0.0)) if np.isfinite(diff).all() else float("inf"),
    }


# ================================================================================================
# The job inside the root
# ================================================================================================
def _package_dirs() -> dict[str, Path]:
    """This package's folders in the installed layout: ``bnc_deploy`` and its mapped sub-packages."""
    dirs = {"bnc_deploy": Path(__file__).resolve().parent.parent}  # this file is bnc_deploy/targets/aarch64.py
    for sub in ("exporters", "runtimes"):
        spec = importlib.util.find_spec(f"bnc_deploy.{sub}")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeLoadError(f"cannot locate bnc_deploy.{sub} to copy into the aarch64 root")
        dirs[f"bnc_deploy/{sub}"] = Path(next(iter(spec.submodule_search_locations))).resolve()
    return dirs


def _copy_package(dst: Path) -> None:
    # The files `pip install .` would install (setuptools' package-dir mapping), copied per run
    # instead of pip-installed into the root: the working tree is what runs, with no emulated pip
    # per run and no project state inside the cached root. Pure Python; the root has its deps.
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    for rel, src in _package_dirs().items():
        target = dst / rel
        if not target.exists():  # an installed layout already holds exporters/ and runtimes/
            shutil.copytree(src, target, ignore=ignore)


def run_on_root(jobs: list[dict], root: Path, timeout: float) -> dict:
    """Run ``jobs`` (``{"path", "runtime", "rows"}``) with the worker inside ``root``; return its
    JSON with each file's ``scores``/``labels`` loaded (or its ``error``)."""
    tmp_base = root / "tmp"
    work = Path(tempfile.mkdtemp(prefix="bnc-aarch64-", dir=tmp_base))
    try:
        _copy_package(work / "src")
        spec = []
        for i, job in enumerate(jobs):
            src = Path(job["path"])
            name = f"f{i}{src.suffix.lower()}"
            shutil.copyfile(src, work / name)
            np.save(work / f"rows{i}.npy", job["rows"])
            inside = "/" + str(work.relative_to(root))
            spec.append(
                {
                    "path": f"{inside}/{name}",
                    "runtime": job.get("runtime"),
                    "rows": f"{inside}/rows{i}.npy",
                    "out": f"{inside}/out{i}.npz",
                    "verify_integrity": job.get("verify_integrity", True),
                }
            )
        (work / "job.json").write_text(json.dumps({"files": spec}))
        inside = "/" + str(work.relative_to(root))
        done = aarch64_root.run_in_root(
            root,
            [aarch64_root.VENV_PYTHON, "-m", "bnc_deploy.targets.aarch64_worker", f"{inside}/job.json"],
            env={"PYTHONPATH": f"{inside}/src"},
            timeout=timeout,
        )
        try:
            result = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            raise TargetSetupError(f"the aarch64 worker failed (exit {done.returncode}): {tail}") from None
        for i, entry in enumerate(result["files"]):
            if "error" not in entry:
                with np.load(work / f"out{i}.npz") as out:
                    entry["scores"], entry["labels"] = out["scores"], out["labels"]
        return result
    finally:
        aarch64_root.remove_tree(work)


# ================================================================================================
# The check
# ================================================================================================
def check_files(
    files,
    *,
    data=None,
    cache=None,
    timeout: float = aarch64_root.RUN_TIMEOUT_S,
    verify_integrity: bool = True,
    key: bytes | None = None,
    rows: dict | None = None,
) -> dict:
    """Run ``files`` on aarch64 and on this host, compare; return the report (see the module docstring).

    ``data``: ``(x_test, y_test or None, name, fold)`` or None (then ``test_error``: the aarch64
    labels' error on the test split, for files that ran on it). Raises TargetSetupError (no root, not root, tools),
    InputError/RuntimeLoadError (a bad file on the host); a file that fails on aarch64 is a
    failing entry of the report. ``rows``: ``{file: rows}`` to run instead (API only; files not
    named take the rows above). ``key``: of signed files; the host checks their seal, and the
    root then runs the bytes the host checked (it is not given the key).
    """
    paths = _checked_paths(files)
    tools = aarch64_root.check_host()
    why = aarch64_root.root_status(cache)
    if why is not None:
        raise TargetSetupError(why)
    root = aarch64_root.root_dir(cache)
    refs = _references(paths)
    given = {str(k): v for k, v in (rows or {}).items()}
    entries, jobs, host = [], [], []
    for p in paths:
        entry, job, on_host = _run_on_host(p, refs, data, given.get(str(p)), verify_integrity, key)
        entries.append(entry)
        host.append(on_host)
        jobs.append(job)
    inside = run_on_root(jobs, root, timeout)
    for entry, on_host, job, got in zip(entries, host, jobs, inside["files"]):
        _judge(entry, on_host, job, got)
    stamp = aarch64_root.read_stamp(root) or {}
    return {
        "target": TARGET,
        "method": METHOD,
        "root": str(root),
        "machine": inside.get("machine"),
        "python": inside.get("python"),
        "versions": inside.get("versions"),
        "qemu": tools.get("qemu"),
        "debian": stamp.get("recipe", {}).get("suite"),
        "host_versions": _host_versions(),
        "files": entries,
        "ok": all(e["ok"] for e in entries),
    }


def _checked_paths(files) -> list[Path]:
    paths = [Path(f) for f in files]
    for p in paths:
        if p.suffix.lower() not in SUFFIXES:
            raise ConfigError(f"{p}: unknown file type {p.suffix or '(none)'!r}; expected {', '.join(SUFFIXES)}")
        if not p.is_file():
            raise InputError(f"{p}: no such file")
    return paths


def _run_on_host(p: Path, refs: dict, data, given, verify_integrity: bool, key: bytes | None) -> tuple:
    """One file on this host: its report entry (so far), its job for the root, and the host's results
    ``(scores, labels, model reference, raw inputs, test labels or None)``."""
    from bnc_deploy.runtimes.base import load_runtime

    rt = load_runtime(p, threads=1, verify_integrity=verify_integrity, **({} if key is None else {"key": key}))
    meta = rt.metadata
    ref = refs.get(meta.get("artifact_sha256")) if p.suffix.lower() != ".bnc" else None
    artifact = getattr(rt, "artifact", None) or (ref[1] if ref else None)
    x, source = _rows_for(rt, data, artifact, given)
    try:
        h_scores, h_labels = rt.run(x)
    except InputError as exc:
        raise InputError(f"{p}: the rows do not fit this file: {exc}") from None
    entry = {
        "file": str(p),
        "format": p.suffix.lower().lstrip("."),
        "runtime": rt.name,
        "model_kind": meta.get("model_kind", "bnc"),
        "structure": meta.get("structure"),
        "lowering": meta.get("lowering"),
        "bits": meta.get("bits"),
        # a .bnc "is" the reference (metadata exact); across CPUs only integer arithmetic is
        "exact_expected": bool(meta.get("exact")) if p.suffix.lower() != ".bnc" else _integer_arithmetic(rt.artifact),
        "rows_source": source,
        "n_rows": int(len(x)),
        "test_error": None,
    }
    on_test_split = data is not None and data[1] is not None and not rt.raw_inputs
    on_host = (h_scores, h_labels, ref, rt.raw_inputs, data[1] if on_test_split else None)
    job = {"path": str(p), "runtime": rt.name, "rows": x, "verify_integrity": bool(verify_integrity and key is None)}
    return entry, job, on_host


def _judge(entry: dict, on_host: tuple, job: dict, got: dict) -> None:
    """Complete ``entry`` with the comparison of the root's results ``got`` with the host's."""
    h_scores, h_labels, ref, raw, y = on_host
    if "error" in got:
        entry.update(
            label_agreement=None,
            label_mismatches=None,
            exact=False,
            max_abs_score_diff=None,
            reference=None,
            check_set=None,
            error=got["error"],
            ok=False,
        )
        return
    entry.update(_compare(got["scores"], got["labels"], h_scores, h_labels))
    if y is not None:
        entry["test_error"] = float(np.mean(got["labels"] != np.asarray(y).reshape(-1)))
    entry["reference"] = None
    if ref is not None:
        r_scores = _reference_scores(ref[1], job["rows"], raw)
        entry["reference"] = {
            "file": str(ref[0]),
            **_compare(got["scores"], got["labels"], r_scores, np.argmax(r_scores, axis=1)),
        }
    entry["check_set"] = got.get("check_set")
    entry["error"] = None
    check_ok = entry["check_set"] in (None, "ok")
    if entry["exact_expected"]:
        entry["ok"] = bool(check_ok and entry["exact"] and (ref is None or entry["reference"]["exact"]))
    else:
        entry["ok"] = bool(check_ok and entry["label_mismatches"] == 0)


def _host_versions() -> dict:
    from importlib import metadata as importlib_metadata

    out = {}
    for name in ("numpy", "onnx", "onnxruntime", "ai-edge-litert"):
        try:
            out[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            out[name] = None
    return out


# ================================================================================================
# Report
# ================================================================================================
def _g(value, spec=".3g") -> str:
    return "-" if value is None else format(value, spec)


def format_report(r: dict) -> str:
    v = r.get("versions") or {}
    lines = [
        f"aarch64 check ({r['method']})",
        f"  root {r['root']}: {r.get('machine')}, Python {r.get('python')}, "
        + ", ".join(f"{k} {v[k]}" for k in v if v[k])
        + f"; {r.get('qemu') or 'qemu'}",
        "",
        (
            f"  {'file':<30} {'runtime':<11} {'exact?':>6} {'rows':>6} {'labels =':>9} {'bit-identical':>13} "
            f"{'max |Δ score|':>13} {'vs model':>16} {'error %':>7}  check set"
        ),
    ]
    for e in r["files"]:
        name = Path(e["file"]).name
        name = name if len(name) <= 30 else "…" + name[-29:]
        if e.get("error"):
            lines.append(
                f"  {name:<30} {e['runtime']:<11} {'yes' if e['exact_expected'] else 'no':>6} "
                f"{e['n_rows']:>6}  FAIL: {e['error']}"
            )
            continue
        ref = e["reference"]
        vs = (
            "-"
            if ref is None
            else "identical"
            if ref["exact"]
            else f"{ref['label_agreement']:.4f}/{_g(ref['max_abs_score_diff'])}"
        )
        err = None if e["test_error"] is None else 100 * e["test_error"]
        lines.append(
            f"  {name:<30} {e['runtime']:<11} {'yes' if e['exact_expected'] else 'no':>6} {e['n_rows']:>6} "
            f"{e['label_agreement']:>9.4f} {'yes' if e['exact'] else 'no':>13} "
            f"{_g(e['max_abs_score_diff']):>13} {vs:>16} "
            f"{_g(err, '.2f'):>7}  {e['check_set'] or '-'}  "
            f"{'PASS' if e['ok'] else 'FAIL'}"
        )
    lines += [
        "",
        "  labels =: share of rows with the same label on aarch64 as on x86_64; bit-identical: every score;",
        "  vs model: against the .bnc's NumPy reference (labels agreement/max |Δ|); error %: of the aarch64",
        "  labels on the --data test split. Emulated: no latency.",
        f"  {'PASS' if r['ok'] else 'FAIL'}: {sum(e['ok'] for e in r['files'])} of {len(r['files'])} files",
    ]
    return "\n".join(lines)


def format_setup(s: dict) -> str:
    v = s.get("versions") or {}
    t = s.get("timings_s") or {}
    how = "cached (recipe unchanged)" if s["cached"] else "built: " + ", ".join(f"{k} {t[k]:.0f} s" for k in t)
    return (
        f"aarch64 root {s['root']}: {how}; {s['seconds']:.1f} s in all\n"
        f"  Debian {s['recipe']['suite']} arm64, Python {v.get('python')}, "
        + ", ".join(f"{k} {v[k]}" for k in aarch64_root.PIP_PACKAGES if v.get(k))
        + f"; {s.get('qemu')}"
    )


# ================================================================================================
# Command line
# ================================================================================================
def build_parser(
    prog: str = "python -m bnc_deploy.targets.aarch64", targets: tuple[str, ...] = ()
) -> argparse.ArgumentParser:
    """The ``setup``/``run`` parser; ``targets``: choices of a required ``--target`` (``bnc-target``)."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run exported files on aarch64, emulated by qemu-user in a cached arm64 Debian "
        "root, and compare with this x86_64 host (labels, bit-identical scores, max "
        "|Δ score|). Needs root and the Debian packages "
        + ", ".join(aarch64_root.DEBIAN_PACKAGES)
        + ". Emulated: no latency.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser(
        "setup", help="build (or reuse) the cached arm64 root with Python, numpy, onnxruntime, ai-edge-litert and gcc"
    )
    s.add_argument(
        "--mirror",
        metavar="URL",
        help="Debian mirror for debootstrap (default "
        f"${aarch64_root.MIRROR_ENV}, else the first Debian 'deb' "
        "entry of this host's apt sources)",
    )
    s.add_argument("--force", action="store_true", help="rebuild even if a root with this recipe is cached")
    r = sub.add_parser("run", help="run FILEs on aarch64 and compare with x86_64")
    r.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="exported files (.onnx .ort .tflite .h) and .bnc models "
        "(also the reference of the files exported from them)",
    )
    r.add_argument(
        "--data",
        metavar="PATH_OR_NAME",
        help="rows: the TEST split of this data set (default: the check set stored in each file)",
    )
    r.add_argument("--fold", type=int, default=None, metavar="K", help="1-based fold of --data (default 1)")
    r.add_argument("--timeout", type=float, default=aarch64_root.RUN_TIMEOUT_S, help="seconds for the emulated run")
    r.add_argument("--no-integrity-check", action="store_true", help="run files whose seal does not verify")
    for q in (s, r):
        if targets:
            q.add_argument("--target", required=True, choices=targets, help="the target (emulated)")
        q.add_argument(
            "--cache",
            metavar="DIR",
            help="folder of the root (default $BNC_DEPLOY_TARGET_CACHE/aarch64 or ~/.cache/bnc-deploy/aarch64)",
        )
        q.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def load_data(spec: str, fold: int | None):
    """``(x_test, y_test, name, fold)`` of ``--data`` (InputError naming the problem)."""
    from bnc_deploy.datasets import DatasetError, load_dataset

    try:
        ds = load_dataset(spec, fold=1 if fold is None else fold)
    except (DatasetError, OSError) as exc:
        raise InputError(f"--data {spec}: {exc}") from None
    return ds.x_test, ds.y_test, ds.name, ds.fold


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def execute(args: argparse.Namespace) -> tuple[dict, str, int]:
    """Run a parsed command: ``(result, text, exit status)``; raises BncDeployError for usage errors."""
    if args.command == "setup":
        result = aarch64_root.setup(args.cache, mirror=args.mirror, force=args.force, progress=_progress)
        return result, format_setup(result), 0
    data = load_data(args.data, args.fold) if args.data else None
    report = check_files(
        args.files, data=data, cache=args.cache, timeout=args.timeout, verify_integrity=not args.no_integrity_check
    )
    return report, format_report(report), 0 if report["ok"] else 1


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """0: setup done / every file passes; 1: a file fails; 2: usage or setup error (one line)."""
    parser = build_parser(prog or "python -m bnc_deploy.targets.aarch64")
    args = parser.parse_args(argv)
    if getattr(args, "fold", None) is not None and args.data is None:
        parser.error("--fold needs --data")
    try:
        result, text, status = execute(args)
    except (BncDeployError, OSError) as exc:
        print(f"{parser.prog}: error: " + " ".join(str(exc).split()), file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else text)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
