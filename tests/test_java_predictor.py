"""The dependency-free Java predictor (``clients/java``) against the NumPy reference.

The sources are compiled once per session at the Java 8 language level (``javac --release 8``, what
Android accepts), then the predictor's command line runs every BN test model — naive Bayes and TAN
at B = 1..8 (with negative, zero and positive fractional bits) and float — on the stored check rows
and 256 random valid rows: labels and scores must be identical to ``ReferencePredictor`` (scores are
printed as hexadecimal floats, so "identical" means bit for bit, float models included). Bad rows and
damaged model files must be refused with exit status 2 and a message naming the row, feature, value
or file. Skipped, with the reason, where no JDK is installed; failed instead under
``BNC_DEPLOY_REQUIRE_JDK=1`` (CI installs Debian's ``default-jdk-headless`` and sets it).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
from support import REPO_ROOT

from bnc_deploy.artifacts import load_artifact, save_artifact
from bnc_deploy.errors import ArtifactError
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact, random_dnn_artifact
from bnc_deploy.validation import random_valid_codes

JAVA_SOURCES = REPO_ROOT / "clients" / "java" / "src" / "main" / "java"
MAIN = "bncdeploy.Main"
#: (bits, int_bits) per quantized case: fractional bits B_F = bits - int_bits from -2 to 5.
QUANTIZED = [(1, 1), (2, 4), (3, 2), (4, 1), (5, 6), (6, 3), (7, 2), (8, 4)]
CASES = [(structure, bits, int_bits) for structure in ("nb", "tan") for bits, int_bits in QUANTIZED + [(None, None)]]
N_RANDOM_ROWS = 256

# Exercises the library API the command line does not: loading from a stream, single-row calls,
# probabilities, the facts accessors. Prints what the test compares.
API_HARNESS = r"""
import bncdeploy.BncModel;
import java.io.FileInputStream;
import java.io.InputStream;

public final class ApiHarness {
    public static void main(String[] args) throws Exception {
        InputStream in = new FileInputStream(args[0]);
        BncModel model;
        try {
            model = BncModel.load(in, args[0]);
        } finally {
            in.close();
        }
        StringBuilder out = new StringBuilder();
        out.append(model.structure()).append(' ').append(model.bits()).append(' ').append(model.numFeatures())
           .append(' ').append(model.numClasses()).append('\n');
        out.append(String.join("|", model.classNames())).append('\n');
        out.append(String.join("|", model.featureNames())).append('\n');
        out.append(java.util.Arrays.toString(model.cardinalities())).append('\n');
        out.append(java.util.Arrays.toString(model.parents())).append('\n');
        int[][] rows = model.checkRows();
        int[] batch = model.predict(rows);
        double[][] batchScores = model.logJoint(rows);
        for (int r = 0; r < rows.length; r++) {
            double[] scores = model.logJoint(rows[r]);
            double[] p = model.predictProba(rows[r]);
            if (model.predict(rows[r]) != batch[r] || !java.util.Arrays.equals(scores, batchScores[r])) {
                throw new AssertionError("single-row and batch calls differ in row " + r);
            }
            out.append(batch[r]);
            for (int c = 0; c < scores.length; c++) {
                out.append(',').append(Double.toHexString(scores[c])).append(':').append(Double.toHexString(p[c]));
            }
            out.append('\n');
        }
        System.out.print(out);
    }
}
"""


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory) -> Path:
    """The predictor (and the API harness) compiled with ``javac --release 8`` into a temporary folder."""
    javac, java = java_tools()
    if javac is None or java is None:
        reason = (
            "no JDK: javac/java not in $JAVA_HOME/bin nor on PATH (Debian: apt-get install -y "
            "--no-install-recommends default-jdk-headless; CI installs it)"
        )
        if os.environ.get("BNC_DEPLOY_REQUIRE_JDK") == "1":  # CI installed one: these tests must run
            pytest.fail(reason + " - required by BNC_DEPLOY_REQUIRE_JDK=1")
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("java-classes")
    harness = out / "src" / "ApiHarness.java"
    harness.parent.mkdir()
    harness.write_text(API_HARNESS, encoding="utf-8")
    sources = sorted(str(p) for p in JAVA_SOURCES.rglob("*.java"))
    assert sources, f"no Java sources under {JAVA_SOURCES}"
    # Warnings are errors: the library must compile cleanly at Java 8 (--release 8 also checks that only
    # the Java 8 API is used). -options: JDK 21+ warn that release 8 is obsolete, which is not our code.
    done = subprocess.run(
        [
            javac,
            "--release",
            "8",
            "-encoding",
            "UTF-8",
            "-Xlint:all,-options",
            "-Werror",
            "-d",
            str(out / "classes"),
            *sources,
            str(harness),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"javac failed:\n{done.stdout}{done.stderr}"
    return out / "classes"


def java_tools() -> tuple[str | None, str | None]:
    """``javac`` and ``java`` of one JDK: ``$JAVA_HOME/bin`` when set, else the first ``javac`` on PATH and
    the ``java`` beside it."""
    home = os.environ.get("JAVA_HOME")
    folder = Path(home) / "bin" if home else None
    if folder is None or not (folder / "javac").is_file():
        javac = shutil.which("javac")
        folder = Path(javac).resolve().parent if javac else None
    if folder is None or not (folder / "javac").is_file() or not (folder / "java").is_file():
        return None, None
    return str(folder / "javac"), str(folder / "java")


def run_java(classes: Path, *args, main: str = MAIN, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [java_tools()[1], "-cp", str(classes), main, *map(str, args)],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )


def predict_java(classes: Path, *args, stdin: str | None = None) -> tuple[np.ndarray, list, np.ndarray]:
    """Run the command line; return (labels, class names, scores parsed exactly from hex or decimal)."""
    done = run_java(classes, *args, stdin=stdin)
    assert done.returncode == 0, f"java {' '.join(map(str, args))} failed:\n{done.stderr}"
    table = list(csv.reader(io.StringIO(done.stdout)))
    assert table[0][:2] == ["label", "class"]
    labels = np.array([int(row[0]) for row in table[1:]], dtype=np.int64)
    names = [row[1] for row in table[1:]]
    parse = float.fromhex if "hex" in args else (int if "integer" in args else float)
    scores = np.array([[parse(v) for v in row[2:]] for row in table[1:]])
    return labels, names, scores


def write_rows(path: Path, rows) -> Path:
    path.write_text("".join(",".join(str(v) for v in row) + "\n" for row in rows), encoding="utf-8")
    return path


def case_artifact(structure: str, bits: int | None, int_bits: int | None):
    seed = 1000 + 10 * (bits or 0) + (structure == "tan")
    return random_bnc_artifact(
        np.random.default_rng(seed),
        d=9,
        n_classes=5,
        max_card=6,
        tan=structure == "tan",
        bits=bits,
        int_bits=int_bits,
        n_check=40,
    )


def assert_identical(classes: Path, art, model: Path, rows: np.ndarray, tmp_path: Path) -> None:
    """Java labels and scores (hex, exact) equal the reference's on ``rows``; names match too."""
    reference = ReferencePredictor(art)
    csv_path = write_rows(tmp_path / "rows.csv", rows)
    labels, names, scores = predict_java(classes, "--scores", "hex", model, csv_path)
    expected = reference.log_joint(rows)
    assert np.array_equal(labels, reference.predict(rows)), "labels differ"
    assert names == [art.class_names[k] for k in labels]
    # Identical, not close: quantized scores are exact, float ones use the reference's summation order.
    assert scores.shape == expected.shape and np.array_equal(scores, expected), (
        f"scores differ by up to {np.max(np.abs(scores - expected))}"
    )


@pytest.mark.parametrize(
    "structure,bits,int_bits", CASES, ids=[f"{s}-{'float' if b is None else f'{b}bit-BI{i}'}" for s, b, i in CASES]
)
def test_java_predictor_is_identical_to_the_reference(java_classes, tmp_path, structure, bits, int_bits):
    art = case_artifact(structure, bits, int_bits)
    assert art.structure == structure
    model = tmp_path / "model.bnc"
    save_artifact(art, model)
    rows = np.concatenate([art.check_x.astype(np.int64), random_valid_codes(art.cardinalities, N_RANDOM_ROWS, seed=7)])
    assert_identical(java_classes, art, model, rows, tmp_path)

    reference = ReferencePredictor(art)
    # The stored check set, read by the Java side from the model file itself.
    labels, _, scores = predict_java(java_classes, "--check-set", "--scores", "hex", model)
    assert np.array_equal(labels, reference.predict(art.check_x))
    assert np.array_equal(scores, reference.log_joint(art.check_x))
    if art.quantizer is not None:
        labels, _, sums = predict_java(java_classes, "--check-set", "--scores", "integer", model)
        assert np.array_equal(sums, reference.integer_scores(art.check_x))
    else:
        # Decimal output (Double.toString) parses back to the same doubles.
        _, _, decimal = predict_java(java_classes, "--check-set", "--scores", "decimal", model)
        assert np.array_equal(decimal, reference.log_joint(art.check_x))


@pytest.mark.parametrize("structure", ["nb", "tan"])
def test_float_scores_follow_the_reference_summation_order(java_classes, tmp_path, structure):
    """Float32 log-probabilities of similar size sum exactly in a double, so the order rarely shows; tables
    spanning 40 binades make it show: another order (class prior first, or NumPy's pairwise sum over
    a contiguous axis) differs from the reference in many rows here, the Java predictor in none."""
    art = random_bnc_artifact(
        np.random.default_rng(42), d=20, n_classes=4, tan=structure == "tan", bits=None, n_check=40
    )
    rng = np.random.default_rng(0)
    art.table_logp = (-np.exp(rng.uniform(np.log(1e-12), np.log(50), size=art.table_logp.shape))).astype(np.float32)
    art.class_logp = (-np.exp(rng.uniform(np.log(1e-12), np.log(5), size=art.class_logp.shape))).astype(np.float32)
    art.validate()
    model = tmp_path / "wide.bnc"
    save_artifact(art, model)
    rows = random_valid_codes(art.cardinalities, N_RANDOM_ROWS, seed=7)
    terms = art.table_logp.astype(np.float64)[art.row_indices(rows)]  # (rows, features, classes)
    class_first = art.class_logp.astype(np.float64)[None, :]
    for i in range(art.n_features):
        class_first = class_first + terms[:, i]
    pairwise = art.class_logp.astype(np.float64)[None, :] + np.ascontiguousarray(terms.transpose(0, 2, 1)).sum(axis=2)
    expected = ReferencePredictor(art).log_joint(rows)
    assert np.sum(class_first != expected) > 50 and np.sum(pairwise != expected) > 50, "the order does not show"
    assert_identical(java_classes, art, model, rows, tmp_path)


@pytest.mark.parametrize("bits", [3, None], ids=["3bit", "float"])
def test_java_library_api_matches_the_reference(java_classes, tmp_path, bits):
    art = case_artifact("tan", bits, 1 if bits else None)
    model = tmp_path / "model.bnc"
    save_artifact(art, model)
    done = run_java(java_classes, model, main="ApiHarness")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"tan {bits or 32} {art.n_features} {art.n_classes}"
    assert lines[1].split("|") == art.class_names and lines[2].split("|") == art.feature_names
    assert lines[3] == str(art.cardinalities.tolist()) and lines[4] == str(art.parents.tolist())
    reference = ReferencePredictor(art)
    rows = [line.split(",") for line in lines[5:]]
    assert np.array_equal([int(r[0]) for r in rows], reference.predict(art.check_x))
    scores = np.array([[float.fromhex(v.split(":")[0]) for v in r[1:]] for r in rows])
    proba = np.array([[float.fromhex(v.split(":")[1]) for v in r[1:]] for r in rows])
    assert np.array_equal(scores, reference.log_joint(art.check_x))
    np.testing.assert_allclose(proba, reference.predict_proba(art.check_x), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("bits", [2, None], ids=["2bit", "float"])
def test_raw_values_go_through_the_stored_discretizer(java_classes, tmp_path, bits):
    cuts = [[-1.0, 2.5], [], [0.0, 0.1, 7.0], [1e-3], [-3.75, -2.0, 0.5, 1e6]]
    cards = [len(c) + 1 for c in cuts]
    art = random_bnc_artifact(
        np.random.default_rng(5),
        cardinalities=cards,
        n_classes=4,
        tan=True,
        bits=bits,
        discretizer=discretizer_dict(cuts),
    )
    model = tmp_path / "raw.bnc"
    save_artifact(art, model)
    rng = np.random.default_rng(11)
    raw = rng.normal(0.0, 3.0, size=(200, len(cuts)))
    for j, feature_cuts in enumerate(cuts):  # values exactly at a cut fall in the lower bin: check that edge
        if feature_cuts:
            raw[: len(feature_cuts), j] = feature_cuts
    raw[-1] = -0.0
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text("".join(",".join(repr(float(v)) for v in row) + "\n" for row in raw), encoding="utf-8")
    labels, _, scores = predict_java(java_classes, "--raw", "--scores", "hex", model, csv_path)
    reference = ReferencePredictor(art)
    assert np.array_equal(labels, reference.predict_raw(raw))
    assert np.array_equal(scores, reference.log_joint_raw(raw))

    bad = tmp_path / "nan.csv"
    bad.write_text("0,0,0,0,0\n1,2,NaN,3,4\n", encoding="utf-8")
    done = run_java(java_classes, "--raw", model, bad)
    assert done.returncode == 2 and done.stdout == ""
    assert "line 2: feature 2 ('feat2') has non-finite value NaN in row 1" in done.stderr


def test_header_hash_covers_unicode_names_and_float_metadata(java_classes, tmp_path):
    """The content hash needs Python's canonical JSON: escapes of non-ASCII, quotes, control characters,
    and float tokens as Python prints them."""
    art = random_bnc_artifact(np.random.default_rng(3), d=3, n_classes=5, bits=4)
    art.class_names = ["größe", 'naïve, "quoted"', "emoji \U0001f600", "tab\tand\\back", "ctrl\x01\x7f\u20ac"]
    art.feature_names = ["α", "b/c", "\ue000 private"]
    art.metadata = {
        "lr": 3e-3,
        "tiny": 1e-05,
        "big": 1e16,
        "neg": -0.0,
        "max": 1.7976931348623157e308,
        "min": 5e-324,
        "int": 2**70,
        "nested": [1.5, {"b": None, "a": True, "\U0001f600": "x"}],
        "\uffff": 1,
        "\U00010000": 2,
    }
    model = tmp_path / "unicode.bnc"
    save_artifact(art, model)
    labels, names, _ = predict_java(java_classes, "--check-set", model)
    assert np.array_equal(labels, ReferencePredictor(art).predict(art.check_x))
    assert names == [art.class_names[k] for k in labels]


# -- refusals -------------------------------------------------------------------------------------------


@pytest.fixture
def small_model(tmp_path):
    art = random_bnc_artifact(np.random.default_rng(9), d=4, n_classes=3, bits=3, tan=True, cardinalities=[3, 5, 2, 4])
    model = tmp_path / "small.bnc"
    save_artifact(art, model)
    return art, model


def refused(classes: Path, *args, stdin: str | None = None) -> str:
    done = run_java(classes, *args, stdin=stdin)
    assert done.returncode == 2, f"expected exit status 2, got {done.returncode}:\n{done.stdout}{done.stderr}"
    assert done.stdout == "", "no rows may be printed when the input is refused"
    assert done.stderr.startswith("bnc-predict: error: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr.strip()


@pytest.mark.parametrize(
    "rows,message",
    [
        ("0,0,0,0\n1,2,1\n", "line 2: row 1 has 3 values, expected 4 features"),
        ("0,0,0,0\n0,0,0,0,0\n", "line 2: row 1 has 5 values, expected 4 features"),
        ("0,0,0,0\n\n# comment\n2,5,1,3\n", "line 4: feature 1 ('feat1') has value 5 in row 1, outside its range 0..4"),
        ("0,0,-1,0\n", "line 1: feature 2 ('feat2') has value -1 in row 0, outside its range 0..1"),
        ("0,0,0,x\n", "line 1: feature 3 ('feat3') has value 'x' in row 0, not an integer code"),
        ("0,1.0,0,0\n", "line 1: feature 1 ('feat1') has value '1.0' in row 0, not an integer code"),
    ],
    ids=["short-row", "long-row", "out-of-range", "negative", "text", "float"],
)
def test_bad_rows_are_refused_naming_row_feature_and_value(java_classes, small_model, tmp_path, rows, message):
    _, model = small_model
    error = refused(java_classes, model, _text(tmp_path, rows))
    assert message in error
    # The same rows through stdin name "<stdin>".
    assert "<stdin> " + message in refused(java_classes, model, "-", stdin=rows)


def _text(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    return path


def rewrite(source: Path, target: Path, *, header=None, arrays=None) -> Path:
    """Copy a model file, changing its header (a function of the dict) or array entries (name -> .npy bytes
    function), without fixing the content hash: what a tampered or damaged file looks like."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name == "header.json" and header is not None:
                data = json.dumps(header(json.loads(data)), sort_keys=True, indent=1).encode()
            elif arrays and name in arrays:
                data = arrays[name](data)
            zout.writestr(name, data)
    return target


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 1])


def _damage(kind: str, model: Path, tmp_path: Path) -> tuple[Path, str]:
    target = tmp_path / f"{kind}.bnc"
    if kind == "table-byte":
        return rewrite(model, target, arrays={"arrays/table_codes.npy": _flip_last_byte}), "content hash mismatch"
    if kind == "class-name":
        return rewrite(
            model, target, header=lambda h: dict(h, class_names=["x"] + h["class_names"][1:])
        ), "content hash mismatch"
    if kind == "metadata":
        return rewrite(model, target, header=lambda h: dict(h, metadata={"note": "edited"})), "content hash mismatch"
    if kind == "dropped-array":
        with zipfile.ZipFile(model) as zin, zipfile.ZipFile(target, "w") as zout:
            for name in zin.namelist():
                if name != "arrays/check_y.npy":
                    zout.writestr(name, zin.read(name))
        return target, "content hash mismatch"
    if kind == "newer-version":
        return rewrite(
            model, target, header=lambda h: dict(h, format_version=2)
        ), "written by a newer bnc-deploy (model format version 2)"
    if kind == "not-a-model":
        return rewrite(
            model, target, header=lambda h: dict(h, format="something-else")
        ), "not a bnc-deploy model file (format is 'something-else')"
    if kind == "truncated":
        target.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
        return target, str(target)
    if kind == "not-a-zip":
        target.write_text("label,f0\n1,2\n")
        return target, "not a bnc-deploy model file"
    if kind == "bad-crc":
        data = bytearray(model.read_bytes())
        with zipfile.ZipFile(model) as zf:
            info = zf.getinfo("header.json")
        # Flip one byte of the header's compressed data: the deflate stream or its CRC check fails.
        data[info.header_offset + 30 + len(info.filename) + 5] ^= 0xFF
        target.write_bytes(bytes(data))
        return target, str(target)
    if kind == "extra-entry":
        with zipfile.ZipFile(model) as zin, zipfile.ZipFile(target, "w") as zout:
            for name in zin.namelist():
                zout.writestr(name, zin.read(name))
            zout.writestr("notes.txt", "hello")
        return target, "unexpected entry 'notes.txt' in model file"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "table-byte",
        "class-name",
        "metadata",
        "dropped-array",
        "newer-version",
        "not-a-model",
        "truncated",
        "not-a-zip",
        "bad-crc",
        "extra-entry",
    ],
)
def test_damaged_or_tampered_model_files_are_refused(java_classes, small_model, tmp_path, kind):
    _, model = small_model
    damaged, message = _damage(kind, model, tmp_path)
    with pytest.raises(ArtifactError):  # the Python reader refuses it too: the damage is real
        load_artifact(damaged)
    error = refused(java_classes, "--check-set", damaged)
    assert message in error and str(damaged) in error


def test_other_refusals(java_classes, small_model, tmp_path):
    art, model = small_model
    assert "no such model file" in refused(java_classes, "--check-set", tmp_path / "missing.bnc")
    assert "is a directory" in refused(java_classes, "--check-set", tmp_path)
    assert f"{tmp_path / 'missing.csv'} (No such file" in refused(java_classes, model, tmp_path / "missing.csv")
    dnn = tmp_path / "dnn.bnc"
    save_artifact(random_dnn_artifact(0), dnn)
    assert "reads Bayesian network classifiers (kind 'bnc'); the file holds kind 'dnn'" in refused(
        java_classes, "--check-set", dnn
    )
    assert "stores no discretizer" in refused(java_classes, "--raw", model, _text(tmp_path, "0,0,0,0\n"))
    float_model = tmp_path / "float.bnc"
    save_artifact(random_bnc_artifact(np.random.default_rng(1), d=2, bits=None), float_model)
    assert "needs a quantized model" in refused(java_classes, "--check-set", "--scores", "integer", float_model)
    assert "--scores must be" in refused(java_classes, "--scores", "bits", model, "-", stdin="")
    # The model file is untouched by all of this and still predicts.
    labels, _, _ = predict_java(java_classes, "--check-set", model)
    assert np.array_equal(labels, ReferencePredictor(art).predict(art.check_x))


# -- the paper's data ---------------------------------------------------------------------------------------


@pytest.mark.shared_data
@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ("--data", "letter", "--model", "nb", "--bits", "3", "--int-bits", "2"),
        ("--data", "letter", "--model", "tan", "--bits", "3", "--int-bits", "2"),
        ("--data", "letter-raw", "--model", "nb"),
    ],
    ids=["letter-nb-3bit", "letter-tan-3bit", "letter-raw-nb-float"],
)
def test_java_predictor_on_letter(java_classes, tmp_path, shared_datasets, monkeypatch, args):
    from bnc_deploy.cli.train import main as train

    monkeypatch.setenv("BNC_DEPLOY_DATA_DIR", str(shared_datasets))
    model = tmp_path / "letter.bnc"
    assert train(["--quiet", "--init", "ml", "--epochs", "0", "-o", str(model), *args]) == 0
    art = load_artifact(model)
    rows = np.concatenate([art.check_x.astype(np.int64), random_valid_codes(art.cardinalities, N_RANDOM_ROWS, seed=7)])
    assert_identical(java_classes, art, model, rows, tmp_path)
    if art.discretizer is not None:  # every raw row of the data set through the stored cut points
        from bnc_deploy.datasets import loaders

        raw = loaders.read_letter(shared_datasets / "raw" / "letter" / "letter-recognition.data").x
        csv_path = tmp_path / "raw.csv"
        csv_path.write_text("".join(",".join(repr(float(v)) for v in row) + "\n" for row in raw), encoding="utf-8")
        labels, _, scores = predict_java(java_classes, "--raw", "--scores", "hex", model, csv_path)
        reference = ReferencePredictor(art)
        assert np.array_equal(labels, reference.predict_raw(raw))
        assert np.array_equal(scores, reference.log_joint_raw(raw))
