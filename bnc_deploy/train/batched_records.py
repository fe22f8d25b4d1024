"""What every batched trainer records for a chunk: dense (configuration x epoch) arrays filled for
the active configurations each epoch, and the checkpoint measurements.

Configurations only ever leave a chunk (early stops), so a configuration's record is a prefix of
its row: its epochs up to ``last_epoch`` and the checkpoints up to then. The trainers add their
own per-epoch series and build their single run's history dict from these rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bnc_deploy.errors import ConfigError


@dataclass
class CheckpointView:
    """What ``on_checkpoint`` sees: the epoch and, per active configuration (input indices), its errors."""

    epoch: int
    indices: np.ndarray  # input positions of the active configurations
    train_error: np.ndarray
    train_loss: np.ndarray
    val_error: np.ndarray | None
    test_error: np.ndarray


def epoch_plan(epochs: int, batch: int, n: int, checkpoints: Sequence[int] | None) -> tuple[int, set[int]]:
    """``(batches per epoch, the epochs measured)`` of a chunk on ``n`` training rows: every epoch without
    ``checkpoints``, else those within ``1 .. epochs``, and always the last. ConfigError for a batch larger
    than the training set (when there are epochs to run)."""
    n_batches = n // batch
    if epochs and n_batches == 0:
        raise ConfigError(f"batch size {batch} is larger than the training set ({n} rows)")
    wanted = set(range(1, epochs + 1)) if checkpoints is None else {e for e in checkpoints if 1 <= e <= epochs}
    if epochs:
        wanted.add(epochs)
    return n_batches, wanted


#: Per-epoch series every batched trainer records.
PER_EPOCH = ("lr", "train_loss", "train_error", "seconds")


class ChunkRecords:
    """The rows of a chunk of ``m0`` configurations over ``epochs`` epochs and ``n_checks`` checkpoints."""

    def __init__(self, m0: int, epochs: int, n_checks: int, has_val: bool, per_epoch: Sequence[str] = PER_EPOCH):
        self.per_epoch = {key: np.full((m0, epochs), np.nan) for key in per_epoch}
        self.per_check = {key: np.full((m0, n_checks), np.nan) for key in ("val_error", "test_error")}
        self.last_epoch = np.zeros(m0, dtype=np.int64)
        self.check_epochs: list[int] = []
        self.has_val = has_val

    def n_checks(self, pos: int) -> int:
        """Checkpoints configuration ``pos`` reached."""
        return sum(1 for e in self.check_epochs if e <= int(self.last_epoch[pos]))

    def history(self, pos: int, checkpoints: Sequence[int] | None) -> dict[str, list[Any]]:
        """Configuration ``pos``'s history in the single run's keys and order
        (``train.common.HISTORY_KEYS``; ``checkpoint_epochs`` too when evaluated at checkpoints only)."""
        n_epochs, n_checks = int(self.last_epoch[pos]), self.n_checks(pos)
        h = {key: self.per_epoch[key][pos, :n_epochs].tolist() for key in ("lr", "train_loss", "train_error")}
        if self.has_val:
            h["val_error"] = self.per_check["val_error"][pos, :n_checks].tolist()
        h["test_error"] = self.per_check["test_error"][pos, :n_checks].tolist()
        h["seconds"] = self.per_epoch["seconds"][pos, :n_epochs].tolist()
        if checkpoints is not None:
            h["checkpoint_epochs"] = self.check_epochs[:n_checks]
        return h

    def view(self, epoch: int, positions: np.ndarray, active: np.ndarray) -> CheckpointView:
        """What ``on_checkpoint`` sees at the last measured epoch (``positions``: input indices)."""
        k = len(self.check_epochs) - 1
        return CheckpointView(
            epoch,
            positions[active],
            self.per_epoch["train_error"][active, epoch - 1],
            self.per_epoch["train_loss"][active, epoch - 1],
            self.per_check["val_error"][active, k] if self.has_val else None,
            self.per_check["test_error"][active, k],
        )

    def points(self, pos: int) -> list[dict[str, Any]]:
        """Configuration ``pos``'s checkpoints: {"epoch", "train_loss", "train_error", "val_error", "test_error"}."""
        return [
            {
                "epoch": e,
                "train_loss": float(self.per_epoch["train_loss"][pos, e - 1]),
                "train_error": float(self.per_epoch["train_error"][pos, e - 1]),
                "val_error": float(self.per_check["val_error"][pos, k]) if self.has_val else None,
                "test_error": float(self.per_check["test_error"][pos, k]),
            }
            for k, e in enumerate(self.check_epochs[: self.n_checks(pos)])
        ]
