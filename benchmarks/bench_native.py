"""Benchmark: the native runtime against skl2onnx CategoricalNB, our ONNX in onnxruntime, and the add-limit.

One run, one process, the same rows (the letter test split of the paper's discretized fold, 6,658
rows, 16 features, 26 classes):

* models: add-one-smoothed ML naive Bayes and Chow-Liu TAN fitted with NumPy on the training codes,
  quantized (``--bits``/``--int-bits``, default 3 and 2), exported as C (``native`` runtime) and
  ONNX (default options); for NB also scikit-learn's CategoricalNB (alpha=1, float64) converted
  with skl2onnx (``zipmap=False``), the peer a user would pick (install ``skl2onnx`` if missing);
* contestants: skl2onnx and our ONNX through raw ``InferenceSession.run`` fetching ``label`` only
  (1 intra-op thread, sequential; no adapter), as ``bench_onnx_vs_skl2onnx.py``; native through
  the adapter with everything it does per call: ``rt.predict(x)`` (labels: input validated in C,
  outputs allocated) and ``rt.run(x)`` (float64 scores + labels), 1 thread and ``--threads``;
* batch 1: p50 of single-row calls on NumPy int64 rows (``rt.predict(row)``/``rt.run(row)`` for
  native: the adapter's one-row path), timed one call at a time with ``perf_counter_ns``;
* full batch: median of ``--repeats`` calls on the whole int64 test set;
* the add-limit: ``D * C`` adds per row (letter: 416) at the machine's add rate, measured in this
  run by a C loop compiled with the native runtime's flags that adds an L1-resident table into
  64 accumulator lanes (one load and one add per element, the kernel's inner operation without
  the index arithmetic, validation and argmin), for int8, int16 and int32 lanes. The native
  kernel adds uint8 lanes when ``(D + 1) * (2^B - 1) <= 255`` (letter 3-bit: 119), else uint16 or
  uint32; ratios are given against the int16 limit and against the kernel's own lane type.

The contestants take turns in rounds, so load from other processes hits all alike; the header
prints the load average (numbers from a busy machine are only good as ratios). It asserts
nothing but exactness (native labels and scores equal the NumPy reference).

Usage::

    python benchmarks/bench_native.py [--runs 3000] [--repeats 60] [--threads 2] [--bits 3 --int-bits 2] [--json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

from bnc_deploy.artifacts import BNCArtifact
from bnc_deploy.quantizers import FixedPointLogQuantizer

ADD_LOOP = r"""
#include <stdint.h>
#define TABLE 2048   /* elements: 2-8 KB, in L1 */
#define LANES 64
#define DEFINE(T, NAME)                                                              \
static T NAME##_table[TABLE];                                                        \
long NAME(long reps)                                                                 \
{                                                                                    \
    T acc[LANES] = {0};                                                              \
    long r, i, j, sum = 0;                                                           \
    for (i = 0; i < TABLE; ++i) {                                                    \
        NAME##_table[i] = (T)(i * 7 + 1);                                            \
    }                                                                                \
    for (r = 0; r < reps; ++r) {                                                     \
        /* the table may have changed: reload it (no hoisting of the sums) */        \
        __asm__ volatile("" : : "r"(NAME##_table) : "memory");                       \
        for (i = 0; i < TABLE; i += LANES) {                                         \
            for (j = 0; j < LANES; ++j) {                                            \
                acc[j] = (T)(acc[j] + NAME##_table[i + j]);                          \
            }                                                                        \
        }                                                                            \
    }                                                                                \
    for (j = 0; j < LANES; ++j) {                                                    \
        sum += acc[j];                                                               \
    }                                                                                \
    return sum;                                                                      \
}
DEFINE(int8_t, add_i8)
DEFINE(int16_t, add_i16)
DEFINE(int32_t, add_i32)
"""
ADD_TABLE = 2048
LANE_BITS = {"uint8_t": "i8", "uint16_t": "i16", "uint32_t": "i32"}


# -- data and models --------------------------------------------------------------------------------------
def load_letter():
    """``(x_train, y_train, x_test, y_test, cardinalities)``, codes 0-based int64."""
    from bnc_deploy.datasets import load_dataset

    ds = load_dataset("letter")
    return (
        np.asarray(ds.x_train, dtype=np.int64),
        np.asarray(ds.y_train, dtype=np.int64),
        np.asarray(ds.x_test, dtype=np.int64),
        np.asarray(ds.y_test, dtype=np.int64),
        np.asarray(ds.cardinalities, dtype=np.int64),
    )


def ml_bnc(x, y, cards, n_classes, parents, quantizer) -> BNCArtifact:
    """Add-one-smoothed ML NB/TAN as a quantized artifact (row ``off_i + x_i * |X_pa| + x_pa``)."""
    blocks = []
    for i, card in enumerate(cards):
        p = int(parents[i])
        pc = int(cards[p]) if p >= 0 else 1
        counts = np.zeros((int(card), pc, n_classes))
        np.add.at(counts, (x[:, i], x[:, p] if p >= 0 else 0, y), 1.0)
        counts += 1.0
        blocks.append(np.log(counts / counts.sum(axis=0, keepdims=True)).reshape(int(card) * pc, n_classes))
    prior = np.log((np.bincount(y, minlength=n_classes) + 1.0) / (len(y) + n_classes))
    return BNCArtifact(
        parents=np.asarray(parents),
        cardinalities=cards,
        quantizer=quantizer,
        class_codes=quantizer.to_codes(prior),
        table_codes=quantizer.to_codes(np.concatenate(blocks)),
        class_names=[chr(ord("A") + k) for k in range(n_classes)],
        feature_names=[f"x{i + 1}" for i in range(len(cards))],
    )


def ort_session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def ort_call(session):
    feed, fetch = session.get_inputs()[0].name, ["label"]
    return lambda x: session.run(fetch, {feed: x})


# -- the add-limit ----------------------------------------------------------------------------------------
def add_rates(folder: Path, reps: int) -> dict:
    """Adds per nanosecond (median of 7) for int8/int16/int32 lanes, compiled with the native runtime's flags."""
    from bnc_deploy.runtimes import native_adapter

    cc = native_adapter.compiler()
    flags = (*native_adapter.optimization_flags(cc), *native_adapter.BASE_CFLAGS)
    (folder / "adds.c").write_text(ADD_LOOP)
    subprocess.run([cc, *flags, "-o", str(folder / "adds.so"), str(folder / "adds.c")], check=True)
    lib = ctypes.CDLL(str(folder / "adds.so"))
    rates = {}
    for name in ("i8", "i16", "i32"):
        fn = getattr(lib, f"add_{name}")
        fn.restype, fn.argtypes = ctypes.c_long, [ctypes.c_long]
        fn(reps // 10)
        times = []
        for _ in range(7):
            t0 = time.perf_counter_ns()
            fn(reps)
            times.append(time.perf_counter_ns() - t0)
        rates[name] = reps * ADD_TABLE / float(np.median(times))
    return {"flags": " ".join(flags), "adds_per_ns": rates}


# -- timing -------------------------------------------------------------------------------------------------
def measure(
    calls: dict, rows: list, x: np.ndarray, runs: int, repeats: int, warmup: int = 200, hot_repeats: int = 30
) -> dict:
    """Per contestant: batch-1 latencies and full-batch times, taking turns in ``repeats`` rounds (so each
    full batch starts with caches the other contestants used), then ``hot_repeats`` full batches
    back-to-back per contestant (its rows and tables stay cached, as in the add-limit loop).

    ``calls[name] = (one_row_call or None, full_batch_call)``."""
    for one, full in calls.values():
        for k in range(warmup):
            if one is not None:
                one(rows[k % len(rows)])
        full(x)
    lat = {name: [] for name in calls}
    batch = {name: [] for name in calls}
    per_round = max(1, runs // repeats)
    clock = time.perf_counter_ns
    for r in range(repeats):
        for name, (one, full) in calls.items():
            if one is not None:
                out = lat[name]
                for k in range(per_round):
                    row = rows[(r * per_round + k) % len(rows)]
                    t0 = clock()
                    one(row)
                    out.append(clock() - t0)
            t0 = clock()
            full(x)
            batch[name].append(clock() - t0)
    hot = {}
    for name, (_, full) in calls.items():  # back-to-back: this contestant's data stays in the caches
        times = []
        for _ in range(hot_repeats):
            t0 = clock()
            full(x)
            times.append(clock() - t0)
        hot[name] = float(np.median(times)) / 1e6
    return {
        name: {
            "p50_us": float(np.median(lat[name])) / 1e3 if lat[name] else None,
            "p99_us": float(np.percentile(lat[name], 99)) / 1e3 if lat[name] else None,
            "full_ms": float(np.median(batch[name])) / 1e6,
            "full_best_ms": float(np.min(batch[name])) / 1e6,
            "full_hot_ms": hot[name],
        }
        for name in calls
    }


def bench_model(label: str, artifact, x_te, y_te, folder: Path, args, skl=None) -> dict:
    from bnc_deploy.reference.bnc import ReferencePredictor
    from bnc_deploy.runtimes.base import load_runtime
    from bnc_deploy.verify import export_path

    tag = label.split()[1].lower()
    header = export_path(artifact, folder / f"letter_{tag}.h", "c")
    onnx_path = export_path(artifact, folder / f"letter_{tag}.onnx", "onnx")
    native1 = load_runtime(header, "native", threads=1)
    native_n = load_runtime(header, "native", threads=args.threads)
    ref = ReferencePredictor(artifact)
    scores, labels = native1.run(x_te)
    exact = bool(np.array_equal(labels, ref.predict(x_te)) and np.array_equal(scores, ref.log_joint(x_te)))
    exact = exact and bool(np.array_equal(native_n.predict(x_te), labels))
    ours = ort_session(onnx_path)
    calls = {}
    if skl is not None:
        calls["skl2onnx CategoricalNB (ort)"] = (ort_call(skl), ort_call(skl))
    calls["ours ONNX (ort, 1 thread)"] = (ort_call(ours), ort_call(ours))
    calls["native predict, 1 thread"] = (native1.predict, native1.predict)
    calls["native run (+scores), 1 thread"] = (native1.run, native1.run)
    calls[f"native predict, {args.threads} threads"] = (None, native_n.predict)
    x_u8 = x_te.astype(np.uint8)  # the C API's own code type: 1/8 of the int64 input's bytes
    calls["native predict, uint8 rows, 1 thread"] = (None, lambda _x: native1.predict(x_u8))
    rows = [np.ascontiguousarray(x_te[i]) for i in range(min(len(x_te), 1000))]
    wrapped = {}
    for name, (one, full) in calls.items():
        if one is not None and name.startswith(("skl2onnx", "ours")):
            one = _two_dimensional(one)
        wrapped[name] = (one, full)
    res = measure(wrapped, rows, x_te, args.runs, args.repeats)
    # Threads only split batches of 2 * MIN_ROWS_PER_THREAD rows or more: time them on the test set x 10.
    from bnc_deploy.runtimes.native_kernel import MIN_ROWS_PER_THREAD

    x_big = np.ascontiguousarray(np.tile(x_te, (10, 1)))
    big = measure(
        {
            "native predict, 1 thread": (None, native1.predict),
            f"native predict, {args.threads} threads": (None, native_n.predict),
        },
        rows,
        x_big,
        0,
        max(5, args.repeats // 4),
        warmup=1,
        hot_repeats=5,
    )
    other = {}
    if skl is not None:
        skl_labels = ort_call(skl)(x_te)[0]
        other["agreement_with_skl2onnx"] = float(np.mean(skl_labels == labels))
        other["skl2onnx_accuracy"] = float(np.mean(skl_labels == y_te))
    return {
        "model": label,
        "n_rows": len(x_te),
        "adds_per_row": int(artifact.n_ops),
        "exact": exact,
        "lanes": native1.lanes,
        "lane_type": _lane_type(artifact),
        "accuracy": float(np.mean(labels == y_te)),
        "compile_flags": " ".join(native1.compile_flags),
        "results": res,
        "threads_batch": {"n_rows": len(x_big), "min_rows_per_thread": MIN_ROWS_PER_THREAD, "results": big},
        **other,
    }


def _two_dimensional(call):
    """ONNX sessions take (1, D) rows; the native adapter is timed on (D,) rows (it takes both)."""
    return lambda row: call(row[None, :])


def _lane_type(artifact) -> str:
    from bnc_deploy.runtimes.native_kernel import lanes_type

    return lanes_type(artifact.n_features, artifact.quantizer.total_bits)[0]


def report(model: dict, rates: dict, threads: int) -> None:
    res, n, adds = model["results"], model["n_rows"], model["adds_per_row"]
    print(
        f"\n{model['model']}: {n} test rows, {adds} adds/row; native lanes {model['lanes']} x {model['lane_type']}; "
        f"exact vs reference: {model['exact']}; test accuracy {model['accuracy']:.2%}"
        + (
            f"; labels agree with skl2onnx on {model['agreement_with_skl2onnx']:.2%}"
            if "agreement_with_skl2onnx" in model
            else ""
        )
    )
    print(
        f"{'':<38}{'batch-1 p50 (us)':>17}{'p99 (us)':>10}{'full median (ms)':>18}{'best (ms)':>11}"
        f"{'ns/row':>9}{'hot (ms)':>10}{'hot ns/row':>11}"
    )
    for name, r in res.items():
        p50 = f"{r['p50_us']:.2f}" if r["p50_us"] is not None else "-"
        p99 = f"{r['p99_us']:.2f}" if r["p99_us"] is not None else "-"
        print(
            f"{name:<38}{p50:>17}{p99:>10}{r['full_ms']:>18.3f}{r['full_best_ms']:>11.3f}"
            f"{r['full_ms'] * 1e6 / n:>9.1f}{r['full_hot_ms']:>10.3f}{r['full_hot_ms'] * 1e6 / n:>11.1f}"
        )
    big = model["threads_batch"]
    if n < 2 * big["min_rows_per_thread"]:
        print(
            f"  (a batch splits over threads from {2 * big['min_rows_per_thread']} rows: the {threads}-thread row "
            "above ran on one thread; it comes after the other native rows, so its input is cached, while "
            "the first native row of each round reads the int64 rows from memory after onnxruntime's turn)"
        )
    lane = LANE_BITS[model["lane_type"]]
    limits = {
        f"add-limit int16 ({rates['i16']:.1f} adds/ns)": adds / rates["i16"],
        f"add-limit {lane} ({rates[lane]:.1f} adds/ns, the kernel's lanes)": adds / rates[lane],
    }
    for name, ns in limits.items():
        print(f"  {name}: {ns * n / 1e6:.4f} ms per full batch, {ns:.1f} ns/row")
    native = res["native predict, 1 thread"]
    print("ratios:")
    if "skl2onnx CategoricalNB (ort)" in res:
        skl = res["skl2onnx CategoricalNB (ort)"]
        for name in (
            "native predict, 1 thread",
            "native run (+scores), 1 thread",
            f"native predict, {threads} threads",
            "ours ONNX (ort, 1 thread)",
        ):
            r = res[name]
            b1 = f"batch-1 {skl['p50_us'] / r['p50_us']:.1f}x, " if r["p50_us"] else ""
            print(
                f"  skl2onnx / {name}: {b1}full batch {skl['full_ms'] / r['full_ms']:.1f}x "
                f"(hot {skl['full_hot_ms'] / r['full_hot_ms']:.1f}x)"
            )
    print(
        f"  threads on the test set x 10 ({big['n_rows']} rows; a thread takes >= "
        f"{big['min_rows_per_thread']} rows): "
        + ", ".join(
            f"{name.split(', ')[1]} {r['full_ms']:.3f} ms ({r['full_ms'] * 1e6 / big['n_rows']:.1f} ns/row)"
            for name, r in big["results"].items()
        )
    )
    onnx = res["ours ONNX (ort, 1 thread)"]
    print(
        f"  ours ONNX / native predict 1 thread: batch-1 {onnx['p50_us'] / native['p50_us']:.1f}x, "
        f"full batch {onnx['full_ms'] / native['full_ms']:.1f}x"
    )
    per_row, hot_row = native["full_ms"] * 1e6 / n, native["full_hot_ms"] * 1e6 / n
    for name, ns in limits.items():
        print(
            f"  native predict 1 thread / {name.split(' (')[0]}: hot {hot_row / ns:.2f}x ({hot_row:.1f} vs "
            f"{ns:.1f} ns/row), taking turns {per_row / ns:.2f}x ({per_row:.1f} ns/row)"
        )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bits", type=int, default=3)
    p.add_argument("--int-bits", type=int, default=2)
    p.add_argument("--runs", type=int, default=3000, help="batch-1 calls per contestant")
    p.add_argument("--repeats", type=int, default=60, help="full-batch calls per contestant (= rounds)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="native threads for the N-thread row")
    p.add_argument("--add-reps", type=int, default=20000, help="passes over the 2,048-element table per add rate")
    p.add_argument("--keep", type=Path, default=None, help="keep the exported files in this folder")
    p.add_argument("--json", action="store_true", help="also print all numbers as one JSON object")
    args = p.parse_args(argv)

    import onnxruntime as ort

    from bnc_deploy.train.chow_liu import chow_liu_parents

    try:
        import skl2onnx
        import sklearn
        from skl2onnx import to_onnx
        from sklearn.naive_bayes import CategoricalNB
    except ImportError as exc:
        sys.exit(f"bench_native: needs scikit-learn and skl2onnx ({exc}); pip install skl2onnx scikit-learn")

    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench_native_"))
    folder.mkdir(parents=True, exist_ok=True)
    x_tr, y_tr, x_te, y_te, cards = load_letter()
    x_te = np.ascontiguousarray(x_te)
    n_classes = int(max(y_tr.max(), y_te.max())) + 1
    q = FixedPointLogQuantizer(args.bits, args.int_bits)
    nb = ml_bnc(x_tr, y_tr, cards, n_classes, np.full(len(cards), -1), q)
    tan = ml_bnc(x_tr, y_tr, cards, n_classes, chow_liu_parents(x_tr, y_tr, cards, n_classes), q)
    skl_model = CategoricalNB(alpha=1.0, min_categories=cards).fit(x_tr, y_tr)
    skl_path = folder / "letter_nb_skl2onnx.onnx"
    skl_path.write_bytes(to_onnx(skl_model, x_tr[:1], options={"zipmap": False}).SerializeToString())

    rates = add_rates(folder, args.add_reps)
    models = [
        bench_model(f"letter NB {args.bits}-bit", nb, x_te, y_te, folder, args, skl=ort_session(skl_path)),
        bench_model(f"letter TAN {args.bits}-bit", tan, x_te, y_te, folder, args),
    ]
    rates_after = add_rates(folder, args.add_reps)["adds_per_ns"]  # the machine's load may change during the run
    print(
        f"bench_native: onnxruntime {ort.__version__}, skl2onnx {skl2onnx.__version__}, scikit-learn "
        f"{sklearn.__version__}, Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"native flags: {models[0]['compile_flags']}")
    print(
        "add rates (adds/ns, before / after the contestants): "
        + ", ".join(f"{k} {v:.1f} / {rates_after[k]:.1f}" for k, v in rates["adds_per_ns"].items())
    )
    print(
        f"batch-1: {args.repeats * max(1, args.runs // args.repeats)} single-row calls per contestant; full batch: "
        f"median of {args.repeats}; contestants alternate in {args.repeats} rounds"
    )
    limit_rates = {k: max(v, rates_after[k]) for k, v in rates["adds_per_ns"].items()}  # the faster measurement
    for model in models:
        report(model, limit_rates, args.threads)
    if args.json:
        print(json.dumps({"add_rates": rates, "add_rates_after": rates_after, "models": models}, indent=1))
    if args.keep is None:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        print(f"\nfiles: {folder}")


if __name__ == "__main__":
    main()
