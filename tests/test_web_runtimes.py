"""Exports in JavaScript runtimes: onnxruntime-web and LiteRT.js in headless Chromium, onnxruntime-node.

The models (BN and DNN, acceptance set of issue 16): a random 3-bit naive Bayes (gather
lowering), a random 5-bit TAN, a raw-input NB (the file discretizes float inputs), a sign FC and
a ReLU CNN from :mod:`bnc_deploy.testing`, and the letter NB 3-bit trained with ``bnc-train``
when the shared datasets are present. Each is exported through the one verifier
(:func:`bnc_deploy.verify.export_file`) as ``.onnx``, ``.ort`` (when the ``ort`` exporter is
registered) and ``.tflite`` with the profiles LiteRT.js loads (``web`` when registered, also with
``web_batch=16`` for two models so that batching and padding are exercised, and with the
standard ``TFLITE_METADATA`` (``metadata=True``) for two; ``micro``: int32 label, static batch 1).
Rows: the verification rows (check set + 256 seeded random rows), plus letter's 6658 test rows
for the letter model. The JavaScript side is ``samples/web/bnc_web.mjs``
(the sample page's own code) driven by ``tests/web/run_manifest.mjs``; it returns float32 scores
as raw bytes, so the comparison below is bit for bit:

* exact files (metadata ``exact``): every label and every float32 score bit identical to the
  Python reference predictor on those rows;
* other files (int8 ReLU networks): every label identical to the same file in its Python runtime
  (onnxruntime / LiteRT), agreement with the reference at least ``MIN_INEXACT_AGREEMENT``;
* the file's stored check set passes in JavaScript, and the metadata read by the page's own
  readers (protobuf / FlatBuffers walkers) equals Python's;
* bad input is refused with a message: an out-of-range code (naming row and feature), a cut file,
  a default-profile TFLite file in LiteRT.js (naming ``--profile web``).

The browser run also drives the sample page (``samples/web/index.html``): picks a file with the
file input, classifies a typed row, runs the file's check set, and saves a screenshot.

Needs ``node`` (>= 20), ``tests/web/node_modules`` (``ONNXRUNTIME_NODE_INSTALL=skip npm ci --prefix
tests/web``) and, for the browser, Debian's ``chromium`` (``BNC_DEPLOY_CHROMIUM`` names another
binary); each test skips naming what is missing, or fails when ``BNC_DEPLOY_REQUIRE_WEB=1`` (CI
sets it after installing all three, so these run there).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from support import REPO_ROOT, SHARED_DATASETS

from bnc_deploy.exporters.base import exporters
from bnc_deploy.reference import reference_predictor
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import MIN_INEXACT_AGREEMENT, discretizer_dict, random_bnc_artifact, random_dnn_artifact
from bnc_deploy.verify import export_file, verification_rows

pytestmark = pytest.mark.slow

WEB = REPO_ROOT / "tests" / "web"
NODE_MODULES = WEB / "node_modules"
CHROMIUM = os.environ.get("BNC_DEPLOY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
NPM_CI = "ONNXRUNTIME_NODE_INSTALL=skip npm ci --prefix tests/web"
#: Files picked in the sample page (each with its first verification row typed in): codes into
#: onnxruntime-web, a DNN in ORT format, raw values into LiteRT.js (web profile).
SAMPLE_MODELS = ("nb3-gather.onnx", "fc-sign.ort", "nb4-raw.web.tflite")


#: CI sets this after installing Chromium and the npm packages: then a missing piece fails instead of skipping.
REQUIRED = os.environ.get("BNC_DEPLOY_REQUIRE_WEB", "") not in ("", "0")


def _missing(reason: str):
    if REQUIRED:
        pytest.fail(f"BNC_DEPLOY_REQUIRE_WEB is set but {reason}")
    pytest.skip(reason)


def require_node_modules(*packages: str) -> str:
    node = shutil.which("node")
    if node is None:
        _missing("node (>= 20) not found (CI: install Node.js 20 and npm)")
    missing = [p for p in packages if not (NODE_MODULES / p / "package.json").is_file()]
    if missing:
        _missing(f"{', '.join(missing)} not installed under tests/web/node_modules (run: {NPM_CI})")
    return node


def require_chromium() -> None:
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        _missing(f"Chromium not found at {CHROMIUM} (CI: apt-get install -y --no-install-recommends chromium)")


# ------------------------------------------------------------------------------------------------
# Models, exports and their Python references
# ------------------------------------------------------------------------------------------------
@dataclass
class Export:
    name: str  # file name in the models folder, e.g. "nb3-gather.onnx"
    path: Path
    fed: np.ndarray  # rows as fed to the file (codes, or raw float32 values)
    ref_scores: np.ndarray
    ref_labels: np.ndarray
    exact: bool
    metadata: dict
    runtime_labels: np.ndarray = field(default=None)  # the same file in its Python runtime
    runtime_scores: np.ndarray = field(default=None)


def tflite_web_profiles() -> list[str]:
    """TFLite ``--profile`` values whose files LiteRT.js loads (int32 label, static batch)."""
    spec = exporters().get(("bnc", "tflite"))
    choices = next((o.choices for o in spec.options if o.name == "profile"), ()) if spec else ()
    return [p for p in ("web", "micro") if p in choices]


def tflite_option(name: str) -> bool:
    """Whether both TFLite exporters declare option ``name`` (options added by other work items)."""
    specs = [exporters().get((kind, "tflite")) for kind in ("bnc", "dnn")]
    return all(spec is not None and any(o.name == name for o in spec.options) for spec in specs)


def ort_format_registered() -> bool:
    return ("bnc", "ort") in exporters() and ("dnn", "ort") in exporters()


#: Name of the default-profile TFLite entry of the browser manifest.
DEFAULT_TFLITE = "nb3-gather.default.tflite"
#: Models also exported with a larger static web batch (chunks of 16, the last one padded).
WEB_BATCH_STEMS = ("nb3-gather", "cnn-relu")
#: Models also exported with the standard TFLITE_METADATA (Android tooling) beside ours.
TFLITE_METADATA_STEMS = ("nb3-gather", "fc-sign")


def formats_for(stem: str) -> list[tuple[str, str, dict]]:
    """``(format, file suffix, exporter options)`` of every file made from model ``stem``."""
    out = [("onnx", ".onnx", {})]
    if ort_format_registered():
        out.append(("ort", ".ort", {}))
    for profile in tflite_web_profiles():
        if profile == "micro" and stem.endswith("-raw"):
            continue  # the micro profile takes codes only
        out.append(("tflite", f".{profile}.tflite", {"profile": profile}))
        if profile == "web" and stem in WEB_BATCH_STEMS and tflite_option("web_batch"):
            out.append(("tflite", ".web16.tflite", {"profile": "web", "web_batch": 16}))
        if profile == "web" and stem in TFLITE_METADATA_STEMS and tflite_option("metadata"):
            out.append(("tflite", ".web-meta.tflite", {"profile": "web", "metadata": True}))
    return out


def random_artifacts() -> dict[str, object]:
    rng = np.random.default_rng(16)
    cuts = [[-1.5, 0.25, 2.0], [0.5], [], [-0.75, 0.0, 0.75, 1.5]]
    return {
        "nb3-gather": random_bnc_artifact(rng, d=8, n_classes=4, tan=False, bits=3, int_bits=2, n_check=40),
        "tan5": random_bnc_artifact(rng, d=7, n_classes=3, tan=True, bits=5, int_bits=3, n_check=40),
        "nb4-raw": random_bnc_artifact(
            rng,
            n_classes=3,
            tan=False,
            bits=4,
            int_bits=2,
            n_check=40,
            cardinalities=[4, 2, 1, 5],
            discretizer=discretizer_dict(cuts),
        ),
        "fc-sign": random_dnn_artifact(5, architecture="fc", activation="sign", bits=2),
        "cnn-relu": random_dnn_artifact(6, architecture="cnn", activation="relu", bits=2),
    }


def letter_artifact(folder: Path):
    """letter NB 3-bit (ML counts, no epochs) trained with the bnc-train CLI, or None without data."""
    if not (SHARED_DATASETS / "discretized").is_dir():
        return None
    from bnc_deploy.artifacts import load_artifact

    out = folder / "letter-nb3.bnc"
    cmd = [
        sys.executable,
        "-c",
        "from bnc_deploy.cli.train import main; main()",
        "--data",
        "letter",
        "--model",
        "nb",
        "--init",
        "ml",
        "--epochs",
        "0",
        "--bits",
        "3",
        "--quiet",
        "-o",
        str(out),
    ]
    env = dict(os.environ, BNC_DEPLOY_DATA_DIR=str(SHARED_DATASETS))
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600, env=env)
    return load_artifact(out)


def letter_test_rows() -> np.ndarray:
    from bnc_deploy.datasets import load_dataset

    return np.asarray(load_dataset("letter", data_dir=SHARED_DATASETS).x_test, dtype=np.int64)


def export_one(artifact, folder: Path, stem: str, fmt: str, extension: str, rows: np.ndarray, **options) -> Export:
    path = folder / f"{stem}{extension}"
    report = export_file(artifact, path, fmt, **options)
    meta = report.metadata
    reference = reference_predictor(artifact)
    if meta.get("input") == "raw":
        from bnc_deploy.formats.bnc import raw_representatives

        fed = raw_representatives(artifact, rows)
        codes = reference.discretize(fed.astype(np.float64))
    else:
        fed, codes = rows, rows
    scores = np.asarray(reference.log_joint(codes))
    export = Export(path.name, path, fed, scores, np.argmax(scores, axis=1), bool(meta["exact"]), meta)
    rt = load_runtime(path, threads=1)
    export.runtime_scores, export.runtime_labels = rt.run(fed)
    return export


@pytest.fixture(scope="module")
def web_exports(tmp_path_factory) -> dict[str, Export]:
    """Every model in every format the JavaScript runtimes read, with its reference outputs."""
    folder = tmp_path_factory.mktemp("web-models")
    artifacts = random_artifacts()
    letter = letter_artifact(folder)
    if letter is not None:
        artifacts["letter-nb3"] = letter
    exports = {}
    for stem, artifact in artifacts.items():
        rows, _ = verification_rows(artifact)
        if stem == "letter-nb3":
            rows = np.concatenate([rows, letter_test_rows()])
        options = {"raw_inputs": True} if stem.endswith("-raw") else {}
        for fmt, suffix, extra in formats_for(stem):
            export = export_one(artifact, folder, stem, fmt, suffix, rows, **options, **extra)
            exports[export.name] = export
    return exports


def write_manifest(exports: dict[str, Export], names, folder: Path, filename: str) -> Path:
    models = []
    for name in names:
        e = exports[name]
        raw = e.metadata.get("input") == "raw"
        rows = e.fed.astype(np.float32 if raw else np.int64).tolist()
        models.append({"name": name, "file": os.path.relpath(e.path, folder), "rows": rows})
    path = folder / filename
    path.write_text(json.dumps({"models": models}))
    return path


# ------------------------------------------------------------------------------------------------
# Comparison
# ------------------------------------------------------------------------------------------------
METADATA_KEYS = ("model_kind", "format", "class_names", "feature_names", "cardinalities", "input", "exact", "check")


def assert_matches(export: Export, result: dict, where: str) -> None:
    assert "error" not in result, f"{where} failed on {export.name}: {result.get('error')}"
    n, c = export.ref_scores.shape
    scores = np.frombuffer(base64.b64decode(result["scores_f32le_b64"]), dtype="<f4").reshape(n, c)
    labels = np.asarray(result["labels"], dtype=np.int64)
    assert labels.shape == (n,), f"{where} {export.name}: {labels.shape[0]} labels for {n} rows"
    # The page's own metadata readers (protobuf / FlatBuffers) must see what Python sees.
    for key in METADATA_KEYS:
        if key in export.metadata:
            assert result["meta"].get(key) == export.metadata[key], f"{where} {export.name}: metadata {key} differs"
    assert result["check"]["ok"] is True, f"{where} {export.name}: stored check set: {result['check']['reason']}"
    if export.exact:
        ref32 = export.ref_scores.astype(np.float32)
        differ = np.flatnonzero((scores.view(np.uint32) != ref32.view(np.uint32)).any(axis=1))
        assert differ.size == 0, (
            f"{where} {export.name}: float32 scores of {differ.size} of {n} rows differ from "
            f"the reference bit for bit (first row {differ[0]}: {scores[differ[0]]} vs "
            f"{ref32[differ[0]]})"
        )
        bad = np.flatnonzero(labels != export.ref_labels)
        assert bad.size == 0, f"{where} {export.name}: labels of {bad.size} rows differ from the reference"
    else:
        bad = np.flatnonzero(labels != np.asarray(export.runtime_labels))
        assert bad.size == 0, (
            f"{where} {export.name}: labels of {bad.size} of {n} rows differ from the same file in its Python runtime"
        )
        agreement = float(np.mean(labels == export.ref_labels))
        assert agreement >= MIN_INEXACT_AGREEMENT, f"{where} {export.name}: {agreement:.2%} agree with the reference"
        assert np.all(np.isfinite(scores))


# ------------------------------------------------------------------------------------------------
# Runs (one process per runtime for all models; the per-model tests read its results)
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser_node() -> str:
    """``node``, once Chromium and the browser's npm packages are known to be there (before any export)."""
    node = require_node_modules("playwright-core", "onnxruntime-web", "@litertjs/core")
    require_chromium()
    return node


@pytest.fixture(scope="module")
def ort_node() -> str:
    return require_node_modules("onnxruntime-node")


@pytest.fixture(scope="module")
def browser_run(browser_node, web_exports, tmp_path_factory) -> dict:
    node = browser_node
    folder = next(iter(web_exports.values())).path.parent
    manifest = write_manifest(web_exports, sorted(web_exports), folder, "manifest-browser.json")
    # A default-profile TFLite file (int64 label, dynamic batch): LiteRT.js must refuse it, and the
    # page must say which export to use instead.
    default = folder / "nb3-gather.default.tflite"
    export_file(random_artifacts()["nb3-gather"], default, "tflite")
    data = json.loads(manifest.read_text())
    data["models"].append(
        {"name": DEFAULT_TFLITE, "file": default.name, "rows": web_exports["nb3-gather.onnx"].fed[:3].tolist()}
    )
    # A cut TFLite file whose metadata sits in the first half (the page's reader sees it): then
    # LiteRT.js must refuse the file, with an error and not a hang or a wrong answer.
    if "nb3-gather.web.tflite" in web_exports:
        data["models"].append(cut_entry(web_exports["nb3-gather.web.tflite"], folder))
    manifest.write_text(json.dumps(data))
    out_dir = tmp_path_factory.mktemp("web-browser")
    out = out_dir / "browser.json"
    samples = [
        {
            "model": str(web_exports[name].path),
            "row": row_text(web_exports[name].fed[0]),
            "screenshot": str(out_dir / f"sample-{name}.png"),
        }
        for name in SAMPLE_MODELS
        if name in web_exports
    ]
    (out_dir / "samples.json").write_text(json.dumps(samples))
    cmd = [
        node,
        str(WEB / "browser_check.mjs"),
        "--manifest",
        str(manifest),
        "--out",
        str(out),
        "--chromium",
        CHROMIUM,
        "--samples",
        str(out_dir / "samples.json"),
    ]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900)
    result = json.loads(out.read_text()) if out.is_file() else {}
    console = "\n".join(result.get("console", [])[-30:])
    assert proc.returncode == 0, (
        f"browser run failed ({proc.returncode}): {result.get('error')}\n{proc.stderr[-3000:]}\n{console}"
    )
    result["samples"] = {
        spec["model"]: dict(sample, screenshot=Path(spec["screenshot"]))
        for spec, sample in zip(samples, result.get("samples", []))
    }
    return result


def row_text(row: np.ndarray) -> str:
    """A row as a person types it: integers for codes, float32 values in full (repr) for raw inputs."""
    if np.issubdtype(row.dtype, np.integer):
        return ", ".join(str(int(v)) for v in row)
    return ", ".join(repr(float(v)) for v in row)


def cut_entry(export: Export, folder: Path) -> dict:
    """A manifest entry for the first half of ``export``'s file (named ``cut-<name>``)."""
    cut = folder / f"cut-{export.name}"
    whole = export.path.read_bytes()
    cut.write_bytes(whole[: len(whole) // 2])
    return {"name": cut.name, "file": cut.name, "rows": export.fed[:1].tolist()}


@pytest.fixture(scope="module")
def node_run(ort_node, web_exports, tmp_path_factory) -> dict:
    node = ort_node
    names = sorted(n for n in web_exports if n.endswith((".onnx", ".ort")))
    folder = next(iter(web_exports.values())).path.parent
    manifest = write_manifest(web_exports, names, folder, "manifest-node.json")
    # One invalid row per input kind: the JavaScript side must refuse it naming row and feature.
    data = json.loads(manifest.read_text())
    bad = dict(data["models"][0], name="bad-code")
    bad["rows"] = [list(bad["rows"][0])]
    bad["rows"][0][0] = int(web_exports[bad["file"]].metadata["cardinalities"][0])
    data["models"].append(bad)
    # A cut ONNX file: the page's protobuf reader must say the file is unreadable, not guess.
    data["models"].append(cut_entry(web_exports["nb3-gather.onnx"], folder))
    manifest.write_text(json.dumps(data))
    out = tmp_path_factory.mktemp("web-node") / "node.json"
    env = dict(os.environ, ONNXRUNTIME_NODE_INSTALL="skip")
    proc = subprocess.run(
        [node, str(WEB / "node_check.mjs"), str(manifest), str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _all_names() -> list[str]:
    """Export names known before the fixture runs (for test ids); the letter model is added when present."""
    stems = ["nb3-gather", "tan5", "nb4-raw", "fc-sign", "cnn-relu", "letter-nb3"]
    return [f"{stem}{suffix}" for stem in stems for _, suffix, _ in formats_for(stem)]


def _pick(web_exports: dict, name: str) -> Export:
    if name not in web_exports:
        if name.startswith("letter-"):
            pytest.skip(f"letter needs the shared datasets at {SHARED_DATASETS} (CI provides them)")
        pytest.fail(f"{name} was not exported")
    return web_exports[name]


@pytest.mark.parametrize("name", _all_names())
def test_browser_runs_export_like_python(name, browser_run, web_exports):
    export = _pick(web_exports, name)
    result = browser_run["runner"]["results"][name]
    assert_matches(export, result, "Chromium")
    expected_engine = "litert" if name.endswith(".tflite") else "onnxruntime"
    assert result["engine"] == expected_engine and result["format"] == export.path.suffix[1:]


@pytest.mark.parametrize("name", [n for n in _all_names() if n.endswith((".onnx", ".ort"))])
def test_node_runs_export_like_python(name, node_run, web_exports):
    export = _pick(web_exports, name)
    assert_matches(export, node_run["results"][name], "onnxruntime-node")


def test_node_refuses_out_of_range_code(node_run):
    error = node_run["results"]["bad-code"].get("error", "")
    assert "row 0, feature 0" in error and "out of range" in error, error


def test_cut_onnx_file_refused(node_run):
    error = node_run["results"]["cut-nb3-gather.onnx"].get("error", "")
    assert "not a readable onnx model file" in error, error


def test_cut_tflite_file_refused_by_litert_js(browser_run):
    cut = [name for name in browser_run["runner"]["results"] if name.startswith("cut-")]
    if not cut:
        pytest.skip("no web-profile TFLite export here")
    error = browser_run["runner"]["results"][cut[0]].get("error", "")
    assert "LiteRT.js cannot load this TFLite file" in error or "not a readable tflite" in error, error


def test_litert_js_default_profile_refused_with_a_hint(browser_run):
    """LiteRT.js rejects the default TFLite profile (int64 label); the page names the export that works."""
    result = browser_run["runner"]["results"][DEFAULT_TFLITE]
    if "error" not in result:  # a LiteRT.js that reads int64 one day: then the file must simply work
        assert result["check"]["ok"] is True, result["check"]
        return
    assert "LiteRT.js cannot load this TFLite file" in result["error"], result["error"]
    assert "--profile web" in result["error"], result["error"]


def test_litert_js_runs_on_cpu_without_webgpu(browser_run):
    """Headless Chromium here has no GPU adapter: LiteRT.js ran the TFLite files on its wasm CPU backend."""
    runner = browser_run["runner"]
    assert runner["webgpuAdapter"] is False
    assert any(r.get("engine") == "litert" for r in runner["results"].values()) or not tflite_web_profiles()


@pytest.mark.parametrize("name", SAMPLE_MODELS)
def test_sample_page_classifies_a_typed_row(name, browser_run, web_exports):
    """The sample page, driven like a person: pick the file, type a row, classify, run the check set."""
    export = _pick(web_exports, name)
    sample = browser_run["samples"].get(str(export.path))
    assert sample is not None, f"the sample page was not run on {name}"
    meta = export.metadata
    kind = "raw values" if meta.get("input") == "raw" else "integer codes"
    assert f"{len(meta['cardinalities'])} features" in sample["modelInfo"] and kind in sample["modelInfo"], sample
    label = int(export.ref_labels[0])
    assert f"Class: {meta['class_names'][label]} (index {label})" in sample["result"], sample["result"]
    engine = "LiteRT.js" if name.endswith(".tflite") else "onnxruntime-web"
    assert f"ms in {engine}" in sample["result"] and engine in sample["runtimes"], sample
    # The page prints the float32 scores as JavaScript numbers: exactly the reference's values.
    shown = np.asarray([float(s) for s in sample["scores"]], dtype=np.float64)
    assert np.array_equal(shown, export.ref_scores[0].astype(np.float32).astype(np.float64)), sample["scores"]
    assert "passed" in sample["check"] and "identical" in sample["check"], sample["check"]
    png = sample["screenshot"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
