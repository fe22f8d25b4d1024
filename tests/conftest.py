"""Shared fixtures: small synthetic data, and the real datasets beside the repository when present."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support import SHARED_DATASETS, make_synthetic_dataset

from bnc_deploy.datasets.base import DiscreteDataset

# The reliability suite's fixtures (digits_model, immutable_folder, full_disk) live in its
# rel_support module, which is not a conftest.py (a second module named conftest would shadow this
# one); registered here as a plugin, its tests take them as parameters without importing them.
sys.path.insert(0, str(Path(__file__).parent / "reliability"))
pytest_plugins = ["rel_support"]


@pytest.fixture
def shared_datasets() -> Path:
    """``../shared/datasets``; the test is skipped (with the reason) when it is absent."""
    if not (SHARED_DATASETS / "discretized").is_dir():
        pytest.skip(f"real datasets not found at {SHARED_DATASETS} (CI provides ../shared beside the clone)")
    return SHARED_DATASETS


@pytest.fixture
def synthetic_dataset() -> DiscreteDataset:
    return make_synthetic_dataset()


@pytest.fixture(autouse=True, scope="session")
def _native_cache_in_tmp(tmp_path_factory):
    """Compiled C exports (the ``native`` runtime) go to a temporary cache, not the user's ~/.cache."""
    import os

    if "BNC_DEPLOY_NATIVE_CACHE" not in os.environ:
        os.environ["BNC_DEPLOY_NATIVE_CACHE"] = str(tmp_path_factory.mktemp("native-cache"))
    yield
