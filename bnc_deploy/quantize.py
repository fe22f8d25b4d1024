"""Quantizers for log-probability tables, as small named objects (larq style).

``FixedPointLogQuantizer`` implements the paper's fixed-point quantizer for non-positive
log-probabilities (Eq. 9)::

    q(theta) = clip(round(theta * 2**B_F) * 2**-B_F, -U, 0),   U = 2**B_I - 2**-B_F

with ``B_I`` integer bits and ``B_F`` fractional bits (``B_F`` may be negative: then only
every ``2**-B_F``-th integer is reachable). A quantized value is stored as an unsigned integer
code with ``theta_q = -code * 2**-B_F`` and ``code in 0 .. 2**(B_I+B_F) - 1``, so codes fit uint8.

The torch side uses the straight-through estimator: the forward pass returns ``q(theta)``
*exactly* (not ``theta + (q - theta).detach()``, whose float rounding can be one ulp off the
grid, which would break bit-exact export), the backward pass is the identity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Supported ranges (paper, Sec. V-B): total bits 1..8, integer bits 1..6.
MIN_TOTAL_BITS, MAX_TOTAL_BITS = 1, 8
MIN_INT_BITS, MAX_INT_BITS = 1, 6


class UnsupportedBitWidth(ValueError):
    """A bit-width combination outside what the toolkit can train and export exactly."""


@dataclass(frozen=True)
class FixedPointLogQuantizer:
    """Fixed-point quantizer for log-probabilities ``theta <= 0``.

    Parameters
    ----------
    total_bits : int
        ``B = B_I + B_F`` in 1..8 (bits per stored parameter).
    int_bits : int
        ``B_I`` in 1..6. ``frac_bits = total_bits - int_bits`` may be negative.
    """

    total_bits: int
    int_bits: int

    def __post_init__(self) -> None:
        for name in ("total_bits", "int_bits"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise UnsupportedBitWidth(f"{name} must be an integer, got {value!r}")
        if not MIN_TOTAL_BITS <= self.total_bits <= MAX_TOTAL_BITS:
            raise UnsupportedBitWidth(
                f"unsupported bit width B={self.total_bits}: total bits must be in "
                f"{MIN_TOTAL_BITS}..{MAX_TOTAL_BITS} (codes are stored as uint8)")
        if not MIN_INT_BITS <= self.int_bits <= MAX_INT_BITS:
            raise UnsupportedBitWidth(
                f"unsupported integer bits B_I={self.int_bits}: must be in {MIN_INT_BITS}..{MAX_INT_BITS}")

    # -- derived constants ----------------------------------------------------------------------
    @property
    def frac_bits(self) -> int:
        """``B_F = B - B_I`` (may be negative)."""
        return self.total_bits - self.int_bits

    @property
    def step(self) -> float:
        """Grid spacing ``2**-B_F`` (a power of two, exact in float32)."""
        return float(2.0 ** -self.frac_bits)

    @property
    def max_code(self) -> int:
        """Largest code ``2**B - 1``; ``U = max_code * step``."""
        return 2 ** self.total_bits - 1

    @property
    def max_magnitude(self) -> float:
        """``U = 2**B_I - 2**-B_F``, the largest representable ``|theta_q|``."""
        return float(2.0 ** self.int_bits - self.step)

    def levels(self) -> np.ndarray:
        """All representable values, shape (2**B,), from 0 down to -U."""
        return -np.arange(self.max_code + 1, dtype=np.float64) * self.step

    # -- numpy --------------------------------------------------------------------------------
    def to_codes(self, theta: np.ndarray) -> np.ndarray:
        """Quantize log-probabilities to codes: ``code = clip(round(-theta * 2**B_F), 0, 2**B - 1)``.

        ``theta`` of any shape (float, <= 0 expected; positive values clip to code 0).
        Rounds half to even, like ``torch.round``, so torch training and numpy agree.
        """
        theta = np.asarray(theta, dtype=np.float64)
        if not np.all(np.isfinite(theta)):
            raise ValueError("cannot quantize non-finite log-probabilities")
        codes = np.clip(np.round(-theta * 2.0 ** self.frac_bits), 0, self.max_code)
        return codes.astype(np.uint8)

    def from_codes(self, codes: np.ndarray) -> np.ndarray:
        """Dequantize codes to ``theta_q = -code * 2**-B_F`` (float64, exact)."""
        codes = np.asarray(codes)
        if codes.size and int(codes.max()) > self.max_code:
            raise ValueError(f"code {int(codes.max())} exceeds {self.max_code} for {self}")
        return -codes.astype(np.float64) * self.step

    def quantize(self, theta: np.ndarray) -> np.ndarray:
        """``q(theta)`` in numpy (float64)."""
        return self.from_codes(self.to_codes(theta))

    # -- torch (imported lazily: exporters and runtimes must not import torch) ------------------
    def __call__(self, theta):
        """Straight-through quantization of a torch tensor: forward ``q(theta)``, backward identity."""
        return _ste_fixed_point(theta, self.frac_bits, self.max_magnitude)

    def describe(self) -> dict:
        return {"total_bits": self.total_bits, "int_bits": self.int_bits, "frac_bits": self.frac_bits}

    def __str__(self) -> str:
        return f"FixedPointLogQuantizer(B={self.total_bits}, B_I={self.int_bits}, B_F={self.frac_bits})"


def _ste_fixed_point(theta, frac_bits: int, max_magnitude: float):
    from bnc_deploy.models._ste import fixed_point_ste

    return fixed_point_ste(theta, frac_bits, max_magnitude)
