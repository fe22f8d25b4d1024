"""A mixed-width DNN bucket as one padded program against the programs ``width_programs`` cuts it
into, in one run.

Where widths mix (``train_dnn_batched(mix_widths=True)``, a GPU's default), a bucket of nets of one
shape pads every configuration to its widest net. The paper's FC grid puts nets up to 80x apart in size
in one bucket (8 budgets x 8 weight bit widths), so ``split_widths`` (the default) cuts the bucket
by size. This times both on the paper protocol's letter FC program (``bnc-reproduce --protocol
paper``: one depth and batch-norm setting, budgets of the NB at B = 1..8, weight bits 1..8, lr0
3e-2/3e-3/3e-4, ``--seeds`` seeds on one data split, ReLU):

* ``padded``: ``split_widths=False``, the bucket as one program padded to its widest net;
* ``cut``: ``split_widths=True``, the programs ``width_programs`` chooses.

Each is trained for ``--epochs`` epochs, ``--repeats`` rounds in turn; the rate is configuration-epochs
per second over the epochs after each program's first (``on_epoch`` time stamps: capture and setup
excluded), the median of the rounds. On the CPU the widths mix only through this option (a CPU
sweep keeps the bit-exact buckets of one width each), so the CPU row is a model of the GPU's
padding, not a CPU setting.

    python benchmarks/bench_padding.py [--device cpu|cuda] [--layers 2] [--batch-norm false]
                                       [--seeds 1] [--epochs 3] [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parent
if str(BENCHMARKS) not in sys.path:  # run as a script or loaded by a test
    sys.path.insert(0, str(BENCHMARKS))

from bench_sweep import steady_rate as stamps_rate

from bnc_deploy.datasets import load_dataset
from bnc_deploy.sweep import paper
from bnc_deploy.sweep.grid import expand
from bnc_deploy.sweep.records import complete, parse_values
from bnc_deploy.sweep.tasks import dnn_config
from bnc_deploy.train.dnn_batched import train_dnn_batched


def program_configs(layers: int, batch_norm: bool, seeds: int, epochs: int) -> list:
    """The letter paper-protocol FC program of one depth and batch-norm setting."""
    (relu,) = [s for s in paper.fc_sweeps("letter", "paper") if s.name == "fc-relu"]
    records = [complete(r) for r in expand(relu.spec)]
    chosen = [r for r in records if r["layers"] == layers and r["batch_norm"] == batch_norm and r["seed"] < seeds]
    return [dnn_config({**r, "epochs": epochs}) for r in chosen]


def steady_rate(dataset, configs: list, device: str, split: bool) -> tuple[float, int]:
    """(configuration-epochs per second after each chunk's first epoch, chunks run: the programs,
    each split further where it outgrows the device's memory or, on the CPU, its caches)."""
    stamps: list[tuple[int, int, float]] = []

    def on_epoch(epoch: int, active: int) -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        stamps.append((epoch, active, time.perf_counter()))

    epochs = configs[0].epochs
    train_dnn_batched(
        dataset, configs, device=device, build=False, checkpoints=[epochs], mix_widths=True,
        split_widths=split, on_epoch=on_epoch,
    )  # fmt: skip
    rate = stamps_rate(stamps)
    assert rate is not None, "every chunk trains at least 2 epochs (--epochs 2 or more)"
    return rate, sum(1 for epoch, _, _ in stamps if epoch == 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch-norm", default="false")
    p.add_argument("--seeds", type=int, default=1, help="seeds of the program (the paper: 5)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"skipped: --device {args.device}: torch sees no CUDA GPU")
        return 0
    (batch_norm,) = parse_values(args.batch_norm, "batch_norm")
    dataset = load_dataset("letter", validation_fraction=0.2, seed=paper.PAPER_SPLIT_SEED)
    configs = program_configs(args.layers, batch_norm, args.seeds, args.epochs)
    rounds: dict[str, list[float]] = {"padded": [], "cut": []}
    programs = {}
    for _ in range(args.repeats):
        for name, split in (("padded", False), ("cut", True)):
            rate, programs[name] = steady_rate(dataset, configs, args.device, split)
            rounds[name].append(rate)
    rates = {name: statistics.median(values) for name, values in rounds.items()}
    threads = torch.get_num_threads()
    print(f"letter FC program: L = {args.layers}, batch norm {batch_norm}, {len(configs)} configurations, "
          f"{args.epochs} epochs, {args.device}, torch {torch.__version__}, {threads} threads")  # fmt: skip
    print(f"{'':8}{'chunks':>9}{'cfg-epochs/s':>14}  rounds")
    for name in rates:
        print(f"{name:8}{programs[name]:>9}{rates[name]:>14,.1f}  {', '.join(f'{r:,.1f}' for r in rounds[name])}")
    print(f"cut / padded: {rates['cut'] / rates['padded']:.2f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "device": args.device,
                    "torch": torch.__version__,
                    "layers": args.layers,
                    "batch_norm": batch_norm,
                    "configurations": len(configs),
                    "epochs": args.epochs,
                    "chunks": programs,
                    "rates": rates,
                    "rounds": rounds,
                    "speedup": rates["cut"] / rates["padded"],
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
