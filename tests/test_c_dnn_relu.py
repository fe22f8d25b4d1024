"""The C export of ReLU DNNs (``exporters/_c_dnn_relu.py``): the header computes the int8 TFLite file
of the same model and calibration rows exactly as LiteRT's reference kernels do (logits and labels
identical on random models and rows), verified and published as not exact (the float reference), and
runs the same on an emulated Cortex-M4 as on the host."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

from bnc_deploy.exporters import c_dnn
from bnc_deploy.exporters._c_dnn_relu import quantize_multiplier
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.targets import cortex_m_build
from bnc_deploy.testing import random_dnn_artifact
from bnc_deploy.validation import random_valid_codes
from bnc_deploy.verify import export_file

SHAPES = {
    "fc-std-4bit": dict(architecture="fc", bits=4),
    "fc-onehot-8bit": dict(architecture="fc", bits=8, encoding="onehot", hidden=(20, 12)),
    "fc-no-batch-norm-2bit": dict(architecture="fc", bits=2, batch_norm=False, hidden=(30,), n_features=20),
    "cnn-std-3bit": dict(architecture="cnn", bits=3),
    "cnn-onehot-2bit": dict(architecture="cnn", bits=2, encoding="onehot", max_cardinality=3),
    "cnn-colmajor-one-conv-7bit": dict(
        architecture="cnn", bits=7, image_shape=(6, 5), pixel_order="column-major", hidden=(4,)
    ),
}


def _artifact(name: str):
    return random_dnn_artifact(sorted(SHAPES).index(name) + 60, activation="relu", **SHAPES[name])


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_header_equals_litert_reference_kernels(tmp_path, name):
    artifact = _artifact(name)
    report = export_file(artifact, tmp_path / "m.h", "c")
    assert report.published and not report.exact_expected and report.metadata["lowering"] == "int8-ptq"
    export_file(artifact, tmp_path / "m.tflite", "tflite")
    x = np.concatenate([artifact.check_x, random_valid_codes(artifact.cardinalities, 2000, seed=3)])
    c_logits, c_labels = load_runtime(tmp_path / "m.h").run(x)
    lite_logits, lite_labels = load_runtime(tmp_path / "m.tflite", "litert", resolver="reference").run(x)
    assert np.array_equal(c_logits, lite_logits) and np.array_equal(c_labels, lite_labels)
    assert report.agreement == np.mean(c_labels[: len(artifact.check_x)] == report_labels(artifact))


def report_labels(artifact):
    from bnc_deploy.reference.dnn import DNNReferencePredictor

    return DNNReferencePredictor(artifact).predict(artifact.check_x)


def test_quantize_multiplier_is_tflites():
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(0.5) == (2**30, 0)
    assert quantize_multiplier(1.0) == (2**30, 1)
    assert quantize_multiplier(2.0**-40) == (0, 0)  # below 2^-31: TFLite's multiplier 0
    m, shift = quantize_multiplier(0.0336)
    assert 2**30 <= m < 2**31 and abs(m * 2.0 ** (shift - 31) - 0.0336) < 2**-31


def test_relu_header_is_strict_c99_with_integers_only(tmp_path):
    cc = shutil.which(os.environ.get("CC") or "cc")
    if cc is None:
        pytest.skip("no C compiler")
    source = c_dnn.build_c_dnn_source(_artifact("cnn-std-3bit"), name="net")
    assert "float" not in source.split("*/", 1)[1].replace("float32", "")
    (tmp_path / "net.h").write_text(source)
    (tmp_path / "use.c").write_text(
        '#include "net.h"\nint use(const uint8_t *x, int32_t *l);\n'
        "int use(const uint8_t *x, int32_t *l) { return net_logits(x, l) + net_predict(x); }\n"
    )
    flags = ["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Wconversion", "-Wshadow", "-Wdouble-promotion", "-Werror"]
    done = subprocess.run([cc, *flags, "-c", "use.c", "-o", "use.o"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


MISSING = cortex_m_build.tools_available()


@pytest.mark.skipif(MISSING is not None, reason=f"Cortex-M toolchain not installed: {MISSING}")
def test_cortex_m4_runs_the_relu_header_as_the_host_does(tmp_path):
    from bnc_deploy.targets import cortex_m_dnn

    artifact = _artifact("cnn-std-3bit")
    export_file(artifact, tmp_path / "net.h", "c", name="net")
    report = cortex_m_dnn.check_dnn_header(tmp_path / "net.h", artifact, boards=("mps2-an386",))
    board = report["boards"][0]
    assert report["ok"], board
    assert report["rows"]["expected"].startswith("the header on the host")
    assert board["passed"] == board["n_rows"] and board["invalid_failed"] == 0
