"""onnxruntime adapter (name ``"onnxruntime"``): runs an exported ``.onnx`` or ``.ort`` BNC or DNN file.

``.ort`` files (ONNX Runtime's ORT format, ``bnc-export --format ort``) are told by their content
(the ``ORTM`` flatbuffer identifier, not the file name) and loaded with
``session.load_model_format = ORT``; everything else is the same for both formats.

Sessions run sequentially (``ExecutionMode.ORT_SEQUENTIAL``) with ``threads`` intra-op threads
(None: onnxruntime's default) and one inter-op thread, so latency numbers are reproducible.
The metadata comes from the file's ``metadata_props["bnc_deploy"]``; no artifact is needed.

``prepare`` builds the feed (``{"x": rows in the graph's input dtype}``); ``invoke`` is one
``InferenceSession.run`` for the contract's two outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray

from bnc_deploy.formats.metadata import INPUT_NAME, METADATA_KEY, contract_outputs
from bnc_deploy.formats.ort import ORT_IDENTIFIER
from bnc_deploy.runtimes.base import RuntimeAdapter, RuntimeLoadError

# onnxruntime raises its own exception types (InvalidProtobuf, InvalidArgument, Fail, ...; plain
# Exception subclasses, not RuntimeError) for bad files: collect them all from its binding module.
_ORT_ERRORS: tuple[type[Exception], ...] = (RuntimeError,) + tuple(
    obj
    for obj in vars(ort.capi.onnxruntime_pybind11_state).values()
    if isinstance(obj, type) and issubclass(obj, Exception)
)


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
            outputs: list[NDArray[Any]] = self.session.run(self._outputs, prepared)
            return outputs
        except _ORT_ERRORS as exc:
            raise RuntimeError(f"{self.path}: onnxruntime failed to run the file ({_first_line(exc)})") from None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
