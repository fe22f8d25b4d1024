"""ONNX exporter: bit-exactness against the reference predictor, the graph guard, raw inputs, metadata.

``random_artifact`` is also imported by tests/test_runtimes.py and tests/test_cli_export.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from exports import export_onnx  # noqa: E402

from bnc_deploy.artifacts import BNCArtifact  # noqa: E402
from bnc_deploy.errors import ExportError
from bnc_deploy.exporters.onnx_bnc import build_onnx_model  # noqa: E402
from bnc_deploy.formats.bnc import float32_thresholds
from bnc_deploy.formats.metadata import INVALID_LABEL, METADATA_KEY, parse_metadata
from bnc_deploy.quantizers import MAX_INT_BITS, FixedPointLogQuantizer
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.testing import discretizer_dict, random_parents  # noqa: E402,F401  (imported by other tests)
from bnc_deploy.testing import random_bnc_artifact as random_artifact  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


# -- random artifacts ---------------------------------------------------------------------------------
def random_codes(rng: np.random.Generator, artifact: BNCArtifact, n: int) -> np.ndarray:
    return rng.integers(0, artifact.cardinalities, size=(n, artifact.n_features)).astype(np.int64)


def session(path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def run_session(path, x) -> tuple[np.ndarray, np.ndarray]:
    """The bare graph, bypassing any adapter: (log_joint, label)."""
    return tuple(session(path).run(["log_joint", "label"], {"x": x}))


def assert_matches_reference(artifact, path, x):
    lj, label = run_session(path, x)
    ref = ReferencePredictor(artifact)
    expected = ref.log_joint(x)
    assert lj.dtype == np.float32 and label.dtype == np.int64
    assert lj.shape == expected.shape and label.shape == (x.shape[0],)
    np.testing.assert_array_equal(label, ref.predict(x))
    if artifact.is_quantized:
        assert np.array_equal(lj, expected), "quantized log_joint must be bit-identical"
    else:
        np.testing.assert_allclose(lj, expected, rtol=1e-5, atol=1e-4)


# -- exactness ---------------------------------------------------------------------------------------
BIT_CONFIGS = [None] + [(b, bi) for b in range(1, 9) for bi in range(1, MAX_INT_BITS + 1)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    config=st.sampled_from(BIT_CONFIGS),
    lowering=st.sampled_from(["gather", "onehot-fc"]),
    pack_bits=st.booleans(),
)
def test_random_artifacts_match_reference(tmp_path, seed, config, lowering, pack_bits):
    rng = np.random.default_rng(seed)
    bits, int_bits = config if config else (None, None)
    artifact = random_artifact(rng, bits=bits, int_bits=int_bits)
    path = export_onnx(artifact, tmp_path / "m.onnx", lowering=lowering, pack_bits=pack_bits and bits is not None)
    x = random_codes(rng, artifact, 64)
    assert_matches_reference(artifact, path, x)


@pytest.mark.parametrize("bits", range(1, 9))
def test_every_bit_width_exact_on_all_code_combinations(tmp_path, bits):
    """Seeded sweep: every B with the largest and smallest B_I, TAN, every input combination."""
    rng = np.random.default_rng(bits)
    for int_bits in (1, min(bits + 2, MAX_INT_BITS)):
        artifact = random_artifact(rng, bits=bits, int_bits=int_bits, tan=True, cardinalities=[3, 1, 2, 4])
        grid = np.stack(np.meshgrid(*[np.arange(c) for c in artifact.cardinalities], indexing="ij"), -1)
        x = grid.reshape(-1, artifact.n_features).astype(np.int64)
        assert_matches_reference(artifact, export_onnx(artifact, tmp_path / f"m{int_bits}.onnx"), x)
        assert_matches_reference(artifact, export_onnx(artifact, tmp_path / f"p{int_bits}.onnx", pack_bits=True), x)


def test_ties_go_to_first_class(tmp_path):
    """All classes equal: label 0, as the reference (first maximum)."""
    q = FixedPointLogQuantizer(3, 2)
    artifact = BNCArtifact(
        parents=[-1, 0],
        cardinalities=[2, 3],
        class_names=["a", "b", "c"],
        feature_names=["u", "v"],
        quantizer=q,
        class_codes=np.full(3, 2, np.uint8),
        table_codes=np.full((2 + 6, 3), 5, np.uint8),
    )
    x = np.array([[0, 0], [1, 2]], dtype=np.int64)
    lj, label = run_session(export_onnx(artifact, tmp_path / "t.onnx"), x)
    assert label.tolist() == [0, 0]


@pytest.mark.parametrize("opset", [13, 17, 18, 21])
def test_opsets(tmp_path, opset):
    rng = np.random.default_rng(opset)
    for bits in (None, 5):
        artifact = random_artifact(rng, bits=bits, tan=True, d=5)
        path = export_onnx(artifact, tmp_path / f"m{opset}.onnx", opset=opset)
        assert onnx.load(str(path)).opset_import[0].version == opset
        assert_matches_reference(artifact, path, random_codes(rng, artifact, 50))


def test_dynamic_batch_and_single_row(tmp_path):
    rng = np.random.default_rng(5)
    artifact = random_artifact(rng, bits=4, tan=True)
    path = export_onnx(artifact, tmp_path / "m.onnx")
    for n in (1, 7, 1000):
        assert_matches_reference(artifact, path, random_codes(rng, artifact, n))


# -- file contents -------------------------------------------------------------------------------------
def test_quantized_file_keeps_uint8_codes_and_passes_checker(tmp_path):
    rng = np.random.default_rng(11)
    artifact = random_artifact(rng, bits=3, int_bits=2, tan=True)
    path = export_onnx(artifact, tmp_path / "m.onnx")
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert inits["table"].dtype == np.uint8 and np.array_equal(inits["table"], artifact.table_codes)
    assert inits["class_prior"].dtype == np.uint8
    # no float copy of the table on disk: the float32 lookup table is computed in-graph (folded at load)
    assert not any(v.dtype == np.float32 and v.size > 1 for v in inits.values())
    ops = {n.op_type for n in model.graph.node}
    assert {"Gather", "ReduceSum", "ArgMax", "Where"} <= ops and "MatMul" not in ops


def test_bitplanes_are_smaller_and_hold_the_codes(tmp_path):
    from bnc_deploy.exporters._onnx_graph import pack_bitplanes

    artifact = random_artifact(np.random.default_rng(15), bits=3, int_bits=2, cardinalities=[9] * 12, n_classes=10)
    plain = export_onnx(artifact, tmp_path / "u8.onnx")
    packed = export_onnx(artifact, tmp_path / "b3.onnx", pack_bits=True)
    assert packed.stat().st_size < plain.stat().st_size - artifact.table_codes.size // 2
    planes = pack_bitplanes(artifact.table_codes, 3)
    bits = np.unpackbits(planes, axis=1)[:, : artifact.table_codes.size]
    np.testing.assert_array_equal(
        (bits * (1 << np.arange(3))[:, None]).sum(0).reshape(artifact.table_codes.shape), artifact.table_codes
    )
    meta = json.loads({p.key: p.value for p in onnx.load(str(packed)).metadata_props}[METADATA_KEY])
    assert meta["table_storage"] == "bitplanes3"


@pytest.mark.parametrize("kw", [{}, {"pack_bits": True}, {"lowering": "onehot-fc"}, {"raw_inputs": True}])
def test_no_unused_initializers(kw):
    """Every stored constant is used (onnxruntime warns about, and strips, unused ones)."""
    for tan, card in ((False, [2, 1, 3]), (True, [2, 1, 3]), (False, [3])):  # [3]: feature 0 is the whole table
        cuts = [[float(k) for k in range(c - 1)] for c in card]
        extra = {"discretizer": discretizer_dict(cuts)} if kw.get("raw_inputs") else {}
        artifact = random_artifact(np.random.default_rng(16), bits=4, tan=tan, cardinalities=card, **extra)
        graph = build_onnx_model(artifact, **kw).graph
        used = {name for node in graph.node for name in node.input}
        assert {t.name for t in graph.initializer} <= used


def test_metadata(tmp_path):
    import bnc_deploy

    rng = np.random.default_rng(12)
    artifact = random_artifact(rng, bits=5, int_bits=3, tan=True)
    model = onnx.load(str(export_onnx(artifact, tmp_path / "m.onnx")))
    props = {p.key: p.value for p in model.metadata_props}
    meta = parse_metadata(props[METADATA_KEY])
    assert meta["toolkit_version"] == bnc_deploy.__version__ == props["bnc_deploy.version"]
    assert (meta["bits"], meta["int_bits"], meta["frac_bits"]) == (5, 3, 2)
    assert meta["class_names"] == artifact.class_names
    assert props["bnc_deploy.bits"] == "5" and props["bnc_deploy.structure"] == "tan"
    assert meta["cardinalities"] == artifact.cardinalities.tolist()
    assert meta["parents"] == artifact.parents.tolist()
    assert (meta["n_parameters"], meta["size_bits"], meta["n_ops"]) == (
        artifact.n_parameters,
        artifact.size_bits,
        artifact.n_ops,
    )
    assert meta["opset"] == model.opset_import[0].version and meta["format"] == "onnx"
    assert meta["exact"] is True and meta["input"] == "codes"
    assert len(meta["artifact_sha256"]) == 64
    assert model.producer_name == "bnc-deploy"


def test_float_file_uses_float32(tmp_path):
    artifact = random_artifact(np.random.default_rng(13), tan=False)
    model = onnx.load(str(export_onnx(artifact, tmp_path / "f.onnx")))
    table = next(t for t in model.graph.initializer if t.name == "table")
    assert table.data_type == onnx.TensorProto.FLOAT
    meta = json.loads({p.key: p.value for p in model.metadata_props}[METADATA_KEY])
    assert meta["bits"] == 32 and meta["quantized"] is False and meta["exact"] is False


def test_bad_options_raise_export_error():
    artifact = random_artifact(np.random.default_rng(14), bits=3)
    with pytest.raises(ExportError, match="lowering"):
        build_onnx_model(artifact, lowering="dense")
    with pytest.raises(ExportError, match="opset"):
        build_onnx_model(artifact, opset=11)
    with pytest.raises(ExportError, match="discretizer"):
        build_onnx_model(artifact, raw_inputs=True)
    with pytest.raises(ExportError, match="pack_bits needs a quantized model"):
        build_onnx_model(random_artifact(np.random.default_rng(14)), pack_bits=True)


# -- guard: the bare graph never gives a valid-looking answer for invalid codes -------------------------
@pytest.mark.parametrize("bits", [None, 3, 8])
def test_graph_guard_marks_out_of_range_rows_invalid(tmp_path, bits):
    rng = np.random.default_rng(21)
    artifact = random_artifact(rng, bits=bits, tan=True, d=5, cardinalities=[3, 1, 4, 2, 5])
    path = export_onnx(artifact, tmp_path / "g.onnx")
    valid = random_codes(rng, artifact, 1)
    bad_rows = []
    for i, card in enumerate(artifact.cardinalities):
        for value in (-1, card, card + 1, -(2**62), 2**62):  # just outside, and far outside
            row = valid.copy()
            row[0, i] = value
            bad_rows.append(row)
    x = np.concatenate([valid] + bad_rows + [valid])
    lj, label = run_session(path, x)
    assert np.all(label[1:-1] == INVALID_LABEL)
    assert np.all(np.isnan(lj[1:-1]))
    ref = ReferencePredictor(artifact)
    for k in (0, -1):  # valid rows in the same batch are untouched
        assert label[k] == ref.predict(valid)[0]
        np.testing.assert_allclose(lj[k], ref.log_joint(valid)[0], rtol=1e-5, atol=1e-4)


def test_graph_guard_onehot_fc(tmp_path):
    artifact = random_artifact(np.random.default_rng(22), bits=4, tan=True, cardinalities=[2, 3, 2])
    path = export_onnx(artifact, tmp_path / "g.onnx", lowering="onehot-fc")
    lj, label = run_session(path, np.array([[0, 3, 0], [-5, 0, 0], [0, 0, 0]], dtype=np.int64))
    assert label[:2].tolist() == [INVALID_LABEL] * 2 and np.isnan(lj[:2]).all() and label[2] >= 0


# -- raw inputs -----------------------------------------------------------------------------------------
# 0.1 and 1/3 are not float32 numbers; 1e-45 and 1e39 probe the float32 range ends; [] is a 1-value feature.
RAW_CUTS = [[0.1, 0.5, 2.0], [], [1 / 3, 1 / 3 + 1e-12, 7.25], [-1e39, 1e-45, 1e39], [0.0]]


def raw_probe_values(rng: np.random.Generator, cuts: list[list[float]], n: int) -> np.ndarray:
    """float32 (n, D): random values plus values on and next to every cut (the hard cases)."""
    cols = []
    for c in cuts:
        edges = np.asarray(c, dtype=np.float64)
        with np.errstate(over="ignore"):  # cuts beyond float32 range: their neighbours are +-inf, dropped
            nearest, down = edges.astype(np.float32), float32_thresholds(edges)
            special = np.concatenate(
                [
                    nearest,
                    down,
                    np.nextafter(down, np.float32(np.inf)),
                    np.nextafter(nearest, np.float32(-np.inf)),
                    np.zeros(1, np.float32),
                ]
            )
        special = special[np.isfinite(special)]
        pool = np.concatenate(
            [special, rng.normal(0, 3, size=n).astype(np.float32), np.array([0.0, -0.0, 3.4e38, -3.4e38], np.float32)]
        )
        cols.append(rng.choice(pool, size=n))
    return np.stack(cols, axis=1).astype(np.float32)


@pytest.mark.parametrize("bits", [None, 4])
def test_raw_inputs_equal_discretize_then_codes(tmp_path, bits):
    rng = np.random.default_rng(31)
    disc = discretizer_dict(RAW_CUTS)
    artifact = random_artifact(rng, bits=bits, tan=True, discretizer=disc, cardinalities=[len(c) + 1 for c in RAW_CUTS])
    path = export_onnx(artifact, tmp_path / "raw.onnx", raw_inputs=True)
    x = raw_probe_values(rng, RAW_CUTS, 2000)
    lj, label = run_session(path, x)
    ref = ReferencePredictor(artifact)
    codes = ref.discretize(x.astype(np.float64))  # the discretizer itself, float64 searchsorted
    np.testing.assert_array_equal(label, ref.predict(codes))
    if bits:
        assert np.array_equal(lj, ref.log_joint(codes))
    meta = json.loads({p.key: p.value for p in onnx.load(str(path)).metadata_props}[METADATA_KEY])
    assert meta["input"] == "raw" and meta["input_dtype"] == "float32"


@pytest.mark.parametrize("cuts", [[[0.5], [1.0, 2.0]], [[], []], [[], [0.0]]])
@pytest.mark.parametrize("tan", [False, True])
def test_raw_inputs_guard_non_finite(tmp_path, cuts, tan):
    rng = np.random.default_rng(32)
    artifact = random_artifact(
        rng, bits=3, tan=tan, discretizer=discretizer_dict(cuts), cardinalities=[len(c) + 1 for c in cuts]
    )
    path = export_onnx(artifact, tmp_path / "raw.onnx", raw_inputs=True)
    x = np.array(
        [[0.0, 1.5], [np.nan, 1.5], [0.0, np.inf], [-np.inf, 0.0], [1.0, 3.0], [np.inf, np.inf], [0.0, np.nan]],
        dtype=np.float32,
    )
    lj, label = run_session(path, x)
    invalid = [1, 2, 3, 5, 6]
    assert np.all(label[invalid] == INVALID_LABEL) and np.isnan(lj[invalid]).all()
    ref = ReferencePredictor(artifact)
    valid = x[[0, 4]]
    np.testing.assert_array_equal(label[[0, 4]], ref.predict(ref.discretize(valid.astype(np.float64))))
    assert np.array_equal(lj[[0, 4]], ref.log_joint(ref.discretize(valid.astype(np.float64))))


def test_float32_thresholds_reproduce_searchsorted():
    rng = np.random.default_rng(33)
    cuts = np.sort(np.concatenate([rng.normal(0, 10, 50), [0.1, 1 / 3, 1e39, -1e39, 1e-46]]))
    t = float32_thresholds(cuts)
    with np.errstate(over="ignore"):
        x = np.concatenate(
            [
                rng.normal(0, 10, 5000).astype(np.float32),
                t,
                np.nextafter(t, np.float32(np.inf)),
                np.nextafter(t, np.float32(-np.inf)),
            ]
        )
    x = x[np.isfinite(x)]
    expected = np.searchsorted(cuts, x.astype(np.float64), side="left")
    np.testing.assert_array_equal((x[:, None] > t[None, :]).sum(axis=1), expected)


# -- no torch --------------------------------------------------------------------------------------------
def test_exporter_and_runtime_do_not_import_torch(tmp_path):
    code = f"""
import sys
import numpy as np
import bnc_deploy.verify, bnc_deploy.runtimes.onnxruntime_adapter
from bnc_deploy.artifacts import BNCArtifact
from bnc_deploy.quantizers import FixedPointLogQuantizer
from bnc_deploy.runtimes.base import load_runtime
a = BNCArtifact(parents=[-1, 0], cardinalities=[2, 3], class_names=['a', 'b'], feature_names=['u', 'v'],
                quantizer=FixedPointLogQuantizer(3, 2), class_codes=np.array([1, 2], np.uint8),
                table_codes=np.arange(16, dtype=np.uint8).reshape(8, 2) % 8)
p = bnc_deploy.verify.export_path(a, {str(tmp_path / "nt.onnx")!r}, 'onnx')
print(load_runtime(p).predict(np.array([[1, 2], [0, 0]])))
bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]
assert not bad, bad
print('no torch')
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "no torch" in out.stdout
