"""The ORT file format (ONNX Runtime's flatbuffer model format for ORT Mobile / minimal builds):
read what a bnc-deploy ``.ort`` file holds, without creating an inference session.

An ``.ort`` file is an ``InferenceSession`` flatbuffer (file identifier ``ORTM``) holding the ONNX
graph it was converted from - nodes, initializers (stored as the graph has them: saved without graph
optimizations, as ``exporters.ort_format`` does, no table is folded to float), per-tensor types and
shapes, the model's ``metadata_props``
(our ``bnc_deploy`` JSON blob and the flat keys, verbatim, so the integrity seal is found in the
bytes like in an ``.onnx`` file) - plus what a minimal ORT build needs to pick kernels.

Read with the flatbuffer classes that ship with the ``onnxruntime`` wheel
(``onnxruntime.tools.ort_format_model.ort_flatbuffers_py``), the schema's own generated reader;
nothing here runs the model. Functions:

* :func:`is_ort` - the identifier check;
* :func:`read_ort_metadata_props` / :func:`read_ort_export_metadata` - ``metadata_props`` and the
  parsed ``bnc_deploy`` blob (MetadataError when it is not an ORT file or has none);
* :func:`ort_to_onnx` - the graph as an ``onnx.ModelProto`` (nodes, initializers, I/O, opsets,
  metadata), for tools that read ONNX graphs (the profiler's graph count);
* :func:`required_operators_config` - the reduced-operator config (``required_operators.config``)
  of one or more ORT files, written by ``onnxruntime.tools``' own code, in its format.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from bnc_deploy.errors import MetadataError, MissingExtraError
from bnc_deploy.formats.metadata import METADATA_KEY

if TYPE_CHECKING:
    # The generated flatbuffer classes have no type information (Any to mypy); named for the reader.
    from onnx import AttributeProto, ModelProto, TensorProto, ValueInfoProto
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs.Attribute import Attribute
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs.InferenceSession import InferenceSession
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs.Tensor import Tensor
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs.ValueInfo import ValueInfo

#: ORT flatbuffer file identifier (bytes 4..8).
ORT_IDENTIFIER = b"ORTM"
#: File name onnxruntime's tools give the reduced-operator config of a minimal build.
CONFIG_NAME = "required_operators.config"
#: ... and the one with per-operator type reduction (``--enable_type_reduction``).
TYPED_CONFIG_NAME = "required_operators_and_types.config"

#: An ORT file: its path, or its bytes.
ModelSource: TypeAlias = str | os.PathLike[str] | bytes | bytearray | memoryview
#: ``(elem_type, shape)`` of a tensor; shape entries are ints or dim_param strings (None: unknown).
TensorType: TypeAlias = tuple[int, list[int | str | None] | None]


def fbs() -> ModuleType:
    """The generated ORT flatbuffer schema package shipped with onnxruntime."""
    try:
        from onnxruntime.tools.ort_format_model.ort_flatbuffers_py import fbs as schema
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError("reading ORT files", "runtime", exc) from None
    package: ModuleType = schema  # an untyped import (Any to mypy)
    return package


def model_bytes(model: ModelSource) -> bytes:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    return Path(model).read_bytes()


def is_ort(data: bytes) -> bool:
    """Whether ``data`` starts like an ORT flatbuffer (identifier ``ORTM``)."""
    return len(data) >= 8 and bytes(data[4:8]) == ORT_IDENTIFIER


def _session(model: ModelSource) -> InferenceSession:
    data = model_bytes(model)
    if not is_ort(data):
        raise MetadataError("not an ORT format model (missing the ORTM identifier)")
    session = fbs().InferenceSession.InferenceSession.GetRootAs(bytearray(data), 0)
    if session.Model() is None or session.Model().Graph() is None:
        raise MetadataError("ORT format model without a model graph")
    return session


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else ("" if value is None else str(value))


def ort_format_info(model: ModelSource) -> dict[str, str]:
    """``{"ort_version": ...}``: the ORT format version string the file was written with."""
    return {"ort_version": _text(_session(model).OrtVersion())}


def read_ort_metadata_props(model: ModelSource) -> dict[str, str]:
    """The model's ``metadata_props`` (path or bytes) as a plain dict."""
    m = _session(model).Model()
    return {_text(e.Key()): _text(e.Value()) for e in (m.MetadataProps(i) for i in range(m.MetadataPropsLength()))}


def read_ort_export_metadata(model: ModelSource) -> dict[str, Any]:
    """The parsed ``bnc_deploy`` JSON blob of an exported ``.ort`` file, unvalidated.

    Raises MetadataError when the file is not an ORT model or has no such metadata."""
    props = read_ort_metadata_props(model)
    if METADATA_KEY not in props:
        raise MetadataError(f"not a bnc-deploy export (no {METADATA_KEY!r} metadata)")
    try:
        meta: dict[str, Any] = json.loads(props[METADATA_KEY])
    except ValueError as exc:
        raise MetadataError(f"corrupt {METADATA_KEY} metadata ({exc})") from None
    return meta


def ort_operators(model: ModelSource) -> dict[str, dict[str, list[str]]]:
    """``{domain: {since_version: [op types]}}`` of the file's nodes (``ai.onnx`` for the default
    domain), keyed as the reduced-operator config keys them (each node's schema version)."""
    g = _session(model).Model().Graph()
    out: dict[str, dict[str, set[str]]] = {}
    for i in range(g.NodesLength()):
        n = g.Nodes(i)
        domain = _text(n.Domain()) or "ai.onnx"
        out.setdefault(domain, {}).setdefault(str(int(n.SinceVersion())), set()).add(_text(n.OpType()))
    return {
        d: {v: sorted(ops) for v, ops in sorted(opsets.items(), key=lambda kv: int(kv[0]))}
        for d, opsets in sorted(out.items())
    }


# -- ORT graph -> onnx.ModelProto --------------------------------------------------------------------
def ort_to_onnx(model: ModelSource) -> ModelProto:
    """The graph of an ORT file as an ``onnx.ModelProto``: nodes (in the file's order), initializers,
    graph inputs/outputs with their types and shapes, the other tensors' types and shapes as
    onnxruntime inferred them (``value_info``), opset imports and ``metadata_props``.

    A reading of the file, not a conversion back for deployment: attributes holding subgraphs (no
    bnc-deploy export has them) raise MetadataError. Needs the ``onnx`` package."""
    from onnx import NodeProto, TensorProto, helper

    session = _session(model)
    m = session.Model()
    g = m.Graph()
    schema = fbs()
    args: dict[str, TensorType] = {}
    for i in range(g.NodeArgsLength()):
        vi = g.NodeArgs(i)
        args[_text(vi.Name())] = _value_info(schema, vi)
    initializers = [_tensor(g.Initializers(i)) for i in range(g.InitializersLength())]
    names = {t.name for t in initializers}
    nodes: list[NodeProto] = []
    for i in sorted(range(g.NodesLength()), key=lambda k: g.Nodes(k).Index()):
        n = g.Nodes(i)
        attrs = [_attribute(schema, n.Attributes(k)) for k in range(n.AttributesLength())]
        node = helper.make_node(
            _text(n.OpType()),
            [_text(n.Inputs(k)) for k in range(n.InputsLength())],
            [_text(n.Outputs(k)) for k in range(n.OutputsLength())],
            name=_text(n.Name()),
            domain=_text(n.Domain()),
        )
        node.attribute.extend(attrs)
        nodes.append(node)

    def io(name: str) -> ValueInfoProto:
        elem, shape = args.get(name, (TensorProto.UNDEFINED, None))
        return helper.make_tensor_value_info(name, elem, shape)

    inputs = [io(_text(g.Inputs(i))) for i in range(g.InputsLength()) if _text(g.Inputs(i)) not in names]
    outputs = [io(_text(g.Outputs(i))) for i in range(g.OutputsLength())]
    # the types and shapes onnxruntime inferred for every other tensor (ONNX shape inference does
    # not know contrib ops such as com.microsoft GatherBlockQuantized: these are the file's own)
    known = {t.name for t in inputs + outputs} | names
    value_info = [io(name) for name, (elem, _) in args.items() if name not in known and elem]
    graph = helper.make_graph(nodes, "ort", inputs, outputs, initializer=initializers, value_info=value_info)
    opsets = [
        helper.make_opsetid(_text(o.Domain()), int(o.Version()))
        for o in (m.OpsetImport(i) for i in range(m.OpsetImportLength()))
    ]
    proto = helper.make_model(
        graph,
        opset_imports=opsets,
        producer_name=_text(m.ProducerName()),
        producer_version=_text(m.ProducerVersion()),
        ir_version=int(m.IrVersion()),
    )
    helper.set_model_props(proto, read_ort_metadata_props(model))
    return proto


def _value_info(schema: ModuleType, vi: ValueInfo) -> TensorType:
    """``(elem_type, shape)`` of a node arg; shape entries are ints or dim_param strings (None: unknown)."""
    t = vi.Type()
    if t is None or t.ValueType() != schema.TypeInfoValue.TypeInfoValue.tensor_type:
        return 0, None
    table = t.Value()
    tensor = schema.TensorTypeAndShape.TensorTypeAndShape()
    tensor.Init(table.Bytes, table.Pos)
    shape = tensor.Shape()
    if shape is None:
        return int(tensor.ElemType()), None
    dims: list[int | str | None] = []
    for k in range(shape.DimLength()):
        value = shape.Dim(k).Value()
        if value is None or value.DimType() == schema.DimensionValueType.DimensionValueType.UNKNOWN:
            dims.append(None)
        elif value.DimType() == schema.DimensionValueType.DimensionValueType.VALUE:
            dims.append(int(value.DimValue()))
        else:
            dims.append(_text(value.DimParam()))
    return int(tensor.ElemType()), dims


def _tensor(t: Tensor) -> TensorProto:
    """An ORT Tensor table -> ``onnx.TensorProto`` (ORT's data type numbers are ONNX's)."""
    from onnx import TensorProto

    proto = TensorProto()
    proto.name = _text(t.Name())
    proto.dims.extend(int(d) for d in (t.DimsAsNumpy() if t.DimsLength() else []))
    proto.data_type = int(t.DataType())
    if t.StringDataLength():
        proto.string_data.extend(t.StringData(k) for k in range(t.StringDataLength()))
    elif t.RawDataLength():
        proto.raw_data = np.asarray(t.RawDataAsNumpy(), dtype=np.uint8).tobytes()
    return proto


def _attribute(schema: ModuleType, a: Attribute) -> AttributeProto:
    from onnx import AttributeProto, helper

    kinds = schema.AttributeType.AttributeType
    name, kind = _text(a.Name()), a.Type()
    if kind == kinds.FLOAT:
        return helper.make_attribute(name, float(a.F()))
    if kind == kinds.INT:
        return helper.make_attribute(name, int(a.I()))
    if kind == kinds.STRING:
        return helper.make_attribute(name, a.S() or b"")
    if kind == kinds.TENSOR:
        return helper.make_attribute(name, _tensor(a.T()))
    if kind == kinds.FLOATS:
        return helper.make_attribute(
            name, [float(v) for v in a.FloatsAsNumpy()] if a.FloatsLength() else [], attr_type=AttributeProto.FLOATS
        )
    if kind == kinds.INTS:
        return helper.make_attribute(
            name, [int(v) for v in a.IntsAsNumpy()] if a.IntsLength() else [], attr_type=AttributeProto.INTS
        )
    if kind == kinds.STRINGS:
        return helper.make_attribute(
            name, [a.Strings(k) for k in range(a.StringsLength())], attr_type=AttributeProto.STRINGS
        )
    raise MetadataError(f"ORT node attribute {name!r} of type {kind} (subgraphs, sparse tensors) is not read here")


# -- reduced operator config ---------------------------------------------------------------------------
def required_operators_config(
    models: str | Path | Iterable[str | os.PathLike[str]], *, type_reduction: bool = False
) -> str:
    """The reduced-operator config of ORT files ``models`` (paths), as onnxruntime's tools write it.

    The text of ``required_operators.config`` (``type_reduction``: ``required_operators_and_types
    .config``, with the element types each operator's kernels must support), for building a
    minimal ONNX Runtime that runs exactly these files (``build.sh --minimal_build
    --include_ops_by_config FILE``). Written by ``onnxruntime.tools.ort_format_model
    .create_config_from_models`` into a temporary folder and read back: the format is theirs.
    """
    try:
        from onnxruntime.tools.ort_format_model import create_config_from_models
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError("writing ORT operator configs", "runtime", exc) from None
    paths = [Path(p) for p in ([models] if isinstance(models, (str, Path)) else models)]
    for p in paths:
        if not is_ort(model_bytes(p)):
            raise MetadataError(f"{p}: not an ORT format model (missing the ORTM identifier)")
    # Their logger says "Created config in <temporary path>" at INFO level: not ours to print.
    logger = logging.getLogger("ort_format_model.utils")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / (TYPED_CONFIG_NAME if type_reduction else CONFIG_NAME)
            create_config_from_models(paths, out, type_reduction)
            return out.read_text(encoding="utf-8")
    finally:
        logger.setLevel(level)


def config_operators(text: str) -> dict[str, dict[str, list[str]]]:
    """``{domain: {opset: [op types]}}`` of a reduced-operator config's text (types dropped)."""
    out: dict[str, dict[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        domain, opset, ops = line.split(";", 2)
        names = [entry.split("{", 1)[0] for entry in _split_entries(ops)]
        out.setdefault(domain, {})[opset] = sorted(set(out.get(domain, {}).get(opset, [])) | set(names))
    return out


def _split_entries(ops: str) -> list[str]:
    """Split ``Op1{json},Op2,...`` at the commas outside braces."""
    entries, depth, start = [], 0, 0
    for i, ch in enumerate(ops):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            entries.append(ops[start:i])
            start = i + 1
    entries.append(ops[start:])
    return [e for e in entries if e]
