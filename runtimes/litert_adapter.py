"""LiteRT adapter (name ``"litert"``): runs an exported ``.tflite`` BNC file.

The interpreter is ``ai_edge_litert.interpreter.Interpreter``; when the ``ai-edge-litert``
package is missing, ``tf.lite.Interpreter`` from TensorFlow is used instead (same kernels).
The metadata comes from the file's ``"bnc_deploy"`` metadata buffer (read with the flatbuffer
schema, see ``exporters.tflite_bnc.read_tflite_metadata``); no artifact is needed.

Batching: a file with a dynamic batch dimension (``gather`` lowering) is resized to the whole
input and run once; a static-batch file (``onehot-fc``, batch 1 for the Edge TPU) is run in
chunks of its batch size, the last chunk padded with code 0 rows whose outputs are dropped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bnc_deploy.formats.metadata import INPUT_NAME
from bnc_deploy.runtimes.base import RuntimeAdapter, RuntimeLoadError
from bnc_deploy.formats.metadata import contract_outputs

#: Op resolvers by name: ``auto`` (LiteRT's default, XNNPACK for float ops), ``builtin`` (optimized
#: builtin kernels, no default delegates), ``reference`` (the reference kernels: slow, for checks).
RESOLVERS = ("auto", "builtin", "reference")


def interpreter_module():
    """``(Interpreter class, OpResolverType enum, backend name)``: LiteRT, else TensorFlow Lite."""
    try:
        from ai_edge_litert import interpreter as litert

        return litert.Interpreter, litert.OpResolverType, "ai_edge_litert"
    except ImportError:
        try:
            import tensorflow as tf
        except ImportError:
            raise ImportError("the litert runtime needs ai-edge-litert (or TensorFlow): "
                              "pip install 'bnc-deploy[export]'") from None
        return tf.lite.Interpreter, tf.lite.experimental.OpResolverType, "tensorflow.lite"


class LiteRTAdapter(RuntimeAdapter):
    """Run an exported TFLite file in the LiteRT interpreter (CPU).

    Parameters
    ----------
    path : str or PathLike
    threads : int or None
        Interpreter threads (default 1, for reproducible latency; None: LiteRT's default).
    resolver : ``"auto"`` (default), ``"builtin"`` or ``"reference"``; see :data:`RESOLVERS`.
    """

    name = "litert"
    extensions = (".tflite",)

    def __init__(self, path, *, threads: int | None = 1, resolver: str = "auto") -> None:
        if resolver not in RESOLVERS:
            raise ValueError(f"unknown resolver {resolver!r}; choose one of {', '.join(RESOLVERS)}")
        self.resolver = resolver
        super().__init__(path, threads=threads)

    def _load(self, path: Path) -> dict:
        from bnc_deploy.formats.tflite import read_tflite_metadata

        interpreter_class, resolver_type, self.backend = interpreter_module()
        try:
            meta = read_tflite_metadata(path)
        except ValueError as exc:
            raise RuntimeLoadError(f"{path}: {exc}") from None
        resolver = {"auto": resolver_type.AUTO, "builtin": resolver_type.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                    "reference": resolver_type.BUILTIN_REF}[self.resolver]
        try:
            self.interpreter = interpreter_class(model_path=str(path), num_threads=self.threads,
                                                 experimental_op_resolver_type=resolver)
        except (ValueError, RuntimeError) as exc:
            raise RuntimeLoadError(f"{path}: not a loadable TFLite model ({_first_line(exc)})") from None
        self._bind_io(path, contract_outputs(meta))
        return meta

    def _bind_io(self, path: Path, names: tuple[str, str]) -> None:
        """Find the contract's input/output tensors by name; remember dtype and batch mode."""
        inputs = {d["name"]: d for d in self.interpreter.get_input_details()}
        outputs = {d["name"]: d for d in self.interpreter.get_output_details()}
        scores, labels = names
        if INPUT_NAME not in inputs or not {scores, labels} <= set(outputs):
            raise RuntimeLoadError(f"{path}: graph inputs/outputs {sorted(inputs)}/{sorted(outputs)} are not "
                                   f"the bnc-deploy contract ({INPUT_NAME} -> {scores}, {labels})")
        x = inputs[INPUT_NAME]
        self._input_index = x["index"]
        self._input_dtype = np.dtype(x["dtype"])
        self._output_index = (outputs[scores]["index"], outputs[labels]["index"])
        signature = x.get("shape_signature", x["shape"])
        self.static_batch = None if int(signature[0]) == -1 else int(x["shape"][0])
        self._allocated_rows = None

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._input_dtype.kind in "iu":
            # Checked codes are in 0..|X_i|-1, so the cast to the file's integer type is exact.
            x = x.astype(self._input_dtype, copy=False)
        else:
            x = x.astype(np.float32, copy=False)
        if self.static_batch is None:
            return self._invoke(x)
        return self._run_chunks(x, self.static_batch)

    def _run_chunks(self, x: np.ndarray, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """Static-batch file: run ``batch`` rows at a time, padding the last chunk with zeros."""
        n = x.shape[0]
        pad = (-n) % batch
        if pad:
            x = np.concatenate([x, np.zeros((pad, x.shape[1]), dtype=x.dtype)])
        parts = [self._invoke(x[i:i + batch]) for i in range(0, x.shape[0], batch)]
        log_joint = np.concatenate([p[0] for p in parts])[:n]
        label = np.concatenate([p[1] for p in parts])[:n]
        return log_joint, label

    def _invoke(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One interpreter call on ``x`` [n, D] (resizing a dynamic batch when n changes)."""
        it = self.interpreter
        if self._allocated_rows != x.shape[0]:
            if self.static_batch is None:
                it.resize_tensor_input(self._input_index, list(x.shape), strict=True)
            it.allocate_tensors()
            self._allocated_rows = x.shape[0]
        it.set_tensor(self._input_index, np.ascontiguousarray(x))
        it.invoke()
        # get_tensor copies, so the next invoke cannot overwrite returned arrays.
        return it.get_tensor(self._output_index[0]), it.get_tensor(self._output_index[1])

    def __repr__(self) -> str:
        return f"LiteRTAdapter({str(self.path)!r}, threads={self.threads}, resolver={self.resolver!r})"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
