"""``RuntimeAdapter.prepare``/``invoke`` in every adapter (numpy, onnxruntime, LiteRT incl. the
static batch-1 ``onehot-fc`` file) on BN and DNN files: the same answers as ``run``, validation in
``prepare``, batch sizes that change between ``prepare`` and ``invoke``; and truncated, random or
empty files failing to load with RuntimeLoadError naming the file.

One module-scoped set of exports (each a real conversion and verification), reused by every test.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from exports import export_onnx  # noqa: E402

from bnc_deploy.artifacts import save_artifact  # noqa: E402
from bnc_deploy.errors import InputError, MissingExtraError, RuntimeLoadError  # noqa: E402
from bnc_deploy.runtimes.base import load_runtime  # noqa: E402
from bnc_deploy.runtimes.reference_adapter import ReferenceAdapter  # noqa: E402
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact, random_dnn_artifact  # noqa: E402


def _litert_available() -> bool:
    try:
        import ai_edge_litert  # noqa: F401
        import tensorflow  # noqa: F401  (the exporter converts with TensorFlow)
    except ImportError:
        return False
    return True


LITERT = _litert_available()
needs_litert = pytest.mark.skipif(not LITERT, reason="ai-edge-litert and TensorFlow are needed for .tflite files")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """``{case: (artifact, path, open_kwargs)}`` for every adapter and model kind."""
    tmp = tmp_path_factory.mktemp("invoke")
    bn = random_bnc_artifact(
        np.random.default_rng(11), bits=4, int_bits=2, tan=True, n_classes=3, cardinalities=[3, 1, 4, 2, 5]
    )
    raw = random_bnc_artifact(
        np.random.default_rng(12),
        bits=3,
        tan=True,
        cardinalities=[3, 2, 1],
        discretizer=discretizer_dict([[0.5, 1.5], [0.1], []]),
    )
    dnn = random_dnn_artifact(5, architecture="fc", activation="sign", bits=2)
    cnn = random_dnn_artifact(6, architecture="cnn", activation="relu", bits=3, encoding="onehot", max_cardinality=3)
    out = {}
    for name, artifact in (("bn", bn), ("raw", raw), ("dnn", dnn), ("cnn", cnn)):
        save_artifact(artifact, tmp / f"{name}.bnc")
        out[f"{name}-numpy"] = (artifact, tmp / f"{name}.bnc", {"raw_inputs": name == "raw"})
    out["bn-onnx"] = (bn, export_onnx(bn, tmp / "bn.onnx"), {})
    out["raw-onnx"] = (raw, export_onnx(raw, tmp / "raw.onnx", raw_inputs=True), {})
    out["dnn-onnx"] = (dnn, export_onnx(dnn, tmp / "dnn.onnx"), {})
    out["cnn-onnx"] = (cnn, export_onnx(cnn, tmp / "cnn.onnx"), {})
    if LITERT:
        from exports import export_tflite

        out["bn-tflite"] = (bn, export_tflite(bn, tmp / "bn.tflite"), {})
        out["bn-tflite-static"] = (bn, export_tflite(bn, tmp / "bn_static.tflite", lowering="onehot-fc"), {})
        out["raw-tflite"] = (raw, export_tflite(raw, tmp / "raw.tflite", raw_inputs=True), {})
        out["dnn-tflite"] = (dnn, export_tflite(dnn, tmp / "dnn.tflite"), {})
        out["cnn-tflite"] = (cnn, export_tflite(cnn, tmp / "cnn.tflite"), {})
    return out


CASES = [
    "bn-numpy",
    "raw-numpy",
    "dnn-numpy",
    "cnn-numpy",
    "bn-onnx",
    "raw-onnx",
    "dnn-onnx",
    "cnn-onnx",
    *(
        pytest.param(c, marks=needs_litert)
        for c in ("bn-tflite", "bn-tflite-static", "raw-tflite", "dnn-tflite", "cnn-tflite")
    ),
]


def open_case(models, case):
    artifact, path, kwargs = models[case]
    if path.suffix == ".bnc":
        return artifact, ReferenceAdapter(path, threads=1, **kwargs)
    return artifact, load_runtime(path, threads=1)


def rows_for(adapter, artifact, n, seed=1):
    """Valid input rows: codes, or raw values spread over (and beyond) every cut point."""
    rng = np.random.default_rng(seed)
    if adapter.raw_inputs:
        return rng.uniform(-1.0, 2.5, size=(n, adapter.n_features))
    return rng.integers(0, artifact.cardinalities, size=(n, adapter.n_features)).astype(np.int64)


def as_run_outputs(outputs):
    """What ``run`` makes of ``invoke``'s outputs: float64 scores, int64 labels."""
    scores, label = outputs
    return np.asarray(scores).astype(np.float64), np.asarray(label).astype(np.int64).reshape(-1)


@pytest.mark.parametrize("case", CASES)
def test_invoke_of_prepare_is_run(models, case):
    artifact, adapter = open_case(models, case)
    for n in (1, 3, 37):
        x = rows_for(adapter, artifact, n, seed=n)
        expected_scores, expected_label = adapter.run(x)
        scores, label = as_run_outputs(adapter.invoke(adapter.prepare(x)))
        assert scores.shape == (n, adapter.n_classes) and label.shape == (n,)
        assert np.array_equal(scores, expected_scores, equal_nan=True), case
        np.testing.assert_array_equal(label, expected_label)


@pytest.mark.parametrize("case", CASES)
def test_prepared_input_survives_other_batch_sizes(models, case):
    """A prepared batch stays valid after other sizes were prepared and invoked (LiteRT re-allocates)."""
    artifact, adapter = open_case(models, case)
    one = rows_for(adapter, artifact, 1, seed=5)
    many = rows_for(adapter, artifact, 20, seed=6)
    p_one, p_many = adapter.prepare(one), adapter.prepare(many)
    expected_one, expected_many = adapter.run(one), adapter.run(many)
    for _ in range(2):
        for prepared, expected in ((p_one, expected_one), (p_many, expected_many), (p_one, expected_one)):
            scores, label = as_run_outputs(adapter.invoke(prepared))
            assert np.array_equal(scores, expected[0], equal_nan=True)
            np.testing.assert_array_equal(label, expected[1])


@pytest.mark.parametrize("case", CASES)
def test_prepare_validates_like_run(models, case):
    artifact, adapter = open_case(models, case)
    x = rows_for(adapter, artifact, 4)
    if adapter.raw_inputs:
        x[2, 1] = np.nan
        pattern = r"feature 1 \('feat1'\) has value nan in row 2"
    else:
        feature = int(np.argmax(artifact.cardinalities))
        x[2, feature] = artifact.cardinalities[feature]
        pattern = rf"feature {feature} .*value {artifact.cardinalities[feature]}.*row 2"
    with pytest.raises(InputError, match=pattern):
        adapter.prepare(x)
    with pytest.raises(InputError, match=pattern):
        adapter.run(x)
    with pytest.raises(InputError, match=r"shape \(n, "):
        adapter.prepare(np.zeros((2, adapter.n_features + 1)))
    with pytest.raises(InputError, match="no rows"):
        adapter.prepare(np.zeros((0, adapter.n_features), dtype=np.int64))
    assert adapter.run(np.zeros((0, adapter.n_features), dtype=np.int64))[1].shape == (0,)


@needs_litert
def test_static_batch_file_is_run_in_chunks(models):
    artifact, adapter = open_case(models, "bn-tflite-static")
    assert adapter.static_batch == 1
    _, dynamic = open_case(models, "bn-tflite")
    assert dynamic.static_batch is None
    x = rows_for(adapter, artifact, 9)
    np.testing.assert_array_equal(adapter.run(x)[0], dynamic.run(x)[0])


@pytest.mark.parametrize("case", ["bn-numpy", "bn-onnx"])
def test_numpy_and_onnx_have_no_static_batch(models, case):
    assert open_case(models, case)[1].static_batch is None


# -- files that are not models ----------------------------------------------------------------------
def broken_copies(good: bytes, suffix: str, folder):
    """Truncations at several lengths, random bytes, random bytes behind the right header, empty."""
    rng = np.random.default_rng(0)
    cases = {
        f"truncated_{n}": good[:n]
        for n in sorted({1, 4, 8, 16, 32, 100, len(good) // 4, len(good) // 2, len(good) - 100, len(good) - 1})
    }
    cases.update(random=rng.bytes(600), random_after_header=good[:8] + rng.bytes(600), empty=b"")
    paths = []
    for name, data in cases.items():
        path = folder / f"{name}{suffix}"
        path.write_bytes(data)
        paths.append(path)
    return paths


@pytest.mark.parametrize(
    "case",
    ["bn-onnx", pytest.param("bn-tflite", marks=needs_litert), pytest.param("bn-tflite-static", marks=needs_litert)],
)
def test_broken_files_raise_runtime_load_error_naming_the_file(models, case, tmp_path):
    _, path, _ = models[case]
    for broken in broken_copies(path.read_bytes(), path.suffix, tmp_path):
        with pytest.raises(RuntimeLoadError) as info:
            load_runtime(broken)
        assert str(broken) in str(info.value), str(info.value)


@needs_litert
def test_litert_without_its_framework_asks_for_the_extra(models, monkeypatch):
    _, path, _ = models["bn-tflite"]
    for module in ("ai_edge_litert", "ai_edge_litert.interpreter", "tensorflow"):
        monkeypatch.setitem(__import__("sys").modules, module, None)  # import now raises ImportError
    with pytest.raises(MissingExtraError, match=r"bnc-deploy\[tflite\]") as info:
        load_runtime(path)
    assert isinstance(info.value, ImportError) and info.value.extra == "tflite"
