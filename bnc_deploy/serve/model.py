"""One served model: an exported file (or ``.bnc`` model file) loaded in its runtime and checked.

``ServedModel(name, path)`` reads the file's bytes once for its ``digest`` (the first 12 hex digits
of its SHA-256), which is its ``version`` (every response's ``model_version``: it tells old from
new after a reload) unless the repository gives one (``version="2"``: Triton's version
directories, :mod:`~bnc_deploy.serve.versions`); ``served_versions`` (set by the repository) are
the model's versions serving beside it, listed in the metadata. It loads
those same bytes in a runtime adapter (``bnc_deploy.runtimes``, which checks the file's
integrity seal on them and never opens the path: a file changed in place after loading cannot
change what a served version computes), then
runs the check set stored in the file's metadata (:mod:`bnc_deploy.formats.checkset`; a ``.bnc``
file's own check set) and refuses the file (:class:`ModelLoadError`) unless it reproduces it: a
``ServedModel`` that exists is ready. A file caught half-rewritten fails its seal and is refused.

``infer`` is blocking and thread-safe (runtimes that are not thread-safe, e.g. LiteRT, run under a
lock); with ``max_batch`` it goes through the model's :class:`~bnc_deploy.serve.batching.Batcher`.
``infer_async`` is the same for an asyncio front end (no thread hop when not batching: a call
takes tens of microseconds). A front end passes each request's
:class:`~bnc_deploy.serve.statistics.InferRecord` (``record=``), which gets the validation, queue,
runtime-call and output times and, when the request is traced, its ``queue``/``compute`` spans.

Tensors (V2): input ``x`` ``[-1, D]`` of the file's input datatype (integer codes: any integer
datatype is accepted and range-checked by the adapter; raw files: ``FP32``, any real datatype
accepted and run as float32); outputs ``log_joint`` (DNN: ``logits``) ``[-1, C]`` ``FP32``
(``FP64`` for ``.bnc`` files, whose NumPy reference computes in float64) and ``label`` ``[-1]``
``INT64``, with the same values as ``load_runtime(path).run(x)``.

Classification (Triton's classification extension): ``classification=k`` on the scores output
returns, instead of the scores, a ``BYTES`` tensor ``[N, k]`` of the top-k classes per row,
best first, as ``"<score>:<index>:<class name>"`` (score as the shortest text that reads back
as the same float32/float64 value); on
``label`` it returns ``BYTES`` ``[N]`` class names.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from pathlib import Path

import numpy as np

from bnc_deploy.errors import BncDeployError, InputError
from bnc_deploy.formats.checkset import check_inputs, compare_check
from bnc_deploy.formats.metadata import INPUT_NAME, INPUT_RAW, contract_outputs
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.serve import metrics, statistics
from bnc_deploy.serve.batching import Batcher
from bnc_deploy.serve.errors import BadRequest, ServeError
from bnc_deploy.serve.protocol import NUMPY_NAMES

#: Runtimes whose adapters may run concurrently from several threads.
THREAD_SAFE_RUNTIMES = frozenset({"onnxruntime", "numpy"})
#: Metadata facts reported under the V2 metadata's ``parameters``.
PARAMETER_KEYS = (
    "model_kind",
    "format",
    "lowering",
    "structure",
    "exact",
    "input",
    "bits",
    "quantized",
    "n_parameters",
    "size_bits",
    "n_ops",
    "class_names",
    "feature_names",
    "cardinalities",
    "architecture",
    "activation",
    "artifact_sha256",
)


class ModelLoadError(ServeError):
    """A file that does not load, or loads but does not reproduce its check set."""

    status, grpc_code = 400, "INVALID_ARGUMENT"


def file_version(data: bytes) -> str:
    """The version of a model file's content: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(data).hexdigest()[:12]


class ServedModel:
    """A loaded, checked model file (see the module docstring)."""

    def __init__(
        self,
        name: str,
        path,
        *,
        runtime: str | None = None,
        threads: int | None = None,
        max_batch: int = 0,
        max_queue_delay_ms: float = 0.0,
        key: bytes | None = None,
        version: str | None = None,
    ) -> None:
        self.name, self.path = name, Path(path)
        try:
            before = self.path.read_bytes()
        except OSError as exc:
            raise ModelLoadError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        self.digest = file_version(before)
        self.version = version or self.digest
        self.served_versions = [self.version]
        self.file_bytes = len(before)
        try:
            self.adapter = load_runtime(
                self.path, runtime, threads=threads, data=before, **({} if key is None else {"key": key})
            )
        except BncDeployError as exc:  # RuntimeLoadError, IntegrityError, MissingExtraError, ConfigError
            raise ModelLoadError(f"{self.path.name}: {exc}") from None
        self.runtime = self.adapter.name
        meta = self.metadata_raw = self.adapter.metadata
        self.scores_name, self.label_name = contract_outputs(meta)
        self.output_names = (self.scores_name, self.label_name)
        self.raw_inputs = meta.get("input") == INPUT_RAW
        self.n_features, self.n_classes = self.adapter.n_features, self.adapter.n_classes
        self.class_names = list(meta["class_names"])
        self.input_datatype = NUMPY_NAMES.get(str(meta.get("input_dtype", "int64")), "INT64")
        self.scores_dtype = np.dtype(np.float64 if meta.get("format") == "bnc" else np.float32)
        self._lock = None if self.runtime in THREAD_SAFE_RUNTIMES else threading.Lock()
        self._batcher = None
        self.check_result = self._check()
        self._metrics = metrics.ModelMetrics(name)
        self.statistics = statistics.ModelStatistics(name, self.version)
        self.max_batch = max_batch if max_batch and max_batch > 0 else 0
        self.max_queue_delay_ms = float(max_queue_delay_ms) if self.max_batch else 0.0
        if max_batch and max_batch > 0:
            self._batcher = Batcher(
                self._run_rows, max_batch=max_batch, max_queue_delay_ms=max_queue_delay_ms, name=name
            )

    # -- loading ----------------------------------------------------------------------------------
    def _check(self) -> dict:
        """Run the stored check set; ModelLoadError unless it is reproduced."""
        where = self.path.name
        try:
            x = check_inputs(self.metadata_raw, where)
        except BncDeployError as exc:
            raise ModelLoadError(str(exc)) from None
        if x is None:
            raise ModelLoadError(
                f"{where} stores no check set (exported before bnc-deploy stored one); export it again to serve it"
            )
        try:
            scores, labels = self.adapter.run(x)
        except (BncDeployError, RuntimeError) as exc:
            raise ModelLoadError(f"{where}: running its check set failed: {exc}") from None
        problem = compare_check(self.metadata_raw, labels, scores)
        if problem:
            raise ModelLoadError(f"{where}: {problem}")
        return {"rows": len(x), "exact": bool(self.metadata_raw.get("exact"))}

    def close(self) -> None:
        """Stop the batcher after its queued requests (in-flight requests finish)."""
        if self._batcher is not None:
            self._batcher.close()

    # -- metadata ---------------------------------------------------------------------------------
    def metadata(self) -> dict:
        """V2 model metadata (``GET /v2/models/{name}``)."""
        meta = self.metadata_raw
        params = {k: meta[k] for k in PARAMETER_KEYS if k in meta and meta[k] is not None}
        params.update(
            runtime=self.runtime, file=self.path.name, file_bytes=self.file_bytes, integrity=meta.get("integrity")
        )
        return {
            "name": self.name,
            "versions": list(self.served_versions),
            "platform": f"bnc-deploy_{meta.get('format')}_{self.runtime}",
            "inputs": [
                {
                    "name": INPUT_NAME,
                    "datatype": "FP32" if self.raw_inputs else self.input_datatype,
                    "shape": [-1, self.n_features],
                }
            ],
            "outputs": [
                {
                    "name": self.scores_name,
                    "datatype": NUMPY_NAMES[self.scores_dtype.name],
                    "shape": [-1, self.n_classes],
                },
                {"name": self.label_name, "datatype": "INT64", "shape": [-1]},
            ],
            "parameters": params,
        }

    # -- inference --------------------------------------------------------------------------------
    def _run_rows(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The runtime call on validated rows (timed by the caller / batcher)."""
        if self._lock is None:
            return self.adapter.run(x)
        with self._lock:
            return self.adapter.run(x)

    def _prepare_request(self, inputs: dict, outputs, classification) -> tuple[np.ndarray, list, dict]:
        if not isinstance(inputs, dict) or set(inputs) != {INPUT_NAME}:
            got = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
            raise BadRequest(f"model {self.name!r} takes one input {INPUT_NAME!r}, got {got}")
        x = np.asarray(inputs[INPUT_NAME])
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise BadRequest(
                f"input {INPUT_NAME!r} of model {self.name!r}: expected shape [N, {self.n_features}], "
                f"got {list(x.shape)}"
            )
        names = list(self.output_names) if not outputs else list(outputs)
        for n in names:
            if n not in self.output_names:
                raise BadRequest(f"model {self.name!r} has no output {n!r}; outputs are {list(self.output_names)}")
        if isinstance(classification, dict):
            cls = {str(k): v for k, v in classification.items()}
        else:
            cls = {n: classification for n in names} if classification else {}
        for n, k in cls.items():
            if isinstance(k, bool) or not isinstance(k, int) or k < 0:
                raise BadRequest(f"output {n!r}: classification must be a non-negative integer, got {k!r}")
        if self._batcher is not None:
            # Validated before queueing, so a bad request fails alone (InputError naming feature,
            # value and row -> 400) and never the batch it would have joined.
            x = self.adapter.check(x)
        return x, names, cls  # unbatched: adapter.run validates (once) on the way

    def infer(self, inputs: dict, outputs=None, *, classification=0, record=None) -> list[tuple[str, np.ndarray]]:
        """Run one request; ``[(output name, array)]`` in the requested order (default: all).

        ``classification``: an int for every requested output, or ``{output name: k}``.
        ``record``: the request's :class:`~bnc_deploy.serve.statistics.InferRecord` (stage times,
        trace span), given by the front ends. Raises BadRequest / InputError (400) for bad requests.
        """
        t = time.perf_counter_ns()
        x, names, cls = self._prepare_request(inputs, outputs, classification)
        input_ns = time.perf_counter_ns() - t
        if self._batcher is not None and len(x):
            scores, labels = self._batcher.submit(x, record).result()
        else:
            scores, labels = self._timed(x, record)
        return self._recorded_outputs(scores, labels, names, cls, record, input_ns)

    async def infer_async(
        self, inputs: dict, outputs=None, *, classification=0, record=None
    ) -> list[tuple[str, np.ndarray]]:
        """:meth:`infer` for an event loop: batched requests await their batch; unbatched ones run
        inline (a thread hop would cost more than the runtime call)."""
        t = time.perf_counter_ns()
        x, names, cls = self._prepare_request(inputs, outputs, classification)
        input_ns = time.perf_counter_ns() - t
        if self._batcher is not None and len(x):
            scores, labels = await asyncio.wrap_future(self._batcher.submit(x, record))
        else:
            scores, labels = self._timed(x, record)
        return self._recorded_outputs(scores, labels, names, cls, record, input_ns)

    def _timed(self, x: np.ndarray, record=None) -> tuple[np.ndarray, np.ndarray]:
        """The unbatched call: ``adapter.run`` validates ``x`` (InputError -> 400) and runs it."""
        start = time.perf_counter_ns()
        if self._lock is None:
            scores, labels = self.adapter.run(x)
            began = start
        else:
            with self._lock:
                began = time.perf_counter_ns()
                scores, labels = self.adapter.run(x)
        ended = time.perf_counter_ns()
        self._metrics.observe_run((began - start) / 1e9, (ended - began) / 1e9, len(labels))
        if record is not None:
            record.ran(start, began, ended, len(labels))
        return scores, labels

    def _recorded_outputs(self, scores, labels, names, cls, record, input_ns: int) -> list[tuple[str, np.ndarray]]:
        """:meth:`_outputs`, its time and the request's validation time and rows added to ``record``."""
        if record is None:
            return self._outputs(scores, labels, names, cls)
        t = time.perf_counter_ns()
        out = self._outputs(scores, labels, names, cls)
        record.output_ns += time.perf_counter_ns() - t
        record.input_ns += input_ns
        record.rows += len(labels)
        return out

    def _outputs(self, scores, labels, names, cls) -> list[tuple[str, np.ndarray]]:
        out = []
        for n in names:
            k = cls.get(n, 0)
            if n == self.scores_name:
                out.append((n, self._top_k(scores, k) if k else scores.astype(self.scores_dtype, copy=False)))
            else:
                out.append((n, self._names_of(labels) if k else labels.astype(np.int64, copy=False)))
        return out

    def _top_k(self, scores: np.ndarray, k: int) -> np.ndarray:
        k = min(k, self.n_classes)
        values = scores.astype(self.scores_dtype, copy=False)
        order = np.argsort(-values, axis=1, kind="stable")[:, :k]  # stable: ties keep the first class first
        out = np.empty((len(values), k), dtype=object)
        for r in range(len(values)):
            for j, c in enumerate(order[r]):
                out[r, j] = f"{values[r, c]!s}:{int(c)}:{self.class_names[c]}".encode()  # str(): shortest repr
        return out

    def _names_of(self, labels: np.ndarray) -> np.ndarray:
        out = np.empty(len(labels), dtype=object)
        out[:] = [self.class_names[int(v)].encode() for v in labels]
        return out


__all__ = ["InputError", "ModelLoadError", "ServedModel", "file_version"]
