"""NumPy reference predictors: the ground truth every export and runtime is compared with.

One predictor per model kind (the file name is the kind): :class:`~bnc_deploy.reference.bnc.ReferencePredictor`
for BN classifiers, :class:`~bnc_deploy.reference.dnn.DNNReferencePredictor` for DNNs. They read
model files (artifacts) only, never torch. :func:`reference_predictor` picks one by the
artifact's ``kind`` from :data:`REFERENCE_PREDICTORS`; a new model family registers its own.
"""

from __future__ import annotations

from bnc_deploy.errors import ArtifactError
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.reference.dnn import DNNReferencePredictor
from bnc_deploy.registry import claim

#: Artifact kind -> reference predictor class.
REFERENCE_PREDICTORS: dict[str, type] = {"bnc": ReferencePredictor, "dnn": DNNReferencePredictor}


def register_reference(kind: str, predictor: type, *, overwrite: bool = False) -> None:
    """Add the reference predictor of an artifact kind (ConfigError for a kind that has one unless
    ``overwrite``: :func:`bnc_deploy.registry.claim`)."""
    claim(REFERENCE_PREDICTORS, kind, what=f"a reference predictor of kind {kind!r}", overwrite=overwrite)
    REFERENCE_PREDICTORS[kind] = predictor


def reference_predictor(artifact):
    """The reference predictor of ``artifact``, chosen by its ``kind``."""
    try:
        return REFERENCE_PREDICTORS[artifact.kind](artifact)
    except KeyError:
        raise ArtifactError(
            f"no reference predictor for model kind {artifact.kind!r}; known kinds: "
            f"{', '.join(sorted(REFERENCE_PREDICTORS))}"
        ) from None


__all__ = [
    "ReferencePredictor",
    "DNNReferencePredictor",
    "REFERENCE_PREDICTORS",
    "register_reference",
    "reference_predictor",
]
