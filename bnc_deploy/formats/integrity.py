"""Tamper evidence for exported files: a digest over the whole file, stored in its own metadata.

What it is
----------
Every exported file (ONNX, TFLite, any format whose metadata is the canonical JSON of
:mod:`bnc_deploy.formats.metadata`, stored verbatim in the file) carries the metadata field
``"integrity"``. Exporters write a fixed-width placeholder (:data:`PLACEHOLDER`); the verifier
(:func:`bnc_deploy.verify.build`) *seals* the built bytes: it computes

* ``sha256``: SHA-256 of the whole file with the 64 hex digits of the field set to ``0``, or
* ``hmac-sha256``: HMAC-SHA256 of the same bytes with a user key (:func:`read_key`),

and writes ``"<scheme>:<64 hex digits>"`` (space-padded to :data:`VALUE_WIDTH` characters) into
the placeholder. The length of the file does not change, so the protobuf / flatbuffer stays
valid, and sealing the same bytes twice gives the same file. The digest covers every byte of the
file: tables, index constants, thresholds, cardinalities, graph structure, the metadata (the
scheme name included) - everything that determines the outputs.

Loading (:func:`verify_bytes`, called by the runtime adapters and ``bnc-profile`` before the file
reaches its runtime) finds the one field in the raw bytes, recomputes the digest and raises
:class:`IntegrityError` (a :class:`~bnc_deploy.errors.RuntimeLoadError`) naming the file when it
differs: ``<file>: the file was modified after export (...)``. A damaged or renamed field, a
second field, the unfilled placeholder, a signed file loaded without its key and an unsigned
file loaded with a key are refused too. Files exported before this check existed have no field:
they load, and their metadata says ``"integrity": "none"`` (:func:`annotate`).

Threat model
------------
``sha256`` protects against **accidents and edits**: a flipped bit on disk or in transfer, a
truncated copy, a hand-edited table entry, a cardinality or threshold changed with an ONNX/TFLite
editor, an edited metadata field. It does *not* protect against an attacker: anyone who can
edit the file can recompute an unkeyed digest. For that case sign with a key
(``bnc-export --sign-key FILE``): an ``hmac-sha256`` file loads only with the same key
(``load_runtime(..., key=...)``, ``bnc-profile --key FILE``), and without the key nobody can make
a modified file that passes. HMAC is symmetric: whoever can verify can also sign, so keep the
key as secret as the right to publish models. The check says nothing about whether a model is
*good*, only that the file is the one the verifier checked and published.

Key files: raw bytes, at least :data:`MIN_KEY_BYTES` (32) of them, e.g.
``head -c 32 /dev/urandom > model.key``. Every byte counts (a trailing newline is part of the key).

Standard library only (no numpy, no onnx, no tensorflow).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from pathlib import Path

from bnc_deploy.errors import ConfigError, ExportError, RuntimeLoadError

#: Metadata key of the seal.
FIELD = "integrity"
SCHEME_SHA256 = "sha256"
SCHEME_HMAC = "hmac-sha256"
SCHEMES = (SCHEME_SHA256, SCHEME_HMAC)
#: What :func:`annotate` puts in the metadata of a file exported before seals existed.
NONE = "none"
#: Characters of the field's value: the longest ``<scheme>:<64 hex>``; shorter ones are space-padded.
VALUE_WIDTH = max(len(s) for s in SCHEMES) + 1 + 64
#: The value exporters write; :func:`seal` fills it in.
PLACEHOLDER = f"{SCHEME_SHA256}:{'0' * 64}".ljust(VALUE_WIDTH)
#: Smallest key accepted for ``hmac-sha256``.
MIN_KEY_BYTES = 32

#: How the field looks in the canonical JSON (``separators=(",", ":")``), hence in the file's bytes.
MARKER = f'"{FIELD}":"'.encode()
_VALUE = re.compile(rb"(sha256|hmac-sha256):([0-9a-f]{64}) *")
_ZEROS = b"0" * 64
_LOOKS_LIKE_SEAL = re.compile(r"(sha256|hmac-sha256):[0-9a-f]{64} *")
_SEAL_ANYWHERE = re.compile(rb"(?:sha256|hmac-sha256):[0-9a-f]{64}")
_SKIP_HINT = "re-export it, or pass verify_integrity=False / --no-integrity-check to load it anyway"


class IntegrityError(RuntimeLoadError):
    """An exported file fails its integrity check (modified after export, or the wrong key)."""


@dataclass(frozen=True)
class Seal:
    """The integrity field found in a file: ``scheme``, ``digest`` (hex) and where the digest is."""

    scheme: str
    digest: str
    start: int  # byte offset of the 64 hex digits

    @property
    def value(self) -> str:
        """``"<scheme>:<digest>"`` (what :func:`annotate` stores in the metadata)."""
        return f"{self.scheme}:{self.digest}"

    @property
    def sealed(self) -> bool:
        """False for the unfilled placeholder (the bytes of an exporter, not of the verifier)."""
        return self.digest != "0" * 64


def placeholder() -> str:
    """The value every exporter stores under ``metadata["integrity"]`` (filled in by :func:`seal`)."""
    return PLACEHOLDER


def check_key(key: object) -> bytes:
    """``key`` as bytes; ConfigError unless it is bytes-like with at least MIN_KEY_BYTES bytes."""
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise ConfigError(f"an integrity key must be bytes (e.g. read_key(path)), got {type(key).__name__}")
    key = bytes(key)
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(
            f"an integrity key needs at least {MIN_KEY_BYTES} bytes, this one has {len(key)} "
            f"(make one with: head -c 32 /dev/urandom > model.key)"
        )
    return key


def read_key(path: str | os.PathLike[str]) -> bytes:
    """The key in ``path``: its raw bytes (at least MIN_KEY_BYTES). ConfigError naming the file."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the key file ({exc.strerror or exc})") from None
    try:
        return check_key(data)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None


def find_seal(data: bytes, where: str = "file") -> Seal | None:
    """The one integrity field in ``data``, or None when there is none (an older export, a ``.bnc``).

    Raises IntegrityError when there are several fields, the field's value is damaged, or a seal
    value stands without its ``"integrity":"`` key (an edited key or quote).
    """
    first = data.find(MARKER)
    if first < 0:
        if _SEAL_ANYWHERE.search(data):  # a seal without its key: the field's name or quotes were edited
            raise IntegrityError(
                f"{where}: the file was modified after export (its integrity field is damaged); {_SKIP_HINT}"
            )
        return None
    if data.find(MARKER, first + 1) >= 0:
        raise IntegrityError(
            f"{where}: the file was modified after export (it has {data.count(MARKER)} integrity fields); {_SKIP_HINT}"
        )
    begin = first + len(MARKER)
    value = data[begin : begin + VALUE_WIDTH]
    match = _VALUE.fullmatch(value)
    if match is None or data[begin + VALUE_WIDTH : begin + VALUE_WIDTH + 1] != b'"':
        raise IntegrityError(
            f"{where}: the file was modified after export (its integrity field is damaged); {_SKIP_HINT}"
        )
    return Seal(match.group(1).decode(), match.group(2).decode(), begin + match.start(2))


def _digest(data: bytes, seal: Seal, key: bytes | None) -> str:
    """The digest of ``data`` with the seal's 64 hex digits zeroed (HMAC with ``key`` if given)."""
    h = hmac.new(key, digestmod=hashlib.sha256) if key is not None else hashlib.sha256()
    h.update(memoryview(data)[: seal.start])
    h.update(_ZEROS)
    h.update(memoryview(data)[seal.start + 64 :])
    return h.hexdigest()


def seal(data: bytes, key: bytes | None = None) -> bytes:
    """Fill in the placeholder of an exporter's bytes: ``sha256`` (no key) or ``hmac-sha256``.

    Deterministic; the length does not change. Raises ExportError when ``data`` has no
    placeholder (an exporter that does not write :func:`placeholder`) or is already sealed.
    """
    data = bytes(data)
    try:
        found = find_seal(data)
    except IntegrityError as exc:
        raise ExportError(f"cannot seal the exported file: {exc}") from None
    begin = -1 if found is None else found.start - len(SCHEME_SHA256) - 1  # start of the field's value
    if found is None or data[begin : begin + VALUE_WIDTH] != PLACEHOLDER.encode():
        raise ExportError(
            f"cannot seal the exported file: it has no unfilled {FIELD!r} placeholder in its "
            "metadata (the exporter must store bnc_deploy.formats.integrity.placeholder())"
        )
    scheme = SCHEME_SHA256 if key is None else SCHEME_HMAC
    key = None if key is None else check_key(key)
    prefix = f"{scheme}:".encode()
    blank = data[:begin] + (prefix + _ZEROS).ljust(VALUE_WIDTH) + data[begin + VALUE_WIDTH :]
    target = Seal(scheme, "0" * 64, begin + len(prefix))
    digest = _digest(blank, target, key).encode()
    return blank[: target.start] + digest + blank[target.start + 64 :]


def verify_bytes(data: bytes, *, key: bytes | None = None, where: str = "file") -> Seal | None:
    """Check the seal of an exported file's bytes; return it (None: a file without one).

    Raises IntegrityError (a RuntimeLoadError) naming ``where`` when the digest differs, the field
    is damaged or unfilled, the file is signed and no ``key`` (or another key) is given, or a
    ``key`` is given and the file is not signed.
    """
    key = None if key is None else check_key(key)
    data = data if isinstance(data, bytes) else bytes(data)
    found = find_seal(data, where)
    if found is None:
        if key is not None:
            raise IntegrityError(
                f"{where}: the file is not signed (it has no integrity digest) but a key was "
                "given; re-export it with that key (bnc-export --sign-key FILE)"
            )
        return None
    if not found.sealed:
        raise IntegrityError(
            f"{where}: the file was never sealed (its integrity digest is the exporter's "
            "placeholder): write exports with bnc_deploy.verify.export_file or bnc-export, "
            "or pass verify_integrity=False / --no-integrity-check to load it anyway"
        )
    if found.scheme == SCHEME_HMAC and key is None:
        raise IntegrityError(
            f"{where}: the file is signed ({SCHEME_HMAC}); pass its key to load it "
            "(key=read_key(FILE) / --key FILE), or verify_integrity=False / --no-integrity-check"
        )
    if found.scheme == SCHEME_SHA256 and key is not None:
        raise IntegrityError(
            f"{where}: the file is not signed (integrity {SCHEME_SHA256}) but a key was given: "
            "it may have been re-sealed without the key; re-export it with "
            "bnc-export --sign-key FILE"
        )
    if not hmac.compare_digest(_digest(data, found, key), found.digest):
        what = (
            "integrity digest mismatch"
            if key is None
            else "HMAC-SHA256 signature mismatch: modified, or signed with another key"
        )
        raise IntegrityError(f"{where}: the file was modified after export ({what}); {_SKIP_HINT}")
    return found


def verify_file(path: str | os.PathLike[str], *, key: bytes | None = None) -> Seal | None:
    """:func:`verify_bytes` on the contents of ``path`` (errors name the path)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise RuntimeLoadError(f"{p}: cannot read the file ({exc.strerror or exc})") from None
    return verify_bytes(data, key=key, where=str(p))


def check_on_load(data: bytes, *, where: str = "file", verify: bool = True, key: bytes | None = None) -> Seal | None:
    """What a runtime adapter calls on a file's bytes before its runtime reads them:
    :func:`verify_bytes`, or with ``verify=False`` only the seal as found (None if there is none
    or it cannot be read). Pass the result to :func:`annotate` with the parsed metadata."""
    if verify:
        return verify_bytes(data, key=key, where=where)
    try:
        return find_seal(bytes(data), where)
    except IntegrityError:
        return None


def describe(data: bytes) -> dict[str, str | None]:
    """What a file says about its seal, without checking it: ``{"scheme", "digest"}``
    (``scheme`` ``"none"`` and ``digest`` None for a file without a field; ``"damaged"`` when the
    field cannot be read)."""
    try:
        found = find_seal(bytes(data))
    except IntegrityError:
        return {"scheme": "damaged", "digest": None}
    if found is None:
        return {"scheme": NONE, "digest": None}
    return {"scheme": found.scheme, "digest": found.digest if found.sealed else None}


# ``object``, not ``typing.Any``: tests/test_integrity.py holds this module to a fixed list of imports.
def annotate(
    meta: dict[str, object], found: Seal | None, where: str = "file", *, checked: bool = True
) -> dict[str, object]:
    """Set ``meta["integrity"]`` after loading: ``"<scheme>:<digest>"``, or ``"none"`` for an older export.

    ``found``: what :func:`verify_bytes` returned (``checked``) or :func:`find_seal` found
    (``checked=False``: the check was skipped). Model files (``format == "bnc"``: the NumPy
    reference, which has its own content hash) are returned unchanged. With ``checked``, raises
    IntegrityError when the metadata has an integrity field that the bytes did not show, or a
    seal under another key (a renamed field): both mean the file was edited.
    """
    if meta.get("format") == "bnc":
        return meta
    if found is not None:
        meta[FIELD] = found.value
        return meta
    if checked:
        renamed = [k for k, v in meta.items() if isinstance(v, str) and _LOOKS_LIKE_SEAL.fullmatch(v)]
        if FIELD in meta or renamed:
            raise IntegrityError(
                f"{where}: the file was modified after export (its integrity field is damaged); {_SKIP_HINT}"
            )
    stored = meta.get(FIELD)
    meta[FIELD] = stored.strip() if not checked and isinstance(stored, str) else NONE
    return meta
