"""Library folders around a verified C header: ``bnc-export MODEL --format c --package cmake|arduino -o DIR``.

This module writes files only; it never builds or changes the header. The command exports the
header through the one verifier (:func:`bnc_deploy.verify.export_file`) into the staged folder
at :func:`header_path`, then :func:`write_package` adds the files around it, reading what it
needs (prefix, self-test, model facts) from the header's own metadata, and :func:`publish_package`
renames the folder into place. So the packaged header is byte for byte what ``--format c`` writes
for the same model and options.

Kinds
-----
``cmake``
    ``CMakeLists.txt`` (an INTERFACE library target named after the prefix, its ``include``
    folder and ``c_std_99``; the example behind the option ``<PREFIX>_BUILD_EXAMPLES``, ON when
    the folder is the top-level project), ``include/<prefix>.h``, ``examples/self_test.c`` (runs
    ``<prefix>_self_test()`` and ``<prefix>_predict`` on the first self-test row; exit status 0
    when both agree with the model; without a self-test, one prediction of the all-zero row) and
    ``README.md``.
``arduino``
    An Arduino library in the 1.5 library format: ``library.properties``, ``src/<prefix>.h``,
    ``examples/<Name>/<Name>.ino`` (the same checks in ``setup()``, printed over ``Serial``) and
    ``README.md``. The header is C99 and C++ alike (``static inline`` functions: internal linkage,
    no ``extern "C"`` needed); ``--raw-inputs`` headers hold hexadecimal float literals, which C++
    accepts from C++17 on or as the GNU extension (``-std=gnu++11``, what Arduino cores use).

Atomicity: :func:`staged_package` makes a uniquely named hidden sibling folder ``.DIR.<random>.tmp``
and removes it whatever happens unless :func:`publish_package` renamed it to ``DIR``;
:func:`check_package_dir` refuses, before any work, a ``DIR`` that is a file or a non-empty folder
(``bnc-export`` has no overwrite flag). A process killed with SIGKILL can leave a staged folder
behind, never a half-written ``DIR``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

from bnc_deploy.errors import OutputError
from bnc_deploy.fileio import same_file, writable_folder_of
from bnc_deploy.formats.c import check_c_name, read_c_metadata

#: ``--package`` choices.
PACKAGE_KINDS = ("cmake", "arduino")
#: Folder of the header in each kind of package.
HEADER_FOLDER = {"cmake": "include", "arduino": "src"}
#: Oldest CMake the generated CMakeLists.txt asks for (``target_compile_features`` of ``c_std_99``
#: and relative INTERFACE include folders).
CMAKE_MINIMUM = "3.13"
#: library.properties ``url``: a placeholder (example.com is reserved for documentation) that the
#: package README says to replace with the library's page before publishing it.
PROJECT_URL = "https://example.com/replace-with-the-library-page"
STRUCTURES = {"nb": "naive Bayes", "tan": "tree-augmented naive Bayes (TAN)"}


def header_path(kind: str, prefix: str) -> PurePosixPath:
    """Where the header goes inside a ``kind`` package: ``include/<prefix>.h`` or ``src/<prefix>.h``."""
    if kind not in HEADER_FOLDER:
        raise ValueError(f"unknown package kind {kind!r}; expected one of {PACKAGE_KINDS}")
    return PurePosixPath(HEADER_FOLDER[kind]) / f"{check_c_name(prefix)}.h"


def check_package_dir(path: str | os.PathLike[str], *, inputs: tuple[str | os.PathLike[str] | None, ...] = ()) -> Path:
    """``path`` if a package can be published there: missing or an empty folder, writable parent.

    Raises OutputError naming the path (before any work is done).
    """
    path = Path(path)
    if path.name in ("", ".", ".."):
        raise OutputError(f"package folder {path}: give the folder's own name (e.g. ../{Path.cwd().name})")
    for other in inputs:
        if other is not None and same_file(path, Path(other)):
            raise OutputError(f"package folder {path} is the input file {other}")
    if path.exists() and not path.is_dir():
        raise OutputError(f"package folder {path} exists and is not a folder")
    if path.is_dir() and any(path.iterdir()):
        raise OutputError(f"package folder {path} exists and is not empty; remove it or give a new folder")
    writable_folder_of(path, "package")
    return path


@contextmanager
def staged_package(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A new empty hidden folder beside ``path`` to build the package in; removed on leaving the
    block unless :func:`publish_package` moved it to ``path``."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    stage = None
    for _ in range(100):
        candidate = parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            candidate.mkdir()  # the umask's permissions, as an ordinary mkdir DIR would give
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputError(f"cannot write package {path}: {exc.strerror or exc}") from None
        stage = candidate
        break
    if stage is None:  # pragma: no cover - 100 collisions of 32 random bits
        raise OutputError(f"cannot write package {path}: no free temporary name beside it")
    try:
        yield stage
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def publish_package(stage: Path, path: str | os.PathLike[str]) -> None:
    """Rename the finished ``stage`` to ``path`` (missing or an empty folder); OutputError otherwise."""
    path = Path(path)
    try:
        os.rename(stage, path)  # POSIX: replaces an empty folder, fails on a non-empty one
    except OSError as exc:
        if path.is_dir() and any(path.iterdir()):
            raise OutputError(f"package folder {path} was filled by another writer; nothing was published") from None
        raise OutputError(f"cannot write package {path}: {exc.strerror or exc}") from None


def write_package(stage: Path, kind: str, header: PurePosixPath) -> list[str]:
    """Write the files of a ``kind`` package around ``stage / header`` (already there, verified).

    Returns every file of the package, header included, as sorted POSIX paths relative to ``stage``.
    """
    meta = read_c_metadata(stage / header)
    prefix = check_c_name(meta.get("c_name"), "the header's c_name")
    if header != header_path(kind, prefix):
        raise ValueError(f"the header of a {kind} package of {prefix!r} belongs at {header_path(kind, prefix)}")
    facts = _facts(meta)
    if kind == "cmake":
        files = {
            "CMakeLists.txt": cmake_lists(prefix, facts),
            "examples/self_test.c": c_example(prefix, self_test=facts["self_test"]),
            "README.md": cmake_readme(prefix, facts),
        }
    else:
        sketch = sketch_name(facts["self_test"])
        files = {
            "library.properties": library_properties(prefix, facts),
            f"examples/{sketch}/{sketch}.ino": arduino_sketch(prefix, self_test=facts["self_test"]),
            "README.md": arduino_readme(prefix, facts),
        }
    for relative, text in files.items():
        target = stage / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    return sorted([*files, str(header)])


def _facts(meta: dict[str, Any]) -> dict[str, Any]:
    """What the package files say about the model, from the header's metadata."""
    version = re.match(r"\d+\.\d+\.\d+", str(meta.get("toolkit_version", "")))
    return {
        "self_test": bool(meta.get("self_test")),
        "structure": STRUCTURES.get(str(meta.get("structure")), "Bayesian network"),
        "n_features": meta.get("n_features"),
        "n_classes": meta.get("n_classes"),
        "bits": meta.get("bits"),
        "raw_inputs": meta.get("input") == "raw",
        "sha256": meta.get("artifact_sha256"),
        "version": version.group(0) if version else "0.0.0",
    }


def _summary(facts: dict[str, Any]) -> str:
    return (
        f"a {facts['structure']} classifier ({facts['n_features']} features, {facts['n_classes']} classes, "
        f"{facts['bits']}-bit parameters) in integer arithmetic"
    )


def cmake_lists(prefix: str, facts: dict[str, Any]) -> str:
    macro = prefix.upper()
    return f"""\
# {prefix}: {_summary(facts)}, a header-only C99 library
# generated by bnc-deploy {facts["version"]} (bnc-export --format c --package cmake).
cmake_minimum_required(VERSION {CMAKE_MINIMUM})
project({prefix} VERSION {facts["version"]} LANGUAGES C)

add_library({prefix} INTERFACE)
target_include_directories({prefix} INTERFACE include)
target_compile_features({prefix} INTERFACE c_std_99)

if(CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
  set(_{prefix}_top_level ON)
else()
  set(_{prefix}_top_level OFF)
endif()
option({macro}_BUILD_EXAMPLES "Build the example examples/self_test.c" ${{_{prefix}_top_level}})
if({macro}_BUILD_EXAMPLES)
  add_executable({prefix}_self_test examples/self_test.c)
  target_link_libraries({prefix}_self_test PRIVATE {prefix})
endif()
"""


def c_example(prefix: str, *, self_test: bool) -> str:
    macro = prefix.upper()
    head = f"""\
/* examples/self_test.c: {"runs " + prefix + "_self_test() and" if self_test else "runs"} one {prefix}_predict;
 * exit status 0 when {"both agree with the model" if self_test else "it returns a class"}. */
#include <stdio.h>
#include "{prefix}.h"

int main(void)
{{
"""
    if not self_test:
        return head + (
            f"    static const uint8_t x[{macro}_N_FEATURES] = {{0}}; /* code 0 of every feature (always valid) */\n"
            f"    int label = {prefix}_predict(x);\n"
            f'    printf("{prefix}_predict(all codes 0) = %d\\n", label);\n'
            f"    return label >= 0 && label < {macro}_N_CLASSES ? 0 : 1;\n"
            "}\n"
        )
    return head + (
        f"    int failed = {prefix}_self_test(); /* 0, or the 1-based index of the first row that differs */\n"
        f"    int label = {prefix}_predict({prefix}_self_test_x[0]);\n"
        f"    int expected = (int){prefix}_self_test_label[0];\n"
        "    if (failed != 0) {\n"
        f'        printf("{prefix}_self_test: row %d FAILED\\n", failed);\n'
        "    } else {\n"
        f'        printf("{prefix}_self_test: %d rows passed\\n", (int){macro}_SELF_TEST_ROWS);\n'
        "    }\n"
        f'    printf("{prefix}_predict(self-test row 1) = %d (expected %d)\\n", label, expected);\n'
        "    return failed == 0 && label == expected ? 0 : 1;\n"
        "}\n"
    )


def cmake_readme(prefix: str, facts: dict[str, Any]) -> str:
    macro = prefix.upper()
    check = f"`{prefix}_self_test()` and " if facts["self_test"] else ""
    return f"""\
# {prefix}

{_summary(facts)[0].upper() + _summary(facts)[1:]}, as a header-only C99 library
(`include/{prefix}.h`; only `<stdint.h>`, no malloc, no static state). Generated by bnc-deploy
{facts["version"]} with `bnc-export MODEL --format c --package cmake` from the model with content
SHA-256 `{facts["sha256"]}`; the header was verified against that model (bit-identical labels and
scores) before this folder was written. Do not edit the header: its integrity digest covers every byte.
Its first comment documents the API (`{prefix}_predict`, `{prefix}_log_joint`, `{prefix}_predict_proba`, ...).

## Use it from CMake

```cmake
add_subdirectory(path/to/this/folder)          # or FetchContent, below
target_link_libraries(your_app PRIVATE {prefix})
```

```cmake
include(FetchContent)
FetchContent_Declare({prefix} URL https://example.com/{prefix}.tar.gz)   # or GIT_REPOSITORY ... GIT_TAG ...
FetchContent_MakeAvailable({prefix})
target_link_libraries(your_app PRIVATE {prefix})
```

Then `#include "{prefix}.h"` in C99 or C++ sources. The target `{prefix}` is an INTERFACE library:
it adds the `include` folder and requires C99 (`c_std_99`), nothing is compiled for it. The project
that links it must enable C, also when its own sources are C++: `project(your_app LANGUAGES C CXX)`.

## Example

`examples/self_test.c` runs {check}one `{prefix}_predict` and exits with 0 when they agree with
the model. It is built when this folder is the top-level project (option `{macro}_BUILD_EXAMPLES`):

```bash
cmake -S . -B build && cmake --build build && ./build/{prefix}_self_test
```

Cross-compiling for a Cortex-M4 (bare metal, newlib):

```bash
cmake -S . -B build-m4 -DCMAKE_SYSTEM_NAME=Generic -DCMAKE_C_COMPILER=arm-none-eabi-gcc \\
  -DCMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY -DCMAKE_C_FLAGS="-mcpu=cortex-m4 -mthumb -Os" \\
  -DCMAKE_EXE_LINKER_FLAGS="--specs=nosys.specs" && cmake --build build-m4
```
"""


def sketch_name(self_test: bool) -> str:
    """The Arduino example's name (its folder and ``.ino`` file)."""
    return "SelfTest" if self_test else "Predict"


def library_properties(prefix: str, facts: dict[str, Any]) -> str:
    what = _summary(facts)
    check = (
        f" {prefix}_self_test() checks at boot that the board computes what the model file does."
        if facts["self_test"]
        else ""
    )
    return (
        f"name={prefix}\n"
        f"version={facts['version']}\n"
        "author=bnc-deploy\n"
        "maintainer=bnc-deploy\n"
        f"sentence={what[0].upper() + what[1:]}, generated by bnc-deploy.\n"
        f"paragraph=A header-only library (C99 and C++, <stdint.h> only, no malloc): {prefix}_predict, "
        f"{prefix}_log_joint and {prefix}_predict_proba, bit-identical with the model file it was "
        f"exported from (verified before it was written).{check}\n"
        "category=Data Processing\n"
        f"url={PROJECT_URL}\n"
        "architectures=*\n"
        f"includes={prefix}.h\n"
    )


def arduino_sketch(prefix: str, *, self_test: bool) -> str:
    macro = prefix.upper()
    name = sketch_name(self_test)
    lines = [
        f"// {name}.ino: {'runs ' + prefix + '_self_test() and ' if self_test else 'runs '}one {prefix}_predict "
        "at boot and prints the results over Serial.",
        f"#include <{prefix}.h>",
        "",
        "void setup() {",
        "  Serial.begin(115200);",
        "  while (!Serial) {",
        "    // boards with native USB: wait for the serial monitor",
        "  }",
    ]
    if self_test:
        lines += [
            f"  const int failed = {prefix}_self_test();  // 0, or the 1-based index of the first row that differs",
            "  if (failed == 0) {",
            f'    Serial.print("{prefix}_self_test: passed, rows: ");',
            f"    Serial.println({macro}_SELF_TEST_ROWS);",
            "  } else {",
            f'    Serial.print("{prefix}_self_test: FAILED at row ");',
            "    Serial.println(failed);",
            "  }",
            f'  Serial.print("{prefix}_predict(self-test row 1) = ");',
            f"  Serial.print({prefix}_predict({prefix}_self_test_x[0]));",
            '  Serial.print(", expected ");',
            f"  Serial.println((int){prefix}_self_test_label[0]);",
        ]
    else:
        lines += [
            f"  static const uint8_t x[{macro}_N_FEATURES] = {{0}};  // code 0 of every feature (always valid)",
            f'  Serial.print("{prefix}_predict(all codes 0) = ");',
            f"  Serial.println({prefix}_predict(x));",
        ]
    lines += ["}", "", "void loop() {", "}", ""]
    return "\n".join(lines)


def arduino_readme(prefix: str, facts: dict[str, Any]) -> str:
    sketch = sketch_name(facts["self_test"])
    raw = (
        "\nThe header holds hexadecimal float literals (`--raw-inputs`): C++ accepts them from C++17 on, or as the\n"
        "GNU extension that Arduino's `-std=gnu++11` / `gnu++17` cores enable.\n"
        if facts["raw_inputs"]
        else ""
    )
    return f"""\
# {prefix} (Arduino library)

{_summary(facts)[0].upper() + _summary(facts)[1:]}, generated by bnc-deploy {facts["version"]}
(`bnc-export MODEL --format c --package arduino`) from the model with content SHA-256
`{facts["sha256"]}`. `src/{prefix}.h` was verified against that model (bit-identical labels and
scores) before this folder was written; do not edit it (its integrity digest covers every byte).

Install: copy this folder to your sketchbook's `libraries/` folder (or zip it and use
Sketch > Include Library > Add .ZIP Library), then `#include <{prefix}.h>`; the example is
File > Examples > {prefix} > {sketch}. The header's first comment documents the API.

The tables are `static const` arrays: in flash on ARM, ESP32 and most 32-bit cores, but in SRAM
on AVR boards (Uno, Mega), where a large model may not fit. Edit `author`, `maintainer` and `url` in
`library.properties` before publishing the library.
{raw}"""
