"""The public Python API (``bnc_deploy.load/export/profile/load_runtime``, :mod:`bnc_deploy.api`).

What is checked: ``import bnc_deploy`` loads no torch, scikit-learn or TensorFlow, and loading and
exporting a BN model loads no torch; the root's names resolve lazily to the API's objects, and a
missing scikit-learn is a MissingExtraError naming the extra; ``export`` picks the format by the
extension through the exporter registry, passes the exporter's declared options through and
refuses the others, refuses unknown extensions and formats listing the registered ones, and its
typed result agrees with ``bnc-export --json`` on the same model; ``load`` round-trips a model file
and refuses exports; ``load_runtime`` runs an export; ``profile`` returns typed rows whose
``to_dict()`` is exactly what ``bnc-profile --json`` prints for the same files; a fitted
``[FayyadIraniDiscretizer, BNClassifier]`` pipeline exports with raw inputs.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from support import REPO_ROOT  # noqa: E402

import bnc_deploy  # noqa: E402
from bnc_deploy import api  # noqa: E402
from bnc_deploy.artifacts import save_artifact  # noqa: E402
from bnc_deploy.errors import ArtifactError, ConfigError, ExportError  # noqa: E402
from bnc_deploy.exporters.base import exporters, unavailable  # noqa: E402
from bnc_deploy.profiling.result import Profile  # noqa: E402
from bnc_deploy.profiling.rows import JSON_KEYS  # noqa: E402
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact  # noqa: E402
from bnc_deploy.verify import ExportReport, ExportResult, VerificationError  # noqa: E402


def _has_format(fmt: str) -> bool:
    return any(f == fmt for _, f in exporters()) and not unavailable()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A quantized TAN model with a discretizer (raw-input exports) and a check set, saved as a .bnc."""
    rng = np.random.default_rng(7)
    artifact = random_bnc_artifact(rng, d=4, n_classes=3, tan=True, bits=3, int_bits=2, n_check=30, max_card=4)
    cuts = [[0.5 * k for k in range(int(c) - 1)] for c in artifact.cardinalities]
    artifact = random_bnc_artifact(
        np.random.default_rng(7),
        d=4,
        n_classes=3,
        tan=True,
        bits=3,
        int_bits=2,
        n_check=30,
        cardinalities=artifact.cardinalities,
        discretizer=discretizer_dict(cuts),
    )
    path = tmp_path_factory.mktemp("api") / "m.bnc"
    save_artifact(artifact, path)
    return artifact, path


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )


# -- the root package ----------------------------------------------------------------------------------
def test_import_loads_no_framework_and_bn_load_export_no_torch(model, tmp_path):
    _, path = model
    done = _run_python(
        f"""
        import sys
        import bnc_deploy
        heavy = ("torch", "sklearn", "tensorflow", "onnxruntime")
        assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]
        assert "bnc_deploy.api" not in sys.modules
        model = bnc_deploy.load({str(path)!r})
        result = bnc_deploy.export(model, {str(tmp_path / "m.onnx")!r})
        assert result.exact and result.published
        bnc_deploy.export({str(path)!r}, {str(tmp_path / "m.h")!r}) if {shutil.which("cc") is not None} else None
        loaded = [m for m in ("torch", "sklearn", "tensorflow") if m in sys.modules]
        assert not loaded, loaded
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_root_names_resolve_lazily_to_the_api():
    assert bnc_deploy.load is api.load and bnc_deploy.export is api.export
    assert bnc_deploy.profile is api.profile and bnc_deploy.load_runtime is api.load_runtime
    assert bnc_deploy.ExportResult is ExportResult and bnc_deploy.Profile is Profile
    assert set(bnc_deploy.__all__) <= set(dir(bnc_deploy))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        bnc_deploy.nope  # noqa: B018


def test_sklearn_names_resolve_when_installed():
    pytest.importorskip("sklearn")
    import bnc_deploy.sklearn as sk

    for name in ("FayyadIraniDiscretizer", "BNClassifier", "DNNClassifier", "to_artifact", "from_artifact"):
        assert getattr(bnc_deploy, name) is getattr(sk, name)


def test_missing_sklearn_is_a_missing_extra_error():
    done = _run_python(
        """
        import sys
        sys.modules["sklearn"] = None  # scikit-learn not installed
        import bnc_deploy
        from bnc_deploy.errors import MissingExtraError
        try:
            bnc_deploy.BNClassifier
        except MissingExtraError as exc:
            assert exc.extra == "sklearn", exc.extra
            print(exc)
        else:
            raise SystemExit("no error")
        assert bnc_deploy.load is not None  # the rest of the API is unaffected
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bnc_deploy.BNClassifier needs the 'sklearn' extra" in done.stdout
    assert "pip install 'bnc-deploy[sklearn]'" in done.stdout


# -- load, load_runtime ----------------------------------------------------------------------------------
def test_load_round_trip(model):
    artifact, path = model
    loaded = bnc_deploy.load(path)
    assert type(loaded) is type(artifact)
    np.testing.assert_array_equal(loaded.table_codes, artifact.table_codes)
    np.testing.assert_array_equal(loaded.parents, artifact.parents)
    assert loaded.discretizer == artifact.discretizer


def test_load_refuses_exports_and_names_load_runtime(model, tmp_path):
    artifact, _ = model
    out = bnc_deploy.export(artifact, tmp_path / "m.onnx").path
    with pytest.raises(ConfigError, match=r"exported \.onnx file.*load_runtime"):
        bnc_deploy.load(out)
    with pytest.raises(ArtifactError):
        bnc_deploy.load(tmp_path / "missing.bnc")


def test_load_runtime_runs_an_export(model, tmp_path):
    artifact, path = model
    out = bnc_deploy.export(artifact, tmp_path / "m.onnx").path
    rt = bnc_deploy.load_runtime(out, threads=1)
    reference = bnc_deploy.load_runtime(path)
    scores, labels = rt.run(artifact.check_x)
    ref_scores, ref_labels = reference.run(artifact.check_x)
    np.testing.assert_array_equal(scores, ref_scores)
    np.testing.assert_array_equal(labels, ref_labels)
    assert rt.metadata["model_kind"] == "bnc"


# -- export ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix, fmt", [(".onnx", "onnx"), (".ort", "ort"), (".tflite", "tflite"), (".h", "c")])
def test_export_picks_the_format_by_extension(model, tmp_path, suffix, fmt):
    if fmt == "tflite" and not _has_format("tflite"):
        pytest.skip("the tflite exporter needs the convert extra")
    if fmt == "c" and shutil.which("cc") is None:
        pytest.skip("the native runtime needs a C compiler")
    artifact, _ = model
    result = bnc_deploy.export(artifact, tmp_path / f"m{suffix}")
    assert isinstance(result, ExportReport) and isinstance(result.result, ExportResult)
    assert result.format == fmt and result.published and result.exact
    assert result.path == tmp_path / f"m{suffix}" and result.path.is_file()
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.exact = False  # type: ignore[misc]


def test_export_takes_a_model_path(model, tmp_path):
    _, path = model
    result = bnc_deploy.export(path, tmp_path / "m.onnx")
    assert result.exact and result.model_kind == "bnc"


def test_format_overrides_the_extension(model, tmp_path):
    artifact, _ = model
    with pytest.warns(UserWarning, match=r"does not end in \.onnx"):
        result = bnc_deploy.export(artifact, tmp_path / "m.bin", format="onnx")
    assert result.format == "onnx" and result.exact and (tmp_path / "m.bin").is_file()


def test_unknown_extension_and_format_list_the_registered_formats(model, tmp_path):
    artifact, _ = model
    with pytest.raises(ExportError, match=r"extension '\.xyz'.*registered formats: c \(\.h\), onnx \(\.onnx\)"):
        bnc_deploy.export(artifact, tmp_path / "m.xyz")
    with pytest.raises(ExportError, match=r"unknown format 'nope'; registered formats: .*onnx \(\.onnx\)"):
        bnc_deploy.export(artifact, tmp_path / "m.onnx", format="nope")
    with pytest.raises(ExportError, match=r"model file, not an export.*save_artifact"):
        bnc_deploy.export(artifact, tmp_path / "copy.bnc")
    assert not list(tmp_path.iterdir())


def test_options_are_passed_through(model, tmp_path):
    artifact, _ = model
    result = bnc_deploy.export(artifact, tmp_path / "m.onnx", lowering="onehot-fc", raw_inputs=True)
    assert result.lowering == "onehot-fc" and result.metadata["input"] == "raw" and result.exact
    rt = bnc_deploy.load_runtime(result.path)
    assert rt.metadata["input"] == "raw"


@pytest.mark.parametrize(
    "suffix, options, message",
    [
        (".h", {"lowering": "onehot-fc"}, r"--lowering does not apply to the c export of a bnc model"),
        (".onnx", {"no_such_option": 1}, r"--no-such-option does not apply"),
        (".onnx", {"lowering": "nope"}, r"unknown lowering 'nope'"),
        (".onnx", {"lowering_timings": "{}"}, r"'lowering_timings' is set by the verifier"),
    ],
)
def test_refused_options(model, tmp_path, suffix, options, message):
    artifact, _ = model
    with pytest.raises(ExportError, match=message):
        bnc_deploy.export(artifact, tmp_path / f"m{suffix}", **options)
    assert not (tmp_path / f"m{suffix}").exists()


def test_min_agreement_refuses_and_publishes_nothing(tmp_path):
    artifact = random_bnc_artifact(np.random.default_rng(3), d=3, n_classes=3, bits=None, n_check=20)
    x = artifact.check_x
    wrong = (bnc_deploy.load_runtime(_saved(artifact, tmp_path)).predict(x) + 1) % 3
    with pytest.raises(VerificationError) as info:
        bnc_deploy.export(artifact, tmp_path / "f.onnx", rows=x, labels=wrong, min_agreement=1.01)
    assert info.value.report.path is None and not (tmp_path / "f.onnx").exists()


def _saved(artifact, folder):
    path = folder / "saved.bnc"
    save_artifact(artifact, path)
    return path


def test_export_report_is_the_cli_json(model, tmp_path, capsys):
    from bnc_deploy.cli.export import main

    _, path = model
    cli_out = tmp_path / "cli.onnx"
    assert main([str(path), "--format", "onnx", "--lowering", "onehot-fc", "-o", str(cli_out), "--json"]) == 0
    cli_json = json.loads(capsys.readouterr().out)
    report = bnc_deploy.export(path, tmp_path / "api.onnx", lowering="onehot-fc")
    as_json = json.loads(json.dumps(report.to_dict()))
    assert as_json["output"] == str(tmp_path / "api.onnx") and cli_json["output"] == str(cli_out)
    assert {**as_json, "output": None} == {**cli_json, "output": None}  # every key and value, the path apart
    assert report.path == tmp_path / "api.onnx" and report.result.to_dict()["path"] == report.path
    assert cli_out.read_bytes() == report.path.read_bytes()


# -- profile --------------------------------------------------------------------------------------------
def test_profile_fields_are_the_json_keys():
    names = [field.name for field in dataclasses.fields(Profile)]
    assert tuple(names) == (*JSON_KEYS, "graph_nodes")


def test_profile_is_typed_and_equals_the_cli_json(model, tmp_path, capsys):
    from bnc_deploy.cli.profile import main

    artifact, path = model
    onnx_path = bnc_deploy.export(artifact, tmp_path / "m.onnx").path
    files = [str(path), str(onnx_path)]
    assert main([*files, "--no-latency", "--nodes", "--json"]) == 0
    cli_rows = json.loads(capsys.readouterr().out)
    profiles = bnc_deploy.profile(files, latency=False, nodes=True)
    assert all(isinstance(p, Profile) for p in profiles)
    assert [(p.file, p.runtime, p.threads) for p in profiles] == [
        (str(path), "numpy", None),
        (str(onnx_path), "onnxruntime", 1),
        (str(onnx_path), "onnxruntime", None),
    ]
    assert profiles[1].graph_matches_analytic is True and profiles[1].n_ops == artifact.n_ops
    assert isinstance(profiles[0].notes, tuple) and profiles[1].graph_nodes
    assert [json.loads(json.dumps(p.to_dict())) for p in profiles] == cli_rows
    with pytest.raises(dataclasses.FrozenInstanceError):
        profiles[0].runtime = "x"  # type: ignore[misc]


def test_profile_with_latency_and_data(model, tmp_path):
    from bnc_deploy.profiling.options import TestSplit

    artifact, path = model
    split = TestSplit(artifact.check_x, artifact.check_y, "check", 1)
    (p,) = bnc_deploy.profile(path, runtime="numpy", data=split, runs=3, warmup=1, repeats=1, throughput_repeats=1)
    assert p.dataset == "check" and p.n_test_rows == len(artifact.check_y) and p.test_error is not None
    assert p.latency_us_p50_batch1 is not None and p.latency_runs == 3
    assert Profile.from_row(p.to_dict()) == p


def test_profile_takes_models_in_memory(model):
    artifact, _ = model
    (p,) = bnc_deploy.profile([artifact], runtime=["numpy"], latency=False)
    assert p.file == "<BNCArtifact #0>" and p.format == "bnc" and p.size_bits == artifact.size_bits


def test_profile_refuses_result_files_and_unknown_runtimes(model, tmp_path):
    _, path = model
    rows = tmp_path / "rows.json"
    rows.write_text("[]")
    with pytest.raises(ConfigError, match="JSON result files"):
        bnc_deploy.profile([rows])
    with pytest.raises(ConfigError, match="unknown runtime 'nope'"):
        bnc_deploy.profile(path, runtime="nope")
    with pytest.raises(ConfigError, match="runtime 'http' needs url"):
        bnc_deploy.profile(path, runtime="http")
    with pytest.raises(TypeError, match="got int"):
        bnc_deploy.profile([3])
    with pytest.raises(TypeError, match="data takes"):
        bnc_deploy.profile(path, data=(np.zeros((2, 4)), np.zeros(2)))
    with pytest.raises(ConfigError, match="fold applies"):
        bnc_deploy.profile(path, fold=2)


# -- scikit-learn pipelines -----------------------------------------------------------------------------
def test_export_a_fitted_pipeline_with_raw_inputs(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("torch")  # fitting trains
    from sklearn.datasets import load_iris
    from sklearn.pipeline import make_pipeline

    x, y = load_iris(return_X_y=True)
    x = x.astype(np.float32)
    pipe = make_pipeline(bnc_deploy.FayyadIraniDiscretizer(), bnc_deploy.BNClassifier(bits=3, epochs=3, random_state=0))
    pipe.fit(x, y)
    result = bnc_deploy.export(pipe, tmp_path / "m.onnx", raw_inputs=True)
    assert result.exact and result.metadata["input"] == "raw"
    rt = bnc_deploy.load_runtime(result.path)
    np.testing.assert_array_equal(pipe.classes_[rt.predict(x)], pipe.predict(x))
