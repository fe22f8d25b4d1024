"""The exporter registry: a new exporter is one registration, and then it is everywhere.

A toy exporter registered here (no other file edited) shows up as a ``bnc-export --format``
choice, its declared option becomes a flag, and the conformance matrix's case list includes it
and passes it (its declared refusal included). Options an exporter does not declare are refused with
a message naming who takes them, values outside an option's choices naming the choices. A (kind,
format) registers once: again only with ``overwrite=True``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_conformance import conformance_cases, run_case

from bnc_deploy.artifacts import save_artifact
from bnc_deploy.cli.export import build_parser, main
from bnc_deploy.errors import ConfigError, ExportError
from bnc_deploy.exporters.base import (
    Option,
    Refusal,
    exporter_for,
    exporters,
    float_model,
    register_exporter,
    unregister_exporter,
)
from bnc_deploy.exporters.onnx_bnc import build_onnx_bytes
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.verify import build


def build_toy(artifact, *, squeeze: bool = False) -> bytes:
    return build_onnx_bytes(artifact, pack_bits=squeeze)


#: The toy packs bit-planes, so it refuses ``--squeeze`` on float models as the ONNX exporter does.
SQUEEZE_NEEDS_CODES = Refusal(
    "bit-planes store integer codes; float tables have none",
    "pack_bits needs a quantized model",
    options={"squeeze": True},
    models=float_model,
)


def register_toy(build=build_toy, **kw):
    return register_exporter(
        "bnc",
        "toy",
        build,
        extension=".onnx",
        runtime="onnxruntime",
        options=[Option("squeeze", "bool", False, help="store bit-planes")],
        refusals=[SQUEEZE_NEEDS_CODES],
        **kw,
    )


@pytest.fixture
def toy_exporter():
    """``--format toy``: the ONNX gather graph, always packed when ``--squeeze`` is given."""
    register_toy()
    yield
    unregister_exporter("bnc", "toy")


def test_toy_exporter_is_a_cli_format_with_its_flag(toy_exporter, tmp_path, capsys):
    parser = build_parser()
    assert "toy" in parser._option_string_actions["--format"].choices
    assert "--squeeze" in parser.format_help()
    artifact = random_bnc_artifact(np.random.default_rng(3), bits=3, n_check=30)
    save_artifact(artifact, tmp_path / "m.bnc")
    assert (
        main([str(tmp_path / "m.bnc"), "--format", "toy", "--squeeze", "-o", str(tmp_path / "m.onnx"), "--json"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "toy" and report["exact"] is True and report["n_rows"] == 30
    assert report["file_bytes"] == len(build(artifact, "onnx", pack_bits=True)[0])


def test_toy_exporter_is_in_the_conformance_matrix_and_passes(toy_exporter, tmp_path):
    cases = [c for c in conformance_cases() if c[1] == "toy"]
    assert {c[4].get("squeeze", False) for c in cases} == {False, True}
    outcomes = set()
    for k, case in enumerate(cases):
        folder = tmp_path / str(k)
        folder.mkdir()
        outcome = run_case(folder, *case)  # AssertionError unless as declared
        outcomes.add((case[2], bool(case[4]), outcome))
        if not case[4]:
            assert outcome == "checked"
    assert ("tan-float", True, "refused") in outcomes and ("nb-3bit", True, "checked") in outcomes


def test_registering_a_format_again_is_refused_unless_overwrite(toy_exporter):
    first = exporter_for("bnc", "toy")

    def build_other(artifact, *, squeeze: bool = False) -> bytes:
        return build_toy(artifact, squeeze=squeeze)

    with pytest.raises(
        ConfigError,
        match=r"exporter of bnc models to --format toy is already registered \(by "
        r"[\w.]*test_exporter_registry\).*overwrite=True",
    ):
        register_toy(build_other)
    assert exporter_for("bnc", "toy") is first
    with pytest.raises(ConfigError, match="--format onnx is already registered"):
        register_exporter("bnc", "onnx", build_other, extension=".onnx", runtime="onnxruntime")
    assert exporter_for("bnc", "onnx").build is build_onnx_bytes
    assert register_toy(build_other, overwrite=True) is exporter_for("bnc", "toy")
    assert exporter_for("bnc", "toy").build is build_other


def test_a_value_outside_the_declared_choices_is_refused_naming_them():
    with pytest.raises(
        ExportError,
        match=r"tflite export of a bnc model: unknown lowering 'gather-grouped' "
        r"\(option --lowering\); choose one of gather, onehot-fc",
    ):
        exporter_for("bnc", "tflite").resolve_options({"lowering": "gather-grouped"})
    with pytest.raises(
        ExportError,
        match=r"unknown ORT optimization 'all' \(option --ort-optimization\); "
        "choose one of disabled, basic",
    ):
        exporter_for("dnn", "ort").resolve_options({"ort_optimization": "all"})
    assert exporter_for("bnc", "tflite").resolve_options({"lowering": "onehot-fc"})["lowering"] == "onehot-fc"


def test_a_declared_refusal_names_declared_options_and_choices():
    with pytest.raises(ValueError, match="names option 'pack_bits', which it does not declare"):
        register_exporter(
            "bnc",
            "toy",
            build_toy,
            extension=".onnx",
            runtime="onnxruntime",
            refusals=[Refusal("no codes", "quantized", options={"pack_bits": True})],
        )
    with pytest.raises(ValueError, match="names --lowering 'gather-grouped', not one of its choices"):
        register_exporter(
            "bnc",
            "toy",
            build_toy,
            extension=".onnx",
            runtime="onnxruntime",
            options=exporter_for("bnc", "tflite").options,
            refusals=[Refusal("grouped", "grouped", options={"lowering": "gather-grouped"})],
        )
    assert ("bnc", "toy") not in exporters()


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
