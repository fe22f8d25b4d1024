"""scikit-learn's own estimator checks on the estimators of bnc_deploy.sklearn, plus their input contract.

Every check that cannot apply is listed in :data:`EXPECTED_FAILED_CHECKS` with its reason and runs
as a strict xfail: a listed check that starts to pass fails the test, so the list stays true.
The checked classifiers train for a few epochs only (the checks fit dozens of times).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from bnc_deploy.errors import InputError
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.sklearn import BNClassifier, DNNClassifier, FayyadIraniDiscretizer

CONTINUOUS = (
    "feeds continuous floats (not integer codes) without applying the categorical tag; the classifiers "
    "take integer codes only and refuse other floats instead of rounding them"
)

#: Checks a classifier over integer codes cannot pass, with the reason.
CODES_CLASSIFIER_FAILURES = {"check_decision_proba_consistency": CONTINUOUS}

EXPECTED_FAILED_CHECKS = {
    "FayyadIraniDiscretizer": {},
    "BNClassifier": dict(CODES_CLASSIFIER_FAILURES),
    "DNNClassifier": dict(CODES_CLASSIFIER_FAILURES),
}

CHECKED = [
    FayyadIraniDiscretizer(),
    BNClassifier(epochs=2),
    BNClassifier(structure="chow-liu", bits=3, epochs=2),
    DNNClassifier(hidden=16, epochs=30, lr=3e-2),
]


def expected_failed_checks(estimator) -> dict:
    return EXPECTED_FAILED_CHECKS[type(estimator).__name__]


@parametrize_with_checks(CHECKED, expected_failed_checks=expected_failed_checks, xfail_strict=True)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# -- the input contract -------------------------------------------------------------------------------
def _codes(n=60, d=4, k=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, k, size=(n, d))
    y = (x[:, 0] + x[:, 1] > 2).astype(int)
    return x, y


def test_decision_function_is_the_reference_log_joint_for_several_classes():
    x, _ = _codes()
    y = x[:, 0]  # three classes
    clf = BNClassifier(structure="chow-liu", bits=4, epochs=3).fit(x, y)
    log_joint = ReferencePredictor(clf.artifact_).log_joint(x)
    assert np.array_equal(clf.decision_function(x), log_joint)
    assert np.array_equal(clf.log_joint(x), log_joint)
    np.testing.assert_allclose(clf.predict_proba(x).sum(axis=1), 1.0)
    np.testing.assert_allclose(np.exp(clf.predict_log_proba(x)), clf.predict_proba(x))
    assert np.array_equal(clf.predict(x), clf.classes_[np.argmax(log_joint, axis=1)])


def test_binary_decision_function_follows_sklearn_and_log_joint_stays_exact():
    x, y = _codes()
    clf = BNClassifier(epochs=3).fit(x, np.where(y == 1, "yes", "no"))
    log_joint = ReferencePredictor(clf.artifact_).log_joint(x)
    assert list(clf.classes_) == ["no", "yes"]
    assert clf.artifact_.class_names == ["no", "yes"]
    assert np.array_equal(clf.log_joint(x), log_joint)
    assert np.array_equal(clf.decision_function(x), log_joint[:, 1] - log_joint[:, 0])
    assert np.array_equal(clf.predict(x) == "yes", clf.decision_function(x) > 0)


def test_out_of_range_codes_name_the_feature_and_value():
    x, y = _codes(k=3)
    clf = BNClassifier(epochs=1).fit(x, y)
    bad = x[:2].copy()
    bad[1, 2] = 7
    with pytest.raises(InputError, match=r"feature 2 .*value 7 in row 1"):
        clf.predict(bad)


def test_non_integer_floats_are_refused_not_rounded():
    x, y = _codes()
    clf = BNClassifier(epochs=1).fit(x.astype(np.float64), y)  # whole-valued floats are codes
    assert np.array_equal(clf.predict(x.astype(np.float32)), clf.predict(x))
    bad = x.astype(np.float64)
    bad[3, 1] = 1.5
    with pytest.raises(ValueError, match=r"feature 1 has non-integer value 1.5 in row 3"):
        clf.predict(bad)
    with pytest.raises(ValueError, match=r"non-integer value"):
        BNClassifier(epochs=1).fit(bad, y)


def test_negative_codes_and_bad_structures_are_refused():
    x, y = _codes()
    with pytest.raises(ValueError, match=r"Negative values .*feature 0 has value -1"):
        BNClassifier(epochs=1).fit(np.vstack([[-1, 0, 0, 0], x]), np.r_[0, y])
    with pytest.raises(ValueError, match="cycle"):
        BNClassifier(structure=[1, 0, -1, -1], epochs=1).fit(x, y)
    with pytest.raises(ValueError, match="structure must be one of"):
        BNClassifier(structure="tan", epochs=1).fit(x, y)


def test_explicit_parents_and_n_values():
    x, y = _codes(k=3)
    clf = BNClassifier(structure=[-1, 0, 1, -1], n_values=5, epochs=1).fit(x, y)
    assert clf.parents_.tolist() == [-1, 0, 1, -1]
    assert clf.n_values_.tolist() == [5, 5, 5, 5]
    assert clf.predict(np.full((1, 4), 4)).shape == (1,)  # codes unseen in training, inside n_values
    with pytest.raises(ValueError, match="outside n_values"):
        BNClassifier(n_values=2, epochs=1).fit(x, y)


def test_dataframe_feature_names_reach_the_artifact():
    pd = pytest.importorskip("pandas")
    x, y = _codes()
    frame = pd.DataFrame(x, columns=["a", "b", "c", "d"])
    clf = BNClassifier(epochs=1).fit(frame, y)
    assert list(clf.feature_names_in_) == ["a", "b", "c", "d"]
    assert clf.artifact_.feature_names == ["a", "b", "c", "d"]


def test_fit_is_quiet_and_reproducible(capsys):
    x, y = _codes()
    a = BNClassifier(structure="chow-liu", bits=3, epochs=3).fit(x, y)
    b = BNClassifier(structure="chow-liu", bits=3, epochs=3).fit(x, y)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert np.array_equal(a.decision_function(x), b.decision_function(x))


def test_learned_structure():
    x, y = _codes(n=200, d=5)
    clf = BNClassifier(structure="learn", epochs=3, structure_params={"candidates": 2}).fit(x, y)
    assert clf.artifact_.metadata["structure_source"] == "learned"
    assert clf.parents_.shape == (5,)
    assert clf.score(x, y) > 0.6


def test_dnn_classifier_scores_are_the_reference_logits():
    from bnc_deploy.reference.dnn import DNNReferencePredictor

    x, y = _codes(n=100, d=16)
    clf = DNNClassifier(model="cnn", image_shape=(4, 4), hidden=4, epochs=3).fit(x, x[:, 0])
    logits = DNNReferencePredictor(clf.artifact_).logits(x)
    assert np.array_equal(clf.logits(x), logits)
    assert np.array_equal(clf.decision_function(x), logits)
    np.testing.assert_allclose(clf.predict_proba(x).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="image_shape"):
        DNNClassifier(model="cnn", epochs=1).fit(np.hstack([x, x[:, :1]]), y)
