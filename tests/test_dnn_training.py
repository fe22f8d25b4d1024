"""Training DNN baselines on small synthetic data, and ``bnc-train --model fc|cnn``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from support import make_synthetic_dataset

from bnc_deploy.artifacts import DNNArtifact, load_artifact
from bnc_deploy.cli.train import main
from bnc_deploy.quantizers import UnsupportedBitWidth
from bnc_deploy.reference.dnn import DNNReferencePredictor
from bnc_deploy.train.dnn import DNNConfig, input_spec, predict_torch, train_dnn


def _image_dataset(seed=0):
    """4x4 "images" (16 column-major features) from the synthetic generator."""
    ds = make_synthetic_dataset(
        n_train=240, n_test=120, cardinalities=(3,) * 16, n_classes=3, seed=seed, name="tiny-images"
    )
    return ds


@pytest.mark.parametrize("activation", ["relu", "sign"])
@pytest.mark.parametrize("one_hot", [False, True])
def test_fc_trains_and_the_artifact_predicts_what_torch_predicts(activation, one_hot):
    ds = make_synthetic_dataset()
    config = DNNConfig(
        "fc",
        layers=3,
        weight_bits=2,
        activation=activation,
        batch_norm=True,
        one_hot=one_hot,
        hidden=[16],
        epochs=15,
        lr=3e-2,
        progress=False,
        batch_size=50,
    )
    result = train_dnn(ds, config)
    art = result.artifact
    assert isinstance(art, DNNArtifact) and art.hidden_widths == [16, 16]
    assert art.input_encoding == ("onehot" if one_hot else "standardized")
    assert art.metadata["torch_reference_agreement"] >= 0.99
    if activation == "sign":
        # integer thresholds vs float batch norm: identical unless a pre-activation sits within
        # float rounding of a threshold, which does not happen on this data
        assert art.metadata["torch_reference_agreement"] == 1.0
    assert art.metadata["errors"]["test"] < 0.5  # chance is 2/3: it learned something
    assert len(result.history["test_error"]) == 15
    ref = DNNReferencePredictor(art)
    assert art.metadata["errors"]["test"] == pytest.approx(np.mean(ref.predict(ds.x_test) != ds.y_test))


@pytest.mark.parametrize("activation", ["relu", "sign"])
def test_cnn_trains_on_images_column_major(activation):
    ds = _image_dataset()
    config = DNNConfig(
        "cnn",
        layers=2,
        weight_bits=3,
        activation=activation,
        batch_norm=True,
        hidden=[3],
        epochs=4,
        lr=3e-2,
        progress=False,
        image_shape=(4, 4),
        pixel_order="column-major",
        batch_size=40,
    )
    art = train_dnn(ds, config).artifact
    assert art.hidden_widths == [3, 6] and art.image_shape == (4, 4) and art.pixel_order == "column-major"
    assert art.metadata["torch_reference_agreement"] >= 0.99


def test_torch_and_reference_see_the_same_pixels():
    """A CNN built by hand: the torch model on encoded inputs and the reference agree exactly."""
    ds = _image_dataset(seed=1)
    config = DNNConfig(
        "cnn",
        layers=1,
        weight_bits=2,
        activation="sign",
        batch_norm=False,
        hidden=[2],
        epochs=0,
        progress=False,
        image_shape=(4, 4),
        pixel_order="column-major",
    )
    result = train_dnn(ds, config)
    spec = input_spec(ds, config)
    from bnc_deploy.train.dnn import build_model

    torch.manual_seed(config.seed)
    model = build_model(config, spec, ds.n_classes, [2])
    labels = predict_torch(model, spec.encode(ds.x_test))
    np.testing.assert_array_equal(labels, DNNReferencePredictor(result.artifact).predict(ds.x_test))


def test_training_is_reproducible():
    ds = make_synthetic_dataset()
    config = dict(
        architecture="fc",
        layers=2,
        weight_bits=2,
        activation="sign",
        batch_norm=True,
        hidden=[8],
        epochs=3,
        progress=False,
    )
    a = train_dnn(ds, DNNConfig(**config)).artifact
    b = train_dnn(ds, DNNConfig(**config)).artifact
    for la, lb in zip(a.layers, b.layers):
        np.testing.assert_array_equal(la.codes, lb.codes)
    assert a.metadata["history"]["test_error"] == b.metadata["history"]["test_error"]


def test_budget_matching_is_recorded():
    ds = make_synthetic_dataset()
    art = train_dnn(ds, DNNConfig("fc", layers=2, weight_bits=1, match_bits=2000, epochs=0, progress=False)).artifact
    sizing = art.metadata["sizing"]
    assert sizing["target_kind"] == "bits" and sizing["target"] == 2000
    assert sizing["achieved_bits"] == art.size_bits
    # H = (T - 32C) / (D + C) = (2000 - 96) / 9 = 211.6 -> 212
    assert art.hidden_widths == [212]


def test_learning_rate_schedule_decays_to_lr_times_1e_minus_4():
    rates = DNNConfig(hidden=[4], epochs=5, lr=3e-2).learning_rates()
    assert rates[0] == pytest.approx(3e-2) and rates[-1] == pytest.approx(3e-6)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(layers=6, hidden=[4]), ValueError, "2..5"),
        (dict(architecture="cnn", layers=3, hidden=[4]), ValueError, "1..2"),
        (dict(weight_bits=0, hidden=[4]), UnsupportedBitWidth, "B=0"),
        (dict(hidden=[4], match_bits=100), ValueError, "exactly one"),
        (dict(), ValueError, "exactly one"),
        (dict(activation="tanh", hidden=[4]), ValueError, "activation"),
    ],
)
def test_bad_configurations(kwargs, error, message):
    with pytest.raises(error, match=message):
        DNNConfig(**kwargs).validate()


# -- CLI -----------------------------------------------------------------------------------------
def test_cli_fc_json_contract(tmp_path, capsys):
    out = tmp_path / "fc.bnc"
    assert (
        main(
            [
                "--data",
                "digits",
                "--model",
                "fc",
                "--layers",
                "3",
                "--weight-bits",
                "2",
                "--batch-norm",
                "--match-bits",
                "8000",
                "--epochs",
                "2",
                "--lr",
                "3e-2",
                "-o",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    for key in (
        "test_error",
        "n_parameters",
        "size_bits",
        "n_ops",
        "model",
        "achieved_bits",
        "achieved_ops",
        "target",
        "hidden_widths",
        "weight_bits",
        "activation",
    ):
        assert key in r
    assert r["target"] == 8000 and r["target_kind"] == "bits" and r["structure"] == "fc"
    art = load_artifact(out)
    assert art.size_bits == r["size_bits"] and art.hidden_widths == r["hidden_widths"]


def test_cli_cnn_human_summary(tmp_path, capsys):
    assert (
        main(
            [
                "--data",
                "digits",
                "--model",
                "cnn",
                "--layers",
                "1",
                "--activation",
                "sign",
                "--hidden",
                "2",
                "--epochs",
                "1",
                "-o",
                str(tmp_path / "c.bnc"),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "trained CNN (channels 2" in text and "sign" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "fc", "--bits", "3", "--hidden", "4"], "use --weight-bits"),
        (["--model", "nb", "--one-hot"], "only to --model fc or cnn"),
        (["--model", "fc", "--weight-bits", "9", "--hidden", "4"], "B=9"),
        (["--model", "cnn", "--data", "letter", "--hidden", "4"], "not a known image dataset"),
        (["--model", "fc", "--hidden", "4,x"], "comma-separated"),
        (["--model", "fc"], "exactly one"),
    ],
)
def test_cli_bad_dnn_flags(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main([*args, "--epochs", "1", "-o", str(tmp_path / "m.bnc")])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
