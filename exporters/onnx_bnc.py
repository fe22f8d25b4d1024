"""ONNX exporter for Bayesian network classifier artifacts (naive Bayes and TAN).

Contract of the exported graph (one converter covers both structures; NB is TAN without parents)
------------------------------------------------------------------------------------------------
Input
    ``x``: int64 [N, D] feature codes (dynamic N); with ``raw_inputs=True`` float32 [N, D] raw
    values, binned in the graph as ``code_i = sum_k (x_i > t_ik)`` with the float32 thresholds of
    ``exporters.common.float32_thresholds`` (equal to ``searchsorted(cuts, x, side="left")``).
Outputs
    ``log_joint``: float32 [N, C], ``log p(c, x)``; ``label``: int64 [N], the first most probable class.
Invalid rows (the guard, ``exporters.common.GUARD``)
    A row with any code outside ``0 .. |X_i| - 1`` (raw: any NaN/inf) gets ``log_joint`` all NaN
    and ``label = -1``. Every invalid (row, feature) is routed to an extra all-NaN table row
    *before* the lookup, so it never reads another feature's rows and Gather never leaves the table.

Computation (``lowering="gather"``)
    ``row_i = offset_i + x_i * |X_pa(i)| + x_pa(i)`` (TAN parent values by Gather on axis 1),
    ``log_joint = ReduceSum_i Gather(T, row)`` and ``label = ArgMax(log_joint)`` (first maximum),
    where ``T`` [n_rows + 1, C] float32 is built *inside the graph* from the stored tables: the
    class prior is added to the rows of feature 0 (every row reads exactly one of them) and the
    NaN row is appended. These nodes have constant inputs only, so onnxruntime folds them once
    when the session is created; at run time the graph is 11 nodes for NB.
Quantized models
    The file stores the uint8 codes [n_rows, C] and uint8 prior [C] unchanged; ``T`` holds
    ``-code * 2**-B_F`` in float32. Every partial sum of such values is an integer multiple
    ``K * 2**-B_F`` with ``K <= (D + 1) * (2**B - 1) < 2**24``, which float32 represents exactly,
    so the sum is exact in any order and ``log_joint`` is bit-identical to the artifact's
    ``-(integer sum) * 2**-B_F``. (Float32 rather than int32 accumulation: onnxruntime's integer
    ReduceSum goes through double internally and is 1.5-2x slower; exactness is the same.)
Float models
    float32 tables; float32 summation (labels agree with the float64 reference except at ties
    closer than float32 rounding).
``pack_bits=True`` (quantized only)
    The codes are stored as ``B`` bit-planes (``np.packbits`` of bit ``b`` of every code, row-major
    over the table) instead of one byte per code: ``B/8`` of the uint8 size. The graph unpacks
    them with constant-only nodes (BitShift, Mod, MatMul by ``-2**b * 2**-B_F``), folded at load
    like the rest of ``T``; results are identical.
``lowering="onehot-fc"``
    The stacked one-hot encoding [N, n_rows] (OneHot of the row indices summed over features;
    invalid entries give an all-zero one-hot) times ``T`` (MatMul), with an extra all-ones
    column counting valid features to mark invalid rows NaN. Exact for quantized models too:
    0/1 times ``-code * 2**-B_F``, partial sums below ``2**24`` steps.

The model's ``metadata_props`` carry the export metadata as JSON under ``"bnc_deploy"`` plus a
few flat keys (``formats.metadata.flat_metadata``).

Registered as the ``("bnc", "onnx")`` exporter (bottom of this module): :func:`build_onnx_bytes`
builds the file's bytes; :mod:`bnc_deploy.verify` writes, runs, compares and publishes them.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import bnc_deploy
from bnc_deploy.formats.metadata import (
    INPUT_NAME,
    INVALID_LABEL,
    METADATA_KEY,
    OUTPUT_LABEL,
    dump_metadata,
    flat_metadata,
)
from bnc_deploy.exporters._bnc_options import LOWERING, RAW_INPUTS
from bnc_deploy.exporters.base import Option, register_exporter
from bnc_deploy.formats.bnc import (
    OUTPUT_LOG_JOINT,
    check_lowering,
    export_metadata,
    lookup_constants,
    padded_thresholds,
)
from bnc_deploy.errors import ExportError

#: Default opset: 17 runs on every onnxruntime since 1.12 and has everything the graph needs.
DEFAULT_OPSET = 17
#: Oldest opset with ReduceSum/Unsqueeze taking axes as inputs, as this graph writes them.
MIN_OPSET = 13
#: IR version matching each opset, so older runtimes accept the file.
IR_VERSION_FOR_OPSET = {13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10}
#: float32 represents every integer multiple of the quantization step below this many steps.
FLOAT32_EXACT_STEPS = 2 ** 24


class _Graph:
    """Tiny builder: nodes and initializers of one graph, with short unique tensor names."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.initializers: list = []
        self._count = 0

    def const(self, name: str, value) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name=name))
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        self._count += 1
        out = out or f"t{self._count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out


def build_onnx_model(artifact, *, raw_inputs: bool = False, lowering: str = "gather",
                     opset: int = DEFAULT_OPSET, pack_bits: bool = False) -> onnx.ModelProto:
    """The ONNX ModelProto of :func:`export_onnx`, checked with ``onnx.checker`` (full_check)."""
    check_lowering(lowering)
    if pack_bits and not artifact.is_quantized:
        raise ExportError("pack_bits needs a quantized model (float tables have no integer codes to pack)")
    if isinstance(opset, bool) or not isinstance(opset, int) or opset < MIN_OPSET:
        raise ExportError(f"opset must be an integer >= {MIN_OPSET}, got {opset!r}")
    if artifact.n_features == 0:
        raise ExportError("cannot export a model without features")
    if artifact.is_quantized and (artifact.n_features + 1) * artifact.quantizer.max_code >= FLOAT32_EXACT_STEPS:
        raise ExportError(f"{artifact.n_features} features at {artifact.quantizer.total_bits} bits can sum to "
                          f"{FLOAT32_EXACT_STEPS} steps or more, beyond exact float32 accumulation")

    g = _Graph()
    g.const("axis1", np.array([1], dtype=np.int64))
    g.const("invalid_label", np.array(INVALID_LABEL, dtype=np.int64))
    table = _lookup_table(g, artifact, with_nan_row=lowering == "gather", pack_bits=pack_bits)
    codes, ok = _raw_codes(g, artifact) if raw_inputs else _code_range(g, artifact)
    rows = _row_indices(g, artifact, codes, ok)
    if lowering == "gather":
        picked = g.op("Gather", [table, rows], axis=0)                          # [N, D, C]
        log_joint = g.op("ReduceSum", [picked, "axis1"], OUTPUT_LOG_JOINT, keepdims=0)
    else:
        log_joint = _onehot_fc(g, artifact, table, rows)
    _label(g, log_joint)

    x_type = TensorProto.FLOAT if raw_inputs else TensorProto.INT64
    graph = helper.make_graph(
        g.nodes, f"bnc_{artifact.structure}",
        inputs=[helper.make_tensor_value_info(INPUT_NAME, x_type, ["N", artifact.n_features])],
        outputs=[helper.make_tensor_value_info(OUTPUT_LOG_JOINT, TensorProto.FLOAT, ["N", artifact.n_classes]),
                 helper.make_tensor_value_info(OUTPUT_LABEL, TensorProto.INT64, ["N"])],
        initializer=g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="bnc-deploy", producer_version=bnc_deploy.__version__,
                              ir_version=IR_VERSION_FOR_OPSET.get(opset, onnx.IR_VERSION))
    meta = export_metadata(artifact, format="onnx", lowering=lowering, raw_inputs=raw_inputs,
                           input_dtype="int64", opset=opset,
                           extra={"n_nodes": len(g.nodes),
                                  "table_storage": f"bitplanes{artifact.quantizer.total_bits}" if pack_bits
                                  else ("uint8" if artifact.is_quantized else "float32"),
                                  # both lowerings sum integer multiples of the step exactly (see above)
                                  "exact": artifact.is_quantized})
    helper.set_model_props(model, {METADATA_KEY: dump_metadata(meta), **flat_metadata(meta)})
    onnx.checker.check_model(model, full_check=True)
    return model


# -- graph pieces -----------------------------------------------------------------------------------
def _lookup_table(g: _Graph, artifact, *, with_nan_row: bool, pack_bits: bool = False) -> str:
    """The float32 lookup table T [n_rows (+1), C], computed in-graph from the stored tables.

    Quantized: ``T = -code * 2**-B_F`` (exact), from the uint8 ``table`` (or bit-planes) and
    ``class_prior`` initializers. The prior is added to feature 0's rows. All inputs are
    constants, so runtimes fold this once at load time.
    """
    first = int(artifact.rows_per_feature[0])
    if artifact.is_quantized:
        g.const("class_prior", artifact.class_codes)
        g.const("neg_step", np.array(-artifact.quantizer.step, dtype=np.float32))  # -2**-B_F: exact
        if pack_bits:
            table = _unpack_bitplanes(g, artifact)
        else:
            g.const("table", artifact.table_codes)                              # uint8, as in the artifact
            table = g.op("Mul", [g.op("Cast", ["table"], to=TensorProto.FLOAT), "neg_step"])
        prior = g.op("Mul", [g.op("Cast", ["class_prior"], to=TensorProto.FLOAT), "neg_step"])
    else:
        table, prior = g.const("table", artifact.table_logp), g.const("class_prior", artifact.class_logp)
    g.const("row0", np.array([0], dtype=np.int64))
    g.const("row_first_end", np.array([first], dtype=np.int64))
    parts = [g.op("Add", [g.op("Slice", [table, "row0", "row_first_end"]), prior])]
    if artifact.n_rows > first:
        g.const("row_end", np.array([artifact.n_rows], dtype=np.int64))
        parts.append(g.op("Slice", [table, "row_first_end", "row_end"]))
    if with_nan_row:
        g.const("nan_f", np.array(np.nan, dtype=np.float32))
        g.const("nan_row_shape", np.array([1, artifact.n_classes], dtype=np.int64))
        parts.append(g.op("Expand", ["nan_f", "nan_row_shape"]))             # [1, C], folded; no C floats on disk
    return g.op("Concat", parts, axis=0) if len(parts) > 1 else parts[0]


def pack_bitplanes(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 codes (any shape) -> bit-planes uint8 [bits, ceil(n / 8)], plane ``b`` = bit ``b``.

    Within a plane, code ``j`` (row-major order) is bit ``7 - j % 8`` of byte ``j // 8`` (numpy's
    big-endian ``packbits``).
    """
    flat = np.asarray(codes, dtype=np.uint8).reshape(-1)
    return np.stack([np.packbits((flat >> b) & 1) for b in range(bits)])


def _unpack_bitplanes(g: _Graph, artifact) -> str:
    """In-graph inverse of :func:`pack_bitplanes`, scaled: float32 [n_rows, C] of ``-code * step``."""
    bits = artifact.quantizer.total_bits
    n = artifact.table_codes.size
    g.const("table_bitplanes", pack_bitplanes(artifact.table_codes, bits))       # [B, M]
    g.const("bit_shifts", np.arange(7, -1, -1, dtype=np.uint8))                  # MSB first, as packbits
    g.const("two_u8", np.array(2, dtype=np.uint8))
    g.const("plane_shape", np.array([bits, -1], dtype=np.int64))
    g.const("code_begin", np.array([0], dtype=np.int64))
    g.const("code_end", np.array([n], dtype=np.int64))
    g.const("plane_axis", np.array([2], dtype=np.int64))
    # -step * 2**b: MatMul over planes then gives -code * step exactly (sums of <= 8 powers of two).
    g.const("plane_weights", (-artifact.quantizer.step * 2.0 ** np.arange(bits)).astype(np.float32)[None, :])
    g.const("table_shape", np.array(artifact.table_codes.shape, dtype=np.int64))
    shifted = g.op("BitShift", [g.op("Unsqueeze", ["table_bitplanes", "plane_axis"]), "bit_shifts"],
                   direction="RIGHT")                                           # [B, M, 8]
    bit_values = g.op("Cast", [g.op("Mod", [shifted, "two_u8"])], to=TensorProto.FLOAT)
    planes = g.op("Slice", [g.op("Reshape", [bit_values, "plane_shape"]), "code_begin", "code_end", "axis1"])
    return g.op("Reshape", [g.op("MatMul", ["plane_weights", planes]), "table_shape"])  # [1, n] -> [R, C]


def _code_range(g: _Graph, artifact) -> tuple[str, str]:
    """Codes input: (codes int64 [N, D], ok bool [N, D]: ``0 <= x_i < |X_i|``)."""
    g.const("zero", np.array(0, dtype=np.int64))
    g.const("cardinalities", artifact.cardinalities.astype(np.int64))
    ok = g.op("And", [g.op("GreaterOrEqual", [INPUT_NAME, "zero"]), g.op("Less", [INPUT_NAME, "cardinalities"])])
    return INPUT_NAME, ok


def _raw_codes(g: _Graph, artifact) -> tuple[str, str]:
    """Raw float32 input: (codes int64 [N, D], ok bool [N, D]: value is finite).

    Finite values always bin into ``0 .. |X_i| - 1`` (the FLT_MAX padding is never exceeded), so
    finiteness is the whole check; ``|x| <= FLT_MAX`` is False for NaN and +-inf.
    """
    thresholds, _ = padded_thresholds(artifact)                                # [D, K] float32
    g.const("cut_thresholds", thresholds)
    g.const("axis2", np.array([2], dtype=np.int64))
    g.const("float32_max", np.array(np.finfo(np.float32).max, dtype=np.float32))
    ok = g.op("LessOrEqual", [g.op("Abs", [INPUT_NAME]), "float32_max"])
    above = g.op("Greater", [g.op("Unsqueeze", [INPUT_NAME, "axis2"]), "cut_thresholds"])  # [N, D, K]
    codes = g.op("ReduceSum", [g.op("Cast", [above], to=TensorProto.INT64), "axis2"], keepdims=0)
    return codes, ok


def _row_indices(g: _Graph, artifact, codes: str, ok: str) -> str:
    """Stacked-table rows int64 [N, D]; invalid entries go to row ``n_rows`` (the NaN/zero row).

    The row index is computed from the raw codes and then *replaced* (Where) wherever the code is
    invalid, so an out-of-range value never selects a row, in its own block or another's. TAN: an
    entry is also invalid when its parent's value is.
    """
    c = lookup_constants(artifact)
    g.const("row_offsets", c["offsets"])
    g.const("invalid_row", np.array(artifact.n_rows, dtype=np.int64))
    if artifact.structure == "nb":                                            # strides all 1, no parent term
        rows = g.op("Add", [codes, "row_offsets"])
    else:
        # Features without a parent "gather" themselves for validity; their parent value is zeroed.
        g.const("parent_or_self", np.where(artifact.parents >= 0, artifact.parents,
                                           np.arange(artifact.n_features)).astype(np.int64))
        g.const("parent_strides", c["strides"])
        g.const("has_parent", c["has_parent"])
        ok = g.op("And", [ok, g.op("Gather", [ok, "parent_or_self"], axis=1)])
        parent_values = g.op("Mul", [g.op("Gather", [codes, "parent_or_self"], axis=1), "has_parent"])
        own = g.op("Add", [g.op("Mul", [codes, "parent_strides"]), "row_offsets"])
        rows = g.op("Add", [own, parent_values])
    return g.op("Where", [ok, rows, "invalid_row"])


def _onehot_fc(g: _Graph, artifact, table: str, rows: str) -> str:
    """log_joint [N, C] = stacked one-hot [N, n_rows] @ [T | 1]; rows with an invalid entry -> NaN."""
    d, c = artifact.n_features, artifact.n_classes
    g.const("onehot_depth", np.array(artifact.n_rows, dtype=np.int64))     # row n_rows -> all-zero one-hot
    g.const("onehot_values", np.array([0.0, 1.0], dtype=np.float32))
    g.const("ones_column", np.ones((artifact.n_rows, 1), dtype=np.float32))
    weights = g.op("Concat", [table, "ones_column"], axis=1)                   # [n_rows, C + 1], folded
    onehot = g.op("OneHot", [rows, "onehot_depth", "onehot_values"], axis=-1)  # [N, D, n_rows]
    product = g.op("MatMul", [g.op("ReduceSum", [onehot, "axis1"], keepdims=0), weights])  # [N, C + 1]
    g.const("cls_begin", np.array([0], dtype=np.int64))
    g.const("cls_end", np.array([c], dtype=np.int64))
    g.const("count_end", np.array([c + 1], dtype=np.int64))
    g.const("n_features", np.array(float(d), dtype=np.float32))
    g.const("zero_f", np.array(0.0, dtype=np.float32))
    g.const("nan_f", np.array(np.nan, dtype=np.float32))
    scores = g.op("Slice", [product, "cls_begin", "cls_end", "axis1"])
    count = g.op("Slice", [product, "cls_end", "count_end", "axis1"])         # valid features per row, exact
    penalty = g.op("Where", [g.op("Equal", [count, "n_features"]), "zero_f", "nan_f"])  # [N, 1]
    return g.op("Add", [scores, penalty], OUTPUT_LOG_JOINT)


def _label(g: _Graph, log_joint: str) -> None:
    """label [N] = first ArgMax of log_joint, or -1 where the row is NaN (invalid)."""
    g.const("class0", np.array(0, dtype=np.int64))
    best = g.op("ArgMax", [log_joint], axis=1, keepdims=0, select_last_index=0)
    invalid = g.op("IsNaN", [g.op("Gather", [log_joint, "class0"], axis=1)])
    g.op("Where", [invalid, "invalid_label", best], OUTPUT_LABEL)


def build_onnx_bytes(artifact, *, raw_inputs: bool = False, lowering: str = "gather",
                     opset: int = DEFAULT_OPSET, pack_bits: bool = False) -> bytes:
    """The serialized file of :func:`build_onnx_model` (what ``onnx.save_model`` writes)."""
    return build_onnx_model(artifact, raw_inputs=raw_inputs, lowering=lowering, opset=opset,
                            pack_bits=pack_bits).SerializeToString()


register_exporter(
    "bnc", "onnx", build_onnx_bytes, extension=".onnx", runtime="onnxruntime",
    description="gather + reduce-sum graph, bit-exact for quantized models",
    options=[
        LOWERING,
        RAW_INPUTS,
        Option("opset", "int", DEFAULT_OPSET, help=f"ONNX opset (default: {DEFAULT_OPSET})"),
        Option("pack_bits", "bool", False, help="quantized models: store the B-bit codes (BN tables, DNN weights) "
                                                "as bit-planes instead of one byte each"),
    ])
