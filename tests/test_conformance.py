"""The conformance matrix: every registered (kind, format) x every runtime that reads it x every
declared option value, on small random artifacts, through ``bnc_deploy.testing.check_export``.

Nothing here names an exporter: the cases come from the registry, so a newly registered exporter
(one new module under ``exporters/``) is covered with no new test code. Each option value either
exports a file that passes the checks or is refused with an ExportError that says why.
"""

from __future__ import annotations

import pytest

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters.base import exporters
from bnc_deploy.testing import check_export, example_artifacts, runtimes_for


def option_variants(spec) -> list[dict]:
    """The default options, then each declared non-default value alone (bool flags on, other choices)."""
    variants = [{}]
    for option in spec.options:
        if option.type == "bool":
            variants.append({option.name: True})
        elif option.choices:
            variants += [{option.name: choice} for choice in option.choices if choice != option.default]
    return variants


def conformance_cases() -> list[tuple]:
    """``(kind, format, example, runtime, options)`` for every registered exporter."""
    cases = []
    for (kind, fmt), spec in sorted(exporters().items()):
        for example in example_artifacts(kind):
            for runtime in runtimes_for(spec.extension):
                for options in option_variants(spec):
                    cases.append((kind, fmt, example, runtime, options))
    return cases


def case_id(case) -> str:
    kind, fmt, example, runtime, options = case
    opts = ",".join(f"{k}={v}" for k, v in options.items()) or "defaults"
    return f"{kind}-{fmt}-{example}-{runtime}-{opts}"


def run_case(tmp_path, kind, fmt, example, runtime, options) -> str:
    """Export and check one case; ``"checked"`` or ``"refused"`` (a declared refusal)."""
    artifact = example_artifacts(kind)[example]
    try:
        result = check_export(artifact, fmt, tmp_path, runtimes=[runtime], **options)
    except ExportError as exc:
        message = str(exc)
        assert message and "Traceback" not in message
        assert not list(tmp_path.iterdir()), "a refused export left a file behind"
        return "refused"
    assert runtime in result["runtimes"]
    return "checked"


#: What a format for quantized models only says when it refuses a float model (C: integer tables).
QUANTIZED_ONLY = "needs a quantized model"


def refuses_float_model(kind, fmt, example) -> bool:
    """Whether ``example`` is a float model that the exporter refuses, saying it needs a quantized one."""
    artifact = example_artifacts(kind)[example]
    if getattr(artifact, "is_quantized", True):
        return False
    try:
        exporters()[(kind, fmt)].build(artifact)
    except ExportError as exc:
        return QUANTIZED_ONLY in str(exc)
    return False


CASES = conformance_cases()


def test_the_matrix_covers_every_registered_exporter_and_kind():
    registered = set(exporters())
    assert {("bnc", "onnx"), ("bnc", "tflite"), ("dnn", "onnx"), ("dnn", "tflite")} <= registered
    assert {(kind, fmt) for kind, fmt, *_ in CASES} == registered


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_export_conforms(tmp_path, case):
    outcome = run_case(tmp_path, *case)
    kind, fmt, example, runtime, options = case
    if not options:  # the defaults must always export (a float model may be refused by a quantized-only format)
        assert outcome == "checked" or refuses_float_model(kind, fmt, example)
