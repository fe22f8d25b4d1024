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
  writer's bytes right after the move (``owned``), and :func:`holds` checks it again later (a
  command calls it just before it reports), so a command can say that another process replaced
  its file instead of claiming it.
* The published file gets the permissions an ordinary ``open(path, "w")`` would give it: those
  of the file it replaces, else ``0o666`` minus the umask (not ``mkstemp``'s private ``0o600``).
* Temporary files are named ``.NAME.<random>.tmpSUFFIX`` beside the target. They are removed on
  every failure the process survives (exceptions, Ctrl-C); a process killed with SIGKILL (or a
  power cut) can leave one behind. The target itself is never partial. Such leftovers are safe
  to delete when no writer is running: ``find DIR -name '.*.tmp*' -delete`` (:func:`stray_temporaries`
  lists them for one target).
* :func:`check_output_path` runs **before** the work (training, exporting): it refuses an
  output that is a directory, that is one of the inputs (also through links), or whose folder
  cannot be created or written, with an :class:`~bnc_deploy.errors.OutputError` naming it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bnc_deploy.errors import OutputError


@dataclass(frozen=True)
class Published:
    """Where a file was published, its size and digest, and whether it is still this writer's."""

    path: Path
    bytes: int
    sha256: str
    owned: bool


def check_output_path(
    path: str | os.PathLike[str], *, inputs: tuple[str | os.PathLike[str] | None, ...] = (), what: str = "output"
) -> Path:
    """Check, before any work, that ``path`` can be written and is none of ``inputs``.

    Creates missing parent folders (as the writers do). Raises OutputError naming the path.
    """
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{what} {path} is a directory; give a file name")
    for other in inputs:
        if other is not None and same_file(path, Path(other)):
            raise OutputError(f"{what} {path} is the input file {other}; writing it would destroy the input")
    folder = writable_folder_of(path, what)
    if path.exists() and not os.access(path, os.W_OK) and not os.access(folder, os.W_OK):
        raise OutputError(f"cannot write {what} {path}: permission denied")
    return path


def writable_folder_of(path: Path, what: str = "output") -> Path:
    """The folder ``path`` goes in, created when missing; OutputError naming ``path`` (a ``what``)
    unless it is a writable folder."""
    folder = path.parent if str(path.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the folder of {what} {path}: {exc.strerror or exc}") from None
    if not folder.is_dir():
        raise OutputError(f"cannot write {what} {path}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {what} {path}: the folder {folder} is not writable")
    return folder


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` both exist and are the same file (False when either cannot be read)."""
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
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
    tmp = Path(name)
    try:
        os.fchmod(fd, _published_mode(path))
    except OSError:  # pragma: no cover - a file system without permissions keeps mkstemp's
        pass
    finally:
        os.close(fd)
    try:
        yield tmp
    finally:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        except OSError:  # pragma: no cover - best effort clean-up
            pass


def publish(tmp: Path, path: str | os.PathLike[str], *, expected_sha256: str | None = None) -> Published:
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
            raise OutputError(
                f"cannot write {path}: the bytes read back differ from the bytes written "
                "(disk full or a failing file system?)"
            )
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


def holds(path: str | os.PathLike[str], sha256: str) -> bool:
    """Whether the file at ``path`` now holds the bytes with digest ``sha256`` (False if missing).

    A writer calls it just before reporting a file as written: False means another writer has
    replaced the file since :func:`publish` (the last complete writer wins).
    """
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return False
    return digest.hexdigest() == sha256


def stray_temporaries(path: str | os.PathLike[str]) -> list[Path]:
    """Temporary files of writers to ``path`` (``.NAME.*.tmp*`` beside it): a writer's in flight,
    or one left by a writer killed with SIGKILL. Delete them only when no writer is running."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    prefix = f".{path.name}."
    try:
        return sorted(p for p in folder.iterdir() if p.name.startswith(prefix) and ".tmp" in p.name[len(prefix) :])
    except OSError:
        return []


def _published_mode(path: Path) -> int:
    """The permission bits of ``path`` if it exists, else 0o666 minus the process umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    try:  # Linux >= 4.7: read it without changing it (os.umask is process-wide, not thread-safe)
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Published:
    """Write ``data`` to ``path`` atomically (see the module docstring); return what was published."""
    digest = hashlib.sha256(data).hexdigest()
    with atomic_path(path) as tmp:
        try:
            with open(tmp, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
        return publish(tmp, path, expected_sha256=digest)


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[Path], None]) -> Published:
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


#: The repository root (the parent of the ``bnc_deploy`` package): ``../shared`` is looked up beside it.
REPO_ROOT = Path(__file__).resolve().parent.parent


def find_folder(
    explicit: str | os.PathLike[str] | None, env_var: str, relative: Path, explicit_name: str
) -> tuple[Path | None, str, str]:
    """The first existing folder of: ``explicit``; else ``$env_var``; else ``relative`` to the
    current directory and to :data:`REPO_ROOT`. Returns ``(folder or None, how it was looked for,
    the places searched)``, so that each caller raises its own error naming every place searched."""
    if explicit is not None:
        candidates, how = [Path(explicit)], explicit_name
    elif os.environ.get(env_var):
        candidates, how = [Path(os.environ[env_var])], f"${env_var}"
    else:
        candidates, how = [Path.cwd() / relative, REPO_ROOT / relative], "the default locations"
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve(), how, ""
    return None, how, ", ".join(str(c) for c in candidates)
