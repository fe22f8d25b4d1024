"""The ``gather-grouped`` lowering of the ONNX BN exporter (``exporters/onnx_bnc.py``, whose module
docstring states what it computes, why it is exact, and what it costs).

Features are merged in groups whose table, indexed by the clipped codes of the group's axes, holds
the sum of the members' rows (built at load time from the padded table); a row then needs one
lookup per group instead of one per feature. This module chooses the groups
(:func:`feature_groups`) and writes the graph that builds the group tables and sums the looked-up
rows (:func:`grouped_sum`).

With ``pack_words`` (quantized models, :func:`word_packing`, :func:`packed_lookups`) a group row's C
codes are held as ``W`` float64 words of ``k`` fields of ``b`` bits (``b`` holds ``(D + 1) * (2^B -
1)``, ``k * b <= 53``), built at load time; a row looks up ``G * W`` words with GatherElements
(onnxruntime's Gather has a cost per index several times GatherElements' per element), sums
them over the groups (no field carries into the next, so the sum of words is the word of the sums,
exactly) and unpacks each class's field with power-of-two scalings and Floor, exact in float64.
Invalid codes look up NaN words, so their rows stay NaN.

A private helper module (the leading underscore keeps the exporter registry from treating it as
an exporter); it builds nothing on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto, helper

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._onnx_graph import GraphBuilder, PaddedLayout
from bnc_deploy.formats.bnc import OUTPUT_LOG_JOINT
from bnc_deploy.formats.metadata import INPUT_NAME
from bnc_deploy.limits import FLOAT32_EXACT_LIMIT

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact

#: Largest folded table (bytes) of ``gather-grouped``: groups shrink (3 -> 2 features) to fit it.
GROUPED_TABLE_LIMIT = 8 * 2**20
#: Rows of one merged group table (the product of its axes' ``|X_i| + 2``): 4096 rows of C floats
#: stay cache-friendly (letter: 106 KB) and give letter NB 5 groups of 3-4 features.
MAX_GROUP_ROWS = 4096
#: Largest D whose group axes are sized per feature (see ``_per_feature_axes``).
PER_FEATURE_AXES_MAX_D = 64
#: Up to this many groups are looked up one by one and added by one ``Sum`` (letter: 6 groups,
#: measured fastest); more groups use one Gather and a ReduceSum (usps: 86 groups).
SUM_MAX_GROUPS = 8


class FeatureGroup:
    """Features whose tables are merged: ``members`` (looked up together) and ``axes`` (the
    features whose codes index the merged table: the members and their parents, in order)."""

    def __init__(self, members: list[int], axes: list[int]) -> None:
        self.members, self.axes = members, axes

    def rows(self, widths: Sequence[int] | np.ndarray) -> int:
        return int(np.prod([widths[a] for a in self.axes]))


def feature_groups(artifact: BNCArtifact, layout: PaddedLayout | None) -> list[FeatureGroup]:
    """Groups whose merged tables have at most :data:`MAX_GROUP_ROWS` rows and fit the limit.

    A feature's axis has ``|X_i| + 2`` values (clipped codes ``-1 .. |X_i|``). Features are taken
    in depth-first order of the structure (naive Bayes: index order), so a TAN child joins its
    parent's group; a feature joins the open group while the product of the group's axis sizes
    (members and their parents) stays within the row budget, else it opens a group (alone it
    may exceed the budget: a TAN lookup needs its two axes). The budget halves until all tables
    fit :data:`GROUPED_TABLE_LIMIT` bytes.
    """
    if layout is None:
        raise ExportError(
            f"--lowering gather-grouped: cardinalities up to {int(artifact.cardinalities.max())} "
            "make the padded tables too large; use the default gather lowering"
        )
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
                groups.append(FeatureGroup([f], need))  # own axis first: no transpose
        rows = sum(grp.rows(widths) for grp in groups)
        if rows * artifact.n_classes * 4 <= GROUPED_TABLE_LIMIT or all(len(grp.members) == 1 for grp in groups):
            if rows >= FLOAT32_EXACT_LIMIT:  # the row index is computed in float32
                raise ExportError(f"--lowering gather-grouped: {rows} table rows exceed float32 integers")
            return groups
        budget //= 2


def _per_feature_axes(artifact: BNCArtifact) -> bool:
    """Whether group axes have ``|X_i| + 2`` values (else ``K + 2`` for all). Per-feature axes make
    smaller tables (letter NB: 5 groups instead of 6) but need a per-feature upper clip, done by a
    D x D Gemm (scalar ops only); above :data:`PER_FEATURE_AXES_MAX_D` features that Gemm costs more
    than it saves (usps, D = 256), and one Clip to ``-1 .. K`` is the guard."""
    return artifact.n_features <= PER_FEATURE_AXES_MAX_D


def _axis_sizes(artifact: BNCArtifact, layout: PaddedLayout) -> list[int]:
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


def grouped_sum(
    g: GraphBuilder,
    artifact: BNCArtifact,
    padded: str,
    codes: str,
    layout: PaddedLayout,
    groups: list[FeatureGroup],
    packing: tuple[int, int, int] | None = None,
) -> tuple[str, int]:
    """log_joint [N, C] of ``gather-grouped`` and the folded table's rows.

    Load time (:func:`_group_tables`): the padded table is split into the D feature blocks and a
    group's table is the broadcast sum of its members' blocks. Run time: the codes are clipped per
    feature to ``-1 .. |X_i|`` (:func:`_grouped_codes`) and the group row is the mixed-radix number
    ``base_j + sum_u (x_u + 1) * stride_u``, one Gemm in float32 (exact small integers); the
    looked-up rows are added (:func:`_summed_lookups`).
    """
    table, strides, bases, n_rows = _group_tables(g, artifact, padded, layout, groups)
    strides_name = _group_strides(g, groups, strides.T)
    codes_f, bases = _grouped_codes(g, artifact, codes, layout, strides, bases)
    g.const("group_bases", bases.astype(np.float32))  # exact: < 2**24
    # Rows transposed, [G, N] = strides^T [G, D] x codes^T + bases (Gemm, transB): each group's rows
    # are contiguous for the Split and the Gathers. int32 (< 2**24): onnxruntime's Gather is ~15%
    # faster with int32 indices than with int64.
    rows = g.op(
        "Cast", [g.op("Gemm", [strides_name, codes_f, "group_bases"], transB=1)], to=TensorProto.INT32
    )  # [G, N]
    if packing is not None:
        return packed_lookups(g, artifact, table, n_rows, rows, packing), n_rows
    return _summed_lookups(g, table, rows, len(groups)), n_rows


def _group_tables(
    g: GraphBuilder, artifact: BNCArtifact, padded: str, layout: PaddedLayout, groups: list[FeatureGroup]
) -> tuple[str, np.ndarray, np.ndarray, int]:
    """The folded group tables, stacked [sum of group rows, C], with the float32 strides [D, G]
    of the group rows, their bases [G, 1] (the ``+ 1`` shifts) and the stacked table's rows.

    The padded table is split into the D feature blocks [W, W_pa, C]; a group's table is the
    broadcast sum of its members' blocks (:func:`_member_part`) -> [prod W, C]."""
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
        total = None
        for i in grp.members:
            part = _member_part(g, grp, i, parents[i], blocks[i], widths, layout, c)
            total = part if total is None else g.op("Add", [total, part])  # folded: outer sums
        stride = 1
        for u in reversed(grp.axes):  # mixed radix, last axis fastest
            strides[u, j] = stride
            stride *= widths[u]
        n_rows = grp.rows(widths)
        assert total is not None  # a group has at least one member
        rows_shape = g.const(f"rows_{n_rows}x{c}", np.array([n_rows, c], dtype=np.int64))
        tables.append(g.op("Reshape", [total, rows_shape]))
        bases.append(start + strides[grp.axes, j].sum())  # the "+ 1" shifts
        start += n_rows
    table = g.op("Concat", tables, axis=0) if len(tables) > 1 else tables[0]
    return table, strides, np.array(bases, dtype=np.float64)[:, None], start


def _member_part(
    g: GraphBuilder,
    grp: FeatureGroup,
    i: int,
    parent_feature: int,
    block: str,
    widths: Sequence[int],
    layout: PaddedLayout,
    c: int,
) -> str:
    """Feature ``i``'s block reshaped onto its own (and its parent's) axis of ``grp``'s grid.

    NB: ``[W_a, 1, 1, C] + [1, W_b, 1, C] + [1, 1, W_c, C]`` summed by the caller. The block is cut
    to its own codes ``-1 .. |X_i|`` (``|X_i| + 2`` rows; its parent's likewise); a TAN block whose
    parent comes first in the group is transposed; a parentless block of a TAN model is its
    column 0, all its columns being equal."""
    k = len(grp.axes)
    own, parent = grp.axes.index(i), (grp.axes.index(parent_feature) if parent_feature >= 0 else None)
    # own codes -1 .. |X_i| (rows 0 .. |X_i| + 1 of the block), the parent's likewise;
    # a parentless block of a TAN model keeps column 0 (its columns are all equal)
    ends = [widths[i], widths[parent_feature] if parent is not None else 1]
    if ends != [layout.width, layout.parent_width]:  # else the whole block
        end = g.const("end_" + "x".join(map(str, ends)), np.array(ends, dtype=np.int64))
        block = g.op("Slice", [block, "begin00", end, "axes12"])  # [1, W_i, W_pa|1, C]
    if parent is not None and parent < own:  # parent axis first
        block = g.op("Transpose", [block], perm=[0, 2, 1, 3])
    dims = [widths[grp.axes[a]] if a in (own, parent) else 1 for a in range(k)] + [c]
    shape = g.const("shape_" + "x".join(map(str, dims)), np.array(dims, dtype=np.int64))
    return g.op("Reshape", [block, shape])


def _grouped_codes(
    g: GraphBuilder, artifact: BNCArtifact, codes: str, layout: PaddedLayout, strides: np.ndarray, bases: np.ndarray
) -> tuple[str, np.ndarray]:
    """The codes as float32 [N, D], clipped for the group rows, and the group rows' bases."""
    codes_f = g.op("Cast", [codes], to=TensorProto.FLOAT)
    if codes == INPUT_NAME and not _per_feature_axes(artifact):  # one bound K: one Clip
        g.const("code_low_f", np.array(-1, dtype=np.float32))
        g.const("code_high_f", np.array(layout.max_code, dtype=np.float32))
        codes_f = g.op("Clip", [codes_f, "code_low_f", "code_high_f"])
    elif codes == INPUT_NAME:
        # The guard of the codes input: clip each feature to -1 .. |X_i| (both are NaN rows of its
        # block when out of range), on float32 (onnxruntime's float Max/Min are vectorized; its
        # int64 Clip is 7x slower on letter's test set). The cast is monotonic and the bounds are
        # exact, so clip(float(x)) = float(clip(x)) for every int64 x, huge values included.
        # Min with the [D] bounds broadcast over [N, D]: cheaper than the identity Gemm that
        # shifted by -|X_i| for a scalar clip (benchmarks/bench_inference.py --runtimes
        # onnx-grouped, satimage).
        g.const("code_low_f", np.array(-1, dtype=np.float32))
        g.const("cards_f", artifact.cardinalities.astype(np.float32))
        codes_f = g.op("Min", [g.op("Max", [codes_f, "code_low_f"]), "cards_f"])
    return codes_f, bases


def _summed_lookups(g: GraphBuilder, table: str, rows: str, n_groups: int) -> str:
    """log_joint [N, C]: the group rows [G, N] looked up in ``table`` and added."""
    g.const("axis0", np.array([0], dtype=np.int64))
    if n_groups == 1 or n_groups > SUM_MAX_GROUPS:
        # many groups: one Gather [G, N, C] and a ReduceSum over the leading axis (per-node
        # overhead would dominate G separate lookups at small batches)
        return g.op("ReduceSum", [g.op("Gather", [table, rows], axis=0), "axis0"], OUTPUT_LOG_JOINT, keepdims=0)
    g.const("ones_g", np.ones(n_groups, dtype=np.int64))
    parts = [f"group_rows{j}" for j in range(n_groups)]
    g.nodes.append(helper.make_node("Split", [rows, "ones_g"], parts, axis=0))  # G x [1, N]
    # G separate [1, N, C] lookups added elementwise by one Sum: measured faster than one Gather
    # [G, N, C] + ReduceSum, whose reduction costs more than the sum itself.
    picked = [g.op("Gather", [table, p], axis=0) for p in parts]
    return g.op("Squeeze", [g.op("Sum", picked), "axis0"], OUTPUT_LOG_JOINT)


def _group_strides(g: GraphBuilder, groups: list[FeatureGroup], dense: np.ndarray) -> str:
    """The float32 [G, D] stride matrix of the group rows (``dense``), built in-graph from the
    groups' axis lists and per-axis strides: a dense matrix on disk would be G * D floats (usps:
    86 groups, 88 KB); these are about 3 small integers per group."""
    k = max(len(grp.axes) for grp in groups)
    axes = np.full((len(groups), k), -1, dtype=np.int64)  # -1: no axis (never equal)
    powers = np.zeros((len(groups), k), dtype=np.int64)
    for j, grp in enumerate(groups):
        axes[j, : len(grp.axes)] = grp.axes
        powers[j, : len(grp.axes)] = dense[j, grp.axes]
    g.const("axis2", np.array([2], dtype=np.int64))
    g.const("axis1", np.array([1], dtype=np.int64))
    hot = g.op(
        "Equal",
        [
            g.op("Unsqueeze", [g.small_ints("group_axes", axes), "axis2"]),
            g.small_ints("feature_index", np.arange(dense.shape[1])),
        ],
    )  # [G, k, D]
    scaled = g.op(
        "Mul",
        [
            g.op("Cast", [hot], to=TensorProto.FLOAT),
            g.op("Cast", [g.op("Unsqueeze", [g.small_ints("group_powers", powers), "axis2"])], to=TensorProto.FLOAT),
        ],
    )
    return g.op("ReduceSum", [scaled, "axis1"], keepdims=0)  # [G, D]


#: Exact integers of float64: a packed word's fields together stay below 2**53.
FLOAT64_WORD_BITS = 53


def word_packing(artifact: BNCArtifact) -> tuple[int, int, int] | None:
    """``(field bits b, classes per word k, words W)`` of the packed lookups, or None (float model).

    A class's summed codes (the prior is in feature 0's rows) are at most ``(D + 1) * (2^B - 1)``, which ``b`` bits
    hold; ``k`` fields of ``b`` bits fit the 53 bits of a float64 integer, so the sum of looked-up
    words never carries from one field into the next and stays exact."""
    if not artifact.is_quantized or artifact.quantizer is None:
        return None
    bits = int((artifact.n_features + 1) * artifact.quantizer.max_code).bit_length()
    per_word = FLOAT64_WORD_BITS // bits
    words = -(-artifact.n_classes // per_word)
    return bits, -(-artifact.n_classes // words), words


def packing_of(artifact: BNCArtifact, lowering: str, pack_words: bool) -> tuple[int, int, int] | None:
    """``pack_words``' packing (:func:`word_packing`), None without it; ExportError where it does
    not apply (another lowering, a float model)."""
    if not pack_words:
        return None
    if lowering not in ("gather", "gather-grouped"):
        raise ExportError(f"--pack-words packs the table rows of --lowering gather or gather-grouped, not {lowering}")
    packing = word_packing(artifact)
    if packing is None:
        raise ExportError("--pack-words packs integer codes; a float model's tables have none")
    return packing


def packed_lookups(
    g: GraphBuilder, artifact: BNCArtifact, table: str, n_rows: int, rows: str, packing: tuple[int, int, int]
) -> str:
    """log_joint [N, C] from packed float64 words: each table row's C codes as W words of k
    b-bit fields (built at load), looked up with GatherElements (one element per word: onnxruntime's
    Gather pays per index, GatherElements per element), summed over the groups, unpacked exactly."""
    bits, per_word, words = packing
    c = artifact.n_classes
    q = artifact.quantizer
    assert q is not None
    step = float(q.step)
    # load time: codes (float64, NaN rows stay NaN), padded to W * k classes, packed by one MatMul
    g.const("to_codes_f64", np.array(-1.0 / step, dtype=np.float64))
    codes = g.op("Mul", [g.op("Cast", [table], to=TensorProto.DOUBLE), "to_codes_f64"])  # [R, C]
    g.const("class_pads", np.array([0, 0, 0, words * per_word - c], dtype=np.int64))
    if words * per_word > c:
        codes = g.op("Pad", [codes, "class_pads"])
    g.const("word_fields_shape", np.array([n_rows, words, per_word], dtype=np.int64))
    g.const("field_scales", (2.0 ** (bits * np.arange(per_word)))[:, None])  # [k, 1]
    packed = g.op("MatMul", [g.op("Reshape", [codes, "word_fields_shape"]), "field_scales"])  # [R, W, 1]
    g.const("flat_shape", np.array([-1], dtype=np.int64))
    data = g.op("Reshape", [g.op("Transpose", [packed], perm=[1, 0, 2]), "flat_shape"])  # word-major [W * R]
    # run time: rows [G, N] -> [W, G, N] element indices, GatherElements, sum over groups
    g.const("word_offsets", (np.arange(words, dtype=np.int32) * n_rows)[:, None, None])
    index = g.op("Add", [rows, "word_offsets"])  # [W, G, N] by broadcasting
    picked = g.op("GatherElements", [data, g.op("Reshape", [index, "flat_shape"])], axis=0)
    shaped = g.op("Reshape", [picked, g.op("Shape", [index])])
    sums = g.op("ReduceSum", [shaped, "axis1"], keepdims=0)  # [W, N]
    # unpack: class c is field j of word w; Gemm(S^T, E) picks and scales it exactly
    select = np.zeros((words, c))
    for k in range(c):
        select[k // per_word, k] = 2.0 ** (-bits * (k % per_word))
    g.const("field_select", select)
    shifted = g.op("Floor", [g.op("Gemm", [sums, "field_select"], transA=1)])  # [N, C]
    g.const("field_width", np.array(2.0**bits, dtype=np.float64))
    g.const("field_inverse", np.array(2.0**-bits, dtype=np.float64))
    above = g.op("Mul", [g.op("Floor", [g.op("Mul", [shifted, "field_inverse"])]), "field_width"])
    total = g.op("Sub", [shifted, above])
    g.const("neg_step_f64", np.array(-step, dtype=np.float64))
    return g.op("Cast", [g.op("Mul", [total, "neg_step_f64"])], OUTPUT_LOG_JOINT, to=TensorProto.FLOAT)
