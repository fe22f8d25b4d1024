"""Accuracy/model-size trajectories of learned TAN structures over the size penalty lambda_MS.

One learned TAN per lambda (``models.structure_learning.train_learned_tan``), each saved as an
ordinary model file; the results go to ``trajectory.csv`` / ``trajectory.json`` and two plots
(the paper's Fig. 5): test error and parameters over lambda, and the Pareto front of test error
over parameters (as a multiple of naive Bayes).
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from bnc_deploy.errors import ArtifactError, ConfigError

CSV_COLUMNS = (
    "lambda",
    "n_parameters",
    "nb_multiple",
    "test_error",
    "train_error",
    "n_with_parent",
    "n_features_with_candidates",
    "seconds",
    "model",
    "structure",
)


# -- lambda grids -----------------------------------------------------------------------------------
def parse_lambdas(text: str) -> list[float]:
    """``"1e-7,1e-3,10"`` -> floats (each finite and >= 0), in the given order."""
    try:
        values = [float(tok) for tok in text.replace(" ", "").split(",") if tok]
    except ValueError:
        raise ConfigError(f"--lambdas must be comma-separated numbers, got {text!r}") from None
    if not values or any(not (math.isfinite(v) and v >= 0) for v in values):
        raise ConfigError(f"--lambdas needs finite values >= 0, got {text!r}")
    return values


def parse_grid(text: str) -> list[float]:
    """``"LOW:HIGH:N"`` -> N values log-spaced from LOW to HIGH inclusive (LOW, HIGH > 0, N >= 1)."""
    parts = text.split(":")
    try:
        low, high, count = float(parts[0]), float(parts[1]), int(parts[2])
        if len(parts) != 3:
            raise IndexError
    except (IndexError, ValueError):
        raise ConfigError(f"--grid must look like LOW:HIGH:N (e.g. 1e-7:10:9), got {text!r}") from None
    if not (0 < low <= high and math.isfinite(high) and count >= 1):
        raise ConfigError(f"--grid needs 0 < LOW <= HIGH and N >= 1, got {text!r}")
    return np.geomspace(low, high, count).tolist() if count > 1 else [low]


# -- runs -------------------------------------------------------------------------------------------
def model_path(outdir: Path, lam: float) -> Path:
    return Path(outdir) / f"lambda_{lam:.3g}.bnc"


def run_point(data: str, fold: int, config, sl, lam: float, outdir: str | Path, resume: bool = False) -> dict:
    """Train one learned TAN at ``lam`` (1 torch thread), save it, and return its CSV row.

    With ``resume``, an existing model file for ``lam`` is read instead of retrained; it must have
    been checked first (:func:`check_resumable`, which :func:`sweep` runs before any training).
    """
    import torch

    from bnc_deploy.artifacts import load_artifact, save_artifact
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.train.structure_learning import train_learned_tan

    path = model_path(outdir, lam)
    if resume and path.is_file():
        artifact = load_artifact(path)
        return row_from_artifact(artifact, lam, path, artifact.metadata["structure_learning"]["seconds"])
    torch.set_num_threads(1)  # several points may run side by side; threads would only contend
    dataset = load_dataset(data, fold=fold, seed=config.seed)
    result = train_learned_tan(dataset, replace(config), replace(sl, size_penalty=lam))
    save_artifact(result.artifact, path)
    return row_from_artifact(result.artifact, lam, path, result.seconds)


def row_from_artifact(artifact, lam: float, path, seconds: float) -> dict:
    """The CSV row of a learned TAN artifact.

    ``n_features_with_candidates`` counts features that can gain from a parent: they have a
    candidate and more than one value (a constant feature's table is all zeros whatever its
    parent, so the penalty alone decides it, towards no parent).
    """
    from bnc_deploy.train.structure_learning import naive_bayes_parameters

    learned = artifact.metadata["structure_learning"]
    card = artifact.cardinalities
    has_candidates = (np.sum(np.asarray(learned["candidates"])[:, 1:] >= 0, axis=1) > 0) & (card > 1)
    return {
        "lambda": lam,
        "n_parameters": artifact.n_parameters,
        "nb_multiple": artifact.n_parameters / naive_bayes_parameters(card, artifact.n_classes),
        "test_error": artifact.metadata["errors"]["test"],
        "train_error": artifact.metadata["errors"]["train"],
        "n_with_parent": int(np.sum(artifact.parents >= 0)),
        "n_features_with_candidates": int(has_candidates.sum()),
        "seconds": round(float(seconds), 2),
        "model": str(path),
        "structure": " ".join(str(p) for p in artifact.parents.tolist()),
    }


# -- resuming ---------------------------------------------------------------------------------------
def point_settings(config, sl, lam: float, candidates_file: dict | None = None) -> dict:
    """Everything that determines the model of one lambda, as one flat dict.

    The ``TrainConfig`` fields (less ``progress``, display only), the ``StructureLearningConfig``
    fields with ``size_penalty = lam``, and, instead of the candidates file's path (one file may
    be named in several ways), ``"sha256:<digest>#<entry>"`` of its content and dataset entry
    (``candidates_file``: :meth:`~bnc_deploy.train.candidate_sets.CandidateSets.describe`).
    """
    settings = {k: v for k, v in asdict(config).items() if k != "progress"}
    settings.update(asdict(replace(sl, size_penalty=lam)))
    settings["candidates_file"] = _file_identity(candidates_file)
    return settings


def artifact_settings(artifact) -> dict:
    """:func:`point_settings` of the run that wrote a learned TAN ``artifact``, from its metadata.

    Its ``config`` is the fine-tuning copy (``epochs = finetune_epochs``); the structure-learning
    epochs are in ``structure_learning.epochs``. Keys a model file predates are left out (the
    comparison then treats them as differing unless the current value is the default).
    """
    learned = artifact.metadata["structure_learning"]
    settings = {k: v for k, v in artifact.metadata["config"].items() if k != "progress"}
    settings["epochs"] = learned["epochs"]
    settings.update(learned["settings"])
    settings["candidates_file"] = _file_identity(learned.get("candidates_file"))
    return settings


def _file_identity(described: dict | None) -> str | None:
    return None if described is None else f"sha256:{described['sha256']}#{described['entry']}"


def check_resumable(path: Path, expected: dict, data_name: str | None = None, fold: int | None = None) -> None:
    """ConfigError unless the model file ``path`` was trained with ``expected`` (:func:`point_settings`)
    on the dataset ``data_name`` and ``fold`` (when given); the message names the file and each
    differing setting with both values."""
    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.train.structure_learning import StructureLearningConfig

    artifact = load_artifact(path)
    if "structure_learning" not in artifact.metadata or "config" not in artifact.metadata:
        raise ConfigError(
            f"--resume: {path} is not a learned TAN of bnc-structure-sweep (no structure-learning "
            "metadata); remove it or drop --resume"
        )
    stored = artifact_settings(artifact)
    # A setting the file predates had its default then (e.g. candidates_file before it existed).
    learn_defaults = asdict(StructureLearningConfig())
    differ = [
        f"{key}: {stored.get(key, learn_defaults.get(key))!r} in the file, {value!r} now"
        for key, value in expected.items()
        if stored.get(key, learn_defaults.get(key)) != value
    ]
    described = artifact.metadata.get("data", {})
    if data_name is not None and described.get("name") != data_name:
        differ.append(f"dataset: {described.get('name')!r} in the file, {data_name!r} now")
    if fold is not None and described.get("fold") not in (None, fold):
        differ.append(f"fold: {described.get('fold')!r} in the file, {fold!r} now")
    if differ:
        raise ConfigError(
            f"--resume: {path} was trained with other settings ({'; '.join(differ)}); "
            "use another output folder, or drop --resume to retrain every lambda"
        )


def sweep(
    data: str,
    fold: int,
    config,
    sl,
    lambdas,
    outdir: str | Path,
    jobs: int = 1,
    log=print,
    resume: bool = False,
    dataset=None,
) -> list[dict]:
    """Run every lambda (``jobs`` processes side by side); rows sorted by lambda.

    With ``resume``, model files already in ``outdir`` are reused, after checking, before any
    training, that each was trained with this sweep's settings (:func:`check_resumable`: refused
    with a ConfigError otherwise, so a resumed sweep never mixes settings). ``dataset``: the loaded
    ``data`` (loaded here if needed and not given), for the dataset name and candidates file.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    existing = [lam for lam in lambdas if model_path(outdir, lam).is_file()] if resume else []
    if existing:
        from bnc_deploy.train.structure_learning import structure_candidates

        if dataset is None:
            from bnc_deploy.datasets import load_dataset

            dataset = load_dataset(data, fold=fold, seed=config.seed)
        sets = structure_candidates(dataset, config, sl)[1] if sl.candidates_file is not None else None
        for lam in existing:
            check_resumable(
                model_path(outdir, lam),
                point_settings(config, sl, lam, None if sets is None else sets.describe()),
                dataset.name,
                dataset.fold,
            )
    rows = []
    if jobs <= 1:
        for lam in lambdas:
            rows.append(run_point(data, fold, config, sl, lam, outdir, resume))
            log(_row_line(rows[-1]))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(run_point, data, fold, config, sl, lam, outdir, resume) for lam in lambdas]
            for future in futures:
                rows.append(future.result())
                log(_row_line(rows[-1]))
    return sorted(rows, key=lambda r: r["lambda"])


def _row_line(row: dict) -> str:
    return (
        f"lambda {row['lambda']:.3g}: test error {100 * row['test_error']:.2f} %, {row['n_parameters']:,} "
        f"parameters ({row['nb_multiple']:.2f} x NB), {row['n_with_parent']}/{row['n_features_with_candidates']} "
        f"features with a parent, {row['seconds']:.0f} s"
    )


def pareto_front(rows: list[dict]) -> list[dict]:
    """Rows not dominated in (parameters, test error), by increasing parameters."""
    front, best = [], math.inf
    for row in sorted(rows, key=lambda r: (r["n_parameters"], r["test_error"])):
        if row["test_error"] < best:
            front.append(row)
            best = row["test_error"]
    return front


# -- outputs ----------------------------------------------------------------------------------------
def write_outputs(rows: list[dict], outdir: str | Path, meta: dict, references: list[dict] = ()) -> dict:
    """Write ``trajectory.csv``, ``trajectory.json`` and the plots; return the paths."""
    from bnc_deploy.fileio import atomic_write_bytes

    outdir = Path(outdir)
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(outdir / "trajectory.csv", table.getvalue().encode("utf-8"))
    front = pareto_front(rows)
    payload = {**meta, "rows": rows, "pareto_lambdas": [r["lambda"] for r in front], "references": list(references)}
    atomic_write_bytes(outdir / "trajectory.json", json.dumps(payload, indent=2, sort_keys=True).encode("utf-8"))
    paths = {"csv": str(outdir / "trajectory.csv"), "json": str(outdir / "trajectory.json")}
    paths.update(plot_trajectory(rows, outdir / "trajectory", title=meta.get("title", "")))
    paths.update(plot_pareto(rows, outdir / "pareto", references=references, title=meta.get("title", "")))
    return paths


def plot_trajectory(rows: list[dict], stem: Path, title: str = "") -> dict:
    """Test error (left axis) and parameters as a multiple of NB (right axis) over lambda (log x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lam = [r["lambda"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(lam, [100 * r["test_error"] for r in rows], "o-", color="tab:blue", label="test error")
    ax.set_xscale("log")
    ax.set_xlabel(r"size penalty $\lambda_{MS}$")
    ax.set_ylabel("test error [%]", color="tab:blue")
    twin = ax.twinx()
    twin.plot(lam, [r["nb_multiple"] for r in rows], "s--", color="tab:red", label="parameters")
    twin.set_ylabel("parameters [x naive Bayes]", color="tab:red")
    ax.set_title(title or "learned TAN: error and size over the size penalty")
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, stem, "trajectory")


def plot_pareto(rows: list[dict], stem: Path, references=(), title: str = "") -> dict:
    """Test error over parameters (multiple of NB): every lambda, the Pareto front, and references."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(
        [r["nb_multiple"] for r in rows],
        [100 * r["test_error"] for r in rows],
        color="tab:gray",
        label=r"learned TAN (each $\lambda_{MS}$)",
    )
    front = pareto_front(rows)
    ax.plot(
        [r["nb_multiple"] for r in front],
        [100 * r["test_error"] for r in front],
        "o-",
        color="tab:blue",
        label="Pareto front",
    )
    colors = ("tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive")
    for ref, marker, color in zip(references, "^vD*Px", colors):
        ax.scatter([ref["nb_multiple"]], [100 * ref["test_error"]], marker=marker, s=70, color=color, label=ref["name"])
    ax.set_xlabel("parameters [x naive Bayes]")
    ax.set_ylabel("test error [%]")
    ax.set_title(title or "learned TAN: Pareto front")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, stem, "pareto")


def _save(fig, stem: Path, key: str) -> dict:
    import matplotlib.pyplot as plt

    from bnc_deploy.fileio import atomic_write_with

    fig.tight_layout()
    paths = {}
    for ext in ("png", "svg"):  # each file atomically: a reader never sees half a plot
        atomic_write_with(f"{stem}.{ext}", lambda tmp, ext=ext: fig.savefig(tmp, format=ext, dpi=120))
        paths[f"{key}_{ext}"] = f"{stem}.{ext}"
    plt.close(fig)
    return paths


def reference_point(path: str | Path, nb_parameters: int) -> dict:
    """A saved model as a plot reference: name, test error (from its metadata), parameters."""
    from bnc_deploy.artifacts import load_artifact

    artifact = load_artifact(path)
    error = artifact.metadata.get("errors", {}).get("test")
    if error is None:
        raise ArtifactError(f"reference model {path} has no recorded test error")
    source = artifact.metadata.get("structure_source", artifact.structure)
    epochs = artifact.metadata.get("config", {}).get("epochs")
    name = f"{Path(path).stem} ({source}, {epochs} epochs)"
    return {
        "name": name,
        "model": str(path),
        "test_error": float(error),
        "n_parameters": artifact.n_parameters,
        "nb_multiple": artifact.n_parameters / nb_parameters,
    }


def sweep_meta(data: str, fold: int, config, sl, lambdas, seconds: float, candidates_file: dict | None = None) -> dict:
    """``trajectory.json``'s settings: data, lambdas, every training and structure-learning setting,
    and ``candidates_file`` (path, entry, sha256, ordering of explicit candidate sets, or None)."""
    return {
        "data": data,
        "fold": fold,
        "lambdas": list(lambdas),
        "train_config": asdict(config),
        "structure_learning": asdict(sl),
        "candidates_file": candidates_file,
        "seconds": round(seconds, 1),
        "title": f"{data} (fold {fold}): learned TAN, {config.epochs} epochs",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
