"""The paper's grids: its presets (``bnc-sweep --preset``), and its figures as sweeps.

Presets
-------
:data:`PRESETS` are the authors' grids (:func:`preset`), built from their data files in the
paper structures folder (:func:`find_structures_dir`: the ICPR 2020 (λ, γ) draws, the PGM 2020
structure-learning settings, the authors' TAN structures); :data:`PAPER_BATCH_SIZE` and
:func:`dataset_name` are the paper's per-dataset batch sizes and dataset names.

Figures
-------
Which grids each figure needs, per protocol, and its points.

A figure is a list of :class:`FigureSweep` (a named grid, run by :func:`~bnc_deploy.sweep.runner.run_sweep`
into ``DIR/sweeps/<name>``, so figures that share a grid share its results and every figure
resumes) and a rule that turns the selected configurations into points.

Protocols
---------
``paper``: the authors' grids (from their run scripts, ``../shared/paper/structures``): BN
classifiers B ∈ 1..8 × B_I ∈ 1..6 × the 100 ICPR (λ, γ) draws × lr0 ∈ {3e-2, 3e-3}, 500 epochs;
FC nets L ∈ 2..5 × B ∈ 1..8 × batch norm on/off × lr0 ∈ {3e-2, 3e-3, 3e-4} × 5 seeds per budget
and activation; CNNs (usps, mnist) with one or two convolution layers × B ∈ 1..8 × batch norm
on/off × the same lr0 × 5 seeds, on the NB's memory at B = 1..8 (Fig. 3, with the FC nets) and on
operation budgets 2, 4, …, 256 × C·D (Fig. 4); structure learning λ_MS ∈ logspace(−7, 1, 41) ×
lr0 × 5 seeds. The seeds of a grid share one data split (:data:`PAPER_SPLIT_SEED`). For a GPU or
a Ray cluster.

``quick`` (about an hour per dataset and figure on 2 cores; what it drops, exactly):

* BN grids: B_I ∈ {2, 3, 4} instead of 1..6; the first 20 of the authors' 100 (λ, γ) draws (the
  first 10 on datasets with more than 64 features: usps, mnist); both learning rates; successive
  halving (rate 3, rungs at 500/27, 500/9, 500/3 epochs) instead of 500 epochs for every
  configuration. Float models: the same 20 draws × 2 learning rates.
* FC nets: budgets of the NB at B ∈ {1, 2, 4, 8} bits (not all 8); one hidden layer (L = 2);
  weight bits {1, 2}; batch norm on; lr0 = 3e-3; one seed; ReLU and sign; plain (not one-hot)
  inputs.
* CNNs (usps, mnist): Fig. 3 at the NB's memory at B ∈ {1, 2, 4, 8}, Fig. 4 at operation budgets
  f ∈ {2, 8, 32, 128} × C·D (not 2, 4, …, 256); one convolution layer (not one or two); weight bits
  {1, 2}; 100 epochs instead of 500 (the learning rate decays to the same final value); batch norm
  on; lr0 = 3e-3; one seed; ReLU and sign.
* Structure learning: λ_MS ∈ logspace(−7, 1, 9) (not 41 values); lr0 = 3e-3; one seed.

Selection follows the sweep's ``--select`` (validation by default; ``test`` is the paper's protocol).
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from bnc_deploy.datasets import load_dataset
from bnc_deploy.errors import ConfigError
from bnc_deploy.fileio import find_folder
from bnc_deploy.sweep.grid import GridSpec
from bnc_deploy.sweep.records import did_you_mean

# -- presets: the paper's grids and the data files they read -------------------------------------
STRUCTURES_DIR_ENV = "BNC_DEPLOY_STRUCTURES_DIR"
_RELATIVE_STRUCTURES_DIR = Path("..") / "shared" / "paper" / "structures"
DRAWS_FILE = "icpr2020_hybrid_draws.json"
SETTINGS_FILE = "pgm2020_tan_subset_settings.json"
#: The presets and what they are (``bnc-sweep --preset NAME``).
PRESETS = {
    "icpr2020-nb": "ICPR 2020 naive Bayes: bits 1..8 × int_bits 1..6 × lr {3e-2, 3e-3} × the 100 (λ, γ) draws "
    "(η = 10), 500 epochs",
    "icpr2020-tan": 'ICPR 2020 TAN, the authors\' fixed structure per dataset (structure = "authors"), same grid',
    "icpr2020-structure": "ICPR 2020 Fig. 5 structure learning: λ_MS logspace(-7,1,41) × lr {3e-2, 3e-3} × seeds "
    "0..4, float, the dataset's hybrid λ, γ, η, feature ordering and candidate parent sets "
    "(needs data)",
}


#: The data split of the paper protocol's seeded grids (DNNs, structure learning): one for every seed,
#: so a grid's 5 seeds train in one batched program and are selected on the same validation rows.
PAPER_SPLIT_SEED = 0

#: Batch sizes of the paper's experiments (the authors' run scripts), per dataset.
PAPER_BATCH_SIZE = {"letter": 100, "usps": 100, "satimage": 50, "mnist": 250}


def dataset_name(data) -> str:
    """The paper's name of a dataset given by name or path (``letter-raw`` and ``x/letter.npz`` are letter)."""
    return Path(str(data)).stem.replace("-raw", "")


def paper_batch_size(data) -> int | None:
    """The paper's batch size for ``data``, or None for a dataset the paper did not use."""
    return PAPER_BATCH_SIZE.get(dataset_name(data))


def find_structures_dir(structures_dir: str | os.PathLike | None = None) -> Path:
    """The folder of the paper's structures, draws and settings (like ``datasets.find_data_dir``).

    Order: ``structures_dir``, else ``$BNC_DEPLOY_STRUCTURES_DIR``, else the first existing of
    ``../shared/paper/structures`` relative to the current directory and to the repository root.
    ConfigError listing every place searched.
    """
    found, how, searched = find_folder(
        structures_dir, STRUCTURES_DIR_ENV, _RELATIVE_STRUCTURES_DIR, "the structures_dir argument"
    )
    if found is not None:
        return found
    raise ConfigError(
        f"paper structures folder not found (searched {how}: {searched}); set {STRUCTURES_DIR_ENV} "
        f"to the folder holding {DRAWS_FILE}"
    )


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"preset data {path} does not exist (is {path.parent} the paper structures folder?)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"preset data {path}: cannot read ({exc})") from None


def icpr2020_draws(structures_dir: str | os.PathLike | None = None) -> dict:
    """The ICPR 2020 (λ, γ) draws as explicit ``[draws]`` columns (authors' order, 0-based).

    Checks η = 10 for every draw and the file's own check entry (draw #94)."""
    path = find_structures_dir(structures_dir) / DRAWS_FILE
    data = _read_json(path)
    try:
        entry = data["icpr2020"]
        draws = sorted(entry["draws"], key=lambda d: d["index"])
        lam = [float(d["lam"]) for d in draws]
        gamma = [float(d["gamma"]) for d in draws]
        etas = {float(d["eta"]) for d in draws}
        indices = [d["index"] for d in draws]
        check = entry.get("check")
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"preset data {path}: no icpr2020 draws with index, lam, gamma, eta ({exc!r})") from None
    if indices != list(range(len(draws))) or etas != {10.0}:
        raise ConfigError(f"preset data {path}: icpr2020 draws must be indexed 0..{len(draws) - 1} with eta = 10")
    if check and (lam[check["index_0based"]] != check["lam"] or gamma[check["index_0based"]] != check["gamma"]):
        raise ConfigError(f"preset data {path}: draw #{check['index_0based']} disagrees with the file's check entry")
    return {"hybrid_lambda": lam, "hybrid_gamma": gamma}


def preset(name: str, structures_dir: str | os.PathLike | None = None, data: str | None = None) -> GridSpec:
    """A paper grid (see :data:`PRESETS`). ``data`` (a dataset name) is added to ``fixed``;
    ``icpr2020-structure`` needs it (its hybrid λ, γ, η are per dataset).

    Batch sizes are per dataset in the paper and are not in the presets (give ``batch_size``).
    """
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}{did_you_mean(name, PRESETS)}; presets: {', '.join(PRESETS)}")
    folder = find_structures_dir(structures_dir)
    fixed = {} if data is None else {"data": data}
    if name in ("icpr2020-nb", "icpr2020-tan"):
        # The authors' task order is product(bits, int_bits, draw, lr); here draws are innermost.
        fixed.update(
            {"model": "nb", "epochs": 500, "loss": "hybrid", "hybrid_eta": 10.0}
            if name == "icpr2020-nb"
            else {"model": "tan", "structure": "authors", "epochs": 500, "loss": "hybrid", "hybrid_eta": 10.0}
        )
        return GridSpec(
            axes={"bits": list(range(1, 9)), "int_bits": list(range(1, 7)), "lr": [3e-2, 3e-3]},
            draws=icpr2020_draws(folder),
            fixed=fixed,
        ).normalized(f"preset {name}")
    # icpr2020-structure
    path = folder / SETTINGS_FILE
    settings = _read_json(path)
    try:
        by_dataset = {s["dataset"]: s for s in settings["settings"]}
        grid = settings["fig5_grid"]
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"preset data {path}: no settings/fig5_grid ({exc!r})") from None
    if data not in by_dataset:
        given = "no data given" if data is None else f"data {data!r} has no settings there"
        raise ConfigError(f"preset {name} needs a dataset of {path}: {given}; use one of {', '.join(by_dataset)}")
    setting = by_dataset[data]
    if grid.get("structure_penalty_lambda_ms") != "numpy.logspace(-7, 1, 41)":
        raise ConfigError(
            f"preset data {path}: fig5_grid.structure_penalty_lambda_ms is "
            f"{grid.get('structure_penalty_lambda_ms')!r}, this preset was written for "
            "numpy.logspace(-7, 1, 41)"
        )
    try:
        hybrid = setting["hybrid"]
        fixed.update(
            {
                "model": "tan",
                "structure": "learn",
                "bits": None,
                "epochs": 500,
                "loss": "hybrid",
                "hybrid_lambda": float(hybrid["lam"]),
                "hybrid_gamma": float(hybrid["gamma"]),
                "hybrid_eta": float(hybrid["eta"]),
                # The authors' own ordering and candidate sets (K = 9 slots including "class only"), read
                # for the record's dataset by the trainer; "candidates" keeps its default (it may not be
                # given with a candidates file).
                "candidates_file": str(path),
                "structure_lr": float(grid["learning_rate_structure"]),
                "tau_start": float(grid["gumbel_softmax_temperature"][0]),
                "tau_end": float(grid["gumbel_softmax_temperature"][1]),
            }
        )
        axes = {
            "size_penalty": "logspace(-7,1,41)",
            "lr": [float(v) for v in grid["learning_rate_start"]],
            "seed": list(range(int(grid["seeds_per_setting"]))),
        }
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ConfigError(f"preset data {path}: incomplete settings for {data} ({exc!r})") from None
    return GridSpec(axes=axes, fixed=fixed).normalized(f"preset {name}")


# -- figures ---------------------------------------------------------------------------------------
FIGURES = ("fig3", "fig4", "fig5", "fig6", "fig7")
PROTOCOLS = ("quick", "paper", "smoke")
#: ``smoke``: a few configurations of every kind for a few epochs (seconds on any dataset, no
#: ``../shared`` needed): for tests of the pipeline, never for results.
SMOKE_EPOCHS = 3
#: Datasets with an image layout (CNNs and the ops figure).
IMAGE_DATASETS = ("usps", "mnist")
#: quick: the authors' first 20 (λ, γ) draws, or 10 above this many features (usps 256, mnist 196).
QUICK_DRAWS, QUICK_DRAWS_WIDE, QUICK_WIDE_FEATURES = 20, 10, 64
#: quick: CNN epochs (a usps CNN epoch costs about 6 FC epochs; the learning rate still decays to
#: lr0 * 1e-4 over the run).
QUICK_CNN_EPOCHS = 100
#: Fig. 3's memory budgets for the DNNs: the NB's size at these bit widths (FC nets and CNNs).
MEMORY_BUDGET_BITS = {"quick": [1, 2, 4, 8], "paper": list(range(1, 9)), "smoke": [2]}
#: Fig. 4's operation budgets for the CNNs: these multiples of the NB's operations C * D.
OPERATION_BUDGET_FACTORS = {"quick": [2, 8, 32, 128], "paper": [2**k for k in range(1, 9)], "smoke": [8]}


@dataclass
class FigureSweep:
    name: str  # DIR/sweeps/<name>
    spec: GridSpec
    family: str  # the curve's label
    halving: bool = False
    group_by: tuple = ("model", "structure", "bits")
    x: str = "bits"  # what the point's x is: "bits", "size_bits", "n_ops", "size_penalty"


@dataclass
class FigurePlan:
    figure: str
    data: str
    protocol: str
    sweeps: list[FigureSweep] = field(default_factory=list)
    uses: tuple = ()  # figures whose points this one combines (fig7)


def _base(data: str, protocol: str = "quick") -> dict:
    fixed = {"data": data, "epochs": SMOKE_EPOCHS if protocol == "smoke" else 500, "loss": "hybrid", "hybrid_eta": 10.0}
    if paper_batch_size(data):
        fixed["batch_size"] = paper_batch_size(data)
    return fixed


def quick_draws(data: str) -> int:
    """How many of the authors' (λ, γ) draws the quick protocol keeps: 20, or 10 on datasets with
    more than :data:`QUICK_WIDE_FEATURES` features (a configuration-epoch costs about D times as much)."""
    return QUICK_DRAWS_WIDE if nb_parameters(data)[1] > QUICK_WIDE_FEATURES else QUICK_DRAWS


def _draws(protocol: str, data: str) -> dict:
    if protocol == "smoke":
        return {
            "n": 2,
            "seed": 0,
            "hybrid_lambda": {"log10_uniform": [1, 3]},
            "hybrid_gamma": {"log10_uniform": [-1, 2]},
        }
    draws = icpr2020_draws()
    n = quick_draws(data) if protocol == "quick" else len(draws["hybrid_lambda"])
    return {key: values[:n] for key, values in draws.items()}


def bn_sweeps(data: str, protocol: str, model: str) -> list[FigureSweep]:
    """Quantized (B = 1..8) and float sweeps of NB or TAN with the authors' structure."""
    fixed = {**_base(data, protocol), "model": model}
    label = "NB"
    if model == "tan":
        authors = has_authors_structure(data)
        fixed["structure"] = "authors" if authors else "chow-liu"
        label = "TAN (authors' structure)" if authors else "TAN (Chow-Liu)"
    int_bits = {"quick": [2, 3, 4], "paper": list(range(1, 7)), "smoke": [2]}[protocol]
    bits = [2, 3] if protocol == "smoke" else list(range(1, 9))
    quick = protocol in ("quick", "smoke")
    quantized = GridSpec(
        axes={"bits": bits, "int_bits": int_bits, "lr": [3e-2, 3e-3]}, draws=_draws(protocol, data), fixed=fixed
    ).normalized(f"{model} grid")
    floats = GridSpec(
        axes={"lr": [3e-2, 3e-3]}, draws=_draws(protocol, data), fixed={**fixed, "bits": None}
    ).normalized(f"{model} float grid")
    return [
        FigureSweep(f"{model}-quantized", quantized, label, halving=quick),
        FigureSweep(f"{model}-float", floats, label, halving=quick),
    ]


def has_authors_structure(data: str) -> bool:
    """Whether the authors' fixed TAN structures cover the dataset (letter, satimage, usps, mnist)."""
    return dataset_name(data) in PAPER_BATCH_SIZE


@functools.lru_cache(maxsize=16)
def nb_parameters(data: str, fold: int = 1) -> tuple[int, int, int]:
    """(NB parameters, features D, classes C) of the dataset: C * (1 + sum |X_i|)."""
    ds = load_dataset(data, fold=fold)
    return int(ds.n_classes * (1 + int(ds.cardinalities.sum()))), int(ds.n_features), int(ds.n_classes)


def fc_sweeps(data: str, protocol: str) -> list[FigureSweep]:
    """FC nets sized to the NB's memory at several bit widths, ReLU and sign."""
    nb, _, _ = nb_parameters(data)
    budgets = [nb * b for b in MEMORY_BUDGET_BITS[protocol]]
    out = []
    for activation in ("relu", "sign"):
        if protocol == "smoke":
            axes = {"match_bits": budgets}
            fixed = {"batch_norm": True, "layers": 2, "lr": 3e-3, "seed": 0, "weight_bits": 2, "epochs": SMOKE_EPOCHS}
        elif protocol == "quick":
            axes = {"match_bits": budgets, "weight_bits": [1, 2]}
            fixed = {"batch_norm": True, "layers": 2, "lr": 3e-3, "seed": 0, "one_hot": False}
        else:
            axes = {
                "match_bits": budgets,
                "layers": [2, 3, 4, 5],
                "weight_bits": list(range(1, 9)),
                "batch_norm": [False, True],
                "lr": [3e-2, 3e-3, 3e-4],
                "seed": list(range(5)),
            }
            fixed = {"one_hot": False, "split_seed": PAPER_SPLIT_SEED}
        spec = GridSpec(
            axes=axes, draws={}, fixed={**_dnn_base(data), "model": "fc", "activation": activation, **fixed}
        ).normalized(f"fc {activation} grid")
        out.append(
            FigureSweep(
                f"fc-{activation}",
                spec,
                f"FC {activation}",
                group_by=("model", "activation", "match_bits"),
                x="size_bits",
            )
        )
    return out


def cnn_sweeps(data: str, protocol: str, budget: str = "operations") -> list[FigureSweep]:
    """CNNs, ReLU and sign (image datasets), sized to a budget.

    ``budget="operations"`` (Fig. 4): operation budgets f x C*D. ``budget="memory"`` (Fig. 3): the
    NB's memory at the FC nets' bit widths, on the same x-axis as the NB and FC points. The paper
    protocol trains one or two convolution layers (the paper's CNNs), the quick protocol one.
    """
    if budget == "operations":
        figure, key, x, suffix = "fig4 (operations budget, CNNs)", "match_ops", "n_ops", ""
    elif budget == "memory":
        figure, key, x, suffix = "fig3 (memory budget, CNNs)", "match_bits", "size_bits", "-memory"
    else:
        raise ValueError(f"unknown CNN budget {budget!r}: use operations or memory")
    if dataset_name(data) not in IMAGE_DATASETS:
        raise ConfigError(f"{figure} needs an image dataset ({', '.join(IMAGE_DATASETS)}); got {data!r}")
    nb, d, c = nb_parameters(data)
    if budget == "operations":
        targets = [f * c * d for f in OPERATION_BUDGET_FACTORS[protocol]]
    else:
        targets = [nb * b for b in MEMORY_BUDGET_BITS[protocol]]
    out = []
    for activation in ("relu", "sign"):
        axes = {key: targets, "weight_bits": list(range(1, 9)) if protocol == "paper" else [1, 2]}
        fixed = {**_dnn_base(data), "model": "cnn", "activation": activation}
        if protocol == "paper":
            axes.update(
                {"layers": [1, 2], "batch_norm": [False, True], "lr": [3e-2, 3e-3, 3e-4], "seed": list(range(5))}
            )
            fixed["split_seed"] = PAPER_SPLIT_SEED
        else:
            fixed.update({"layers": 1, "batch_norm": True, "lr": 3e-3, "seed": 0})
        if protocol == "smoke":
            fixed["epochs"] = SMOKE_EPOCHS
        elif protocol == "quick":
            fixed["epochs"] = QUICK_CNN_EPOCHS
        name = f"cnn-{activation}{suffix}"
        spec = GridSpec(axes=axes, draws={}, fixed=fixed).normalized(f"{name} grid")
        out.append(FigureSweep(name, spec, f"CNN {activation}", group_by=("model", "activation", key), x=x))
    return out


def _dnn_base(data: str) -> dict:
    fixed = {"data": data, "epochs": 500}
    if paper_batch_size(data):
        fixed["batch_size"] = paper_batch_size(data)
    return fixed


def structure_sweeps(data: str, protocol: str) -> list[FigureSweep]:
    """Fig. 5: size-aware structure learning over λ_MS with the authors' settings for the dataset."""
    if protocol == "smoke":
        spec = GridSpec(
            axes={"size_penalty": [1e-3, 1e-1]},
            draws={},
            fixed={"data": data, "model": "tan", "structure": "learn", "epochs": SMOKE_EPOCHS},
        )
        return [
            FigureSweep(
                "structure",
                spec.normalized("structure grid"),
                "TAN (learned structure)",
                group_by=("size_penalty",),
                x="size_penalty",
            )
        ]
    spec = preset("icpr2020-structure", data=dataset_name(data))
    fixed = dict(spec.fixed)
    fixed["data"] = data
    if paper_batch_size(data):
        fixed["batch_size"] = paper_batch_size(data)
    axes = dict(spec.axes)
    if protocol == "quick":
        axes = {"size_penalty": "logspace(-7,1,9)", "lr": [3e-3], "seed": [0]}
    else:
        fixed["split_seed"] = PAPER_SPLIT_SEED
    spec = GridSpec(axes=axes, draws={}, fixed=fixed).normalized("structure grid")
    return [FigureSweep("structure", spec, "TAN (learned structure)", group_by=("size_penalty",), x="size_penalty")]


def plan(figure: str, data: str, protocol: str) -> FigurePlan:
    if figure not in FIGURES:
        raise ConfigError(f"unknown figure {figure!r}: use one of {', '.join(FIGURES)} or all")
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown protocol {protocol!r}: use quick or paper")
    p = FigurePlan(figure, data, protocol)
    if figure == "fig6":
        p.sweeps = bn_sweeps(data, protocol, "nb") + bn_sweeps(data, protocol, "tan")
    elif figure == "fig3":
        p.sweeps = bn_sweeps(data, protocol, "nb") + fc_sweeps(data, protocol)
        if dataset_name(data) in IMAGE_DATASETS:
            p.sweeps += cnn_sweeps(data, protocol, budget="memory")
    elif figure == "fig4":
        p.sweeps = bn_sweeps(data, protocol, "nb") + cnn_sweeps(data, protocol)
    elif figure == "fig5":
        p.sweeps = structure_sweeps(data, protocol)
    elif figure == "fig7":
        p.uses = ("fig3", "fig4", "fig6") if dataset_name(data) in IMAGE_DATASETS else ("fig3", "fig6")
        seen: dict[str, FigureSweep] = {}
        for used in p.uses:
            for sweep in plan(used, data, protocol).sweeps:
                seen.setdefault(sweep.name, sweep)
        p.sweeps = list(seen.values())
    return p


# -- points -------------------------------------------------------------------------------------------
def selected_points(rows: list[dict], sweep: FigureSweep, metric: str) -> list[dict]:
    """The best configuration per selection group as a figure point (``profiling.pareto`` record)."""
    best: dict[str, dict] = {}
    for row in rows:
        if row["status"] != "done":
            continue
        value = (row.get("final") or {}).get(metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        key = json.dumps({k: row["config"].get(k) for k in sweep.group_by}, sort_keys=True)
        if key not in best or value < best[key]["_value"]:
            best[key] = {**row, "_value": value}
    points = []
    for row in best.values():
        config, final = row["config"], row["final"]
        points.append(
            {
                "figure_sweep": sweep.name,
                "group": sweep.family,
                "dataset": dataset_name(config.get("data", "")),
                "bits": config.get("bits", config.get("weight_bits")),
                "size_penalty": config.get("size_penalty"),
                "test_error": final.get("test_error"),
                "val_error": final.get("val_error"),
                "train_error": final.get("train_error"),
                "size_bits": row.get("size_bits"),
                "n_ops": row.get("ops"),
                "n_parameters": row.get("n_parameters"),
                "config_id": row["id"],
                "model_path": row.get("model_path"),
                "config": config,
            }
        )
    return sorted(points, key=lambda p: (p["group"], p["size_bits"] or 0))
