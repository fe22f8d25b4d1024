"""NumPy reference adapter (name ``"numpy"``): runs a ``.bnc`` artifact with its reference predictor
(``ReferencePredictor`` for BN classifiers, ``DNNReferencePredictor`` for DNNs).

The one adapter that reads artifacts: it is the ground truth the others are compared with. Its
metadata is the same dict an exporter would write (:func:`bnc_deploy.formats.bnc.export_metadata`
with ``format="bnc"``), so code written against the interface cannot tell the difference.

Its "runtime call" (:meth:`ReferenceAdapter.invoke`) is the predictor itself: the discretizer
(raw inputs), ``log_joint`` (a DNN's logits) and the argmax. ``prepare`` only converts: codes
stay int64, raw values (checked as float32) are widened to float64 for the discretizer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bnc_deploy.artifacts import ArtifactError, load_artifact
from bnc_deploy.formats.bnc import export_metadata, raw_cut_points
from bnc_deploy.reference.bnc import PredictorMixin, ReferencePredictor
from bnc_deploy.runtimes.base import RuntimeAdapter, RuntimeLoadError


class ReferenceAdapter(RuntimeAdapter):
    """Run a model artifact with the NumPy reference predictor.

    Parameters
    ----------
    path : str or PathLike
        A ``.bnc`` model file.
    raw_inputs : bool
        Take raw values and bin them with the artifact's discretizer (as an exported
        ``--raw-inputs`` file does: float32 values, the same thresholds).
    threads : ignored (NumPy).
    """

    name = "numpy"
    extensions = (".bnc",)
    #: The artifact's reference predictor (``ReferencePredictor`` or ``DNNReferencePredictor``).
    predictor: PredictorMixin

    def __init__(
        self, path: str | os.PathLike[str], *, threads: int | None = None, raw_inputs: bool = False, **options: Any
    ) -> None:
        self._raw_inputs = raw_inputs
        super().__init__(path, threads=threads, **options)  # options: verify_integrity, key (base class)

    def _load(self, path: Path, data: bytes) -> dict[str, Any]:
        try:
            self.artifact = load_artifact(path, data=data)
            if self.artifact.kind == "dnn":
                return self._load_dnn(path)
            meta = export_metadata(self.artifact, format="bnc", raw_inputs=self._raw_inputs)
            if self._raw_inputs:
                raw_cut_points(self.artifact)  # ExportError (a ValueError) if there is no usable discretizer
        except ArtifactError as exc:
            raise RuntimeLoadError(str(exc)) from None
        self.predictor = ReferencePredictor(self.artifact)
        meta["exact"] = True  # it is the reference
        return meta

    def _load_dnn(self, path: Path) -> dict[str, Any]:
        from bnc_deploy.formats.dnn import dnn_export_metadata
        from bnc_deploy.reference.dnn import DNNReferencePredictor

        if self._raw_inputs:
            raise RuntimeLoadError(f"{path}: DNN models take feature codes; raw inputs are not supported")
        self.predictor = DNNReferencePredictor(self.artifact)
        return dnn_export_metadata(self.artifact, format="bnc", exact=True, input_dtype="int64", lowering="reference")

    def _prepare(self, checked: NDArray[np.int64] | NDArray[np.float32]) -> NDArray[np.int64] | NDArray[np.float64]:
        # Raw values were checked as float32 (what an exported file sees); the widening to the
        # discretizer's float64 is exact, so the cut points compare the same values.
        if self.raw_inputs:
            return np.ascontiguousarray(checked, dtype=np.float64)
        return np.ascontiguousarray(checked, dtype=np.int64)

    def invoke(self, prepared: NDArray[np.int64] | NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
        # The discretizer itself (float64 searchsorted), not the exporters' float32 thresholds:
        # this adapter is the ground truth those thresholds are checked against.
        codes = self.predictor.discretize(prepared) if self._raw_inputs else prepared
        log_joint = self.predictor.log_joint(codes)
        return log_joint, np.argmax(log_joint, axis=1)
