"""Pieces shared by the BN and DNN trainers: the learning-rate schedule and its checks, the
per-epoch history (stored in every model file), the result type, the check set and metadata
every model file stores.

torch is imported lazily here (only where a function needs it), so importing this is cheap."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from bnc_deploy.errors import ConfigError
from bnc_deploy.version import __version__

#: Rows of the test split stored in every artifact so exporters can verify without the data set.
CHECK_ROWS = 1000

#: Keys of the history dict, in the order the trainers fill them.
HISTORY_KEYS = ("lr", "train_loss", "train_error", "val_error", "test_error", "seconds")


def check_schedule(*, epochs: int, batch_size: int, lr: float, lr_decay: float) -> None:
    """ConfigError naming the flag's value if the training schedule is impossible."""
    if epochs < 0:
        raise ConfigError(f"epochs must be >= 0, got {epochs}")
    if batch_size < 1:
        raise ConfigError(f"batch size must be >= 1, got {batch_size}")
    if not (lr > 0 and math.isfinite(lr)):
        raise ConfigError(f"learning rate must be a positive number, got {lr}")
    if not 0 < lr_decay <= 1:
        raise ConfigError(f"lr decay must be in (0, 1], got {lr_decay}")


def log_linear_rates(lr: float, lr_decay: float, epochs: int) -> np.ndarray:
    """Per-epoch learning rates, log-linear from ``lr`` to ``lr * lr_decay``, shape (epochs,)."""
    if epochs <= 1:
        return np.full(epochs, lr)
    return lr * lr_decay ** (np.arange(epochs) / (epochs - 1))


@dataclass
class TrainResult:
    """A trained model's artifact (BN or DNN), its per-epoch history and the training seconds."""

    artifact: object
    history: dict = field(default_factory=dict)
    seconds: float = 0.0


class EpochHistory:
    """Collects one value per key and epoch; ``val_error`` is dropped if no validation split ran."""

    def __init__(self) -> None:
        self.data: dict[str, list] = {key: [] for key in HISTORY_KEYS}

    def record(
        self,
        epoch: int,
        *,
        lr: float,
        train_loss: float,
        train_error: float,
        test_error: float,
        val_error: float | None,
        seconds: float,
    ) -> None:
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

    def recorder(self, error, tensors: dict):
        """A ``record`` for :func:`~bnc_deploy.train.loop.fit_epochs`: the loop's figures plus the
        model's errors ``error(x, y)`` on ``tensors["test"]`` (and ``tensors["val"]`` if present)."""

        def record(stats) -> None:
            self.record(
                stats.epoch,
                lr=stats.lr,
                train_loss=stats.train_loss,
                train_error=stats.train_error,
                test_error=error(*tensors["test"]),
                val_error=error(*tensors["val"]) if "val" in tensors else None,
                seconds=stats.seconds(),
            )

        return record

    def postfix(self) -> dict:
        """The progress bar's live figures of the last epoch."""
        return {
            "loss": f"{self.data['train_loss'][-1]:.4g}",
            "train_err": f"{self.data['train_error'][-1]:.4f}",
            "test_err": f"{self.data['test_error'][-1]:.4f}",
        }

    def finish(self) -> dict:
        if not self.data["val_error"]:
            del self.data["val_error"]
        return self.data


def check_set(dataset, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: up to :data:`CHECK_ROWS` seeded test rows (codes as uint8/uint16) for the artifact."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.permutation(dataset.x_test.shape[0])[:CHECK_ROWS])
    dtype = np.uint8 if dataset.cardinalities.max(initial=1) <= 256 else np.uint16
    return dataset.x_test[rows].astype(dtype), dataset.y_test[rows]


def run_metadata(dataset, config, history: dict, seconds: float, **extra) -> dict:
    """The training facts every artifact stores: versions, time, data, configuration, history."""
    import torch

    return {
        "library": {"bnc_deploy": __version__, "torch": str(torch.__version__), "numpy": np.__version__},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "data": dataset.describe(),
        **extra,
        "config": asdict(config),
        "history": history,
        "train_seconds": seconds,
    }


def record_errors(artifact, reference, dataset) -> None:
    """``metadata["errors"]``: train/test(/val) error of the artifact's reference predictor."""

    def error(x, y) -> float:
        return float(np.mean(reference.predict(x) != y)) if len(y) else float("nan")

    errors = {"train": error(dataset.x_train, dataset.y_train), "test": error(dataset.x_test, dataset.y_test)}
    if dataset.x_val is not None:
        errors["val"] = error(dataset.x_val, dataset.y_val)
    artifact.metadata["errors"] = errors
