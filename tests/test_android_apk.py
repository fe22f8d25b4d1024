"""The Java Android sample (``samples/android/java``) built into a signed APK, and the code inside it checked.

``samples/android/build_apk.py`` builds the APK once per module (Debian's javac, dx, aapt, zipalign,
apksigner; a random TAN 3-bit model with 64 check rows as its asset). Checked: ``apksigner verify`` (v1 and
v2 signatures), ``aapt dump badging`` (package, launchable activity, minSdk 21), the alignment, the assets.
Then ``classes.dex`` is taken out of the APK and turned back into JVM bytecode (enjarify, through
``samples/android/check_apk.py``), and the classes from that jar run on the JVM: the app's own check-set
button logic (``CheckSet``), and the predictor's command line (``bncdeploy.Main``) on NB and TAN models at
several bit widths and float, and on letter's test rows when ``../shared/datasets`` is there. Labels and
scores must be identical to the Python reference (``ReferencePredictor``), bit for bit.

No device, emulator or ART runs here: the dex is checked through its JVM translation. Skipped, with the
reason, where a tool is missing; failed instead under ``BNC_DEPLOY_REQUIRE_ANDROID=1`` (CI installs the
Debian packages and sets it).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from support import REPO_ROOT
from test_java_predictor import N_RANDOM_ROWS, assert_identical, case_artifact, predict_java, run_java

from bnc_deploy.artifacts import load_artifact, save_artifact
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.validation import random_valid_codes

pytestmark = pytest.mark.slow
SAMPLE = REPO_ROOT / "samples" / "android"
PACKAGE = "io.github.bncdeploy.javasample"
CASES = [("nb", 1, 1), ("nb", 3, 2), ("nb", 8, 4), ("nb", None, None), ("tan", 2, 4), ("tan", 5, 6)]
CASES += [("tan", 7, 2), ("tan", None, None)]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"android_{name}", SAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_apk = _script("build_apk")
check_apk = _script("check_apk")


def _unavailable(reason: str):
    if os.environ.get("BNC_DEPLOY_REQUIRE_ANDROID") == "1":  # CI installed the tools: these tests must run
        pytest.fail(reason + " - required by BNC_DEPLOY_REQUIRE_ANDROID=1")
    pytest.skip(reason)


def _cache() -> Path:
    return build_apk.parse_args([]).cache


def _require_tools() -> None:
    """The build's tools, enjarify, and dx + android.jar (fetched from Debian 11 into the cache once)."""
    try:
        build_apk.check_tools()
        check_apk.enjarify_python()
        build_apk.android_sdk(_cache())
    except (build_apk.BuildError, check_apk.CheckError) as exc:
        _unavailable(f"cannot build an APK here: {exc}")


@pytest.fixture(scope="module")
def apk(tmp_path_factory):
    """(the signed APK, the artifact bundled in it)."""
    _require_tools()
    tmp = tmp_path_factory.mktemp("android")
    art = random_bnc_artifact(np.random.default_rng(31), d=12, n_classes=5, tan=True, bits=3, n_check=64)
    save_artifact(art, tmp / "model.bnc")
    out = tmp / "out" / "app.apk"
    done = subprocess.run(
        [sys.executable, SAMPLE / "build_apk.py", tmp / "model.bnc", "-o", out, "--build-dir", tmp / "build"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, f"build_apk.py failed:\n{done.stdout}{done.stderr}"
    assert f"wrote {out}" in done.stdout
    return out, load_artifact(tmp / "model.bnc")


@pytest.fixture(scope="module")
def fromdex(apk, tmp_path_factory) -> dict[str, Path]:
    """The APK's classes.dex, model.bnc and check.txt, and ``jar``: the dex converted back to JVM classes."""
    folder = tmp_path_factory.mktemp("fromdex")
    files = check_apk.extract(apk[0], folder)
    files["jar"] = check_apk.dex_to_jar(files["classes.dex"], folder / "fromdex.jar")
    return files


def test_apk_is_signed_aligned_and_declares_the_activity(apk):
    path, _ = apk
    verify = subprocess.run(["apksigner", "verify", "--verbose", path], capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stderr
    assert verify.stdout.startswith("Verifies")
    for scheme in ("v1 scheme (JAR signing): true", "v2 scheme (APK Signature Scheme v2): true"):
        assert f"Verified using {scheme}" in verify.stdout  # v1 for Android 5-6, v2 from 7 on
    badging = subprocess.run(["aapt", "dump", "badging", path], capture_output=True, text=True, check=False)
    assert badging.returncode == 0, badging.stderr
    assert f"package: name='{PACKAGE}'" in badging.stdout
    assert f"launchable-activity: name='{PACKAGE}.MainActivity'" in badging.stdout
    assert "sdkVersion:'21'" in badging.stdout.splitlines()
    aligned = subprocess.run(["zipalign", "-c", "-p", "4", path], capture_output=True, text=True, check=False)
    assert aligned.returncode == 0, aligned.stdout + aligned.stderr
    assert sorted(p.name for p in path.parent.iterdir()) == ["app.apk"], "a temporary file was left behind"


def test_apk_bundles_the_model_and_the_reference_results(apk, fromdex):
    path, art = apk
    with zipfile.ZipFile(path) as zf:
        assert zf.getinfo("assets/model.bnc").compress_type == zipfile.ZIP_STORED
    assert fromdex["classes.dex"].read_bytes()[:8] == b"dex\n035\x00"  # the dex version every Android reads
    assert load_artifact(fromdex["model.bnc"]).content_sha256 == art.content_sha256
    check = dict(line.split(" ", 1) for line in fromdex["check.txt"].read_text().splitlines() if line[:1] != "#")
    expected = ReferencePredictor(art).predict(art.check_x.astype(np.int64))
    assert check["labels"] == ",".join(map(str, expected))
    with zipfile.ZipFile(fromdex["jar"]) as jar:
        names = set(jar.namelist())
    assert {f"{PACKAGE.replace('.', '/')}/{c}.class" for c in ("MainActivity", "CheckSet", "R$string")} <= names
    assert {f"bncdeploy/{c}.class" for c in ("BncModel", "ModelContainer", "Main")} <= names


def test_app_check_set_from_the_dex_passes_and_detects_a_difference(fromdex, tmp_path):
    done = check_apk.run_check_set(fromdex["jar"], fromdex["model.bnc"], fromdex["check.txt"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("passed: 64/64 labels equal the Python reference's; scores identical")
    text = fromdex["check.txt"].read_text()
    labels = next(line for line in text.splitlines() if line.startswith("labels "))
    values = labels.split(" ")[1].split(",")
    values[5] = str((int(values[5]) + 1) % 5)
    edited = tmp_path / "check.txt"
    edited.write_text(text.replace(labels, "labels " + ",".join(values)))
    done = check_apk.run_check_set(fromdex["jar"], fromdex["model.bnc"], edited)
    assert done.returncode == 1 and done.stdout.startswith("FAILED: 63/64 labels equal"), done.stdout
    assert "first difference: row 5" in done.stdout and "scores identical" in done.stdout
    scores = next(line for line in text.splitlines() if line.startswith("scores_sha256 "))
    edited.write_text(text.replace(scores, "scores_sha256 " + "0" * 64))
    done = check_apk.run_check_set(fromdex["jar"], fromdex["model.bnc"], edited)
    assert done.returncode == 1 and "scores DIFFER" in done.stdout, done.stdout


@pytest.mark.parametrize(
    "structure,bits,int_bits", CASES, ids=[f"{s}-{'float' if b is None else f'{b}bit-BI{i}'}" for s, b, i in CASES]
)
def test_predictor_from_the_dex_is_identical_to_the_reference(fromdex, tmp_path, structure, bits, int_bits):
    art = case_artifact(structure, bits, int_bits)
    model = tmp_path / "model.bnc"
    save_artifact(art, model)
    rows = np.concatenate([art.check_x.astype(np.int64), random_valid_codes(art.cardinalities, N_RANDOM_ROWS, seed=7)])
    assert_identical(fromdex["jar"], art, model, rows, tmp_path)
    labels, _, scores = predict_java(fromdex["jar"], "--check-set", "--scores", "hex", model)
    reference = ReferencePredictor(art)
    assert np.array_equal(labels, reference.predict(art.check_x)) and np.array_equal(
        scores, reference.log_joint(art.check_x)
    )


def test_bundled_model_and_refusals_from_the_dex(apk, fromdex, tmp_path):
    _, art = apk
    labels, _, scores = predict_java(fromdex["jar"], "--check-set", "--scores", "hex", fromdex["model.bnc"])
    reference = ReferencePredictor(art)
    assert np.array_equal(labels, reference.predict(art.check_x)) and np.array_equal(
        scores, reference.log_joint(art.check_x)
    )
    bad = tmp_path / "bad.csv"
    bad.write_text(",".join(["0"] * art.n_features) + "\n" + ",".join(["0"] * (art.n_features - 1)) + "\n")
    done = run_java(fromdex["jar"], fromdex["model.bnc"], bad)
    assert done.returncode == 2 and done.stdout == ""
    assert f"line 2: row 1 has {art.n_features - 1} values, expected {art.n_features} features" in done.stderr


@pytest.mark.shared_data
@pytest.mark.parametrize(
    "args",
    [("letter", "nb", "3"), ("letter", "tan", "3"), ("letter-raw", "nb", None)],
    ids=["letter-nb-3bit", "letter-tan-3bit", "letter-raw-nb-float"],
)
def test_predictor_from_the_dex_on_letter(fromdex, tmp_path, shared_datasets, monkeypatch, args):
    """Letter's test rows (codes), or every raw row through the stored discretizer, against the reference."""
    from bnc_deploy.cli.train import main as train
    from bnc_deploy.datasets import load_dataset, loaders

    data, structure, bits = args
    monkeypatch.setenv("BNC_DEPLOY_DATA_DIR", str(shared_datasets))
    model = tmp_path / "letter.bnc"
    quantized = ["--bits", bits, "--int-bits", "2"] if bits else []
    argv = ["--quiet", "--init", "ml", "--epochs", "0", "--data", data, "--model", structure, *quantized]
    assert train([*argv, "-o", str(model)]) == 0
    art = load_artifact(model)
    if art.discretizer is None:
        rows = load_dataset(data, data_dir=shared_datasets).x_test.astype(np.int64)
        assert len(rows) > 6000
        assert_identical(fromdex["jar"], art, model, rows, tmp_path)
        return
    raw = loaders.read_letter(shared_datasets / "raw" / "letter" / "letter-recognition.data").x
    csv_path = tmp_path / "raw.csv"
    csv_path.write_text("".join(",".join(repr(float(v)) for v in row) + "\n" for row in raw), encoding="utf-8")
    labels, _, scores = predict_java(fromdex["jar"], "--raw", "--scores", "hex", model, csv_path)
    reference = ReferencePredictor(art)
    assert len(raw) == 20000
    assert np.array_equal(labels, reference.predict_raw(raw)) and np.array_equal(scores, reference.log_joint_raw(raw))


def test_missing_model_is_one_clear_error(tmp_path):
    """Bad input fails before any tool runs, in one line, and leaves nothing at the output path."""
    out = tmp_path / "app.apk"
    done = subprocess.run(
        [sys.executable, SAMPLE / "build_apk.py", tmp_path / "missing.bnc", "-o", out, "--build-dir", tmp_path / "b"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and not out.exists()
    assert done.stderr == f"build_apk: error: {tmp_path / 'missing.bnc'}: no such model file\n"
