"""Benchmark: candidate ONNX lowerings of letter naive Bayes, side by side (why the exporter does what it does).

Every candidate computes the same exact 3-bit ``log_joint`` and ``label`` (checked against the
NumPy reference before timing; the rejected hand-built ones too), in onnxruntime with 1 thread,
raw ``InferenceSession.run`` fetching ``label``, interleaved in rounds; batch-1 p50 and the full
test set (6,658 rows) median of back-to-back calls:

==================  =============================================================================
gather              the exporter's default: padded table, ``Clip`` is the whole guard (8 nodes)
gather-where        the previous layout (``index_guard = "where"``: range checks + Where, 11 nodes),
                    exported with the padded layout switched off
gather-grouped      the exporter's ``--lowering gather-grouped`` (5 merged groups, Sum)
onehot-fc           the exporter's ``--lowering onehot-fc`` (OneHot x MatMul)
no-guard            hand-built Add + Gather + ReduceSum + ArgMax without any guard: the floor of a
                    gather graph (NOT a valid export: out-of-range codes fail or read other rows)
int32-table         hand-built: int32 code table, integer ReduceSum, Cast, Mul (guarded by clip-pad)
transposed-table    hand-built: Gather on axis 1 of the transposed table [C, R], ReduceSum axis 2
onehot-mmi          hand-built: uint8 one-hot (Equal) x uint8 codes by MatMulInteger, count column
skl2onnx            scikit-learn CategoricalNB via skl2onnx (the reference point of the issue)
==================  =============================================================================

Usage::

    python benchmarks/bench_onnx_lowerings.py [--rounds 30] [--per-round 50]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
for p in (REPO, REPO / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench_onnx_vs_skl2onnx import load_letter, ml_naive_bayes

from bnc_deploy.quantizers import FixedPointLogQuantizer


def hand_built(art, cards, kind: str):
    """The rejected candidates, as small ONNX models (same outputs as an export)."""
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    c_, d = art.n_classes, art.n_features
    step = np.float32(art.quantizer.step)
    codes = art.table_codes.astype(np.int64).copy()
    off = art.row_offsets.astype(np.int64)
    codes[: cards[0]] += art.class_codes  # prior folded into feature 0
    k = int(cards.max())
    w = k + 2
    nodes, inits = [], []

    def const(name, v):
        inits.append(numpy_helper.from_array(np.asarray(v), name))
        return name

    def op(t, ins, out=None, **a):
        out = out or f"n{len(nodes)}"
        nodes.append(helper.make_node(t, ins, [out], **a))
        return out

    def padded(values, fill):  # [D * W, C], codes -1 .. K
        p = np.full((d, w, c_), fill, dtype=values.dtype)
        for i in range(d):
            p[i, 1 : cards[i] + 1] = values[off[i] : off[i] + cards[i]]
        return p.reshape(d * w, c_)

    def clipped_rows():
        const("lo", np.array(-1, np.int64))
        const("hi", np.array(k, np.int64))
        const("pbase", (np.arange(d) * w + 1).astype(np.int64))
        return op("Add", [op("Clip", ["x", "lo", "hi"]), "pbase"])

    def label_guard(lj):
        const("c0", np.array(0, np.int64))
        const("m1", np.array(-1, np.int64))
        best = op("ArgMax", [lj], axis=1, keepdims=0)
        op("Where", [op("IsNaN", [op("Gather", [lj, "c0"], axis=1)]), "m1", best], "label")

    if kind != "transposed-table":
        const("a1", np.array([1], np.int64))
    if kind == "no-guard":
        const("T", (-codes.astype(np.float32) * step))
        const("off", off)
        lj = op("ReduceSum", [op("Gather", ["T", op("Add", ["x", "off"])], axis=0), "a1"], "log_joint", keepdims=0)
        op("ArgMax", [lj], "label", axis=1, keepdims=0)
    elif kind == "int32-table":
        const("P", padded(codes.astype(np.int32), np.int32(-(2**24))))  # invalid: far below any sum
        const("ns", np.array(-step, np.float32))
        const("lim", np.array(-(2**23), np.float32))
        const("nan", np.array(np.nan, np.float32))
        total = op(
            "Cast", [op("ReduceSum", [op("Gather", ["P", clipped_rows()], axis=0), "a1"], keepdims=0)], to=TP.FLOAT
        )
        scores = op("Mul", [total, "ns"])
        lj = op("Where", [op("Less", [total, "lim"]), "nan", scores], "log_joint")
        label_guard(lj)
    elif kind == "transposed-table":
        tab = padded((-codes.astype(np.float32) * step).astype(np.float32), np.float32(np.nan))
        const("PT", np.ascontiguousarray(tab.T))  # [C, D * W]
        const("a2", np.array([2], np.int64))
        summed = op("ReduceSum", [op("Gather", ["PT", clipped_rows()], axis=1), "a2"], keepdims=0)  # [C, N]
        lj = op("Transpose", [summed], "log_joint", perm=[1, 0])
        label_guard(lj)
    elif kind == "onehot-mmi":
        b = np.zeros((d, w, c_ + 1), np.uint8)  # last column counts valid features
        for i in range(d):
            b[i, 1 : cards[i] + 1, :c_] = codes[off[i] : off[i] + cards[i]]
            b[i, 1 : cards[i] + 1, c_] = 1
        const("B", b.reshape(d * w, c_ + 1))
        const("lo", np.array(-1, np.int64))
        const("hi", np.array(k, np.int64))
        const("ar", np.arange(-1, k + 1, dtype=np.int64))
        const("ax2", np.array([2], np.int64))
        const("shp", np.array([-1, d * w], np.int64))
        xc = op("Unsqueeze", [op("Clip", ["x", "lo", "hi"]), "ax2"])
        onehot = op("Reshape", [op("Cast", [op("Equal", [xc, "ar"])], to=TP.UINT8), "shp"])
        sums = op("Cast", [op("MatMulInteger", [onehot, "B"])], to=TP.FLOAT)  # [N, C + 1]
        const("scale", np.array([-step] * c_ + [1.0], np.float32))
        scaled = op("Mul", [sums, "scale"])
        const("b0", np.array([0], np.int64))
        const("bc", np.array([c_], np.int64))
        const("bc1", np.array([c_ + 1], np.int64))
        scores = op("Slice", [scaled, "b0", "bc", "a1"])
        count = op("Slice", [scaled, "bc", "bc1", "a1"])
        const("nd", np.array(float(d), np.float32))
        const("z", np.array(0, np.float32))
        const("nan", np.array(np.nan, np.float32))
        lj = op("Add", [scores, op("Where", [op("Equal", [count, "nd"]), "z", "nan"])], "log_joint")
        label_guard(lj)
    graph = helper.make_graph(
        nodes,
        kind,
        [helper.make_tensor_value_info("x", TP.INT64, ["N", d])],
        [
            helper.make_tensor_value_info("log_joint", TP.FLOAT, ["N", c_]),
            helper.make_tensor_value_info("label", TP.INT64, ["N"]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def session(model_bytes: bytes):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model_bytes, sess_options=options, providers=["CPUExecutionProvider"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--per-round", type=int, default=50)
    args = p.parse_args(argv)

    import onnxruntime as ort

    from bnc_deploy.exporters import onnx_bnc
    from bnc_deploy.reference.bnc import ReferencePredictor

    x_tr, y_tr, x_te, _, cards = load_letter()
    cards = np.asarray(cards)
    art = ml_naive_bayes(x_tr, y_tr, cards, int(y_tr.max()) + 1, FixedPointLogQuantizer(3, 2))
    x = np.ascontiguousarray(x_te, dtype=np.int64)
    models = {"gather": onnx_bnc.build_onnx_bytes(art)}
    limit, onnx_bnc.PADDED_TABLE_LIMIT = onnx_bnc.PADDED_TABLE_LIMIT, 0
    try:
        models["gather-where"] = onnx_bnc.build_onnx_bytes(art)
    finally:
        onnx_bnc.PADDED_TABLE_LIMIT = limit
    models["gather-grouped"] = onnx_bnc.build_onnx_bytes(art, lowering="gather-grouped")
    models["onehot-fc"] = onnx_bnc.build_onnx_bytes(art, lowering="onehot-fc")
    for kind in ("no-guard", "int32-table", "transposed-table", "onehot-mmi"):
        models[kind] = hand_built(art, cards, kind)
    try:
        from skl2onnx import to_onnx
        from sklearn.naive_bayes import CategoricalNB

        skl = CategoricalNB(alpha=1.0, min_categories=cards).fit(x_tr, y_tr)
        models["skl2onnx"] = to_onnx(skl, x_tr[:1], options={"zipmap": False}).SerializeToString()
    except ImportError as exc:
        print(f"skl2onnx skipped: {exc.name} not installed (pip install '.[bench]')")
    sessions = {name: session(m) for name, m in models.items()}

    ref = ReferencePredictor(art)
    bad = x[:3].copy()
    bad[0, 3], bad[1, 0], bad[2, 15] = cards[3], -1, 10**12
    for name, s in sessions.items():
        if name == "skl2onnx":
            continue
        lj, label = s.run(None, {"x": x})
        if not (np.array_equal(lj, ref.log_joint(x)) and np.array_equal(label, ref.predict(x))):
            raise SystemExit(f"{name}: not exact")
        if name != "no-guard":
            lj, label = s.run(None, {"x": bad})
            if not (np.all(label == -1) and np.isnan(lj).all()):
                raise SystemExit(f"{name}: guard failed")

    rows = [np.ascontiguousarray(x[i : i + 1]) for i in range(500)]
    lat = {n: [] for n in sessions}
    full = {n: [] for n in sessions}
    for s in sessions.values():
        for r in rows[:100]:
            s.run(["label"], {s.get_inputs()[0].name: r})
    names = list(sessions)
    for rnd in range(args.rounds):
        for name in names if rnd % 2 == 0 else names[::-1]:
            s = sessions[name]
            feed = s.get_inputs()[0].name
            s.run(["label"], {feed: x})  # untimed: tables warm
            for _ in range(3):  # back to back: throughput
                t0 = time.perf_counter()
                s.run(["label"], {feed: x})
                full[name].append(time.perf_counter() - t0)
            s.run(["label"], {feed: rows[0]})  # untimed: after a big batch
            for k in range(args.per_round):
                r = rows[(rnd * args.per_round + k) % len(rows)]
                t0 = time.perf_counter()
                s.run(["label"], {feed: r})
                lat[name].append(time.perf_counter() - t0)
    print(
        f"letter NB 3-bit, {len(x)} test rows; onnxruntime {ort.__version__}, 1 thread; load average "
        f"{os.getloadavg()[0]:.2f}; {args.rounds} interleaved rounds "
        f"(3 back-to-back full batches + {args.per_round} single rows)"
    )
    print("every candidate but skl2onnx checked bit-exact on all rows and (but no-guard) on invalid rows\n")
    base = "skl2onnx" if "skl2onnx" in sessions else "gather"
    b1_base, full_base = np.median(lat[base]), np.median(full[base])
    print(
        f"{'candidate':<18}{'nodes':>6}{'batch-1 p50':>13}{'full median':>13}{f'{base}/x b1':>14}{f'{base}/x full':>16}"
    )
    for name in names:
        import onnx

        n_nodes = len(onnx.load_from_string(models[name]).graph.node)
        b1, fl = np.median(lat[name]), np.median(full[name])
        print(
            f"{name:<18}{n_nodes:>6}{b1 * 1e6:>11.1f}us{fl * 1e3:>11.3f}ms"
            f"{b1_base / b1:>13.2f}x{full_base / fl:>15.2f}x"
        )
    print("\nnodes: in the file (constant-only nodes run once, at load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
