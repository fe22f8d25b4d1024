"""``bnc-export --format c --package cmake|arduino``: library folders around the verified header
(``bnc_deploy/formats/c_package.py``).

The CMake package is configured, built and its example run on the host, linked from a C++ project
through ``add_subdirectory``, and cross-built for Cortex-M4 with arm-none-eabi-gcc. The Arduino
package's example sketch is compiled as C++ with g++ (and run, a stub standing in for ``Serial``) and
with arm-none-eabi-g++. Missing tools skip with the reason, unless ``BNC_DEPLOY_REQUIRE_CORTEX_M=1``
(CI sets it once the Debian packages of ``.ci/run``'s ``need=()``, cmake and g++ among them, are
installed): then they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bnc_deploy.artifacts import save_artifact
from bnc_deploy.cli.export import main
from bnc_deploy.formats import c_package
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact

#: CI sets this after installing the Debian packages: then a missing tool fails instead of skipping.
REQUIRED = os.environ.get("BNC_DEPLOY_REQUIRE_CORTEX_M", "") not in ("", "0")
CUTS = [[0.5], [-1.0, 0.0, 1.5], [2.0, 3.0], [0.25, 0.5, 0.75, 1.0], []]
#: Host compile of the Arduino example: what an Arduino core's C++ accepts, strictly.
GXX_FLAGS = ["-std=gnu++11", "-Wall", "-Wextra", "-Werror"]
ARM_GXX_FLAGS = ["-mcpu=cortex-m4", "-mthumb", "-Os", "-std=gnu++11", "-fno-exceptions", "-fno-rtti", *GXX_FLAGS[1:]]
#: Stands in for Arduino.h on the host: the Serial calls of the examples, written to stdout.
SERIAL_STUB = r"""
#include <stdint.h>
#include <stdio.h>
struct FakeSerial {
    void begin(unsigned long) {}
    operator bool() const { return true; }
    void print(const char *s) { printf("%s", s); }
    void print(int v) { printf("%d", v); }
    template <typename T> void println(T v) { print(v); printf("\n"); }
};
static FakeSerial Serial;
#include "SKETCH"
int main() { setup(); loop(); return 0; }
"""


def need(*tools: str) -> None:
    """Skip (fail when REQUIRED) unless every tool is on PATH."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        reason = f"not installed: {', '.join(missing)} (Debian: cmake, g++, gcc-arm-none-eabi)"
        if REQUIRED:
            pytest.fail(reason + " - required by BNC_DEPLOY_REQUIRE_CORTEX_M=1")
        pytest.skip(reason)


def run(cmd, cwd=None, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(autouse=True)
def native_cache(tmp_path_factory, monkeypatch):
    """Compiled libraries of the native runtime (the verifier) go to a per-session folder."""
    monkeypatch.setenv("BNC_DEPLOY_NATIVE_CACHE", str(tmp_path_factory.getbasetemp() / "native-cache"))


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A random quantized TAN model trained on raw values (so --raw-inputs applies too)."""
    artifact = random_bnc_artifact(
        np.random.default_rng(29),
        tan=True,
        bits=4,
        int_bits=2,
        n_classes=4,
        cardinalities=[len(c) + 1 for c in CUTS],
        discretizer=discretizer_dict(CUTS),
        n_check=30,
    )
    path = tmp_path_factory.mktemp("model") / "m.bnc"
    save_artifact(artifact, path)
    return path


def export(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def package(capsys, model: Path, kind: str, folder: Path, *options: str) -> Path:
    code, _, err = export(capsys, model, "--format", "c", "--package", kind, "-o", folder, *options)
    assert code == 0, err
    return folder


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


# -- CMake ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options", [[], ["--no-self-test", "--name", "gesture", "--pack-bits"]], ids=["self-test", "bare"]
)
def test_cmake_package_builds_and_its_example_passes_on_the_host(capsys, tmp_path, model, options):
    need("cmake", "cc")
    folder = package(capsys, model, "cmake", tmp_path / "pkg", *options)
    prefix = "gesture" if "--name" in options else "bnc"
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert files == ["CMakeLists.txt", "README.md", "examples/self_test.c", f"include/{prefix}.h"]
    cmake = (folder / "CMakeLists.txt").read_text()
    assert f"add_library({prefix} INTERFACE)" in cmake
    assert f"target_include_directories({prefix} INTERFACE include)" in cmake
    assert f"target_compile_features({prefix} INTERFACE c_std_99)" in cmake
    assert f"option({prefix.upper()}_BUILD_EXAMPLES" in cmake
    readme = (folder / "README.md").read_text()
    assert (
        "add_subdirectory" in readme
        and "FetchContent" in readme
        and f"target_link_libraries(your_app PRIVATE {prefix})" in readme
    )
    example = (folder / "examples/self_test.c").read_text()
    assert (f"{prefix}_self_test()" in example) == ("--no-self-test" not in options)

    # the packaged header is the --format c header of the same model and options, byte for byte
    code, _, err = export(capsys, model, "--format", "c", "-o", tmp_path / "lone.h", *options)
    assert code == 0, err
    assert (folder / "include" / f"{prefix}.h").read_bytes() == (tmp_path / "lone.h").read_bytes()

    build = tmp_path / "build"
    run(["cmake", "-S", folder, "-B", build, "-DCMAKE_C_FLAGS=-Wall -Wextra -Werror -pedantic"])
    run(["cmake", "--build", build])
    done = run([build / f"{prefix}_self_test"])
    assert (" rows passed" in done.stdout) == ("--no-self-test" not in options), done.stdout


def test_cmake_package_links_from_a_cxx_project_without_its_example(capsys, tmp_path, model):
    need("cmake", "cc", "c++")
    folder = package(capsys, model, "cmake", tmp_path / "pkg")
    app = tmp_path / "app"
    app.mkdir()
    (app / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(app LANGUAGES C CXX)\n"
        f"add_subdirectory({folder.as_posix()} bnc)\n"
        "add_executable(app main.cpp)\ntarget_link_libraries(app PRIVATE bnc)\n"
    )
    (app / "main.cpp").write_text('#include "bnc.h"\nint main() { return bnc_self_test(); }\n')
    build = tmp_path / "build"
    run(["cmake", "-S", app, "-B", build, "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror"])
    run(["cmake", "--build", build])
    run([build / "app"])
    assert not (build / "bnc" / "bnc_self_test").exists()  # BNC_BUILD_EXAMPLES is OFF below a top-level project


def test_cmake_package_cross_builds_for_cortex_m4(capsys, tmp_path, model):
    need("cmake", "arm-none-eabi-gcc")
    folder = package(capsys, model, "cmake", tmp_path / "pkg", "--pack-bits")
    build = tmp_path / "build-m4"
    run(
        [
            "cmake",
            "-S",
            folder,
            "-B",
            build,
            "-DCMAKE_SYSTEM_NAME=Generic",
            "-DCMAKE_C_COMPILER=arm-none-eabi-gcc",
            "-DCMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY",
            "-DCMAKE_C_FLAGS=-mcpu=cortex-m4 -mthumb -Os -Wall -Wextra -Werror",
            "-DCMAKE_EXE_LINKER_FLAGS=--specs=nosys.specs",
        ]
    )
    run(["cmake", "--build", build])
    elf = build / "bnc_self_test"
    header = elf.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and header[4] == 1 and header[18] == 40  # 32-bit ARM (EM_ARM = 40)


# -- Arduino --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [[], ["--no-self-test"], ["--raw-inputs", "--pack-bits", "--name", "gesture"]],
    ids=["self-test", "no-self-test", "raw-packed"],
)
def test_arduino_package_is_a_library_whose_example_compiles_as_cxx(capsys, tmp_path, model, options):
    folder = package(capsys, model, "arduino", tmp_path / "Lib", *options)
    prefix = "gesture" if "--name" in options else "bnc"
    sketch = "Predict" if "--no-self-test" in options else "SelfTest"
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert files == ["README.md", f"examples/{sketch}/{sketch}.ino", "library.properties", f"src/{prefix}.h"]
    props = dict(line.split("=", 1) for line in (folder / "library.properties").read_text().splitlines())
    required = {"name", "version", "author", "maintainer", "sentence", "paragraph", "category", "url", "architectures"}
    assert required <= set(props) and all(props[k] for k in required)
    assert props["name"] == prefix and props["architectures"] == "*" and props["includes"] == f"{prefix}.h"
    assert re.fullmatch(r"\d+\.\d+\.\d+", props["version"])
    assert props["category"] == "Data Processing"
    ino = (folder / "examples" / sketch / f"{sketch}.ino").read_text()
    assert "void setup()" in ino and "void loop()" in ino and "Serial." in ino
    assert (f"{prefix}_self_test()" in ino) == ("--no-self-test" not in options)

    code, _, err = export(capsys, model, "--format", "c", "-o", tmp_path / "lone.h", *options)
    assert code == 0, err
    assert (folder / "src" / f"{prefix}.h").read_bytes() == (tmp_path / "lone.h").read_bytes()

    wrapper = tmp_path / "sketch.cc"
    wrapper.write_text(SERIAL_STUB.replace("SKETCH", f"{sketch}.ino"))
    includes = ["-I", folder / "src", "-I", folder / "examples" / sketch]
    need("g++")
    run(["g++", *GXX_FLAGS, *includes, "-x", "c++", wrapper, "-o", tmp_path / "sketch"])
    done = run([tmp_path / "sketch"])
    if "--no-self-test" in options:
        assert re.search(r"predict\(all codes 0\) = \d", done.stdout), done.stdout
    else:
        assert f"{prefix}_self_test: passed" in done.stdout, done.stdout
        label, expected = re.search(r"= (-?\d+), expected (\d+)", done.stdout).groups()
        assert label == expected
    need("arm-none-eabi-g++")
    run(["arm-none-eabi-g++", *ARM_GXX_FLAGS, *includes, "-x", "c++", "-c", wrapper, "-o", tmp_path / "sketch.o"])


# -- refusals: nothing written, nothing left behind -------------------------------------------------------
def test_package_needs_the_c_format(capsys, tmp_path, model):
    code, _, err = export(capsys, model, "--format", "onnx", "--package", "cmake", "-o", tmp_path / "pkg")
    assert code == 2 and "--package" in err and "--format c" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "pkg").exists() and leftovers(tmp_path / "pkg") == []


def test_a_non_empty_folder_is_refused_and_untouched(capsys, tmp_path, model, monkeypatch):
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    code, _, err = export(capsys, model, "--format", "c", "--package", "cmake", "-o", folder)
    assert code == 2 and "not empty" in err and len(err.strip().splitlines()) == 1
    assert [p.name for p in folder.iterdir()] == ["keep.txt"] and leftovers(folder) == []
    (tmp_path / "file").write_text("x")
    code, _, err = export(capsys, model, "--format", "c", "--package", "arduino", "-o", tmp_path / "file")
    assert code == 2 and "not a folder" in err and (tmp_path / "file").read_text() == "x"
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    code, _, err = export(capsys, model, "--format", "c", "--package", "cmake", "-o", ".")
    assert code == 2 and "folder's own name" in err and list(empty.iterdir()) == []


def test_an_empty_folder_is_filled(capsys, tmp_path, model):
    folder = tmp_path / "pkg"
    folder.mkdir()
    package(capsys, model, "arduino", folder)
    assert (folder / "library.properties").is_file() and leftovers(folder) == []


def test_a_failure_leaves_nothing_behind(capsys, tmp_path, model, monkeypatch):
    folder = tmp_path / "pkg"
    code, _, err = export(capsys, model, "--format", "c", "--package", "cmake", "--name", "9lives", "-o", folder)
    assert code == 2 and "--name" in err
    # a float model: the exporter refuses it inside the staged folder
    float_model = tmp_path / "float.bnc"
    save_artifact(random_bnc_artifact(np.random.default_rng(3), bits=None, n_check=10), float_model)
    code, _, err = export(capsys, float_model, "--format", "c", "--package", "cmake", "-o", folder)
    assert code == 2 and "quantized" in err
    assert not folder.exists() and leftovers(folder) == []

    # the header is verified and written, then writing the rest fails: no half-written folder
    def broken(stage, kind, header):
        assert (stage / header).is_file()
        (stage / "CMakeLists.txt").write_text("partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(c_package, "write_package", broken)
    code, _, err = export(capsys, model, "--format", "c", "--package", "cmake", "-o", folder)
    assert code == 2 and "No space left on device" in err
    assert not folder.exists() and leftovers(folder) == []


def test_json_reports_the_package(capsys, tmp_path, model):
    import json

    folder = tmp_path / "pkg"
    code, out, err = export(capsys, model, "--format", "c", "--package", "cmake", "-o", folder, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["published"] and report["exact"] and report["owned"]
    assert report["output"] == str(folder / "include" / "bnc.h")
    assert report["package"] == {
        "kind": "cmake",
        "dir": str(folder),
        "files": ["CMakeLists.txt", "README.md", "examples/self_test.c", "include/bnc.h"],
    }
