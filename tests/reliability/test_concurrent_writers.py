"""Concurrent writers to one path (issue 11 item 1), a few trials; the acceptance runs 100 with
``python tests/reliability/writers.py --trials 100`` (see that module for what a trial checks)."""

from __future__ import annotations

import pytest
from writers import export_trial, make_export_model, train_trial

TRIALS = 2


@pytest.mark.slow
@pytest.mark.parametrize("procs", [2, 3])
def test_concurrent_bnc_train_same_output(tmp_path, procs):
    for k in range(TRIALS):
        folder = tmp_path / f"t{k}"
        folder.mkdir()
        trial = train_trial(folder, procs)
        assert trial.ok, trial.problems


@pytest.mark.slow
@pytest.mark.parametrize("procs", [2, 4])
def test_concurrent_bnc_export_same_output(tmp_path, procs):
    model = make_export_model(tmp_path / "model.bnc")
    for k in range(TRIALS):
        folder = tmp_path / f"t{k}"
        folder.mkdir()
        trial = export_trial(folder, model, procs)
        assert trial.ok, trial.problems


def test_replaced_writer_is_told(tmp_path, capsys, monkeypatch, digits_model):
    """A writer whose file another process replaced right after it says so (and --json says owned false)."""
    import json

    from bnc_deploy import fileio
    from bnc_deploy.cli.export import main

    out = tmp_path / "m.onnx"
    real_publish = fileio.publish

    def publish_then_replaced(tmp, path, **kwargs):
        published = real_publish(tmp, path, **kwargs)
        fileio.atomic_write_bytes(path, b"another writer's file")  # lands right after this one
        return published

    monkeypatch.setattr("bnc_deploy.verify.publish", publish_then_replaced)
    assert main([str(digits_model), "--format", "onnx", "-o", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["owned"] is False
    assert f"{out} was replaced by another writer after this one; the file on disk is theirs" in captured.err
    assert out.read_bytes() == b"another writer's file"


def test_replaced_model_file_is_told(tmp_path, capsys, monkeypatch):
    import json

    from bnc_deploy import fileio
    from bnc_deploy.cli.train import main

    out = tmp_path / "m.bnc"
    real = fileio.atomic_write_with

    def write_then_replaced(path, write):
        published = real(path, write)
        fileio.atomic_write_bytes(path, b"another writer's model")
        return published

    monkeypatch.setattr("bnc_deploy.artifacts.container.atomic_write_with", write_then_replaced)
    assert main(["--data", "digits", "--model", "nb", "--init", "ml", "--epochs", "0", "-o", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["owned"] is False and len(report["file_sha256"]) == 64
    assert "was replaced by another writer after this one; the file on disk is theirs" in captured.err


def test_owner_gets_no_warning(tmp_path, capsys, digits_model):
    import json

    from bnc_deploy.cli.export import main

    assert main([str(digits_model), "--format", "onnx", "-o", str(tmp_path / "m.onnx"), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["owned"] is True and "replaced" not in captured.err
