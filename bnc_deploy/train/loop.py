"""The epoch loop of the single-run trainers (BN classifiers, TAN structure learning; the DNNs train in
:mod:`bnc_deploy.train.dnn_batched_loop`, which keeps the same data order and measurements).

Contract
--------
* Epoch ``e`` (1-based) runs at ``learning_rates[e - 1]``, written into every parameter group of
  ``optimizer`` before its first step. Other optimizers a step may use keep their own rate.
* The training rows are reshuffled every epoch by ``torch.randperm(n, generator=...)`` from one
  generator seeded ``seed + 1`` that nothing else draws from, so a trainer's other random streams
  (initialisation, stochastic activations, Gumbel noise) never shift the batch order.
* Full batches only: ``n // batch_size`` per epoch, the last incomplete batch is dropped. With
  epochs to run and no full batch, :class:`~bnc_deploy.errors.ConfigError`; with no epochs
  nothing is checked or run.
* ``step(inputs, labels) -> (loss, scores)`` updates the model on one batch. The loop sums
  the loss values (``loss.item()``, in batch order, from 0.0) and counts rows whose ``scores.argmax(1)`` is not the
  label, both measured on
  the fly (before the update), as the paper's reference code reported them.
* After every epoch, ``record(EpochStats)``: the trainer evaluates and stores what it wants
  (usually into :class:`~bnc_deploy.train.common.EpochHistory`); then the progress bar shows
  ``postfix()``.

The batch values are the same whether the epoch's order is gathered once per epoch (views per
batch: fewest index operations, used for the small BN index tensors) or once per batch (one
batch in memory at a time, used for the DNNs' float inputs), so the choice is only speed
against memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from bnc_deploy.errors import ConfigError

#: ``step(inputs, labels) -> (loss, scores)``: one update; ``loss`` a number or 0-dim tensor,
#: ``scores`` (batch, classes), computed before the update.
Step = Callable[[torch.Tensor, torch.Tensor], tuple]


@dataclass(frozen=True)
class EpochStats:
    """What the loop measured in one epoch, handed to the trainer's ``record``."""

    epoch: int  # 1-based
    lr: float  # this epoch's rate, as the schedule gave it
    train_loss: float  # mean batch loss, measured on the fly
    train_error: float  # misclassified training rows / rows seen
    started: float  # time.perf_counter() at the start of the epoch

    def seconds(self) -> float:
        """Seconds since the epoch started (read when recording, so evaluation counts too)."""
        return time.perf_counter() - self.started


def epoch_batches(
    inputs: torch.Tensor, labels: torch.Tensor, order: torch.Tensor, batch_size: int, *, gather_per_epoch: bool
):
    """Yield ``(inputs, labels)`` of each full batch of ``order`` (the last incomplete one dropped)."""
    n_batches = order.shape[0] // batch_size
    if gather_per_epoch:
        # One gather per epoch; the batches below are then views (no per-step indexing).
        inputs, labels = inputs[order], labels[order]
        for b in range(n_batches):
            rows = slice(b * batch_size, (b + 1) * batch_size)
            yield inputs[rows], labels[rows]
    else:
        for b in range(n_batches):
            rows = order[b * batch_size : (b + 1) * batch_size]
            yield inputs[rows], labels[rows]


def run_epoch(
    step: Step,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    order: torch.Tensor,
    batch_size: int,
    *,
    gather_per_epoch: bool = False,
) -> tuple[float, int]:
    """One pass over ``order`` in full batches: ``(summed batch losses, misclassified rows)``."""
    loss_sum, wrong = 0.0, 0
    for batch_inputs, batch_labels in epoch_batches(
        inputs, labels, order, batch_size, gather_per_epoch=gather_per_epoch
    ):
        loss, scores = step(batch_inputs, batch_labels)
        # .item(): the exact float of a (float32) loss tensor, without float()'s requires-grad warning.
        loss_sum += loss.item() if isinstance(loss, torch.Tensor) else float(loss)
        wrong += int((scores.detach().argmax(dim=1) != batch_labels).sum())
    return loss_sum, wrong


def fit_epochs(
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    step: Step,
    record: Callable[[EpochStats], None],
    optimizer: torch.optim.Optimizer,
    learning_rates: np.ndarray,
    batch_size: int,
    seed: int,
    start_epoch: Callable[[int], None] | None = None,
    gather_per_epoch: bool = False,
    progress: bool = False,
    postfix: Callable[[], dict] | None = None,
) -> None:
    """Run ``len(learning_rates)`` epochs of ``step`` over ``(inputs, labels)`` (see the module docstring).

    ``start_epoch(epoch)`` runs after the rate is set and before the shuffle (e.g. ``model.train()``,
    or a per-epoch temperature). ``progress`` shows a tqdm bar on stderr with ``postfix()``.
    """
    if len(learning_rates) == 0:
        return
    n = labels.shape[0]
    n_batches = n // batch_size
    if n_batches == 0:
        raise ConfigError(f"batch size {batch_size} is larger than the training set ({n} rows)")
    from tqdm.auto import tqdm

    shuffle = torch.Generator().manual_seed(seed + 1)
    bar = tqdm(learning_rates, desc="train", unit="epoch", disable=not progress, leave=False)
    for epoch, lr in enumerate(bar, start=1):
        started = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = float(lr)
        if start_epoch is not None:
            start_epoch(epoch)
        order = torch.randperm(n, generator=shuffle)
        loss_sum, wrong = run_epoch(step, inputs, labels, order, batch_size, gather_per_epoch=gather_per_epoch)
        record(EpochStats(epoch, lr, loss_sum / n_batches, wrong / (n_batches * batch_size), started))
        if postfix is not None:
            bar.set_postfix(**postfix())
    bar.close()
