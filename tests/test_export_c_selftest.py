"""``PREFIX_self_test`` and ``PREFIX_predict_proba`` of the C export (``exporters/c_bnc.py``).

The generated header is compiled on the host with the strict C99 flags of ``test_export_c``:
``self_test()`` returns 0 on every variant, the 1-based index of the first failing row once a table
code, an expected label or an expected sum is edited in the header, and is absent with
``--no-self-test``. ``predict_proba`` is compared on every row with a Python model of its integer
algorithm (equal bit for bit) and with the float64 reference posterior (within the bound the header
states), on random NB/TAN models over B = 1..8 with negative, zero and positive B_F.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_export_c import BIT_CASES, CC, STRICT, bn_artifact, native_cache  # noqa: F401 (autouse fixture)

from bnc_deploy.exporters import c_bnc
from bnc_deploy.exporters.c_bnc import build_c_source, exp_q31_table, exp_terms, proba_error_bound
from bnc_deploy.formats.c import read_c_metadata
from bnc_deploy.formats.checkset import random_rows
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.verify import export_file

pytestmark = pytest.mark.skipif(CC is None, reason="the C export tests need a C compiler (cc)")

#: What predict_proba must leave in out[] for an invalid row.
UNTOUCHED = 0xA5A5

SELF_TEST_MAIN = r"""
#include <stdio.h>
#include "model.h"

int main(void)
{
    printf("%d\n", bnc_self_test());
    return 0;
}
"""

PROBA_DRIVER = r"""
#include <stdio.h>
#include "model.h"

int main(int argc, char **argv)
{
    FILE *in, *out;
    uint8_t x[BNC_N_FEATURES];
    uint16_t p[BNC_N_CLASSES];
    int32_t record[BNC_N_CLASSES + 1];
    if (argc != 3 || (in = fopen(argv[1], "rb")) == NULL || (out = fopen(argv[2], "wb")) == NULL) {
        return 2;
    }
    while (fread(x, 1, (size_t)BNC_N_FEATURES, in) == (size_t)BNC_N_FEATURES) {
        int c;
        for (c = 0; c < BNC_N_CLASSES; ++c) {
            p[c] = UNTOUCHED;
        }
        record[0] = bnc_predict_proba(x, p);
        for (c = 0; c < BNC_N_CLASSES; ++c) {
            record[c + 1] = (int32_t)p[c];
        }
        if (fwrite(record, sizeof(int32_t), (size_t)(BNC_N_CLASSES + 1), out) != (size_t)(BNC_N_CLASSES + 1)) {
            return 3;
        }
    }
    fclose(in);
    return fclose(out) == 0 ? 0 : 3;
}
"""


def compile_program(header: str, main: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.h").write_text(header)
    (folder / "main.c").write_text(f"#define UNTOUCHED {UNTOUCHED}u\n" + main)
    binary = folder / "main"
    done = subprocess.run(
        [CC, *STRICT, "-o", str(binary), str(folder / "main.c")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"the generated C does not compile cleanly:\n{done.stderr}"
    return binary


def self_test_result(header: str, folder: Path) -> int:
    done = subprocess.run([str(compile_program(header, SELF_TEST_MAIN, folder))], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def run_proba(header: str, rows: np.ndarray, n_classes: int, folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(return codes (n,), out (n, C))`` of ``bnc_predict_proba`` on ``rows``."""
    binary = compile_program(header, PROBA_DRIVER, folder)
    (folder / "in.bin").write_bytes(np.ascontiguousarray(rows, dtype=np.uint8).tobytes())
    done = subprocess.run([str(binary), str(folder / "in.bin"), str(folder / "out.bin")], capture_output=True)
    assert done.returncode == 0, done.stderr
    out = np.frombuffer((folder / "out.bin").read_bytes(), dtype=np.int32).reshape(-1, n_classes + 1)
    return out[:, 0], out[:, 1:]


def header_terms(header: str) -> int:
    return int(re.search(r"^#define BNC_EXP_TERMS (\d+)$", header, flags=re.M).group(1))


def proba_model(sums: np.ndarray, table: list[int], terms: int) -> np.ndarray:
    """The header's integer algorithm in Python ints: Q1.31 exp by the set bits of d, rounded Q0.16."""
    out = np.zeros(sums.shape, dtype=np.int64)
    for r, row in enumerate(sums.tolist()):
        low = min(row)
        e = []
        for s in row:
            d, v = s - low, 2**31
            if d >> terms:
                v = 0
            else:
                for j in range(terms):
                    if (d >> j) & 1:
                        v = (v * table[j] + 2**30) >> 31
            e.append(v)
        total = sum(e)
        out[r] = [min(65535, (v * 65536 + total // 2) // total) for v in e]
    return out


def array_text(header: str, name: str) -> tuple[int, int]:
    """``(start, end)`` of the initializer of array ``name`` (between its ``{`` and ``};``)."""
    start = header.index("{", header.index(f" {name}["))
    return start, header.index("};", start)


# -- self_test -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pack", [False, True], ids=["bytes", "packed"])
@pytest.mark.parametrize("structure", ["nb", "tan"])
@pytest.mark.parametrize("bits,int_bits", [(1, 3), (3, 2), (5, 3), (8, 1)])
def test_self_test_passes(tmp_path, bits, int_bits, structure, pack):
    artifact = bn_artifact(bits * 7 + int_bits, tan=structure == "tan", bits=bits, int_bits=int_bits)
    header = build_c_source(artifact, pack_bits=pack)
    assert "static inline int bnc_self_test(void)" in header
    assert re.search(r"^#define BNC_SELF_TEST_ROWS 60$", header, flags=re.M)  # all 60 check rows
    assert self_test_result(header, tmp_path) == 0


def test_self_test_finds_the_first_row_of_an_edited_table_code(tmp_path):
    artifact = bn_artifact(41, tan=True, bits=4, int_bits=2)
    header = build_c_source(artifact)
    rows = np.asarray(artifact.check_x, dtype=np.int64)
    table_rows = artifact.row_indices(rows)  # (n, D): the table row each feature reads
    # a table row that the first check row does not read, but a later one does
    i, k = next(
        (i, k) for k in range(1, len(rows)) for i in range(rows.shape[1]) if table_rows[k, i] not in table_rows[0]
    )
    stream_row, cls = 1 + int(table_rows[k, i]), 2
    tampered = copy.deepcopy(artifact)
    tampered.table_codes[stream_row - 1, cls] = (artifact.table_codes[stream_row - 1, cls] + 1) % 16
    changed = ReferencePredictor(tampered).integer_scores(rows) != ReferencePredictor(artifact).integer_scores(rows)
    expected = 1 + int(np.flatnonzero(changed.any(axis=1))[0])
    assert expected > 1
    # the header's code array: the prior's line, then one line per table row after each feature's comment; a row
    # is its lane words, class c in byte c % 4 of word c // 4
    start, end = array_text(header, "bnc_codes")
    lines = [line for line in header[start:end].splitlines()[1:] if not line.strip().startswith("/* feature")]
    data = [re.sub(r"/\*.*?\*/", "", line).strip().rstrip(",").split(", ") for line in lines]
    words = [int(v.rstrip("u"), 16) for v in data[stream_row]]
    codes = [(words[c // 4] >> (8 * (c % 4))) & 0xFF for c in range(artifact.n_classes)]
    assert codes == artifact.table_codes[stream_row - 1].tolist()
    old_code, new_code = codes[cls], int(tampered.table_codes[stream_row - 1, cls])
    words[cls // 4] += (new_code - old_code) << (8 * (cls % 4))
    old_line = lines[stream_row]
    new_line = old_line.replace(old_line.strip(), ", ".join(f"0x{w:08x}u" for w in words) + ",")
    edited = (
        header[:start] + header[start:end].replace("\n" + old_line + "\n", "\n" + new_line + "\n", 1) + header[end:]
    )
    assert edited != header
    assert self_test_result(edited, tmp_path) == expected


@pytest.mark.parametrize("pack", [False, True], ids=["bytes", "packed"])
def test_self_test_finds_an_edited_expected_label_or_sum(tmp_path, pack):
    artifact = bn_artifact(42, tan=False, bits=3, int_bits=2, n_classes=4)
    header = build_c_source(artifact, pack_bits=pack)
    start, end = array_text(header, "bnc_self_test_label")
    labels = [int(v) for v in re.findall(r"\d+", header[start:end])]
    labels[17] = (labels[17] + 1) % 4
    text = "{\n    " + ", ".join(str(v) for v in labels) + ",\n"
    assert self_test_result(header[:start] + text + header[end:], tmp_path / "label") == 18
    start, end = array_text(header, "bnc_self_test_sum")
    lines = header[start:end].split("\n")
    lines[1 + 33] = re.sub(r"\{(\d+)", lambda m: "{" + str(int(m.group(1)) + 1), lines[1 + 33])
    assert self_test_result(header[:start] + "\n".join(lines) + header[end:], tmp_path / "sum") == 34


def test_self_test_rows_are_capped_and_come_from_the_check_set():
    many = random_bnc_artifact(np.random.default_rng(1), d=6, n_classes=3, tan=False, bits=3, int_bits=2, n_check=200)
    rows, source = c_bnc.self_test_rows(many)
    assert len(rows) == c_bnc.SELF_TEST_MAX_ROWS == 64 and np.array_equal(rows, many.check_x[:64])
    assert source == "the first 64 of the model's 200 check rows"
    header = build_c_source(many)
    assert "#define BNC_SELF_TEST_ROWS 64\n" in header and "static const uint8_t bnc_self_test_x[64][6]" in header
    # wide rows: the byte budget (D codes + a label + C sums of uint16_t) decides
    wide = random_bnc_artifact(np.random.default_rng(2), d=300, n_classes=10, tan=False, bits=7, int_bits=3, n_check=50)
    rows, _ = c_bnc.self_test_rows(wide)
    assert len(rows) == c_bnc.SELF_TEST_MAX_BYTES // (300 + 1 + 10 * 2) == 12
    header = build_c_source(wide)
    assert "static const uint16_t bnc_self_test_sum[12][10]" in header
    # no stored check set: seeded random valid rows, said so in the header
    many.check_x, many.check_y = None, None
    rows, source = c_bnc.self_test_rows(many)
    assert np.array_equal(rows, random_rows(many, 64)) and "no check set" in source
    assert "no check set" in build_c_source(many)


def test_no_self_test_leaves_it_and_its_rows_out(tmp_path):
    artifact = bn_artifact(43, tan=True, bits=5, int_bits=3)
    with_it, without = build_c_source(artifact), build_c_source(artifact, self_test=False)
    assert "bnc_self_test" not in without and "SELF_TEST" not in without
    assert without == build_c_source(artifact, self_test=False)  # byte-identical for the same options
    meta_of = {True: read_c_metadata(with_it), False: read_c_metadata(without)}
    assert meta_of[True]["self_test"] is True and meta_of[False]["self_test"] is False

    # the option only adds lines (its three sections): the rest of the file is the same, the
    # metadata comment (which records the option) aside
    def code_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if '"self_test":' not in line]

    diff = difflib.SequenceMatcher(None, code_lines(without), code_lines(with_it), autojunk=False)
    assert {op for op, *_ in diff.get_opcodes()} == {"equal", "insert"}
    binary = compile_program(without, "int main(void);\nint main(void) { return 0; }\n", tmp_path)
    assert binary.is_file()
    report = export_file(artifact, tmp_path / "m.h", "c", self_test=False)  # verified in the native runtime
    assert report.exact and (tmp_path / "m.h").read_text().count("bnc_self_test") == 0


def test_cli_flag_no_self_test(tmp_path, capsys):
    from bnc_deploy.artifacts import save_artifact
    from bnc_deploy.cli.export import build_parser
    from bnc_deploy.cli.export import main as export_main

    help_text = build_parser().format_help()
    assert "--no-self-test" in help_text and "--self-test " not in help_text and "--pack-bits" in help_text
    model = tmp_path / "m.bnc"
    save_artifact(bn_artifact(44, tan=False, bits=3, int_bits=2), model)
    for extra, present in (([], True), (["--no-self-test"], False)):
        out = tmp_path / f"m{len(extra)}.h"
        assert export_main([str(model), "--format", "c", "-o", str(out), "--json", *extra]) == 0
        assert json.loads(capsys.readouterr().out)["exact"] is True
        assert ("int bnc_self_test(void)" in out.read_text()) is present
    code = export_main([str(model), "--format", "onnx", "-o", str(tmp_path / "m.onnx"), "--no-self-test"])
    err = capsys.readouterr().err
    assert code == 2 and "--no-self-test" in err and not (tmp_path / "m.onnx").exists()


# -- predict_proba ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("frac_bits", range(-5, 8))
def test_exp_factors_are_rounded_exp_and_cover_until_underflow(frac_bits):
    step = 2.0**-frac_bits
    terms = exp_terms(frac_bits, 10**6)
    table = exp_q31_table(frac_bits, terms)
    assert len(table) == terms == max(0, frac_bits + 5)
    for j, value in enumerate(table):
        assert abs(value - 2**31 * math.exp(-(2**j) * step)) <= 0.5 + 1e-6
    assert math.exp(-(2**terms) * step) < 2**-32  # every d >= 2^J is written 0
    assert exp_terms(frac_bits, 5) == min(terms, 3)  # no factor beyond the largest possible d


def check_proba(artifact, tmp_path, n_random: int = 2000) -> float:
    """Run predict_proba on the check set + random rows + invalid rows; returns the largest error seen."""
    header = build_c_source(artifact)
    rows = np.concatenate([np.asarray(artifact.check_x, dtype=np.int64), random_rows(artifact, n_random, seed=9)])
    invalid = rows[:3].copy()
    invalid[:, 0] = artifact.cardinalities[0]
    if int(artifact.cardinalities[0]) > 255:
        invalid = invalid[:0]
    rc, out = run_proba(header, np.concatenate([rows, invalid]), artifact.n_classes, tmp_path)
    n, c = len(rows), artifact.n_classes
    assert np.all(rc[:n] == 0) and np.all(rc[n:] == -1) and np.all(out[n:] == UNTOUCHED)
    out = out[:n]
    q = artifact.quantizer
    terms = header_terms(header)
    assert terms == exp_terms(q.frac_bits, (artifact.n_features + 1) * q.max_code)
    sums = ReferencePredictor(artifact).integer_scores(rows)
    assert np.array_equal(out, proba_model(sums, exp_q31_table(q.frac_bits, terms), terms))
    reference = ReferencePredictor(artifact).predict_proba(rows)  # softmax of the float64 log-joints
    error = np.abs(out / 65536.0 - reference)
    bound = proba_error_bound(c, terms)
    assert error.max() <= bound + 1e-12, (error.max(), bound)
    assert np.all(np.abs(out.sum(axis=1) - 65536) <= (c + 1) / 2)
    stated = "2^-16" if bound == 2.0**-16 else f"{bound:.6g}"
    assert f"<= max(2^-16, 2^-17 + C * max(J, 1) * 2^-31) = {stated}" in header
    return float(error.max())


@pytest.mark.parametrize("structure", ["nb", "tan"])
@pytest.mark.parametrize("bits,int_bits", BIT_CASES)
def test_predict_proba_is_within_the_stated_bound(tmp_path, bits, int_bits, structure):
    artifact = bn_artifact(100 + bits * 10 + int_bits, tan=structure == "tan", bits=bits, int_bits=int_bits)
    assert check_proba(artifact, tmp_path) <= 2.0**-16


@pytest.mark.parametrize(
    "bits,int_bits,n_classes,d",
    [(8, 1, 40, 12), (7, 2, 26, 16), (2, 1, 2, 3), (6, 6, 9, 30), (8, 4, 3, 257)],
    ids=["C40-BF7", "letter-like", "C2", "BF0-C9", "uint32-sums"],
)
def test_predict_proba_on_more_shapes(tmp_path, bits, int_bits, n_classes, d):
    rng = np.random.default_rng(bits * 100 + n_classes)
    cards = None if d < 257 else np.r_[256, np.full(d - 1, 2)]
    artifact = random_bnc_artifact(
        rng, d=d, n_classes=n_classes, tan=False, bits=bits, int_bits=int_bits, n_check=20, cardinalities=cards
    )
    check_proba(artifact, tmp_path, n_random=500)


def test_predict_proba_at_the_extremes(tmp_path):
    # all classes tie: 65536 / C each, rounded half up
    tie = bn_artifact(45, tan=False, bits=3, int_bits=2, n_classes=3)
    tie.table_codes[:] = 2
    tie.class_codes[:] = 1
    _, out = run_proba(build_c_source(tie), random_rows(tie, 20), 3, tmp_path / "tie")
    assert np.all(out == 21845)
    check_proba(tie, tmp_path / "tie-bound", n_random=20)
    # one class takes everything: 65535 (1.0 is not representable in Q0.16), the others 0
    sure = bn_artifact(46, tan=False, bits=8, int_bits=1, n_classes=4)  # step 2^-7: d = 255 is ~2 nats
    sure.table_codes[:] = 255
    sure.table_codes[:, 2] = 0
    sure.class_codes[:] = 0
    _, out = run_proba(build_c_source(sure), random_rows(sure, 20), 4, tmp_path / "sure")
    assert np.all(out[:, 2] == 65535) and np.all(out[:, [0, 1, 3]] == 0)
    check_proba(sure, tmp_path / "sure-bound", n_random=20)
