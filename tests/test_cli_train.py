import json
import shutil
import subprocess
import sys
from pathlib import Path

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
    result = run_json(
        capsys, "--data", "digits", "--model", "tan", "--init", "ml", "--epochs", "0", "-o", str(tmp_path / "tan.bnc")
    )
    assert result["structure"] == "tan" and result["bits"] is None
    assert result["test_error"] < 0.2  # ML TAN on digits is a decent classifier
    assert sum(p == -1 for p in result["parents"]) == 1


def test_human_summary(tmp_path, capsys):
    assert main(["--data", "digits", "--init", "ml", "--epochs", "0", "-o", str(tmp_path / "m.bnc")]) == 0
    text = capsys.readouterr().out
    assert "test error" in text and "parameters" in text and "bits" in text


@pytest.mark.parametrize(
    "args,message",
    [
        (["--bits", "9"], "bit width B=9"),
        (["--bits", "4", "--int-bits", "7"], "integer bits B_I=7"),
        (["--int-bits", "2"], "needs --bits"),
        (["--data", "no-such-dataset"], "no-such-dataset"),
        (["--data", "digits", "--fold", "3"], "fold"),
        (["--lr", "-1"], "learning rate"),
        (["--model", "tan", "--structure", "missing.json"], "missing.json"),
        (["--model", "nb", "--structure", "parents.json"], "applies to --model tan only"),
    ],
)
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
    proc = subprocess.run(
        [
            _console_script("bnc-train"),
            "--data",
            "digits",
            "--init",
            "ml",
            "--epochs",
            "0",
            "-o",
            str(tmp_path / "m.bnc"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert REQUIRED_KEYS <= json.loads(proc.stdout).keys()


def test_sample_csv_from_the_repository(tmp_path, capsys):
    sample = Path(__file__).resolve().parent.parent / "samples" / "activity.csv"
    result = run_json(
        capsys,
        "--data",
        str(sample),
        "--bits",
        "2",
        "--init",
        "ml",
        "--epochs",
        "3",
        "-o",
        str(tmp_path / "activity.bnc"),
    )
    art = load_artifact(tmp_path / "activity.bnc")
    assert art.class_names == ["idle", "run", "walk"]
    assert art.feature_names == ["accel_rms", "heart_rate", "step_hz", "skin_temp"]
    assert len(art.discretizer["cut_points"]) == 4
    assert result["size_bits"] == 2 * art.n_parameters


def test_output_is_checked_before_training(tmp_path, capsys):
    """A directory, or the structure file the run reads, is refused in one line before any work."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--epochs", "1", "-o", str(tmp_path)])
    assert exit_info.value.code == 2 and "is a directory" in capsys.readouterr().err
    parents = tmp_path / "parents.json"
    parents.write_text(json.dumps([-1] + list(range(63))))
    before = parents.read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", "tan", "--structure", str(parents), "--epochs", "1", "-o", str(parents)])
    assert exit_info.value.code == 2 and "is the input file" in capsys.readouterr().err
    assert parents.read_bytes() == before


class _ToyFamily:
    """A model family added by registration alone: naive Bayes under another name, with one flag."""

    def add_arguments(self, parser, model_group):
        parser.add_argument_group("toy").add_argument("--toy-level", type=int, default=None)

    def flags_given(self, args):
        return ["--toy-level"] if args.toy_level is not None else []

    def foreign_flag_hint(self, flags):
        return ""

    def config_from_args(self, args, *, progress):
        from bnc_deploy.train.bnc import TrainConfig

        config = TrainConfig(init="ml", epochs=args.epochs, progress=False)
        config.toy_level = args.toy_level
        return config

    def input_paths(self, args):
        return ()

    def train(self, dataset, config):
        from bnc_deploy.train.bnc import train_bnc

        return train_bnc(dataset, config)

    def summary(self, result, dataset, config):
        return {"toy_level": config.toy_level}

    def format_summary(self, summary):
        return f"toy {summary['toy_level']}"


def test_a_new_family_needs_only_a_registration(tmp_path, capsys, monkeypatch):
    import types

    from bnc_deploy.train import TRAINERS, TrainerSpec

    module = types.ModuleType("toy_family")
    module.FAMILY = _ToyFamily()
    monkeypatch.setitem(sys.modules, "toy_family", module)
    monkeypatch.setitem(TRAINERS, "toy", TrainerSpec("toy", "toy", "toy_family:FAMILY", "a toy"))

    result = run_json(capsys, "--model", "toy", "--toy-level", "3", "--epochs", "0", "-o", str(tmp_path / "t.bnc"))
    assert result["toy_level"] == 3 and REQUIRED_KEYS <= result.keys()
    assert main(["--model", "toy", "--toy-level", "4", "--epochs", "0", "-o", str(tmp_path / "t.bnc")]) == 0
    assert capsys.readouterr().out.strip() == "toy 4"
    for args, message in (
        (["--model", "nb", "--toy-level", "3"], "--toy-level applies only to --model toy"),
        (["--model", "toy", "--bits", "3"], "--bits applies only to --model nb or tan"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main([*args, "--epochs", "0", "-o", str(tmp_path / "x.bnc")])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


# -- issue 11: CSV labels, --validation, --epochs 0, structure files --------------------------------
def _train_fails(tmp_path, capsys, *args) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "-o", str(tmp_path / "m.bnc")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "m.bnc").exists()
    return err.strip()


def test_csv_without_a_label_column_exits_2_naming_the_column(tmp_path, capsys):
    """Issue 11: the last numeric feature became a 171-class label (100 % test error, exit 0)."""
    sample = Path(__file__).resolve().parent.parent / "samples" / "activity.csv"
    lines = sample.read_text().splitlines()
    csv = tmp_path / "nolabel.csv"
    csv.write_text("\n".join(line.rsplit(",", 1)[0] for line in lines) + "\n")
    err = _train_fails(tmp_path, capsys, "--data", str(csv), "--init", "ml", "--epochs", "0")
    assert err.startswith(
        f"bnc-train: error: {csv}: label column 'skin_temp' (the last column, as no column is "
        "named label/class/target) looks continuous"
    )
    assert err.endswith("choose the label column with --label-column NAME|INDEX")
    stray = tmp_path / "stray.csv"
    stray.write_text("a,b,y\n" + "".join(f"{i},{i % 5},{i % 3}\n" for i in range(30)) + "30,1,x\n")
    err = _train_fails(tmp_path, capsys, "--data", str(stray), "--init", "ml", "--epochs", "0")
    assert "label column 'y'" in err and "mixes numbers and text: text label 'x' on line 32" in err


def test_label_column_flag_by_name_and_index(tmp_path, capsys):
    """--label-column NAME|INDEX picks the label; the default is the column named label/class/target."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 120)
    rows = [f"{10 * t},{t * 2.0 + rng.normal(0, 0.5):.4f},{rng.normal(0, 1):.4f},{int(t) + 3}" for t in y]
    csv = tmp_path / "first.csv"
    csv.write_text("outcome,a,b,Target\n" + "\n".join(rows) + "\n")
    default = run_json(capsys, "--data", str(csv), "--init", "ml", "--epochs", "0", "-o", str(tmp_path / "t.bnc"))
    assert load_artifact(tmp_path / "t.bnc").class_names == ["3", "4"]  # the column named Target
    assert default["n_features"] == 3
    by_name = run_json(
        capsys,
        "--data",
        str(csv),
        "--label-column",
        "outcome",
        "--init",
        "ml",
        "--epochs",
        "0",
        "-o",
        str(tmp_path / "n.bnc"),
    )
    art = load_artifact(tmp_path / "n.bnc")
    assert art.class_names == ["0", "10"] and art.feature_names == ["a", "b", "Target"]
    by_index = run_json(
        capsys,
        "--data",
        str(csv),
        "--label-column",
        "0",
        "--init",
        "ml",
        "--epochs",
        "0",
        "-o",
        str(tmp_path / "i.bnc"),
    )
    assert by_index["test_error"] == by_name["test_error"]
    assert load_artifact(tmp_path / "i.bnc").feature_names == ["a", "b", "Target"]
    err = _train_fails(tmp_path, capsys, "--data", str(csv), "--label-column", "nope", "--epochs", "1")
    assert "no column named 'nope'" in err
    err = _train_fails(tmp_path, capsys, "--data", str(csv), "--label-column", "a", "--epochs", "1")
    assert "label column 'a' (the label column given) looks continuous" in err
    err = _train_fails(tmp_path, capsys, "--data", "digits", "--label-column", "0", "--epochs", "1")
    assert "applies only to CSV files" in err


@pytest.mark.parametrize("fraction", ["-0.1", "1", "1.5", "nan"])
def test_validation_fraction_outside_0_1_is_refused(tmp_path, capsys, fraction):
    """Issue 11: --validation -0.1 was accepted (and ignored)."""
    err = _train_fails(tmp_path, capsys, "--validation", fraction, "--epochs", "1")
    assert err == (
        f"bnc-train: error: --validation must be in (0, 1) (a fraction of the training rows; 0 for no "
        f"validation split), got {float(fraction)}"
    )


def test_validation_fraction_inside_0_1_works(tmp_path, capsys):
    result = run_json(capsys, "--validation", "0.2", "--init", "ml", "--epochs", "1", "-o", str(tmp_path / "v.bnc"))
    assert result["val_error"] is not None


def test_zero_epochs_with_uniform_init_is_refused(tmp_path, capsys):
    """Issue 11: --epochs 0 with the (then default) uniform init silently wrote a random model."""
    message = (
        "bnc-train: error: --epochs 0 trains nothing; with --init uniform the model would be random: use "
        "--init ml for the maximum-likelihood model, or --epochs >= 1"
    )
    assert _train_fails(tmp_path, capsys, "--init", "uniform", "--epochs", "0") == message
    assert _train_fails(tmp_path, capsys, "--model", "tan", "--init", "uniform", "--epochs", "0") == message
    # the documented maximum-likelihood model still works (README: --epochs 0 --init ml), and is now
    # what --epochs 0 alone gives (issue 26: --init defaults to ml)
    assert main(["--init", "ml", "--epochs", "0", "-o", str(tmp_path / "ml.bnc")]) == 0
    assert main(["--epochs", "0", "-o", str(tmp_path / "default.bnc")]) == 0
    ml, default = load_artifact(tmp_path / "ml.bnc"), load_artifact(tmp_path / "default.bnc")
    np.testing.assert_array_equal(default.table_logp, ml.table_logp)


# -- issue 26: bnc-train starts from maximum likelihood unless told otherwise -----------------------
def test_init_default_is_ml_and_the_help_says_so(capsys):
    from bnc_deploy.cli.train import build_parser

    assert build_parser().parse_args(["-o", "x.bnc"]).init == "ml"
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert "--init {uniform,ml} default ml: start from maximum-likelihood tables" in text
    assert "uniform: rho ~ U(-0.1, 0.1), the paper's start" in text


def test_default_init_is_recorded_as_ml_and_uniform_still_works(tmp_path, capsys):
    """Without --init the model file records init "ml" (no warning); --init uniform trains from the
    paper's start, records it, and warns below 100 epochs."""
    common = ["--data", "digits", "--model", "tan", "--bits", "3", "--int-bits", "2", "--epochs", "2"]
    assert main([*common, "--quiet", "-o", str(tmp_path / "default.bnc")]) == 0
    assert capsys.readouterr().err == ""
    default = load_artifact(tmp_path / "default.bnc")
    assert default.metadata["config"]["init"] == "ml"
    assert main([*common, "--init", "uniform", "--quiet", "-o", str(tmp_path / "uniform.bnc")]) == 0
    assert capsys.readouterr().err == (
        "bnc-train: warning: --init uniform with --epochs 2: a uniform start usually needs 100 or more epochs "
        "(the paper trains 500) and can end far from a good model; --init ml starts from maximum likelihood\n"
    )
    uniform = load_artifact(tmp_path / "uniform.bnc")
    assert uniform.metadata["config"]["init"] == "uniform"
    assert not np.array_equal(uniform.table_codes, default.table_codes)


def test_short_uniform_warning_bounds():
    from bnc_deploy.train.arguments import UNIFORM_MIN_EPOCHS, short_uniform_message

    assert short_uniform_message(UNIFORM_MIN_EPOCHS - 1, "uniform") is not None
    assert short_uniform_message(1, "uniform") is not None
    for epochs, init in ((UNIFORM_MIN_EPOCHS, "uniform"), (500, "uniform"), (0, "uniform"), (1, "ml")):
        assert short_uniform_message(epochs, init) is None, (epochs, init)


def test_the_paper_protocol_keeps_the_uniform_start():
    """bnc-reproduce's sweeps (and bnc-sweep) take init from TrainConfig's default, "uniform", and
    are unchanged by bnc-train's ml default (their grids name no init: the stored grid specs and
    configuration ids of existing sweep directories stay valid for --resume)."""
    from bnc_deploy.sweep.paper import plan
    from bnc_deploy.sweep.records import BN_DEFAULTS
    from bnc_deploy.sweep.runner import records_of
    from bnc_deploy.train.bnc import TrainConfig

    assert TrainConfig().init == BN_DEFAULTS["init"] == "uniform"
    for figure in ("fig5", "fig6"):
        for sweep in plan(figure, "digits", "smoke").sweeps:
            assert "init" not in sweep.spec.fixed and "init" not in sweep.spec.axes
            assert {r["init"] for r in records_of(sweep.spec)} == {"uniform"}, sweep.name


def test_zero_epochs_dnn_says_it_is_untrained(tmp_path, capsys):
    """DNNs keep --epochs 0 (sizing and export checks use it), but the summary says it is untrained."""
    assert main(["--model", "fc", "--hidden", "4", "--epochs", "0", "-o", str(tmp_path / "fc.bnc")]) == 0
    assert "untrained   --epochs 0: the weights are the random initialization" in capsys.readouterr().out


def test_structure_file_that_is_not_text_names_the_file(tmp_path, capsys):
    """Issue 11: --structure nb3.onnx gave a utf-8 error without the file name."""
    onnx = tmp_path / "nb3.onnx"
    onnx.write_bytes(b"\x08\x07\x12\x0bbnc-deploy\xff\xfe\x00\x01" * 8)
    err = _train_fails(tmp_path, capsys, "--model", "tan", "--structure", str(onnx), "--epochs", "1")
    assert err == (
        f"bnc-train: error: structure file {onnx} is not a text file (an exported model such as .onnx "
        "or .tflite cannot give a structure); a structure file is a .bnc model (its parents are reused), "
        'a JSON list of parents (or {"parents": [...]}), or integers separated by spaces or commas: one '
        "parent index per feature, -1 for none"
    )
    words = tmp_path / "words.txt"
    words.write_text("parents: a b c")
    err = _train_fails(tmp_path, capsys, "--model", "tan", "--structure", str(words), "--epochs", "1")
    assert f"structure file {words}: not JSON and not a list of integers" in err and "a structure file is" in err
