"""The conformance matrix: every registered (kind, format) x every runtime that reads it x every
declared option value, on small random artifacts, through ``bnc_deploy.testing.check_export``.

Nothing here names an exporter: the cases come from the registry, so a newly registered exporter
(one new module under ``exporters/``) is covered with no new test code. The oracle is the
exporter's own declarations (``register_exporter(..., refusals=[Refusal(...)])``, scikit-learn's
``expected_failed_checks`` in spirit): a case that hits a declared refusal must be refused with an
ExportError matching it, and leave no file; every other case must export and pass the checks. So
an exporter that refuses everything fails here, and so does a declaration that went stale.
"""

from __future__ import annotations

import numpy as np
import pytest

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters.base import Option, Refusal, exporters, register_exporter, unregister_exporter
from bnc_deploy.exporters.onnx_bnc import build_onnx_bytes
from bnc_deploy.testing import check_export, discretizer_dict, example_artifacts, random_bnc_artifact, runtimes_for
from bnc_deploy.verify import VerificationError


def _raw_trained_bnc():
    """A quantized TAN that stores its discretizer (a cardinality-1 feature without cuts included)."""
    cuts = [[-0.5, 0.5], [], [-1.0, 0.0, 1.0], [0.25]]
    return random_bnc_artifact(
        np.random.default_rng(11),
        tan=True,
        bits=3,
        int_bits=2,
        n_classes=3,
        n_check=40,
        cardinalities=[len(c) + 1 for c in cuts],
        discretizer=discretizer_dict(cuts),
    )


#: Examples the matrix adds to ``example_artifacts``: its BN examples are trained on codes, so
#: without a raw-trained one ``--raw-inputs`` would only ever be (declared) refused, never exported.
EXTRA_EXAMPLES = {"bnc": {"tan-3bit-raw": _raw_trained_bnc}}


def matrix_examples(kind: str) -> dict[str, object]:
    """``example_artifacts(kind)`` and the matrix's own extra examples of ``kind``."""
    extra = {name: make() for name, make in EXTRA_EXAMPLES.get(kind, {}).items()}
    return {**example_artifacts(kind), **extra}


def option_variants(spec) -> list[dict]:
    """The default options, then each declared non-default value alone (bool flags flipped, other choices)."""
    variants = [{}]
    for option in spec.options:
        if option.type == "bool":
            variants.append({option.name: not option.default})
        elif option.choices:
            variants += [{option.name: choice} for choice in option.choices if choice != option.default]
    return variants


def conformance_cases() -> list[tuple]:
    """``(kind, format, example, runtime, options)`` for every registered exporter."""
    cases = []
    for (kind, fmt), spec in sorted(exporters().items()):
        for example in matrix_examples(kind):
            for runtime in runtimes_for(spec.extension):
                for options in option_variants(spec):
                    cases.append((kind, fmt, example, runtime, options))
    return cases


def case_id(case) -> str:
    kind, fmt, example, runtime, options = case
    opts = ",".join(f"{k}={v}" for k, v in options.items()) or "defaults"
    return f"{kind}-{fmt}-{example}-{runtime}-{opts}"


def run_case(tmp_path, kind, fmt, example, runtime, options) -> str:
    """Export and check one case against the exporter's declarations.

    Returns ``"checked"`` (exported, passed ``check_export`` in ``runtime``) or ``"refused"`` (a
    declared refusal happened, with its message, leaving no file). Raises AssertionError when the
    export is refused and no refusal is declared for the case, when it is refused with another
    message than the declared ones, when a declared refusal does not happen (a stale declaration),
    or when the exported file fails a check.
    """
    spec = exporters()[(kind, fmt)]
    artifact = matrix_examples(kind)[example]
    declared = spec.refusals_for(artifact, options)
    what = f"{fmt} export of the {kind} example {example} with {options or 'the default options'}"
    try:
        result = check_export(artifact, fmt, tmp_path, runtimes=[runtime], **options)
    except VerificationError as exc:
        # An ExportError too, but a wrong file, never a refusal: no declaration excuses it.
        raise AssertionError(f"{what}: the exported file failed verification: {exc}") from None
    except ExportError as exc:
        message = str(exc)
        assert message and "Traceback" not in message
        assert not list(tmp_path.iterdir()), f"{what}: a refused export left a file behind"
        assert declared, f"{what} was refused, and the exporter declares no such refusal: {message}"
        assert any(refusal.matches(message) for refusal in declared), (
            f"{what} was refused with {message!r}, not with the declared refusal: "
            + "; ".join(f"{r.reason} (message {r.message!r})" for r in declared)
        )
        return "refused"
    assert not declared, f"{what} exported, but the exporter declares it refused (stale): {declared[0].reason}"
    assert runtime in result["runtimes"]
    return "checked"


CASES = conformance_cases()


def test_the_matrix_covers_every_registered_exporter_and_kind():
    registered = set(exporters())
    assert {("bnc", "onnx"), ("bnc", "tflite"), ("dnn", "onnx"), ("dnn", "tflite")} <= registered
    assert {(kind, fmt) for kind, fmt, *_ in CASES} == registered


def test_every_declared_refusal_is_exercised_by_the_matrix():
    """A declaration no case hits could go stale unseen: each is hit by at least one case (and
    ``test_export_conforms`` then checks that it happens)."""
    hit = set()
    for kind, fmt, example, _, options in CASES:
        spec = exporters()[(kind, fmt)]
        hit.update((kind, fmt, id(r)) for r in spec.refusals_for(matrix_examples(kind)[example], options))
    missed = [
        f"{fmt} ({kind}): {r.reason}"
        for (kind, fmt), spec in exporters().items()
        for r in spec.refusals
        if (kind, fmt, id(r)) not in hit
    ]
    assert not missed, missed


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_export_conforms(tmp_path, case):
    run_case(tmp_path, *case)


# -- the oracle is honest: fake exporters that should fail the matrix do ---------------------------------------
@pytest.fixture
def register_fake():
    """``register(format, build, **kw)``: a fake BN exporter to ``format``, writing ``.onnx`` files."""
    registered = []

    def register(fmt, build, **kw):
        register_exporter(
            "bnc",
            fmt,
            build,
            extension=".onnx",
            runtime="onnxruntime",
            options=[Option("squeeze", "bool", False, help="a fake flag")],
            **kw,
        )
        registered.append(fmt)

    yield register
    for fmt in registered:
        unregister_exporter("bnc", fmt)


def matrix_failures(tmp_path, fmt) -> tuple[int, list[str]]:
    """``(number of cases, failure texts)`` of the matrix's cases for ``fmt``."""
    cases = [case for case in conformance_cases() if case[1] == fmt]
    failures = []
    for k, case in enumerate(cases):
        folder = tmp_path / str(k)
        folder.mkdir()
        try:
            run_case(folder, *case)
        except AssertionError as exc:
            failures.append(f"{case_id(case)}: {exc}")
    return len(cases), failures


def test_an_exporter_that_refuses_everything_fails_every_case(register_fake, tmp_path):
    def refuse(artifact, *, squeeze: bool = False) -> bytes:
        raise ExportError("this exporter refuses every model")

    register_fake("refuse-all", refuse)
    n_cases, failures = matrix_failures(tmp_path, "refuse-all")
    assert n_cases >= 2 * len(matrix_examples("bnc")) and len(failures) == n_cases
    assert all("declares no such refusal" in failure for failure in failures)


def test_a_stale_declared_refusal_fails(register_fake, tmp_path):
    """The fake declares ``--squeeze`` refused on float models but exports them."""

    def export(artifact, *, squeeze: bool = False) -> bytes:
        return build_onnx_bytes(artifact)

    register_fake(
        "stale",
        export,
        refusals=[
            Refusal(
                "squeezing float tables is refused",
                "float tables",
                options={"squeeze": True},
                models=lambda a: not a.is_quantized,
            )
        ],
    )
    _, failures = matrix_failures(tmp_path, "stale")
    assert failures and all("squeeze=True" in failure and "(stale)" in failure for failure in failures)
    assert all("tan-float" in failure for failure in failures)


def test_a_refusal_with_another_message_than_declared_fails(register_fake, tmp_path):
    def export(artifact, *, squeeze: bool = False) -> bytes:
        if squeeze:
            raise ExportError("something unrelated went wrong")
        return build_onnx_bytes(artifact)

    register_fake(
        "other-reason", export, refusals=[Refusal("squeezing is refused", "cannot squeeze", options={"squeeze": True})]
    )
    n_cases, failures = matrix_failures(tmp_path, "other-reason")
    assert len(failures) == n_cases // 2  # the squeeze=True half; the defaults export
    assert all("not with the declared refusal" in failure for failure in failures)


def test_a_refusal_of_everything_cannot_be_declared():
    with pytest.raises(ValueError, match="names neither options nor models"):
        Refusal("this exporter refuses every model", "refuses")
