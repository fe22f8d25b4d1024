"""The Fayyad–Irani MDL discretizer as a scikit-learn transformer.

One implementation of the cut points: this class derives from
:class:`bnc_deploy.datasets.discretize.FayyadIraniDiscretizer` and adds only scikit-learn's input
validation (``n_features_in_``, ``feature_names_in_``, NaN/inf refused), tags and feature names
out. The bin rule, ``to_dict``/``from_dict`` (the form a model file stores for raw inputs) and
the fitted attributes ``cut_points_`` and ``n_values_`` are the base class's.

``transform`` returns int64 codes of shape (n_samples, n_features), feature ``i`` in
``0 .. n_values_[i] - 1``; every bin holds at least one training value, so the codes of the
training data reach every bin and a classifier fitted on them infers the same cardinalities.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from bnc_deploy.datasets.discretize import FayyadIraniDiscretizer as _MDLDiscretizer


class FayyadIraniDiscretizer(OneToOneFeatureMixin, TransformerMixin, BaseEstimator, _MDLDiscretizer):
    """Supervised MDL discretization (Fayyad & Irani 1993) of continuous features into integer codes.

    No hyper-parameters: the MDL criterion decides how many cut points each feature gets (none for
    a feature that does not help predict the class).

    Attributes
    ----------
    cut_points_ : list of ndarray, one per feature, float64, strictly increasing
    n_values_ : ndarray of shape (n_features,), int64
        Number of codes of each feature, ``len(cut_points_[i]) + 1``.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` had string column names (a DataFrame).
    """

    def fit(self, X, y):
        """Learn the cut points from finite floats ``X`` (n_samples, n_features) and labels ``y``."""
        x, y = validate_data(self, X, y, dtype=np.float64, ensure_all_finite=True)
        check_classification_targets(y)
        return _MDLDiscretizer.fit(self, x, y)

    def transform(self, X):
        """Codes of ``X``: the number of cut points strictly below each value (int64)."""
        check_is_fitted(self, "cut_points_")
        x = validate_data(self, X, reset=False, dtype=np.float64, ensure_all_finite=True)
        return _MDLDiscretizer.transform(self, x)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.input_tags.allow_nan = False
        # Codes are integers whatever the input dtype.
        tags.transformer_tags.preserves_dtype = []
        return tags
