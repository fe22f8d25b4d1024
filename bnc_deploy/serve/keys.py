"""Keys of signed model files: the server's key (``--key-file``) and a model's own key file.

Files exported with ``bnc-export --sign-key FILE`` carry an HMAC-SHA256 seal
(:mod:`bnc_deploy.formats.integrity`); the runtime adapters verify it on the bytes they load
(``load_runtime(..., key=...)``), so this module only decides *which* key a model is checked with:

1. its own key file ``DIR/<name>.key``, beside the model's flat file or version directory, when
   it exists: raw bytes (at least 32), readable and writable by its owner only (``chmod 600``;
   on POSIX a key file with any group or other permission bit is refused, as ssh refuses an
   unprotected private key: whoever can read it can sign models);
2. else the server's key (``--key-file``), if any;
3. else none.

With a key, every file of the model must be signed with that key: the verifier refuses a file
signed with another key, and also an unsigned (``sha256``-sealed, or ``.bnc``) file, since
stripping a signature must not make a file load. Without a key, a signed file is refused. A
refused file never serves; the version serving before keeps serving, and the reason (which key
was used, or how to give one) is in the repository index.

The key file is read on every load of its model, and its ``(inode, size, mtime, mode)`` is part of
the state polling compares, so a key added, replaced or removed takes effect on the next load or poll.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bnc_deploy.errors import ConfigError
from bnc_deploy.formats.integrity import read_key
from bnc_deploy.serve.model import ModelLoadError

#: A model's own key file: ``DIR/<name>`` + this suffix.
KEY_SUFFIX = ".key"
SERVER_KEY = "the server's key (--key-file)"


def read_server_key(path: str | os.PathLike[str], flag: str = "--key-file") -> bytes:
    """The key in ``path`` (ConfigError naming ``flag`` and the file when it cannot be used)."""
    try:
        return read_key(path)
    except ConfigError as exc:
        raise ConfigError(f"{flag} {path}: {str(exc).removeprefix(f'{Path(path)}: ')}") from None


@dataclass(frozen=True)
class ModelKey:
    """The key a model is loaded with: ``key`` (None: none), ``source`` (where it came from, for
    messages; ``""`` for none)."""

    key: bytes | None
    source: str


class KeyRing:
    """The keys of one repository ``root``: ``server_key`` for every model without its own key file."""

    def __init__(self, root: Path, server_key: bytes | None = None) -> None:
        self.root = Path(root)
        self.server_key = server_key

    def path(self, name: str) -> Path:
        return self.root / f"{name}{KEY_SUFFIX}"

    def stamp(self, name: str) -> tuple | None:
        """``(inode, size, mtime_ns, mode)`` of the model's key file, None when it has none (a chmod
        counts: it decides whether the file may be used)."""
        try:
            st = self.path(name).stat()
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode

    def for_model(self, name: str) -> ModelKey:
        """The key of model ``name`` (module docstring); ModelLoadError when its key file cannot be used."""
        path = self.path(name)
        try:
            st = path.stat()
        except FileNotFoundError:
            return ModelKey(self.server_key, SERVER_KEY if self.server_key is not None else "")
        except OSError as exc:
            raise ModelLoadError(f"key file {path.name}: cannot read it ({exc.strerror or exc})") from None
        if os.name == "posix" and st.st_mode & 0o077:
            raise ModelLoadError(
                f"key file {path.name} is accessible by group or others (mode {st.st_mode & 0o777:04o}); "
                f"chmod 600 {path.name}"
            )
        try:
            return ModelKey(read_key(path), f"key file {path.name}")
        except ConfigError as exc:
            raise ModelLoadError(f"key file {path.name}: {str(exc).removeprefix(f'{path}: ')}") from None

    def explain(self, name: str, message: str, used: ModelKey | None) -> str:
        """``message`` (a refused load) with the key it was checked with, or how to give one."""
        if used is None:
            return message
        if used.key is not None:
            return f"{message} (checked with {used.source})"
        if "is signed (" in message:  # integrity.verify_bytes: a signed file and no key
            return f"{message} (no key for {name!r}: give bnc-serve --key-file FILE, or put it in {name}{KEY_SUFFIX})"
        return message


__all__ = ["KEY_SUFFIX", "KeyRing", "ModelKey", "read_server_key"]
