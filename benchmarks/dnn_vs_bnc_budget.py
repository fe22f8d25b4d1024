"""Quantized DNNs vs the naive Bayes classifier at the NB's memory budget (the paper's Sec. VI-B).

Trains, with ``bnc-train`` subprocesses (``--jobs`` at a time):

* the ``--nb-bits``-bit naive Bayes (hybrid loss, the issue's letter settings) -> its size in bits
  is the budget ``T`` (usps, 3 bits: 8,650 x 3 = 25,950 bits);
* for every ``--models`` entry (``fc-relu``, ``fc-sign``, ``cnn-relu``, ``cnn-sign``) and every
  learning rate of ``--lrs`` (the paper's grid), a DNN matched to ``T`` with ``--match-bits``:
  FC ``L = --fc-layers``, CNN with ``--cnn-layers`` convolutions, ``B = --weight-bits``, batch norm;

selects each model's learning rate by validation error (``--validation`` of the training part)
and prints a table: test error, achieved bits and ops next to the target and the NB. Every run's
JSON lands in ``--workdir``; existing JSON files are reused (delete them to rerun).

    python benchmarks/dnn_vs_bnc_budget.py --data usps --epochs 100 --workdir runs/usps_budget
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BIN = Path(sys.executable).parent


def run(cmd: list[str], out_json: Path) -> dict:
    if out_json.is_file():
        return json.loads(out_json.read_text())
    proc = subprocess.run(cmd + ["--json"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    out_json.write_text(proc.stdout)
    return json.loads(proc.stdout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="usps")
    p.add_argument("--workdir", default="runs/dnn_budget")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--nb-epochs", type=int, default=500)
    p.add_argument("--nb-bits", type=int, default=3)
    p.add_argument("--weight-bits", type=int, default=2)
    p.add_argument("--fc-layers", type=int, default=3)
    p.add_argument("--cnn-layers", type=int, default=2)
    p.add_argument("--models", default="fc-relu,cnn-relu,fc-sign,cnn-sign")
    p.add_argument("--lrs", default="3e-2,3e-3,3e-4")
    p.add_argument("--validation", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    train = str(BIN / "bnc-train")
    common = ["--data", args.data, "--seed", str(args.seed), "--quiet", "--threads", "1"]

    nb = run(
        [
            train,
            *common,
            "--model",
            "nb",
            "--bits",
            str(args.nb_bits),
            "--epochs",
            str(args.nb_epochs),
            "--validation",
            str(args.validation),
            "-o",
            str(work / "nb.bnc"),
        ],
        work / "nb.json",
    )
    budget = nb["size_bits"]
    print(
        f"budget: {args.nb_bits}-bit NB on {args.data}: {nb['n_parameters']:,} parameters x {args.nb_bits} bits "
        f"= {budget:,} bits, {nb['n_ops']:,} ops, test error {100 * nb['test_error']:.2f} %",
        flush=True,
    )

    jobs = []
    for model in args.models.split(","):
        arch, act = model.split("-")
        for lr in args.lrs.split(","):
            name = f"{model}_lr{lr}"
            cmd = [
                train,
                *common,
                "--model",
                arch,
                "--activation",
                act,
                "--batch-norm",
                "--weight-bits",
                str(args.weight_bits),
                "--layers",
                str(args.fc_layers if arch == "fc" else args.cnn_layers),
                "--match-bits",
                str(budget),
                "--epochs",
                str(args.epochs),
                "--lr",
                lr,
                "--validation",
                str(args.validation),
                "-o",
                str(work / f"{name}.bnc"),
            ]
            jobs.append((model, lr, cmd, work / f"{name}.json"))
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda j: (j[0], j[1], run(j[2], j[3])), jobs))

    print(f"\n| model | lr (by val) | widths | bits (target {budget:,}) | ops | val error | test error |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| NB {args.nb_bits}-bit | 3e-3 | - | {budget:,} | {nb['n_ops']:,} | "
        f"{100 * nb['val_error']:.2f} % | {100 * nb['test_error']:.2f} % |"
    )
    for model in args.models.split(","):
        runs = [r for m, _, r in results if m == model]
        best = min(runs, key=lambda r: r["val_error"])
        others = ", ".join(f"{r['lr']:g}: {100 * r['test_error']:.2f}" for r in runs)
        print(
            f"| {model} L={best['layers']} B={best['weight_bits']} | {best['lr']:g} | "
            f"{','.join(map(str, best['hidden_widths']))} | {best['achieved_bits']:,} | {best['achieved_ops']:,} | "
            f"{100 * best['val_error']:.2f} % | {100 * best['test_error']:.2f} % (all lrs: {others}) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
