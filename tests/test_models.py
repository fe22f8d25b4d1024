import numpy as np
import pytest
import torch
from support import make_synthetic_dataset

from bnc_deploy.models.bnc import BayesNetClassifier
from bnc_deploy.quantizers import FixedPointLogQuantizer
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.train.chow_liu import chow_liu_parents, conditional_mutual_information, maximum_spanning_tree_parents


def loop_log_joint(model, x):
    """log p(c, x) by an explicit loop over features: the model's definition, no tricks."""
    class_theta, theta = (t.detach().double().numpy() for t in model.log_tables())
    out = np.tile(class_theta, (x.shape[0], 1))
    for n, row in enumerate(x):
        for i, value in enumerate(row):
            p = row[model.parents[i]] if model.parents[i] >= 0 else 0
            out[n] += theta[i, p, value]
    return out


@pytest.mark.parametrize("quantizer", [None, FixedPointLogQuantizer(3, 2), FixedPointLogQuantizer(2, 4)])
@pytest.mark.parametrize("parents", [None, [-1, 0, 1, 1, 3, 0]])
def test_vectorized_forward_equals_loop_and_tables_are_normalized(quantizer, parents):
    ds = make_synthetic_dataset()
    model = BayesNetClassifier(
        ds.cardinalities, ds.n_classes, parents, quantizer=quantizer, generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        got = model(model.flat_indices(ds.x_test)).double().numpy()
    assert np.allclose(got, loop_log_joint(model, ds.x_test), atol=1e-5)
    if quantizer is None:
        theta = model.log_tables()[1].detach()
        for i, k in enumerate(ds.cardinalities):
            for p in range(model.parent_cardinalities[i]):
                assert float(theta[i, p, :k].exp().sum(dim=0).sub(1).abs().max()) < 1e-5


@pytest.mark.parametrize("quantizer", [None, FixedPointLogQuantizer(1, 1), FixedPointLogQuantizer(5, 3)])
@pytest.mark.parametrize("parents", [None, [-1, 0, 0, 2, 3, 4]])
def test_artifact_reference_predicts_exactly_like_torch(quantizer, parents):
    ds = make_synthetic_dataset(seed=3)
    model = BayesNetClassifier(
        ds.cardinalities, ds.n_classes, parents, quantizer=quantizer, init="ml", data=(ds.x_train, ds.y_train)
    )
    artifact = model.to_artifact(ds.class_names, ds.feature_names)
    reference = ReferencePredictor(artifact)
    with torch.no_grad():
        torch_log_joint = model(model.flat_indices(ds.x_test)).double().numpy()
    assert np.array_equal(reference.predict(ds.x_test), torch_log_joint.argmax(axis=1))
    if quantizer is not None:  # integer arithmetic: identical, not close
        assert np.array_equal(reference.log_joint(ds.x_test), torch_log_joint)
    else:
        assert np.allclose(reference.log_joint(ds.x_test), torch_log_joint, atol=1e-4)


def test_ml_init_gives_smoothed_relative_frequencies():
    x = np.array([[0], [0], [1], [0]])
    y = np.array([0, 0, 0, 1])
    model = BayesNetClassifier([3], 2, init="ml", data=(x, y), smoothing=1.0)
    class_theta, theta = (t.detach() for t in model.log_tables())
    assert np.allclose(class_theta.exp().numpy(), [4 / 6, 2 / 6])
    assert np.allclose(theta[0, 0, :, 0].exp().numpy(), [3 / 6, 2 / 6, 1 / 6])  # counts 2,1,0 (+1 each)
    assert np.allclose(theta[0, 0, :, 1].exp().numpy(), [2 / 4, 1 / 4, 1 / 4])


def test_padding_never_receives_gradient():
    ds = make_synthetic_dataset()
    model = BayesNetClassifier(ds.cardinalities, ds.n_classes, [-1, 0, 1, 2, 3, 4])
    model(model.flat_indices(ds.x_train)).sum().backward()
    assert torch.all(model.rho.grad[~model.valid] == 0)


def test_model_rejects_bad_configuration():
    with pytest.raises(ValueError, match="2 classes"):
        BayesNetClassifier([2, 2], 1)
    with pytest.raises(ValueError, match="parents"):
        BayesNetClassifier([2, 2], 2, parents=[-1])
    with pytest.raises(ValueError, match="needs the training data"):
        BayesNetClassifier([2, 2], 2, init="ml")


def test_conditional_mutual_information_against_direct_sum():
    ds = make_synthetic_dataset(n_train=400)
    x, y, card = ds.x_train, ds.y_train, ds.cardinalities
    cmi = conditional_mutual_information(x, y, card, ds.n_classes)
    n = len(y)
    for i, j in [(0, 1), (1, 2), (3, 5), (4, 0)]:
        direct = 0.0
        for c in range(ds.n_classes):
            m = y == c
            for a in range(card[i]):
                for b in range(card[j]):
                    n_abc = np.sum(m & (x[:, i] == a) & (x[:, j] == b))
                    if n_abc:
                        direct += (
                            n_abc
                            / n
                            * np.log(n_abc * m.sum() / (np.sum(m & (x[:, i] == a)) * np.sum(m & (x[:, j] == b))))
                        )
        assert cmi[i, j] == pytest.approx(direct, abs=1e-9)
        assert cmi[j, i] == pytest.approx(direct, abs=1e-9)


def test_maximum_spanning_tree():
    w = np.array([[0, 5, 1, 0], [5, 0, 2, 9], [1, 2, 0, 3], [0, 9, 3, 0]], dtype=float)
    assert maximum_spanning_tree_parents(w, root=0).tolist() == [-1, 0, 3, 1]
    assert maximum_spanning_tree_parents(w, root=3).tolist() == [1, 3, 3, -1]


def test_chow_liu_recovers_a_chain():
    # x_{i} copies x_{i-1} given the class: the tree must be the chain.
    rng = np.random.default_rng(0)
    n = 2000
    y = rng.integers(0, 2, n)
    x = np.zeros((n, 5), dtype=np.int64)
    x[:, 0] = rng.integers(0, 3, n)
    for i in range(1, 5):
        x[:, i] = np.where(rng.random(n) < 0.9, x[:, i - 1], rng.integers(0, 3, n))
    assert chow_liu_parents(x, y, np.full(5, 3), 2).tolist() == [-1, 0, 1, 2, 3]


@pytest.mark.parametrize("quantizer", [None, FixedPointLogQuantizer(4, 2)])
@pytest.mark.parametrize("parents", [None, [-1, 0, 1, 0, 3, 4]])
def test_hand_written_backward_equals_autograd(quantizer, parents):
    ds = make_synthetic_dataset(seed=5)
    model = BayesNetClassifier(
        ds.cardinalities, ds.n_classes, parents, quantizer=quantizer, generator=torch.Generator().manual_seed(1)
    )
    indices = model.flat_indices(ds.x_train[:64])
    upstream = torch.randn(64, ds.n_classes, generator=torch.Generator().manual_seed(2))

    model.zero_grad()
    (model(indices) * upstream).sum().backward()
    fast = (model.rho.grad.clone(), model.class_rho.grad.clone())

    model.zero_grad()
    class_theta, theta = model.log_tables()  # plain torch ops, differentiated by autograd
    plain = theta.reshape(-1, ds.n_classes)[indices].sum(dim=1) + class_theta
    (plain * upstream).sum().backward()
    assert torch.allclose(fast[0], model.rho.grad, atol=1e-5)
    assert torch.allclose(fast[1], model.class_rho.grad, atol=1e-5)
    assert torch.allclose(model(indices), plain, atol=1e-5)
