"""Parameter tensors of a BN graph, and the per-row additions folded into them at load time.

Parameter tensors are found from the per-row arithmetic that reads them (table of a lookup
``Gather``, weights/bias of a product, constant addend of a score), traced back through
load-time structure (``Slice``, ``Concat``, folding ``Add``; a scalar ``Expand`` is a fill, not
a parameter) to the first decoded tensor (after ``Cast``/``Mul`` by the step, bit-plane
unpacking). Elements = that tensor's size, restricted to used columns and, for a one-hot
product's weights, to rows an index can reach (the ``equal-cast`` padding is not counted).
``param_bits = elements * bits`` (the metadata's ``bits``; else the tensor's dtype width);
``storage_bits`` are the stored initializers' bytes (uint8 codes, int32 prior, bit-planes).

Folded additions: a load-time broadcast ``Add``/``Sub`` of two parameter tensors (operands of
different shapes: ONNX adds the class prior ``[C]`` to feature 0's rows ``[|X_0|, C]``; ONNX
``gather-grouped`` sums feature blocks ``[W, 1, C] + [1, W, C]``) stands for ``C`` (the result's
last dimension) per-row additions, since every row reads exactly one row of the result, which
folded one row of each operand; :func:`trace_param` records them as ``NodeCount.folded``. Load-time rearrangements
(``Reshape``, ``Split``, ``Transpose``, a
``Gather`` by constant indices such as the padded layout's pad map) are traced through to
their source.

Contract: run after data use (it reads ``state.used``); :func:`storage_of` and
:func:`storage_entries` are shared with the DNN layer pass.
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.profiling.graph_count.op_counts import GATHER_BLOCK_QUANTIZED, KINDS
from bnc_deploy.profiling.graph_count.results import ParamTensor
from bnc_deploy.profiling.graph_count.selectors import reachable_rows


def find_params(state) -> list[ParamTensor]:
    """Trace the tables that per-row arithmetic reads back to their decoded sources."""
    sources, quantized_tables = _trace_sources(state)
    meta = state.graph.metadata or {}
    meta_bits = meta.get("bits")
    params = [_param_tensor(state, name, info, quantized_tables, meta_bits) for name, info in sources.items()]
    folded = meta.get("prior_folded_into_feature")
    if folded is not None and quantized_tables and meta.get("n_classes"):
        params.append(_prior_folded_at_export(state, meta, quantized_tables, int(folded)))
    return params


def _trace_sources(state) -> tuple[dict[str, dict], dict]:
    """``(sources, quantized tables)``: each decoded parameter tensor -> ``{"rows", "fc", "note"}``
    (:func:`trace_param`), and the tables of GatherBlockQuantized nodes -> their node."""
    sources: dict[str, dict] = {}
    for node in state.graph.nodes:
        rec = state.records[node.index]
        if node.index in state.load_time or rec.category != "arithmetic":
            continue
        operands = []
        if KINDS.get(node.op) in ("matmul", "conv"):
            weight = node.inputs[1] if len(node.inputs) > 1 else ""
            rows = reachable_rows(state, node)
            operands = [(weight, rows)] + [(b, None) for b in node.inputs[2:3] if b]
        elif KINDS.get(node.op) in ("add", "mul", "batchnorm"):
            operands = [(i, None) for i in node.inputs if i and state.is_const(i)]
        for name, rows in operands:
            if name and state.is_const(name):
                trace_param(state, name, rows, sources, node)
    # the lookup tables of Gather nodes are classified free; their tables are parameters too
    quantized_tables = {}
    for node in state.graph.nodes:
        rec = state.records[node.index]
        if (
            node.op in ("Gather", GATHER_BLOCK_QUANTIZED)
            and node.index not in state.load_time
            and rec.lookups
            and state.is_const(node.inputs[0])
        ):
            trace_param(state, node.inputs[0], None, sources, node)
            if node.op == GATHER_BLOCK_QUANTIZED:
                quantized_tables[node.inputs[0]] = node
    return sources, quantized_tables


def _param_tensor(state, name: str, info: dict, quantized_tables: dict, meta_bits) -> ParamTensor:
    """The :class:`ParamTensor` of one decoded source: its used elements (columns, reachable rows)."""
    t = state.tensors[name]
    used = state.used.get(name)
    frac_cols = 1.0 if used is None or used.shape[0] != t.last_dim else used.sum() / used.shape[0]
    elements = t.numel if t.value is None else int(t.value.size)
    if name in quantized_tables:
        elements, info["note"] = _block_quantized_elements(state, quantized_tables[name], info["note"])
        frac_cols = 1.0
    if info["rows"] is not None and t.value is not None and t.value.ndim == 2:
        # FullyConnected weights are [M, K], MatMul weights [K, M]: count the reachable K rows
        m = t.value.shape[0] if info["fc"] else int(round(t.value.shape[1] * frac_cols))
        elements = int(info["rows"].sum()) * m
    elif elements is not None:
        elements = int(round(elements * frac_cols))
    bits = int(meta_bits) if meta_bits else np.dtype(t.dtype).itemsize * 8
    return ParamTensor(
        name,
        t.row_shape,
        elements,
        bits,
        None if elements is None else elements * bits,
        storage_entries(state, storage_of(state, name)),
        info["note"] if elements is not None else "size unknown (no shape)",
    )


def _prior_folded_at_export(state, meta: dict, quantized_tables: dict, folded: int) -> ParamTensor:
    """The class prior an ORT lookup graph folded into feature ``folded``'s rows (credited to the
    first quantized table's node as ``C`` folded additions)."""
    # The ORT lookup graph stores feature 0's rows with the class prior added at export (the
    # ONNX graph adds it at load: a broadcast Add, credited by trace_param). The file
    # declares it; every row reads one of those rows, so C additions per row were done once.
    c = int(meta["n_classes"])
    node = next(iter(quantized_tables.values()))
    rec = state.records[node.index]
    rec.folded += c
    rec.note += f"; feature {folded}'s rows hold the class prior (folded at export: {c} additions)"
    meta_bits = meta.get("bits")
    bits = int(meta_bits) if meta_bits else 8
    return ParamTensor(
        "class prior",
        (c,),
        c,
        bits,
        c * bits,
        [],
        f"folded into feature {folded}'s rows of the table at export "
        "(declared in the metadata: prior_folded_into_feature)",
    )


def _block_quantized_elements(state, node, note):
    """Parameters of a GatherBlockQuantized table: its logical columns (the output's last axis;
    4-bit storage packs two a byte) times the rows whose scales are finite (a NaN-scale row is the
    guard's invalid row, not parameters)."""
    scales = state.value(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    width = state.tensors[node.outputs[0]].last_dim if node.outputs[0] in state.tensors else None
    if scales is None or not width:
        return None, note
    scales = np.asarray(scales, dtype=np.float64).reshape(scales.shape[0], -1)
    rows = int(np.isfinite(scales).all(axis=1).sum())
    return rows * int(
        width
    ), f"{note}; {rows} rows x {width} codes ({scales.shape[0] - rows} NaN-scale guard row(s) excluded)"


def trace_param(state, name, rows, sources, consumer) -> None:
    """Walk back through load-time structure (Slice, Concat, folding Add) to decoded tensors."""
    node = state.producer.get(name)
    if node is None or node.index not in state.load_time:
        if name not in sources:
            direct = state.producer.get(name) is None and rows is not None
            sources[name] = {
                "rows": rows if direct else None,
                "fc": consumer.op == "FullyConnected",
                "note": f"read by {consumer.source_op} #{consumer.index}",
            }
        return
    op = node.op
    if op in ("Slice", "StridedSlice", "Identity", "Squeeze", "Unsqueeze", "Reshape", "Split", "Transpose") or (
        op == "Gather" and state.is_const(node.inputs[1])
    ):
        # rearrangements of the table at load time (the padded layout is a Gather of the stacked
        # table by a constant pad map; merged groups split and reshape it): the parameters are
        # those of the source, whatever the copies and NaN rows
        trace_param(state, node.inputs[0], None, sources, consumer)
    elif op == "Concat":
        for i in node.inputs:
            if i and state.used.get(i, np.ones(1, bool)).any():
                trace_param(state, i, None, sources, consumer)
    elif op in ("Add", "Sub"):
        a, b = node.inputs[0], node.inputs[1]
        for i in (a, b):
            trace_param(state, i, None, sources, consumer)
        na, nb = state.numel(a), state.numel(b)
        rec = state.records[node.index]
        if (
            na is not None
            and nb is not None
            and (na != nb or state.shape(a) != state.shape(b))
            and state.used[node.outputs[0]].any()
        ):
            # A broadcast sum of two tables: every row of the model reads one row of the result,
            # which folded one row of each operand, i.e. one addition per column (the prior [C]
            # into feature 0's rows [|X_0|, C]; merged feature groups [W, 1, C] + [1, W, C]).
            width = int(state.tensors[node.outputs[0]].last_dim or 1)
            rec.folded = width
            rec.note = f"folds one row of {width} into every looked-up row: {width} per-row additions done once at load"
    elif op in ("Expand", "ConstantOfShape", "Tile") and (state.numel(node.inputs[0]) or 0) <= 1:
        return  # a fill (the NaN row), not a parameter
    else:
        if name not in sources:
            sources[name] = {"rows": None, "fc": False, "note": f"decoded at load by {node.source_op}"}


def storage_of(state, name) -> list[str]:
    """Stored initializers behind a (decoded) parameter: follow the largest operand of decode ops."""
    node = state.producer.get(name)
    if node is None:
        return [name] if state.value(name) is not None else []
    operands = [i for i in node.inputs if i and state.is_const(i)]
    if not operands:
        return []
    if node.op in ("Concat", "Add", "Sub"):
        return [s for i in operands for s in storage_of(state, i)]
    largest = max(operands, key=lambda i: state.numel(i) or 0)
    return storage_of(state, largest)


def storage_entries(state, names) -> list[tuple]:
    """``ParamTensor.storage`` rows: (initializer, dtype, elements, bits per element) of stored tensors."""
    return [
        (s, state.tensors[s].dtype, int(state.tensors[s].value.size), np.dtype(state.tensors[s].dtype).itemsize * 8)
        for s in names
    ]
