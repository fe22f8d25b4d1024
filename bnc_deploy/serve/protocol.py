"""Open Inference Protocol (KServe V2) tensors: datatype <-> NumPy tables and tensor (de)coding.

Shared by the REST and gRPC front ends, so both read a tensor the same way and a request is
never misread: a tensor's data must hold exactly ``prod(shape)`` elements; JSON numbers must be
of the declared kind (a ``1.5`` for an ``INT64`` tensor, a negative number or one beyond the
type's range for an integer type, a string for a number type are refused, never truncated or
wrapped); binary data (the REST binary tensor extension, gRPC ``raw_input_contents``) must be
exactly ``prod(shape) * itemsize`` bytes, little-endian. Every violation raises
:class:`~bnc_deploy.serve.errors.BadRequest` naming the tensor.

``BYTES`` tensors are length-prefixed on the wire (4-byte little-endian length, then the bytes),
as Triton and its clients do; the server sends them for the classification extension.
"""

from __future__ import annotations

import math
import struct
import sys

import numpy as np

from bnc_deploy.serve.errors import BadRequest

#: V2 datatype -> NumPy dtype (little-endian on the wire). BYTES holds Python bytes objects.
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object),
}
#: NumPy dtype name -> V2 datatype (for metadata, e.g. ``input_dtype = "int32"`` -> ``"INT32"``).
NUMPY_NAMES = {np.dtype(v).name: k for k, v in DATATYPES.items() if k != "BYTES"}
#: Server metadata, the same over REST and gRPC: the name and the protocol extensions implemented.
SERVER_NAME = "bnc-serve"
SERVER_EXTENSIONS = ("binary_tensor_data", "classification", "model_repository")
#: Largest shape product accepted for one tensor (guards shape-only memory blow-ups).
MAX_ELEMENTS = 1 << 31


#: dtype -> V2 datatype, for the per-response lookup (``dtype.name`` is slow).
_DATATYPE_OF = {np.dtype(v): k for k, v in DATATYPES.items() if k != "BYTES"}
_DATATYPE_OF.update({np.dtype(v).newbyteorder("="): k for k, v in DATATYPES.items() if k != "BYTES"})


def datatype_of(dtype) -> str:
    """V2 datatype of a NumPy dtype (native or little-endian); BadRequest for others."""
    name = _DATATYPE_OF.get(dtype)
    if name is not None:
        return name
    dt = np.dtype(dtype)
    if dt.kind == "O":
        return "BYTES"
    name = NUMPY_NAMES.get(dt.name)  # the name ignores byte order ('>i8' is 'int64' too)
    if name is None:
        raise BadRequest(f"no V2 datatype for NumPy dtype {dt}")
    return name


def dtype_of(datatype: str, where: str = "tensor") -> np.dtype:
    """NumPy dtype of a V2 datatype name; BadRequest for unknown names."""
    try:
        return DATATYPES[datatype]
    except (KeyError, TypeError):
        raise BadRequest(f"{where}: unknown datatype {datatype!r}; V2 datatypes are {', '.join(DATATYPES)}") from None


def check_shape(shape, where: str = "tensor") -> tuple[int, ...]:
    """A V2 shape (list of non-negative ints) as a tuple; BadRequest otherwise."""
    if not isinstance(shape, (list, tuple)) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape
    ):
        raise BadRequest(f"{where}: shape must be a list of non-negative integers, got {shape!r}")
    if math.prod(shape) > MAX_ELEMENTS:
        raise BadRequest(f"{where}: shape {list(shape)} has too many elements")
    return tuple(shape)


def _flatten(data, where: str) -> list:
    """A JSON tensor's data as a flat row-major list: a flat list (what clients send) as it is;
    nested lists only when they are a regular array (ragged nesting is refused, not guessed)."""
    if not isinstance(data, list):
        return [data]
    if not data or not any(isinstance(v, list) for v in data):
        return data
    try:
        arr = np.array(data)  # NumPy 2 refuses ragged nesting with ValueError
    except (ValueError, RecursionError):
        arr = None
    if arr is None or arr.dtype == object:
        raise BadRequest(f"{where}: nested 'data' is ragged or mixes types (send a flat row-major list)")
    return arr.ravel().tolist()


def tensor_from_json(name: str, datatype: str, shape, data) -> np.ndarray:
    """The array of a JSON tensor (``{"name", "datatype", "shape", "data"}``)."""
    where = f"input {name!r}"
    dtype = dtype_of(datatype, where)
    shape = check_shape(shape, where)
    flat = _flatten(data, where)
    if len(flat) != math.prod(shape):
        raise BadRequest(f"{where}: shape {list(shape)} needs {math.prod(shape)} elements, data has {len(flat)}")
    if datatype == "BYTES":
        if not all(isinstance(v, str) for v in flat):
            raise BadRequest(f"{where}: BYTES data must be strings")
        out = np.empty(len(flat), dtype=object)
        out[:] = [v.encode() for v in flat]
        return out.reshape(shape)
    if datatype == "BOOL":
        ok = all(isinstance(v, bool) for v in flat)
    elif dtype.kind in "iu":
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in flat)
        if ok and flat:
            info = np.iinfo(dtype)
            lo, hi = min(flat), max(flat)
            if lo < info.min or hi > info.max:
                bad = lo if lo < info.min else hi
                raise BadRequest(f"{where}: value {bad} does not fit datatype {datatype}")
    else:
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat)
    if not ok:
        kind = {"b": "booleans", "i": "integers", "u": "integers", "f": "numbers"}[dtype.kind]
        raise BadRequest(f"{where}: datatype {datatype} needs {kind} in its data")
    try:
        with np.errstate(over="ignore"):  # float64 beyond FP32's range becomes inf: the adapters name it
            return np.array(flat, dtype=dtype).reshape(shape)
    except OverflowError:  # an integer beyond float64's range for a float datatype
        raise BadRequest(f"{where}: a value does not fit datatype {datatype}") from None


def tensor_from_bytes(name: str, datatype: str, shape, buffer) -> np.ndarray:
    """The array of a binary tensor (REST binary extension / gRPC raw contents), read-only view."""
    where = f"input {name!r}"
    dtype = dtype_of(datatype, where)
    shape = check_shape(shape, where)
    n = math.prod(shape)
    if datatype == "BYTES":
        items = deserialize_bytes(buffer, where)
        if len(items) != n:
            raise BadRequest(f"{where}: shape {list(shape)} needs {n} elements, data has {len(items)}")
        out = np.empty(n, dtype=object)
        out[:] = items
        return out.reshape(shape)
    if len(buffer) != n * dtype.itemsize:
        raise BadRequest(
            f"{where}: shape {list(shape)} of {datatype} needs {n * dtype.itemsize} bytes, got {len(buffer)}"
        )
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def serialize_bytes(values) -> bytes:
    """A BYTES tensor's wire form: each element as a 4-byte little-endian length + its bytes."""
    parts = []
    for v in np.asarray(values, dtype=object).reshape(-1):
        b = v if isinstance(v, bytes) else str(v).encode()
        parts.append(struct.pack("<I", len(b)))
        parts.append(b)
    return b"".join(parts)


def deserialize_bytes(buffer, where: str = "tensor") -> list[bytes]:
    """Inverse of :func:`serialize_bytes`; BadRequest on a truncated buffer."""
    buf = memoryview(buffer)
    out, pos = [], 0
    while pos < len(buf):
        if pos + 4 > len(buf):
            raise BadRequest(f"{where}: truncated BYTES element length")
        (size,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        if pos + size > len(buf):
            raise BadRequest(f"{where}: BYTES element of {size} bytes runs past the data")
        out.append(bytes(buf[pos : pos + size]))
        pos += size
    return out


def tensor_to_bytes(array: np.ndarray) -> bytes:
    """The binary wire form of an output array (little-endian; BYTES length-prefixed)."""
    if array.dtype.kind == "O":
        return serialize_bytes(array)
    if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and sys.byteorder == "big"):
        array = array.astype(array.dtype.newbyteorder("<"))
    return array.tobytes()  # C order


def tensor_to_json_data(array: np.ndarray) -> list:
    """A flat row-major list for a JSON output tensor (BYTES as text)."""
    if array.dtype.kind == "O":
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]
    return array.reshape(-1).tolist()


__all__ = [
    "SERVER_EXTENSIONS",
    "SERVER_NAME",
    "DATATYPES",
    "NUMPY_NAMES",
    "check_shape",
    "datatype_of",
    "deserialize_bytes",
    "dtype_of",
    "serialize_bytes",
    "tensor_from_bytes",
    "tensor_from_json",
    "tensor_to_bytes",
    "tensor_to_json_data",
]
