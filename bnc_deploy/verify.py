"""The one verifier: build an export, run it in its runtime, compare it with the reference, publish.

Every exported file reaches disk through :func:`export_file`, whatever its model kind or format::

    build (the registered exporter: artifact -> bytes, nothing written, nothing run;
           then sealed: the file's SHA-256, or HMAC-SHA256 with a key, in its metadata)
    -> write a unique temporary file beside the target (bnc_deploy.fileio)
    -> open it in the format's runtime adapter (1 thread)
    -> run the verification rows, compare scores and labels with the artifact's reference predictor
    -> publish atomically (os.replace) only if a file that promises exactness is exact

Verification rows (:func:`bnc_deploy.formats.checkset.verification_rows`) are the caller's rows
(``bnc-export --data``'s test split), else the check set stored in the model, plus
:data:`~bnc_deploy.formats.checkset.N_RANDOM_ROWS` seeded random valid rows (the first two are the
all-zero and all-maximum rows: the first and last table rows). Raw-input files (metadata ``input
= "raw"``) are fed the raw value on the upper edge of each row's bins
(:func:`bnc_deploy.formats.bnc.raw_representatives`), and the reference codes are what the
artifact's discretizer makes of those values.

Exactness is the file's own promise (metadata ``exact``): quantized BN gather/one-hot lowerings
within their bit range, sign DNNs. Such a file must reproduce every label and every score bit for
bit on every verification row; otherwise :class:`VerificationError` is raised with the full report
and **nothing is published** (an existing file at the target stays as it was). Files that are
not exact by design (float tables, int8 ReLU nets) are compared on labels and published, unless
``min_agreement`` asks for more.

The report is an :class:`ExportResult`, typed and frozen (:func:`verify_file` returns its
:class:`Verification` part): ``path``, ``format``, ``model_kind``, ``lowering``, ``runtime``,
``file_bytes``, ``sha256``, ``integrity`` (``"sha256"``, or ``"hmac-sha256"`` when signed with a
key), ``owned`` (the file on disk is still this call's, see :mod:`bnc_deploy.fileio`),
``exact_expected``, ``exact``, ``n_rows`` (the caller's or check-set rows), ``n_random_rows``,
``label_mismatches`` and ``agreement`` (on those rows), ``scores_identical`` and
``max_abs_score_diff`` (all verification rows), ``accuracy``, ``reference_accuracy``,
``accuracy_change`` (when labels are known), ``metadata`` (the file's), and with
``lowering="auto"`` ``lowering_auto`` (the timings that chose the lowering,
:mod:`bnc_deploy.autolowering`). Its ``to_dict()`` is the report as a dict, as the verifier has
always returned it: the verification's keys first, then ``format``, ``file_bytes``, ``sha256``,
``integrity``, ``path``, ``owned``, ``lowering_auto``, where the last three are absent while they
do not apply (``path``/``owned`` until the file is published, so in a
:class:`VerificationError`'s report; ``lowering_auto`` without ``lowering="auto"``).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from bnc_deploy.autolowering import choose_lowering, wants_auto
from bnc_deploy.errors import ExportError, InputError, RuntimeLoadError
from bnc_deploy.exporters.base import exporter_for
from bnc_deploy.fileio import atomic_path, publish
from bnc_deploy.formats.checkset import N_RANDOM_ROWS, verification_rows
from bnc_deploy.formats.integrity import SCHEME_HMAC, SCHEME_SHA256, seal
from bnc_deploy.formats.metadata import INPUT_RAW, OUTPUT_LOG_JOINT
from bnc_deploy.reference import reference_predictor

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact
    from bnc_deploy.artifacts.dnn import DNNArtifact

__all__ = [
    "N_RANDOM_ROWS",
    "ExportResult",
    "IntegrityScheme",
    "Verification",
    "VerificationError",
    "build",
    "export_file",
    "export_path",
    "verification_rows",
    "verify_file",
]


#: How the file is sealed (metadata ``integrity``): its SHA-256, or its HMAC-SHA256 under a key.
IntegrityScheme = Literal["sha256", "hmac-sha256"]

#: Keys of :meth:`ExportResult.to_dict` that are absent while their value is None.
_ABSENT_WHEN_NONE = frozenset({"path", "owned", "lowering_auto"})


@dataclass(frozen=True, kw_only=True)
class Verification:
    """An exported file run in its runtime on the verification rows, compared with the reference.

    The verification rows are ``n_rows`` given rows (the caller's, else the check set stored in
    the artifact) followed by ``n_random_rows`` seeded random valid rows, ``n_verified`` in all.
    The label comparison on the given rows (``label_mismatches``, ``agreement``) and the accuracy
    against their true labels (``accuracy``, ``reference_accuracy``, ``accuracy_change``) are None
    when there are no given rows, the accuracies also when their labels are not known.
    """

    #: The artifact's model kind (``"bnc"``, ``"dnn"``).
    model_kind: str
    #: The file's lowering (metadata ``lowering``), None when the file names none.
    lowering: str | None
    #: The runtime adapter that ran the file (``"onnxruntime"``, ``"tflite"``, ``"native"``, ...).
    runtime: str
    #: The file's metadata as its runtime read it.
    metadata: dict[str, Any]
    #: Whether the file promises exactness (metadata ``exact``).
    exact_expected: bool
    #: Every label and every score bit for bit equal to the reference's, on every verification row.
    exact: bool
    #: Given rows (the caller's or the check set's).
    n_rows: int
    #: Seeded random rows after them.
    n_random_rows: int
    #: All verification rows (``n_rows + n_random_rows``).
    n_verified: int
    #: Rows of all ``n_verified`` whose label differs from the reference's.
    label_mismatches_all: int
    #: Whether the scores equal the reference's bit for bit on all verification rows.
    scores_identical: bool
    #: Largest absolute score difference on all verification rows.
    max_abs_score_diff: float
    #: Label differences on the given rows.
    label_mismatches: int | None = None
    #: Fraction of the given rows whose label equals the reference's.
    agreement: float | None = None
    #: The file's accuracy on the given rows' true labels.
    accuracy: float | None = None
    #: The reference's accuracy on them.
    reference_accuracy: float | None = None
    #: ``accuracy - reference_accuracy``.
    accuracy_change: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report as a dict, the fields in order (see the module docstring); nested values are copies."""
        report: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None and field.name in _ABSENT_WHEN_NONE:
                continue
            report[field.name] = copy.deepcopy(value) if isinstance(value, (dict, list)) else value
        return report


@dataclass(frozen=True, kw_only=True)
class ExportResult(Verification):
    """:func:`export_file`'s result: the :class:`Verification` of the file it built, the file's
    facts, and where it was published (``path``/``owned`` None: not published, as in a
    :class:`VerificationError`'s ``report``)."""

    #: The exported format (``"onnx"``, ``"tflite"``, ``"ort"``, ``"c"``).
    format: str
    #: Size of the file in bytes.
    file_bytes: int
    #: SHA-256 (hex) of the file's bytes.
    sha256: str
    #: How the file is sealed in its metadata.
    integrity: IntegrityScheme
    #: Where the file was published (None: not published).
    path: Path | None = None
    #: Whether the file on disk is still this call's (:mod:`bnc_deploy.fileio`; None: not published).
    owned: bool | None = None
    #: With ``lowering="auto"``: the timings that chose the lowering (:mod:`bnc_deploy.autolowering`).
    lowering_auto: dict[str, Any] | None = None

    @classmethod
    def from_verification(
        cls, verification: Verification, *, format: str, file_bytes: int, sha256: str, integrity: IntegrityScheme
    ) -> ExportResult:
        """The result of a file with these facts and this verification, not published yet."""
        fields = {field.name: getattr(verification, field.name) for field in dataclasses.fields(Verification)}
        return cls(**fields, format=format, file_bytes=file_bytes, sha256=sha256, integrity=integrity)

    @property
    def published(self) -> bool:
        """Whether the file was published at :attr:`path`."""
        return self.path is not None


#: :attr:`ExportReport.data` when the rows verified on are the check set stored in the model.
CHECK_SET_ROWS = "check set stored in the model"


@dataclass(frozen=True, kw_only=True)
class ExportReport:
    """An export as ``bnc-export --json`` prints it and :func:`bnc_deploy.export` returns it: the
    model's costs and facts, the file, and its verification (:attr:`result`).

    :meth:`to_dict` gives exactly the ``--json`` keys; the verifier's own report is
    ``result.to_dict()`` (it names the scores ``scores_*`` where the JSON says ``log_joint_*``).
    """

    #: The model file exported (its path, or a description of a model in memory).
    model: str
    #: The file written (or not written: ``result.published``).
    output: str
    #: Where the verification rows came from (``"check set stored in the model"``, a split, ...).
    data: str
    #: The model's facts and analytic costs: ``artifact.report_facts()`` with ``n_parameters``,
    #: ``bits``, ``size_bits``, ``n_ops``.
    facts: dict[str, Any]
    #: The verifier's result.
    result: ExportResult

    @classmethod
    def of(
        cls, artifact: BNCArtifact | DNNArtifact, result: ExportResult, *, model: str, output: str, data: str
    ) -> ExportReport:
        """The report of ``result`` for ``artifact``."""
        facts = {
            **artifact.report_facts(),
            "n_parameters": artifact.n_parameters,
            "bits": artifact.bits_per_parameter,
            "size_bits": artifact.size_bits,
            "n_ops": artifact.n_ops,
        }
        return cls(model=model, output=output, data=data, facts=facts, result=result)

    def __getattr__(self, name: str) -> Any:
        """The verifier's fields read through: ``report.exact``, ``report.path``, ``report.file_bytes``."""
        if name.startswith("__") or name == "result":  # copy/pickle probe dunders before ``result`` is set
            raise AttributeError(name)
        return getattr(self.result, name)

    def to_dict(self) -> dict[str, Any]:
        """The ``bnc-export --json`` object (keys only ever added to)."""
        result, meta = self.result, self.result.metadata
        outputs = meta.get("outputs")
        scores_name = outputs[0] if isinstance(outputs, list) and outputs else OUTPUT_LOG_JOINT
        report: dict[str, Any] = {
            "model": self.model,
            "output": self.output,
            "format": result.format,
            "lowering": meta.get("lowering"),
            "raw_inputs": meta.get("input") == INPUT_RAW,
            "file_bytes": result.file_bytes,
            **copy.deepcopy(self.facts),
            "runtime": result.runtime,
            "data": self.data,
            "n_rows": result.n_rows,
            "agreement": result.agreement,
            "exact": result.exact,
            "exact_expected": result.exact_expected,
            "label_mismatches": result.label_mismatches,
            "log_joint_identical": result.scores_identical,
            "max_abs_log_joint_diff": result.max_abs_score_diff,
            "accuracy": result.accuracy,
            "reference_accuracy": result.reference_accuracy,
            "accuracy_change": result.accuracy_change,
            "n_nodes": meta.get("n_nodes"),
            "n_random_rows": result.n_random_rows,
            "n_verified": result.n_verified,
            "label_mismatches_all": result.label_mismatches_all,
            "published": result.published,
            "sha256": result.sha256,
            "scores_name": scores_name,
            "integrity": result.integrity,
            "owned": bool(result.published and result.owned),
        }
        if result.lowering_auto:
            report["lowering_auto"] = copy.deepcopy(result.lowering_auto)
        if scores_name == "logits":  # DNN files name their scores logits, and so do their JSON keys
            report.update(logits_identical=result.scores_identical, max_abs_logit_diff=result.max_abs_score_diff)
        return report


class VerificationError(ExportError):
    """An export that promises exactness differs from the reference (or agrees on too few labels);
    nothing was published. ``report`` holds the full comparison (its ``path`` and ``owned`` are None)."""

    def __init__(self, message: str, report: ExportResult) -> None:
        super().__init__(message)
        self.report = report


def build(
    artifact: BNCArtifact | DNNArtifact, format: str, *, key: bytes | None = None, **options: Any
) -> tuple[bytes, dict[str, Any]]:
    """The exported file's bytes, sealed, and the resolved options (nothing written, nothing run).

    The exporter's bytes carry the ``integrity`` placeholder; it is filled in here with the
    file's SHA-256, or its HMAC-SHA256 under ``key`` (:func:`bnc_deploy.formats.integrity.seal`).
    """
    spec = exporter_for(artifact.kind, format)
    resolved = spec.resolve_options(options)
    return seal(spec.build(artifact, **resolved), key), resolved


def export_file(
    artifact: BNCArtifact | DNNArtifact,
    path: str | os.PathLike[str],
    format: str,
    *,
    rows: ArrayLike | None = None,
    labels: ArrayLike | None = None,
    min_agreement: float | None = None,
    n_random: int = N_RANDOM_ROWS,
    key: bytes | None = None,
    **options: Any,
) -> ExportResult:
    """Build, verify and publish ``artifact`` as a ``format`` file at ``path``; return the report.

    ``rows``/``labels``: rows to verify on and their true labels (default: the check set stored
    in the artifact). ``key``: sign the file with HMAC-SHA256 under this key (at least 32 bytes;
    loading it then needs the key), else it is sealed with its SHA-256. ``options``: the
    exporter's declared options. Raises ExportError when the
    exporter refuses the options or the file cannot be loaded by its runtime, VerificationError
    (an ExportError) when an exact file is not exact or agreement is below ``min_agreement``,
    OutputError when ``path`` cannot be written. In every failure nothing is published.
    """
    spec = exporter_for(artifact.kind, format)
    auto: dict[str, Any] | None = None
    if wants_auto(options):  # time the candidate lowerings first (bnc_deploy.autolowering)
        options, auto = choose_lowering(artifact, format, options, build=build, key=key)
    data, _ = build(artifact, format, key=key, **options)
    digest = hashlib.sha256(data).hexdigest()
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
        checked = verify_file(artifact, tmp, spec.runtime, rows=rows, labels=labels, n_random=n_random, key=key)
        scheme = cast(IntegrityScheme, SCHEME_SHA256 if key is None else SCHEME_HMAC)
        report = ExportResult.from_verification(
            checked, format=format, file_bytes=len(data), sha256=digest, integrity=scheme
        )
        if report.exact_expected and not report.exact:
            raise VerificationError(
                f"the exported {format} file disagrees with the artifact: {report.label_mismatches_all} of "
                f"{report.n_verified} verification rows differ in their label, scores identical: "
                f"{report.scores_identical} (max |diff| {report.max_abs_score_diff:.3g}); nothing was "
                f"written to {path}. The runtime changed the arithmetic - please report this with its version",
                report,
            )
        if min_agreement is not None and report.agreement is not None and report.agreement < min_agreement:
            raise VerificationError(
                f"the exported {format} file agrees with the reference on {report.agreement:.4%} of "
                f"{report.n_rows} rows, below the required {min_agreement:.4%}; nothing was written to {path}",
                report,
            )
        published = publish(tmp, path, expected_sha256=digest)
    return dataclasses.replace(report, path=published.path, owned=published.owned, lowering_auto=auto)


def verify_file(
    artifact: BNCArtifact | DNNArtifact,
    path: str | os.PathLike[str],
    runtime: str,
    *,
    rows: ArrayLike | None = None,
    labels: ArrayLike | None = None,
    n_random: int = N_RANDOM_ROWS,
    key: bytes | None = None,
) -> Verification:
    """Run ``path`` in ``runtime`` on the verification rows and compare with the reference.

    The runtime checks the file's seal on load (``key``: the one it was signed with)."""
    from bnc_deploy.runtimes.base import load_runtime

    try:
        rt = load_runtime(path, runtime, threads=1, **({} if key is None else {"key": key}))
    except RuntimeLoadError as exc:
        raise ExportError(f"the exported file does not load in {runtime}: {exc}") from None
    meta = rt.metadata
    x, n_given = verification_rows(artifact, rows, n_random)
    reference = reference_predictor(artifact)
    fed: NDArray[np.int64] | NDArray[np.float32] = x
    codes = x
    if meta.get("input") == INPUT_RAW:
        from bnc_deploy.formats.bnc import raw_representatives

        fed = raw_representatives(artifact, x)
        codes = reference.discretize(fed.astype(np.float64))
    ref_scores = reference.log_joint(codes)
    ref_label = np.argmax(ref_scores, axis=1)
    try:
        scores, label = rt.run(fed)
    except InputError as exc:  # e.g. a raw representative beyond float32 range: the data, not the file
        raise ExportError(f"cannot verify the export: {exc}") from None
    except RuntimeError as exc:  # the graph's guard fired on valid rows, or wrong output shapes
        raise ExportError(f"the exported file does not run correctly in {runtime}: {exc}") from None
    differ = label != ref_label
    identical = bool(np.array_equal(scores, ref_scores))
    exact_expected = bool(meta.get("exact"))
    # The comparison on the given rows, when there are some, and the accuracies, when their labels are known.
    mismatches: int | None = None
    agreement: float | None = None
    accuracy: float | None = None
    ref_accuracy: float | None = None
    accuracy_change: float | None = None
    if n_given:
        mismatches = int(differ[:n_given].sum())
        agreement = 1.0 - mismatches / n_given
        y = labels if labels is not None else (artifact.check_y if rows is None else None)
        if y is not None:
            y = np.asarray(y).reshape(-1)
            if y.shape != (n_given,):
                raise ExportError(f"labels have shape {y.shape}, expected ({n_given},)")
            accuracy = float(np.mean(label[:n_given] == y))
            ref_accuracy = float(np.mean(ref_label[:n_given] == y))
            accuracy_change = accuracy - ref_accuracy
    return Verification(
        model_kind=artifact.kind,
        lowering=meta.get("lowering"),
        runtime=runtime,
        metadata=meta,
        exact_expected=exact_expected,
        exact=bool(identical and not differ.any()),
        n_rows=n_given,
        n_random_rows=int(len(x) - n_given),
        n_verified=int(len(x)),
        label_mismatches_all=int(differ.sum()),
        scores_identical=identical,
        max_abs_score_diff=float(np.max(np.abs(scores - ref_scores), initial=0.0)),
        label_mismatches=mismatches,
        agreement=agreement,
        accuracy=accuracy,
        reference_accuracy=ref_accuracy,
        accuracy_change=accuracy_change,
    )


def export_path(artifact: BNCArtifact | DNNArtifact, path: str | os.PathLike[str], format: str, **options: Any) -> Path:
    """:func:`export_file` returning only the published path (for scripts and tests)."""
    published = export_file(artifact, path, format, **options).path
    assert published is not None  # export_file publishes or raises
    return published
