"""M quantized DNNs of one architecture as one tensor program (torch; training only).

The stacked form of :class:`~bnc_deploy.models.dnn.QuantMLP` / :class:`~bnc_deploy.models.dnn.QuantCNN`:
the latent weights of M configurations with the same layers and widths are stacked along a
leading configuration axis, and one forward/backward pass trains all of them. Per configuration:
its weight bits, its batch-norm parameters and running statistics, its stochastic-sign stream.
Activations are laid out ``(M, B, features)`` (FC) or ``(M, B, C, H, W)`` (CNN), so each
configuration's slice is one contiguous tensor shaped like the single network's.

Exactness on the CPU
--------------------
A configuration's outputs and gradients are the same bits whatever it is stacked with, and a
stack of one is the single network. The matrix products run once per configuration, on that
configuration's contiguous tensors with the single network's shapes (MKL's sgemm inside
``torch.bmm`` picks another kernel for a batch of 4 than for a batch of 1 on 2 threads, which moves
the last bits). Everything else runs once for the stack and is elementwise (the DoReFa quantizer
with per-configuration bits, ReLU and the sign, the rescale and bias), per row (log-softmax) or per
window (max-pool), or reduces over the batch axes of each configuration (batch norm, written out
rather than ``F.batch_norm``, whose 2-D kernel's input gradient depends on the channel count; the
bias gradient), which torch does in an order that does not depend on the leading axis's length
(``tests/test_dnn_batched.py`` checks the whole trainer both ways).
On CUDA the stack runs as batched kernels (``bmm``, grouped convolution, one random draw for the
signs): deterministic for a given stack, not the CPU's bits.

Convolutions are ``unfold`` + a matrix product (3x3, stride 1, 'same'), with the weights kept as
``(M, C_out, C_in * 9)`` (the (C_in, 3, 3) kernel flattened). On the CPU a CNN step is mostly
memory-bound elementwise work on the activation maps, so a ReLU network's blocks on even maps run
hand-fused (``_ConvBlockCPU`` in :mod:`bnc_deploy.models.dnn_stacked_cpu`); sign networks and odd
maps take the written-out path.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from bnc_deploy.models.dnn import QuantCNN, QuantMLP
from bnc_deploy.models.dnn_stacked_cpu import (
    _conv_block_eval,
    _ConvBlockCPU,
    _MaxPool2x2,
    _update_running,
    _window_columns,
)


class _StackedDoReFaSTE(torch.autograd.Function):
    """``q_DNN(w)`` of :func:`bnc_deploy.models.dnn._dorefa_forward` with per-configuration bits;
    backward: identity (the straight-through estimator)."""

    @staticmethod
    def forward(ctx, w, max_code, binary):
        w64 = torch.clamp(w.detach().to(torch.float64), -1.0, 1.0)
        multi = 2.0 * torch.round(((w64 + 1.0) / 2.0) * max_code) - max_code
        codes = torch.where(binary, torch.where(w64 >= 0.0, 1.0, -1.0).to(torch.float64), multi)
        return (codes / max_code).to(w.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None, None


class _StochasticSignU(torch.autograd.Function):
    """Sign of :class:`bnc_deploy.models.dnn.StochasticSign` given its uniform draws ``u`` (None: eval)."""

    @staticmethod
    def forward(ctx, a, u):
        ctx.save_for_backward(a)
        positive = a >= 0 if u is None else u < torch.clamp((1.0 + a) / 2.0, 0.0, 1.0)
        return torch.where(positive, 1.0, -1.0).to(a.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (a,) = ctx.saved_tensors
        return grad_output * (1.0 - torch.tanh(a) ** 2), None


@dataclass
class _Consts:
    """Per-configuration constants of a contiguous part of the stack, each with a leading axis."""

    max_code64: torch.Tensor  # (m, 1, 1) float64: 2**B - 1
    max_code: torch.Tensor  # the same as float32
    scale: torch.Tensor  # (m, 1, 1) float32(1 / (2**B - 1)): the single layer's rescale factor
    binary: torch.Tensor  # (m, 1, 1) bool: B == 1
    sign_generators: list  # CPU generators of the stochastic signs


def _pad(t: torch.Tensor, shape: tuple, fill: float = 0.0) -> torch.Tensor:
    """``t`` in the leading corner of a ``shape`` tensor filled with ``fill``."""
    if tuple(t.shape) == tuple(shape):
        return t
    out = torch.full(shape, fill, dtype=t.dtype)
    out[tuple(slice(0, n) for n in t.shape)] = t
    return out


def _pooled_pixels(net) -> int:
    """Pixels per channel that a CNN's output layer reads (after its poolings)."""
    return net.output.weight.shape[1] // len(net.convs[-1]["conv"].weight)


def _spread(x: torch.Tensor, which: list[int]) -> torch.Tensor:
    """(G, ...) inputs -> (M, ...): configuration j's ``x[which[j]]`` (no copy when G = M in order,
    a broadcast view when G = 1). The index lives on the device once per route: a list copied to the
    GPU at every step would make each step wait for the previous one."""
    if which == list(range(x.shape[0])):
        return x
    if x.shape[0] == 1:
        return x.expand(len(which), *x.shape[1:])
    return x.index_select(0, _route_index(tuple(which), x.device))


@functools.lru_cache(maxsize=64)
def _route_index(which: tuple, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(which, device=device)


class StackedDNN:
    """M networks of one architecture (same layers and widths) built from their single networks.

    ``nets`` are freshly initialised :class:`QuantMLP` / :class:`QuantCNN` (their initialisation is
    the single run's); ``bits`` their weight bits; ``sign_seeds`` the seed of each one's
    stochastic-sign generator. :meth:`write_back` copies the trained state into the nets.
    """

    def __init__(self, nets: Sequence, bits: Sequence[int], sign_seeds: Sequence[int], device: torch.device):
        first = nets[0]
        self.activation, self.device = first.activation, device
        blocks = list(first.hidden if isinstance(first, QuantMLP) else first.convs)
        self.batch_norm = "bn" in blocks[0] if blocks else False
        self.key = "linear" if isinstance(first, QuantMLP) else "conv"

        # Each configuration's hidden widths (FC units, CNN channels). CPU stacks share them; a CUDA
        # stack may mix them: its tensors are padded to the widest and masked (see _layer_masks).
        self.widths = [[len(block[self.key].weight) for block in self._blocks(n)] for n in nets]
        self.max_widths = [max(w[i] for w in self.widths) for i in range(len(blocks))]
        self.padded = any(w != self.max_widths for w in self.widths)
        self.pixels = 1 if self.key == "linear" else _pooled_pixels(first)
        self.weights = [self._stack([self._padded_weight(n, i) for n in nets], device) for i in range(len(blocks) + 1)]
        self.bias = self._stack([n.output.bias.detach().unsqueeze(0) for n in nets], device)  # (M, 1, C)
        self.bn: list[dict] = []
        if self.batch_norm:
            for i in range(len(blocks)):
                bn = {
                    name: self._stack(
                        [
                            _pad(getattr(self._blocks(n)[i]["bn"], name).detach(), (self.max_widths[i],), fill)
                            for n in nets
                        ],
                        device,
                    )
                    for name, fill in (("weight", 0.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0))
                }
                bn["eps"] = float(blocks[i]["bn"].eps)
                self.bn.append(bn)
        self.masks = self._layer_masks(device) if self.padded else [None] * len(self.weights)
        for t in self.parameters():
            t.requires_grad_(True)
        codes = np.asarray([2 ** int(b) - 1 for b in bits], dtype=np.float64)
        self.max_code64 = torch.as_tensor(codes, device=device).view(-1, 1, 1)
        self.max_code = self.max_code64.float()
        # float32(1 / (2**B - 1)): the single layer's rescale factor (DoReFaWeightQuantizer.scale).
        self.scale = (1.0 / self.max_code64).float()
        self.binary = torch.as_tensor(np.asarray(bits) == 1, device=device).view(-1, 1, 1)
        self.sign_generators = [torch.Generator(device="cpu").manual_seed(int(s)) for s in sign_seeds]
        if device.type == "cuda":
            self.cuda_generator = torch.Generator(device=device).manual_seed(int(sign_seeds[0]))
        self.buffers: dict[tuple, torch.Tensor] = {}

    @staticmethod
    def _blocks(net) -> list:
        return list(net.hidden if isinstance(net, QuantMLP) else net.convs)

    @staticmethod
    def _stack(tensors: list, device: torch.device) -> torch.Tensor:
        return torch.stack([t.float() for t in tensors]).to(device).contiguous()

    def _in_width(self, i: int, widths: list[int]) -> int:
        """Inputs of weight layer ``i`` for hidden ``widths`` (-1: the network's inputs, unpadded)."""
        return -1 if i == 0 else widths[i - 1]

    def _taps(self, i: int) -> int:
        """Columns per input unit of weight layer ``i``: 9 for a convolution, the pooled pixels for a
        CNN's output layer, else 1."""
        n_layers = len(self.max_widths)
        if self.key == "conv" and i < n_layers:
            return 9
        return self.pixels if i == n_layers else 1

    def _padded_weight(self, net, i: int) -> torch.Tensor:
        """Weight layer ``i`` of ``net`` as (out, in * taps), zero-padded to the stack's widths."""
        blocks = self._blocks(net)
        w = (blocks[i][self.key].weight if i < len(blocks) else net.output.weight).detach()
        out = self.max_widths[i] if i < len(blocks) else w.shape[0]
        if i == 0:
            return _pad(w.reshape(w.shape[0], -1), (out, w[0].numel()))
        taps, k_in = self._taps(i), self.max_widths[i - 1]
        return _pad(w.reshape(w.shape[0], -1, taps), (out, k_in, taps)).reshape(out, k_in * taps)

    def _own_block(self, t: torch.Tensor, i: int, widths: list[int]) -> torch.Tensor:
        """The part of weight layer ``i``'s padded (out, in * taps) slice ``t`` that a configuration with
        hidden ``widths`` owns, as a (rows, cols, taps) view (the first layer's inputs are never padded)."""
        rows = widths[i] if i < len(self.max_widths) else t.shape[0]
        if i == 0:
            return t[:rows].unsqueeze(-1)
        return t.view(t.shape[0], self.max_widths[i - 1], self._taps(i))[:rows, : widths[i - 1]]

    def _layer_masks(self, device: torch.device) -> list:
        """Per weight layer, (M, out, in * taps) ones where a configuration's weight exists: padded
        units compute 0, feed nothing forward and get no gradient (so Adam leaves them at 0)."""
        masks = []
        for i, w in enumerate(self.weights):
            mask = torch.zeros(w.shape, device=device)
            for j, widths in enumerate(self.widths):
                self._own_block(mask[j], i, widths).fill_(1.0)
            masks.append(mask)
        return masks

    @property
    def m(self) -> int:
        return self.weights[0].shape[0]

    def parameters(self) -> list[torch.Tensor]:
        """The trained tensors: weights (hidden..., output), output bias, batch-norm scales and shifts."""
        bn = [t for layer in self.bn for t in (layer["weight"], layer["bias"])]
        return [*self.weights, self.bias, *bn]

    # -- the forward pass ---------------------------------------------------------------------------
    def consts(self, part: slice) -> _Consts:
        """The per-configuration constants of the contiguous part ``part`` of the stack."""
        return _Consts(
            self.max_code64[part], self.max_code[part], self.scale[part], self.binary[part], self.sign_generators[part]
        )

    def _integer_weights(self, w: torch.Tensor, c: _Consts, mask: torch.Tensor | None) -> torch.Tensor:
        """``QuantDense.integer_weight`` per configuration: codes as integer-valued floats, STE;
        padded weights (``mask`` 0) are 0."""
        q = _StackedDoReFaSTE.apply(torch.clamp(w, -1.0, 1.0), c.max_code64, c.binary)
        scaled = q * c.max_code
        codes = scaled + (torch.round(scaled) - scaled).detach()
        return codes if mask is None else codes * mask

    def _dense(
        self, x: torch.Tensor, w: torch.Tensor, c: _Consts, which: list[int], mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Inputs (G, B, I), configuration j reading ``x[which[j]]``, x latent (M, O, I) -> (M, B, O), rescaled."""
        codes = self._integer_weights(w, c, mask)
        if self.device.type == "cuda":
            out = torch.bmm(_spread(x, which), codes.transpose(1, 2))
        else:
            # unbind, not x[g]: each indexing's backward would be a zero-filled gradient of all of x
            xs = x.unbind(0)
            out = torch.stack([torch.mm(xs[g], cm.t()) for g, cm in zip(which, codes.unbind(0))])
        return out * c.scale

    def _conv(
        self, x: torch.Tensor, w: torch.Tensor, c: _Consts, which: list[int], mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Inputs (G, B, C_in, H, W) (configuration j reads ``x[which[j]]``) x latent (M, C_out, C_in * 9)
        -> (M, B, C_out, H, W), rescaled. Inputs shared by several configurations are unfolded once."""
        codes = self._integer_weights(w, c, mask)
        m, c_out = codes.shape[:2]
        b, c_in, h, wd = x.shape[1:]
        if self.device.type == "cuda":
            flat = _spread(x, which).transpose(0, 1).reshape(b, m * c_in, h, wd)
            out = F.conv2d(flat, codes.reshape(m * c_out, c_in, 3, 3), padding=1, groups=m)
            out = out.view(b, m, c_out, h, wd).transpose(0, 1)
        else:
            columns, xs = {}, x.unbind(0)
            for g in dict.fromkeys(which):
                cols = F.unfold(xs[g], 3, padding=1)  # (B, C_in * 9, H * W)
                columns[g] = cols.transpose(0, 1).reshape(cols.shape[1], -1)  # (C_in * 9, B * H * W)
            out = torch.stack(
                [
                    torch.mm(cm, columns[g]).view(c_out, b, h, wd).transpose(0, 1)
                    for g, cm in zip(which, codes.unbind(0))
                ]
            )
        return out * c.scale.view(-1, 1, 1, 1, 1)

    def _conv_block(
        self, x: torch.Tensor, w: torch.Tensor, c: _Consts, which: list[int], mask, i: int, part, training: bool
    ) -> torch.Tensor:
        """Block ``i`` of a ReLU CNN on the CPU (:class:`_ConvBlockCPU`): inputs (G, B, C_in, H, W),
        configuration j reading ``x[which[j]]`` -> pooled maps (M, B, C_out, H/2, W/2); training
        updates the running statistics as :meth:`_batch_norm` does."""
        codes = self._integer_weights(w, c, mask)
        b, _, h, wd = x.shape[1:]
        groups = list(dict.fromkeys(which))
        xs = x.unbind(0)  # (see _dense)
        cols = [_window_columns(xs[g]) for g in groups]
        slot = [groups.index(g) for g in which]
        if not training:
            bn = {k: (v[part] if torch.is_tensor(v) else v) for k, v in self.bn[i].items()} if self.batch_norm else None
            return _conv_block_eval(codes, c.scale, slot, (b, h // 2, wd // 2), cols, bn)
        gamma = beta = None
        if self.batch_norm:
            layer = self.bn[i]
            gamma, beta, eps = layer["weight"][part], layer["bias"][part], layer["eps"]
        else:
            eps = 0.0
        work = functools.partial(self._buffer, i)
        out, mean, var = _ConvBlockCPU.apply(codes, c.scale, gamma, beta, eps, slot, (b, h // 2, wd // 2), work, *cols)
        if mean is not None:
            _update_running(layer["running_mean"][part], layer["running_var"][part], mean, var, b * h * wd)
        return out

    def _buffer(self, layer: int, name: str, shape: tuple) -> torch.Tensor:
        """Layer ``layer``'s scratch tensor ``name``, kept from step to step (a fresh one is slower to
        touch first; tensors saved for backward are version-checked by autograd)."""
        t = self.buffers.get((layer, name))
        if t is None or t.shape != torch.Size(shape):
            t = self.buffers[(layer, name)] = torch.empty(shape, device=self.device)
        return t

    def _batch_norm(self, z: torch.Tensor, layer: dict, training: bool) -> torch.Tensor:
        """Batch norm of each configuration over its batch (and pixels): torch's formula, written out.

        Training: normalise with the batch's biased variance, update the running mean and the
        running (unbiased) variance with momentum :data:`BN_MOMENTUM`; eval: the running ones.
        Written with reductions over the batch axes of the stacked tensor rather than with
        ``F.batch_norm``, whose 2-D kernel's input gradient depends on the channel count.
        """
        dims = (1,) if z.dim() == 3 else (1, 3, 4)
        shape = (z.shape[0], 1, z.shape[2]) + (1,) * (z.dim() - 3)
        gamma, beta = layer["weight"].view(shape), layer["bias"].view(shape)
        if training:
            mean = z.mean(dims, keepdim=True)
            centred = z - mean
            var = (centred * centred).mean(dims, keepdim=True)
            _update_running(
                layer["running_mean"], layer["running_var"], mean, var, z.numel() // (z.shape[0] * z.shape[2])
            )
        else:
            centred = z - layer["running_mean"].view(shape)
            var = layer["running_var"].view(shape)
        return centred * torch.rsqrt(var + layer["eps"]) * gamma + beta

    def _activate(self, a: torch.Tensor, training: bool, c: _Consts) -> torch.Tensor:
        if self.activation == "relu":
            return F.relu(a)
        u = None
        if training:
            if self.device.type == "cuda":
                u = torch.rand(a.shape, generator=self.cuda_generator, device=a.device, dtype=a.dtype)
            else:  # each configuration's draws, shaped as its single network draws them
                u = torch.stack([torch.rand(a.shape[1:], generator=g, dtype=a.dtype) for g in c.sign_generators])
        return _StochasticSignU.apply(a, u)

    def forward(
        self, x: torch.Tensor, training: bool, members: slice | None = None, which: Sequence[int] | None = None
    ) -> torch.Tensor:
        """Logits (M, B, classes) of encoded inputs ``x``.

        ``x``: (B, ...) shared by every configuration, or (G, B, ...) with configuration j reading
        ``x[which[j]]`` (configurations with one data order share a batch; ``which`` None: G = M,
        one each). ``members``: a contiguous part of the stack (evaluation in groups).
        """
        part = members or slice(0, self.m)
        n = part.stop - part.start
        if x.dim() == (2 if self.key == "linear" else 4):
            x, which = x.unsqueeze(0), [0] * n
        route = list(range(n)) if which is None else [int(g) for g in which]
        c = self.consts(part)
        masks = [None if mk is None else mk[part] for mk in self.masks]
        fused = self.key == "conv" and self.activation == "relu" and self.device.type == "cpu"
        for i, w in enumerate(self.weights[:-1]):
            if fused and x.shape[-2] % 2 == x.shape[-1] % 2 == 0:
                x, route = self._conv_block(x, w[part], c, route, masks[i], i, part, training), list(range(n))
                continue
            layer_op = self._dense if self.key == "linear" else self._conv
            z = layer_op(x, w[part], c, route, masks[i])
            if self.batch_norm:
                layer = {k: (v[part] if torch.is_tensor(v) else v) for k, v in self.bn[i].items()}
                z = self._batch_norm(z, layer, training)
            x = self._activate(z, training, c)
            if self.key == "conv":
                x = _MaxPool2x2.apply(x)  # stride 2, floor, as QuantCNN
            route = list(range(n))
        x = x.flatten(2)  # (C, H, W) order per row, as QuantCNN flattens
        return self._dense(x, self.weights[-1][part], c, route, masks[-1]) + self.bias[part]

    # -- after a step, early stops, the end ----------------------------------------------------------
    @torch.no_grad()
    def clamp_latent_(self) -> None:
        """``clamp_latent_weights``: keep every latent weight in [-1, 1] (forward unchanged)."""
        for w in self.weights:
            w.clamp_(-1.0, 1.0)

    def keep(self, idx: torch.Tensor, positions: Sequence[int]) -> None:
        """Keep the configurations ``idx`` (device indices; ``positions`` the same as ints)."""

        def select(t: torch.Tensor) -> torch.Tensor:
            return t.detach().index_select(0, idx).contiguous().requires_grad_(t.requires_grad)

        self.weights = [select(w) for w in self.weights]
        self.bias = select(self.bias)
        for layer in self.bn:
            for name in ("weight", "bias", "running_mean", "running_var"):
                layer[name] = select(layer[name])
        for name in ("max_code64", "max_code", "scale", "binary"):
            setattr(self, name, getattr(self, name).index_select(0, idx))
        self.sign_generators = [self.sign_generators[i] for i in positions]
        self.masks = [None if mk is None else mk.index_select(0, idx) for mk in self.masks]
        self.widths = [self.widths[i] for i in positions]

    @torch.no_grad()
    def state_of(self, j: int) -> dict:
        """Configuration ``j``'s trained tensors (CPU copies, its own widths), for :func:`write_back`."""
        widths = self.widths[j]
        weights = []
        for i, w in enumerate(self.weights):
            own = self._own_block(w[j], i, widths)
            weights.append(own.reshape(own.shape[0], -1).cpu().clone())
        state = {"weights": weights, "bias": self.bias[j, 0].cpu().clone()}
        state["bn"] = [
            {k: layer[k][j, : widths[i]].cpu().clone() for k in ("weight", "bias", "running_mean", "running_var")}
            for i, layer in enumerate(self.bn)
        ]
        return state


@torch.no_grad()
def write_back(net, state: dict) -> None:
    """Copy a configuration's trained ``state`` (:meth:`StackedDNN.state_of`) into its single network."""
    blocks = StackedDNN._blocks(net)
    key = "linear" if isinstance(net, QuantMLP) else "conv"
    for block, w in zip(blocks, state["weights"][:-1]):
        block[key].weight.copy_(w.view_as(block[key].weight))
    net.output.weight.copy_(state["weights"][-1])
    net.output.bias.copy_(state["bias"])
    for block, bn in zip(blocks, state["bn"]):
        for name, value in bn.items():
            getattr(block["bn"], name).copy_(value)


__all__ = ["QuantCNN", "QuantMLP", "StackedDNN", "write_back"]
