"""``bnc-export`` and the runtime adapters with DNN artifacts (small random nets, no training)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bnc_deploy.artifacts import save_artifact
from bnc_deploy.cli.export import main
from bnc_deploy.reference.dnn import DNNReferencePredictor
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import random_dnn_artifact
from bnc_deploy.validation import InputError


def _model(tmp_path, **kw):
    art = random_dnn_artifact(5, n_check=120, **kw)
    path = tmp_path / "m.bnc"
    save_artifact(art, path)
    return art, path


@pytest.mark.parametrize(
    "kw",
    [
        dict(architecture="fc", activation="sign", bits=2),
        dict(architecture="cnn", activation="sign", bits=7, encoding="onehot"),
        dict(architecture="fc", activation="relu", bits=3),
    ],
)
def test_onnx_export_report(tmp_path, capsys, kw):
    art, path = _model(tmp_path, **kw)
    out = tmp_path / "m.onnx"
    assert main([str(path), "--format", "onnx", "-o", str(out), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["model_kind"] == "dnn" and r["n_rows"] == 120 and r["size_bits"] == art.size_bits
    if kw["activation"] == "sign":
        assert r["exact"] is True and r["exact_expected"] is True and r["label_mismatches"] == 0
        assert r["logits_identical"] is True and r["lowering"] == "integer-sign"
    else:
        assert r["exact_expected"] is False and r["agreement"] >= 0.98
    assert r["accuracy_change"] == pytest.approx(r["accuracy"] - r["reference_accuracy"])


def test_human_table(tmp_path, capsys):
    _, path = _model(tmp_path)
    assert main([str(path), "--format", "onnx", "-o", str(tmp_path / "m.onnx")]) == 0
    text = capsys.readouterr().out
    assert "EXACT" in text and "bit-identical" in text and "FC 8,6" in text


@pytest.mark.parametrize("flags", [["--raw-inputs"], ["--lowering", "onehot-fc"]])
def test_bn_only_flags_are_refused(tmp_path, capsys, flags):
    _, path = _model(tmp_path)
    assert main([str(path), "--format", "onnx", "-o", str(tmp_path / "m.onnx"), *flags]) == 2
    assert "Bayesian network classifiers only" in capsys.readouterr().err


@pytest.mark.parametrize("runtime, suffix", [("onnxruntime", ".onnx"), ("numpy", ".bnc")])
def test_runtime_adapters_run_dnn_files(tmp_path, capsys, runtime, suffix):
    art, path = _model(tmp_path, architecture="cnn", activation="sign", bits=2)
    target = path
    if suffix == ".onnx":
        target = tmp_path / "m.onnx"
        assert main([str(path), "--format", "onnx", "-o", str(target), "--json"]) == 0
    rt = load_runtime(target, runtime)
    assert rt.metadata["model_kind"] == "dnn" and rt.metadata["outputs"] == ["logits", "label"]
    logits, label = rt.run(art.check_x)
    ref = DNNReferencePredictor(art)
    np.testing.assert_array_equal(label, ref.predict(art.check_x))
    np.testing.assert_array_equal(logits, ref.logits(art.check_x))
    bad = art.check_x[:2].copy()
    bad[1, 0] = art.cardinalities[0]
    with pytest.raises(InputError, match="feature 0"):
        rt.predict(bad)


@pytest.mark.parametrize(
    "kw",
    [
        dict(architecture="cnn", activation="sign", bits=2),
        dict(architecture="fc", activation="relu", bits=2, batch_norm=True),
    ],
)
def test_tflite_export_report(tmp_path, capsys, kw):
    art, path = _model(tmp_path, **kw)
    out = tmp_path / "m.tflite"
    assert main([str(path), "--format", "tflite", "-o", str(out), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["runtime"] == "litert" and r["n_rows"] == 120
    if kw["activation"] == "sign":
        assert r["exact"] is True and r["lowering"] == "int8-sign"
    else:
        assert r["lowering"] == "int8-ptq" and r["exact_expected"] is False and r["agreement"] >= 0.95
    rt = load_runtime(out)
    np.testing.assert_array_equal(rt.predict(art.check_x), rt.run(art.check_x)[1])


def test_tflite_relu_output_layer_flag(tmp_path, capsys):
    _, path = _model(tmp_path, architecture="fc", activation="relu", bits=2)
    out = tmp_path / "m.tflite"
    assert main([str(path), "--format", "tflite", "--output-layer", "float32", "-o", str(out), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert load_runtime(out).metadata["output_layer"] == "float32" and r["agreement"] >= 0.95
    sign, sign_path = _model(tmp_path, architecture="fc", activation="sign", bits=2)
    assert main([str(sign_path), "--format", "tflite", "--output-layer", "float32", "-o", str(out)]) == 2
    assert "ReLU DNN models only" in capsys.readouterr().err


def test_onnx_pack_bits(tmp_path, capsys):
    art, path = _model(tmp_path, architecture="fc", activation="sign", bits=2, hidden=(64, 64), n_features=40)
    plain, packed = tmp_path / "plain.onnx", tmp_path / "packed.onnx"
    assert main([str(path), "--format", "onnx", "-o", str(plain), "--json"]) == 0
    capsys.readouterr()
    assert main([str(path), "--format", "onnx", "--pack-bits", "-o", str(packed), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["exact"] is True and r["label_mismatches"] == 0
    assert load_runtime(packed).metadata["weight_storage"] == "bitplanes2"
    assert packed.stat().st_size < plain.stat().st_size
