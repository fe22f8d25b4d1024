"""Pipelines of bnc_deploy.sklearn: model selection, cloning, pickling, model files and exports.

``make_pipeline(FayyadIraniDiscretizer(), BNClassifier(...))`` must work with scikit-learn's tools,
round-trip through a ``.bnc`` file (:func:`to_artifact`, :func:`from_artifact`) predicting
identically, and export to ONNX (codes, and raw inputs for the pipeline) with scores equal to the
estimator's. A pickled fitted estimator predicts without torch.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import GridSearchCV, cross_val_score, train_test_split
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from bnc_deploy.artifacts import BNCArtifact, DNNArtifact, load_artifact, save_artifact
from bnc_deploy.sklearn import BNClassifier, DNNClassifier, FayyadIraniDiscretizer, from_artifact, to_artifact

EPOCHS = 5


@pytest.fixture(scope="module")
def data():
    bunch = load_breast_cancer()
    labels = bunch.target_names[bunch.target]  # string labels: "malignant" / "benign"
    return train_test_split(bunch.data, labels, test_size=0.3, stratify=labels, random_state=0)


@pytest.fixture(scope="module")
def pipe(data):
    x_train, _, y_train, _ = data
    return make_pipeline(FayyadIraniDiscretizer(), BNClassifier("chow-liu", bits=3, epochs=EPOCHS)).fit(
        x_train, y_train
    )


def test_pipeline_learns(pipe, data):
    _, x_test, _, y_test = data
    assert list(pipe.classes_) == ["benign", "malignant"]
    assert pipe.score(x_test, y_test) > 0.88
    clf = pipe[-1]
    assert np.array_equal(clf.n_values_, pipe[0].n_values_)
    assert clf.artifact_.class_names == ["benign", "malignant"]


def test_clone_and_pickle(pipe, data):
    _, x_test, _, _ = data
    fresh = clone(pipe)
    assert not hasattr(fresh[-1], "artifact_")
    assert fresh.get_params()["bnclassifier__bits"] == 3
    again = pickle.loads(pickle.dumps(pipe))
    assert np.array_equal(again.predict(x_test), pipe.predict(x_test))
    assert np.array_equal(again.decision_function(x_test), pipe.decision_function(x_test))


def test_a_pickled_pipeline_predicts_without_torch(pipe, data, tmp_path):
    _, x_test, _, _ = data
    path = tmp_path / "pipe.pkl"
    path.write_bytes(pickle.dumps((pipe, x_test, pipe.predict_proba(x_test))))
    code = (
        "import pickle, sys\n"
        "import numpy as np\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ImportError('torch is not installed here')\n"
        "sys.meta_path.insert(0, NoTorch())  # any import of torch now fails\n"
        f"pipe, x, proba = pickle.loads(open({str(path)!r}, 'rb').read())\n"
        "assert np.array_equal(pipe.predict_proba(x), proba)\n"
        "assert not any(name.startswith('bnc_deploy.train') for name in sys.modules)\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_grid_search_and_cross_validation(data):
    x_train, _, y_train, _ = data
    pipe = make_pipeline(FayyadIraniDiscretizer(), BNClassifier(bits=3, epochs=2))
    search = GridSearchCV(pipe, {"bnclassifier__structure": ["nb", "chow-liu"]}, cv=2).fit(x_train, y_train)
    assert search.best_params_["bnclassifier__structure"] in ("nb", "chow-liu")
    assert search.best_score_ > 0.85
    scores = cross_val_score(pipe, x_train, y_train == "malignant", cv=2, scoring="roc_auc")
    assert scores.shape == (2,) and np.all(scores > 0.9)


def test_to_artifact_carries_the_discretizer_and_check_set(pipe):
    artifact = to_artifact(pipe)
    assert isinstance(artifact, BNCArtifact)
    assert artifact.discretizer == pipe[0].to_dict()
    assert artifact.check_x is not None and artifact.check_x.shape[1] == 30
    assert artifact.metadata["sklearn"]["classes"] == ["benign", "malignant"]
    assert pipe[-1].artifact_.discretizer is None  # the fitted classifier is left as it was
    assert to_artifact(pipe[-1]).discretizer is None
    with pytest.raises(ValueError, match="pipeline must be"):
        to_artifact(make_pipeline(StandardScaler(), pipe[-1]))


def test_model_file_round_trip(pipe, data, tmp_path):
    _, x_test, _, _ = data
    path = tmp_path / "pipe.bnc"
    save_artifact(to_artifact(pipe), path)
    for source in (path, load_artifact(path)):
        rebuilt = from_artifact(source)
        assert isinstance(rebuilt, Pipeline)
        assert np.array_equal(rebuilt.predict(x_test), pipe.predict(x_test))
        assert np.array_equal(rebuilt.decision_function(x_test), pipe.decision_function(x_test))
        assert np.array_equal(
            rebuilt[-1].log_joint(pipe[0].transform(x_test)), pipe[-1].log_joint(pipe[0].transform(x_test))
        )
        assert list(rebuilt.classes_) == ["benign", "malignant"]
        assert rebuilt[-1].get_params()["structure"] == "chow-liu" and rebuilt[-1].bits == 3


def test_integer_labels_come_back_as_integers_and_others_as_strings(data, tmp_path):
    x_train, x_test, y_train, _ = data
    codes = FayyadIraniDiscretizer().fit_transform(x_train, y_train)
    for labels, expected in (((y_train == "malignant").astype(int) * 7, [0, 7]), (y_train == "benign", [False, True])):
        clf = BNClassifier(epochs=1).fit(codes, labels)
        save_artifact(to_artifact(clf), tmp_path / "m.bnc")
        rebuilt = from_artifact(tmp_path / "m.bnc")
        assert rebuilt.classes_.tolist() == expected and rebuilt.classes_.dtype == clf.classes_.dtype
        assert np.array_equal(rebuilt.predict(codes), clf.predict(codes))
    artifact = to_artifact(clf)
    del artifact.metadata["sklearn"]  # a model trained by bnc-train: only the class names are known
    rebuilt = from_artifact(artifact)
    assert rebuilt.classes_.tolist() == ["False", "True"]
    assert rebuilt.get_params()["structure"] == "nb" and rebuilt.bits is None
    assert np.array_equal(rebuilt.decision_function(codes), clf.decision_function(codes))


def test_onnx_export_scores_equal_the_estimator(pipe, data, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from bnc_deploy.verify import export_file

    _, x_test, _, _ = data
    codes = pipe[0].transform(x_test)
    report = export_file(to_artifact(pipe[-1]), tmp_path / "codes.onnx", "onnx")
    assert report.exact and report.scores_identical
    session = ort.InferenceSession(str(tmp_path / "codes.onnx"), providers=["CPUExecutionProvider"])
    scores = session.run(["log_joint"], {"x": codes})[0].astype(np.float64)
    assert np.array_equal(scores, pipe[-1].log_joint(codes))
    assert np.array_equal(scores[:, 1] - scores[:, 0], pipe[-1].decision_function(codes))

    raw = export_file(to_artifact(pipe), tmp_path / "raw.onnx", "onnx", raw_inputs=True)
    assert raw.exact and raw.scores_identical
    x32 = x_test.astype(np.float32)  # raw files take float32; the binning of those values is exact
    session = ort.InferenceSession(str(tmp_path / "raw.onnx"), providers=["CPUExecutionProvider"])
    scores = session.run(["log_joint"], {"x": x32})[0].astype(np.float64)
    assert np.array_equal(scores, pipe[-1].log_joint(pipe[0].transform(x32.astype(np.float64))))


def test_dnn_classifier_round_trip_and_export(data, tmp_path):
    from bnc_deploy.verify import export_file

    x_train, x_test, y_train, y_test = data
    pipe = make_pipeline(FayyadIraniDiscretizer(), DNNClassifier()).fit(x_train, y_train)
    assert pipe.score(x_test, y_test) > 0.85
    artifact = to_artifact(pipe)
    assert isinstance(artifact, DNNArtifact) and artifact.discretizer == pipe[0].to_dict()
    save_artifact(artifact, tmp_path / "dnn.bnc")
    rebuilt = from_artifact(tmp_path / "dnn.bnc")
    assert np.array_equal(rebuilt.decision_function(x_test), pipe.decision_function(x_test))
    assert list(rebuilt.classes_) == ["benign", "malignant"]
    report = export_file(to_artifact(pipe[-1]), tmp_path / "dnn.onnx", "onnx")
    assert report.agreement is None or report.agreement > 0.95
