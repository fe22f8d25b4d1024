"""The exported-file contract shared by every model kind and format: names, the metadata blob, the guard.

Every exported file (ONNX ``metadata_props``, TFLite metadata buffer, ...) carries one canonical
JSON object under :data:`METADATA_KEY`. It says what the file computes (``model_kind``, input
kind and dtype, outputs, classes, features and cardinalities, bits, operations, exactness) and
which model file it came from (``artifact_sha256``), so runtimes, the profiler and servers need
nothing but the file.

Every exported file's metadata also carries ``integrity``: a digest of the whole file (SHA-256,
or HMAC-SHA256 with a user key), written by the verifier and checked on load; see
:mod:`bnc_deploy.formats.integrity`. Files exported before it existed have none and still load.

Each model kind adds its own keys and checks (:mod:`bnc_deploy.formats.bnc`,
:mod:`bnc_deploy.formats.dnn`) and registers its checker with :func:`register_kind`;
:func:`parse_metadata` dispatches on ``model_kind`` (absent means ``"bnc"``, the first kind).

Plain NumPy/JSON: no onnx, no tensorflow, no torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bnc_deploy.artifacts.container import content_hash
from bnc_deploy.errors import MetadataError
from bnc_deploy.formats.integrity import FIELD as INTEGRITY_FIELD
from bnc_deploy.formats.integrity import placeholder as integrity_placeholder

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact
    from bnc_deploy.artifacts.dnn import DNNArtifact

#: Key of the JSON metadata blob in an exported file (ONNX metadata_props / TFLite metadata).
METADATA_KEY = "bnc_deploy"
#: Version of the metadata dict's layout; runtimes refuse newer ones.
METADATA_SCHEMA_VERSION = 1

INPUT_CODES = "codes"
INPUT_RAW = "raw"
INPUT_NAME = "x"
OUTPUT_LOG_JOINT = "log_joint"
OUTPUT_LABEL = "label"

INVALID_LABEL = -1
#: Stored in every file's metadata (kept short: it is in every file); the module docstring has the rule.
GUARD = {"invalid_label": INVALID_LABEL, "invalid_log_joint": "nan"}

#: model_kind -> function(meta, where) raising MetadataError if that kind's keys are wrong.
_KIND_CHECKERS: dict[str, Callable[[dict[str, Any], str], None]] = {}


def register_kind(kind: str, checker: Callable[[dict[str, Any], str], None]) -> None:
    """Register the metadata checker of a model kind (called at the bottom of its formats module)."""
    _KIND_CHECKERS[kind] = checker


def artifact_hash(artifact: BNCArtifact | DNNArtifact) -> str:
    """Content hash of the artifact: the one stored in its file, else computed the same way."""
    stored = getattr(artifact, "content_sha256", None)
    if stored:
        return str(stored)
    header, arrays = artifact.to_header_and_arrays()
    return content_hash(header, arrays)


def with_integrity_placeholder(meta: dict[str, Any]) -> dict[str, Any]:
    """Add the ``integrity`` placeholder to the metadata of an exported file (``format`` other than
    ``"bnc"``, the model file itself); the verifier seals it (:mod:`bnc_deploy.formats.integrity`)."""
    if meta.get("format") != "bnc":
        meta[INTEGRITY_FIELD] = integrity_placeholder()
    return meta


def flat_metadata(meta: Mapping[str, Any]) -> dict[str, str]:
    """A few top-level string keys for tools that only show flat key/value metadata.

    Kept short (classes and cardinalities live in the JSON blob): the file-size budget matters.
    """
    return {
        "bnc_deploy.version": str(meta["toolkit_version"]),
        "bnc_deploy.structure": str(meta["structure"]),
        "bnc_deploy.bits": str(meta["bits"]),
        "bnc_deploy.input": str(meta["input"]),
    }


def dump_metadata(meta: Mapping[str, Any]) -> str:
    """Canonical JSON text of the metadata (no NaN: the guard's NaN is spelled ``"nan"``)."""
    return json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=False)


def parse_metadata(text: str | bytes | bytearray | Mapping[str, Any], where: str = "model") -> dict[str, Any]:
    """Parse and check the metadata JSON of an exported file; MetadataError naming ``where``.

    Checks the common part (a JSON object, a schema version this toolkit reads, a known
    ``model_kind``), then the kind's own keys with the checker its formats module registered.
    """
    try:
        meta = json.loads(text) if isinstance(text, (str, bytes, bytearray)) else dict(text)
    except (TypeError, ValueError) as exc:
        raise MetadataError(f"{where}: corrupt {METADATA_KEY} metadata ({exc})") from None
    if not isinstance(meta, dict):
        raise MetadataError(f"{where}: {METADATA_KEY} metadata is not a JSON object")
    if "schema_version" in meta:
        version = meta["schema_version"]
        if isinstance(version, bool) or not isinstance(version, int) or version > METADATA_SCHEMA_VERSION:
            raise MetadataError(
                f"{where}: metadata schema version {version!r} is newer than this bnc-deploy "
                f"reads ({METADATA_SCHEMA_VERSION}); upgrade bnc-deploy"
            )
    kind = meta.get("model_kind", "bnc")
    checker = _KIND_CHECKERS.get(kind)
    if checker is None:
        raise MetadataError(
            f"{where}: unknown model kind {kind!r} (this bnc-deploy reads {', '.join(sorted(_KIND_CHECKERS))})"
        )
    checker(meta, where)
    return meta


def contract_outputs(meta: str | bytes | bytearray | Mapping[str, Any]) -> tuple[str, str]:
    """Names of a file's (scores, label) outputs: the metadata's ``outputs`` (DNN files:
    ``logits``/``label``), else ``log_joint``/``label`` (BN files). ``meta``: dict or JSON text."""
    if isinstance(meta, (str, bytes, bytearray)):
        try:
            meta = json.loads(meta)
        except ValueError:
            meta = {}
    names = meta.get("outputs") if isinstance(meta, dict) else None
    if isinstance(names, (list, tuple)) and len(names) == 2 and all(isinstance(n, str) for n in names):
        return names[0], names[1]
    return OUTPUT_LOG_JOINT, OUTPUT_LABEL
