"""TFLite exporter and LiteRT adapter: exactness against the NumPy reference, guard, validation.

Every export here is a real TensorFlow conversion (~0.3 s each), so the artifacts are few and
seeded: one random NB/TAN structure per bit width and lowering, plus targeted cases (ties, guard,
raw inputs). Cheap properties of the NumPy-only helpers run under hypothesis.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

from exports import export_tflite  # noqa: E402

from bnc_deploy.artifacts.bnc import BNCArtifact  # noqa: E402
from bnc_deploy.errors import ExportError
from bnc_deploy.exporters.tflite_bnc import INT8_OUTPUT_LEVELS, _pack_groups, build_tflite_model, onehot_fc_plan
from bnc_deploy.formats.metadata import INVALID_LABEL
from bnc_deploy.formats.tflite import inspect_tflite, read_tflite_metadata
from bnc_deploy.quantizers import FixedPointLogQuantizer
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.runtimes.base import load_runtime  # noqa: E402
from bnc_deploy.runtimes.litert_adapter import LiteRTAdapter  # noqa: E402
from bnc_deploy.validation import InputError  # noqa: E402

# (total bits, int bits) per bit width: B_F negative, zero and positive all occur.
BIT_WIDTHS = [(1, 1), (2, 2), (3, 1), (4, 3), (5, 6), (6, 2), (7, 3), (8, 3)]


# -- random artifacts -------------------------------------------------------------------------------
def random_artifact(
    seed: int,
    bits: int | None = None,
    int_bits: int = 3,
    *,
    structure: str = "random",
    max_card: int = 6,
    n_features: int | None = None,
    n_classes: int | None = None,
    discretizer: dict | None = None,
) -> BNCArtifact:
    """A random NB/TAN artifact: cardinalities 1..max_card (1 always present), acyclic parents.

    ``structure``: "nb", "tan" (every feature but one root has a parent) or "random" (each feature
    gets a parent with probability 0.6). Codes are uniform in 0..2**B-1, so ties are frequent.
    """
    rng = np.random.default_rng(seed)
    d = int(n_features or rng.integers(2, 9))
    c = int(n_classes or rng.integers(2, 7))
    cards = rng.integers(1, max_card + 1, d)
    cards[rng.integers(0, d)] = 1
    if discretizer is not None:
        cards = np.array([len(cuts) + 1 for cuts in discretizer["cut_points"]])
        d = len(cards)
    order = rng.permutation(d)
    parents = -np.ones(d, dtype=np.int64)
    for k in range(1, d):  # a parent always comes earlier in `order`: acyclic
        if structure == "tan" or (structure == "random" and rng.random() < 0.6):
            parents[order[k]] = order[rng.integers(0, k)]
    p_card = np.where(parents >= 0, cards[np.maximum(parents, 0)], 1)
    n_rows = int((cards * p_card).sum())
    common = dict(
        parents=parents,
        cardinalities=cards,
        class_names=[f"class{k}" for k in range(c)],
        feature_names=[f"feat{i}" for i in range(d)],
        discretizer=discretizer,
    )
    if bits is None:
        return BNCArtifact(
            class_logp=-(rng.random(c) * 4).astype(np.float32),
            table_logp=-(rng.random((n_rows, c)) * 10).astype(np.float32),
            **common,
        )
    q = FixedPointLogQuantizer(bits, int_bits)
    return BNCArtifact(
        quantizer=q,
        class_codes=rng.integers(0, q.max_code + 1, c).astype(np.uint8),
        table_codes=rng.integers(0, q.max_code + 1, (n_rows, c)).astype(np.uint8),
        **common,
    )


def sample_rows(artifact: BNCArtifact, n: int = 400, seed: int = 1) -> np.ndarray:
    """Random valid codes plus the all-zero and all-maximum rows."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n, artifact.n_features)) * artifact.cardinalities).astype(np.int64)
    x[0], x[1] = 0, artifact.cardinalities - 1
    return x


def export(artifact, tmp_path, lowering="gather", raw_inputs=False, name=None, onehot="equal-cast") -> str:
    path = tmp_path / (name or f"{lowering}_{onehot}{'_raw' if raw_inputs else ''}.tflite")
    return str(export_tflite(artifact, path, lowering=lowering, raw_inputs=raw_inputs, onehot=onehot))


def assert_matches_reference(path: str, artifact: BNCArtifact, x: np.ndarray, *, exact: bool) -> None:
    """Labels identical; log_joint bit-identical when ``exact``."""
    lj, label = LiteRTAdapter(path).run(x)
    ref = ReferencePredictor(artifact)
    ref_lj = ref.log_joint(x)
    np.testing.assert_array_equal(label, np.argmax(ref_lj, axis=1))
    if exact:
        np.testing.assert_array_equal(lj, ref_lj)  # float32 output widened: bit for bit


# -- gather lowering: exact at every bit width -----------------------------------------------------------
STRUCTURES = ("nb", "random", "tan")


@pytest.mark.parametrize("bits,int_bits", BIT_WIDTHS)
def test_gather_is_bit_exact_for_random_quantized_artifacts(tmp_path, bits, int_bits):
    artifact = random_artifact(100 * bits, bits, int_bits, structure=STRUCTURES[bits % 3])
    path = export(artifact, tmp_path)
    assert_matches_reference(path, artifact, sample_rows(artifact), exact=True)
    assert read_tflite_metadata(path)["exact"] is True


def test_gather_float_artifact_labels_match(tmp_path):
    """float32 summation differs from the float64 reference in the last bits only."""
    artifact = random_artifact(7, None, structure="tan")
    path = export(artifact, tmp_path)
    x = sample_rows(artifact, n=2000)
    lj, label = LiteRTAdapter(path).run(x)
    ref_lj = ReferencePredictor(artifact).log_joint(x)
    np.testing.assert_allclose(lj, ref_lj, rtol=0, atol=1e-4)
    top2 = np.sort(ref_lj, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-4  # rows that are not near-ties
    np.testing.assert_array_equal(label[clear], np.argmax(ref_lj, axis=1)[clear])
    assert clear.mean() > 0.99
    assert read_tflite_metadata(path)["exact"] is False


def test_gather_keeps_uint8_table_and_is_builtins_only(tmp_path):
    artifact = random_artifact(3, 4, 2, structure="tan")
    path = export(artifact, tmp_path)
    summary = inspect_tflite(path)
    gathers = [op for op in summary.ops if op.name == "GATHER"]
    tables = [summary.tensors[op.inputs[0]] for op in gathers if summary.tensors[op.inputs[0]].is_constant]
    assert [t.dtype for t in tables] == ["UINT8"] and tables[0].shape == [artifact.n_rows, artifact.n_classes]
    assert_builtins_only(path)
    x = summary.tensors[summary.inputs[0]]
    assert (x.name, x.dtype, x.shape_signature) == ("x", "INT32", [-1, artifact.n_features])


def assert_builtins_only(path: str) -> None:
    """No Flex/custom op and no ONE_HOT, by the flatbuffer and by the interpreter's own op list."""
    from ai_edge_litert.interpreter import Interpreter

    names = inspect_tflite(path).op_names
    interpreter_names = [op["op_name"] for op in Interpreter(model_path=path)._get_ops_details()]
    assert names == interpreter_names
    forbidden = [n for n in names if n.startswith("CUSTOM") or "FLEX" in n.upper() or n in ("ONE_HOT", "DELEGATE")]
    assert not forbidden, forbidden


# -- one-hot FC lowering ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bits,int_bits", BIT_WIDTHS[:-1])
def test_onehot_fc_is_bit_exact_up_to_7_bits(tmp_path, bits, int_bits):
    artifact = random_artifact(200 + bits, bits, int_bits, structure="random")
    path = export(artifact, tmp_path, "onehot-fc")
    assert_matches_reference(path, artifact, sample_rows(artifact), exact=True)
    assert_builtins_only(path)
    names = inspect_tflite(path).op_names
    assert "GATHER" not in names and "EQUAL" in names and "FULLY_CONNECTED" in names
    meta = read_tflite_metadata(path)
    assert meta["exact"] is True and meta["onehot_fc"]["mode"] == "exact"


def test_onehot_fc_uses_explicit_int8_quantization(tmp_path):
    artifact = random_artifact(11, 7, 3, structure="tan", n_features=8)
    plan = onehot_fc_plan(artifact)
    assert len(plan.groups) > 1  # several FCs: grouping is exercised
    summary = inspect_tflite(build_tflite_model(artifact, lowering="onehot-fc"))
    fcs = [op for op in summary.ops if op.name == "FULLY_CONNECTED"]
    assert len(fcs) == len(plan.groups)
    for op in fcs:
        x, w, out = (summary.tensors[i] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
        assert (x.dtype, x.scale, x.zero_point) == ("INT8", [1.0], [0])
        assert (w.dtype, w.scale, w.zero_point) == ("INT8", [1.0], [0])
        assert (out.dtype, out.scale, out.zero_point) == ("INT8", [1.0], [-128])
    x = summary.tensors[summary.inputs[0]]
    assert x.shape_signature == [1, artifact.n_features]  # static batch for the Edge TPU


def test_onehot_fc_8_bits_is_rescaled_and_reported(tmp_path):
    """B = 8 codes do not fit int8 weights: halved (scale 2), error <= D steps, not called exact."""
    artifact = random_artifact(8, 8, 3, structure="tan")
    path = export(artifact, tmp_path, "onehot-fc")
    meta = read_tflite_metadata(path)
    assert meta["exact"] is False and meta["onehot_fc"]["mode"] == "rescaled"
    assert meta["onehot_fc"]["weight_scale"] == 2.0 and meta["onehot_fc"]["max_code_error"] == 1
    x = sample_rows(artifact)
    lj, label = LiteRTAdapter(path).run(x)
    ref_lj = ReferencePredictor(artifact).log_joint(x)
    bound = artifact.n_features * artifact.quantizer.step
    assert np.max(np.abs(lj - ref_lj)) <= bound
    agreement = np.mean(label == np.argmax(ref_lj, axis=1))
    assert agreement > 0.5  # random uniform codes: many near-ties; real data is reported by the benchmark


def test_onehot_fc_float_is_approximate_and_bounded(tmp_path):
    artifact = random_artifact(9, None, structure="random")
    path = export(artifact, tmp_path, "onehot-fc")
    plan = onehot_fc_plan(artifact)
    x = sample_rows(artifact)
    lj, _ = LiteRTAdapter(path).run(x)
    ref_lj = ReferencePredictor(artifact).log_joint(x)
    # each table term is rounded to the weight grid: |error| <= D * scale / 2 (+ float32 slack)
    assert np.max(np.abs(lj - ref_lj)) <= artifact.n_features * plan.scale / 2 + 1e-4
    assert read_tflite_metadata(path)["exact"] is False


# -- one-hot FC, relu builder (all-int8 front end for the Edge TPU) ------------------------------------------
@pytest.mark.parametrize("bits,int_bits,structure", [(1, 1, "nb"), (6, 2, "random"), (7, 3, "tan")])
def test_onehot_fc_relu_builder_is_bit_exact(tmp_path, bits, int_bits, structure):
    artifact = random_artifact(400 + bits, bits, int_bits, structure=structure)
    path = export(artifact, tmp_path, "onehot-fc", onehot="relu")
    x = sample_rows(artifact)
    assert_matches_reference(path, artifact, x, exact=True)
    lj, _ = LiteRTAdapter(path, resolver="reference").run(x)  # reference kernels agree too
    np.testing.assert_array_equal(lj, ReferencePredictor(artifact).log_joint(x))
    assert_builtins_only(path)
    summary = inspect_tflite(path)
    assert not {"GATHER", "EQUAL", "CAST", "ONE_HOT"} & set(summary.op_names)
    x_in = summary.tensors[summary.inputs[0]]
    assert (x_in.dtype, x_in.scale, x_in.zero_point, x_in.shape) == ("INT8", [1.0], [0], [1, artifact.n_features])
    meta = read_tflite_metadata(path)
    assert meta["input_dtype"] == "int8" and meta["onehot_fc"]["builder"] == "relu" and meta["exact"] is True


def test_onehot_fc_relu_builder_limits(tmp_path):
    wide = random_artifact(1, 3, 1, n_features=3)
    wide = BNCArtifact(
        parents=-np.ones(3, dtype=np.int64),
        cardinalities=[2, 129, 3],
        class_names=wide.class_names,
        feature_names=["a", "b", "c"],
        quantizer=wide.quantizer,
        class_codes=wide.class_codes,
        table_codes=np.zeros((134, wide.n_classes), np.uint8),
    )
    with pytest.raises(ExportError, match=r"cardinalities <= 128.*feature 1 \('b'\) has 129"):
        export_tflite(wide, tmp_path / "w.tflite", lowering="onehot-fc", onehot="relu")
    cuts = {"method": "fayyad-irani-mdl", "n_features_in": 2, "cut_points": [[0.5], [1.5, 2.5]]}
    with pytest.raises(ExportError, match="takes int8 codes"):
        export_tflite(
            random_artifact(2, 3, 1, discretizer=cuts),
            tmp_path / "r.tflite",
            lowering="onehot-fc",
            onehot="relu",
            raw_inputs=True,
        )
    with pytest.raises(ExportError, match="unknown one-hot builder 'one_hot'"):
        export_tflite(random_artifact(2, 3, 1), tmp_path / "o.tflite", lowering="onehot-fc", onehot="one_hot")


# -- ties: first maximum, as np.argmax ---------------------------------------------------------------------
LOWERINGS = [("gather", "equal-cast"), ("onehot-fc", "equal-cast"), ("onehot-fc", "relu")]


@pytest.mark.parametrize("lowering,onehot", LOWERINGS)
def test_ties_go_to_the_first_class(tmp_path, lowering, onehot):
    artifact = random_artifact(5, 3, 2, structure="tan", n_classes=5)
    codes = artifact.table_codes.copy()
    codes[:, 3] = codes[:, 1]  # classes 1 and 3 always tie in the table ...
    codes[: codes.shape[0] // 2, 0] = 0  # ... and class 0 often wins outright
    class_codes = artifact.class_codes.copy()
    class_codes[3] = class_codes[1]
    tied = BNCArtifact(
        parents=artifact.parents,
        cardinalities=artifact.cardinalities,
        class_names=artifact.class_names,
        feature_names=artifact.feature_names,
        quantizer=artifact.quantizer,
        class_codes=class_codes,
        table_codes=codes,
    )
    flat = BNCArtifact(
        parents=artifact.parents,
        cardinalities=artifact.cardinalities,
        class_names=artifact.class_names,
        feature_names=artifact.feature_names,
        quantizer=artifact.quantizer,
        class_codes=np.zeros(5, np.uint8),
        table_codes=np.zeros_like(codes),
    )  # every class ties on every row
    x = sample_rows(artifact)
    ref_lj = ReferencePredictor(tied).log_joint(x)
    assert np.any(np.sum(ref_lj == ref_lj.max(axis=1, keepdims=True), axis=1) > 1)  # real ties occur
    for name, a in (("tied", tied), ("flat", flat)):
        path = export(a, tmp_path, lowering, name=f"{name}.tflite", onehot=onehot)
        lj, label = LiteRTAdapter(path).run(x)
        ref_lj = ReferencePredictor(a).log_joint(x)
        np.testing.assert_array_equal(lj, ref_lj)
        np.testing.assert_array_equal(label, np.argmax(ref_lj, axis=1))
    assert np.all(label == 0)  # "flat": every class ties, the first one wins


# -- the graph's own guard (no adapter) ---------------------------------------------------------------------
def run_bare(path: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run the file in a raw LiteRT interpreter, one row at a time when the batch is static."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=path)
    inp = it.get_input_details()[0]
    outs = {d["name"]: d["index"] for d in it.get_output_details()}
    static = inp["shape_signature"][0] != -1
    chunks = [x[i : i + 1] for i in range(len(x))] if static else [x]
    lj, label = [], []
    for chunk in chunks:
        if not static:
            it.resize_tensor_input(inp["index"], list(chunk.shape))
        it.allocate_tensors()
        it.set_tensor(inp["index"], chunk.astype(inp["dtype"]))
        it.invoke()
        lj.append(it.get_tensor(outs["log_joint"]))
        label.append(it.get_tensor(outs["label"]))
    return np.concatenate(lj), np.concatenate(label)


@pytest.mark.parametrize("lowering,onehot", LOWERINGS)
def test_graph_guard_marks_out_of_range_rows_invalid(tmp_path, lowering, onehot):
    artifact = random_artifact(21, 5, 3, structure="tan", max_card=4)
    path = export(artifact, tmp_path, lowering, onehot=onehot)
    good = sample_rows(artifact, n=4)
    bad_high, bad_negative, bad_huge = good[2].copy(), good[3].copy(), good[2].copy()
    i = int(np.argmax(artifact.cardinalities))
    bad_high[i] = artifact.cardinalities[i]  # one past the range: would read the next feature's rows
    bad_negative[-1] = -1
    bad_huge[0] = 127 if onehot == "relu" else 2**31 - 1  # the largest value the input type holds
    x = np.stack([good[0], bad_high, good[1], bad_negative, bad_huge])
    lj, label = run_bare(path, x)
    invalid = np.array([False, True, False, True, True])
    np.testing.assert_array_equal(label[invalid], INVALID_LABEL)
    assert np.all(np.isnan(lj[invalid]))
    ref_lj = ReferencePredictor(artifact).log_joint(good[:2])
    np.testing.assert_array_equal(lj[~invalid], ref_lj)  # valid rows in the same batch unaffected
    np.testing.assert_array_equal(label[~invalid], np.argmax(ref_lj, axis=1))


# -- adapter validation --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gather_file(tmp_path_factory):
    artifact = random_artifact(31, 4, 2, structure="tan", max_card=5)
    path = tmp_path_factory.mktemp("litert") / "model.tflite"
    return artifact, str(export_tflite(artifact, path))


def test_adapter_reads_everything_from_the_file(gather_file):
    artifact, path = gather_file
    rt = load_runtime(path)  # by extension
    assert isinstance(rt, LiteRTAdapter) and rt.threads == 1
    assert rt.feature_names == artifact.feature_names and rt.class_names == artifact.class_names
    np.testing.assert_array_equal(rt.cardinalities, artifact.cardinalities)
    meta = rt.metadata
    assert (meta["format"], meta["lowering"], meta["input_dtype"], meta["bits"]) == ("tflite", "gather", "int32", 4)
    x = sample_rows(artifact, n=50)
    np.testing.assert_array_equal(rt.predict(x), ReferencePredictor(artifact).predict(x))
    np.testing.assert_array_equal(rt.predict(x[:7]), rt.predict(x)[:7])  # re-sized batch
    np.testing.assert_array_equal(rt.predict(x[3]), rt.predict(x)[3:4])  # one row of shape (D,)


@pytest.mark.parametrize("resolver,threads", [("reference", 1), ("builtin", 2)])
def test_adapter_resolvers_and_threads_agree(gather_file, resolver, threads):
    artifact, path = gather_file
    x = sample_rows(artifact, n=64)
    lj, label = LiteRTAdapter(path, threads=threads, resolver=resolver).run(x)
    np.testing.assert_array_equal(lj, ReferencePredictor(artifact).log_joint(x))


def test_adapter_falls_back_to_tensorflow_lite(gather_file, monkeypatch):
    """Without the ai-edge-litert package the adapter runs the file with tf.lite.Interpreter."""
    import sys
    import warnings

    artifact, path = gather_file
    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)  # "import ai_edge_litert" fails
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tf.lite.Interpreter's deprecation notice
        rt = LiteRTAdapter(path)
        x = sample_rows(artifact, n=32)
        lj = rt.log_joint(x)
    assert rt.backend == "tensorflow.lite"
    np.testing.assert_array_equal(lj, ReferencePredictor(artifact).log_joint(x))


def test_adapter_rejects_bad_inputs_naming_feature_and_value(gather_file):
    artifact, path = gather_file
    rt = LiteRTAdapter(path)
    x = sample_rows(artifact, n=3)
    i = int(np.argmax(artifact.cardinalities))
    high = x.copy()
    high[1, i] = artifact.cardinalities[i]
    with pytest.raises(InputError, match=rf"feature {i} \('feat{i}'\) has value {artifact.cardinalities[i]} in row 1"):
        rt.predict(high)
    negative = x.copy()
    negative[2, 0] = -3
    with pytest.raises(InputError, match=r"feature 0 \('feat0'\) has value -3 in row 2"):
        rt.predict(negative)
    with pytest.raises(InputError, match="integer dtype, got float64"):
        rt.predict(x.astype(np.float64))
    d = artifact.n_features
    with pytest.raises(InputError, match=rf"shape \(n, {d}\), got shape \(3, {d + 1}\)"):
        rt.predict(np.zeros((3, artifact.n_features + 1), dtype=np.int64))
    with pytest.raises(InputError, match="got shape"):
        rt.predict(np.zeros((2, 2, artifact.n_features), dtype=np.int64))


def test_adapter_rejects_files_that_are_not_exports(tmp_path):
    from bnc_deploy.runtimes.base import RuntimeLoadError

    bogus = tmp_path / "bogus.tflite"
    bogus.write_bytes(b"\0" * 64)
    with pytest.raises(RuntimeLoadError, match="bogus.tflite"):
        LiteRTAdapter(bogus)
    with pytest.raises(RuntimeLoadError, match="no such model file"):
        LiteRTAdapter(tmp_path / "missing.tflite")


# -- raw inputs ------------------------------------------------------------------------------------------
def test_raw_inputs_equal_discretize_then_codes(tmp_path):
    """The graph bins float32 values exactly like the discretizer (searchsorted, side='left')."""
    from bnc_deploy.datasets.discretize import FayyadIraniDiscretizer

    cuts = [[0.5, 2.5, 7.25], [], [0.1, 0.2], [-1e30, 3.0000001, 1e30], [1.0 / 3.0]]
    disc = {"method": "fayyad-irani-mdl", "n_features_in": len(cuts), "cut_points": cuts}
    artifact = random_artifact(41, 6, 3, structure="tan", discretizer=disc)
    fitted = FayyadIraniDiscretizer.from_dict(disc)
    rng = np.random.default_rng(0)
    edges = np.concatenate([np.asarray(c, dtype=np.float32) for c in cuts if c])
    specials = np.concatenate(
        [
            edges,
            np.nextafter(edges, np.float32(np.inf)),
            np.nextafter(edges, np.float32(-np.inf)),
            [0.0, -0.0, 3.4e38, -3.4e38],
        ]
    )
    x = rng.choice(specials, size=(300, len(cuts))).astype(np.float32)
    x[:100] = (rng.normal(0, 4, size=(100, len(cuts)))).astype(np.float32)
    expected_codes = fitted.transform(x.astype(np.float64))
    assert np.array_equal(np.unique(expected_codes[:, 0]), [0, 1, 2, 3])  # every bin is hit
    for lowering in ("gather", "onehot-fc"):
        path = export(artifact, tmp_path, lowering, raw_inputs=True)
        rt = LiteRTAdapter(path)
        assert rt.raw_inputs and rt.metadata["input_dtype"] == "float32"
        lj, label = rt.run(x)
        ref_lj = ReferencePredictor(artifact).log_joint(expected_codes)
        np.testing.assert_array_equal(lj, ref_lj)
        np.testing.assert_array_equal(label, np.argmax(ref_lj, axis=1))
        # bare graph: a non-finite raw value marks the row invalid
        bad = x[:3].copy()
        bad[1, 2], bad[2, 0] = np.nan, np.inf
        _, bare_label = run_bare(path, bad)
        np.testing.assert_array_equal(bare_label[1:], INVALID_LABEL)
        with pytest.raises(InputError, match=r"feature 2 \('feat2'\) has value nan in row 1"):
            rt.predict(bad)


def test_raw_inputs_need_a_discretizer(tmp_path):
    artifact = random_artifact(1, 3, 1)
    with pytest.raises(ExportError, match="no discretizer"):
        export_tflite(artifact, tmp_path / "m.tflite", raw_inputs=True)
    assert not (tmp_path / "m.tflite").exists()


def test_unknown_lowering_is_rejected(tmp_path):
    with pytest.raises(ExportError, match="unknown lowering 'onehot'"):
        export_tflite(random_artifact(1, 3, 1), tmp_path / "m.tflite", lowering="onehot")


# -- NumPy-only helpers (no conversion: hypothesis) ------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 127), min_size=1, max_size=60))
def test_pack_groups_respects_int8_capacity(bounds):
    groups = _pack_groups(np.array(bounds), INT8_OUTPUT_LEVELS)
    assert groups[0][0] == 0 and groups[-1][1] == len(bounds)
    assert all(a < b for a, b in groups) and all(groups[k][1] == groups[k + 1][0] for k in range(len(groups) - 1))
    assert all(sum(bounds[a:b]) <= INT8_OUTPUT_LEVELS for a, b in groups)
    # greedy: no two neighbouring groups could have been merged
    assert all(sum(bounds[groups[k][0] : groups[k + 1][1]]) > INT8_OUTPUT_LEVELS for k in range(len(groups) - 1))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(BIT_WIDTHS[:-1]))
def test_onehot_fc_plan_weights_are_the_codes(seed, width):
    artifact = random_artifact(seed, *width)
    plan = onehot_fc_plan(artifact)
    r = plan.r_max
    for i, (start, rows) in enumerate(zip(artifact.row_offsets, artifact.rows_per_feature)):
        block = plan.weights[i * r : (i + 1) * r]
        np.testing.assert_array_equal(block[:rows], artifact.table_codes[start : start + rows])
        assert not block[rows:].any()
        np.testing.assert_array_equal(plan.pattern[i], np.where(np.arange(r) < rows, np.arange(r) + 1, 0))


def test_real_data_letter_is_exact(shared_datasets, tmp_path):
    """Every lowering on the real letter test split (maximum-likelihood NB, 7 bits): zero mismatches."""
    from bnc_deploy.datasets import load_dataset

    ds = load_dataset("letter")
    q = FixedPointLogQuantizer(7, 3)
    c = ds.n_classes
    prior = np.log(np.bincount(ds.y_train, minlength=c) + 1.0)
    prior -= np.log(prior.size + len(ds.y_train))
    blocks = []
    for i, k in enumerate(ds.cardinalities):
        counts = np.zeros((k, c))
        np.add.at(counts, (ds.x_train[:, i], ds.y_train), 1.0)
        blocks.append(np.log((counts + 1.0) / (counts + 1.0).sum(axis=0, keepdims=True)))
    artifact = BNCArtifact(
        parents=-np.ones(ds.n_features, dtype=np.int64),
        cardinalities=ds.cardinalities,
        class_names=ds.class_names,
        feature_names=ds.feature_names,
        quantizer=q,
        class_codes=q.to_codes(prior),
        table_codes=q.to_codes(np.concatenate(blocks)),
    )
    for lowering, onehot in LOWERINGS:
        path = export(artifact, tmp_path, lowering, onehot=onehot)
        assert_matches_reference(path, artifact, ds.x_test, exact=True)
