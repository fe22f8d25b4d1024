"""Batched TAN structure learning: many configurations as one tensor program with a leading configuration axis.

A structure-learning sweep (the paper's Fig. 5: λ_MS × lr × seeds) trains many small models. This
trainer runs ``M`` configurations as ONE program with a leading configuration axis: all candidate
tables in one compact buffer (:class:`~bnc_deploy.train.structure_batched_step.Layout`),
``class_rho (M, C)`` and structure logits ``phi (M, D, J)``; per step one log-softmax per run of
equally long table rows, one gather-sum, one loss, a closed-form backward (the single run's
autograd graph), one fused Adam call per learning-rate group and one structure Adam for all of
them. It runs on the CPU or on a GPU (``device="cuda"``).

Contract
--------
* **Same algorithm as** :func:`~bnc_deploy.train.structure_learning.train_learned_tan`: the
  straight-through Gumbel-softmax sample per step from a generator seeded ``seed + 2``, the expected
  size penalty, the CPTs' fused Adam on the decaying schedule, the structure logits' own Adam at
  ``structure_lr``, the temperature schedule, a per-epoch reshuffle from a generator seeded
  ``seed + 1``, the initialisation and candidate sets of the single run's own code, and the
  single run's model file (:func:`~bnc_deploy.train.structure_learning.finish_learned_tan`, which
  also runs ``finetune_epochs`` of ``train_bnc`` per configuration after the batched phase).
* **Batch of one = train_learned_tan, bit for bit**, and **a configuration's result does not depend
  on what it was batched with** (on the CPU): the same per-epoch history (every key but
  ``seconds``), learned parents, structure probabilities and model file; every per-configuration
  value is computed by the same kernels on the same memory layout as the single run (see
  :mod:`bnc_deploy.train.structure_batched_step`). ``tests/test_structure_batched.py`` checks both.
  On a GPU results are deterministic per configuration but not the CPU's bits.
* Configurations of one call must share the data, ``model`` ("tan"), ``epochs``, ``batch_size``,
  ``loss`` and the temperature schedule (``tau_start``, ``tau_end``): :func:`chunk_key` is the
  sharing rule, :class:`~bnc_deploy.errors.ConfigError` names the differing field otherwise. They
  may differ in λ_MS and its mode, seed, lr, lr decay, ``structure_lr``, hybrid λ, γ, η, Adam's eps,
  init, smoothing, bits, fine-tuning epochs and the candidate sets (``candidates``, ``order``,
  ``candidates_file``). Sets with different numbers of slots J run as separate buckets one after
  another; sets of one J but different table rows share a bucket (each configuration keeps its own
  rows; the layout takes the longest row where they differ).
* Test error (the single run's history) is measured at the ``checkpoints`` epochs (None: every
  epoch, the single run's full history; with checkpoints the history gains ``checkpoint_epochs``);
  the validation error of the argmax structure too where the data has a validation split (for
  ``on_checkpoint`` and :attr:`StructureRun.checkpoints` only: the single run has none).
* ``on_checkpoint(view) -> keep mask or None`` stops configurations early (successive halving):
  stopped ones finish with their state and history at that epoch; the others continue exactly as
  if they had never been batched with them.
* Memory: ``max_configs`` (default: from the device's memory) splits a bucket into chunks that run
  one after another; results come back in input order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from bnc_deploy.artifacts import BNCArtifact
from bnc_deploy.datasets.base import DiscreteDataset
from bnc_deploy.errors import ConfigError
from bnc_deploy.models.structure_learning import StructureLearningTAN
from bnc_deploy.train.batched_records import CheckpointView, ChunkRecords, epoch_plan
from bnc_deploy.train.bnc import TrainConfig
from bnc_deploy.train.bnc_batched import resolve_device
from bnc_deploy.train.common import TrainResult
from bnc_deploy.train.structure_batched_step import SLChunk, step
from bnc_deploy.train.structure_learning import (
    HISTORY_KEYS,
    StructureLearningConfig,
    build_structure_model,
    candidate_parameter_counts,
    finish_learned_tan,
    structure_candidates,
    tan_parameters,
    temperatures,
)

#: Fields of TrainConfig that configurations of one call must share (besides the data).
SHARED_FIELDS = ("model", "epochs", "batch_size", "loss")
#: Fields of StructureLearningConfig they must share (the temperature schedule).
SHARED_SL_FIELDS = ("tau_start", "tau_end")


def chunk_key(config: TrainConfig, sl: StructureLearningConfig) -> tuple[Any, ...]:
    """Pairs with equal keys can be trained in one batched call (given the same data)."""
    return tuple(getattr(config, n) for n in SHARED_FIELDS) + tuple(getattr(sl, n) for n in SHARED_SL_FIELDS)


@dataclass
class StructureRun:
    """One configuration's outcome: its structure-learning history, final tensors and (when built) model file."""

    config: TrainConfig
    sl: StructureLearningConfig
    history: dict[str, list[Any]]  # train_learned_tan's metadata["structure_learning"]["history"]
    checkpoints: list[dict[str, Any]]  # {"epoch", "train_loss", "train_error", "val_error", "test_error"}
    stopped_at: int | None  # epoch of an early stop (halving), else None
    candidates: np.ndarray  # (D, J)
    class_rho: np.ndarray  # (C,) float32, unnormalized
    rho: np.ndarray  # (R, K, C) float32, the candidate rows
    phi: np.ndarray  # (D, J) float32, structure logits
    seconds: float  # this configuration's share of its chunk's wall time
    result: TrainResult | None = None
    sets: Any = field(default=None, repr=False)  # CandidateSets of a candidates file, or None
    model: StructureLearningTAN | None = field(default=None, repr=False)  # the trained model (CPU)

    @property
    def parents(self) -> np.ndarray:
        """The learned (argmax) parents, ``-1`` = class only."""
        if self.model is None:
            raise ValueError("this run holds no model")
        parents: np.ndarray = self.model.parents()
        return parents


@dataclass
class _Member:
    position: int
    config: TrainConfig
    sl: StructureLearningConfig
    candidates: np.ndarray
    sets: Any
    model: StructureLearningTAN | None = None  # built per chunk (memory)


# -- the call ---------------------------------------------------------------------------------------
def train_learned_tan_batched(
    dataset: DiscreteDataset,
    configs: Sequence[tuple[TrainConfig, StructureLearningConfig | None]],
    *,
    device: str = "cpu",
    checkpoints: Sequence[int] | None = None,
    on_checkpoint: Callable[[CheckpointView], np.ndarray | None] | None = None,
    build: bool | Callable[[int, StructureRun], bool] = True,
    max_configs: int | None = None,
    on_epoch: Callable[[int, int], None] | None = None,
) -> list[StructureRun]:
    """Learn a TAN structure for every ``(TrainConfig, StructureLearningConfig)`` pair of ``configs``.

    ``checkpoints``: epochs (1-based) at which the test (and validation) error is measured (None:
    every epoch; the last epoch always is). ``build``: True to make each configuration's model file
    (``.result``: the :class:`TrainResult` ``train_learned_tan`` returns), False for none, or
    ``build(i, run)`` to decide per configuration. ``on_epoch(epoch, active)`` after every epoch.
    """
    members = _members(dataset, configs)
    if not members:
        return []
    dev = resolve_device(device)
    runs: list[StructureRun | None] = [None] * len(members)
    for bucket in _buckets(members):
        size = max_configs or _default_max_configs(dataset, bucket[0], dev)
        for start in range(0, len(bucket), size):
            chunk = bucket[start : start + size]
            for mb in chunk:
                mb.model = build_structure_model(dataset, mb.config, mb.sl, mb.candidates)
            for mb, run in zip(chunk, _train_chunk(dataset, chunk, dev, checkpoints, on_checkpoint, on_epoch)):
                mb.model = None
                if build(mb.position, run) if callable(build) else build:
                    run.result = finish_run(dataset, run)
                runs[mb.position] = run
    return [run for run in runs if run is not None]


def _members(
    dataset: DiscreteDataset, configs: Sequence[tuple[TrainConfig, StructureLearningConfig | None]]
) -> list[_Member]:
    """Validated pairs with their candidate sets; ConfigError naming what two pairs may not differ in."""
    pairs = [(c, sl or StructureLearningConfig()) for c, sl in configs]
    for c, sl in pairs:
        sl.validate()
        c.validate()
        if c.model != "tan":
            raise ConfigError("structure learning needs --model tan")
    if not pairs:
        return []
    first = chunk_key(*pairs[0])
    for i, (c, sl) in enumerate(pairs):
        if chunk_key(c, sl) != first:
            diff = [
                f"{n}={getattr(obj, n)!r} (first: {getattr(ref, n)!r})"
                for obj, ref, names in ((c, pairs[0][0], SHARED_FIELDS), (sl, pairs[0][1], SHARED_SL_FIELDS))
                for n in names
                if getattr(obj, n) != getattr(ref, n)
            ]
            raise ConfigError(f"configuration {i} cannot be batched with configuration 0: {', '.join(diff)}")
    cache: dict[tuple[Any, ...], tuple[np.ndarray, Any]] = {}
    members = []
    for i, (c, sl) in enumerate(pairs):
        # Generated sets depend on the seed; a file's do not (read once).
        key = (sl.candidates_file,) if sl.candidates_file else (sl.order, sl.candidates, c.seed)
        if key not in cache:
            cache[key] = structure_candidates(dataset, c, sl)
        members.append(_Member(i, c, sl, *cache[key]))
    return members


def _buckets(members: list[_Member]) -> list[list[_Member]]:
    """Members by number of slots J (first appearance first); within a bucket, configurations with one
    learning-rate schedule and eps side by side, so fused Adam takes few slices (order-free results)."""
    buckets: dict[int, list[_Member]] = {}
    for mb in members:
        buckets.setdefault(mb.candidates.shape[1], []).append(mb)
    return [sorted(b, key=lambda mb: (mb.config.lr, mb.config.lr_decay, mb.config.adam_eps)) for b in buckets.values()]


def _default_max_configs(dataset: DiscreteDataset, member: _Member, device: torch.device) -> int:
    """Configurations per chunk so that a chunk's tensors fit comfortably in memory."""
    card = np.asarray(dataset.cardinalities, dtype=np.int64)
    cand = member.candidates
    rows = int(np.sum(np.where(cand >= 0, card[np.maximum(cand, 0)], 1) * (cand != -2)))
    table = rows * int(card.max(initial=1)) * dataset.n_classes * 4
    gathered = cand.size * member.config.batch_size * dataset.n_classes * 4
    # ~10 table-sized buffers at a step's peak (rho, theta, Adam's two, gradients, the table
    # gradient, temporaries), the gather and its copies, and one evaluation block.
    per_config = table * 10 + gathered * 3 + (1 << 22)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget = free * 0.5
    else:
        budget = 2 << 30  # 2 GiB on the CPU: fits CI machines
    return max(1, int(budget // per_config))


# -- one chunk --------------------------------------------------------------------------------------
@dataclass
class _Plan:
    """What a chunk's epochs share: the data on the device, the temperatures and the measured epochs."""

    epochs: int
    batch: int
    loss: str
    train: tuple[torch.Tensor, torch.Tensor]  # codes (N, D), labels (N,)
    evals: dict[str, tuple[torch.Tensor, torch.Tensor]]  # split name -> (codes, labels)
    taus: np.ndarray
    wanted: set[int]


def _plan(dataset: DiscreteDataset, member: _Member, device: torch.device, checkpoints: Sequence[int] | None) -> _Plan:
    def tensors(x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return (
            torch.as_tensor(np.asarray(x), dtype=torch.int64, device=device),
            torch.as_tensor(np.asarray(y), dtype=torch.int64, device=device),
        )

    c, sl = member.config, member.sl
    n = len(dataset.y_train)
    _, wanted = epoch_plan(c.epochs, c.batch_size, n, checkpoints)
    evals = {"test": tensors(dataset.x_test, dataset.y_test)}
    if dataset.x_val is not None and dataset.y_val is not None:
        evals["val"] = tensors(dataset.x_val, dataset.y_val)
    taus = temperatures(c.epochs, sl.tau_start, sl.tau_end)
    return _Plan(c.epochs, c.batch_size, c.loss, tensors(dataset.x_train, dataset.y_train), evals, taus, wanted)


class _History(ChunkRecords):
    """A chunk's records (:class:`~bnc_deploy.train.batched_records.ChunkRecords`) with the structure
    of every epoch; per-configuration dicts at the end."""

    PER_EPOCH = ("lr", "tau", "train_loss", "train_error", "expected_added_parameters", "seconds")

    def __init__(self, members: list[_Member], plan: _Plan, dataset: DiscreteDataset) -> None:
        m0, e = len(members), plan.epochs
        super().__init__(m0, e, len(plan.wanted), "val" in plan.evals, per_epoch=self.PER_EPOCH)
        self.counts = {key: np.zeros((m0, e), dtype=np.int64) for key in ("n_parameters", "n_with_parent")}
        self.stopped: dict[int, tuple[Any, ...]] = {}  # chunk position -> (epoch, rho, class_rho, phi)
        self.cardinalities, self.n_classes = dataset.cardinalities, dataset.n_classes
        # train_learned_tan's history counts "added" parameters whatever the penalty's mode.
        self.added = [
            torch.as_tensor(candidate_parameter_counts(self.cardinalities, mb.candidates, self.n_classes)).to(
                torch.float32
            )
            for mb in members
        ]
        self.candidates = [mb.candidates for mb in members]

    def record_epoch(
        self, chunk: SLChunk, active: np.ndarray, epoch: int, losses: np.ndarray, errors: np.ndarray, tau: float
    ) -> None:
        """The epoch's schedule, measured losses and the structure (as ``_record_epoch`` derives it)."""
        e = epoch - 1
        self.per_epoch["lr"][active, e] = chunk.rates[:, e]
        self.per_epoch["tau"][active, e] = tau
        self.per_epoch["train_loss"][active, e] = losses
        self.per_epoch["train_error"][active, e] = errors
        with torch.no_grad():
            logits = chunk.state["phi"].masked_fill(chunk.state["slot_free"], float("-inf"))
            probs = torch.softmax(logits, dim=-1).cpu()
            slots = logits.argmax(dim=-1).cpu().numpy()
        d = len(self.cardinalities)
        for j, pos in enumerate(active):
            parents = self.candidates[pos][np.arange(d), slots[j]].astype(np.int64)
            self.per_epoch["expected_added_parameters"][pos, e] = float((probs[j] * self.added[pos]).sum())
            self.counts["n_parameters"][pos, e] = tan_parameters(self.cardinalities, parents, self.n_classes)
            self.counts["n_with_parent"][pos, e] = int(np.sum(parents >= 0))
        self.last_epoch[active] = epoch

    def measure(
        self, chunk: SLChunk, active: np.ndarray, epoch: int, evals: dict[str, tuple[torch.Tensor, torch.Tensor]]
    ) -> None:
        self.check_epochs.append(epoch)
        for name, (x, y) in evals.items():
            self.per_check[f"{name}_error"][active, len(self.check_epochs) - 1] = evaluate(chunk, x, y)

    def stop(self, chunk: SLChunk, active: np.ndarray, keep: np.ndarray, epoch: int) -> np.ndarray:
        """Drop the configurations ``keep`` rejects (their state at ``epoch`` is kept); the active left."""
        keep = np.asarray(keep, dtype=bool)
        for j in np.flatnonzero(~keep):
            self.stopped[int(active[j])] = (epoch, *_state(chunk, int(j)))
        chunk.keep(keep)
        left: np.ndarray = active[keep]
        return left

    def history(self, pos: int, checkpoints: Sequence[int] | None) -> dict[str, list[Any]]:
        """The single run's history dict (its key order) for chunk position ``pos``."""
        n = int(self.last_epoch[pos])
        n_checks = sum(1 for e in self.check_epochs if e <= n)
        h: dict[str, list[Any]] = {}
        for key in HISTORY_KEYS:
            if key == "test_error":
                h[key] = self.per_check["test_error"][pos, :n_checks].tolist()
            elif key in self.counts:
                h[key] = self.counts[key][pos, :n].tolist()
            else:
                h[key] = self.per_epoch[key][pos, :n].tolist()
        if checkpoints is not None:
            h["checkpoint_epochs"] = self.check_epochs[:n_checks]
        return h


@torch.no_grad()
def evaluate(chunk: SLChunk, x: torch.Tensor, y: torch.Tensor, budget: int = 1 << 27) -> np.ndarray:
    """Error of each configuration's argmax structure on codes ``x`` (n, D), labels ``y``, as the
    single run's float32 ``mean(argmax != y)`` (its :meth:`StructureLearningTAN.argmax_log_joint`)."""
    s = chunk.state
    m, d = chunk.m, chunk.d
    theta, class_theta = chunk.log_tables()
    slots = s["phi"].masked_fill(s["slot_free"], float("-inf")).argmax(dim=-1)  # (M, D)
    flat_slot = torch.arange(d, device=chunk.device) * chunk.n_slots + slots
    offset, parent, has_parent = (
        s[name].gather(1, flat_slot)[:, :, None] for name in ("slot_offset", "slot_parent", "has_parent")
    )
    n = y.shape[0]
    wrong = torch.zeros(m, dtype=torch.int64, device=chunk.device)
    block = max(1, budget // (m * (chunk.c * 4 + d * 8 * 4)))
    for start in range(0, n, block):
        xbt = x[start : start + block].T  # (D, b)
        rows = xbt[parent.squeeze(2)].mul_(has_parent).add_(offset)  # (M, D, b)
        bags = chunk.entries(rows, xbt[None]).transpose(1, 2).reshape(-1, d)
        scores = torch.nn.functional.embedding_bag(bags, theta, mode="sum").view(m, -1, chunk.c)
        scores += class_theta[:, None, :]
        wrong += (scores.argmax(dim=2) != y[start : start + block]).sum(dim=1)
    # float32(count) / float32(n): the single run's float32 mean of 0/1 values, bit for bit.
    if not n:
        return np.full(m, np.nan, dtype=np.float32)
    return wrong.cpu().numpy().astype(np.float32) / np.float32(n)


def _state(chunk: SLChunk, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Configuration ``j``'s (rho (R_j, K, C), class_rho, phi) as CPU copies."""
    s = chunk.state
    return (chunk.rho(j).numpy(), s["class_rho"][j].cpu().numpy().copy(), s["phi"][j].cpu().numpy().copy())


def run_epoch(
    chunk: SLChunk,
    perms: dict[int, torch.Tensor],
    epoch: int,
    tau: float,
    data: tuple[torch.Tensor, torch.Tensor],
    batch: int,
    loss_name: str,
) -> tuple[np.ndarray, np.ndarray]:
    """One epoch of every configuration: (mean batch loss, training error) per configuration.

    ``perms``: seed -> this epoch's order (each configuration's loop draws it from seed + 1);
    ``data``: the training codes (N, D) and labels (N,) on the device.
    """
    x_train, y_train = data
    n_batches = y_train.shape[0] // batch
    shared = len(set(chunk.seeds)) == 1
    if shared:
        order = perms[chunk.seeds[0]].to(chunk.device)[None, :]
    else:
        order = torch.stack([perms[s] for s in chunk.seeds]).to(chunk.device)
    # The epoch's codes (D, 1 or M, N) and labels in each order, gathered once (batches are slices).
    codes = x_train.T.index_select(1, order.view(-1)).view(x_train.shape[1], *order.shape)
    y = y_train.index_select(0, order.view(-1)).view(order.shape)
    noise = chunk.noise(n_batches)
    loss_sum = torch.zeros(chunk.m, dtype=torch.float64, device=chunk.device)
    wrong = torch.zeros(chunk.m, dtype=torch.int64, device=chunk.device)
    for b in range(n_batches):
        rows = slice(b * batch, (b + 1) * batch)
        labels = y[:, rows].expand(chunk.m, -1).contiguous()
        xbt = codes[:, :, rows].transpose(0, 1).contiguous()  # (1 or M, D, B)
        loss, log_joint = step(chunk, xbt, labels, noise[:, b], tau, epoch, loss_name)
        loss_sum += loss.double()
        wrong += (log_joint.argmax(dim=2) != labels).sum(dim=1)
    return (loss_sum / n_batches).cpu().numpy(), wrong.cpu().numpy() / (n_batches * batch)


def _train_chunk(
    dataset: DiscreteDataset,
    members: list[_Member],
    device: torch.device,
    checkpoints: Sequence[int] | None,
    on_checkpoint: Callable[[CheckpointView], np.ndarray | None] | None,
    on_epoch: Callable[[int, int], None] | None,
) -> list[StructureRun]:
    """Train ``members`` together, epoch by epoch; one :class:`StructureRun` per member, in order."""
    started = time.perf_counter()
    plan = _plan(dataset, members[0], device, checkpoints)
    chunk = SLChunk(members, device, plan.batch)
    history = _History(members, plan, dataset)
    positions = np.array([mb.position for mb in members])
    active = np.arange(len(members))
    # One shuffle stream per distinct seed (each single run's loop draws its order from seed + 1).
    shuffles = {s: torch.Generator().manual_seed(s + 1) for s in sorted({mb.config.seed for mb in members})}
    n_rows = len(dataset.y_train)
    for epoch in range(1, plan.epochs + 1):
        epoch_started = time.perf_counter()
        perms = {s: torch.randperm(n_rows, generator=g) for s, g in shuffles.items()}
        tau = float(plan.taus[epoch - 1])
        losses, errors = run_epoch(chunk, perms, epoch, tau, plan.train, plan.batch, plan.loss)
        bad = np.flatnonzero(~np.isfinite(losses))
        if len(bad):
            raise FloatingPointError(
                f"configuration {int(positions[active[bad[0]]])}: structure learning loss became "
                f"{losses[bad[0]]} at tau={tau:.3g} in epoch {epoch}; try a smaller --lr"
            )
        history.record_epoch(chunk, active, epoch, losses, errors, tau)
        measured = epoch in plan.wanted
        if measured:
            history.measure(chunk, active, epoch, plan.evals)
        history.per_epoch["seconds"][active, epoch - 1] = (time.perf_counter() - epoch_started) / len(active)
        if on_epoch is not None:
            on_epoch(epoch, len(active))
        if measured and on_checkpoint is not None and epoch < plan.epochs:
            keep = on_checkpoint(history.view(epoch, positions, active))
            if keep is not None and not np.all(keep):
                active = history.stop(chunk, active, keep, epoch)
                if not len(active):
                    break
    final = {int(pos): _state(chunk, j) for j, pos in enumerate(active)}
    seconds = (time.perf_counter() - started) / len(members)
    runs = []
    for pos, mb in enumerate(members):
        stopped_at, *state = history.stopped.get(pos, (None, *final.get(pos, (None, None, None))))
        h = history.history(pos, checkpoints)
        rho, class_rho, phi = state
        runs.append(
            StructureRun(
                mb.config, mb.sl, h, history.points(pos), stopped_at, mb.candidates, class_rho, rho, phi, seconds
            )
        )
        runs[-1].sets, runs[-1].model = mb.sets, _trained_model(mb.model, rho, class_rho, phi)
    return runs


@torch.no_grad()
def _trained_model(
    model: StructureLearningTAN | None, rho: np.ndarray, class_rho: np.ndarray, phi: np.ndarray
) -> StructureLearningTAN:
    """The member's single-run model (CPU) holding the trained tensors."""
    if model is None:
        raise AssertionError("internal error: the chunk's models are built before it trains")
    model.rho.copy_(torch.as_tensor(rho))
    model.class_rho.copy_(torch.as_tensor(class_rho))
    model.phi.copy_(torch.as_tensor(phi))
    return model


def finish_run(dataset: DiscreteDataset, run: StructureRun) -> TrainResult:
    """The configuration's model file, built (and fine-tuned) by the single run's own code."""
    if run.model is None:
        raise ValueError("this run holds no model to build a model file from")
    result: TrainResult = finish_learned_tan(
        dataset, run.config, run.sl, run.model, run.sets, run.history, time.perf_counter() - run.seconds
    )
    if run.stopped_at is not None:
        cast(BNCArtifact, result.artifact).metadata["stopped_at_epoch"] = run.stopped_at
    return result


def bench_rates(
    dataset: DiscreteDataset,
    configs: Sequence[tuple[TrainConfig, StructureLearningConfig | None]],
    sizes: Sequence[int],
    device: str = "cpu",
) -> dict[int, float]:
    """Configuration-epochs per second of the structure phase (no model files) for batches of each
    size in ``sizes`` (the first ``size`` pairs of ``configs``), e.g. for a benchmark's table."""
    rates = {}
    for size in sizes:
        started = time.perf_counter()
        runs = train_learned_tan_batched(dataset, list(configs)[:size], device=device, build=False)
        seconds = time.perf_counter() - started
        rates[size] = sum(len(r.history["train_loss"]) for r in runs) / seconds if seconds > 0 else math.inf
    return rates
