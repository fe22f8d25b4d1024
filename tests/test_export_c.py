"""C99 export of BN classifiers (``exporters/c_bnc.py``) and the ``native`` runtime (``runtimes/native_adapter.py``).

The generated header is compiled here with strict C99 flags and a small test driver (stdio only in
the driver; the header itself may include nothing but ``<stdint.h>``), run on the check set and
random rows, and compared with the NumPy reference: labels and integer scores must be identical.
Invalid codes are run once under AddressSanitizer + UBSan: -1, scores untouched, no out-of-bounds read.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bnc_deploy.artifacts import BNCArtifact, save_artifact
from bnc_deploy.errors import ExportError, InputError, MetadataError, RuntimeLoadError
from bnc_deploy.exporters import c_bnc
from bnc_deploy.exporters._c_bnc_layout import accumulator_type, code_stream, pack_codes, unpack_codes
from bnc_deploy.exporters.base import exporter_for
from bnc_deploy.exporters.c_bnc import build_c_source
from bnc_deploy.formats.bnc import float32_thresholds
from bnc_deploy.formats.c import read_c_metadata
from bnc_deploy.formats.c_template import template_sections
from bnc_deploy.formats.checkset import random_rows
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact
from bnc_deploy.verify import export_file

CC = shutil.which(os.environ.get("CC") or "cc")
pytestmark = pytest.mark.skipif(CC is None, reason="the C export tests need a C compiler (cc)")

#: Strict C99: the generated header must compile cleanly under all of these.
STRICT = [
    "-std=c99",
    "-pedantic",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wconversion",
    "-Wshadow",
    "-Wcast-qual",
    "-Wstrict-prototypes",
    "-Wmissing-prototypes",
    "-Wundef",
    "-Wdouble-promotion",
    "-Wfloat-equal",
    "-Wtrigraphs",
    "-trigraphs",
    "-O2",
]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1"]
#: (B, B_I): every B from 1 to 8, B_F negative, zero and positive.
BIT_CASES = [(1, 1), (1, 3), (2, 1), (2, 2), (3, 2), (4, 1), (4, 6), (5, 3), (6, 2), (6, 6), (7, 3), (8, 1), (8, 5)]
SENTINEL = 0x5A5A5A5A

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model.h"

int main(int argc, char **argv)
{
    FILE *in, *out;
    IN_T *x = (IN_T *)malloc(sizeof(IN_T) * (size_t)NF);  /* exactly one row: ASan sees reads past it */
    int32_t record[NC + 2];
    if (argc != 3 || x == NULL) {
        return 2;
    }
    in = fopen(argv[1], "rb");
    out = fopen(argv[2], "wb");
    if (in == NULL || out == NULL) {
        return 2;
    }
    while (fread(x, sizeof(IN_T), (size_t)NF, in) == (size_t)NF) {
        int c;
        for (c = 0; c < NC; ++c) {
            record[c + 2] = SENTINEL;
        }
        record[0] = LOG_JOINT(x, record + 2);
        record[1] = PREDICT(x);
        if (fwrite(record, sizeof(int32_t), (size_t)(NC + 2), out) != (size_t)(NC + 2)) {
            return 3;
        }
    }
    free(x);
    fclose(in);
    return fclose(out) == 0 ? 0 : 3;
}
"""


@pytest.fixture(autouse=True)
def native_cache(tmp_path_factory, monkeypatch):
    """Compiled libraries of the native runtime go to a per-session folder, not ~/.cache."""
    folder = tmp_path_factory.getbasetemp() / "native-cache"
    monkeypatch.setenv("BNC_DEPLOY_NATIVE_CACHE", str(folder))
    return folder


# -- helpers -----------------------------------------------------------------------------------------------
def compile_driver(header: str | Path, folder: Path, *, name: str = "bnc", raw: bool = False, flags=None) -> Path:
    """Compile the test driver around ``header`` (text or path) with ``flags`` (default: strict C99)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = Path(header).read_text() if isinstance(header, Path) else header
    (folder / "model.h").write_text(text)
    macro = name.upper()
    defines = {
        "NF": f"{macro}_N_FEATURES",
        "NC": f"{macro}_N_CLASSES",
        "SENTINEL": str(SENTINEL),
        "IN_T": "float" if raw else "uint8_t",
        "LOG_JOINT": f"{name}_log_joint{'_raw' if raw else ''}",
        "PREDICT": f"{name}_predict{'_raw' if raw else ''}",
    }
    source = "".join(f"#define {k} {v}\n" for k, v in defines.items()) + DRIVER
    (folder / "driver.c").write_text(source)
    binary = folder / "driver"
    done = subprocess.run(
        [CC, *(STRICT if flags is None else flags), "-o", str(binary), str(folder / "driver.c")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"the generated C does not compile cleanly:\n{done.stderr}"
    return binary


def run_driver(binary: Path, rows: np.ndarray, n_classes: int, *, raw: bool = False):
    """``(return codes, labels, scores)`` of the driver on ``rows``."""
    rows = np.ascontiguousarray(rows, dtype=np.float32 if raw else np.uint8)
    folder = binary.parent
    (folder / "in.bin").write_bytes(rows.tobytes())
    done = subprocess.run(
        [str(binary), str(folder / "in.bin"), str(folder / "out.bin")], capture_output=True, text=True
    )
    assert done.returncode == 0, f"driver failed ({done.returncode}):\n{done.stderr}"
    out = np.frombuffer((folder / "out.bin").read_bytes(), dtype=np.int32).reshape(-1, n_classes + 2)
    assert out.shape[0] == rows.shape[0]
    return out[:, 0], out[:, 1], out[:, 2:]


def reference_integers(artifact, codes) -> tuple[np.ndarray, np.ndarray]:
    """``(scores = -code sums (n, C) int64, first-minimum labels (n,))`` from the reference."""
    ref = ReferencePredictor(artifact)
    sums = ref.integer_scores(codes)
    labels = ref.predict(codes)
    assert np.array_equal(labels, np.argmin(sums, axis=1))
    return -sums, labels


def strip_comments(source: str) -> str:
    return re.sub(r"/\*.*?\*/", "", source, flags=re.S)


def check_rows(artifact, n_random: int = 300) -> np.ndarray:
    return np.concatenate([np.asarray(artifact.check_x, dtype=np.int64), random_rows(artifact, n_random, seed=3)])


def wide_artifact(d: int, *, bits: int, n_classes: int = 2, tan: bool = False) -> BNCArtifact:
    """``d`` features, feature 0 with 256 values and the others with one (a large D that stays small)."""
    cards = np.ones(d, dtype=np.int64)
    cards[0] = 256
    return random_bnc_artifact(
        np.random.default_rng(d), tan=tan, bits=bits, int_bits=4, n_classes=n_classes, cardinalities=cards, n_check=5
    )


def bn_artifact(seed: int, *, tan: bool, bits: int, int_bits: int, **kwargs) -> BNCArtifact:
    rng = np.random.default_rng(seed)
    kwargs.setdefault("d", 7)
    kwargs.setdefault("n_classes", 5)
    return random_bnc_artifact(rng, tan=tan, bits=bits, int_bits=int_bits, n_check=60, **kwargs)


# -- exactness: B = 1..8, several B_I, NB/TAN, packed or not -------------------------------------------------------
@pytest.mark.parametrize("pack", [False, True], ids=["bytes", "packed"])
@pytest.mark.parametrize("structure", ["nb", "tan"])
@pytest.mark.parametrize("bits,int_bits", BIT_CASES)
def test_exact_labels_and_integer_scores(tmp_path, bits, int_bits, structure, pack):
    artifact = bn_artifact(bits * 10 + int_bits, tan=structure == "tan", bits=bits, int_bits=int_bits)
    report = export_file(artifact, tmp_path / "m.h", "c", pack_bits=pack)  # verified in the native runtime
    assert report.exact and report.exact_expected and report.runtime == "native"
    source = (tmp_path / "m.h").read_text()
    rows = check_rows(artifact)
    rc, labels, scores = run_driver(compile_driver(source, tmp_path / "strict"), rows, artifact.n_classes)
    ref_scores, ref_labels = reference_integers(artifact, rows)
    assert np.all(rc == 0)
    assert np.array_equal(labels, ref_labels)
    assert np.array_equal(scores, ref_scores)
    # log p(c, x) = scores * 2^-B_F, as the metadata and the macros say
    assert re.search(rf"#define BNC_STEP_SHIFT \(?{artifact.quantizer.frac_bits}\)?\n", source)
    np.testing.assert_array_equal(
        scores * 2.0**-artifact.quantizer.frac_bits, ReferencePredictor(artifact).log_joint(rows)
    )


def test_ties_go_to_the_first_class(tmp_path):
    artifact = bn_artifact(5, tan=True, bits=2, int_bits=1, n_classes=4)
    artifact.table_codes[:] = 1
    artifact.class_codes[:] = [3, 1, 1, 2]  # classes 1 and 2 tie on every row
    rows = check_rows(artifact, 50)
    _, labels, scores = run_driver(compile_driver(build_c_source(artifact), tmp_path), rows, 4)
    assert np.all(labels == 1) and np.all(scores[:, 1] == scores[:, 2])


@pytest.mark.parametrize("d,expected", [(256, "uint16_t"), (257, "uint32_t")])
def test_accumulator_is_the_narrowest_safe_type_at_its_limit(tmp_path, d, expected):
    """All codes at 2^8 - 1: the largest sum is (D + 1) * 255 (65,535 at D = 256, 65,790 at D = 257)."""
    assert accumulator_type(d, 8) == expected
    artifact = wide_artifact(d, bits=8)  # feature 0 takes a full uint8 range: code 255 is valid
    artifact.table_codes[:] = 255
    artifact.class_codes[:] = [255, 254]
    source = build_c_source(artifact, pack_bits=True)
    assert f"static inline int bnc_sums(const uint8_t *x, {expected} *sum)" in source
    rows = np.zeros((3, d), dtype=np.int64)
    rows[:, 0] = [0, 128, 255]
    _, labels, scores = run_driver(compile_driver(source, tmp_path), rows, 2)
    ref_scores, ref_labels = reference_integers(artifact, rows)
    assert np.array_equal(scores, ref_scores) and np.array_equal(labels, ref_labels)
    assert scores.min() == -(d + 1) * 255


# -- storage ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bits", range(1, 9))
def test_pack_codes_round_trip_and_size(bits):
    rng = np.random.default_rng(bits)
    for n in (1, 7, 8, 9, 1001):
        codes = rng.integers(0, 2**bits, size=n).astype(np.uint8)
        packed = pack_codes(codes, bits)
        assert packed.size == math.ceil(n * bits / 8)
        assert np.array_equal(unpack_codes(packed, bits, n), codes)
    # LSB first: code k occupies stream bits k*B .. k*B + B - 1
    assert pack_codes(np.array([1, 2, 3], dtype=np.uint8), 2).tolist() == [0b111001]


@pytest.mark.parametrize("pack", [False, True])
def test_table_bytes_are_what_the_code_array_holds(tmp_path, pack):
    """Packed: B * |theta| bits rounded up to bytes, plus the 3 guard bytes of the 32-bit window reads; unpacked
    (lane kernels): one byte per code, each stream row padded to whole 32-bit words of four classes."""
    artifact = bn_artifact(3, tan=True, bits=3, int_bits=2)
    source = build_c_source(artifact, pack_bits=pack)
    meta = read_c_metadata(source)
    n_rows = 1 + artifact.n_rows
    words = -(-artifact.n_classes // 4)
    expected = math.ceil(artifact.n_parameters * 3 / 8) + 3 if pack else 4 * words * n_rows
    assert meta["table_bytes"] == expected
    assert f"#define BNC_TABLE_BYTES {expected}UL" in source
    ctype, count = re.search(r"static const (uint8_t|uint32_t) bnc_codes\[(\d+)\]", source).groups()
    assert (ctype, int(count)) == (("uint8_t", expected) if pack else ("uint32_t", words * n_rows))
    assert meta["table_storage"] == ("packed3" if pack else "uint8-lanes")
    assert meta["kernel"] == "lanes8"
    assert code_stream(artifact).size == artifact.n_parameters


def test_only_stdint_and_no_floats_without_raw_inputs():
    artifact = bn_artifact(4, tan=True, bits=4, int_bits=2)
    for pack in (False, True):
        source = build_c_source(artifact, pack_bits=pack)
        assert re.findall(r"^[ \t]*#[ \t]*include.*$", source, flags=re.M) == ["#include <stdint.h>"]
        code = strip_comments(source)
        assert not re.search(r"\b(float|double|malloc|free|static\s+(?!const|inline)\w+\s+\w+\s*=)\b", code)
        for name in (
            "BNC_N_FEATURES",
            "BNC_N_CLASSES",
            "BNC_BITS",
            "BNC_INT_BITS",
            "BNC_FRAC_BITS",
            "BNC_N_PARAMETERS",
            "BNC_SIZE_BITS",
            "BNC_N_OPS",
            "BNC_TABLE_BYTES",
            "BNC_STEP_SHIFT",
            "BNC_CARD_0",
        ):
            assert re.search(rf"^#define {name} ", source, flags=re.M), name
        assert "#ifndef BNC_BNC_DEPLOY_MODEL_H" in source and source.rstrip().endswith("*/")
        # every array is const, every function static inline: a header-only library with no state
        assert not re.search(r"^static (?!const |inline )", code, flags=re.M)
        assert "int bnc_predict(const uint8_t *x)" in code
        assert "int bnc_log_joint(const uint8_t *x, int32_t *scores)" in code


def test_every_section_of_the_c_source_is_written_for_some_options(monkeypatch):
    """exporters/c_bnc.h: NB/TAN x bytes/packed (B dividing 8 or not) x raw inputs write every section, each
    with all of its placeholders filled (string.Template.substitute raises on a missing one), and end in a newline."""
    sections = c_bnc.template_sections("bnc_deploy.exporters", c_bnc.TEMPLATE)
    written = set()

    class Recording(dict):
        def __getitem__(self, key):
            written.add(key)
            return super().__getitem__(key)

    monkeypatch.setattr(c_bnc, "template_sections", lambda package, name: Recording(sections))
    for tan in (False, True):
        for bits in (3, 4):
            artifact = raw_artifact(7, tan=tan, bits=bits)
            for pack in (False, True):
                for raw in (False, True):
                    assert build_c_source(artifact, pack_bits=pack, raw_inputs=raw).endswith(" */\n")
    # the 16-bit lanes (largest sum 8 * 63) and the scalar kernel (largest sum 258 * 255 > 65535)
    for artifact in (bn_artifact(5, tan=False, bits=6, int_bits=2), wide_artifact(257, bits=8)):
        for pack in (False, True):
            assert build_c_source(artifact, pack_bits=pack).endswith(" */\n")
    assert written == set(sections)


def test_template_sections_split_files_and_refuse_broken_ones(tmp_path, monkeypatch):
    """bnc_deploy.formats.c_template: the preamble is dropped, sections keep file order; a duplicated name, a
    section without a final newline or a file without markers is refused (it would change every output)."""
    package = tmp_path / "bnc_c_template_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    files = {
        "ok.c": "/* about */\n//@ a\nint ${x};\n//@ b\n\n$$y\n",
        "dup.c": "//@ a\n1\n//@ a\n2\n",
        "nonl.c": "//@ a\n1\n//@ b\n2",
        "none.c": "int x;\n",
    }
    for name, text in files.items():
        (package / name).write_bytes(text.encode("ascii"))
    monkeypatch.syspath_prepend(str(tmp_path))
    sections = template_sections(package.name, "ok.c")
    assert list(sections) == ["a", "b"]
    assert sections["a"].substitute(x="n") == "int n;\n" and sections["b"].substitute() == "\n$y\n"
    for name in ("dup.c", "nonl.c", "none.c"):
        with pytest.raises(ValueError, match=f"{package.name}/{name}"):
            template_sections(package.name, name)


def test_metadata_is_embedded_and_read_back(tmp_path):
    artifact = bn_artifact(6, tan=False, bits=5, int_bits=2)
    report = export_file(artifact, tmp_path / "m.h", "c", name="my_model")
    meta = read_c_metadata(tmp_path / "m.h")
    assert meta == read_c_metadata((tmp_path / "m.h").read_bytes())
    assert meta["format"] == "c" and meta["c_name"] == "my_model" and meta["exact"] is True
    assert meta["input"] == "codes" and meta["input_dtype"] == "uint8"
    assert (meta["size_bits"], meta["n_ops"], meta["n_parameters"]) == (
        artifact.size_bits,
        artifact.n_ops,
        artifact.n_parameters,
    )
    assert meta["integrity"].startswith("sha256:")
    assert report.metadata["integrity"] == meta["integrity"].strip()
    rt = load_runtime(tmp_path / "m.h")  # by extension: native
    assert rt.name == "native" and rt.metadata["cardinalities"] == meta["cardinalities"]
    with pytest.raises(MetadataError, match="not a bnc-deploy C export"):
        read_c_metadata(b"#include <stdint.h>\n")


def test_awkward_names_stay_inside_comments(tmp_path):
    """Class and feature names with comment delimiters, trigraphs, backslashes and non-ASCII."""
    artifact = bn_artifact(7, tan=True, bits=3, int_bits=2, d=4, n_classes=3)
    artifact.feature_names = ["a*/b", "/* c", "d??/", "e\\"]
    artifact.class_names = ["*/", "\u00e9t\u00e9 ??=", 'q"uote/']
    report = export_file(artifact, tmp_path / "m.h", "c")
    assert report.exact
    meta = read_c_metadata(tmp_path / "m.h")
    assert meta["feature_names"] == artifact.feature_names and meta["class_names"] == artifact.class_names
    rows = check_rows(artifact, 20)
    _, labels, _ = run_driver(compile_driver(tmp_path / "m.h", tmp_path / "build"), rows, 3)
    assert np.array_equal(labels, ReferencePredictor(artifact).predict(rows))


def test_two_models_with_different_prefixes_in_one_program(tmp_path):
    a = bn_artifact(8, tan=False, bits=2, int_bits=1)
    b = bn_artifact(9, tan=True, bits=6, int_bits=3)
    (tmp_path / "a.h").write_text(build_c_source(a, name="model_a"))
    (tmp_path / "b.h").write_text(build_c_source(b, name="model_b", pack_bits=True))
    (tmp_path / "main.c").write_text(
        '#include "a.h"\n#include "b.h"\n#include "a.h"\n'
        "int main(void)\n{\n    uint8_t xa[MODEL_A_N_FEATURES] = {0};\n    uint8_t xb[MODEL_B_N_FEATURES] = {0};\n"
        "    return model_a_predict(xa) + model_b_predict(xb) >= 0 ? 0 : 1;\n}\n"
    )
    done = subprocess.run(
        [CC, *STRICT, "-o", str(tmp_path / "main"), str(tmp_path / "main.c")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert subprocess.run([str(tmp_path / "main")]).returncode == 0


# -- invalid input: -1, scores untouched, no out-of-bounds read (ASan + UBSan) -----------------------------------------
def _sanitizers_work(folder: Path) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probe.c").write_text("int main(void) { return 0; }\n")
    done = subprocess.run([CC, *SANITIZE, "-o", str(folder / "probe"), str(folder / "probe.c")], capture_output=True)
    return done.returncode == 0 and subprocess.run([str(folder / "probe")], capture_output=True).returncode == 0


@pytest.mark.parametrize("pack", [False, True])
def test_invalid_codes_return_minus_one_without_out_of_bounds_reads(tmp_path, pack):
    if not _sanitizers_work(tmp_path / "probe"):
        pytest.skip("this compiler cannot build with -fsanitize=address,undefined")
    cards = [3, 1, 256, 2, 5, 4]
    artifact = random_bnc_artifact(
        np.random.default_rng(11), tan=True, bits=7, int_bits=3, n_classes=3, cardinalities=cards, n_check=10
    )
    binary = compile_driver(
        build_c_source(artifact, pack_bits=pack),
        tmp_path / "asan",
        flags=["-std=c99", "-Wall", "-Wextra", "-Werror", *SANITIZE],
    )
    valid = check_rows(artifact, 40)
    valid[1] = np.asarray(cards) - 1  # the last row of every table
    invalid = []
    for i, card in enumerate(cards):
        for value in sorted(v for v in {card, card + 1, 128, 255} if card <= v <= 255):
            for base in valid[:3]:
                row = base.copy()
                row[i] = value
                invalid.append(row)
    invalid = np.asarray(invalid)
    rows = np.concatenate([valid, invalid, valid[:5]])
    rc, labels, scores = run_driver(binary, rows, artifact.n_classes)
    n_valid = len(valid)
    bad = slice(n_valid, n_valid + len(invalid))
    assert np.all(rc[bad] == -1) and np.all(labels[bad] == -1)
    assert np.all(scores[bad] == SENTINEL), "scores of an invalid row must stay untouched"
    good = np.r_[0:n_valid, n_valid + len(invalid) : len(rows)]
    ref_scores, ref_labels = reference_integers(artifact, rows[good])
    assert np.all(rc[good] == 0)
    assert np.array_equal(labels[good], ref_labels) and np.array_equal(scores[good], ref_scores)


def test_the_native_runtime_refuses_invalid_codes_before_the_c_call(tmp_path):
    artifact = bn_artifact(12, tan=False, bits=3, int_bits=2)
    export_file(artifact, tmp_path / "m.h", "c")
    rt = load_runtime(tmp_path / "m.h")
    bad = np.asarray(artifact.check_x[:2], dtype=np.int64)
    bad[1, 3] = int(artifact.cardinalities[3])
    with pytest.raises(InputError, match="feature 3"):
        rt.run(bad)
    # the bare call on a wrongly shaped array is refused, not read out of bounds
    with pytest.raises(RuntimeError, match="prepare"):
        rt.invoke(np.zeros((2, artifact.n_features - 1), dtype=np.uint8))
    # the C guard itself: invoke() on unchecked codes gives label -1 and NaN scores for that row
    scores, labels = rt.invoke(np.ascontiguousarray(bad, dtype=np.uint8))
    assert labels.tolist()[1] == -1 and np.all(np.isnan(scores[1])) and not np.isnan(scores[0]).any()


# -- raw inputs ---------------------------------------------------------------------------------------------------
RAW_CUTS = [[0.5], [-1.0, 0.1, 2.5], [], [1e-3, 1e-3 + 1e-12, 7.0], [-3.0e38, 1.0e39], [1e-42, 2.5e-40]]


def raw_artifact(seed: int, *, tan: bool, bits: int = 4, int_bits: int = 2) -> BNCArtifact:
    cards = [len(c) + 1 for c in RAW_CUTS]
    return random_bnc_artifact(
        np.random.default_rng(seed),
        tan=tan,
        bits=bits,
        int_bits=int_bits,
        n_classes=4,
        cardinalities=cards,
        discretizer=discretizer_dict(RAW_CUTS),
        n_check=30,
    )


def raw_values() -> tuple[np.ndarray, np.ndarray]:
    """``(finite float32 rows, rows with NaN/inf)``: every threshold, its float32 neighbours, signed zeros,
    denormals and the float32 extremes, spread over the features."""
    f32 = np.float32
    specials = [0.0, -0.0, 1e-45, -1e-45, 3.4028235e38, -3.4028235e38, 1.0, -1.0, 1e30, -1e30]
    per_feature = []
    for cuts in RAW_CUTS:
        values = list(specials)
        with np.errstate(over="ignore"):  # cuts beyond the float32 range: their neighbours are +-inf, dropped
            for t in float32_thresholds(np.asarray(cuts, dtype=np.float64)) if cuts else []:
                values += [t, np.nextafter(f32(t), f32(np.inf)), np.nextafter(f32(t), f32(-np.inf))]
            values += [f32(c) for c in cuts]
            per_feature.append(np.asarray([v for v in values if np.isfinite(f32(v))], dtype=np.float32))
    n = max(len(v) for v in per_feature)
    rows = np.stack([np.resize(v, n) for v in per_feature], axis=1)
    rng = np.random.default_rng(0)
    shuffled = np.stack([rng.permutation(v) for v in rows.T], axis=1)
    finite = np.concatenate([rows, shuffled])
    bad = []
    for i in range(len(RAW_CUTS)):
        for v in (np.nan, np.inf, -np.inf):
            row = finite[0].copy()
            row[i] = v
            bad.append(row)
    return finite, np.asarray(bad, dtype=np.float32)


# formats.bnc.raw_representatives (the verifier's raw rows) warns on the cut beyond the float32 range.
@pytest.mark.filterwarnings("ignore:overflow encountered in nextafter:RuntimeWarning")
@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("tan", [False, True], ids=["nb", "tan"])
def test_raw_inputs_bin_like_the_discretizer(tmp_path, tan, pack):
    artifact = raw_artifact(20 + tan, tan=tan)
    report = export_file(artifact, tmp_path / "m.h", "c", raw_inputs=True, pack_bits=pack)
    assert report.exact and report.metadata["input"] == "raw"
    source = (tmp_path / "m.h").read_text()
    assert "int bnc_predict_raw(const float *x)" in source
    assert "int bnc_log_joint_raw(const float *x, int32_t *scores)" in source
    assert re.findall(r"^[ \t]*#[ \t]*include.*$", source, flags=re.M) == ["#include <stdint.h>"]
    assert not re.search(r"\bdouble\b", strip_comments(source))
    finite, bad = raw_values()
    binary = compile_driver(source, tmp_path / "strict", raw=True)
    rc, labels, scores = run_driver(binary, np.concatenate([finite, bad]), 4, raw=True)
    n = len(finite)
    codes = ReferencePredictor(artifact).discretize(finite.astype(np.float64))
    ref_scores, ref_labels = reference_integers(artifact, codes)
    assert np.all(rc[:n] == 0)
    assert np.array_equal(labels[:n], ref_labels) and np.array_equal(scores[:n], ref_scores)
    assert np.all(rc[n:] == -1) and np.all(labels[n:] == -1) and np.all(scores[n:] == SENTINEL)
    # the codes entry points still work in a raw file
    rt = load_runtime(tmp_path / "m.h")
    got_scores, got_labels = rt.run(finite)
    assert np.array_equal(got_labels, ref_labels)
    np.testing.assert_array_equal(got_scores, ReferencePredictor(artifact).log_joint(codes))
    with pytest.raises(InputError, match="not a finite float32"):
        rt.run(bad[:1])


def test_raw_inputs_need_a_discretizer(tmp_path):
    with pytest.raises(ExportError, match="discretizer"):
        export_file(bn_artifact(1, tan=False, bits=3, int_bits=2), tmp_path / "m.h", "c", raw_inputs=True)
    assert not list(tmp_path.iterdir())


# -- refusals -------------------------------------------------------------------------------------------------------
def test_float_models_are_refused(tmp_path):
    artifact = random_bnc_artifact(np.random.default_rng(2), tan=True, bits=None)
    with pytest.raises(ExportError, match=r"C export needs a quantized model \(--bits\)"):
        export_file(artifact, tmp_path / "m.h", "c")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "int", "_x", "a__b", "x" * 41, "é"])
def test_bad_prefixes_are_refused(tmp_path, name):
    with pytest.raises(ExportError, match="--name"):
        export_file(bn_artifact(1, tan=False, bits=3, int_bits=2), tmp_path / "m.h", "c", name=name)


def test_cardinalities_beyond_uint8_are_refused():
    artifact = random_bnc_artifact(
        np.random.default_rng(3), tan=False, bits=3, int_bits=2, cardinalities=[2, 257], n_check=3
    )
    with pytest.raises(ExportError, match="uint8_t"):
        build_c_source(artifact)


def test_the_exporter_is_registered():
    spec = exporter_for("bnc", "c")
    assert (spec.extension, spec.runtime) == (".h", "native")
    assert set(spec.option_names) == {"name", "pack_bits", "raw_inputs", "self_test"}


# -- the native runtime ---------------------------------------------------------------------------------------------
def test_native_runtime_caches_the_compiled_library(tmp_path, native_cache, monkeypatch):
    artifact = bn_artifact(13, tan=True, bits=4, int_bits=2)
    export_file(artifact, tmp_path / "m.h", "c")  # compiles once (verification)
    libraries = sorted(native_cache.glob("*.so"))
    assert libraries

    def no_compiler(*args, **kwargs):
        raise AssertionError("recompiled a cached library")

    monkeypatch.setattr(subprocess, "run", no_compiler)
    rt = load_runtime(tmp_path / "m.h", threads=1)
    rows = check_rows(artifact, 10)
    assert np.array_equal(rt.predict(rows), ReferencePredictor(artifact).predict(rows))
    assert sorted(native_cache.glob("*.so")) == libraries


def test_native_runtime_without_a_compiler(tmp_path, monkeypatch):
    export_file(bn_artifact(14, tan=False, bits=3, int_bits=2), tmp_path / "m.h", "c")
    monkeypatch.setenv("BNC_DEPLOY_NATIVE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("CC", "no-such-compiler-bnc")
    with pytest.raises(RuntimeLoadError, match=r"the native runtime needs a C compiler \(no-such-compiler-bnc\)"):
        load_runtime(tmp_path / "m.h")


def test_native_runtime_reports_compile_errors(tmp_path):
    export_file(bn_artifact(15, tan=False, bits=3, int_bits=2), tmp_path / "m.h", "c")
    path = tmp_path / "m.h"
    path.write_text(path.read_text().replace("#endif /*", "this is not C;\n#endif /*"))
    with pytest.raises(RuntimeLoadError, match="modified after export"):
        load_runtime(path)
    with pytest.raises(RuntimeLoadError, match=r"does not compile with .*error"):
        load_runtime(path, verify_integrity=False)


def test_an_edited_table_is_caught_by_the_integrity_digest(tmp_path):
    artifact = bn_artifact(16, tan=False, bits=3, int_bits=2)
    export_file(artifact, tmp_path / "m.h", "c")
    path = tmp_path / "m.h"
    text = path.read_text()
    head, _, tail = text.partition("/* class prior */ ")
    first = tail[0]
    path.write_text(head + "/* class prior */ " + ("1" if first != "1" else "2") + tail[1:])
    with pytest.raises(RuntimeLoadError, match="modified after export"):
        load_runtime(path)


# -- command line ---------------------------------------------------------------------------------------------
def test_bnc_export_and_bnc_profile_cli(tmp_path, capsys):
    from bnc_deploy.cli.export import main as export_main
    from bnc_deploy.cli.profile import main as profile_main

    artifact = bn_artifact(17, tan=True, bits=3, int_bits=2)
    model = tmp_path / "m.bnc"
    save_artifact(artifact, model)
    out = tmp_path / "m.h"
    code = export_main([str(model), "--format", "c", "-o", str(out), "--json", "--name", "tiny", "--pack-bits"])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(stdout)
    assert report["exact"] is True and report["agreement"] == 1.0 and report["published"] is True
    assert (report["format"], report["runtime"], report["file_bytes"]) == ("c", "native", out.stat().st_size)
    assert (report["size_bits"], report["n_ops"]) == (artifact.size_bits, artifact.n_ops)
    assert "int tiny_predict(const uint8_t *x)" in out.read_text()

    code = profile_main([str(out), "--no-latency", "--json"])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    rows = json.loads(stdout)
    assert len(rows) == 1 and rows[0]["runtime"] == "native"
    assert (rows[0]["size_bits"], rows[0]["n_ops"]) == (artifact.size_bits, artifact.n_ops)
    assert rows[0]["graph_ops"] is None and any("no graph to count" in n for n in rows[0]["notes"])

    code = export_main([str(model), "--format", "c", "-o", str(tmp_path / "bad.h"), "--name", "9lives"])
    _, err = capsys.readouterr()
    assert code == 2 and "--name must be a C identifier" in err and not (tmp_path / "bad.h").exists()
