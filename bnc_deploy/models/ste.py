"""Straight-through autograd functions (torch only)."""

from __future__ import annotations

import torch


class _FixedPointSTE(torch.autograd.Function):
    """Forward: ``clip(round(theta * 2**B_F) * 2**-B_F, -U, 0)``. Backward: identity."""

    @staticmethod
    def forward(ctx, theta, frac_bits: int, max_magnitude: float):
        scale = 2.0**frac_bits  # a power of two: the products below are exact
        return torch.clamp(torch.round(theta * scale) / scale, -max_magnitude, 0.0)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None, None


def fixed_point_ste(theta: torch.Tensor, quantizer) -> torch.Tensor:
    """Straight-through :class:`~bnc_deploy.quantizers.FixedPointLogQuantizer`: forward ``q(theta)``
    exactly (bit for bit the NumPy ``quantizer.quantize``), backward the identity."""
    return _FixedPointSTE.apply(theta, quantizer.frac_bits, quantizer.max_magnitude)
