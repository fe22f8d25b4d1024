"""``bnc-export`` never destroys what it was given or what was there: the input model, an existing
good export, a directory. (Issue 11: ``-o nb3.bnc`` overwrote the model; a failed ``--opset 99``
export replaced a good file with an unloadable one; ``-o DIR`` left ``*.tmp`` behind.)"""

from __future__ import annotations

import json
import os

import numpy as np

from bnc_deploy.artifacts import load_artifact, save_artifact
from bnc_deploy.cli.export import main
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import random_bnc_artifact


def model(tmp_path):
    artifact = random_bnc_artifact(np.random.default_rng(11), bits=3, tan=True, n_check=20)
    path = tmp_path / "nb3.bnc"
    save_artifact(artifact, path)
    return artifact, path


def test_output_that_is_the_input_is_refused_and_the_model_survives(tmp_path, capsys):
    artifact, path = model(tmp_path)
    before = path.read_bytes()
    link = tmp_path / "link.bnc"
    os.symlink(path, link)
    for target in (path, link):
        code = main([str(path), "--format", "onnx", "-o", str(target)])
        err = capsys.readouterr().err
        assert code == 2 and "is the input file" in err and len(err.strip().splitlines()) == 1
    assert path.read_bytes() == before
    assert load_artifact(path).n_features == artifact.n_features


def test_failed_export_leaves_an_existing_good_file_untouched(tmp_path, capsys):
    _, path = model(tmp_path)
    out = tmp_path / "m.onnx"
    assert main([str(path), "--format", "onnx", "-o", str(out)]) == 0
    good = out.read_bytes()
    capsys.readouterr()
    assert main([str(path), "--format", "onnx", "--opset", "99", "-o", str(out)]) == 2
    assert "opset" in capsys.readouterr().err
    assert out.read_bytes() == good
    load_runtime(out)  # still loads and passes its integrity check
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "nb3.bnc"]  # no temporary file left


def test_output_that_is_a_directory_is_refused_without_leftovers(tmp_path, capsys):
    _, path = model(tmp_path)
    folder = tmp_path / "out"
    folder.mkdir()
    assert main([str(path), "--format", "onnx", "-o", str(folder)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert list(folder.iterdir()) == [] and not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_extension_that_does_not_match_the_format_is_warned_about(tmp_path, capsys):
    _, path = model(tmp_path)
    out = tmp_path / "m.tflite"
    assert main([str(path), "--format", "onnx", "-o", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    assert "warning" in captured.err and ".onnx" in captured.err
    assert json.loads(captured.out)["format"] == "onnx"
