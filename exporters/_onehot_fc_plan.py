"""The one-hot x FULLY_CONNECTED plan of the BN TFLite exporter (NumPy only): which int8 weights,
feature groups and scales ``exporters.tflite_bnc`` builds for ``--lowering onehot-fc``.

A private helper module (the leading underscore keeps the exporter registry from treating it as
an exporter); the exactness argument is in ``exporters/tflite_bnc.py``'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._bnc_options import codes_of
from bnc_deploy.exporters._tflite import INT8_WEIGHT_MAX

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact

#: Static batch size of the ``onehot-fc`` lowering (the Edge TPU needs static shapes).
ONEHOT_FC_BATCH = 1
#: Largest integer partial sum an int8 output with zero point -128 and scale 1 can hold.
INT8_OUTPUT_LEVELS = 255
#: How ``onehot-fc`` builds its one-hot (see the module docstring).
ONEHOT_BUILDERS = ("equal-cast", "relu", "edgetpu")
#: Builders whose graph is int8 from the input on (int8 codes in, one-hot from FC + ReLU + MINIMUM).
INT8_BUILDERS = ("relu", "edgetpu")
#: Largest cardinality the int8 builders take: their input codes are int8 (0..127).
RELU_MAX_CARDINALITY = 128


@dataclass
class OneHotFCPlan:
    """Int8 weights, scales and grouping of the ``onehot-fc`` lowering.

    Attributes
    ----------
    builder : ``"equal-cast"``, ``"relu"`` or ``"edgetpu"`` (how the one-hot is built; ``edgetpu`` is
        ``relu`` with the prior in group 0's FC bias and groups packed per class, see below)
    mode : ``"exact"`` (B <= 7), ``"rescaled"`` (B = 8) or ``"float"``
    scale : float
        Real value of one weight unit, also the scale of the int8 partial sums (1, 2 or max|log p|/127).
    weights : ndarray (onehot_width, C), int8 in 0..127
        One row per one-hot position. ``equal-cast``: position ``i * r_max + k`` is feature ``i``'s
        local row ``k`` (padding rows 0); ``relu``/``edgetpu``: position = stacked-table row.
    r_max : int
        Largest ``|X_i| * |X_pa(i)|`` (one-hot width per feature for ``equal-cast``).
    pattern : ndarray (D, r_max), int32
        ``k + 1`` for real local rows, 0 for padding (``equal-cast`` compares ``k_i + 1`` with it).
    groups : list of (start, stop)
        Consecutive feature ranges; each group's largest possible partial sum is <= 255
        (``edgetpu``: the largest over classes of the class's own sum, the prior included in group 0).
    slices : list of (lo, hi)
        The one-hot positions of each group (its FC's input columns).
    max_code_error : int
        Largest ``|weight * scale - code|`` over the table, in code units (quantized only).
    prior_units : ndarray (C,) int64 or None
        ``edgetpu`` with exact weights: the class codes, added as group 0's int32 FC bias (units of
        ``scale``), so group 0's output already holds the prior. None: the prior is added after
        the int8 part, in float32.
    """

    builder: str
    mode: str
    scale: float
    weights: np.ndarray
    r_max: int
    pattern: np.ndarray
    groups: list[tuple[int, int]] = field(default_factory=list)
    slices: list[tuple[int, int]] = field(default_factory=list)
    max_code_error: int = 0
    prior_units: np.ndarray | None = None

    def group_weights(self, k: int) -> np.ndarray:
        """Int8 weights of group ``k``'s FC, shape (hi - lo, C)."""
        lo, hi = self.slices[k]
        return self.weights[lo:hi]

    def describe(self) -> dict[str, Any]:
        """JSON-safe summary for the file's metadata."""
        return {
            "builder": self.builder,
            "mode": self.mode,
            "weight_scale": float(self.scale),
            "n_groups": len(self.groups),
            "groups": [[int(a), int(b)] for a, b in self.groups],
            "onehot_width": int(self.weights.shape[0]),
            "max_code_error": int(self.max_code_error),
            "batch": ONEHOT_FC_BATCH,
            "prior_in_group0": self.prior_units is not None,
        }


def onehot_fc_plan(artifact: BNCArtifact, onehot: str = "equal-cast", *, raw_inputs: bool = False) -> OneHotFCPlan:
    """Choose int8 weights, their scale and the feature groups for ``onehot-fc`` (see module doc)."""
    if onehot not in ONEHOT_BUILDERS:
        raise ExportError(f"unknown one-hot builder {onehot!r}; choose one of {', '.join(ONEHOT_BUILDERS)}")
    if onehot in INT8_BUILDERS:
        _check_relu_builder(artifact, raw_inputs, onehot)
    mode, scale, units, error = _weight_units(artifact)
    rows = artifact.rows_per_feature
    offsets = artifact.row_offsets
    r_max = int(rows.max())
    d, c = artifact.n_features, artifact.n_classes
    padded = np.zeros((d, r_max, c), dtype=np.int8)
    for i, (start, n) in enumerate(zip(offsets, rows)):
        padded[i, :n] = units[start : start + n]
    local = np.arange(r_max)[None, :]
    pattern = np.where(local < rows[:, None], local + 1, 0).astype(np.int32)
    prior = None
    if onehot == "edgetpu":
        # Per class: a group's output for class c is at most the sum of its features' largest
        # terms *for c* (tighter than the largest terms over all classes), plus c's prior in group 0.
        if mode == "exact":
            prior = codes_of(artifact).prior.astype(np.int64)
        maxes = padded.max(axis=1).astype(np.int64)  # [D, C]
        groups = _pack_groups_per_class(maxes, INT8_OUTPUT_LEVELS, prior)
    else:
        bounds = padded.reshape(d, -1).max(axis=1).astype(np.int64)  # largest term each feature can add
        groups = _pack_groups(bounds, INT8_OUTPUT_LEVELS)
    if onehot in INT8_BUILDERS:
        ends = np.append(offsets, artifact.n_rows)
        weights, slices = units, [(int(ends[a]), int(ends[b])) for a, b in groups]
    else:
        weights, slices = padded.reshape(d * r_max, c), [(a * r_max, b * r_max) for a, b in groups]
    return OneHotFCPlan(
        builder=onehot,
        mode=mode,
        scale=scale,
        weights=weights,
        r_max=r_max,
        pattern=pattern,
        groups=groups,
        slices=slices,
        max_code_error=error,
        prior_units=prior,
    )


def _check_relu_builder(artifact: BNCArtifact, raw_inputs: bool, onehot: str = "relu") -> None:
    """The int8 builders (``relu``, ``edgetpu``) take int8 codes: no raw inputs, cardinalities <= 128."""
    if raw_inputs:
        raise ExportError(
            f"the {onehot} one-hot builder takes int8 codes; bin raw values on the host "
            "(or use onehot='equal-cast' with raw_inputs)"
        )
    too_big = np.flatnonzero(artifact.cardinalities > RELU_MAX_CARDINALITY)
    if too_big.size:
        i = int(too_big[0])
        raise ExportError(
            f"the {onehot} one-hot builder needs cardinalities <= {RELU_MAX_CARDINALITY} (int8 codes); "
            f"feature {i} ({artifact.feature_names[i]!r}) has {int(artifact.cardinalities[i])}"
        )


def _weight_units(artifact: BNCArtifact) -> tuple[str, float, np.ndarray, int]:
    """``(mode, scale, int8 weight units (n_rows, C), max code error)`` of the table."""
    if artifact.is_quantized:
        codes = codes_of(artifact).table.astype(np.int64)
        if codes_of(artifact).quantizer.max_code <= INT8_WEIGHT_MAX:
            return "exact", 1.0, codes.astype(np.int8), 0
        # B = 8: halve the codes (round half to even, like the quantizer) and clip 255 -> 127.
        units = np.minimum(np.round(codes / 2.0), INT8_WEIGHT_MAX).astype(np.int64)
        return "rescaled", 2.0, units.astype(np.int8), int(np.max(np.abs(2 * units - codes), initial=0))
    logp = artifact.table_logp
    assert logp is not None  # a float model stores its log-probabilities
    neg = -logp.astype(np.float64)
    top = float(neg.max(initial=0.0))
    scale = top / INT8_WEIGHT_MAX if top > 0 else 1.0
    units = np.clip(np.round(neg / scale), 0, INT8_WEIGHT_MAX).astype(np.int8)
    return "float", float(np.float32(scale)), units, 0


def _pack_groups(bounds: np.ndarray, capacity: int) -> list[tuple[int, int]]:
    """Split features 0..D-1 into consecutive runs whose ``bounds`` sum to <= ``capacity``.

    Greedy (a run grows until the next feature would overflow); every bound is <= 127, so a run
    always holds at least two features unless the model ends.
    """
    groups, start, total = [], 0, 0
    for i, b in enumerate(bounds):
        if i > start and total + int(b) > capacity:
            groups.append((start, i))
            start, total = i, 0
        total += int(b)
    groups.append((start, len(bounds)))
    return groups


def _pack_groups_per_class(maxes: np.ndarray, capacity: int, start: np.ndarray | None) -> list[tuple[int, int]]:
    """Consecutive runs of features whose per-class sums of ``maxes`` ([D, C]) stay <= ``capacity``
    for every class; group 0 starts from ``start`` ([C], the prior) when given.

    Greedy like :func:`_pack_groups`. Every term is <= 127 and the prior <= 127, so a run always
    holds at least one feature.
    """
    c = maxes.shape[1]
    groups, first = [], 0
    load = np.zeros(c, dtype=np.int64) if start is None else start.astype(np.int64).copy()
    for i in range(maxes.shape[0]):
        if i > first and np.any(load + maxes[i] > capacity):
            groups.append((first, i))
            first, load = i, np.zeros(c, dtype=np.int64)
        load = load + maxes[i]
    groups.append((first, maxes.shape[0]))
    return groups
