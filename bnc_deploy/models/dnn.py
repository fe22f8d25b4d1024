"""Quantized DNNs for discrete features (torch; training only): the paper's FC nets and CNNs.

* :class:`QuantMLP`: ``L`` weight layers with equal hidden widths, no hidden biases, optional
  batch norm after each hidden affine map, activation (ReLU or stochastic sign), output layer
  with bias.
* :class:`QuantCNN`: one or two 3x3 'same' convolutions without bias -> optional batch norm ->
  activation -> 2x2 max-pool (floor), the second with twice the channels, then a dense output
  layer with bias.

Both take the encoded inputs (see :mod:`bnc_deploy.artifacts.encoding`) as float tensors (FC:
``(N, n_inputs)``; CNN: ``(N, E, H, W)``) and return logits ``(N, C)``. ``to_layers`` turns a
trained net into the artifact's :class:`~bnc_deploy.artifacts.dnn.DNNLayer` list (integer codes,
batch norm folded into scale and shift).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from bnc_deploy.artifacts.dnn import DNNLayer
from bnc_deploy.quantizers import DoReFaWeightQuantizer

# ==============================================================================================
# Quantization-aware building blocks
# ==============================================================================================
# Quantization-aware DNN building blocks (torch, training only).
#
# * :func:`quantize_weights_ste` -- DoReFa weight quantization with the identity straight-through
#   estimator (paper Sec. "Quantization-aware DNNs"). The forward value is *exactly*
#   :meth:`DoReFaWeightQuantizer.quantize <bnc_deploy.quantizers.DoReFaWeightQuantizer.quantize>`
#   cast to the input dtype (computed as ``float64`` codes, then ``code / M``, then cast), not
#   ``w + (q - w).detach()``, whose float rounding can land one ulp off the grid.
# * :func:`stochastic_sign` -- the stochastic sign activation for training (``+1`` with probability
#   ``(1 + a) / 2``), deterministic ``sign`` with ``sign(0) = +1`` at evaluation; the backward pass
#   is the derivative of ``tanh`` in both modes.
# * :class:`QuantDense`, :class:`QuantConv2d`, :class:`Activation` -- the layers the paper's FC NNs
#   and CNNs are made of.
#
# Clip gradient (a decision callers must know): the layers compute ``q(clip(w, -1, 1))`` where only
# ``q`` uses the straight-through identity; ``clip`` keeps its natural derivative (1 inside
# ``[-1, 1]``, boundaries included, 0 outside). This is the paper's formula taken literally (the STE
# replaces only the zero-almost-everywhere derivative of the piecewise-constant ``q``). A latent
# weight pushed beyond ``+-1`` therefore receives no gradient; with Glorot initialisation the
# weights start well inside, and a trainer may clamp the latent weights after each optimizer step
# (:meth:`QuantDense.clamp_latent_`) to keep every weight trainable.


# -- weights -------------------------------------------------------------------------------------
def _dorefa_forward(w: torch.Tensor, bits: int) -> torch.Tensor:
    """``q_DNN(w)`` op for op like :meth:`DoReFaWeightQuantizer.to_codes` / ``from_codes``.

    Codes in float64: ``k = round(((clip(w) + 1) / 2) * M)`` (``torch.round`` rounds half to even,
    as ``np.round``), ``c = 2k - M``; ``B = 1``: ``c = +1 if w >= 0 else -1``. Value ``c / M`` in
    float64, cast to ``w.dtype``: for float32 this is ``float32(code / M)``, bit-identical to
    ``DoReFaWeightQuantizer(bits).quantize(w).astype(np.float32)``.
    """
    m = 2**bits - 1
    w64 = torch.clamp(w.detach().to(torch.float64), -1.0, 1.0)
    if bits == 1:
        codes = torch.where(w64 >= 0.0, 1.0, -1.0).to(torch.float64)
    else:
        codes = 2.0 * torch.round(((w64 + 1.0) / 2.0) * m) - m
    return (codes / m).to(w.dtype)


class _DoReFaSTE(torch.autograd.Function):
    """Forward: ``q_DNN(w)`` exactly (clip included). Backward: identity (also outside ``[-1, 1]``)."""

    @staticmethod
    def forward(ctx, w, bits: int):
        return _dorefa_forward(w, bits)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None


def quantize_weights_ste(w: torch.Tensor, bits: int) -> torch.Tensor:
    """DoReFa weight quantization with the identity straight-through estimator.

    Parameters
    ----------
    w : Tensor of float, any shape
        Latent weights (clipped to ``[-1, 1]`` inside the forward).
    bits : int
        ``B`` in 1..8 (validated by :class:`~bnc_deploy.quantizers.DoReFaWeightQuantizer`).

    Returns
    -------
    Tensor, same shape and dtype as ``w``
        Forward: exactly ``DoReFaWeightQuantizer(bits).quantize(w)`` cast to ``w.dtype``.
        Backward: the incoming gradient unchanged, everywhere (the identity STE of the paper;
        the layers add the clip derivative separately, see the module docstring).
    """
    quantizer = DoReFaWeightQuantizer(bits)  # validates bits with a precise error
    if not torch.is_floating_point(w):
        raise TypeError(f"weights must be a floating-point tensor, got {w.dtype}")
    if not bool(torch.isfinite(w.detach()).all()):
        raise ValueError("cannot quantize non-finite weights")
    return _DoReFaSTE.apply(w, quantizer.bits)


# -- activations ---------------------------------------------------------------------------------
class StochasticSign(torch.autograd.Function):
    """Sign activation with the ``tanh'`` straight-through gradient.

    Forward (``training=True``): ``+1`` with probability ``p = clip((1 + a) / 2, 0, 1)``, else
    ``-1``, drawn as ``+1 iff u < p`` with ``u ~ U[0, 1)`` from ``torch.rand`` (same distribution
    as the paper's ``u <= (1 + a) / 2``; the strict ``<`` makes ``a >= 1`` *always* ``+1`` and
    ``a <= -1`` *always* ``-1``, even if ``torch.rand`` returns exactly 0).
    Forward (``training=False``): ``+1 if a >= 0 else -1`` (``sign(0) = +1``, ``NaN -> -1``).
    Backward (both modes): ``grad * (1 - tanh(a)**2)``.
    """

    @staticmethod
    def forward(ctx, a, training: bool, generator):
        ctx.save_for_backward(a)
        if training:
            u = torch.rand(a.shape, generator=generator, dtype=a.dtype, device=a.device)
            positive = u < torch.clamp((1.0 + a) / 2.0, 0.0, 1.0)
        else:
            positive = a >= 0
        return torch.where(positive, 1.0, -1.0).to(a.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (a,) = ctx.saved_tensors
        return grad_output * (1.0 - torch.tanh(a) ** 2), None, None


def stochastic_sign(a: torch.Tensor, training: bool, generator: torch.Generator | None = None) -> torch.Tensor:
    """Functional form of :class:`StochasticSign`.

    Parameters
    ----------
    a : Tensor of float, any shape
    training : bool
        Stochastic (True) or deterministic (False) forward.
    generator : torch.Generator, optional
        Source of ``u`` in training mode (default: torch's global generator).

    Returns
    -------
    Tensor, same shape and dtype as ``a``, values in ``{-1, +1}``
    """
    if not torch.is_floating_point(a):
        raise TypeError(f"activations must be a floating-point tensor, got {a.dtype}")
    return StochasticSign.apply(a, bool(training), generator)


class Activation(nn.Module):
    """``"relu"`` or ``"sign"`` (stochastic in training mode, deterministic in eval mode).

    Parameters
    ----------
    kind : {"relu", "sign"}
    generator : torch.Generator, optional
        Random source of the stochastic sign (default: torch's global generator).
    """

    KINDS = ("relu", "sign")

    def __init__(self, kind: str, generator: torch.Generator | None = None):
        super().__init__()
        if kind not in self.KINDS:
            raise ValueError(f"unknown activation {kind!r}: expected one of {', '.join(self.KINDS)}")
        self.kind = kind
        self.generator = generator

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        if self.kind == "relu":
            return F.relu(a)
        return stochastic_sign(a, self.training, self.generator)

    def extra_repr(self) -> str:
        return repr(self.kind)


# -- layers --------------------------------------------------------------------------------------
class _QuantWeightMixin:
    """Shared weight handling: latent float ``weight`` -> ``q(clip(weight))``, codes for export."""

    weight: nn.Parameter
    quantizer: DoReFaWeightQuantizer

    def quantized_weight(self) -> torch.Tensor:
        """Forward weights ``q(clip(w, -1, 1))``: clip with its natural gradient, ``q`` with the identity STE."""
        return quantize_weights_ste(torch.clamp(self.weight, -1.0, 1.0), self.quantizer.bits)

    def integer_weight(self) -> torch.Tensor:
        """The weight codes as integer-valued floats, with the identity STE of :meth:`quantized_weight`
        scaled by ``2**B - 1``.

        Layers multiply by these and rescale the *sum* by ``1 / (2**B - 1)``: the inputs are
        integers times a power of two (fixed-point inputs, +-1 after a sign), so the sums are exact
        in float32 and a sign unit sees exactly the value the artifact's integer machine sees (a
        float sum of ``code / 3`` terms can land at -4e-17 where the true value is 0).
        ``scaled + (round(scaled) - scaled)`` is exact: both are within a factor 2 (Sterbenz).
        """
        scaled = self.quantized_weight() * float(self.quantizer.max_code)
        return scaled + (torch.round(scaled) - scaled).detach()

    def weight_codes(self) -> np.ndarray:
        """Integer codes of the current weights (numpy, :attr:`DoReFaWeightQuantizer.code_dtype`),
        same shape as ``weight``; ``quantizer.from_codes(codes)`` equals the forward weights."""
        return self.quantizer.to_codes(self.weight.detach().cpu().to(torch.float64).numpy())

    @torch.no_grad()
    def clamp_latent_(self) -> None:
        """Clamp the latent weights to ``[-1, 1]`` in place (optional, after an optimizer step), so
        that no weight sits where the clip gradient is zero. Does not change the forward output."""
        self.weight.clamp_(-1.0, 1.0)


class QuantDense(_QuantWeightMixin, nn.Module):
    """Fully connected layer with DoReFa-quantized weights: ``y = x @ q(clip(W)).T (+ b)``,
    computed as ``(x @ codes.T) / (2**B - 1) (+ b)`` (see :meth:`integer_weight`).

    Parameters
    ----------
    in_features, out_features : int
    bits : int
        Weight bit width ``B`` in 1..8.
    bias : bool, default False
        Float bias (the paper's output layer; hidden layers have none), initialised to zero.

    Attributes
    ----------
    weight : Parameter of shape (out_features, in_features)
        Latent float weights, Glorot-uniform initialised (``nn.init.xavier_uniform_``).
    bias : Parameter of shape (out_features,) or None
    quantizer : DoReFaWeightQuantizer

    Shapes: input (N, in_features) -> output (N, out_features).
    """

    def __init__(self, in_features: int, out_features: int, bits: int, bias: bool = False):
        super().__init__()
        self.quantizer = DoReFaWeightQuantizer(bits)
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = nn.Parameter(torch.empty(self.out_features, self.in_features))
        nn.init.xavier_uniform_(self.weight)
        self.bias = nn.Parameter(torch.zeros(self.out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Integer weights, one rescale of the (exact) sums; see integer_weight.
        out = F.linear(x, self.integer_weight()) * float(self.quantizer.scale)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bits={self.quantizer.bits}, bias={self.bias is not None}"


class QuantConv2d(_QuantWeightMixin, nn.Module):
    """3x3 convolution, stride 1, padding 1 ('same'), no bias, with DoReFa-quantized weights.

    Parameters
    ----------
    in_channels, out_channels : int
    bits : int
        Weight bit width ``B`` in 1..8.

    Attributes
    ----------
    weight : Parameter of shape (out_channels, in_channels, 3, 3)
        Latent float weights, Glorot-uniform initialised (fan_in = 9 * in, fan_out = 9 * out).
    quantizer : DoReFaWeightQuantizer

    Shapes: input (N, in_channels, H, W) -> output (N, out_channels, H, W).
    """

    KERNEL = (3, 3)

    def __init__(self, in_channels: int, out_channels: int, bits: int):
        super().__init__()
        self.quantizer = DoReFaWeightQuantizer(bits)
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.weight = nn.Parameter(torch.empty(self.out_channels, self.in_channels, *self.KERNEL))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.integer_weight(), None, stride=1, padding=1) * float(self.quantizer.scale)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, kernel_size=3x3, padding=same, bits={self.quantizer.bits}"


# ==============================================================================================
# The networks
# ==============================================================================================
#: torch's BatchNorm default; the fold uses the module's own eps.
BN_MOMENTUM = 0.1


class QuantMLP(nn.Module):
    """Fully connected quantized network.

    Parameters
    ----------
    n_inputs, n_classes : int
    hidden : list of int
        Hidden widths (``L - 1`` of them for ``L`` weight layers).
    bits : int
        Weight bits ``B`` (1..8).
    activation : {"relu", "sign"}
    batch_norm : bool
    generator : torch.Generator, optional
        Random source of the stochastic sign.
    """

    def __init__(
        self,
        n_inputs: int,
        n_classes: int,
        hidden: list[int],
        bits: int,
        activation: str,
        batch_norm: bool,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.architecture = "fc"
        self.activation = activation
        self.hidden = nn.ModuleList()
        width = int(n_inputs)
        for h in hidden:
            bn = nn.BatchNorm1d(int(h), momentum=BN_MOMENTUM) if batch_norm else None
            self.hidden.append(_block("linear", QuantDense(width, int(h), bits), bn, Activation(activation, generator)))
            width = int(h)
        self.output = QuantDense(width, int(n_classes), bits, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.hidden:
            x = _run_block(block, "linear", x)
        return self.output(x)

    def to_layers(self) -> list[DNNLayer]:
        layers = [_hidden_layer("dense", block, pool=False) for block in self.hidden]
        return layers + [_output_layer(self.output)]


class QuantCNN(nn.Module):
    """Convolutional quantized network (one or two conv layers, then a dense output layer).

    Parameters
    ----------
    in_channels : int
        ``E`` values per pixel (1 standardized; the maximum cardinality for one-hot).
    image_shape : (H, W)
    n_classes : int
    channels : list of int
        One or two channel counts (the paper uses ``[C1, 2 * C1]`` for two layers).
    bits, activation, batch_norm, generator
        As for :class:`QuantMLP`.
    """

    def __init__(
        self,
        in_channels: int,
        image_shape,
        n_classes: int,
        channels: list[int],
        bits: int,
        activation: str,
        batch_norm: bool,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.architecture = "cnn"
        self.activation = activation
        self.convs = nn.ModuleList()
        width, (h, w) = int(in_channels), tuple(int(v) for v in image_shape)
        for ch in channels:
            bn = nn.BatchNorm2d(int(ch), momentum=BN_MOMENTUM) if batch_norm else None
            self.convs.append(_block("conv", QuantConv2d(width, int(ch), bits), bn, Activation(activation, generator)))
            width, h, w = int(ch), h // 2, w // 2
        if h < 1 or w < 1:
            raise ValueError(f"image {tuple(image_shape)} is too small for {len(channels)} pooling layers")
        self.pool = nn.MaxPool2d(2)  # stride 2, floor: what the artifact specifies
        self.output = QuantDense(width * h * w, int(n_classes), bits, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.convs:
            x = self.pool(_run_block(block, "conv", x))
        return self.output(torch.flatten(x, 1))  # (C, H, W) order, as the artifact says

    def to_layers(self) -> list[DNNLayer]:
        layers = [_hidden_layer("conv2d", block, pool=True) for block in self.convs]
        return layers + [_output_layer(self.output)]


def _block(key: str, linear: nn.Module, bn: nn.Module | None, act: nn.Module) -> nn.ModuleDict:
    """One hidden layer: ``key`` (``"linear"``/``"conv"``) -> optional ``"bn"`` -> ``"act"``."""
    block = nn.ModuleDict({key: linear})
    if bn is not None:
        block["bn"] = bn
    block["act"] = act
    return block


def _run_block(block: nn.ModuleDict, key: str, x: torch.Tensor) -> torch.Tensor:
    x = block[key](x)
    if "bn" in block:
        x = block["bn"](x)
    return block["act"](x)


def clamp_latent_weights(model: nn.Module) -> None:
    """Keep latent weights in [-1, 1] after each step (BinaryConnect-style), so none is stuck
    where the clip's gradient is zero; the forward pass is unchanged by it."""
    for module in model.modules():
        if isinstance(module, (QuantDense, QuantConv2d)):
            module.clamp_latent_()


def _hidden_layer(kind: str, block: nn.ModuleDict, pool: bool) -> DNNLayer:
    linear = block["linear"] if kind == "dense" else block["conv"]
    scale = shift = None
    if "bn" in block:
        bn = block["bn"]
        # Eval-mode batch norm y = (z - mean) / sqrt(var + eps) * gamma + beta, folded in float64.
        inv = 1.0 / np.sqrt(bn.running_var.detach().double().numpy() + bn.eps)
        gamma = bn.weight.detach().double().numpy()
        beta = bn.bias.detach().double().numpy()
        s = gamma * inv
        scale = s.astype(np.float32)
        shift = (beta - bn.running_mean.detach().double().numpy() * s).astype(np.float32)
    return DNNLayer(kind, linear.weight_codes(), scale=scale, shift=shift, activation=block["act"].kind, pool=pool)


def _output_layer(dense: QuantDense) -> DNNLayer:
    return DNNLayer("dense", dense.weight_codes(), bias=dense.bias.detach().numpy().astype(np.float32))
