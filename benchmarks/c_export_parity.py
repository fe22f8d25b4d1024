"""C export parity on the paper's datasets: every test row, host compiler, and Cortex-M under QEMU.

For letter, satimage (fold 1) and usps, naive Bayes and Chow-Liu TAN, bit widths 1..8, a
maximum-likelihood model is trained with ``bnc-train --init ml --epochs 0`` (``--int-bits min(B, 3)``,
as ``benchmarks/export_parity.py``), exported with ``bnc-export --format c --data DATASET`` (the
verifier compiles the header with the host ``cc`` and compares labels and integer scores with
the NumPy reference on every test row plus 256 random rows; nothing is written unless they are
identical), with and without ``--pack-bits``. With ``--cortex-m``, the listed models are then
cross-compiled and run on all four emulated boards (Cortex-M0, M3, M4, M7) on every test row
(``python -m bnc_deploy.targets.cortex_m``), which also reports FLASH, RAM and instructions per
prediction (QEMU ``-icount``: instruction counts, not latency).

Usage::

    python benchmarks/c_export_parity.py [--datasets letter,satimage,usps] [--bits 1..8] [--workdir DIR]
                                         [--cortex-m letter:nb:3,usps:tan:4] [--json FILE]

Exit status 1 if any export is not exact or any Cortex-M row fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLD = {"letter": 1, "satimage": 1, "usps": 1}


def run(cmd: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-m", *cmd], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr.strip()}\n{done.stdout[-2000:]}")
    return json.loads(done.stdout)


def train(dataset: str, model: str, bits: int, workdir: Path) -> Path:
    out = workdir / f"{dataset}_{model}_b{bits}.bnc"
    if not out.exists():
        flags = ["--structure", "chow-liu"] if model == "tan" else []
        run(
            [
                "bnc_deploy.cli.train",
                "--data",
                dataset,
                "--fold",
                str(FOLD[dataset]),
                "--model",
                model,
                *flags,
                "--init",
                "ml",
                "--epochs",
                "0",
                "--bits",
                str(bits),
                "--int-bits",
                str(min(bits, 3)),
                "--quiet",
                "--json",
                "-o",
                str(out),
            ]
        )
    return out


def export_c(model: Path, dataset: str, pack: bool) -> dict:
    header = model.with_name(model.stem + ("_packed" if pack else "") + ".h")
    report = run(
        [
            "bnc_deploy.cli.export",
            str(model),
            "--format",
            "c",
            "-o",
            str(header),
            "--data",
            dataset,
            "--fold",
            str(FOLD[dataset]),
            "--json",
            *(["--pack-bits"] if pack else []),
        ]
    )
    return report


def table_bytes(header: str) -> int:
    """``BNC_TABLE_BYTES`` of a generated header (a C integer literal such as ``1434UL``)."""
    literal = Path(header).read_text().split("#define BNC_TABLE_BYTES", 1)[1].split()[0]
    return int(literal.rstrip("uUlL"))


def board_line(board: dict) -> str:
    """One board of a Cortex-M report: rows, the model's FLASH (code + tables) and RAM, instructions per call."""
    m, ins = board.get("model", {}), board["instructions"]
    return (
        f"{board['board']} ({board['cpu']}) {board['passed']:,}/{board['n_rows']:,} rows, invalid failed "
        f"{board['invalid_failed']}, FLASH {m.get('code_bytes', 0):,} + {m.get('table_bytes', 0):,} B, "
        f"RAM {m.get('ram_bytes')} B, instructions predict {ins.get('predict_per_row')} / "
        f"log_joint {ins.get('log_joint_per_row')}"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", default="letter,satimage,usps")
    p.add_argument("--bits", default="1,2,3,4,5,6,7,8")
    p.add_argument("--models", default="nb,tan")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument(
        "--cortex-m",
        default="letter:nb:3,usps:tan:4",
        help="comma-separated DATASET:MODEL:BITS run on the four QEMU boards ('' to skip)",
    )
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="c_parity_"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows, bad = [], 0
    print(
        f"{'dataset':<9}{'model':<6}{'B':>2}  {'rows':>6}  {'exact':>5}  {'packed':>6}  {'table B':>8}  "
        f"{'packed B':>8}  {'ceil(B|θ|/8)':>12}  {'test err %':>10}  seconds"
    )
    for dataset in args.datasets.split(","):
        for model in args.models.split(","):
            for bits in map(int, args.bits.split(",")):
                start = time.perf_counter()
                path = train(dataset, model, bits, workdir)
                plain, packed = export_c(path, dataset, False), export_c(path, dataset, True)
                table, plain_table = table_bytes(packed["output"]), table_bytes(plain["output"])
                bound = -(-plain["size_bits"] // 8)
                ok = bool(plain["exact"] and packed["exact"] and plain["n_rows"] == packed["n_rows"])
                bad += not ok
                row = {
                    "dataset": dataset,
                    "model": model,
                    "bits": bits,
                    "n_rows": plain["n_rows"],
                    "exact": plain["exact"],
                    "exact_packed": packed["exact"],
                    "table_bytes": plain_table,
                    "packed_table_bytes": table,
                    "ceil_bits_over_8": bound,
                    "test_error": 1.0 - plain["accuracy"],
                    "seconds": round(time.perf_counter() - start, 1),
                }
                rows.append(row)
                print(
                    f"{dataset:<9}{model:<6}{bits:>2}  {row['n_rows']:>6}  {str(row['exact']):>5}  "
                    f"{str(row['exact_packed']):>6}  {plain_table:>8,}  {table:>8,}  {bound:>12,}  "
                    f"{100 * row['test_error']:>10.2f}  {row['seconds']}",
                    flush=True,
                )
    targets = []
    for spec in filter(None, args.cortex_m.split(",")):
        dataset, model, bits = spec.split(":")
        path = train(dataset, model, int(bits), workdir)
        for pack in (False, True):
            report = run(
                [
                    "bnc_deploy.targets.cortex_m",
                    str(path),
                    "--board",
                    "all",
                    "--data",
                    dataset,
                    "--fold",
                    str(FOLD[dataset]),
                    "--json",
                    *(["--pack-bits"] if pack else []),
                ]
            )
            targets.append({"dataset": dataset, "model": model, "bits": int(bits), "pack_bits": pack, "report": report})
            for board in report["boards"]:
                print(
                    f"cortex-m {dataset} {model} {bits}-bit{' packed' if pack else ''}: {board_line(board)}", flush=True
                )
    if args.json:
        args.json.write_text(json.dumps({"host": rows, "cortex_m": targets}, indent=1))
    print(f"{len(rows) - bad} of {len(rows)} models exact with and without --pack-bits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
