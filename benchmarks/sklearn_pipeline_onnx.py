"""Parity report: a scikit-learn pipeline on letter's raw features, converted with skl2onnx.

``make_pipeline(FayyadIraniDiscretizer(), BNClassifier(structure, bits=3))`` (default settings) is
fitted on the UCI letter file's 2/3 holdout training rows (seed 0), converted with
``skl2onnx.to_onnx`` (the converters of :mod:`bnc_deploy.sklearn.onnx`) and run in onnxruntime on
every test row. It prints, per structure, whether the graph's ``label`` equals ``pipeline.predict``
and its ``scores`` equal ``decision_function`` bit for bit, the test error and the fit time; exit
status 1 if any row differs. ``tests/test_sklearn_onnx.py`` runs the same comparison with 3 epochs.

Usage::

    python benchmarks/sklearn_pipeline_onnx.py [--datasets ../shared/datasets] [--structures nb chow-liu]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from skl2onnx import to_onnx
from sklearn.pipeline import make_pipeline

import bnc_deploy.sklearn.onnx  # noqa: F401  (registers the converters)
from bnc_deploy import BNClassifier, FayyadIraniDiscretizer
from bnc_deploy.datasets.loaders import read_letter
from bnc_deploy.datasets.splits import holdout_indices


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "datasets")
    p.add_argument("--structures", nargs="+", default=["nb", "chow-liu"])
    args = p.parse_args()
    raw = read_letter(args.datasets / "raw" / "letter" / "letter-recognition.data")
    train, test = holdout_indices(len(raw.y), seed=0)
    x = raw.x.astype(np.float32)
    same = True
    for structure in args.structures:
        started = time.perf_counter()
        pipe = make_pipeline(FayyadIraniDiscretizer(), BNClassifier(structure, bits=3))
        pipe.fit(x[train], raw.y[train])
        fit_s = time.perf_counter() - started
        session = ort.InferenceSession(to_onnx(pipe, x[:1]).SerializeToString())
        label, scores = session.run(["label", "scores"], {session.get_inputs()[0].name: x[test]})
        predicted, decision = pipe.predict(x[test]), pipe.decision_function(x[test])
        labels_same, scores_same = np.array_equal(label, predicted), np.array_equal(scores, decision)
        same &= labels_same and scores_same
        print(
            f"{structure} 3-bit: {len(test):,} test rows, labels identical {labels_same}, scores identical "
            f"{scores_same}, test error {np.mean(predicted != raw.y[test]):.4f}, fit {fit_s:.0f} s"
        )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
