"""The C format: a header-only C99 library, and the bnc-deploy metadata embedded in it.

Exported C files (``exporters/c_bnc.py``) carry the canonical metadata JSON of
:mod:`bnc_deploy.formats.metadata` verbatim in one C comment between two marker lines::

    /* bnc_deploy metadata begin
    {"bits":3,...,"integrity":"sha256:...",...}
    bnc_deploy metadata end */

The JSON is one line. So that it can never end (or, with ``-Wcomment``, open) a comment, or form
a trigraph, every ``*`` is written ``\\u002a`` and every ``?`` ``\\u003f``: both are plain JSON
escapes of characters that only occur inside JSON strings, so the text parses to the same object. The
integrity field (:mod:`bnc_deploy.formats.integrity`) stays byte-for-byte findable, and sealing
covers every byte of the file: code, tables and comments.

Readers (the ``native`` runtime, ``bnc-profile``, targets) use :func:`read_c_metadata`, never the
exporter. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bnc_deploy.errors import ExportError, MetadataError
from bnc_deploy.formats.metadata import METADATA_KEY, dump_metadata

#: Lines that open and close the metadata comment.
BEGIN_MARKER = f"/* {METADATA_KEY} metadata begin"
END_MARKER = f"{METADATA_KEY} metadata end */"

#: C99 keywords (and a few names a prefix must not shadow), refused as ``--name``.
C_KEYWORDS = frozenset(
    """
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
_Bool _Complex _Imaginary
""".split()
)
#: Longest accepted prefix (C99 guarantees 63 significant characters for internal identifiers;
#: the longest generated name adds about 20).
MAX_NAME_LENGTH = 40
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def check_c_name(name: object, what: str = "--name") -> str:
    """``name`` if it can prefix the generated C identifiers; ExportError saying why not.

    A C identifier starting with a letter (a leading underscore is reserved to the
    implementation in many cases), without ``__``, not a keyword, at most MAX_NAME_LENGTH chars.
    """
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name) or "__" in name:
        raise ExportError(
            f"{what} must be a C identifier (a letter, then letters, digits or single underscores), got {name!r}"
        )
    if name in C_KEYWORDS:
        raise ExportError(f"{what} {name!r} is a C keyword")
    if len(name) > MAX_NAME_LENGTH:
        raise ExportError(f"{what} {name!r} is longer than {MAX_NAME_LENGTH} characters")
    return name


def escape_json_for_comment(text: str) -> str:
    """JSON text that is safe inside a C block comment and parses to the same value."""
    if "\n" in text or "\r" in text:
        raise ExportError("metadata JSON must be one line")
    return text.replace("*", "\\u002a").replace("?", "\\u003f")


def metadata_comment(meta: Mapping[str, Any]) -> str:
    """The metadata comment block (ends with a newline) for ``meta`` (canonical JSON, escaped)."""
    body = escape_json_for_comment(dump_metadata(meta))
    return f"{BEGIN_MARKER}\n{body}\n{END_MARKER}\n"


def comment_text(value: object) -> str:
    """Any value as printable ASCII safe inside a C block comment (for human-readable lines)."""
    text = str(value).encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(ch if " " <= ch <= "~" else "?" for ch in text)
    text = text.replace("*/", "* /").replace("/*", "/ *")
    return re.sub(r"\?(?=\?)", "? ", text)  # no trigraphs


def read_c_metadata(source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> dict[str, Any]:
    """The ``bnc_deploy`` metadata dict of an exported C file (a path, or its bytes/text), unvalidated.

    Raises MetadataError when there is no metadata block or its JSON is corrupt (runtimes then
    check it with :func:`bnc_deploy.formats.metadata.parse_metadata`).
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif isinstance(source, str) and BEGIN_MARKER in source:
        data = source.encode("utf-8")
    elif isinstance(source, (str, os.PathLike)):
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise MetadataError(f"{source}: cannot read the file ({exc.strerror or exc})") from None
    else:
        raise TypeError(f"read_c_metadata takes a path, bytes or text, got {type(source).__name__}")
    begin = data.find((BEGIN_MARKER + "\n").encode())
    if begin < 0:
        raise MetadataError(f"not a bnc-deploy C export (no '{BEGIN_MARKER}' comment)")
    if data.find(BEGIN_MARKER.encode(), begin + 1) >= 0:
        raise MetadataError(f"more than one '{BEGIN_MARKER}' comment")
    start = begin + len(BEGIN_MARKER) + 1
    end = data.find(("\n" + END_MARKER).encode(), start)
    if end < 0:
        raise MetadataError(f"the {METADATA_KEY} metadata comment is not closed by '{END_MARKER}'")
    try:
        meta = json.loads(data[start:end].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MetadataError(f"corrupt {METADATA_KEY} metadata ({exc})") from None
    if not isinstance(meta, dict):
        raise MetadataError(f"{METADATA_KEY} metadata is not a JSON object")
    return meta
