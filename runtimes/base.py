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
:class:`bnc_deploy.errors.InputError` naming the feature, the value and the row; a file that
is missing, corrupt or not a bnc-deploy export raises :class:`RuntimeLoadError` naming the file.

Adapters load from bytes, never from a path the runtime keeps open: the base class reads the
file once (or takes ``data=`` bytes already read), checks the integrity seal on those bytes and
hands the same bytes to :meth:`RuntimeAdapter._load`. A file replaced, truncated or rewritten in
place after loading cannot change what a loaded adapter computes (a memory-mapped model would:
LiteRT maps a file opened by path, and a truncated map kills the process with SIGBUS).

Two steps under ``run``, for callers that time the runtime itself (``profiling.latency``)::

    prepared = rt.prepare(x)       # check + convert to the file's dtype + any allocation, once
    scores, label = rt.invoke(prepared)   # the bare runtime call, nothing else

``run(x)`` is exactly ``check`` -> ``prepare`` -> ``invoke`` followed by the output checks
(shapes, dtype widening, the graph's input guard), so there is one code path. ``prepare``'s
result is opaque and belongs to the adapter that made it; it may be invoked any number of times,
also after other inputs were prepared (an adapter that allocates per batch size re-allocates on
``invoke`` when the sizes differ). ``invoke`` returns the runtime's outputs as they come: the
scores in the runtime's dtype (float32 for exported files) and the labels in theirs.

Small batches (a NumPy array of 1 to :data:`~bnc_deploy.runtimes.fused_check.FAST_ROWS` rows, the
serving case) are checked in one vectorized pass against per-feature bounds cached per adapter and
input dtype (:mod:`bnc_deploy.runtimes.fused_check`), by ``check`` and so by ``run``, ``predict``
and ``prepare``; ``run`` and ``predict`` then skip the chunking machinery. The checks are the same:
an input the fused pass does not accept goes through the full check, which raises the same error
as ever, and an accepted one gets the same checked rows, outputs and output checks. Outputs
returned to the caller are new arrays on every call (the caller owns them). An adapter may run the
runtime into buffers it allocated in advance only per thread and copy them out (onnxruntime binds
them once per thread and batch size), so ``run`` stays as thread-safe as the runtime's own call.

Errors a user can cause are :mod:`bnc_deploy.errors` types: a bad ``threads`` value, an unknown
runtime or an unknown file extension raise :class:`~bnc_deploy.errors.ConfigError`; a runtime
whose framework is not installed raises :class:`~bnc_deploy.errors.MissingExtraError` (also an
ImportError) naming the extra to install.

Adapters register by name in :data:`RUNTIMES` as lazy ``"module:Class"`` targets, so choosing
one runtime never imports another's framework. The LiteRT adapter is expected at
``bnc_deploy.runtimes.litert_adapter:LiteRTAdapter`` (name ``"litert"``); any module can also
call :func:`register_runtime` to add an entry (``overwrite=True`` to replace one).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from bnc_deploy.errors import ConfigError, InputError, MissingExtraError, RuntimeLoadError
from bnc_deploy.formats import integrity
from bnc_deploy.formats.metadata import INPUT_RAW, INVALID_LABEL, contract_outputs, parse_metadata
from bnc_deploy.reference.chunks import run_in_chunks
from bnc_deploy.registry import claim
from bnc_deploy.runtimes.fused_check import FAST_ROWS, FusedCheck
from bnc_deploy.validation import check_codes

__all__ = [
    "RuntimeAdapter",
    "RuntimeLoadError",
    "RUNTIMES",
    "register_runtime",
    "load_runtime",
    "runtime_class",
    "InputError",
    "contract_outputs",
    "check_raw",
    "read_model_bytes",
    "default_runtime",
    "model_suffixes",
]

#: Runtime name -> the extra that installs its framework (``pip install 'bnc-deploy[EXTRA]'``).
RUNTIME_EXTRAS = {"onnxruntime": "runtime", "litert": "tflite", "tflm": "micro"}

#: ``chunk_rows="auto"`` (the default) runs :meth:`RuntimeAdapter.run`/``predict``/``log_joint``
#: in chunks of about this many bytes of (rows x features x classes) 8-byte values, the size of a
#: table lookup's intermediate, between :data:`MIN_CHUNK_ROWS` and :data:`MAX_CHUNK_ROWS` rows.
#: Each chunk is validated, converted and run into preallocated outputs, so the memory beyond the
#: input and the outputs is bounded by the chunk, not by the input.
CHUNK_BYTES = 16 * 2**20
MIN_CHUNK_ROWS, MAX_CHUNK_ROWS = 1024, 65536


class RuntimeAdapter:
    """Base class: load a file, validate inputs, run ``log_joint``/``predict``.

    Subclasses set :attr:`name` and :attr:`extensions` and implement :meth:`_load` (load the
    file's bytes in the runtime, return its metadata dict), :meth:`invoke` (the bare runtime call -> ``(scores,
    label)``) and, when the runtime wants converted or pre-allocated input, :meth:`_prepare`
    (checked rows -> what :meth:`invoke` takes).

    Parameters
    ----------
    path : str or PathLike
        The file to run.
    threads : int, optional
        Intra-op threads for runtimes that have them (None: the runtime's default).
    verify_integrity : bool
        Check the exported file's integrity digest before the runtime reads it (default True):
        :class:`~bnc_deploy.formats.integrity.IntegrityError` (a RuntimeLoadError, "... was
        modified after export") when it differs. ``metadata["integrity"]`` then says
        ``"<scheme>:<digest>"``, or ``"none"`` for a file exported before digests existed.
    key : bytes, optional
        The key of a signed (``hmac-sha256``) file; required for such files.
    data : bytes, optional
        The file's content, already read (e.g. by a server that hashed it for its version); the
        file is then not read at all and ``path`` only names it in messages. Default: read once.
    chunk_rows : int, None or ``"auto"``
        Rows per runtime call in :meth:`run`, :meth:`predict` and :meth:`log_joint`; ``"auto"``
        (default) sizes chunks by :data:`CHUNK_BYTES` (1,024..65,536 rows; 5,041 for letter's 16
        features x 26 classes); None runs all rows in one call (memory then grows with the input:
        the runtimes' intermediates are rows x features x classes). The results are the same.
        Also an attribute: ``rt.chunk_rows`` is the resolved number (or None) and may be set.
    """

    name: str = ""
    #: File extensions this adapter reads (lower case, with the dot), for :func:`load_runtime`.
    extensions: tuple[str, ...] = ()
    #: Rows per runtime call when the file fixes its batch size (e.g. 1 for a TFLite ``onehot-fc``
    #: file); None when one call takes any number of rows. ``prepare``/``run`` accept any number
    #: of rows either way (a fixed-batch adapter runs them in chunks).
    static_batch: int | None = None

    path: Path
    threads: int | None
    #: The file's metadata (parsed and checked, ``integrity`` set); values of any JSON type.
    metadata: dict[str, Any]
    cardinalities: NDArray[np.int64]
    _chunk_rows: int | Literal["auto"] | None
    #: The small-batch check, built on first use for :attr:`cardinalities` (rebuilt if replaced).
    _fused: FusedCheck | None = None
    #: Whether :meth:`run`/:meth:`predict` may take the small-batch path (False when a subclass
    #: overrides :meth:`check`, which that path would bypass).
    _small_batches: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass with its own check() keeps it on every path: no small-batch shortcut around it.
        cls._small_batches = cls.check is RuntimeAdapter.check

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        threads: int | None = None,
        verify_integrity: bool = True,
        key: bytes | None = None,
        chunk_rows: int | str | None = "auto",
        data: bytes | None = None,
    ) -> None:
        self.path = Path(path)
        self.chunk_rows = chunk_rows
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"threads must be a positive integer or None, got {threads!r}")
        self.threads = threads
        key = None if key is None else integrity.check_key(key)
        data = read_model_bytes(self.path) if data is None else bytes(data)
        where = str(self.path)
        try:
            # The seal is checked on the bytes the runtime then loads (formats/integrity.py).
            seal = integrity.check_on_load(data, where=where, verify=bool(verify_integrity), key=key)
            meta = self._load(self.path, data)
            # annotate() takes and returns dict[str, object] (formats/integrity.py keeps a fixed import
            # list, no typing.Any); the dict is the parsed metadata, kept as dict[str, Any] here.
            self.metadata = integrity.annotate(
                parse_metadata(meta, where=where), seal, where, checked=bool(verify_integrity)
            )
        except (RuntimeLoadError, MissingExtraError):
            raise  # MissingExtraError is a ValueError too, but says "install X", not "bad file"
        except ValueError as exc:
            text = str(exc)
            raise RuntimeLoadError(text if where in text else f"{where}: {text}") from None
        self.file_size = len(data)
        self.cardinalities = np.asarray(self.metadata["cardinalities"], dtype=np.int64)

    @classmethod
    def accepts(cls, metadata: dict[str, Any] | None) -> bool:
        """Whether this adapter runs an exported file with ``metadata`` (None: a file of one of its
        :attr:`extensions` whose metadata is not known yet, i.e. any such file). Default True; an
        adapter for a subset of a format's files (``tflm``: micro-profile TFLite files) says False
        for the others, and refuses them on load with RuntimeLoadError."""
        return True

    @classmethod
    def load(cls, path: str | os.PathLike[str], **options: Any) -> Self:
        """Same as the constructor; reads well at call sites (``OnnxRuntimeAdapter.load(p)``)."""
        return cls(path, **options)

    @property
    def chunk_rows(self) -> int | None:
        """Rows per runtime call in :meth:`run` (None: all at once); see the class docstring."""
        if isinstance(self._chunk_rows, str):  # "auto" (the one string the setter keeps)
            per_row = 8 * max(1, self.n_features) * max(1, self.n_classes)
            return int(min(MAX_CHUNK_ROWS, max(MIN_CHUNK_ROWS, CHUNK_BYTES // per_row)))
        return self._chunk_rows

    @chunk_rows.setter
    def chunk_rows(self, value: int | np.integer[Any] | str | None) -> None:
        self._set_chunk_rows(value)

    def _set_chunk_rows(self, value: int | np.integer[Any] | str | None) -> None:
        """The ``chunk_rows`` setter (also a subclass's that overrides the property)."""
        if (
            value is not None
            and value != "auto"
            and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1)
        ):
            raise ConfigError(f"chunk_rows must be a positive integer, None or 'auto', got {value!r}")
        self._chunk_rows = None if value is None else "auto" if value == "auto" else int(value)

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
        kind: str = self.metadata["input"]
        return kind == INPUT_RAW

    # -- inputs -----------------------------------------------------------------------------------
    def check(self, x: ArrayLike) -> NDArray[np.int64] | NDArray[np.float32]:
        """Validate ``x`` against the file's features.

        Returns int64 codes of shape (n, D), or float32 raw values of shape (n, D) for a raw model.
        Raises InputError naming the feature, value and row on a bad shape, dtype or value.
        A small NumPy batch is checked by the fused check (:meth:`_fused_check`) first: same result.
        """
        checked = self._fused_check(x)
        if checked is not None:
            return checked
        where = f"{self.path.name} input"
        if not self.raw_inputs:
            return check_codes(x, self.cardinalities, self.feature_names, where=where)
        return check_raw(x, self.n_features, self.feature_names, where=where)

    def prepare(self, x: ArrayLike) -> Any:  # opaque: each adapter's own type (its invoke()'s input)
        """Validate ``x`` (as :meth:`check`), convert it to the file's input dtype and do any
        one-time work for its batch size; return an opaque object for :meth:`invoke`.

        Raises InputError for invalid input, and for zero rows (there is nothing to invoke;
        :meth:`run` answers empty input itself).
        """
        checked = self.check(x)
        if checked.shape[0] == 0:
            raise InputError(f"{self.path.name} input: no rows to prepare (run() returns empty outputs for no rows)")
        return self._prepare(checked)

    def _fused_check(self, x: ArrayLike) -> NDArray[np.int64] | NDArray[np.float32] | None:
        """:meth:`check`'s result for a small valid NumPy batch, else None (see :mod:`.fused_check`)."""
        fused = self._fused
        if fused is None or fused.cardinalities is not self.cardinalities:
            fused = self._fused = FusedCheck(self.cardinalities, self.raw_inputs)
        return fused(x)

    # -- running ----------------------------------------------------------------------------------
    def invoke(self, prepared: Any) -> Sequence[NDArray[Any]]:
        """The bare runtime call on :meth:`prepare`'s result: ``(scores, label)`` as the runtime
        returns them (a pair: a tuple, or onnxruntime's list). No validation, conversion or output
        checks (see :meth:`run` for those)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement invoke()")

    def run(self, x: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """``(log_joint (n, C) float64, label (n,) int64)``.

        Rows go to the runtime in chunks of :attr:`chunk_rows` (each validated, converted and run
        into preallocated outputs); an invalid value raises InputError naming its row in ``x``.
        A small batch takes the fused check first (:meth:`_run_small`); the result is the same.
        """
        small = self._run_small(x, True)
        return small if small is not None else self._run_rows(x, scores=True)

    def log_joint(self, x: ArrayLike) -> NDArray[np.float64]:
        """``log p(c, x)``, shape (n, C), float64."""
        return self.run(x)[0]

    def predict(self, x: ArrayLike) -> NDArray[np.int64]:
        """Most probable class (first maximum), shape (n,), int64 (the scores are not kept)."""
        small = self._run_small(x, False)
        return (small if small is not None else self._run_rows(x, scores=False))[1]

    @overload
    def _run_small(
        self, x: ArrayLike, scores: Literal[True]
    ) -> tuple[NDArray[np.float64], NDArray[np.int64]] | None: ...
    @overload
    def _run_small(self, x: ArrayLike, scores: Literal[False]) -> tuple[None, NDArray[np.int64]] | None: ...
    def _run_small(self, x: ArrayLike, scores: bool) -> tuple[NDArray[np.float64] | None, NDArray[np.int64]] | None:
        """The small-batch path: :class:`~bnc_deploy.runtimes.fused_check.FusedCheck` instead of
        :meth:`check`, then the same :meth:`_run_checked` as one chunk of the full path. None when
        ``x`` needs the full path: not a small NumPy batch, a value the fused check does not pass
        (the full check then raises the error), or more rows than an explicit ``chunk_rows``."""
        if not self._small_batches:
            return None
        checked = self._fused_check(x)
        if checked is None:
            return None
        limit = self._chunk_rows
        if type(limit) is int and checked.shape[0] > limit:
            return None  # the full path runs it in chunks of that many rows
        return self._run_checked(checked, scores, 0)

    @overload
    def _run_rows(self, x: ArrayLike, scores: Literal[True]) -> tuple[NDArray[np.float64], NDArray[np.int64]]: ...
    @overload
    def _run_rows(self, x: ArrayLike, scores: Literal[False]) -> tuple[None, NDArray[np.int64]]: ...
    def _run_rows(self, x: ArrayLike, scores: bool) -> tuple[NDArray[np.float64] | None, NDArray[np.int64]]:
        """:meth:`run` in chunks of :attr:`chunk_rows` (:func:`~bnc_deploy.reference.chunks.run_in_chunks`);
        ``scores=False`` keeps only the labels (``predict``)."""
        return run_in_chunks(
            x,
            self.check,
            lambda checked, first: self._run_checked(checked, scores, first),
            self.chunk_rows,
            n_features=self.n_features,
            kinds="iuf" if self.raw_inputs else "iu",
            cardinalities=None if self.raw_inputs else self.cardinalities,
        )

    def _run_checked(
        self, checked: NDArray[np.int64] | NDArray[np.float32], scores: bool, offset: int
    ) -> tuple[NDArray[Any] | None, NDArray[np.int64]]:
        """Checked rows (``offset``: the first one's row in the caller's input) -> runtime -> output checks."""
        if checked.shape[0] == 0:
            return np.zeros((0, self.n_classes), dtype=np.float64), np.zeros(0, dtype=np.int64)
        log_joint, label = self._run(checked)
        log_joint = np.asarray(log_joint)
        if scores:
            log_joint = log_joint.astype(np.float64, copy=False)
        label = np.asarray(label).astype(np.int64, copy=False).reshape(-1)
        if log_joint.shape != (checked.shape[0], self.n_classes) or label.shape != (checked.shape[0],):
            raise RuntimeError(
                f"{self.path}: runtime returned shapes {log_joint.shape} and {label.shape} "
                f"for {checked.shape[0]} rows and {self.n_classes} classes"
            )
        # A short list is searched faster than a NumPy comparison and reduction (a few us per call).
        if INVALID_LABEL in label.tolist() if label.shape[0] <= FAST_ROWS else np.any(label == INVALID_LABEL):
            # Inputs were checked, so the graph's guard firing means the file and the metadata disagree.
            row = offset + int(np.flatnonzero(label == INVALID_LABEL)[0])
            raise RuntimeError(
                f"{self.path}: the model's input guard rejected row {row}, which passed "
                "the adapter's checks; the file's metadata does not match its graph"
            )
        return (log_joint if scores else None), label

    def _run(self, checked: NDArray[np.int64] | NDArray[np.float32]) -> Sequence[NDArray[Any]]:
        """Checked rows (at least one) -> the runtime's ``(scores, label)``: prepare, then invoke.

        The one path from :meth:`run` to the runtime (tests patch it to simulate a wrong runtime).
        """
        return self.invoke(self._prepare(checked))

    def _load(self, path: Path, data: bytes) -> str | Mapping[str, Any]:  # pragma: no cover - abstract
        """Load ``data`` (the whole file, already read and seal-checked) in the runtime and return
        the file's metadata (the dict, or its JSON text). ``path`` names the file in messages only:
        the runtime must not open it (see the module docstring)."""
        raise NotImplementedError

    def _prepare(self, checked: NDArray[np.int64] | NDArray[np.float32]) -> Any:
        """Checked rows (at least one, the dtype :meth:`check` returns) -> :meth:`invoke`'s input.

        Default: the checked rows themselves (for runtimes that need no conversion).
        """
        return checked

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, threads={self.threads})"


def check_prepared(path: Any, prepared: Any, dtype: np.dtype[Any], n_features: int) -> None:
    """RuntimeError unless ``prepared`` is what a C kernel's ``prepare()`` makes: a C-contiguous ``dtype`` array
    of shape ``(n, n_features)``. The C code reads ``n * n_features`` values, so anything else could make it
    read past the array."""
    if (
        not isinstance(prepared, np.ndarray)
        or prepared.dtype != dtype
        or prepared.ndim != 2
        or prepared.shape[1] != n_features
        or not prepared.flags.c_contiguous
    ):
        raise RuntimeError(
            f"{path}: invoke() takes what prepare() returns: a C-contiguous "
            f"{np.dtype(dtype).name} array of shape (n, {n_features})"
        )


def read_model_bytes(path: Path) -> bytes:
    """The whole content of a model file (RuntimeLoadError naming it when it is missing or unreadable)."""
    if not path.is_file():
        raise RuntimeLoadError(f"{path}: no such model file")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise RuntimeLoadError(f"{path}: cannot read the file ({exc.strerror or exc})") from None


def check_raw(
    x: ArrayLike, n_features: int, feature_names: Sequence[str] | None = None, where: str = "input"
) -> NDArray[np.float32]:
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
        raise InputError(
            f"{where}: feature {col}{name} has value {arr[row, col].item()!r} in row {row}, "
            "which is not a finite float32"
        )
    return values


# -- registry -------------------------------------------------------------------------------------
#: Runtime name -> adapter class, or a lazy ``"module:Class"`` string resolved on first use.
RUNTIMES: dict[str, type[RuntimeAdapter] | str] = {
    "numpy": "bnc_deploy.runtimes.reference_adapter:ReferenceAdapter",
    "onnxruntime": "bnc_deploy.runtimes.onnxruntime_adapter:OnnxRuntimeAdapter",
    "litert": "bnc_deploy.runtimes.litert_adapter:LiteRTAdapter",
    # Not the default for .tflite (EXTENSIONS keeps litert): it runs micro-profile files only.
    "tflm": "bnc_deploy.runtimes.tflm_adapter:TFLMAdapter",
    "native": "bnc_deploy.runtimes.native_adapter:NativeAdapter",
    # A served model (V2 REST client); no file extension: chosen by name only (bnc-profile --url).
    "http": "bnc_deploy.runtimes.http_adapter:HttpAdapter",
}
#: File extension -> default runtime name.
EXTENSIONS: dict[str, str] = {
    ".bnc": "numpy",
    ".onnx": "onnxruntime",
    ".ort": "onnxruntime",
    ".tflite": "litert",
    ".h": "native",
}


def register_runtime(
    name: str, target: type[RuntimeAdapter] | str, extensions: tuple[str, ...] = (), *, overwrite: bool = False
) -> None:
    """Add runtime ``name`` (a RuntimeAdapter subclass or ``"module:Class"``), the default for
    ``extensions``. A taken name or extension raises ConfigError unless ``overwrite``
    (:func:`bnc_deploy.registry.claim`)."""
    claim(RUNTIMES, name, what=f"runtime {name!r}", overwrite=overwrite)
    for ext in extensions:
        claim(EXTENSIONS, ext.lower(), what=f"the default runtime of {ext!r} files", overwrite=overwrite)
    RUNTIMES[name] = target
    for ext in extensions:
        EXTENSIONS[ext.lower()] = name


def runtime_class(name: str) -> type[RuntimeAdapter]:
    """Resolve a runtime name to its adapter class (importing its module on first use).

    Raises ConfigError for an unknown name and MissingExtraError (an ImportError), naming the
    extra to install, when the runtime's framework is missing.
    """
    if name not in RUNTIMES:
        raise ConfigError(f"unknown runtime {name!r}; known runtimes: {', '.join(sorted(RUNTIMES))}")
    target = RUNTIMES[name]
    if isinstance(target, str):
        module_name, _, class_name = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except MissingExtraError:
            raise
        except ImportError as exc:
            if (exc.name or "").startswith("bnc_deploy"):
                # Our own module is missing: a broken install, not a missing extra.
                raise ImportError(
                    f"runtime {name!r} is not available: this bnc-deploy has no module {module_name} ({exc})"
                ) from exc
            raise MissingExtraError(f"runtime {name!r}", RUNTIME_EXTRAS.get(name, "export"), exc) from exc
        target = getattr(module, class_name)
        RUNTIMES[name] = target
    return target


def default_runtime(path: str | os.PathLike[str]) -> str | None:
    """The runtime that reads ``path`` by default, by its extension (None for an unknown one):
    the one place that maps a file's suffix to a runtime (:data:`EXTENSIONS`)."""
    return EXTENSIONS.get(Path(path).suffix.lower())


def model_suffixes() -> tuple[str, ...]:
    """Extensions of the files some registered runtime reads (``.bnc``, ``.onnx``, ...)."""
    return tuple(EXTENSIONS)


def load_runtime(path: str | os.PathLike[str], runtime: str | None = None, **options: Any) -> RuntimeAdapter:
    """Open ``path`` with ``runtime`` (by name), or with the default runtime for its extension.

    ``options`` go to the adapter (e.g. ``threads=1``). Raises ConfigError when ``runtime`` is
    unknown or cannot be told from the extension.
    """
    path = Path(path)
    if runtime is None:
        runtime = default_runtime(path)
        if runtime is None:
            raise ConfigError(
                f"{path}: cannot tell the runtime from the extension {path.suffix!r}; "
                f"pass one of {', '.join(sorted(RUNTIMES))}"
            )
    return runtime_class(runtime)(path, **options)
