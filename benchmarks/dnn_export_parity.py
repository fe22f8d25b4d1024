"""Exported DNNs vs their artifacts on a dataset's test split: ONNX (onnxruntime) and TFLite (LiteRT).

For every DNN model file given (``.bnc`` from ``bnc-train --model fc|cnn``), runs
``bnc-export MODEL --format F --data DATA --json`` for both formats and prints one table row
per (model, format): label agreement on every test row, whether the logits are bit-identical,
accuracy of the reference and of the export, and the file size. Optionally trains a set of
sign networks first (``--train-sign-bits``) so the "sign nets with B <= 7 export exactly" claim
is checked across bit widths.

    python benchmarks/dnn_export_parity.py --data usps --workdir runs/usps_parity \\
        --train-sign-bits 1,2,4,7 --epochs 20 runs/usps_budget/*.bnc

Exit status 1 if an export whose metadata promises exactness disagrees on any row.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def sh(cmd: list[str]) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="DNN model files (.bnc)")
    p.add_argument("--data", default="usps")
    p.add_argument("--workdir", default="runs/dnn_parity")
    p.add_argument("--formats", default="onnx,tflite")
    p.add_argument("--train-sign-bits", default="", help="train FC sign nets (batch norm) at these bit widths first")
    p.add_argument("--hidden", default="64")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", default="3e-2")
    args = p.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    models = [Path(m) for m in args.models]
    for bits in filter(None, args.train_sign_bits.split(",")):
        out = work / f"fc_sign_b{bits}.bnc"
        if not out.is_file():
            subprocess.run(
                [
                    str(BIN / "bnc-train"),
                    "--data",
                    args.data,
                    "--model",
                    "fc",
                    "--activation",
                    "sign",
                    "--batch-norm",
                    "--weight-bits",
                    bits,
                    "--hidden",
                    args.hidden,
                    "--epochs",
                    str(args.epochs),
                    "--lr",
                    args.lr,
                    "--quiet",
                    "--json",
                    "-o",
                    str(out),
                ],
                check=True,
                capture_output=True,
            )
        models.append(out)
    failed = False
    print(
        "| model | format | lowering | exact promised | label agreement | logits identical | "
        "reference acc. | export acc. | change | file bytes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in models:
        for fmt in args.formats.split(","):
            out = work / f"{model.stem}.{fmt}"
            r = sh(
                [str(BIN / "bnc-export"), str(model), "--format", fmt, "--data", args.data, "-o", str(out), "--json"]
            )
            failed |= bool(r["exact_expected"] and not r["exact"])
            print(
                f"| {model.stem} ({r['architecture']} {','.join(map(str, r['hidden_widths']))}, "
                f"B={r['weight_bits']}, {r['activation']}) | {fmt} | {r['lowering']} | {r['exact_expected']} | "
                f"{100 * r['agreement']:.2f} % ({r['label_mismatches']} of {r['n_rows']}) | "
                f"{r['logits_identical']} | {100 * r['reference_accuracy']:.2f} % | {100 * r['accuracy']:.2f} % | "
                f"{100 * r['accuracy_change']:+.2f} | {r['file_bytes']:,} |",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
