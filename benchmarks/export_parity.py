"""Export parity on the shared datasets: ONNX and both TFLite lowerings against the NumPy reference.

For every dataset/fold, NB and Chow-Liu TAN, float and every bit width 1..8, a maximum-likelihood
artifact is trained with the CLI (``bnc-train --init ml --epochs 0``, ``--int-bits min(B, 3)``),
exported four ways and run through the runtime adapters on every TEST row:

* ONNX, gather lowering (built by the registered ``("bnc", "onnx")`` exporter) in onnxruntime;
* TFLite, gather lowering (``export_tflite(..., lowering="gather")``) in LiteRT;
* TFLite, one-hot x int8 FULLY_CONNECTED (``lowering="onehot-fc"``) in LiteRT (batch 1), with
  both one-hot builders: ``equal-cast`` (default) and ``relu`` (the all-int8 Edge TPU front end).

Printed per row: labels identical to the reference (mismatch count), log_joint bit-identical
(quantized), the onehot-fc label agreement of each builder, and the number of int8 FC groups.
The exit status is 1 if any lowering that is exact by design (the file's ``exact`` metadata:
quantized gather; quantized onehot-fc for B <= 7) disagrees on any label or log_joint, or if a
gather export (ONNX or TFLite) changes any label; otherwise 0. B = 8 and float onehot-fc are reported, not judged.

Usage::

    python benchmarks/export_parity.py [--quick] [--datasets letter,satimage,usps] [--workdir DIR] [--json FILE]

``--quick``: fold 1 only and bit widths {float, 1, 4, 7, 8}. Artifacts are cached in ``--workdir``
(default: a temporary folder), so a rerun with the same folder skips training.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

FOLDS = {"letter": [1], "satimage": [1, 2, 3, 4, 5], "usps": [1]}
ALL_BITS = [None, 1, 2, 3, 4, 5, 6, 7, 8]
QUICK_BITS = [None, 1, 4, 7, 8]
MODELS = ("nb", "tan")
RESULT_KEYS = ("onnx", "tflite_gather", "tflite_onehot_fc", "tflite_onehot_fc_relu")


def int_bits_for(bits: int) -> int:
    """``B_I = min(B, 3)``: B_F >= 0 up to 3 bits, then 3 integer bits (range down to -8)."""
    return min(bits, 3)


def train_artifact(dataset: str, fold: int, model: str, bits: int | None, workdir: Path) -> Path:
    """Train (or reuse) a maximum-likelihood artifact with the ``bnc-train`` CLI."""
    tag = "float" if bits is None else f"b{bits}"
    out = workdir / f"{dataset}_f{fold}_{model}_{tag}.bnc"
    if out.exists():
        return out
    cmd = [
        sys.executable,
        "-m",
        "bnc_deploy.cli.train",
        "--data",
        dataset,
        "--fold",
        str(fold),
        "--model",
        model,
        "--init",
        "ml",
        "--epochs",
        "0",
        "--quiet",
        "--json",
        "-o",
        str(out),
    ]
    if bits is not None:
        cmd += ["--bits", str(bits), "--int-bits", str(int_bits_for(bits))]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bnc-train failed ({' '.join(cmd)}):\n{done.stderr.strip()}")
    return out


def compare(runtime, x: np.ndarray, ref_lj: np.ndarray) -> dict:
    """Run ``runtime`` on ``x``; label mismatches and log_joint identity against the reference."""
    start = time.perf_counter()
    lj, label = runtime.run(x)
    seconds = time.perf_counter() - start
    mismatches = int(np.count_nonzero(label != np.argmax(ref_lj, axis=1)))
    return {
        "label_mismatches": mismatches,
        "agreement": 1.0 - mismatches / len(x),
        "log_joint_identical": bool(np.array_equal(lj, ref_lj)),
        "max_abs_diff": float(np.max(np.abs(lj - ref_lj))),
        "exact_expected": bool(runtime.metadata["exact"]),
        "seconds": round(seconds, 3),
    }


def check_one(artifact_path: Path, dataset: str, fold: int, workdir: Path) -> dict:
    """Export one artifact three ways and compare each with the reference on the test split."""
    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.fileio import atomic_write_bytes
    from bnc_deploy.verify import build, export_path

    def export_unverified(path, format, **options):  # this script measures the parity itself, on every row
        return atomic_write_bytes(path, build(artifact, format, **options)[0]).path

    from bnc_deploy.reference.bnc import ReferencePredictor
    from bnc_deploy.runtimes.base import load_runtime

    artifact = load_artifact(artifact_path)
    x = load_dataset(dataset, fold=fold).x_test
    ref_lj = ReferencePredictor(artifact).log_joint(x)
    stem = workdir / artifact_path.stem
    onnx_path = export_path(artifact, stem.with_suffix(".onnx"), "onnx")
    gather_path = export_unverified(f"{stem}_gather.tflite", "tflite", lowering="gather")
    onehot_path = export_unverified(f"{stem}_onehot.tflite", "tflite", lowering="onehot-fc")
    relu_path = export_unverified(f"{stem}_relu.tflite", "tflite", lowering="onehot-fc", onehot="relu")
    return {
        "onnx": compare(load_runtime(onnx_path, "onnxruntime", threads=1), x, ref_lj),
        "tflite_gather": compare(load_runtime(gather_path, "litert", threads=1), x, ref_lj),
        "tflite_onehot_fc": compare(load_runtime(onehot_path, "litert", threads=1), x, ref_lj),
        "tflite_onehot_fc_relu": compare(load_runtime(relu_path, "litert", threads=1), x, ref_lj),
        "n_test": int(len(x)),
        "quantized": artifact.is_quantized,
        "onehot_fc_groups": len(_read_meta(onehot_path)["onehot_fc"]["groups"]),
    }


def _read_meta(path) -> dict:
    from bnc_deploy.formats.tflite import read_tflite_metadata

    return read_tflite_metadata(path)


def failures(row: dict) -> list[str]:
    """Why a result row breaks the exactness promise (empty if it keeps it)."""
    problems = []
    for key in RESULT_KEYS:
        r = row[key]
        exact_broken = r["exact_expected"] and (r["label_mismatches"] or not r["log_joint_identical"])
        gather_label = key in ("onnx", "tflite_gather") and r["label_mismatches"]
        if exact_broken or gather_label:
            problems.append(
                f"{key}: {r['label_mismatches']} label mismatch(es), log_joint identical {r['log_joint_identical']}"
            )
    return problems


def _cell(r: dict, show_lj: bool) -> str:
    labels = "=" if r["label_mismatches"] == 0 else f"{r['label_mismatches']} diff"
    if not show_lj:
        return labels
    return f"{labels} / {'=' if r['log_joint_identical'] else 'DIFF'}"


def _onehot_cells(r: dict, quantized: bool) -> str:
    lj = ("=" if r["log_joint_identical"] else f"~{r['max_abs_diff']:.2g}") if quantized else "-"
    return f"{100 * r['agreement']:>8.2f}% {lj:<7}"


def format_row(row: dict) -> str:
    q = row["quantized"]
    bits = "float" if row["bits"] is None else str(row["bits"])
    return (
        f"{row['dataset']:<9}{row['fold']:>4}  {row['model']:<4}{bits:>6}{row['n_test']:>7}  "
        f"{_cell(row['onnx'], q):<12}{_cell(row['tflite_gather'], q):<12}"
        f"{_onehot_cells(row['tflite_onehot_fc'], q)}{_onehot_cells(row['tflite_onehot_fc_relu'], q)}"
        f"{row['onehot_fc_groups']:>4}  {'FAIL' if row['failures'] else 'ok'}"
    )


HEADER = (
    f"{'dataset':<9}{'fold':>4}  {'mdl':<4}{'bits':>6}{'n_test':>7}  {'onnx':<12}{'tfl-gather':<12}"
    f"{'oh equal-cast':<18}{'oh relu':<18}{'grp':>4}  status\n"
    f"{'':<32}{'labels/lj':<12}{'labels/lj':<12}{'agree    lj':<18}{'agree    lj':<18}"
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="ONNX/TFLite export parity with the reference on the shared datasets.")
    p.add_argument("--datasets", default="letter,satimage,usps", help="comma-separated (default: all three)")
    p.add_argument("--quick", action="store_true", help="fold 1 only, bit widths float,1,4,7,8")
    p.add_argument("--workdir", default=None, help="folder for artifacts and exports (kept); default: temporary")
    p.add_argument("--json", default=None, metavar="FILE", help="also write all results as JSON")
    args = p.parse_args(argv)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    unknown = [d for d in datasets if d not in FOLDS]
    if unknown:
        p.error(f"unknown dataset(s) {unknown}; choose from {sorted(FOLDS)}")
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="export_parity_"))
    workdir.mkdir(parents=True, exist_ok=True)
    bits_list = QUICK_BITS if args.quick else ALL_BITS
    rows = []
    started = time.perf_counter()
    print(HEADER, flush=True)
    try:
        for dataset in datasets:
            for fold in FOLDS[dataset][:1] if args.quick else FOLDS[dataset]:
                for model in MODELS:
                    for bits in bits_list:
                        artifact = train_artifact(dataset, fold, model, bits, workdir)
                        row = {
                            "dataset": dataset,
                            "fold": fold,
                            "model": model,
                            "bits": bits,
                            "int_bits": None if bits is None else int_bits_for(bits),
                        }
                        row.update(check_one(artifact, dataset, fold, workdir))
                        row["failures"] = failures(row)
                        rows.append(row)
                        print(format_row(row), flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    bad = [r for r in rows if r["failures"]]
    minutes = (time.perf_counter() - started) / 60
    print(f"\n{len(rows)} artifacts, {len(bad)} with an exactness failure ({minutes:.1f} min).")
    for key in ("tflite_onehot_fc", "tflite_onehot_fc_relu"):
        for label, pick in (("B=8", lambda r: r["bits"] == 8), ("float", lambda r: r["bits"] is None)):
            agree = [r[key]["agreement"] for r in rows if pick(r)]
            if agree:
                print(
                    f"  {key} label agreement, {label}: min {100 * min(agree):.2f}%, "
                    f"mean {100 * float(np.mean(agree)):.2f}% over {len(agree)} artifacts"
                )
    for r in bad:
        print(f"FAIL {r['dataset']} fold {r['fold']} {r['model']} bits {r['bits']}: {'; '.join(r['failures'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
