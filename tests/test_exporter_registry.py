"""The exporter registry: a new exporter is one registration, and then it is everywhere.

A toy exporter registered here (no other file edited) shows up as a ``bnc-export --format``
choice, its declared option becomes a flag, and the conformance matrix's case list includes it
and passes it. Options an exporter does not declare are refused with a message naming who takes them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from bnc_deploy.artifacts import save_artifact
from bnc_deploy.cli.export import build_parser, main
from bnc_deploy.errors import ExportError
from bnc_deploy.exporters.base import Option, exporter_for, exporters, register_exporter, unregister_exporter
from bnc_deploy.exporters.onnx_bnc import build_onnx_bytes
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.verify import build
from test_conformance import conformance_cases, run_case


@pytest.fixture
def toy_exporter():
    """``--format toy``: the ONNX gather graph, always packed when ``--squeeze`` is given."""

    def build_toy(artifact, *, squeeze: bool = False) -> bytes:
        return build_onnx_bytes(artifact, pack_bits=squeeze)

    register_exporter("bnc", "toy", build_toy, extension=".onnx", runtime="onnxruntime",
                      options=[Option("squeeze", "bool", False, help="store bit-planes")])
    yield
    unregister_exporter("bnc", "toy")


def test_toy_exporter_is_a_cli_format_with_its_flag(toy_exporter, tmp_path, capsys):
    parser = build_parser()
    assert "toy" in parser._option_string_actions["--format"].choices
    assert "--squeeze" in parser.format_help()
    artifact = random_bnc_artifact(np.random.default_rng(3), bits=3, n_check=30)
    save_artifact(artifact, tmp_path / "m.bnc")
    assert main([str(tmp_path / "m.bnc"), "--format", "toy", "--squeeze", "-o", str(tmp_path / "m.onnx"),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "toy" and report["exact"] is True and report["n_rows"] == 30
    assert report["file_bytes"] == len(build(artifact, "onnx", pack_bits=True)[0])


def test_toy_exporter_is_in_the_conformance_matrix_and_passes(toy_exporter, tmp_path):
    cases = [c for c in conformance_cases() if c[1] == "toy"]
    assert {c[4].get("squeeze", False) for c in cases} == {False, True}
    for k, case in enumerate(cases):
        folder = tmp_path / str(k)
        folder.mkdir()
        assert run_case(folder, *case) in ("checked", "refused")
        if not case[4]:
            assert run_case(tmp_path / str(k), *case) == "checked"


def test_unregistered_toy_is_gone():
    assert ("bnc", "toy") not in exporters()


def test_an_undeclared_option_is_refused_naming_who_takes_it():
    spec = exporter_for("bnc", "tflite")
    with pytest.raises(ExportError, match=r"--pack-bits does not apply to the tflite export.*onnx \(bnc\)"):
        spec.resolve_options({"pack_bits": True})
    with pytest.raises(ExportError, match="applies to Bayesian network classifiers only"):
        exporter_for("dnn", "onnx").resolve_options({"raw_inputs": True})


def test_unknown_format_and_kind_say_what_exists():
    with pytest.raises(ExportError, match="no exporter for --format pmml"):
        exporter_for("bnc", "pmml")
    with pytest.raises(ExportError, match="exports bnc, dnn models, not gbm models"):
        exporter_for("gbm", "onnx")


def test_declared_defaults_are_the_builders_defaults():
    """The registry's defaults and the build functions' keyword defaults say the same thing."""
    import inspect

    for spec in exporters().values():
        parameters = inspect.signature(spec.build).parameters
        for option in spec.options:
            assert option.name in parameters, f"{spec.format}/{spec.kind}: {option.name} is not a build argument"
            assert parameters[option.name].default == option.default, (spec.format, spec.kind, option.name)
