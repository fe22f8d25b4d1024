"""Configuration-epochs per second of the batched trainer against the per-run trainer, in one run.

For each model (letter NB and TAN by default) and each M (configurations trained at once), M
configurations of the paper's grid (B = 3, B_I in 1..3, lr in {3e-2, 3e-3}, (λ, γ) drawn from the
paper's distributions; one seed, so one data order, as in the paper's grids) are trained for
``--epochs`` epochs by ``train_bnc_batched`` on each device; the per-run trainer (``train_bnc``,
what ``bnc-train`` runs) trains one of them in the same process. Both measure validation and test
error as they would in a sweep: the per-run trainer every epoch (its history), the batched one at
the last epoch.

    python benchmarks/bench_sweep.py [--data letter] [--models nb,tan] [--sizes 1,16,64,256]
                                     [--epochs 3] [--devices cpu,cuda] [--threads N] [--json OUT]

Acceptance (issue 12): on 2 cores, letter NB at M = 64 >= 3x the per-run trainer; on a GPU
>= 10,000 configuration-epochs per second for letter NB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
import torch

from bnc_deploy.datasets import load_dataset
from bnc_deploy.train.bnc import TrainConfig, train_bnc
from bnc_deploy.train.bnc_batched import describe_device, train_bnc_batched


def grid_configs(model: str, m: int, epochs: int, seed: int = 0, distinct_seeds: bool = False) -> list[TrainConfig]:
    rng = np.random.default_rng(seed)
    return [
        TrainConfig(
            model=model,
            bits=3,
            int_bits=int(rng.integers(1, 4)),
            epochs=epochs,
            lr=float(rng.choice([3e-2, 3e-3])),
            hybrid_lambda=float(10 ** rng.uniform(1, 3)),
            hybrid_gamma=float(10 ** rng.uniform(-1, 2)),
            seed=i if distinct_seeds else 0,
            progress=False,
        )
        for i in range(m)
    ]


def per_run_rate(dataset, model: str, epochs: int) -> float:
    """Configuration-epochs per second of train_bnc: epochs over the summed epoch times of its history."""
    config = grid_configs(model, 1, epochs)[0]
    result = train_bnc(dataset, config)
    return epochs / sum(result.history["seconds"])


def batched_rate(dataset, model: str, m: int, epochs: int, device: str, distinct_seeds: bool) -> float:
    configs = grid_configs(model, m, epochs, distinct_seeds=distinct_seeds)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    train_bnc_batched(dataset, configs, device=device, build=False, checkpoints=[epochs])
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return m * epochs / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="letter")
    parser.add_argument("--models", default="nb,tan")
    parser.add_argument("--sizes", default="1,16,64,256", help="configurations at once (M)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--devices", default="cpu,cuda", help="devices to run (cuda is skipped without a GPU)")
    parser.add_argument("--validation", type=float, default=0.2)
    parser.add_argument("--distinct-seeds", action="store_true", help="every configuration its own data order")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's, = cores)")
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the results as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dataset = load_dataset(args.data, validation_fraction=args.validation, seed=0)
    devices = [d for d in args.devices.split(",") if d == "cpu" or torch.cuda.is_available()]
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"{args.data}: {len(dataset.y_train)} training rows (validation {args.validation}), batch 100, "
        f"{args.epochs} epochs; torch {torch.__version__}; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads; load average {os.getloadavg()[0]:.2f}; "
        f"devices: {', '.join(describe_device(d) for d in devices)}"
    )
    print(f"{'model':<6}{'device':<8}{'M':>6}{'cfg-epochs/s':>14}{'per-run':>10}{'ratio':>9}")
    results = []
    for model in args.models.split(","):
        baseline = per_run_rate(dataset, model, args.epochs)
        for device in devices:
            batched_rate(dataset, model, 2, 1, device, args.distinct_seeds)  # warm-up (kernels, allocator)
            for m in sizes:
                rate = batched_rate(dataset, model, m, args.epochs, device, args.distinct_seeds)
                results.append(
                    {
                        "model": model,
                        "device": describe_device(device),
                        "M": m,
                        "rate": rate,
                        "per_run_rate": baseline,
                        "ratio": rate / baseline,
                    }
                )
                print(f"{model:<6}{device:<8}{m:>6}{rate:>14,.1f}{baseline:>10.1f}{rate / baseline:>8.1f}x", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "data": args.data,
                    "epochs": args.epochs,
                    "torch": torch.__version__,
                    "threads": torch.get_num_threads(),
                    "results": results,
                },
                f,
                indent=2,
            )
    print("targets: 2 cores, letter NB, M = 64: >= 3x per-run; GPU letter NB: >= 10,000 configuration-epochs/s")


if __name__ == "__main__":
    main()
