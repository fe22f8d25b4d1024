"""Standard TFLite model metadata (the ``TFLITE_METADATA`` buffer of the tflite-support schema) and
its associated files, written and read without tflite-support.

What Android tooling reads (ML Model Binding, the LiteRT Task Library, ``MetadataExtractor``,
Netron): a flatbuffer of ``metadata_schema.fbs`` (tensorflow/tflite-support, file identifier
``M001``, root ``ModelMetadata``) stored in the model's metadata buffer named ``TFLITE_METADATA``,
and the associated files (here ``labels.txt``) as a ZIP archive appended to the ``.tflite`` file -
exactly what tflite-support's ``MetadataPopulator`` writes (Python ``zipfile`` in append mode,
members stored uncompressed). The TFLite flatbuffer ignores the bytes after it, so the file loads
in LiteRT unchanged.

tflite-support's Python package cannot be a dependency (its wheel pins ``protobuf<4``, which
TensorFlow 2.21 and onnx do not accept), so the few tables written here are built with the
``flatbuffers`` package from the schema's field order (slot numbers below, schema 1.5): the
writer uses only fields of metadata parser version 1.0.0 (names, descriptions, FeatureProperties
content, associated files of types DESCRIPTIONS / TENSOR_AXIS_LABELS), and records that as
``min_parser_version``. ``tests/test_tflite_metadata.py`` reads every file back with
:func:`read_model_metadata` and, where tflite-support is installed (``pip install --no-deps
tflite-support``), with its ``MetadataDisplayer`` and minimum-version calculator.

Functions: :func:`build_model_metadata` (dict -> buffer bytes), :func:`read_model_metadata`
(buffer -> dict), :func:`append_associated_files` / :func:`read_associated_files` (the ZIP tail).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import NotRequired, Protocol, TypedDict, overload

from bnc_deploy.errors import MetadataError, MissingExtraError

#: Name of the model metadata buffer the tflite-support tools look for.
TFLITE_METADATA = "TFLITE_METADATA"
#: File identifier of a ``metadata_schema.fbs`` buffer.
METADATA_IDENTIFIER = b"M001"
#: The oldest metadata parser that reads what :func:`build_model_metadata` writes.
MIN_PARSER_VERSION = "1.0.0"
#: ``AssociatedFileType`` values (metadata_schema.fbs).
FILE_TYPES = {"UNKNOWN": 0, "DESCRIPTIONS": 1, "TENSOR_AXIS_LABELS": 2, "TENSOR_VALUE_LABELS": 3}
_FILE_TYPE_NAMES = {v: k for k, v in FILE_TYPES.items()}
#: ``ContentProperties`` union member written for every tensor: FeatureProperties (a plain feature
#: tensor, no image/audio/bounding-box processing).
_FEATURE_PROPERTIES = 1

# Slot numbers (field order in metadata_schema.fbs; a union takes two slots: its type, then its value).
_MODEL = {
    "name": 0,
    "description": 1,
    "version": 2,
    "subgraph_metadata": 3,
    "author": 4,
    "license": 5,
    "associated_files": 6,
    "min_parser_version": 7,
}
_SUBGRAPH = {
    "name": 0,
    "description": 1,
    "input_tensor_metadata": 2,
    "output_tensor_metadata": 3,
    "associated_files": 4,
}
_TENSOR = {"name": 0, "description": 1, "dimension_names": 2, "content": 3, "associated_files": 6}
_CONTENT = {"content_properties_type": 0, "content_properties": 1}
_FILE = {"name": 0, "description": 1, "type": 2, "locale": 3, "version": 4}


class AssociatedFile(TypedDict):
    """An associated file of a tensor (``type``: a key of :data:`FILE_TYPES`, default ``UNKNOWN``)."""

    name: str | None
    description: NotRequired[str | None]
    type: NotRequired[str]


class TensorMetadata(TypedDict):
    """A tensor's metadata; ``content`` (the ContentProperties union type) is only read, never written."""

    name: str | None
    description: NotRequired[str | None]
    dimension_names: NotRequired[list[str]]
    associated_files: NotRequired[list[AssociatedFile]]
    content: NotRequired[int]


class ModelMetadata(TypedDict):
    """What :func:`build_model_metadata` takes and :func:`read_model_metadata` returns (the reader also
    fills in every string key, None where absent, and ``min_parser_version``)."""

    name: str | None
    description: NotRequired[str | None]
    version: NotRequired[str | None]
    author: NotRequired[str | None]
    license: NotRequired[str | None]
    min_parser_version: NotRequired[str | None]
    subgraph_name: NotRequired[str | None]
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


class _Builder(Protocol):
    """The ``flatbuffers.Builder`` methods used here (the package has no type information)."""

    def CreateString(self, s: str) -> int: ...
    def StartObject(self, numfields: int) -> None: ...
    def EndObject(self) -> int: ...
    def PrependUint8Slot(self, slot: int, x: int, d: int) -> None: ...
    def PrependUOffsetTRelativeSlot(self, slot: int, x: int, d: int) -> None: ...
    def StartVector(self, elemSize: int, numElems: int, alignment: int) -> None: ...
    def PrependUOffsetTRelative(self, off: int) -> None: ...
    def EndVector(self) -> int: ...
    def Finish(self, rootTable: int, file_identifier: bytes | None = None) -> None: ...
    def Output(self) -> bytes | bytearray: ...


class _Table(Protocol):
    """The ``flatbuffers.table.Table`` members used here (the package has no type information)."""

    Bytes: bytearray
    Pos: int

    def Offset(self, vtableOffset: int) -> int: ...
    def Indirect(self, off: int) -> int: ...
    def String(self, off: int) -> bytes: ...
    def Vector(self, off: int) -> int: ...
    def VectorLen(self, off: int) -> int: ...
    def Get(self, flags: type, off: int) -> int: ...  # only integer scalars are read here


def _flatbuffers() -> ModuleType:
    try:
        import flatbuffers
    except ImportError as exc:  # pragma: no cover - a dependency of onnxruntime and TensorFlow
        raise MissingExtraError("writing TFLite metadata", "tflite", exc) from None
    module: ModuleType = flatbuffers  # an untyped import (Any to mypy)
    return module


# -- writing -----------------------------------------------------------------------------------------
class _Writer:
    """Builds the flatbuffer tables of :func:`build_model_metadata` with one ``Builder``."""

    def __init__(self) -> None:
        self.b: _Builder = _flatbuffers().Builder(1024)

    @overload
    def string(self, value: None) -> None: ...
    @overload
    def string(self, value: str) -> int: ...
    def string(self, value: str | None) -> int | None:
        return None if value is None else self.b.CreateString(str(value))

    def table(self, slots: Mapping[str, int], fields: Mapping[str, int | tuple[str, int] | None]) -> int:
        """Fields already created (offsets, or ("byte", v) scalars) -> a table offset."""
        b = self.b
        b.StartObject(max(slots.values()) + 1)
        for name, value in fields.items():
            if value is None:
                continue
            if isinstance(value, tuple):
                b.PrependUint8Slot(slots[name], value[1], 0)
            else:
                b.PrependUOffsetTRelativeSlot(slots[name], value, 0)
        return b.EndObject()

    @overload
    def vector(self, offsets: None) -> None: ...
    @overload
    def vector(self, offsets: Sequence[int]) -> int: ...
    def vector(self, offsets: Sequence[int] | None) -> int | None:
        if offsets is None:
            return None
        self.b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def associated_file(self, f: AssociatedFile) -> int:
        kind = f.get("type", "UNKNOWN")
        if kind not in FILE_TYPES:
            raise MetadataError(f"unknown associated file type {kind!r}")
        name, desc = self.string(f["name"]), self.string(f.get("description"))
        return self.table(_FILE, {"name": name, "description": desc, "type": ("byte", FILE_TYPES[kind])})

    def tensor(self, t: TensorMetadata) -> int:
        name, desc = self.string(t["name"]), self.string(t.get("description"))
        names = t.get("dimension_names")
        dims = self.vector([self.string(d) for d in names]) if names else None
        self.b.StartObject(0)
        feature = self.b.EndObject()
        content = self.table(
            _CONTENT, {"content_properties_type": ("byte", _FEATURE_PROPERTIES), "content_properties": feature}
        )
        listed = t.get("associated_files")
        files = self.vector([self.associated_file(f) for f in listed]) if listed else None
        return self.table(
            _TENSOR,
            {"name": name, "description": desc, "dimension_names": dims, "content": content, "associated_files": files},
        )


def build_model_metadata(model: ModelMetadata) -> bytes:
    """The ``TFLITE_METADATA`` buffer of ``model``::

        {"name", "description", "version", "author", "license"?,
         "inputs": [tensor, ...], "outputs": [tensor, ...]}     # in the subgraph's tensor order
        tensor = {"name", "description", "dimension_names"?: [...],
                  "associated_files"?: [{"name", "description", "type": "TENSOR_AXIS_LABELS"}]}

    One subgraph (TFLite has one); every tensor's content is FeatureProperties."""
    w = _Writer()
    inputs = w.vector([w.tensor(t) for t in model["inputs"]])
    outputs = w.vector([w.tensor(t) for t in model["outputs"]])
    subgraph = w.table(
        _SUBGRAPH,
        {
            "name": w.string(model.get("subgraph_name")),
            "input_tensor_metadata": inputs,
            "output_tensor_metadata": outputs,
        },
    )
    subgraphs = w.vector([subgraph])
    root = w.table(
        _MODEL,
        {
            "name": w.string(model["name"]),
            "description": w.string(model.get("description")),
            "version": w.string(model.get("version")),
            "subgraph_metadata": subgraphs,
            "author": w.string(model.get("author")),
            "license": w.string(model.get("license")),
            "min_parser_version": w.string(MIN_PARSER_VERSION),
        },
    )
    w.b.Finish(root, file_identifier=METADATA_IDENTIFIER)
    return bytes(w.b.Output())


# -- reading -----------------------------------------------------------------------------------------
def read_model_metadata(buffer: bytes) -> ModelMetadata:
    """A ``TFLITE_METADATA`` buffer -> the dict :func:`build_model_metadata` takes (plus
    ``min_parser_version``, and each tensor's ``content`` union type). MetadataError when the buffer
    is not a metadata flatbuffer."""
    fb = _flatbuffers()
    data = bytearray(buffer)
    if len(data) < 8 or bytes(data[4:8]) != METADATA_IDENTIFIER:
        raise MetadataError("not a TFLite model metadata buffer (missing the M001 identifier)")
    try:
        root = fb.table.Table(data, fb.encode.Get(fb.packer.uoffset, data, 0))
        out = _read_model(fb, root)
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise MetadataError(f"corrupt TFLite model metadata ({type(exc).__name__}: {exc})") from None
    return out


def _field(tab: _Table, slot: int) -> int:
    return tab.Offset(4 + 2 * slot)


def _str(tab: _Table, slot: int) -> str | None:
    o = _field(tab, slot)
    return tab.String(o + tab.Pos).decode("utf-8") if o else None


def _byte(fb: ModuleType, tab: _Table, slot: int, default: int = 0) -> int:
    o = _field(tab, slot)
    return tab.Get(fb.number_types.Uint8Flags, o + tab.Pos) if o else default


def _sub(fb: ModuleType, tab: _Table, slot: int) -> _Table | None:
    o = _field(tab, slot)
    return fb.table.Table(tab.Bytes, tab.Indirect(o + tab.Pos)) if o else None


def _tables(fb: ModuleType, tab: _Table, slot: int) -> list[_Table]:
    o = _field(tab, slot)
    if not o:
        return []
    start, n = tab.Vector(o), tab.VectorLen(o)
    return [fb.table.Table(tab.Bytes, tab.Indirect(start + 4 * k)) for k in range(n)]


def _strings(tab: _Table, slot: int) -> list[str]:
    o = _field(tab, slot)
    if not o:
        return []
    start = tab.Vector(o)
    return [tab.String(start + 4 * k).decode("utf-8") for k in range(tab.VectorLen(o))]


def _read_file(fb: ModuleType, tab: _Table) -> AssociatedFile:
    return {
        "name": _str(tab, _FILE["name"]),
        "description": _str(tab, _FILE["description"]),
        "type": _FILE_TYPE_NAMES.get(_byte(fb, tab, _FILE["type"]), "UNKNOWN"),
    }


def _read_tensor(fb: ModuleType, tab: _Table) -> TensorMetadata:
    out: TensorMetadata = {"name": _str(tab, _TENSOR["name"]), "description": _str(tab, _TENSOR["description"])}
    dims = _strings(tab, _TENSOR["dimension_names"])
    if dims:
        out["dimension_names"] = dims
    content = _sub(fb, tab, _TENSOR["content"])
    if content is not None:
        out["content"] = _byte(fb, content, _CONTENT["content_properties_type"])
    files = [_read_file(fb, f) for f in _tables(fb, tab, _TENSOR["associated_files"])]
    if files:
        out["associated_files"] = files
    return out


def _read_model(fb: ModuleType, root: _Table) -> ModelMetadata:
    subgraphs = _tables(fb, root, _MODEL["subgraph_metadata"])
    if len(subgraphs) != 1:
        raise MetadataError(f"TFLite model metadata has {len(subgraphs)} subgraphs, expected 1")
    sub = subgraphs[0]
    return {
        "name": _str(root, _MODEL["name"]),
        "description": _str(root, _MODEL["description"]),
        "version": _str(root, _MODEL["version"]),
        "author": _str(root, _MODEL["author"]),
        "license": _str(root, _MODEL["license"]),
        "min_parser_version": _str(root, _MODEL["min_parser_version"]),
        "inputs": [_read_tensor(fb, t) for t in _tables(fb, sub, _SUBGRAPH["input_tensor_metadata"])],
        "outputs": [_read_tensor(fb, t) for t in _tables(fb, sub, _SUBGRAPH["output_tensor_metadata"])],
    }


# -- associated files (a ZIP appended to the model) --------------------------------------------------
def append_associated_files(model: bytes, files: dict[str, bytes]) -> bytes:
    """``model`` followed by a ZIP of ``files`` (stored, not compressed), as MetadataPopulator appends
    them: Python's ``zipfile`` in append mode on the model bytes."""
    buffer = io.BytesIO(bytes(model))
    buffer.seek(0, io.SEEK_END)
    with zipfile.ZipFile(buffer, "a", compression=zipfile.ZIP_STORED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))  # fixed: reproducible bytes
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            zf.writestr(info, files[name])
    return buffer.getvalue()


def read_associated_files(model: bytes) -> dict[str, bytes]:
    """The files zipped onto the end of a ``.tflite`` file (``{}`` when there are none)."""
    try:
        with zipfile.ZipFile(io.BytesIO(bytes(model))) as zf:
            return {name: zf.read(name) for name in zf.namelist()}
    except zipfile.BadZipFile:
        return {}
