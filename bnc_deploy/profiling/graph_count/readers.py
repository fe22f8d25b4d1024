"""Read an exported ``.onnx``, ``.ort`` or ``.tflite`` file into the format-neutral :class:`~.ir.Graph`.

``.ort`` files (ONNX Runtime's ORT format, saved without graph optimizations) hold an ONNX graph
(the ONNX export's, or for quantized NB and TAN the ORT lookup graph with its com.microsoft
``GatherBlockQuantized``); they are read through :func:`bnc_deploy.formats.ort.ort_to_onnx`, with
the tensor shapes onnxruntime recorded in the file, and counted as ONNX graphs (``Graph.format``
``"onnx"``: the same operators, the same counting rules).

Contract: :func:`load_graph` accepts a path, TFLite bytes or an ``onnx.ModelProto``; a missing
file raises ``FileNotFoundError``, an unreadable one or another suffix
:class:`~bnc_deploy.errors.RuntimeLoadError` (a ``ValueError``; the command line reports it in
one line). Shapes
that cannot be inferred are None (the counts then report them as unknown). TFLite files are
read through :mod:`bnc_deploy.formats.tflite` (no TensorFlow, no exporter import); ONNX needs
the ``onnx`` package, imported only when an ONNX graph is read.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bnc_deploy.errors import MissingExtraError, RuntimeLoadError
from bnc_deploy.profiling.graph_count.ir import GNode, Graph, GTensor

#: TFLite builtin -> canonical op.
TFLITE_OPS = {
    "ADD": "Add",
    "SUB": "Sub",
    "MUL": "Mul",
    "DIV": "Div",
    "SUM": "ReduceSum",
    "REDUCE_ANY": "ReduceAny",
    "REDUCE_MAX": "ReduceMax",
    "REDUCE_MIN": "ReduceMin",
    "GATHER": "Gather",
    "CAST": "Cast",
    "RESHAPE": "Reshape",
    "SQUEEZE": "Squeeze",
    "EXPAND_DIMS": "Unsqueeze",
    "TRANSPOSE": "Transpose",
    "STRIDED_SLICE": "StridedSlice",
    "SLICE": "Slice",
    "CONCATENATION": "Concat",
    "PACK": "Pack",
    "QUANTIZE": "Quantize",
    "DEQUANTIZE": "Dequantize",
    "SELECT": "Where",
    "SELECT_V2": "Where",
    "MINIMUM": "Min",
    "MAXIMUM": "Max",
    "RELU": "Relu",
    "RELU6": "Relu6",
    "ARG_MAX": "ArgMax",
    "ARG_MIN": "ArgMin",
    "EQUAL": "Equal",
    "NOT_EQUAL": "NotEqual",
    "GREATER": "Greater",
    "GREATER_EQUAL": "GreaterOrEqual",
    "LESS": "Less",
    "LESS_EQUAL": "LessOrEqual",
    "LOGICAL_AND": "And",
    "LOGICAL_OR": "Or",
    "LOGICAL_NOT": "Not",
    "FULLY_CONNECTED": "FullyConnected",
    "BATCH_MATMUL": "MatMul",
    "CONV_2D": "Conv",
    "DEPTHWISE_CONV_2D": "DepthwiseConv",
    "ABS": "Abs",
    "NEG": "Neg",
    "ONE_HOT": "OneHot",
    "LOGISTIC": "Sigmoid",
    "TANH": "Tanh",
    "SOFTMAX": "Softmax",
    "LOG_SOFTMAX": "LogSoftmax",
    "MAX_POOL_2D": "MaxPool",
    "AVERAGE_POOL_2D": "AveragePool",
    "MEAN": "ReduceMean",
    "TILE": "Tile",
    "PAD": "Pad",
    "SHAPE": "Shape",
    "FLOOR_MOD": "Mod",
    "LEAKY_RELU": "LeakyRelu",
}

_TFLITE_DTYPES = {
    "FLOAT32": "float32",
    "FLOAT16": "float16",
    "FLOAT64": "float64",
    "INT32": "int32",
    "INT64": "int64",
    "INT16": "int16",
    "INT8": "int8",
    "UINT8": "uint8",
    "BOOL": "bool",
    "UINT32": "uint32",
    "UINT16": "uint16",
}


def load_graph(path) -> Graph:
    """Read an ``.onnx`` or ``.tflite`` file (or bytes/ModelProto) into a :class:`Graph`."""
    if isinstance(path, (bytes, bytearray)):
        from bnc_deploy.formats.ort import is_ort

        return load_ort_graph(path) if is_ort(path) else load_tflite_graph(path)
    if not isinstance(path, (str, Path)):
        return load_onnx_graph(path)  # an onnx.ModelProto
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    suffix = p.suffix.lower()
    if suffix == ".onnx":
        return load_onnx_graph(p)
    if suffix == ".tflite":
        return load_tflite_graph(p)
    if suffix == ".ort":
        return load_ort_graph(p)
    raise RuntimeLoadError(f"{p}: cannot count a {suffix or 'extension-less'} file (expected .onnx, .ort or .tflite)")


def load_ort_graph(model) -> Graph:
    """ORT format file (path or bytes) -> Graph, through the ONNX graph it holds."""
    from bnc_deploy.formats.ort import ort_to_onnx

    path = str(model) if isinstance(model, (str, Path)) else ""
    try:
        proto = ort_to_onnx(model)
    except MissingExtraError:
        raise
    except Exception as exc:  # noqa: BLE001 - untrusted bytes: the flatbuffer reader fails in many ways
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RuntimeLoadError(f"{path or 'ORT bytes'}: not a readable ORT format model ({first_line})") from None
    graph = load_onnx_graph(proto)
    graph.path = path
    return graph


def _metadata(text: str | bytes) -> dict | None:
    """The ``bnc_deploy`` metadata entry as a dict; None when it is not valid UTF-8 JSON."""
    try:
        return json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
    except ValueError:
        return None


# -- ONNX -----------------------------------------------------------------------------------------------
def load_onnx_graph(model) -> Graph:
    """ONNX model (path or ModelProto) -> Graph, shapes from ``onnx.shape_inference`` (data_prop)."""
    import onnx
    from onnx import helper, numpy_helper, shape_inference

    path = ""
    if isinstance(model, (str, Path)):
        path = str(model)
        try:
            model = onnx.load(str(model))
        except Exception as exc:  # onnx raises DecodeError and friends for non-ONNX bytes
            first_line = str(exc).splitlines()[0] if str(exc) else repr(exc)
            raise RuntimeLoadError(f"{path}: not a readable ONNX model ({first_line})") from None
    g = model.graph
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # inference failing leaves shapes unknown, which the counts report
        inferred = model
    init_names = {i.name for i in g.initializer}
    inputs = [i.name for i in g.input if i.name not in init_names]
    batch_symbol = None
    for vi in g.input:
        if vi.name in inputs and vi.type.tensor_type.shape.dim:
            first = vi.type.tensor_type.shape.dim[0]
            batch_symbol = first.dim_param or None
            break

    def shape_of(vi):
        if not vi.type.tensor_type.HasField("shape"):
            return None
        dims = []
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.dim_param and d.dim_param == batch_symbol:
                dims.append(None)
            else:
                return None
        return tuple(dims)

    tensors: dict[str, GTensor] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        elem = vi.type.tensor_type.elem_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem)).name if elem else "float32"
        tensors[vi.name] = GTensor(vi.name, dtype, shape_of(vi))
    for init in g.initializer:
        value = numpy_helper.to_array(init)
        tensors[init.name] = GTensor(init.name, value.dtype.name, tuple(value.shape), value)
    nodes = []
    for k, n in enumerate(g.node):
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            value = _onnx_constant_value(attrs)
            if value is not None:
                tensors[n.output[0]] = GTensor(n.output[0], value.dtype.name, tuple(value.shape), value)
                continue
        # Custom domains and control flow (subgraphs) get names outside the rule table: "unknown".
        if n.domain not in ("", "ai.onnx"):
            op = f"{n.domain}:{n.op_type}"
        elif any(isinstance(v, onnx.GraphProto) for v in attrs.values()):
            op = f"{n.op_type}(subgraph)"
        else:
            op = n.op_type
        nodes.append(GNode(k, op, n.op_type, list(n.input), list(n.output), attrs))
        for o in n.output:
            tensors.setdefault(o, GTensor(o, "float32", None))
    for name in inputs:
        tensors.setdefault(name, GTensor(name, "float32", None))
    props = {p.key: p.value for p in model.metadata_props}
    metadata = _metadata(props["bnc_deploy"]) if "bnc_deploy" in props else None
    return Graph("onnx", nodes, tensors, inputs, [o.name for o in g.output], metadata, path)


def _onnx_constant_value(attrs: dict):
    from onnx import numpy_helper

    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in attrs:
            return np.array(list(attrs[key]), dtype=dtype)
    return None


# -- TFLite ---------------------------------------------------------------------------------------------
def load_tflite_graph(model) -> Graph:
    """TFLite file (path or bytes) -> Graph (first subgraph), with builtin options as attrs."""
    from bnc_deploy.formats.tflite import inspect_tflite, load_model_t

    path = str(model) if isinstance(model, (str, Path)) else ""
    data = Path(model).read_bytes() if path else bytes(model)
    try:
        summary = inspect_tflite(data)
    except MissingExtraError:
        raise
    except Exception as exc:  # flatbuffer decoding errors have many types
        raise RuntimeLoadError(f"{path or 'model'}: not a readable TFLite model ({exc})") from None
    _, model_t = load_model_t(data)  # inspect_tflite does not expose builtin options
    operators = model_t.subgraphs[0].operators or []
    options = [op.builtinOptions for op in operators]
    inputs = list(summary.inputs)
    static_batch = None
    if inputs:
        t = summary.tensors[inputs[0]]
        if t.shape_signature and int(t.shape_signature[0]) != -1:
            static_batch = int(t.shape[0])
    names = {}
    tensors = {}
    for t in summary.tensors:
        name = t.name if t.name and t.name not in tensors else f"{t.name}#{t.index}"
        names[t.index] = name
        dtype = _TFLITE_DTYPES.get(t.dtype, t.dtype.lower())
        sig = list(t.shape_signature) if t.shape_signature is not None else list(t.shape)
        value = None
        if t.is_constant:
            try:
                value = np.frombuffer(t.data, dtype=np.dtype(dtype)).reshape(t.shape)
            except (TypeError, ValueError):
                value = None
        shape = tuple(None if int(d) == -1 else int(d) for d in sig)
        if value is None and static_batch is not None and shape and shape[0] == static_batch:
            shape = (None,) + shape[1:]  # per-row tensors carry the static batch as dimension 0
        tensors[name] = GTensor(name, dtype, shape, value, scale=tuple(t.scale or ()))
    nodes = []
    for op in summary.ops:
        canonical = TFLITE_OPS.get(op.name, op.name)
        opts = options[op.index] if op.index < len(options) else None
        attrs = {k: v for k, v in vars(opts).items()} if opts is not None else {}
        nodes.append(
            GNode(
                op.index,
                canonical,
                op.name,
                [names[i] if i >= 0 else "" for i in op.inputs],
                [names[i] for i in op.outputs],
                attrs,
            )
        )
    metadata = None
    if "bnc_deploy" in summary.metadata:
        metadata = _metadata(summary.metadata["bnc_deploy"])
    return Graph(
        "tflite", nodes, tensors, [names[i] for i in inputs], [names[i] for i in summary.outputs], metadata, path
    )
