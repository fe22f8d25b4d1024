import json
import shutil
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest

from bnc_deploy.artifacts import load_artifact
from bnc_deploy.cli.train import main

REQUIRED_KEYS = {"test_error", "n_parameters", "size_bits", "n_ops", "model"}


def run_json(capsys, *args):
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_contract_and_model_file(tmp_path, capsys):
    out = tmp_path / "nb3.bnc"
    result = run_json(capsys, "--data", "digits", "--model", "nb", "--bits", "3", "--epochs", "2", "-o", str(out))
    assert REQUIRED_KEYS <= result.keys()
    art = load_artifact(out)
    assert result["model"] == str(out)
    assert result["n_parameters"] == art.n_parameters == 10 * (1 + 64 * 17)
    assert result["size_bits"] == art.n_parameters * 3
    assert result["n_ops"] == 64 * 10
    assert 0.0 <= result["test_error"] <= 1.0
    assert result["test_error"] == pytest.approx(art.metadata["errors"]["test"])


def test_ml_with_zero_epochs_and_tan(tmp_path, capsys):
    result = run_json(capsys, "--data", "digits", "--model", "tan", "--init", "ml", "--epochs", "0",
                      "-o", str(tmp_path / "tan.bnc"))
    assert result["structure"] == "tan" and result["bits"] is None
    assert result["test_error"] < 0.2  # ML TAN on digits is a decent classifier
    assert sum(p == -1 for p in result["parents"]) == 1


def test_human_summary(tmp_path, capsys):
    assert main(["--data", "digits", "--init", "ml", "--epochs", "0", "-o", str(tmp_path / "m.bnc")]) == 0
    text = capsys.readouterr().out
    assert "test error" in text and "parameters" in text and "bits" in text


@pytest.mark.parametrize("args,message", [
    (["--bits", "9"], "bit width B=9"),
    (["--bits", "4", "--int-bits", "7"], "integer bits B_I=7"),
    (["--int-bits", "2"], "needs --bits"),
    (["--data", "no-such-dataset"], "no-such-dataset"),
    (["--data", "digits", "--fold", "3"], "fold"),
    (["--lr", "-1"], "learning rate"),
    (["--model", "tan", "--structure", "missing.json"], "missing.json"),
    (["--model", "nb", "--structure", "parents.json"], "applies to --model tan only"),
])
def test_bad_arguments_fail_with_clear_errors(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--epochs", "1", "-o", str(tmp_path / "m.bnc")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "m.bnc").exists()


def test_unknown_choice_is_rejected_by_argparse(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", "svm", "-o", str(tmp_path / "m.bnc")])
    assert exit_info.value.code == 2


def test_csv_data_with_discretizer_is_stored(tmp_path, capsys):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 120)
    x = np.column_stack([y * 2.0 + rng.normal(0, 0.5, 120), rng.normal(0, 1, 120)])
    csv = tmp_path / "toy.csv"
    csv.write_text("a,b,label\n" + "\n".join(f"{a:.4f},{b:.4f},{'yes' if t else 'no'}" for (a, b), t in zip(x, y)))
    result = run_json(capsys, "--data", str(csv), "--init", "ml", "--epochs", "0", "-o", str(tmp_path / "csv.bnc"))
    art = load_artifact(tmp_path / "csv.bnc")
    assert art.discretizer is not None and art.class_names == ["no", "yes"]
    assert result["test_error"] < 0.3


def _console_script(name):
    """The installed script beside this interpreter (a venv's bin/ need not be on PATH), else PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


@pytest.mark.skipif(_console_script("bnc-train") is None, reason="console script not installed (pip install -e .)")
def test_console_script(tmp_path):
    proc = subprocess.run([_console_script("bnc-train"), "--data", "digits", "--init", "ml", "--epochs", "0", "-o",
                           str(tmp_path / "m.bnc"), "--json"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert REQUIRED_KEYS <= json.loads(proc.stdout).keys()


def test_sample_csv_from_the_repository(tmp_path, capsys):
    sample = Path(__file__).resolve().parent.parent / "samples" / "activity.csv"
    result = run_json(capsys, "--data", str(sample), "--bits", "2", "--init", "ml", "--epochs", "3",
                      "-o", str(tmp_path / "activity.bnc"))
    art = load_artifact(tmp_path / "activity.bnc")
    assert art.class_names == ["idle", "run", "walk"]
    assert art.feature_names == ["accel_rms", "heart_rate", "step_hz", "skin_temp"]
    assert len(art.discretizer["cut_points"]) == 4
    assert result["size_bits"] == 2 * art.n_parameters
