"""Probes of exported ONNX DNN files for the tests: the bare graph in onnxruntime (optionally with
graph optimizations off, to check the file's own arithmetic), compared with the reference. They
run files, so they live with the tests; exports themselves go through bnc_deploy.verify.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from bnc_deploy.errors import ExportError
from bnc_deploy.formats.dnn import OUTPUT_LOGITS
from bnc_deploy.formats.metadata import INPUT_NAME, INVALID_LABEL, OUTPUT_LABEL
from bnc_deploy.formats.onnx import read_dnn_metadata
from bnc_deploy.reference.dnn import DNNReferencePredictor
from bnc_deploy.verify import N_RANDOM_ROWS, export_file, verification_rows


def verification_codes(artifact, n_random: int = N_RANDOM_ROWS, seed: int = 0) -> np.ndarray:
    """The check set, then seeded random rows (the first two all-zero and all-maximum)."""
    return verification_rows(artifact, None, n_random, seed)[0]


def export_onnx_dnn(artifact, path, **options) -> dict:
    """Export through the one verifier; the facts the tests read (``path``, ``exact``, ``lowering``,
    ``opset``, ``n_nodes``, ``metadata``, ``bytes``, ``verification``)."""
    report = export_file(artifact, path, "onnx", **options)
    meta = report.metadata
    return {
        "path": Path(report.path),
        "bytes": report.file_bytes,
        "format": "onnx",
        "opset": meta["opset"],
        "lowering": meta["lowering"],
        "exact": meta["exact"],
        "n_nodes": meta["n_nodes"],
        "metadata": meta,
        "verification": {
            "n_rows": report.n_verified,
            "label_mismatches": report.label_mismatches_all,
            "agreement": 1.0 - report.label_mismatches_all / report.n_verified,
            "logits_identical": report.scores_identical,
            "max_abs_logit_error": report.max_abs_score_diff,
            "exact_expected": report.exact_expected,
            "runtime": report.runtime,
        },
    }


def verify_onnx_dnn(
    artifact, path_or_model, *, n_random: int = N_RANDOM_ROWS, seed: int = 0, optimize: bool = True
) -> dict:
    """Run an exported DNN in onnxruntime and compare it with the NumPy reference predictor.

    The rows are the artifact's check set plus ``n_random`` seeded random valid rows (including
    the all-zero and all-maximum rows). ``optimize=False`` disables onnxruntime's graph
    optimizations (the file's own arithmetic, no fusions).

    Returns ``{"n_rows", "label_mismatches", "agreement", "logits_identical",
    "max_abs_logit_error", "exact_expected", "runtime"}``. Raises ExportError when the model
    cannot run, when the guard fires on a valid row (label -1 or NaN logits), or, for an exact
    export (``exact`` in the file's metadata), on any label difference or any logit that is
    not bit-identical.
    """
    import onnxruntime as ort

    if isinstance(path_or_model, onnx.ModelProto):
        source, meta = path_or_model.SerializeToString(), read_dnn_metadata(path_or_model)
    else:
        source = str(path_or_model)
        meta = read_dnn_metadata(onnx.load(source, load_external_data=False))
    exact = bool(meta["exact"]) if meta else artifact.activation == "sign"
    x = verification_codes(artifact, n_random=n_random, seed=seed)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])
        logits, label = session.run([OUTPUT_LOGITS, OUTPUT_LABEL], {INPUT_NAME: x})
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ExportError(f"the exported ONNX DNN does not run in onnxruntime {ort.__version__}: {exc}") from None
    reference = DNNReferencePredictor(artifact)
    ref_logits = reference.logits(x)
    ref_label = np.argmax(ref_logits, axis=1)
    guarded = int(np.count_nonzero((label == INVALID_LABEL) | np.isnan(logits).any(axis=1)))
    if guarded:
        raise ExportError(
            f"the exported ONNX DNN marks {guarded} valid verification row(s) invalid "
            "(label -1 / NaN logits): the graph is broken"
        )
    mismatches = int(np.count_nonzero(label != ref_label))
    identical = bool(logits.dtype == np.float32 and np.array_equal(logits.astype(np.float64), ref_logits))
    error = float(np.max(np.abs(logits.astype(np.float64) - ref_logits), initial=0.0))
    if exact and (mismatches or not identical):
        raise ExportError(
            f"the exported ONNX DNN ({meta.get('lowering') if meta else '?'}) disagrees with the "
            f"artifact on {mismatches} of {len(x)} verification rows (logits identical: {identical}, "
            f"max |error| {error:.3g}); onnxruntime {ort.__version__} changed the integer arithmetic "
            "- please report this"
        )
    n = int(len(x))
    return {
        "n_rows": n,
        "label_mismatches": mismatches,
        "agreement": 1.0 - mismatches / n if n else 1.0,
        "logits_identical": identical,
        "max_abs_logit_error": error,
        "exact_expected": exact,
        "runtime": f"onnxruntime {ort.__version__}",
    }
