"""Short DNN runs on usps: budget matching, training, ONNX + TFLite exports checked on every test row.

Skipped with a reason when ../shared is absent. The long runs (100+ epochs, the lr grid) are
``benchmarks/dnn_vs_bnc_budget.py``.
"""

import json

import numpy as np
import pytest

from bnc_deploy.artifacts import load_artifact
from bnc_deploy.cli.export import main as export_main
from bnc_deploy.cli.train import main as train_main

pytestmark = pytest.mark.shared_data

#: The 3-bit naive Bayes on usps: 10 * (1 + 864 values) = 8,650 parameters x 3 bits.
NB3_BITS = 8650 * 3


def _train(capsys, path, *args):
    assert train_main(["--data", "usps", "--json", "--quiet", "-o", str(path), *args]) == 0
    return json.loads(capsys.readouterr().out)


def _export(capsys, model, fmt, out):
    code = export_main([str(model), "--format", fmt, "--data", "usps", "-o", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == (1 if report["exact_expected"] and not report["exact"] else 0)
    return report


def test_usps_budget_matching(tmp_path, capsys, shared_datasets, monkeypatch):
    monkeypatch.setenv("BNC_DEPLOY_DATA_DIR", str(shared_datasets))
    fc = _train(
        capsys,
        tmp_path / "fc.bnc",
        "--model",
        "fc",
        "--layers",
        "3",
        "--weight-bits",
        "2",
        "--batch-norm",
        "--match-bits",
        str(NB3_BITS),
        "--epochs",
        "0",
    )
    assert fc["hidden_widths"] == [35, 35]  # 2H^2 + 660H - 25,630 = 0 -> 35.1
    assert fc["achieved_bits"] == 2 * (256 * 35 + 35 * 35 + 35 * 10) + 64 * 70 + 320
    cnn = _train(
        capsys,
        tmp_path / "cnn.bnc",
        "--model",
        "cnn",
        "--layers",
        "2",
        "--weight-bits",
        "2",
        "--batch-norm",
        "--match-bits",
        str(NB3_BITS),
        "--epochs",
        "0",
    )
    assert cnn["hidden_widths"] == [17, 35]  # 36 C^2 + 850 C + 320 = 25,950 -> 17.37; 2 x 17.37 -> 35
    assert abs(cnn["achieved_bits"] - NB3_BITS) / NB3_BITS < 0.01


@pytest.mark.parametrize("bits", [1, 2, 7])
def test_usps_sign_fc_exports_exactly_on_every_test_row(tmp_path, capsys, shared_datasets, monkeypatch, bits):
    monkeypatch.setenv("BNC_DEPLOY_DATA_DIR", str(shared_datasets))
    model = tmp_path / "fc.bnc"
    trained = _train(
        capsys,
        model,
        "--model",
        "fc",
        "--activation",
        "sign",
        "--batch-norm",
        "--weight-bits",
        str(bits),
        "--hidden",
        "32",
        "--epochs",
        "2",
        "--lr",
        "3e-2",
    )
    assert trained["test_error"] < 0.5
    for fmt in ("onnx", "tflite"):
        r = _export(capsys, model, fmt, tmp_path / f"fc.{fmt}")
        assert r["n_rows"] == 3660 and r["exact_expected"]
        assert r["label_mismatches"] == 0 and r["logits_identical"], (fmt, r)


def test_usps_relu_cnn_int8_tflite_agrees(tmp_path, capsys, shared_datasets, monkeypatch):
    monkeypatch.setenv("BNC_DEPLOY_DATA_DIR", str(shared_datasets))
    model = tmp_path / "cnn.bnc"
    trained = _train(
        capsys,
        model,
        "--model",
        "cnn",
        "--layers",
        "1",
        "--batch-norm",
        "--weight-bits",
        "2",
        "--hidden",
        "8",
        "--epochs",
        "2",
        "--lr",
        "3e-2",
    )
    art = load_artifact(model)
    assert art.image_shape == (16, 16) and art.pixel_order == "column-major"
    assert trained["test_error"] < 0.3
    onnx = _export(capsys, model, "onnx", tmp_path / "cnn.onnx")
    assert onnx["agreement"] >= 0.999
    tflite = _export(capsys, model, "tflite", tmp_path / "cnn.tflite")
    # Well-trained nets reach 99.84-99.95 % (closing note); two epochs leave more near-ties.
    assert tflite["agreement"] >= 0.99 and abs(tflite["accuracy_change"]) < 0.01
    assert np.isfinite(tflite["max_abs_logit_diff"])


def test_mnist_cnn_image_path_exports_exactly(tmp_path, capsys, shared_datasets, monkeypatch):
    """mnist (14x14 after the loader's bicubic resize, column-major like the paper's MATLAB files):
    an untrained sign CNN, so only the data path, the image reshape (the column-major pixel
    permutation included) and the exports are exercised, on every one of the 10,000 test rows."""
    monkeypatch.setenv("BNC_DEPLOY_DATA_DIR", str(shared_datasets))
    model = tmp_path / "cnn.bnc"
    assert (
        train_main(
            [
                "--data",
                "mnist",
                "--json",
                "--quiet",
                "-o",
                str(model),
                "--model",
                "cnn",
                "--layers",
                "2",
                "--activation",
                "sign",
                "--batch-norm",
                "--weight-bits",
                "3",
                "--hidden",
                "4",
                "--epochs",
                "0",
            ]
        )
        == 0
    )
    trained = json.loads(capsys.readouterr().out)
    art = load_artifact(model)
    assert art.image_shape == (14, 14) and art.pixel_order == "column-major" and trained["hidden_widths"] == [4, 8]
    for fmt in ("onnx", "tflite"):
        code = export_main(
            [str(model), "--format", fmt, "--data", "mnist", "-o", str(tmp_path / f"cnn.{fmt}"), "--json"]
        )
        r = json.loads(capsys.readouterr().out)
        assert code == 0 and r["exact"] and r["n_rows"] == 10_000, (fmt, r)  # MNIST's standard test set
