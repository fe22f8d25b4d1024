"""onnxruntime adapter (name ``"onnxruntime"``): runs an exported ``.onnx`` or ``.ort`` BNC or DNN file.

``.ort`` files (ONNX Runtime's ORT format, ``bnc-export --format ort``) are told by their content
(the ``ORTM`` flatbuffer identifier, not the file name) and loaded with
``session.load_model_format = ORT``; everything else is the same for both formats.

Sessions run sequentially (``ExecutionMode.ORT_SEQUENTIAL``) with ``threads`` intra-op threads
(None: onnxruntime's default) and one inter-op thread, so latency numbers are reproducible.
The metadata comes from the file's ``metadata_props["bnc_deploy"]``; no artifact is needed.

``prepare`` builds the feed (``{"x": rows in the graph's input dtype}``); ``invoke`` runs it for
the contract's two outputs. A feed of 1 to :data:`~bnc_deploy.runtimes.fused_check.FAST_ROWS` rows
runs through an IOBinding made once per thread and batch size, with the input and both outputs
bound to NumPy buffers of that thread (``run_with_iobinding``: no per-call binding or output
allocation in onnxruntime; about 2 us less per batch-1 call than ``InferenceSession.run``, the
copies in and out included, benchmarks/bench_run_overhead.py); the rows are
copied into the bound input, and the outputs are returned as copies of the bound buffers, so the
caller owns them and no buffer is shared between threads. The values are those of
``InferenceSession.run`` (the same session and kernels), which runs every other feed, graphs whose
outputs are not ``[N, C]``/``[N]`` tensors of a plain type, and sessions replaced by another object.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray

from bnc_deploy.formats.metadata import INPUT_NAME, METADATA_KEY, contract_outputs
from bnc_deploy.formats.ort import ORT_IDENTIFIER
from bnc_deploy.runtimes.base import RuntimeAdapter, RuntimeLoadError
from bnc_deploy.runtimes.fused_check import FAST_ROWS

# onnxruntime raises its own exception types (InvalidProtobuf, InvalidArgument, Fail, ...; plain
# Exception subclasses, not RuntimeError) for bad files: collect them all from its binding module.
_ORT_ERRORS: tuple[type[Exception], ...] = (RuntimeError,) + tuple(
    obj
    for obj in vars(ort.capi.onnxruntime_pybind11_state).values()
    if isinstance(obj, type) and issubclass(obj, Exception)
)

#: Graph output tensor types that a bound NumPy buffer takes.
_BOUND_TYPES: dict[str, type[np.generic]] = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


class _Bound:
    """One thread's IOBinding for one batch size: the input and the outputs bound to its buffers."""

    __slots__ = ("session", "binding", "x", "outputs")

    def __init__(
        self, session: Any, x: NDArray[Any], outputs: list[tuple[str, NDArray[Any]]]
    ) -> None:  # session: ort.InferenceSession (untyped package)
        self.session, self.x = session, x
        self.outputs = [buffer for _, buffer in outputs]
        self.binding = session.io_binding()
        self.binding.bind_input(INPUT_NAME, "cpu", 0, x.dtype, list(x.shape), x.ctypes.data)
        for name, buffer in outputs:
            self.binding.bind_output(name, "cpu", 0, buffer.dtype, list(buffer.shape), buffer.ctypes.data)


class OnnxRuntimeAdapter(RuntimeAdapter):
    """Run an exported ONNX or ORT format file in onnxruntime (CPU execution provider)."""

    name = "onnxruntime"
    extensions = (".onnx", ".ort")

    def _load(self, path: Path, data: bytes) -> str:
        options = ort.SessionOptions()
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        if self.threads is not None:
            options.intra_op_num_threads = self.threads
        options.log_severity_level = 3  # errors only; a broken file is reported by our exception
        self.ort_format = data[4:8] == ORT_IDENTIFIER  # ORT flatbuffer: "ORTM" at bytes 4..8
        if self.ort_format:
            # By content, not by name: onnxruntime guesses from a ".ort" suffix otherwise.
            options.add_session_config_entry("session.load_model_format", "ORT")
        try:
            # From bytes (onnxruntime copies them): the session never reads the path.
            self.session = ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
        except _ORT_ERRORS as exc:
            what = "ORT format" if self.ort_format else "ONNX"
            raise RuntimeLoadError(f"{path}: not a loadable {what} model ({_first_line(exc)})") from None
        props = self.session.get_modelmeta().custom_metadata_map
        if METADATA_KEY not in props:
            raise RuntimeLoadError(f"{path}: not a bnc-deploy export (no {METADATA_KEY!r} metadata)")
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = {o.name for o in self.session.get_outputs()}
        self._outputs = list(contract_outputs(props[METADATA_KEY]))
        if INPUT_NAME not in inputs or not set(self._outputs) <= outputs:
            raise RuntimeLoadError(
                f"{path}: graph inputs/outputs {sorted(inputs)}/{sorted(outputs)} are not "
                f"the bnc-deploy contract ({INPUT_NAME} -> {', '.join(self._outputs)})"
            )
        self._input_dtype = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32}.get(
            inputs[INPUT_NAME].type
        )
        if self._input_dtype is None:
            raise RuntimeLoadError(f"{path}: unsupported input type {inputs[INPUT_NAME].type}")
        self._local = threading.local()  # .bound: {rows: _Bound} of the calling thread
        self._bound_outputs: list[tuple[str, type[np.generic], tuple[int, ...]]] | None = None
        text: str = props[METADATA_KEY]  # the metadata's JSON text (custom_metadata_map: str -> str)
        return text

    def _prepare(self, checked: NDArray[np.int64] | NDArray[np.float32]) -> dict[str, NDArray[Any]]:
        # Checked codes are in 0..|X_i|-1, so the cast to an integer input type is exact.
        return {INPUT_NAME: np.ascontiguousarray(checked, dtype=self._input_dtype)}

    def invoke(self, prepared: dict[str, NDArray[Any]]) -> list[NDArray[Any]]:
        """One ``InferenceSession.run``: ``[scores, label]`` as onnxruntime returns them.

        onnxruntime's own failures (e.g. a Gather index out of range in a file whose graph does not
        match its metadata) are raised as RuntimeError naming the file, as :meth:`run`'s output checks do.
        """
        try:
            x = prepared.get(INPUT_NAME) if len(prepared) == 1 else None
            if (
                type(x) is np.ndarray
                and x.ndim == 2
                and 0 < x.shape[0] <= FAST_ROWS
                and x.dtype == self._input_dtype
                and x.shape[1] == self.n_features
                and type(self.session) is ort.InferenceSession
            ):
                bound = self._bound(x.shape[0])
                if bound is not None:
                    bound.x[...] = x
                    self.session.run_with_iobinding(bound.binding)
                    return [buffer.copy() for buffer in bound.outputs]  # the next call rewrites the buffers
            outputs: list[NDArray[Any]] = self.session.run(self._outputs, prepared)
            return outputs
        except _ORT_ERRORS as exc:
            raise RuntimeError(f"{self.path}: onnxruntime failed to run the file ({_first_line(exc)})") from None

    def _bound(self, rows: int) -> _Bound | None:
        """The calling thread's binding for ``rows`` rows (made on first use; threads never share
        one); None when the graph's outputs cannot be bound (:meth:`_bindable_outputs`)."""
        cache: dict[int, _Bound] | None = getattr(self._local, "bound", None)
        if cache is None:
            cache = self._local.bound = {}
        bound = cache.get(rows)
        if bound is None or bound.session is not self.session:
            spec = self._bindable_outputs()
            if spec is None:
                return None
            x = np.zeros((rows, self.n_features), dtype=self._input_dtype)
            outputs = [(name, np.zeros((rows, *shape), dtype=dtype)) for name, dtype, shape in spec]
            bound = cache[rows] = _Bound(self.session, x, outputs)
        return bound

    def _bindable_outputs(self) -> list[tuple[str, type[np.generic], tuple[int, ...]]] | None:
        """``[(name, dtype, shape after N)]`` of the contract's outputs when they are ``[N, C]`` and
        ``[N]`` tensors of a :data:`_BOUND_TYPES` type with a symbolic ``N`` (else None: run them
        with ``InferenceSession.run``, whose output checks then report anything unexpected)."""
        if self._bound_outputs is None:
            graph = {o.name: o for o in self.session.get_outputs()}
            scores, label = (graph[name] for name in self._outputs)
            plain = (
                scores.type in _BOUND_TYPES
                and label.type in _BOUND_TYPES
                and len(scores.shape) == 2
                and scores.shape[1] == self.n_classes
                and len(label.shape) == 1
                and not isinstance(scores.shape[0], int)
                and not isinstance(label.shape[0], int)
            )
            self._bound_outputs = (
                [
                    (scores.name, _BOUND_TYPES[scores.type], (self.n_classes,)),
                    (label.name, _BOUND_TYPES[label.type], ()),
                ]
                if plain
                else []
            )
        return self._bound_outputs or None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
