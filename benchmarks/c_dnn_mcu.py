"""A DNN as C on an emulated Cortex-M4, against TFLite Micro's arena for the same model.

For one DNN model file (or one it trains first: usps, FC L = 3, B = 2, widths 35,35, the width that
matches the 3-bit naive Bayes' 25,950 bits, docs/guide/dnn.md; ``--activation sign`` or ``relu``), it

1. exports the C header through the verifier on every test row of ``--data`` (``bnc-export
   --format c --data``: host, native runtime) and reports exactness (sign networks) or label
   agreement with the float reference (ReLU networks);
2. ReLU networks: exports the int8 TFLite file with the same options (``--format tflite --data``)
   and compares the header's logits and labels with it under LiteRT's reference kernels on the test
   rows (the header's contract);
3. runs the header on QEMU's mps2-an386 (Cortex-M4) on the same rows plus 256 random rows
   (``bnc_deploy.targets.cortex_m_dnn``): exact rows, instructions per prediction, the model's own
   flash (code + constant tables) and RAM (static data + worst-case stack);
4. exports the same model as a TFLite Micro file (``--format tflite --profile micro --data``) and
   reads the tensor arena the exporter measured (smallest arena TFLM allocates and runs it in) and
   the flatbuffer's size (the model's flash in TFLM, without the interpreter's code).

``--pack-bits`` (sign networks) also exports the header with its weights packed to B bits
(``bnc-export --pack-bits``) and runs steps 1 and 3 on it: both headers are reported side by side.

    python benchmarks/c_dnn_mcu.py --data usps --workdir runs/c_dnn_mcu [--activation relu] [--pack-bits] [MODEL.bnc]

Prints a table and (``--json``) the full reports. Exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent
TRAIN = ["--model", "fc", "--layers", "3", "--weight-bits", "2", "--batch-norm"]
TRAIN += ["--hidden", "35,35", "--epochs", "100", "--lr", "3e-3", "--seed", "0"]


def sh(cmd: list[str]) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout)


def litert_equal(header: Path, tflite: Path, data: str) -> dict:
    """The header against the int8 TFLite file under LiteRT's reference kernels, on the test rows."""
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.runtimes.base import load_runtime

    x = load_dataset(data).x_test
    c_logits, c_labels = load_runtime(header).run(x)
    lite_logits, lite_labels = load_runtime(tflite, "litert", resolver="reference").run(x)
    return {
        "rows": int(len(x)),
        "logits_identical": bool(np.array_equal(c_logits, lite_logits)),
        "labels_identical": bool(np.array_equal(c_labels, lite_labels)),
    }


def c_header(model: Path, header: Path, args, pack_bits: bool) -> tuple[dict, dict]:
    """Steps 1 and 3 for one header: the verifier's report on the host (with the header's weight storage
    and bytes) and the Cortex-M check's."""
    from bnc_deploy.formats.c import read_c_metadata

    export = [str(BIN / "bnc-export"), str(model), "--data", args.data, "--json", "--format", "c"]
    host = sh(export + ["--name", args.name, "-o", str(header)] + (["--pack-bits"] if pack_bits else []))
    meta = read_c_metadata(header)
    host.update(weight_storage=meta.get("weight_storage"), weight_bytes=meta.get("weight_bytes"))
    mcu = sh([sys.executable, "-m", "bnc_deploy.targets.cortex_m_dnn", str(header), "--model", str(model)]
             + ["--data", args.data, "--json"])  # fmt: skip
    return host, mcu


def print_header(label: str, host: dict, mcu: dict) -> None:
    board = mcu["boards"][0]
    agree = host["n_verified"] - host["label_mismatches_all"]
    print(
        f"{label}, host (native): labels {agree}/{host['n_verified']} rows as the reference, "
        f"logits identical {host['logits_identical']}"
    )
    print(
        f"{label}, {board['board']} ({board['cpu']}): {board['passed']}/{board['n_rows']} rows as "
        f"{mcu['rows']['expected']}, {board.get('instructions', {}).get('predict_per_row')} instructions per predict"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="a DNN model file (.bnc); default: train the usps FC above")
    p.add_argument("--data", default="usps")
    p.add_argument("--activation", default="sign", choices=["sign", "relu"], help="of the model trained")
    p.add_argument("--workdir", default="runs/c_dnn_mcu")
    p.add_argument("--name", default="net", help="C prefix")
    p.add_argument("--pack-bits", action="store_true", help="also export and measure the packed header")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    model = Path(args.model) if args.model else work / f"fc_{args.activation}_b2.bnc"
    if not model.is_file():
        cmd = [str(BIN / "bnc-train"), "--data", args.data, *TRAIN, "--activation", args.activation]
        subprocess.run(cmd + ["-o", str(model), "--quiet"], check=True)
    header, tflite = work / f"{args.name}.h", work / f"{args.name}_micro.tflite"
    headers = {"int8": c_header(model, header, args, False)}
    if args.pack_bits:
        headers["packed"] = c_header(model, work / f"{args.name}_packed.h", args, True)
    host = headers["int8"][0]
    export = [str(BIN / "bnc-export"), str(model), "--data", args.data, "--json"]
    micro = sh(export + ["--format", "tflite", "--profile", "micro", "-o", str(tflite)])
    equal = None
    if not host["exact_expected"]:
        sh(export + ["--format", "tflite", "-o", str(work / f"{args.name}.tflite")])
        equal = litert_equal(header, work / f"{args.name}.tflite", args.data)
    from bnc_deploy.runtimes.base import load_runtime

    arena = (load_runtime(tflite, "litert").metadata.get("tflm") or {}).get("arena_bytes")
    ok = all(h["exact"] or not h["exact_expected"] for h, _ in headers.values())
    ok = ok and all(m["ok"] for _, m in headers.values())
    ok = ok and (host["exact"] or bool(equal and equal["logits_identical"] and equal["labels_identical"]))
    if args.json:
        reports = {key: {"host": h, "cortex_m": m} for key, (h, m) in headers.items()}
        print(json.dumps({**reports, "litert_reference": equal, "tflite_micro": micro, "arena": arena}, indent=2))
    print(f"model {model} ({host['size_bits']:,} bits, {host['n_parameters']:,} weights)")
    for key, (h, m) in headers.items():
        print_header(f"C header ({h.get('weight_storage', key)} weights)", h, m)
    if equal is not None:
        print(f"host (native) vs LiteRT reference kernels, {equal['rows']} test rows: {equal}")
    print("| | flash (bytes) | RAM (bytes) | instructions per predict |\n|---|---|---|---|")
    for h, m in headers.values():
        board = m["boards"][0]
        fp, instructions = board.get("model", {}), board.get("instructions", {})
        print(
            f"| C header, {h.get('weight_storage')} weights ({h.get('weight_bytes'):,} bytes; -Os, {board['cpu']}) | "
            f"{fp.get('flash_bytes'):,} (code {fp.get('code_bytes'):,} + tables {fp.get('table_bytes'):,}) | "
            f"{fp.get('ram_bytes'):,} (stack) | {instructions.get('predict_per_row')} |"
        )
    print(f"| TFLite Micro | {micro['file_bytes']:,} (flatbuffer; interpreter not counted) | {arena:,} (arena) | |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
