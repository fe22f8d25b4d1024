"""The quantized FC/CNN baselines as a scikit-learn classifier.

``fit`` trains with :func:`bnc_deploy.train.dnn.train_dnn`, imported inside ``fit`` only; a fitted
estimator predicts with the NumPy :class:`~bnc_deploy.reference.dnn.DNNReferencePredictor` over
``artifact_`` (a :class:`~bnc_deploy.artifacts.dnn.DNNArtifact`), without torch.

Inputs are integer codes (see :mod:`bnc_deploy.sklearn._common`), encoded for the network as the
trainer does: each feature's codes standardized with the training mean and deviation on a
fixed-point grid, or one-hot vectors (``one_hot=True``). A CNN reads the features as one image of
``image_shape`` (H, W) with ``H * W = n_features`` in ``pixel_order``; without ``image_shape`` the
features must form a square image (row-major).

Scores are the logits (:meth:`DNNClassifier.logits`); ``predict_proba`` is their softmax.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from bnc_deploy.reference.dnn import DNNReferencePredictor
from bnc_deploy.sklearn._common import ScoresClassifierMixin, attach_metadata, batch_size_for, fit_data


class DNNClassifier(ScoresClassifierMixin, ClassifierMixin, BaseEstimator):
    """Quantized fully connected or convolutional network over integer codes.

    Parameters
    ----------
    model : {"fc", "cnn"}, default="fc"
    bits : int, default=2
        Weight bits (DoReFa quantization).
    layers : int, default=2
        FC weight layers (2..5) or CNN convolution layers (1..2).
    hidden : int, list of int or None, default=None
        Hidden widths (FC: ``layers - 1`` values, or one repeated) or channels (CNN). With neither
        ``hidden`` nor a budget: 64 units (FC) or 16 channels (CNN).
    match_bits, match_ops : int or None
        Size the widths to this model-size (bits) or operations budget instead of ``hidden``.
    activation : {"relu", "sign"}, default="relu"
    batch_norm, one_hot : bool, default=False
    image_shape : (int, int) or None; pixel_order : {"row-major", "column-major"}
        CNN only.
    epochs, batch_size, lr, lr_decay : training schedule (Adam, log-linear decay)
    n_values, random_state, verbose : as in :class:`~bnc_deploy.sklearn.BNClassifier`.

    Attributes
    ----------
    classes_, n_features_in_, feature_names_in_, n_values_, artifact_ (DNNArtifact), history_.
    """

    def __init__(
        self,
        model="fc",
        *,
        bits=2,
        layers=2,
        hidden=None,
        match_bits=None,
        match_ops=None,
        activation="relu",
        batch_norm=False,
        one_hot=False,
        image_shape=None,
        pixel_order="row-major",
        epochs=50,
        batch_size=100,
        lr=3e-3,
        lr_decay=1e-4,
        n_values=None,
        random_state=None,
        verbose=False,
    ):
        self.model = model
        self.bits = bits
        self.layers = layers
        self.hidden = hidden
        self.match_bits = match_bits
        self.match_ops = match_ops
        self.activation = activation
        self.batch_norm = batch_norm
        self.one_hot = one_hot
        self.image_shape = image_shape
        self.pixel_order = pixel_order
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.lr_decay = lr_decay
        self.n_values = n_values
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, X, y):
        """Train on codes ``X`` (n_samples, n_features) and labels ``y`` (n_samples,)."""
        from bnc_deploy.train.dnn import DNNConfig, train_dnn

        dataset, classes, seed = fit_data(self, X, y)
        codes = dataset.x_train
        config = DNNConfig(
            architecture=self.model,
            layers=self.layers,
            weight_bits=self.bits,
            activation=self.activation,
            batch_norm=bool(self.batch_norm),
            one_hot=bool(self.one_hot),
            hidden=self._hidden(),
            match_bits=self.match_bits,
            match_ops=self.match_ops,
            epochs=self.epochs,
            batch_size=batch_size_for(self.batch_size, codes.shape[0]),
            lr=self.lr,
            lr_decay=self.lr_decay,
            seed=seed,
            image_shape=self._image_shape(codes.shape[1]),
            pixel_order=self.pixel_order if self.model == "cnn" else None,
            progress=bool(self.verbose),
        )
        result = train_dnn(dataset, config)
        self._set_fitted(result.artifact, classes)
        self.history_ = result.history
        return self

    def _hidden(self) -> list | None:
        if self.hidden is not None:
            return [int(self.hidden)] if np.ndim(self.hidden) == 0 else [int(w) for w in self.hidden]
        if self.match_bits is None and self.match_ops is None:
            return [64] if self.model == "fc" else [16]
        return None

    def _image_shape(self, d: int) -> tuple | None:
        if self.model != "cnn":
            return None
        if self.image_shape is not None:
            return tuple(int(v) for v in self.image_shape)
        side = math.isqrt(d)
        if side * side != d:
            raise ValueError(f"model='cnn' needs image_shape=(H, W) with H * W = {d}: the features are not square")
        return (side, side)

    def _set_fitted(self, artifact, classes) -> None:
        attach_metadata(self, artifact, classes)
        self.artifact_ = artifact
        self.classes_ = np.asarray(classes)
        self.n_values_ = artifact.cardinalities.copy()
        self.n_features_in_ = artifact.n_features

    def _predictor(self) -> DNNReferencePredictor:
        return DNNReferencePredictor(self.artifact_)

    def logits(self, X) -> np.ndarray:
        """The network's outputs, shape (n_samples, n_classes): exactly
        ``DNNReferencePredictor(artifact_).logits``."""
        return self._scores(X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.positive_only = True
        tags.input_tags.allow_nan = False
        tags.non_deterministic = False
        return tags
