"""The TFLite BN exporter's contract check (``exporters/tflite_bnc.py``, "Contract of the exported
file"): it re-reads a converted flatbuffer (no TensorFlow, the schema only) and asserts the
operators, the I/O tensors, and for ``onehot-fc`` every int8 FULLY_CONNECTED's exact requantization
and planned weights. Split from ``tflite_bnc`` to keep each module to one job, as
``_tflite_dnn_contract`` is for the DNN exporter; this module sits below it and never imports it.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._onehot_fc_plan import OneHotFCPlan
from bnc_deploy.exporters._tflite import WEB_BATCH, check_builtin_ops, check_profile_contract
from bnc_deploy.formats.bnc import OUTPUT_LOG_JOINT
from bnc_deploy.formats.metadata import INPUT_NAME, OUTPUT_LABEL
from bnc_deploy.formats.tflite import TFLiteSummary, inspect_tflite

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact


def check_contract(
    model: bytes,
    artifact: BNCArtifact,
    plan: OneHotFCPlan | None = None,
    *,
    profile: str = "default",
    web_batch: int = WEB_BATCH,
) -> TFLiteSummary:
    """Check a converted model against the contract; raise ExportError naming what is wrong.

    Builtins only (no Flex/custom/ONE_HOT), no comparison on int8 operands (LiteRT aborts the
    process on those), I/O names, dtypes and shapes, and for ``onehot-fc`` that every
    FULLY_CONNECTED is int8 with an exact requantization (``s_in * s_w = s_out``, weight zero
    point 0) and that each group's weights are stored exactly as planned. ``profile``: micro (TFLM
    operators and types, static [1, D]) or web (no int64 tensor, static [web_batch, D]) add theirs.
    """
    summary = inspect_tflite(model)
    check_builtin_ops(summary)
    t = summary.tensors
    x, lj, label = t[summary.inputs[0]], t[summary.outputs[0]], t[summary.outputs[1]]
    d, c = artifact.n_features, artifact.n_classes
    expected = [
        (x, INPUT_NAME, {"INT32", "FLOAT32", "INT8"}, d),
        (lj, OUTPUT_LOG_JOINT, {"FLOAT32"}, c),
        (label, OUTPUT_LABEL, {"INT64" if profile == "default" else "INT32"}, None),
    ]
    for tensor, name, dtypes, last in expected:
        if tensor.name != name or tensor.dtype not in dtypes or (last is not None and tensor.shape[-1] != last):
            raise ExportError(
                f"converted model has I/O tensor {tensor.name!r} {tensor.dtype} {tensor.shape}, "
                f"expected {name!r} of type {sorted(dtypes)} with last dimension {last}"
            )
    if x.dtype == "INT8" and (x.scale != [1.0] or x.zero_point != [0]):
        raise ExportError(f"int8 input has scale {x.scale} and zero point {x.zero_point}, expected 1 and 0")
    if plan is not None:
        _check_fc_quantization(summary, plan)
    check_profile_contract(summary, profile, d, web_batch)
    return summary


def _check_fc_quantization(summary: TFLiteSummary, plan: OneHotFCPlan) -> None:
    """Every FULLY_CONNECTED exact in int8; every group's planned weights stored bit for bit."""
    fcs = [op for op in summary.ops if op.name == "FULLY_CONNECTED"]
    stored = []
    for op in fcs:
        x, w, out = (summary.tensors[i] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
        ok = (
            all(t.dtype == "INT8" and len(t.scale) == 1 for t in (x, w, out))
            and w.zero_point == [0]
            and np.isclose(x.scale[0] * w.scale[0], out.scale[0], rtol=1e-6)
        )
        if not ok:
            raise ExportError(
                f"FULLY_CONNECTED {out.name!r} is not an exact int8 layer: input {x.dtype} "
                f"{x.scale}/{x.zero_point}, weights {w.dtype} {w.scale}/{w.zero_point}, output "
                f"{out.dtype} {out.scale}/{out.zero_point} (need s_in * s_w = s_out, weight zp 0)"
            )
        stored.append(np.frombuffer(w.data, dtype=np.int8).reshape(w.shape).tobytes())  # [out, in]
    # The converter orders FCs by name, not by group: match the weight matrices as a multiset.
    missing = Counter(np.ascontiguousarray(plan.group_weights(k).T).tobytes() for k in range(len(plan.groups)))
    missing.subtract(Counter(stored))
    if any(n > 0 for n in missing.values()):
        raise ExportError(
            f"{sum(n for n in missing.values() if n > 0)} of {len(plan.groups)} FULLY_CONNECTED "
            "weight matrices differ from the planned int8 codes; the converter re-quantized them"
        )
