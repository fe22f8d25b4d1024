"""Batched training of many BN classifiers at once: one tensor program with a leading configuration axis.

The models of a sweep are tiny, so the work is many small models. This trainer runs ``M``
configurations as ONE program: parameters ``rho (M, D, P, K, C)`` and ``class_rho (M, C)``, one
log-softmax, one quantizer pass, one gather-sum and one closed-form backward for all of them per
step, and one fused Adam call per learning-rate group. It runs on the CPU or on a GPU
(``device="cuda"``).

Contract
--------
* **Same algorithm as ``bnc-train``** (:func:`bnc_deploy.train.bnc.train_bnc`): the paper's hybrid
  loss (or ``nll``/``cll``), QAT with the straight-through estimator, Adam (torch's fused kernel),
  log-linear learning-rate decay, a per-epoch reshuffle from a generator seeded ``seed + 1``, the
  last incomplete batch dropped, initialisation from a generator seeded ``seed``.
* **Batch of one = bnc-train, bit for bit**, and **a configuration's result does not depend on what
  it was batched with**: every configuration keeps its own data order and initialisation, and
  every per-configuration value is computed by the same kernels on the same memory layout as the
  single-run trainer (each configuration's slice of ``rho`` is laid out exactly like the single
  run's tensor). ``tests/test_bnc_batched.py`` checks both on the CPU. On a GPU results are
  deterministic per configuration but not equal to the CPU's bits (different kernels).
* Configurations of one call must share the data (dataset, fold, validation split), the model and
  structure (parents), batch size, epochs and loss; they may differ in lr, lr decay, λ, γ, η, B,
  B_I (or float), seed, init, smoothing and Adam's eps. :func:`chunk_key` is the sharing rule;
  :class:`~bnc_deploy.errors.ConfigError` otherwise.
* Evaluation (validation and test error) runs at the ``checkpoints`` epochs only (every epoch
  gives the single run's full history); training loss and error are measured on the fly every
  epoch, as the single run does.
* ``on_checkpoint(epoch, view) -> keep mask or None`` lets a caller stop configurations early
  (successive halving): stopped configurations leave the tensors and finish with their state at
  that epoch; the others continue exactly as if they had never been batched with them.
* Memory: ``max_configs`` (default: from the device's free memory) splits larger calls into
  chunks that run one after another; results come back in input order.

Only this module and ``bnc.py`` build model files from the trained tables
(:func:`finish_artifact`, the single run's own artifact code). One step of a block of
configurations (the tensors, losses, gradients and fused Adam) is
:mod:`bnc_deploy.train.bnc_batched_step`; this module plans chunks and blocks and runs the epochs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bnc_deploy.datasets.base import DiscreteDataset
from bnc_deploy.errors import ConfigError
from bnc_deploy.train.batched_records import CheckpointView, ChunkRecords, epoch_plan
from bnc_deploy.train.bnc import TrainConfig, _check_reference_agrees, _to_artifact, resolve_parents
from bnc_deploy.train.bnc_batched_step import Chunk, evaluate, run_epoch, template_model
from bnc_deploy.train.common import TrainResult

#: Fields of TrainConfig that configurations of one call must share (besides the data).
SHARED_FIELDS = ("model", "structure", "epochs", "batch_size", "loss")
#: Fields that may differ within one call.
VARYING_FIELDS = (
    "bits",
    "int_bits",
    "init",
    "smoothing",
    "lr",
    "lr_decay",
    "hybrid_lambda",
    "hybrid_gamma",
    "hybrid_eta",
    "seed",
    "adam_eps",
)


def chunk_key(config: TrainConfig) -> tuple:
    """Configurations with equal keys can be trained in one batched call (given the same data)."""
    return tuple(getattr(config, name) for name in SHARED_FIELDS)


def resolve_device(device: str | None) -> torch.device:
    """``"cpu"``, ``"cuda"[:N]`` or ``"auto"`` (a GPU when torch sees one). ConfigError for a GPU that is absent."""
    device = device or "cpu"
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"unknown device {device!r}: use cpu, cuda, cuda:N or auto") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"--device {device}: torch sees no CUDA GPU here (torch {torch.__version__}; use --device cpu or auto)"
        )
    if resolved.type not in ("cpu", "cuda"):
        raise ConfigError(f"unsupported device {device!r}: use cpu, cuda, cuda:N or auto")
    return resolved


def describe_device(device: str | None) -> str:
    """The resolved device in words (``cuda (NVIDIA H100 80GB HBM3)``, ``cpu (2 threads)``)."""
    resolved = resolve_device(device)
    if resolved.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(resolved)})"
    return f"cpu ({torch.get_num_threads()} threads)"


@dataclass
class BatchedRun:
    """One configuration's outcome: its history, final tables, and (when built) its model file."""

    config: TrainConfig
    history: dict
    checkpoints: list[dict]  # {"epoch", "train_loss", "train_error", "val_error", "test_error"}
    stopped_at: int | None  # epoch of an early stop (halving), else None
    class_rho: np.ndarray  # (C,) float32, unnormalized
    rho: np.ndarray  # (D, P, K, C) float32, unnormalized, padded
    seconds: float  # this configuration's share of the chunk's wall time
    result: TrainResult | None = None


# -- the loop -----------------------------------------------------------------------------------------
def train_bnc_batched(
    dataset: DiscreteDataset,
    configs: Sequence[TrainConfig],
    *,
    device: str = "cpu",
    checkpoints: Sequence[int] | None = None,
    on_checkpoint: Callable[[CheckpointView], np.ndarray | None] | None = None,
    build: bool | Callable[[int, BatchedRun], bool] = True,
    max_configs: int | None = None,
    parents: np.ndarray | None = None,
    structure_source: str | None = None,
    on_epoch: Callable[[int, int], None] | None = None,
    cuda_graphs: bool = True,
) -> list[BatchedRun]:
    """Train every configuration of ``configs`` (sharing :func:`chunk_key`) on ``dataset``.

    ``checkpoints``: epochs (1-based) at which validation and test error are measured (None: every
    epoch, which is the single run's history; the last epoch is always one). ``build``: True to make
    each configuration's model file (:class:`TrainResult` in ``.result``, as ``train_bnc`` returns),
    False for none, or ``build(i, run)`` to decide per configuration (e.g. only the best ones).
    ``on_epoch(epoch, active)`` after every epoch (progress bars). ``cuda_graphs``: replay each step
    on a GPU as a CUDA graph (:mod:`bnc_deploy.train.cuda_graph`; no effect on the CPU).
    """
    configs = list(configs)
    if not configs:
        return []
    for c in configs:
        c.validate()
    first = chunk_key(configs[0])
    for i, c in enumerate(configs):
        if chunk_key(c) != first:
            diff = [
                f"{n}={getattr(c, n)!r} (first: {getattr(configs[0], n)!r})"
                for n in SHARED_FIELDS
                if getattr(c, n) != getattr(configs[0], n)
            ]
            raise ConfigError(f"configuration {i} cannot be batched with configuration 0: {', '.join(diff)}")
    dev = resolve_device(device)
    if parents is None:
        parents, structure_source = resolve_parents(configs[0], dataset)
    size = max_configs or _default_max_configs(configs[0], dataset, parents, dev)
    # Configurations with one learning-rate schedule and eps side by side: fused Adam then takes
    # one slice per group instead of one per configuration (results do not depend on the order).
    order = sorted(range(len(configs)), key=lambda i: (configs[i].lr, configs[i].lr_decay, configs[i].adam_eps))
    runs: list[BatchedRun | None] = [None] * len(configs)
    for start in range(0, len(order), size):
        positions = np.asarray(order[start : start + size])
        ran = _train_chunk(
            dataset,
            [configs[i] for i in positions],
            parents,
            dev,
            checkpoints,
            on_checkpoint,
            positions,
            on_epoch,
            cuda_graphs,
        )
        for pos, run in zip(positions, ran):
            wanted = build(int(pos), run) if callable(build) else build
            if wanted:
                run.result = finish_artifact(run, dataset, parents, structure_source)
            runs[int(pos)] = run
    return runs


def _default_max_configs(config: TrainConfig, dataset: DiscreteDataset, parents, device: torch.device) -> int:
    """Configurations per chunk so that the chunk's tensors fit comfortably in memory."""
    per_config = _table_size(dataset, parents) * 4
    n_eval = max(len(dataset.y_test), len(dataset.y_val) if dataset.y_val is not None else 0)
    # ~10 parameter-sized buffers (rho, Adam's two, theta, its quantized copy, gradients) plus the
    # evaluation's log-joint block and the batch's one-hot counts.
    # ~14 parameter-sized buffers at the peak of a step (rho, Adam's two, gradients, theta, its
    # quantized copy, exp(theta), the table gradient and temporaries) plus one evaluation block.
    per_config = per_config * 14 + min(n_eval, 4096) * dataset.n_classes * 4
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget = free * 0.5
    else:
        budget = 2 << 30  # 2 GiB on the CPU: fits CI machines, and larger chunks gain nothing there
    return max(1, int(budget // max(per_config, 1)))


#: CPU blocks: configurations whose tables together hold about this many floats are stepped as one
#: tensor program. A block's step then works in the caches; larger blocks were slower per
#: configuration-epoch on the 2-core CI machine (letter NB: M = 64 fastest, M = 256 slower).
CPU_BLOCK_FLOATS = 1 << 19


def _table_size(dataset: DiscreteDataset, parents: np.ndarray) -> int:
    """Floats of one configuration's padded ``rho`` (D, P, K, C)."""
    cards = np.asarray(dataset.cardinalities, dtype=np.int64)
    p_card = np.where(parents >= 0, cards[np.maximum(parents, 0)], 1)
    return int(len(cards) * max(int(p_card.max(initial=1)), 1) * max(int(cards.max(initial=1)), 1) * dataset.n_classes)


def _block_size(n_params: int, device: torch.device, m: int) -> int:
    if device.type == "cuda":
        return m
    return max(1, CPU_BLOCK_FLOATS // max(n_params, 1))


@dataclass
class _Block:
    chunk: Chunk
    active: np.ndarray  # chunk positions (0..M-1) of the block's configurations still training


def _blocks(
    dataset: DiscreteDataset, configs: list[TrainConfig], parents: np.ndarray, device: torch.device, graphs: bool
) -> list[_Block]:
    """The chunk's configurations in blocks of :func:`_block_size`, in order (``graphs``: CUDA graphs, on a GPU)."""
    m0 = len(configs)
    size = _block_size(_table_size(dataset, parents), device, m0)
    return [
        _Block(Chunk(configs[a : a + size], dataset, parents, device, graphs), np.arange(a, min(a + size, m0)))
        for a in range(0, m0, size)
    ]


@dataclass
class _Plan:
    """What every block of a chunk shares: the data on the device, the batches and the measured epochs."""

    epochs: int
    batch: int
    loss: str
    train_idx: torch.Tensor
    train_y: torch.Tensor
    evals: dict  # split name -> (flat indices, labels)
    n_rows: int
    n_batches: int
    wanted: set  # epochs at which validation and test error are measured


def _plan(
    dataset: DiscreteDataset,
    configs: list[TrainConfig],
    template,
    device: torch.device,
    checkpoints: Sequence[int] | None,
) -> _Plan:
    epochs, batch = configs[0].epochs, configs[0].batch_size
    train_idx = template.flat_indices(dataset.x_train).to(device)
    train_y = torch.as_tensor(dataset.y_train, dtype=torch.int64, device=device)
    evals = {
        "test": (
            template.flat_indices(dataset.x_test).to(device),
            torch.as_tensor(dataset.y_test, dtype=torch.int64, device=device),
        )
    }
    if dataset.x_val is not None:
        evals["val"] = (
            template.flat_indices(dataset.x_val).to(device),
            torch.as_tensor(dataset.y_val, dtype=torch.int64, device=device),
        )
    n = train_y.shape[0]
    n_batches, wanted = epoch_plan(epochs, batch, n, checkpoints)
    return _Plan(epochs, batch, configs[0].loss, train_idx, train_y, evals, n, n_batches, wanted)


class _History(ChunkRecords):
    """A chunk's records (:class:`~bnc_deploy.train.batched_records.ChunkRecords`) and the early
    stops' tables; per-configuration runs are built at the end (:meth:`runs`)."""

    def __init__(self, m0: int, plan: _Plan):
        super().__init__(m0, plan.epochs, len(plan.wanted), "val" in plan.evals)
        self.stopped: dict[int, tuple] = {}  # position -> (epoch, rho, class_rho) of an early stop

    def record_epoch(self, blk: _Block, epoch: int, losses: np.ndarray, errors: np.ndarray) -> None:
        self.per_epoch["lr"][blk.active, epoch - 1] = blk.chunk.rates[:, epoch - 1]
        self.per_epoch["train_loss"][blk.active, epoch - 1] = losses
        self.per_epoch["train_error"][blk.active, epoch - 1] = errors
        self.last_epoch[blk.active] = epoch

    def measure(self, blocks: list[_Block], epoch: int, evals: dict) -> None:
        """Validation and test error of every active configuration at a checkpoint epoch."""
        self.check_epochs.append(epoch)
        for blk in blocks:
            for name, values in evaluate(blk.chunk, evals).items():
                self.per_check[f"{name}_error"][blk.active, len(self.check_epochs) - 1] = values

    def stop(self, blocks: list[_Block], keep, epoch: int) -> list[_Block]:
        """Drop the configurations ``keep`` rejects (their state at ``epoch`` is kept); the blocks left."""
        keep = np.asarray(keep, dtype=bool)
        start = 0
        for blk in blocks:
            part = keep[start : start + blk.chunk.m]
            start += blk.chunk.m
            for j in np.flatnonzero(~part):
                self.stopped[int(blk.active[j])] = (
                    epoch,
                    blk.chunk.rho[j].cpu().numpy().copy(),
                    blk.chunk.class_rho[j].cpu().numpy().copy(),
                )
            if not part.all():
                blk.chunk.keep(part)
                blk.active = blk.active[part]
        return [blk for blk in blocks if blk.chunk.m > 0]

    def runs(self, configs: list[TrainConfig], blocks: list[_Block], checkpoints, total: float) -> list[BatchedRun]:
        """One :class:`BatchedRun` per configuration, in chunk order (``total``: the chunk's seconds)."""
        final = {
            int(pos): (blk.chunk.rho[j].cpu().numpy(), blk.chunk.class_rho[j].cpu().numpy())
            for blk in blocks
            for j, pos in enumerate(blk.active)
        }
        m0 = len(configs)
        out: list[BatchedRun] = []
        for pos in range(m0):
            h, points = self.history(pos, checkpoints), self.points(pos)
            if pos in self.stopped:
                epoch_stopped, rho, class_rho = self.stopped[pos]
            else:
                epoch_stopped = None
                rho, class_rho = final[pos]
            out.append(
                BatchedRun(
                    config=configs[pos],
                    history=h,
                    checkpoints=points,
                    stopped_at=epoch_stopped,
                    class_rho=class_rho,
                    rho=rho,
                    seconds=total / m0,
                )
            )
        return out


def _train_block_epoch(
    blk: _Block, perms: dict, epoch: int, plan: _Plan, history: _History, positions: np.ndarray, device
) -> None:
    """One epoch of one block, recorded; FloatingPointError naming the first configuration whose loss is not finite."""
    losses, errors = run_epoch(
        blk.chunk, perms, epoch, plan.train_idx, plan.train_y, plan.n_batches, plan.batch, plan.loss, device
    )
    if not np.all(np.isfinite(losses)):
        bad = int(blk.active[np.flatnonzero(~np.isfinite(losses))[0]])
        raise FloatingPointError(
            f"configuration {int(positions[bad])}: training loss became "
            f"{losses[~np.isfinite(losses)][0]} in epoch {epoch}; try a smaller lr"
        )
    history.record_epoch(blk, epoch, losses, errors)


def _train_chunk(
    dataset, configs, parents, device, checkpoints, on_checkpoint, positions, on_epoch, graphs: bool = False
) -> list[BatchedRun]:
    """Train ``configs`` together (memory permitting) in blocks stepped one after another each epoch.

    All blocks advance epoch by epoch, so a checkpoint (and ``on_checkpoint``, e.g. halving)
    sees every configuration of the chunk at once.
    """
    started = time.perf_counter()
    blocks = _blocks(dataset, configs, parents, device, graphs)
    plan = _plan(dataset, configs, blocks[0].chunk.template, device, checkpoints)
    history = _History(len(configs), plan)
    # One shuffle stream per distinct seed: configurations with equal seeds share their order.
    generators = {s: torch.Generator().manual_seed(s + 1) for s in sorted({c.seed for c in configs})}
    for epoch in range(1, plan.epochs + 1):
        epoch_started = time.perf_counter()
        perms = {s: torch.randperm(plan.n_rows, generator=g) for s, g in generators.items()}
        for blk in blocks:
            _train_block_epoch(blk, perms, epoch, plan, history, positions, device)
        measured = epoch in plan.wanted
        if measured:
            history.measure(blocks, epoch, plan.evals)
        active = np.concatenate([blk.active for blk in blocks])
        history.per_epoch["seconds"][active, epoch - 1] = (time.perf_counter() - epoch_started) / len(active)
        if on_epoch is not None:
            on_epoch(epoch, len(active))
        if measured and on_checkpoint is not None and epoch < plan.epochs:
            keep = on_checkpoint(history.view(epoch, positions, active))
            if keep is not None and not np.all(keep):
                blocks = history.stop(blocks, keep, epoch)
                if not blocks:
                    break
    return history.runs(configs, blocks, checkpoints, time.perf_counter() - started)


def finish_artifact(
    run: BatchedRun, dataset: DiscreteDataset, parents: np.ndarray, structure_source: str | None
) -> TrainResult:
    """The configuration's model file, built by the single run's own code (reference check included)."""
    model = template_model(run.config, dataset, parents)
    with torch.no_grad():
        model.rho.copy_(torch.as_tensor(run.rho))
        model.class_rho.copy_(torch.as_tensor(run.class_rho))
    seconds = run.seconds
    artifact = _to_artifact(model, dataset, run.config, parents, structure_source, run.history, seconds=seconds)
    test_indices = model.flat_indices(dataset.x_test)
    _check_reference_agrees(model, artifact, test_indices, dataset.x_test)
    if run.stopped_at is not None:
        artifact.metadata["stopped_at_epoch"] = run.stopped_at
    return TrainResult(artifact=artifact, history=run.history, seconds=seconds)
