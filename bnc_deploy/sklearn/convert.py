"""Fitted estimators and pipelines <-> model files (artifacts).

:func:`to_artifact` accepts a fitted :class:`~bnc_deploy.sklearn.BNClassifier` or
:class:`~bnc_deploy.sklearn.DNNClassifier`, or a fitted :class:`~sklearn.pipeline.Pipeline` of
``[FayyadIraniDiscretizer, classifier]`` (``"passthrough"``/None steps ignored). It returns a copy of
the classifier's artifact; for the pipeline the copy carries ``discretizer = disc.to_dict()`` (the
raw-input stage ``bnc-export --raw-inputs`` compiles) and, if the discretizer saw string column
names, those as the feature names. The check set stays the training codes the classifier kept.

:func:`from_artifact` takes an artifact or a model-file path and returns a fitted estimator that
predicts exactly as the artifact (the same reference predictor), or a fitted pipeline
``make_pipeline(FayyadIraniDiscretizer, classifier)`` when the artifact stores a discretizer.

Class labels: a model file stores ``class_names`` as strings. An estimator's artifact also keeps
its labels in ``metadata["sklearn"]["classes"]`` when they are all ints, all strings, all bools or
all finite floats (JSON-safe); ``from_artifact`` restores those when their ``str`` forms equal
``class_names``, and otherwise (a model trained by ``bnc-train``, other label types) uses the
strings of ``class_names`` as ``classes_``. Hyper-parameters are restored from
``metadata["sklearn"]["params"]``; without it (a ``bnc-train`` model) the structure/architecture
and bit widths are read from the artifact and the rest keep their defaults (refitting then trains
with those defaults).
"""

from __future__ import annotations

import copy
import dataclasses
import os

import numpy as np
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.utils.validation import check_is_fitted

from bnc_deploy.artifacts import BNCArtifact, DNNArtifact, load_artifact
from bnc_deploy.datasets.discretize import FayyadIraniDiscretizer as _MDLDiscretizer
from bnc_deploy.sklearn.bnc import BNClassifier
from bnc_deploy.sklearn.discretizer import FayyadIraniDiscretizer
from bnc_deploy.sklearn.dnn import DNNClassifier

CLASSIFIERS = (BNClassifier, DNNClassifier)


def to_artifact(estimator) -> BNCArtifact | DNNArtifact:
    """The model file of a fitted classifier or ``[FayyadIraniDiscretizer, classifier]`` pipeline (a copy)."""
    if isinstance(estimator, Pipeline):
        steps = [step for _, step in estimator.steps if step is not None and not _is_passthrough(step)]
        if len(steps) == 1:
            return to_artifact(steps[0])
        if len(steps) == 2 and isinstance(steps[0], _MDLDiscretizer) and isinstance(steps[1], CLASSIFIERS):
            return _with_discretizer(steps[0], steps[1])
        names = [type(step).__name__ for step in steps]
        raise ValueError(
            f"to_artifact: a pipeline must be [FayyadIraniDiscretizer, BNClassifier or DNNClassifier], got {names}"
        )
    if not isinstance(estimator, CLASSIFIERS):
        raise TypeError(f"to_artifact: expected a BNClassifier, DNNClassifier or Pipeline, got {type(estimator)}")
    check_is_fitted(estimator, "artifact_")
    return copy.deepcopy(estimator.artifact_)


def _is_passthrough(step) -> bool:
    return isinstance(step, str) and step == "passthrough"


def _with_discretizer(disc, clf) -> BNCArtifact | DNNArtifact:
    check_is_fitted(disc, "cut_points_")
    check_is_fitted(clf, "artifact_")
    artifact = clf.artifact_
    if not np.array_equal(disc.n_values_, artifact.cardinalities):
        j = int(np.argmax(disc.n_values_ != artifact.cardinalities))
        raise ValueError(
            f"to_artifact: feature {j} has {int(disc.n_values_[j])} bins in the discretizer but "
            f"{int(artifact.cardinalities[j])} values in the classifier (were they fitted on the same data?)"
        )
    metadata = copy.deepcopy(artifact.metadata)
    metadata.setdefault("sklearn", {})["pipeline"] = [type(disc).__name__, type(clf).__name__]
    names = getattr(disc, "feature_names_in_", None)
    metadata["sklearn"]["feature_names_in"] = names is not None
    return dataclasses.replace(
        copy.deepcopy(artifact),
        discretizer=disc.to_dict(),
        feature_names=[str(f) for f in names] if names is not None else list(artifact.feature_names),
        metadata=metadata,
    )


def from_artifact(artifact_or_path):
    """A fitted estimator (or ``[FayyadIraniDiscretizer, classifier]`` pipeline) that predicts as the artifact."""
    if isinstance(artifact_or_path, (str, os.PathLike)):
        artifact = load_artifact(artifact_or_path)
    else:
        artifact = copy.deepcopy(artifact_or_path)
    if isinstance(artifact, BNCArtifact):
        cls = BNClassifier
    elif isinstance(artifact, DNNArtifact):
        cls = DNNClassifier
    else:
        raise TypeError(f"from_artifact: expected a BNCArtifact, DNNArtifact or model-file path, got {type(artifact)}")
    info = artifact.metadata.get("sklearn", {}) or {}
    estimator = cls()
    _restore_params(estimator, info.get("params") or _params_of(artifact))
    discretizer = artifact.discretizer
    classifier_artifact = dataclasses.replace(artifact, discretizer=None) if discretizer else artifact
    names = np.asarray(artifact.feature_names, dtype=object)
    if discretizer is None and info.get("feature_names_in"):
        estimator.feature_names_in_ = names
    estimator._set_fitted(classifier_artifact, restored_classes(artifact))
    if discretizer is None:
        return estimator
    disc = FayyadIraniDiscretizer.from_dict(discretizer)
    if info.get("feature_names_in"):
        disc.feature_names_in_ = names
    return make_pipeline(disc, estimator)


def restored_classes(artifact) -> np.ndarray:
    """``classes_`` for an artifact: its stored original labels if consistent, else ``class_names``."""
    stored = (artifact.metadata.get("sklearn") or {}).get("classes")
    if isinstance(stored, list) and [str(c) for c in stored] == list(artifact.class_names):
        return np.asarray(stored)
    return np.asarray(artifact.class_names)


def _params_of(artifact) -> dict:
    """Hyper-parameters readable from a model file without ``metadata["sklearn"]`` (``bnc-train``'s)."""
    if isinstance(artifact, DNNArtifact):
        return {"model": artifact.architecture, "bits": artifact.weight_bits, "activation": artifact.activation}
    quantizer = artifact.quantizer
    return {
        "structure": "nb" if artifact.structure == "nb" else artifact.parents.tolist(),
        "bits": quantizer.total_bits if quantizer else None,
        "int_bits": quantizer.int_bits if quantizer else None,
    }


def _restore_params(estimator, params: dict) -> None:
    """Set the hyper-parameters a model file recorded, where they are still valid values."""
    known = estimator.get_params()
    for key, value in params.items():
        if key in known:
            try:
                estimator.set_params(**{key: value})
            except (TypeError, ValueError):
                continue
