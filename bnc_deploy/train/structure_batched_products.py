"""The two products of the batched structure-learning step whose summation order is MKL's own
(:mod:`bnc_deploy.train.structure_batched_step`, whose docstring says why its bits equal the single run's).

* ``s @ gathered``, the sampled structure's log-joint: where MKL's one-hot product adds the chosen
  terms one after another in slot order (:func:`products_are_bag_sums`, checked per shape), an
  ``embedding_bag`` sum; elsewhere the single run's product per configuration.
* ``gathered @ grad``, the slot gradient: MKL's ``sgemv`` per configuration, as the single run calls
  it, on blocks that start 64-byte aligned (its summation order depends on alignment).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import torch

#: Floats per 64 bytes: the alignment of a fresh CPU tensor, which MKL's products are sensitive to,
#: and fused Adam's unit.
ALIGN = 16


class SLChunk(Protocol):
    """What these products read of the step's chunk (``structure_batched_step.SLChunk``, which imports
    this module): its shape, device, layout (for the sentinel row) and cache of reused buffers."""

    device: torch.device
    bag_sums: bool
    d: int
    n_slots: int
    c: int
    layout: Any

    @property
    def m(self) -> int: ...

    def _constant(self, name: str, make: Callable[[], torch.Tensor]) -> torch.Tensor: ...


def log_joint_of_samples(
    chunk: SLChunk,
    tables: tuple[torch.Tensor, torch.Tensor],
    blocks: torch.Tensor | None,
    chosen: torch.Tensor,
    flat_slots: torch.Tensor,
) -> torch.Tensor:
    """``log p(c, x)`` (M, B, C) of the sampled structures: the chosen slot's entry per feature, summed
    (``blocks``: :func:`gathered_blocks` on the CPU, None on a GPU).

    The single run multiplies the one-hot sample with every slot's gathered term (``s @ gathered``);
    MKL adds the nonzero terms one after another in slot order, which is this bag sum (checked per
    shape by :func:`products_are_bag_sums`; where it does not hold, the single run's product is used).
    """
    theta, class_theta = tables
    m, b, d = chosen.shape
    if blocks is None or chunk.bag_sums:
        summed = torch.nn.functional.embedding_bag(chosen.view(m * b, d), theta, mode="sum").view(m, b, -1)
    else:
        dj = d * chunk.n_slots
        hard = torch.zeros(m, dj, device=chunk.device)
        hard.scatter_(1, flat_slots, 1.0)
        s = aligned_copy(chunk, "s", hard)
        summed = torch.stack([torch.matmul(s[j], blocks[j].view(dj, -1)).view(b, -1) for j in range(m)])
    return summed.add_(class_theta[:, None, :])


def slot_grad(
    chunk: SLChunk, theta: torch.Tensor, slot_major: torch.Tensor, blocks: torch.Tensor | None, grad: torch.Tensor
) -> torch.Tensor:
    """dL/ds (M, D*J) = gathered @ grad per configuration: MKL's ``sgemv`` per configuration, as the
    single run calls it, on the aligned ``blocks`` (:func:`gathered_blocks`; its summation order
    depends on alignment). On a GPU (``blocks`` None), one gather and one batched product."""
    m = chunk.m
    if blocks is None:
        # One gather and one batched product (GPU memory is plentiful; its bits need only be its own).
        blocks = theta.index_select(0, slot_major.reshape(-1)).view(m, chunk.d * chunk.n_slots, -1)
        return torch.bmm(blocks, grad.reshape(m, -1, 1)).squeeze(2)
    g = aligned_copy(chunk, "grad", grad.reshape(m, -1))
    dj = chunk.d * chunk.n_slots
    return torch.stack([torch.mv(blocks[j].view(dj, -1), g[j]) for j in range(m)])


def gathered_blocks(chunk: SLChunk, theta: torch.Tensor, slot_major: torch.Tensor) -> torch.Tensor:
    """Every configuration's every-slot terms at its slot-major entries (M, n) as the single run
    gathers them, in one gather into a reused buffer: (M, n, C), each configuration's block starting
    64-byte aligned like the single run's fresh tensor (its rows padded with the sentinel's to whole
    16-float units). One gather for all: faster than one per configuration (letter, M = 16)."""
    m, n = slot_major.shape
    c = chunk.c
    unit = ALIGN // math.gcd(c, ALIGN)  # rows of whole 16-float units
    padded = -(-n // unit) * unit

    def index_buffer() -> torch.Tensor:
        return torch.full((m, padded), chunk.layout.sentinel, dtype=torch.int64, device=chunk.device)

    index = chunk._constant(f"gathered_index{n}", index_buffer)
    index[:, :n].copy_(slot_major)
    buf = chunk._constant(f"gathered_all{n}", lambda: torch.empty(m * padded, c, device=chunk.device))
    torch.index_select(theta, 0, index.view(-1), out=buf)
    return buf.view(m, padded, c)[:, :n]


def aligned_copy(chunk: SLChunk, name: str, values: torch.Tensor) -> torch.Tensor:
    """``values`` (M, n) copied into rows that start 64-byte aligned; returns the (M, n) view."""
    m, n = values.shape
    buf = chunk._constant(name, lambda: torch.zeros(m, -(-n // ALIGN) * ALIGN, device=chunk.device))
    view = buf[:, :n]
    view.copy_(values)
    return view


def products_are_bag_sums(d: int, n_slots: int, width: int, trials: int = 4) -> bool:
    """Whether ``torch.matmul(onehot, gathered)`` over (d * n_slots, width) equals the sequential sum
    of the chosen rows (``embedding_bag``), bit for bit, on random log-probabilities of that shape."""
    gen = torch.Generator().manual_seed(0)
    dj = d * n_slots
    for _ in range(trials):
        table = torch.log_softmax(torch.randn(dj, width, generator=gen) * 4, dim=0)
        slots = torch.randint(0, n_slots, (d,), generator=gen) + torch.arange(d) * n_slots
        s = torch.zeros(dj).index_fill_(0, slots, 1.0)
        bag = torch.nn.functional.embedding_bag(slots[None], table, mode="sum")[0]
        if not torch.equal(torch.matmul(s, table), bag):
            return False
    return True
