"""The exported-file contract of Bayesian network classifiers (``model_kind = "bnc"``).

What every exporter of a BN classifier writes and every runtime reads: the metadata keys and
their checker, the lowerings and when they are exact, the stacked-table index constants, and the
raw-input binning rule. Plain NumPy/JSON (no onnx, no tensorflow, no torch), so a runtime can
import it without pulling in an exporter's framework.

Contract of every exported BNC file
-----------------------------------
Input ``x`` of shape [N, D] (dynamic N):

* ``input = "codes"``: integer feature codes, feature ``i`` in ``0 .. cardinalities[i] - 1``;
* ``input = "raw"``: float32 raw values, binned in the graph with the discretizer's rule
  ``code = #(cut points < x)`` using :func:`float32_thresholds` (exact for float32 inputs).

Outputs ``log_joint`` [N, C] float32 (``log p(c, x)``) and ``label`` [N] int64 (first maximum).

Guard (:data:`GUARD`): a row with any code outside its feature's range (codes input) or any
non-finite value (raw input, ``|x| <= FLT_MAX`` fails for NaN and +-inf) is *invalid*: its
``log_joint`` row is all NaN and its label is :data:`INVALID_LABEL` (-1). An invalid value never
indexes the tables: exporters clip it into its own feature's block or route it to a dedicated
invalid row (ONNX), so it can never read another feature's table, and a gather never goes out
of bounds. Adapters reject such inputs before they reach the graph; the guard is for callers
that feed the bare graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from bnc_deploy.errors import ArtifactError, ExportError, MetadataError
from bnc_deploy.formats.checkset import CHECK_KEY, FeatureSpace, check_entry
from bnc_deploy.formats.metadata import (
    GUARD,
    INPUT_CODES,
    INPUT_RAW,
    METADATA_KEY,
    METADATA_SCHEMA_VERSION,
    artifact_hash,
    register_kind,
    with_integrity_placeholder,
)
from bnc_deploy.formats.metadata import OUTPUT_LOG_JOINT as OUTPUT_LOG_JOINT  # re-exported (the BN scores' name)
from bnc_deploy.version import __version__

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact

#: Lowerings of the per-feature table lookup. ``gather`` indexes the stacked table directly;
#: ``onehot-fc`` multiplies a one-hot encoding with the table (a fully connected layer).
LOWERINGS = ("gather", "onehot-fc")
#: ONNX also has ``gather-grouped``: features merged in groups whose summed tables are built at
#: load time, so a row needs fewer lookups (faster on large batches, more table memory at run
#: time; ``exporters/onnx_bnc.py``). Only the ONNX exporter offers it: the others check against
#: :data:`LOWERINGS` and refuse it by name.
ONNX_LOWERINGS = LOWERINGS + ("gather-grouped",)
#: ``--lowering auto``: not a graph but a request to the verifier (``bnc_deploy.autolowering``),
#: which times every other declared lowering in the format's runtime at ``--lowering-batch`` rows
#: and exports the fastest, with the timings in the metadata (``lowering_auto``).
AUTO_LOWERING = "auto"
#: Lowerings that look table rows up by index (exact for quantized models at every bit width).
GATHER_LOWERINGS = ("gather", "gather-grouped")
#: Largest bit width at which the TFLite ``onehot-fc`` lowering is exact (the TFLite exporter
#: documents why). ONNX's ``onehot-fc`` is exact at every width and says so in its metadata.
ONEHOT_FC_EXACT_MAX_BITS = 7

#: Keys every exported file's metadata must carry (runtimes check them on load).
REQUIRED_METADATA_KEYS = (
    "schema_version",
    "toolkit_version",
    "format",
    "lowering",
    "input",
    "input_dtype",
    "structure",
    "quantized",
    "bits",
    "int_bits",
    "frac_bits",
    "class_names",
    "feature_names",
    "cardinalities",
    "parents",
    "n_parameters",
    "size_bits",
    "n_ops",
    "artifact_sha256",
    "guard",
)


class RawInputModel(FeatureSpace, Protocol):
    """What the raw-input rules read of a model: its feature space and the embedded discretizer
    (``to_dict()`` form, None without one); every artifact kind has them."""

    @property
    def feature_names(self) -> Sequence[str]: ...

    @property
    def discretizer(self) -> dict[str, Any] | None: ...


def is_exact_lowering(artifact: BNCArtifact, lowering: str) -> bool:
    """Whether ``lowering`` reproduces the artifact's ``log_joint`` bit for bit.

    The format-neutral, conservative answer: quantized + ``gather`` always; quantized +
    ``onehot-fc`` while ``B <= ONEHOT_FC_EXACT_MAX_BITS``. An exporter that does better stores its
    own ``exact`` in the metadata (``bnc-export`` trusts the file's). Float models are never
    called exact: float32 summation order differs between runtimes, so only labels are compared.
    """
    check_lowering(lowering, ONNX_LOWERINGS)
    q = artifact.quantizer
    if q is None:  # a float model (``artifact.is_quantized`` is ``quantizer is not None``)
        return False
    return lowering in GATHER_LOWERINGS or q.total_bits <= ONEHOT_FC_EXACT_MAX_BITS


def check_lowering(lowering: str, allowed: tuple[str, ...] = LOWERINGS) -> str:
    """``lowering`` if it is one of ``allowed`` (an exporter passes its own list), else ExportError."""
    if lowering not in allowed:
        raise ExportError(f"unknown lowering {lowering!r}; choose one of {', '.join(allowed)}")
    return lowering


def export_metadata(
    artifact: BNCArtifact,
    *,
    format: str,
    lowering: str = "gather",
    raw_inputs: bool = False,
    input_dtype: str = "int64",
    opset: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The metadata dict every exporter stores (JSON under :data:`METADATA_KEY`).

    Parameters
    ----------
    artifact : BNCArtifact
    format : ``"onnx"`` or ``"tflite"``
    lowering : one of :data:`ONNX_LOWERINGS` (the exporter has checked it against its own list)
    raw_inputs : bool
        True when the discretizer is embedded and the input is raw float32 values.
    input_dtype : str
        NumPy name of the graph input's dtype (``"int64"``, ``"int32"``, ``"float32"``).
    opset : int, optional
        ONNX opset (or None).
    extra : dict, optional
        Format-specific facts merged in last.
    """
    check_lowering(lowering, ONNX_LOWERINGS)
    q = artifact.quantizer
    meta: dict[str, Any] = {
        "schema_version": METADATA_SCHEMA_VERSION,
        "toolkit_version": __version__,
        "model_kind": artifact.kind,
        "format": format,
        "opset": opset,
        "lowering": lowering,
        "exact": is_exact_lowering(artifact, lowering),
        "input": INPUT_RAW if raw_inputs else INPUT_CODES,
        "input_dtype": "float32" if raw_inputs else input_dtype,
        "structure": artifact.structure,
        "quantized": artifact.is_quantized,
        "bits": artifact.bits_per_parameter,
        "int_bits": q.int_bits if q else None,
        "frac_bits": q.frac_bits if q else None,
        "n_features": artifact.n_features,
        "n_classes": artifact.n_classes,
        "class_names": list(artifact.class_names),
        "feature_names": list(artifact.feature_names),
        "cardinalities": [int(c) for c in artifact.cardinalities],
        "parents": [int(p) for p in artifact.parents],
        "n_parameters": artifact.n_parameters,
        "size_bits": artifact.size_bits,
        "n_ops": artifact.n_ops,
        "artifact_sha256": artifact_hash(artifact),
        "guard": dict(GUARD),
    }
    if raw_inputs:
        meta["n_cut_points"] = [len(c) for c in raw_cut_points(artifact)]
    meta.update(extra or {})
    # After ``extra``: an exporter may promise exactness beyond the conservative rule above, and
    # the check set's rows and comparison depend on it (formats/checkset.py).
    meta.setdefault(
        CHECK_KEY,
        check_entry(artifact, exact=bool(meta["exact"]), raw_values=raw_representatives if raw_inputs else None),
    )
    return with_integrity_placeholder(meta)


# -- lookup constants -------------------------------------------------------------------------
def lookup_constants(artifact: BNCArtifact) -> dict[str, NDArray[np.int64]]:
    """Per-feature constants of the stacked-table index, each of shape (D,), int64.

    Row of feature ``i`` = ``offsets[i] + x[:, i] * strides[i] + has_parent[i] * x[:, parent_index[i]]``
    (``strides[i] = |X_pa(i)|``, 1 for the class only; ``parent_index`` is 0 where there is no
    parent, and ``has_parent`` zeroes that term). ``max_code[i] = |X_i| - 1`` is the clip bound.
    """
    has_parent = artifact.parents >= 0
    return {
        "offsets": artifact.row_offsets.astype(np.int64),
        "strides": artifact.parent_cardinalities.astype(np.int64),
        "parent_index": np.where(has_parent, artifact.parents, 0).astype(np.int64),
        "has_parent": has_parent.astype(np.int64),
        "cardinalities": artifact.cardinalities.astype(np.int64),
        "max_code": (artifact.cardinalities - 1).astype(np.int64),
    }


# -- raw inputs ---------------------------------------------------------------------------------
def raw_cut_points(artifact: RawInputModel) -> list[NDArray[np.float64]]:
    """The embedded discretizer's cut points, one float64 array per feature (sorted).

    Raises ExportError if the artifact has no discretizer or its cut counts do not match the
    cardinalities (``|X_i| = n_cuts_i + 1`` is what the binning in the graph produces).
    """
    if artifact.discretizer is None:
        raise ExportError("--raw-inputs needs a model trained on raw values: this artifact stores no discretizer")
    from bnc_deploy.datasets.discretize import FayyadIraniDiscretizer

    try:
        disc = FayyadIraniDiscretizer.from_dict(artifact.discretizer)
    except ArtifactError as exc:
        raise ExportError(f"the artifact's discretizer is invalid: {exc}") from None
    cuts = [np.asarray(c, dtype=np.float64) for c in disc.cut_points_]
    if len(cuts) != artifact.n_features:
        raise ExportError(f"discretizer has {len(cuts)} features, the model {artifact.n_features}")
    for i, c in enumerate(cuts):
        if len(c) + 1 != int(artifact.cardinalities[i]):
            raise ExportError(
                f"feature {i} ({artifact.feature_names[i]!r}): {len(c)} cut points give "
                f"{len(c) + 1} codes but the model has cardinality {int(artifact.cardinalities[i])}"
            )
    return cuts


def float32_thresholds(cuts: ArrayLike) -> NDArray[np.float32]:
    """Float32 thresholds ``t`` with ``x > t  <=>  x > cut`` for every float32 ``x``.

    A float64 cut is rounded *down* to float32: if ``cut`` is not a float32, the float32 values
    above it are exactly those above its float32 predecessor. So comparing float32 inputs to
    these thresholds reproduces ``searchsorted(cuts, float64(x), side="left")`` exactly.
    """
    cuts = np.asarray(cuts, dtype=np.float64)
    with np.errstate(over="ignore"):  # cuts beyond float32 range become +-inf, fixed below
        t = cuts.astype(np.float32)  # round to nearest
    above = t.astype(np.float64) > cuts
    t[above] = np.nextafter(t[above], np.float32(-np.inf))
    return t


def padded_thresholds(artifact: RawInputModel) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """Cut thresholds of all features as one (D, K) float32 matrix, K = max cut count (>= 1).

    Missing cuts are padded with ``+FLT_MAX``: no finite float32 exceeds it, so padding never
    adds to a code (non-finite inputs are invalid rows anyway). Returns ``(thresholds, n_cuts)``
    with ``n_cuts`` of shape (D,), int64.
    """
    cuts = raw_cut_points(artifact)
    k = max([len(c) for c in cuts] + [1])
    pad = np.finfo(np.float32).max
    thresholds = np.full((artifact.n_features, k), pad, dtype=np.float32)
    for i, c in enumerate(cuts):
        thresholds[i, : len(c)] = float32_thresholds(c)
    return thresholds, np.array([len(c) for c in cuts], dtype=np.int64)


def bin_raw_float32(thresholds: NDArray[np.float32], x_raw: ArrayLike) -> NDArray[np.int64]:
    """NumPy model of the in-graph binning: codes (n, D) int64 from float32 values (n, D)."""
    x = np.asarray(x_raw, dtype=np.float32)
    codes: NDArray[np.int64] = (x[:, :, None] > thresholds[None, :, :]).sum(axis=2).astype(np.int64)
    return codes


def raw_representatives(artifact: RawInputModel, codes: ArrayLike) -> NDArray[np.float32]:
    """Raw float32 values that fall into the given bins: the inputs to verify a raw-input export.

    Code ``k`` of feature ``i`` maps to the float32 threshold of its *upper* cut point (a value
    exactly on the bin edge, the hardest case for the comparisons), the top code to the next
    float32 above the last cut, and features without cuts to 0. Shape (n, D) -> (n, D) float32.
    The expected codes are what the discretizer assigns to these values (normally ``codes``; two
    float64 cuts closer than a float32 step can merge a bin, which the comparison then reflects).
    """
    codes = np.asarray(codes, dtype=np.int64)
    thresholds, n_cuts = padded_thresholds(artifact)
    values = np.zeros(codes.shape, dtype=np.float32)
    for i in range(artifact.n_features):
        k = int(n_cuts[i])
        if k == 0:
            continue
        with np.errstate(over="ignore"):  # FLT_MAX's successor is inf; clipped just below
            edges = np.append(thresholds[i, :k], np.nextafter(thresholds[i, k - 1], np.float32(np.inf)))
        # A cut at or beyond the float32 range leaves no finite float32 above it: feed the largest
        # finite value instead (the discretizer then says which bin float32 inputs can reach).
        edges = np.clip(edges, -np.finfo(np.float32).max, np.finfo(np.float32).max)
        values[:, i] = edges[np.clip(codes[:, i], 0, k)]
    return values


def check_bnc_metadata(meta: dict[str, Any], where: str) -> None:
    """Raise MetadataError naming ``where`` if a BN file's metadata is incomplete or inconsistent."""
    missing = [k for k in REQUIRED_METADATA_KEYS if k not in meta]
    if missing:
        raise MetadataError(f"{where}: {METADATA_KEY} metadata lacks keys {missing}")
    if meta["input"] not in (INPUT_CODES, INPUT_RAW):
        raise MetadataError(f"{where}: unknown input kind {meta['input']!r}")
    d = len(meta["cardinalities"])
    if len(meta["feature_names"]) != d or len(meta["parents"]) != d or any(int(c) < 1 for c in meta["cardinalities"]):
        raise MetadataError(f"{where}: inconsistent feature metadata")


register_kind("bnc", check_bnc_metadata)
