"""The ONNX file format: the bnc-deploy metadata of an ONNX ``ModelProto`` (read with ``onnx`` only).

Exporters store the metadata JSON under ``metadata_props["bnc_deploy"]`` (plus a few flat keys,
:func:`bnc_deploy.formats.metadata.flat_metadata`); readers use these functions, never an exporter.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from bnc_deploy.formats.metadata import METADATA_KEY

if TYPE_CHECKING:
    from onnx import ModelProto


def read_onnx_metadata(model: ModelProto) -> dict[str, str]:
    """``metadata_props`` of a model (an ``onnx.ModelProto``) as a plain dict."""
    return {p.key: p.value for p in model.metadata_props}


def read_export_metadata(model: ModelProto) -> dict[str, Any] | None:
    """The parsed ``bnc_deploy`` JSON blob of an exported ``onnx.ModelProto`` (None if absent), unvalidated."""
    props = read_onnx_metadata(model)
    meta: dict[str, Any] | None = json.loads(props[METADATA_KEY]) if METADATA_KEY in props else None
    return meta


#: The DNN exporter's historical name for :func:`read_export_metadata`.
read_dnn_metadata = read_export_metadata
