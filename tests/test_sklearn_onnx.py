"""skl2onnx conversion of the scikit-learn estimators (``bnc_deploy.sklearn.onnx``).

What is checked: ``skl2onnx.to_onnx`` of a fitted estimator or ``[FayyadIraniDiscretizer,
classifier]`` pipeline, run in onnxruntime, gives outputs ``label`` (the original ``classes_``
values) and ``scores`` that equal ``predict`` and ``decision_function`` / ``log_joint`` bit for
bit on every row (quantized models), and ``scores`` bit-identical to the file ``bnc-export``
writes for the same model (``verify.export_file(to_artifact(pipeline), ..., raw_inputs=True)``),
for every model (float ones included); the acceptance run does it on the letter raw features.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import numpy as np
import onnx
import pytest

pytest.importorskip("skl2onnx")
ort = pytest.importorskip("onnxruntime")

from skl2onnx import to_onnx  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_iris  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

import bnc_deploy.sklearn.onnx as skonnx  # noqa: E402
from bnc_deploy.errors import ExportError  # noqa: E402
from bnc_deploy.exporters.onnx_bnc import build_onnx_model  # noqa: E402
from bnc_deploy.exporters.onnx_dnn import build_onnx_dnn  # noqa: E402
from bnc_deploy.formats.metadata import INVALID_LABEL  # noqa: E402
from bnc_deploy.sklearn import BNClassifier, DNNClassifier, FayyadIraniDiscretizer, to_artifact  # noqa: E402
from bnc_deploy.verify import export_file  # noqa: E402

EPOCHS = 5


def run(model: onnx.ModelProto, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every output of ``model`` on ``x`` (its single input), by name."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {session.get_inputs()[0].name: x}), strict=True))


def run_file(path, x: np.ndarray) -> dict[str, np.ndarray]:
    return run(onnx.load(str(path)), x)


def split(x, y, seed: int = 0):
    order = np.random.default_rng(seed).permutation(len(y))
    n = (2 * len(y) + 1) // 3
    return x[order[:n]], y[order[:n]], x[order[n:]], y[order[n:]]


@pytest.fixture(scope="module")
def iris():
    x, y = load_iris(return_X_y=True)
    return split(x.astype(np.float32), y)


@pytest.fixture(scope="module")
def cancer():
    x, y = load_breast_cancer(return_X_y=True)
    return split(x.astype(np.float32), y)


def fitted(data, **params):
    x_tr, y_tr, _, _ = data
    params.setdefault("epochs", EPOCHS)
    return make_pipeline(FayyadIraniDiscretizer(), BNClassifier(random_state=0, **params)).fit(x_tr, y_tr)


def log_joint(pipeline, x) -> np.ndarray:
    """The classifier's log-joint (``decision_function`` is 1-D for two classes)."""
    return pipeline[-1].log_joint(pipeline[0].transform(x))


# -- pipelines of discretizer and BN classifier --------------------------------------------------------
@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"bits": 3}, id="nb-3bit"),
        pytest.param({"bits": 3, "structure": "chow-liu"}, id="tan-chow-liu-3bit"),
        pytest.param({"bits": 5, "int_bits": 2}, id="nb-5bit"),
    ],
)
def test_quantized_pipeline_equals_predict_and_decision_function(iris, params):
    pipeline = fitted(iris, **params)
    x_te = iris[2]
    model = to_onnx(pipeline, x_te[:1])
    assert [o.name for o in model.graph.output] == ["label", "scores"]
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    out = run(model, x_te)
    assert out["label"].dtype == np.int64 and out["scores"].dtype == np.float32
    np.testing.assert_array_equal(out["label"], pipeline.predict(x_te))
    assert np.array_equal(out["scores"], pipeline.decision_function(x_te))
    assert np.array_equal(out["scores"], log_joint(pipeline, x_te))


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"bits": 3}, id="nb-3bit"),
        pytest.param({"bits": 3, "structure": "chow-liu"}, id="tan-chow-liu-3bit"),
        pytest.param({"bits": None}, id="nb-float"),
        pytest.param({"bits": None, "structure": "chow-liu"}, id="tan-float"),
    ],
)
def test_scores_bit_identical_to_bnc_export_raw_file(iris, tmp_path, params):
    pipeline = fitted(iris, **params)
    x_te = iris[2].copy()
    x_te[::7, 1] = np.nan  # invalid rows: NaN scores and label -1 in both
    x_te[3, 0] = np.inf
    path = tmp_path / "model.onnx"
    export_file(to_artifact(pipeline), path, "onnx", raw_inputs=True)
    exported = run_file(path, x_te)
    converted = run(to_onnx(pipeline, iris[2][:1]), x_te)
    assert np.array_equal(converted["scores"], exported["log_joint"], equal_nan=True)
    np.testing.assert_array_equal(converted["label"], exported["label"])  # classes_ are 0..C-1 here
    invalid = np.isnan(exported["log_joint"]).all(axis=1)
    assert invalid.sum() == len(x_te[::7]) + 1 and (converted["label"][invalid] == INVALID_LABEL).all()


def test_float_pipeline_agrees_with_predict(iris):
    """A float model sums float32 in the graph and float64 in the reference: labels agree, scores
    to float32 rounding (the bit-identical comparison is with bnc-export's file, above)."""
    pipeline = fitted(iris, bits=None)
    x_te = iris[2]
    out = run(to_onnx(pipeline, x_te[:1]), x_te)
    np.testing.assert_array_equal(out["label"], pipeline.predict(x_te))
    np.testing.assert_allclose(out["scores"], pipeline.decision_function(x_te), rtol=1e-5, atol=1e-5)


def test_string_labels_and_binary_dataset(cancer):
    x_tr, y_tr, x_te, _ = cancer
    names = np.array(["malignant", "benign"])
    pipeline = fitted((x_tr, names[y_tr], None, None), bits=3)
    model = to_onnx(pipeline, x_te[:1])
    out = run(model, x_te)
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.STRING
    np.testing.assert_array_equal(out["label"], pipeline.predict(x_te))
    assert set(out["label"]) <= set(names)
    assert np.array_equal(out["scores"], log_joint(pipeline, x_te))
    # binary decision_function is scores[:, 1] - scores[:, 0] (exact: integer multiples of the step)
    assert np.array_equal(out["scores"][:, 1] - out["scores"][:, 0], pipeline.decision_function(x_te))
    nan_row = x_te[:2].copy()
    nan_row[0, 0] = np.nan
    assert list(run(model, nan_row)["label"][:1]) == [skonnx.INVALID_STRING_LABEL]


def test_integer_labels_not_0_to_c_minus_1(iris):
    x_tr, y_tr, x_te, _ = iris
    labels = np.array([-3, 7, 100])
    pipeline = fitted((x_tr, labels[y_tr], None, None), bits=3)
    out = run(to_onnx(pipeline, x_te[:1]), x_te)
    np.testing.assert_array_equal(out["label"], pipeline.predict(x_te))
    assert np.array_equal(out["scores"], pipeline.decision_function(x_te))


def test_target_opset(iris):
    """The graph is built at the exporters' opset (17) or lower when skl2onnx targets lower (>= 13)."""
    pipeline = fitted(iris, bits=3)
    x_te = iris[2]
    out = run(to_onnx(pipeline, x_te[:1], target_opset=13), x_te)
    assert np.array_equal(out["scores"], pipeline.decision_function(x_te))
    with pytest.raises(ExportError, match="opset >= 13"):
        to_onnx(pipeline, x_te[:1], target_opset=12)


def test_whole_number_float_labels_become_int64(iris):
    x_tr, y_tr, x_te, _ = iris
    pipeline = fitted((x_tr, y_tr * 2.0 + 1.0, None, None), bits=3)
    out = run(to_onnx(pipeline, x_te[:1]), x_te)
    assert out["label"].dtype == np.int64
    np.testing.assert_array_equal(out["label"], pipeline.predict(x_te))


def test_other_labels_are_refused():
    with pytest.raises(ExportError, match="integer or string labels"):
        skonnx.label_kind(np.array([1 + 2j, 3j]))


# -- the estimators alone --------------------------------------------------------------------------------
def test_bare_classifier_on_codes(iris):
    x_tr, y_tr, x_te, _ = iris
    disc = FayyadIraniDiscretizer().fit(x_tr, y_tr)
    codes_tr, codes_te = disc.transform(x_tr), disc.transform(x_te)
    clf = BNClassifier(bits=3, structure="chow-liu", epochs=EPOCHS, random_state=0).fit(codes_tr, y_tr)
    for dtype in (np.int64, np.int32, np.float32):  # not int64: one Cast to int64 before the graph
        out = run(to_onnx(clf, codes_te[:1].astype(dtype)), codes_te.astype(dtype))
        np.testing.assert_array_equal(out["label"], clf.predict(codes_te))
        assert np.array_equal(out["scores"], clf.decision_function(codes_te))
    bad = codes_te[:3].copy()
    bad[1, 2] = 99  # out of range: the exporter's guard
    out = run(to_onnx(clf, codes_te[:1]), bad)
    assert out["label"][1] == INVALID_LABEL and np.isnan(out["scores"][1]).all()


def test_discretizer_alone_emits_the_codes(iris):
    x_tr, y_tr, x_te, _ = iris
    disc = FayyadIraniDiscretizer().fit(x_tr, y_tr)
    model = to_onnx(disc, x_te[:1])
    (codes,) = run(model, x_te).values()
    np.testing.assert_array_equal(codes, disc.transform(x_te))
    x64 = x_te.astype(np.float64)  # a float64 input is cast to float32 first, as raw-input files take
    (codes64,) = run(to_onnx(disc, x64[:1]), x64).values()
    np.testing.assert_array_equal(codes64, codes)


@pytest.mark.parametrize("structure", ["nb", "chow-liu"])
def test_converted_graph_is_the_raw_input_file_plus_the_codes_guard(iris, structure):
    """Same nodes as bnc-export's raw-input graph, plus the codes graph's one ``Clip(-1, K)`` (the
    identity on binned codes): no arithmetic of the converters' own, no ZipMap."""
    pipeline = fitted(iris, bits=3, structure=structure)
    converted = to_onnx(pipeline, iris[2][:1])
    exported = build_onnx_model(to_artifact(pipeline), raw_inputs=True)
    ops = Counter(n.op_type for n in converted.graph.node if n.op_type != "Identity")
    assert ops == Counter(n.op_type for n in exported.graph.node) + Counter({"Clip": 1})


def test_import_without_skl2onnx_raises_missing_extra():
    code = (
        "import sys; sys.modules['skl2onnx'] = None\n"
        "from bnc_deploy.errors import MissingExtraError\n"
        "try:\n    import bnc_deploy.sklearn.onnx\nexcept MissingExtraError as e:\n    print(e.extra)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "sklearn"


# -- DNN -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("activation", ["sign", "relu"])
def test_dnn_pipeline(iris, activation):
    x_tr, y_tr, x_te, _ = iris
    pipeline = make_pipeline(
        FayyadIraniDiscretizer(), DNNClassifier(bits=2, hidden=16, activation=activation, epochs=EPOCHS, random_state=0)
    ).fit(x_tr, y_tr)
    out = run(to_onnx(pipeline, x_te[:1]), x_te)
    codes = pipeline[0].transform(x_te)
    exported = run(build_onnx_dnn(pipeline[-1].artifact_), codes)
    assert np.array_equal(out["scores"], exported["logits"])
    np.testing.assert_array_equal(out["label"], exported["label"])
    if activation == "sign":  # the exporter's exact lowering: identical to the estimator
        np.testing.assert_array_equal(out["label"], pipeline.predict(x_te))
        assert np.array_equal(out["scores"], pipeline.decision_function(x_te))
    else:
        np.testing.assert_allclose(out["scores"], pipeline.decision_function(x_te), rtol=1e-5, atol=1e-5)


# -- acceptance: letter raw features ---------------------------------------------------------------------
@pytest.mark.shared_data
def test_letter_raw_pipeline_bit_identical(shared_datasets, tmp_path):
    from bnc_deploy.datasets.loaders import read_letter
    from bnc_deploy.datasets.splits import holdout_indices

    raw = read_letter(shared_datasets / "raw" / "letter" / "letter-recognition.data")
    train, test = holdout_indices(len(raw.y), seed=0)
    x = raw.x.astype(np.float32)
    started = time.perf_counter()
    pipeline = make_pipeline(FayyadIraniDiscretizer(), BNClassifier(bits=3, epochs=3, random_state=0))
    pipeline.fit(x[train], raw.y[train])
    fit_s = time.perf_counter() - started
    out = run(to_onnx(pipeline, x[:1]), x[test])
    predicted, scores = pipeline.predict(x[test]), pipeline.decision_function(x[test])
    assert out["scores"].shape == (len(test), 26)
    np.testing.assert_array_equal(out["label"], predicted)
    assert np.array_equal(out["scores"], scores)
    path = tmp_path / "letter.onnx"
    export_file(to_artifact(pipeline), path, "onnx", raw_inputs=True)
    assert np.array_equal(run_file(path, x[test])["log_joint"], out["scores"])
    error = float((predicted != raw.y[test]).mean())
    print(f"letter raw: {len(test)} test rows identical, test error {error:.4f}, fit {fit_s:.1f} s")
    assert error < 0.35
