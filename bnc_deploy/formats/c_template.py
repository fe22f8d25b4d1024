"""C written as C: package-data source files cut into named sections, filled in with ``string.Template``.

The toolkit's C (the exported header ``exporters/c_bnc.h``, the native runtime's host kernel
``runtimes/native_kernel.c``, the Cortex-M test program and linker script beside
``targets/cortex_m_sources.py``) lives in real ``.c``/``.h``/``.ld`` files shipped as package data
(pyproject's ``[tool.setuptools.package-data]``), not in Python strings. Python only picks the
sections a build needs and fills in their ``${...}`` placeholders with data: numbers, names, types,
generated arrays.

File layout: a section is the text from its marker line ``//@ NAME`` (the whole line, ``NAME`` a
word) up to the next marker line or the end of the file; the text before the first marker documents
the file and is never written (so a linker script may carry ``//@`` markers too: only the section
bodies reach the linker). Every section must end with a newline, and no name may repeat: either
mistake would silently change every generated file. A literal ``$`` in the C is written ``$$``.
The file is read as ASCII with universal newlines, so the output has ``\\n`` line ends whatever the
checkout does.

Standard library only.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
import string

#: A section's marker line.
SECTION_MARKER = re.compile(r"^//@ (\w+)\n", re.M)


@functools.cache
def template_sections(package: str, file_name: str) -> dict[str, string.Template]:
    """The sections of the package-data file ``file_name`` of ``package``, by name, in file order.

    ``package`` is the importable package that holds the file (pass the caller's ``__package__``,
    e.g. ``bnc_deploy.runtimes``). Raises :class:`ValueError` for a file without sections, a
    duplicated section name, or a section that does not end with a newline (a bug in the file, not
    a user error). The result is cached: treat it as read-only.
    """
    text = (importlib.resources.files(package) / file_name).read_text(encoding="ascii")
    parts = SECTION_MARKER.split(text)  # [preamble, name, body, name, body, ...]
    sections: dict[str, string.Template] = {}
    for section, body in zip(parts[1::2], parts[2::2]):
        if section in sections or not body.endswith("\n"):
            raise ValueError(f"{package}/{file_name}: section {section!r} is duplicated or does not end with a newline")
        sections[section] = string.Template(body)
    if not sections:
        raise ValueError(f"{package}/{file_name}: no '//@ NAME' section markers")
    return sections
