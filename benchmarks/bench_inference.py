"""Benchmark: BN inference in every runtime against the peers, on the paper's datasets, in one run.

For each dataset (letter, satimage, usps; fold 1 of the paper's discretized files) and model
(naive Bayes, TAN with Chow-Liu parents), one maximum-likelihood model (add-one smoothing, fitted
with NumPy on the training codes: the model ``bnc-train --init ml --epochs 0`` trains, without
torch) quantized to ``--bits`` (default 3, ``B_I = 2``), exported and run on the same test rows:

=================  ==========================================================================
ours onnx          the default ONNX export (``gather``) in onnxruntime, 1 thread, raw
                   ``InferenceSession.run`` fetching ``label`` (as the peer below)
ours onnx-grouped  the ``--lowering gather-grouped`` ONNX export (merged feature groups)
ours onnx-auto     the ``--lowering auto`` ONNX export: the verifier times every lowering (and
                   ``gather``/``gather-grouped`` with ``--pack-words``) at 1 and 4,096 rows
                   and keeps the fastest at 4,096 among those within 2x of the fastest single
                   row (``bnc_deploy.autolowering``); the note names the pick
ours tflite        the default TFLite export in LiteRT, 1 thread: the adapter's bare
                   ``invoke`` (set_tensor + invoke + get_tensor) on prepared input
ours native        the C export (``bnc-export --format c``) compiled for this host through
                   ``--runtime native``: ``predict`` on the uint8 codes as the dataset stores
                   them (one ctypes call; input validated in C; the kernel reads uint8, int32
                   and int64 arrays as they are)
ours native-i64    the same on an int64 copy of the codes (8 bytes per code to stream)
skl2onnx           scikit-learn ``CategoricalNB(alpha=1)`` on the same codes, converted with
                   skl2onnx (``zipmap=False``), onnxruntime 1 thread, raw ``run`` of ``label``:
                   the float naive Bayes a user would pick (also the peer of the TAN rows)
emlearn            emlearn's C naive Bayes (``eml_bayes``) compiled with this host's ``cc -O3
                   -march=native`` into a shared library called through ctypes, one call per
                   batch: **Gaussian** naive Bayes (scikit-learn ``GaussianNB`` on the codes as
                   floats; a different, continuous model), listed because it is the usual
                   microcontroller NB library; skipped when emlearn or a compiler is missing
=================  ==========================================================================

Metrics: batch-1 latency (p50 over single-row calls cycling through test rows), full test set in
one call (median of back-to-back calls, each group after an untimed call: a throughput figure
with the tables warm), rows/s, the ratio to skl2onnx (``skl/x``: higher is faster) and the distance to
the **add-limit**: a row of a BN costs ``D * C`` additions (the paper's operation count); the
limit is ``D * C / add_rate`` per row, where ``add_rate`` is measured in this run by a C loop
(``cc -O3 -march=native``) that adds rows of a 64 x 32 uint16 table, L1-resident, into a
32-lane accumulator: vectorized adds of table values with everything in cache, the best a lookup
kernel can do per addition (numpy's ``np.add`` on L1-sized uint16 arrays when no compiler).
The loop is timed at the start and again in every round of every case, between the runtimes'
turns (best of 5 calls each time); a case's limit uses the fastest rate seen up to its end (the
strict reading: a rate measured while the machine was slow would flatter every ratio).
``x limit`` = full-batch time per row / limit (1.0 would be the limit).

Every runtime's labels are compared with the NumPy reference of the same artifact (ours must agree
on every row; skl2onnx and emlearn are other models: agreement is printed, not required).
Runtimes take turns in rounds so that load from other processes hits all alike; on a shared
machine read the ratios, not the absolute times (the header prints the load average).

Usage::

    python benchmarks/bench_inference.py [--datasets letter,satimage,usps] [--models nb,tan]
        [--runtimes onnx,onnx-grouped,onnx-auto,tflite,native,native-i64,skl2onnx,emlearn]
        [--ort-call run|iobinding] [--quick] [--json]

``--ort-call iobinding`` calls every ONNX session (ours and skl2onnx alike) through IOBinding with
buffers bound once instead of ``InferenceSession.run`` (about 5 us less per call on both sides).

``--quick``: letter NB only, fewer calls (a smoke run of a few seconds). Needs the datasets
(/work/shared/datasets or $BNC_DEPLOY_DATASETS), scikit-learn and skl2onnx (``pip install
'.[bench]'``); TFLite needs the ``convert`` extra, native and emlearn a C compiler.
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
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO, REPO / "benchmarks"):  # run from a checkout without installing
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench_onnx_vs_skl2onnx import call_paths

from bnc_deploy.artifacts import BNCArtifact
from bnc_deploy.quantizers import FixedPointLogQuantizer

DATASETS = ("letter", "satimage", "usps")
MODELS = ("nb", "tan")
RUNTIMES = ("onnx", "onnx-grouped", "onnx-auto", "tflite", "native", "native-i64", "skl2onnx", "emlearn")


# -- models -----------------------------------------------------------------------------------------------
def ml_artifact(
    x: np.ndarray,
    y: np.ndarray,
    cards: np.ndarray,
    n_classes: int,
    parents: np.ndarray,
    quantizer: FixedPointLogQuantizer,
    class_names,
) -> BNCArtifact:
    """Add-one-smoothed ML tables in the artifact's stacked layout, quantized.

    Feature ``i`` owns ``|X_i| * |X_pa(i)|`` rows from its offset; row ``x_i * |X_pa| + x_pa`` holds
    ``log p(x_i | x_pa, c)`` in column ``c`` (``|X_pa| = 1`` without a parent).
    """
    blocks = []
    for i, card in enumerate(cards):
        pa = int(parents[i])
        pcard = int(cards[pa]) if pa >= 0 else 1
        counts = np.ones((card, pcard, n_classes))  # add-one smoothing
        np.add.at(counts, (x[:, i], x[:, pa] if pa >= 0 else 0, y), 1.0)
        blocks.append(np.log(counts / counts.sum(axis=0, keepdims=True)).reshape(card * pcard, n_classes))
    table = np.concatenate(blocks)
    prior = np.log((np.bincount(y, minlength=n_classes) + 1.0) / (len(y) + n_classes))
    return BNCArtifact(
        parents=np.asarray(parents, dtype=np.int64),
        cardinalities=np.asarray(cards),
        class_names=list(class_names),
        feature_names=[f"x{i + 1}" for i in range(len(cards))],
        quantizer=quantizer,
        class_codes=quantizer.to_codes(prior),
        table_codes=quantizer.to_codes(table),
    )


# -- the add-limit ------------------------------------------------------------------------------------------
ADD_LOOP_C = r"""
#include <stdint.h>
/* Add `reps` times the 64 rows of an L1-resident 64 x 32 uint16 table into 32 lanes. */
uint64_t add_rows(const uint16_t *table, int64_t reps) {
    uint16_t acc[32] = {0};
    for (int64_t r = 0; r < reps; ++r)
        for (int k = 0; k < 64; ++k)
            for (int j = 0; j < 32; ++j) acc[j] += table[k * 32 + j];
    uint64_t s = 0;
    for (int j = 0; j < 32; ++j) s += acc[j];
    return s;
}
"""


def measure_add_rate(work: Path) -> tuple[float, str, Callable[[int], float]]:
    """Additions per second of this CPU on cached table rows (best of 25 calls), how it was measured,
    and ``sample(calls)``: the rate again, best of ``calls`` calls (for the rounds of each case)."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    # 64-byte aligned, as a kernel's own table would be (a split cache line per load skews the rate)
    raw = np.empty(64 * 32 + 32, dtype=np.uint16)
    start = (-raw.ctypes.data % 64) // 2
    table = raw[start : start + 64 * 32].reshape(64, 32)
    table[:] = np.random.default_rng(0).integers(0, 8, size=(64, 32))
    if cc:
        src, lib = work / "add_loop.c", work / "add_loop.so"
        src.write_text(ADD_LOOP_C)
        try:
            subprocess.run(
                [cc, "-O3", "-march=native", "-shared", "-fPIC", str(src), "-o", str(lib)],
                check=True,
                capture_output=True,
                timeout=120,
            )
            fn = ctypes.CDLL(str(lib)).add_rows
            fn.restype, fn.argtypes = ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_int64]
            reps = 20000

            def sample(calls: int) -> float:
                return reps * table.size / min(_timed(lambda: fn(table.ctypes.data, reps)) for _ in range(calls))

            return (
                sample(25),
                "C loop, uint16 rows of an L1-resident table into 32 lanes (cc -O3 -march=native)",
                sample,
            )
        except (subprocess.SubprocessError, OSError):
            pass
    acc = np.zeros(32, dtype=np.uint16)

    def numpy_adds():
        for k in range(2000):
            np.add(acc, table[k % 64], out=acc)

    def sample_numpy(calls: int) -> float:
        return 2000 * 32 / min(_timed(numpy_adds) for _ in range(calls))

    return (
        sample_numpy(5),
        "numpy np.add of 32-lane uint16 rows (no C compiler: a per-call-bound underestimate)",
        sample_numpy,
    )


class AddRate:
    """The fastest add rate seen so far (``best``) and how to measure it again (``sample()``)."""

    def __init__(self, best: float, sample: Callable[[], float]) -> None:
        self.best, self.sample = best, sample


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# -- runners: each is (single-row call, full-batch call, labels of the full batch) ---------------------------
class Runner:
    def __init__(self, name: str, one, full, note: str = "") -> None:
        self.name, self.one, self.full, self.note = name, one, full, note


#: How the ONNX sessions (ours and skl2onnx alike) are called: ``run`` or ``iobinding`` (``--ort-call``).
ORT_CALL = {"mode": "run"}


def onnx_runner(name: str, model_bytes_or_path, x_rows: list, x_full: np.ndarray, note: str = "") -> Runner:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    source = model_bytes_or_path if isinstance(model_bytes_or_path, bytes) else str(model_bytes_or_path)
    s = ort.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])
    feed = s.get_inputs()[0].name
    dtype = np.float32 if "float" in s.get_inputs()[0].type else np.int64
    rows = [r.astype(dtype) for r in x_rows]
    full = np.ascontiguousarray(x_full.astype(dtype))
    if ORT_CALL["mode"] == "run":
        return Runner(
            name, lambda k: s.run(["label"], {feed: rows[k]}), lambda: s.run(["label"], {feed: full})[0], note
        )
    # Input and output bound once to NumPy buffers (bench_onnx_vs_skl2onnx.call_paths, shared).
    one, bound_full = call_paths(s, rows, full)["iobinding"]

    def batch():
        return bound_full().copy()

    return Runner(name, one, batch, note + ", IOBinding")


def adapter_runner(name: str, path: Path, runtime: str, x_rows: list, x_full: np.ndarray, note: str) -> Runner:
    from bnc_deploy.runtimes.base import load_runtime

    rt = load_runtime(path, runtime, threads=1)
    if runtime == "native":
        return Runner(name, lambda k: rt.predict(x_rows[k]), lambda: rt.predict(x_full), note + f", {x_full.dtype}")
    prepared_rows = [rt.prepare(r) for r in x_rows]
    prepared_full = rt.prepare(x_full)
    return Runner(
        name, lambda k: rt.invoke(prepared_rows[k]), lambda: np.asarray(rt.invoke(prepared_full)[1]).reshape(-1), note
    )


EMLEARN_WRAPPER = r"""
#include "model.h"
void predict_batch(const float *x, int32_t n, int32_t d, int32_t *out) {
    for (int32_t i = 0; i < n; ++i) out[i] = mybayes_predict(x + (int64_t)i * d, d);
}
"""


def emlearn_runner(x_tr, y_tr, x_rows, x_full, work: Path) -> Runner | str:
    """emlearn's Gaussian NB compiled into a shared library (one ctypes call per batch), or why not."""
    try:
        import emlearn
        from emlearn.bayes import generate_c
        from sklearn.naive_bayes import GaussianNB
    except ImportError as exc:
        return f"emlearn not installed ({exc.name})"
    cc = shutil.which(os.environ.get("CC", "cc"))
    if not cc:
        return "no C compiler"
    est = GaussianNB().fit(x_tr.astype(np.float64), y_tr)
    n_classes, n_features = est.theta_.shape
    model = np.zeros((n_classes, n_features, 3))
    std = np.sqrt(est.var_)
    model[..., 0], model[..., 1], model[..., 2] = est.theta_, std, np.log2(std)
    (work / "model.h").write_text(generate_c(model, "mybayes"))
    (work / "emlearn_wrap.c").write_text(EMLEARN_WRAPPER)
    lib = work / "emlearn_nb.so"
    include = Path(emlearn.__file__).parent
    # eml_bayes keeps per-class scores in a stack array of EML_MAX_CLASSES (default 10) entries
    proc = subprocess.run(
        [
            cc,
            "-O3",
            "-march=native",
            "-shared",
            "-fPIC",
            f"-DEML_MAX_CLASSES={max(n_classes, 10)}",
            f"-I{include}",
            f"-I{work}",
            str(work / "emlearn_wrap.c"),
            "-o",
            str(lib),
            "-lm",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return f"emlearn C did not compile: {proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else '?'}"
    fn = ctypes.CDLL(str(lib)).predict_batch
    fn.restype, fn.argtypes = None, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p]
    rows = [np.ascontiguousarray(r, dtype=np.float32) for r in x_rows]
    full = np.ascontiguousarray(x_full, dtype=np.float32)
    out1 = np.zeros(1, dtype=np.int32)
    d = full.shape[1]

    def one(k):
        fn(rows[k].ctypes.data, 1, d, out1.ctypes.data)
        return out1

    def batch():
        out = np.empty(len(full), dtype=np.int32)
        fn(full.ctypes.data, len(full), d, out.ctypes.data)
        return out

    return Runner("emlearn", one, batch, "Gaussian NB (a different model), C via ctypes, one call per batch")


# -- timing -------------------------------------------------------------------------------------------------
#: Timed full-batch calls per runtime and round, back to back after an untimed one (a throughput
#: figure: the tables warm, as in a serving loop).
FULL_PER_ROUND = 3


def measure(
    runners: list[Runner], n_rows: int, rounds: int, per_round: int, warmup: int, probe: Callable[[], float]
) -> tuple[dict, list[float]]:
    """Interleaved rounds: per round each runner does ``per_round`` single rows, then
    :data:`FULL_PER_ROUND` back-to-back full batches (each group after one untimed call); after the
    runners, ``probe()`` (the add rate). Returns the runners' timings and every round's probe."""
    probes = []
    lat = {r.name: [] for r in runners}
    full = {r.name: [] for r in runners}
    for r in runners:
        for k in range(warmup):
            r.one(k % n_rows)
        r.full()
    for rnd in range(rounds):
        order = runners if rnd % 2 == 0 else runners[::-1]
        for r in order:
            r.one(0)  # after a big batch: re-size outside the timing
            for k in range(per_round):
                row = (rnd * per_round + k) % n_rows
                t0 = time.perf_counter()
                r.one(row)
                lat[r.name].append(time.perf_counter() - t0)
            r.full()  # untimed: tables back in the cache
            for _ in range(FULL_PER_ROUND):
                t0 = time.perf_counter()
                r.full()
                full[r.name].append(time.perf_counter() - t0)
        probes.append(probe())
    return {
        name: {
            "batch1_p50_us": float(np.percentile(lat[name], 50) * 1e6),
            "batch1_p99_us": float(np.percentile(lat[name], 99) * 1e6),
            "full_median_ms": float(np.median(full[name]) * 1e3),
            "full_best_ms": float(np.min(full[name]) * 1e3),
        }
        for name in lat
    }, probes


# -- one dataset x model ------------------------------------------------------------------------------------
def bench_case(name: str, kind: str, args, add_rate: AddRate, work: Path) -> dict:
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.reference.bnc import ReferencePredictor
    from bnc_deploy.verify import export_path

    ds = load_dataset(name)
    x_tr, y_tr = ds.x_train.astype(np.int64), ds.y_train.astype(np.int64)
    x_te, y_te = np.ascontiguousarray(ds.x_test, dtype=np.int64), ds.y_test.astype(np.int64)
    x_te_u8 = np.ascontiguousarray(ds.x_test, dtype=np.uint8)  # the dataset's own dtype (codes < 256)
    cards, n_classes = np.asarray(ds.cardinalities), int(ds.n_classes)
    if kind == "tan":
        from bnc_deploy.train.chow_liu import chow_liu_parents  # NumPy only (no torch)

        parents = chow_liu_parents(x_tr, y_tr, cards, n_classes)
    else:
        parents = np.full(len(cards), -1)
    quantizer = FixedPointLogQuantizer(args.bits, args.int_bits)
    artifact = ml_artifact(x_tr, y_tr, cards, n_classes, parents, quantizer, ds.class_names)
    reference = ReferencePredictor(artifact).predict(x_te)
    d = artifact.n_features
    rows = [np.ascontiguousarray(x_te[i : i + 1]) for i in range(min(len(x_te), 1000))]
    case_dir = work / f"{name}_{kind}"
    case_dir.mkdir(parents=True, exist_ok=True)

    runners, skipped, sizes = [], {}, {}
    wanted = args.runtimes
    if "onnx" in wanted:
        path = export_path(artifact, case_dir / "m.onnx", "onnx")
        sizes["onnx"] = path.stat().st_size
        runners.append(onnx_runner("onnx", path, rows, x_te, "ONNX gather (default), onnxruntime 1 thread"))
    if "onnx-grouped" in wanted:
        path = export_path(artifact, case_dir / "g.onnx", "onnx", lowering="gather-grouped")
        sizes["onnx-grouped"] = path.stat().st_size
        runners.append(onnx_runner("onnx-grouped", path, rows, x_te, "ONNX gather-grouped, onnxruntime 1 thread"))
    if "onnx-auto" in wanted:
        from bnc_deploy.verify import export_file

        report = export_file(artifact, case_dir / "a.onnx", "onnx", lowering="auto")
        sizes["onnx-auto"] = report.path.stat().st_size
        pick = report.lowering_auto["candidate"]
        runners.append(onnx_runner("onnx-auto", report.path, rows, x_te, f"ONNX auto -> {pick}, onnxruntime 1 thread"))
    if "tflite" in wanted:
        try:
            path = export_path(artifact, case_dir / "m.tflite", "tflite")
            sizes["tflite"] = path.stat().st_size
            runners.append(adapter_runner("tflite", path, "litert", rows, x_te, "LiteRT 1 thread, bare invoke"))
        except Exception as exc:  # noqa: BLE001 - a missing extra or converter failure: report, go on
            skipped["tflite"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    for native, codes in (("native", x_te_u8), ("native-i64", x_te)):
        if native not in wanted:
            continue
        try:
            path = export_path(artifact, case_dir / "m.h", "c")
            sizes[native] = path.stat().st_size
            runners.append(adapter_runner(native, path, "native", rows, codes, "C export via --runtime native"))
        except Exception as exc:  # noqa: BLE001 - no compiler, or the native runtime is not available
            skipped[native] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if "skl2onnx" in wanted:
        try:
            from skl2onnx import to_onnx
            from sklearn.naive_bayes import CategoricalNB

            skl = CategoricalNB(alpha=1.0, min_categories=cards).fit(x_tr, y_tr)
            model = to_onnx(skl, x_tr[:1], options={"zipmap": False}).SerializeToString()
            sizes["skl2onnx"] = len(model)
            runners.append(onnx_runner("skl2onnx", model, rows, x_te, "CategoricalNB float NB, onnxruntime 1 thread"))
        except ImportError as exc:
            skipped["skl2onnx"] = f"not installed ({exc.name}): pip install '.[bench]'"
    if "emlearn" in wanted:
        em = emlearn_runner(x_tr, y_tr, rows, x_te, case_dir)
        if isinstance(em, str):
            skipped["emlearn"] = em
        else:
            runners.append(em)

    agreement = {}
    for r in runners:
        labels = np.asarray(r.full()).reshape(-1).astype(np.int64)
        agreement[r.name] = {
            "differ_from_reference": int(np.sum(labels != reference)),
            "accuracy": float(np.mean(labels == y_te)),
        }
        ours = ("onnx", "onnx-grouped", "onnx-auto", "tflite", "native", "native-i64")
        if r.name in ours and agreement[r.name]["differ_from_reference"]:
            raise SystemExit(
                f"{name} {kind}: {r.name} disagrees with the reference on "
                f"{agreement[r.name]['differ_from_reference']} rows"
            )
    timings, probes = measure(runners, len(rows), args.rounds, args.per_round, args.warmup, add_rate.sample)
    add_rate.best = max([add_rate.best, *probes])
    limit_us = d * n_classes / add_rate.best * 1e6
    skl = timings.get("skl2onnx")
    results = []
    for r in runners:
        t = timings[r.name]
        per_row_us = t["full_median_ms"] * 1e3 / len(x_te)
        entry = {
            "dataset": name,
            "model": kind,
            "runtime": r.name,
            "note": r.note,
            **t,
            "rows_per_s": len(x_te) / (t["full_median_ms"] / 1e3),
            "per_row_us": per_row_us,
            "x_add_limit": per_row_us / limit_us,
            "file_bytes": sizes.get(r.name),
            **agreement[r.name],
        }
        if skl:
            entry["speedup_batch1_vs_skl2onnx"] = skl["batch1_p50_us"] / t["batch1_p50_us"]
            entry["speedup_full_vs_skl2onnx"] = skl["full_median_ms"] / t["full_median_ms"]
        results.append(entry)
    return {
        "dataset": name,
        "model": kind,
        "n_test": len(x_te),
        "n_features": d,
        "n_classes": n_classes,
        "adds_per_row": d * n_classes,
        "add_rate_per_s": add_rate.best,
        "add_rate_in_rounds": probes,
        "add_limit_us_per_row": limit_us,
        "results": results,
        "skipped": skipped,
    }


def print_case(case: dict) -> None:
    print(
        f"\n{case['dataset']} {case['model'].upper()}: {case['n_test']:,} test rows, D = {case['n_features']}, "
        f"C = {case['n_classes']}, D*C = {case['adds_per_row']} adds/row, add-limit "
        f"{case['add_limit_us_per_row'] * 1e3:.1f} ns/row (add rate {case['add_rate_per_s'] / 1e9:.1f} G/s, the "
        f"fastest so far; this case's rounds {min(case['add_rate_in_rounds']) / 1e9:.1f} to "
        f"{max(case['add_rate_in_rounds']) / 1e9:.1f})"
    )
    print(
        f"  {'runtime':<14}{'batch-1 p50':>12}{'full (med)':>12}{'rows/s':>13}{'skl/x b1':>10}{'skl/x full':>11}"
        f"{'x limit':>9}{'bytes':>9}{'differ':>8}{'acc':>8}"
    )
    for e in case["results"]:
        b1 = e.get("speedup_batch1_vs_skl2onnx")
        fl = e.get("speedup_full_vs_skl2onnx")
        print(
            f"  {e['runtime']:<14}{e['batch1_p50_us']:>10.1f}us{e['full_median_ms']:>10.3f}ms{e['rows_per_s']:>13,.0f}"
            f"{(f'{b1:.2f}x' if b1 else '-'):>10}{(f'{fl:.2f}x' if fl else '-'):>11}{e['x_add_limit']:>9.1f}"
            f"{(e['file_bytes'] or 0):>9,}{e['differ_from_reference']:>8}{e['accuracy']:>8.2%}"
        )
    for k, why in case["skipped"].items():
        print(f"  {k:<14}skipped: {why}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated: " + ", ".join(DATASETS))
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated: nb, tan")
    p.add_argument("--runtimes", default=",".join(RUNTIMES), help="comma-separated: " + ", ".join(RUNTIMES))
    p.add_argument("--bits", type=int, default=3)
    p.add_argument("--int-bits", type=int, default=2)
    p.add_argument("--rounds", type=int, default=30, help="interleaved rounds (full-batch calls per runtime)")
    p.add_argument("--per-round", type=int, default=50, help="single-row calls per runtime per round")
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--quick", action="store_true", help="letter NB only, 8 rounds of 25 calls")
    p.add_argument(
        "--ort-call",
        choices=("run", "iobinding"),
        default="run",
        help="how every ONNX session (ours and skl2onnx alike) is called: InferenceSession.run "
        "(default) or IOBinding with buffers bound once",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--keep", type=Path, default=None, help="keep the exported files in this folder")
    args = p.parse_args(argv)
    ORT_CALL["mode"] = args.ort_call
    if args.quick:
        args.datasets, args.models, args.rounds, args.per_round, args.warmup = "letter", "nb", 8, 25, 20
    args.runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    for r in args.runtimes:
        if r not in RUNTIMES:
            p.error(f"unknown runtime {r!r}; choose from {', '.join(RUNTIMES)}")
    datasets = [s.strip() for s in args.datasets.split(",") if s.strip()]
    models = [s.strip() for s in args.models.split(",") if s.strip()]
    for s in datasets:
        if s not in DATASETS:
            p.error(f"unknown dataset {s!r}; choose from {', '.join(DATASETS)}")
    for m in models:
        if m not in MODELS:
            p.error(f"unknown model {m!r}; choose from nb, tan")

    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_inference_"))
    work.mkdir(parents=True, exist_ok=True)
    start_rate, add_how, sampler = measure_add_rate(work)
    add_rate = AddRate(start_rate, lambda: sampler(5))
    import onnxruntime as ort

    header = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "onnxruntime": ort.__version__,
        "bits": args.bits,
        "int_bits": args.int_bits,
        "add_rate_per_s": start_rate,
        "add_rate_how": add_how,
        "rounds": args.rounds,
        "per_round": args.per_round,
        "full_per_round": FULL_PER_ROUND,
        "ort_call": args.ort_call,
    }
    if not args.json:
        print(
            f"bnc-deploy inference benchmark: {args.bits}-bit ML models (B_I = {args.int_bits}); onnxruntime "
            f"{ort.__version__}; Python {header['python']}, {header['machine']}, {header['cpus']} CPUs, load "
            f"average {header['load_average']:.2f}"
        )
        print(f"add rate {start_rate / 1e9:.2f} G adds/s at the start ({add_how}); again every round")
        print(
            f"{args.rounds} interleaved rounds; per round each runtime: {args.per_round} single-row calls, then "
            f"{FULL_PER_ROUND} back-to-back full-test-set calls (after an untimed one); ONNX sessions called with "
            f"{args.ort_call}; p50 / median reported; skl/x = skl2onnx time / this time"
        )
    cases = []
    for name in datasets:
        for kind in models:
            case = bench_case(name, kind, args, add_rate, work)
            cases.append(case)
            if not args.json:
                print_case(case)
    if args.json:
        print(json.dumps({"header": header, "cases": cases}, indent=1))
    else:
        print(
            "\nemlearn is Gaussian naive Bayes (continuous features, a different model): its time is comparable, "
            "its labels are not.\nfiles: " + str(work)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
