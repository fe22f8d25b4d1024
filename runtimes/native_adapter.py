"""Native runtime (name ``"native"``): compile an exported C file (``.h``) for this host and call it through ctypes.

What it compiles
----------------
``_load`` reads the metadata embedded in the header (:func:`bnc_deploy.formats.c.read_c_metadata`)
and writes a host-only C wrapper (:func:`wrapper_source`) that includes the header unchanged. The
header stays the portable C99 microcontroller library; everything host-specific lives in the
wrapper, so the exported file, its size and its op counts are the same whatever the host.

The wrapper is :func:`bnc_deploy.runtimes.native_kernel.wrapper_source` (its module docstring
describes the kernel: classes as SIMD lanes, the narrowest accumulator that cannot wrap, the
range check, TAN and raw inputs, threads, the one-row slots).

Invalid rows get label -1 and NaN scores (the guard of every runtime), and the kernel returns how
many rows it refused. Before the adapter trusts the kernel, it runs it against the header's own
API functions (``PREFIX_log_joint`` and ``PREFIX_predict``, compiled into the same library) on
every table row (each feature's values, and each TAN child value with each parent value) plus
256 seeded random rows: a difference raises RuntimeLoadError. So the verifier, which runs the
adapter, certifies both the kernel and the functions the header ships.

Compiling::

    $CC (default cc) $BNC_DEPLOY_NATIVE_CFLAGS (default: -O3 -march=native when the compiler accepts
        it, else -O3) -std=c99 -Wall -Wextra -Werror -shared -fPIC [-pthread] -DBNCN_THREADS=0|1

``BNC_DEPLOY_NATIVE_CFLAGS`` replaces the optimization flags only; flags that change float
semantics (``-ffast-math``, ``-Ofast``, ``-ffinite-math-only``, ...) are refused: loading fails with
RuntimeLoadError naming the flag (they may drop the NaN test of raw inputs). The library is
cached in ``$BNC_DEPLOY_NATIVE_CACHE``, else ``$XDG_CACHE_HOME/bnc-deploy/native``, else
``~/.cache/bnc-deploy/native``, as ``<sha256>.so`` (written atomically; a cache that cannot be
written falls back to a temporary folder). The key hashes the header, the wrapper, the compiler (path, size, mtime),
the full
command line and this CPU's identity (``/proc/cpuinfo``'s vendor, family, model, name and
feature flags, else ``platform.uname``), so a cache folder shared by machines never hands a
``-march=native`` library to a CPU that lacks its instructions.

Calling
-------
``run``/``predict``/``log_joint`` take a fast path for a NumPy array of a kernel input dtype
(codes: uint8, int32, int64; raw: float32, float64) with ``D`` columns:

* one row (shape ``(D,)`` or ``(1, D)``, any integer dtype for codes, any float dtype for raw):
  copied into one of the library's :data:`ROW_SLOTS` static one-row buffers (int64 / float64; an
  integer that wraps in that copy becomes negative and is refused), one argument-free
  ``ctypes.PyDLL`` call for that slot (the cheapest ctypes call; it holds the GIL for its ~0.1 us
  of C), and copies of the slot's outputs are returned. A thread takes a slot with ``list.pop``
  (atomic) and gives it back after the copies; a thread that finds none free takes the batch
  path. This is "the call" of the batch-1 figures: ``rt.predict(row)`` / ``rt.run(row)`` on a
  NumPy row, everything included (checks, copy in, C, copies out).
* more rows: one ``ctypes.CDLL`` call on the caller's array (no conversion, no copy, the GIL
  released during the call) writing into freshly allocated outputs; ``threads=N`` splits rows
  over up to N pthreads, at least :data:`MIN_ROWS_PER_THREAD` rows each (threads are created per
  call, so small batches stay on the calling thread).

The C code validates every row; only when it refuses one does the adapter fall back to the
generic path (:meth:`RuntimeAdapter.run`: the Python check raises InputError naming the feature,
value and row; if the check passes, the guard's RuntimeError says the file and its metadata
disagree). Other inputs (lists, other dtypes, empty input) take the generic path directly.
``chunk_rows="auto"`` resolves to None here (one call): the kernel's memory is one accumulator
per row on the stack, so only the outputs grow with the input. An explicit ``chunk_rows=K``
keeps its contract: batches of more than K rows run in chunks through ``_run``.

``prepare`` checks and converts to uint8 codes (float32 raw values) as before; ``invoke`` is the
bare kernel call (one row: a slot call; more: the batch call, threads honoured): ``(log_joint
float64 with NaN rows, label int64 with -1)``.

Loading a C file runs its code in this process: open only files you trust, as with any native
library (the integrity digest says a file is the one that was exported and verified, nothing more).

Errors: no compiler -> RuntimeLoadError "the native runtime needs a C compiler (cc) ..."; the file
does not compile -> RuntimeLoadError with the compiler's first error line; the kernel disagrees
with the header's functions -> RuntimeLoadError naming the row.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from bnc_deploy.errors import ConfigError, MetadataError
from bnc_deploy.formats.c import check_c_name, read_c_metadata
from bnc_deploy.formats.metadata import INPUT_RAW
from bnc_deploy.runtimes.base import RuntimeAdapter, RuntimeLoadError, check_prepared
from bnc_deploy.runtimes.native_kernel import CODE_TYPES, MAX_THREADS, RAW_TYPES, ROW_SLOTS, wrapper_source
from bnc_deploy.validation import random_valid_codes

#: Flags every build has: the header must compile cleanly under them, as before.
BASE_CFLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC")
#: Optimization flags by preference (the first the compiler accepts), unless BNC_DEPLOY_NATIVE_CFLAGS is set.
OPT_CHOICES = (("-O3", "-march=native"), ("-O3",))
#: Environment variable that replaces the optimization flags.
CFLAGS_ENV = "BNC_DEPLOY_NATIVE_CFLAGS"
#: Flags refused in the override: they let the compiler assume no NaN/inf or reorder float math.
UNSAFE_FLAGS = (
    "-ffast-math",
    "-Ofast",
    "-ffinite-math-only",
    "-fno-honor-nans",
    "-fno-honor-infinities",
    "-funsafe-math-optimizations",
    "-fassociative-math",
    "-freciprocal-math",
)
#: Seconds a compilation may take.
COMPILE_TIMEOUT_S = 600
#: Random rows of the load-time check of the kernel against the header's API functions.
SELF_CHECK_RANDOM_ROWS = 256
#: At most this many table-covering rows in that check (beyond: a seeded sample of them).
SELF_CHECK_MAX_ROWS = 1 << 16


# -- compiler, flags, cache ---------------------------------------------------------------------------
def compiler() -> str:
    """The C compiler command: ``$CC`` or ``cc``; RuntimeLoadError when it is not installed."""
    cc = os.environ.get("CC") or "cc"
    found = shutil.which(cc)
    if found is None:
        raise RuntimeLoadError(
            f"the native runtime needs a C compiler ({cc}); install one (e.g. apt-get install gcc) or set CC"
        )
    return found


def cache_dir() -> Path:
    """Where compiled libraries are kept (see the module docstring)."""
    explicit = os.environ.get("BNC_DEPLOY_NATIVE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bnc-deploy" / "native"


_probe_lock = threading.Lock()
_probed: dict[tuple[str, str], tuple[str, ...]] = {}


def _accepts(cc: str, flags: tuple[str, ...]) -> bool:
    """Whether ``cc`` builds a shared library with ``flags`` (one tiny compile)."""
    with tempfile.TemporaryDirectory(prefix="bnc-native-probe-") as work:
        source = Path(work) / "probe.c"
        source.write_text("int bncn_probe(int x);\nint bncn_probe(int x) { return x + 1; }\n")
        try:
            done = subprocess.run(
                [cc, *flags, *BASE_CFLAGS, "-o", str(Path(work) / "probe.so"), str(source)],
                capture_output=True,
                timeout=COMPILE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0


def optimization_flags(cc: str) -> tuple[str, ...]:
    """``$BNC_DEPLOY_NATIVE_CFLAGS`` (split like a shell), else the first of :data:`OPT_CHOICES` ``cc``
    accepts (probed once per process and compiler). ConfigError for a flag in :data:`UNSAFE_FLAGS`."""
    override = os.environ.get(CFLAGS_ENV)
    if override is not None:
        try:
            flags = tuple(shlex.split(override))
        except ValueError as exc:
            raise ConfigError(f"{CFLAGS_ENV}={override!r} cannot be split into flags ({exc})") from None
        unsafe = [f for f in flags if f in UNSAFE_FLAGS]
        if unsafe:
            raise ConfigError(
                f"{CFLAGS_ENV} must not contain {unsafe[0]}: it changes float semantics (the raw "
                "inputs' NaN test), and the native runtime promises exact results"
            )
        return flags
    key = (cc, _compiler_identity(cc))
    with _probe_lock:
        if key not in _probed:
            _probed[key] = next((f for f in OPT_CHOICES if _accepts(cc, f)), ())
        return _probed[key]


def _compiler_identity(cc: str) -> str:
    try:
        st = os.stat(os.path.realpath(cc))
    except OSError:
        return cc
    return f"{os.path.realpath(cc)}:{st.st_size}:{st.st_mtime_ns}"


def cpu_identity() -> str:
    """This CPU's model and features (``/proc/cpuinfo``'s first processor), else ``platform.uname``."""
    keys = (
        "vendor_id",
        "cpu family",
        "model",
        "model name",
        "stepping",
        "flags",
        "features",
        "cpu implementer",
        "cpu architecture",
        "cpu variant",
        "cpu part",
        "isa",
        "cpu",
    )
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    found = []
    for line in text.split("\n\n", 1)[0].splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() in keys:
            found.append(f"{name.strip()}={value.strip()}")
    u = platform.uname()
    return "\n".join(found + [f"machine={u.machine}", f"processor={u.processor}", f"system={u.system}"])


def _first_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[0] if lines else "no message"


def compile_library(
    source: bytes, wrapper: str, where: str | os.PathLike[str] = "header"
) -> tuple[Path, tuple[str, ...]]:
    """Compile the C header ``source`` (its bytes, already read: the file is not read again) with
    ``wrapper`` into a cached shared library: ``(its path, the command's flags)``; ``where`` names
    the header in errors."""
    cc = compiler()
    threads = os.name == "posix"
    flags = (
        *optimization_flags(cc),
        *BASE_CFLAGS,
        *(("-pthread",) if threads else ()),
        f"-DBNCN_THREADS={int(threads)}",
    )
    key = hashlib.sha256(
        b"\0".join(
            [
                source,
                wrapper.encode(),
                _compiler_identity(cc).encode(),
                " ".join((cc,) + flags).encode(),
                cpu_identity().encode(),
            ]
        )
    ).hexdigest()
    for folder in (cache_dir(), None):
        try:
            if folder is None:
                folder = Path(tempfile.mkdtemp(prefix="bnc-native-"))
            library = folder / f"{key}.so"
            if library.is_file():
                return library, flags
            folder.mkdir(parents=True, exist_ok=True)
            return _build(cc, flags, source, wrapper, folder, library), flags
        except OSError:
            continue
    raise RuntimeLoadError(f"{where}: cannot write the compiled library (no writable cache folder)")


def _build(cc: str, flags: tuple[str, ...], source: bytes, wrapper: str, folder: Path, library: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="bnc-native-build-", dir=folder) as work_dir:
        work = Path(work_dir)
        (work / "model.h").write_bytes(source)
        (work / "wrapper.c").write_text(wrapper)
        target = work / "lib.so"
        try:
            done = subprocess.run(
                [cc, *flags, "-o", str(target), str(work / "wrapper.c"), "-lm"],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=COMPILE_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeLoadError(f"compiling took more than {COMPILE_TIMEOUT_S} s") from None
        if done.returncode != 0:
            raise RuntimeLoadError(
                f"the C file does not compile with {Path(cc).name} ({_first_error(done.stderr or done.stdout)})"
            )
        os.replace(target, library)  # atomic: concurrent loaders see a whole library or none
    return library


# -- the load-time check of the kernel against the header's functions ------------------------------------
_init_lock = threading.Lock()
_checked_libraries: set[str] = set()


def table_rows(cardinalities: ArrayLike, parents: Sequence[int] | None, seed: int = 0) -> NDArray[np.int64]:
    """Rows that read every table row at least once (int64 (n, D)): per feature ``i`` a block over all
    values of ``x_i`` (TAN: all pairs ``(x_i, x_parent)``), the other features from a seeded random row."""
    cards = np.asarray(cardinalities, dtype=np.int64)
    base = random_valid_codes(cards, 1, seed=seed)[0]
    blocks = []
    for i, card in enumerate(cards):
        p = int(parents[i]) if parents is not None and i < len(parents) else -1
        pc = int(cards[p]) if p >= 0 else 1
        block = np.tile(base, (int(card) * pc, 1))
        block[:, i] = np.repeat(np.arange(card), pc)
        if p >= 0:
            block[:, p] = np.tile(np.arange(pc), int(card))
        blocks.append(block)
    rows = np.concatenate(blocks) if blocks else np.zeros((0, cards.shape[0]), dtype=np.int64)
    if rows.shape[0] > SELF_CHECK_MAX_ROWS:
        pick = np.random.default_rng(seed).choice(rows.shape[0], SELF_CHECK_MAX_ROWS, replace=False)
        rows = rows[np.sort(pick)]
    return rows


class NativeAdapter(RuntimeAdapter):
    """Run an exported C file (``.h``) compiled by the host C compiler, through ctypes."""

    name = "native"
    extensions = (".h",)

    def _load(self, path: Path, data: bytes) -> dict[str, Any]:
        try:
            meta = read_c_metadata(data)
        except MetadataError as exc:
            raise RuntimeLoadError(f"{path}: {exc}") from None
        if meta.get("model_kind") == "dnn":  # a DNN header: its own wrapper (runtimes/native_dnn.py)
            from bnc_deploy.runtimes.native_dnn import NativeDNNAdapter

            return NativeDNNAdapter.adopt(self, path, data, meta, compile_library)
        if meta.get("model_kind", "bnc") != "bnc" or meta.get("format") != "c":
            raise RuntimeLoadError(
                f"{path}: the native runtime runs C exports of Bayesian network classifiers "
                f"(format 'c'), this file says format {meta.get('format')!r}, model kind "
                f"{meta.get('model_kind', 'bnc')!r}"
            )
        try:
            c_name = check_c_name(meta.get("c_name"), "metadata c_name")
            frac_bits, bits = int(meta["frac_bits"]), int(meta["bits"])
            cards = np.asarray(meta["cardinalities"], dtype=np.int64)
            n_classes = len(meta["class_names"])
            tan = meta.get("structure") == "tan"
            parents = [int(p) for p in meta.get("parents") or [-1] * len(cards)]
            if not 1 <= bits <= 8 or cards.ndim != 1 or n_classes < 1 or len(parents) != len(cards):
                raise ValueError(
                    f"bits {bits}, {cards.shape} cardinalities, {n_classes} classes, {len(parents)} parents"
                )
        except (ValueError, TypeError, KeyError) as exc:
            raise RuntimeLoadError(f"{path}: bad C metadata ({exc})") from None
        raw = meta.get("input") == INPUT_RAW
        self._step = 2.0**-frac_bits
        self._n_classes = n_classes
        wrapper = wrapper_source(
            c_name, n_features=len(cards), n_classes=n_classes, bits=bits, frac_bits=frac_bits, tan=tan, raw=raw
        )
        library, self.compile_flags = compile_library(data, wrapper, where=path)
        self.library_path = library
        try:
            lib = ctypes.CDLL(str(library))  # batch calls release the GIL
            pylib = ctypes.PyDLL(str(library))  # the one-row call keeps it (~0.1 us of C)
        except OSError as exc:
            raise RuntimeLoadError(f"{path}: cannot load the compiled library {library} ({exc})") from None
        self._lib = lib
        lib.bncn_init.restype = ctypes.c_int
        lib.bncn_init.argtypes = ()
        batch_args = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        types = RAW_TYPES if raw else CODE_TYPES
        self._batch: dict[np.dtype[Any], Callable[..., int]] = {}  # kernel input dtype -> its batch function
        for suffix, spec in types.items():
            fn = getattr(lib, f"bncn_batch_{suffix}")
            fn.restype, fn.argtypes = ctypes.c_long, batch_args
            self._batch[np.dtype(spec[1])] = fn
        self._input_dtype = np.dtype(np.float32 if raw else np.uint8)  # what prepare() makes
        self._kinds = "f" if raw else "iu"
        with _init_lock:
            lanes = lib.bncn_init()
            self.lanes = int(lanes)
            if str(library) not in _checked_libraries:
                self._self_check(cards, parents if tan else None)
                _checked_libraries.add(str(library))
        with _init_lock:
            if str(library) not in _row_slots:
                _row_slots[str(library)] = _make_slots(pylib, len(cards), n_classes, raw)
        self._free_slots = _row_slots[str(library)]  # shared by the adapters of this library
        # A row has D values; with D = 1 a 0-d array has one too (the generic path refuses it), so no fast path.
        self._one_row_size = len(cards) if len(cards) > 1 else -1
        self._width = len(cards)
        return meta

    def _self_check(self, cards: NDArray[np.int64], parents: Sequence[int] | None) -> None:
        """The kernel against the header's ``PREFIX_log_joint``/``PREFIX_predict`` on every table row
        and random rows (see the module docstring); RuntimeLoadError on any difference."""
        rows = np.concatenate([table_rows(cards, parents), random_valid_codes(cards, SELF_CHECK_RANDOM_ROWS, seed=1)])
        x = np.ascontiguousarray(rows, dtype=np.uint8)
        n, c = x.shape[0], self._n_classes
        api_scores, api_labels = np.zeros((n, c), dtype=np.int32), np.zeros(n, dtype=np.int32)
        api = self._lib.bncn_api_u8
        api.restype = ctypes.c_long
        api.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        refused_api = api(x.ctypes.data, n, api_scores.ctypes.data, api_labels.ctypes.data)
        scores, labels = np.empty((n, c)), np.empty(n, dtype=np.int64)
        u8 = self._lib.bncn_batch_u8
        u8.restype = ctypes.c_long
        u8.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        refused = u8(x.ctypes.data, n, scores.ctypes.data, labels.ctypes.data, 1)
        bad = (labels != api_labels) | np.any(scores != api_scores.astype(np.float64) * self._step, axis=1)
        if refused or refused_api or bad.any():
            row = int(np.flatnonzero(bad)[0]) if bad.any() else -1
            raise RuntimeLoadError(
                f"{self.path}: the native kernel disagrees with the header's own functions "
                f"(row {rows[row].tolist() if row >= 0 else None}, {int(refused)} + "
                f"{int(refused_api)} valid rows refused); please report this as a bug"
            )

    # -- runtime adapter interface ------------------------------------------------------------------
    @property
    def chunk_rows(self) -> int | None:
        """None for ``"auto"``: the kernel has no per-batch intermediate (see the module docstring)."""
        return None if isinstance(self._chunk_rows, str) else self._chunk_rows  # a string is "auto"

    @chunk_rows.setter
    def chunk_rows(self, value: int | np.integer[Any] | str | None) -> None:
        self._set_chunk_rows(value)

    def _set_chunk_rows(self, value: int | np.integer[Any] | str | None) -> None:
        super()._set_chunk_rows(value)
        limit = self.chunk_rows
        self._row_limit = sys.maxsize if limit is None else limit  # most rows per batch call (predict's test)

    def _prepare(self, checked: NDArray[np.int64] | NDArray[np.float32]) -> NDArray[np.uint8] | NDArray[np.float32]:
        # Checked codes are in 0..|X_i|-1 <= 255, so the cast to uint8 is exact; raw rows are float32.
        return np.ascontiguousarray(checked, dtype=self._input_dtype)

    def invoke(self, prepared: NDArray[Any]) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """One kernel call over the batch: ``(log_joint float64, label int64)`` (-1 and NaN for a refused row)."""
        check_prepared(self.path, prepared, self._input_dtype, self.n_features)
        if prepared.shape[0] == 1:  # the one-row slots: the cheapest call (see the module docstring)
            slots = self._free_slots
            try:
                slot = slots.pop()
            except IndexError:
                slot = None
            if slot is not None:
                one, row, scores, label = slot
                try:
                    row[...] = prepared  # uint8 -> int64 / float32 -> float64: exact
                    one()
                    return scores.copy(), label.copy()
                finally:
                    slots.append(slot)
        return self._call(prepared, True)[:2]

    def run(self, x: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """``(log_joint (n, C) float64, label (n,) int64)``; see the module docstring for the fast path."""
        # The one-row path is written out here (not in a helper): a Python call costs ~0.1 us of the ~1 us.
        if type(x) is np.ndarray and x.size == self._one_row_size and x.ndim < 3 and x.dtype.kind in self._kinds:
            try:
                slot = self._free_slots.pop()  # atomic: each thread gets its own buffers
            except IndexError:
                slot = None
            if slot is not None:
                one, row, scores, label = slot
                try:
                    row[...] = x  # int64 / float64 (an integer that wraps is negative: refused in C)
                    if not one():
                        return scores.copy(), label.copy()
                except ValueError:
                    pass  # shape (D, 1): the generic path says why
                finally:
                    self._free_slots.append(slot)
        fast = self._fast_batch(x, True)
        return fast if fast is not None else RuntimeAdapter.run(self, x)

    def predict(self, x: ArrayLike) -> NDArray[np.int64]:
        """Most probable class (first maximum), shape (n,), int64 (no scores are written for batches)."""
        if type(x) is np.ndarray and x.size == self._one_row_size and x.ndim < 3 and x.dtype.kind in self._kinds:
            try:
                slot = self._free_slots.pop()
            except IndexError:
                slot = None
            if slot is not None:
                one, row, _, label = slot
                try:
                    row[...] = x
                    if not one():
                        return label.copy()
                except ValueError:
                    pass
                finally:
                    self._free_slots.append(slot)
        # _fast_batch and _call, written out for a C-contiguous batch: about 1 us less per call
        if type(x) is np.ndarray and x.ndim == 2 and x.flags.c_contiguous:
            kernel = self._batch.get(x.dtype)
            n, d = x.shape
            if kernel is not None and d == self._width and 0 < n <= self._row_limit:
                labels = np.empty(n, dtype=np.int64)
                refused = kernel(_address(x), n, None, _address(labels), min(self.threads or 1, MAX_THREADS))
                # a refused row: the generic path says which (or that the file is wrong)
                return labels if not refused else RuntimeAdapter.predict(self, x)
        fast = self._fast_batch(x, False)
        return fast[1] if fast is not None else RuntimeAdapter.predict(self, x)

    def log_joint(self, x: ArrayLike) -> NDArray[np.float64]:
        return self.run(x)[0]

    @overload
    def _call(self, x: NDArray[Any], scores: Literal[True]) -> tuple[NDArray[np.float64], NDArray[np.int64], int]: ...
    @overload
    def _call(self, x: NDArray[Any], scores: bool) -> tuple[NDArray[np.float64] | None, NDArray[np.int64], int]: ...
    def _call(self, x: NDArray[Any], scores: bool) -> tuple[NDArray[np.float64] | None, NDArray[np.int64], int]:
        """The batch kernel on a C-contiguous (n, D) array of a kernel dtype: ``(scores or None, labels,
        refused rows)`` (-1/NaN rows where refused)."""
        n = x.shape[0]
        labels = np.empty(n, dtype=np.int64)
        out = np.empty((n, self._n_classes), dtype=np.float64) if scores else None
        refused = self._batch[x.dtype](
            _address(x),
            n,
            None if out is None else _address(out),
            _address(labels),
            min(self.threads or 1, MAX_THREADS),
        )
        return out, labels, refused

    @overload
    def _fast_batch(
        self, x: ArrayLike, scores: Literal[True]
    ) -> tuple[NDArray[np.float64], NDArray[np.int64]] | None: ...
    @overload
    def _fast_batch(
        self, x: ArrayLike, scores: bool
    ) -> tuple[NDArray[np.float64] | None, NDArray[np.int64]] | None: ...
    def _fast_batch(self, x: ArrayLike, scores: bool) -> tuple[NDArray[np.float64] | None, NDArray[np.int64]] | None:
        """The C-validated batch path; None when ``x`` needs the generic one (other input, or a refused row)."""
        if type(x) is not np.ndarray or x.ndim != 2 or x.dtype not in self._batch:
            return None
        n, d = x.shape
        limit = self.chunk_rows
        if d != self.n_features or n == 0 or (limit is not None and n > limit):
            return None  # (an explicit chunk_rows: the generic path runs the chunks)
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        out, labels, refused = self._call(x, scores)
        if refused:
            return None  # the C check refused a row: the generic path says which (or that the file is wrong)
        return out, labels


#: A one-row slot: ``(argument-free call, input (1, D), scores (1, C), label (1,))``, see :func:`_make_slots`.
_Slot = tuple[Callable[[], int], NDArray[Any], NDArray[np.float64], NDArray[np.int64]]
_row_slots: dict[str, list[_Slot]] = {}
_from_buffer, _addressof = ctypes.c_char.from_buffer, ctypes.addressof


def _address(array: NDArray[Any]) -> int:
    """The data address of a C-contiguous array: through the buffer protocol (~4x cheaper than
    ``array.ctypes.data``, which matters at a few us per call), else (read-only arrays) ``ctypes.data``."""
    try:
        # ndarray exports the buffer protocol; numpy's stubs declare __buffer__ for Python >= 3.12 only.
        return _addressof(_from_buffer(array))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return array.ctypes.data


def _make_slots(pylib: ctypes.PyDLL, d: int, n_classes: int, raw: bool) -> list[_Slot]:
    """``[(argument-free one-row function, input (1, D) view, scores (1, C) view, label (1,) view)]``, one per
    static slot of the library (the views read and write the C buffers in place)."""
    slot_ptr = pylib.bncn_slot
    slot_ptr.restype, slot_ptr.argtypes = ctypes.c_void_p, [ctypes.c_int]
    slots: list[_Slot] = []
    for k in range(ROW_SLOTS):
        memory = (ctypes.c_double * (d + n_classes + 1)).from_address(slot_ptr(k))
        io = np.ctypeslib.as_array(memory)
        one = getattr(pylib, f"bncn_one_{k}")
        one.restype, one.argtypes = ctypes.c_int, ()
        slots.append(
            (
                one,
                io[:d].view(np.float64 if raw else np.int64).reshape(1, d),
                io[d : d + n_classes].reshape(1, n_classes),
                io[d + n_classes :].view(np.int64),
            )
        )
    return slots
