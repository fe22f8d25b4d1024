"""ONNX DNN exporter: parity with the NumPy reference (bit-exact for sign networks), the graph
guard, integer weight storage, B = 8 (int16, opset 21), metadata, accumulator bound, no torch."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx_dnn_probes import export_onnx_dnn, verification_codes, verify_onnx_dnn  # noqa: E402

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters import onnx_dnn  # noqa: E402
from bnc_deploy.exporters.onnx_dnn import build_onnx_dnn, hidden_output_names  # noqa: E402
from bnc_deploy.formats.metadata import INVALID_LABEL, METADATA_KEY, parse_metadata
from bnc_deploy.formats.onnx import read_dnn_metadata  # noqa: E402
from bnc_deploy.reference.dnn import DNNReferencePredictor
from bnc_deploy.testing import random_dnn_artifact
from bnc_deploy.verify import N_RANDOM_ROWS  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def session(source, optimize: bool = True) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if isinstance(source, onnx.ModelProto):
        source = source.SerializeToString()
    return ort.InferenceSession(
        source if isinstance(source, bytes) else str(source), sess_options=options, providers=["CPUExecutionProvider"]
    )


def run(source, x, optimize: bool = True):
    """The bare graph, no adapter: (logits, label)."""
    return tuple(session(source, optimize).run(["logits", "label"], {"x": np.asarray(x, dtype=np.int64)}))


def with_hidden_outputs(model, artifact):
    """A copy of the model that also outputs every hidden layer's activations."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for name in hidden_output_names(artifact):
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return model


# -- configurations ---------------------------------------------------------------------------------
def configs():
    out = []
    for arch, act, enc, bits, bn in itertools.product(
        ("fc", "cnn"), ("sign", "relu"), ("standardized", "onehot"), (1, 2, 7, 8), (True, False)
    ):
        for order in ("row-major", "column-major") if arch == "cnn" else ("row-major",):
            out.append((arch, act, enc, bits, bn, order))
    return out


CONFIGS = configs()


def make(arch, act, enc, bits, bn, order, seed=0, **kw):
    return random_dnn_artifact(
        seed + 11 * bits + (enc == "onehot"),
        architecture=arch,
        activation=act,
        encoding=enc,
        bits=bits,
        batch_norm=bn,
        pixel_order=order,
        **kw,
    )


def config_id(c):
    arch, act, enc, bits, bn, order = c
    return f"{arch}-{act}-{enc}-B{bits}-{'bn' if bn else 'nobn'}" + (f"-{order[:3]}" if arch == "cnn" else "")


# -- parity ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", CONFIGS, ids=[config_id(c) for c in CONFIGS])
def test_export_parity_on_small_random_nets(tmp_path, config):
    artifact = make(*config)
    result = export_onnx_dnn(artifact, tmp_path / "m.onnx")
    assert result["path"].exists() and not (tmp_path / "m.onnx.tmp").exists()
    x = verification_codes(artifact, n_random=200, seed=1)
    ref = DNNReferencePredictor(artifact)
    expected = ref.logits(x)
    logits, label = run(result["path"], x)
    assert logits.dtype == np.float32 and label.dtype == np.int64
    assert logits.shape == (len(x), artifact.n_classes) and label.shape == (len(x),)
    v = result["verification"]
    if artifact.activation == "sign":
        assert result["exact"] is True and result["lowering"] == "integer-sign"
        np.testing.assert_array_equal(label, ref.predict(x))
        assert np.array_equal(logits.astype(np.float64), expected), "sign-net logits must be bit-identical"
        # the file's own arithmetic, without onnxruntime's fusions, is exact too
        plain_logits, plain_label = run(result["path"], x, optimize=False)
        assert np.array_equal(plain_logits, logits) and np.array_equal(plain_label, label)
        # hidden activations: +-1, identical to the reference's integer machine
        model = with_hidden_outputs(onnx.load(str(result["path"])), artifact)
        outs = session(model).run(hidden_output_names(artifact), {"x": x})
        for k, (got, want) in enumerate(zip(outs, ref.hidden_activations(x))):
            assert got.shape == want.shape, k
            assert np.array_equal(got, want.astype(np.float32)), f"hidden layer {k} differs"
        assert v["logits_identical"] and v["label_mismatches"] == 0
    else:
        assert result["exact"] is False and result["lowering"] == "float"
        assert np.mean(label == ref.predict(x)) >= 0.99
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5 * scale)
        assert v["agreement"] >= 0.99
    assert v["n_rows"] == len(artifact.check_x) + N_RANDOM_ROWS and v["exact_expected"] == result["exact"]


def test_sign_of_zero_is_plus_one(tmp_path):
    """B = 1, no batch norm: the second layer sums 8 values of +-1, so its accumulator is often 0,
    and those units must output +1 (ONNX Sign would give 0)."""
    artifact = random_dnn_artifact(5, activation="sign", bits=1, batch_norm=False, hidden=(8, 6), n_check=256)
    ref = DNNReferencePredictor(artifact)
    x = artifact.check_x.astype(np.int64)
    acc = ref.pre_activations(x)[1]
    assert np.count_nonzero(acc == 0) > 50
    model = build_onnx_dnn(artifact)
    hidden = session(with_hidden_outputs(model, artifact)).run(hidden_output_names(artifact), {"x": x})
    assert np.all(hidden[1][acc == 0] == 1.0)
    assert np.array_equal(hidden[1], ref.hidden_activations(x)[1].astype(np.float32))
    assert np.array_equal(run(model, x)[0].astype(np.float64), ref.logits(x))


@pytest.mark.parametrize("act", ["sign", "relu"])
@pytest.mark.parametrize("enc", ["standardized", "onehot"])
def test_output_layer_only_and_unpooled_conv(act, enc):
    from bnc_deploy.testing import random_codes

    plain = random_dnn_artifact(1, activation=act, encoding=enc, hidden=())
    cnn = random_dnn_artifact(2, architecture="cnn", activation=act, encoding=enc, hidden=(4, 3))
    cnn.layers[1].pool = False  # 5x4 -> 2x2 after the first pool, kept by the second
    cnn.layers[2].codes = random_codes(np.random.default_rng(0), (cnn.n_classes, 3 * 2 * 2), 2)
    cnn.validate()
    for artifact in (plain, cnn):
        model = build_onnx_dnn(artifact)
        used = {name for node in model.graph.node for name in node.input}
        assert {t.name for t in model.graph.initializer} <= used
        facts = verify_onnx_dnn(artifact, model)
        assert facts["logits_identical"] if act == "sign" else facts["agreement"] >= 0.99


def test_dynamic_batch(tmp_path):
    for arch in ("fc", "cnn"):
        artifact = random_dnn_artifact(7, architecture=arch, activation="sign", encoding="onehot")
        model = build_onnx_dnn(artifact)
        ref = DNNReferencePredictor(artifact)
        rng = np.random.default_rng(2)
        for n in (0, 1, 7, 1000):
            x = rng.integers(0, artifact.cardinalities, size=(n, artifact.n_features))
            logits, label = run(model, x)
            assert logits.shape == (n, artifact.n_classes) and label.shape == (n,)
            if n:
                assert np.array_equal(logits.astype(np.float64), ref.logits(x))


@pytest.mark.parametrize("opset", [13, 17, 21, onnx_dnn.MAX_OPSET])
def test_opsets(opset):
    for arch, act, bits in (("cnn", "sign", 3), ("fc", "relu", 2), ("fc", "sign", 8)):
        artifact = random_dnn_artifact(opset, architecture=arch, activation=act, bits=bits, pixel_order="column-major")
        model = build_onnx_dnn(artifact, opset=opset)
        expected = max(opset, 21) if bits == 8 else opset
        assert model.opset_import[0].version == expected
        meta = parse_metadata({p.key: p.value for p in model.metadata_props}[METADATA_KEY])
        assert meta["opset"] == expected and meta["requested_opset"] == opset
        verify_onnx_dnn(artifact, model)  # raises for exact exports that disagree
        verify_onnx_dnn(artifact, model, optimize=False)


@pytest.mark.parametrize("opset", [12, 26, 17.0, True, "17"])
def test_bad_opset_raises(opset):
    with pytest.raises(ExportError, match="opset"):
        build_onnx_dnn(random_dnn_artifact(0), opset=opset)


# -- guard -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arch,act,enc",
    [
        ("fc", "sign", "standardized"),
        ("fc", "relu", "onehot"),
        ("cnn", "sign", "onehot"),
        ("cnn", "relu", "standardized"),
    ],
)
def test_graph_guard_marks_out_of_range_rows_invalid(tmp_path, arch, act, enc):
    artifact = random_dnn_artifact(21, architecture=arch, activation=act, encoding=enc, pixel_order="column-major")
    path = export_onnx_dnn(artifact, tmp_path / "g.onnx")["path"]
    rng = np.random.default_rng(3)
    valid = rng.integers(0, artifact.cardinalities, size=(3, artifact.n_features))
    bad_rows = []
    for j, card in enumerate(artifact.cardinalities):
        for value in (-1, card, card + 1, 2**31 - 1, -(2**31), 2**62, -(2**62)):
            row = valid[j % 3].copy()
            row[j] = value
            bad_rows.append(row)
    bad = np.stack(bad_rows)
    x = np.concatenate([valid[:1], bad[: len(bad) // 2], valid[1:2], bad[len(bad) // 2 :], valid[2:]])
    invalid = np.ones(len(x), dtype=bool)
    invalid[[0, 1 + len(bad) // 2, len(x) - 1]] = False
    logits, label = run(path, x)
    assert np.all(label[invalid] == INVALID_LABEL) and np.isnan(logits[invalid]).all()
    alone_logits, alone_label = run(path, valid)
    assert np.array_equal(logits[~invalid], alone_logits) and np.array_equal(label[~invalid], alone_label)
    assert np.all(alone_label >= 0) and np.isfinite(alone_logits).all()
    np.testing.assert_array_equal(alone_label, DNNReferencePredictor(artifact).predict(valid))


# -- file contents ------------------------------------------------------------------------------------
@pytest.mark.parametrize("act", ["sign", "relu"])
@pytest.mark.parametrize("bits", [1, 3, 7, 8])
def test_initializers_hold_the_artifact_codes(tmp_path, act, bits):
    artifact = random_dnn_artifact(bits, architecture="cnn", activation=act, bits=bits)
    model = onnx.load(str(export_onnx_dnn(artifact, tmp_path / "m.onnx")["path"]))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    wanted = np.int8 if bits <= 7 else np.int16
    for k, layer in enumerate(artifact.layers):
        codes = inits[f"layer{k}.codes"]
        assert codes.dtype == wanted and np.array_equal(codes, layer.codes)
    assert inits["input.codes"].dtype == np.int8 and np.array_equal(inits["input.codes"], artifact.input_codes)
    dq = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert {n.input[0] for n in dq} == {f"layer{k}.codes" for k in range(len(artifact.layers))} | {"input.codes"}
    weight_scales = {float(inits[n.input[1]]) for n in dq if n.input[0] != "input.codes"}
    if act == "relu":
        assert weight_scales == {float(np.float32(1.0 / (2**bits - 1)))}
        assert float(inits["input.scale"]) == artifact.input_scale
    else:
        assert weight_scales == {1.0} and float(inits["input.scale"]) == 1.0
    # no float copy of any weight tensor on disk
    weights = sum(layer.codes.size for layer in artifact.layers)
    assert not any(v.dtype == np.float32 and v.size >= weights // 4 for v in inits.values())
    meta = parse_metadata({p.key: p.value for p in model.metadata_props}[METADATA_KEY])
    assert meta["weight_storage"] == np.dtype(wanted).name
    assert model.opset_import[0].version == (21 if bits == 8 else onnx_dnn.DEFAULT_OPSET) == meta["opset"]


@pytest.mark.parametrize("config", CONFIGS[::3], ids=[config_id(c) for c in CONFIGS[::3]])
def test_graph_is_standard_onnx_without_sign(config):
    artifact = make(*config, seed=4)
    model = build_onnx_dnn(artifact)
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    assert "Sign" not in ops
    assert all(n.domain in ("", "ai.onnx") for n in model.graph.node)
    assert [o.domain for o in model.opset_import] == [""]
    used = {name for node in model.graph.node for name in node.input}
    assert {t.name for t in model.graph.initializer} <= used
    names = [n.name for n in model.graph.node]
    assert len(set(names)) == len(names) and all(names)
    assert len(ops) <= 45
    n_layers = len(artifact.layers)
    assert (
        ops.count("Gemm") + ops.count("Conv")
        == n_layers
        == ops.count("DequantizeLinear") - (artifact.input_encoding == "standardized")
    )
    assert "Relu" in ops if artifact.activation == "relu" else "Relu" not in ops


def test_metadata(tmp_path):
    import bnc_deploy

    artifact = random_dnn_artifact(12, architecture="cnn", activation="sign", bits=3)
    model = onnx.load(str(export_onnx_dnn(artifact, tmp_path / "m.onnx")["path"]))
    props = {p.key: p.value for p in model.metadata_props}
    meta = parse_metadata(props[METADATA_KEY])
    assert meta["model_kind"] == "dnn" and meta["format"] == "onnx" and meta["input_dtype"] == "int64"
    assert meta["outputs"] == ["logits", "label"] and meta["input"] == "codes"
    assert meta["exact"] is True and meta["lowering"] == "integer-sign"
    assert meta["toolkit_version"] == bnc_deploy.__version__ == props["bnc_deploy.version"]
    assert props["bnc_deploy.bits"] == "3" and props["bnc_deploy.structure"] == "cnn"
    assert meta["weight_bits"] == 3 and meta["dequantize_scale"] == 1.0 and meta["weight_scale"] == 1 / 7
    assert meta["n_nodes"] == len(model.graph.node)
    assert 0 < meta["max_accumulator"] < 2**24
    assert (meta["n_parameters"], meta["size_bits"], meta["n_ops"]) == (
        artifact.n_parameters,
        artifact.size_bits,
        artifact.n_ops,
    )
    assert meta["class_names"] == artifact.class_names and meta["cardinalities"] == artifact.cardinalities.tolist()
    assert model.producer_name == "bnc-deploy"
    relu = parse_metadata(
        {p.key: p.value for p in build_onnx_dnn(random_dnn_artifact(12, activation="relu", bits=8)).metadata_props}[
            METADATA_KEY
        ]
    )
    assert relu["exact"] is False and relu["lowering"] == "float" and relu["max_accumulator"] is None
    assert relu["weight_storage"] == "int16" and relu["opset"] == 21 and relu["requested_opset"] == 17


# -- errors --------------------------------------------------------------------------------------------
def test_accumulator_bound_violation_names_the_layer(tmp_path):
    artifact = random_dnn_artifact(
        9, activation="sign", bits=8, n_features=1100, hidden=(2,), n_check=4, max_cardinality=2
    )
    artifact.layers[0].codes[:] = 255
    artifact.input_codes[0, 0] = 63
    with pytest.raises(ExportError, match=r"layer 0 \(dense.*2\*\*24"):
        export_onnx_dnn(artifact, tmp_path / "big.onnx")
    assert not list(tmp_path.iterdir())
    artifact.activation = "relu"  # float lowering: no integer promise, no bound
    for layer in artifact.layers[:-1]:
        layer.activation = "relu"
    build_onnx_dnn(artifact)


def test_failed_verification_publishes_nothing(tmp_path, monkeypatch):
    artifact = random_dnn_artifact(13, activation="sign")
    # tamper with an exact model: shift one bias by one float32 step -> logits no longer identical
    model = build_onnx_dnn(artifact)
    bias = next(t for t in model.graph.initializer if t.name == f"layer{len(artifact.layers) - 1}.bias")
    values = onnx.numpy_helper.to_array(bias).copy()
    values[0] = np.nextafter(values[0], np.float32(np.inf))
    bias.CopyFrom(onnx.numpy_helper.from_array(values, bias.name))
    with pytest.raises(ExportError, match="disagrees"):
        verify_onnx_dnn(artifact, model)
    monkeypatch.setattr(onnx_dnn, "build_onnx_dnn", lambda a, opset, pack_bits=False: model)
    with pytest.raises(ExportError, match="disagrees"):
        export_onnx_dnn(artifact, tmp_path / "m.onnx")
    assert not list(tmp_path.iterdir())


def test_not_a_dnn_artifact():
    with pytest.raises(ExportError, match="DNN"):
        build_onnx_dnn(object())


# -- no torch --------------------------------------------------------------------------------------------
def test_exporter_does_not_import_torch(tmp_path):
    code = f"""
import sys
from bnc_deploy.testing import random_dnn_artifact
from bnc_deploy.verify import export_file
r = export_file(random_dnn_artifact(1, architecture="cnn"), {str(tmp_path / "nt.onnx")!r}, "onnx")
print(r.label_mismatches)
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


# -- pack_bits: B-bit weight bit-planes and compact index constants ------------------------------------
@pytest.mark.parametrize("config", CONFIGS[::2], ids=[config_id(c) for c in CONFIGS[::2]])
def test_pack_bits_computes_the_same_graph(tmp_path, config):
    from bnc_deploy.costs import costs_from_metadata
    from bnc_deploy.profiling.graph_count import count_graph

    art = make(*config)
    plain, packed = build_onnx_dnn(art), build_onnx_dnn(art, pack_bits=True)
    x = verification_codes(art)
    (lp, yp), (lk, yk) = run(plain, x), run(packed, x)
    if art.activation == "sign":
        np.testing.assert_array_equal(yk, yp)
        np.testing.assert_array_equal(lk, lp)
    else:  # same weights, but onnxruntime may pick another Conv kernel for computed weights: float
        assert np.mean(yk == yp) >= 0.99
        np.testing.assert_allclose(lk, lp, rtol=1e-4, atol=1e-4)
    # the unpacked weights equal DequantizeLinear's, bit for bit
    names = [f"layer{k}/weights" for k in range(len(art.layers))]
    weights = []
    for model in (plain, packed):
        m = onnx.ModelProto.FromString(model.SerializeToString())
        for name in names:
            m.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
        weights.append(session(m, optimize=False).run(names, {"x": x.astype(np.int64)}))
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
    inits = {t.name: t for t in packed.graph.initializer}
    bits = art.weight_bits
    for k, layer in enumerate(art.layers):
        planes = onnx.numpy_helper.to_array(inits[f"layer{k}.bitplanes"])
        assert planes.dtype == np.uint8 and planes.shape == (bits, -(-layer.codes.size // 8))
        assert f"layer{k}.codes" not in inits
    path = tmp_path / "packed.onnx"
    onnx.save_model(packed, str(path))
    count = count_graph(path)
    costs = costs_from_metadata(count.metadata)
    assert count.paper_ops == costs.n_ops and count.param_bits == costs.size_bits
    assert read_dnn_metadata(packed)["weight_storage"] == f"bitplanes{bits}"


def test_pack_bits_shrinks_a_usps_sized_net(tmp_path):
    art = random_dnn_artifact(
        0,
        architecture="fc",
        activation="relu",
        bits=2,
        hidden=(35, 35),
        n_features=256,
        max_cardinality=6,
        n_classes=10,
    )
    plain = export_onnx_dnn(art, tmp_path / "plain.onnx")
    packed = export_onnx_dnn(art, tmp_path / "packed.onnx", pack_bits=True)
    assert packed["verification"]["agreement"] == 1.0
    # 10,535 weights: 10,535 bytes as int8, 2 x 1,317 bytes as bit-planes; int64 index constants shrink too
    assert packed["bytes"] < plain["bytes"] - 8000
