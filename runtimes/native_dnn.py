"""The native runtime for DNN headers (``model_kind = "dnn"``): compile the exported C and call it through ctypes.

:class:`~bnc_deploy.runtimes.native_adapter.NativeAdapter` (runtime ``"native"``) hands a header
whose metadata says ``model_kind = "dnn"`` to :class:`NativeDNNAdapter`, so one runtime name runs
both kinds of C export. The DNN header (:mod:`bnc_deploy.exporters.c_dnn`) is compiled unchanged
with the BN runtime's compiler, flags and cache (:func:`~bnc_deploy.runtimes.native_adapter.compile_library`)
around a small host wrapper (``runtimes/native_dnn.c``, package data) that runs the header's own
``PREFIX_logits`` and ``PREFIX_predict`` on every row, checks that the label is the first largest
integer logit, and turns the integer logits (sign-magnitude binary32 patterns) back into the
float32 logits, bit for bit. So the verifier, which compares them with the reference, certifies the
functions the header ships.

Outputs: ``(logits (n, C) float64, label (n,) int64)`` (the float32 logits widened exactly); the
base class validates inputs first (InputError naming the feature, value and row), so the header's
guard never fires on checked rows. ``integer_logits(x)`` returns the header's int32 logits as they are.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from bnc_deploy.formats.c import check_c_name
from bnc_deploy.formats.c_template import template_sections
from bnc_deploy.runtimes.base import RuntimeAdapter, RuntimeLoadError, check_prepared

#: The wrapper's C (package data beside this module).
TEMPLATE = "native_dnn.c"


def wrapper_source(prefix: str) -> str:
    """The host wrapper for a header with identifier prefix ``prefix``."""
    return template_sections(__package__, TEMPLATE)["wrapper"].substitute(prefix=prefix, PREFIX=prefix.upper())


#: ``compile_library(source, wrapper, where) -> (library path, flags)`` of the native runtime.
Compiler = Callable[..., tuple[Path, tuple[str, ...]]]


class NativeDNNAdapter(RuntimeAdapter):
    """Run an exported DNN C header compiled by the host C compiler (runtime name ``native``).

    Not constructed directly: :class:`~bnc_deploy.runtimes.native_adapter.NativeAdapter` reads the
    header's metadata and, for a DNN header, hands itself over with :meth:`adopt` (this module does
    not import the BN adapter: it receives its compiler function).
    """

    name = "native"
    extensions = (".h",)

    @classmethod
    def adopt(
        cls, adapter: RuntimeAdapter, path: Path, data: bytes, meta: dict[str, Any], compile_library: Compiler
    ) -> dict[str, Any]:
        """Turn the native ``adapter`` that is loading ``data`` (a DNN header with metadata ``meta``)
        into a DNN adapter and compile the header with ``compile_library``; returns ``meta``."""
        adapter.__class__ = cls
        assert isinstance(adapter, cls)
        adapter._open(path, data, meta, compile_library)
        return meta

    def _load(self, path: Path, data: bytes) -> dict[str, Any]:
        raise RuntimeLoadError(f"{path}: load DNN C headers with the native runtime (load_runtime(path, 'native'))")

    def _open(self, path: Path, data: bytes, meta: dict[str, Any], compile_library: Compiler) -> None:
        if meta.get("format") != "c":
            raise RuntimeLoadError(f"{path}: not a C export (format {meta.get('format')!r})")
        try:
            c_name = check_c_name(meta.get("c_name"), "metadata c_name")
            self._n_classes = len(meta["class_names"])
            self._d = len(meta["cardinalities"])
        except (ValueError, TypeError, KeyError) as exc:
            raise RuntimeLoadError(f"{path}: bad C metadata ({exc})") from None
        library, self.compile_flags = compile_library(data, wrapper_source(c_name), where=path)
        self.library_path = library
        try:
            lib = ctypes.CDLL(str(library))
        except OSError as exc:
            raise RuntimeLoadError(f"{path}: cannot load the compiled library {library} ({exc})") from None
        self._batch_fn = lib.bnnd_batch
        self._batch_fn.restype = ctypes.c_long
        self._batch_fn.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self._logit_fn = lib.bnnd_logit
        self._logit_fn.restype = ctypes.c_int32
        self._logit_fn.argtypes = [ctypes.c_int32, ctypes.c_int]

    def _prepare(self, checked: NDArray[Any]) -> NDArray[np.uint8]:
        # Checked codes are in 0..|X_i|-1 <= 255 (the exporter refuses larger cardinalities): exact.
        return np.ascontiguousarray(checked, dtype=np.uint8)

    def _call(self, prepared: NDArray[Any], keys: bool) -> tuple[NDArray[np.float64], NDArray[np.int32] | None, Any]:
        check_prepared(self.path, prepared, np.dtype(np.uint8), self._d)
        n = prepared.shape[0]
        logits = np.empty((n, self._n_classes), dtype=np.float64)
        ints = np.empty((n, self._n_classes), dtype=np.int32) if keys else None
        labels = np.empty(n, dtype=np.int64)
        done = self._batch_fn(
            prepared.ctypes.data, n, logits.ctypes.data, None if ints is None else ints.ctypes.data, labels.ctypes.data
        )
        if done < 0:
            raise RuntimeError(
                f"{self.path}: the header's predict disagrees with its own logits on row {-done - 1}; "
                "please report this as a bug"
            )
        return logits, ints, labels

    def invoke(self, prepared: Any) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """One call over the batch: ``(logits float64, label int64)`` (-1 and NaN for a refused row)."""
        logits, _, labels = self._call(prepared, False)
        return logits, labels

    def integer_logits(self, x: ArrayLike) -> NDArray[np.int32]:
        """The header's ``PREFIX_logits`` integers for valid rows ``x`` (checked first), shape (n, C)."""
        checked = self.check(x)
        ints = self._call(self._prepare(checked), True)[1]
        assert ints is not None
        return ints

    def logit_of(self, acc: int, c: int) -> int:
        """The header's ``PREFIX_logit(acc, c)``: class ``c``'s integer logit for output accumulator ``acc``."""
        return int(self._logit_fn(int(acc), int(c)))
