"""Budget-matched DNN sizing: hand-computed cases, the polynomials against dnn_costs, rounding and errors."""

import json
import math
from fractions import Fraction

import pytest

from bnc_deploy.costs import Conv2D, Dense, Free, dnn_costs
from bnc_deploy.train.sizing import (
    CostPolynomial,
    SizingResult,
    cnn_costs,
    cnn_layers,
    cnn_polynomial,
    fc_costs,
    fc_layers,
    fc_polynomial,
    match_cnn,
    match_fc,
)


# -- hand-computed cases ----------------------------------------------------------------------------
def test_fc_mnist_one_bit_two_layers_by_hand():
    # D = 196, C = 10, B = 1, L = 2, no BN: H = (T - 32 C) / ((D + C) B) = (25800 - 320) / 206 = 123.69 -> 124.
    r = match_fc(196, 10, n_layers=2, bits=1, batch_norm=False, target_bits=25_800)
    assert r.widths == (124,)
    assert r.real_solution == pytest.approx(25_480 / 206)
    # 124 * 206 + 320 = 25864 bits; ops = 124 * 206 + 10 = 25554.
    assert (r.achieved_bits, r.achieved_ops) == (25_864, 25_554)
    assert r.absolute_error == 64 and r.relative_error == pytest.approx(64 / 25_800)
    assert r.architecture == "fc" and r.target_kind == "bits" and r.target == 25_800 and r.input_shape == (196,)


def test_fc_usps_two_bits_three_layers_batch_norm_by_hand():
    # D = 256, C = 10, B = 2, L = 3, BN, T = 8650 * 3 = 25950:
    # B (L-2) H^2 + (B (D+C) + (L-1) 64) H + 32 C = 2 H^2 + (532 + 128) H + 320 = 25950
    # -> 2 H^2 + 660 H - 25630 = 0 -> H = (-660 + sqrt(660^2 + 8 * 25630)) / 4 = (-660 + 800.40) / 4 = 35.10 -> 35.
    r = match_fc(256, 10, n_layers=3, bits=2, batch_norm=True, target_bits=25_950)
    assert r.widths == (35, 35)
    assert r.real_solution == pytest.approx((-660 + math.sqrt(660**2 + 8 * 25_630)) / 4)
    assert r.real_solution == pytest.approx(35.09997, abs=1e-5)
    # 2 * 35^2 + 660 * 35 + 320 = 2450 + 23100 + 320 = 25870.
    assert r.achieved_bits == 25_870


def test_cnn_usps_two_convs_two_bits_batch_norm_by_hand():
    # 16x16, E = 1, C = 10, B = 2, BN, C2 = 2 C1; S1 = 8, S2 = 4:
    # 9 E C1 B + 9 C1 C2 B + C2 S2^2 C B + 64 (C1 + C2) + 32 C
    #   = 18 C1 + 36 C1^2 + 640 C1 + 192 C1 + 320 = 36 C1^2 + 850 C1 + 320 = 25950
    # -> C1 = (-850 + sqrt(850^2 + 4 * 36 * 25630)) / 72 = (-850 + 2100.77) / 72 = 17.37 -> 17,
    #    C2 = round(2 * 17.37) = round(34.74) = 35 (rounded separately: not 2 * 17 = 34).
    r = match_cnn((16, 16), 1, 10, n_conv=2, bits=2, batch_norm=True, target_bits=25_950)
    assert r.widths == (17, 35)
    assert r.real_solution == pytest.approx((-850 + math.sqrt(850**2 + 144 * 25_630)) / 72)
    assert r.real_solution == pytest.approx(17.3718, abs=1e-4)
    # Rounded architecture: 9*1*17*2 + 9*17*35*2 + 35*16*10*2 + 64*(17+35) + 320
    #   = 306 + 10710 + 11200 + 3328 + 320 = 25864.
    assert r.achieved_bits == 25_864
    assert r.input_shape == (1, 16, 16) and r.architecture == "cnn"


def test_fc_ops_by_hand():
    # ops = D H + H C + C (L = 2, no BN): 4 x (D C = 1960) = 7840 -> H = (7840 - 10) / 206 = 38.01 -> 38.
    r = match_fc(196, 10, n_layers=2, bits=1, batch_norm=False, target_ops=7_840)
    assert r.widths == (38,) and r.target_kind == "ops"
    assert r.achieved_ops == 38 * 206 + 10 == 7_838


def test_fc_ops_quadratic_by_hand():
    # L = 4, BN, D = 16, C = 26: ops = 2 H^2 + (16 + 26 + 3) H + 26 = 2 H^2 + 45 H + 26 = 5000
    # -> H = (-45 + sqrt(2025 + 8 * 4974)) / 4 = (-45 + 204.45) / 4 = 39.86 -> 40.
    r = match_fc(16, 26, n_layers=4, bits=3, batch_norm=True, target_ops=5_000)
    assert r.widths == (40, 40, 40)
    assert r.real_solution == pytest.approx((-45 + math.sqrt(2025 + 8 * 4974)) / 4)
    assert r.achieved_ops == 2 * 1600 + 45 * 40 + 26 == 5_026


def test_cnn_ops_one_conv_by_hand():
    # 16x16, E = 1, 1 conv with BN, C = 10: ops = (9*256 + 256 + 64*10) C1 + 10 = 3200 C1 + 10.
    # Target 64 x (D C = 2560) = 163840 -> C1 = 163830 / 3200 = 51.197 -> 51.
    r = match_cnn((16, 16), 1, 10, n_conv=1, bits=2, batch_norm=True, target_ops=163_840)
    assert r.widths == (51,) and r.achieved_ops == 3200 * 51 + 10 == 163_210


def test_cnn_ops_two_convs_by_hand():
    # ops = 9*256 C1 + 256 C1 + 9 C1 (2 C1) 64 + 64 (2 C1) + (2 C1) 16 * 10 + 10
    #     = 1152 C1^2 + (2304 + 256 + 128 + 320) C1 + 10 = 1152 C1^2 + 3008 C1 + 10 = 40960
    # -> C1 = (-3008 + sqrt(3008^2 + 4 * 1152 * 40950)) / 2304 = 4.798 -> 5, C2 = round(9.596) = 10.
    r = match_cnn((16, 16), 1, 10, n_conv=2, bits=2, batch_norm=True, target_ops=40_960)
    assert r.widths == (5, 10)
    assert r.real_solution == pytest.approx((-3008 + math.sqrt(3008**2 + 4 * 1152 * 40_950)) / 2304)
    assert r.achieved_ops == 1152 * 25 + 3008 * 5 + 10 == 43_850


def test_cnn_odd_image_one_hot_channels():
    # 13x11 image, E = 4 one-hot channels: S1 = 6x5, S2 = 3x2 (floor).
    layers = cnn_layers((13, 11), 4, [3, 6], 5, batch_norm=False)
    convs = [layer for layer in layers if isinstance(layer, Conv2D)]
    assert [c.out_hw for c in convs] == [(13, 11), (6, 5)]
    assert layers[-1] == Dense(6 * 3 * 2, 5, batch_norm=False, bias=True)
    report = dnn_costs(layers, 4)
    assert report.size_bits == 4 * (9 * 4 * 3 + 9 * 3 * 6 + 36 * 5) + 32 * 5
    assert report.n_ops == 9 * 4 * 3 * 143 + 9 * 3 * 6 * 30 + 36 * 5 + 5


# -- the polynomials are the cost model -------------------------------------------------------------
FC_CASES = [
    (d, c, L, b, bn)
    for d, c in ((196, 10), (16, 26), (36, 6))
    for L in (2, 3, 4, 5)
    for b in (1, 2, 8, 32)
    for bn in (False, True)
]


@pytest.mark.parametrize("d,c,L,b,bn", FC_CASES)
def test_fc_polynomial_equals_dnn_costs(d, c, L, b, bn):
    bits_poly, ops_poly = (fc_polynomial(d, c, L, b, bn, kind) for kind in ("bits", "ops"))
    for h in (1, 2, 7, 64, 301):
        report = fc_costs(d, [h] * (L - 1), c, b, bn)
        assert bits_poly(h) == report.size_bits and ops_poly(h) == report.n_ops


CNN_CASES = [
    (hw, e, c, n, b, bn)
    for hw in ((16, 16), (14, 14), (13, 11), (4, 5))
    for e in (1, 3)
    for c in (10, 2)
    for n in (1, 2)
    for b in (1, 3, 8)
    for bn in (False, True)
]


@pytest.mark.parametrize("hw,e,c,n,b,bn", CNN_CASES)
def test_cnn_polynomial_equals_dnn_costs(hw, e, c, n, b, bn):
    bits_poly, ops_poly = (cnn_polynomial(hw, e, c, n, b, bn, kind) for kind in ("bits", "ops"))
    for c1 in (1, 2, 5, 33):
        channels = [c1] if n == 1 else [c1, 2 * c1]
        report = cnn_costs(hw, e, channels, c, b, bn)
        assert bits_poly(c1) == report.size_bits and ops_poly(c1) == report.n_ops


@pytest.mark.parametrize("case", range(40))
def test_real_solution_reproduces_the_target(case):
    """The closed form solves the polynomial: cost(real_solution) == target (to float precision)."""
    fc = case % 2 == 0
    d, c, L, b, bn = FC_CASES[(case * 7) % len(FC_CASES)]
    hw, e, cc, n, bb, bbn = CNN_CASES[(case * 11) % len(CNN_CASES)]
    for kind in ("bits", "ops"):
        poly = fc_polynomial(d, c, L, b, bn, kind) if fc else cnn_polynomial(hw, e, cc, n, bb, bbn, kind)
        target = poly(50) + 17 * case + 3  # well inside the admissible range, not on a grid point
        x = poly.solve(target)
        assert poly(x) == pytest.approx(target, rel=1e-12)


@pytest.mark.parametrize("d,c,L,b,bn", FC_CASES[::5])
def test_match_fc_achieved_costs_come_from_dnn_costs(d, c, L, b, bn):
    for kind in ("bits", "ops"):
        target = fc_polynomial(d, c, L, b, bn, kind)(23) + 5
        r = match_fc(d, c, L, b, bn, **{f"target_{kind}": target})
        report = dnn_costs(fc_layers(d, list(r.widths), c, bn), b)
        assert (r.achieved_bits, r.achieved_ops) == (report.size_bits, report.n_ops)
        assert r.costs().size_bits == report.size_bits and r.layers() == fc_layers(d, list(r.widths), c, bn)
        assert r.widths == (round(r.real_solution),) * (L - 1)
        assert r.achieved == (r.achieved_bits if kind == "bits" else r.achieved_ops)
        assert r.absolute_error == r.achieved - target


@pytest.mark.parametrize("hw,e,c,n,b,bn", CNN_CASES[::7])
def test_match_cnn_achieved_costs_come_from_dnn_costs(hw, e, c, n, b, bn):
    for kind in ("bits", "ops"):
        target = cnn_polynomial(hw, e, c, n, b, bn, kind)(9) + 1
        r = match_cnn(hw, e, c, n, b, bn, **{f"target_{kind}": target})
        report = dnn_costs(cnn_layers(hw, e, list(r.widths), c, bn), b)
        assert (r.achieved_bits, r.achieved_ops) == (report.size_bits, report.n_ops)
        assert r.widths[0] == math.floor(r.real_solution + 0.5)
        if n == 2:
            assert r.widths[1] == math.floor(2 * r.real_solution + 0.5)


# -- rounding ---------------------------------------------------------------------------------------
def test_rounding_is_to_nearest_with_ties_up_decided_exactly():
    # FC, L = 2, D + C = 4, B = 1, no BN: bits = 4 H + 32 C with C = 2 -> bits = 4 H + 64.
    # Target 4 * 10.5 + 64 = 106 puts the root exactly on the tie H = 10.5 -> 11 (ties up).
    assert match_fc(2, 2, 2, 1, False, target_bits=106).widths == (11,)
    assert match_fc(2, 2, 2, 1, False, target_bits=105).widths == (10,)  # 10.25
    assert match_fc(2, 2, 2, 1, False, target_bits=107).widths == (11,)  # 10.75


def test_rounded_root_matches_the_exact_definition():
    poly = CostPolynomial(36, 850, 320)
    for target in range(int(poly(Fraction(1, 2))) + 1, 40_000, 97):
        for factor in (1, 2):
            n = poly.rounded_root(target, factor)
            assert poly(Fraction(2 * n - 1, 2 * factor)) <= target < poly(Fraction(2 * n + 1, 2 * factor))


def test_second_layer_can_round_away_from_twice_the_first():
    # The usps case: C1* = 17.37 -> 17 but 2 C1* = 34.74 -> 35.
    r = match_cnn((16, 16), 1, 10, 2, 2, True, target_bits=25_950)
    assert r.widths[1] != 2 * r.widths[0]


# -- errors -----------------------------------------------------------------------------------------
def test_too_small_budgets_name_the_minimum():
    # FC: bits = 206 H + 320 -> root 1/2 at 423 bits; the 1-unit network costs 526.
    with pytest.raises(ValueError, match=r"smallest admissible budget is 423 bits.*526 bits"):
        match_fc(196, 10, 2, 1, False, target_bits=422)
    assert match_fc(196, 10, 2, 1, False, target_bits=423).widths == (1,)
    with pytest.raises(ValueError, match="too small.*ops"):
        match_cnn((16, 16), 1, 10, 2, 2, True, target_ops=100)
    # Smallest admissible CNN budget: C1* = 1/2 -> C1 = 1, C2 = round(1) = 1.
    poly = cnn_polynomial((16, 16), 1, 10, 2, 2, True, "bits")
    smallest = math.ceil(poly(Fraction(1, 2)))
    assert match_cnn((16, 16), 1, 10, 2, 2, True, target_bits=smallest).widths == (1, 1)
    with pytest.raises(ValueError, match=f"smallest admissible budget is {smallest:,} bits"):
        match_cnn((16, 16), 1, 10, 2, 2, True, target_bits=smallest - 1)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({}, "exactly one"),
        ({"target_bits": 1000, "target_ops": 1000}, "exactly one"),
        ({"target_bits": 0}, "positive"),
        ({"target_bits": -5}, "positive"),
        ({"target_ops": 10.5}, "integer"),
        ({"target_ops": True}, "integer"),
    ],
)
def test_bad_targets(kwargs, message):
    with pytest.raises(ValueError, match=message):
        match_fc(196, 10, 2, 1, False, **kwargs)


def test_bad_architectures():
    with pytest.raises(ValueError, match="n_layers"):
        match_fc(196, 10, 1, 1, False, target_bits=10_000)
    with pytest.raises(ValueError, match="n_conv"):
        match_cnn((16, 16), 1, 10, 3, 2, True, target_bits=10_000)
    with pytest.raises(ValueError, match="too small"):
        match_cnn((3, 16), 1, 10, 2, 2, True, target_bits=10_000)  # 3 -> 1 -> 0 after two poolings
    with pytest.raises(ValueError, match="bits"):
        match_fc(196, 10, 2, 0, False, target_bits=10_000)
    with pytest.raises(ValueError, match="1 or 2"):
        cnn_layers((16, 16), 1, [1, 2, 4], 10, False)
    with pytest.raises(ValueError, match="hidden layer"):
        fc_layers(10, [], 2, False)


# -- layer lists and results ------------------------------------------------------------------------
def test_fc_layer_list_matches_the_paper():
    layers = fc_layers(196, [50, 50], 10, batch_norm=True)
    assert layers == [
        Dense(196, 50, True, False),
        Free("activation"),
        Dense(50, 50, True, False),
        Free("activation"),
        Dense(50, 10, False, True),
    ]
    # No hidden biases even without batch norm.
    assert all(not layer.bias for layer in fc_layers(196, [50], 10, False)[:-1] if isinstance(layer, Dense))


def test_sizing_result_to_dict_is_json():
    r = match_cnn((14, 14), 1, 10, 2, 4, False, target_bits=40_000)
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["widths"] == list(r.widths) and d["input_shape"] == [1, 14, 14] and d["target_kind"] == "bits"
    assert isinstance(r, SizingResult)
    with pytest.raises(AttributeError):
        r.target = 5  # frozen
