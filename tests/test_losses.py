import math

import numpy as np
import pytest
import torch

from bnc_deploy.train.losses import CLLLoss, HybridLoss, NLLLoss, make_loss


def hybrid_direct(log_joint, labels, lam, gamma, eta):
    """The hybrid loss written out row by row from the formula."""
    total = 0.0
    for row, c_n in zip(log_joint, labels):
        others = [eta * (gamma + row[c] - row[c_n]) for c in range(len(row)) if c != c_n]
        m = max(others)
        smooth = (m + math.log(sum(math.exp(o - m) for o in others))) / eta
        total += -row[c_n] + lam * max(smooth, 0.0)
    return total / len(labels)


@pytest.mark.parametrize(
    "lam,gamma,eta", [(18.70, 0.1277, 10.0), (1.0, 5.0, 1.0), (100.0, 0.1, 30.0), (0.0, 1.0, 10.0)]
)
def test_hybrid_matches_direct_formula(lam, gamma, eta):
    rng = np.random.default_rng(1)
    log_joint = -rng.random((40, 7)) * 30
    labels = rng.integers(0, 7, 40)
    got = HybridLoss(lam, gamma, eta)(torch.tensor(log_joint), torch.tensor(labels))
    assert float(got) == pytest.approx(hybrid_direct(log_joint, labels, lam, gamma, eta), rel=1e-10)


def test_hybrid_margin_is_zero_when_margin_is_met():
    # True class beats every other by far more than gamma: only the NLL remains.
    log_joint = torch.tensor([[-1.0, -50.0, -60.0]], dtype=torch.float64)
    assert float(HybridLoss(10.0, 1.0, 10.0)(log_joint, torch.tensor([0]))) == pytest.approx(1.0)


def test_hybrid_gradient_matches_autograd_of_direct_formula():
    rng = np.random.default_rng(2)
    lj = torch.tensor(-rng.random((10, 4)) * 5, requires_grad=True)
    labels = torch.tensor(rng.integers(0, 4, 10))
    HybridLoss(3.0, 0.5, 10.0)(lj, labels).backward()
    numeric = np.zeros((10, 4))
    base = lj.detach().numpy()
    for idx in np.ndindex(*base.shape):
        plus, minus = base.copy(), base.copy()
        plus[idx] += 1e-6
        minus[idx] -= 1e-6
        numeric[idx] = (
            hybrid_direct(plus, labels.numpy(), 3.0, 0.5, 10.0) - hybrid_direct(minus, labels.numpy(), 3.0, 0.5, 10.0)
        ) / 2e-6
    assert np.allclose(lj.grad.numpy(), numeric, atol=1e-6)


def test_nll_and_cll():
    lj = torch.log(torch.tensor([[0.2, 0.1], [0.05, 0.3]], dtype=torch.float64))
    y = torch.tensor([0, 1])
    assert float(NLLLoss()(lj, y)) == pytest.approx(-(math.log(0.2) + math.log(0.3)) / 2)
    assert float(CLLLoss()(lj, y)) == pytest.approx(-(math.log(0.2 / 0.3) + math.log(0.3 / 0.35)) / 2)


def test_make_loss_rejects_unknown_and_bad_parameters():
    with pytest.raises(ValueError, match="unknown loss"):
        make_loss("hinge")
    with pytest.raises(ValueError, match="eta"):
        make_loss("hybrid", hybrid_eta=0.0)
