"""Few-bit Bayesian network classifiers (naive Bayes, TAN) as a scikit-learn classifier.

``fit`` trains with :func:`bnc_deploy.train.bnc.train_bnc` (structure learning:
:func:`bnc_deploy.train.structure_learning.train_learned_tan`), imported inside ``fit`` only: a
fitted estimator predicts with the NumPy :class:`~bnc_deploy.reference.bnc.ReferencePredictor` over
its ``artifact_``, so a pickled one predicts where torch is not installed. Nothing is written and
no progress bar shown unless ``verbose``.

Inputs are integer codes and labels as :mod:`bnc_deploy.sklearn._common` states; continuous
features go through :class:`~bnc_deploy.sklearn.FayyadIraniDiscretizer` first (a pipeline).

Scores: :meth:`BNClassifier.log_joint` is ``log p(c, x)`` of shape (n_samples, n_classes), bit for
bit the reference predictor's (and so the exported graphs') values. ``predict_proba`` is their
softmax, ``p(c | x)``; ``decision_function`` follows scikit-learn's binary convention (see
``_common``).

Defaults give a good model without tuning: maximum-likelihood start (``init="ml"``), then 100
epochs of the hybrid generative/discriminative loss, float parameters unless ``bits`` is set.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from bnc_deploy.artifacts.bnc import check_acyclic
from bnc_deploy.errors import ArtifactError
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.sklearn._common import ScoresClassifierMixin, attach_metadata, batch_size_for, fit_data

STRUCTURES = ("nb", "chow-liu", "learn")


class BNClassifier(ScoresClassifierMixin, ClassifierMixin, BaseEstimator):
    """Naive Bayes / TAN classifier over integer codes, optionally with few-bit log-parameters.

    Parameters
    ----------
    structure : {"nb", "chow-liu", "learn"} or array-like of shape (n_features,), default="nb"
        Naive Bayes; TAN by Chow-Liu; TAN by size-aware structure learning (settings in
        ``structure_params``, a dict of
        :class:`~bnc_deploy.train.structure_learning.StructureLearningConfig` fields); or explicit
        parents (``-1``: the class only), acyclic.
    bits : int in 1..8 or None, default=None
        Total bits of each log-parameter (fixed point); None trains a float model.
    int_bits : int or None, default=None
        Integer bits of the fixed point (None: the trainer's default for ``bits``).
    init : {"ml", "uniform"}, default="ml"
    loss : {"hybrid", "nll", "cll"}, default="hybrid"
    epochs, batch_size, lr, lr_decay : training schedule (Adam, log-linear decay to ``lr * lr_decay``)
        ``batch_size`` is capped at the number of rows. ``epochs=0`` keeps the maximum-likelihood
        model (``init="ml"``), rounded to ``bits`` when set.
    hybrid_lambda, hybrid_gamma, hybrid_eta : float
        The hybrid loss's weights (the paper's values by default).
    smoothing : float, default=1.0
        Pseudo-counts of the maximum-likelihood start.
    n_values : int, array-like of shape (n_features,) or None, default=None
        Cardinalities; None infers ``max code + 1`` per feature from the training data.
    structure_params : dict or None
        Only with ``structure="learn"``.
    random_state : int, RandomState or None, default=None
        Seed of training; None means seed 0, so every fit is reproducible.
    verbose : bool, default=False
        Show the trainer's progress bar.

    Attributes
    ----------
    classes_, n_features_in_, feature_names_in_ (DataFrame with string columns only),
    n_values_ : ndarray (n_features,) int64, parents_ : ndarray (n_features,) int64,
    artifact_ : BNCArtifact over codes (``class_names = [str(c) for c in classes_]``; its check set is up
    to 1000 seeded training rows, as there is no test split), history_ : dict (per-epoch history).
    """

    def __init__(
        self,
        structure="nb",
        *,
        bits=None,
        int_bits=None,
        init="ml",
        loss="hybrid",
        epochs=100,
        batch_size=100,
        lr=3e-3,
        lr_decay=1e-3,
        hybrid_lambda=18.70,
        hybrid_gamma=0.1277,
        hybrid_eta=10.0,
        smoothing=1.0,
        n_values=None,
        structure_params=None,
        random_state=None,
        verbose=False,
    ):
        self.structure = structure
        self.bits = bits
        self.int_bits = int_bits
        self.init = init
        self.loss = loss
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.lr_decay = lr_decay
        self.hybrid_lambda = hybrid_lambda
        self.hybrid_gamma = hybrid_gamma
        self.hybrid_eta = hybrid_eta
        self.smoothing = smoothing
        self.n_values = n_values
        self.structure_params = structure_params
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, X, y):
        """Train on codes ``X`` (n_samples, n_features) and labels ``y`` (n_samples,)."""
        from bnc_deploy.train.bnc import TrainConfig, train_bnc

        dataset, classes, seed = fit_data(self, X, y)
        codes = dataset.x_train
        parents = self._explicit_parents(codes.shape[1])
        config = TrainConfig(
            model="nb" if self._structure_name() == "nb" else "tan",
            bits=self.bits,
            int_bits=self.int_bits,
            init=self.init,
            smoothing=self.smoothing,
            epochs=self.epochs,
            batch_size=batch_size_for(self.batch_size, codes.shape[0]),
            lr=self.lr,
            lr_decay=self.lr_decay,
            loss=self.loss,
            hybrid_lambda=self.hybrid_lambda,
            hybrid_gamma=self.hybrid_gamma,
            hybrid_eta=self.hybrid_eta,
            seed=seed,
            progress=bool(self.verbose),
        )
        if self._structure_name() == "learn":
            from bnc_deploy.train.structure_learning import StructureLearningConfig, train_learned_tan

            result = train_learned_tan(dataset, config, StructureLearningConfig(**(self.structure_params or {})))
        else:
            if self.structure_params:
                raise ValueError("structure_params applies to structure='learn' only")
            source = "explicit parents" if parents is not None else None
            result = train_bnc(dataset, config, parents=parents, structure_source=source)
        self._set_fitted(result.artifact, classes)
        self.history_ = result.history
        return self

    def _structure_name(self) -> str:
        if isinstance(self.structure, str):
            if self.structure not in STRUCTURES:
                raise ValueError(f"structure must be one of {STRUCTURES} or parents, got {self.structure!r}")
            return self.structure
        return "parents"

    def _explicit_parents(self, d: int) -> np.ndarray | None:
        if self._structure_name() != "parents":
            return None
        parents = np.asarray(self.structure)
        if parents.shape != (d,) or not np.issubdtype(parents.dtype, np.integer):
            raise ValueError(f"structure: expected {d} integer parents (-1 for none), got {self.structure!r}")
        bad = (parents < -1) | (parents >= d) | (parents == np.arange(d))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"structure: feature {i} has invalid parent {int(parents[i])}")
        try:
            check_acyclic(parents.astype(np.int64))
        except ArtifactError as exc:
            raise ValueError(f"structure: {exc}") from None
        return parents.astype(np.int64)

    def _set_fitted(self, artifact, classes) -> None:
        """Fitted attributes from a trained (or loaded) artifact whose classes are ``classes``."""
        attach_metadata(self, artifact, classes)
        self.artifact_ = artifact
        self.classes_ = np.asarray(classes)
        self.n_values_ = artifact.cardinalities.copy()
        self.parents_ = artifact.parents.copy()
        self.n_features_in_ = artifact.n_features

    def _predictor(self) -> ReferencePredictor:
        return ReferencePredictor(self.artifact_)

    def log_joint(self, X) -> np.ndarray:
        """``log p(c, x)``, shape (n_samples, n_classes), float64: exactly
        ``ReferencePredictor(artifact_).log_joint`` (the exported models' scores)."""
        return self._scores(X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.positive_only = True
        tags.input_tags.allow_nan = False
        tags.non_deterministic = False
        return tags
