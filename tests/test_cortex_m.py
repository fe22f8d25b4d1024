"""Exported C on emulated Cortex-M (``bnc_deploy.targets.cortex_m``): arm-none-eabi-gcc + qemu-system-arm.

The emulated checks are marked ``slow`` and skipped, with the reason, when the Debian packages
``gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm`` are not installed, unless
``BNC_DEPLOY_REQUIRE_CORTEX_M=1`` (CI sets it once it has installed them: then they fail). The
helpers and the missing-toolchain error are tested without them.
"""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest

from bnc_deploy.artifacts import load_artifact, save_artifact
from bnc_deploy.formats.c import read_c_metadata
from bnc_deploy.formats.checkset import N_RANDOM_ROWS
from bnc_deploy.formats.integrity import IntegrityError
from bnc_deploy.targets import cortex_m, cortex_m_build
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact
from bnc_deploy.verify import build

MISSING = cortex_m_build.tools_available()
#: CI sets this after installing the Debian packages: then a missing tool fails instead of skipping.
REQUIRED = os.environ.get("BNC_DEPLOY_REQUIRE_CORTEX_M", "") not in ("", "0")
needs_toolchain = pytest.mark.skipif(
    MISSING is not None and not REQUIRED, reason=f"Cortex-M toolchain not installed: {MISSING}"
)


def _nb():
    return random_bnc_artifact(np.random.default_rng(31), d=7, n_classes=4, tan=False, bits=3, int_bits=2, n_check=30)


def _tan():
    return random_bnc_artifact(np.random.default_rng(32), d=6, n_classes=5, tan=True, bits=5, int_bits=3, n_check=30)


def _header(artifact, path, **options):
    """The sealed C export (built and sealed as the verifier does; not run on the host)."""
    data, _ = build(artifact, "c", **options)
    path.write_bytes(data)
    return path


# -- without the toolchain ------------------------------------------------------------------------
def test_missing_toolchain_is_a_usage_error_naming_the_packages(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    a = _nb()
    save_artifact(a, tmp_path / "m.bnc")
    assert cortex_m.main([str(tmp_path / "m.bnc")]) == 2
    err = capsys.readouterr().err
    for package in cortex_m_build.DEBIAN_PACKAGES:
        assert package in err
    assert cortex_m_build.tools_available() is not None


def test_sources_are_rendered_from_package_data():
    """startup.c and link.ld are filled in from cortex_m_sources.c / cortex_m_link.ld; the driver and
    footprint templates take exactly the placeholders cortex_m_build fills in."""
    from bnc_deploy.targets import cortex_m_sources as sources

    assert sources.STARTUP_C.startswith("/* Bare-metal start-up")
    assert f"_exit({sources.FAULT_EXIT});" in sources.STARTUP_C
    assert "FLASH (rx)  : ORIGIN = 0x00000000, LENGTH = 4194304" in sources.LINK_LD
    assert "RAM   (rwx) : ORIGIN = 0x20000000, LENGTH = 4194304" in sources.LINK_LD
    assert f". += {sources.STACK_BYTES}; __stack_top__" in sources.LINK_LD
    for text in (sources.STARTUP_C, sources.LINK_LD):
        assert "$" not in text and "//@" not in text and text.endswith("}\n")
    assert set(sources.DRIVER_C.get_identifiers()) == {"P", "M", "sentinel", "max_printed", "calibration"}
    assert set(sources.FOOTPRINT_C.get_identifiers()) == {"P"}
    driver = cortex_m_build.driver_source("my_model")
    assert "my_model_log_joint(invalid_x[r], scores)" in driver and "MY_MODEL_N_CLASSES" in driver
    assert "$" not in driver


def test_size_and_callgraph_parsers():
    sections = cortex_m_build.parse_size_a(
        "x.o  :\nsection size addr\n.text.f 40 0\n.rodata.bnc_codes 12 0\n.debug_info 99 0\nTotal 151\n"
    )
    assert sections == {".text.f": 40, ".rodata.bnc_codes": 12, ".debug_info": 99}
    ci = (
        'node: { title: "f" label: "f\\na.c:1:5\\n16 bytes (static)" }\n'
        'node: { title: "a.c:g" label: "g\\nm.h:3:1\\n32 bytes (static)" }\n'
        'edge: { sourcename: "f" targetname: "a.c:g" label: "x" }\n'
        'edge: { sourcename: "a.c:g" targetname: "__aeabi_fcmpgt" label: "y" }\n'
    )
    assert cortex_m_build._stack_from_callgraph(ci, "f") == (48, ["__aeabi_fcmpgt"], True)


def test_rows_header_types_and_expected_values():
    a = _nb()
    rows = cortex_m.check_rows(a, n_random=8)
    assert rows.x.shape == (30 + 8, 7) and rows.n_given == 30
    from bnc_deploy.reference import ReferencePredictor

    ref = ReferencePredictor(a)
    assert np.array_equal(rows.sums, ref.integer_scores(rows.x))
    assert np.array_equal(rows.labels, ref.predict(rows.x))
    # one invalid row per feature: code = cardinality
    assert rows.invalid.shape == (7, 7) and all(rows.invalid[i, i] == a.cardinalities[i] for i in range(7))
    text = cortex_m_build.rows_header(rows, 7, 4, 3)
    assert "static const uint8_t check_sum[38][4]" in text and "#define N_CHECK 38u" in text


# -- emulated ------------------------------------------------------------------------------------
@pytest.mark.slow
@needs_toolchain
@pytest.mark.parametrize("make", [_nb, _tan], ids=["nb-3bit", "tan-5bit"])
def test_all_rows_pass_on_all_four_boards(make, tmp_path):
    a = make()
    path = _header(a, tmp_path / "m.h")
    report = cortex_m.check_header(path, a, workdir=tmp_path / "build")
    assert report["ok"], cortex_m.format_report(report)
    assert [b["board"] for b in report["boards"]] == ["mps2-an385", "mps2-an386", "mps2-an500", "microbit"]
    table_bytes = read_c_metadata(path)["table_bytes"]  # one byte per code, rows padded to 32-bit words
    for b in report["boards"]:
        assert b["passed"] == b["n_rows"] == 30 + N_RANDOM_ROWS
        assert (b["failed"], b["invalid_failed"], b["exit_codes"], b["errors"]) == (0, 0, [0], [])
        m = b["model"]
        assert m["codes_bytes"] == table_bytes == 4 * -(-a.n_classes // 4) * (1 + a.n_rows)
        assert m["data_bss_bytes"] == 0 and m["stack_bytes"] > 0 and m["external_calls"] == []
        assert m["compiler_warnings"] == "" and b["compiler_warnings"] == []
        ins = b["instructions"]
        # the MPS2 CMSDK timer ticks at 25 MHz, the micro:bit's nRF51 TIMER0 at 16 MHz (1 instruction = 1 ns)
        tick = 62.5 if b["board"] == "microbit" else 40.0
        assert ins["available"] and ins["instructions_per_tick"] == pytest.approx(tick, rel=1e-3)
        assert ins["predict_per_row"] > a.n_features  # at least one instruction per feature
    assert report["size_bits"] == a.size_bits


def _lanes(seed, *, d, n_classes, bits, tan=False, int_bits=2):
    return random_bnc_artifact(
        np.random.default_rng(seed), d=d, n_classes=n_classes, tan=tan, bits=bits, int_bits=int_bits, n_check=20
    )


#: One model per kernel path of the header: 8-bit lanes in one block and in two (37 classes: 10 words), 16-bit
#: lanes (with B = 7, whose packed groups take two windows) in one block and in two (19 classes: 5 words), and the
#: scalar kernel (258 * 255 > 65535).
KERNEL_MODELS = {
    "lanes8-c5": lambda: _lanes(41, d=9, n_classes=5, bits=3),
    "lanes8-c37-tan": lambda: _lanes(42, d=5, n_classes=37, bits=2, tan=True),
    "lanes16-b7-c6": lambda: _lanes(43, d=6, n_classes=6, bits=7, int_bits=3),
    "lanes16-c19-tan": lambda: _lanes(44, d=8, n_classes=19, bits=5, tan=True),
    "scalar-b8": lambda: random_bnc_artifact(
        np.random.default_rng(45),
        tan=False,
        bits=8,
        int_bits=4,
        n_classes=3,
        cardinalities=[256] + [1] * 256,
        n_check=10,
    ),
}


@pytest.mark.slow
@needs_toolchain
@pytest.mark.parametrize("pack", [False, True], ids=["lanes", "packed"])
@pytest.mark.parametrize("model", list(KERNEL_MODELS))
def test_every_kernel_path_is_exact_on_every_board(model, pack, tmp_path):
    """The DSP path (M4, M7), the plain 32-bit path (M3) and Thumb-1 (M0) of each kernel give the reference's labels
    and scores on every row, invalid rows refused."""
    a = KERNEL_MODELS[model]()
    path = _header(a, tmp_path / "m.h", pack_bits=pack)
    assert read_c_metadata(path)["kernel"] == model.split("-")[0]
    report = cortex_m.check_header(path, a, footprint=False, rows=cortex_m.check_rows(a, n_random=64))
    assert report["ok"], cortex_m.format_report(report)
    assert all(b["passed"] == b["n_rows"] and b["invalid_failed"] == 0 for b in report["boards"])


@pytest.mark.slow
@needs_toolchain
def test_packed_codes_pass_and_take_b_theta_bits(tmp_path):
    a = _tan()
    report = cortex_m.check_header(_header(a, tmp_path / "m.h", pack_bits=True), a, boards=["mps2-an385"])
    assert report["ok"], cortex_m.format_report(report)
    assert report["boards"][0]["model"]["codes_bytes"] == math.ceil(a.size_bits / 8) + 3  # + the window guard


@pytest.mark.slow
@needs_toolchain
def test_the_harness_fails_on_a_wrong_expected_value(tmp_path):
    a = _nb()
    rows = cortex_m.check_rows(a)
    rows.sums[5, 1] += 1  # one wrong expected score
    rows.labels[7] = (rows.labels[7] + 1) % a.n_classes  # one wrong expected label
    report = cortex_m.check_header(_header(a, tmp_path / "m.h"), a, boards=["mps2-an385"], rows=rows, footprint=False)
    b = report["boards"][0]
    assert not report["ok"]
    assert (b["failed"], b["passed"], b["failed_rows"], b["exit_codes"]) == (2, b["n_rows"] - 2, [5, 7], [2])
    assert b["failures"][0]["row"] == 5 and b["failures"][0]["scores"] != b["failures"][0]["expected_scores"]
    assert "row 5" in cortex_m.format_report(report)


@pytest.mark.slow
@needs_toolchain
def test_a_tampered_table_is_caught_on_the_target(tmp_path):
    a = _nb()
    path = _header(a, tmp_path / "m.h")
    text = path.read_text()
    start = text.index("/* class prior */ ") + len("/* class prior */ ")
    first = text[start : text.index(",", start)]  # the prior's first lane word: class 0 in its low byte
    word = int(first.rstrip("u"), 16)
    tampered = (word & ~0xFF) | (((word & 0xFF) + 1) % 8)
    path.write_text(text[:start] + f"0x{tampered:08x}u" + text[start + len(first) :])
    with pytest.raises(IntegrityError):
        cortex_m.check_header(path, a, boards=["mps2-an385"])
    report = cortex_m.check_header(path, a, boards=["mps2-an385"], verify_integrity=False, footprint=False)
    b = report["boards"][0]
    assert not report["ok"] and b["failed"] > 0 and b["exit_codes"] == [min(b["failed"], 254)]


@pytest.mark.slow
@needs_toolchain
def test_raw_inputs_and_several_programs(tmp_path, monkeypatch):
    cuts = [[-1.5, 0.25, 3.0], [0.1], [], [2.0, 2.0000001, 7.5]]
    a = random_bnc_artifact(
        np.random.default_rng(5),
        tan=True,
        bits=4,
        int_bits=2,
        n_classes=3,
        cardinalities=[len(c) + 1 for c in cuts],
        discretizer=discretizer_dict(cuts),
    )
    monkeypatch.setitem(cortex_m_build.FAMILY_ROW_BYTES, "mps2", 4000)  # split the rows over several programs
    report = cortex_m.check_header(
        _header(a, tmp_path / "m.h", raw_inputs=True), a, boards=["mps2-an386"], footprint=False
    )
    b = report["boards"][0]
    assert report["ok"], cortex_m.format_report(report)
    assert report["rows"]["n_programs"] >= 2 and report["rows"]["n_raw"] == b["n_rows"] + 3
    assert b["raw_failed"] == 0 and b["passed"] == b["n_rows"]


@pytest.mark.slow
@needs_toolchain
def test_cli_header_needs_its_own_model(tmp_path, capsys):
    save_artifact(_nb(), tmp_path / "m.bnc")
    save_artifact(_tan(), tmp_path / "other.bnc")
    header = _header(load_artifact(tmp_path / "m.bnc"), tmp_path / "m.h")  # as bnc-export does
    assert cortex_m.main([str(header)]) == 2
    assert "--model" in capsys.readouterr().err
    assert cortex_m.main([str(header), "--model", str(tmp_path / "other.bnc")]) == 2
    assert "not exported from this model" in capsys.readouterr().err
    assert (
        cortex_m.main(
            [str(header), "--model", str(tmp_path / "m.bnc"), "--board", "mps2-an500", "--json", "--random", "16"]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["boards"][0]["passed"] == 30 + 16


SELF_TEST_MAIN = r"""
#include <stdio.h>
#include "model.h"
int main(void);
int main(void)
{
    uint16_t p[BNC_N_CLASSES];
    int c, rc = bnc_predict_proba(bnc_self_test_x[3], p);
    printf("PROBA %d", rc);
    for (c = 0; c < BNC_N_CLASSES; ++c) {
        printf(" %u", (unsigned)p[c]);
    }
    printf("\n");
    return bnc_self_test();
}
"""


def _self_test_image(header: str, workdir, tools):
    """An image for the Cortex-M4 board around ``header``: prints predict_proba of self-test row 3,
    exits with bnc_self_test()."""
    from bnc_deploy.targets import cortex_m_sources

    workdir.mkdir(parents=True, exist_ok=True)
    files = {"startup.c": cortex_m_sources.STARTUP_C, "link.ld": cortex_m_sources.LINK_LD, "model.h": header}
    for name, text in {**files, "main.c": SELF_TEST_MAIN}.items():
        (workdir / name).write_text(text, encoding="ascii")
    cpu = cortex_m_build.BOARDS["mps2-an386"][0]
    cmd = [tools.gcc, f"-mcpu={cpu}", *cortex_m_build.CFLAGS, "-Werror", *cortex_m_build.LDFLAGS, "-T", "link.ld"]
    warnings = cortex_m_build._compile([*cmd, "startup.c", "main.c", "-o", "image.elf"], workdir, "self-test image")
    assert warnings == ""
    return workdir / "image.elf"


@pytest.mark.slow
@needs_toolchain
def test_self_test_and_predict_proba_on_the_cortex_m4_board(tmp_path):
    """PREFIX_self_test() returns 0 on the emulated Cortex-M4, and the index of an edited expected label;
    PREFIX_predict_proba gives the host's integer answer (no division helper, no float)."""
    from test_export_c_selftest import proba_model

    from bnc_deploy.exporters.c_bnc import exp_q31_table
    from bnc_deploy.reference import ReferencePredictor

    a = _nb()
    header = _header(a, tmp_path / "m.h").read_text()
    tools = cortex_m_build.find_tools(["mps2-an386"])
    run = cortex_m_build.run_image(_self_test_image(header, tmp_path / "ok", tools), "mps2-an386", tools)
    assert run.exit_code == 0, run.stdout
    line = next(line for line in run.stdout.splitlines() if line.startswith("PROBA "))
    got = [int(v) for v in line.split()[1:]]
    sums = ReferencePredictor(a).integer_scores(np.asarray(a.check_x[3:4], dtype=np.int64))
    terms = int(header.split("#define BNC_EXP_TERMS ")[1].split()[0])
    assert got[0] == 0 and got[1:] == proba_model(sums, exp_q31_table(a.quantizer.frac_bits, terms), terms)[0].tolist()
    # an edited expected label (row 13): self_test names that row
    start = header.index("{", header.index(" bnc_self_test_label["))
    end = header.index("};", start)
    labels = [int(v) for v in header[start:end].replace("{", " ").replace(",", " ").split()]
    labels[12] = (labels[12] + 1) % a.n_classes
    edited = header[:start] + "{\n    " + ", ".join(map(str, labels)) + ",\n" + header[end:]
    run = cortex_m_build.run_image(_self_test_image(edited, tmp_path / "edited", tools), "mps2-an386", tools)
    assert run.exit_code == 13, run.stdout


@pytest.mark.slow
@needs_toolchain
@pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "cc")) is None,
    reason="exporting a .bnc verifies the C file in the native runtime, which needs a host C compiler",
)
def test_cli_exports_a_model_file_itself(tmp_path, capsys):
    save_artifact(_tan(), tmp_path / "m.bnc")
    assert cortex_m.main([str(tmp_path / "m.bnc"), "--pack-bits", "--board", "mps2-an385", "--random", "8"]) == 0
    out = capsys.readouterr().out
    assert "PASS: 1 of 1 boards" in out and "packed5" in out and "not cycle-accurate" in out
