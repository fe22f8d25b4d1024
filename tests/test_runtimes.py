"""Runtime adapters: one interface over NumPy and onnxruntime; input validation; bad files."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from exports import export_onnx  # noqa: E402
from test_export_onnx import discretizer_dict, random_artifact, random_codes  # noqa: E402

from bnc_deploy.artifacts import save_artifact  # noqa: E402
from bnc_deploy.errors import ConfigError, MissingExtraError  # noqa: E402
from bnc_deploy.formats.metadata import METADATA_KEY
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.runtimes.base import (  # noqa: E402
    RUNTIMES,
    RuntimeAdapter,
    RuntimeLoadError,
    load_runtime,
    register_runtime,
    runtime_class,
)
from bnc_deploy.runtimes.onnxruntime_adapter import OnnxRuntimeAdapter  # noqa: E402
from bnc_deploy.runtimes.reference_adapter import ReferenceAdapter  # noqa: E402
from bnc_deploy.validation import InputError  # noqa: E402

CARDS = [3, 1, 4, 2]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A quantized TAN artifact, its .bnc file and its .onnx export."""
    tmp = tmp_path_factory.mktemp("rt")
    artifact = random_artifact(np.random.default_rng(7), bits=4, int_bits=2, tan=True, cardinalities=CARDS)
    bnc = tmp / "m.bnc"
    save_artifact(artifact, bnc)
    return artifact, bnc, export_onnx(artifact, tmp / "m.onnx")


@pytest.fixture(scope="module", params=["numpy", "onnxruntime"])
def adapter(request, files):
    _, bnc, onnx_path = files
    return load_runtime(bnc if request.param == "numpy" else onnx_path, threads=1)


# -- loading and dispatch -----------------------------------------------------------------------------
def test_dispatch_by_extension_and_name(files):
    _, bnc, onnx_path = files
    assert type(load_runtime(onnx_path)) is OnnxRuntimeAdapter
    assert type(load_runtime(bnc)) is ReferenceAdapter
    assert type(load_runtime(onnx_path, "onnxruntime")) is OnnxRuntimeAdapter
    assert OnnxRuntimeAdapter.load(onnx_path).name == "onnxruntime"
    with pytest.raises(ValueError, match="unknown runtime 'tvm'"):
        load_runtime(onnx_path, "tvm")
    with pytest.raises(ValueError, match="extension"):
        load_runtime(onnx_path.with_suffix(".bin"))
    assert "litert" in RUNTIMES


def test_litert_entry_resolves_or_explains():
    try:
        cls = runtime_class("litert")
    except ImportError as exc:
        assert "litert" in str(exc)
    else:
        assert issubclass(cls, RuntimeAdapter) and cls.name == "litert"


def test_register_runtime(files):
    class Doubled(OnnxRuntimeAdapter):
        name = "doubled"

    register_runtime("doubled", Doubled, extensions=(".dbl",))
    try:
        assert type(load_runtime(files[2], "doubled")) is Doubled
    finally:
        RUNTIMES.pop("doubled")


def test_threads_option(files):
    assert load_runtime(files[2], threads=2).session.get_session_options().intra_op_num_threads == 2
    with pytest.raises(ValueError, match="threads"):
        load_runtime(files[2], threads=0)


def test_user_errors_are_config_errors(files):
    """Bad arguments are the user's: ConfigError (still a ValueError), never a bare ValueError."""
    _, bnc, onnx_path = files
    for threads in (0, -1, 1.5, True, "2"):
        with pytest.raises(ConfigError, match="threads"):
            load_runtime(onnx_path, threads=threads)
    with pytest.raises(ConfigError, match="unknown runtime 'tvm'.*known runtimes: .*numpy"):
        runtime_class("tvm")
    with pytest.raises(ConfigError, match=r"m\.bin.*extension '\.bin'"):
        load_runtime(bnc.with_suffix(".bin"))


def test_runtime_load_error_is_the_shared_type():
    import bnc_deploy.errors
    import bnc_deploy.runtimes.base as base

    assert RuntimeLoadError is bnc_deploy.errors.RuntimeLoadError is base.RuntimeLoadError
    assert issubclass(RuntimeLoadError, ValueError)


def test_missing_framework_names_the_extra(files, monkeypatch):
    """onnxruntime not installed: MissingExtraError (an ImportError) saying which extra installs it."""
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now fails
    monkeypatch.delitem(sys.modules, "bnc_deploy.runtimes.onnxruntime_adapter")
    monkeypatch.setitem(RUNTIMES, "onnxruntime", "bnc_deploy.runtimes.onnxruntime_adapter:OnnxRuntimeAdapter")
    with pytest.raises(MissingExtraError, match=r"runtime 'onnxruntime'.*pip install 'bnc-deploy\[runtime\]'") as info:
        load_runtime(files[2])
    assert isinstance(info.value, ImportError) and info.value.extra == "runtime"


def test_prepare_invoke_is_run(adapter, files):
    """The two steps under run (tests/test_runtime_invoke.py covers every adapter and model kind)."""
    x = random_codes(np.random.default_rng(4), files[0], 50)
    scores, label = adapter.invoke(adapter.prepare(x))
    expected = adapter.run(x)
    assert np.array_equal(np.asarray(scores, dtype=np.float64), expected[0])
    np.testing.assert_array_equal(np.asarray(label).reshape(-1), expected[1])
    with pytest.raises(InputError, match="feature 0 .*value 3.*row 0"):
        adapter.prepare(np.array([[3, 0, 0, 0]]))


# -- one interface, same answers ------------------------------------------------------------------------
def test_adapters_agree_with_reference(adapter, files):
    artifact = files[0]
    x = random_codes(np.random.default_rng(1), artifact, 300)
    ref = ReferencePredictor(artifact)
    label = adapter.predict(x)
    lj = adapter.log_joint(x)
    assert label.dtype == np.int64 and label.shape == (300,)
    assert lj.dtype == np.float64 and lj.shape == (300, artifact.n_classes)
    np.testing.assert_array_equal(label, ref.predict(x))
    assert np.array_equal(lj, ref.log_joint(x))
    # one row, as (D,), and uint8 codes
    np.testing.assert_array_equal(adapter.predict(x[0].astype(np.uint8)), label[:1])
    assert adapter.predict(np.zeros((0, len(CARDS)), dtype=np.int64)).shape == (0,)


def test_metadata_is_read_from_the_file(adapter, files):
    artifact = files[0]
    meta = adapter.metadata
    assert meta["cardinalities"] == CARDS and meta["class_names"] == artifact.class_names
    assert meta["bits"] == 4 and meta["int_bits"] == 2 and meta["structure"] == "tan"
    assert adapter.feature_names == artifact.feature_names and adapter.n_classes == artifact.n_classes
    assert adapter.raw_inputs is False


# -- input validation -------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, feature", [(4, 2), (-1, 0), (1, 1), (2, 3)])
def test_out_of_range_and_negative_rejected(adapter, value, feature):
    x = np.zeros((3, len(CARDS)), dtype=np.int64)
    x[2, feature] = value
    with pytest.raises(InputError) as info:
        adapter.predict(x)
    message = str(info.value)
    assert f"feature {feature} ('feat{feature}')" in message and f"value {value}" in message
    assert "row 2" in message and f"0..{CARDS[feature] - 1}" in message


@pytest.mark.parametrize(
    "bad, pattern",
    [
        (np.zeros((2, 4), dtype=np.float64), "integer dtype.*whole-valued"),
        (np.full((2, 4), 0.5, dtype=np.float32), "integer dtype"),
        (np.zeros((2, 4), dtype=bool), "integer dtype"),
        (np.array([["a", "b", "c", "d"]]), "integer dtype"),
        (np.zeros((2, 5), dtype=np.int64), r"shape \(n, 4\).*\(2, 5\)"),
        (np.zeros((2, 4, 1), dtype=np.int64), r"shape \(n, 4\)"),
        (np.zeros(3, dtype=np.int64), r"shape \(n, 4\)"),
    ],
)
def test_wrong_dtype_and_shape_rejected(adapter, bad, pattern):
    with pytest.raises(InputError, match=pattern):
        adapter.log_joint(bad)


def test_raw_input_adapters(tmp_path):
    cuts = [[0.5, 1.5], [0.1], []]
    artifact = random_artifact(
        np.random.default_rng(3), bits=3, tan=True, cardinalities=[3, 2, 1], discretizer=discretizer_dict(cuts)
    )
    save_artifact(artifact, tmp_path / "r.bnc")
    path = export_onnx(artifact, tmp_path / "r.onnx", raw_inputs=True)
    ort_rt = load_runtime(path)
    ref_rt = ReferenceAdapter(tmp_path / "r.bnc", raw_inputs=True)
    assert ort_rt.raw_inputs and ref_rt.raw_inputs
    x = np.array([[0.5, 0.1, 9.0], [0.6, np.float32(0.1), -3.0], [2.0, 0.2, 0.0]])
    np.testing.assert_array_equal(ort_rt.predict(x), ref_rt.predict(x))
    assert np.array_equal(ort_rt.log_joint(x), ref_rt.log_joint(x))
    np.testing.assert_array_equal(ort_rt.predict(np.array([[1, 0, 7]])), ref_rt.predict(np.array([[1, 0, 7]])))
    with pytest.raises(InputError, match=r"feature 1 \('feat1'\) has value nan in row 0"):
        ort_rt.predict(np.array([[0.0, np.nan, 0.0]]))
    with pytest.raises(InputError, match=r"feature 0 .*1e\+300.*not a finite float32"):
        ort_rt.predict(np.array([[1e300, 0.0, 0.0]]))
    with pytest.raises(InputError, match=r"shape \(n, 3\)"):
        ort_rt.predict(np.zeros((1, 2)))
    with pytest.raises(InputError, match="real numbers"):
        ort_rt.predict(np.array([["x", "y", "z"]]))


# -- bad files ----------------------------------------------------------------------------------------------
def test_missing_and_corrupted_onnx_files(files, tmp_path):
    good = files[2].read_bytes()
    cases = {
        "missing.onnx": None,
        "truncated.onnx": good[: len(good) // 2],
        "garbage.onnx": b"\x00not an onnx model at all" * 10,
        "empty.onnx": b"",
    }
    for name, data in cases.items():
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        with pytest.raises(RuntimeLoadError) as info:
            load_runtime(path)
        assert name in str(info.value)


def _rewrite_metadata(src, dst, edit):
    model = onnx.load(str(src))
    props = {p.key: p.value for p in model.metadata_props}
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, edit(props))
    onnx.save(model, str(dst))
    return dst


def test_foreign_and_tampered_metadata_rejected(files, tmp_path):
    src = files[2]
    foreign = _rewrite_metadata(src, tmp_path / "foreign.onnx", lambda p: {"author": "someone"})
    with pytest.raises(RuntimeLoadError, match="foreign.onnx.*not a bnc-deploy export"):
        load_runtime(foreign)

    def drop_cardinalities(props):
        meta = json.loads(props[METADATA_KEY])
        del meta["cardinalities"]
        return {**props, METADATA_KEY: json.dumps(meta)}

    # verify_integrity=False: these test the adapter's metadata checks behind the integrity check
    # (which refuses every such edit first, see tests/test_integrity.py).
    t1 = _rewrite_metadata(src, tmp_path / "t1.onnx", drop_cardinalities)
    with pytest.raises(RuntimeLoadError, match="t1.onnx: the file was modified after export"):
        load_runtime(t1)
    with pytest.raises(RuntimeLoadError, match="lacks keys.*cardinalities"):
        load_runtime(t1, verify_integrity=False)
    with pytest.raises(RuntimeLoadError, match="t2.onnx: corrupt"):
        load_runtime(
            _rewrite_metadata(src, tmp_path / "t2.onnx", lambda p: {**p, METADATA_KEY: "{oops"}), verify_integrity=False
        )

    def newer(props):
        meta = json.loads(props[METADATA_KEY])
        meta["schema_version"] = 99
        return {**props, METADATA_KEY: json.dumps(meta)}

    with pytest.raises(RuntimeLoadError, match="newer"):
        load_runtime(_rewrite_metadata(src, tmp_path / "t3.onnx", newer), verify_integrity=False)


def test_metadata_graph_mismatch_is_not_silent(files, tmp_path):
    """Metadata claiming a larger range than the graph: the graph guard fires and the adapter says so."""

    def widen(props):
        meta = json.loads(props[METADATA_KEY])
        meta["cardinalities"] = [c + 1 for c in meta["cardinalities"]]
        return {**props, METADATA_KEY: json.dumps(meta)}

    widened = _rewrite_metadata(files[2], tmp_path / "w.onnx", widen)
    with pytest.raises(RuntimeLoadError, match="w.onnx: the file was modified after export"):
        load_runtime(widened)  # the integrity check sees the edit first
    rt = load_runtime(widened, verify_integrity=False)
    with pytest.raises(RuntimeError, match="guard rejected row 0"):
        rt.predict(np.array([[3, 0, 0, 0]]))


def test_corrupted_artifact_rejected_by_numpy_adapter(files, tmp_path):
    bad = tmp_path / "bad.bnc"
    bad.write_bytes(files[1].read_bytes()[:100])
    with pytest.raises(RuntimeLoadError, match="bad.bnc"):
        load_runtime(bad)


def test_registries_refuse_a_taken_name_unless_overwrite():
    """One rule for every registry (bnc_deploy.registry.claim): a second registration raises."""
    from bnc_deploy.artifacts import ARTIFACT_KINDS, BNCArtifact, register_artifact_kind
    from bnc_deploy.costs import COST_MODELS, register_cost_model
    from bnc_deploy.reference import REFERENCE_PREDICTORS, register_reference
    from bnc_deploy.train import TRAINERS, register_trainer

    with pytest.raises(ConfigError, match="runtime 'numpy' is already registered.*overwrite=True"):
        register_runtime("numpy", OnnxRuntimeAdapter)
    with pytest.raises(ConfigError, match="default runtime of '.onnx' files is already registered"):
        register_runtime("another", OnnxRuntimeAdapter, extensions=(".onnx",))
    assert "another" not in RUNTIMES, "a refused registration changes nothing"
    with pytest.raises(ConfigError, match="model-file kind 'bnc'"):
        register_artifact_kind(BNCArtifact)
    with pytest.raises(ConfigError, match="cost model of kind 'bnc'"):
        register_cost_model("bnc", COST_MODELS["bnc"])
    with pytest.raises(ConfigError, match="reference predictor of kind 'bnc'"):
        register_reference("bnc", REFERENCE_PREDICTORS["bnc"])
    with pytest.raises(ConfigError, match="trainer --model nb"):
        register_trainer("nb", "bnc", TRAINERS["nb"].target)
    register_artifact_kind(BNCArtifact, overwrite=True)  # replacing is explicit
    assert ARTIFACT_KINDS["bnc"] is BNCArtifact
