"""DoReFa weight quantizer (numpy) and the quantization-aware torch layers: levels, codes, exactness, STE."""

import numpy as np
import pytest
import torch

from bnc_deploy.models.dnn import (
    Activation,
    QuantConv2d,
    QuantDense,
    StochasticSign,
    quantize_weights_ste,
    stochastic_sign,
)
from bnc_deploy.quantizers import DoReFaWeightQuantizer, UnsupportedBitWidth, sign_activation

ALL_BITS = list(range(1, 9))


def paper_formula(w, bits):
    """Eqs. 10-11 written out independently (float64): 2 * round(M (clip(w) + 1) / 2) / M - 1."""
    m = 2**bits - 1
    v = (np.clip(w, -1.0, 1.0) + 1.0) / 2.0
    return 2.0 * (np.round(m * v) / m) - 1.0


def tricky_weights(bits, n_random=20000, seed=0):
    """float32 weights: random, neighbours of every decision threshold, ties, tiny and out-of-range values."""
    rng = np.random.default_rng(seed)
    m = 2**bits - 1
    values = [rng.uniform(-1.5, 1.5, n_random).astype(np.float32)]
    # Decision thresholds of B >= 2: (w + 1) / 2 * M = k + 1/2, i.e. w = (2k + 1) / M - 1.
    thresholds = np.array([(2 * k + 1) / m - 1.0 for k in range(m)], dtype=np.float32)
    neighbours = [thresholds]
    for direction in (np.inf, -np.inf):
        x = thresholds.copy()
        for _ in range(4):
            x = np.nextafter(x, np.float32(direction))
            neighbours.append(x.copy())
    values += neighbours
    # w = 0 is an exact tie for every B >= 2 (M / 2 = k + 1/2); so is every |w| < 2**-54 after w + 1.
    tiny = np.array(
        [
            0.0,
            -0.0,
            1e-20,
            -1e-20,
            2.0**-53,
            -(2.0**-53),
            2.0**-54,
            -(2.0**-54),
            1e-45,
            -1e-45,
            2.0**-30,
            -(2.0**-30),
            1.0,
            -1.0,
            1.5,
            -1.5,
            3e38,
            -3e38,
        ],
        dtype=np.float32,
    )
    values.append(tiny)
    return np.concatenate(values)


# -- levels and codes -------------------------------------------------------------------------------
@pytest.mark.parametrize("bits", ALL_BITS)
def test_levels_count_symmetry_range_and_odd_codes(bits):
    q = DoReFaWeightQuantizer(bits)
    levels = q.levels()
    assert levels.dtype == np.float64 and levels.shape == (2**bits,)
    assert np.all(np.diff(levels) > 0)
    assert levels[0] == -1.0 and levels[-1] == 1.0
    assert np.array_equal(levels, -levels[::-1])  # exactly symmetric
    assert 0.0 not in levels
    codes = q.codes()
    assert codes.dtype == q.code_dtype == (np.int8 if bits <= 7 else np.int16)
    assert np.all(codes % 2 != 0) and codes.min() == -q.max_code and codes.max() == q.max_code
    assert q.max_code == 2**bits - 1 and q.scale == 1.0 / (2**bits - 1)
    assert np.allclose(levels, codes * q.scale, rtol=0, atol=1e-15)
    # The levels are what the quantizer produces on a dense grid, and quantizing a level is a no-op.
    grid = np.linspace(-1.2, 1.2, 20001)
    assert set(np.unique(q.quantize(grid))) == set(levels)
    assert np.array_equal(q.quantize(levels), levels)


def test_two_bit_levels_are_exactly_the_thirds():
    assert DoReFaWeightQuantizer(2).levels().tolist() == [-1.0, -1.0 / 3.0, 1.0 / 3.0, 1.0]
    assert DoReFaWeightQuantizer(2).to_codes([-2.0, -0.5, -0.1, 0.0, 0.2, 0.9]).tolist() == [-3, -1, -1, 1, 1, 3]


@pytest.mark.parametrize("bits", range(2, 9))
def test_numpy_matches_the_paper_formula(bits):
    q = DoReFaWeightQuantizer(bits)
    w = tricky_weights(bits).astype(np.float64)
    w = w[np.abs(w) > 2.0**-50]  # at the w = 0 tie the two float expressions agree; checked separately below
    assert np.allclose(q.quantize(w), paper_formula(w, bits), rtol=0, atol=1e-15)
    # The codes are exactly 2k - M with k from the formula.
    k = np.round((2**bits - 1) * (np.clip(w, -1, 1) + 1) / 2)
    assert np.array_equal(q.to_codes(w), 2 * k - (2**bits - 1))


def test_one_bit_is_sign_with_zero_positive():
    q = DoReFaWeightQuantizer(1)
    assert q.levels().tolist() == [-1.0, 1.0] and q.scale == 1.0
    w = np.array([-3.0, -1.0, -1e-30, -0.0, 0.0, 1e-30, 0.4, 7.0])
    assert q.to_codes(w).tolist() == [-1, -1, -1, 1, 1, 1, 1, 1]
    assert q.quantize(w).tolist() == [-1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("bits", ALL_BITS)
def test_zero_maps_to_the_smallest_positive_level(bits):
    q = DoReFaWeightQuantizer(bits)
    assert q.to_codes([0.0]).tolist() == [1]  # an exact tie for B >= 2: half to even rounds up
    assert q.to_codes([-1e-4, 1e-4]).tolist() == [-1, 1]  # 1e-4 < scale / 2 = 1 / 510


@pytest.mark.parametrize("bits", ALL_BITS)
def test_clipping(bits):
    q = DoReFaWeightQuantizer(bits)
    m = 2**bits - 1
    assert q.to_codes([-1e9, -1.0, -1.0001, 1.0, 1.0001, 5.0]).tolist() == [-m, -m, -m, m, m, m]
    assert q.quantize([-7.0, 7.0]).tolist() == [-1.0, 1.0]


def test_codes_round_trip_and_validation():
    q = DoReFaWeightQuantizer(3)
    w = np.random.default_rng(1).normal(size=(4, 5))
    codes = q.to_codes(w)
    assert codes.shape == (4, 5) and codes.dtype == np.int8
    assert np.array_equal(q.from_codes(codes), q.quantize(w))
    assert np.array_equal(q.to_codes(q.from_codes(codes)), codes)
    with pytest.raises(ValueError, match="odd"):
        q.from_codes([1, 2])
    with pytest.raises(ValueError, match="exceeds"):
        q.from_codes([9])
    with pytest.raises(ValueError, match="integers"):
        q.from_codes([1.5])
    with pytest.raises(ValueError, match="non-finite"):
        q.to_codes([np.nan])
    assert DoReFaWeightQuantizer(8).to_codes([1.0, -1.0]).tolist() == [255, -255]


@pytest.mark.parametrize("bad", [0, 9, -1, 2.5, True, "2", None])
def test_unsupported_bit_widths_are_rejected_naming_the_value(bad):
    with pytest.raises(UnsupportedBitWidth) as info:
        DoReFaWeightQuantizer(bad)
    assert repr(bad) in str(info.value) or str(bad) in str(info.value)
    assert "1..8" in str(info.value)
    with pytest.raises(UnsupportedBitWidth):
        quantize_weights_ste(torch.zeros(3), bad)


def test_numpy_integer_bits_are_accepted_and_described():
    q = DoReFaWeightQuantizer(np.int64(4))
    assert q.bits == 4 and type(q.bits) is int
    assert q.describe() == {
        "quantizer": "dorefa_weights",
        "bits": 4,
        "max_code": 15,
        "scale": 1 / 15,
        "n_levels": 16,
        "code_dtype": "int8",
    }
    assert "B=4" in str(q) and "1/15" in str(q)


def test_sign_activation_numpy():
    out = sign_activation(np.array([-2.0, -1e-30, -0.0, 0.0, 1e-30, 3.0]))
    assert out.tolist() == [-1.0, -1.0, 1.0, 1.0, 1.0, 1.0] and out.dtype == np.float64


# -- numpy <-> torch exactness ----------------------------------------------------------------------
def test_torch_and_numpy_round_half_to_even():
    halves = np.arange(-10.5, 11.0, 1.0)
    assert np.array_equal(torch.round(torch.tensor(halves)).numpy(), np.round(halves))
    assert np.round(0.5) == 0.0 and np.round(1.5) == 2.0 and np.round(2.5) == 2.0


@pytest.mark.parametrize("bits", ALL_BITS)
def test_torch_forward_is_bit_identical_to_numpy(bits):
    w = tricky_weights(bits, seed=bits)
    got = quantize_weights_ste(torch.from_numpy(w), bits)
    assert got.dtype == torch.float32
    expected = DoReFaWeightQuantizer(bits).quantize(w.astype(np.float64)).astype(np.float32)
    assert np.array_equal(got.numpy().view(np.uint32), expected.view(np.uint32))  # bit for bit, signs of zero included
    # float64 weights: identical to the float64 numpy result.
    got64 = quantize_weights_ste(torch.from_numpy(w.astype(np.float64)), bits)
    assert np.array_equal(got64.numpy(), DoReFaWeightQuantizer(bits).quantize(w.astype(np.float64)))


@pytest.mark.parametrize("bits", ALL_BITS)
def test_float32_levels_equal_the_float32_division_for_every_code(bits):
    """The documented equivalences of float32(code / M), exhaustively over all codes."""
    q = DoReFaWeightQuantizer(bits)
    codes = q.codes()
    f32 = q.from_codes(codes).astype(np.float32)
    assert np.array_equal(f32, codes.astype(np.float32) / np.float32(q.max_code))
    assert np.array_equal(f32, (codes.astype(np.float64) * q.scale).astype(np.float32))
    assert np.array_equal(quantize_weights_ste(torch.from_numpy(f32), bits).numpy(), f32)  # levels are fixed points


def test_torch_ste_is_the_numpy_quantizer_with_identity_gradient():
    w = torch.tensor([-0.9, -0.2, 0.0, 0.6], requires_grad=True)
    out = quantize_weights_ste(w, 2)
    assert (
        out.detach().numpy().tolist()
        == DoReFaWeightQuantizer(2).quantize(w.detach().numpy()).astype(np.float32).tolist()
    )
    assert out.tolist() == pytest.approx([-1.0, -1 / 3, 1 / 3, 1 / 3])
    out.sum().backward()
    assert torch.equal(w.grad, torch.ones(4))


# -- straight-through gradients ---------------------------------------------------------------------
@pytest.mark.parametrize("bits", [1, 2, 5, 8])
def test_weight_ste_gradient_is_identity_everywhere(bits):
    w = torch.tensor([-3.0, -0.7, -0.1, 0.0, 0.33, 0.99, 2.0], requires_grad=True)
    upstream = torch.arange(1.0, 8.0)
    (quantize_weights_ste(w, bits) * upstream).sum().backward()
    assert torch.equal(w.grad, upstream)  # identity, even where the forward clips


def test_layer_gradient_is_the_clip_derivative():
    layer = QuantDense(3, 1, bits=2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[-1.5, 0.2, 1.0]]))
    layer(torch.ones(1, 3)).sum().backward()
    assert layer.weight.grad.tolist() == [[0.0, 1.0, 1.0]]  # zero outside [-1, 1], boundary included
    layer.clamp_latent_()
    assert layer.weight.tolist() == [[-1.0, pytest.approx(0.2), 1.0]]


def test_sign_gradient_is_the_tanh_derivative_in_both_modes():
    a0 = torch.linspace(-3, 3, 41, dtype=torch.float64)
    upstream = torch.linspace(0.5, 2.0, 41, dtype=torch.float64)
    t = a0.clone().requires_grad_(True)
    (torch.tanh(t) * upstream).sum().backward()
    for training in (True, False):
        a = a0.clone().requires_grad_(True)
        (stochastic_sign(a, training, torch.Generator().manual_seed(0)) * upstream).sum().backward()
        assert torch.allclose(a.grad, t.grad, rtol=0, atol=1e-15)


# -- stochastic sign --------------------------------------------------------------------------------
def test_stochastic_sign_frequencies():
    gen = torch.Generator().manual_seed(1234)
    n = 200_000
    for value, p_plus in ((0.5, 0.75), (0.0, 0.5), (-0.6, 0.2)):
        out = stochastic_sign(torch.full((n,), value), training=True, generator=gen)
        assert set(out.unique().tolist()) <= {-1.0, 1.0}
        # std of the frequency is sqrt(p (1 - p) / n) <= 0.0012: 0.006 is > 5 sigma.
        assert abs(float((out == 1).double().mean()) - p_plus) < 0.006


def test_stochastic_sign_saturates():
    gen = torch.Generator().manual_seed(0)
    a = torch.tensor([1.0, 1.0001, 3.0, 1e6] * 10_000)
    assert bool((stochastic_sign(a, True, gen) == 1).all())
    assert bool((stochastic_sign(-a, True, gen) == -1).all())


def test_stochastic_sign_is_reproducible_with_a_generator():
    a = torch.linspace(-1, 1, 1000)
    first = stochastic_sign(a, True, torch.Generator().manual_seed(7))
    assert torch.equal(first, stochastic_sign(a, True, torch.Generator().manual_seed(7)))


def test_eval_sign_is_deterministic_with_zero_positive():
    a = torch.tensor([-2.0, -1e-30, -0.0, 0.0, 1e-30, 0.3])
    out = stochastic_sign(a, training=False)
    assert out.tolist() == [-1.0, -1.0, 1.0, 1.0, 1.0, 1.0] and out.dtype == torch.float32
    assert np.array_equal(out.numpy(), sign_activation(a.numpy()))
    assert StochasticSign.apply(a, False, None).tolist() == out.tolist()


def test_activation_module():
    a = torch.tensor([-0.5, 0.0, 0.5])
    assert Activation("relu")(a).tolist() == [0.0, 0.0, 0.5]
    sign = Activation("sign", generator=torch.Generator().manual_seed(0))
    sign.eval()
    assert sign(a).tolist() == [-1.0, 1.0, 1.0]
    sign.train()
    many = sign(torch.zeros(10_000))
    assert 0 < float((many == 1).float().mean()) < 1  # stochastic in training mode
    with pytest.raises(ValueError, match="tanh"):
        Activation("tanh")


# -- layers -----------------------------------------------------------------------------------------
def test_quant_dense_forward_codes_and_init():
    torch.manual_seed(0)
    layer = QuantDense(20, 7, bits=3, bias=True)
    assert layer.weight.shape == (7, 20) and layer.bias.shape == (7,) and float(layer.bias.detach().abs().sum()) == 0.0
    limit = (6 / (20 + 7)) ** 0.5  # Glorot uniform
    assert float(layer.weight.detach().abs().max()) <= limit
    codes = layer.weight_codes()
    assert codes.shape == (7, 20) and codes.dtype == np.int8 and np.all(codes % 2 != 0)
    weights = layer.quantizer.from_codes(codes).astype(np.float32)
    assert np.array_equal(layer.quantized_weight().detach().numpy(), weights)
    x = torch.randn(5, 20)
    expected = x @ torch.from_numpy(weights).T + layer.bias
    assert torch.allclose(layer(x), expected, atol=1e-6)
    assert QuantDense(4, 2, bits=1).bias is None


def test_quant_conv2d_same_padding_and_codes():
    torch.manual_seed(0)
    layer = QuantConv2d(2, 5, bits=8)
    assert layer.weight.shape == (5, 2, 3, 3)
    assert float(layer.weight.detach().abs().max()) <= (6 / (9 * 2 + 9 * 5)) ** 0.5
    x = torch.randn(3, 2, 7, 6)
    out = layer(x)
    assert out.shape == (3, 5, 7, 6)
    codes = layer.weight_codes()
    assert codes.dtype == np.int16 and codes.shape == (5, 2, 3, 3)
    weights = torch.from_numpy(layer.quantizer.from_codes(codes).astype(np.float32))
    assert torch.allclose(out, torch.nn.functional.conv2d(x, weights, padding=1), atol=1e-6)
    out.sum().backward()
    assert layer.weight.grad.shape == layer.weight.shape
