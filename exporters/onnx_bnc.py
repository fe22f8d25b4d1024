"""ONNX exporter for Bayesian network classifier artifacts (naive Bayes and TAN).

Contract of the exported graph (one converter covers both structures; NB is TAN without parents)
------------------------------------------------------------------------------------------------
Input
    ``x``: int64 [N, D] feature codes (dynamic N); with ``raw_inputs=True`` float32 [N, D] raw
    values, binned in the graph as ``code_i = sum_k (x_i > t_ik)`` with the float32 thresholds of
    ``formats.bnc.float32_thresholds`` (equal to ``searchsorted(cuts, x, side="left")``).
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
        to the stacked table *before* the lookup (11 nodes at run time for NB).

Computation (``lowering="gather"``, the default: fewest nodes, fastest per call)
    ``row_i = base_i + (x_i + 1) * W_pa + (x_pa(i) + 1)`` in the padded layout (TAN parent values
    by Gather on axis 1), ``log_joint = ReduceSum_i Gather(T, row)`` and ``label = ArgMax`` (first
    maximum), with ``IsNaN`` of the first score and ``Where`` for ``-1``. The table ``T`` is built
    *inside the graph* from the stored tables: the class prior is added to the rows of feature 0
    (every row reads exactly one of them), then the NaN rows are laid out. These nodes have constant
    inputs only, so onnxruntime folds them once when the session is created; at run time the graph
    is 8 nodes for NB (Clip, Add, Gather, ReduceSum, ArgMax, Gather, IsNaN, Where) and 12 for
    TAN. At batch 1 onnxruntime's cost is per node, so this is the fastest exact NB graph
    (``python benchmarks/bench_onnx_lowerings.py`` times the candidates); it stays the default.
``lowering="gather-grouped"`` (fastest on large batches; ``exporters/_onnx_bnc_grouped.py``)
    Features are merged in groups (``feature_groups`` in the metadata) whose table is indexed by
    the clipped codes ``-1 .. |X_i|`` of its axes (``group_axes``: the members and their TAN
    parents; a group grows, in depth-first order of the structure, while the product of its axis
    sizes ``|X_i| + 2`` stays within ``MAX_GROUP_ROWS``; above ``PER_FEATURE_AXES_MAX_D`` features
    every axis has ``K + 2`` values and one ``Clip(-1, K)`` is the guard): it holds, for every
    combination of those codes, the sum of the members' rows (NaN if any code is invalid), built
    at load time by broadcast ``Add`` of the padded blocks. A row then needs ``G`` lookups instead of ``D``
    (letter NB: 5 instead of 16). Per row: ``Max(float(x), -1)`` and ``Min`` with the ``|X_i|``
    (the guard: out-of-range codes land on NaN rows), and one Gemm for the mixed-radix group rows
    (exact: small integers in float32, int32 indices); the looked-up rows are added by one ``Sum``
    (up to ``SUM_MAX_GROUPS`` groups) or one Gather + ReduceSum (more groups). The price is
    table memory at run time (``table_bytes_at_load`` in the metadata; letter NB 1.0 MB instead
    of 27 KB; never on disk), a larger file (a few load-time
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
``pack_words=True`` (``gather`` and ``gather-grouped``, quantized only; ``_onnx_bnc_grouped``)
    Each table row's C codes (``gather``: one group per feature) become ``W`` float64 words of
    ``b``-bit fields (metadata ``packed_words``, ``field_bits``; folded at load); a row looks its
    ``G * W`` words up with GatherElements, sums them over the groups and unpacks the fields (power-of-two scalings and
    Floor: exact, every partial sum an integer below ``2**53``); ``log_joint`` is the same float32
    as the other lowerings'. Fastest of our graphs at large batches (``--lowering auto`` tries it).
    The graph profiler (``bnc_deploy.profiling.graph_count``) has no rule for ``Floor`` and reports
    such a graph as not completely counted.
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
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._bnc_options import (
    LOWERING_BATCH,
    LOWERING_TIMINGS,
    ONNX_LOWERING,
    PACK_WORDS,
    RAW_INPUTS,
    RAW_INPUTS_NEED_DISCRETIZER,
    codes_of,
)
from bnc_deploy.exporters._onnx_bnc_grouped import feature_groups, grouped_sum, packed_lookups, packing_of
from bnc_deploy.exporters._onnx_graph import (
    DEFAULT_OPSET,
    IR_VERSION_FOR_OPSET,
    MIN_OPSET,
    GraphBuilder,
    PaddedLayout,
    bnc_model,
    pack_bitplanes,
    set_export_metadata,
)
from bnc_deploy.exporters.base import Option, Refusal, float_model, register_exporter
from bnc_deploy.formats.bnc import (
    AUTO_LOWERING,
    ONNX_LOWERINGS,
    OUTPUT_LOG_JOINT,
    check_lowering,
    export_metadata,
    lookup_constants,
    padded_thresholds,
)
from bnc_deploy.formats.metadata import INPUT_NAME, INVALID_LABEL, OUTPUT_LABEL
from bnc_deploy.limits import FLOAT32_EXACT_LIMIT

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact

#: Largest folded float32 table (bytes) of the padded ("clip") layout; above it the gather lowering
#: keeps the compact table and the "where" guard. 16 MiB: every paper model is far below (letter
#: TAN: 0.4 MiB), a model with cardinalities in the hundreds is not.
PADDED_TABLE_LIMIT = 16 * 2**20


def padded_layout(artifact: BNCArtifact) -> PaddedLayout | None:
    """The padded ("clip") layout of ``artifact``, or None when its folded table would exceed
    :data:`PADDED_TABLE_LIMIT` (read at each call: a test or benchmark may lower it)."""
    return PaddedLayout.of(artifact, PADDED_TABLE_LIMIT)


def build_onnx_model(
    artifact: BNCArtifact,
    *,
    raw_inputs: bool = False,
    lowering: str = "gather",
    opset: int = DEFAULT_OPSET,
    pack_bits: bool = False,
    lowering_timings: str | None = None,
    pack_words: bool = False,
) -> onnx.ModelProto:
    """The ONNX ModelProto of :func:`build_onnx_bytes`, checked with ``onnx.checker`` (full_check).

    ``lowering_timings``: the JSON record of ``--lowering auto`` (the verifier's measurements that
    chose ``lowering``), stored as metadata ``lowering_auto``."""
    _check_options(artifact, lowering, opset, pack_bits)
    packing = packing_of(artifact, lowering, pack_words)
    g = GraphBuilder()
    g.const("axis1", np.array([1], dtype=np.int64))
    g.const("invalid_label", np.array(INVALID_LABEL, dtype=np.int64))
    extra = _log_joint(g, artifact, lowering, raw_inputs, pack_bits, packing)
    _label(g, OUTPUT_LOG_JOINT)

    x_type = TensorProto.FLOAT if raw_inputs else TensorProto.INT64
    used = {name for node in g.nodes for name in node.input}  # shared constants some layouts skip
    g.initializers = [t for t in g.initializers if t.name in used]
    model = bnc_model(
        g, artifact, x_type, [helper.make_opsetid("", opset)], IR_VERSION_FOR_OPSET.get(opset, onnx.IR_VERSION)
    )
    meta = export_metadata(
        artifact,
        format="onnx",
        lowering=lowering,
        raw_inputs=raw_inputs,
        input_dtype="int64",
        opset=opset,
        extra={
            "n_nodes": len(g.nodes),
            "table_storage": f"bitplanes{codes_of(artifact).quantizer.total_bits}"
            if pack_bits
            else ("uint8" if artifact.is_quantized else "float32"),
            # every lowering sums integer multiples of the step exactly (see above)
            "exact": artifact.is_quantized,
            **extra,
            **lowering_auto_metadata(lowering_timings),
        },
    )
    set_export_metadata(model, meta)
    onnx.checker.check_model(model, full_check=True)
    return model


def _check_options(artifact: BNCArtifact, lowering: str, opset: object, pack_bits: bool) -> None:
    """ExportError for what :func:`build_onnx_model` cannot export (before any node is built)."""
    check_auto_resolved(lowering)
    check_lowering(lowering, ONNX_LOWERINGS)
    if pack_bits and not artifact.is_quantized:
        raise ExportError("pack_bits needs a quantized model (float tables have no integer codes to pack)")
    if isinstance(opset, bool) or not isinstance(opset, int) or opset < MIN_OPSET:
        raise ExportError(f"opset must be an integer >= {MIN_OPSET}, got {opset!r}")
    if artifact.n_features == 0:
        raise ExportError("cannot export a model without features")
    if (
        artifact.is_quantized
        and (artifact.n_features + 1) * codes_of(artifact).quantizer.max_code >= FLOAT32_EXACT_LIMIT
    ):
        raise ExportError(
            f"{artifact.n_features} features at {codes_of(artifact).quantizer.total_bits} bits can sum to "
            f"{FLOAT32_EXACT_LIMIT} steps or more, beyond exact float32 accumulation"
        )


def _log_joint(
    g: GraphBuilder,
    artifact: BNCArtifact,
    lowering: str,
    raw_inputs: bool,
    pack_bits: bool,
    packing: tuple[int, int, int] | None = None,
) -> dict[str, Any]:
    """The nodes up to ``log_joint`` [N, C] for ``lowering``. Returns the lowering's metadata:
    ``index_guard``, ``lookups_per_row``, ``table_bytes_at_load`` (the float32 table onnxruntime
    builds when the session is created: folded, not in the file) and ``gather-grouped``'s groups."""
    layout = padded_layout(artifact)
    groups = None
    if lowering == "gather-grouped":
        groups = feature_groups(artifact, layout)  # ExportError if it cannot
    table = _lookup_table(g, artifact, with_nan_row=lowering != "onehot-fc", pack_bits=pack_bits)
    extra: dict[str, Any] = {}
    if lowering == "onehot-fc" or layout is None:  # compact table, "where" guard
        if packing is not None:
            raise ExportError("--pack-words needs the padded table layout; these cardinalities make it too large")
        codes, ok = _raw_codes(g, artifact) if raw_inputs else _code_range(g, artifact)
        rows = _row_indices(g, artifact, codes, ok)
        if lowering == "gather":
            picked = g.op("Gather", [table, rows], axis=0)  # [N, D, C]
            g.op("ReduceSum", [picked, "axis1"], OUTPUT_LOG_JOINT, keepdims=0)
        else:
            _onehot_fc(g, artifact, table, rows)
        table_rows = artifact.n_rows + (lowering == "gather")
        extra["index_guard"] = "where"
    else:  # padded table, "clip" guard
        if raw_inputs:
            codes = raw_codes_or_minus_one(g, artifact)
        elif lowering == "gather":
            codes = _clipped_codes(g, layout)
        else:  # gather-grouped clips after its cast to float32 (see grouped_sum)
            codes = INPUT_NAME
        padded = _padded_table(g, artifact, table, layout)
        if lowering == "gather" and packing is not None:  # one "group" per feature: rows [D, N]
            rows = g.op("Transpose", [_padded_rows(g, artifact, codes, layout)], perm=[1, 0])
            rows = g.op("Cast", [rows], to=TensorProto.INT32)  # as grouped_sum's rows (< 2**24)
            packed_lookups(g, artifact, padded, layout.n_rows, rows, packing)
            table_rows = layout.n_rows
        elif lowering == "gather":
            picked = g.op("Gather", [padded, _padded_rows(g, artifact, codes, layout)], axis=0)  # [N, D, C]
            g.op("ReduceSum", [picked, "axis1"], OUTPUT_LOG_JOINT, keepdims=0)
            table_rows = layout.n_rows
        else:
            assert groups is not None  # lowering == "gather-grouped"
            _, table_rows = grouped_sum(g, artifact, padded, codes, layout, groups, packing)
            extra["feature_groups"] = [grp.members for grp in groups]
            extra["group_axes"] = [grp.axes for grp in groups]
        extra["index_guard"] = "clip"
        if packing is not None:
            extra["packed_words"], extra["field_bits"] = packing[2], packing[0]
    extra["lookups_per_row"] = len(groups) if groups else artifact.n_features
    extra["table_bytes_at_load"] = (
        int(table_rows * artifact.n_classes * 4)
        if lowering != "onehot-fc"
        else int(artifact.n_rows * (artifact.n_classes + 1) * 4)
    )
    return extra


# -- graph pieces -----------------------------------------------------------------------------------
def _lookup_table(g: GraphBuilder, artifact: BNCArtifact, *, with_nan_row: bool, pack_bits: bool = False) -> str:
    """The float32 lookup table T [n_rows (+1), C], computed in-graph from the stored tables.

    Quantized: ``T = -code * 2**-B_F`` (exact), from the uint8 ``table`` (or bit-planes) and
    ``class_prior`` initializers. The prior is added to feature 0's rows. All inputs are
    constants, so runtimes fold this once at load time.
    """
    first = int(artifact.rows_per_feature[0])
    if artifact.is_quantized:
        g.const("class_prior", codes_of(artifact).prior)
        g.const("neg_step", np.array(-codes_of(artifact).quantizer.step, dtype=np.float32))  # -2**-B_F: exact
        if pack_bits:
            table = _unpack_bitplanes(g, artifact)
        else:
            g.const("table", codes_of(artifact).table)  # uint8, as in the artifact
            table = g.op("Mul", [g.op("Cast", ["table"], to=TensorProto.FLOAT), "neg_step"])
        prior = g.op("Mul", [g.op("Cast", ["class_prior"], to=TensorProto.FLOAT), "neg_step"])
    else:
        assert artifact.table_logp is not None and artifact.class_logp is not None  # a float model
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
        parts.append(g.op("Expand", ["nan_f", "nan_row_shape"]))  # [1, C], folded; no C floats on disk
    return g.op("Concat", parts, axis=0) if len(parts) > 1 else parts[0]


def _unpack_bitplanes(g: GraphBuilder, artifact: BNCArtifact) -> str:
    """In-graph inverse of :func:`pack_bitplanes`, scaled: float32 [n_rows, C] of ``-code * step``."""
    bits = codes_of(artifact).quantizer.total_bits
    n = codes_of(artifact).table.size
    g.const("table_bitplanes", pack_bitplanes(codes_of(artifact).table, bits))  # [B, M]
    g.const("bit_shifts", np.arange(7, -1, -1, dtype=np.uint8))  # MSB first, as packbits
    g.const("two_u8", np.array(2, dtype=np.uint8))
    g.const("plane_shape", np.array([bits, -1], dtype=np.int64))
    g.const("code_begin", np.array([0], dtype=np.int64))
    g.const("code_end", np.array([n], dtype=np.int64))
    g.const("plane_axis", np.array([2], dtype=np.int64))
    # -step * 2**b: MatMul over planes then gives -code * step exactly (sums of <= 8 powers of two).
    g.const("plane_weights", (-codes_of(artifact).quantizer.step * 2.0 ** np.arange(bits)).astype(np.float32)[None, :])
    g.const("table_shape", np.array(codes_of(artifact).table.shape, dtype=np.int64))
    shifted = g.op(
        "BitShift", [g.op("Unsqueeze", ["table_bitplanes", "plane_axis"]), "bit_shifts"], direction="RIGHT"
    )  # [B, M, 8]
    bit_values = g.op("Cast", [g.op("Mod", [shifted, "two_u8"])], to=TensorProto.FLOAT)
    planes = g.op("Slice", [g.op("Reshape", [bit_values, "plane_shape"]), "code_begin", "code_end", "axis1"])
    return g.op("Reshape", [g.op("MatMul", ["plane_weights", planes]), "table_shape"])  # [1, n] -> [R, C]


def _code_range(g: GraphBuilder, artifact: BNCArtifact) -> tuple[str, str]:
    """Codes input: (codes int64 [N, D], ok bool [N, D]: ``0 <= x_i < |X_i|``)."""
    g.const("zero", np.array(0, dtype=np.int64))
    g.const("cardinalities", artifact.cardinalities.astype(np.int64))
    ok = g.op("And", [g.op("GreaterOrEqual", [INPUT_NAME, "zero"]), g.op("Less", [INPUT_NAME, "cardinalities"])])
    return INPUT_NAME, ok


def _raw_codes(g: GraphBuilder, artifact: BNCArtifact) -> tuple[str, str]:
    """Raw float32 input: (codes int64 [N, D], ok bool [N, D]: value is finite).

    Finite values always bin into ``0 .. |X_i| - 1`` (the FLT_MAX padding is never exceeded), so
    finiteness is the whole check; ``|x| <= FLT_MAX`` is False for NaN and +-inf.
    """
    thresholds, _ = padded_thresholds(artifact)  # [D, K] float32
    g.const("cut_thresholds", thresholds)
    g.const("axis2", np.array([2], dtype=np.int64))
    g.const("float32_max", np.array(np.finfo(np.float32).max, dtype=np.float32))
    ok = g.op("LessOrEqual", [g.op("Abs", [INPUT_NAME]), "float32_max"])
    above = g.op("Greater", [g.op("Unsqueeze", [INPUT_NAME, "axis2"]), "cut_thresholds"])  # [N, D, K]
    codes = g.op("ReduceSum", [g.op("Cast", [above], to=TensorProto.INT64), "axis2"], keepdims=0)
    return codes, ok


def _row_indices(g: GraphBuilder, artifact: BNCArtifact, codes: str, ok: str) -> str:
    """Stacked-table rows int64 [N, D]; invalid entries go to row ``n_rows`` (the NaN/zero row).

    The row index is computed from the raw codes and then *replaced* (Where) wherever the code is
    invalid, so an out-of-range value never selects a row, in its own block or another's. TAN: an
    entry is also invalid when its parent's value is.
    """
    c = lookup_constants(artifact)
    g.const("row_offsets", c["offsets"])
    g.const("invalid_row", np.array(artifact.n_rows, dtype=np.int64))
    if artifact.structure == "nb":  # strides all 1, no parent term
        rows = g.op("Add", [codes, "row_offsets"])
    else:
        # Features without a parent "gather" themselves for validity; their parent value is zeroed.
        g.const(
            "parent_or_self",
            np.where(artifact.parents >= 0, artifact.parents, np.arange(artifact.n_features)).astype(np.int64),
        )
        g.const("parent_strides", c["strides"])
        g.const("has_parent", c["has_parent"])
        ok = g.op("And", [ok, g.op("Gather", [ok, "parent_or_self"], axis=1)])
        parent_values = g.op("Mul", [g.op("Gather", [codes, "parent_or_self"], axis=1), "has_parent"])
        own = g.op("Add", [g.op("Mul", [codes, "parent_strides"]), "row_offsets"])
        rows = g.op("Add", [own, parent_values])
    return g.op("Where", [ok, rows, "invalid_row"])


def _clipped_codes(g: GraphBuilder, layout: PaddedLayout) -> str:
    """Codes input clipped into ``-1 .. K``: the one guard node (invalid values land on NaN rows)."""
    g.const("code_low", np.array(-1, dtype=np.int64))
    g.const("code_high", np.array(layout.max_code, dtype=np.int64))
    return g.op("Clip", [INPUT_NAME, "code_low", "code_high"])


def raw_codes_or_minus_one(g: GraphBuilder, artifact: BNCArtifact) -> str:
    """Raw input binned in-graph; non-finite values get code -1 (their feature's NaN row).

    Public for the skl2onnx converter of the discretizer (:mod:`bnc_deploy.sklearn.onnx`), which
    emits this same binning in front of the classifier's graph."""
    codes, ok = _raw_codes(g, artifact)
    g.const("minus_one", np.array(-1, dtype=np.int64))
    return g.op("Where", [ok, codes, "minus_one"])


def _padded_table(g: GraphBuilder, artifact: BNCArtifact, table: str, layout: PaddedLayout) -> str:
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
        offsets = g.op("Unsqueeze", ["row_offsets", "axis1"])  # [D, 1]
        rows = g.op("Add", [offsets, pad_codes])  # [D, W]
        valid = g.op(
            "And",
            [
                g.op("GreaterOrEqual", [pad_codes, "zero"]),
                g.op("Less", [pad_codes, g.op("Unsqueeze", ["cardinalities", "axis1"])]),
            ],
        )
    else:
        g.const("axes12", np.array([1, 2], dtype=np.int64))
        g.const("axes02", np.array([0, 2], dtype=np.int64))
        g.const("axes01", np.array([0, 1], dtype=np.int64))
        g.const("parent_strides", c["strides"])
        g.const("has_parent", c["has_parent"])
        per_feature = {
            k: g.op("Unsqueeze", [k, "axes12"])
            for k in ("row_offsets", "cardinalities", "parent_strides", "has_parent")
        }  # [D, 1, 1]
        own = g.op("Unsqueeze", [pad_codes, "axes02"])  # [1, W, 1]
        parent = g.op("Mul", [g.op("Unsqueeze", [pad_codes, "axes01"]), per_feature["has_parent"]])  # [D, 1, W]
        own_rows = g.op("Add", [per_feature["row_offsets"], g.op("Mul", [own, per_feature["parent_strides"]])])
        rows = g.op("Add", [own_rows, parent])  # [D, W, W]
        own_ok = g.op("And", [g.op("GreaterOrEqual", [own, "zero"]), g.op("Less", [own, per_feature["cardinalities"]])])
        parent_ok = g.op(
            "And", [g.op("GreaterOrEqual", [parent, "zero"]), g.op("Less", [parent, per_feature["parent_strides"]])]
        )
        valid = g.op("And", [own_ok, parent_ok])
    pad_map = g.op("Reshape", [g.op("Where", [valid, rows, "invalid_row"]), "flat_shape"])
    return g.op("Gather", [table, pad_map], axis=0)


def _padded_rows(g: GraphBuilder, artifact: BNCArtifact, codes: str, layout: PaddedLayout) -> str:
    """Rows int64 [N, D] of the padded table for codes already in ``-1 .. K``."""
    bases = g.small_ints("pad_bases", layout.bases(artifact))
    if artifact.structure == "nb":  # W_pa = 1, no parent term
        return g.op("Add", [codes, bases])
    g.const(
        "parent_or_self",
        np.where(artifact.parents >= 0, artifact.parents, np.arange(artifact.n_features)).astype(np.int64),
    )
    g.const("has_parent", layout.has_parent)
    g.const("pad_parent_width", np.array(layout.parent_width, dtype=np.int64))
    parent = g.op("Mul", [g.op("Gather", [codes, "parent_or_self"], axis=1), "has_parent"])
    own = g.op("Mul", [codes, "pad_parent_width"])
    return g.op("Add", [g.op("Add", [own, parent]), bases])


def _onehot_fc(g: GraphBuilder, artifact: BNCArtifact, table: str, rows: str) -> str:
    """log_joint [N, C] = stacked one-hot [N, n_rows] @ [T | 1]; rows with an invalid entry -> NaN."""
    d, c = artifact.n_features, artifact.n_classes
    g.const("onehot_depth", np.array(artifact.n_rows, dtype=np.int64))  # row n_rows -> all-zero one-hot
    g.const("onehot_values", np.array([0.0, 1.0], dtype=np.float32))
    g.const("ones_column", np.ones((artifact.n_rows, 1), dtype=np.float32))
    weights = g.op("Concat", [table, "ones_column"], axis=1)  # [n_rows, C + 1], folded
    onehot = g.op("OneHot", [rows, "onehot_depth", "onehot_values"], axis=-1)  # [N, D, n_rows]
    product = g.op("MatMul", [g.op("ReduceSum", [onehot, "axis1"], keepdims=0), weights])  # [N, C + 1]
    g.const("cls_begin", np.array([0], dtype=np.int64))
    g.const("cls_end", np.array([c], dtype=np.int64))
    g.const("count_end", np.array([c + 1], dtype=np.int64))
    g.const("n_features", np.array(float(d), dtype=np.float32))
    g.const("zero_f", np.array(0.0, dtype=np.float32))
    g.const("nan_f", np.array(np.nan, dtype=np.float32))
    scores = g.op("Slice", [product, "cls_begin", "cls_end", "axis1"])
    count = g.op("Slice", [product, "cls_end", "count_end", "axis1"])  # valid features per row, exact
    penalty = g.op("Where", [g.op("Equal", [count, "n_features"]), "zero_f", "nan_f"])  # [N, 1]
    return g.op("Add", [scores, penalty], OUTPUT_LOG_JOINT)


def _label(g: GraphBuilder, log_joint: str) -> None:
    """label [N] = first ArgMax of log_joint, or -1 where the row is NaN (invalid)."""
    g.const("class0", np.array(0, dtype=np.int64))
    best = g.op("ArgMax", [log_joint], axis=1, keepdims=0, select_last_index=0)
    invalid = g.op("IsNaN", [g.op("Gather", [log_joint, "class0"], axis=1)])
    g.op("Where", [invalid, "invalid_label", best], OUTPUT_LABEL)


def build_onnx_bytes(
    artifact: BNCArtifact,
    *,
    raw_inputs: bool = False,
    lowering: str = "gather",
    opset: int = DEFAULT_OPSET,
    pack_bits: bool = False,
    lowering_batch: int | None = None,
    lowering_timings: str | None = None,
    pack_words: bool = False,
) -> bytes:
    """The serialized file of :func:`build_onnx_model` (what ``onnx.save_model`` writes).
    ``lowering_batch`` is read by the verifier (``--lowering auto``), not here."""
    data: bytes = build_onnx_model(
        artifact,
        raw_inputs=raw_inputs,
        lowering=lowering,
        opset=opset,
        pack_bits=pack_bits,
        lowering_timings=lowering_timings,
        pack_words=pack_words,
    ).SerializeToString()
    return data


def check_auto_resolved(lowering: str) -> None:
    """ExportError for ``lowering="auto"`` reaching an exporter: timing candidates means running
    files, which only the verifier does."""
    if lowering == AUTO_LOWERING:
        raise ExportError(
            "--lowering auto times the candidate files in their runtime, which an exporter never "
            "does: export with bnc-export or bnc_deploy.verify.export_file, which choose the lowering "
            "and pass it on"
        )


def lowering_auto_metadata(lowering_timings: str | None) -> dict[str, Any]:
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
    "bnc",
    "onnx",
    build_onnx_bytes,
    extension=".onnx",
    runtime="onnxruntime",
    description="gather + reduce-sum graph, bit-exact for quantized models",
    options=[
        ONNX_LOWERING,
        RAW_INPUTS,
        Option("opset", "int", DEFAULT_OPSET, help=f"ONNX opset (default: {DEFAULT_OPSET})"),
        Option(
            "pack_bits",
            "bool",
            False,
            help="quantized models: store the B-bit codes (BN tables, DNN weights) "
            "as bit-planes instead of one byte each",
        ),
        PACK_WORDS,
        LOWERING_BATCH,
        LOWERING_TIMINGS,
    ],
    refusals=[
        Refusal(
            "--pack-bits stores the B-bit integer codes as bit-planes; a float model's tables have no codes",
            r"pack_bits needs a quantized model",
            options={"pack_bits": True},
            models=float_model,
        ),
        RAW_INPUTS_NEED_DISCRETIZER,
        Refusal(
            "--pack-words packs integer codes into float64 words; a float model's tables have no codes",
            r"--pack-words packs integer codes",
            options={"pack_words": True},
            models=float_model,
        ),
    ],
)
