"""Fused Adam over the stacked tensors of the batched trainers (BN, structure learning, DNN): which
configurations share one call, and the rule that keeps a configuration's update the single run's.

Configurations with equal learning-rate schedule and eps form a group (:func:`schedule_groups`);
fused Adam runs once per group, on one slice per run of consecutive members
(:func:`contiguous_runs`) where a slice gets the single run's bits (:data:`ADAM_UNIT`), else on one
tensor per configuration. The chunks keep their groups in ``adam_groups()``; :func:`group_rates`
and :func:`rate_table` give the groups' learning rates as floats (CPU) or as a device table (CUDA
graphs).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import torch

#: torch's CPU fused Adam splits each tensor into 16-float units and runs the vector loop over whole
#: vectors and a scalar loop over the tensor's last ``numel % vector`` elements, and the two loops
#: round differently. A configuration's slice of a stacked tensor therefore gets the single run's
#: bits only if its size is a multiple of this; otherwise each configuration is passed as its own
#: tensor (its tail then runs the scalar loop, as in the single run).
ADAM_UNIT = 16


def contiguous_runs(members: Sequence[int]) -> list[tuple[int, int]]:
    """Contiguous [start, stop) runs of sorted indices (fused Adam takes contiguous slices)."""
    runs, start = [], members[0]
    for prev, cur in itertools.pairwise(members):
        if cur != prev + 1:
            runs.append((start, prev + 1))
            start = cur
    runs.append((start, members[-1] + 1))
    return runs


def schedule_groups(rates: np.ndarray, eps: Sequence[float]) -> list[tuple[int, float, tuple[int, ...]]]:
    """``(first member, eps, members)`` per group of configurations with equal learning-rate schedule
    (a row of ``rates``, (M, epochs)) and Adam eps, in order of first member: fused Adam runs once per
    group, on one slice per run of consecutive members."""
    groups: dict[tuple[bytes, float], list[int]] = {}
    for j in range(len(eps)):
        groups.setdefault((rates[j].tobytes(), eps[j]), []).append(j)
    return [(members[0], e, tuple(members)) for (_, e), members in groups.items()]


def group_rates(chunk, epoch: int) -> list[float]:
    """Each Adam group's learning rate at ``epoch`` (1-based) of a chunk with ``rates`` and
    ``adam_groups()`` (:func:`schedule_groups`)."""
    return [float(chunk.rates[first, epoch - 1]) for first, _, _ in chunk.adam_groups()]


def rate_table(chunk) -> torch.Tensor:
    """Every epoch's learning rate of each of ``chunk``'s Adam groups, (groups, epochs) float32 on its
    device: a CUDA graph reads the column of the epoch (fused Adam takes a tensor learning rate there)."""
    firsts = [first for first, _, _ in chunk.adam_groups()]
    return torch.as_tensor(chunk.rates[firsts], dtype=torch.float32, device=chunk.device)
