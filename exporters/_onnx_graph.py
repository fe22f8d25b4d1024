"""What the ONNX graphs of this package share: the opsets they are written for, bit-plane packing,
the export metadata in ``metadata_props``, and, for the BN graphs (``onnx_bnc``, its
``gather-grouped`` lowering in ``_onnx_bnc_grouped``, and the ORT lookup graph of ``ort_format``),
the node builder, the padded table layout and the model around the nodes.

A private helper module (the leading underscore keeps the exporter registry from treating it as
an exporter); it builds nothing on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from numpy.typing import ArrayLike
from onnx import TensorProto, helper, numpy_helper

from bnc_deploy.formats.bnc import OUTPUT_LOG_JOINT
from bnc_deploy.formats.metadata import INPUT_NAME, METADATA_KEY, OUTPUT_LABEL, dump_metadata, flat_metadata
from bnc_deploy.version import __version__

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact

#: Default opset: 17 runs on every onnxruntime since 1.12 and has everything the graphs need.
DEFAULT_OPSET = 17
#: Oldest opset with ReduceSum/Unsqueeze taking axes as inputs, as these graphs write them.
MIN_OPSET = 13
#: IR version matching each opset, so older runtimes accept the file.
IR_VERSION_FOR_OPSET = {13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10}


def pack_bitplanes(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 codes (any shape) -> bit-planes uint8 [bits, ceil(n / 8)], plane ``b`` = bit ``b``.

    Within a plane, code ``j`` (row-major order) is bit ``7 - j % 8`` of byte ``j // 8`` (numpy's
    big-endian ``packbits``).
    """
    flat = np.asarray(codes, dtype=np.uint8).reshape(-1)
    return np.stack([np.packbits((flat >> b) & 1) for b in range(bits)])


def set_export_metadata(model: onnx.ModelProto, meta: dict[str, Any]) -> None:
    """Store the export metadata in ``model.metadata_props``: the JSON blob under ``"bnc_deploy"``
    and the flat keys (``formats.metadata.flat_metadata``)."""
    helper.set_model_props(model, {METADATA_KEY: dump_metadata(meta), **flat_metadata(meta)})


class GraphBuilder:
    """Tiny builder of the BN graphs: nodes and initializers, with short unique tensor names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._consts: dict[str, np.ndarray] = {}
        self._count = 0

    def const(self, name: str, value: ArrayLike) -> str:
        """Add initializer ``name`` once (graph pieces share constants such as ``has_parent``)."""
        value = np.asarray(value)
        if name in self._consts:
            if not (self._consts[name].dtype == value.dtype and np.array_equal(self._consts[name], value)):
                raise AssertionError(f"constant {name!r} defined twice with different values")
            return name
        self._consts[name] = value
        self.initializers.append(numpy_helper.from_array(value, name=name))
        return name

    def small_ints(self, name: str, values: ArrayLike) -> str:
        """int64 constant stored in the narrowest integer type that holds it, cast back at load
        (a folded Cast: the file keeps 1-2 bytes per index constant instead of 8)."""
        values = np.asarray(values, dtype=np.int64)
        for dtype in (np.int8, np.int16, np.int32):
            info = np.iinfo(dtype)
            if values.size == 0 or (values.min() >= info.min and values.max() <= info.max):
                break
        else:
            return self.const(name, values)
        self.const(name, values.astype(dtype))
        return self.op("Cast", [name], to=TensorProto.INT64)

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs: Any) -> str:
        self._count += 1
        out = out or f"t{self._count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out


def bnc_model(
    g: GraphBuilder, artifact: BNCArtifact, x_type: int, opsets: list[onnx.OperatorSetIdProto], ir_version: int
) -> onnx.ModelProto:
    """The BN model of ``g``'s nodes and initializers: input ``x`` [N, D] of ``x_type``, outputs
    ``log_joint`` float32 [N, C] and ``label`` int64 [N] (metadata not set yet)."""
    graph = helper.make_graph(
        g.nodes,
        f"bnc_{artifact.structure}",
        inputs=[helper.make_tensor_value_info(INPUT_NAME, x_type, ["N", artifact.n_features])],
        outputs=[
            helper.make_tensor_value_info(OUTPUT_LOG_JOINT, TensorProto.FLOAT, ["N", artifact.n_classes]),
            helper.make_tensor_value_info(OUTPUT_LABEL, TensorProto.INT64, ["N"]),
        ],
        initializer=g.initializers,
    )
    return helper.make_model(
        graph, opset_imports=opsets, producer_name="bnc-deploy", producer_version=__version__, ir_version=ir_version
    )


class PaddedLayout:
    """The padded ("clip") table layout: ``W = K + 2`` rows per clipped code ``-1 .. K`` of each
    feature, times ``W`` parent codes for TAN (``W_pa = 1`` for naive Bayes).

    Row of feature ``i`` for clipped codes ``(a, b)`` (``b`` its parent's; 0 without a parent):
    ``base_i + (a + 1) * W_pa + (b + 1) * has_parent_i`` with ``base_i = i * W * W_pa``.
    """

    def __init__(self, artifact: BNCArtifact) -> None:
        self.max_code = int(artifact.cardinalities.max())  # K: clip bound (invalid)
        self.width = self.max_code + 2  # W: codes -1 .. K
        self.parent_width = self.width if (artifact.parents >= 0).any() else 1  # W_pa
        self.block = self.width * self.parent_width
        self.n_rows = artifact.n_features * self.block
        self.has_parent = (artifact.parents >= 0).astype(np.int64)

    @classmethod
    def of(cls, artifact: BNCArtifact, limit: int) -> PaddedLayout | None:
        """The layout, or None when its folded float32 table would exceed ``limit`` bytes
        (``onnx_bnc.PADDED_TABLE_LIMIT``)."""
        layout = cls(artifact)
        return layout if layout.n_rows * artifact.n_classes * 4 <= limit else None

    def bases(self, artifact: BNCArtifact) -> np.ndarray:
        """Per-feature constant of the row: ``base_i + W_pa + has_parent_i`` (the ``+ 1`` shifts)."""
        return (np.arange(artifact.n_features) * self.block + self.parent_width + self.has_parent).astype(np.int64)
