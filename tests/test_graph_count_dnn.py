"""Graph op counter on exported DNNs: the counted ops and parameter bits equal the analytic ones.

The matrix is every combination of fc/cnn x sign/relu x standardized/onehot x B in {1, 2, 7, 8} x
batch norm on/off, as ONNX (64 models) and as TFLite (32 sign + 32 ReLU x output layer int8 and
float32 = 96 models; ~0.3 s of conversion each). Files are built in memory (``build_*``: the
exporters' graphs without the runtime verification, which their own tests do).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from bnc_deploy.artifacts.dnn import DNNArtifact, DNNLayer  # noqa: E402
from bnc_deploy.costs import analytic_costs, costs_from_metadata
from bnc_deploy.exporters.onnx_dnn import build_onnx_dnn  # noqa: E402
from bnc_deploy.profiling.graph_count import count_graph, load_graph  # noqa: E402
from bnc_deploy.testing import random_codes, random_dnn_artifact

ARCHS, ACTS, ENCODINGS, BITS, BATCH_NORM = (
    ("fc", "cnn"),
    ("sign", "relu"),
    ("standardized", "onehot"),
    (1, 2, 7, 8),
    (True, False),
)
MATRIX = list(itertools.product(ARCHS, ACTS, ENCODINGS, BITS, BATCH_NORM))


def matrix_artifact(arch, act, enc, bits, bn) -> DNNArtifact:
    seed = 100 * bits + 10 * bn + (arch == "cnn") * 3 + (act == "sign") + (enc == "onehot") * 5
    return random_dnn_artifact(
        seed,
        architecture=arch,
        activation=act,
        encoding=enc,
        bits=bits,
        batch_norm=bn,
        hidden=(8, 6) if arch == "fc" else (3, 4),
    )


def tflite_bytes(art, **options) -> bytes:
    pytest.importorskip("tensorflow")
    from bnc_deploy.exporters.tflite_dnn import build_tflite_dnn

    return build_tflite_dnn(art, **options)


def expected_terms(art) -> dict:
    """MACs, batch-norm outputs and bias outputs of the analytic cost model, from its layer list."""
    from bnc_deploy.costs import Conv2D, Dense

    macs = bn = bias = 0
    for layer in art.cost_layers():
        if isinstance(layer, Dense):
            m, n = layer.n_in * layer.n_out, layer.n_out
        elif isinstance(layer, Conv2D):
            n = layer.out_channels * layer.out_hw[0] * layer.out_hw[1]
            m = n * layer.in_channels * layer.kernel[0] * layer.kernel[1]
        else:
            continue
        macs, bn, bias = macs + m, bn + n * layer.batch_norm, bias + n * layer.bias
    return {"macs": macs, "batch_norm_outputs": bn, "bias_outputs": bias}


def assert_equals_analytic(count, art):
    costs = analytic_costs(art)
    assert count.complete, (count.unknown_ops, count.breakdown["problems"])
    assert count.paper_ops == costs.n_ops == art.n_ops
    assert count.param_bits == costs.size_bits == art.size_bits
    check = count.compare()  # against the file's own metadata
    assert check["n_ops"]["equal"] and check["size_bits"]["equal"]
    meta_costs = costs_from_metadata(count.metadata)
    assert (meta_costs.n_ops, meta_costs.size_bits) == (costs.n_ops, costs.size_bits)
    b = count.breakdown
    assert {k: b[k] for k in ("macs", "batch_norm_outputs", "bias_outputs")} == expected_terms(art)
    assert b["weights"] == art.n_parameters and b["problems"] == []
    assert b["biases"] == art.n_classes
    assert b["batch_norm_units"] == sum(layer.n_out for layer in art.layers if layer.batch_norm)
    # the input-code table and the guard are no parameters
    assert all("input" not in p.name and "guard" not in p.name for p in count.params)


# -- the matrix ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch,act,enc,bits,bn", MATRIX)
def test_onnx_matrix(arch, act, enc, bits, bn):
    art = matrix_artifact(arch, act, enc, bits, bn)
    count = count_graph(build_onnx_dnn(art))
    assert count.format == "onnx"
    assert_equals_analytic(count, art)


@pytest.mark.parametrize("arch,act,enc,bits,bn", MATRIX)
def test_tflite_matrix(arch, act, enc, bits, bn):
    art = matrix_artifact(arch, act, enc, bits, bn)
    for output_layer in ("int8", "float32") if act == "relu" else ("int8",):
        count = count_graph(tflite_bytes(art, output_layer=output_layer))
        assert count.format == "tflite" and count.metadata["output_layer"] == (
            output_layer if act == "relu" else "float32"
        )
        assert_equals_analytic(count, art)
        if bits == 8 and act == "sign":
            # B = 8: hidden layers run on 2-3 input copies; the graph does that many times the MACs
            copies = [layer.get("input_copies", 1) for layer in count.metadata["tflite_layers"]]
            assert max(copies) > 1
            assert (
                count.breakdown["graph_macs"]
                > count.breakdown["macs"]
                == count.macs - (count.breakdown["graph_macs"] - count.breakdown["macs"])
            )
            for fact in count.breakdown["layers"]:
                assert fact["input_copies"] == copies[fact["layer"]]
                assert fact["graph_macs"] == fact["macs"] * fact["input_copies"]
        else:
            assert count.breakdown["graph_macs"] == count.breakdown["macs"] == count.macs


# -- other shapes: conv + dense hidden layers, no hidden layer, three hidden layers, opsets ---------------------
def conv_dense_artifact(seed, act, bits, bn, enc) -> DNNArtifact:
    """A CNN with a dense hidden layer after the convolution (5x5 column-major image, pooled to 2x2)."""
    art = random_dnn_artifact(
        seed,
        architecture="cnn",
        activation=act,
        bits=bits,
        batch_norm=bn,
        encoding=enc,
        hidden=(3,),
        image_shape=(5, 5),
        pixel_order="column-major",
    )
    rng = np.random.default_rng(seed)
    scale = shift = None
    if bn:
        scale = (rng.uniform(0.5, 1.5, 5) * np.array([1, -1, 1, 1, 1])).astype(np.float32)
        shift = rng.normal(0, 1, 5).astype(np.float32)
    dense = DNNLayer("dense", random_codes(rng, (5, 3 * 2 * 2), bits), scale=scale, shift=shift, activation=act)
    out = DNNLayer("dense", random_codes(rng, (3, 5), bits), bias=art.layers[-1].bias)
    return DNNArtifact(
        architecture="cnn",
        cardinalities=art.cardinalities,
        class_names=art.class_names,
        feature_names=art.feature_names,
        weight_bits=bits,
        activation=act,
        input_encoding=enc,
        layers=[art.layers[0], dense, out],
        input_codes=art.input_codes,
        input_scale=art.input_scale,
        image_shape=art.image_shape,
        pixel_order=art.pixel_order,
    )


def other_shapes():
    out = []
    for act, bits, bn in itertools.product(ACTS, (2, 8), BATCH_NORM):
        enc = "standardized" if bn else "onehot"
        out.append(
            pytest.param(conv_dense_artifact(bits + bn, act, bits, bn, enc), id=f"conv-dense-{act}-B{bits}-bn{bn:d}")
        )
        out.append(
            pytest.param(
                random_dnn_artifact(
                    bits,
                    activation=act,
                    bits=bits,
                    batch_norm=bn,
                    hidden=(),
                    encoding="onehot" if bn else "standardized",
                ),
                id=f"no-hidden-{act}-B{bits}-{'onehot' if bn else 'std'}",
            )
        )
        out.append(
            pytest.param(
                random_dnn_artifact(bits, activation=act, bits=bits, batch_norm=bn, hidden=(5, 4, 3)),
                id=f"fc3-{act}-B{bits}-bn{bn:d}",
            )
        )
    return out


@pytest.mark.parametrize("art", other_shapes())
def test_other_shapes_both_formats(art):
    assert_equals_analytic(count_graph(build_onnx_dnn(art)), art)
    for output_layer in ("int8", "float32") if art.activation == "relu" else ("int8",):
        assert_equals_analytic(count_graph(tflite_bytes(art, output_layer=output_layer)), art)


@pytest.mark.parametrize("opset", [13, 21, 25])
def test_onnx_opsets(opset):
    for act in ACTS:
        art = random_dnn_artifact(3, architecture="cnn", activation=act, bits=3, hidden=(3, 4))
        count = count_graph(build_onnx_dnn(art, opset=opset))
        assert count.metadata["opset"] == opset
        assert_equals_analytic(count, art)


def test_exported_file_on_disk(tmp_path):
    """A written, verified export counts the same as the in-memory graph (path input)."""
    from onnx_dnn_probes import export_onnx_dnn

    art = random_dnn_artifact(5, architecture="cnn", activation="sign", bits=2)
    path = tmp_path / "net.onnx"
    export_onnx_dnn(art, path)
    count = count_graph(path)
    assert count.path == str(path)
    assert_equals_analytic(count, art)
    assert json.loads(json.dumps(count.to_dict()))["breakdown"]["macs"] == expected_terms(art)["macs"]


# -- node-level rules ------------------------------------------------------------------------------------------
def by_output(count):
    return {n.output: n for n in count.nodes}


def test_onnx_relu_batch_norm_pair_and_output_bias():
    art = random_dnn_artifact(1, activation="relu", bits=2, hidden=(8, 6))
    count = count_graph(build_onnx_dnn(art))
    nodes = by_output(count)
    assert (nodes["layer0/gemm"].category, nodes["layer0/gemm"].ops, nodes["layer0/gemm"].macs) == (
        "arithmetic",
        art.n_features * 8,
        art.n_features * 8,
    )
    assert (nodes["layer0/bn_scale"].category, nodes["layer0/bn_scale"].ops) == ("arithmetic", 0)  # half the pair
    assert (nodes["layer0/bn_shift"].category, nodes["layer0/bn_shift"].ops) == ("arithmetic", 8)
    assert (nodes["layer0/relu"].category, nodes["layer0/relu"].ops) == ("free", 0)
    assert (nodes["layer2/bias"].category, nodes["layer2/bias"].ops) == ("arithmetic", 3)
    assert nodes["logits"].category == "guard"  # NaN penalty, not a paper op
    assert nodes["label/argmax"].category == "argmax" and nodes["input/encoded"].lookups
    params = {p.name: p for p in count.params}
    assert params["layer0.bn_shift"].bits_per_element == 64 and params["layer0.bn_shift"].elements == 8
    assert {s[0] for s in params["layer0.bn_shift"].storage} == {"layer0.bn_shift", "layer0.bn_scale"}
    assert params["layer2.bias"].param_bits == 3 * 32
    assert params["layer0/weights"].bits_per_element == 2 and params["layer0/weights"].storage[0][0] == "layer0.codes"
    assert "input/table_flat" not in params and count.lookups == art.n_features


def test_onnx_sign_threshold_is_batch_norm_only_with_batch_norm():
    with_bn = random_dnn_artifact(2, activation="sign", bits=2, batch_norm=True)
    nodes = by_output(count_graph(build_onnx_dnn(with_bn)))
    assert (nodes["layer0/threshold"].category, nodes["layer0/threshold"].ops) == ("arithmetic", 8)
    assert (nodes["layer0/direction"].category, nodes["layer0/direction"].ops) == ("arithmetic", 0)
    assert (nodes["layer0/sign"].category, nodes["layer0/sign"].ops) == ("free", 0)
    assert nodes["layer2/output_scale"].category == "rescale"
    assert (nodes["layer2/bias"].category, nodes["layer2/bias"].ops) == ("arithmetic", 3)

    without = random_dnn_artifact(2, activation="sign", bits=2, batch_norm=False)
    count = count_graph(build_onnx_dnn(without))
    nodes = by_output(count)
    assert (nodes["layer0/threshold"].category, nodes["layer0/threshold"].ops) == ("free", 0)
    assert "layer0/direction" not in nodes
    assert not [p for p in count.params if "threshold" in p.name]


def test_one_hot_inputs_count_full_macs():
    art = random_dnn_artifact(4, activation="relu", encoding="onehot", batch_norm=False, hidden=(8,))
    for data in (build_onnx_dnn(art), tflite_bytes(art)):
        count = count_graph(data)
        first = count.breakdown["layers"][0]
        assert first["macs"] == int(art.cardinalities.sum()) * 8
        assert all(n.effective_additions is None for n in count.nodes if n.category == "arithmetic")
        assert count.paper_ops == art.n_ops


def test_tflite_folded_batch_norm_and_int8_output_bias():
    art = random_dnn_artifact(6, activation="relu", bits=4, hidden=(8, 6))
    count = count_graph(tflite_bytes(art, output_layer="int8"))
    products = [n for n in count.nodes if n.source_op == "FULLY_CONNECTED"]
    assert [n.ops for n in products] == [art.n_features * 8 + 8, 8 * 6 + 6, 6 * 3 + 3]
    assert "batch-norm outputs (in its bias)" in products[0].note
    assert "output-bias outputs (in its bias)" in products[2].note
    params = sorted((p.bits_per_element, p.elements) for p in count.params)
    assert params == [(4, 18), (4, 48), (4, 8 * art.n_features), (32, 3), (64, 6), (64, 8)]


def test_table_shows_the_dnn_terms():
    art = random_dnn_artifact(7, architecture="cnn", activation="sign", bits=2)
    text = count_graph(build_onnx_dnn(art)).table()
    costs = art.costs()
    assert f"paper operations = arithmetic {costs.n_ops:,} + folded at load 0 = {costs.n_ops:,}" in text
    assert "DNN: ops = MACs" in text and "batch-norm units x 64" in text
    assert f"analytic: size {costs.size_bits:,} bits (equal), ops {costs.n_ops:,} (equal)" in text


# -- what the metadata decides, and what is never silently 0 ----------------------------------------------------
def test_metadata_flags_decide_batch_norm():
    art = random_dnn_artifact(2, activation="sign", bits=2, batch_norm=True, hidden=(8, 6))
    graph = load_graph(build_onnx_dnn(art))
    graph.metadata["layers"][0]["batch_norm"] = False  # the same threshold node is then the activation
    count = count_graph(graph)
    assert count.complete
    assert count.paper_ops == art.n_ops - 8 and count.param_bits == art.size_bits - 8 * 64


def test_layer_mismatch_is_not_counted():
    art = random_dnn_artifact(2, activation="relu", bits=2, hidden=(8, 6))
    graph = load_graph(build_onnx_dnn(art))
    graph.metadata["layers"] = graph.metadata["layers"][1:]
    count = count_graph(graph)
    assert not count.complete and count.paper_ops is None
    assert "3 products with constant weights, the metadata 2 layers" in count.breakdown["problems"][0]
    assert "NOT COUNTED" in count.table()

    graph = load_graph(build_onnx_dnn(art))
    graph.metadata["layers"][0]["type"] = "conv2d"
    count = count_graph(graph)
    assert count.paper_ops is None and "'conv2d', the graph has Gemm" in count.breakdown["problems"][0]


def test_batch_norm_without_a_shift_in_the_graph_is_not_counted():
    art = random_dnn_artifact(2, activation="relu", bits=2, batch_norm=False, hidden=(8,))
    graph = load_graph(build_onnx_dnn(art))
    graph.metadata["layers"][0]["batch_norm"] = True
    count = count_graph(graph)
    assert count.paper_ops is None and not count.complete
    assert "no per-unit addition, threshold or bias follows the product" in count.breakdown["problems"][0]


def test_input_copies_must_match_the_metadata():
    art = random_dnn_artifact(8, activation="sign", bits=8, hidden=(8,))
    graph = load_graph(tflite_bytes(art))
    assert graph.metadata["tflite_layers"][0]["input_copies"] > 1
    assert count_graph(graph).complete
    graph.metadata["tflite_layers"][0]["input_copies"] = 1
    count = count_graph(graph)
    assert count.paper_ops is None and "input copies" in count.breakdown["problems"][0]


def test_unknown_ops_are_listed_not_zero():
    art = random_dnn_artifact(2, activation="relu", bits=2, hidden=(8, 6))
    model = build_onnx_dnn(art)
    for node in model.graph.node:
        if node.name == "layer0/relu":
            node.domain, node.op_type = "com.example", "Swish"
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    count = count_graph(model)
    assert count.unknown_ops == ["Swish"] and not count.complete and count.paper_ops is None
    assert by_output(count)["layer0/relu"].ops is None
    assert "INCOMPLETE: no counting rule for Swish" in count.table()


def test_bn_exports_have_no_dnn_breakdown():
    from bnc_deploy.artifacts.bnc import BNCArtifact
    from bnc_deploy.exporters.onnx_bnc import build_onnx_model

    rng = np.random.default_rng(0)
    a = BNCArtifact(
        parents=np.array([-1, -1]),
        cardinalities=np.array([2, 3]),
        class_names=["a", "b"],
        feature_names=["f0", "f1"],
        class_logp=-rng.random(2).astype(np.float32) - 0.1,
        table_logp=-rng.random((5, 2)).astype(np.float32) - 0.1,
    )
    count = count_graph(build_onnx_model(a))
    assert count.breakdown is None and "breakdown" not in count.to_dict() and count.paper_ops == a.n_ops
