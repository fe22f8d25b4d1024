"""How closely the batched trainers on a GPU agree with the single run on the CPU.

On the CPU a configuration trained batched is the single run bit for bit (``tests/test_dnn_batched.py``,
``tests/test_structure_batched.py``). On a GPU the matrix products, convolutions and reductions run
other kernels, so the bits differ; this script trains the same configurations both ways and
reports, per kind, the final test error of each and the largest difference of a latent weight
(FC and CNN: ReLU nets, whose only randomness is the seeded initialisation and data order, shared
by both devices; stochastic-sign nets draw their signs from the GPU's generator there). NB and TAN
(3-bit, hybrid loss) run on the GPU as a sweep runs them, steps replayed as CUDA graphs.

    python benchmarks/gpu_agreement.py [--epochs 20] [--kinds nb,tan,fc,cnn,structure] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import torch

from bnc_deploy.datasets import load_dataset
from bnc_deploy.train.dnn import DNNConfig
from bnc_deploy.train.dnn_batched import train_dnn_batched


def dnn_configs(kind: str, epochs: int) -> tuple[object, list]:
    if kind == "fc":
        ds = load_dataset("letter", seed=0, validation_fraction=0.2)
        base = DNNConfig("fc", layers=3, weight_bits=2, batch_norm=True, match_bits=2 * 26 * 297, epochs=epochs)
    else:
        ds = load_dataset("usps", seed=0, validation_fraction=0.2)
        base = DNNConfig("cnn", layers=2, weight_bits=2, batch_norm=True, match_bits=8650, epochs=epochs)
    return ds, [replace(base, lr=lr, progress=False) for lr in (3e-2, 3e-3)]


def dnn_agreement(kind: str, epochs: int) -> list[dict]:
    ds, configs = dnn_configs(kind, epochs)
    cpu = [train_dnn_batched(ds, [replace(c)], build=False)[0] for c in configs]  # the single runs
    gpu = train_dnn_batched(ds, [replace(c) for c in configs], device="cuda", build=False)
    out = []
    for c, a, b in zip(configs, cpu, gpu):
        diff = max(float((wa - wb).abs().max()) for wa, wb in zip(a.state["weights"], b.state["weights"]))
        out.append(
            {
                "kind": kind,
                "data": ds.name,
                "lr": c.lr,
                "epochs": epochs,
                "widths": list(a.config.sizing["widths"]),
                "cpu_test_error": a.history["test_error"][-1],
                "gpu_test_error": b.history["test_error"][-1],
                "max_latent_weight_difference": diff,
            }
        )
    return out


def bn_agreement(model: str, epochs: int) -> list[dict]:
    """NB and TAN (Chow-Liu structure), 3 bits, the hybrid loss: the CPU single run against the GPU."""
    from bnc_deploy.train.bnc import TrainConfig
    from bnc_deploy.train.bnc_batched import train_bnc_batched

    ds = load_dataset("letter", seed=0, validation_fraction=0.2)
    base = TrainConfig(model=model, bits=3, int_bits=3, epochs=epochs, progress=False)
    configs = [replace(base, lr=lr, hybrid_lambda=110.4, hybrid_gamma=17.97, hybrid_eta=10.0) for lr in (3e-2, 3e-3)]
    cpu = [train_bnc_batched(ds, [c], build=False)[0] for c in configs]
    gpu = train_bnc_batched(ds, configs, device="cuda", build=False)
    return [
        {
            "kind": model,
            "data": ds.name,
            "lr": c.lr,
            "epochs": epochs,
            "cpu_test_error": a.history["test_error"][-1],
            "gpu_test_error": b.history["test_error"][-1],
            "max_latent_weight_difference": float(abs(a.rho - b.rho).max()),
        }
        for c, a, b in zip(configs, cpu, gpu)
    ]


def structure_agreement(epochs: int) -> list[dict]:
    try:
        from bnc_deploy.train.structure_batched import train_learned_tan_batched
    except ImportError as exc:
        return [{"kind": "structure", "skipped": f"batched structure learning unavailable: {exc}"}]
    from bnc_deploy.sweep.paper import preset
    from bnc_deploy.sweep.tasks import bnc_config, learn_config
    from bnc_deploy.train.structure_learning import StructureLearningConfig

    ds = load_dataset("letter", seed=0, validation_fraction=0.2)
    fixed = dict(preset("icpr2020-structure", data="letter").fixed)
    out = []
    for lam in (1e-5, 1e-2):
        record = {**fixed, "data": "letter", "model": "tan", "structure": "learn", "epochs": epochs, "seed": 0}
        record.update(size_penalty=lam, lr=3e-3, bits=None, int_bits=None)
        record.setdefault("batch_size", 100)
        pair = (bnc_config({**record, "structure": "chow-liu"}), learn_config(record, StructureLearningConfig))
        (a,) = train_learned_tan_batched(ds, [pair], device="cpu")
        (b,) = train_learned_tan_batched(ds, [pair], device="cuda")
        ha = a.result.artifact.metadata["structure_learning"]["history"]
        hb = b.result.artifact.metadata["structure_learning"]["history"]
        out.append(
            {
                "kind": "structure",
                "size_penalty": lam,
                "epochs": epochs,
                "cpu_test_error": ha["test_error"][-1],
                "gpu_test_error": hb["test_error"][-1],
                "cpu_parameters": ha["n_parameters"][-1],
                "gpu_parameters": hb["n_parameters"][-1],
                "same_parents": a.result.artifact.parents.tolist() == b.result.artifact.parents.tolist(),
            }
        )
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--kinds", default="nb,tan,fc,cnn,structure")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("gpu_agreement: torch sees no CUDA GPU")
    rows: list[dict] = []
    for kind in args.kinds.split(","):
        if kind == "structure":
            rows += structure_agreement(args.epochs)
        elif kind in ("nb", "tan"):
            rows += bn_agreement(kind, args.epochs)
        else:
            rows += dnn_agreement(kind, args.epochs)
        print(json.dumps(rows[-2:]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
