"""Budget-matched DNN sizing: hidden widths / channels that match a bit or operation budget.

The paper (Secs. "Fixed parameter memory budget" and "Fixed number of operations budget") sizes
its DNNs so that they cost about as much as a given naive Bayes classifier:

* **FC NNs**: ``L`` weight layers (the paper: ``L`` in 2..5), ``L - 1`` hidden layers of equal
  width ``H`` without biases, optional batch norm after every hidden affine map, an output layer
  with bias; ``D`` inputs, ``C`` classes.
* **CNNs**: one or two 3x3 'same' convolutions without bias (optional batch norm per channel, an
  activation, 2x2 max-pooling with floor), the second with twice the channels of the first, then a
  dense output layer with bias; input ``E x S_h x S_w`` (``E = 1`` for standardized inputs, the
  largest cardinality for one-hot inputs), ``S1 = floor(S / 2)``, ``S2 = floor(S1 / 2)``.

Costs follow :mod:`bnc_deploy.costs` (``B`` bits per weight, 64 per batch-norm unit, 32
per output bias; one op per MAC, per batch-norm output and per output bias; activations and
pooling free). For a width ``x`` (``H``, or ``C1`` with ``C2 = 2 x``) each cost is a polynomial
``a x**2 + b x + c`` with integer coefficients (:class:`CostPolynomial`)::

    FC  bits = B(L-2) H^2 + (B(D+C) + 64(L-1)bn) H + 32C
    FC  ops  =  (L-2) H^2 + (D + C + (L-1)bn) H + C
    CNN bits (1 conv)  = (9EB + S1h S1w C B + 64 bn) C1 + 32C
    CNN bits (2 convs) = 18B C1^2 + (9EB + 2 S2h S2w C B + 192 bn) C1 + 32C
    CNN ops  (1 conv)  = (9E Sh Sw + bn Sh Sw + S1h S1w C) C1 + C
    CNN ops  (2 convs) = 18 S1h S1w C1^2 + (9E Sh Sw + bn Sh Sw + 2 bn S1h S1w + 2 S2h S2w C) C1 + C

(``bn`` = 1 with batch norm, else 0). The real-valued root ``x*`` of ``cost(x) = target`` is
rounded to the nearest integer, **ties up** (``floor(x* + 1/2)``); for two convolutions
``C1 = round(x*)`` and ``C2 = round(2 x*)`` are rounded separately (the paper's rule), so ``C2``
is not always ``2 C1``. The rounding is decided exactly (integer/rational comparisons of the
polynomial at the half-integers), not by the floating-point root. A budget whose root is below
1/2 (it would round to 0 units) raises ``ConfigError`` (a ValueError) naming the smallest admissible budget.

The reported ``achieved_bits`` / ``achieved_ops`` always come from
:func:`~bnc_deploy.costs.dnn_costs` on the rounded layer list (one source of truth);
the polynomials are only used to solve, and the tests check that they agree with ``dnn_costs``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from numbers import Integral

from bnc_deploy.costs import DNN_BATCH_NORM_BITS, DNN_BIAS_BITS, Conv2D, CostReport, Dense, Free, dnn_costs
from bnc_deploy.errors import ConfigError

KERNEL = (3, 3)
TARGET_KINDS = ("bits", "ops")


# -- validation ------------------------------------------------------------------------------------
def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _image_hw(image_hw) -> tuple[int, int]:
    try:
        h, w = image_hw
    except (TypeError, ValueError):
        raise ConfigError(f"image_hw must be a pair (height, width), got {image_hw!r}") from None
    return _positive_int("image height", h), _positive_int("image width", w)


def _pooled(hw: tuple[int, int], n_pool: int) -> tuple[int, int]:
    """Spatial size after ``n_pool`` 2x2 max-poolings with floor."""
    h, w = hw
    for _ in range(n_pool):
        h, w = h // 2, w // 2
    return h, w


def _target(target_bits, target_ops) -> tuple[str, int]:
    if (target_bits is None) == (target_ops is None):
        raise ConfigError("give exactly one of target_bits and target_ops")
    kind, value = ("bits", target_bits) if target_bits is not None else ("ops", target_ops)
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(f"target_{kind} must be a positive integer, got {value!r}")
    if value <= 0:
        raise ConfigError(f"target_{kind} must be positive, got {value}")
    return kind, int(value)


# -- layer lists and costs -------------------------------------------------------------------------
def fc_layers(n_inputs: int, hidden, n_classes: int, batch_norm: bool) -> list:
    """Layer list of the paper's FC NN for :func:`~bnc_deploy.costs.dnn_costs`.

    Parameters
    ----------
    n_inputs : int
        ``D``.
    hidden : sequence of int
        Hidden widths, length ``L - 1`` >= 1 (the paper uses equal widths; any are accepted).
    n_classes : int
        ``C``.
    batch_norm : bool
        Batch norm after every hidden affine map (hidden layers never have biases).

    Returns
    -------
    list of Dense / Free
        ``[Dense(D, H1, bn), Free, ..., Dense(H_{L-1}, C, bias=True)]``.
    """
    d, c = _positive_int("n_inputs", n_inputs), _positive_int("n_classes", n_classes)
    widths = [_positive_int(f"hidden[{i}]", h) for i, h in enumerate(hidden)]
    if not widths:
        raise ConfigError("an FC NN needs at least one hidden layer (L >= 2 weight layers)")
    layers, previous = [], d
    for h in widths:
        layers += [Dense(previous, h, batch_norm=bool(batch_norm), bias=False), Free("activation")]
        previous = h
    layers.append(Dense(previous, c, batch_norm=False, bias=True))
    return layers


def cnn_layers(image_hw, in_channels: int, channels, n_classes: int, batch_norm: bool) -> list:
    """Layer list of the paper's CNN for :func:`~bnc_deploy.costs.dnn_costs`.

    Parameters
    ----------
    image_hw : (int, int)
        Input height and width ``(S_h, S_w)``.
    in_channels : int
        ``E`` (1 for standardized inputs, the largest cardinality for one-hot inputs).
    channels : sequence of int, length 1 or 2
        Channels of the convolutions (the paper uses ``C2 ~ 2 C1``; any are accepted).
    n_classes : int
    batch_norm : bool
        Batch norm per channel after each convolution (convolutions never have biases).

    Returns
    -------
    list of Conv2D / Dense / Free
        Per convolution ``Conv2D(3x3, out_hw = input size) , Free(activation), Free(maxpool)``,
        then ``Free(flatten), Dense(channels[-1] * pooled_h * pooled_w, C, bias=True)``.
    """
    hw = _image_hw(image_hw)
    e, c = _positive_int("in_channels", in_channels), _positive_int("n_classes", n_classes)
    chans = [_positive_int(f"channels[{i}]", ch) for i, ch in enumerate(channels)]
    if len(chans) not in (1, 2):
        raise ConfigError(f"the paper's CNNs have 1 or 2 convolutions, got {len(chans)} channel counts")
    pooled = _pooled(hw, len(chans))
    if min(pooled) < 1:
        raise ConfigError(
            f"a {hw[0]}x{hw[1]} image is too small for {len(chans)} 2x2 max-pooling(s) "
            f"(size after pooling: {pooled[0]}x{pooled[1]})"
        )
    layers, previous, size = [], e, hw
    for ch in chans:
        # 'same' padding, stride 1: the convolution outputs one position per input pixel.
        layers += [
            Conv2D(previous, ch, KERNEL, size, batch_norm=bool(batch_norm), bias=False),
            Free("activation"),
            Free("maxpool 2x2"),
        ]
        previous, size = ch, _pooled(size, 1)
    layers += [Free("flatten"), Dense(previous * size[0] * size[1], c, batch_norm=False, bias=True)]
    return layers


def fc_costs(n_inputs: int, hidden, n_classes: int, bits: int, batch_norm: bool) -> CostReport:
    """:func:`dnn_costs` of :func:`fc_layers` at ``bits`` bits per weight."""
    return dnn_costs(fc_layers(n_inputs, hidden, n_classes, batch_norm), _positive_int("bits", bits))


def cnn_costs(image_hw, in_channels: int, channels, n_classes: int, bits: int, batch_norm: bool) -> CostReport:
    """:func:`dnn_costs` of :func:`cnn_layers` at ``bits`` bits per weight."""
    return dnn_costs(cnn_layers(image_hw, in_channels, channels, n_classes, batch_norm), _positive_int("bits", bits))


# -- the cost polynomials --------------------------------------------------------------------------
@dataclass(frozen=True)
class CostPolynomial:
    """``cost(x) = a x**2 + b x + c`` with integers ``a >= 0``, ``b > 0``: increasing for ``x >= 0``."""

    a: int
    b: int
    c: int

    def __call__(self, x):
        """Exact for int / Fraction ``x``, float for float ``x``."""
        return (self.a * x + self.b) * x + self.c

    def solve(self, target) -> float:
        """Real root ``x >= 0`` of ``cost(x) = target`` (``target >= c``).

        Uses ``x = 2 (T - c) / (b + sqrt(b^2 + 4 a (T - c)))``, which has no cancellation and
        covers ``a = 0``.
        """
        rest = target - self.c
        return 2.0 * rest / (self.b + math.sqrt(self.b * self.b + 4.0 * self.a * rest))

    def rounded_root(self, target: int, factor: int = 1) -> int:
        """``floor(factor * x* + 1/2)`` for the root ``x*``, decided exactly.

        That integer is the largest ``n`` with ``cost((n - 1/2) / factor) <= target`` (``cost`` is
        increasing), so the float root only provides the first guess.
        """
        n = math.floor(factor * self.solve(target) + 0.5)
        while n > 0 and self(Fraction(2 * n - 1, 2 * factor)) > target:
            n -= 1
        while self(Fraction(2 * n + 1, 2 * factor)) <= target:
            n += 1
        return n


def fc_polynomial(
    n_inputs: int, n_classes: int, n_layers: int, bits: int, batch_norm: bool, kind: str
) -> CostPolynomial:
    """Bits or ops of the equal-width FC NN as a polynomial in the hidden width ``H``."""
    d, c, L, b = n_inputs, n_classes, n_layers, bits
    bn = 1 if batch_norm else 0
    if kind == "bits":
        # weights D·H + (L-2)·H^2 + H·C at B bits; (L-1)·H batch-norm units; C output biases.
        return CostPolynomial(b * (L - 2), b * (d + c) + DNN_BATCH_NORM_BITS * (L - 1) * bn, DNN_BIAS_BITS * c)
    if kind == "ops":
        # MACs D·H + (L-2)·H^2 + H·C; (L-1)·H batch-norm outputs; C bias outputs.
        return CostPolynomial(L - 2, d + c + (L - 1) * bn, c)
    raise ConfigError(f"kind must be one of {TARGET_KINDS}, got {kind!r}")


def cnn_polynomial(
    image_hw, in_channels: int, n_classes: int, n_conv: int, bits: int, batch_norm: bool, kind: str
) -> CostPolynomial:
    """Bits or ops of the CNN as a polynomial in the first layer's channels ``C1`` (``C2 = 2 C1``)."""
    (sh, sw), e, c, b = _image_hw(image_hw), in_channels, n_classes, bits
    bn = 1 if batch_norm else 0
    p1, p2 = sh // 2 * (sw // 2), sh // 2 // 2 * (sw // 2 // 2)  # positions after one / two poolings
    if kind == "bits":
        if n_conv == 1:
            return CostPolynomial(0, 9 * e * b + p1 * c * b + DNN_BATCH_NORM_BITS * bn, DNN_BIAS_BITS * c)
        # conv2 has 9·C1·(2·C1) weights; the dense layer sees 2·C1·S2h·S2w; BN units C1 + 2·C1.
        return CostPolynomial(18 * b, 9 * e * b + 2 * p2 * c * b + 3 * DNN_BATCH_NORM_BITS * bn, DNN_BIAS_BITS * c)
    if kind == "ops":
        first = 9 * e * sh * sw + bn * sh * sw  # conv1 MACs and BN outputs per channel, at full size
        if n_conv == 1:
            return CostPolynomial(0, first + p1 * c, c)
        return CostPolynomial(18 * p1, first + 2 * bn * p1 + 2 * p2 * c, c)
    raise ConfigError(f"kind must be one of {TARGET_KINDS}, got {kind!r}")


# -- matching -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SizingResult:
    """A budget-matched architecture.

    Attributes
    ----------
    architecture : {"fc", "cnn"}
    widths : tuple of int
        Hidden widths (FC, length ``L - 1``, all equal) or channels (CNN, length ``n_conv``).
    real_solution : float
        The real-valued root: ``H`` (FC) or ``C1`` (CNN; the second layer's real value is twice it).
    target_kind : {"bits", "ops"}
    target : int
    achieved_bits, achieved_ops : int
        ``dnn_costs`` of the rounded architecture.
    absolute_error : int
        ``achieved - target`` for the matched quantity (may be negative or positive: rounding to nearest).
    relative_error : float
        ``absolute_error / target``.
    input_shape : tuple of int
        ``(D,)`` (FC) or ``(E, S_h, S_w)`` (CNN).
    n_classes, bits : int
    batch_norm : bool
    """

    architecture: str
    widths: tuple
    real_solution: float
    target_kind: str
    target: int
    achieved_bits: int
    achieved_ops: int
    absolute_error: int
    relative_error: float
    input_shape: tuple
    n_classes: int
    bits: int
    batch_norm: bool

    @property
    def achieved(self) -> int:
        """The achieved value of the matched quantity."""
        return self.achieved_bits if self.target_kind == "bits" else self.achieved_ops

    def layers(self) -> list:
        """The rounded architecture as a ``dnn_costs`` layer list."""
        if self.architecture == "fc":
            return fc_layers(self.input_shape[0], self.widths, self.n_classes, self.batch_norm)
        return cnn_layers(self.input_shape[1:], self.input_shape[0], self.widths, self.n_classes, self.batch_norm)

    def costs(self) -> CostReport:
        return dnn_costs(self.layers(), self.bits)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["widths"], d["input_shape"] = list(self.widths), list(self.input_shape)
        return d


def _match(
    architecture: str,
    polynomial_for,
    layers_for,
    factors: tuple,
    input_shape: tuple,
    n_classes: int,
    bits: int,
    batch_norm: bool,
    target_bits,
    target_ops,
    what: str,
) -> SizingResult:
    kind, target = _target(target_bits, target_ops)
    poly = polynomial_for(kind)
    smallest = poly(Fraction(1, 2))  # the root must reach 1/2 to round to one unit
    if target < smallest:
        # For reference: the network at real width 1 (CNN: C1 = 1, C2 = 2).
        one_unit = dnn_costs(layers_for(list(factors)), bits)
        raise ConfigError(
            f"target_{kind}={target:,} is too small for {what}: the width would round to 0 units; "
            f"the smallest admissible budget is {math.ceil(smallest):,} {kind} "
            f"(widths {tuple(factors)} cost {one_unit.size_bits if kind == 'bits' else one_unit.n_ops:,} {kind})"
        )
    real = poly.solve(target)
    # root >= 1/2 here, so every factor >= 1 gives at least one unit (max() only guards the invariant).
    widths = tuple(max(1, poly.rounded_root(target, f)) for f in factors)
    report = dnn_costs(layers_for(list(widths)), bits)
    achieved = report.size_bits if kind == "bits" else report.n_ops
    return SizingResult(
        architecture=architecture,
        widths=widths,
        real_solution=real,
        target_kind=kind,
        target=target,
        achieved_bits=report.size_bits,
        achieved_ops=report.n_ops,
        absolute_error=achieved - target,
        relative_error=(achieved - target) / target,
        input_shape=input_shape,
        n_classes=n_classes,
        bits=bits,
        batch_norm=bool(batch_norm),
    )


def match_fc(
    n_inputs: int,
    n_classes: int,
    n_layers: int,
    bits: int,
    batch_norm: bool,
    target_bits: int | None = None,
    target_ops: int | None = None,
) -> SizingResult:
    """Equal hidden width ``H`` of an ``L``-layer FC NN matching a bit or an operation budget.

    Parameters
    ----------
    n_inputs : int
        ``D`` (input features; for one-hot inputs the total number of one-hot columns).
    n_classes : int
        ``C``.
    n_layers : int
        ``L >= 2`` weight layers (``L - 1`` hidden layers; the paper evaluates 2..5).
    bits : int
        ``B`` bits per weight (32 for a float network).
    batch_norm : bool
    target_bits, target_ops : int
        Exactly one: the budget to match.

    Returns
    -------
    SizingResult
        ``widths = (H,) * (L - 1)`` with ``H = floor(H* + 1/2)``.
    """
    d, c = _positive_int("n_inputs", n_inputs), _positive_int("n_classes", n_classes)
    L, b = _positive_int("n_layers", n_layers, minimum=2), _positive_int("bits", bits)
    return _match(
        "fc",
        lambda kind: fc_polynomial(d, c, L, b, batch_norm, kind),
        lambda widths: fc_layers(d, widths, c, batch_norm),
        (1,) * (L - 1),
        (d,),
        c,
        b,
        batch_norm,
        target_bits,
        target_ops,
        f"an FC NN with L={L} layers",
    )


def match_cnn(
    image_hw,
    in_channels: int,
    n_classes: int,
    n_conv: int,
    bits: int,
    batch_norm: bool,
    target_bits: int | None = None,
    target_ops: int | None = None,
) -> SizingResult:
    """Channels of a 1- or 2-convolution CNN matching a bit or an operation budget.

    Parameters
    ----------
    image_hw : (int, int)
        ``(S_h, S_w)``; at least 2x2 (1 conv) or 4x4 (2 convs) so that pooling leaves a pixel.
    in_channels : int
        ``E``.
    n_classes : int
    n_conv : {1, 2}
    bits : int
    batch_norm : bool
    target_bits, target_ops : int
        Exactly one: the budget to match.

    Returns
    -------
    SizingResult
        ``widths = (C1,)`` or ``(C1, C2)`` with ``C1 = floor(x* + 1/2)``, ``C2 = floor(2 x* + 1/2)``
        (rounded separately; ``C2`` is ``2 C1 - 1``, ``2 C1`` or ``2 C1 + 1``).
    """
    hw = _image_hw(image_hw)
    e, c = _positive_int("in_channels", in_channels), _positive_int("n_classes", n_classes)
    b = _positive_int("bits", bits)
    if n_conv not in (1, 2) or isinstance(n_conv, bool):
        raise ConfigError(f"n_conv must be 1 or 2, got {n_conv!r}")
    pooled = _pooled(hw, n_conv)
    if min(pooled) < 1:
        raise ConfigError(f"a {hw[0]}x{hw[1]} image is too small for {n_conv} 2x2 max-pooling(s)")
    factors = (1,) if n_conv == 1 else (1, 2)
    return _match(
        "cnn",
        lambda kind: cnn_polynomial(hw, e, c, n_conv, b, batch_norm, kind),
        lambda widths: cnn_layers(hw, e, widths, c, batch_norm),
        factors,
        (e, *hw),
        c,
        b,
        batch_norm,
        target_bits,
        target_ops,
        f"a CNN with {n_conv} convolution(s)",
    )
