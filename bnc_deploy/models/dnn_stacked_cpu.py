"""The hand-written pieces of :mod:`bnc_deploy.models.dnn_stacked`'s CPU path (torch; training only).

2x2 max-pool with torch's first-maximum gradient rule, and the fused ReLU convolution block
(:class:`_ConvBlockCPU`: products, rescale, batch norm, pool, ReLU in one autograd node), with the
helpers they share. Each computes what the written-out stack computes, bit for bit, with fewer
passes over the activation maps (see the stack's docstring for why the CPU needs them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bnc_deploy.models.dnn import BN_MOMENTUM


def _windows(x: torch.Tensor) -> list[torch.Tensor]:
    """The four corners of the 2x2 windows over the last two axes (stride 2, floor), in scan order."""
    h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
    return [x[..., 0:h:2, 0:w:2], x[..., 0:h:2, 1:w:2], x[..., 1:h:2, 0:w:2], x[..., 1:h:2, 1:w:2]]


def _first_max(corners: list, route: list, top: torch.Tensor, rest: torch.Tensor) -> torch.Tensor:
    """The maximum of the four window corners, into ``top``; ``route`` (four planes shaped like it)
    gets 1.0 at each window's first maximum in scan order (row by row: ``F.max_pool2d``'s gradient
    rule), else 0.0; ``rest`` is scratch.

    Float masks and products rather than bool masks and ``torch.where``: torch's CPU kernels with
    bool results run several times slower here, and ``g * 1.0``, ``g * 0.0`` are exact for a finite
    gradient (a non-finite one, which stops its configuration anyway, also reaches the other corners).
    """
    a, b, c, d = corners
    torch.maximum(a, b, out=top)
    torch.maximum(top, torch.maximum(c, d, out=rest), out=top)
    for corner, plane in zip(corners, route):
        torch.eq(corner, top, out=plane)  # 1.0 at every maximum
    torch.sub(a.new_ones(()), route[0], out=rest)
    for plane in route[1:3]:  # keep the first maximum only: a corner counts where no earlier one did
        plane.mul_(rest)
        rest.sub_(plane)
    route[3].copy_(rest)
    return top


class _MaxPool2x2(torch.autograd.Function):
    """``F.max_pool2d(x, 2)`` over the last two axes with its gradient rule (:func:`_first_max`), in
    strided views: torch's CPU kernel is slow for these small maps; elementwise, so exact for any stack."""

    @staticmethod
    def forward(ctx, x):
        corners = _windows(x)
        route, ctx.input_shape = x.new_empty((4, *corners[0].shape)), x.shape
        top = _first_max(corners, list(route.unbind(0)), x.new_empty(route.shape[1:]), x.new_empty(route.shape[1:]))
        ctx.save_for_backward(route)
        return top

    @staticmethod
    def backward(ctx, grad):
        (route,), shape = ctx.saved_tensors, ctx.input_shape
        # Even maps: the four corners cover every element, so no zero fill is needed.
        out = grad.new_empty(shape) if shape[-2] % 2 == shape[-1] % 2 == 0 else grad.new_zeros(shape)
        for k, corner in enumerate(_windows(out)):
            torch.mul(grad, route[k], out=corner)
        return out


def _row_mean(t: torch.Tensor) -> torch.Tensor:
    """Mean over the last axis of (M, C, N) ``t``, keeping it. torch splits the sum of a lone row
    across threads (another order than a row among several), so a lone row is summed as one of two."""
    if t.shape[0] * t.shape[1] == 1:
        return t.expand(2, 1, t.shape[2]).mean(-1, keepdim=True)[:1]
    return t.mean(-1, keepdim=True)


class _ConvBlockCPU(torch.autograd.Function):
    """One ReLU convolution block of the stack on the CPU, training: convolution (per-configuration
    products of the codes with the shared columns), rescale, batch norm, 2x2 max-pool, ReLU.

    Fused by hand because the step is memory-bound elementwise work on the activation maps. The
    columns come window-major (:func:`_window_columns`), so the maps are (M, C, 4, B * H/2 * W/2):
    the batch-norm statistics are plain row reductions, the products write their rows in place
    and the pool's four window corners are contiguous planes. Buffers are reused, and the ReLU runs
    after the pool (they commute, gradients included: a window's first maximum is where its ReLU
    passes any gradient), its gradient folded into the pool's route (:func:`_first_max`). Every
    step is per configuration (products of the single net's shapes, row reductions) or elementwise,
    so a configuration's bits do not depend on its companions.
    Outputs (M, B, C, H/2, W/2) and the batch mean and biased variance, (M, C, 1) each.
    """

    @staticmethod
    def forward(ctx, codes, scale, gamma, beta, eps, which, shape, work, *cols):
        (m, c_out, _), (b, h, w) = codes.shape, shape  # h, w: the pooled map
        n = 4 * b * h * w
        z = _products(codes, scale, which, cols, work("z", (m, c_out, n)))
        mean = var = inv = xhat = None
        if gamma is not None:
            mean = _row_mean(z)
            z.sub_(mean)
            xhat = torch.mul(z, z, out=work("xhat", (m, c_out, n)))
            var = _row_mean(xhat)
            inv = torch.rsqrt(var + eps)
            torch.mul(z, inv, out=xhat)
            torch.mul(xhat, gamma.unsqueeze(-1), out=z)
            z.add_(beta.unsqueeze(-1))
        z4, plane = z.view(m, c_out, 4, -1), (m, c_out, n // 4)
        route = work("route", z4.shape)
        top = _first_max(list(z4.unbind(2)), list(route.unbind(2)), work("top", plane), work("rest", plane))
        route.mul_(torch.gt(top, 0.0, out=work("rest", plane)).unsqueeze(2))  # the ReLU's gradient
        out = _relu_maps(top, (b, h, w))
        ctx.save_for_backward(codes, scale, gamma, inv, xhat, route, *cols)
        ctx.which, ctx.work = list(which), work
        if mean is not None:
            ctx.mark_non_differentiable(mean, var)
        return out, mean, var

    @staticmethod
    def backward(ctx, grad, *_):
        codes, scale, gamma, inv, xhat, route, *cols = ctx.saved_tensors
        (m, c_out), n = route.shape[:2], route[0, 0].numel()
        maps = grad.transpose(1, 2).unsqueeze(2)  # (M, C, 1, B, H/2, W/2), read in place
        dz = ctx.work("dz", route.shape)
        torch.mul(route.view(m, c_out, 4, *maps.shape[3:]), maps, out=dz.view(m, c_out, 4, *maps.shape[3:]))
        dz = dz.view(m, c_out, n)
        d_gamma = d_beta = None
        if gamma is not None:
            d_beta = dz.sum(-1, keepdim=True)
            t = torch.mul(dz, xhat, out=ctx.work("t", (m, c_out, n)))
            d_gamma = t.sum(-1, keepdim=True)
            # d(pre-norm) = inv * gamma * (dz - mean(dz) - xhat * mean(dz * xhat)), whose means are
            # d_beta / n and d_gamma / n
            torch.mul(xhat, d_gamma / n, out=t)
            torch.sub(dz, t, out=t)
            t.sub_(d_beta / n)
            dz = t.mul_(inv * gamma.unsqueeze(-1) * scale)
            d_gamma, d_beta = d_gamma.squeeze(-1), d_beta.squeeze(-1)
        else:
            dz.mul_(scale)
        d_codes = torch.stack([torch.mm(dz[j], cols[g].t()) for j, g in enumerate(ctx.which)])
        d_cols: list = [None] * len(cols)
        if any(ctx.needs_input_grad[8:]):  # a later layer: every configuration reads its own maps
            for j, g in enumerate(ctx.which):
                d_cols[g] = torch.mm(codes[j].t(), dz[j])
        return d_codes, None, d_gamma, d_beta, None, None, None, None, *d_cols


@torch.no_grad()
def _update_running(running_mean, running_var, mean, var, n: int) -> None:
    """Batch norm's running statistics after a batch of ``n`` values per channel (biased ``var``)."""
    running_mean.mul_(1.0 - BN_MOMENTUM).add_(BN_MOMENTUM * mean.view_as(running_mean))
    running_var.mul_(1.0 - BN_MOMENTUM).add_(BN_MOMENTUM * (var.view_as(running_var) * (n / max(n - 1, 1))))


def _products(codes: torch.Tensor, scale: torch.Tensor, which: list[int], cols: list, z: torch.Tensor) -> torch.Tensor:
    """Rescaled convolution outputs into ``z`` (M, C_out, N): configuration j's codes times the
    columns ``cols[which[j]]`` (C_in * 9, N), one product per configuration."""
    for j, g in enumerate(which):
        torch.mm(codes[j], cols[g], out=z[j])
    return z.mul_(scale)


def _relu_maps(top: torch.Tensor, shape: tuple) -> torch.Tensor:
    """ReLU of pooled (M, C, B * H * W) maps, laid out (M, B, C, H, W) as the next layer reads them."""
    m, c_out = top.shape[:2]
    out = top.new_empty((m, shape[0], c_out, *shape[1:]))
    torch.clamp_min(top.view(m, c_out, *shape), 0.0, out=out.transpose(1, 2))
    return out


def _conv_block_eval(codes, scale, which: list[int], shape: tuple, cols: list, bn: dict | None) -> torch.Tensor:
    """:class:`_ConvBlockCPU`'s forward in eval mode (batch norm with ``bn``'s running statistics,
    as :meth:`StackedDNN._batch_norm` computes it)."""
    (m, c_out, _), (b, h, w) = codes.shape, shape
    z = _products(codes, scale, which, cols, codes.new_empty((m, c_out, 4 * b * h * w)))
    if bn is not None:
        z.sub_(bn["running_mean"].unsqueeze(-1)).mul_(torch.rsqrt(bn["running_var"] + bn["eps"]).unsqueeze(-1))
        z.mul_(bn["weight"].unsqueeze(-1)).add_(bn["bias"].unsqueeze(-1))
    a, b_, c, d = z.view(m, c_out, 4, -1).unbind(2)
    return _relu_maps(torch.maximum(torch.maximum(a, b_), torch.maximum(c, d)), shape)


def _window_columns(x: torch.Tensor) -> torch.Tensor:
    """The 3x3 'same' convolution's columns of maps ``x`` (B, C_in, H, W), H and W even, window-major:
    (C_in * 9, 4 * B * H/2 * W/2), column (corner, row, y, x) the corner (scan order) of window (y, x)."""
    b, _, h, w = x.shape
    unfolded = F.unfold(x, 3, padding=1)  # (B, C_in * 9, H * W)
    k = unfolded.shape[1]
    return unfolded.view(b, k, h // 2, 2, w // 2, 2).permute(1, 3, 5, 0, 2, 4).reshape(k, -1)
