"""The sweep driver: grid → chunks → a backend → the results table and the kept model files.

Contract
--------
* Every configuration of the grid gets exactly one row in ``DIR/results.sqlite`` (``sweep.table``),
  keyed by its :func:`~bnc_deploy.sweep.records.config_id`. ``resume=True`` skips the ids already
  there (done, stopped or failed) and refuses a directory that holds another grid; without it a
  directory that already has rows is refused (so a typo never mixes two sweeps).
* **Chunks.** Records are grouped by what one batched call must share (data split, model,
  structure, epochs, batch size, loss: ``train.bnc_batched.chunk_key``; a DNN's bucket of one
  shape, ``sweep.estimate.dnn_bucket``, unless halving ranks across buckets) and split into chunks of
  at most ``max_configs``. A chunk's rows are written in one transaction when it finishes, so an
  interruption (even ``kill -9``) loses at most the chunks in flight, never a finished one.
* **Selection.** ``select="validation"`` (default) ranks on the final validation error (the
  records need a validation fraction); ``select="test"`` ranks on the final test error, the
  paper's protocol, and every output says so. Configurations are compared within their
  *selection group* (``group_by`` keys, default model and bits: one point of a size curve).
* **Successive halving** (``halving=True``): rungs at ``epochs / rate**k`` (k = 1, 2, ... while the
  rung is at least ``min_rung`` epochs); at each rung, each group keeps its best ``1/rate`` in the
  chunk; the others stop with status ``stopped``. Halving acts within a chunk, so keep a group in
  one chunk (``max_configs`` at least the group's size) for it to rank the whole group.
* **Kept models** (``keep``): ``best`` (default) writes the model file of the best configuration
  per group so far to ``DIR/models/<id>.bnc`` and deletes the superseded one (table first, then
  the file); ``all`` keeps every model; ``none`` keeps none.
* The driver is the only writer of ``DIR``; backends return rows and models, never write.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bnc_deploy.artifacts import save_artifact
from bnc_deploy.errors import BncDeployError, ConfigError
from bnc_deploy.fileio import atomic_write_bytes, stray_temporaries
from bnc_deploy.sweep.backends import make_backend
from bnc_deploy.sweep.estimate import dnn_bucket
from bnc_deploy.sweep.grid import GridSpec, expand
from bnc_deploy.sweep.paper import dataset_name, find_structures_dir
from bnc_deploy.sweep.records import BN_MODELS, complete, config_id, split_seed
from bnc_deploy.sweep.table import TABLE_FILE, ResultsTable
from bnc_deploy.sweep.tasks import ChunkTask, bnc_config, dnn_config, learn_config

#: Keys that name a record's selection group by default (one point of a size curve).
DEFAULT_GROUP_BY = ("model", "structure", "bits", "weight_bits", "activation", "one_hot", "match_bits", "match_ops")
MODELS_DIR = "models"
#: Families whose chunk is one call of a batched trainer that ranks at checkpoints (halving applies).
BATCHED_FAMILIES = ("bnc", "dnn")


@dataclass
class SweepOptions:
    directory: Path
    select: str = "validation"
    device: str = "cpu"
    backend: str = "local"
    address: str | None = None
    halving: bool = False
    halving_rate: float = 3.0
    min_rung: int = 5
    checkpoint_every: int | None = None
    keep: str = "best"
    max_configs: int | None = None
    resume: bool = False
    data_dir: str | None = None
    structures_dir: str | None = None
    group_by: tuple = DEFAULT_GROUP_BY
    progress: bool = False
    ray_num_cpus: int | None = None


@dataclass
class SweepSummary:
    directory: str
    configurations: int
    skipped: int  # already in the table (resume)
    trained: int
    failed: int
    stopped: int
    select: str
    protocol: str
    device: str
    backend: str
    seconds: float
    config_epochs: int
    config_epochs_per_second: float
    best: dict = field(default_factory=dict)
    table: str = ""
    csv: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def protocol_label(select: str) -> str:
    return (
        "selected on the validation split"
        if select == "validation"
        else "selected on the TEST split (the paper's protocol; optimistic)"
    )


def records_of(spec: GridSpec) -> list[dict]:
    """The grid's complete records, each with its ``id``."""
    records = []
    for i, record in enumerate(expand(spec)):
        full = complete(record, where=f"configuration {i}")
        if "data" not in full:
            raise ConfigError("the grid names no dataset: give --data (or 'data' in the grid's [fixed])")
        records.append({**full, "id": config_id(record)})
    return records


def group_of(record: dict, keys: tuple) -> str:
    return json.dumps({k: record[k] for k in keys if k in record}, sort_keys=True)


def halving_rungs(epochs: int, rate: float, min_rung: int) -> list[int]:
    """Rung epochs ``round(epochs / rate**k)`` >= ``min_rung``, ascending, below ``epochs``."""
    rungs, k = set(), 1
    while True:
        rung = int(round(epochs / rate**k))
        if rung < max(min_rung, 1):
            break
        if rung < epochs:
            rungs.add(rung)
        k += 1
    return sorted(rungs)


def _family(record: dict) -> str:
    if record["model"] not in BN_MODELS:
        return "dnn"
    return "learn" if record.get("structure") == "learn" else "bnc"


def _data_key(record: dict) -> tuple:
    # The validation split is seeded by the split seed: the configuration's seed unless one is given.
    return (record["data"], record["fold"], record["validation"], split_seed(record))


def _chunk_key(record: dict, halving: bool) -> tuple:
    family = _family(record)
    if family == "dnn" and not halving:
        # One chunk per bucket of one shape (and epochs, batch size), so an interrupted sweep keeps every
        # bucket that finished; halving ranks a selection group within a chunk, so it keeps them together.
        return (family, _data_key(record), dnn_bucket(record, "cuda"))
    if family == "bnc":
        return (
            family,
            _data_key(record),
            record["model"],
            record["structure"],
            record["epochs"],
            record["batch_size"],
            record["loss"],
        )
    return (family, _data_key(record))


def authors_parents(data: str, fold: int, structures_dir=None) -> list[int]:
    """The authors' fixed TAN structure for ``data`` (letter, satimage, usps, mnist) and fold."""
    path = find_structures_dir(structures_dir) / "icpr2020_tan_structures.json"
    try:
        entries = json.loads(path.read_text())["structures"]
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"{path}: cannot read the authors' TAN structures ({exc})") from None
    name = dataset_name(data)
    for entry in entries:
        if entry["dataset"] == name and int(entry["fold"]) == int(fold):
            return [int(p) for p in entry["parents"]]
    known = sorted({f"{e['dataset']} fold {e['fold']}" for e in entries})
    raise ConfigError(
        f"structure 'authors': {path} has no structure for {name} fold {fold} (it has: {', '.join(known)})"
    )


def plan_chunks(records: list[dict], options: SweepOptions) -> list[ChunkTask]:
    """Tasks for ``records`` (not yet done), grouped and ordered so that a group stays together."""
    by_key: dict[tuple, list[dict]] = {}
    for record in records:
        by_key.setdefault(_chunk_key(record, options.halving), []).append(record)
    metric = "val_error" if options.select == "validation" else "test_error"
    tasks = []
    for key, members in by_key.items():
        family = key[0]
        first = members[0]
        data = {
            "spec": first["data"],
            "fold": first["fold"],
            "validation": first["validation"],
            "seed": split_seed(first),
            "data_dir": options.data_dir,
        }
        if options.select == "validation" and not first["validation"]:
            raise ConfigError(
                "--select validation needs a validation split: give --validation F (e.g. 0.2), "
                "or --select test for the paper's protocol"
            )
        parents, source = None, None
        if family == "bnc" and first["structure"] == "authors":
            parents, source = (
                authors_parents(first["data"], first["fold"], options.structures_dir),
                "authors (icpr2020_tan_structures.json)",
            )
        elif family == "bnc" and first["structure"] not in ("chow-liu",) and first["model"] == "tan":
            parents, source = None, None  # a file: resolved by the worker like bnc-train
        # Keep each selection group contiguous, so halving sees a group whole where it fits.
        members.sort(key=lambda r: group_of(r, options.group_by))
        # Every family trains batched: a chunk takes the whole group, the trainer splits it to memory.
        size = options.max_configs or len(members)
        checkpoints = _checkpoints(first["epochs"], options)
        halving = None
        if options.halving and family in BATCHED_FAMILIES:
            halving = {
                "rate": options.halving_rate,
                "metric": metric,
                "rungs": halving_rungs(first["epochs"], options.halving_rate, options.min_rung),
            }
            checkpoints = sorted(set(checkpoints) | set(halving["rungs"]))
        for start in range(0, len(members), size):
            part = members[start : start + size]
            tasks.append(
                ChunkTask(
                    family=family,
                    data=data,
                    records=part,
                    groups=[group_of(r, options.group_by) for r in part],
                    parents=parents,
                    structure_source=source,
                    device=options.device,
                    checkpoints=checkpoints,
                    halving=halving,
                    metric=metric,
                    keep=options.keep,
                    select=options.select,
                    backend=options.backend,
                )
            )
    return tasks


def check_plan(records: list[dict], options: SweepOptions) -> list[ChunkTask]:
    """Every check that needs no data and no training, before anything is written: each
    configuration's trainer settings (``validate()`` of the config the worker will build) and the
    plan's own rules (a validation split for ``--select validation``, the authors' structures).
    Returns the plan; ConfigError naming the configuration otherwise."""
    checked: set[str] = set()
    for record in records:
        family = _family(record)
        # Records that differ only in keys a trainer does not validate share one check.
        key = json.dumps(
            {k: v for k, v in record.items() if k not in ("id", "draw", "data", "fold")}, sort_keys=True, default=str
        )
        if key in checked:
            continue
        checked.add(key)
        try:
            if family == "dnn":
                dnn_config(record).validate()
            elif family == "learn":
                # Lazy: the trainers import torch (extra "train"); the base install imports this module.
                from bnc_deploy.train.structure_learning import StructureLearningConfig

                bnc_config({**record, "structure": "chow-liu"}).validate()
                learn_config(record, StructureLearningConfig).validate()
            else:
                bnc_config(record).validate()
        except BncDeployError as exc:
            raise ConfigError(f"configuration {record['id']} ({_brief(record)}): {exc}") from None
    return plan_chunks(records, options)


def _brief(record: dict) -> str:
    """The record's model and the keys that usually vary, for a message."""
    keys = ("model", "structure", "bits", "int_bits", "lr", "weight_bits", "hidden", "size_penalty", "epochs")
    return ", ".join(f"{k}={record[k]}" for k in keys if record.get(k) is not None)


def _clean_directory(table, directory: Path) -> None:
    """Resume after a crash: remove what a killed driver can leave behind (it is the only writer,
    and it is not running): temporary files of its atomic writes, and model files that no row
    names (written just before a chunk's rows, or superseded just before their deletion)."""
    named = {str(directory / r["model_path"]) for r in table.rows() if r.get("model_path")}
    for target in (directory / "results.csv", directory / "summary.json"):
        for tmp in stray_temporaries(target):
            tmp.unlink(missing_ok=True)
    models = directory / MODELS_DIR
    if models.is_dir():
        for path in models.iterdir():
            stray = path.name.startswith(".") and ".tmp" in path.name
            orphan = path.is_file() and path.suffix == ".bnc" and str(path) not in named
            if stray or orphan:
                path.unlink(missing_ok=True)


def _discard_empty_table(table, directory: Path, created_dir: bool) -> None:
    """A fresh sweep that failed before its first row: remove its table (and the directory it
    created), so the corrected command can use the same directory without --resume."""
    if len(table):
        return
    table.close()
    for suffix in ("", "-wal", "-shm", "-journal"):
        (directory / (TABLE_FILE + suffix)).unlink(missing_ok=True)
    if created_dir:
        try:
            directory.rmdir()  # only when empty
        except OSError:
            pass


def _checkpoints(epochs: int, options: SweepOptions) -> list[int]:
    points = {epochs} if epochs else set()
    if options.checkpoint_every:
        points |= set(range(options.checkpoint_every, epochs + 1, options.checkpoint_every))
    return sorted(points)


class _Best:
    """Best row per selection group (from the table), and the keep-best hand-over of model files."""

    def __init__(self, table, options: SweepOptions):
        self.table, self.options = table, options
        self.metric = "val_error" if options.select == "validation" else "test_error"
        self.best: dict[str, tuple[float, str, str | None]] = {}
        for row in table.rows():
            self.consider(row)

    def value(self, row: dict) -> float:
        v = (row.get("final") or {}).get(self.metric)
        return (
            float("inf")
            if v is None or (isinstance(v, float) and math.isnan(v)) or row["status"] != "done"
            else float(v)
        )

    def consider(self, row: dict) -> None:
        group = group_of(row["config"], self.options.group_by)
        value = self.value(row)
        if value < self.best.get(group, (float("inf"), "", None))[0]:
            self.best[group] = (value, row["id"], row.get("model_path"))

    def thresholds(self) -> dict:
        return {group: value for group, (value, _, _) in self.best.items()} if self.options.keep == "best" else {}


def run_sweep(spec: GridSpec, options: SweepOptions, *, on_progress=None) -> SweepSummary:
    """Run (or resume) the sweep of ``spec`` into ``options.directory``."""
    started = time.perf_counter()
    if options.select not in ("validation", "test"):
        raise ConfigError(f"--select must be validation or test, got {options.select!r}")
    if options.keep not in ("best", "all", "none"):
        raise ConfigError(f"--keep must be best, all or none, got {options.keep!r}")
    records = records_of(spec)
    spec_record = {
        "grid": spec.to_dict(),
        "select": options.select,
        "halving": options.halving,
        "halving_rate": options.halving_rate if options.halving else None,
        # Halving ranks within a chunk from min_rung on: both shape the results.
        "min_rung": options.min_rung if options.halving else None,
        "max_configs": options.max_configs if options.halving else None,
        "group_by": list(options.group_by),
    }
    directory = Path(options.directory)
    fresh = not (directory / "results.sqlite").exists()
    if not fresh and not options.resume:
        raise ConfigError(f"{directory} already holds a sweep; add --resume to continue it, or give a new -o")
    check_plan(records, options)  # refusals before anything is written
    created_dir = not directory.exists()
    table = ResultsTable(directory, spec=spec_record)
    try:
        if not fresh:
            _clean_directory(table, directory)
        done = table.done_ids()
        todo = [r for r in records if r["id"] not in done]
        best = _Best(table, options)
        tasks = plan_chunks(todo, options)
        backend = make_backend(options)
        total_epochs = sum(len(t.records) * t.records[0]["epochs"] for t in tasks)
        progress = _Progress(len(records), len(records) - len(todo), total_epochs, options, best)
        counts = {"failed": 0, "stopped": 0, "trained": 0}
        config_epochs = 0
        models = directory / MODELS_DIR
        try:
            for task, outcome in backend.run(tasks, thresholds=best.thresholds, on_epoch=progress.epoch):
                config_epochs += outcome.config_epochs
                _write_outcome(table, best, task, outcome, models, options)
                for row in outcome.rows:
                    counts["trained"] += 1
                    counts[row["status"]] = counts.get(row["status"], 0) + 1
                progress.chunk_done(task, outcome)
                if on_progress is not None:
                    on_progress(task, outcome)
        finally:
            progress.close()
            backend.close()
        csv_path = table.export_csv(directory / "results.csv")
        seconds = time.perf_counter() - started
        summary = SweepSummary(
            directory=str(directory),
            configurations=len(records),
            skipped=len(records) - len(todo),
            trained=counts["trained"],
            failed=counts["failed"],
            stopped=counts["stopped"],
            select=options.select,
            protocol=protocol_label(options.select),
            device=_device_name(options),
            backend=options.backend,
            seconds=seconds,
            config_epochs=config_epochs,
            config_epochs_per_second=config_epochs / seconds if seconds > 0 else 0.0,
            best=_best_summary(table, best),
            table=str(table.path),
            csv=str(csv_path),
        )
        _write_summary(directory, summary)
        return summary
    except BaseException:
        if fresh:
            _discard_empty_table(table, directory, created_dir)
        raise
    finally:
        table.close()


def _device_name(options: SweepOptions) -> str:
    if options.backend == "ray" and options.address:
        return f"{options.device} (Ray cluster {options.address})"  # not this machine's device
    # Lazy: the batched trainer imports torch (extra "train").
    from bnc_deploy.train.bnc_batched import describe_device

    return describe_device(options.device)


def _write_outcome(table, best: _Best, task: ChunkTask, outcome, models: Path, options: SweepOptions) -> None:
    """Model files first (each atomic), then the hand-over (superseded rows lose their path), then
    the chunk's rows in one transaction, then the superseded files are deleted.

    A crash between the steps leaves at worst orphan files (removed by the resume, which reruns
    the chunk), never a row naming a missing file, never two kept models in one group.
    """
    rows = outcome.rows
    written: dict[str, Path] = {}
    replaced: list[tuple[str, str]] = []  # (id, model_path) of stored rows that lose their file
    for row in rows:
        artifact = outcome.artifacts.get(row["id"])
        if artifact is None:
            continue
        value, group = best.value(row), group_of(row["config"], options.group_by)
        if options.keep == "best":
            old = best.best.get(group)
            if old is not None and value >= old[0]:
                continue
            if old is not None and old[2] and old[1] not in written:
                replaced.append((old[1], old[2]))
        models.mkdir(parents=True, exist_ok=True)
        path = models / f"{row['id']}.bnc"  # BN and DNN model files share the container format
        save_artifact(artifact, path)
        row["model_path"] = str(path.relative_to(table.directory))
        written[row["id"]] = path
        if options.keep == "best":
            best.best[group] = (value, row["id"], row["model_path"])
    superseded: list[Path] = []
    if options.keep == "best":
        winners = {entry[1] for entry in best.best.values()}
        for row in rows:
            if row["id"] in written and row["id"] not in winners:  # beaten later in the same chunk
                superseded.append(written[row["id"]])
                row["model_path"] = None
    # Stored rows lose their path *before* the new rows land: a kill between the two steps then
    # leaves orphan files (a resume removes them and reruns the chunk), never two rows of one group
    # naming a model file.
    for rid, path in replaced:
        table.clear_model_path(rid)
        superseded.append(table.directory / path)
    table.add(rows)
    for row in rows:
        best.consider(row)
    for path in superseded:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def _best_summary(table, best: _Best) -> dict:
    rows = {r["id"]: r for r in table.rows()}
    out = {}
    for group, (_, rid, _) in sorted(best.best.items()):
        row = rows.get(rid)
        if row is None:
            continue
        out[group] = {
            "id": rid,
            "config": row["config"],
            "final": row["final"],
            "model_path": row["model_path"],
            "size_bits": row["size_bits"],
        }
    return out


def _write_summary(directory: Path, summary: SweepSummary) -> None:
    atomic_write_bytes(directory / "summary.json", (json.dumps(summary.to_dict(), indent=2) + "\n").encode())


class _Progress:
    """A tqdm bar over configuration-epochs: configurations done, best so far, ETA."""

    def __init__(self, total_configs: int, done: int, total_epochs: int, options: SweepOptions, best: _Best):
        self.total_configs, self.done, self.best = total_configs, done, best
        self.counted = 0  # configuration-epochs reported by on_epoch since the last chunk
        self.bar = None
        if options.progress:
            from tqdm.auto import tqdm  # lazy: tqdm comes with the "train" extra, not the base install

            self.bar = tqdm(total=total_epochs, unit="cfg-epoch", desc="sweep", smoothing=0.05, leave=True)
            self._postfix()

    def _postfix(self) -> None:
        if self.bar is None:
            return
        values = [v for v, _, _ in self.best.best.values()]
        shown = f"{min(values):.4f}" if values else "-"
        self.bar.set_postfix(configs=f"{self.done}/{self.total_configs}", best=shown, refresh=False)

    def epoch(self, epoch: int, active: int) -> None:
        self.counted += active
        if self.bar is not None:
            self.bar.update(active)

    def chunk_done(self, task, outcome) -> None:
        self.done += len(outcome.rows)
        counted, self.counted = self.counted, 0
        if self.bar is not None:
            planned = len(task.records) * task.records[0]["epochs"]
            # The chunk's planned epochs not counted yet: those halving skipped, and all of them where
            # no per-epoch report came (a Ray worker cannot call back).
            self.bar.update(max(0, planned - counted))
            self._postfix()
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
