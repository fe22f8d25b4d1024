"""Time differentiable TAN structure learning: one letter run and one usps run (1 torch thread).

    python benchmarks/bench_structure_learning.py [--letter-epochs 500] [--usps-epochs 50] [--size-penalty 1e-7]

Prints seconds per epoch, total seconds and the learned model's test error and size for each.
The issue's target: a 500-epoch letter run in <= 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from bnc_deploy.datasets import load_dataset
from bnc_deploy.train.bnc import TrainConfig
from bnc_deploy.train.structure_learning import StructureLearningConfig, naive_bayes_parameters, train_learned_tan


def bench(name: str, epochs: int, size_penalty: float, init: str, batch_size: int = 100) -> dict:
    dataset = load_dataset(name)
    config = TrainConfig(
        model="tan", structure="learn", epochs=epochs, batch_size=batch_size, init=init, progress=False
    )
    started = time.perf_counter()
    result = train_learned_tan(dataset, config, StructureLearningConfig(size_penalty=size_penalty))
    total = time.perf_counter() - started
    artifact = result.artifact
    history = artifact.metadata["structure_learning"]["history"]
    return {
        "data": name,
        "epochs": epochs,
        "size_penalty": size_penalty,
        "init": init,
        "seconds_per_epoch": round(sum(history["seconds"]) / max(epochs, 1), 3),
        "total_seconds": round(total, 1),
        "test_error": artifact.metadata["errors"]["test"],
        "n_parameters": artifact.n_parameters,
        "nb_multiple": round(
            artifact.n_parameters / naive_bayes_parameters(dataset.cardinalities, dataset.n_classes), 3
        ),
        "n_with_parent": int((artifact.parents >= 0).sum()),
        "n_features": dataset.n_features,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--letter-epochs", type=int, default=500)
    p.add_argument("--usps-epochs", type=int, default=50)
    p.add_argument("--size-penalty", type=float, default=1e-7)
    p.add_argument("--init", choices=("uniform", "ml"), default="uniform")
    p.add_argument("--skip", choices=("letter", "usps"), action="append", default=[])
    args = p.parse_args()
    torch.set_num_threads(1)
    for name, epochs in (("letter", args.letter_epochs), ("usps", args.usps_epochs)):
        if name not in args.skip and epochs > 0:
            print(json.dumps(bench(name, epochs, args.size_penalty, args.init)), flush=True)


if __name__ == "__main__":
    main()
