"""The runtime adapter interface: one small API over the NumPy reference, onnxruntime and LiteRT.

An adapter loads one file and runs it::

    rt = load_runtime("letter.onnx")             # by extension, or load_runtime(p, "onnxruntime")
    rt.metadata["class_names"], rt.cardinalities  # parsed from the file itself
    rt.predict(x)      # (n,) int64
    rt.log_joint(x)    # (n, C) float64 (a float32 runtime's output widened exactly)

DNN exports (``model_kind = "dnn"`` in the metadata) have the same interface: their scores are
the logits (output ``logits``), returned by ``log_joint``/``run`` in the same place.

``x`` is validated before it reaches the runtime (:meth:`RuntimeAdapter.check`): codes models
take integer codes of shape (n, D) (or one row of shape (D,)) inside each feature's range; raw
models take finite real values of shape (n, D), run as float32. Violations raise
:class:`bnc_deploy.validation.InputError` naming the feature, the value and the row; a file that
is missing, corrupt or not a bnc-deploy export raises :class:`RuntimeLoadError` naming the file.

Adapters register by name in :data:`RUNTIMES` as lazy ``"module:Class"`` targets, so choosing
one runtime never imports another's framework. The LiteRT adapter is expected at
``bnc_deploy.runtimes.litert_adapter:LiteRTAdapter`` (name ``"litert"``); any module can also
call :func:`register_runtime` to add or replace an entry.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import numpy as np

from bnc_deploy.formats.metadata import INPUT_RAW, INVALID_LABEL, OUTPUT_LABEL, parse_metadata
from bnc_deploy.formats.bnc import OUTPUT_LOG_JOINT
from bnc_deploy.errors import InputError, RuntimeLoadError
from bnc_deploy.validation import check_codes

__all__ = ["RuntimeAdapter", "RuntimeLoadError", "RUNTIMES", "register_runtime", "load_runtime",
           "runtime_class", "InputError"]


class RuntimeAdapter:
    """Base class: load a file, validate inputs, run ``log_joint``/``predict``.

    Subclasses set :attr:`name` and :attr:`extensions` and implement :meth:`_load` (read the
    file, return its metadata dict) and :meth:`_run` (checked input -> ``(log_joint, label)``).

    Parameters
    ----------
    path : str or PathLike
        The file to run.
    threads : int, optional
        Intra-op threads for runtimes that have them (None: the runtime's default).
    """

    name: str = ""
    #: File extensions this adapter reads (lower case, with the dot), for :func:`load_runtime`.
    extensions: tuple[str, ...] = ()

    def __init__(self, path: str | os.PathLike, *, threads: int | None = None) -> None:
        self.path = Path(path)
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        self.threads = threads
        if not self.path.is_file():
            raise RuntimeLoadError(f"{self.path}: no such model file")
        try:
            meta = self._load(self.path)
            self.metadata = parse_metadata(meta, where=str(self.path))
        except RuntimeLoadError:
            raise
        except ValueError as exc:
            text = str(exc)
            raise RuntimeLoadError(text if str(self.path) in text else f"{self.path}: {text}") from None
        self.cardinalities = np.asarray(self.metadata["cardinalities"], dtype=np.int64)

    @classmethod
    def load(cls, path: str | os.PathLike, **options) -> "RuntimeAdapter":
        """Same as the constructor; reads well at call sites (``OnnxRuntimeAdapter.load(p)``)."""
        return cls(path, **options)

    # -- facts from the file ----------------------------------------------------------------------
    @property
    def feature_names(self) -> list[str]:
        return list(self.metadata["feature_names"])

    @property
    def class_names(self) -> list[str]:
        return list(self.metadata["class_names"])

    @property
    def n_features(self) -> int:
        return int(self.cardinalities.shape[0])

    @property
    def n_classes(self) -> int:
        return len(self.metadata["class_names"])

    @property
    def raw_inputs(self) -> bool:
        return self.metadata["input"] == INPUT_RAW

    # -- inputs -----------------------------------------------------------------------------------
    def check(self, x) -> np.ndarray:
        """Validate ``x`` against the file's features.

        Returns int64 codes of shape (n, D), or float32 raw values of shape (n, D) for a raw model.
        Raises InputError naming the feature, value and row on a bad shape, dtype or value.
        """
        where = f"{self.path.name} input"
        if not self.raw_inputs:
            return check_codes(x, self.cardinalities, self.feature_names, where=where)
        return check_raw(x, self.n_features, self.feature_names, where=where)

    # -- running ----------------------------------------------------------------------------------
    def run(self, x) -> tuple[np.ndarray, np.ndarray]:
        """``(log_joint (n, C) float64, label (n,) int64)`` in one pass of the runtime."""
        checked = self.check(x)
        if checked.shape[0] == 0:
            return np.zeros((0, self.n_classes), dtype=np.float64), np.zeros(0, dtype=np.int64)
        log_joint, label = self._run(checked)
        log_joint = np.asarray(log_joint).astype(np.float64, copy=False)
        label = np.asarray(label).astype(np.int64, copy=False).reshape(-1)
        if log_joint.shape != (checked.shape[0], self.n_classes) or label.shape != (checked.shape[0],):
            raise RuntimeError(f"{self.path}: runtime returned shapes {log_joint.shape} and {label.shape} "
                               f"for {checked.shape[0]} rows and {self.n_classes} classes")
        if np.any(label == INVALID_LABEL):
            # Inputs were checked, so the graph's guard firing means the file and the metadata disagree.
            row = int(np.flatnonzero(label == INVALID_LABEL)[0])
            raise RuntimeError(f"{self.path}: the model's input guard rejected row {row}, which passed "
                               "the adapter's checks; the file's metadata does not match its graph")
        return log_joint, label

    def log_joint(self, x) -> np.ndarray:
        """``log p(c, x)``, shape (n, C), float64."""
        return self.run(x)[0]

    def predict(self, x) -> np.ndarray:
        """Most probable class (first maximum), shape (n,), int64."""
        return self.run(x)[1]

    def _load(self, path: Path) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, threads={self.threads})"


def contract_outputs(meta) -> tuple[str, str]:
    """Names of a file's (scores, label) outputs: ``log_joint``/``label`` for BN exports, the
    metadata's ``outputs`` (``logits``/``label``) for DNN exports. ``meta``: dict or JSON text."""
    if isinstance(meta, (str, bytes, bytearray)):
        try:
            meta = json.loads(meta)
        except ValueError:
            meta = {}
    names = meta.get("outputs") if isinstance(meta, dict) else None
    if isinstance(names, (list, tuple)) and len(names) == 2 and all(isinstance(n, str) for n in names):
        return names[0], names[1]
    return OUTPUT_LOG_JOINT, OUTPUT_LABEL


def check_raw(x, n_features: int, feature_names=None, where: str = "input") -> np.ndarray:
    """Validate raw feature values; return float32 of shape (n, n_features).

    Accepts real (integer or float) arrays of shape (n, D) or one row (D,). Values are run as
    float32 (float64 values that are not float32 numbers are rounded to nearest); NaN/inf, bool,
    complex and non-numeric inputs raise InputError.
    """
    arr = np.asarray(x)
    if arr.ndim == 1 and arr.shape[0] == n_features:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != n_features:
        raise InputError(f"{where}: expected raw features of shape (n, {n_features}), got shape {arr.shape}")
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise InputError(f"{where}: raw features must be real numbers, got dtype {arr.dtype}")
    with np.errstate(over="ignore"):  # float64 beyond float32 range becomes inf, reported below
        values = arr.astype(np.float32)
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        name = f" ({feature_names[col]!r})" if feature_names is not None else ""
        raise InputError(f"{where}: feature {col}{name} has value {arr[row, col].item()!r} in row {row}, "
                         "which is not a finite float32")
    return values


# -- registry -------------------------------------------------------------------------------------
#: Runtime name -> adapter class, or a lazy ``"module:Class"`` string resolved on first use.
RUNTIMES: dict[str, object] = {
    "numpy": "bnc_deploy.runtimes.reference_adapter:ReferenceAdapter",
    "onnxruntime": "bnc_deploy.runtimes.onnxruntime_adapter:OnnxRuntimeAdapter",
    "litert": "bnc_deploy.runtimes.litert_adapter:LiteRTAdapter",
}
#: File extension -> default runtime name.
EXTENSIONS: dict[str, str] = {".bnc": "numpy", ".onnx": "onnxruntime", ".tflite": "litert"}


def register_runtime(name: str, target, extensions: tuple[str, ...] = ()) -> None:
    """Add or replace runtime ``name`` (a RuntimeAdapter subclass or ``"module:Class"``)."""
    RUNTIMES[name] = target
    for ext in extensions:
        EXTENSIONS[ext.lower()] = name


def runtime_class(name: str) -> type[RuntimeAdapter]:
    """Resolve a runtime name to its adapter class (importing its module on first use).

    Raises ValueError for an unknown name and ImportError, with what to install, when the
    runtime's module or framework is missing.
    """
    if name not in RUNTIMES:
        raise ValueError(f"unknown runtime {name!r}; known runtimes: {', '.join(sorted(RUNTIMES))}")
    target = RUNTIMES[name]
    if isinstance(target, str):
        module_name, _, class_name = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            hint = (f"this bnc-deploy has no module {module_name}" if (exc.name or "").startswith("bnc_deploy")
                    else "install the export extras: pip install 'bnc-deploy[export]'")
            raise ImportError(f"runtime {name!r} is not available ({exc}); {hint}") from exc
        target = getattr(module, class_name)
        RUNTIMES[name] = target
    return target


def load_runtime(path: str | os.PathLike, runtime: str | None = None, **options) -> RuntimeAdapter:
    """Open ``path`` with ``runtime`` (by name), or with the default runtime for its extension.

    ``options`` go to the adapter (e.g. ``threads=1``).
    """
    path = Path(path)
    if runtime is None:
        runtime = EXTENSIONS.get(path.suffix.lower())
        if runtime is None:
            raise ValueError(f"{path}: cannot tell the runtime from the extension {path.suffix!r}; "
                             f"pass one of {', '.join(sorted(RUNTIMES))}")
    return runtime_class(runtime)(path, **options)
