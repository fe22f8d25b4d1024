"""Acceptance test of tamper-evident exports (issue 11, item 2): 1,000 seeded random single-byte edits.

An exported ``.onnx`` and a ``.tflite`` (BN classifier, ``gather`` lowering, 3-bit tables) each get
1,000 random single-byte edits (a uniformly drawn position, its byte XOR a random non-zero value).
Every edited file is loaded through the runtime adapter, as a user would: every edit must be
*detected* (``RuntimeLoadError``) - or, if one were not, the edited file must be proven harmless
(identical scores and labels on every verification row). With a digest over the whole file,
all 1,000 are detected.

Run as a script for the numbers of the closing note, including what the same edits do when the
check is skipped (``verify_integrity=False``; each file is run in a separate, restartable worker
process, since an edited flatbuffer may crash its interpreter)::

    python tests/reliability/test_tamper.py [--edits 1000] [--seed 2024] [--json]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from bnc_deploy.errors import RuntimeLoadError  # noqa: E402
from bnc_deploy.exporters.base import exporter_for, exporters  # noqa: E402
from bnc_deploy.runtimes.base import load_runtime  # noqa: E402
from bnc_deploy.testing import random_bnc_artifact, runtimes_for  # noqa: E402
from bnc_deploy.verify import export_file, verification_rows  # noqa: E402

N_EDITS = 1000
SEED = 2024
FORMATS = ("onnx", "tflite")


def tamper_artifact():
    """The BN model of the test: TAN, 8 features, 4 classes, 3-bit tables (exact gather lowering)."""
    return random_bnc_artifact(np.random.default_rng(SEED), d=8, n_classes=4, tan=True, bits=3, max_card=6, n_check=64)


def random_edits(size: int, n: int, seed: int, data: bytes) -> list[tuple[int, int]]:
    """``n`` seeded (position, new byte) pairs; the new byte always differs from the old one."""
    rng = np.random.default_rng(seed)
    positions = rng.integers(0, size, n)
    flips = rng.integers(1, 256, n)
    return [(int(p), data[int(p)] ^ int(f)) for p, f in zip(positions, flips)]


def edited_bytes(data: bytes, edit: tuple[int, int]) -> bytes:
    out = bytearray(data)
    out[edit[0]] = edit[1]
    return bytes(out)


def export_case(artifact, format: str, folder: Path) -> Path:
    path = folder / f"model{exporter_for(artifact.kind, format).extension}"
    report = export_file(artifact, path, format, lowering="gather")
    assert report.exact and report.integrity == "sha256"
    return path


def run_checked(path: Path, edits, x, reference, folder: Path) -> dict:
    """Load every edited copy with the check on; undetected ones are compared with the original."""
    runtime = runtimes_for(path.suffix)[0]
    data = path.read_bytes()
    target = folder / f"edited{path.suffix}"
    detected, harmless, messages, loading = 0, 0, {}, 0.0
    start = time.perf_counter()
    for edit in edits:
        target.write_bytes(edited_bytes(data, edit))
        t0 = time.perf_counter()
        try:
            rt = load_runtime(target, runtime, threads=1)
        except RuntimeLoadError as exc:
            loading += time.perf_counter() - t0
            detected += 1
            reason = str(exc).split("(", 1)[-1].split(")", 1)[0] if "(" in str(exc) else str(exc)
            messages[reason] = messages.get(reason, 0) + 1
            continue
        scores, label = rt.run(x)  # undetected: it must compute exactly what the original computes
        assert np.array_equal(scores, reference[0]) and np.array_equal(label, reference[1]), (
            f"{path.suffix} edit at byte {edit[0]} was not detected and changes the outputs"
        )
        harmless += 1
    seconds = time.perf_counter() - start
    return {
        "format": path.suffix.lstrip("."),
        "runtime": runtime,
        "file_bytes": len(data),
        "edits": len(edits),
        "detected": detected,
        "undetected_harmless": harmless,
        "seconds": round(seconds, 3),
        "ms_per_refused_load": round(1000 * loading / max(detected, 1), 3),
        "reasons": messages,
    }


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    artifact = tamper_artifact()
    x, _ = verification_rows(artifact)
    return artifact, x, tmp_path_factory.mktemp("tamper")


def _available(format: str) -> bool:
    return ("bnc", format) in exporters() and bool(runtimes_for(exporter_for("bnc", format).extension))


@pytest.mark.parametrize(
    "format",
    [
        pytest.param(f, marks=pytest.mark.skipif(not _available(f), reason=f"no {f} exporter or runtime"))
        for f in FORMATS
    ],
)
def test_every_single_byte_edit_is_detected_on_load(case, format):
    artifact, x, folder = case
    folder = folder / format
    folder.mkdir()
    path = export_case(artifact, format, folder)
    reference = load_runtime(path, threads=1).run(x)
    data = path.read_bytes()
    result = run_checked(path, random_edits(len(data), N_EDITS, SEED, data), x, reference, folder)
    print(
        f"\n{format}: {result['detected']}/{result['edits']} single-byte edits detected on load "
        f"({result['file_bytes']} bytes, {result['ms_per_refused_load']} ms per refused load, {result['seconds']} s "
        f"in all); reasons {result['reasons']}"
    )
    assert result["detected"] + result["undetected_harmless"] == N_EDITS
    assert result["detected"] == N_EDITS  # a digest over every byte detects every edit


# -- script: the numbers for the closing note, with and without the check ----------------------------------
def _unchecked_worker(conn, runtime: str, x, reference) -> None:  # pragma: no cover - runs in a child process
    import os
    import warnings

    warnings.simplefilter("ignore")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the runtimes' own logging about the broken files
    os.dup2(devnull, 2)
    while True:
        path = conn.recv()
        if path is None:
            return
        try:
            rt = load_runtime(path, runtime, threads=1, verify_integrity=False)
        except RuntimeLoadError:
            conn.send("refused on load (the runtime cannot read it)")
            continue
        except Exception as exc:  # noqa: BLE001 - classify, do not stop
            conn.send(f"refused on load ({type(exc).__name__})")
            continue
        try:
            scores, label = rt.run(x)
        except Exception as exc:  # noqa: BLE001 - the in-graph guard, wrong shapes, runtime errors
            conn.send(
                "fails when run (guard or runtime error)"
                if isinstance(exc, RuntimeError)
                else f"fails when run ({type(exc).__name__})"
            )
            continue
        if np.array_equal(scores, reference[0]) and np.array_equal(label, reference[1]):
            conn.send("runs, outputs identical (harmless)")
        else:
            agreement = float(np.mean(label == reference[1]))
            conn.send(f"runs SILENTLY with changed outputs|{agreement}")


def run_unchecked(path: Path, edits, x, reference, folder: Path, timeout: float = 60.0) -> dict:
    """What the same edits do with the check skipped; a crashed or hung worker counts as a crash."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    runtime = runtimes_for(path.suffix)[0]
    data = path.read_bytes()
    counts: dict[str, int] = {}
    agreements: list[float] = []
    worker = conn = None

    def start():
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_unchecked_worker, args=(child, runtime, x, reference), daemon=True)
        proc.start()
        return proc, parent

    for k, edit in enumerate(edits):
        if worker is None:
            worker, conn = start()
        target = folder / f"unchecked_{k}{path.suffix}"
        target.write_bytes(edited_bytes(data, edit))
        conn.send(str(target))
        if conn.poll(timeout):
            try:
                outcome = conn.recv()
            except EOFError:
                outcome = "crashes the process"
        else:
            outcome = "crashes the process" if not worker.is_alive() else "hangs"
        if outcome in ("crashes the process", "hangs"):
            worker.kill()
            worker.join()
            worker = conn = None
        if outcome.startswith("runs SILENTLY"):
            outcome, agreement = outcome.split("|")
            agreements.append(float(agreement))
        counts[outcome] = counts.get(outcome, 0) + 1
        target.unlink()
    if worker is not None:
        conn.send(None)
        worker.join(10)
    out = {"edits": len(edits), "outcomes": dict(sorted(counts.items(), key=lambda kv: -kv[1]))}
    if agreements:
        out["silent_label_agreement_min_max"] = [round(min(agreements), 4), round(max(agreements), 4)]
    return out


def main(argv=None) -> int:  # pragma: no cover - the closing note's numbers
    import argparse
    import json
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edits", type=int, default=N_EDITS)
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--no-unchecked", action="store_true", help="skip the measurement without the check")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    artifact = tamper_artifact()
    x, _ = verification_rows(artifact)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for format in args.formats.split(","):
            folder = Path(tmp) / format
            folder.mkdir()
            path = export_case(artifact, format, folder)
            reference = load_runtime(path, threads=1).run(x)
            data = path.read_bytes()
            edits = random_edits(len(data), args.edits, args.seed, data)
            result = run_checked(path, edits, x, reference, folder)
            if not args.no_unchecked:
                start = time.perf_counter()
                result["without_check"] = run_unchecked(path, edits, x, reference, folder)
                result["without_check"]["seconds"] = round(time.perf_counter() - start, 1)
            results.append(result)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            print(
                f"{r['format']} ({r['file_bytes']} bytes, BN TAN 3-bit gather, {r['runtime']}): "
                f"{r['detected']}/{r['edits']} single-byte edits detected on load, "
                f"{r['undetected_harmless']} undetected (all harmless), "
                f"{r['ms_per_refused_load']} ms per refused load, "
                f"{r['seconds']} s for all (writing the copies included)"
            )
            for reason, n in r["reasons"].items():
                print(f"    {n:5d}  {reason}")
            if "without_check" in r:
                print(f"  without the check (verify_integrity=False), the same {r['edits']} edits:")
                for outcome, n in r["without_check"]["outcomes"].items():
                    print(f"    {n:5d}  {outcome}")
                if "silent_label_agreement_min_max" in r["without_check"]:
                    lo, hi = r["without_check"]["silent_label_agreement_min_max"]
                    print(f"           label agreement of the silent ones: {100 * lo:.2f}% .. {100 * hi:.2f}%")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
