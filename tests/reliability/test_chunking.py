"""Bounded memory (issue 11 item 4): adapters and reference predictors run big inputs in chunks,
with the same scores, labels and error messages as one call.

Chunk sizes here are tiny (7 rows) so that row counts around the chunk boundaries are cheap;
``benchmarks/bench_predict_memory.py`` measures the memory on 10^6 letter rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bnc_deploy.errors import ConfigError, InputError
from bnc_deploy.reference import reference_predictor
from bnc_deploy.runtimes.base import load_runtime, runtime_class
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact, random_dnn_artifact
from bnc_deploy.verify import export_path

K = 7
SIZES = (1, K - 1, K, K + 1, 2 * K + 1, 3 * K)


def _have(runtime: str) -> bool:
    try:
        runtime_class(runtime)
        return True
    except ImportError:
        return False


def _tflite_available() -> bool:
    try:
        import tensorflow  # noqa: F401 - the converter
    except ImportError:
        return False
    return _have("litert")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """name -> (path, artifact) for .bnc files and exports of several lowerings and kinds."""
    from bnc_deploy.artifacts import save_artifact

    folder = tmp_path_factory.mktemp("chunking")
    rng = np.random.default_rng(11)
    nb = random_bnc_artifact(rng, d=5, n_classes=4, tan=False, bits=3, int_bits=2)
    tan_float = random_bnc_artifact(rng, d=4, n_classes=3, tan=True, bits=None)
    raw = random_bnc_artifact(
        rng,
        n_classes=3,
        tan=True,
        bits=4,
        int_bits=2,
        cardinalities=[3, 2, 4],
        discretizer=discretizer_dict([[0.0, 1.5], [-1.0], [0.25, 0.5, 2.0]]),
    )
    dnn = random_dnn_artifact(5, architecture="fc", activation="sign", bits=2)
    out = {}
    for name, art in {"nb": nb, "tan-float": tan_float, "dnn": dnn}.items():
        path = folder / f"{name}.bnc"
        save_artifact(art, path)
        out[f"{name}.bnc"] = (path, art)
    if _have("onnxruntime"):
        out["nb-gather.onnx"] = (export_path(nb, folder / "nb-gather.onnx", "onnx"), nb)
        out["nb-onehot.onnx"] = (export_path(nb, folder / "nb-onehot.onnx", "onnx", lowering="onehot-fc"), nb)
        out["raw.onnx"] = (export_path(raw, folder / "raw.onnx", "onnx", raw_inputs=True), raw)
        out["dnn.onnx"] = (export_path(dnn, folder / "dnn.onnx", "onnx"), dnn)
    if _tflite_available():
        out["nb-gather.tflite"] = (export_path(nb, folder / "nb-gather.tflite", "tflite"), nb)
        out["nb-onehot.tflite"] = (export_path(nb, folder / "nb-onehot.tflite", "tflite", lowering="onehot-fc"), nb)
    return out


CASES = [
    "nb.bnc",
    "tan-float.bnc",
    "dnn.bnc",
    "nb-gather.onnx",
    "nb-onehot.onnx",
    "raw.onnx",
    "dnn.onnx",
    "nb-gather.tflite",
    "nb-onehot.tflite",
]


def _get(files, name):
    if name not in files:
        pytest.skip(f"{name}: its exporter or runtime is not installed")
    return files[name]


def _rows(artifact, n, seed, dtype, raw=False):
    rng = np.random.default_rng(seed)
    if raw:
        return rng.normal(0.5, 1.5, size=(n, artifact.n_features)).astype(dtype)
    return rng.integers(0, artifact.cardinalities, size=(n, artifact.n_features)).astype(dtype)


@pytest.mark.parametrize("name", CASES)
def test_chunked_run_is_one_call(files, name):
    path, artifact = _get(files, name)
    whole = load_runtime(path, chunk_rows=None)
    chunked = load_runtime(path, chunk_rows=K)
    assert chunked.chunk_rows == K and whole.chunk_rows is None
    calls = []
    inner = chunked._run
    chunked._run = lambda checked: calls.append(len(checked)) or inner(checked)
    dtypes = ("float32", "float64") if whole.raw_inputs else ("int64", "int32", "uint8")
    for seed, n in enumerate(SIZES):
        for dtype in dtypes:
            x = _rows(artifact, n, seed, dtype, raw=whole.raw_inputs)
            calls.clear()
            scores, label = chunked.run(x)
            assert calls == [min(K, n - i) for i in range(0, n, K)]  # really chunked
            want_scores, want_label = whole.run(x)
            assert scores.dtype == np.float64 and label.dtype == np.int64
            np.testing.assert_array_equal(scores, want_scores)
            np.testing.assert_array_equal(label, want_label)
            np.testing.assert_array_equal(chunked.predict(x), want_label)
            np.testing.assert_array_equal(chunked.log_joint(x), want_scores)


@pytest.mark.parametrize("name", ["nb.bnc", "nb-gather.onnx", "raw.onnx"])
def test_chunked_errors_name_the_row_of_the_whole_input(files, name):
    path, artifact = _get(files, name)
    whole = load_runtime(path, chunk_rows=None)
    chunked = load_runtime(path, chunk_rows=K)
    n = 4 * K + 2
    if whole.raw_inputs:
        x = _rows(artifact, n, 0, "float64", raw=True)
        x[2 * K + 3, 1] = np.nan
        x[3 * K + 1, 0] = np.inf
    else:
        x = _rows(artifact, n, 0, "int64")
        x[2 * K + 3, 1] = 99
        x[2 * K + 4, 2] = -1
        x[3 * K + 1, 0] = 1000
    with pytest.raises(InputError) as expected:
        whole.run(x)
    for call in (chunked.run, chunked.predict, chunked.log_joint):
        with pytest.raises(InputError) as got:
            call(x)
        assert str(got.value) == str(expected.value)
    assert f"row {2 * K + 3}" in str(expected.value)
    if not whole.raw_inputs:
        assert "(3 bad value(s) in all)" in str(expected.value)


def test_shape_and_dtype_errors_are_those_of_the_whole_input(files):
    path, artifact = _get(files, "nb.bnc")
    whole, chunked = load_runtime(path, chunk_rows=None), load_runtime(path, chunk_rows=K)
    bad_inputs = [
        np.zeros((3 * K, artifact.n_features)),
        np.zeros((3 * K, artifact.n_features + 1), dtype=int),
        np.zeros((3 * K, artifact.n_features), dtype=bool),
        np.zeros((2, 3 * K, 1), dtype=int),
    ]
    for x in bad_inputs:
        with pytest.raises(InputError) as expected:
            whole.run(x)
        with pytest.raises(InputError) as got:
            chunked.run(x)
        assert str(got.value) == str(expected.value)


def test_single_row_and_empty_input(files):
    path, artifact = _get(files, "nb.bnc")
    rt = load_runtime(path, chunk_rows=1)
    row = _rows(artifact, 1, 0, "int64")[0]
    scores, label = rt.run(row)
    assert scores.shape == (1, artifact.n_classes) and label.shape == (1,)
    scores, label = rt.run(np.zeros((0, artifact.n_features), dtype=np.int64))
    assert scores.shape == (0, artifact.n_classes) and label.shape == (0,)
    assert rt.predict(np.zeros((0, artifact.n_features), dtype=np.int64)).shape == (0,)


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "many"])
def test_bad_chunk_rows_is_a_config_error(files, value):
    path, _ = _get(files, "nb.bnc")
    with pytest.raises(ConfigError, match="chunk_rows"):
        load_runtime(path, chunk_rows=value)


def test_auto_chunk_rows_is_bounded(files):
    path, artifact = _get(files, "nb.bnc")
    rt = load_runtime(path)
    assert 1024 <= rt.chunk_rows <= 65536


# -- reference predictors ----------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 40),
    chunk=st.integers(1, 9),
    seed=st.integers(0, 2**16),
    which=st.sampled_from(["nb-3bit", "tan-7bit", "tan-float", "dnn-sign", "dnn-relu"]),
)
def test_reference_predictors_chunk_exactly(n, chunk, seed, which):
    rng = np.random.default_rng(seed)
    artifact = {
        "nb-3bit": lambda: random_bnc_artifact(rng, tan=False, bits=3, int_bits=2),
        "tan-7bit": lambda: random_bnc_artifact(rng, tan=True, bits=7, int_bits=3),
        "tan-float": lambda: random_bnc_artifact(rng, tan=True, bits=None),
        "dnn-sign": lambda: random_dnn_artifact(seed % 50, activation="sign", bits=2),
        "dnn-relu": lambda: random_dnn_artifact(seed % 50, activation="relu", bits=3),
    }[which]()
    x = _rows(artifact, n, seed, "uint8")
    whole, chunked = reference_predictor(artifact), reference_predictor(artifact)
    whole.chunk_rows, chunked.chunk_rows = None, chunk
    if which == "dnn-relu":
        # Float64 ReLU layers are matrix products: BLAS picks its summation order by the batch
        # size (gemv for one row), so the last bit may differ between batch sizes, chunked or
        # not (the predictor always ran 256-row slices). Integer and BN paths are bit-identical.
        np.testing.assert_allclose(chunked.log_joint(x), whole.log_joint(x), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(chunked.predict_proba(x), whole.predict_proba(x), rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(chunked.log_joint(x), whole.log_joint(x))
        np.testing.assert_array_equal(chunked.predict(x), whole.predict(x))
        np.testing.assert_array_equal(chunked.predict_proba(x), whole.predict_proba(x))
        np.testing.assert_array_equal(chunked.predict(x), np.argmax(whole.log_joint(x), axis=1))
    if which in ("nb-3bit", "tan-7bit"):
        np.testing.assert_array_equal(chunked.integer_scores(x), whole.integer_scores(x))
    if n > chunk + 1:
        x = x.astype(np.int64)
        x[n - 1, 0] = 200
        x[chunk + 1, 0] = -5
        with pytest.raises(InputError) as expected:
            whole.log_joint(x)
        with pytest.raises(InputError) as got:
            chunked.predict(x)
        assert str(got.value) == str(expected.value)


def test_dnn_reference_is_the_same_across_its_inner_chunks(monkeypatch):
    """The DNN predictor also runs CHUNK_ROWS rows at a time through its layers."""
    import bnc_deploy.reference.dnn as dnn

    artifact = random_dnn_artifact(
        6, architecture="cnn", activation="sign", bits=3, encoding="onehot", max_cardinality=3
    )
    x = _rows(artifact, 50, 0, "int64")
    want = reference_predictor(artifact).log_joint(x)
    monkeypatch.setattr(dnn, "CHUNK_ROWS", 3)
    np.testing.assert_array_equal(reference_predictor(artifact).log_joint(x), want)
