"""The epoch loop of one chunk of the batched DNN trainer (:mod:`bnc_deploy.train.dnn_batched`):
data orders, steps, checkpoints, early stops and the per-configuration records.

Each configuration's data order is the single run's (:mod:`bnc_deploy.train.loop`): a generator
seeded ``seed + 1`` draws ``torch.randperm(n)`` once per epoch; configurations with one seed share
the draw. Full batches only; the loss sum (float64, batch order) and the misclassified rows are
measured on the fly before each update, as the single run measures them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from bnc_deploy.train.batched_records import ChunkRecords, epoch_plan
from bnc_deploy.train.common import TrainResult


@dataclass
class DNNRun:
    """One configuration's outcome."""

    config: object  # DNNConfig
    history: dict
    checkpoints: list[dict]  # {"epoch", "train_loss", "train_error", "val_error", "test_error"}
    stopped_at: int | None  # epoch of an early stop (halving or a non-finite loss), else None
    seconds: float  # this configuration's share of its chunk's wall time
    error: str | None = None  # why it stopped, when its loss stopped being finite
    result: TrainResult | None = None
    state: dict | None = None  # the trained latent tensors (:meth:`StackedDNN.state_of`, CPU)


def _orders(chunk, generators: dict, n: int) -> tuple[torch.Tensor, list[int]]:
    """This epoch's data orders: (G, n), one per seed of the active configurations, and which
    order each active configuration follows."""
    drawn = {seed: torch.randperm(n, generator=g) for seed, g in generators.items()}
    seeds = [chunk.configs[int(pos)].seed for pos in chunk.active]
    unique = list(dict.fromkeys(seeds))
    which = [unique.index(s) for s in seeds]
    return torch.stack([drawn[s] for s in unique]).to(chunk.device), which


def run_chunk_epochs(chunk, checkpoints, on_checkpoint, positions: np.ndarray, on_epoch, progress: bool) -> list:
    """Train ``chunk`` (a ``dnn_batched._ChunkRun``) for its epochs; one ``DNNRun`` per configuration."""
    from tqdm.auto import tqdm

    config = chunk.configs[0]
    epochs, batch = config.epochs, config.batch_size
    n = int(chunk.tensors["train"][1].shape[0])
    n_batches, wanted = epoch_plan(epochs, batch, n, checkpoints)
    records = ChunkRecords(len(chunk.configs), epochs, len(wanted), "val" in chunk.tensors)
    generators = {c.seed: torch.Generator().manual_seed(c.seed + 1) for c in chunk.configs}
    stopped: dict[int, tuple] = {}
    started = time.perf_counter()
    bar = tqdm(range(1, epochs + 1), desc="train", unit="epoch", disable=not progress, leave=False)
    for epoch in bar:
        if chunk.net.m == 0:
            break
        tick = time.perf_counter()
        orders, which = _orders(chunk, generators, n)
        spread = torch.as_tensor(which, device=chunk.device)
        loss_sum = torch.zeros(chunk.net.m, dtype=torch.float64, device=chunk.device)
        wrong = torch.zeros(chunk.net.m, dtype=torch.int64, device=chunk.device)
        for b in range(n_batches):
            idx = orders[:, b * batch : (b + 1) * batch]
            # One batch per data order; configurations that share an order share its batch.
            losses, errors = chunk.train_batch(idx, spread, which, epoch)
            loss_sum += losses.double()
            wrong += errors
        active = chunk.active
        records.per_epoch["lr"][active, epoch - 1] = chunk.rates[:, epoch - 1]
        records.per_epoch["train_loss"][active, epoch - 1] = loss_sum.cpu().numpy() / n_batches
        records.per_epoch["train_error"][active, epoch - 1] = wrong.cpu().numpy() / (n_batches * batch)
        records.last_epoch[active] = epoch
        if epoch in wanted:
            _measure(chunk, records, epoch)
        records.per_epoch["seconds"][active, epoch - 1] = time.perf_counter() - tick
        _stop_diverged(chunk, records, epoch, stopped)
        if epoch in wanted and on_checkpoint is not None and chunk.net.m:
            view = records.view(epoch, positions, chunk.active)
            keep = on_checkpoint(view)
            if keep is not None and not np.all(keep):
                chunk.drop(np.asarray(keep, dtype=bool), epoch, stopped)
        if on_epoch is not None:
            on_epoch(epoch, chunk.net.m)
        if progress and len(chunk.configs) == 1 and chunk.net.m:
            bar.set_postfix(
                loss=f"{records.per_epoch['train_loss'][0, epoch - 1]:.4g}",
                train_err=f"{records.per_epoch['train_error'][0, epoch - 1]:.4f}",
                test_err=f"{records.per_check['test_error'][0, len(records.check_epochs) - 1]:.4f}",
            )
    bar.close()
    for j, pos in enumerate(chunk.active):
        chunk.states[int(pos)] = chunk.net.state_of(j)
    total = time.perf_counter() - started
    runs = []
    for pos, cfg in enumerate(chunk.configs):
        history, points = records.history(pos, checkpoints), records.points(pos)
        epoch_stopped, error = stopped.get(pos, (None, None))
        runs.append(DNNRun(cfg, history, points, epoch_stopped, total / len(chunk.configs), error))
    return runs


def _measure(chunk, records: ChunkRecords, epoch: int) -> None:
    records.check_epochs.append(epoch)
    k = len(records.check_epochs) - 1
    records.per_check["test_error"][chunk.active, k] = chunk.errors("test")
    if records.has_val:
        records.per_check["val_error"][chunk.active, k] = chunk.errors("val")


def _stop_diverged(chunk, records: ChunkRecords, epoch: int, stopped: dict) -> None:
    """Configurations whose loss is no longer finite stop here with the single run's message."""
    losses = records.per_epoch["train_loss"][chunk.active, epoch - 1]
    finite = np.isfinite(losses)
    if finite.all():
        return
    bad = losses[~finite]
    message = f"training loss became {bad[0]} in epoch {epoch}; try a smaller --lr"
    chunk.drop(finite, epoch, stopped, error=message)
