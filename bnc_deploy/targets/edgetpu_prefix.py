"""Run the Edge TPU part of a BN ``onehot-fc`` TFLite file on the LiteRT CPU int8 kernels and
compare what it hands to the CPU with the reference (static: the Edge TPU compiler is not run).

What "the Edge TPU part" is: the operators :func:`bnc_deploy.targets.edgetpu.edgetpu_compatibility`
places on the Edge TPU (the supported prefix in execution order). Its **boundary tensors** are the
tensors those operators produce and a CPU operator (or the file's output) reads: what the Edge
TPU would hand back to the host. The file is run whole in LiteRT with
``experimental_preserve_all_tensors=True`` (the CPU int8 kernels, one row at a time: the file's
batch is static 1), and each boundary tensor is read back and dequantized.

What it is compared with (int8 builders ``relu``/``edgetpu`` of the TFLite exporter, quantized
models): the file's metadata ``onehot_fc.groups`` says which features each group's FULLY_CONNECTED
sums, and ``prior_in_group0`` whether group 0 also holds the prior. The reference values, computed
here from the model file alone (its stacked table and ``row_indices``, not from the exporter's
plan), are the **per-group code sums** ``sum_{i in g} table_codes[row_i, c]`` (+ the class codes
in group 0), then one guard column (0 on a valid row). A boundary tensor is matched by its size:
``G * C + 1`` (everything), ``G * C`` (the partial sums) or ``1`` (the guard); its integer units
are ``(q - zero_point) * scale / weight_scale``. The same partial sums, added up (plus the prior
when it is not in group 0), are compared with the reference predictor's ``integer_scores``: the
prefix's output determines the class scores the reference computes.

"exact" is claimed only for files whose metadata says ``exact`` (B <= 7); other files report the
largest difference in code units. Rows: the file's stored check rows and any rows the caller
passes, then the verifier's seeded random valid rows
(:func:`bnc_deploy.formats.checkset.verification_rows`), all valid codes.
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.errors import InputError
from bnc_deploy.formats.checkset import N_RANDOM_ROWS, RANDOM_ROWS_SEED, verification_rows
from bnc_deploy.validation import random_valid_codes

#: One-hot builders whose files this check understands (int8 from the input on).
INT8_BUILDERS = ("relu", "edgetpu")


def boundary_tensors(summary, report: dict) -> list[int]:
    """Indices of the tensors the Edge TPU part hands to the CPU (or to the file's outputs)."""
    mapped = {e["index"] for e in report["ops"] if e["placement"] == "edgetpu"}
    produced = {t for op in summary.ops if op.index in mapped for t in op.outputs}
    read_by_cpu = {t for op in summary.ops if op.index not in mapped for t in op.inputs if t >= 0}
    return sorted(t for t in produced if t in read_by_cpu or t in summary.outputs)


def expected_prefix(artifact, meta: dict, codes: np.ndarray) -> np.ndarray:
    """Reference values of the packed boundary, int64 [n, G * C + 1]: per-group code sums
    (group-major; the prior in group 0 when the file put it there), then the guard (0: valid)."""
    rows = artifact.row_indices(codes)  # [n, D]
    table = artifact.table_codes.astype(np.int64)
    picked = table[rows]  # [n, D, C]
    parts = [picked[:, a:b].sum(axis=1) for a, b in meta["onehot_fc"]["groups"]]
    if meta["onehot_fc"].get("prior_in_group0"):
        parts[0] = parts[0] + artifact.class_codes.astype(np.int64)[None, :]
    return np.concatenate(parts + [np.zeros((codes.shape[0], 1), dtype=np.int64)], axis=1)


def run_prefix(
    tflite_path, artifact, report: dict, *, rows=None, n_random: int = N_RANDOM_ROWS, seed: int = RANDOM_ROWS_SEED
) -> dict:
    """Run the file's Edge TPU part on the LiteRT CPU kernels and compare it with the reference.

    ``report``: the file's :func:`bnc_deploy.targets.edgetpu.edgetpu_compatibility` (which ops are
    mapped; passed in, so that this module does not import the report's).

    Returns ``{"runtime", "rows", "boundary": [per tensor: name, shape, dtype, compared_as,
    max_abs_diff (code units), equal], "class_scores_equal", "exact_claimed", "exact", "note"}``;
    ``exact`` is True only when the file claims exactness and every compared value and the summed
    class scores equal the reference's; ``invalid_rows_flagged``: rows with one out-of-range code
    (``|X_i|`` or -1) have a guard column > 0 (None when no boundary tensor carries the guard). InputError when the
    file is not an int8 ``onehot-fc`` BN
    file of this model, or the model is not quantized.
    """
    from bnc_deploy.formats.checkset import check_inputs
    from bnc_deploy.formats.tflite import inspect_tflite
    from bnc_deploy.reference.bnc import ReferencePredictor

    data, meta = _checked_file(tflite_path, artifact)
    plan = meta["onehot_fc"]
    summary = inspect_tflite(data)
    boundary = boundary_tensors(summary, report)
    stored = check_inputs(meta, where=str(tflite_path))
    leading = [x for x in (stored, None if rows is None else np.asarray(rows, dtype=np.int64)) if x is not None]
    # The file's rows, never the model's check set: an empty array, not None, when there are none.
    leading = np.concatenate(leading) if leading else np.zeros((0, artifact.n_features), dtype=np.int64)
    codes, _ = verification_rows(artifact, leading, n_random, seed)
    got = _run_boundary(data, summary, boundary, codes)
    expected = expected_prefix(artifact, meta, codes)
    g, c = len(plan["groups"]), artifact.n_classes
    unit = float(plan["weight_scale"])
    # One group holding the prior: its "partial sums" are the class code sums themselves.
    sums = "class code sums" if g == 1 and plan.get("prior_in_group0") else "partial sums"
    layouts = {
        g * c + 1: (f"{sums} + guard", slice(0, g * c + 1)),
        g * c: (sums, slice(0, g * c)),
        1: ("guard", slice(g * c, g * c + 1)),
    }
    entries, partials = _compare_boundary(summary, boundary, got, codes.shape[0], expected, layouts, unit, g * c)
    class_equal = None
    guard = _guard_check(data, summary, boundary, artifact, seed, g * c, layouts)
    if partials is not None:
        sums = partials.reshape(-1, g, c).sum(axis=1)
        if not plan.get("prior_in_group0"):
            sums = sums + artifact.class_codes.astype(np.float64)[None, :]
        class_equal = bool(np.array_equal(sums, ReferencePredictor(artifact).integer_scores(codes)))
    compared = [e for e in entries if e["equal"] is not None]
    exact_claimed = bool(meta.get("exact"))
    exact = exact_claimed and bool(compared) and all(e["equal"] for e in compared) and bool(class_equal)
    return {
        "runtime": _runtime_name(),
        "rows": int(codes.shape[0]),
        "rows_from": f"{0 if stored is None else len(stored)} stored check rows, "
        f"{0 if rows is None else len(rows)} given, {n_random} random valid (seed {seed})",
        "boundary": entries,
        "class_scores_equal": class_equal,
        "invalid_rows_flagged": guard,
        "exact_claimed": exact_claimed,
        "exact": exact,
        "note": "the mapped prefix run on the LiteRT CPU int8 kernels (static: the Edge TPU compiler and "
        "runtime were not run)",
    }


def _checked_file(tflite_path, artifact) -> tuple[bytes, dict]:
    """The file's bytes and metadata; InputError unless it is an int8 ``onehot-fc`` BN file of ``artifact``
    (quantized)."""
    from bnc_deploy.formats.metadata import artifact_hash
    from bnc_deploy.formats.tflite import model_bytes, read_tflite_metadata

    data = model_bytes(tflite_path)
    meta = read_tflite_metadata(data)
    plan = meta.get("onehot_fc") or {}
    if meta.get("model_kind", "bnc") != "bnc" or plan.get("builder") not in INT8_BUILDERS:
        raise InputError(
            "the prefix check runs BN onehot-fc files with an int8 one-hot builder "
            f"({', '.join(INT8_BUILDERS)}); this file has builder {plan.get('builder')!r}"
        )
    if artifact.quantizer is None:
        raise InputError("the prefix check compares integer code sums: the model must be quantized")
    if meta.get("artifact_sha256") not in (None, artifact_hash(artifact)):
        raise InputError("the TFLite file was not exported from this model file (artifact_sha256 differs)")
    return data, meta


def _compare_boundary(
    summary, boundary, got, n: int, expected: np.ndarray, layouts: dict, unit: float, width: int
) -> tuple[list[dict], np.ndarray | None]:
    """Per boundary tensor (``got``: its values for ``n`` rows), its report entry (compared in code
    units with ``expected`` when its size matches a layout); and the partial sums [n, width] read
    from one of them (None: none had them)."""
    entries: list[dict] = []
    partials = None
    for index, values in zip(boundary, got):
        t = summary.tensors[index]
        flat = values.reshape(n, -1)
        entry = {
            "tensor": t.name,
            "shape": list(t.shape),
            "dtype": t.dtype,
            "compared_as": None,
            "max_abs_diff": None,
            "equal": None,
        }
        layout = layouts.get(flat.shape[1]) if t.dtype in ("INT8", "UINT8") and t.scale else None
        if layout is not None:
            units = (flat.astype(np.float64) - t.zero_point[0]) * t.scale[0] / unit
            diff = np.abs(units - expected[:, layout[1]])
            entry.update(
                compared_as=layout[0], max_abs_diff=float(diff.max(initial=0.0)), equal=bool(np.all(diff == 0))
            )
            if flat.shape[1] >= width:
                partials = units[:, :width]
        entries.append(entry)
    return entries, partials


def _guard_check(data, summary, boundary, artifact, seed: int, width: int, layouts) -> bool | None:
    """Whether rows with one out-of-range code (cardinality, or -1) get a guard column > 0 in a
    boundary tensor that carries it (None: no boundary tensor carries the guard)."""
    carriers = [
        k
        for k, i in enumerate(boundary)
        if layouts.get(int(np.prod(summary.tensors[i].shape))) is not None
        and int(np.prod(summary.tensors[i].shape)) in (width + 1, 1)
    ]
    if not carriers:
        return None
    bad = random_valid_codes(artifact.cardinalities, 2 * artifact.n_features, seed=seed + 1)
    for k in range(bad.shape[0]):
        i = k % artifact.n_features
        bad[k, i] = artifact.cardinalities[i] if k < artifact.n_features else -1
    got = _run_boundary(data, summary, [boundary[k] for k in carriers], bad)
    flagged = True
    for k, values in zip(carriers, got):
        t = summary.tensors[boundary[k]]
        guard = values.reshape(bad.shape[0], -1)[:, -1].astype(np.int64) - t.zero_point[0]
        flagged &= bool(np.all(guard > 0))
    return flagged


def _runtime_name() -> str:
    try:
        import ai_edge_litert

        return f"ai_edge_litert {getattr(ai_edge_litert, '__version__', '?')} (CPU, builtin kernels)"
    except ImportError:  # pragma: no cover - depends on the environment
        return "tensorflow.lite (CPU, builtin kernels)"


def _run_boundary(data: bytes, summary, boundary: list[int], codes: np.ndarray) -> list[np.ndarray]:
    """Each boundary tensor's values, [n, *shape], one invoke per row (the file's batch is 1)."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:  # pragma: no cover - TensorFlow's copy of the same kernels
        import tensorflow as tf

        Interpreter, OpResolverType = tf.lite.Interpreter, tf.lite.experimental.OpResolverType
    # Builtin kernels without the default XNNPACK delegate: the int8 CPU kernels themselves.
    interpreter = Interpreter(
        model_content=data,
        num_threads=1,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        experimental_preserve_all_tensors=True,
    )
    interpreter.allocate_tensors()
    x = interpreter.get_input_details()[0]
    if tuple(x["shape"]) != (1, codes.shape[1]) or np.dtype(x["dtype"]) != np.int8:
        raise InputError(f"expected an int8 [1, {codes.shape[1]}] input, the file has {x['dtype']} {x['shape']}")
    out = [np.empty((codes.shape[0], *summary.tensors[i].shape), dtype=np.int8) for i in boundary]
    for r in range(codes.shape[0]):
        interpreter.set_tensor(x["index"], codes[r : r + 1].astype(np.int8))
        interpreter.invoke()
        for k, i in enumerate(boundary):
            value = interpreter.get_tensor(i)
            if out[k].dtype != value.dtype:
                out[k] = out[k].astype(value.dtype)
            out[k][r] = value
    return out
