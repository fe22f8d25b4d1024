"""The TFLite file format: read and finish flatbuffers without TensorFlow (the schema module only).

The exporters write through :func:`finish_flatbuffer` (tensor names, the ``serving_default``
signature, the ``bnc_deploy`` metadata buffer); runtimes, the profiler and the target reports
read through :func:`inspect_tflite` and :func:`read_tflite_metadata`. Kept apart from the
converter (TFLite's own split between its format I/O and its converter), so reading a file never
needs TensorFlow and no reader imports an exporter.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Self, SupportsFloat, SupportsInt, TypeAlias

import numpy as np

from bnc_deploy.errors import ExportError, MetadataError, MissingExtraError
from bnc_deploy.formats.metadata import INPUT_NAME, METADATA_KEY, OUTPUT_LABEL, OUTPUT_LOG_JOINT, dump_metadata

if TYPE_CHECKING:
    # The generated flatbuffer classes have no type information (Any to mypy); named for the reader.
    from ai_edge_litert.schema_py_generated import ModelT, TensorMapT

#: TFLite file identifier (bytes 4..8 of every model file).
TFLITE_IDENTIFIER = b"TFL3"
#: A TFLite file: its path, or its bytes.
ModelSource: TypeAlias = str | os.PathLike[str] | bytes | bytearray | memoryview


def schema_module() -> ModuleType:
    """The TFLite flatbuffer schema module (LiteRT's copy, else TensorFlow's)."""
    try:
        from ai_edge_litert import schema_py_generated as schema
    except ImportError:  # pragma: no cover - depends on the environment
        try:
            from tensorflow.lite.python import schema_py_generated as schema
        except ImportError as exc:
            raise MissingExtraError("reading TFLite files", "tflite", exc) from None
    module: ModuleType = schema  # an untyped import (Any to mypy)
    return module


def load_model_t(model: bytes) -> tuple[ModuleType, ModelT]:
    schema = schema_module()
    if len(model) < 8 or model[4:8] != TFLITE_IDENTIFIER:
        raise MetadataError("not a TFLite flatbuffer (missing the TFL3 identifier)")
    return schema, schema.ModelT.InitFromPackedBuf(bytearray(model), 0)


def finish_flatbuffer(
    converted: bytes,
    meta: Mapping[str, Any],
    output_names: tuple[str, str] = (OUTPUT_LOG_JOINT, OUTPUT_LABEL),
    extra_metadata: Mapping[str, bytes] | None = None,
) -> bytes:
    """Name the I/O tensors, add the ``serving_default`` signature and the metadata buffer.

    ``output_names``: names of the two outputs, in order (DNN exports: ``logits``, ``label``).
    ``extra_metadata``: more metadata buffers by name (``TFLITE_METADATA``: the standard model
    metadata, :mod:`bnc_deploy.formats.tflite_metadata`), stored after ours.
    """
    import flatbuffers

    schema, m = load_model_t(converted)
    sub = m.subgraphs[0]
    if len(sub.inputs) != 1 or len(sub.outputs) != 2:
        raise ExportError(
            f"converted graph has {len(sub.inputs)} inputs and {len(sub.outputs)} outputs, expected 1 and 2"
        )
    first, second = output_names
    names = {int(sub.inputs[0]): INPUT_NAME, int(sub.outputs[0]): first, int(sub.outputs[1]): second}
    for index, name in names.items():
        sub.tensors[index].name = name.encode()
    signature = schema.SignatureDefT()
    signature.signatureKey = b"serving_default"
    signature.subgraphIndex = 0
    signature.inputs = [tensor_map(schema, INPUT_NAME, sub.inputs[0])]
    signature.outputs = [tensor_map(schema, first, sub.outputs[0]), tensor_map(schema, second, sub.outputs[1])]
    m.signatureDefs = [signature]
    entries = {METADATA_KEY: dump_metadata(meta).encode("utf-8"), **(extra_metadata or {})}
    for name, data in entries.items():
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(bytes(data), dtype=np.uint8)
        m.buffers.append(buffer)
        entry = schema.MetadataT()
        entry.name = name.encode()
        entry.buffer = len(m.buffers) - 1
        m.metadata = [e for e in (m.metadata or []) if e.name != entry.name] + [entry]
    builder = flatbuffers.Builder(1024 + len(converted))
    builder.Finish(m.Pack(builder), file_identifier=TFLITE_IDENTIFIER)
    return bytes(builder.Output())


def tensor_map(schema: ModuleType, name: str, index: SupportsInt) -> TensorMapT:
    t = schema.TensorMapT()
    t.name = name.encode()
    t.tensorIndex = int(index)
    return t


def model_bytes(model: ModelSource) -> bytes:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    return Path(model).read_bytes()


def enum_names(enum_class: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum_class).items() if not k.startswith("_") and isinstance(v, int)}


@dataclass
class TensorInfo:
    """One tensor of a TFLite subgraph (shape_signature has -1 for dynamic dimensions)."""

    index: int
    name: str
    dtype: str
    shape: list[int]
    shape_signature: list[int]
    scale: list[float]
    zero_point: list[int]
    data: bytes  # constant contents (empty for activations)

    @property
    def is_constant(self) -> bool:
        return bool(self.data)


@dataclass
class OpInfo:
    """One operator: builtin name (or ``CUSTOM:<code>``), version and tensor indices."""

    index: int
    name: str
    version: int
    inputs: list[int]
    outputs: list[int]


@dataclass
class TFLiteSummary:
    """What a TFLite file contains, read from the flatbuffer alone."""

    ops: list[OpInfo]
    tensors: list[TensorInfo]
    inputs: list[int]
    outputs: list[int]
    metadata: dict[str, bytes]  # metadata buffer name -> bytes

    @property
    def op_names(self) -> list[str]:
        return [op.name for op in self.ops]


def inspect_tflite(model: ModelSource) -> TFLiteSummary:
    """Operators, tensors and metadata of the first subgraph of a TFLite file (path or bytes)."""
    schema, m = load_model_t(model_bytes(model))
    op_names = enum_names(schema.BuiltinOperator)
    type_names = enum_names(schema.TensorType)
    sub = m.subgraphs[0]

    def buffer_bytes(i: int) -> bytes:
        data = m.buffers[i].data if 0 <= i < len(m.buffers) else None
        return b"" if data is None else np.asarray(data, dtype=np.uint8).tobytes()

    ops = []
    for k, op in enumerate(sub.operators or []):
        code = m.operatorCodes[op.opcodeIndex]
        builtin = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
        name = op_names.get(builtin, f"UNKNOWN_{builtin}")
        if name == "CUSTOM":
            name = f"CUSTOM:{(code.customCode or b'').decode(errors='replace')}"
        ops.append(OpInfo(k, name, int(code.version), _ints(op.inputs), _ints(op.outputs)))
    tensors = []
    for k, t in enumerate(sub.tensors or []):
        q = t.quantization
        scale = _floats(q.scale) if q is not None and q.scale is not None else []
        zero = _ints(q.zeroPoint) if q is not None and q.zeroPoint is not None else []
        shape = _ints(t.shape)
        signature = _ints(t.shapeSignature) if t.shapeSignature is not None else shape
        tensors.append(
            TensorInfo(
                k,
                (t.name or b"").decode(errors="replace"),
                type_names.get(int(t.type), str(t.type)),
                shape,
                signature,
                scale,
                zero,
                buffer_bytes(int(t.buffer)),
            )
        )
    metadata = {
        (e.name.decode() if isinstance(e.name, bytes) else str(e.name)): buffer_bytes(int(e.buffer))
        for e in (m.metadata or [])
    }
    return TFLiteSummary(ops, tensors, _ints(sub.inputs), _ints(sub.outputs), metadata)


def _ints(values: Iterable[SupportsInt] | None) -> list[int]:
    return [] if values is None else [int(v) for v in values]


def _floats(values: Iterable[SupportsFloat] | None) -> list[float]:
    return [] if values is None else [float(v) for v in values]


def tflite_op_names(model: ModelSource) -> list[str]:
    """Operator names of a TFLite file in execution order (``CUSTOM:<code>`` for custom/Flex ops)."""
    return inspect_tflite(model).op_names


def read_tflite_metadata(model: ModelSource) -> dict[str, Any]:
    """The ``bnc_deploy`` metadata dict of an exported file (path or bytes), unvalidated.

    Raises MetadataError when the file is not a TFLite flatbuffer or has no such metadata.
    """
    summary = inspect_tflite(model)
    if METADATA_KEY not in summary.metadata:
        raise MetadataError(f"not a bnc-deploy export (no {METADATA_KEY!r} metadata buffer)")
    try:
        meta: dict[str, Any] = json.loads(summary.metadata[METADATA_KEY].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MetadataError(f"corrupt {METADATA_KEY} metadata ({exc})") from None
    return meta


class captured_native_stderr:
    """Capture what native code (TFLM's ``MicroPrintf``) writes to file descriptor 2 while the block
    runs, as ``.text``: the interpreter's error messages go there, not into the Python exception.
    Shared by the TFLM arena measurement (exporters) and the ``tflm`` runtime."""

    def __enter__(self) -> Self:
        import os
        import sys
        import tempfile

        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        self.text = ""
        return self

    def __exit__(self, *exc: object) -> None:
        import os

        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", errors="replace")
        self._file.close()
