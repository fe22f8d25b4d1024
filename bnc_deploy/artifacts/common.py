"""What every artifact kind shares: the feature space (codes, names, classes) and the stored
check set the exporters verify against."""

from __future__ import annotations

import numpy as np

from bnc_deploy.artifacts.container import ArtifactError


class FeatureSpaceMixin:
    """``cardinalities``, ``class_names``, ``feature_names``, ``check_x``/``check_y`` facts and checks.

    Dataclass artifacts call :meth:`_normalize_feature_space` in ``__post_init__`` and
    :meth:`_validate_check_set` from ``validate``.
    """

    cardinalities: np.ndarray
    class_names: list
    feature_names: list
    check_x: np.ndarray | None
    check_y: np.ndarray | None

    @property
    def n_features(self) -> int:
        return int(self.cardinalities.shape[0])

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    def _normalize_feature_space(self) -> None:
        self.cardinalities = np.asarray(self.cardinalities, dtype=np.int64)
        self.class_names = [str(c) for c in self.class_names]
        self.feature_names = [str(f) for f in self.feature_names]

    def _validate_check_set(self) -> None:
        """The stored rows must be valid codes of this feature space, with one label each."""
        if (self.check_x is None) != (self.check_y is None):
            raise ArtifactError("check_x and check_y must both be present or both absent")
        if self.check_x is not None:
            from bnc_deploy.validation import check_codes

            check_codes(self.check_x, self.cardinalities, self.feature_names, where="stored check set")
            if self.check_y.shape != (self.check_x.shape[0],):
                raise ArtifactError("check_y does not match check_x")
