"""Training losses for Bayesian network classifiers, as small named callables.

Each takes ``log_joint`` of shape (n, C) (``log p(c, x_n)`` for every class) and integer labels
(n,), and returns the batch mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bnc_deploy.errors import ConfigError


@dataclass(frozen=True)
class NLLLoss:
    """Generative negative log-likelihood ``-log p(c_n, x_n)``."""

    name = "nll"

    def __call__(self, log_joint: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return -log_joint.gather(1, labels[:, None]).mean()


@dataclass(frozen=True)
class CLLLoss:
    """Discriminative negative conditional log-likelihood ``-log p(c_n | x_n)``."""

    name = "cll"

    def __call__(self, log_joint: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(log_joint, labels)


@dataclass(frozen=True)
class HybridLoss:
    """Hybrid generative-discriminative loss of Roth & Pernkopf (2020), as in their reference code::

        L = -log p(c_n, x_n)
            + lam * relu( (1/eta) * logsumexp_{c != c_n} eta * (gamma + log p(c, x_n) - log p(c_n, x_n)) )

    ``lam`` trades off the large-margin term, ``gamma`` is the desired log-margin and ``eta``
    smooths the max over competing classes.
    """

    lam: float = 18.70
    gamma: float = 0.1277
    eta: float = 10.0
    name = "hybrid"

    def __post_init__(self) -> None:
        if self.eta <= 0:
            raise ConfigError(f"hybrid eta must be > 0, got {self.eta}")
        if self.lam < 0:
            raise ConfigError(f"hybrid lambda must be >= 0, got {self.lam}")

    def __call__(self, log_joint: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        # logsumexp_{c != c_n} eta*(gamma + lj_c - lj_cn) = eta*(gamma - lj_cn) + logsumexp_{c != c_n} eta*lj_c;
        # the true class is excluded by adding -inf from a cached (C, C) mask. The closed-form
        # gradient lives in _kernels.HybridLossFn (tests compare it with autograd of the formula).
        from bnc_deploy.models._kernels import HybridLossFn

        mask = exclusion_mask(log_joint.shape[1], log_joint.dtype, log_joint.device)
        return HybridLossFn.apply(log_joint, labels, self.lam, self.gamma, self.eta, mask)


_MASKS: dict = {}


def exclusion_mask(n_classes: int, dtype, device) -> torch.Tensor:
    """``(C, C)`` matrix with ``-inf`` on the diagonal and 0 elsewhere (cached)."""
    key = (n_classes, dtype, device)
    if key not in _MASKS:
        _MASKS[key] = torch.zeros(n_classes, n_classes, dtype=dtype, device=device).fill_diagonal_(float("-inf"))
    return _MASKS[key]


def make_loss(name: str, *, hybrid_lambda: float = 18.70, hybrid_gamma: float = 0.1277, hybrid_eta: float = 10.0):
    """Loss by name: ``"hybrid"``, ``"nll"`` or ``"cll"``."""
    if name == "hybrid":
        return HybridLoss(hybrid_lambda, hybrid_gamma, hybrid_eta)
    if name == "nll":
        return NLLLoss()
    if name == "cll":
        return CLLLoss()
    raise ConfigError(f"unknown loss {name!r}: use 'hybrid', 'nll' or 'cll'")
