"""Issue 11's command-line rows: every command's ^C, directories given as files, --plot names and
folders, the demo on non-image data, and TensorFlow/LiteRT log lines kept off stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bnc_deploy.artifacts import save_artifact
from bnc_deploy.testing import random_bnc_artifact

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "activity.csv"


def _fail(main, argv, capsys) -> str:
    """Run ``main(argv)``, expect exit status 2 (raised, or returned as bnc-export does for some
    errors); return the one stderr line."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


# -- every command goes through cli_main ------------------------------------------------------------
@pytest.mark.parametrize("module", ["train", "export", "profile", "sweep", "demo"])
def test_every_command_is_wrapped_by_cli_main(module):
    """^C -> 130 and one line, ``| head`` -> 141 quietly, user errors -> 2: all through cli_main."""
    import importlib

    main = importlib.import_module(f"bnc_deploy.cli.{module}").main
    assert getattr(main, "__wrapped__", None) is not None, f"bnc_deploy.cli.{module}.main lacks @cli_main"
    assert main.__code__.co_filename.endswith("common.py")


def test_ctrl_c_while_training_exits_130_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """Issue 11: ^C printed a 30-line traceback. Now one line, exit 130, no model and no temp file."""
    from bnc_deploy.cli.train import main
    from bnc_deploy.train import loop

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "run_epoch", interrupted)  # the first batch of the first epoch
    out = tmp_path / "models" / "m.bnc"
    with pytest.raises(SystemExit) as info:
        main(["--data", "digits", "--epochs", "3", "--quiet", "-o", str(out)])
    assert info.value.code == 130
    assert capsys.readouterr().err == "bnc-train: interrupted; nothing written\n"
    assert not out.exists() and list(out.parent.iterdir()) == []  # no temporary file left either


def test_ctrl_c_in_the_demo_says_what_stays(tmp_path, capsys, monkeypatch):
    from bnc_deploy.cli import demo

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "demo_model", interrupted)
    with pytest.raises(SystemExit) as info:
        demo.main(["--out", str(tmp_path / "out")])
    assert info.value.code == 130
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("bnc-demo: interrupted; the files finished so far stay in the output folder")
    )


# -- bnc-demo on data that is not an image ---------------------------------------------------------
def test_demo_skips_the_cnn_on_non_image_data_and_prints_the_table(tmp_path, capsys, monkeypatch):
    """Issue 11: ``bnc-demo --data letter`` trained 5 of 6 models, failed on the CNN, printed no table."""
    from bnc_deploy.cli import demo

    trained = []

    def fake_model(name, flags, data, out):
        trained.append(name)
        return {
            "name": name,
            "bits": None,
            "size_bits": 1000,
            "n_ops": 10,
            "test_error": 0.1,
            "kind": "bnc",
            "exact_expected": False,
            "onnx_bytes": 1,
            "tflite_bytes": 1,
            "onnx_agreement": 1.0,
            "tflite_agreement": 1.0,
            "onnx_exact": False,
            "tflite_exact": False,
        }

    monkeypatch.setattr(demo, "demo_model", fake_model)
    assert demo.main(["--data", str(SAMPLE), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert trained == [name for name, _ in demo.DEMO_MODELS if not name.startswith("cnn")]
    assert "cnn-relu-2bit: skipped (activity is not an image dataset" in captured.err
    table = captured.out.strip().split("\n\n")[0].splitlines()
    assert table[0].startswith("model") and [line.split()[0] for line in table[1:-1]] == trained
    assert table[-1] == "(cnn skipped: activity is not an image dataset)"
    # image data keeps the CNN
    assert [name for name, _ in demo.demo_models("digits")] == [name for name, _ in demo.DEMO_MODELS]
    assert [name for name, _ in demo.demo_models("usps")] == [name for name, _ in demo.DEMO_MODELS]


def test_demo_refuses_bad_data_before_training(tmp_path, capsys):
    from bnc_deploy.cli.demo import main

    err = _fail(main, ["--data", "no-such-data", "--out", str(tmp_path / "out")], capsys)
    assert err.startswith("bnc-demo: error: unknown dataset 'no-such-data'")
    assert not (tmp_path / "out").exists()


# -- a directory is "is a directory", not "no such file" --------------------------------------------
def test_directories_are_reported_as_directories(tmp_path, capsys, monkeypatch):
    """Issue 11: a directory was reported as "no such file" (--data, --structure, MODEL, FILE)."""
    from bnc_deploy.cli import export, profile, train

    folder = tmp_path / "x.bnc"
    folder.mkdir()
    csv_folder = tmp_path / "d.csv"
    csv_folder.mkdir()
    out = str(tmp_path / "m.bnc")
    for argv in (["--data", str(csv_folder)], ["--data", str(folder)]):
        err = _fail(train.main, [*argv, "--epochs", "1", "-o", out], capsys)
        assert "is a directory; give a dataset file" in err
    monkeypatch.chdir(tmp_path)
    err = _fail(train.main, ["--data", "x.bnc", "--epochs", "1", "-o", out], capsys)
    assert "x.bnc: is a directory" in err
    err = _fail(train.main, ["--model", "tan", "--structure", str(folder), "--epochs", "1", "-o", out], capsys)
    assert f"structure file {folder} is a directory; a structure file is a .bnc model" in err
    err = _fail(export.main, [str(folder), "--format", "onnx", "-o", str(tmp_path / "a.onnx")], capsys)
    assert err == f"bnc-export: error: {folder}: is a directory, not a model file"
    err = _fail(profile.main, [str(folder), "--no-latency"], capsys)
    assert err == f"bnc-profile: error: {folder}: is a directory, not a model or result file"
    from bnc_deploy.profiling.pareto import load_records

    (tmp_path / "r.json").mkdir()
    with pytest.raises(IsADirectoryError, match="r.json: is a directory"):
        load_records([tmp_path / "r.json"])
    assert not Path(out).exists()


# -- bnc-profile --plot -----------------------------------------------------------------------------
def _result_file(tmp_path) -> Path:
    rows = [
        {
            "file": f"m{b}.bnc",
            "dataset": "letter",
            "structure": "nb",
            "bits": b,
            "size_bits": 1000 * b,
            "n_ops": 416,
            "test_error": 0.3 - 0.02 * b,
        }
        for b in (1, 2, 3, 8)
    ]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    return path


@pytest.mark.parametrize(
    "name, written",
    [
        ("run.v2.png", ["run.v2.png", "run.v2.svg"]),
        ("run.v2", ["run.v2.png", "run.v2.svg"]),
        ("run.SVG", ["run.png", "run.svg"]),
        ("run", ["run.png", "run.svg"]),
    ],
)
def test_plot_names_keep_every_dot(tmp_path, name, written):
    """Issue 11: ``--plot run.v2.png`` wrote ``run.png``."""
    from bnc_deploy.profiling.pareto import plot_paths

    assert [p.name for p in plot_paths(tmp_path / name)] == written


def test_profile_plot_writes_exactly_the_documented_names(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from bnc_deploy.cli.profile import main

    results = _result_file(tmp_path)
    plots = tmp_path / "plots"
    assert main([str(results), "--plot", str(plots / "run.v2.png")]) == 0
    assert sorted(p.name for p in plots.iterdir()) == ["run.v2.png", "run.v2.svg"]  # no temp file, no run.png
    assert f"wrote {plots / 'run.v2.png'}, {plots / 'run.v2.svg'}" in capsys.readouterr().err
    assert (plots / "run.v2.png").read_bytes().startswith(b"\x89PNG")


def test_profile_plot_into_a_read_only_folder_fails_before_the_work(tmp_path, capsys, monkeypatch):
    """One line, exit 2, nothing measured: the folder is checked before the files are profiled."""
    pytest.importorskip("matplotlib")
    from bnc_deploy import fileio
    from bnc_deploy.cli import profile

    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    # Root may write anywhere: make the folder read-only for this check whoever runs the test.
    monkeypatch.setattr(fileio.os, "access", lambda p, mode: False if Path(p) == locked else real_access(p, mode))
    monkeypatch.setattr(profile, "run", lambda args: pytest.fail("profiled before checking --plot"))
    err = _fail(profile.main, [str(_result_file(tmp_path)), "--plot", str(locked / "run.png")], capsys)
    assert err == f"bnc-profile: error: cannot write plot {locked / 'run.png'}: the folder {locked} is not writable"
    assert list(locked.iterdir()) == []
    err = _fail(profile.main, [str(_result_file(tmp_path)), "--plot", str(tmp_path)], capsys)
    assert "is a directory" in err


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a user that a read-only mode stops")
def test_profile_plot_into_a_really_read_only_folder(tmp_path, capsys):
    from bnc_deploy.cli.profile import main

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        err = _fail(main, [str(_result_file(tmp_path)), "--plot", str(locked / "run.png")], capsys)
    finally:
        locked.chmod(0o755)
    assert "not writable" in err


def test_plots_are_written_atomically(tmp_path, monkeypatch):
    """A failure while saving leaves no partial file and no temporary file; an old plot stays."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from bnc_deploy.errors import OutputError
    from bnc_deploy.profiling.pareto import save_figure

    fig = Figure()
    fig.add_subplot().plot([1, 2], [3, 4])
    target = tmp_path / "p.png"
    target.write_bytes(b"old plot")

    def failing(self, fname, **kwargs):
        Path(fname).write_bytes(b"half a pl")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", failing)
    with pytest.raises(OutputError, match="No space left on device"):
        save_figure(fig, target)
    assert target.read_bytes() == b"old plot"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.png"]


def test_size_axis_tick_labels_do_not_overlap(tmp_path):
    """Issue 11: the size axis' labels overlapped (1, 2, 5 per decade on a narrow panel)."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bnc_deploy.profiling.pareto import PLOTS, plot_error_vs_size

    records = [
        {
            "dataset": ds,
            "structure": st,
            "bits": b,
            "size_bits": base * (2 if st == "tan" else 1) * (b or 32),
            "n_ops": 100,
            "test_error": 0.1 + 0.3 / (b or 9),
        }
        for ds, base in (("letter", 20000), ("usps", 150000), ("satimage", 5000))
        for st in ("nb", "tan")
        for b in (1, 2, 3, 4, 5, 6, 7, 8, None)
    ]
    wide = [
        {"dataset": "w", "structure": "nb", "bits": b, "size_bits": 10**e, "n_ops": 10**e, "test_error": 0.2}
        for b, e in zip(range(1, 9), range(2, 10))
    ]
    layouts = [((23, 6.5), 3), ((8, 5.2), 1), ((4, 3), 1)]  # the overview's panel, a single plot, a small one
    for data in (records, wide):
        for figsize, panels in layouts:
            fig, axes = plt.subplots(1, panels, figsize=figsize, squeeze=False)
            for ax, draw in zip(axes[0], PLOTS.values()):
                draw(ax, data)
            fig.tight_layout()
            fig.canvas.draw()
            for ax in axes[0][: 2 if panels > 1 else 1]:  # the two log axes: size and operations
                renderer = fig.canvas.get_renderer()
                labels = [t for t in ax.xaxis.get_ticklabels(which="both") if t.get_text() and t.get_visible()]
                boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
                shown = [t.get_text() for t in sorted(labels, key=lambda t: t.get_window_extent(renderer).x0)]
                assert len(boxes) >= 2, shown
                for left, right in zip(boxes, boxes[1:]):
                    assert left.x1 < right.x0, f"{figsize}: overlapping tick labels {shown}"
            plt.close(fig)
    assert plot_error_vs_size  # (imported for the reader: the panel the issue names)


# -- TensorFlow / absl / LiteRT log lines -----------------------------------------------------------
def test_native_log_lines_are_filtered_and_the_rest_passes(tmp_path):
    """Native writes to fd 2 go through the filter; Python's stderr and real errors pass."""
    script = textwrap.dedent("""
        import os, sys
        from bnc_deploy.cli.common import cli_main

        @cli_main("prog")
        def main(argv=None):
            os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\\n")
            os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n")
            os.write(2, b"W0000 00:00:1795671219.230203   32163 tf_tfl_flatbuffer_helpers.cc:364] Ignored x.\\n")
            os.write(2, b"I0000 00:00:1795671219.230203   32163 cpu_feature_guard.cc:210] This TensorFlow\\n")
            os.write(2, b"E0000 00:00:1795671219.230203   32163 foo.cc:1] a real error\\n")
            os.write(2, b"native tail without newline")
            print("python line", file=sys.stderr)
            return 0

        raise SystemExit(main())
    """)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stderr.splitlines()) == sorted(
        ["python line", "E0000 00:00:1795671219.230203   32163 foo.cc:1] a real error", "native tail without newline"]
    )
    # The user's own TF_CPP_MIN_LOG_LEVEL below 2 shows everything again.
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**env, "TF_CPP_MIN_LOG_LEVEL": "0"},
    )
    assert "XNNPACK" in proc.stderr and "W0000" in proc.stderr


def test_export_to_tflite_prints_no_tensorflow_log_lines(tmp_path):
    """Issue 11: TensorFlow/absl log lines and LiteRT's XNNPACK line reached stderr."""
    pytest.importorskip("tensorflow")
    script = Path(sys.executable).parent / "bnc-export"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "bnc_deploy.cli.export"]
    model = tmp_path / "m.bnc"
    save_artifact(random_bnc_artifact(np.random.default_rng(0), d=6, n_classes=3), model)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run(
        [*command, str(model), "--format", "tflite", "-o", str(tmp_path / "m.tflite")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "m.tflite").is_file()
    assert proc.stderr == "", proc.stderr  # no "INFO: Created TensorFlow Lite XNNPACK delegate", no absl lines


def test_sweep_refuses_zero_epochs_with_uniform_init(tmp_path, capsys):
    """bnc-structure-sweep's default init is uniform: --epochs 0 would learn random structures."""
    pytest.importorskip("matplotlib")
    from bnc_deploy.cli.sweep import main

    err = _fail(main, ["--data", "digits", "--lambdas", "1e-3", "--epochs", "0", "-o", str(tmp_path / "s")], capsys)
    assert err.startswith("bnc-structure-sweep: error: --epochs 0 trains nothing; with --init uniform")
    assert not (tmp_path / "s").exists()
