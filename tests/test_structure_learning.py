"""Differentiable, model-size-aware TAN structure learning (small synthetic problems, fast)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from bnc_deploy.artifacts.bnc import check_acyclic as _check_acyclic
from bnc_deploy.datasets.base import DiscreteDataset
from bnc_deploy.models.structure_learning import (
    NO_PARENT,
    UNUSED_SLOT,
    StructureLearningTAN,
    expected_size_penalty,
    gumbel_softmax_st,
)
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.train.bnc import TrainConfig
from bnc_deploy.train.candidate_sets import candidate_parents, feature_order
from bnc_deploy.train.structure_learning import (
    StructureLearningConfig,
    candidate_parameter_counts,
    naive_bayes_parameters,
    parse_candidates,
    tan_parameters,
    train_learned_tan,
)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: thread hand-offs cost more than they save (and the CI machine is shared)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    # numpy's check: torch.testing.assert_close costs ~2 s of lazy imports on its first call.
    np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)


def chain_dataset(n=600, d=5, card=3, n_classes=2, noise=0.1, seed=0) -> DiscreteDataset:
    """x_0 depends on the class; x_i copies x_{i-1} with probability 1 - noise (so parents help a lot)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    x = np.zeros((n, d), dtype=np.int64)
    x[:, 0] = np.where(rng.random(n) < 0.8, y % card, rng.integers(0, card, n))
    for i in range(1, d):
        x[:, i] = np.where(rng.random(n) < 1 - noise, x[:, i - 1], rng.integers(0, card, n))
    split = 2 * n // 3
    return DiscreteDataset(
        name="chain",
        x_train=x[:split],
        y_train=y[:split],
        x_test=x[split:],
        y_test=y[split:],
        cardinalities=np.full(d, card),
        class_names=[str(c) for c in range(n_classes)],
        feature_names=[f"f{i}" for i in range(d)],
    )


# -- candidates -------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [None, 1, 3, 8])
def test_candidates_are_predecessors_and_at_most_k(k):
    order = feature_order(10, "random", seed=3)
    cand = candidate_parents(order, k, seed=1)
    position = np.argsort(order)
    assert cand.shape == (10, 1 + (9 if k is None else min(k, 9)))
    assert np.all(cand[:, 0] == NO_PARENT)
    for i in range(10):
        parents = cand[i, 1:][cand[i, 1:] != UNUSED_SLOT]
        expected = min(position[i], 9 if k is None else k)
        assert len(parents) == expected and len(set(parents.tolist())) == expected
        assert np.all(position[parents] < position[i])
        assert np.all(np.diff(parents) > 0)  # ascending, valid slots first
    assert np.array_equal(cand, candidate_parents(order, k, seed=1))  # seeded


def test_candidates_bad_arguments():
    with pytest.raises(ValueError, match="permutation"):
        candidate_parents(np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="max_candidates"):
        candidate_parents(np.arange(3), 0)
    assert parse_candidates("all") is None and parse_candidates("0") is None and parse_candidates("5") == 5
    with pytest.raises(ValueError, match="--candidates"):
        parse_candidates("many")


# -- Gumbel straight-through ------------------------------------------------------------------------
def test_gumbel_st_forward_is_one_hot_and_respects_mask():
    logits = torch.randn(50, 6)
    logits[:, 4:] = float("-inf")
    s = gumbel_softmax_st(logits, tau=0.7, generator=torch.Generator().manual_seed(0))
    assert torch.all((s == 0) | (s == 1)) and torch.all(s.sum(-1) == 1)
    assert torch.all(s[:, 4:] == 0)


def test_gumbel_st_argmax_follows_logits():
    logits = torch.tensor([[0.0, 8.0, 0.0]]).repeat(2000, 1)
    s = gumbel_softmax_st(logits, tau=1.0, generator=torch.Generator().manual_seed(0))
    assert s[:, 1].mean() > 0.99  # exp(8) / (exp(8) + 2): the Gumbel-max trick samples softmax(logits)


def test_gumbel_st_gradient_is_the_tempered_softmax_gradient():
    logits = torch.randn(4, 5, requires_grad=True)
    weights = torch.randn(4, 5)
    gen_state = torch.Generator().manual_seed(7)
    s = gumbel_softmax_st(logits, tau=0.5, generator=gen_state)
    (s * weights).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0
    # Same noise, plain softmax: identical gradient (backward is the identity onto the soft sample).
    u = torch.rand((4, 5), generator=torch.Generator().manual_seed(7))
    g = -torch.log(-torch.log(u + 1e-6) + 1e-6)
    logits2 = logits.detach().clone().requires_grad_(True)
    (torch.softmax((logits2 + g) / 0.5, -1) * weights).sum().backward()
    _close(logits.grad, logits2.grad)


def test_gumbel_st_rejects_bad_temperature():
    with pytest.raises(ValueError, match="temperature"):
        gumbel_softmax_st(torch.zeros(2, 2), tau=0.0)


# -- penalty ----------------------------------------------------------------------------------------
def test_penalty_matches_direct_parameter_count():
    rng = np.random.default_rng(0)
    card = rng.integers(2, 7, size=7)
    cand = candidate_parents(np.arange(7), 3, seed=2)
    n_classes = 4
    slots = np.array([rng.choice(np.flatnonzero(row != UNUSED_SLOT)) for row in cand])
    parents = cand[np.arange(7), slots]
    logits = torch.full(cand.shape, -50.0, dtype=torch.float64)  # softmax ~ one-hot on the chosen slots
    logits[np.arange(7), slots] = 50.0
    logits[torch.as_tensor(cand == UNUSED_SLOT)] = float("-inf")
    direct = sum(card[i] * (card[p] if p >= 0 else 1) * n_classes for i, p in enumerate(parents))
    nb = naive_bayes_parameters(card, n_classes)
    added = torch.as_tensor(candidate_parameter_counts(card, cand, n_classes, "added"))
    absolute = torch.as_tensor(candidate_parameter_counts(card, cand, n_classes, "absolute"))
    assert float(expected_size_penalty(logits, added)) == pytest.approx(direct - (nb - n_classes))
    assert float(expected_size_penalty(logits, absolute)) + n_classes == pytest.approx(
        tan_parameters(card, parents, n_classes)
    )
    assert tan_parameters(card, parents, n_classes) == direct + n_classes
    # Expected value under a soft distribution: sum_j softmax_j * n_ij, by hand for one feature.
    soft = torch.zeros(cand.shape, dtype=torch.float64).masked_fill(torch.as_tensor(cand == UNUSED_SLOT), float("-inf"))
    i = 6
    probs = np.full((cand[i] != UNUSED_SLOT).sum(), 1 / (cand[i] != UNUSED_SLOT).sum())
    by_hand = sum(
        pj * (card[i] * card[p] * n_classes - card[i] * n_classes)
        for pj, p in zip(probs, cand[i][cand[i] != UNUSED_SLOT])
        if p >= 0
    )
    per_feature = (torch.softmax(soft, -1) * added)[i].sum()
    assert float(per_feature) == pytest.approx(by_hand)


def test_penalty_modes_have_the_same_gradient():
    card, cand = np.array([3, 4, 2, 5]), candidate_parents(np.arange(4), None)
    grads = []
    for mode in ("added", "absolute"):
        logits = torch.randn(cand.shape, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
        masked = logits.masked_fill(torch.as_tensor(cand == UNUSED_SLOT), float("-inf"))
        expected_size_penalty(
            masked, torch.as_tensor(candidate_parameter_counts(card, cand, 3, mode), dtype=torch.float32)
        ).backward()
        grads.append(logits.grad)
    _close(grads[0], grads[1])


# -- the model --------------------------------------------------------------------------------------
def _small_model(init="uniform", k=2):
    data = chain_dataset(n=120, d=4, card=3)
    data.cardinalities = np.array([3, 3, 3, 3])
    cand = candidate_parents(np.arange(4), k, seed=0)
    model = StructureLearningTAN(
        data.cardinalities,
        2,
        cand,
        init=init,
        data=(data.x_train, data.y_train),
        generator=torch.Generator().manual_seed(0),
    )
    return model, data


def test_log_joint_equals_plain_expression_and_gradients_match_autograd():
    model, data = _small_model()
    with torch.no_grad():
        model.rho.add_(torch.randn(model.rho.shape) * torch.as_tensor(model.valid))
    idx = model.flat_indices(data.x_train[:17])
    s = torch.rand(model.phi.shape).masked_fill(~model.slot_used, 0.0).requires_grad_(True)
    out = model(idx, s)
    grad_out = torch.randn(out.shape)
    out.backward(grad_out)
    # Reference: autograd through plain torch ops on copies.
    rho = model.rho.detach().clone().requires_grad_(True)
    class_rho = model.class_rho.detach().clone().requires_grad_(True)
    s2 = s.detach().clone().requires_grad_(True)
    theta = torch.log_softmax(rho, 1).reshape(-1, 2)
    ref = torch.log_softmax(class_rho, 0) + (theta[idx] * s2.reshape(1, -1, 1)).sum(1)
    ref.backward(grad_out)
    _close(out, ref)
    _close(model.rho.grad, rho.grad)
    _close(model.class_rho.grad, class_rho.grad)
    _close(s.grad, s2.grad)


def test_ml_init_rows_are_the_counts():
    model, data = _small_model(init="ml")
    theta = torch.log_softmax(model.rho, 1)
    # Feature 2, slot with parent p: p(x_2 = k | x_p = v, c) from counts with add-one smoothing.
    j = 1
    p = int(model.candidates[2, j])
    x, y = data.x_train, data.y_train
    for v in range(3):
        for c in range(2):
            rows = (x[:, p] == v) & (y == c)
            expected = np.log((np.bincount(x[rows, 2], minlength=3) + 1) / (rows.sum() + 3))
            got = theta[model.row_offsets[2, j] + v, :3, c].detach().numpy()
            np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_extracted_classifier_predicts_like_the_argmax_structure():
    model, data = _small_model(k=3)
    with torch.no_grad():
        model.rho.add_(torch.randn(model.rho.shape) * torch.as_tensor(model.valid))
        model.phi.copy_(torch.randn(model.phi.shape))
    clf = model.to_classifier()
    assert np.array_equal(clf.parents, model.parents())
    x = data.x_test
    with torch.no_grad():
        _close(clf(clf.flat_indices(x)), model.argmax_log_joint(model.flat_indices(x)))


# -- learning -------------------------------------------------------------------------------------
def _learn(data, lam, epochs=8, init="ml"):
    # ML-initialised candidate tables make the comparison between slots fair from the first step
    # (uniform tables only learn while sampled), so a few epochs suffice on this small problem.
    config = TrainConfig(model="tan", structure="learn", epochs=epochs, batch_size=40, progress=False, init=init)
    return train_learned_tan(data, config, StructureLearningConfig(size_penalty=lam, candidates=2, structure_lr=0.05))


def test_large_penalty_recovers_naive_bayes():
    data = chain_dataset(n=300)
    result = _learn(data, lam=10.0)
    assert np.all(result.artifact.parents == -1)
    assert result.artifact.n_parameters == naive_bayes_parameters(data.cardinalities, data.n_classes)


def test_no_penalty_gives_every_feature_with_candidates_a_parent_and_a_valid_structure():
    data = chain_dataset(n=300)
    result = _learn(data, lam=0.0)
    parents = result.artifact.parents
    assert parents[0] == -1  # the first feature has no candidates
    assert np.all(parents[1:] >= 0)  # the chain helps: every other feature takes a parent
    assert np.all(parents < np.arange(len(parents)))  # predecessors in the (identity) ordering
    _check_acyclic(parents)  # raises on a cycle
    history = result.artifact.metadata["structure_learning"]["history"]
    assert len(history["test_error"]) == 8 and history["n_with_parent"][-1] == 4
    assert result.artifact.metadata["structure_source"] == "learned"


def test_quantized_finetuned_learned_tan_is_exact_in_the_reference():
    data = chain_dataset(n=300)
    config = TrainConfig(model="tan", structure="learn", epochs=3, batch_size=40, bits=4, progress=False)
    result = train_learned_tan(data, config, StructureLearningConfig(size_penalty=0.0, candidates=2, finetune_epochs=2))
    artifact = result.artifact
    assert artifact.is_quantized and artifact.metadata["torch_reference_agreement"] == 1.0
    assert len(artifact.metadata["history"]["test_error"]) == 2  # the fine-tuning epochs
    err = np.mean(ReferencePredictor(artifact).predict(data.x_test) != data.y_test)
    assert err == pytest.approx(artifact.metadata["errors"]["test"])


def test_bad_settings_are_rejected():
    data = chain_dataset(n=90)
    with pytest.raises(ValueError, match="size-penalty"):
        StructureLearningConfig(size_penalty=-1).validate()
    with pytest.raises(ValueError, match="model tan"):
        train_learned_tan(data, TrainConfig(model="nb", epochs=1, progress=False))


# -- command lines ----------------------------------------------------------------------------------
def _write_csv(tmp_path, data: DiscreteDataset):
    path = tmp_path / "chain.csv"
    x = np.concatenate([data.x_train, data.x_test])
    y = np.concatenate([data.y_train, data.y_test])
    np.savetxt(
        path,
        np.column_stack([x, y]),
        fmt="%d",
        delimiter=",",
        header=",".join([f"f{i}" for i in range(x.shape[1])] + ["label"]),
        comments="",
    )
    return path


def test_bnc_train_structure_learn_json(tmp_path, capsys):
    from bnc_deploy.cli.train import main

    path = tmp_path / "m.bnc"
    main(
        [
            "--data",
            str(_write_csv(tmp_path, chain_dataset(n=150))),
            "--model",
            "tan",
            "--structure",
            "learn",
            "--candidates",
            "2",
            "--epochs",
            "1",
            "--batch-size",
            "20",
            "--size-penalty",
            "1e-6",
            "-o",
            str(path),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert out["structure_source"] == "learned" and out["n_parameters_nb_multiple"] >= 1.0
    assert {"test_error", "n_parameters", "size_bits", "parents"} <= set(out)


def test_bnc_train_learn_flags_need_structure_learn(capsys):
    from bnc_deploy.cli.train import main

    with pytest.raises(SystemExit) as exc:
        main(["--data", "digits", "--model", "tan", "--size-penalty", "1", "-o", "x.bnc"])
    assert exc.value.code == 2 and "--structure learn" in capsys.readouterr().err


def test_sweep_cli_writes_trajectory_and_plots(tmp_path):
    from bnc_deploy.cli.sweep import main
    from bnc_deploy.train.structure_sweep import parse_grid

    assert parse_grid("1e-7:10:9")[0] == pytest.approx(1e-7) and parse_grid("1e-7:10:9")[-1] == pytest.approx(10)
    data = _write_csv(tmp_path, chain_dataset(n=300))
    out = tmp_path / "sweep"
    assert (
        main(
            [
                "--data",
                str(data),
                "--lambdas",
                "0,10",
                "--candidates",
                "2",
                "--epochs",
                "1",
                "--batch-size",
                "40",
                "-o",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    with open(out / "trajectory.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["lambda"]) for r in rows] == [0.0, 10.0]
    assert float(rows[1]["nb_multiple"]) == pytest.approx(1.0)
    for name in ("trajectory.json", "trajectory.png", "trajectory.svg", "pareto.png", "pareto.svg"):
        assert (out / name).stat().st_size > 0


def test_chow_liu_order_puts_every_tree_edge_forward():
    from bnc_deploy.train.chow_liu import chow_liu_parents

    data = chain_dataset(n=300, d=6)
    args = (data.x_train, data.y_train, data.cardinalities, data.n_classes)
    order = feature_order(6, "chow-liu", data=args)
    position = np.argsort(order)
    parents = chow_liu_parents(*args)
    assert sorted(order.tolist()) == list(range(6))
    assert all(position[p] < position[i] for i, p in enumerate(parents) if p >= 0)
    cand = candidate_parents(order, None)
    assert all(p in cand[i] for i, p in enumerate(parents))  # "TAN all" can represent the Chow-Liu tree


def test_constant_features_are_neither_parents_nor_children():
    cand = candidate_parents(np.arange(5), None, cardinalities=np.array([3, 1, 4, 2, 1]))
    assert not np.isin(1, cand[:, 1:]) and not np.isin(4, cand[:, 1:])
    assert np.all(cand[[1, 4], 1:] == UNUSED_SLOT)
    assert cand[3, 1:].tolist() == [0, 2, UNUSED_SLOT, UNUSED_SLOT]
