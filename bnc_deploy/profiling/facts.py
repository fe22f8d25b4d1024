"""What one model file is and costs, before anything runs it (``bnc-profile``'s model facts).

BN classifiers and DNNs alike: a ``.bnc`` artifact by its kind (:func:`bnc_deploy.costs.analytic_costs`),
an exported file from its metadata (:func:`bnc_deploy.costs.costs_from_metadata`, by ``model_kind``)
plus the graph count (:mod:`bnc_deploy.profiling.graph_count`); a C file (``.h``) has no graph to
count. An export's integrity digest is checked first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnc_deploy import costs as cost_models  # module attribute: tests replace analytic_costs
from bnc_deploy.artifacts import load_artifact
from bnc_deploy.costs import COST_MODELS, CostReport
from bnc_deploy.errors import MetadataError
from bnc_deploy.formats.c import read_c_metadata
from bnc_deploy.formats.integrity import verify_file
from bnc_deploy.profiling.graph_count import GraphCount, count_graph

#: Exported files without a graph to count (C: costs from the metadata only).
UNCOUNTED_SUFFIXES = (".h",)


@dataclass
class ModelFacts:
    """Costs and description of one model file (no runtime involved)."""

    file: str
    format: str  # the suffix without its dot: "bnc", "onnx", "tflite", "h", ...
    file_bytes: int
    model_kind: str  # "bnc" or "dnn"
    structure: str
    lowering: str | None
    bits: int
    quantized: bool
    input: str  # "codes" or raw values
    cardinalities: list[int]
    costs: CostReport  # analytic costs
    graph: GraphCount | None = None  # the exported graph's count (None: a .bnc, a C file)
    artifact: Any = None  # the loaded artifact of a .bnc (None for exports)
    stored_dataset: str | None = None  # a .bnc's training data and stored test error
    stored_fold: int | None = None
    stored_test_error: float | None = None
    notes: list[str] = field(default_factory=list)


def model_facts(path, *, verify_integrity: bool = True, key: bytes | None = None) -> ModelFacts:
    """Costs of one model file: analytic (artifact or metadata) and, for exports, the graph count.

    An export's integrity digest is checked first (``key``: of a signed file; IntegrityError when
    the file was modified after export), unless ``verify_integrity`` is False.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    common = {"file": str(p), "format": suffix.lstrip("."), "file_bytes": p.stat().st_size}
    if suffix == ".bnc":
        return _artifact_facts(p, common)
    return _export_facts(p, common, verify_integrity=verify_integrity, key=key)


def _artifact_facts(p: Path, common: dict) -> ModelFacts:
    artifact = load_artifact(p)
    costs = cost_models.analytic_costs(artifact)
    data = artifact.metadata.get("data", {})
    return ModelFacts(
        **common,
        model_kind=artifact.kind,
        structure=artifact.structure,
        lowering=None,
        bits=artifact.bits_per_parameter,
        quantized=artifact.is_quantized,
        input="codes",
        cardinalities=[int(c) for c in artifact.cardinalities],
        costs=costs,
        artifact=artifact,
        stored_dataset=data.get("name"),
        stored_fold=data.get("fold"),
        stored_test_error=artifact.metadata.get("errors", {}).get("test"),
    )


def _export_facts(p: Path, common: dict, *, verify_integrity: bool, key: bytes | None) -> ModelFacts:
    suffix = p.suffix.lower()
    notes = []
    if not verify_integrity:
        notes.append("integrity digest not checked (--no-integrity-check)")
    elif verify_file(p, key=key) is None:  # IntegrityError (exit 2) when modified after export
        notes.append(f"{p.name} has no integrity digest (exported by an older bnc-deploy; re-export it to protect it)")
    if suffix in UNCOUNTED_SUFFIXES:  # a C file has no graph: costs from its metadata, no graph count
        count, meta = None, read_c_metadata(p)
        notes.append(f"{suffix} files have no graph to count: costs from the file's metadata")
    else:
        count = count_graph(p)
        meta = count.metadata
    if not meta:
        raise MetadataError(f"{p}: not a bnc-deploy export (no 'bnc_deploy' metadata)")
    kind = meta.get("model_kind", "bnc")
    if kind not in COST_MODELS:
        raise MetadataError(f"{p}: no analytic cost model for model kind {kind!r}")
    try:
        costs = cost_models.costs_from_metadata(meta)
        return ModelFacts(
            **common,
            model_kind=kind,
            structure=meta["structure"],
            lowering=meta.get("lowering"),
            bits=meta["bits"],
            quantized=meta["quantized"],
            input=meta["input"],
            cardinalities=list(meta["cardinalities"]),
            costs=costs,
            graph=count,
            notes=notes,
        )
    except (KeyError, TypeError) as exc:
        raise MetadataError(f"{p}: incomplete {kind} metadata (no {exc})") from None
