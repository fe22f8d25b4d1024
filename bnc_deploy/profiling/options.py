"""The typed inputs of a profiling run: the test split, how exported files are loaded, the
served model of the ``http`` runtime, and the latency protocol (``bnc-profile``'s options)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np


class TestSplit(NamedTuple):
    """The test split of ``--data``: rows, labels, the dataset's name and the 1-based fold.

    A tuple, so callers that unpack ``(x, y, name, fold)`` (e.g. :mod:`bnc_deploy.targets.aarch64`)
    take it as it is.
    """

    __test__ = False  # not a pytest test class despite its name

    x: np.ndarray
    y: np.ndarray
    name: str
    fold: int

    @classmethod
    def from_dataset(cls, dataset) -> TestSplit:
        """The test split of a loaded :class:`bnc_deploy.datasets.DiscreteDataset`."""
        return cls(dataset.x_test, dataset.y_test, dataset.name, dataset.fold)


@dataclass(frozen=True)
class LoadOptions:
    """How exported files are opened: check the integrity digest, with the key of a signed file."""

    verify_integrity: bool = True
    key: bytes | None = None

    def for_file(self, path) -> dict:
        """Keyword arguments for ``model_facts``/``load_runtime`` of ``path`` (none for a ``.bnc``
        model: it has no digest)."""
        if Path(path).suffix.lower() == ".bnc":
            return {}
        return {"verify_integrity": self.verify_integrity, "key": self.key}


class ServedModel(NamedTuple):
    """The Open Inference Protocol server and model name the ``http`` runtime asks (None: the file's stem)."""

    url: str
    model: str | None = None

    def options(self) -> dict:
        """Keyword arguments of the ``http`` adapter."""
        return {"url": self.url, "model": self.model}


@dataclass(frozen=True)
class TimingSettings:
    """The latency protocol of :func:`bnc_deploy.profiling.latency.measure_latency` (``latency``
    False: no timing, costs and accuracy only)."""

    latency: bool = True
    runs: int = 200
    warmup: int = 20
    repeats: int = 3
    throughput_repeats: int = 5
    mode: str = "session"
