"""One error root: every user-caused error is a ``BncDeployError`` (and a ``ValueError``); the CLIs
map exactly these and missing paths to one line and exit status 2, and let anything else (a bug)
propagate with its traceback. Also ^C (exit 130) and a closed stdout pipe (exit 141, quiet)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bnc_deploy import errors
from bnc_deploy.artifacts import save_artifact
from bnc_deploy.artifacts.bnc import BNCArtifact
from bnc_deploy.cli.common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_USAGE, USER_ERRORS, cli_main, user_errors
from bnc_deploy.errors import ArtifactError, BncDeployError, ConfigError, DatasetError, InputError, MetadataError
from bnc_deploy.quantizers import FixedPointLogQuantizer

ERROR_CLASSES = [
    obj
    for _, obj in inspect.getmembers(errors, inspect.isclass)
    if issubclass(obj, BaseException) and obj.__module__ == errors.__name__
]


# -- the hierarchy --------------------------------------------------------------------------------------------
def test_errors_module_defines_the_root_and_its_types():
    names = {cls.__name__ for cls in ERROR_CLASSES}
    assert {
        "BncDeployError",
        "InputError",
        "DatasetError",
        "ArtifactError",
        "UnsupportedBitWidth",
        "ExportError",
        "RuntimeLoadError",
        "MetadataError",
        "ConfigError",
        "OutputError",
        "MissingExtraError",
    } <= names


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_type_derives_from_the_root_and_value_error(cls):
    assert issubclass(cls, BncDeployError) and issubclass(cls, ValueError)


def test_error_types_defined_elsewhere_derive_from_the_root():
    from bnc_deploy.profiling.pareto import ResultFileError

    assert issubclass(ResultFileError, BncDeployError) and issubclass(ResultFileError, ValueError)


def test_re_exported_names_are_the_same_classes():
    from bnc_deploy.artifacts import ArtifactError as artifacts_error
    from bnc_deploy.datasets import DatasetError as datasets_error
    from bnc_deploy.validation import InputError as validation_error

    assert (artifacts_error, datasets_error, validation_error) == (ArtifactError, DatasetError, InputError)


def test_missing_extra_error_is_also_an_import_error():
    exc = errors.MissingExtraError("TFLite export", "export", ModuleNotFoundError("tensorflow"))
    assert isinstance(exc, ImportError) and isinstance(exc, BncDeployError)
    assert "pip install 'bnc-deploy[export]'" in str(exc) and exc.extra == "export"


# -- the CLI rule ----------------------------------------------------------------------------------------------
def test_user_errors_are_the_root_and_path_errors_only():
    assert BncDeployError in USER_ERRORS and ValueError not in USER_ERRORS
    assert not isinstance(ValueError("a bug"), USER_ERRORS)
    for exc in (FileNotFoundError("x"), IsADirectoryError("x"), PermissionError("x"), NotADirectoryError("x")):
        assert isinstance(exc, USER_ERRORS)


@pytest.mark.parametrize(
    "exc",
    [
        ConfigError("--runs must be >= 1"),
        DatasetError("d.csv: no data rows"),
        ArtifactError("m.bnc: corrupt"),
        InputError("x: shape"),
        MetadataError("f: meta"),
        errors.OutputError("o: is a directory"),
        FileNotFoundError("m.bnc: no such file"),
        IsADirectoryError("out: is a directory"),
        PermissionError("m.bnc: denied"),
        NotADirectoryError("a/b: not a directory"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_user_errors_exit_2_with_one_line(capsys, exc):
    with pytest.raises(SystemExit) as info:
        with user_errors("prog"):
            raise exc
    assert info.value.code == EXIT_USAGE == 2
    err = capsys.readouterr().err
    assert err == f"prog: error: {exc}\n"


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("a bug"),
        KeyError("k"),
        TypeError("t"),
        RuntimeError("r"),
        AssertionError("a"),
        OSError("disk on fire"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_anything_else_is_a_bug_and_propagates(capsys, exc):
    with pytest.raises(type(exc)) as info:
        with user_errors("prog"):
            raise exc
    assert info.value is exc and not isinstance(info.value, SystemExit)
    assert capsys.readouterr().err == ""


def test_a_multi_line_message_is_reported_on_one_line(capsys):
    with pytest.raises(SystemExit):
        with user_errors("prog"):
            raise MetadataError("f.onnx: corrupt\n  detail one\n\n  detail two")
    assert capsys.readouterr().err == "prog: error: f.onnx: corrupt detail one detail two\n"


def test_cli_main_maps_interrupt_and_broken_pipe_and_passes_system_exit(capsys):
    @cli_main("prog")
    def interrupted(argv=None):
        raise KeyboardInterrupt

    @cli_main("prog", interrupted="interrupted; partial results kept")
    def interrupted_custom(argv=None):
        raise KeyboardInterrupt

    @cli_main("prog")
    def broken(argv=None):
        raise BrokenPipeError(32, "Broken pipe")

    @cli_main("prog")
    def explicit(argv=None):
        raise SystemExit(1)

    @cli_main("prog")
    def fine(argv=None):
        return 0 if argv == ["a"] else 3

    for fn, code, err in (
        (interrupted, EXIT_INTERRUPTED, "prog: interrupted; nothing written\n"),
        (interrupted_custom, 130, "prog: interrupted; partial results kept\n"),
        (broken, EXIT_BROKEN_PIPE, ""),
        (explicit, 1, ""),
    ):
        with pytest.raises(SystemExit) as info:
            fn([])
        assert info.value.code == code
        assert capsys.readouterr().err == err
    assert fine(["a"]) == 0 and fine([]) == 3
    assert EXIT_INTERRUPTED == 130 and EXIT_BROKEN_PIPE == 141


def test_broken_pipe_exits_quietly_in_a_real_pipe():
    """``prog | head -1``: the writer stops at the first failed write, prints nothing, exits 141."""
    script = textwrap.dedent("""
        from bnc_deploy.cli.common import cli_main

        @cli_main("prog")
        def main(argv=None):
            for i in range(500_000):
                print(i)
            return 0

        main()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"0\n"
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == EXIT_BROKEN_PIPE
    assert err == b""


# -- bnc-profile, in process --------------------------------------------------------------------------------------
pytest.importorskip("onnx")


def tiny_artifact() -> BNCArtifact:
    rng = np.random.default_rng(0)
    q = FixedPointLogQuantizer(3, 2)
    cards = np.array([3, 2, 4])
    return BNCArtifact(
        parents=-np.ones(3, dtype=np.int64),
        cardinalities=cards,
        class_names=["a", "b"],
        feature_names=["f0", "f1", "f2"],
        quantizer=q,
        class_codes=rng.integers(0, 8, 2).astype(np.uint8),
        table_codes=rng.integers(0, 8, (int(cards.sum()), 2)).astype(np.uint8),
        metadata={"errors": {"test": 0.25}},
        check_x=np.array([[0, 1, 3], [2, 0, 0]]),
        check_y=np.array([0, 1]),
    )


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "m.bnc"
    save_artifact(tiny_artifact(), path)
    return path


def profile(argv):
    from bnc_deploy.cli.profile import main

    return main([*argv, "--no-latency"])


def assert_one_line_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        profile(argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith("bnc-profile: error:") and err.endswith("\n") and err.count("\n") == 1, err
    assert message in err and "Traceback" not in err
    assert captured.out == ""


def test_profile_runs_on_a_good_model(model_file, capsys):
    assert profile([str(model_file), "--runtime", "numpy", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["size_bits"] == tiny_artifact().size_bits


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("missing.onnx", None, "missing.onnx: no such file"),
        ("garbage.bnc", b"not a zip", "garbage.bnc: not a bnc-deploy model file"),
        ("garbage.json", b"{not json", "garbage.json: not a JSON result file"),
        ("list.json", b"[1, 2]", "list.json: expected a JSON object or a list of objects"),
        ("garbage.onnx", b"\x08\x07garbage bytes", "garbage.onnx: not a readable ONNX model"),
        ("garbage.tflite", b"garbage bytes, no identifier", "garbage.tflite: not a readable TFLite model"),
    ],
)
def test_profile_bad_files_exit_2_with_one_line(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    assert_one_line_exit_2(capsys, [str(path)], message)


def test_profile_on_a_directory_exits_2(tmp_path, capsys):
    (tmp_path / "models").mkdir()
    (tmp_path / "model.onnx").mkdir()
    # issue 11: a directory is reported as a directory, not as "no such file" or an unknown type
    assert_one_line_exit_2(capsys, [str(tmp_path / "models")], "models: is a directory, not a model or result file")
    assert_one_line_exit_2(capsys, [str(tmp_path / "model.onnx")], "model.onnx: is a directory")


def test_profile_bad_options_exit_2(model_file, capsys):
    assert_one_line_exit_2(capsys, [str(model_file), "--runtime", "tensorrt"], "unknown runtime 'tensorrt'")
    assert_one_line_exit_2(capsys, [str(model_file), "--data", "no-such-dataset"], "unknown dataset")


def test_profile_plot_into_a_directory_is_a_user_error(model_file, tmp_path, capsys):
    """Errors while writing output after the work are mapped too (not only inside run())."""
    (tmp_path / "plot.png").mkdir()
    pytest.importorskip("matplotlib")
    with pytest.raises(SystemExit) as info:
        profile([str(model_file), "--runtime", "numpy", "--plot", str(tmp_path / "plot.png")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("bnc-profile: error:") and err.count("\n") == 1


@pytest.mark.parametrize(
    "exc",
    [ValueError("internal: bad shape"), KeyError("internal"), TypeError("internal")],
    ids=lambda e: type(e).__name__,
)
def test_profile_internal_bug_is_not_mapped_to_exit_2(model_file, capsys, monkeypatch, exc):
    import bnc_deploy.costs

    def broken(artifact):
        raise exc

    monkeypatch.setattr(bnc_deploy.costs, "analytic_costs", broken)
    with pytest.raises(type(exc)) as info:
        profile([str(model_file), "--runtime", "numpy"])
    assert info.value is exc
    assert "bnc-profile: error" not in capsys.readouterr().err


def test_profile_interrupt_and_broken_pipe(model_file, capsys, monkeypatch):
    import bnc_deploy.cli.profile as cli

    def interrupt(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run", interrupt)
    with pytest.raises(SystemExit) as info:
        cli.main([str(model_file)])
    assert info.value.code == 130
    assert capsys.readouterr().err == "bnc-profile: interrupted; nothing written\n"

    def closed_pipe(obj):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "run", lambda args: ([], []))
    monkeypatch.setattr(cli, "print_json", closed_pipe)
    with pytest.raises(SystemExit) as info:
        cli.main([str(model_file), "--json"])
    assert info.value.code == 141 and capsys.readouterr().err == ""


# -- bnc-structure-sweep ---------------------------------------------------------------------------------------------
def test_sweep_bad_option_exits_2_and_internal_bug_propagates(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    import bnc_deploy.train.structure_sweep as structure_sweep
    from bnc_deploy.cli.sweep import main

    with pytest.raises(SystemExit) as info:
        main(["--data", "digits", "--lambdas", "0,1", "--jobs", "0", "-o", str(tmp_path / "out"), "--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == "bnc-structure-sweep: error: --jobs must be >= 1, got 0\n"

    def broken(text):
        raise ValueError("internal: not a user error")

    monkeypatch.setattr(structure_sweep, "parse_lambdas", broken)
    with pytest.raises(ValueError, match="internal: not a user error"):
        main(["--data", "digits", "--lambdas", "0,1", "-o", str(tmp_path / "out"), "--quiet"])
    assert "error" not in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# -- library raise sites converted to the root's types ----------------------------------------------------------------
def test_discretizer_errors_name_their_cause():
    from bnc_deploy.datasets.discretize import FayyadIraniDiscretizer

    with pytest.raises(DatasetError, match="fit: feature 1 has non-finite value nan in row 0"):
        FayyadIraniDiscretizer().fit([[0.0, np.nan], [1.0, 2.0]], [0, 1])
    with pytest.raises(DatasetError, match="fit: no training rows"):
        FayyadIraniDiscretizer().fit(np.zeros((0, 2)), [])
    fitted = FayyadIraniDiscretizer().fit([[0.0], [1.0], [2.0], [3.0]], [0, 0, 1, 1])
    with pytest.raises(InputError, match="transform: expected 1 features, got 2"):
        fitted.transform([[0.0, 1.0]])
    with pytest.raises(InputError, match="non-finite"):
        fitted.transform([[np.inf]])
    with pytest.raises(ArtifactError, match="from_dict: cut points of feature 0 must be finite and strictly"):
        FayyadIraniDiscretizer.from_dict({"n_features_in": 1, "cut_points": [[2.0, 1.0]]})
    with pytest.raises(ArtifactError, match="from_dict: expected keys"):
        FayyadIraniDiscretizer.from_dict({})


def test_options_and_kinds_raise_the_root_types():
    from bnc_deploy.artifacts.encoding import image_layout, parse_image_shape
    from bnc_deploy.costs import analytic_costs
    from bnc_deploy.reference import reference_predictor

    with pytest.raises(ConfigError, match="must look like HxW"):
        parse_image_shape("sixteen")
    with pytest.raises(ConfigError, match="does not hold the 10 features"):
        image_layout("toy", 10, (3, 3))
    with pytest.raises(ConfigError, match="not a known image dataset"):
        image_layout("toy", 10)

    class Alien:
        kind = "svm"

    with pytest.raises(ArtifactError, match="no cost model for artifact kind 'svm'"):
        analytic_costs(Alien())
    with pytest.raises(ArtifactError, match="no reference predictor for model kind 'svm'"):
        reference_predictor(Alien())


def test_raw_inputs_without_a_discretizer_is_an_input_error():
    from bnc_deploy.reference.bnc import ReferencePredictor

    with pytest.raises(InputError, match="stores no discretizer"):
        ReferencePredictor(tiny_artifact()).predict_raw([[0.5, 1.5, 2.5]])
