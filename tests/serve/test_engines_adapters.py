"""The engine adapters' own logic, in the project's environment, with no engine running.

Importing the modules of ``bnc_deploy/serve/engines`` loads no engine; the shared helpers (model
files of a folder, requested outputs); MLServer's model-settings.json writer; Ray Serve's
``@serve.batch`` body: requests of one model and shape run as one call over their rows, split back
by rows, a bad request fails alone, and every answer equals the unbatched one. The engines
themselves are exercised in test_engines.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import numpy as np
import pytest
from serve_support import build_repository, valid_rows

from bnc_deploy.errors import ConfigError
from bnc_deploy.serve.engines import model_files, requested_outputs, single_inputs
from bnc_deploy.serve.engines.rayserve import V2Deployment
from bnc_deploy.serve.errors import BadRequest, status_of
from bnc_deploy.serve.repository import ModelRepository


def test_importing_the_adapters_loads_no_engine():
    code = (
        "import sys\n"
        "import bnc_deploy.serve.engines.kserve, bnc_deploy.serve.engines.mlserver, bnc_deploy.serve.engines.rayserve\n"
        "print(sorted(m for m in ('kserve', 'mlserver', 'ray') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_model_files_names_files_by_stem_and_refuses_ambiguity(tmp_path):
    for name in ("b.onnx", "a.bnc", ".hidden.onnx", "c.tmp.onnx", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    assert model_files(tmp_path) == {"a": tmp_path / "a.bnc", "b": tmp_path / "b.onnx"}
    (tmp_path / "a.onnx").write_bytes(b"x")
    with pytest.raises(ConfigError, match="two model files named 'a'"):
        model_files(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no model files"):
        model_files(tmp_path / "empty")
    with pytest.raises(ConfigError, match="not a directory"):
        model_files(tmp_path / "missing")


def test_requested_outputs_and_inputs():
    assert requested_outputs([]) == (None, {})
    names, cls = requested_outputs([("log_joint", {"classification": 2, "binary_data": True}), ("label", None)])
    assert names == ["log_joint", "label"] and cls == {"log_joint": 2}
    with pytest.raises(BadRequest, match="twice"):
        requested_outputs([("label", None), ("label", {})])
    single_inputs(["x"])
    with pytest.raises(BadRequest, match="twice"):
        single_inputs(["x", "x"])


def test_mlserver_settings_name_the_runtime_and_each_file(tmp_path):
    from bnc_deploy.serve.engines import mlserver

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "nb.onnx").write_bytes(b"x")
    (tmp_path / "models" / "dnn.tflite").write_bytes(b"x")
    done = subprocess.run(
        [sys.executable, "-m", "bnc_deploy.serve.engines.mlserver", str(tmp_path / "models"), str(tmp_path / "ml")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(done.stdout.split()) == 2
    settings = json.loads((tmp_path / "ml" / "nb" / "model-settings.json").read_text())
    assert settings == {
        "name": "nb",
        "implementation": "bnc_deploy.serve.engines.mlserver.BncModel",
        "parameters": {"uri": str((tmp_path / "models" / "nb.onnx").resolve())},
    }
    assert mlserver.IMPLEMENTATION == settings["implementation"]
    assert mlserver._model_path(str(tmp_path / "models" / "nb.onnx")).name == "nb.onnx"
    with pytest.raises(ValueError, match="holds 2 model files"):
        mlserver._model_path(str(tmp_path / "models"))


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    folder = tmp_path_factory.mktemp("engine-batch")
    models = build_repository(folder, tflite=False)
    repo = ModelRepository(folder)
    repo.load_all()
    yield repo, models
    repo.close()


def test_ray_batch_runs_groups_and_isolates_bad_requests(repository):
    repo, models = repository
    nb, dnn = repo.get("nb_onnx"), repo.get("dnn_onnx")
    x1, x2 = valid_rows(models["nb_onnx"], 3, 1), valid_rows(models["nb_onnx"], 5, 2)
    x3 = valid_rows(models["dnn_onnx"], 4, 3)
    bad = x1.copy()
    bad[1, 0] = int(models["nb_onnx"].artifact.cardinalities[0])  # out of range: this request only
    calls = [
        (nb, {"x": x1}, None, 0),
        (dnn, {"x": x3}, None, 0),
        (nb, {"x": x2.astype(np.int32)}, None, 0),  # another datatype joins the group
        (nb, {"x": x2}, ["label"], 0),  # other outputs: another group
        (nb, {"x": x1}, ["log_joint"], 2),  # classification: another group
        (nb, {"x": bad}, None, 0),
    ]
    deployment = V2Deployment.__new__(V2Deployment)  # _run_batch needs no Ray
    results = asyncio.run(deployment._run_batch(calls))
    assert len(results) == len(calls)
    for (model, inputs, names, cls), got in zip(calls[:5], results[:5], strict=True):
        want = model.infer(inputs, names, classification=cls)
        assert [n for n, _ in got] == [n for n, _ in want]
        for (_, a), (_, b) in zip(got, want, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    assert isinstance(results[5], Exception)
    status, code, message = status_of(results[5])
    assert (status, code) == (400, "INVALID_ARGUMENT") and "row 1" in message
