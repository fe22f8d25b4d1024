"""Per-epoch training history shared by the BN and DNN trainers (stored in every model file)."""

from __future__ import annotations

import math

#: Keys of the history dict, in the order the trainers fill them.
HISTORY_KEYS = ("lr", "train_loss", "train_error", "val_error", "test_error", "seconds")


class EpochHistory:
    """Collects one value per key and epoch; ``val_error`` is dropped if no validation split ran."""

    def __init__(self) -> None:
        self.data: dict[str, list] = {key: [] for key in HISTORY_KEYS}

    def record(self, epoch: int, *, lr: float, train_loss: float, train_error: float, test_error: float,
               val_error: float | None, seconds: float) -> None:
        """Append one epoch. Raises FloatingPointError naming the epoch if the loss diverged."""
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"training loss became {train_loss} in epoch {epoch}; try a smaller --lr")
        self.data["lr"].append(float(lr))
        self.data["train_loss"].append(float(train_loss))
        self.data["train_error"].append(float(train_error))
        self.data["test_error"].append(float(test_error))
        if val_error is not None:
            self.data["val_error"].append(float(val_error))
        self.data["seconds"].append(float(seconds))

    def postfix(self) -> dict:
        """The progress bar's live figures of the last epoch."""
        return {"loss": f"{self.data['train_loss'][-1]:.4g}", "train_err": f"{self.data['train_error'][-1]:.4f}",
                "test_err": f"{self.data['test_error'][-1]:.4f}"}

    def finish(self) -> dict:
        if not self.data["val_error"]:
            del self.data["val_error"]
        return self.data
