"""Quantized DNNs for discrete features (torch; training only): the paper's FC nets and CNNs.

* :class:`QuantMLP`: ``L`` weight layers with equal hidden widths, no hidden biases, optional
  batch norm after each hidden affine map, activation (ReLU or stochastic sign), output layer
  with bias.
* :class:`QuantCNN`: one or two 3x3 'same' convolutions without bias -> optional batch norm ->
  activation -> 2x2 max-pool (floor), the second with twice the channels, then a dense output
  layer with bias.

Both take the encoded inputs (see :mod:`bnc_deploy.dnn_encoding`) as float tensors (FC:
``(N, n_inputs)``; CNN: ``(N, E, H, W)``) and return logits ``(N, C)``. ``to_layers`` turns a
trained net into the artifact's :class:`~bnc_deploy.artifacts.dnn.DNNLayer` list (integer codes,
batch norm folded into scale and shift).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bnc_deploy.artifacts.dnn import DNNLayer
from bnc_deploy.models.dnn_layers import Activation, QuantConv2d, QuantDense

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

    def __init__(self, n_inputs: int, n_classes: int, hidden: list[int], bits: int, activation: str,
                 batch_norm: bool, generator: torch.Generator | None = None):
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

    def __init__(self, in_channels: int, image_shape, n_classes: int, channels: list[int], bits: int,
                 activation: str, batch_norm: bool, generator: torch.Generator | None = None):
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
        self.pool = nn.MaxPool2d(2)          # stride 2, floor: what the artifact specifies
        self.output = QuantDense(width * h * w, int(n_classes), bits, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.convs:
            x = self.pool(_run_block(block, "conv", x))
        return self.output(torch.flatten(x, 1))      # (C, H, W) order, as the artifact says

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
