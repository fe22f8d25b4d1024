import numpy as np
import pytest
import torch

from bnc_deploy.models.ste import fixed_point_ste
from bnc_deploy.quantizers import FixedPointLogQuantizer, UnsupportedBitWidth


def direct_formula(theta, b_i, b_f):
    """The paper's Eq. 9, written out independently."""
    u = 2.0**b_i - 2.0**-b_f
    return np.clip(np.round(theta * 2.0**b_f) * 2.0**-b_f, -u, 0.0)


ALL_WIDTHS = [(b, i) for b in range(1, 9) for i in range(1, 7)]


@pytest.mark.parametrize("bits,int_bits", ALL_WIDTHS)
def test_levels_count_spacing_and_range(bits, int_bits):
    q = FixedPointLogQuantizer(bits, int_bits)
    levels = q.levels()
    assert levels.shape == (2**bits,)
    assert levels[0] == 0.0
    assert np.allclose(np.diff(levels), -(2.0 ** -(bits - int_bits)))
    assert levels[-1] == -(2.0**int_bits - 2.0 ** -(bits - int_bits))


@pytest.mark.parametrize("bits,int_bits", ALL_WIDTHS)
def test_numpy_and_torch_match_the_formula(bits, int_bits):
    theta = np.linspace(-80.0, 0.5, 4001)
    q = FixedPointLogQuantizer(bits, int_bits)
    expected = direct_formula(theta, int_bits, bits - int_bits)
    assert np.array_equal(q.quantize(theta), expected)
    got = fixed_point_ste(torch.tensor(theta, dtype=torch.float32), q).numpy().astype(np.float64)
    assert np.array_equal(got, direct_formula(theta.astype(np.float32).astype(np.float64), int_bits, bits - int_bits))
    # Codes round-trip and fit the declared width.
    codes = q.to_codes(theta)
    assert codes.dtype == np.uint8 and codes.max() <= 2**bits - 1
    assert np.array_equal(q.from_codes(codes), expected)


def test_negative_fractional_bits_skip_integers():
    q = FixedPointLogQuantizer(total_bits=2, int_bits=4)  # B_F = -2: steps of 4
    assert q.frac_bits == -2
    assert list(q.levels()) == [0.0, -4.0, -8.0, -12.0]
    assert list(q.quantize(np.array([-1.9, -2.1, -5.0, -100.0, 0.3]))) == [0.0, -4.0, -4.0, -12.0, 0.0]


def test_clipping_at_both_ends():
    q = FixedPointLogQuantizer(3, 2)  # step 0.5, U = 3.5
    assert list(q.quantize(np.array([0.7, -0.2, -0.3, -3.6, -1e6]))) == [0.0, 0.0, -0.5, -3.5, -3.5]


def test_straight_through_gradient_is_identity():
    q = FixedPointLogQuantizer(3, 2)
    theta = torch.tensor([-0.3, -1.26, -7.0, 0.2], requires_grad=True)
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0])
    (fixed_point_ste(theta, q) * weights).sum().backward()
    assert torch.equal(theta.grad, weights)  # identity even where the forward clips


def test_forward_is_exactly_on_the_grid():
    # theta + (q - theta).detach() can land one ulp off the grid; the STE must not.
    q = FixedPointLogQuantizer(8, 3)
    theta = -torch.rand(100000) * 8
    out = fixed_point_ste(theta, q).double().numpy()
    assert np.array_equal(out * 2**q.frac_bits, np.round(out * 2**q.frac_bits))


@pytest.mark.parametrize("bits,int_bits", [(0, 1), (9, 3), (4, 0), (4, 7), (2.5, 1), (True, 1)])
def test_unsupported_widths_are_rejected_with_a_clear_error(bits, int_bits):
    with pytest.raises(UnsupportedBitWidth, match="bit|integer"):
        FixedPointLogQuantizer(bits, int_bits)


def test_codes_reject_non_finite_and_out_of_range():
    q = FixedPointLogQuantizer(2, 1)
    with pytest.raises(ValueError, match="non-finite"):
        q.to_codes(np.array([-1.0, np.nan]))
    with pytest.raises(ValueError, match="exceeds"):
        q.from_codes(np.array([4], dtype=np.uint8))
