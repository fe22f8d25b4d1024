"""Quantizers as small named objects (larq style), NumPy only: the BN tables' fixed-point log
quantizer and the DNNs' DoReFa weight quantizer.

Torch never appears here: the straight-through versions used in training live in
:mod:`bnc_deploy.models` (``models.ste.fixed_point_ste``, ``models.dnn.quantize_weights_ste``) and
reproduce these functions bit for bit. Exporters, runtimes and the reference use this module.

Fixed-point log quantizer
-------------------------

``FixedPointLogQuantizer`` implements the paper's fixed-point quantizer for non-positive
log-probabilities (Eq. 9)::

    q(theta) = clip(round(theta * 2**B_F) * 2**-B_F, -U, 0),   U = 2**B_I - 2**-B_F

with ``B_I`` integer bits and ``B_F`` fractional bits (``B_F`` may be negative: then only
every ``2**-B_F``-th integer is reachable). A quantized value is stored as an unsigned integer
code with ``theta_q = -code * 2**-B_F`` and ``code in 0 .. 2**(B_I+B_F) - 1``, so codes fit uint8.

The torch side (:func:`bnc_deploy.models.ste.fixed_point_ste`) uses the straight-through estimator:
the forward pass returns ``q(theta)`` *exactly* (not ``theta + (q - theta).detach()``, whose float
rounding can be one ulp off the grid, which would break bit-exact export), the backward pass is the
identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from bnc_deploy.errors import UnsupportedBitWidth as UnsupportedBitWidth  # re-exported: callers import it from here

#: Supported ranges (paper, Sec. V-B): total bits 1..8, integer bits 1..6.
MIN_TOTAL_BITS, MAX_TOTAL_BITS = 1, 8
MIN_INT_BITS, MAX_INT_BITS = 1, 6


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
                f"{MIN_TOTAL_BITS}..{MAX_TOTAL_BITS} (codes are stored as uint8)"
            )
        if not MIN_INT_BITS <= self.int_bits <= MAX_INT_BITS:
            raise UnsupportedBitWidth(
                f"unsupported integer bits B_I={self.int_bits}: must be in {MIN_INT_BITS}..{MAX_INT_BITS}"
            )

    # -- derived constants ----------------------------------------------------------------------
    @property
    def frac_bits(self) -> int:
        """``B_F = B - B_I`` (may be negative)."""
        return self.total_bits - self.int_bits

    @property
    def step(self) -> float:
        """Grid spacing ``2**-B_F`` (a power of two, exact in float32)."""
        return float(2.0**-self.frac_bits)

    @property
    def max_code(self) -> int:
        """Largest code ``2**B - 1``; ``U = max_code * step``."""
        # cast: typeshed types ``int ** int`` as Any (a negative exponent gives a float); total_bits >= 1.
        return cast(int, 2**self.total_bits - 1)

    @property
    def max_magnitude(self) -> float:
        """``U = 2**B_I - 2**-B_F``, the largest representable ``|theta_q|``."""
        return float(2.0**self.int_bits - self.step)

    def levels(self) -> NDArray[np.float64]:
        """All representable values, shape (2**B,), from 0 down to -U."""
        return -np.arange(self.max_code + 1, dtype=np.float64) * self.step

    # -- numpy --------------------------------------------------------------------------------
    def to_codes(self, theta: ArrayLike) -> NDArray[np.uint8]:
        """Quantize log-probabilities to codes: ``code = clip(round(-theta * 2**B_F), 0, 2**B - 1)``.

        ``theta`` of any shape (float, <= 0 expected; positive values clip to code 0).
        Rounds half to even, like ``torch.round``, so torch training and numpy agree.
        """
        theta = np.asarray(theta, dtype=np.float64)
        if not np.all(np.isfinite(theta)):
            raise ValueError("cannot quantize non-finite log-probabilities")
        codes = np.clip(np.round(-theta * 2.0**self.frac_bits), 0, self.max_code)
        return codes.astype(np.uint8)

    def from_codes(self, codes: ArrayLike) -> NDArray[np.float64]:
        """Dequantize codes to ``theta_q = -code * 2**-B_F`` (float64, exact)."""
        codes = np.asarray(codes)
        if codes.size and int(codes.max()) > self.max_code:
            raise ValueError(f"code {int(codes.max())} exceeds {self.max_code} for {self}")
        return -codes.astype(np.float64) * self.step

    def quantize(self, theta: ArrayLike) -> NDArray[np.float64]:
        """``q(theta)`` in numpy (float64)."""
        return self.from_codes(self.to_codes(theta))

    def describe(self) -> dict[str, int]:
        return {"total_bits": self.total_bits, "int_bits": self.int_bits, "frac_bits": self.frac_bits}

    def __str__(self) -> str:
        return f"FixedPointLogQuantizer(B={self.total_bits}, B_I={self.int_bits}, B_F={self.frac_bits})"


# ==============================================================================================
# DoReFa weights and the sign activation (DNNs)
# ==============================================================================================
# DoReFa weight quantizer and the sign activation for small quantized DNNs.
#
# The paper (Sec. "Quantization-aware DNNs", Eqs. 10-11) quantizes a DNN weight ``w`` to ``B`` bits as::
#
#     q_DNN(w) = 2 * q((clip(w, -1, 1) + 1) / 2; B) - 1,    q(v; B) = round((2**B - 1) * v) / (2**B - 1)
#
# With ``M = 2**B - 1`` and ``k = round(M * (clip(w) + 1) / 2)`` in ``0..M`` this is
# ``q_DNN(w) = (2k - M) / M``: an **odd integer code** ``c = 2k - M`` in ``{-M, ..., -1, 1, ..., M}``
# times the scale ``1 / M``. There is no zero level; ``B = 2`` gives ``-1, -1/3, 1/3, 1``.
#
# ``B = 1`` is the sign function with ``sign(0) = +1`` (codes ``+-1``, scale 1). The literal
# formula would send ``w = 0`` to ``-1`` there (``round(0.5) = 0`` under half-to-even), so ``B = 1``
# is defined as ``c = +1 if w >= 0 else -1``; this matches ``B >= 2``, where ``w = 0`` is an exact
# tie that half-to-even rounds *up* (``k = 2**(B-1) - 1`` is odd), so every ``B`` maps 0 to the
# smallest positive level.
#
# Exact arithmetic (the contract with :mod:`bnc_deploy.models.dnn`)
# -----------------------------------------------------------------------
# * Codes are computed in **float64**, literally ``k = round(((clip(w, -1, 1) + 1) / 2) * M)``,
#   ``c = 2k - M``, with **round half to even** (``np.round``; ``torch.round`` does the same). The
#   torch forward casts its float32 weights to float64 and performs the same operations in the same
#   order, so both sides produce the same codes bit for bit, ties included.
# * Values are ``code / M`` in float64 (the correctly rounded quotient), so the levels are exactly
#   ``+-1`` at the ends and exactly symmetric. Cast to float32 this equals the float32 division
#   ``float32(code) / float32(M)`` and ``float32(float64(code) * (1 / M))`` for every code and every
#   ``B`` (checked exhaustively in the tests). It does **not** always equal the float32 product
#   ``float32(code) * float32(1 / M)`` (one ulp off for some codes when ``B >= 3``): an exporter
#   that dequantizes with a float32 multiply (ONNX ``DequantizeLinear``) reproduces the training
#   weights only to one ulp; a float32 ``Div`` by ``M`` reproduces them exactly.


#: Supported weight bit widths (paper: B in 1..8; codes fit int8 up to B = 7, int16 for B = 8).
MIN_WEIGHT_BITS, MAX_WEIGHT_BITS = 1, 8


@dataclass(frozen=True)
class DoReFaWeightQuantizer:
    """DoReFa weight quantizer: ``2**B`` symmetric levels in ``[-1, 1]``, stored as odd integer codes.

    Parameters
    ----------
    bits : int
        ``B`` in 1..8 (bits per stored weight). Anything else, including ``bool`` and non-integral
        numbers, raises :class:`~bnc_deploy.errors.UnsupportedBitWidth`.

    Examples
    --------
    >>> q = DoReFaWeightQuantizer(2)
    >>> q.levels().tolist() == [-1.0, -1 / 3, 1 / 3, 1.0]
    True
    >>> q.to_codes([-2.0, -0.2, 0.0, 0.9]).tolist()
    [-3, -1, 1, 3]
    """

    bits: int

    def __post_init__(self) -> None:
        bits = self.bits
        if isinstance(bits, (bool, np.bool_)) or not isinstance(bits, (int, np.integer)):
            raise UnsupportedBitWidth(
                f"weight bit width must be an integer in {MIN_WEIGHT_BITS}..{MAX_WEIGHT_BITS}, got {bits!r}"
            )
        if not MIN_WEIGHT_BITS <= bits <= MAX_WEIGHT_BITS:
            raise UnsupportedBitWidth(
                f"unsupported weight bit width B={bits}: must be in {MIN_WEIGHT_BITS}..{MAX_WEIGHT_BITS} "
                "(codes are stored as int8/int16)"
            )
        object.__setattr__(self, "bits", int(bits))  # plain int: describe() stays JSON-serializable

    # -- derived constants ----------------------------------------------------------------------
    @property
    def max_code(self) -> int:
        """``M = 2**B - 1``, the largest code magnitude (codes are odd, ``-M..M``)."""
        # cast: typeshed types ``int ** int`` as Any (a negative exponent gives a float); bits >= 1.
        return cast(int, 2**self.bits - 1)

    @property
    def scale(self) -> float:
        """``1 / M`` (float64); a level is ``code * scale``, computed as ``code / M`` (see module doc)."""
        return 1.0 / self.max_code

    @property
    def code_dtype(self) -> np.dtype[np.int8 | np.int16]:
        """int8 for ``B <= 7`` (``|code| <= 127``), int16 for ``B = 8`` (``|code| <= 255``)."""
        return np.dtype(np.int8 if self.max_code <= 127 else np.int16)

    def codes(self) -> NDArray[np.int8 | np.int16]:
        """All codes, ascending: shape (2**B,), the odd integers ``-M, -M+2, ..., M``."""
        return np.arange(-self.max_code, self.max_code + 1, 2).astype(self.code_dtype)

    def levels(self) -> NDArray[np.float64]:
        """All representable values, ascending: shape (2**B,), float64, from -1 to 1, symmetric."""
        return self.from_codes(self.codes())

    # -- numpy --------------------------------------------------------------------------------
    def to_codes(self, w: ArrayLike) -> NDArray[np.int8 | np.int16]:
        """Quantize weights to odd integer codes.

        Parameters
        ----------
        w : array-like of float, any shape
            Real-valued (latent) weights; values outside ``[-1, 1]`` are clipped first.

        Returns
        -------
        codes : ndarray of :attr:`code_dtype`, same shape as ``w``
            Odd integers in ``-M..M``; ``w >= 0`` gives a positive code for every ``B``.
        """
        # A new name, not ``w``: reassigning the ArrayLike parameter would lose the ndarray type.
        weights = np.asarray(w, dtype=np.float64)
        if not np.all(np.isfinite(weights)):
            raise ValueError("cannot quantize non-finite weights")
        weights = np.clip(weights, -1.0, 1.0)
        if self.bits == 1:
            # sign with sign(0) = +1 (the DoReFa formula would give -1 at the tie w = 0).
            return np.where(weights >= 0.0, 1, -1).astype(self.code_dtype)
        # Float64, this exact order, half to even: the torch forward repeats it op for op.
        k = np.round(((weights + 1.0) / 2.0) * self.max_code)
        return (2.0 * k - self.max_code).astype(self.code_dtype)

    def from_codes(self, codes: ArrayLike) -> NDArray[np.float64]:
        """Dequantize codes to ``code / M`` (float64, correctly rounded).

        Parameters
        ----------
        codes : array-like of int, any shape
            Odd integers in ``-M..M``; anything else raises ``ValueError``.

        Returns
        -------
        values : ndarray of float64, same shape as ``codes``
        """
        codes = np.asarray(codes)
        if codes.dtype.kind not in "iu":
            if codes.dtype.kind != "f" or not np.all(np.isfinite(codes)) or np.any(codes != np.round(codes)):
                raise ValueError(f"codes must be integers, got dtype {codes.dtype}")
        values = codes.astype(np.float64)
        if values.size:
            if np.any(np.abs(values) > self.max_code):
                raise ValueError(f"code {values[np.argmax(np.abs(values))]:.0f} exceeds +-{self.max_code} for {self}")
            if np.any(values % 2 == 0):
                raise ValueError(
                    f"codes must be odd for {self} (there is no zero level), got {values[values % 2 == 0].flat[0]:.0f}"
                )
        return values / self.max_code

    def quantize(self, w: ArrayLike) -> NDArray[np.float64]:
        """``q_DNN(w)`` in numpy: ``from_codes(to_codes(w))``, float64, same shape as ``w``."""
        return self.from_codes(self.to_codes(w))

    def describe(self) -> dict[str, str | int | float]:
        return {
            "quantizer": "dorefa_weights",
            "bits": self.bits,
            "max_code": self.max_code,
            "scale": self.scale,
            "n_levels": 2**self.bits,
            "code_dtype": self.code_dtype.name,
        }

    def __str__(self) -> str:
        m = self.max_code
        return f"DoReFaWeightQuantizer(B={self.bits}, codes=odd -{m}..{m}, scale=1/{m})"


def sign_activation(a: ArrayLike) -> NDArray[np.float64]:
    """Deterministic sign activation: ``+1.0`` where ``a >= 0``, else ``-1.0``.

    Parameters
    ----------
    a : array-like of float, any shape

    Returns
    -------
    ndarray of float64, same shape as ``a``, values in ``{-1.0, +1.0}``

    Notes
    -----
    ``sign(0) = +1`` here (and ``NaN`` gives ``-1``, since the comparison is false), matching the
    eval-mode torch activation. ONNX ``Sign`` (and ``np.sign``) return **0** at 0, which is wrong
    for this network: an exporter must use e.g. ``Where(a >= 0, 1, -1)`` instead of ``Sign``.
    """
    a = np.asarray(a)
    return np.where(a >= 0, 1.0, -1.0)
