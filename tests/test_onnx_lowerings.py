"""ONNX lowerings of BN models: the padded ``clip`` guard of ``gather`` and the ``gather-grouped`` lowering.

What must hold (exporters/onnx_bnc.py): both lowerings are bit-exact for quantized models on every
valid row, in every batch size; every invalid value (negative, at or above the cardinality, at or
above the clip bound, huge) makes its row NaN / -1 and leaves the other rows alone; the profiler
counts the paper's D * C operations and the stored parameters from the graph; onnxruntime folds
the table construction, so the graph run per call is the short one; exporters without the
ONNX-only lowering refuse it by name.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters import _onnx_bnc_grouped, onnx_bnc
from bnc_deploy.exporters.onnx_bnc import build_onnx_model
from bnc_deploy.formats.metadata import INVALID_LABEL, METADATA_KEY, parse_metadata
from bnc_deploy.profiling.graph_count import count_graph
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact

LOWERINGS = ("gather", "gather-grouped")


def session(model) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"])


def run(model, x):
    return session(model).run(["log_joint", "label"], {"x": x})


def metadata(model) -> dict:
    return parse_metadata({p.key: p.value for p in model.metadata_props}[METADATA_KEY])


def codes(rng, artifact, n):
    return rng.integers(0, artifact.cardinalities, size=(n, artifact.n_features)).astype(np.int64)


def assert_exact(artifact, model, x):
    lj, label = run(model, x)
    ref = ReferencePredictor(artifact)
    np.testing.assert_array_equal(label, ref.predict(x))
    if artifact.is_quantized:
        assert lj.dtype == np.float32 and np.array_equal(lj, ref.log_joint(x)), "quantized log_joint must be identical"
    else:
        np.testing.assert_allclose(lj, ref.log_joint(x), rtol=1e-5, atol=1e-4)


# -- exactness ------------------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**31 - 1),
    bits=st.sampled_from([None, 1, 2, 3, 5, 8]),
    d=st.integers(1, 8),
    lowering=st.sampled_from(LOWERINGS),
    tan=st.booleans(),
    pack_bits=st.booleans(),
)
def test_random_models_are_exact(seed, bits, d, lowering, tan, pack_bits):
    rng = np.random.default_rng(seed)
    tan = tan and d > 1
    artifact = random_bnc_artifact(rng, bits=bits, tan=tan, d=d)
    model = build_onnx_model(artifact, lowering=lowering, pack_bits=pack_bits and bits is not None)
    for n in (1, 3, 200):
        assert_exact(artifact, model, codes(rng, artifact, n))


@pytest.mark.parametrize("lowering", LOWERINGS)
@pytest.mark.parametrize("opset", [13, 21])
def test_every_code_combination_and_opsets(lowering, opset):
    """All value combinations of a small model, at the oldest and newest opsets."""
    artifact = random_bnc_artifact(np.random.default_rng(3), tan=False, bits=4, d=4, cardinalities=[3, 1, 4, 2])
    grid = np.stack(np.meshgrid(*[np.arange(c) for c in artifact.cardinalities], indexing="ij"), -1).reshape(-1, 4)
    assert_exact(artifact, build_onnx_model(artifact, lowering=lowering, opset=opset), grid.astype(np.int64))


@pytest.mark.parametrize("lowering", LOWERINGS)
def test_raw_inputs(lowering):
    cuts = [[0.5, 1.5], [], [-1.0, 0.0, 1.0], [2.0]]
    artifact = random_bnc_artifact(
        np.random.default_rng(4), tan=False, bits=3, d=4, cardinalities=[3, 1, 4, 2], discretizer=discretizer_dict(cuts)
    )
    model = build_onnx_model(artifact, lowering=lowering, raw_inputs=True)
    x = np.array(
        [
            [0.0, 7.0, -2.0, 3.0],
            [1.0, 0.0, 0.5, 1.0],
            [2.0, -5.0, 1.5, 2.0],
            [np.nan, 0.0, 0.0, 0.0],
            [0.0, np.inf, 0.0, 0.0],
            [0.0, 0.0, -np.inf, 0.0],
        ],
        dtype=np.float32,
    )
    lj, label = run(model, x)
    expected_codes = np.array([[0, 0, 0, 1], [1, 0, 2, 0], [2, 0, 3, 0]])  # searchsorted(cuts, x, "left")
    ref = ReferencePredictor(artifact)
    np.testing.assert_array_equal(label[:3], ref.predict(expected_codes))
    assert np.array_equal(lj[:3], ref.log_joint(expected_codes))
    assert label[3:].tolist() == [INVALID_LABEL] * 3 and np.isnan(lj[3:]).all()


# -- the guard ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "lowering,tan,bits",
    [
        ("gather", False, 3),
        ("gather", True, 3),
        ("gather", True, None),
        ("gather-grouped", False, 3),
        ("gather-grouped", False, None),
        ("gather-grouped", True, 3),
    ],
)
def test_every_invalid_value_marks_only_its_row(lowering, tan, bits):
    """Values just outside the range, at and beyond the clip bound K, and far outside: -1 / NaN."""
    rng = np.random.default_rng(21)
    cards = [3, 1, 4, 2, 5]
    artifact = random_bnc_artifact(rng, bits=bits, tan=tan, d=5, cardinalities=cards)
    model = build_onnx_model(artifact, lowering=lowering)
    k = max(cards)
    valid = codes(rng, artifact, 1)
    bad = []
    for i, card in enumerate(cards):
        for value in sorted({-1, -2, card, card + 1, k, k + 1, k + 2, -(2**62), 2**62}):
            if 0 <= value < card:
                continue
            row = valid.copy()
            row[0, i] = value
            bad.append(row)
    x = np.concatenate([valid] + bad + [valid])
    lj, label = run(model, x)
    assert np.all(label[1:-1] == INVALID_LABEL) and np.isnan(lj[1:-1]).all()
    ref = ReferencePredictor(artifact)
    for r in (0, -1):
        assert label[r] == ref.predict(valid)[0]
        np.testing.assert_allclose(lj[r], ref.log_joint(valid)[0], rtol=1e-5, atol=1e-4)


def chain_tan(seed: int = 5):
    """TAN f0 -> f1 -> f2 -> f3 (f4 parentless), small tables: every case of the grouped TAN layout."""
    from bnc_deploy.artifacts import BNCArtifact
    from bnc_deploy.quantizers import FixedPointLogQuantizer

    rng = np.random.default_rng(seed)
    cards, parents = np.array([2, 4, 3, 2, 3]), np.array([-1, 0, 1, 2, -1])
    n_rows = int((cards * np.where(parents >= 0, cards[np.maximum(parents, 0)], 1)).sum())
    return BNCArtifact(
        parents=parents,
        cardinalities=cards,
        class_names=["a", "b", "c"],
        feature_names=[f"f{i}" for i in range(5)],
        quantizer=FixedPointLogQuantizer(3, 2),
        class_codes=rng.integers(0, 8, size=3).astype(np.uint8),
        table_codes=rng.integers(0, 8, size=(n_rows, 3)).astype(np.uint8),
    )


@pytest.mark.parametrize("lowering", LOWERINGS)
def test_invalid_parent_value_marks_the_row(lowering):
    """TAN: a child's lookup with an out-of-range parent value is NaN (the parent axis is padded too)."""
    artifact = chain_tan()
    model = build_onnx_model(artifact, lowering=lowering)
    x = np.array([[0, 0, 0, 0, 0], [2, 0, 0, 0, 0], [0, 4, 0, 0, 0], [0, 3, 2, 1, 2], [0, 0, 3, 0, 0]], dtype=np.int64)
    lj, label = run(model, x)
    assert label[[1, 2, 4]].tolist() == [INVALID_LABEL] * 3 and np.isnan(lj[[1, 2, 4]]).all()
    assert_exact(artifact, model, x[[0, 3]])


def test_tan_groups_follow_the_tree(monkeypatch):
    """A child joins its parent's group; a group's axes are its members and their parents."""
    artifact = chain_tan()  # axis sizes |X_i| + 2: 4, 6, 5, 4, 5
    monkeypatch.setattr(_onnx_bnc_grouped, "MAX_GROUP_ROWS", 150)  # 4 * 6 * 5 = 120 fits, * 4 does not
    meta = metadata(build_onnx_model(artifact, lowering="gather-grouped"))
    assert meta["feature_groups"] == [[0, 1, 2], [3, 4]]
    assert meta["group_axes"] == [[0, 1, 2], [3, 2, 4]]
    grid = np.stack(np.meshgrid(*[np.arange(c) for c in artifact.cardinalities], indexing="ij"), -1).reshape(-1, 5)
    assert_exact(artifact, build_onnx_model(artifact, lowering="gather-grouped"), grid.astype(np.int64))


def test_large_cardinalities_fall_back_to_the_where_guard(monkeypatch):
    """A padded table beyond the limit keeps the compact table and the original guard: same answers."""
    artifact = random_bnc_artifact(np.random.default_rng(6), bits=3, tan=True, d=4)
    padded = build_onnx_model(artifact)
    monkeypatch.setattr(onnx_bnc, "PADDED_TABLE_LIMIT", 0)
    compact = build_onnx_model(artifact)
    assert metadata(padded)["index_guard"] == "clip" and metadata(compact)["index_guard"] == "where"
    x = np.concatenate([codes(np.random.default_rng(7), artifact, 50), np.full((1, 4), -3, dtype=np.int64)])
    (lj_p, lab_p), (lj_c, lab_c) = run(padded, x), run(compact, x)
    np.testing.assert_array_equal(lab_p, lab_c)
    np.testing.assert_array_equal(lj_p, lj_c)  # NaN rows compare equal in assert_array_equal
    with pytest.raises(ExportError, match="too large"):
        build_onnx_model(artifact, lowering="gather-grouped")


# -- structure, metadata, counts ----------------------------------------------------------------------------
def runtime_ops(model) -> list[str]:
    """The graph onnxruntime runs per call, after folding the constant parts at load."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # folding, no fusions
        options.optimized_model_filepath = str(Path(tmp) / "opt.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]


def test_naive_bayes_runs_eight_nodes_per_call():
    """The padded layout's point: Clip is the whole guard (was 5 range/select nodes per call)."""
    artifact = random_bnc_artifact(np.random.default_rng(8), tan=False, bits=3, d=6, cardinalities=[4] * 6)
    ops = runtime_ops(build_onnx_model(artifact))
    assert sorted(ops) == sorted(["Clip", "Add", "Gather", "ReduceSum", "ArgMax", "Gather", "IsNaN", "Where"])
    grouped = runtime_ops(build_onnx_model(artifact, lowering="gather-grouped"))
    assert grouped.count("Gather") == 2 + 1 and "Sum" in grouped  # 6 ** 4 rows fit: groups of 4 and 2, + label guard
    many = runtime_ops(
        build_onnx_model(
            random_bnc_artifact(np.random.default_rng(8), tan=False, bits=3, d=40, cardinalities=[6] * 40),
            lowering="gather-grouped",
        )
    )
    assert many.count("Gather") == 1 + 1 and "ReduceSum" in many  # 10 groups of 4: one lookup, one reduction


@pytest.mark.parametrize(
    "d,expected",
    [(6, [[0, 1, 2, 3, 4], [5]]), (12, [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]), (1, [[0]]), (2, [[0, 1]])],
)
def test_groups_and_metadata(d, expected):
    """Three values per feature: axes of 5 (codes -1 .. 3), 5**5 = 3125 rows fit MAX_GROUP_ROWS = 4096."""
    artifact = random_bnc_artifact(np.random.default_rng(9), tan=False, bits=3, d=d, cardinalities=[3] * d, n_classes=4)
    model = build_onnx_model(artifact, lowering="gather-grouped")
    meta = metadata(model)
    w = 3 + 2
    assert meta["lowering"] == "gather-grouped" and meta["exact"] is True and meta["index_guard"] == "clip"
    assert meta["feature_groups"] == expected and meta["lookups_per_row"] == len(expected)
    assert meta["table_bytes_at_load"] == sum(w ** len(g) for g in expected) * 4 * 4
    assert_exact(artifact, model, codes(np.random.default_rng(1), artifact, 100))


@pytest.mark.parametrize("tan", [False, True])
def test_wide_models_use_one_clip_bound(monkeypatch, tan):
    """Above PER_FEATURE_AXES_MAX_D features every group axis has K + 2 values and one Clip guards:
    same answers, same guard."""
    monkeypatch.setattr(_onnx_bnc_grouped, "PER_FEATURE_AXES_MAX_D", 0)
    rng = np.random.default_rng(15)
    cards = [3, 1, 4, 2, 5]
    artifact = random_bnc_artifact(rng, bits=3, tan=tan, d=5, cardinalities=cards)
    model = build_onnx_model(artifact, lowering="gather-grouped")
    assert "Clip" in runtime_ops(model) and "Min" not in runtime_ops(model)
    groups = metadata(model)["group_axes"]
    assert metadata(model)["table_bytes_at_load"] == sum(7 ** len(a) for a in groups) * artifact.n_classes * 4
    x = codes(rng, artifact, 100)
    assert_exact(artifact, model, x)
    bad = np.repeat(x[:1], 3, axis=0)
    bad[0, 1], bad[1, 3], bad[2, 0] = 1, 5, -7  # at |X_i|, at K, negative
    lj, label = run(model, bad)
    assert label.tolist() == [INVALID_LABEL] * 3 and np.isnan(lj).all()


def test_groups_shrink_to_fit_the_table_limit(monkeypatch):
    artifact = random_bnc_artifact(
        np.random.default_rng(10), tan=False, bits=3, d=4, cardinalities=[3] * 4, n_classes=4
    )
    monkeypatch.setattr(_onnx_bnc_grouped, "GROUPED_TABLE_LIMIT", 2 * 25 * 4 * 4)  # two 5 x 5 pair tables
    assert metadata(build_onnx_model(artifact, lowering="gather-grouped"))["feature_groups"] == [[0, 1], [2, 3]]


@pytest.mark.parametrize(
    "lowering,tan,bits,pack_bits",
    [
        ("gather", False, 3, False),
        ("gather", True, 3, True),
        ("gather", True, None, False),
        ("gather-grouped", False, 3, False),
        ("gather-grouped", False, 8, True),
        ("gather-grouped", False, None, False),
        ("gather-grouped", True, 3, True),
        ("gather-grouped", True, None, False),
    ],
)
def test_profiler_counts_the_paper_model(lowering, tan, bits, pack_bits):
    """Folded prior and folded group sums included, the graph's count is D * C and the stored bits."""
    from bnc_deploy.costs import analytic_costs

    artifact = random_bnc_artifact(np.random.default_rng(11), bits=bits, tan=tan, d=7, n_classes=5)
    count = count_graph(build_onnx_model(artifact, lowering=lowering, pack_bits=pack_bits))
    assert count.complete, count.unknown_ops
    assert count.paper_ops == analytic_costs(artifact).n_ops == artifact.n_features * artifact.n_classes
    assert count.param_bits == artifact.size_bits
    groups = metadata(build_onnx_model(artifact, lowering=lowering)).get("feature_groups")
    n_lookups = len(groups) if groups else artifact.n_features
    assert count.lookups == n_lookups * artifact.n_classes
    if groups:
        assert count.folded_additions == (artifact.n_features - len(groups) + 1) * artifact.n_classes


# -- other exporters refuse the ONNX-only lowering ----------------------------------------------------------
def test_the_c_export_refuses_gather_grouped():
    from bnc_deploy.verify import build

    nb = random_bnc_artifact(np.random.default_rng(12), tan=False, bits=3, d=4)
    with pytest.raises(ExportError, match="lowering"):
        build(nb, "c", lowering="gather-grouped")


def test_tflite_refuses_gather_grouped_by_name():
    pytest.importorskip("tensorflow")
    from bnc_deploy.exporters.tflite_bnc import build_tflite_model

    with pytest.raises(ExportError, match="unknown lowering 'gather-grouped'"):
        build_tflite_model(
            random_bnc_artifact(np.random.default_rng(13), tan=False, bits=3, d=3), lowering="gather-grouped"
        )


def test_verified_export_through_the_registry(tmp_path):
    """The verifier publishes a gather-grouped file (exact) and its metadata says so."""
    from bnc_deploy.verify import export_file

    artifact = random_bnc_artifact(np.random.default_rng(14), tan=False, bits=3, d=5)
    report = export_file(artifact, tmp_path / "g.onnx", "onnx", lowering="gather-grouped")
    assert report.lowering == "gather-grouped" and (tmp_path / "g.onnx").is_file()


# -- the paper's datasets (skipped without ../shared) ----------------------------------------------------------
@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["letter", "satimage", "usps"])
def test_paper_datasets_every_test_row_identical(shared_datasets, name):
    """NB and Chow-Liu TAN at 3 bits, random tables on the real structure: both lowerings give the
    reference's labels and log_joint bit for bit on every test row (and the same as each other)."""
    from bnc_deploy.artifacts import BNCArtifact
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.quantizers import FixedPointLogQuantizer
    from bnc_deploy.train.chow_liu import chow_liu_parents

    ds = load_dataset(name)
    cards = np.asarray(ds.cardinalities)
    x = np.ascontiguousarray(ds.x_test, dtype=np.int64)
    rng = np.random.default_rng(0)
    for parents in (np.full(len(cards), -1), chow_liu_parents(ds.x_train, ds.y_train, cards, ds.n_classes)):
        n_rows = int((cards * np.where(parents >= 0, cards[np.maximum(parents, 0)], 1)).sum())
        artifact = BNCArtifact(
            parents=np.asarray(parents),
            cardinalities=cards,
            class_names=list(ds.class_names),
            feature_names=[f"x{i}" for i in range(len(cards))],
            quantizer=FixedPointLogQuantizer(3, 2),
            class_codes=rng.integers(0, 8, size=ds.n_classes).astype(np.uint8),
            table_codes=rng.integers(0, 8, size=(n_rows, ds.n_classes)).astype(np.uint8),
        )
        for lowering in LOWERINGS:
            assert_exact(artifact, build_onnx_model(artifact, lowering=lowering), x)
