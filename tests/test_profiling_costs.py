"""Analytic cost model: the paper's conventions for BNs, the DNN formula, the registry."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bnc_deploy.artifacts.bnc import BNCArtifact
from bnc_deploy.costs import (
    COST_MODELS,
    Conv2D,
    CostReport,
    Dense,
    Free,
    analytic_costs,
    bnc_cost_terms,
    bnc_costs_from_metadata,
    dnn_costs,
    fc_dnn_costs,
    register_cost_model,
)
from bnc_deploy.quantizers import FixedPointLogQuantizer

# letter: 16 features with 146 values in all, 26 classes; usps: 256 features, 864 values, 10 classes.
LETTER_CARDS = [10, 10] + [9] * 14
USPS_CARDS = [4] * 96 + [3] * 160


def artifact(cards, parents, n_classes, bits=None, seed=0) -> BNCArtifact:
    cards, parents = np.asarray(cards), np.asarray(parents)
    rows = int((cards * np.where(parents >= 0, cards[np.maximum(parents, 0)], 1)).sum())
    rng = np.random.default_rng(seed)
    common = dict(
        parents=parents,
        cardinalities=cards,
        class_names=[f"c{k}" for k in range(n_classes)],
        feature_names=[f"f{i}" for i in range(len(cards))],
    )
    if bits is None:
        return BNCArtifact(
            class_logp=-rng.random(n_classes).astype(np.float32),
            table_logp=-rng.random((rows, n_classes)).astype(np.float32),
            **common,
        )
    q = FixedPointLogQuantizer(bits, min(bits, 3))
    return BNCArtifact(
        quantizer=q,
        class_codes=rng.integers(0, q.max_code + 1, n_classes).astype(np.uint8),
        table_codes=rng.integers(0, q.max_code + 1, (rows, n_classes)).astype(np.uint8),
        **common,
    )


def test_letter_nb_at_3_bits_matches_the_paper():
    r = bnc_cost_terms(LETTER_CARDS, [-1] * 16, 26, 3)
    assert (r.n_parameters, r.size_bits, r.n_ops) == (3822, 11466, 416)
    assert r.argmax_comparisons == 25 and r.addressing_ops == 16


def test_usps_nb_matches_the_paper():
    r = bnc_cost_terms(USPS_CARDS, [-1] * 256, 10, 32)
    assert (r.n_parameters, r.n_ops) == (8650, 2560)
    assert r.size_bits == 8650 * 32


def test_tan_counts_parent_rows_and_addressing():
    # f1 has parent f0 (|X_0| = 3): 2 * 3 rows; f2 has parent f1: 4 * 2 rows; f0 alone: 3 rows.
    r = bnc_cost_terms([3, 2, 4], [-1, 0, 1], 5, 4)
    assert r.n_parameters == 5 * (1 + 3 + 6 + 8)
    assert r.size_bits == 4 * r.n_parameters
    assert r.n_ops == 3 * 5  # D * C: the structure does not change the additions
    assert r.addressing_ops == 3 + 2 * 2  # offsets + (multiply, add) per feature with a parent
    labels = [label for label, _, _ in r.lines]
    assert {"size (bits)", "operations", "argmax", "addressing"} <= set(labels)
    text = r.format()
    assert "D x C additions = 3 x 5" in text and "(not in operations)" in text


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([None, 1, 3, 8]), st.booleans())
def test_agrees_with_the_artifact(seed, bits, tan):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 7))
    cards = rng.integers(1, 6, d)
    parents = -np.ones(d, dtype=np.int64)
    if tan:
        for i in range(1, d):
            parents[i] = int(rng.integers(0, i))
    a = artifact(cards, parents, int(rng.integers(2, 6)), bits, seed)
    r = analytic_costs(a)
    assert (r.n_parameters, r.size_bits, r.n_ops) == (a.n_parameters, a.size_bits, a.n_ops)
    assert r.bits_per_parameter == (32 if bits is None else bits)


def test_metadata_costs_equal_artifact_costs():
    a = artifact([3, 2, 4], [-1, 0, 0], 4, bits=5)
    meta = {"cardinalities": [3, 2, 4], "parents": [-1, 0, 0], "class_names": a.class_names, "bits": 5}
    assert bnc_costs_from_metadata(meta).to_dict() == analytic_costs(a).to_dict()


def test_registry_is_keyed_by_kind():
    class Other:
        kind = "other-kind"

    with pytest.raises(ValueError, match="no cost model for artifact kind 'other-kind'"):
        analytic_costs(Other())
    try:
        register_cost_model("other-kind", lambda obj: CostReport("other-kind", 1, 8, 8, 1))
        assert analytic_costs(Other()).size_bits == 8
    finally:
        COST_MODELS.pop("other-kind", None)
    assert "bnc" in COST_MODELS


# -- DNN formula (the two-layer example, computed by hand) ---------------------------------------
@pytest.mark.parametrize("bn", [0, 1])
def test_two_layer_fc_dnn_formula(bn):
    d, h, c, b = 16, 32, 26, 3
    r = fc_dnn_costs(d, [h], c, b, batch_norm=bool(bn))
    assert r.size_bits == b * (d * h + h * c) + 64 * h * bn + 32 * c
    assert r.n_ops == d * h + h * c + h * bn + c
    # by hand: 3 * (512 + 832) + 64 * 32 * bn + 32 * 26
    assert r.size_bits == (6912 if bn else 4864)
    assert r.n_ops == (1402 if bn else 1370)
    assert r.n_parameters == d * h + h * c


def test_dnn_layers_conv_and_free():
    layers = [
        Conv2D(1, 4, kernel=(3, 3), out_hw=(8, 8), batch_norm=True),
        Free("relu"),
        Free("maxpool"),
        Dense(4 * 4 * 4, 10, bias=True),
    ]
    r = dnn_costs(layers, 2)
    conv_w, conv_macs = 9 * 4, 9 * 4 * 64
    assert r.n_parameters == conv_w + 64 * 10
    assert r.size_bits == 2 * (conv_w + 640) + 64 * 4 + 32 * 10
    assert r.n_ops == conv_macs + 640 + 4 * 64 + 10  # MACs + batch-norm outputs + biases
    depthwise = dnn_costs([Conv2D(4, 4, (3, 3), (2, 2), groups=4)], 8)
    assert depthwise.n_parameters == 9 * 4 and depthwise.n_ops == 9 * 4 * 4
    with pytest.raises(ValueError, match="groups"):
        dnn_costs([Conv2D(3, 4, (1, 1), (1, 1), groups=2)], 8)
    with pytest.raises(TypeError, match="unknown layer type"):
        dnn_costs(["dense"], 8)
