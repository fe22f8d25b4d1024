"""A runtime's own failure while running a file (a graph that does not match its metadata, found by
fuzzing with the integrity check off) is a RuntimeError naming the file, not the framework's
exception type (onnxruntime's InvalidArgument is no RuntimeError; LiteRT raises ValueError too)."""

from __future__ import annotations

import numpy as np
import pytest

from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.verify import export_path


@pytest.fixture(scope="module")
def artifact():
    return random_bnc_artifact(np.random.default_rng(5), d=4, n_classes=3, tan=False, bits=3, int_bits=2)


def test_onnxruntime_failure_is_a_runtime_error(tmp_path, artifact):
    ort = pytest.importorskip("onnxruntime")
    rt = load_runtime(export_path(artifact, tmp_path / "m.onnx", "onnx"))
    invalid_argument = ort.capi.onnxruntime_pybind11_state.InvalidArgument

    class Broken:
        def run(self, *args):
            raise invalid_argument("Non-zero status code returned while running Gather node")

    rt.session = Broken()
    with pytest.raises(RuntimeError, match=r"m\.onnx: onnxruntime failed to run the file \(Non-zero status"):
        rt.predict(np.zeros((2, artifact.n_features), dtype=np.int64))


def test_litert_failure_is_a_runtime_error(tmp_path, artifact):
    pytest.importorskip("tensorflow")
    rt = load_runtime(export_path(artifact, tmp_path / "m.tflite", "tflite"))
    rt.predict(np.zeros((2, artifact.n_features), dtype=np.int64))

    def broken(*args):
        raise ValueError("Tensor data is null. Run allocate_tensors() first")

    rt.interpreter.invoke = broken
    with pytest.raises(RuntimeError, match=r"m\.tflite: LiteRT failed to run the file \(Tensor data is null"):
        rt.predict(np.zeros((2, artifact.n_features), dtype=np.int64))
