"""DNN artifacts: round trip, validation on load, sign thresholds, encoding, reference predictor."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from bnc_deploy.artifacts import ArtifactError, load_artifact, save_artifact
from bnc_deploy.artifacts.container import write_container
from bnc_deploy.artifacts.dnn import DNNArtifact, DNNLayer, accumulator_bound, sign_thresholds
from bnc_deploy.artifacts.encoding import encode_integer, fit_standardized_table, image_layout, pixel_index
from bnc_deploy.reference.dnn import DNNReferencePredictor, conv3x3_same, max_pool2
from bnc_deploy.testing import random_dnn_artifact
from bnc_deploy.validation import InputError

VARIANTS = [
    dict(architecture=a, activation=act, encoding=e, bits=b, batch_norm=bn)
    for a in ("fc", "cnn")
    for act in ("sign", "relu")
    for e in ("standardized", "onehot")
    for b, bn in ((1, True), (2, False), (7, True), (8, True))
]


@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_round_trip_keeps_every_prediction(tmp_path, kw):
    art = random_dnn_artifact(3, **kw)
    path = tmp_path / "m.bnc"
    save_artifact(art, path)
    back = load_artifact(path)
    assert isinstance(back, DNNArtifact)
    assert back.size_bits == art.size_bits and back.n_ops == art.n_ops
    for a, b in zip(art.layers, back.layers):
        assert a.describe() == b.describe()
        np.testing.assert_array_equal(a.codes, b.codes)
    x = art.check_x
    np.testing.assert_array_equal(DNNReferencePredictor(art).logits(x), DNNReferencePredictor(back).logits(x))


def test_costs_follow_the_papers_accounting():
    art = random_dnn_artifact(
        0, architecture="fc", hidden=(8, 6), n_features=7, bits=3, batch_norm=True, encoding="standardized", n_classes=3
    )
    weights = 7 * 8 + 8 * 6 + 6 * 3
    assert art.n_parameters == weights
    assert art.size_bits == 3 * weights + 64 * (8 + 6) + 32 * 3
    assert art.n_ops == weights + (8 + 6) + 3
    cnn = random_dnn_artifact(
        0,
        architecture="cnn",
        hidden=(4, 8),
        image_shape=(6, 5),
        bits=2,
        batch_norm=False,
        encoding="standardized",
        n_classes=3,
    )
    conv1, conv2, dense = 9 * 1 * 4, 9 * 4 * 8, 8 * (6 // 2 // 2) * (5 // 2 // 2) * 3
    assert cnn.size_bits == 2 * (conv1 + conv2 + dense) + 32 * 3
    assert cnn.n_ops == conv1 * 30 + conv2 * (3 * 2) + dense + 3


def _bad(art, mutate):
    mutate(art)
    art.validate()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda a: setattr(a.layers[0], "codes", (a.layers[0].codes * 0 + 2).astype(np.int8)), "not an odd integer"),
        (lambda a: setattr(a.layers[0], "codes", a.layers[0].codes.astype(np.int16)), "must be int8"),
        (lambda a: setattr(a.layers[1], "codes", a.layers[1].codes[:, :-1]), "expected"),
        (lambda a: setattr(a, "weight_bits", 9), "unsupported weight bit width"),
        (lambda a: setattr(a.layers[0], "shift", None), "both scale and shift"),
        (lambda a: setattr(a.layers[-1], "bias", None), "output layer"),
        (lambda a: setattr(a.layers[0], "scale", np.full(a.layers[0].n_out, np.nan, np.float32)), "non-finite"),
        (lambda a: setattr(a, "input_scale", 0.3), "power of two"),
        (lambda a: setattr(a, "input_codes", np.full_like(a.input_codes, 100)), "-63..63"),
        (lambda a: setattr(a.layers[0], "activation", "tanh"), "activation"),
    ],
)
def test_inconsistent_artifacts_are_refused(mutate, message):
    art = random_dnn_artifact(1, architecture="fc", bits=2)
    with pytest.raises(ArtifactError, match=message):
        _bad(art, mutate)


def test_cnn_image_shape_must_hold_the_features():
    art = random_dnn_artifact(1, architecture="cnn", image_shape=(4, 5))
    with pytest.raises(ArtifactError, match="image_shape"):
        _bad(art, lambda a: setattr(a, "image_shape", (5, 5)))


def test_header_that_disagrees_with_its_arrays_is_refused(tmp_path):
    art = random_dnn_artifact(2)
    header, arrays = art.to_header_and_arrays()
    header["layers"][0]["batch_norm"] = False  # arrays still hold the scale and shift
    path = tmp_path / "m.bnc"
    write_container(path, header, arrays)  # a consistent hash: only the content is wrong
    with pytest.raises(ArtifactError, match=r"m\.bnc: layer 0"):
        load_artifact(path)


def test_future_version_and_tampering_are_refused(tmp_path):
    art = random_dnn_artifact(2)
    path = tmp_path / "m.bnc"
    save_artifact(art, path)
    with zipfile.ZipFile(path) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    header = json.loads(entries["header.json"])
    header["format_version"] = 99
    bumped = tmp_path / "future.bnc"
    with zipfile.ZipFile(bumped, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, json.dumps(header) if name == "header.json" else data)
    with pytest.raises(ArtifactError, match="newer bnc-deploy"):
        load_artifact(bumped)


# -- sign thresholds -------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("architecture", ["fc", "cnn"])
def test_sign_thresholds_equal_the_float64_rule_on_every_reachable_accumulator(seed, architecture):
    art = random_dnn_artifact(seed, architecture=architecture, activation="sign", bits=1 + seed % 7)
    for k in range(len(art.layers) - 1):
        layer = art.layers[k]
        direction, threshold = sign_thresholds(art, k)
        bound = accumulator_bound(art, k)
        unit = art.weight_scale * art.layer_input_scales()[k]
        for u in range(layer.n_out):
            acc = np.arange(-bound[u], bound[u] + 1)
            rule = layer.scale[u] * (unit * acc.astype(np.float64)) + layer.shift[u] >= 0.0
            np.testing.assert_array_equal(direction[u] * acc >= threshold[u], rule)


def test_sign_without_batch_norm_fires_at_zero_and_above():
    art = random_dnn_artifact(0, activation="sign", batch_norm=False)
    direction, threshold = sign_thresholds(art, 0)
    assert np.all(direction == 1) and np.all(threshold == 0)


def test_sign_reference_matches_a_direct_float64_computation():
    """The integer machine equals the artifact's written-out definition (sign(0) = +1).

    The pre-activation is formed as (exact integer sum) x (unit), not as a float sum of
    ``code / 7`` terms: the random factory produces units with shift 0 and rows whose sum is
    exactly 0, where a float sum lands at -4e-17 and flips the sign (seeds 0 and 2).
    """
    for seed in range(4):
        art = random_dnn_artifact(seed, architecture="fc", activation="sign", bits=3, n_check=200)
        a = art.encode_integer(art.check_x)
        for k, layer in enumerate(art.layers[:-1]):
            unit = art.weight_scale * art.layer_input_scales()[k]
            z = (a @ layer.codes.astype(np.int64).T).astype(np.float64) * unit
            y = z * layer.scale.astype(np.float64) + layer.shift.astype(np.float64)
            a = np.where(y >= 0, 1, -1)
        out = art.layers[-1]
        logits = a @ (out.codes.astype(np.float64) * art.weight_scale).T + out.bias
        ref = DNNReferencePredictor(art)
        np.testing.assert_allclose(ref.logits(art.check_x), logits, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(ref.predict(art.check_x), np.argmax(logits, axis=1))


# -- encoding --------------------------------------------------------------------------------------
def test_column_major_pixels():
    index = pixel_index((3, 2), "column-major")
    assert index.tolist() == [[0, 3], [1, 4], [2, 5]]  # feature j is row j % 3, column j // 3
    assert pixel_index((3, 2), "row-major").tolist() == [[0, 1], [2, 3], [4, 5]]


def test_onehot_encoding():
    cards = np.array([2, 3, 1])
    x = np.array([[1, 2, 0], [0, 0, 0]])
    fc = encode_integer(x, architecture="fc", encoding="onehot", cardinalities=cards)
    assert fc.tolist() == [[0, 1, 0, 0, 1, 1], [1, 0, 1, 0, 0, 1]]


def test_standardized_table():
    x = np.array([[0, 1], [1, 1], [2, 1], [1, 1]])
    table = fit_standardized_table(x, np.array([3, 2]))
    scale = table["input_scale"]
    mean, std = x[:, 0].mean(), x[:, 0].std()
    expected = np.round((np.arange(3) - mean) / std / scale)
    np.testing.assert_array_equal(table["input_codes"][0], expected)
    assert np.all(table["input_codes"][1] == 0)  # constant feature -> 0
    assert np.abs(table["input_codes"]).max() <= 63
    assert scale == 2.0 ** -np.floor(np.log2(63 / np.abs((np.arange(3) - mean) / std).max()))


def test_image_layout_errors():
    assert image_layout("usps", 256) == ((16, 16), "column-major")
    with pytest.raises(ValueError, match="not a known image dataset"):
        image_layout("letter", 16)
    with pytest.raises(ValueError, match="does not hold"):
        image_layout("x", 10, (3, 3))


def test_conv_and_pool_helpers():
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, size=(2, 3, 5, 4))
    w = rng.integers(-3, 4, size=(4, 3, 3, 3))
    out = conv3x3_same(a, w)
    padded = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, o, r, c = 1, 2, 4, 0
    assert out[n, o, r, c] == np.sum(padded[n, :, r : r + 3, c : c + 3] * w[o])
    pooled = max_pool2(out)
    assert pooled.shape == (2, 4, 2, 2)
    assert pooled[1, 3, 1, 1] == out[1, 3, 2:4, 2:4].max()


def test_reference_rejects_out_of_range_codes():
    art = random_dnn_artifact(0)
    x = art.check_x.copy()
    x[3, 2] = art.cardinalities[2]
    with pytest.raises(InputError, match="feature 2"):
        DNNReferencePredictor(art).predict(x)


def test_dnn_layer_describe_round_trip():
    layer = DNNLayer("dense", np.array([[1, -1]], dtype=np.int8), bias=np.zeros(1, np.float32))
    assert layer.describe() == {
        "type": "dense",
        "in": 2,
        "out": 1,
        "batch_norm": False,
        "bias": True,
        "activation": None,
        "pool": False,
    }
