"""The DNN input grid loses no information where it does not clip (issue 18).

``fit_standardized_table`` rounds ``(code - mean) / std`` to ``2**-e`` with integer codes within
+-63. Checked per feature, over all of its codes ``0 .. |X_i| - 1``:

* every entry inside the grid's range is within half a grid step of the float value;
* the rounding is injective: two codes share a rounded value only if both are clipped at +-63
  (on usps nothing collides at all: every feature keeps all of its codes distinct; on digits the
  clip merges the rare high codes of a few nearly constant border pixels).

``benchmarks/dnn_input_rounding.py`` measures what the grid does to the error.
"""

from __future__ import annotations

import numpy as np
import pytest

from bnc_deploy.artifacts.encoding import INPUT_CODE_MAX, fit_standardized_table
from bnc_deploy.datasets import load_dataset


def _float_values(x_train, cardinalities):
    x = np.asarray(x_train, dtype=np.float64)
    mean, std = x.mean(axis=0), x.std(axis=0)
    codes = np.arange(int(np.max(cardinalities)))
    return (codes[None, :] - mean[:, None]) / np.where(std > 0, std, 1.0)[:, None], std


def _check_grid(dataset) -> list[int]:
    """Assert the half-step and injectivity properties; return the features where the clip merges codes."""
    table = fit_standardized_table(dataset.x_train, dataset.cardinalities)
    step = float(table["input_scale"])
    exact, std = _float_values(dataset.x_train, dataset.cardinalities)
    merged = []
    for i, k in enumerate(int(c) for c in dataset.cardinalities):
        if std[i] == 0:  # a constant feature has a single training value, mapped to 0
            assert not table["input_codes"][i].any()
            continue
        codes = table["input_codes"][i, :k].astype(np.int64)
        inside = np.abs(codes) < INPUT_CODE_MAX
        error = np.abs(codes * step - exact[i, :k])
        assert np.all(error[inside] <= step / 2 + 1e-12), f"feature {i}: rounding error above half a step"
        # Clipped entries lie beyond the grid: their float value is at least as far out as the bound.
        assert np.all(np.abs(exact[i, :k][~inside]) >= INPUT_CODE_MAX * step - step / 2), f"feature {i}"
        assert len(np.unique(codes[inside])) == int(inside.sum()), f"feature {i}: rounding merges codes"
        if len(np.unique(codes)) < k:
            merged.append(i)
    return merged


def test_digits_grid_is_injective_inside_its_range():
    dataset = load_dataset("digits")
    merged = _check_grid(dataset)
    # The clip at +-63 (7.875 std at digits' 1/8 grid) does merge codes of a few border pixels whose
    # training values are almost all 0; fewer than a quarter of the features are affected.
    assert len(merged) < dataset.n_features // 4


def test_usps_grid_keeps_every_code_distinct(shared_datasets):
    dataset = load_dataset("usps", data_dir=shared_datasets)
    assert _check_grid(dataset) == []
    table = fit_standardized_table(dataset.x_train, dataset.cardinalities)
    for i, k in enumerate(int(c) for c in dataset.cardinalities):
        assert len(np.unique(table["input_codes"][i, :k])) == k


@pytest.mark.parametrize("cards", [(2, 3, 6), (17, 4)])
def test_synthetic_grid_properties(cards):
    from support import make_synthetic_dataset

    _check_grid(make_synthetic_dataset(cardinalities=cards, n_train=400, n_test=10))
