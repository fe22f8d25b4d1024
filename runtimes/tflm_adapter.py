"""TFLite Micro adapter (name ``"tflm"``): runs a micro-profile ``.tflite`` export in the
``tflite-micro`` Python interpreter (``tflite_micro.python.tflite_micro.runtime``, the TFLM C++
interpreter and reference kernels built for the host).

Only files exported with ``--profile micro`` (metadata ``"profile": "micro"``: static batch 1,
int32 label, TFLM operators) are run; any other ``.tflite`` file is refused with
RuntimeLoadError saying so (:meth:`TFLMAdapter.accepts` is False for it, so
``bnc_deploy.testing`` does not try). LiteRT stays the default runtime for ``.tflite`` files and
runs micro files too.

Arena: the interpreter gets ``metadata["tflm"]["arena_bytes"]`` (the arena TFLM needed when the
file was exported) plus :data:`ARENA_SLACK`, so loading a file checks its recorded arena; pass
``arena_size=`` to choose another. Files exported without tflite-micro installed record no arena
and get :data:`DEFAULT_ARENA`.

Rows run one at a time (``static_batch = 1``): ``set_input + invoke + get_output`` per row into
preallocated outputs. ``invoke`` returns ``(scores float32 (n, C), label int64 (n,))``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

# Imported here, not lazily: without tflite-micro, ``runtime_class("tflm")`` raises MissingExtraError
# naming the ``micro`` extra and ``bnc_deploy.testing.runtimes_for`` leaves the runtime out.
from tflite_micro.python.tflite_micro import runtime as tflm_runtime

from bnc_deploy.errors import ConfigError
from bnc_deploy.formats.tflite import captured_native_stderr
from bnc_deploy.runtimes.base import RuntimeAdapter, RuntimeLoadError

#: The metadata value of a file this adapter runs.
MICRO_PROFILE = "micro"
#: Bytes added to a file's recorded arena (room for a different alignment of the allocation).
ARENA_SLACK = 256
#: Arena for a micro file that records none (exported without tflite-micro installed).
DEFAULT_ARENA = 2**20


class TFLMAdapter(RuntimeAdapter):
    """Run a micro-profile TFLite export in the TFLite Micro interpreter.

    Parameters
    ----------
    path : str or PathLike
    arena_size : int, optional
        Tensor arena bytes (default: the file's recorded arena + :data:`ARENA_SLACK`).
    threads : ignored (TFLM is single-threaded); accepted for the common adapter API.
    """

    name = "tflm"
    extensions = (".tflite",)
    static_batch = 1

    def __init__(
        self, path: str | os.PathLike[str], *, arena_size: int | None = None, threads: int | None = 1, **options: Any
    ) -> None:
        if arena_size is not None and (
            isinstance(arena_size, bool) or not isinstance(arena_size, int) or arena_size < 1
        ):
            raise ConfigError(f"arena_size must be a positive integer or None, got {arena_size!r}")
        self._arena_option = arena_size
        super().__init__(path, threads=threads, **options)

    @classmethod
    def accepts(cls, metadata: dict[str, Any] | None) -> bool:
        """Only files whose metadata says ``"profile": "micro"`` (never an unknown file)."""
        return isinstance(metadata, dict) and metadata.get("profile") == MICRO_PROFILE

    def _load(self, path: Path, data: bytes) -> dict[str, Any]:
        from bnc_deploy.formats.tflite import read_tflite_metadata

        try:
            meta = read_tflite_metadata(data)
        except ValueError as exc:
            raise RuntimeLoadError(f"{path}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - untrusted bytes (see the LiteRT adapter)
            raise RuntimeLoadError(
                f"{path}: not a readable TFLite file ({type(exc).__name__}: {_first_line(exc)})"
            ) from None
        if not self.accepts(meta):
            raise RuntimeLoadError(
                f"{path}: the tflm runtime runs TFLite Micro profile exports only, and this file's metadata "
                f"says profile {meta.get('profile', 'default')!r} (REDUCE_ANY guard, int64 label, dynamic "
                "batch are not TFLM's); export it with --profile micro, or run it with the litert runtime"
            )
        recorded = (meta.get("tflm") or {}).get("arena_bytes")
        if self._arena_option is not None:
            self.arena_size = self._arena_option
        elif isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0:
            self.arena_size = recorded + ARENA_SLACK
        else:
            self.arena_size = max(DEFAULT_ARENA, 10 * len(data))
        with captured_native_stderr() as log:
            try:
                self.interpreter = tflm_runtime.Interpreter.from_bytes(data, arena_size=self.arena_size)
                failure = None
            except (RuntimeError, ValueError) as exc:
                failure = exc
        if failure is not None:
            raise RuntimeLoadError(
                f"{path}: TFLite Micro cannot load the file with a {self.arena_size}-byte "
                f"arena ({_first_line(failure)}: {' '.join(log.text.split())[:300]})"
            )
        self._bind_io(path, meta)
        return meta

    def _bind_io(self, path: Path, meta: dict[str, Any]) -> None:
        """Check the static [1, D] input and the [1, C] scores / [1] label outputs."""
        it = self.interpreter
        try:
            x, scores, label = it.get_input_details(0), it.get_output_details(0), it.get_output_details(1)
        except (RuntimeError, ValueError, IndexError) as exc:
            raise RuntimeLoadError(
                f"{path}: graph inputs/outputs are not the bnc-deploy contract ({_first_line(exc)})"
            ) from None
        d, c = len(meta["cardinalities"]), len(meta["class_names"])
        shapes = [list(np.asarray(t["shape"]).tolist()) for t in (x, scores, label)]
        if shapes != [[1, d], [1, c], [1]] or np.dtype(label["dtype"]).kind != "i":
            raise RuntimeLoadError(
                f"{path}: TFLM sees input/scores/label shapes {shapes}, expected "
                f"{[[1, d], [1, c], [1]]} with an integer label"
            )
        self._input_dtype = np.dtype(x["dtype"])

    def _prepare(self, checked: NDArray[np.int64] | NDArray[np.float32]) -> NDArray[Any]:
        # Checked codes are in range, so the cast to the file's integer type is exact; raw values
        # are float32 already.
        dtype = self._input_dtype if self._input_dtype.kind in "iu" else np.dtype(np.float32)
        return np.ascontiguousarray(checked.astype(dtype, copy=False))

    def invoke(self, prepared: NDArray[Any]) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """One ``set_input + invoke + get_output`` per row: ``(scores float32 (n, C), label int64 (n,))``."""
        it = self.interpreter
        n = prepared.shape[0]
        scores = np.empty((n, self.n_classes), dtype=np.float32)
        label = np.empty(n, dtype=np.int64)
        try:
            for i in range(n):
                it.set_input(prepared[i : i + 1], 0)
                it.invoke()
                scores[i] = it.get_output(0)[0]
                label[i] = it.get_output(1)[0]
        except (RuntimeError, ValueError) as exc:
            raise RuntimeError(f"{self.path}: TFLite Micro failed to run the file ({_first_line(exc)})") from None
        return scores, label

    def __repr__(self) -> str:
        return f"TFLMAdapter({str(self.path)!r}, arena_size={getattr(self, 'arena_size', None)})"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
