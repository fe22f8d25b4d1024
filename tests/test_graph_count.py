"""Graph op counter: per-op rules on hand-built ONNX and TFLite graphs, and graph == analytic on exports."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from bnc_deploy.artifacts.bnc import BNCArtifact  # noqa: E402
from bnc_deploy.costs import Dense, analytic_costs, dnn_costs
from bnc_deploy.exporters.onnx_bnc import build_onnx_model  # noqa: E402
from bnc_deploy.profiling.graph_count import count_graph, load_graph  # noqa: E402
from bnc_deploy.quantizers import FixedPointLogQuantizer


# -- helpers ------------------------------------------------------------------------------------------------
def onnx_model(nodes, inputs, outputs, initializers, meta=None):
    tensors = [numpy_helper.from_array(np.asarray(v), name=k) for k, v in initializers.items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if meta is not None:
        helper.set_model_props(model, {"bnc_deploy": json.dumps(meta)})
    return model


def by_output(count):
    return {n.output: n for n in count.nodes}


def artifact(cards, parents, n_classes, bits=None, seed=0, names=None) -> BNCArtifact:
    cards, parents = np.asarray(cards), np.asarray(parents)
    rows = int((cards * np.where(parents >= 0, cards[np.maximum(parents, 0)], 1)).sum())
    rng = np.random.default_rng(seed)
    common = dict(
        parents=parents,
        cardinalities=cards,
        class_names=names or [f"c{k}" for k in range(n_classes)],
        feature_names=[f"f{i}" for i in range(len(cards))],
    )
    if bits is None:
        return BNCArtifact(
            class_logp=-rng.random(n_classes).astype(np.float32) - 0.1,
            table_logp=-rng.random((rows, n_classes)).astype(np.float32) - 0.1,
            **common,
        )
    q = FixedPointLogQuantizer(bits, min(bits, 3))
    return BNCArtifact(
        quantizer=q,
        class_codes=rng.integers(0, q.max_code + 1, n_classes).astype(np.uint8),
        table_codes=rng.integers(0, q.max_code + 1, (rows, n_classes)).astype(np.uint8),
        **common,
    )


def assert_graph_equals_analytic(count, a):
    costs = analytic_costs(a)
    assert count.complete, count.unknown_ops
    assert count.paper_ops == costs.n_ops == a.n_features * a.n_classes
    assert count.param_bits == costs.size_bits == a.size_bits
    check = count.compare()
    assert check["n_ops"]["equal"] and check["size_bits"]["equal"]


# -- hand-built ONNX graphs ------------------------------------------------------------------------------------
def gather_sum_model(extra_nodes=(), outputs=("log_joint", "label")):
    """NB-like: 3 features (2, 3, 2 values), 4 classes, uint8 codes dequantized at load, prior folded
    into feature 0's rows, offsets added per row, gather + ReduceSum, ArgMax."""
    d, c = 3, 4
    inits = {
        "table": np.arange(28, dtype=np.uint8).reshape(7, 4) % 8,
        "prior": np.array([1, 2, 3, 4], np.uint8),
        "step": np.array(-0.5, np.float32),
        "r0": np.array([0]),
        "r2": np.array([2]),
        "r7": np.array([7]),
        "offsets": np.array([0, 2, 5]),
        "axis1": np.array([1]),
    }
    nodes = [
        helper.make_node("Cast", ["table"], ["tf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["tf", "step"], ["T"]),
        helper.make_node("Cast", ["prior"], ["pf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["pf", "step"], ["P"]),
        helper.make_node("Slice", ["T", "r0", "r2"], ["first"]),
        helper.make_node("Add", ["first", "P"], ["first_p"]),
        helper.make_node("Slice", ["T", "r2", "r7"], ["rest"]),
        helper.make_node("Concat", ["first_p", "rest"], ["T2"], axis=0),
        helper.make_node("Add", ["x", "offsets"], ["rows"]),
        helper.make_node("Gather", ["T2", "rows"], ["picked"], axis=0),
        helper.make_node("ReduceSum", ["picked", "axis1"], ["log_joint"], keepdims=0),
        helper.make_node("ArgMax", ["log_joint"], ["label"], axis=1, keepdims=0),
        *extra_nodes,
    ]
    outs = {
        "log_joint": helper.make_tensor_value_info("log_joint", TensorProto.FLOAT, ["N", c]),
        "label": helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
        "odd": helper.make_tensor_value_info("odd", TensorProto.FLOAT, ["N", c]),
    }
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.INT64, ["N", d])],
        [outs[o] for o in outputs],
        inits,
        meta={"bits": 3, "n_ops": d * c, "size_bits": 3 * 4 * 8},
    )


def test_gather_reducesum_rules_and_folded_prior():
    count = count_graph(gather_sum_model())
    n = by_output(count)
    for name in ("tf", "T", "pf", "P", "first", "first_p", "rest", "T2"):
        assert n[name].category == "load-time", name
    assert n["first_p"].folded == 4  # prior [4] folded into feature 0's rows
    assert (n["rows"].category, n["rows"].ops) == ("addressing", 3)
    assert (n["picked"].category, n["picked"].ops, n["picked"].lookups) == ("free", 0, 12)
    assert (n["log_joint"].category, n["log_joint"].ops) == ("arithmetic", (3 - 1) * 4)
    assert (n["label"].category, n["label"].ops) == ("argmax", 3)
    assert count.per_row_additions == 8 and count.folded_additions == 4
    assert count.paper_ops == 3 * 4  # per-row + folded = D * C
    assert count.param_elements == 7 * 4 + 4  # table + prior; the step is not a parameter
    assert count.param_bits == 3 * 32  # metadata bits x elements
    assert count.storage_bits == 8 * 32  # stored uint8
    assert count.compare()["n_ops"]["equal"] and count.compare()["size_bits"]["equal"]
    assert "paper operations = arithmetic 8 + folded at load 4 = 12" in count.table()


def test_unknown_op_is_reported_never_zero():
    model = gather_sum_model(
        [helper.make_node("Hardmax", ["log_joint"], ["odd"], axis=1)], outputs=("log_joint", "label", "odd")
    )
    count = count_graph(model)
    odd = by_output(count)["odd"]
    assert odd.category == "unknown" and odd.ops is None and "Hardmax" in odd.note
    assert count.unknown_ops == ["Hardmax"]
    assert not count.complete and count.paper_ops is None
    assert not count.compare()["n_ops"]["equal"]
    assert count.totals()["complete"] is False
    assert "INCOMPLETE: no counting rule for Hardmax" in count.table()


def test_custom_domain_op_is_unknown():
    node = helper.make_node("Foo", ["x"], ["y"], domain="com.example")
    model = helper.make_model(
        helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
        ),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
    )
    count = count_graph(model)
    assert count.unknown_ops == ["Foo"] and count.nodes[0].category == "unknown"


def test_guard_nodes_and_validation_path():
    """Range checks, Where routing and the label's NaN test are guard; their gathers are free."""
    c = 3
    inits = {
        "zero": np.array(0),
        "cards": np.array([2, 2]),
        "offsets": np.array([0, 2]),
        "bad": np.array(4),
        "table": -np.ones((5, c), np.float32),
        "axis1": np.array([1]),
        "c0": np.array(0),
        "minus1": np.array(-1),
    }
    nodes = [
        helper.make_node("GreaterOrEqual", ["x", "zero"], ["ge"]),
        helper.make_node("Less", ["x", "cards"], ["lt"]),
        helper.make_node("And", ["ge", "lt"], ["ok"]),
        helper.make_node("Add", ["x", "offsets"], ["rows"]),
        helper.make_node("Where", ["ok", "rows", "bad"], ["safe"]),
        helper.make_node("Gather", ["table", "safe"], ["picked"], axis=0),
        helper.make_node("ReduceSum", ["picked", "axis1"], ["log_joint"], keepdims=0),
        helper.make_node("ArgMax", ["log_joint"], ["best"], axis=1, keepdims=0),
        helper.make_node("Gather", ["log_joint", "c0"], ["first"], axis=1),
        helper.make_node("IsNaN", ["first"], ["nan"]),
        helper.make_node("Where", ["nan", "minus1", "best"], ["label"]),
    ]
    model = onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.INT64, ["N", 2])],
        [
            helper.make_tensor_value_info("log_joint", TensorProto.FLOAT, ["N", c]),
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
        ],
        inits,
    )
    count = count_graph(model)
    n = by_output(count)
    assert [n[k].category for k in ("ge", "lt", "ok", "safe", "nan", "label")] == ["guard"] * 6
    assert n["first"].category == "free" and "validation path" in n["first"].note
    assert count.total("guard") == 2 + 2 + 2 + 2 + 1 + 1
    assert (n["log_joint"].ops, n["best"].ops, count.total("addressing")) == (3, 2, 2)
    assert count.paper_ops == 3 and count.param_bits == 5 * c * 32  # no metadata: float32 width


def test_onehot_product_effective_additions_and_guard_column():
    """OneHot + ReduceSum + MatMul with a counting column (the ONNX onehot-fc shape of things)."""
    c = 3
    inits = {
        "offsets": np.array([0, 3]),
        "depth": np.array(5),
        "values": np.array([0.0, 1.0], np.float32),
        "table": -np.arange(15, dtype=np.float32).reshape(5, c),
        "ones": np.ones((5, 1), np.float32),
        "axis1": np.array([1]),
        "b0": np.array([0]),
        "bc": np.array([c]),
        "bc1": np.array([c + 1]),
        "two": np.array(2.0, np.float32),
        "zero": np.array(0.0, np.float32),
        "nan": np.array(np.nan, np.float32),
    }
    nodes = [
        helper.make_node("Add", ["x", "offsets"], ["rows"]),
        helper.make_node("Concat", ["table", "ones"], ["W"], axis=1),
        helper.make_node("OneHot", ["rows", "depth", "values"], ["hot"], axis=-1),
        helper.make_node("ReduceSum", ["hot", "axis1"], ["stacked"], keepdims=0),
        helper.make_node("MatMul", ["stacked", "W"], ["product"]),
        helper.make_node("Slice", ["product", "b0", "bc", "axis1"], ["scores"]),
        helper.make_node("Slice", ["product", "bc", "bc1", "axis1"], ["valid"]),
        helper.make_node("Equal", ["valid", "two"], ["all_valid"]),
        helper.make_node("Where", ["all_valid", "zero", "nan"], ["penalty"]),
        helper.make_node("Add", ["scores", "penalty"], ["log_joint"]),
    ]
    model = onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.INT64, ["N", 2])],
        [helper.make_tensor_value_info("log_joint", TensorProto.FLOAT, ["N", c])],
        inits,
        meta={"bits": 32},
    )
    count = count_graph(model)
    n = by_output(count)
    assert n["W"].category == "load-time"
    assert (n["hot"].category, n["hot"].ops) == ("addressing", 2 * 5)
    assert (n["stacked"].category, n["stacked"].ops) == ("addressing", 10 - 5)
    mm = n["product"]
    assert mm.category == "arithmetic" and mm.macs == 5 * (c + 1)
    # two hot entries per row: (2 - 1) additions per column; the counting column's share is guard
    assert (mm.effective_additions, mm.ops, mm.guard_share) == ((2 - 1) * c, (2 - 1) * c, 1)
    assert n["log_joint"].category == "guard"  # adds 0 or NaN
    assert count.paper_ops == c  # D * C - C: no prior in this graph
    assert count.param_elements == 5 * c  # the ones column is not a parameter
    assert count.macs == 5 * (c + 1)


def test_dnn_graph_matches_the_dnn_formula():
    """Float MLP 4 -> 3 (bias, ReLU) -> 2 (bias): one op per MAC and per bias; ReLU free."""
    rng = np.random.default_rng(0)
    inits = {
        "W1": rng.random((4, 3), dtype=np.float32),
        "b1": rng.random(3, dtype=np.float32),
        "W2": rng.random((3, 2), dtype=np.float32),
        "b2": rng.random(2, dtype=np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["a"]),
        helper.make_node("MatMul", ["a", "W2"], ["o"]),
        helper.make_node("Add", ["o", "b2"], ["y"]),
    ]
    model = onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
        inits,
    )
    count = count_graph(model)
    n = by_output(count)
    assert (n["h"].ops, n["hb"].ops, n["a"].ops, n["o"].ops, n["y"].ops) == (12, 3, 0, 6, 2)
    assert n["a"].category == "free"
    expected = dnn_costs([Dense(4, 3, bias=True), Dense(3, 2, bias=True)], 32)
    assert count.paper_ops == expected.n_ops == 23
    assert count.param_bits == expected.size_bits == 32 * 23


def test_load_graph_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_graph(tmp_path / "missing.onnx")
    (tmp_path / "m.pb").write_bytes(b"x")
    with pytest.raises(ValueError, match="cannot count a .pb file"):
        load_graph(tmp_path / "m.pb")
    (tmp_path / "bad.onnx").write_bytes(b"not an onnx model")
    with pytest.raises(ValueError, match="not a readable ONNX model"):
        load_graph(tmp_path / "bad.onnx")
    (tmp_path / "bad.tflite").write_bytes(b"nope")
    with pytest.raises(ValueError, match="not a readable TFLite model"):
        load_graph(tmp_path / "bad.tflite")


# -- hand-built TFLite flatbuffer (schema only, no TensorFlow) -------------------------------------------------
def tflite_model(tensors, ops, inputs, outputs, meta=None) -> bytes:
    """tensors: [(name, type, shape_signature, data or None)]; ops: [(BUILTIN, in, out, options or None)]."""
    import flatbuffers

    try:
        from ai_edge_litert import schema_py_generated as s
    except ImportError:  # pragma: no cover
        from tensorflow.lite.python import schema_py_generated as s
    m = s.ModelT()
    m.version, m.buffers, m.operatorCodes = 3, [s.BufferT()], []
    sub = s.SubGraphT()
    sub.tensors, sub.operators = [], []
    for name, dtype, signature, data in tensors:
        t = s.TensorT()
        t.name, t.type = name.encode(), getattr(s.TensorType, dtype)
        t.shapeSignature = list(signature)
        t.shape = [1 if d == -1 else d for d in signature]
        t.buffer = 0
        if data is not None:
            b = s.BufferT()
            b.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8)
            m.buffers.append(b)
            t.buffer = len(m.buffers) - 1
        sub.tensors.append(t)
    names = [t[0] for t in tensors]
    for builtin, ins, outs, options in ops:
        code = getattr(s.BuiltinOperator, builtin)
        if not any(oc.builtinCode == code for oc in m.operatorCodes):
            oc = s.OperatorCodeT()
            oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
            m.operatorCodes.append(oc)
        op = s.OperatorT()
        op.opcodeIndex = next(k for k, oc in enumerate(m.operatorCodes) if oc.builtinCode == code)
        op.inputs, op.outputs = [names.index(i) for i in ins], [names.index(o) for o in outs]
        if options is not None:
            op.builtinOptionsType, op.builtinOptions = options
        sub.operators.append(op)
    sub.inputs, sub.outputs = [names.index(i) for i in inputs], [names.index(o) for o in outputs]
    m.subgraphs = [sub]
    if meta is not None:
        b = s.BufferT()
        b.data = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        m.buffers.append(b)
        entry = s.MetadataT()
        entry.name, entry.buffer = b"bnc_deploy", len(m.buffers) - 1
        m.metadata = [entry]
    builder = flatbuffers.Builder(1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def tflite_gather_sum(extra_ops=(), extra_tensors=(), outputs=("log_joint", "label")):
    """TFLite NB-like: clamp, offsets, GATHER of uint8 codes, CAST, SUM, ADD prior, ARG_MIN, rescale."""
    try:
        from ai_edge_litert import schema_py_generated as s
    except ImportError:  # pragma: no cover
        from tensorflow.lite.python import schema_py_generated as s
    reducer = s.ReducerOptionsT()
    reducer.keepDims = False
    arg = s.ArgMinOptionsT()
    arg.outputType = s.TensorType.INT64
    tensors = [
        ("x", "INT32", [-1, 2], None),
        ("max_code", "INT32", [2], np.array([1, 2], np.int32)),
        ("zero", "INT32", [], np.array(0, np.int32)),
        ("offsets", "INT32", [2], np.array([0, 2], np.int32)),
        ("table", "UINT8", [5, 3], (np.arange(15) % 4).astype(np.uint8).reshape(5, 3)),
        ("prior", "INT32", [3], np.array([1, 0, 2], np.int32)),
        ("axis1", "INT32", [], np.array(1, np.int32)),
        ("step", "FLOAT32", [], np.array(-0.25, np.float32)),
        ("clip_hi", "INT32", [-1, 2], None),
        ("clipped", "INT32", [-1, 2], None),
        ("rows", "INT32", [-1, 2], None),
        ("codes", "UINT8", [-1, 2, 3], None),
        ("codes32", "INT32", [-1, 2, 3], None),
        ("sums", "INT32", [-1, 3], None),
        ("total", "INT32", [-1, 3], None),
        ("label", "INT64", [-1], None),
        ("totalf", "FLOAT32", [-1, 3], None),
        ("log_joint", "FLOAT32", [-1, 3], None),
        *extra_tensors,
    ]
    ops = [
        ("MINIMUM", ["x", "max_code"], ["clip_hi"], None),
        ("MAXIMUM", ["clip_hi", "zero"], ["clipped"], None),
        ("ADD", ["clipped", "offsets"], ["rows"], None),
        ("GATHER", ["table", "rows"], ["codes"], None),
        ("CAST", ["codes"], ["codes32"], None),
        ("SUM", ["codes32", "axis1"], ["sums"], (s.BuiltinOptions.ReducerOptions, reducer)),
        ("ADD", ["sums", "prior"], ["total"], None),
        ("ARG_MIN", ["total", "axis1"], ["label"], (s.BuiltinOptions.ArgMinOptions, arg)),
        ("CAST", ["total"], ["totalf"], None),
        ("MUL", ["totalf", "step"], ["log_joint"], None),
        *extra_ops,
    ]
    return tflite_model(
        tensors, ops, ["x"], list(outputs), meta={"bits": 2, "n_ops": 6, "size_bits": 2 * 18, "input": "codes"}
    )


def test_tflite_rules_from_the_flatbuffer():
    count = count_graph(tflite_gather_sum())
    assert count.format == "tflite"
    n = by_output(count)
    assert [n[k].category for k in ("clip_hi", "clipped")] == ["guard", "guard"]
    assert (n["rows"].category, n["rows"].ops) == ("addressing", 2)
    assert (n["codes"].lookups, n["codes32"].category) == (6, "free")
    assert (n["sums"].category, n["sums"].ops) == ("arithmetic", 3)  # keepDims read from the options
    assert (n["total"].category, n["total"].ops) == ("arithmetic", 3)  # the prior, per row
    assert (n["label"].category, n["label"].ops) == ("argmax", 2)
    assert (n["log_joint"].category, n["log_joint"].ops) == ("rescale", 3)
    assert count.paper_ops == 2 * 3 and count.folded_additions == 0
    assert count.param_elements == 15 + 3 and count.param_bits == 2 * 18
    assert count.storage_bits == 15 * 8 + 3 * 32


def test_tflite_unknown_builtin_is_reported():
    model = tflite_gather_sum(
        extra_ops=[("HARD_SWISH", ["log_joint"], ["odd"], None)],
        extra_tensors=[("odd", "FLOAT32", [-1, 3], None)],
        outputs=("log_joint", "label", "odd"),
    )
    count = count_graph(model)
    assert count.unknown_ops == ["HARD_SWISH"] and count.paper_ops is None
    assert by_output(count)["odd"].ops is None


# -- real exports: every lowering equals the analytic model -----------------------------------------------------
CASES = [("nb", 3), ("tan", 3), ("tan", 1), ("nb", 8), ("tan", 8), ("nb", None), ("tan", None)]


def structure(kind, d):
    return np.array([-1] * d) if kind == "nb" else np.array([-1, 0, 0, 1, 3, 2][:d])


@pytest.mark.parametrize("kind,bits", CASES)
def test_onnx_exports_equal_analytic(kind, bits):
    a = artifact([3, 4, 2, 5, 1, 3], structure(kind, 6), 4, bits, seed=7)
    for options in ({}, {"lowering": "onehot-fc"}, {"pack_bits": True} if bits else {}):
        assert_graph_equals_analytic(count_graph(build_onnx_model(a, **options)), a)


def test_onnx_raw_input_export_counts_binning():
    from bnc_deploy.datasets.discretize import FayyadIraniDiscretizer

    cuts = [[0.5], [0.5, 1.5, 2.5], [1.0]]
    a = artifact([2, 4, 2], [-1, 0, 1], 3, bits=4)
    a.discretizer = FayyadIraniDiscretizer.from_dict(
        {"method": "fayyad-irani-mdl", "n_features_in": 3, "cut_points": cuts}
    ).to_dict()
    count = count_graph(build_onnx_model(a, raw_inputs=True))
    assert_graph_equals_analytic(count, a)
    # comparisons with the padded cut points (3 per feature) and their counts, per row
    assert count.total("binning") == 3 * 3 + (3 * 3 - 3)


@pytest.fixture(scope="module")
def tflite():
    pytest.importorskip("tensorflow")
    from bnc_deploy.exporters.tflite_bnc import build_tflite_model

    return build_tflite_model


@pytest.mark.parametrize(
    "kind,bits,lowering,onehot",
    [
        ("nb", 3, "gather", "equal-cast"),
        ("tan", 3, "gather", "equal-cast"),
        ("tan", None, "gather", "equal-cast"),
        ("tan", 8, "onehot-fc", "equal-cast"),
        ("nb", None, "onehot-fc", "equal-cast"),
        ("tan", 3, "onehot-fc", "relu"),
    ],
)
def test_tflite_exports_equal_analytic(tflite, kind, bits, lowering, onehot):
    a = artifact([3, 4, 2, 5, 1, 3], structure(kind, 6), 4, bits, seed=3)
    count = count_graph(tflite(a, lowering=lowering, onehot=onehot))
    assert_graph_equals_analytic(count, a)
    if lowering == "onehot-fc":
        # MACs run over the padded one-hot; effective additions are what the paper counts
        assert count.macs > count.per_row_additions
        fc = [n for n in count.nodes if n.source_op == "FULLY_CONNECTED" and n.category == "arithmetic"]
        assert fc and all(n.effective_additions is not None for n in fc)


# -- the paper's datasets (skipped without ../shared) ----------------------------------------------------------
@pytest.fixture(scope="module")
def paper_artifacts(request):
    from support import SHARED_DATASETS

    if not (SHARED_DATASETS / "discretized").is_dir():
        pytest.skip(f"real datasets not found at {SHARED_DATASETS}")
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.train.chow_liu import chow_liu_parents

    out = {}
    for name in ("letter", "satimage", "usps"):
        ds = load_dataset(name)
        tan = chow_liu_parents(ds.x_train, ds.y_train, ds.cardinalities, ds.n_classes)
        for kind, parents in (("nb", -np.ones(ds.n_features, dtype=np.int64)), ("tan", tan)):
            out[name, kind] = artifact(ds.cardinalities, parents, ds.n_classes, bits=3, names=ds.class_names)
    return out


@pytest.mark.shared_data
def test_paper_numbers(paper_artifacts):
    letter = analytic_costs(paper_artifacts["letter", "nb"])
    assert (letter.n_parameters, letter.size_bits, letter.n_ops) == (3822, 11466, 416)
    usps = analytic_costs(paper_artifacts["usps", "nb"])
    assert (usps.n_parameters, usps.n_ops) == (8650, 2560)


@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["letter", "satimage", "usps"])
@pytest.mark.parametrize("kind", ["nb", "tan"])
def test_paper_datasets_graph_equals_analytic(paper_artifacts, tflite, name, kind):
    a = paper_artifacts[name, kind]
    assert_graph_equals_analytic(count_graph(build_onnx_model(a)), a)
    assert_graph_equals_analytic(count_graph(tflite(a)), a)
