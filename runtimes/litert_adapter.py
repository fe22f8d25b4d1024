"""LiteRT adapter (name ``"litert"``): runs an exported ``.tflite`` BNC or DNN file.

The interpreter is ``ai_edge_litert.interpreter.Interpreter``; when the ``ai-edge-litert``
package is missing, ``tf.lite.Interpreter`` from TensorFlow is used instead (same kernels).
The metadata comes from the file's ``"bnc_deploy"`` metadata buffer (read with the flatbuffer
schema, :func:`bnc_deploy.formats.tflite.read_tflite_metadata`); no artifact is needed. A file
that the flatbuffer reader or the interpreter cannot read (truncated, random bytes, empty)
raises RuntimeLoadError naming the file, whatever the reader's own exception was.

Batching: a file with a dynamic batch dimension (``gather`` lowering) is resized to the rows it
is given and run once; a static-batch file (``onehot-fc``, batch 1 for the Edge TPU) is run in
chunks of its batch size (slices of one array, outputs written into preallocated arrays), the
last chunk padded with code 0 rows whose outputs are dropped. ``run``/``predict`` hand the
adapter at most ``chunk_rows`` rows at a time (:class:`~bnc_deploy.runtimes.base.RuntimeAdapter`).

``prepare`` does the conversion, the chunking and the (re)allocation for the batch size;
``invoke`` is ``set_tensor + invoke + get_tensor`` per chunk (one chunk for a dynamic-batch file),
re-allocating first only when another batch size was allocated since ``prepare``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bnc_deploy.errors import ConfigError, MissingExtraError
from bnc_deploy.formats.metadata import INPUT_NAME, contract_outputs
from bnc_deploy.runtimes.base import RuntimeAdapter, RuntimeLoadError

#: Op resolvers by name: ``auto`` (LiteRT's default, XNNPACK for float ops), ``builtin`` (optimized
#: builtin kernels, no default delegates), ``reference`` (the reference kernels: slow, for checks).
RESOLVERS = ("auto", "builtin", "reference")


def interpreter_module() -> tuple[Any, Any, str]:
    """``(Interpreter class, OpResolverType enum, backend name)``: LiteRT, else TensorFlow Lite
    (untyped packages: the class and the enum are Any to mypy).

    Raises MissingExtraError (an ImportError) when neither is installed.
    """
    try:
        from ai_edge_litert import interpreter as litert

        return litert.Interpreter, litert.OpResolverType, "ai_edge_litert"
    except ImportError:
        try:
            import tensorflow as tf
        except ImportError as exc:
            raise MissingExtraError("the litert runtime (ai-edge-litert or TensorFlow)", "tflite", exc) from None
        return tf.lite.Interpreter, tf.lite.experimental.OpResolverType, "tensorflow.lite"


class _Prepared:
    """Input made ready for :meth:`LiteRTAdapter.invoke`: ``x``, a C-ordered array in the file's
    input dtype whose row count is a multiple of ``batch``, run ``batch`` rows per call (each
    slice ``x[i:i + batch]`` is itself C-contiguous: no copy per call); ``rows`` real rows (the
    rest is padding)."""

    __slots__ = ("x", "batch", "rows", "padded")

    def __init__(self, x: NDArray[Any], batch: int, rows: int) -> None:
        self.x, self.batch, self.rows = x, batch, rows
        self.padded = rows != x.shape[0]

    @property
    def chunks(self) -> tuple[NDArray[Any], ...]:
        """The per-call slices (views), for callers that want them one by one."""
        return tuple(self.x[i : i + self.batch] for i in range(0, self.x.shape[0], self.batch))


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
    #: Rows the interpreter's tensors are allocated for (None: not allocated yet).
    _allocated_rows: int | None

    def __init__(
        self, path: str | os.PathLike[str], *, threads: int | None = 1, resolver: str = "auto", **options: Any
    ) -> None:
        if resolver not in RESOLVERS:
            raise ConfigError(f"unknown resolver {resolver!r}; choose one of {', '.join(RESOLVERS)}")
        self.resolver = resolver
        super().__init__(path, threads=threads, **options)  # options: verify_integrity, key (base class)

    def _load(self, path: Path, data: bytes) -> dict[str, Any]:
        from bnc_deploy.formats.tflite import read_tflite_metadata

        interpreter_class, resolver_type, self.backend = interpreter_module()
        try:
            meta = read_tflite_metadata(data)
        except ValueError as exc:  # MetadataError: not a TFLite file, or no/corrupt metadata
            raise RuntimeLoadError(f"{path}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - untrusted bytes: truncated data makes the
            # flatbuffer reader fail with struct.error, IndexError, ...; any of them means a bad file.
            raise RuntimeLoadError(
                f"{path}: not a readable TFLite file ({type(exc).__name__}: {_first_line(exc)})"
            ) from None
        resolver = {
            "auto": resolver_type.AUTO,
            "builtin": resolver_type.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            "reference": resolver_type.BUILTIN_REF,
        }[self.resolver]
        try:
            # model_content, never model_path: LiteRT memory-maps a path, and a file truncated or
            # rewritten in place under the map crashes the process (SIGBUS) or changes its outputs.
            self.interpreter = interpreter_class(
                model_content=data, num_threads=self.threads, experimental_op_resolver_type=resolver
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise RuntimeLoadError(f"{path}: not a loadable TFLite model ({_first_line(exc)})") from None
        self._bind_io(path, contract_outputs(meta))
        return meta

    def _bind_io(self, path: Path, names: tuple[str, str]) -> None:
        """Find the contract's input/output tensors by name; remember dtype and batch mode."""
        inputs = {d["name"]: d for d in self.interpreter.get_input_details()}
        outputs = {d["name"]: d for d in self.interpreter.get_output_details()}
        scores, labels = names
        if INPUT_NAME not in inputs or not {scores, labels} <= set(outputs):
            raise RuntimeLoadError(
                f"{path}: graph inputs/outputs {sorted(inputs)}/{sorted(outputs)} are not "
                f"the bnc-deploy contract ({INPUT_NAME} -> {scores}, {labels})"
            )
        x = inputs[INPUT_NAME]
        self._input_index = x["index"]
        self._input_dtype = np.dtype(x["dtype"])
        self._output_index = (outputs[scores]["index"], outputs[labels]["index"])
        signature = x.get("shape_signature", x["shape"])
        self.static_batch = None if int(signature[0]) == -1 else int(x["shape"][0])
        self._allocated_rows = None

    def _prepare(self, checked: NDArray[np.int64] | NDArray[np.float32]) -> _Prepared:
        if self._input_dtype.kind in "iu":
            # Checked codes are in 0..|X_i|-1, so the cast to the file's integer type is exact.
            x = checked.astype(self._input_dtype, copy=False)
        else:
            x = checked.astype(np.float32, copy=False)
        n = x.shape[0]
        if self.static_batch is None:
            prepared = _Prepared(np.ascontiguousarray(x), n, n)
        else:
            batch = self.static_batch
            pad = (-n) % batch
            if pad:  # code 0 (or 0.0) is valid for every feature; the padded rows' outputs are dropped
                x = np.concatenate([x, np.zeros((pad, x.shape[1]), dtype=x.dtype)])
            prepared = _Prepared(np.ascontiguousarray(x), batch, n)
        self._allocate(prepared.batch)
        return prepared

    def _allocate(self, rows: int) -> None:
        """Size the input for ``rows`` (a dynamic batch) and allocate, unless already done."""
        if self._allocated_rows == rows:
            return
        try:
            if self.static_batch is None:
                self.interpreter.resize_tensor_input(self._input_index, [rows, self.n_features], strict=True)
            self.interpreter.allocate_tensors()
        except (RuntimeError, ValueError) as exc:
            raise RuntimeError(f"{self.path}: LiteRT cannot allocate the file's tensors ({_first_line(exc)})") from None
        self._allocated_rows = rows

    def invoke(self, prepared: _Prepared) -> tuple[NDArray[Any], NDArray[Any]]:
        """``set_tensor + invoke + get_tensor`` per chunk: ``(scores, label)`` in the file's dtypes.

        The interpreter's failures (a graph that does not match its metadata) are raised as
        RuntimeError naming the file."""
        try:
            return self._invoke(prepared)
        except (RuntimeError, ValueError) as exc:
            raise RuntimeError(f"{self.path}: LiteRT failed to run the file ({_first_line(exc)})") from None

    def _invoke(self, prepared: _Prepared) -> tuple[NDArray[Any], NDArray[Any]]:
        it = self.interpreter
        if self._allocated_rows != prepared.batch:  # another batch size was prepared since
            self._allocate(prepared.batch)
        scores_index, label_index = self._output_index
        x, batch = prepared.x, prepared.batch
        if x.shape[0] == batch:
            it.set_tensor(self._input_index, x)
            it.invoke()
            # get_tensor copies, so the next invoke cannot overwrite returned arrays.
            scores, label = it.get_tensor(scores_index), it.get_tensor(label_index)
        else:
            # One call per batch into preallocated outputs (no list of per-call arrays to join).
            scores = label = None
            for i in range(0, x.shape[0], batch):
                it.set_tensor(self._input_index, x[i : i + batch])
                it.invoke()
                part_scores, part_label = it.get_tensor(scores_index), it.get_tensor(label_index)
                if scores is None:
                    scores = np.empty((x.shape[0],) + part_scores.shape[1:], dtype=part_scores.dtype)
                    label = np.empty((x.shape[0],) + part_label.shape[1:], dtype=part_label.dtype)
                scores[i : i + batch], label[i : i + batch] = part_scores, part_label
        if prepared.padded:
            return scores[: prepared.rows], label[: prepared.rows]
        return scores, label

    def __repr__(self) -> str:
        return f"LiteRTAdapter({str(self.path)!r}, threads={self.threads}, resolver={self.resolver!r})"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
