"""The REST infer body, both ways: request bytes -> :class:`InferRequest`, outputs -> response bytes.

Request: JSON ``{"id"?, "parameters"?, "inputs": [{"name", "datatype", "shape", "data" |
"parameters": {"binary_data_size": n}}], "outputs"?: [{"name", "parameters"?: {"binary_data":
bool, "classification": k}}]}``; with the binary tensor data extension the JSON is the first
``Inference-Header-Content-Length`` bytes of the body and the binary tensors follow in input
order. Malformed requests raise :class:`~bnc_deploy.serve.errors.BadRequest`; more than
:data:`~bnc_deploy.serve.limits.MAX_TENSORS` inputs or outputs, or an input of more than
``max_rows`` rows, raise :class:`~bnc_deploy.serve.errors.PayloadTooLarge` before any tensor
is decoded.

Both functions are plain functions of bytes and arrays (no event loop, no server state), so the
front end can run them where it likes: inline for small requests, in a worker thread, or
:func:`parse_infer_request` in a worker process for a large JSON head (``json.loads`` holds the
GIL for its whole run). :func:`encode_infer_body` writes large JSON outputs in slices of
:data:`JSON_SLICE_ELEMENTS` values, so a thread encoding a million rows gives the GIL back
between slices, and returns the body as chunks that are sent one by one, never joined; the
bytes are the same as one ``json.dumps``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bnc_deploy.serve.errors import BadRequest
from bnc_deploy.serve.limits import check_count, check_rows
from bnc_deploy.serve.protocol import (
    check_shape,
    datatype_of,
    tensor_from_bytes,
    tensor_from_json,
    tensor_to_bytes,
    tensor_to_json_data,
)

#: Values of a JSON output encoded per ``json.dumps`` call (about 15 ms of GIL each).
JSON_SLICE_ELEMENTS = 2**15
#: A large response body is handed to the server in chunks of about this size: one join of a
#: response of 10^6 rows x 26 float scores (about 500 MB of JSON) would hold the GIL for seconds.
RESPONSE_CHUNK_BYTES = 2**20


@dataclass
class InferRequest:
    """A decoded infer request: what the model call and the response need, nothing else."""

    inputs: dict[str, np.ndarray[Any, Any]]
    #: Requested output names in order (empty: all of the model's).
    output_names: list[str] = field(default_factory=list)
    #: Output name -> k of the classification extension.
    classification: dict[str, object] = field(default_factory=dict)
    #: The request's ``binary_data_output`` (outputs' default), and each named output's choice.
    binary_default: bool = False
    binary_of: dict[str, bool] = field(default_factory=dict)
    #: Whether the request had an ``id``, and its value (echoed in the response).
    has_id: bool = False
    id: object = None

    @property
    def rows(self) -> int:
        """Rows of the largest input (0 for scalars): what the model call will run."""
        return max((int(a.shape[0]) if a.ndim else 0 for a in self.inputs.values()), default=0)


def _parameters(obj: dict[str, Any], where: str) -> dict[str, Any]:
    params = obj.get("parameters", {})
    if not isinstance(params, dict):
        raise BadRequest(f"{where}: 'parameters' must be an object")
    return params


def _split_body(body: bytes, header_length: str | None) -> tuple[bytes, memoryview]:
    """``(JSON head, binary tensors)`` of a body (all JSON without ``Inference-Header-Content-Length``)."""
    if header_length is not None:
        if not (header_length.isascii() and header_length.isdigit()) or int(header_length) > len(body):
            raise BadRequest(
                f"Inference-Header-Content-Length {header_length!r} does not fit a body of {len(body)} bytes"
            )
        n = int(header_length)
        return body[:n], memoryview(body)[n:]
    return body, memoryview(b"")


def parse_infer_request(body: bytes, header_length: str | None, max_rows: int) -> InferRequest:
    """The :class:`InferRequest` of an infer body (see the module docstring)."""
    head, binary = _split_body(body, header_length)
    try:
        req = json.loads(head)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: JSON nested too deep
        raise BadRequest(f"malformed JSON request: {exc}") from None
    if not isinstance(req, dict):
        raise BadRequest("the request must be a JSON object")
    params = _parameters(req, "request")
    binary_default = params.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise BadRequest("'binary_data_output' must be true or false")
    raw_inputs = req.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise BadRequest("the request needs a non-empty 'inputs' list")
    check_count(raw_inputs, "inputs")
    raw_outputs = req.get("outputs", [])
    if not isinstance(raw_outputs, list):
        raise BadRequest("'outputs' must be a list")
    check_count(raw_outputs, "outputs")
    for item in raw_inputs:  # every declared size first: a too large request is refused before decoding
        if isinstance(item, dict):
            where = f"input {item.get('name')!r}"
            check_rows(check_shape(item.get("shape"), where), max_rows, where)
    inputs = _decode_inputs(raw_inputs, binary)
    out = InferRequest(inputs, binary_default=binary_default, has_id="id" in req, id=req.get("id"))
    _add_outputs(out, raw_outputs)
    return out


def _decode_inputs(raw_inputs: list[Any], binary: memoryview) -> dict[str, np.ndarray[Any, Any]]:
    """The input tensors, from their JSON ``data`` or their slice of the binary tensors (which they
    must use up exactly)."""
    inputs: dict[str, np.ndarray[Any, Any]] = {}
    pos = 0
    for item in raw_inputs:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise BadRequest("each input needs a 'name'")
        name = item["name"]
        where = f"input {name!r}"
        if name in inputs:
            raise BadRequest(f"{where} appears twice")
        size = _parameters(item, where).get("binary_data_size")
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0 or pos + size > len(binary):
                raise BadRequest(
                    f"{where}: binary_data_size {size!r} does not fit the {len(binary) - pos} "
                    "binary bytes left in the body"
                )
            if "data" in item:
                raise BadRequest(f"{where}: both 'data' and binary_data_size")
            # (datatype checked there, None included)
            inputs[name] = tensor_from_bytes(name, item.get("datatype"), item.get("shape"), binary[pos : pos + size])  # type: ignore[arg-type]
            pos += size
        else:
            if "data" not in item:
                raise BadRequest(f"{where} has neither 'data' nor binary_data_size")
            # (datatype checked there, None included)
            inputs[name] = tensor_from_json(name, item.get("datatype"), item.get("shape"), item["data"])  # type: ignore[arg-type]
    if pos != len(binary):
        raise BadRequest(f"{len(binary) - pos} binary bytes after the inputs' binary_data_size")
    return inputs


def _add_outputs(out: InferRequest, raw_outputs: list[Any]) -> None:
    """The requested outputs, in order, with their ``binary_data`` and ``classification`` choices."""
    for item in raw_outputs:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise BadRequest("each requested output needs a 'name'")
        name = item["name"]
        oparams = _parameters(item, f"output {name!r}")
        b = oparams.get("binary_data", out.binary_default)
        if not isinstance(b, bool):
            raise BadRequest(f"output {name!r}: binary_data must be true or false")
        out.binary_of[name] = b
        if "classification" in oparams:
            out.classification[name] = oparams["classification"]
        out.output_names.append(name)


def _json_data(array: np.ndarray) -> list[bytes]:
    """``json.dumps(tensor_to_json_data(array))`` as pieces of about :data:`RESPONSE_CHUNK_BYTES`:
    a large numeric array is written :data:`JSON_SLICE_ELEMENTS` values per ``json.dumps`` call."""
    flat = array.reshape(-1)
    if flat.size <= JSON_SLICE_ELEMENTS or array.dtype.kind == "O":
        return [json.dumps(tensor_to_json_data(array), separators=(",", ":")).encode()]
    pieces, current, size = [], [b"["], 1
    for i in range(0, flat.size, JSON_SLICE_ELEMENTS):
        text = json.dumps(flat[i : i + JSON_SLICE_ELEMENTS].tolist(), separators=(",", ":")).encode()
        current.append(text[1:-1] if i == 0 else b"," + text[1:-1])
        size += len(text)
        if size >= RESPONSE_CHUNK_BYTES:
            pieces.append(b"".join(current))
            current, size = [], 0
    current.append(b"]")
    pieces.append(b"".join(current))
    return pieces


def encode_infer_body(
    model_name: str, model_version: str, request: InferRequest, outputs: Iterable[tuple[str, np.ndarray]]
) -> tuple[int, list[bytes], list[tuple[bytes, bytes]]]:
    """``(status, body chunks, headers)`` of the V2 infer response to ``request``: JSON, or JSON +
    binary tensors with ``Inference-Header-Content-Length``. The body is the chunks in order
    (one chunk for a small response; a large one is sent chunk by chunk, never joined)."""
    items: list[dict[str, object]] = []
    binaries: list[bytes] = []
    datas: list[list[bytes]] = []
    for name, array in outputs:
        entry: dict[str, object] = {"name": name, "datatype": datatype_of(array.dtype), "shape": list(array.shape)}
        if request.binary_of.get(name, request.binary_default):
            data = tensor_to_bytes(array)
            entry["parameters"] = {"binary_data_size": len(data)}
            binaries.append(data)
        else:
            entry["data"] = None  # placeholder, filled in below without a second dumps of the values
            datas.append(_json_data(array))
        items.append(entry)
    obj: dict[str, object] = {"model_name": model_name, "model_version": model_version, "outputs": items}
    if request.has_id:
        obj["id"] = request.id
    head = json.dumps(obj, separators=(",", ":")).encode()
    chunks = [head]
    if datas:
        # '"data":null' cannot occur inside a JSON string (its quotes would be escaped there), so
        # the split finds exactly the placeholders, in output order.
        text = head.split(b'"data":null')
        chunks = [text[0]]
        for pieces, rest in zip(datas, text[1:], strict=True):
            chunks += [b'"data":', *pieces, rest]
        if sum(len(c) for c in chunks) <= RESPONSE_CHUNK_BYTES:
            chunks = [b"".join(chunks)]
    if not binaries:
        return 200, chunks, [(b"content-type", b"application/json")]
    head_length = sum(len(c) for c in chunks)
    return (
        200,
        [*chunks, *binaries],
        [
            (b"content-type", b"application/octet-stream"),
            (b"inference-header-content-length", str(head_length).encode()),
        ],
    )


__all__ = ["InferRequest", "JSON_SLICE_ELEMENTS", "RESPONSE_CHUNK_BYTES", "encode_infer_body", "parse_infer_request"]
