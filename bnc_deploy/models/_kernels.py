"""Hand-derived forward/backward passes for the training hot path.

A naive Bayes step on letter is about 25 tiny tensor ops. With autograd each op also records a
graph node and ``backward()`` starts the autograd engine (about 80 us per call on the CI machine),
and that bookkeeping, not arithmetic, dominated the epoch time. The functions below compute the
same values and gradients in closed form. They serve two callers:

* the autograd Functions ``BNLogJoint`` and ``HybridLossFn`` (one graph node each), used whenever
  a caller wants ``loss.backward()``;
* ``closed_form_step`` in ``bnc_deploy.train.bnc``, which skips autograd entirely.

Tests check both against autograd of the plain torch expressions.
"""

from __future__ import annotations

import torch

#: One-hot matrix products beat ``index_add_`` for the table gradient while (batch x table rows)
#: stays this small; beyond it the dense matrix costs more than the scattered adds.
_ONEHOT_GRAD_MAX_ELEMENTS = 1 << 20


def _quantize(theta: torch.Tensor, frac_bits: int, max_magnitude: float) -> torch.Tensor:
    scale = 2.0**frac_bits  # power of two: exact
    return torch.round(theta * scale).div_(scale).clamp_(-max_magnitude, 0.0)


# -- log p(c, x) ------------------------------------------------------------------------------------
def log_joint_forward(rho, class_rho, indices, quant):
    """``log p(c, x)`` (n, C) and what the backward pass needs.

    rho (D, P, K, C), class_rho (C,), indices (n, D) int64 into ``rho.reshape(-1, C)``,
    quant ``(frac_bits, U)`` or None::

        theta = log_softmax(rho, dim=2);  class_theta = log_softmax(class_rho)
        theta, class_theta = q(theta), q(class_theta)          # straight-through when quantizing
        log_joint[n] = class_theta + sum_i theta.flat[indices[n, i]]
    """
    theta = torch.log_softmax(rho, dim=2)
    class_theta = torch.log_softmax(class_rho, dim=0)
    saved = (theta, class_theta, indices)
    if quant is not None:
        theta, class_theta = _quantize(theta, *quant), _quantize(class_theta, *quant)
    n_classes = rho.shape[-1]
    log_joint = torch.nn.functional.embedding_bag(indices, theta.reshape(-1, n_classes), mode="sum")
    return log_joint.add_(class_theta), saved


def log_joint_backward(saved, grad):
    """Gradients ``(rho (D, P, K, C), class_rho (C,))`` from ``grad`` = dL/dlog_joint (n, C)."""
    theta, class_theta, indices = saved
    n, d = indices.shape
    n_classes = grad.shape[1]
    n_rows = theta.numel() // n_classes
    # Gather-sum backward: each table row receives the gradients of the batch rows that read it.
    if n * n_rows <= _ONEHOT_GRAD_MAX_ELEMENTS:
        counts = torch.zeros(n, n_rows, dtype=grad.dtype).scatter_add_(1, indices, _ones(n, d, grad.dtype))
        grad_table = counts.T @ grad
    else:
        grad_table = torch.zeros(n_rows, n_classes, dtype=grad.dtype)
        grad_table.index_add_(0, indices.reshape(-1), grad.repeat_interleave(d, dim=0))
    grad_theta = grad_table.view_as(theta)
    # Straight-through estimator: identity through q. log_softmax backward: g - softmax * sum(g).
    grad_rho = grad_theta - theta.exp() * grad_theta.sum(dim=2, keepdim=True)
    grad_class_theta = grad.sum(dim=0)
    grad_class_rho = grad_class_theta - class_theta.exp() * grad_class_theta.sum()
    return grad_rho, grad_class_rho


_ONES: dict = {}


def _ones(n: int, d: int, dtype) -> torch.Tensor:
    key = (n, d, dtype)
    if key not in _ONES:
        _ONES[key] = torch.ones(n, d, dtype=dtype)
    return _ONES[key]


class BNLogJoint(torch.autograd.Function):
    """Autograd wrapper of :func:`log_joint_forward` / :func:`log_joint_backward`."""

    @staticmethod
    def forward(ctx, rho, class_rho, indices, quant):
        log_joint, saved = log_joint_forward(rho, class_rho, indices, quant)
        ctx.save_for_backward(*saved)
        return log_joint

    @staticmethod
    def backward(ctx, grad):
        grad_rho, grad_class_rho = log_joint_backward(ctx.saved_tensors, grad)
        return grad_rho, grad_class_rho, None, None


# -- hybrid loss -----------------------------------------------------------------------------------
def hybrid_forward(log_joint, labels, lam, gamma, eta, exclude_true):
    """Mean hybrid loss (``bnc_deploy.train.losses.HybridLoss``) and what its gradient needs.

    ``exclude_true`` is the (C, C) matrix with -inf on the diagonal and 0 elsewhere.
    """
    true = log_joint.gather(1, labels[:, None])  # (n, 1)
    z = exclude_true.index_select(0, labels).add_(log_joint, alpha=eta)  # eta*lj, -inf at c_n
    z_max = z.amax(dim=1, keepdim=True)
    w = z.sub_(z_max).exp_()  # unnormalized softmax
    total = w.sum(dim=1, keepdim=True)
    smooth_max = total.log().add_(z_max).div_(eta).add_(gamma).sub_(true)  # (n, 1)
    active = smooth_max > 0
    loss = smooth_max.clamp_min_(0).mul_(lam).sub_(true).mean()
    return loss, (w, total, labels, active, lam)


def hybrid_backward(saved, grad=1.0):
    """dL/dlog_joint (n, C) for upstream gradient ``grad`` (a float or 0-d tensor).

    With ``w = softmax(eta * lj)`` over the competing classes and ``a = [smooth_max > 0]``:
    ``lam * a * w_c / n`` for c != c_n and ``(-1 - lam * a) / n`` at c_n.
    """
    w, total, labels, active, lam = saved
    n = w.shape[0]
    coef = active.to(w.dtype).mul_(grad * lam / n)  # (n, 1)
    grad_lj = w.div_(total).mul_(coef)  # zero at c_n: exp(-inf)
    return grad_lj.scatter_(1, labels[:, None], coef.add(grad / n).neg_())


class HybridLossFn(torch.autograd.Function):
    """Autograd wrapper of :func:`hybrid_forward` / :func:`hybrid_backward`."""

    @staticmethod
    def forward(ctx, log_joint, labels, lam, gamma, eta, exclude_true):
        loss, saved = hybrid_forward(log_joint, labels, lam, gamma, eta, exclude_true)
        ctx.saved = saved
        return loss

    @staticmethod
    def backward(ctx, grad):
        return hybrid_backward(ctx.saved, grad), None, None, None, None, None
