"""onnxruntime adapter (name ``"onnxruntime"``): runs an exported ``.onnx`` BNC or DNN file.

Sessions run sequentially (``ExecutionMode.ORT_SEQUENTIAL``) with ``threads`` intra-op threads
(None: onnxruntime's default) and one inter-op thread, so latency numbers are reproducible.
The metadata comes from the file's ``metadata_props["bnc_deploy"]``; no artifact is needed.

``prepare`` builds the feed (``{"x": rows in the graph's input dtype}``); ``invoke`` is one
``InferenceSession.run`` for the contract's two outputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from bnc_deploy.formats.metadata import INPUT_NAME, METADATA_KEY, contract_outputs
from bnc_deploy.runtimes.base import RuntimeAdapter, RuntimeLoadError

# onnxruntime raises its own exception types (InvalidProtobuf, InvalidArgument, Fail, ...; plain
# Exception subclasses, not RuntimeError) for bad files: collect them all from its binding module.
_ORT_ERRORS = (RuntimeError,) + tuple(
    obj for obj in vars(ort.capi.onnxruntime_pybind11_state).values()
    if isinstance(obj, type) and issubclass(obj, Exception))


class OnnxRuntimeAdapter(RuntimeAdapter):
    """Run an exported ONNX file in onnxruntime (CPU execution provider)."""

    name = "onnxruntime"
    extensions = (".onnx",)

    def _load(self, path: Path) -> dict:
        options = ort.SessionOptions()
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        if self.threads is not None:
            options.intra_op_num_threads = self.threads
        options.log_severity_level = 3  # errors only; a broken file is reported by our exception
        try:
            self.session = ort.InferenceSession(str(path), sess_options=options,
                                                providers=["CPUExecutionProvider"])
        except _ORT_ERRORS as exc:
            raise RuntimeLoadError(f"{path}: not a loadable ONNX model ({_first_line(exc)})") from None
        props = self.session.get_modelmeta().custom_metadata_map
        if METADATA_KEY not in props:
            raise RuntimeLoadError(f"{path}: not a bnc-deploy export (no {METADATA_KEY!r} metadata)")
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = {o.name for o in self.session.get_outputs()}
        self._outputs = list(contract_outputs(props[METADATA_KEY]))
        if INPUT_NAME not in inputs or not set(self._outputs) <= outputs:
            raise RuntimeLoadError(f"{path}: graph inputs/outputs {sorted(inputs)}/{sorted(outputs)} are not "
                                   f"the bnc-deploy contract ({INPUT_NAME} -> {', '.join(self._outputs)})")
        self._input_dtype = {"tensor(int64)": np.int64, "tensor(int32)": np.int32,
                             "tensor(float)": np.float32}.get(inputs[INPUT_NAME].type)
        if self._input_dtype is None:
            raise RuntimeLoadError(f"{path}: unsupported input type {inputs[INPUT_NAME].type}")
        return props[METADATA_KEY]

    def _prepare(self, checked: np.ndarray) -> dict:
        # Checked codes are in 0..|X_i|-1, so the cast to an integer input type is exact.
        return {INPUT_NAME: np.ascontiguousarray(checked, dtype=self._input_dtype)}

    def invoke(self, prepared: dict) -> list:
        """One ``InferenceSession.run``: ``[scores, label]`` as onnxruntime returns them.

        onnxruntime's own failures (e.g. a Gather index out of range in a file whose graph does not
        match its metadata) are raised as RuntimeError naming the file, as :meth:`run`'s output checks do.
        """
        try:
            return self.session.run(self._outputs, prepared)
        except _ORT_ERRORS as exc:
            raise RuntimeError(f"{self.path}: onnxruntime failed to run the file ({_first_line(exc)})") from None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
