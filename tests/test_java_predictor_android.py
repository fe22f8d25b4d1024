"""What samples/android assumes about the exported files, checked on the desktop (no Android SDK here).

The Android sample runs one row three ways: the ``.bnc`` in the Java predictor, the ``.tflite`` (with
``--metadata``) through LiteRT's ``serving_default`` signature with the class names from the labels file
the standard TFLite metadata associates with an output, and the ``.ort`` in ONNX Runtime with the class
names from the file's ``bnc_deploy`` metadata. This test does the same lookups with the desktop
runtimes (LiteRT's Python signature runner, onnxruntime) - the same names, dtypes, padding of a static
batch and metadata the Kotlin code reads - and asserts that all three agree with the Java predictor
on every check row and 64 random rows: labels identical, scores identical (quantized model).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_java_predictor import java_classes, predict_java, write_rows  # noqa: F401 (fixture)

from bnc_deploy.artifacts import save_artifact
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.validation import random_valid_codes

pytest.importorskip("tensorflow", reason="the TFLite exporter needs TensorFlow (pip install '.[export]')")
pytest.importorskip("ai_edge_litert", reason="LiteRT runs the .tflite file (pip install '.[tflite]')")
ort = pytest.importorskip("onnxruntime")


def tflite_like_android(path) -> tuple[list[str], int, object]:
    """LiteRtClassifier.kt on the desktop: class names from TFLITE_METADATA's TENSOR_AXIS_LABELS file,
    one row per runSignature call, padded to a static batch with all-zero rows."""
    from ai_edge_litert.interpreter import Interpreter

    from bnc_deploy.formats.tflite import inspect_tflite
    from bnc_deploy.formats.tflite_metadata import TFLITE_METADATA, read_associated_files, read_model_metadata

    data = path.read_bytes()
    standard = read_model_metadata(inspect_tflite(data).metadata[TFLITE_METADATA])
    label_files = [
        f["name"]
        for tensor in standard["outputs"]
        for f in tensor.get("associated_files", [])
        if f["type"] == "TENSOR_AXIS_LABELS"
    ]
    assert len(label_files) == 1, standard["outputs"]
    names = [line for line in read_associated_files(data)[label_files[0]].decode("utf-8").splitlines() if line]

    interpreter = Interpreter(model_path=str(path), num_threads=1)
    (signature,) = interpreter.get_signature_list()  # the Kotlin code takes the single signature key
    runner = interpreter.get_signature_runner(signature)
    details = runner.get_input_details()["x"]
    assert details["dtype"] == np.int32
    batch = max(1, int(details["shape"][0]))
    return names, batch, runner


def run_rows_tflite(runner, batch: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    labels, scores = [], []
    for row in rows:
        x = np.zeros((batch, rows.shape[1]), dtype=np.int32)
        x[0] = row
        out = runner(x=x)
        assert out["label"].dtype in (np.int64, np.int32)
        labels.append(int(out["label"][0]))
        scores.append(out["log_joint"][0].astype(np.float64))
    return np.array(labels), np.array(scores)


def run_rows_ort(path, rows: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """OrtClassifier.kt on the desktop: input x int64 [1, D] per row; names from the bnc_deploy metadata."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = json.loads(session.get_modelmeta().custom_metadata_map["bnc_deploy"])["class_names"]
    (x,) = session.get_inputs()
    assert x.name == "x" and x.type == "tensor(int64)"
    labels, scores = [], []
    for row in rows:
        out = dict(
            zip([o.name for o in session.get_outputs()], session.run(None, {"x": row[None, :].astype(np.int64)}))
        )
        labels.append(int(out["label"][0]))
        scores.append(out["log_joint"][0].astype(np.float64))
    return names, np.array(labels), np.array(scores)


@pytest.mark.parametrize("profile", ["default", "web"])
def test_the_android_sample_paths_agree_with_the_java_predictor(java_classes, tmp_path, profile):  # noqa: F811
    from bnc_deploy.verify import export_file

    art = random_bnc_artifact(np.random.default_rng(21), d=6, n_classes=4, bits=3, int_bits=2, tan=True, n_check=32)
    art.class_names = ["walk", "run", "idle", "cycle"]
    model = tmp_path / "model.bnc"
    save_artifact(art, model)
    tflite, ort_file = tmp_path / "model.tflite", tmp_path / "model.ort"
    export_file(art, tflite, "tflite", metadata=True, profile=profile)
    export_file(art, ort_file, "ort")
    rows = np.concatenate([art.check_x.astype(np.int64), random_valid_codes(art.cardinalities, 64, seed=3)])

    java_labels, java_names, java_scores = predict_java(
        java_classes, "--scores", "hex", model, write_rows(tmp_path / "rows.csv", rows)
    )
    names, batch, runner = tflite_like_android(tflite)
    assert names == art.class_names
    tfl_labels, tfl_scores = run_rows_tflite(runner, batch, rows)
    ort_names, ort_labels, ort_scores = run_rows_ort(ort_file, rows)
    assert ort_names == art.class_names
    assert java_names == [art.class_names[k] for k in java_labels]
    # A quantized model: every path is exact, so labels and scores are identical.
    assert np.array_equal(tfl_labels, java_labels) and np.array_equal(ort_labels, java_labels)
    assert np.array_equal(tfl_scores, java_scores) and np.array_equal(ort_scores, java_scores)
