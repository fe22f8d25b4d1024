"""V2 client adapter (name ``"http"``): runs a model served by an Open Inference Protocol server.

The other adapters run a file; this one sends the rows to a KServe V2 / Open Inference Protocol
server (``bnc-serve``, Triton, KServe) and reads the answer, so ``bnc-profile --runtime http
--url URL`` measures a served model like a local one: the same ``check`` -> ``prepare`` ->
``invoke`` path, with ``invoke`` = one HTTP round trip::

    rt = load_runtime("letter_nb.onnx", "http", url="http://127.0.0.1:8000")   # model "letter_nb"
    rt = HttpAdapter(url="127.0.0.1:8000", model="letter_nb")                   # no local file
    scores, label = rt.run(x)          # the served file's outputs, as load_runtime(file).run(x)

"path" is optional: the model name defaults to its stem (``bnc-serve`` names models by file
stem); the file itself is not read (``bnc-profile`` reads it for the costs). The metadata (class
and feature names, cardinalities, input kind, output names, bits, ...) comes from the served
model's V2 metadata (``GET /v2/models/{model}``): its ``parameters`` carry the exported file's
metadata, its ``outputs`` the (scores, label) names. Rows are validated locally exactly as the
other adapters do (:meth:`RuntimeAdapter.check`: InputError naming feature, value and row)
before anything is sent.

Wire format: ``POST /v2/models/{model}[/versions/{v}]/infer`` with the binary tensor data
extension (a JSON header, then the little-endian input bytes; both outputs asked for as binary
data), on one persistent HTTP/1.1 connection (standard-library ``http.client``: no extra to
install, and no per-call connection set-up in the timed round trip). A connection the server
closed between calls is reopened once. ``prepare`` builds the request body; ``invoke`` sends it
and decodes the outputs (scores as the server's FP32/FP64, label INT64).

Errors: a server that cannot be reached, or a model it does not serve or that is not ready, raise
:class:`~bnc_deploy.errors.RuntimeLoadError` on load naming the URL and model; a 4xx answer to
an inference raises :class:`~bnc_deploy.errors.InputError` with the server's message; any other
failure during ``invoke`` raises RuntimeError naming the URL (a broken server is not bad input).
A server started with ``--api-key-file`` gets ``Authorization: Bearer`` from ``api_key`` or the
environment variable ``BNC_DEPLOY_API_KEY``. ``threads`` is accepted and ignored (the server decides), as are
``verify_integrity`` and ``key``
(the server checks its files' integrity before it serves them).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bnc_deploy.errors import ConfigError, InputError, RuntimeLoadError
from bnc_deploy.formats.metadata import INPUT_CODES, INPUT_NAME, INPUT_RAW
from bnc_deploy.runtimes.base import RuntimeAdapter

#: V2 datatype -> NumPy dtype of the tensors this adapter reads and sends.
_DTYPES = {
    "INT64": "<i8",
    "INT32": "<i4",
    "INT16": "<i2",
    "INT8": "<i1",
    "UINT8": "<u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
    "BOOL": "|b1",
}
_HEADER_LENGTH = "Inference-Header-Content-Length"
#: Environment variable holding the bearer token when ``api_key`` is not given.
API_KEY_ENV = "BNC_DEPLOY_API_KEY"


def parse_url(url: str) -> tuple[str, str, int, str]:
    """``(scheme, host, port, base path)`` of ``http[s]://host[:port][/prefix]`` or ``host:port``."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"http runtime: --url must be a URL such as http://127.0.0.1:8000, got {url!r}")
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"http runtime: --url must be an http(s) URL such as http://127.0.0.1:8000, got {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"http runtime: bad port in --url {url!r}") from None
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


class HttpAdapter(RuntimeAdapter):
    """Run a model served over the V2 REST protocol (see the module docstring).

    Parameters
    ----------
    path : str or PathLike, optional
        The exported file the server serves (only its stem is used, as the default ``model``).
    url : str
        The server, ``http://host:port`` (or ``host:port``).
    model : str, optional
        The served model's name (default: the stem of ``path``).
    version : str, optional
        A model version to pin (default: whatever the server serves now).
    api_key : str or bytes, optional
        Sent as ``Authorization: Bearer <key>`` (servers started with ``--api-key-file``); default:
        the environment variable ``BNC_DEPLOY_API_KEY`` when set (how ``bnc-profile`` passes it).
    timeout : float
        Seconds to wait for the server on connect and on each call (default 30).
    """

    name = "http"
    extensions = ()  # no file type: chosen by name only (never picked for a file by its suffix)

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        url: str | None = None,
        model: str | None = None,
        version: str | None = None,
        api_key: str | bytes | None = None,
        timeout: float = 30.0,
        threads: int | None = None,
        verify_integrity: bool = True,
        key: bytes | None = None,
        chunk_rows: int | str | None = "auto",
    ) -> None:
        if url is None:
            raise ConfigError("http runtime: needs the server's URL (bnc-profile --url http://HOST:PORT)")
        if model is None:
            if path is None:
                raise ConfigError("http runtime: needs a model name (--model NAME) or a file whose stem names it")
            model = Path(path).stem
        if not isinstance(model, str) or not model or "/" in model:
            raise ConfigError(f"http runtime: bad model name {model!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"threads must be a positive integer or None, got {threads!r}")
        self.scheme, self.host, self.port, prefix = parse_url(url)
        self.url = f"{self.scheme}://{self.host}:{self.port}{prefix}"
        self.model, self.version = model, version
        self.threads = threads  # the server's business; kept for the profiler's rows
        self.timeout = float(timeout)
        self.path = Path(model)  # names the model in the base class's messages ("<model> input: ...")
        self.chunk_rows = chunk_rows
        self._headers: dict[str, str] = {}
        if api_key is None:
            api_key = os.environ.get(API_KEY_ENV) or None
        if api_key is not None:
            token = api_key.decode() if isinstance(api_key, bytes) else str(api_key)
            self._headers["Authorization"] = f"Bearer {token.strip()}"
        base = f"{prefix}/v2/models/{urllib.parse.quote(model, safe='')}"
        if version:
            base += f"/versions/{urllib.parse.quote(str(version), safe='')}"
        self._model_path, self._infer_path = base, base + "/infer"
        self._conn: http.client.HTTPConnection | None = None
        self.metadata = self._load_metadata()
        self.cardinalities = np.asarray(self.metadata["cardinalities"], dtype=np.int64)

    # -- connection -------------------------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self.host, self.port, timeout=self.timeout)
            self._conn.connect()
            # Small request/response pairs: send each at once instead of waiting for an ACK (Nagle).
            self._conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._conn

    def close(self) -> None:
        """Close the connection (a later call reopens it)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _request(
        self, method: str, target: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One round trip: ``(status, response headers, body)``; reopens a connection the server
        closed while idle (once), raises OSError/HTTPException when the server is unreachable."""
        headers = {**self._headers, **(headers or {})}
        for attempt in (0, 1):
            reused = self._conn is not None
            try:
                conn = self._connection()
                conn.request(method, target, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                if response.will_close:
                    self.close()
                return response.status, response.headers, data
            except (
                http.client.RemoteDisconnected,
                ConnectionResetError,
                BrokenPipeError,
                http.client.CannotSendRequest,
                http.client.ResponseNotReady,
            ):
                self.close()
                if attempt or not reused:
                    raise
            except (OSError, http.client.HTTPException):
                self.close()
                raise
        raise AssertionError("unreachable")

    # -- metadata ---------------------------------------------------------------------------------
    def _load_metadata(self) -> dict[str, Any]:
        where = f"{self.url} model {self.model!r}"
        try:
            status, _, data = self._request("GET", self._model_path)
        except (OSError, http.client.HTTPException) as exc:
            raise RuntimeLoadError(f"{where}: cannot reach the server ({exc})") from None
        if status != 200:
            raise RuntimeLoadError(f"{where}: the server answered {status} ({_message(data)})")
        try:
            meta = json.loads(data)
            params = dict(meta.get("parameters") or {})
            outputs = {o["name"]: o for o in meta["outputs"]}
            inputs = {i["name"]: i for i in meta["inputs"]}
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise RuntimeLoadError(f"{where}: not V2 model metadata ({exc!r})") from None
        missing = [k for k in ("class_names", "feature_names", "cardinalities") if k not in params]
        if missing or INPUT_NAME not in inputs or len(outputs) != 2:
            raise RuntimeLoadError(
                f"{where}: not a bnc-deploy model (metadata parameters lack {missing}, "
                f"inputs {sorted(inputs)}, outputs {sorted(outputs)})"
            )
        names = list(outputs)
        scores_name, label_name = names if outputs[names[1]]["datatype"] == "INT64" else names[::-1]
        params.setdefault("input", INPUT_CODES)
        if params["input"] not in (INPUT_CODES, INPUT_RAW):
            raise RuntimeLoadError(f"{where}: unknown input kind {params['input']!r}")
        params["outputs"] = [scores_name, label_name]
        params["served_version"] = (meta.get("versions") or [None])[0]
        self._input_datatype = inputs[INPUT_NAME]["datatype"]
        if self._input_datatype not in _DTYPES:
            raise RuntimeLoadError(f"{where}: unsupported input datatype {self._input_datatype!r}")
        self._scores_name, self._label_name = scores_name, label_name
        if len(params["feature_names"]) != len(params["cardinalities"]):
            raise RuntimeLoadError(f"{where}: inconsistent feature metadata")
        return params

    # -- running ----------------------------------------------------------------------------------
    def _prepare(self, checked: NDArray[np.int64] | NDArray[np.float32]) -> _Prepared:
        """Checked rows -> the request body (JSON header + input bytes); headers are fixed per body."""
        # Checked codes are in 0..|X_i|-1 and raw values are float32: the cast to the served input
        # datatype is exact (a codes model's datatype holds its cardinalities).
        data = np.ascontiguousarray(checked, dtype=_DTYPES[self._input_datatype]).tobytes()
        header = json.dumps(
            {
                "inputs": [
                    {
                        "name": INPUT_NAME,
                        "shape": list(checked.shape),
                        "datatype": self._input_datatype,
                        "parameters": {"binary_data_size": len(data)},
                    }
                ],
                "outputs": [
                    {"name": self._scores_name, "parameters": {"binary_data": True}},
                    {"name": self._label_name, "parameters": {"binary_data": True}},
                ],
            },
            separators=(",", ":"),
        ).encode()
        return _Prepared(header + data, len(header), int(checked.shape[0]))

    def invoke(self, prepared: _Prepared) -> tuple[NDArray[Any], NDArray[Any]]:
        """One ``POST .../infer`` round trip: ``(scores, label)`` as the server sent them."""
        headers = {"Content-Type": "application/octet-stream", _HEADER_LENGTH: str(prepared.header_length)}
        try:
            status, response_headers, data = self._request("POST", self._infer_path, prepared.body, headers)
        except (OSError, http.client.HTTPException) as exc:
            raise RuntimeError(f"{self.url} model {self.model!r}: inference request failed ({exc})") from None
        if 400 <= status < 500:
            raise InputError(f"{self.url} model {self.model!r}: {_message(data)}")
        if status != 200:
            raise RuntimeError(f"{self.url} model {self.model!r}: the server answered {status} ({_message(data)})")
        outputs = _decode_response(response_headers, data, f"{self.url} model {self.model!r}")
        try:
            return outputs[self._scores_name], outputs[self._label_name]
        except KeyError as exc:
            raise RuntimeError(f"{self.url} model {self.model!r}: the response lacks output {exc}") from None

    def __repr__(self) -> str:
        return f"HttpAdapter(url={self.url!r}, model={self.model!r})"


class _Prepared:
    """A request body ready to send (:meth:`HttpAdapter.invoke`'s input)."""

    __slots__ = ("body", "header_length", "rows")

    def __init__(self, body: bytes, header_length: int, rows: int) -> None:
        self.body, self.header_length, self.rows = body, header_length, rows


def _message(data: bytes) -> str:
    """The ``error`` of a V2 error body, else the body's first 200 characters."""
    try:
        return str(json.loads(data)["error"])
    except (ValueError, TypeError, KeyError):
        return data[:200].decode("utf-8", "replace") or "no message"


def _decode_response(
    headers: Mapping[str, str] | http.client.HTTPMessage, data: bytes, where: str
) -> dict[str, NDArray[Any]]:
    """``{output name: array}`` of a V2 infer response (binary extension or JSON data)."""
    try:
        length = headers.get(_HEADER_LENGTH)
        header_length = int(length) if length is not None else len(data)
        meta = json.loads(data[:header_length])
        out: dict[str, NDArray[Any]] = {}
        pos = header_length
        for tensor in meta["outputs"]:
            shape = tuple(int(s) for s in tensor["shape"])
            dtype = np.dtype(_DTYPES[tensor["datatype"]])
            size = (tensor.get("parameters") or {}).get("binary_data_size")
            if size is not None:
                array = np.frombuffer(data, dtype=dtype, count=int(size) // dtype.itemsize, offset=pos)
                pos += int(size)
            else:
                array = np.asarray(tensor["data"], dtype=dtype)
            out[tensor["name"]] = array.reshape(shape)
        return out
    except (ValueError, TypeError, KeyError) as exc:
        raise RuntimeError(f"{where}: malformed V2 infer response ({exc!r})") from None
