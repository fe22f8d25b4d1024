"""What one worker runs: a chunk of configurations in, finished table rows (and model files) out.

A :class:`ChunkTask` is plain data (picklable, so the Ray backend ships it as is): the dataset to
load, the complete configuration records of one chunk, the structure, the device, the checkpoint
epochs, the halving rule and the "keep" thresholds. :func:`run_chunk` loads the data, trains the
chunk and returns a :class:`ChunkOutcome`: one row per configuration (the results table's row
format, ``sweep.table``) and the model artifacts the keep policy asked for. It writes nothing:
the driver owns the directory, so results land exactly once whichever backend ran the chunk.

Families
--------
* ``bnc`` (naive Bayes / TAN with Chow-Liu, a file's or the authors' parents): the batched
  trainer (``train.bnc_batched``), all configurations of the chunk in one tensor program.
* ``dnn`` (FC nets and CNNs): the batched DNN trainer (``train.dnn_batched``), which trains each
  architecture of the chunk (layers and widths) as one tensor program, buckets back to back.
* ``learn`` (TAN structure learning): the batched structure-learning trainer
  (``train.structure_batched``), all configurations of the chunk in one program per candidate shape.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields, replace

import numpy as np

from bnc_deploy.artifacts.encoding import parse_image_shape
from bnc_deploy.costs import analytic_costs, bnc_cost_terms
from bnc_deploy.datasets import load_dataset
from bnc_deploy.errors import ConfigError
from bnc_deploy.train.dnn_cli import parse_hidden


@dataclass
class ChunkTask:
    """One unit of work; every field is plain data."""

    family: str  # "bnc", "learn" or "dnn"
    data: dict  # {"spec", "fold", "validation", "seed", "data_dir"}
    records: list[dict]  # complete records, each with "id"
    groups: list[str]  # selection group of each record (halving ranks within one)
    parents: list[int] | None = None  # bnc: the structure (None: resolve from the record)
    structure_source: str | None = None
    device: str = "cpu"
    checkpoints: list[int] = field(default_factory=list)
    halving: dict | None = None  # {"rate": 3, "rungs": [epochs], "metric": "val_error"|"test_error"}
    metric: str = "val_error"  # the selection metric
    keep: str = "best"  # "best", "all" or "none"
    thresholds: dict = field(default_factory=dict)  # group -> best metric so far (keep="best")
    select: str = "validation"
    backend: str = "local"


@dataclass
class ChunkOutcome:
    rows: list[dict]
    artifacts: dict  # id -> artifact (model files the keep policy wants)
    seconds: float
    config_epochs: int  # configuration-epochs trained


def load_task_data(data: dict):
    return load_dataset(
        data["spec"],
        fold=data["fold"],
        seed=data["seed"],
        validation_fraction=data["validation"],
        data_dir=data.get("data_dir"),
    )


def run_chunk(task: ChunkTask, *, on_epoch=None) -> ChunkOutcome:
    """Train ``task``'s configurations; rows in the order of ``task.records``."""
    started = time.perf_counter()
    dataset = load_task_data(task.data)
    runner = {"bnc": _run_bnc, "learn": _run_learn, "dnn": _run_dnn}[task.family]
    rows, artifacts, config_epochs = runner(task, dataset, on_epoch)
    seconds = time.perf_counter() - started
    return ChunkOutcome(rows=rows, artifacts=artifacts, seconds=seconds, config_epochs=config_epochs)


def _metric_value(point: dict | None, metric: str) -> float:
    value = None if point is None else point.get(metric)
    return float("inf") if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _wants_model(task: ChunkTask, i: int, value: float) -> bool:
    if task.keep == "all":
        return True
    if task.keep == "none":
        return False
    return value < task.thresholds.get(task.groups[i], float("inf"))


def _halving_callback(task: ChunkTask):
    """Successive halving inside the chunk: at each rung keep the best ``1/rate`` of every group."""
    if not task.halving:
        return None
    rungs, rate, metric = set(task.halving["rungs"]), float(task.halving["rate"]), task.halving["metric"]

    def on_checkpoint(view):
        if view.epoch not in rungs:
            return None
        values = view.val_error if metric == "val_error" else view.test_error
        if values is None:
            raise ConfigError("successive halving ranks on the validation split: add --validation")
        keep = np.zeros(len(view.indices), dtype=bool)
        groups = [task.groups[int(i)] for i in view.indices]
        for group in set(groups):
            members = [j for j, g in enumerate(groups) if g == group]
            n_keep = max(1, math.ceil(len(members) / rate))
            # Ties broken by position: deterministic, and independent of the backend.
            order = sorted(members, key=lambda j: (float(values[j]), j))
            keep[order[:n_keep]] = True
        return keep

    return on_checkpoint


def _run_bnc(task: ChunkTask, dataset, on_epoch):
    # Lazy, like every trainer import here: the trainers import torch (extra "train"), and the
    # driver imports this module in the base install.
    from bnc_deploy.train.bnc import resolve_parents
    from bnc_deploy.train.bnc_batched import finish_artifact, resolve_device, train_bnc_batched

    configs = [bnc_config(r) for r in task.records]
    if task.parents is not None:
        parents, source = np.asarray(task.parents, dtype=np.int64), task.structure_source
    else:
        parents, source = resolve_parents(configs[0], dataset)

    runs = train_bnc_batched(
        dataset,
        configs,
        device=task.device,
        checkpoints=task.checkpoints,
        on_checkpoint=_halving_callback(task),
        build=False,
        parents=parents,
        structure_source=source,
        on_epoch=on_epoch,
    )
    # Model files only where the keep policy wants them: with "best", the chunk's best of each group
    # if it beats the best so far (building a file costs more than a configuration-epoch).
    for i in sorted(_models_wanted(task, runs)):
        runs[i].result = finish_artifact(runs[i], dataset, parents, source)
    device = str(resolve_device(task.device))
    rows, artifacts, config_epochs = [], {}, 0
    for record, run in zip(task.records, runs):
        bits = run.config.bits
        costs = bnc_cost_terms(dataset.cardinalities, parents, dataset.n_classes, bits if bits else 32)
        config_epochs += len(run.history["train_loss"])
        row = _batched_row(task, record, run, costs, device)
        if run.result is not None:
            artifacts[record["id"]] = run.result.artifact
        rows.append(row)
    return rows, artifacts, config_epochs


def _models_wanted(task: ChunkTask, runs: list) -> set[int]:
    """Which runs of a batched chunk get a model file: all, none, or with "best" the chunk's best of
    each group if it beats the best so far (building a file costs more than a configuration-epoch)."""
    values = [
        _metric_value(run.checkpoints[-1] if run.checkpoints and run.stopped_at is None else None, task.metric)
        for run in runs
    ]
    if task.keep == "all":
        return set(range(len(runs)))
    if task.keep != "best":
        return set()
    best_in_chunk: dict = {}
    for i, value in enumerate(values):
        group = task.groups[i]
        if value < best_in_chunk.get(group, (float("inf"), -1))[0]:
            best_in_chunk[group] = (value, i)
    return {i for value, i in best_in_chunk.values() if _wants_model(task, i, value)}


def _run_dnn(task: ChunkTask, dataset, on_epoch):
    """FC/CNN configurations through the batched DNN trainer; a configuration the trainer refuses
    or whose loss diverges gets a failed row, the others train."""
    from bnc_deploy.train.bnc_batched import resolve_device
    from bnc_deploy.train.dnn_batched import finish_run, train_dnn_batched

    rows: list[dict | None] = [None] * len(task.records)
    configs, positions = [], []
    for i, record in enumerate(task.records):
        try:
            config = dnn_config(record)
            config.validate()
        except ConfigError as exc:
            rows[i] = _failed_row(task, record, exc, 0.0)
            continue
        configs.append(config)
        positions.append(i)
    sub = replace(task, groups=[task.groups[i] for i in positions])
    runs = train_dnn_batched(
        dataset,
        configs,
        device=task.device,
        checkpoints=task.checkpoints,
        on_checkpoint=_halving_callback(sub),
        build=False,
        on_epoch=on_epoch,
    )
    artifacts, config_epochs, specs = {}, 0, {}
    device = str(resolve_device(task.device))
    wanted = _models_wanted(sub, runs)
    for j, (i, run) in enumerate(zip(positions, runs)):
        record = task.records[i]
        config_epochs += len(run.history["train_loss"])
        rows[i] = _batched_row(task, record, run, _dnn_costs(run.config, dataset, specs), device)
        if run.error is None and j in wanted:
            artifacts[record["id"]] = finish_run(dataset, run).artifact
    return rows, artifacts, config_epochs


def _batched_row(task: ChunkTask, record: dict, run, costs, device: str) -> dict:
    """The row of a batched trainer's run: its checkpoints, last measurement and status (failed
    with its message where the run's loss stopped being finite)."""
    error = getattr(run, "error", None)
    status = "failed" if error else ("stopped" if run.stopped_at is not None else "done")
    last = run.checkpoints[-1] if run.checkpoints else {}
    row = _row(task, record, run.checkpoints, last, costs, run.seconds, device, status=status)
    if error:
        row["error"] = f"FloatingPointError: {error}"
    return row


def _dnn_costs(config, dataset, specs: dict):
    """The paper's size and operation counts of a trained configuration (its resolved widths);
    ``specs`` caches the input encodings by kind."""
    from bnc_deploy.train import sizing
    from bnc_deploy.train.dnn import input_spec

    encoding = (config.architecture, config.one_hot, config.image_shape, config.pixel_order)
    if encoding not in specs:
        specs[encoding] = input_spec(dataset, config)
    spec = specs[encoding]
    widths = list(config.sizing["widths"])
    if config.architecture == "fc":
        return sizing.fc_costs(spec.n_inputs, widths, dataset.n_classes, config.weight_bits, config.batch_norm)
    return sizing.cnn_costs(
        spec.image_shape, spec.channels, widths, dataset.n_classes, config.weight_bits, config.batch_norm
    )


def _row(
    task: ChunkTask, record: dict, checkpoints: list, last: dict, costs, seconds: float, device: str, status: str
) -> dict:
    final = {key: last.get(key) for key in ("train_error", "val_error", "test_error")} if last else {}
    return {
        "id": record["id"],
        "config": {k: v for k, v in record.items() if k != "id"},
        "status": status,
        "error": None,
        "checkpoints": checkpoints,
        "final": final,
        "size_bits": int(costs.size_bits),
        "n_parameters": int(costs.n_parameters),
        "ops": int(costs.n_ops),
        "seconds": float(seconds),
        "model_path": None,
        "device": device,
        "backend": task.backend,
        "select": task.select,
    }


def bnc_config(record: dict):
    """``TrainConfig`` from a complete record (the sweep's keys beyond the trainer's are dropped)."""
    from bnc_deploy.train.bnc import TrainConfig  # lazy: imports torch (extra "train")

    names = {f.name for f in fields(TrainConfig)}
    values = {k: v for k, v in record.items() if k in names}
    if values.get("structure") == "authors":
        values["structure"] = "chow-liu"  # parents are passed explicitly; the label stays in the record
    return TrainConfig(**values, progress=False)


def _run_learn(task: ChunkTask, dataset, on_epoch):
    """TAN structure learning through the batched trainer (``train.structure_batched``); every
    configuration's model file is built (its row reports the file's errors, fine-tuning included),
    and kept as the keep policy says. A configuration the trainer refuses gets a failed row."""
    from bnc_deploy.train.bnc_batched import resolve_device
    from bnc_deploy.train.structure_batched import train_learned_tan_batched
    from bnc_deploy.train.structure_learning import StructureLearningConfig

    rows: list[dict | None] = [None] * len(task.records)
    pairs, positions = [], []
    for i, record in enumerate(task.records):
        try:
            config = bnc_config({k: v for k, v in record.items() if k != "structure"} | {"structure": "chow-liu"})
            learn = learn_config(record, StructureLearningConfig)
            config.validate()
            learn.validate()
        except ConfigError as exc:
            rows[i] = _failed_row(task, record, exc, 0.0)
            continue
        pairs.append((config, learn))
        positions.append(i)
    runs = train_learned_tan_batched(
        dataset, pairs, device=task.device, checkpoints=task.checkpoints, build=True, on_epoch=on_epoch
    )
    device = str(resolve_device(task.device))
    artifacts, config_epochs = {}, 0
    for i, run in zip(positions, runs):
        record, result = task.records[i], run.result
        errors = result.artifact.metadata.get("errors", {})
        # The structure-learning epochs are in the learned history; result.history holds only the
        # fine-tuning epochs that follow (none by default).
        learned_loss = run.history.get("train_loss", [])
        tuned_loss = result.history.get("train_loss", [])
        epochs = len(learned_loss) + len(tuned_loss)
        config_epochs += epochs
        losses = learned_loss + tuned_loss
        last = {
            "epoch": epochs,
            "train_loss": losses[-1] if losses else None,
            "train_error": errors.get("train"),
            "val_error": errors.get("val"),
            "test_error": errors.get("test"),
        }
        costs = analytic_costs(result.artifact)
        rows[i] = _row(task, record, [last] if epochs else [], last, costs, run.seconds, device, status="done")
        if _wants_model(task, i, _metric_value(last, task.metric)):
            artifacts[record["id"]] = result.artifact
    return rows, artifacts, config_epochs


def _failed_row(task: ChunkTask, record: dict, exc: Exception, seconds: float) -> dict:
    return {
        **_row(task, record, [], {}, _NoCosts(), seconds, task.device, status="failed"),
        "error": f"{type(exc).__name__}: {exc}",
    }


class _NoCosts:
    size_bits = n_parameters = n_ops = 0


def dnn_config(record: dict):
    from bnc_deploy.train.dnn import DNNConfig  # lazy: imports torch (extra "train")

    names = {f.name for f in fields(DNNConfig)}
    values = {k: v for k, v in record.items() if k in names}
    values["architecture"] = record["model"]
    if values.get("hidden") is not None:
        values["hidden"] = parse_hidden(values["hidden"])
    if values.get("image_shape"):
        values["image_shape"] = parse_image_shape(values["image_shape"])
    return DNNConfig(**values, progress=False)


def learn_config(record: dict, cls):
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in record.items() if k in names})
