"""Shared fixtures: small synthetic data, and the real datasets beside the repository when present."""

from __future__ import annotations

from pathlib import Path

import pytest

from bnc_deploy.datasets.base import DiscreteDataset
from support import SHARED_DATASETS, make_synthetic_dataset


@pytest.fixture
def shared_datasets() -> Path:
    """``../shared/datasets``; the test is skipped (with the reason) when it is absent."""
    if not (SHARED_DATASETS / "discretized").is_dir():
        pytest.skip(f"real datasets not found at {SHARED_DATASETS} (CI provides ../shared beside the clone)")
    return SHARED_DATASETS


@pytest.fixture
def synthetic_dataset() -> DiscreteDataset:
    return make_synthetic_dataset()
