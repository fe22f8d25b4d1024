"""Native runtime (name ``"native"``): compile an exported C file (``.h``) and call it through ctypes.

``_load`` reads the metadata embedded in the header (:func:`bnc_deploy.formats.c.read_c_metadata`),
writes a small C wrapper that includes the header and loops over a batch::

    int batch_log_joint(const uint8_t *x, int n, int32_t *scores, int32_t *labels);
    int batch_log_joint_raw(const float *x, int n, int32_t *scores, int32_t *labels);  (raw files)

(row ``r``: ``PREFIX_log_joint`` into ``scores + r * C`` and ``PREFIX_predict`` into ``labels[r]``,
so both entry points of the library are exercised; the return value is the number of rows
either function refused), and compiles it with the host C compiler::

    $CC (default cc) -O2 -std=c99 -Wall -Wextra -Werror -shared -fPIC

into a cache keyed by the SHA-256 of the header, the wrapper and the command:
``$BNC_DEPLOY_NATIVE_CACHE``, else ``$XDG_CACHE_HOME/bnc-deploy/native``, else
``~/.cache/bnc-deploy/native`` (``<sha256>.so``, written atomically; a cache that cannot be
written falls back to a temporary folder). ``invoke`` is one call on the whole prepared batch:
``(scores * 2**-B_F as float64, labels as int64)``; ``threads`` is ignored (one thread).

Loading a C file runs its code in this process: open only files you trust, as with any native
library (the integrity digest says a file is the one that was exported and verified, nothing more).

Errors: no compiler -> RuntimeLoadError "the native runtime needs a C compiler (cc) ..."; the file
does not compile -> RuntimeLoadError with the compiler's first error line.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from bnc_deploy.errors import MetadataError
from bnc_deploy.formats.c import check_c_name, read_c_metadata
from bnc_deploy.formats.metadata import INPUT_RAW
from bnc_deploy.runtimes.base import RuntimeAdapter, RuntimeLoadError

#: Flags of the shared library (the C file must compile cleanly under them).
CFLAGS = ("-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC")
#: Seconds a compilation may take.
COMPILE_TIMEOUT_S = 600

_WRAPPER = """\
#include "{header}"

int batch_log_joint(const uint8_t *x, int n, int32_t *scores, int32_t *labels)
{{
    int r, refused = 0;
    for (r = 0; r < n; ++r) {{
        const uint8_t *row = x + (long)r * {MACRO}_N_FEATURES;
        if ({name}_log_joint(row, scores + (long)r * {MACRO}_N_CLASSES) != 0) {{
            ++refused;
        }}
        labels[r] = {name}_predict(row);
        if (labels[r] < 0) {{
            ++refused;
        }}
    }}
    return refused;
}}
"""

_WRAPPER_RAW = """
int batch_log_joint_raw(const float *x, int n, int32_t *scores, int32_t *labels)
{{
    int r, refused = 0;
    for (r = 0; r < n; ++r) {{
        const float *row = x + (long)r * {MACRO}_N_FEATURES;
        if ({name}_log_joint_raw(row, scores + (long)r * {MACRO}_N_CLASSES) != 0) {{
            ++refused;
        }}
        labels[r] = {name}_predict_raw(row);
        if (labels[r] < 0) {{
            ++refused;
        }}
    }}
    return refused;
}}
"""


def compiler() -> str:
    """The C compiler command: ``$CC`` or ``cc``; RuntimeLoadError when it is not installed."""
    cc = os.environ.get("CC") or "cc"
    found = shutil.which(cc)
    if found is None:
        raise RuntimeLoadError(f"the native runtime needs a C compiler ({cc}); install one (e.g. apt-get install "
                               "gcc) or set CC")
    return found


def cache_dir() -> Path:
    """Where compiled libraries are kept (see the module docstring)."""
    explicit = os.environ.get("BNC_DEPLOY_NATIVE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bnc-deploy" / "native"


def _first_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[0] if lines else "no message"


def compile_library(header: Path, name: str, raw: bool) -> Path:
    """Compile ``header`` with the batch wrapper into a cached shared library; return its path."""
    cc = compiler()
    source = header.read_bytes()
    wrapper = _WRAPPER + (_WRAPPER_RAW if raw else "")
    key = hashlib.sha256(b"\0".join([source, wrapper.encode(), " ".join((cc,) + CFLAGS).encode()])).hexdigest()
    for folder in (cache_dir(), None):
        try:
            if folder is None:
                folder = Path(tempfile.mkdtemp(prefix="bnc-native-"))
            library = folder / f"{key}.so"
            if library.is_file():
                return library
            folder.mkdir(parents=True, exist_ok=True)
            return _build(cc, source, wrapper, name, folder, library)
        except OSError:
            continue
    raise RuntimeLoadError(f"{header}: cannot write the compiled library (no writable cache folder)")


def _build(cc: str, source: bytes, wrapper: str, name: str, folder: Path, library: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="bnc-native-build-", dir=folder) as work:
        work = Path(work)
        (work / "model.h").write_bytes(source)
        (work / "wrapper.c").write_text(wrapper.format(header="model.h", name=name, MACRO=name.upper()))
        target = work / "lib.so"
        try:
            done = subprocess.run([cc, *CFLAGS, "-o", str(target), str(work / "wrapper.c")], cwd=work,
                                  capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeLoadError(f"compiling took more than {COMPILE_TIMEOUT_S} s") from None
        if done.returncode != 0:
            raise RuntimeLoadError(f"the C file does not compile with {Path(cc).name} "
                                   f"({_first_error(done.stderr or done.stdout)})")
        os.replace(target, library)  # atomic: concurrent loaders see a whole library or none
    return library


class NativeAdapter(RuntimeAdapter):
    """Run an exported C file (``.h``) compiled by the host C compiler, through ctypes."""

    name = "native"
    extensions = (".h",)

    def _load(self, path: Path) -> dict:
        try:
            meta = read_c_metadata(path)
        except MetadataError as exc:
            raise RuntimeLoadError(f"{path}: {exc}") from None
        if meta.get("model_kind", "bnc") != "bnc" or meta.get("format") != "c":
            raise RuntimeLoadError(f"{path}: the native runtime runs C exports of Bayesian network classifiers "
                                   f"(format 'c'), this file says format {meta.get('format')!r}, model kind "
                                   f"{meta.get('model_kind', 'bnc')!r}")
        try:
            c_name = check_c_name(meta.get("c_name"), "metadata c_name")
            self._step = 2.0 ** -int(meta["frac_bits"])
        except (ValueError, TypeError, KeyError) as exc:
            raise RuntimeLoadError(f"{path}: bad C metadata ({exc})") from None
        raw = meta.get("input") == INPUT_RAW
        library = compile_library(path, c_name, raw)
        try:
            self._lib = ctypes.CDLL(str(library))
        except OSError as exc:
            raise RuntimeLoadError(f"{path}: cannot load the compiled library {library} ({exc})") from None
        self._fn = self._lib.batch_log_joint_raw if raw else self._lib.batch_log_joint
        self._fn.restype = ctypes.c_int
        self._fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self._dtype = np.float32 if raw else np.uint8
        self._n_classes = len(meta.get("class_names", ()))
        return meta

    def _prepare(self, checked: np.ndarray) -> np.ndarray:
        # Checked codes are in 0..|X_i|-1 <= 255, so the cast to uint8 is exact; raw rows are float32.
        return np.ascontiguousarray(checked, dtype=self._dtype)

    def invoke(self, prepared: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One C call over the batch: ``(log_joint float64, label int64)`` (label -1 for a refused row)."""
        # The C code reads n * D values: refuse anything but what prepare() makes (never read past the array).
        if (not isinstance(prepared, np.ndarray) or prepared.dtype != self._dtype or prepared.ndim != 2
                or prepared.shape[1] != self.n_features or not prepared.flags.c_contiguous):
            raise RuntimeError(f"{self.path}: invoke() takes what prepare() returns: a C-contiguous "
                               f"{np.dtype(self._dtype).name} array of shape (n, {self.n_features})")
        n = int(prepared.shape[0])
        if n >= 2 ** 31:
            raise RuntimeError(f"{self.path}: at most 2**31 - 1 rows per call")
        scores = np.zeros((n, self._n_classes), dtype=np.int32)
        labels = np.zeros(n, dtype=np.int32)
        self._fn(prepared.ctypes.data, n, scores.ctypes.data, labels.ctypes.data)
        log_joint = scores.astype(np.float64) * self._step
        log_joint[labels < 0] = np.nan  # the guard: an invalid row's scores are NaN, its label -1
        return log_joint, labels.astype(np.int64)
