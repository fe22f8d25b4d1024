"""The exported-file contract of quantized DNNs (``model_kind = "dnn"``). NumPy/JSON only.

Contract of every exported DNN file
-----------------------------------
Input ``x`` [N, D] of integer feature codes (int64 in ONNX, int32 in TFLite), exactly as for BN
exports, so one adapter API validates and runs both model kinds. The encoding of
:mod:`bnc_deploy.artifacts.dnn` (standardized fixed-point table or one-hot, image reshape) is
done in the graph.

Outputs ``logits`` [N, C] float32 and ``label`` [N] int64 (first maximum). The metadata's
``outputs`` names them; adapters read the names from there (BN files: ``log_joint``, ``label``).

Guard: as for BN exports (:data:`bnc_deploy.formats.metadata.GUARD`), a row with a code outside
its feature's range gets ``label = -1`` and NaN logits, and never indexes outside its table.

Exactness (``exact`` in the metadata): sign networks with ``B <= 7`` are integer machines
(see :func:`bnc_deploy.artifacts.dnn.sign_thresholds`) and export with identical hidden
activations and labels; ReLU networks are float (ONNX) or int8 (TFLite) computations whose
labels are compared, not promised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bnc_deploy.errors import MetadataError
from bnc_deploy.formats.checkset import CHECK_KEY, check_entry
from bnc_deploy.formats.metadata import (
    GUARD,
    INPUT_CODES,
    METADATA_SCHEMA_VERSION,
    OUTPUT_LABEL,
    artifact_hash,
    register_kind,
    with_integrity_placeholder,
)
from bnc_deploy.version import __version__

if TYPE_CHECKING:
    from bnc_deploy.artifacts.dnn import DNNArtifact

OUTPUT_LOGITS = "logits"
DNN_OUTPUTS = (OUTPUT_LOGITS, OUTPUT_LABEL)
#: Largest weight bit width whose odd codes fit int8 (|code| <= 2**B - 1 <= 127).
INT8_EXACT_MAX_BITS = 7

#: Keys every exported DNN file's metadata carries (runtimes check them on load).
REQUIRED_DNN_METADATA_KEYS = (
    "schema_version",
    "toolkit_version",
    "model_kind",
    "format",
    "input",
    "input_dtype",
    "outputs",
    "structure",
    "architecture",
    "activation",
    "weight_bits",
    "bits",
    "quantized",
    "input_encoding",
    "class_names",
    "feature_names",
    "cardinalities",
    "hidden_widths",
    "batch_norm",
    "n_parameters",
    "size_bits",
    "n_ops",
    "artifact_sha256",
    "guard",
    "exact",
)


def dnn_export_metadata(
    artifact: DNNArtifact,
    *,
    format: str,
    exact: bool,
    input_dtype: str,
    lowering: str,
    opset: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The metadata dict every DNN exporter stores (JSON under ``METADATA_KEY``).

    Parameters
    ----------
    artifact : DNNArtifact
    format : ``"onnx"`` or ``"tflite"``
    exact : bool
        Whether the exporter promises identical labels (and hidden activations) on every input.
    input_dtype : str
        NumPy name of the graph input dtype (``"int64"`` or ``"int32"``).
    lowering : str
        Exporter-specific name of the graph shape (e.g. ``"integer-sign"``, ``"float"``, ``"int8-ptq"``).
    """
    costs = artifact.costs()
    meta: dict[str, Any] = {
        "schema_version": METADATA_SCHEMA_VERSION,
        "toolkit_version": __version__,
        "model_kind": "dnn",
        "format": format,
        "opset": opset,
        "lowering": lowering,
        "exact": bool(exact),
        "input": INPUT_CODES,
        "input_dtype": input_dtype,
        "outputs": list(DNN_OUTPUTS),
        "structure": artifact.architecture,
        "architecture": artifact.architecture,
        "activation": artifact.activation,
        "weight_bits": artifact.weight_bits,
        "bits": artifact.weight_bits,
        "quantized": True,
        "int_bits": None,
        "frac_bits": None,
        "input_encoding": artifact.input_encoding,
        "input_scale": artifact.input_scale,
        "image_shape": list(artifact.image_shape) if artifact.image_shape else None,
        "pixel_order": artifact.pixel_order,
        "n_features": artifact.n_features,
        "n_classes": artifact.n_classes,
        "class_names": list(artifact.class_names),
        "feature_names": list(artifact.feature_names),
        "cardinalities": [int(c) for c in artifact.cardinalities],
        "hidden_widths": artifact.hidden_widths,
        "batch_norm": artifact.batch_norm,
        "layers": [layer.describe() for layer in artifact.layers],
        "n_parameters": artifact.n_parameters,
        "size_bits": int(costs.size_bits),
        "n_ops": int(costs.n_ops),
        "artifact_sha256": artifact_hash(artifact),
        "guard": dict(GUARD),
    }
    meta.update(extra or {})
    # The stored check set a server reproduces before calling the model ready (formats/checkset.py).
    meta.setdefault(CHECK_KEY, check_entry(artifact, exact=bool(meta["exact"])))
    return with_integrity_placeholder(meta)


def check_dnn_metadata(meta: dict[str, Any], where: str) -> None:
    """Raise MetadataError naming ``where`` if a DNN file's metadata is incomplete or inconsistent."""
    missing = [k for k in REQUIRED_DNN_METADATA_KEYS if k not in meta]
    if missing:
        raise MetadataError(f"{where}: DNN metadata lacks keys {missing}")
    d = len(meta["cardinalities"])
    if len(meta["feature_names"]) != d or any(int(c) < 1 for c in meta["cardinalities"]):
        raise MetadataError(f"{where}: inconsistent feature metadata")
    if meta["input"] != INPUT_CODES:
        raise MetadataError(f"{where}: DNN exports take feature codes, metadata says input {meta['input']!r}")
    if list(meta["outputs"]) != list(DNN_OUTPUTS):
        raise MetadataError(f"{where}: DNN outputs {meta['outputs']!r}, expected {list(DNN_OUTPUTS)}")


register_kind("dnn", check_dnn_metadata)
