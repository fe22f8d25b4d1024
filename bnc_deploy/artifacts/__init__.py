"""Versioned, framework-neutral model files (see ``container`` for the layout)."""

from __future__ import annotations

import os

from bnc_deploy.artifacts.bnc import BNCArtifact
from bnc_deploy.artifacts.container import FORMAT_VERSION, ArtifactError, read_container, write_container_published
from bnc_deploy.artifacts.dnn import DNNArtifact, DNNLayer
from bnc_deploy.registry import claim

#: Artifact classes by the header's ``kind``.
ARTIFACT_KINDS: dict[str, type] = {}


def register_artifact_kind(cls: type, *, overwrite: bool = False) -> type:
    """Add a model-file class under its ``kind`` (a new model family registers here); ConfigError for
    a taken kind unless ``overwrite`` (:func:`bnc_deploy.registry.claim`)."""
    claim(ARTIFACT_KINDS, cls.kind, what=f"model-file kind {cls.kind!r}", overwrite=overwrite)
    ARTIFACT_KINDS[cls.kind] = cls
    return cls


register_artifact_kind(BNCArtifact)
register_artifact_kind(DNNArtifact)


def save_artifact(artifact, path: str | os.PathLike) -> str:
    """Write ``artifact`` to ``path``; return its content hash (sha256 hex)."""
    return publish_artifact(artifact, path)[0]


def publish_artifact(artifact, path: str | os.PathLike):
    """:func:`save_artifact`, returning ``(content hash, fileio.Published)``: the file's SHA-256 and
    whether it was still this writer's right after the atomic move (``owned``)."""
    header, arrays = artifact.to_header_and_arrays()
    return write_container_published(path, header, arrays)


def load_artifact(path: str | os.PathLike, data: bytes | None = None):
    """Load and validate a model file (or ``data``, its content already read, named ``path``);
    raise ArtifactError naming the file and the problem."""
    header, arrays = read_container(path, data)
    kind = header.get("kind")
    if kind not in ARTIFACT_KINDS:
        raise ArtifactError(f"{path}: unknown model kind {kind!r} (known: {sorted(ARTIFACT_KINDS)})")
    artifact = ARTIFACT_KINDS[kind].from_header_and_arrays(header, arrays, where=str(path))
    artifact.content_sha256 = header["content_sha256"]
    return artifact


__all__ = [
    "ARTIFACT_KINDS",
    "ArtifactError",
    "BNCArtifact",
    "DNNArtifact",
    "DNNLayer",
    "FORMAT_VERSION",
    "load_artifact",
    "publish_artifact",
    "register_artifact_kind",
    "save_artifact",
]
