"""ONNX exporter for Bayesian network classifier artifacts (naive Bayes and TAN).

Contract of the exported graph (one converter covers both structures; NB is TAN without parents)
------------------------------------------------------------------------------------------------
Input
    ``x``: int64 [N, D] feature codes (dynamic N); with ``raw_inputs=True`` float32 [N, D] raw
    values, binned in the graph as ``code_i = sum_k (x_i > t_ik)`` with the float32 thresholds of
    ``exporters.common.float32_thresholds`` (equal to ``searchsorted(cuts, x, side="left")``).
Outputs
    ``log_joint``: float32 [N, C], ``log p(c, x)``; ``label``: int64 [N], the first most probable class.
Invalid rows (the guard, ``formats.metadata.GUARD``)
    A row with any code outside ``0 .. |X_i| - 1`` (raw: any NaN/inf) gets ``log_joint`` all NaN
    and ``label = -1``. An invalid (row, feature) never reads another feature's rows and Gather
    never leaves the table; how that is ensured depends on the table layout (``index_guard`` in
    the metadata):

    ``"clip"`` (default whenever the padded table below fits in ``PADDED_TABLE_LIMIT`` bytes)
        ``Clip(x, -1, K)`` (``K`` = the largest cardinality) is the whole guard: every feature owns
        a block of ``W = K + 2`` rows (``W * W`` for TAN: own code x parent code), one per clipped
        value ``-1 .. K``, and the rows of invalid values (``-1`` and ``|X_i| .. K``) are all NaN,
        so the NaN reaches the row's sum and no compare/select runs per row. The padded table is
        built in-graph from the stored table (constant inputs only, folded at load, no bytes on
        disk). Raw inputs: non-finite values get code ``-1`` (one ``Where``).
    ``"where"`` (fallback for very large cardinalities)
        Range checks and a ``Where`` route every invalid (row, feature) to one all-NaN row appended
        to the stacked table *before* the lookup (the original layout, 11 nodes per row for NB).

Computation (``lowering="gather"``, the default: fewest nodes, fastest per call)
    ``row_i = base_i + (x_i + 1) * W_pa + (x_pa(i) + 1)`` in the padded layout (TAN parent values
    by Gather on axis 1), ``log_joint = ReduceSum_i Gather(T, row)`` and ``label = ArgMax`` (first
    maximum), with ``IsNaN`` of the first score and ``Where`` for ``-1``. The table ``T`` is built
    *inside the graph* from the stored tables: the class prior is added to the rows of feature 0
    (every row reads exactly one of them), then the NaN rows are laid out. These nodes have constant
    inputs only, so onnxruntime folds them once when the session is created; at run time the graph
    is 8 nodes for NB (Clip, Add, Gather, ReduceSum, ArgMax, Gather, IsNaN, Where; the "where"
    layout ran 11) and 12 for TAN (was 17). At batch 1 onnxruntime's cost is per node, so this is
    the fastest exact NB graph measured (``benchmarks/bench_inference.py``); it stays the default.
``lowering="gather-grouped"`` (fastest on large batches)
    Features are merged in groups (``feature_groups`` in the metadata) whose table is indexed by
    the clipped codes ``-1 .. |X_i|`` of its axes (``group_axes``: the members and their TAN
    parents; a group grows, in depth-first order of the structure, while the product of its axis
    sizes ``|X_i| + 2`` stays within ``MAX_GROUP_ROWS``; above ``PER_FEATURE_AXES_MAX_D`` features
    every axis has ``K + 2`` values and one ``Clip(-1, K)`` is the guard): it holds, for every
    combination of those codes, the sum of the members' rows (NaN if any code is invalid), built
    at load time by broadcast ``Add`` of the padded blocks. A row then needs ``G`` lookups instead of ``D``
    (letter NB: 5 instead of 16). Per row: ``Max(float(x), -1)``, a Gemm with the identity that
    subtracts ``|X_i|``, ``Clip(max=0)`` (the per-feature upper bound with scalar ops only), and one
    Gemm for the mixed-radix group rows (exact: small integers in float32, int32 indices); the
    looked-up rows are added by one ``Sum`` (up to ``SUM_MAX_GROUPS`` groups) or one Gather +
    ReduceSum (more groups). The price is table memory at run time (``table_bytes_at_load`` in the
    metadata; letter NB 1.0 MB instead of 27 KB; never on disk), a larger file (a few load-time
    nodes per member: letter NB 12.2 KB instead of 7.2 KB, usps NB 54 KB instead of 23 KB) and
    more nodes per call, so batch-1 latency is higher than ``gather``'s (letter NB: 27 vs 18 us;
    full test set 1.3 vs 3.7 ms; TAN 1.8 vs 4.6 ms; ``benchmarks/bench_inference.py``). Not the
    default: one graph cannot be fastest at batch 1 and at large batches, and the default keeps
    the small table. Exactness is the same (the group sums are the same integer multiples of the
    step, see below).
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

import json

import numpy as np
import onnx
from bnc_deploy.exporters._bnc_options import LOWERING_BATCH, LOWERING_TIMINGS, ONNX_LOWERING, RAW_INPUTS
from bnc_deploy.exporters.base import Option, register_exporter
from onnx import TensorProto, helper, numpy_helper

import bnc_deploy
from bnc_deploy.errors import ExportError
from bnc_deploy.formats.bnc import (
    AUTO_LOWERING,
    ONNX_LOWERINGS,
    OUTPUT_LOG_JOINT,
    check_lowering,
    export_metadata,
    lookup_constants,
    padded_thresholds,
)
from bnc_deploy.formats.metadata import (
    INPUT_NAME,
    INVALID_LABEL,
    METADATA_KEY,
    OUTPUT_LABEL,
    dump_metadata,
    flat_metadata,
)

#: Default opset: 17 runs on every onnxruntime since 1.12 and has everything the graph needs.
DEFAULT_OPSET = 17
#: Oldest opset with ReduceSum/Unsqueeze taking axes as inputs, as this graph writes them.
MIN_OPSET = 13
#: IR version matching each opset, so older runtimes accept the file.
IR_VERSION_FOR_OPSET = {13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10}
#: float32 represents every integer multiple of the quantization step below this many steps.
FLOAT32_EXACT_STEPS = 2 ** 24
#: Largest folded float32 table (bytes) of the padded ("clip") layout; above it the gather lowering
#: keeps the compact table and the "where" guard. 16 MiB: every paper model is far below (letter
#: TAN: 0.4 MiB), a model with cardinalities in the hundreds is not.
PADDED_TABLE_LIMIT = 16 * 2 ** 20
#: Largest folded table (bytes) of ``gather-grouped``: groups shrink (3 -> 2 features) to fit it.
GROUPED_TABLE_LIMIT = 8 * 2 ** 20
#: Rows of one merged group table (the product of its axes' ``|X_i| + 2``): 4096 rows of C floats
#: stay cache-friendly (letter: 106 KB) and give letter NB 5 groups of 3-4 features.
MAX_GROUP_ROWS = 4096
#: Largest D whose group axes are sized per feature (see ``_per_feature_axes``).
PER_FEATURE_AXES_MAX_D = 64
#: Up to this many groups are looked up one by one and added by one ``Sum`` (letter: 6 groups,
#: measured fastest); more groups use one Gather and a ReduceSum (usps: 86 groups).
SUM_MAX_GROUPS = 8

class _Graph:
    """Tiny builder: nodes and initializers of one graph, with short unique tensor names."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.initializers: list = []
        self._consts: dict[str, np.ndarray] = {}
        self._count = 0

    def const(self, name: str, value) -> str:
        """Add initializer ``name`` once (graph pieces share constants such as ``has_parent``)."""
        value = np.asarray(value)
        if name in self._consts:
            if not (self._consts[name].dtype == value.dtype and np.array_equal(self._consts[name], value)):
                raise AssertionError(f"constant {name!r} defined twice with different values")
            return name
        self._consts[name] = value
        self.initializers.append(numpy_helper.from_array(value, name=name))
        return name

    def small_ints(self, name: str, values) -> str:
        """int64 constant stored in the narrowest integer type that holds it, cast back at load
        (a folded Cast: the file keeps 1-2 bytes per index constant instead of 8)."""
        values = np.asarray(values, dtype=np.int64)
        for dtype in (np.int8, np.int16, np.int32):
            info = np.iinfo(dtype)
            if values.size == 0 or (values.min() >= info.min and values.max() <= info.max):
                break
        else:
            return self.const(name, values)
        self.const(name, values.astype(dtype))
        return self.op("Cast", [name], to=TensorProto.INT64)

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        self._count += 1
        out = out or f"t{self._count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out


def build_onnx_model(artifact, *, raw_inputs: bool = False, lowering: str = "gather",
                     opset: int = DEFAULT_OPSET, pack_bits: bool = False,
                     lowering_timings: str | None = None) -> onnx.ModelProto:
    """The ONNX ModelProto of :func:`export_onnx`, checked with ``onnx.checker`` (full_check).

    ``lowering_timings``: the JSON record of ``--lowering auto`` (the verifier's measurements that
    chose ``lowering``), stored as metadata ``lowering_auto``."""
    check_auto_resolved(lowering)
    check_lowering(lowering, ONNX_LOWERINGS)
    if pack_bits and not artifact.is_quantized:
        raise ExportError("pack_bits needs a quantized model (float tables have no integer codes to pack)")
    if isinstance(opset, bool) or not isinstance(opset, int) or opset < MIN_OPSET:
        raise ExportError(f"opset must be an integer >= {MIN_OPSET}, got {opset!r}")
    if artifact.n_features == 0:
        raise ExportError("cannot export a model without features")
    if artifact.is_quantized and (artifact.n_features + 1) * artifact.quantizer.max_code >= FLOAT32_EXACT_STEPS:
        raise ExportError(f"{artifact.n_features} features at {artifact.quantizer.total_bits} bits can sum to "
                          f"{FLOAT32_EXACT_STEPS} steps or more, beyond exact float32 accumulation")
    layout = PaddedLayout.of(artifact)
    groups = None
    if lowering == "gather-grouped":
        groups = _feature_groups(artifact, layout)                               # ExportError if it cannot

    g = _Graph()
    g.const("axis1", np.array([1], dtype=np.int64))
    g.const("invalid_label", np.array(INVALID_LABEL, dtype=np.int64))
    table = _lookup_table(g, artifact, with_nan_row=lowering != "onehot-fc", pack_bits=pack_bits)
    extra = {}
    if lowering == "onehot-fc" or layout is None:                                # compact table, "where" guard
        codes, ok = _raw_codes(g, artifact) if raw_inputs else _code_range(g, artifact)
        rows = _row_indices(g, artifact, codes, ok)
        if lowering == "gather":
            picked = g.op("Gather", [table, rows], axis=0)                      # [N, D, C]
            log_joint = g.op("ReduceSum", [picked, "axis1"], OUTPUT_LOG_JOINT, keepdims=0)
        else:
            log_joint = _onehot_fc(g, artifact, table, rows)
        table_rows = artifact.n_rows + (lowering == "gather")
        extra["index_guard"] = "where"
    else:                                                                        # padded table, "clip" guard
        if raw_inputs:
            codes = _raw_codes_or_minus_one(g, artifact)
        elif lowering == "gather":
            codes = _clipped_codes(g, layout)
        else:                       # gather-grouped clips after its cast to float32 (see _grouped_sum)
            codes = INPUT_NAME
        padded = _padded_table(g, artifact, table, layout)
        if lowering == "gather":
            picked = g.op("Gather", [padded, _padded_rows(g, artifact, codes, layout)], axis=0)   # [N, D, C]
            log_joint = g.op("ReduceSum", [picked, "axis1"], OUTPUT_LOG_JOINT, keepdims=0)
            table_rows = layout.n_rows
        else:
            log_joint, table_rows = _grouped_sum(g, artifact, padded, codes, layout, groups)
            extra["feature_groups"] = [grp.members for grp in groups]
            extra["group_axes"] = [grp.axes for grp in groups]
        extra["index_guard"] = "clip"
    _label(g, log_joint)
    extra["lookups_per_row"] = len(groups) if groups else artifact.n_features
    # the float32 table onnxruntime builds when the session is created (folded; not in the file)
    extra["table_bytes_at_load"] = int(table_rows * artifact.n_classes * 4) if lowering != "onehot-fc" else \
        int(artifact.n_rows * (artifact.n_classes + 1) * 4)

    x_type = TensorProto.FLOAT if raw_inputs else TensorProto.INT64
    used = {name for node in g.nodes for name in node.input}   # shared constants some layouts skip
    g.initializers = [t for t in g.initializers if t.name in used]
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
                                  # every lowering sums integer multiples of the step exactly (see above)
                                  "exact": artifact.is_quantized, **extra,
                                  **lowering_auto_metadata(lowering_timings)})
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


class PaddedLayout:
    """The padded ("clip") table layout: ``W = K + 2`` rows per clipped code ``-1 .. K`` of each
    feature, times ``W`` parent codes for TAN (``W_pa = 1`` for naive Bayes).

    Row of feature ``i`` for clipped codes ``(a, b)`` (``b`` its parent's; 0 without a parent):
    ``base_i + (a + 1) * W_pa + (b + 1) * has_parent_i`` with ``base_i = i * W * W_pa``.
    """

    def __init__(self, artifact) -> None:
        self.max_code = int(artifact.cardinalities.max())                      # K: clip bound (invalid)
        self.width = self.max_code + 2                                          # W: codes -1 .. K
        self.parent_width = self.width if (artifact.parents >= 0).any() else 1  # W_pa
        self.block = self.width * self.parent_width
        self.n_rows = artifact.n_features * self.block
        self.has_parent = (artifact.parents >= 0).astype(np.int64)

    @classmethod
    def of(cls, artifact) -> PaddedLayout | None:
        """The layout, or None when its folded table would exceed :data:`PADDED_TABLE_LIMIT`."""
        layout = cls(artifact)
        return layout if layout.n_rows * artifact.n_classes * 4 <= PADDED_TABLE_LIMIT else None

    def bases(self, artifact) -> np.ndarray:
        """Per-feature constant of the row: ``base_i + W_pa + has_parent_i`` (the ``+ 1`` shifts)."""
        return (np.arange(artifact.n_features) * self.block + self.parent_width + self.has_parent).astype(np.int64)


def _clipped_codes(g: _Graph, layout: PaddedLayout) -> str:
    """Codes input clipped into ``-1 .. K``: the one guard node (invalid values land on NaN rows)."""
    g.const("code_low", np.array(-1, dtype=np.int64))
    g.const("code_high", np.array(layout.max_code, dtype=np.int64))
    return g.op("Clip", [INPUT_NAME, "code_low", "code_high"])


def _raw_codes_or_minus_one(g: _Graph, artifact) -> str:
    """Raw input binned in-graph; non-finite values get code -1 (their feature's NaN row)."""
    codes, ok = _raw_codes(g, artifact)
    g.const("minus_one", np.array(-1, dtype=np.int64))
    return g.op("Where", [ok, codes, "minus_one"])


def _padded_table(g: _Graph, artifact, table: str, layout: PaddedLayout) -> str:
    """T padded [D * W * W_pa, C] = Gather(T with its NaN row, pad map): constant inputs only.

    The pad map is computed in-graph from the per-feature constants (nothing of size D * W on disk):
    clipped codes ``j = -1 .. K`` (own) and ``jb`` (parent; its contribution is 0 without a parent)
    select stacked row ``offset_i + j * |X_pa(i)| + jb * has_parent_i`` when both are in range,
    else the NaN row ``n_rows``.
    """
    c = lookup_constants(artifact)
    pad_codes = g.small_ints("pad_codes", np.arange(-1, layout.max_code + 1))  # [W]
    g.const("row_offsets", c["offsets"])
    g.const("cardinalities", c["cardinalities"])
    g.const("invalid_row", np.array(artifact.n_rows, dtype=np.int64))
    g.const("zero", np.array(0, dtype=np.int64))
    g.const("flat_shape", np.array([-1], dtype=np.int64))
    if artifact.structure == "nb":
        offsets = g.op("Unsqueeze", ["row_offsets", "axis1"])                  # [D, 1]
        rows = g.op("Add", [offsets, pad_codes])                                 # [D, W]
        valid = g.op("And", [g.op("GreaterOrEqual", [pad_codes, "zero"]),
                             g.op("Less", [pad_codes, g.op("Unsqueeze", ["cardinalities", "axis1"])])])
    else:
        g.const("axes12", np.array([1, 2], dtype=np.int64))
        g.const("axes02", np.array([0, 2], dtype=np.int64))
        g.const("axes01", np.array([0, 1], dtype=np.int64))
        g.const("parent_strides", c["strides"])
        g.const("has_parent", c["has_parent"])
        per_feature = {k: g.op("Unsqueeze", [k, "axes12"]) for k in
                       ("row_offsets", "cardinalities", "parent_strides", "has_parent")}   # [D, 1, 1]
        own = g.op("Unsqueeze", [pad_codes, "axes02"])                             # [1, W, 1]
        parent = g.op("Mul", [g.op("Unsqueeze", [pad_codes, "axes01"]), per_feature["has_parent"]])  # [D, 1, W]
        rows = g.op("Add", [g.op("Add", [per_feature["row_offsets"], g.op("Mul", [own, per_feature["parent_strides"]])]),
                            parent])                                              # [D, W, W]
        own_ok = g.op("And", [g.op("GreaterOrEqual", [own, "zero"]), g.op("Less", [own, per_feature["cardinalities"]])])
        parent_ok = g.op("And", [g.op("GreaterOrEqual", [parent, "zero"]),
                                 g.op("Less", [parent, per_feature["parent_strides"]])])
        valid = g.op("And", [own_ok, parent_ok])
    pad_map = g.op("Reshape", [g.op("Where", [valid, rows, "invalid_row"]), "flat_shape"])
    return g.op("Gather", [table, pad_map], axis=0)


def _padded_rows(g: _Graph, artifact, codes: str, layout: PaddedLayout) -> str:
    """Rows int64 [N, D] of the padded table for codes already in ``-1 .. K``."""
    bases = g.small_ints("pad_bases", layout.bases(artifact))
    if artifact.structure == "nb":                                              # W_pa = 1, no parent term
        return g.op("Add", [codes, bases])
    g.const("parent_or_self", np.where(artifact.parents >= 0, artifact.parents,
                                       np.arange(artifact.n_features)).astype(np.int64))
    g.const("has_parent", layout.has_parent)
    g.const("pad_parent_width", np.array(layout.parent_width, dtype=np.int64))
    parent = g.op("Mul", [g.op("Gather", [codes, "parent_or_self"], axis=1), "has_parent"])
    own = g.op("Mul", [codes, "pad_parent_width"])
    return g.op("Add", [g.op("Add", [own, parent]), bases])


class FeatureGroup:
    """Features whose tables are merged: ``members`` (looked up together) and ``axes`` (the
    features whose codes index the merged table: the members and their parents, in order)."""

    def __init__(self, members: list[int], axes: list[int]) -> None:
        self.members, self.axes = members, axes

    def rows(self, widths) -> int:
        return int(np.prod([widths[a] for a in self.axes]))


def _feature_groups(artifact, layout: PaddedLayout | None) -> list[FeatureGroup]:
    """Groups whose merged tables have at most :data:`MAX_GROUP_ROWS` rows and fit the limit.

    A feature's axis has ``|X_i| + 2`` values (clipped codes ``-1 .. |X_i|``). Features are taken
    in depth-first order of the structure (naive Bayes: index order), so a TAN child joins its
    parent's group; a feature joins the open group while the product of the group's axis sizes
    (members and their parents) stays within the row budget, else it opens a group (alone it
    may exceed the budget: a TAN lookup needs its two axes). The budget halves until all tables
    fit :data:`GROUPED_TABLE_LIMIT` bytes.
    """
    if layout is None:
        raise ExportError(f"--lowering gather-grouped: cardinalities up to {int(artifact.cardinalities.max())} "
                          "make the padded tables too large; use the default gather lowering")
    parents = [int(p) for p in artifact.parents]
    widths = np.array(_axis_sizes(artifact, layout), dtype=np.int64)
    order = _depth_first(parents)
    budget = MAX_GROUP_ROWS
    while True:
        groups: list[FeatureGroup] = []
        for f in order:
            need = [f] + ([parents[f]] if parents[f] >= 0 else [])
            if groups and FeatureGroup([], list(dict.fromkeys(groups[-1].axes + need))).rows(widths) <= budget:
                groups[-1].members.append(f)
                groups[-1].axes += [a for a in need if a not in groups[-1].axes]
            else:
                groups.append(FeatureGroup([f], need))                         # own axis first: no transpose
        rows = sum(grp.rows(widths) for grp in groups)
        if rows * artifact.n_classes * 4 <= GROUPED_TABLE_LIMIT or all(len(grp.members) == 1 for grp in groups):
            if rows >= FLOAT32_EXACT_STEPS:   # the row index is computed in float32
                raise ExportError(f"--lowering gather-grouped: {rows} table rows exceed float32 integers")
            return groups
        budget //= 2


def _per_feature_axes(artifact) -> bool:
    """Whether group axes have ``|X_i| + 2`` values (else ``K + 2`` for all). Per-feature axes make
    smaller tables (letter NB: 5 groups instead of 6) but need a per-feature upper clip, done by a
    D x D Gemm (scalar ops only); above :data:`PER_FEATURE_AXES_MAX_D` features that Gemm costs more
    than it saves (usps, D = 256), and one Clip to ``-1 .. K`` is the guard."""
    return artifact.n_features <= PER_FEATURE_AXES_MAX_D


def _axis_sizes(artifact, layout: PaddedLayout) -> list[int]:
    """Values of each feature's group axis: its clipped codes ``-1 .. bound``."""
    if _per_feature_axes(artifact):
        return [int(v) + 2 for v in artifact.cardinalities]
    return [layout.width] * artifact.n_features


def _depth_first(parents: list[int]) -> list[int]:
    """Features in depth-first order of the forest (roots and children by index)."""
    children: dict[int, list[int]] = {}
    for f, p in enumerate(parents):
        children.setdefault(p, []).append(f)
    order, stack = [], list(reversed(children.get(-1, [])))
    while stack:
        f = stack.pop()
        order.append(f)
        stack.extend(reversed(children.get(f, [])))
    return order


def _grouped_sum(g: _Graph, artifact, padded: str, codes: str, layout: PaddedLayout,
                 groups: list[FeatureGroup]) -> tuple[str, int]:
    """log_joint [N, C] of ``gather-grouped`` and the folded table's rows.

    Load time: the padded table is split into the D feature blocks [W, W_pa, C] and each block is
    cut to its own codes ``-1 .. |X_i|`` (``|X_i| + 2`` rows; its parent's likewise); a group's
    table is the broadcast sum of its members' blocks, each reshaped onto its own (and its
    parent's) axis of the group's grid (NB: ``[W_a, 1, 1, C] + [1, W_b, 1, C] + [1, 1, W_c, C]``;
    a TAN block whose parent comes first in the group is transposed; a parentless block of a TAN
    model is its column 0, all its columns being equal) -> [prod W, C]. Run time: the codes are
    clipped per feature to ``-1 .. |X_i|`` (Max, Min) and the group row is the mixed-radix number
    ``base_j + sum_u (x_u + 1) * stride_u``, one Gemm in float32 (exact small integers).
    """
    d, wp, c = artifact.n_features, layout.parent_width, artifact.n_classes
    widths = _axis_sizes(artifact, layout)
    g.const("block_shape", np.array([d, layout.width, wp, c], dtype=np.int64))
    g.const("ones_d", np.ones(d, dtype=np.int64))
    g.const("axes12", np.array([1, 2], dtype=np.int64))
    g.const("begin00", np.array([0, 0], dtype=np.int64))
    blocks = [f"feature_block{i}" for i in range(d)]
    g.nodes.append(helper.make_node("Split", [g.op("Reshape", [padded, "block_shape"]), "ones_d"], blocks, axis=0))
    parents = [int(p) for p in artifact.parents]
    tables, strides, bases, start = [], np.zeros((d, len(groups)), dtype=np.float32), [], 0
    for j, grp in enumerate(groups):
        k = len(grp.axes)
        total = None
        for i in grp.members:
            own, parent = grp.axes.index(i), (grp.axes.index(parents[i]) if parents[i] >= 0 else None)
            # own codes -1 .. |X_i| (rows 0 .. |X_i| + 1 of the block), the parent's likewise;
            # a parentless block of a TAN model keeps column 0 (its columns are all equal)
            ends = [widths[i], widths[parents[i]] if parent is not None else 1]
            block = blocks[i]
            if ends != [layout.width, wp]:                                       # else the whole block
                end = g.const("end_" + "x".join(map(str, ends)), np.array(ends, dtype=np.int64))
                block = g.op("Slice", [block, "begin00", end, "axes12"])           # [1, W_i, W_pa|1, C]
            if parent is not None and parent < own:                              # parent axis first
                block = g.op("Transpose", [block], perm=[0, 2, 1, 3])
            dims = [widths[grp.axes[a]] if a in (own, parent) else 1 for a in range(k)] + [c]
            shape = g.const("shape_" + "x".join(map(str, dims)), np.array(dims, dtype=np.int64))
            part = g.op("Reshape", [block, shape])
            total = part if total is None else g.op("Add", [total, part])       # folded: outer sums
        stride = 1
        for u in reversed(grp.axes):                                             # mixed radix, last axis fastest
            strides[u, j] = stride
            stride *= widths[u]
        n_rows = grp.rows(widths)
        rows_shape = g.const(f"rows_{n_rows}x{c}", np.array([n_rows, c], dtype=np.int64))
        tables.append(g.op("Reshape", [total, rows_shape]))
        bases.append(start + strides[grp.axes, j].sum())                         # the "+ 1" shifts
        start += n_rows
    table = g.op("Concat", tables, axis=0) if len(tables) > 1 else tables[0]
    bases = np.array(bases, dtype=np.float64)[:, None]                           # [G, 1]
    strides_name = _group_strides(g, groups, strides.T)
    codes_f = g.op("Cast", [codes], to=TensorProto.FLOAT)
    if codes == INPUT_NAME and not _per_feature_axes(artifact):                 # one bound K: one Clip
        g.const("code_low_f", np.array(-1, dtype=np.float32))
        g.const("code_high_f", np.array(layout.max_code, dtype=np.float32))
        codes_f = g.op("Clip", [codes_f, "code_low_f", "code_high_f"])
    elif codes == INPUT_NAME:
        # The guard of the codes input: clip each feature to -1 .. |X_i| (both are NaN rows of its
        # block when out of range), on float32 (onnxruntime's float Max/Min are vectorized; its
        # int64 Clip is 7x slower on letter's test set). The cast is monotonic and the bounds are
        # exact, so clip(float(x)) = float(clip(x)) for every int64 x, huge values included.
        # The per-feature upper bound as scalar ops (onnxruntime broadcasts a [D] vector over
        # [N, D] 4x slower than a scalar): shift by -|X_i| inside a Gemm with the identity,
        # clip at 0, and add the shift back through the group rows' bias.
        g.const("code_low_f", np.array(-1, dtype=np.float32))
        g.const("zero_f", np.array(0, dtype=np.float32))
        g.const("minus_cards_f", -artifact.cardinalities.astype(np.float32))
        index = g.small_ints("feature_index", np.arange(d))
        identity = g.op("Cast", [g.op("Equal", [g.op("Unsqueeze", [index, "axis1"]), index])],
                        to=TensorProto.FLOAT)                                     # [D, D], built at load
        shifted = g.op("Gemm", [g.op("Max", [codes_f, "code_low_f"]), identity, "minus_cards_f"])
        codes_f = g.op("Clip", [shifted, "", "zero_f"])                           # x - |X_i| <= 0
        bases = bases + strides.T.astype(np.float64) @ artifact.cardinalities.astype(np.float64)[:, None]
    g.const("group_bases", bases.astype(np.float32))                             # exact: < 2**24
    # Rows transposed, [G, N] = strides^T [G, D] x codes^T + bases (Gemm, transB): each group's rows
    # are contiguous for the Split and the Gathers. int32 (< 2**24): onnxruntime's Gather is ~15%
    # faster with int32 indices than with int64.
    rows = g.op("Cast", [g.op("Gemm", [strides_name, codes_f, "group_bases"], transB=1)],
                to=TensorProto.INT32)                                             # [G, N]
    g.const("axis0", np.array([0], dtype=np.int64))
    if len(groups) == 1 or len(groups) > SUM_MAX_GROUPS:
        # many groups: one Gather [G, N, C] and a ReduceSum over the leading axis (per-node
        # overhead would dominate G separate lookups at small batches)
        return g.op("ReduceSum", [g.op("Gather", [table, rows], axis=0), "axis0"], OUTPUT_LOG_JOINT,
                    keepdims=0), start
    g.const("ones_g", np.ones(len(groups), dtype=np.int64))
    parts = [f"group_rows{j}" for j in range(len(groups))]
    g.nodes.append(helper.make_node("Split", [rows, "ones_g"], parts, axis=0))  # G x [1, N]
    # G separate [1, N, C] lookups added elementwise by one Sum: measured faster than one Gather
    # [G, N, C] + ReduceSum, whose reduction costs more than the sum itself.
    picked = [g.op("Gather", [table, p], axis=0) for p in parts]
    return g.op("Squeeze", [g.op("Sum", picked), "axis0"], OUTPUT_LOG_JOINT), start


def _group_strides(g: _Graph, groups: list[FeatureGroup], dense: np.ndarray) -> str:
    """The float32 [G, D] stride matrix of the group rows (``dense``), built in-graph from the
    groups' axis lists and per-axis strides: a dense matrix on disk would be G * D floats (usps:
    86 groups, 88 KB); these are about 3 small integers per group."""
    k = max(len(grp.axes) for grp in groups)
    axes = np.full((len(groups), k), -1, dtype=np.int64)                          # -1: no axis (never equal)
    powers = np.zeros((len(groups), k), dtype=np.int64)
    for j, grp in enumerate(groups):
        axes[j, :len(grp.axes)] = grp.axes
        powers[j, :len(grp.axes)] = dense[j, grp.axes]
    g.const("axis2", np.array([2], dtype=np.int64))
    g.const("axis1", np.array([1], dtype=np.int64))
    hot = g.op("Equal", [g.op("Unsqueeze", [g.small_ints("group_axes", axes), "axis2"]),
                         g.small_ints("feature_index", np.arange(dense.shape[1]))])  # [G, k, D]
    scaled = g.op("Mul", [g.op("Cast", [hot], to=TensorProto.FLOAT),
                          g.op("Cast", [g.op("Unsqueeze", [g.small_ints("group_powers", powers), "axis2"])],
                               to=TensorProto.FLOAT)])
    return g.op("ReduceSum", [scaled, "axis1"], keepdims=0)                      # [G, D]


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


# -- the ORT format lookup graph (used only by exporters/ort_format.py) ---------------------------------
#: Opset of the ORT lookup graph's default domain: 12 is the last with ReduceSum's ``axes`` as an
#: attribute (an initializer less per reduction in the ORT file) and the first with an int64 Clip.
ORT_LOOKUP_OPSET = 12
#: The contrib domain of ``GatherBlockQuantized`` (onnxruntime >= 1.20; CPU, WebAssembly, mobile).
MS_DOMAIN = "com.microsoft"


def ort_lookup_applies(artifact, *, raw_inputs: bool = False, lowering: str = "gather",
                       pack_bits: bool = False, **_) -> bool:
    """Whether :func:`build_ort_lookup_model` covers this export: a quantized NB or TAN model,
    ``gather`` lowering, code inputs, no bit-planes, a padded layout, and fewer than 2**16 table rows."""
    return (artifact.is_quantized and lowering == "gather" and not raw_inputs and not pack_bits
            and artifact.n_features > 0 and PaddedLayout.of(artifact) is not None and artifact.n_rows + 1 < 2 ** 16)


def ort_lookup_storage(artifact) -> tuple[int, bool]:
    """``(bits, prior_folded)`` of the ORT lookup table: the prior is folded into feature 0's rows
    when the sums fit a byte (``B <= 7``); the stored values (codes, or code + prior codes for
    feature 0) take 4 bits, two a byte, when they are all below 16 and the class count is even
    (letter NB 3-bit), else one byte each."""
    max_code = int(artifact.quantizer.max_code)
    folded = 2 * max_code <= 255
    largest = 2 * max_code if folded else max_code
    return (4 if largest < 16 and artifact.n_classes % 2 == 0 else 8), folded


def build_ort_lookup_model(artifact) -> onnx.ModelProto:
    """The graph the ORT exporter converts for quantized NB and TAN models (``ort_lookup_applies``).

    Private to ``exporters/ort_format.py``. An ORT format session never folds constants, so the ONNX
    graph's load-time table build (19 of its 28 nodes) would run on every call, and the ORT file
    stores a type/shape record per tensor and edges and kernel type records per node (about 400
    bytes a node). This graph has no load-time nodes; the table is stored as the op reads it:

    * ``c = Clip(x, -1, K)``: the guard, as in the ``clip`` layout;
    * ``r = Cast(GatherElements(M, c), int32)``: ``M`` [K + 1, D] (uint8; uint16 from 256 table rows)
      maps clipped code ``j`` of feature ``i`` to its row ``offset_i + j`` of the stacked table, or
      to the NaN row ``R`` when ``j`` is invalid (``|X_i| <= j <= K``; ``-1`` indexes row ``K``
      from the end, which is invalid for every feature). TAN: the map is indexed by
      ``a * W + b`` (``W = K + 2``; ``a`` the clipped code, ``b`` its parent's, ``Gather`` + ``Mul`` +
      ``Add`` per call; a root's own code stands in for the parent's and the root's row ignores
      it); negative values index from the end, and the ``(K + 2)**2`` rows of ``M`` [(K + 2)**2, D]
      hold every pair once; a pair with an invalid code maps to the NaN row;
    * ``g = GatherBlockQuantized(T, r, S, Z)`` (com.microsoft, onnxruntime >= 1.20): the looked-up
      rows dequantized, ``(q - 0) * S[row]`` with ``S = -2**-B_F`` for the model's rows and NaN for
      row ``R`` (so one invalid code makes its row of ``log_joint`` NaN, as in the ONNX graph);
      exact (a small integer times a power of two);
    * ``log_joint = ReduceSum(g, axis 1)``; ``label = Where(IsNaN(ReduceSum(log_joint, axis 1)),
      -1, ArgMax(log_joint))`` (first maximum). Every partial sum is an integer multiple of the
      step below ``2**24``: bit-identical to the ONNX export.

    The table ``T`` (``ort_lookup_storage``): the class prior is folded into feature 0's rows (all
    ``rows_per_feature[0]`` of them; every valid row reads exactly one; the ONNX graph does the
    same ``C`` additions once at load time, here they are done at export:
    ``prior_folded_into_feature = 0`` in the metadata, which the graph counter credits as folded
    additions), and the values are stored in 4 bits, two a byte, when they fit (letter NB 3-bit:
    codes + prior codes <= 14), else one a byte. 8-bit models (code + prior may exceed a byte) keep
    the prior apart and add it per call (``Add``).

    Per call 9 nodes for NB, 12 for TAN (the ONNX graph: 8 and 12 after its load-time folding; as
    ORT files they ran all 28 and 43). Letter NB 3-bit: 10,648 bytes (``.onnx`` 7,266); letter TAN
    3-bit: 44,920 (``.onnx`` 43,994; the ONNX graph as ORT: 62,472).
    Metadata: ``opset`` 12 (``ORT_LOOKUP_OPSET``, whatever ``--opset`` says), ``table_storage``
    ``uint4x2`` or ``uint8``, ``index_guard`` ``clip``.
    """
    if not ort_lookup_applies(artifact):
        raise ExportError("the ORT lookup graph covers quantized NB/TAN models with the gather lowering and "
                          "code inputs")
    d, c, n_rows = artifact.n_features, artifact.n_classes, artifact.n_rows
    k = PaddedLayout(artifact).max_code
    constants = lookup_constants(artifact)
    offsets, strides = constants["offsets"], constants["strides"]
    parents = [int(p) for p in artifact.parents]
    tan = any(p >= 0 for p in parents)
    if tan:
        # map row of the clipped codes (a, b) of a feature and its parent: a * W + b, negative values
        # from the end (W = K + 2; the K + 2 values of a and b give (K + 2)**2 distinct rows)
        width = k + 2
        row_map = np.full((width * width, d), n_rows, dtype=np.int64)
        for i, card in enumerate(artifact.cardinalities):
            p = parents[i]
            b = np.arange(-1, k + 1) if p < 0 else np.arange(int(artifact.cardinalities[p]))
            for a in range(int(card)):                      # a root reads its own code as "parent": any b
                rows = offsets[i] + a if p < 0 else offsets[i] + a * strides[i] + b
                row_map[(a * width + b) % (width * width), i] = rows
    else:
        row_map = np.full((k + 1, d), n_rows, dtype=np.int64)                      # invalid -> the NaN row
        for i, card in enumerate(artifact.cardinalities):
            row_map[:int(card), i] = offsets[i] + np.arange(int(card))
    bits, folded = ort_lookup_storage(artifact)
    values = np.vstack([artifact.table_codes, np.zeros((1, c), dtype=np.uint8)]).astype(np.int64)
    if folded:
        values[:int(artifact.rows_per_feature[0])] += artifact.class_codes       # feature 0: rows 0 ..
    if bits == 4:
        table = (values[:, 0::2] | (values[:, 1::2] << 4)).astype(np.uint8)      # low nibble first
    else:
        table = values.astype(np.uint8)
    scales = np.full((n_rows + 1, 1), -artifact.quantizer.step, dtype=np.float32)
    scales[n_rows] = np.nan

    g = _Graph()                                   # one-letter initializer names: each is stored in the file
    g.const("T", table)
    g.const("S", scales)
    g.const("Z", np.zeros((n_rows + 1, 1), dtype=np.uint8))                       # zero points (packed: 0)
    g.const("m", np.array(-1, dtype=np.int64))
    g.const("K", np.array(k, dtype=np.int64))
    g.const("M", row_map.astype(np.uint8 if n_rows < 256 else np.uint16))           # n_rows: the NaN row
    clipped = g.op("Clip", [INPUT_NAME, "m", "K"])
    if tan:
        g.const("p", np.array([p if p >= 0 else i for i, p in enumerate(parents)], dtype=np.int64))
        g.const("W", np.array(k + 2, dtype=np.int64))
        parent_codes = g.op("Gather", [clipped, "p"], axis=1)
        clipped = g.op("Add", [g.op("Mul", [clipped, "W"]), parent_codes])
    rows = g.op("Cast", [g.op("GatherElements", ["M", clipped], axis=0)], to=TensorProto.INT32)
    looked_up = g.op("GatherBlockQuantized", ["T", rows, "S", "Z"], domain=MS_DOMAIN, bits=bits, gather_axis=0,
                     quantize_axis=1, block_size=max(16, 1 << int(np.ceil(np.log2(max(c, 2))))))
    if folded:
        log_joint = g.op("ReduceSum", [looked_up], OUTPUT_LOG_JOINT, axes=[1], keepdims=0)
    else:
        g.const("P", (-artifact.class_codes.astype(np.float32) * np.float32(artifact.quantizer.step)))
        log_joint = g.op("Add", [g.op("ReduceSum", [looked_up], axes=[1], keepdims=0), "P"], OUTPUT_LOG_JOINT)
    best = g.op("ArgMax", [log_joint], axis=1, keepdims=0)
    invalid = g.op("IsNaN", [g.op("ReduceSum", [log_joint], axes=[1], keepdims=0)])
    g.op("Where", [invalid, "m", best], OUTPUT_LABEL)

    graph = helper.make_graph(
        g.nodes, f"bnc_{artifact.structure}",
        inputs=[helper.make_tensor_value_info(INPUT_NAME, TensorProto.INT64, ["N", d])],
        outputs=[helper.make_tensor_value_info(OUTPUT_LOG_JOINT, TensorProto.FLOAT, ["N", c]),
                 helper.make_tensor_value_info(OUTPUT_LABEL, TensorProto.INT64, ["N"])],
        initializer=g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ORT_LOOKUP_OPSET),
                                                    helper.make_opsetid(MS_DOMAIN, 1)],
                              producer_name="bnc-deploy", producer_version=bnc_deploy.__version__,
                              ir_version=IR_VERSION_FOR_OPSET[13])               # IR 7: opsets 12 and 13
    meta = export_metadata(artifact, format="onnx", lowering="gather", input_dtype="int64",
                           opset=ORT_LOOKUP_OPSET,
                           extra={"n_nodes": len(g.nodes), "table_storage": "uint4x2" if bits == 4 else "uint8",
                                  "exact": True, "index_guard": "clip", "lookups_per_row": d,
                                  **({"prior_folded_into_feature": 0} if folded else {})})
    helper.set_model_props(model, {METADATA_KEY: dump_metadata(meta), **flat_metadata(meta)})
    onnx.checker.check_model(model)
    return model


def build_onnx_bytes(artifact, *, raw_inputs: bool = False, lowering: str = "gather",
                     opset: int = DEFAULT_OPSET, pack_bits: bool = False, lowering_batch: int | None = None,
                     lowering_timings: str | None = None) -> bytes:
    """The serialized file of :func:`build_onnx_model` (what ``onnx.save_model`` writes).
    ``lowering_batch`` is read by the verifier (``--lowering auto``), not here."""
    return build_onnx_model(artifact, raw_inputs=raw_inputs, lowering=lowering, opset=opset,
                            pack_bits=pack_bits, lowering_timings=lowering_timings).SerializeToString()


def check_auto_resolved(lowering: str) -> None:
    """ExportError for ``lowering="auto"`` reaching an exporter: timing candidates means running
    files, which only the verifier does."""
    if lowering == AUTO_LOWERING:
        raise ExportError("--lowering auto times the candidate files in their runtime, which an exporter never "
                          "does: export with bnc-export or bnc_deploy.verify.export_file, which choose the lowering "
                          "and pass it on")


def lowering_auto_metadata(lowering_timings: str | None) -> dict:
    """``{"lowering_auto": record}`` from the verifier's JSON record, or ``{}``."""
    if lowering_timings is None:
        return {}
    try:
        record = json.loads(lowering_timings)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ExportError(f"lowering_timings is not a JSON record ({exc})") from None
    if not isinstance(record, dict):
        raise ExportError("lowering_timings must be a JSON object")
    return {"lowering_auto": record}


register_exporter(
    "bnc", "onnx", build_onnx_bytes, extension=".onnx", runtime="onnxruntime",
    description="gather + reduce-sum graph, bit-exact for quantized models",
    options=[
        ONNX_LOWERING,
        RAW_INPUTS,
        Option("opset", "int", DEFAULT_OPSET, help=f"ONNX opset (default: {DEFAULT_OPSET})"),
        Option("pack_bits", "bool", False, help="quantized models: store the B-bit codes (BN tables, DNN weights) "
                                                "as bit-planes instead of one byte each"),
        LOWERING_BATCH,
        LOWERING_TIMINGS,
    ])
