"""Writing files safely: the one atomic write every command uses (model files, exports, reports).

Contract
--------
* A file is written to a **unique** temporary file in the target's own folder (``mkstemp``, so
  two writers never share a temporary name), flushed and ``fsync``-ed, read back and compared
  with what this process meant to write, and only then moved over the target with
  ``os.replace`` (atomic on POSIX and Windows within one file system).
* On any failure the temporary file is removed and an existing target stays untouched: a
  reader sees the old file or the new one, never a mix, never a half-written file.
* Concurrent writers to one path: the last complete writer wins, the file on disk is always
  one writer's complete output. :func:`publish` reports whether the file still holds this
  writer's bytes right after the move (``owned``), so a command can say so instead of claiming
  a file another process has since replaced.
* :func:`check_output_path` runs **before** the work (training, exporting): it refuses an
  output that is a directory, that is one of the inputs (also through links), or whose folder
  cannot be created or written, with an :class:`~bnc_deploy.errors.OutputError` naming it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from bnc_deploy.errors import OutputError


@dataclass(frozen=True)
class Published:
    """Where a file was published, its size and digest, and whether it is still this writer's."""

    path: Path
    bytes: int
    sha256: str
    owned: bool


def check_output_path(path: str | os.PathLike, *, inputs: tuple = (), what: str = "output") -> Path:
    """Check, before any work, that ``path`` can be written and is none of ``inputs``.

    Creates missing parent folders (as the writers do). Raises OutputError naming the path.
    """
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{what} {path} is a directory; give a file name")
    for other in inputs:
        if other is not None and _same_file(path, Path(other)):
            raise OutputError(f"{what} {path} is the input file {other}; writing it would destroy the input")
    folder = path.parent if str(path.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the folder of {what} {path}: {exc.strerror or exc}") from None
    if not folder.is_dir():
        raise OutputError(f"cannot write {what} {path}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {what} {path}: the folder {folder} is not writable")
    if path.exists() and not os.access(path, os.W_OK) and not os.access(folder, os.W_OK):
        raise OutputError(f"cannot write {what} {path}: permission denied")
    return path


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A unique temporary path beside ``path`` for a writer that needs a file name (e.g. a zip).

    The body writes the temporary file; :func:`publish` must be called on it before the block
    ends to make it the target. Whatever happens, the temporary file does not outlive the block.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # The temporary name keeps the extension: writers that infer the format from it (matplotlib) work.
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=folder)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    finally:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        except OSError:  # pragma: no cover - best effort clean-up
            pass


def publish(tmp: Path, path: str | os.PathLike, *, expected_sha256: str | None = None) -> Published:
    """fsync ``tmp``, check its bytes (against ``expected_sha256`` when given), move it to ``path``.

    Raises OutputError (nothing published, ``tmp`` left for the caller's clean-up) when the bytes
    on disk differ from what was written or the move fails.
    """
    path = Path(path)
    try:
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        data = tmp.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if expected_sha256 is not None and digest != expected_sha256:
            raise OutputError(f"cannot write {path}: the bytes read back differ from the bytes written "
                              "(disk full or a failing file system?)")
        inode = os.stat(tmp).st_ino
        os.replace(tmp, path)
        _fsync_folder(path.parent if str(path.parent) else Path("."))
    except OutputError:
        raise
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        owned = os.stat(path).st_ino == inode
    except OSError:
        owned = False
    return Published(path=path, bytes=len(data), sha256=digest, owned=owned)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Published:
    """Write ``data`` to ``path`` atomically (see the module docstring); return what was published."""
    digest = hashlib.sha256(data).hexdigest()
    with atomic_path(path) as tmp:
        try:
            with open(tmp, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
        return publish(tmp, path, expected_sha256=digest)


def atomic_write_with(path: str | os.PathLike, write: Callable[[Path], None]) -> Published:
    """Let ``write(tmp_path)`` produce the file, then publish it atomically (zip files, plots)."""
    with atomic_path(path) as tmp:
        try:
            write(tmp)
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
        return publish(tmp, path)


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
