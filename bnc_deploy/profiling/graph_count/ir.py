"""The format-neutral graph that the counter works on (read by :mod:`.readers`).

Contract: op types are canonical ONNX names (TFLite builtins are mapped onto them), constants
carry their values, and shapes are per row: the batch dimension is ``None`` (symbolic) and counts
as 1. The counting passes never look at the file format's own structures, so each format needs
just a reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: TFLite ``fusedActivationFunction`` codes kept in a node's attrs. Fused activations are free by
#: the paper's convention; the counter only names them in its notes.
FUSED_ACTIVATIONS = {1: "relu", 2: "relu_n1_to_1", 3: "relu6", 4: "tanh"}


@dataclass
class GTensor:
    """A tensor: ``shape`` has None for the batch dimension (None as a whole: unknown)."""

    name: str
    dtype: str
    shape: tuple | None
    value: np.ndarray | None = None  # stored constant (initializer / TFLite buffer)
    scale: tuple = ()  # TFLite quantization scale(s): real = scale * (q - zero point)

    def real_value(self) -> np.ndarray | None:
        """The constant as real numbers (per-tensor scale applied; zero points of weights are 0)."""
        if self.value is None:
            return None
        return self.value.astype(np.float64) * (self.scale[0] if len(self.scale) == 1 else 1.0)

    @property
    def row_shape(self) -> tuple | None:
        """Shape of one row (batch dimension counted as 1), or None if unknown."""
        return None if self.shape is None else tuple(1 if d is None else int(d) for d in self.shape)

    @property
    def numel(self) -> int | None:
        return None if self.shape is None else int(np.prod(self.row_shape, dtype=np.int64))

    @property
    def last_dim(self) -> int:
        rs = self.row_shape
        return int(rs[-1]) if rs else 1


@dataclass
class GNode:
    """An operator: canonical op name (the rule table's key), the file's name, tensor names."""

    index: int
    op: str  # canonical op
    source_op: str  # the file's op name
    inputs: list  # tensor names ("" for an absent optional input)
    outputs: list
    attrs: dict = field(default_factory=dict)


@dataclass
class Graph:
    """A format-neutral graph: nodes in execution order, tensors by name, bnc-deploy metadata if any."""

    format: str
    nodes: list
    tensors: dict
    inputs: list
    outputs: list
    metadata: dict | None = None
    path: str = ""
