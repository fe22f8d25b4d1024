"""Hand-derived forward/backward passes for the training hot path.

A naive Bayes step on letter is about 25 tiny tensor ops; with autograd each one also records a
graph node, and that bookkeeping, not arithmetic, dominated the epoch time. These two autograd
Functions compute the same values and gradients as the plain torch expressions (the tests check
both against autograd), with one graph node each.
"""

from __future__ import annotations

import torch


def _quantize(theta: torch.Tensor, frac_bits: int, max_magnitude: float) -> torch.Tensor:
    scale = 2.0 ** frac_bits  # power of two: exact
    return torch.round(theta * scale).div_(scale).clamp_(-max_magnitude, 0.0)


class BNLogJoint(torch.autograd.Function):
    """``log p(c, x)`` of shape (n, C) from unnormalized parameters.

    forward(rho (D, P, K, C), class_rho (C,), indices (n, D) int64, quant (frac_bits, U) or None)::

        theta = log_softmax(rho, dim=2);  class_theta = log_softmax(class_rho)
        theta, class_theta = q(theta), q(class_theta)          # straight-through when quantizing
        log_joint[n] = class_theta + sum_i theta.flat[indices[n, i]]
    """

    @staticmethod
    def forward(ctx, rho, class_rho, indices, quant):
        theta = torch.log_softmax(rho, dim=2)
        class_theta = torch.log_softmax(class_rho, dim=0)
        ctx.save_for_backward(theta, class_theta, indices)
        if quant is not None:
            theta, class_theta = _quantize(theta, *quant), _quantize(class_theta, *quant)
        n_classes = rho.shape[-1]
        return torch.nn.functional.embedding_bag(indices, theta.reshape(-1, n_classes), mode="sum").add_(class_theta)

    @staticmethod
    def backward(ctx, grad):
        theta, class_theta, indices = ctx.saved_tensors
        n, d = indices.shape
        n_classes = grad.shape[1]
        # Gather-sum backward: every (row, feature) adds the row's gradient to its table row.
        grad_table = torch.zeros(theta.numel() // n_classes, n_classes, dtype=grad.dtype)
        grad_table.index_add_(0, indices.reshape(-1), grad.repeat_interleave(d, dim=0))
        grad_theta = grad_table.view_as(theta)
        # Straight-through estimator: identity through q. log_softmax backward: g - softmax * sum(g).
        grad_rho = grad_theta - theta.exp() * grad_theta.sum(dim=2, keepdim=True)
        grad_class_theta = grad.sum(dim=0)
        grad_class_rho = grad_class_theta - class_theta.exp() * grad_class_theta.sum()
        return grad_rho, grad_class_rho, None, None


class HybridLossFn(torch.autograd.Function):
    """Mean hybrid loss (see ``bnc_deploy.losses.HybridLoss``) with its gradient in closed form.

    With ``z_c = eta * log_joint_c`` for c != c_n (and -inf at c_n), ``w = softmax(z)``,
    ``s = logsumexp(z)/eta + gamma - log_joint_cn`` and ``a = [s > 0]``, the per-row gradient is
    ``lam * a * w_c`` for c != c_n and ``-1 - lam * a`` at c_n, divided by n.
    """

    @staticmethod
    def forward(ctx, log_joint, labels, lam, gamma, eta, exclude_true):
        rows = torch.arange(log_joint.shape[0])
        true = log_joint[rows, labels]
        z = (log_joint * eta).add_(exclude_true[labels])
        z_max = z.max(dim=1, keepdim=True).values
        w = (z - z_max).exp_()
        total = w.sum(dim=1, keepdim=True)
        smooth_max = (total.log().add_(z_max)).squeeze(1).div_(eta).add_(gamma - true)
        active = smooth_max > 0
        ctx.save_for_backward(w, total, labels, active)
        ctx.lam = lam
        return (smooth_max.clamp_min(0).mul_(lam) - true).mean()

    @staticmethod
    def backward(ctx, grad):
        w, total, labels, active = ctx.saved_tensors
        n = w.shape[0]
        coef = active.to(w.dtype).mul_(grad * ctx.lam / n)[:, None]
        grad_lj = w.div_(total).mul_(coef)  # w is zero at the true class (exp(-inf))
        grad_lj[torch.arange(n), labels] = -(grad / n) - coef[:, 0]
        return grad_lj, None, None, None, None, None
