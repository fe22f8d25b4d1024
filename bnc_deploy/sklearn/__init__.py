"""scikit-learn estimators for the toolkit's models, and conversion to and from model files.

* :class:`FayyadIraniDiscretizer`: supervised MDL discretization, continuous values -> codes.
* :class:`BNClassifier`: naive Bayes / TAN (Chow-Liu, learned or given parents) on integer codes,
  float or few-bit parameters.
* :class:`DNNClassifier`: the quantized FC/CNN baselines on integer codes.
* :func:`to_artifact` / :func:`from_artifact`: a fitted estimator or
  ``[FayyadIraniDiscretizer, classifier]`` pipeline <-> a model file (``BNCArtifact``/``DNNArtifact``).

Importing this package loads scikit-learn and NumPy but not torch: the classifiers import the
trainers inside ``fit``, and a fitted estimator predicts with the NumPy reference predictors, so a
pickled one predicts where torch is not installed. The skl2onnx converters are in
:mod:`bnc_deploy.sklearn.onnx`.
"""

from __future__ import annotations

from bnc_deploy.sklearn.bnc import BNClassifier
from bnc_deploy.sklearn.convert import from_artifact, to_artifact
from bnc_deploy.sklearn.discretizer import FayyadIraniDiscretizer
from bnc_deploy.sklearn.dnn import DNNClassifier

__all__ = ["BNClassifier", "DNNClassifier", "FayyadIraniDiscretizer", "from_artifact", "to_artifact"]
