"""Batch-1 cost of the validated adapter call (``rt.run``) against the bare runtime call (``rt.invoke``).

One run measures, interleaved (rounds of ``--block`` timed calls of each in turn, so a burst of
load from other processes hits every column alike), on the letter NB 3-bit export (16 features,
26 classes), one test row per call (256 rows in turn), 1 runtime thread:

* ``invoke``: ``rt.invoke(prepared)``, the bare runtime call on a row prepared beforehand;
* ``run``: ``rt.run(row)``, validation (the fused small-batch check), the runtime call and the
  output checks, float64 scores returned;
* ``predict``: ``rt.predict(row)``, the same with the labels only;
* ``run, full check``: ``rt.run(row)`` on an adapter whose fused check is off, i.e. the path a
  batch the fused check declines takes (``check_codes``, the chunking, the same output checks);
* onnxruntime only, the same adapter calls with the outputs not bound (``InferenceSession.run``
  allocating them per call, as for batches above ``FAST_ROWS``): ``invoke, session.run`` and
  ``run, full check, session.run`` (``run`` without the fused check and without bound outputs;
  the output checks are the same on every path).

The native runtime's ``run`` and ``predict`` take its own one-row C path, which checks in C, so its
``run`` and ``run, full check`` columns time the same path.

It prints p50/p90 per column and ``run p50 / invoke p50`` (the acceptance of issue 28 item 7 is
<= 2 for onnxruntime), for each of ``--runtimes`` (default ``onnxruntime``; also ``numpy``,
``native`` (needs cc), ``litert`` (needs TensorFlow to export)).

    python benchmarks/bench_run_overhead.py [--model letter_nb.onnx] [--n 20000] [--runtimes onnxruntime,numpy]

Without ``--model`` it trains and exports one as benchmarks/bench_serve.py does (needs the letter
data, ../shared/datasets); the other runtimes' files are exported from the same ``.bnc``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import make_model  # noqa: E402  (the same letter NB model, built the same way)

FORMATS = {"numpy": None, "onnxruntime": "onnx", "native": "c", "litert": "tflite"}
SUFFIXES = {"numpy": ".bnc", "onnxruntime": ".onnx", "native": ".h", "litert": ".tflite"}


def _full_path(rt):
    """The adapter with its fused check off: every call takes the full check and the chunking."""
    rt._fused_check = lambda x: None
    rt._small_batches = False
    return rt


def side_by_side(rt, rt_full, x: np.ndarray, n: int, block: int = 200, unbound=None) -> dict:
    """``{column: per-call seconds}`` for invoke, run, predict and run with the full check, interleaved;
    ``unbound``: ``(adapter, adapter with the full check)`` of onnxruntime without bound outputs."""
    rows = [np.ascontiguousarray(x[i : i + 1]) for i in range(min(256, len(x)))]
    prepared = [rt.prepare(r) for r in rows]
    calls = {
        "invoke": (rt.invoke, prepared),
        "run": (rt.run, rows),
        "predict": (rt.predict, rows),
        "run, full check": (rt_full.run, rows),
    }
    if unbound is not None:
        calls["invoke, session.run"] = (unbound[0].invoke, [unbound[0].prepare(r) for r in rows])
        calls["run, full check, session.run"] = (unbound[1].run, rows)
    for call, args in calls.values():  # warm-up: allocations, caches, the fused check's bounds
        for k in range(300):
            call(args[k % len(args)])
    times: dict[str, list[float]] = {name: [] for name in calls}
    clock = time.perf_counter
    for start in range(0, n, block):
        for name, (call, args) in calls.items():
            out = times[name]
            for k in range(start, min(n, start + block)):
                arg = args[k % len(args)]
                t0 = clock()
                call(arg)
                out.append(clock() - t0)
    return times


def summary(seconds: list[float]) -> dict:
    us = np.asarray(seconds) * 1e6
    return {"p50_us": round(float(np.percentile(us, 50)), 2), "p90_us": round(float(np.percentile(us, 90)), 2)}


def model_for(runtime: str, bnc: Path, onnx: Path, folder: Path) -> Path:
    if runtime == "onnxruntime":
        return onnx
    if runtime == "numpy":
        return bnc
    out = folder / f"letter_nb{SUFFIXES[runtime]}"
    if not bnc.is_file():
        sys.exit(f"bench_run_overhead: runtime {runtime!r} needs the model's .bnc (--bnc) to export from")
    if not out.exists():
        bin_dir = Path(sys.executable).parent
        cmd = [str(bin_dir / "bnc-export"), str(bnc), "--format", FORMATS[runtime], "-o", str(out)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="letter NB .onnx (default: train and export one)")
    p.add_argument("--bnc", type=Path, help="its .bnc (for --runtimes other than onnxruntime with --model)")
    p.add_argument("--n", type=int, default=20000, help="timed calls per column (default 20000)")
    p.add_argument("--block", type=int, default=200, help="calls per column per round (default 200)")
    p.add_argument("--runtimes", default="onnxruntime", help="comma-separated (default onnxruntime)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)

    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.runtimes.base import load_runtime

    x = load_dataset("letter").x_test.astype(np.int64)
    results = {"cpu_count": os.cpu_count(), "load_average_before": os.getloadavg(), "runtimes": {}}
    with tempfile.TemporaryDirectory(prefix="bench_run_overhead_") as tmp:
        folder = Path(tmp)
        onnx = args.model if args.model is not None else make_model(folder)
        bnc = args.bnc if args.bnc is not None else folder / "letter_nb.bnc"
        for runtime in args.runtimes.split(","):
            path = model_for(runtime, bnc, onnx, folder)
            rt = load_runtime(path, runtime, threads=1)
            rt_full = _full_path(load_runtime(path, runtime, threads=1))
            unbound = None
            if runtime == "onnxruntime":
                unbound = (load_runtime(path, runtime, threads=1), _full_path(load_runtime(path, runtime, threads=1)))
                for adapter in unbound:
                    adapter._bound_outputs = []  # no bindable outputs: InferenceSession.run on every call
            times = side_by_side(rt, rt_full, x, args.n, args.block, unbound)
            row = {name: summary(t) for name, t in times.items()}
            row["ratio run/invoke p50"] = round(row["run"]["p50_us"] / row["invoke"]["p50_us"], 2)
            if unbound is not None:
                before = row["run, full check, session.run"]["p50_us"] / row["invoke, session.run"]["p50_us"]
                row["ratio (run, full check, session.run) / (invoke, session.run) p50"] = round(before, 2)
            results["runtimes"][runtime] = row
    results["load_average_after"] = os.getloadavg()

    print(
        f"letter NB 3-bit, batch 1, 1 runtime thread, {args.n} calls per column (interleaved); "
        f"{results['cpu_count']} CPUs, load average {results['load_average_before'][0]:.2f} before, "
        f"{results['load_average_after'][0]:.2f} after"
    )
    print(f"{'runtime':12} {'call':30} {'p50 us':>8} {'p90 us':>8}")
    for runtime, row in results["runtimes"].items():
        for name, r in row.items():
            if isinstance(r, dict):
                print(f"{runtime:12} {name:30} {r['p50_us']:8.2f} {r['p90_us']:8.2f}")
            else:
                print(f"{runtime:12} {name.replace('ratio ', '')}: {r:.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
