"""Static Edge TPU compatibility report on both TFLite lowerings and on a fully-int8 control model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

from exports import export_tflite  # noqa: E402
from test_export_tflite import random_artifact  # noqa: E402

from bnc_deploy.targets.edgetpu import (
    EDGETPU_SUPPORTED_OPS,
    STATUS_AFTER_CPU,
    STATUS_MAPPED,
    STATUS_NOT_IN_TABLE,
    edgetpu_compatibility,
    format_report,
    main,
)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    artifact = random_artifact(51, 7, 3, structure="tan", n_features=6)
    folder = tmp_path_factory.mktemp("edgetpu")
    files = {
        lowering: str(export_tflite(artifact, folder / f"{lowering}.tflite", lowering=lowering))
        for lowering in ("gather", "onehot-fc")
    }
    files["relu"] = str(export_tflite(artifact, folder / "relu.tflite", lowering="onehot-fc", onehot="relu"))
    return files


def by_op(report) -> dict[str, list[dict]]:
    ops: dict[str, list[dict]] = {}
    for entry in report["ops"]:
        ops.setdefault(entry["op"], []).append(entry)
    return ops


def test_table_names_are_real_tflite_builtins():
    from ai_edge_litert import schema_py_generated as schema

    builtins = {k for k in vars(schema.BuiltinOperator) if not k.startswith("_")}
    assert set(EDGETPU_SUPPORTED_OPS) <= builtins
    for name in ("GATHER", "EQUAL", "CAST", "ARG_MAX", "ARG_MIN", "SELECT_V2", "DEQUANTIZE", "ONE_HOT"):
        assert name not in EDGETPU_SUPPORTED_OPS


def test_gather_lowering_falls_back_to_cpu(exports):
    report = edgetpu_compatibility(exports["gather"])
    ops = by_op(report)
    assert all(e["status"] == STATUS_NOT_IN_TABLE and e["placement"] == "cpu" for e in ops["GATHER"])
    assert report["fallback_ops"]["GATHER"] == len(ops["GATHER"]) >= 2  # parent values + table lookup
    # int32 index arithmetic and a dynamic batch: nothing can be mapped
    assert report["n_mapped"] == 0 and report["n_cpu"] == report["n_ops"]
    assert not report["static_shapes"] and "x" in report["dynamic_tensors"]
    assert not report["fully_8bit"]
    assert report["first_cpu_op"] == 0


def test_onehot_fc_lowering_report_is_truthful(exports):
    """The int8 FCs are supported in isolation, but the EQUAL/CAST one-hot front end runs first on the
    CPU, and the compiler maps one subgraph from the start: by default nothing is mapped."""
    report = edgetpu_compatibility(exports["onehot-fc"])
    ops = by_op(report)
    assert report["static_shapes"]
    for entry in ops["FULLY_CONNECTED"]:
        assert entry["in_table"] and entry["problems"] == [] and entry["supported"]
        assert entry["placement"] == "cpu" and entry["status"] == STATUS_AFTER_CPU
    for name in ("EQUAL", "CAST", "ARG_MAX", "DEQUANTIZE", "SELECT_V2"):
        assert all(e["status"] == STATUS_NOT_IN_TABLE for e in ops[name]), name
    assert "GATHER" not in ops
    assert report["n_mapped"] == 0
    assert report["supported_anywhere"] >= len(ops["FULLY_CONNECTED"])


def test_onehot_fc_relu_builder_maps_its_integer_part(exports):
    """The relu builder keeps everything up to one DEQUANTIZE in int8: that prefix is mapped and only
    the float tail (sum of partial sums, scaling, ARG_MAX, guard SELECT) runs on the CPU."""
    report = edgetpu_compatibility(exports["relu"])
    ops = by_op(report)
    first = report["ops"][report["first_cpu_op"]]
    assert first["op"] == "DEQUANTIZE"
    assert all(e["placement"] == "edgetpu" for e in ops["FULLY_CONNECTED"])  # one-hot, joint rows, groups, guard
    assert all(e["placement"] == "edgetpu" for name in ("MINIMUM", "SUB", "CONCATENATION") for e in ops[name])
    assert report["n_mapped"] == report["first_cpu_op"] >= len(ops["FULLY_CONNECTED"]) + 3
    assert {e["op"] for e in report["ops"] if e["placement"] == "cpu" and e["in_table"] and e["problems"]} <= {
        "ADD",
        "MUL",
        "RESHAPE",
        "STRIDED_SLICE",
        "SUM",
    }  # float tail only
    assert report["static_shapes"]


def test_fully_int8_model_is_mapped(tmp_path):
    """Control: a QAT-style int8 FC graph with int8 input/output passes every check."""
    import tensorflow as tf

    weights = np.arange(-12, 12, dtype=np.float32).reshape(6, 4)

    @tf.function(input_signature=[tf.TensorSpec([1, 6], tf.float32)])
    def net(x):
        x = tf.quantization.fake_quant_with_min_max_args(x, min=-128.0, max=127.0)
        w = tf.quantization.fake_quant_with_min_max_args(tf.constant(weights), min=-127.0, max=127.0, narrow_range=True)
        y = tf.nn.relu(tf.matmul(x, w))
        return tf.quantization.fake_quant_with_min_max_args(y, min=0.0, max=255.0)

    converter = tf.lite.TFLiteConverter.from_concrete_functions([net.get_concrete_function()], net)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    path = tmp_path / "int8.tflite"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # no calibration statistics: the ranges are explicit
        path.write_bytes(converter.convert())
    report = edgetpu_compatibility(str(path))
    assert report["n_ops"] >= 1 and report["n_mapped"] == report["n_ops"], format_report(report)
    assert report["fully_8bit"] and report["static_shapes"] and report["first_cpu_op"] is None
    assert {e["status"] for e in report["ops"]} == {STATUS_MAPPED}


def test_format_report_and_cli(exports, capsys):
    text = format_report(edgetpu_compatibility(exports["onehot-fc"]))
    assert "coral.ai/docs/edgetpu/models-intro" in text
    assert "first CPU operation: #0" in text
    assert any(line.split()[:1] == ["FULLY_CONNECTED"] and STATUS_AFTER_CPU in line for line in text.splitlines())
    assert main([exports["gather"]]) == 0
    assert "GATHER" in capsys.readouterr().out
    assert main(["/nonexistent.tflite"]) == 2


def test_report_names_the_boundary_and_the_op_versions(exports):
    """What the mapped part hands to the CPU, and each operator version against TF Lite 2.5.0."""
    relu = edgetpu_compatibility(exports["relu"])
    first = relu["first_cpu_op"]
    assert relu["boundary"] and all(b["dtype"] == "INT8" for b in relu["boundary"])
    assert any(first in b["read_by"] for b in relu["boundary"])
    assert relu["op_versions_ok"] is True and relu["min_runtime_version"]
    assert {v["op"] for v in relu["op_versions"]} == {e["op"] for e in relu["ops"]}
    assert all(v["compiler_limit"] == "unknown" for v in relu["op_versions"])
    gather = edgetpu_compatibility(exports["gather"])
    assert gather["boundary"] == [] and gather["n_mapped"] == 0
    assert "static, compiler not run" in format_report(gather)
