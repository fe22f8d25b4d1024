"""The versioned model file: a ZIP container of one JSON header and ``.npy`` arrays.

Layout (framework-neutral: any language with a ZIP and an ``.npy`` reader can load it)::

    header.json            {"format": "bnc-deploy-model", "format_version": 1, "kind": ...,
                            ..., "content_sha256": "..."}
    arrays/<name>.npy      one array per entry, saved with allow_pickle=False

``content_sha256`` hashes the header (without the hash itself, canonical JSON) and every
array's name, dtype, shape and bytes, so a tampered, truncated or mixed-up file is detected on
load even where the ZIP's own CRCs still hold. The file format version is checked first: a file
written by a newer toolkit is refused with a message that says so, rather than misread.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from bnc_deploy.errors import ArtifactError
from bnc_deploy.fileio import Published, atomic_write_with

FORMAT_NAME = "bnc-deploy-model"
#: Version of the container and of the header keys written by this toolkit.
FORMAT_VERSION = 1
HEADER_ENTRY = "header.json"
ARRAY_PREFIX = "arrays/"


def _canonical_json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def content_hash(header: dict, arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the header (minus ``content_sha256``) and all arrays, in name order."""
    digest = hashlib.sha256()
    digest.update(_canonical_json({k: v for k, v in header.items() if k != "content_sha256"}))
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"\n{name}|{array.dtype.str}|{list(array.shape)}\n".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def write_container(path: str | os.PathLike, header: dict, arrays: dict[str, np.ndarray]) -> str:
    """Write header and arrays to ``path`` atomically; return the content hash."""
    return write_container_published(path, header, arrays)[0]


def write_container_published(
    path: str | os.PathLike, header: dict, arrays: dict[str, np.ndarray]
) -> tuple[str, Published]:
    """:func:`write_container`, also returning what was published (file digest, ``owned``)."""
    for name, array in arrays.items():
        if array.dtype == object:
            raise ArtifactError(f"array {name!r} has dtype object; model files hold plain numeric arrays only")
    header = dict(header, format=FORMAT_NAME, format_version=FORMAT_VERSION)
    header["content_sha256"] = content_hash(header, arrays)

    def write(tmp: Path) -> None:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(HEADER_ENTRY, json.dumps(header, sort_keys=True, indent=1, allow_nan=False))
            for name in sorted(arrays):
                buffer = io.BytesIO()
                np.save(buffer, np.ascontiguousarray(arrays[name]), allow_pickle=False)
                zf.writestr(ARRAY_PREFIX + name + ".npy", buffer.getvalue())

    published = atomic_write_with(path, write)  # never leave a half-written model under the final name
    return header["content_sha256"], published


def read_container(path: str | os.PathLike, data: bytes | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """Read and verify a model file; return ``(header, arrays)``.

    ``data``: the file's content, already read (``path`` then only names it in messages).
    Raises ArtifactError naming the file and the problem: missing, not a model file, corrupt or
    truncated, newer format version, or content hash mismatch.
    """
    path = Path(path)
    if data is None:
        if path.is_dir():
            raise ArtifactError(f"{path}: is a directory, not a model file")
        if not path.is_file():
            raise ArtifactError(f"{path}: no such model file")
    source = path if data is None else io.BytesIO(data)
    try:
        with zipfile.ZipFile(source) as zf:
            names = set(zf.namelist())
            if HEADER_ENTRY not in names:
                raise ArtifactError(f"{path}: not a bnc-deploy model file (no {HEADER_ENTRY})")
            try:
                header = json.loads(zf.read(HEADER_ENTRY).decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ArtifactError(f"{path}: corrupt model header ({exc})") from None
            _check_format(path, header)
            arrays = {}
            for entry in sorted(names - {HEADER_ENTRY}):
                if not (entry.startswith(ARRAY_PREFIX) and entry.endswith(".npy")):
                    raise ArtifactError(f"{path}: unexpected entry {entry!r} in model file")
                try:
                    arrays[entry[len(ARRAY_PREFIX) : -4]] = np.load(io.BytesIO(zf.read(entry)), allow_pickle=False)
                except ValueError as exc:
                    raise ArtifactError(f"{path}: corrupt array {entry!r} ({exc})") from None
    except zipfile.BadZipFile as exc:
        raise ArtifactError(f"{path}: not a bnc-deploy model file, or corrupt/truncated ({exc})") from None
    except (OSError, EOFError, zlib.error, zipfile.LargeZipFile) as exc:  # CRC errors and truncation surface here
        raise ArtifactError(f"{path}: corrupt or truncated model file ({exc})") from None
    except (RuntimeError, NotImplementedError, UnicodeDecodeError) as exc:  # damaged entry headers: "encrypted",
        # an unknown compression method, a UTF-8 flag on a name that is not UTF-8
        raise ArtifactError(f"{path}: corrupt model file ({exc})") from None
    expected = header.get("content_sha256")
    actual = content_hash(header, arrays)
    if expected != actual:
        raise ArtifactError(
            f"{path}: content hash mismatch (header says {str(expected)[:12]}..., content is {actual[:12]}...): "
            "the file was modified or damaged after it was written"
        )
    return header, arrays


def _check_format(path: Path, header) -> None:
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise ArtifactError(
            f"{path}: not a bnc-deploy model file (format is {header.get('format')!r})"
            if isinstance(header, dict)
            else f"{path}: corrupt model header"
        )
    version = header.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise ArtifactError(f"{path}: invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise ArtifactError(
            f"{path}: written by a newer bnc-deploy (model format version {version}); this version "
            f"reads format versions up to {FORMAT_VERSION}. Upgrade bnc-deploy to load it."
        )
