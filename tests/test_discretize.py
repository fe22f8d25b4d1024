"""Fayyad–Irani MDL discretizer: against a brute-force reference, known cases, bin rule, storage."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from bnc_deploy.datasets.discretize import ENTROPY_TIE_TOLERANCE, FayyadIraniDiscretizer


# -- brute-force reference: plain Python, one candidate at a time ----------------------------
def _ref_entropy(labels: list) -> float:
    n = len(labels)
    return -sum(c / n * math.log2(c / n) for c in Counter(labels).values())


def _ref_midpoint(a: float, b: float) -> float:
    mid = (a + b) / 2.0
    return mid if a <= mid < b else a


def _ref_split(items: list[tuple[float, int]]) -> list[float]:
    """Recursive MDL cuts of ``items`` (sorted (value, label) pairs), straight from the paper."""
    n = len(items)
    candidates = [i for i in range(1, n) if items[i - 1][0] < items[i][0]]
    if not candidates:
        return []
    labels = [lab for _, lab in items]
    weighted = [(i * _ref_entropy(labels[:i]) + (n - i) * _ref_entropy(labels[i:])) / n for i in candidates]
    lowest = min(weighted)
    pick = next(j for j, e in enumerate(weighted) if e <= lowest + ENTROPY_TIE_TOLERANCE)
    i = candidates[pick]
    left, right = labels[:i], labels[i:]
    ent_s = _ref_entropy(labels)
    k, k1, k2 = len(set(labels)), len(set(left)), len(set(right))
    delta = math.log2(3**k - 2) - (k * ent_s - k1 * _ref_entropy(left) - k2 * _ref_entropy(right))
    if ent_s - weighted[pick] <= (math.log2(n - 1) + delta) / n:
        return []
    cut = _ref_midpoint(items[i - 1][0], items[i][0])
    return _ref_split(items[:i]) + [cut] + _ref_split(items[i:])


def reference_cut_points(x: np.ndarray, y: np.ndarray) -> list[list[float]]:
    return [_ref_split(sorted(zip(x[:, j].tolist(), y.tolist()))) for j in range(x.shape[1])]


def _random_problem(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Class-dependent features on a coarse grid (ties) and a continuous one, plus pure noise."""
    rng = np.random.default_rng(seed)
    n, n_classes = int(rng.integers(30, 250)), int(rng.integers(2, 5))
    y = rng.integers(0, n_classes, n)
    grid = np.round(y * 1.5 + rng.normal(0, 1.5, n))  # many duplicate values
    smooth = y * 0.8 + rng.normal(0, 1.0, n)
    noise = rng.uniform(-3, 3, n)
    lumpy = rng.choice([0.0, 0.25, 1.0, 7.5], n) + (y == 0) * rng.choice([0.0, 0.25], n)
    return np.column_stack([grid, smooth, noise, lumpy]), y


@pytest.mark.parametrize("seed", range(12))
def test_matches_brute_force_reference(seed):
    x, y = _random_problem(seed)
    model = FayyadIraniDiscretizer().fit(x, y)
    expected = reference_cut_points(x, y)
    for j, (got, want) in enumerate(zip(model.cut_points_, expected)):
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, np.array(want), err_msg=f"feature {j}")
    np.testing.assert_array_equal(model.n_values_, [len(c) + 1 for c in expected])


def test_reference_comparison_is_not_vacuous():
    cuts = [len(c) for seed in range(12) for c in FayyadIraniDiscretizer().fit(*_random_problem(seed)).cut_points_]
    assert sum(cuts) >= 12 and max(cuts) >= 2


def test_separable_two_classes_give_one_midpoint_cut():
    x = np.array([[0.0], [1.0], [2.0], [3.0], [10.0], [11.0], [12.0], [13.0]])
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    model = FayyadIraniDiscretizer().fit(x, y)
    np.testing.assert_array_equal(model.cut_points_[0], [6.5])
    assert model.n_values_.tolist() == [2] and model.n_features_in_ == 1
    np.testing.assert_array_equal(model.transform(x)[:, 0], y)


def test_noise_with_few_rows_gives_no_cut():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(12, 3))
    y = rng.integers(0, 2, 12)
    model = FayyadIraniDiscretizer().fit(x, y)
    assert [len(c) for c in model.cut_points_] == [0, 0, 0]
    assert model.transform(x).max() == 0


def test_constant_feature_and_string_labels():
    x = np.column_stack([np.full(20, 5.0), np.r_[np.zeros(10), np.ones(10)]])
    y = np.array(["cat"] * 10 + ["dog"] * 10)
    model = FayyadIraniDiscretizer().fit(x, y)
    assert model.n_values_.tolist() == [1, 2]
    np.testing.assert_array_equal(model.cut_points_[1], [0.5])


def test_bin_rule_counts_cut_points_strictly_below():
    model = FayyadIraniDiscretizer.from_dict({"n_features_in": 2, "cut_points": [[1.5, 4.0], []]})
    x = np.array([[-100.0, 0.0], [1.5, 1.0], [np.nextafter(1.5, 2), 2.0], [4.0, 3.0], [4.5, 4.0], [1e300, 5.0]])
    codes = model.transform(x)
    assert codes.dtype == np.int64
    assert codes[:, 0].tolist() == [0, 0, 1, 1, 2, 2]  # equal to a cut -> lower bin
    assert codes[:, 1].tolist() == [0] * 6
    assert model.n_values_.tolist() == [3, 1]


def test_adjacent_floats_still_separate():
    a = 1.0
    b = np.nextafter(a, 2.0)
    x = np.array([[a]] * 6 + [[b]] * 6)
    y = np.array([0] * 6 + [1] * 6)
    model = FayyadIraniDiscretizer().fit(x, y)
    assert model.transform(x)[:, 0].tolist() == y.tolist()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected_with_row_and_feature(bad):
    x = np.zeros((5, 3))
    x[3, 1] = bad
    with pytest.raises(ValueError, match=r"feature 1 .* row 3"):
        FayyadIraniDiscretizer().fit(x, np.arange(5) % 2)
    model = FayyadIraniDiscretizer().fit(np.zeros((5, 3)), np.arange(5) % 2)
    with pytest.raises(ValueError, match=r"transform: feature 1 .* row 3"):
        model.transform(x)


def test_shape_errors_name_expected_and_got():
    model = FayyadIraniDiscretizer().fit(np.zeros((4, 2)), [0, 1, 0, 1])
    with pytest.raises(ValueError, match="expected 2 features, got 3"):
        model.transform(np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"shape \(n_samples, n_features\), got shape \(4,\)"):
        model.transform(np.zeros(4))
    with pytest.raises(ValueError, match=r"labels of shape \(4,\), got shape \(3,\)"):
        FayyadIraniDiscretizer().fit(np.zeros((4, 2)), [0, 1, 0])
    with pytest.raises(ValueError, match="not fitted"):
        FayyadIraniDiscretizer().transform(np.zeros((1, 1)))


def test_to_dict_from_dict_round_trips_exactly_through_json():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 3, 300)
    x = np.column_stack([y / 3 + rng.normal(0, 0.1, 300), rng.normal(size=300)])
    model = FayyadIraniDiscretizer().fit(x, y)
    assert len(model.cut_points_[0]) >= 2
    restored = FayyadIraniDiscretizer.from_dict(json.loads(json.dumps(model.to_dict())))
    for got, want in zip(restored.cut_points_, model.cut_points_):
        assert got.tobytes() == want.tobytes()
    np.testing.assert_array_equal(restored.n_values_, model.n_values_)
    np.testing.assert_array_equal(restored.transform(x), model.transform(x))


@pytest.mark.parametrize(
    "data, message",
    [
        ({"n_features_in": 1, "cut_points": [[2.0, 1.0]]}, "strictly increasing"),
        ({"n_features_in": 2, "cut_points": [[1.0]]}, "2 but 1 cut lists"),
        ({"cut_points": [[1.0]]}, "n_features_in"),
        ({"method": "equal-width", "n_features_in": 1, "cut_points": [[1.0]]}, "unknown method"),
    ],
)
def test_from_dict_rejects_inconsistent_data(data, message):
    with pytest.raises(ValueError, match=message):
        FayyadIraniDiscretizer.from_dict(data)


def test_fit_transform_equals_fit_then_transform():
    x, y = _random_problem(1)
    np.testing.assert_array_equal(
        FayyadIraniDiscretizer().fit_transform(x, y), FayyadIraniDiscretizer().fit(x, y).transform(x)
    )
