"""The host's apt sources: where a Debian mirror for ``debootstrap`` can be found.

Used by :func:`bnc_deploy.targets.aarch64_root.debian_mirror` when neither ``--mirror`` nor
``$BNC_DEPLOY_DEBIAN_MIRROR`` gives one: :func:`host_debian_mirror` reads ``/etc/apt/sources.list``,
then ``sources.list.d/*.list`` and deb822 ``*.sources`` (in apt's order), parses both formats
(:func:`parse_one_line_sources`, :func:`parse_deb822_sources`) and takes the first ``deb`` entry of
the Debian archive that debootstrap can download from (:func:`debian_uri`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

__all__ = [
    "DEBIAN_SUITES",
    "DEBOOTSTRAP_SCHEMES",
    "ETC_APT",
    "apt_source_files",
    "debian_uri",
    "host_debian_mirror",
    "parse_deb822_sources",
    "parse_one_line_sources",
]

#: Suites of the Debian archive itself (codenames and aliases): an apt entry with one of them and the
#: component ``main`` is a Debian mirror. ``bookworm-security``, ``-updates`` and ``-backports`` are
#: not whole archives (debootstrap cannot start from them), Ubuntu's and third-party suites are not
#: Debian: none is listed. A release newer than these needs adding (or --mirror).
DEBIAN_SUITES = frozenset(
    {
        "buster",
        "bullseye",
        "bookworm",
        "trixie",
        "forky",
        "duke",
        "sid",
        "oldoldstable",
        "oldstable",
        "stable",
        "testing",
        "unstable",
    }
)
#: URI schemes debootstrap downloads from (apt's ``mirror+``, ``cdrom:`` and ``tor+`` methods are apt's own).
DEBOOTSTRAP_SCHEMES = ("http://", "https://", "ftp://", "file:/")
#: apt's configuration folder: ``sources.list`` and ``sources.list.d/`` in it.
ETC_APT = Path("/etc/apt")


def parse_one_line_sources(text: str) -> list[dict]:
    """Entries of a one-line-style file (``sources.list``, ``*.list``): ``deb [options] URI SUITE
    [COMPONENT...]``, one per line; ``#`` starts a comment anywhere in a line (as in apt's parser).

    Each entry is ``{"types", "uris", "suites", "components", "enabled"}`` (lists and a bool), the
    shape of :func:`parse_deb822_sources`' entries. Malformed lines are skipped (apt would refuse
    them; the mirror search only needs the well-formed ones)."""
    entries = []
    for line in text.splitlines():
        head = line.split("#", 1)[0].split(None, 1)
        if len(head) < 2:
            continue
        kind, rest = head
        if rest.startswith("["):  # [arch=arm64 signed-by=...]: options, may contain spaces
            closed = rest.find("]")
            if closed < 0:
                continue
            rest = rest[closed + 1 :]
        fields = rest.split()
        if len(fields) < 2:
            continue
        entries.append(
            {"types": [kind], "uris": fields[:1], "suites": fields[1:2], "components": fields[2:], "enabled": True}
        )
    return entries


def parse_deb822_sources(text: str) -> list[dict]:
    """Entries of a deb822-style file (``*.sources``): paragraphs separated by blank lines, fields
    ``Name: value`` (names case-insensitive) continued on lines that start with a space or tab, and
    ``#`` comment lines anywhere. ``Types``, ``URIs``, ``Suites`` and ``Components`` hold
    space-separated lists; ``Enabled: no`` turns an entry off. Same entry shape as
    :func:`parse_one_line_sources`."""
    paragraphs: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    name = None
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                paragraphs.append(fields)
            fields, name = {}, None
        elif line[0] in " \t":
            if name is not None:
                fields[name] += " " + line.strip()
        else:
            key, colon, value = line.partition(":")
            name = key.strip().lower() if colon else None
            if name is not None:
                fields[name] = value.strip()
    return [
        {
            "types": p.get("types", "").split(),
            "uris": p.get("uris", "").split(),
            "suites": p.get("suites", "").split(),
            "components": p.get("components", "").split(),
            "enabled": p.get("enabled", "yes").strip().lower() not in ("no", "false", "0"),
        }
        for p in paragraphs
    ]


def debian_uri(entries: list[dict]) -> str | None:
    """The first URI debootstrap can use of the first enabled ``deb`` entry of the Debian archive
    (a suite in :data:`DEBIAN_SUITES`, the component ``main``), or None."""
    for entry in entries:
        if (
            entry["enabled"]
            and "deb" in entry["types"]
            and "main" in entry["components"]
            and DEBIAN_SUITES.intersection(entry["suites"])
        ):
            uri = next((u for u in entry["uris"] if u.startswith(DEBOOTSTRAP_SCHEMES)), None)
            if uri is not None:
                return uri
    return None


def apt_source_files(etc_apt: Path | None = None) -> list[Path]:
    """The host's apt source files in apt's order: ``sources.list``, then ``sources.list.d/*.list``
    and ``*.sources`` sorted by name (other names there, e.g. ``*.disabled``, apt ignores too).
    ``etc_apt``: apt's folder (default :data:`ETC_APT`)."""
    etc_apt = ETC_APT if etc_apt is None else etc_apt
    files = [etc_apt / "sources.list"]
    with contextlib.suppress(OSError):
        files += sorted(
            (p for p in (etc_apt / "sources.list.d").iterdir() if p.suffix in (".list", ".sources")),
            key=lambda p: p.name,
        )
    return [p for p in files if p.is_file()]


def host_debian_mirror(etc_apt: Path | None = None) -> tuple[str, Path] | None:
    """``(URI, file)`` of the first Debian archive entry of the host's apt sources, or None."""
    for path in apt_source_files(etc_apt):
        try:
            text = path.read_text(errors="replace")
        except OSError:  # unreadable: as if absent (apt would complain, but the next file may do)
            continue
        parse = parse_deb822_sources if path.suffix == ".sources" else parse_one_line_sources
        uri = debian_uri(parse(text))
        if uri is not None:
            return uri, path
    return None
