"""Probes of exported TFLite DNN files for the tests: run the bare graph (no adapter checks), read
every hidden layer's int8 output, probe the guard. They run files in LiteRT, so they live with the
tests, not with the exporter (exporters never run what they build; bnc_deploy.verify does, once).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._tflite_dnn_contract import MAC_OPS, DNNTFLitePlan
from bnc_deploy.exporters.tflite_dnn import plan_tflite_dnn
from bnc_deploy.formats.checkset import N_RANDOM_ROWS, random_rows
from bnc_deploy.formats.dnn import DNN_OUTPUTS, OUTPUT_LOGITS
from bnc_deploy.formats.metadata import INPUT_NAME, INVALID_LABEL, OUTPUT_LABEL
from bnc_deploy.formats.tflite import TFLiteSummary, inspect_tflite, model_bytes, read_tflite_metadata
from bnc_deploy.verify import export_file


def export_tflite_dnn(
    artifact,
    path,
    *,
    representative=None,
    output_layer: str = "int8",
    x=None,
    y=None,
    min_agreement: float | None = None,
) -> dict:
    """Export through the one verifier, then add the probes' facts (hidden activations, guard).

    Returns the keys the tests read: ``path``, ``format``, ``lowering``, ``exact``, ``bytes``,
    ``ops``, ``metadata``, ``verification`` and, merged in, :func:`verify_tflite_dnn`'s facts.
    """
    report = export_file(
        artifact,
        path,
        "tflite",
        rows=x,
        labels=y,
        min_agreement=min_agreement,
        representative=representative,
        output_layer=output_layer,
    )
    model = Path(report.path).read_bytes()
    plan = plan_tflite_dnn(artifact, representative=representative, output_layer=output_layer)
    facts = {
        "format": "tflite",
        "lowering": plan.lowering,
        "exact": plan.exact,
        "bytes": len(model),
        "ops": dict(Counter(inspect_tflite(model).op_names)),
        "metadata": read_tflite_metadata(model),
        "path": report.path,
        "report": report,
    }
    if plan.calibration is not None:
        facts["calibration_rows"] = plan.calibration["rows"]
    facts["verification"] = verify_tflite_dnn(artifact, model, x=x, y=y, plan=plan)
    facts.update(facts["verification"])
    return facts


def verify_tflite_dnn(
    artifact, model, *, x=None, y=None, plan: DNNTFLitePlan | None = None, resolver: str = "auto"
) -> dict:
    """Run an exported file (path or bytes) in LiteRT and compare it with the reference predictor.

    Raises ExportError when the guard fails, or when a file whose metadata says ``exact``
    differs from the reference in any label, any logit bit or (sign networks) any hidden
    activation.
    """
    from bnc_deploy.reference.dnn import DNNReferencePredictor

    model = model_bytes(model)
    meta = read_tflite_metadata(model)
    exact = bool(meta.get("exact"))
    if x is None:  # the check set with its labels, else seeded random rows
        if artifact.check_x is not None and len(artifact.check_x):
            x, y = artifact.check_x, (artifact.check_y if y is None else y)
        else:
            x = random_rows(artifact, N_RANDOM_ROWS)
    reference = DNNReferencePredictor(artifact)
    x = reference.check(x)
    ref_logits = reference.logits(x)
    ref_label = np.argmax(ref_logits, axis=1)
    try:
        logits, label = run_tflite_dnn(model, x, resolver=resolver)
        guard_ok = _guard_ok(model, artifact, x[:4], resolver)
    except (RuntimeError, ValueError) as exc:
        raise ExportError(f"the exported TFLite model does not run in LiteRT: {exc}") from None
    n = len(x)
    mismatches = int(np.count_nonzero(label != ref_label))
    ref32 = ref_logits.astype(np.float32)
    facts = {
        "n_rows": int(n),
        "label_agreement": float(1.0 - mismatches / n) if n else 1.0,
        "label_mismatches": mismatches,
        "logits_identical": bool(np.array_equal(logits, ref32)),
        "max_abs_logit_error": float(np.max(np.abs(logits.astype(np.float64) - ref_logits), initial=0.0)),
        "guard_ok": guard_ok,
        "exact_expected": exact,
    }
    if artifact.activation == "sign":
        if plan is None:
            plan = plan_tflite_dnn(artifact)
        pairs = zip(tflite_hidden_activations(model, plan, x), reference.hidden_activations(x))
        facts["hidden_identical"] = bool(all(np.array_equal(a, b) for a, b in pairs))
    if y is not None:
        y = np.asarray(y, dtype=np.int64)
        if y.shape != (n,):
            raise ExportError(f"labels have shape {y.shape}, expected ({n},)")
        facts["accuracy_reference"] = float(np.mean(ref_label == y)) if n else float("nan")
        facts["accuracy_tflite"] = float(np.mean(label == y)) if n else float("nan")
        facts["accuracy_change"] = facts["accuracy_tflite"] - facts["accuracy_reference"]
    if not guard_ok:
        raise ExportError("the exported TFLite model's guard does not mark invalid rows (label -1, NaN logits)")
    if exact and (mismatches or not facts["logits_identical"] or not facts.get("hidden_identical", True)):
        raise ExportError(
            f"the exported TFLite model ({meta.get('lowering')}) disagrees with the artifact: "
            f"{mismatches} of {n} labels differ, logits identical: {facts['logits_identical']}, "
            f"hidden activations identical: {facts.get('hidden_identical')}; the converter changed "
            "the arithmetic - please report this with your TensorFlow version"
        )
    return facts


def run_tflite_dnn(model, x, *, resolver: str = "auto", threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(logits float32 [N, C], label int64 [N])`` of an exported file (path or bytes) in LiteRT.

    ``x``: codes [N, D] (cast to int32; no validation: invalid rows exercise the guard).
    ``resolver``: ``"auto"`` (LiteRT default, XNNPACK), ``"builtin"`` or ``"reference"`` kernels.
    """
    it, index = _interpreter(model_bytes(model), resolver, threads)
    return _invoke(it, index, x)


def tflite_hidden_activations(model, plan: DNNTFLitePlan, x) -> list[np.ndarray]:
    """Every hidden layer's +-1 output as the file computes it (sign networks), in the reference's
    layout (dense [N, out], conv [N, C, H, W] after pooling), int64; read from the int8 tensors
    with LiteRT's builtin kernels and all intermediate tensors preserved."""
    model = model_bytes(model)
    summary = inspect_tflite(model)
    tensors = _hidden_output_tensors(summary, plan)
    it, index = _interpreter(model, "builtin", 1, preserve=True)
    _invoke(it, index, x)
    out = []
    for t in tensors:
        raw = it.get_tensor(t).astype(np.int64)
        scale = summary.tensors[t].scale[0]
        values = np.rint(raw * scale).astype(np.int64)  # int8 +-2 * 0.5 -> +-1
        out.append(np.transpose(values, (0, 3, 1, 2)) if values.ndim == 4 else values)
    return out


# -- LiteRT helpers --------------------------------------------------------------------------------
def _interpreter(model: bytes, resolver: str, threads: int, preserve: bool = False):
    """A LiteRT interpreter on ``model`` and ``{"x", "logits", "label"}`` tensor indices."""
    from bnc_deploy.runtimes.litert_adapter import RESOLVERS, interpreter_module

    if resolver not in RESOLVERS:
        raise ValueError(f"unknown resolver {resolver!r}; choose one of {', '.join(RESOLVERS)}")
    interpreter_class, resolver_type, _ = interpreter_module()
    kind = {
        "auto": resolver_type.AUTO,
        "builtin": resolver_type.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        "reference": resolver_type.BUILTIN_REF,
    }[resolver]
    it = interpreter_class(
        model_content=model,
        num_threads=threads,
        experimental_op_resolver_type=kind,
        experimental_preserve_all_tensors=preserve,
    )
    names = {dd["name"]: dd["index"] for dd in it.get_input_details() + it.get_output_details()}
    wanted = (INPUT_NAME,) + DNN_OUTPUTS
    if not set(wanted) <= set(names):
        raise ValueError(f"graph tensors {sorted(names)} are not the DNN contract {wanted}")
    return it, {n: names[n] for n in wanted}


def _invoke(it, index: dict, x) -> tuple[np.ndarray, np.ndarray]:
    x = np.ascontiguousarray(np.asarray(x).astype(np.int32))
    it.resize_tensor_input(index[INPUT_NAME], list(x.shape), strict=True)
    it.allocate_tensors()
    it.set_tensor(index[INPUT_NAME], x)
    it.invoke()
    return it.get_tensor(index[OUTPUT_LOGITS]), it.get_tensor(index[OUTPUT_LABEL])


def _guard_ok(model: bytes, artifact, valid: np.ndarray, resolver: str) -> bool:
    """Rows with a code above / below its range get label -1 and all-NaN logits; the valid rows
    run in the same batch keep their values."""
    valid = np.asarray(valid, dtype=np.int64)
    if len(valid) == 0:
        valid = np.zeros((1, artifact.n_features), dtype=np.int64)
    high = valid[:1].copy()
    high[0, -1] = artifact.cardinalities[-1]
    low = valid[:1].copy()
    low[0, 0] = -1
    x = np.concatenate([high, valid, low])
    logits, label = run_tflite_dnn(model, x, resolver=resolver)
    alone, alone_label = run_tflite_dnn(model, valid, resolver=resolver)
    bad = [0, len(x) - 1]
    return bool(
        np.all(label[bad] == INVALID_LABEL)
        and np.all(np.isnan(logits[bad]))
        and np.array_equal(logits[1:-1], alone)
        and np.array_equal(label[1:-1], alone_label)
    )


def _hidden_output_tensors(summary: TFLiteSummary, plan: DNNTFLitePlan) -> list[int]:
    """Tensor index of each hidden layer's output (after MAX_POOL_2D where it pools)."""
    macs = [op for op in summary.ops if op.name in MAC_OPS and summary.tensors[op.inputs[1]].dtype == "INT8"]
    if len(macs) != len(plan.hidden):
        raise ValueError(f"{len(macs)} int8 layers in the file, {len(plan.hidden)} planned")
    out = []
    for op, layer in zip(macs, plan.hidden):
        tensor = op.outputs[0]
        if layer.pool:
            pools = [p for p in summary.ops if p.name == "MAX_POOL_2D" and p.inputs[0] == tensor]
            if len(pools) != 1:
                raise ValueError(f"layer {layer.index}: no MAX_POOL_2D after {op.name} #{op.index}")
            tensor = pools[0].outputs[0]
        out.append(tensor)
    return out
