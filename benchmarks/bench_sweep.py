"""Configuration-epochs per second of the batched trainers against the single-run trainers, in one run.

For each model kind of ``--models`` and each M of ``--sizes`` (configurations trained at once), M
configurations of the paper's grid (one seed, so one data order, as in the paper's grids; every
configuration its own with ``--distinct-seeds``) are trained for ``--epochs`` epochs by the batched
trainer on each device of ``--devices``; the single-run trainer trains the first of them once, on
the CPU, in the same process. The kinds:

* ``nb``, ``tan`` (``--data``, letter): BN classifiers, B = 3, B_I in 1..3, lr in {3e-2, 3e-3},
  (λ, γ) drawn from the paper's distributions; ``train_bnc_batched`` against ``train_bnc`` (what
  ``bnc-train`` runs).
* ``fc`` (``--data``): FC nets, 2 weight layers, 2-bit weights, ReLU, batch norm, sized to the 2-bit
  NB budget of the data (``match_bits = 2 * C * (1 + sum |X_i|)``); lr cycles over the paper's
  {3e-2, 3e-3, 3e-4}, so every configuration has the same widths (one program).
  ``train_dnn_batched`` against ``train_dnn``.
* ``cnn`` (``--cnn-data``, usps): CNNs, 1 convolution layer, 2-bit weights, ReLU, batch norm, sized
  to 8 times the NB's operations (``match_ops = 8 * D * C``); lr as for ``fc``.
  ``train_dnn_batched`` against ``train_dnn``.
* ``structure`` (``--data``): TAN structure learning with the paper's settings for the data (preset
  ``icpr2020-structure``: hybrid λ, γ, η, the authors' ordering and candidate sets, structure lr,
  temperatures, the paper's batch size; float tables): λ_MS over logspace(-7, 1, M), lr
  alternating 3e-2, 3e-3. ``train_learned_tan_batched`` (``bnc_deploy.train.structure_batched``)
  against ``train_learned_tan``. Where that module is absent or fails to import, or the paper's
  settings are not found, the kind is reported as ``skipped: <reason>`` (table and JSON).

How each rate is measured (the same way for every kind):

* single run: epochs over the sum of the per-epoch seconds of its history (setup and model file
  excluded); it measures its validation and test error every epoch, as it always does (the
  structure-learning history times each epoch before its test evaluation, so for that kind the
  single run's evaluation is not counted: a rate slightly in the single run's favour). For fc,
  cnn and structure a one-epoch single run first warms up; nb and tan are measured cold, as
  this benchmark always measured them.
* batched: M * epochs over the wall time of one call (CUDA-synchronized before and after), as a
  sweep runs it: ``build=False`` (no model files), validation and test error at the last epoch only
  (``checkpoints=[epochs]``). The call includes its setup (encoding, stacking, candidate sets),
  which the single run's figure does not, so the speed-up is a conservative one. One warm-up call
  (M = 2, one epoch) per kind and device precedes the measurements. ``--timing steady`` measures
  both trainers on the epochs after the first instead (batched: ``on_epoch`` time stamps, setup
  excluded; where the trainer splits the M configurations into chunks that run one after another,
  each chunk's epochs after its first, counting the configurations that train in each), the rate a
  sweep of hundreds of epochs runs at.

    python benchmarks/bench_sweep.py [--data letter] [--cnn-data usps] [--models nb,tan,fc,cnn,structure]
                                     [--sizes 1,16,64,256] [--epochs 3] [--devices cpu,cuda]
                                     [--distinct-seeds] [--threads N] [--json OUT] [--timing call|steady]
                                     [--repeats N]

``--repeats N`` takes N rounds in turn (each: the single run, then every batched run) and prints the
medians, with the range of the rounds' ratios: on a shared machine the rates drift from run to run,
and runs taken in turn drift alike.

A device of ``--devices`` that torch does not see (cuda without a GPU) is skipped with a message.

JSON (``--json``): ``data``, ``epochs``, ``torch``, ``threads``, ``results`` (one entry per kind,
device and M: ``model``, ``device``, ``M``, ``rate``, ``per_run_rate``, ``ratio`` = the speed-up
over the single run, and ``data``, ``seconds`` of the batched call; with ``--repeats``, medians,
and every round's ``rates`` and ``per_run_rates``), ``datasets`` (kind -> data),
``skipped`` (``model``, ``device``, ``status`` = "skipped: <reason>"), ``timing``, ``targets``.

Acceptance (issue 12): on 2 cores, letter NB at M = 64 >= 3x the per-run trainer; on a GPU
>= 10,000 configuration-epochs per second for letter NB.

Acceptance targets (issue 30), targets and not results: on 2 cores, FC letter and structure learning
letter >= 3x the single run at M = 16, CNN usps >= 2x the single run at M = 16; on a GPU, a forecast
of <= 3 h for the letter paper protocol.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import time

import numpy as np
import torch

from bnc_deploy.datasets import load_dataset
from bnc_deploy.train.bnc import TrainConfig, train_bnc
from bnc_deploy.train.bnc_batched import describe_device, train_bnc_batched

#: The kinds ``--models`` may name.
KINDS = ("nb", "tan", "fc", "cnn", "structure")
#: The paper's DNN learning rates (cycled over the M configurations).
DNN_LRS = (3e-2, 3e-3, 3e-4)
#: The paper's structure-learning learning rates (alternating over the M configurations).
STRUCTURE_LRS = (3e-2, 3e-3)
#: CNN operations budget: this many times the NB's D * C operations.
CNN_OPS_FACTOR = 8
#: FC memory budget: the NB's parameters at this many bits.
FC_BUDGET_BITS = 2
TIMING = {
    "per_run": "epochs / sum of the single run's per-epoch history seconds (CPU; evaluation every epoch)",
    "batched": "M * epochs / wall time of one batched call (CUDA-synchronized; build=False; "
    "evaluation at the last epoch only; setup included)",
}
#: ``--timing steady``: the epochs after the first, for both trainers (what a long sweep runs at).
STEADY_TIMING = {
    "per_run": "(epochs - 1) / sum of the single run's per-epoch history seconds after the first epoch "
    "(CPU; evaluation every epoch)",
    "batched": "configuration-epochs after each chunk's first epoch / their time (on_epoch stamps, "
    "CUDA-synchronized; build=False; evaluation at the last epoch only; setup excluded)",
}
TARGETS = {
    "issue 12": "2 cores, letter NB, M = 64: >= 3x per-run; GPU letter NB: >= 10,000 configuration-epochs/s",
    "issue 30": "2 cores, M = 16: FC letter and structure learning letter >= 3x the single run, "
    "CNN usps >= 2x; GPU: forecast <= 3 h for the letter paper protocol",
}


# -- configurations -------------------------------------------------------------------------------
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


def dnn_configs(kind: str, dataset, m: int, epochs: int, distinct_seeds: bool = False) -> list:
    """M FC (``kind`` "fc") or CNN ("cnn") configurations of one architecture, lr cycling over the paper's."""
    from bnc_deploy.sweep.paper import paper_batch_size
    from bnc_deploy.train.dnn import DNNConfig
    from bnc_deploy.train.structure_learning import naive_bayes_parameters

    if kind == "fc":
        budget = {"match_bits": FC_BUDGET_BITS * naive_bayes_parameters(dataset.cardinalities, dataset.n_classes)}
        layers = 2
    else:
        budget = {"match_ops": CNN_OPS_FACTOR * dataset.n_features * dataset.n_classes}
        layers = 1
    batch = paper_batch_size(dataset.name)
    return [
        DNNConfig(
            kind,
            layers=layers,
            weight_bits=2,
            activation="relu",
            batch_norm=True,
            **budget,
            epochs=epochs,
            lr=DNN_LRS[i % len(DNN_LRS)],
            seed=i if distinct_seeds else 0,
            progress=False,
            **({"batch_size": batch} if batch else {}),
        )
        for i in range(m)
    ]


def structure_settings(data: str) -> dict:
    """The paper's structure-learning settings for ``data`` (preset ``icpr2020-structure``, the
    paper's batch size); ConfigError where the paper's structures folder or the dataset's entry is missing."""
    from bnc_deploy.sweep import paper

    fixed = dict(paper.preset("icpr2020-structure", data=paper.dataset_name(data)).fixed)
    if paper.paper_batch_size(data):
        fixed["batch_size"] = paper.paper_batch_size(data)
    return fixed


def structure_configs(settings: dict, m: int, epochs: int, distinct_seeds: bool = False) -> list[tuple]:
    """M ``(TrainConfig, StructureLearningConfig)`` pairs: λ_MS over logspace(-7, 1, M), lr alternating."""
    from bnc_deploy.sweep.tasks import bnc_config, learn_config
    from bnc_deploy.train.structure_learning import StructureLearningConfig

    penalties = np.logspace(-7, 1, m)
    pairs = []
    for i in range(m):
        record = {
            **settings,
            "structure": "chow-liu",  # as the sweep's single run: the structure is learned, not given
            "size_penalty": float(penalties[i]),
            "lr": STRUCTURE_LRS[i % len(STRUCTURE_LRS)],
            "epochs": epochs,
            "seed": i if distinct_seeds else 0,
        }
        pairs.append((bnc_config(record), learn_config(record, StructureLearningConfig)))
    return pairs


def structure_trainer():
    """``(train_learned_tan_batched, None)``, or ``(None, reason)`` where the module is absent or fails."""
    try:
        module = importlib.import_module("bnc_deploy.train.structure_batched")
        return module.train_learned_tan_batched, None
    except Exception as exc:  # absent, half-written or broken: the kind is unavailable, the run goes on
        return None, f"bnc_deploy.train.structure_batched unavailable ({type(exc).__name__}: {exc})"


# -- rates ----------------------------------------------------------------------------------------
def per_run_rate(dataset, model: str, epochs: int, settings: dict | None = None, steady: bool = False) -> float:
    """Configuration-epochs per second of the single-run trainer: epochs over the summed epoch times of its history."""
    if model in ("fc", "cnn"):
        from bnc_deploy.train.dnn import train_dnn

        seconds = train_dnn(dataset, dnn_configs(model, dataset, 1, epochs)[0]).history["seconds"]
    elif model == "structure":
        from bnc_deploy.train.structure_learning import train_learned_tan

        config, sl = structure_configs(settings or {}, 1, epochs)[0]
        result = train_learned_tan(dataset, config, sl)
        seconds = result.artifact.metadata["structure_learning"]["history"]["seconds"]
    else:
        config = grid_configs(model, 1, epochs)[0]
        seconds = train_bnc(dataset, config).history["seconds"]
    if steady and len(seconds) > 1:
        return (len(seconds) - 1) / sum(seconds[1:])
    return epochs / sum(seconds)


def _timed(device: str, call) -> float:
    """Wall seconds of ``call()``, with the GPU's queue drained before and after."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    call()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - started


def batched_seconds(
    dataset,
    model: str,
    m: int,
    epochs: int,
    device: str,
    distinct_seeds: bool,
    settings: dict | None = None,
    stamps: list | None = None,
    gpu_steps: str = "graphs",
) -> float:
    """Wall seconds of one batched call training M configurations of ``model`` as a sweep does
    (``stamps``: filled with (epoch, configurations still training, time) at the end of each
    epoch of each chunk, CUDA-synchronized; ``gpu_steps``: a key of :data:`GPU_STEPS`)."""
    common: dict = {"device": device, "build": False, "checkpoints": [epochs]}
    graphs = GPU_STEPS[gpu_steps]
    if stamps is not None:

        def on_epoch(epoch: int, active: int) -> None:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            stamps.append((epoch, active, time.perf_counter()))

        common["on_epoch"] = on_epoch
    if model in ("fc", "cnn"):
        from bnc_deploy.train.dnn_batched import train_dnn_batched

        configs = dnn_configs(model, dataset, m, epochs, distinct_seeds)
        return _timed(device, lambda: train_dnn_batched(dataset, configs, cuda_graphs=graphs, **common))
    if model == "structure":
        trainer, reason = structure_trainer()
        if trainer is None:
            raise RuntimeError(reason)
        pairs = structure_configs(settings or {}, m, epochs, distinct_seeds)
        return _timed(device, lambda: trainer(dataset, pairs, **common))
    configs = grid_configs(model, m, epochs, distinct_seeds=distinct_seeds)
    return _timed(device, lambda: train_bnc_batched(dataset, configs, cuda_graphs=graphs, **common))


def steady_rate(stamps: list) -> float | None:
    """Configuration-epochs per second over each chunk's epochs after its first (``stamps`` of
    :func:`batched_seconds`; a chunk starts again at epoch 1); None without two epochs of a chunk."""
    work = seconds = 0.0
    for (before, active, started), (epoch, _, ended) in zip(stamps, stamps[1:]):
        if epoch > before:  # the same chunk's next epoch, trained by the configurations left at ``before``
            work, seconds = work + active, seconds + ended - started
    return work / seconds if seconds else None


def batched_rate(
    dataset, model: str, m: int, epochs: int, device: str, distinct_seeds: bool, settings: dict | None = None
) -> float:
    return m * epochs / batched_seconds(dataset, model, m, epochs, device, distinct_seeds, settings)


# -- the run --------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="letter", help="data of nb, tan, fc and structure")
    parser.add_argument("--cnn-data", default="usps", help="data of cnn (an image dataset)")
    parser.add_argument("--models", default="nb,tan", help=f"kinds, comma-separated: {','.join(KINDS)}")
    parser.add_argument("--sizes", default="1,16,64,256", help="configurations at once (M)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--devices", default="cpu,cuda", help="devices to run (cuda is skipped without a GPU)")
    parser.add_argument("--validation", type=float, default=0.2)
    parser.add_argument("--distinct-seeds", action="store_true", help="every configuration its own data order")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's, = cores)")
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the results as JSON")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds of the single run and every batched run, taken in turn; the table gives medians (on a "
        "shared machine the rates drift between runs, and in turn they drift alike)",
    )
    parser.add_argument(
        "--timing",
        choices=("call", "steady"),
        default="call",
        help="call: whole calls, setup included (default); steady: the epochs after the first, for both trainers",
    )
    parser.add_argument(
        "--gpu-steps",
        default="graphs",
        help="on a GPU, comma-separated, side by side: eager (kernel by kernel), graphs (steps replayed as CUDA "
        "graphs, the default). Structure learning steps eagerly",
    )
    args = parser.parse_args(argv)
    args.kinds = [k for k in args.models.split(",") if k]
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; use {', '.join(KINDS)}")
    args.sizes_list = [int(s) for s in args.sizes.split(",")]
    if args.repeats < 1:
        parser.error("--repeats: at least 1")
    args.gpu_steps_list = [k for k in args.gpu_steps.split(",") if k]
    if not args.gpu_steps_list or any(k not in GPU_STEPS for k in args.gpu_steps_list):
        parser.error(f"--gpu-steps: use {', '.join(GPU_STEPS)}")
    return args


def pick_devices(names: str) -> tuple[list[str], list[dict]]:
    """The devices torch sees, and a skip entry (with a printed message) for each it does not."""
    devices, skipped = [], []
    for d in (d for d in names.split(",") if d):
        if d == "cpu" or (d.startswith("cuda") and torch.cuda.is_available()):
            devices.append(d)
            continue
        reason = "torch sees no CUDA device" if d.startswith("cuda") else "not a device this benchmark runs"
        print(f"device {d}: skipped: {reason}")
        skipped.append({"model": None, "device": d, "status": f"skipped: {reason}"})
    return devices, skipped


def kind_data(kind: str, args) -> str:
    return args.cnn_data if kind == "cnn" else args.data


def kind_settings(kind: str, data: str) -> tuple[dict | None, str | None]:
    """``(settings, None)`` for a kind that can run (structure: the paper's settings), else ``(None, reason)``."""
    if kind != "structure":
        return None, None
    trainer, reason = structure_trainer()
    if trainer is None:
        return None, reason
    try:
        return structure_settings(data), None
    except Exception as exc:  # ConfigError: no structures folder, or no settings for the data
        return None, f"paper structure-learning settings for {data} unavailable ({type(exc).__name__}: {exc})"


def describe_run(datasets: dict, args, devices: list[str]) -> None:
    for name, dataset in datasets.items():
        print(
            f"{name}: {len(dataset.y_train)} training rows (validation {args.validation}), "
            f"{dataset.n_features} features, {dataset.n_classes} classes"
        )
    print(
        f"{args.epochs} epochs; torch {torch.__version__}; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads; load average {os.getloadavg()[0]:.2f}; "
        f"devices: {', '.join(describe_device(d) for d in devices)}"
    )
    print(f"{'model':<10}{'device':<12}{'M':>6}{'cfg-epochs/s':>14}{'per-run':>10}{'ratio':>9}")


def measure_kind(kind: str, dataset, settings, devices: list[str], args) -> list[dict]:
    """Rows of the table for one kind: per round (``--repeats``) the single run, then every device and
    M; each row gives the medians over the rounds (and every round's rates)."""
    if kind not in ("nb", "tan"):  # nb and tan: measured cold, as this benchmark always has
        per_run_rate(dataset, kind, 1, settings)  # warm-up (kernels, allocator, lazy imports)
    steady = args.timing == "steady"
    runs = _device_runs(kind, devices, args.gpu_steps_list)
    baselines: list[float] = []
    rounds: dict[tuple[str, str, int], list[tuple[float, float]]] = {}  # (device, steps, M) -> (rate, seconds)
    for turn in range(args.repeats):
        baselines.append(per_run_rate(dataset, kind, args.epochs, settings, steady=steady))
        for device, steps in runs:
            if turn == 0:
                batched_seconds(dataset, kind, 2, 1, device, args.distinct_seeds, settings, gpu_steps=steps)  # warm-up
            for m in args.sizes_list:
                stamps: list = []
                seconds = batched_seconds(
                    dataset, kind, m, args.epochs, device, args.distinct_seeds, settings, stamps, steps
                )
                rate = steady_rate(stamps) if steady else None
                rounds.setdefault((device, steps, m), []).append((rate or m * args.epochs / seconds, seconds))
    baseline = float(np.median(baselines))
    rows = []
    for (device, steps, m), measured in rounds.items():
        rate, seconds = float(np.median([r for r, _ in measured])), float(np.median([t for _, t in measured]))
        label = f"{device}-{steps}" if device.startswith("cuda") else device
        rows.append(
            {
                "model": kind,
                "device": describe_device(device),
                "M": m,
                "rate": rate,
                "per_run_rate": baseline,
                "ratio": rate / baseline,
                "data": dataset.name,
                "seconds": seconds,
                "gpu_steps": steps if device.startswith("cuda") else None,
                "rates": [r for r, _ in measured],
                "per_run_rates": baselines,
            }
        )
        spread = ""
        if args.repeats > 1:
            ratios = [r / b for (r, _), b in zip(measured, baselines)]
            spread = f"  (rounds {min(ratios):.1f}x to {max(ratios):.1f}x)"
        print(f"{kind:<10}{label:<12}{m:>6}{rate:>14,.1f}{baseline:>10.1f}{rate / baseline:>8.1f}x{spread}", flush=True)
    return rows


#: ``--gpu-steps``: whether the batched trainers replay their steps as CUDA graphs on a GPU.
GPU_STEPS = {"eager": False, "graphs": True}


def _device_runs(kind: str, devices: list[str], gpu_steps: list[str]) -> list[tuple[str, str]]:
    """(device, GPU steps) to measure: a GPU once per ``--gpu-steps`` kind (structure learning: eager
    only), the CPU once."""
    runs = []
    for device in devices:
        if not device.startswith("cuda"):
            runs.append((device, "graphs"))
            continue
        wanted = {"eager"} if kind == "structure" else set(gpu_steps)
        runs += [(device, k) for k in GPU_STEPS if k in wanted]
    return runs


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    devices, skipped = pick_devices(args.devices)
    plans = {}  # kind -> settings, for the kinds that run
    for kind in args.kinds:
        settings, reason = kind_settings(kind, kind_data(kind, args))
        if reason is None:
            plans[kind] = settings
        else:
            skipped.append({"model": kind, "device": None, "status": f"skipped: {reason}"})
    datasets = {}
    for kind in plans:
        name = kind_data(kind, args)
        if name not in datasets:
            datasets[name] = load_dataset(name, validation_fraction=args.validation, seed=0)
    describe_run(datasets, args, devices)
    for entry in skipped:
        if entry["model"] is not None:
            print(f"{entry['model']:<10}{'-':<8}{'-':>6}  {entry['status']}", flush=True)
    results = []
    for kind, settings in plans.items():
        results += measure_kind(kind, datasets[kind_data(kind, args)], settings, devices, args)
    report = {
        "data": args.data,
        "epochs": args.epochs,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "results": results,
        "datasets": {kind: kind_data(kind, args) for kind in args.kinds},
        "skipped": skipped,
        "timing": STEADY_TIMING if args.timing == "steady" else TIMING,
        "targets": TARGETS,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    print("targets: 2 cores, letter NB, M = 64: >= 3x per-run; GPU letter NB: >= 10,000 configuration-epochs/s")
    print(f"targets (issue 30): {TARGETS['issue 30']}")
    return report


if __name__ == "__main__":
    main()
