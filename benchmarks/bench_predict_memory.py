"""Peak memory of ``predict`` on 10^6 rows, per runtime and input dtype: chunked vs. unchunked.

Each measurement runs in a fresh subprocess: load the runtime, build the input (the letter test
rows tiled to ``--rows`` rows, as int64/int32/uint8 codes), warm the runtime up on 1,000 rows,
then reset the peak-RSS counter (``/proc/self/clear_refs``), call ``rt.predict(x)`` once and read
``VmHWM``. "extra" is the peak minus the RSS just before ``predict`` (the input already in
memory), "ratio" is extra / input size. The labels' SHA-256 is printed so that chunked and
unchunked runs (and runs before/after a change) can be compared for identical labels.

Target (issue 11 item 4): extra <= 3 x input + a constant.

    python benchmarks/bench_predict_memory.py --models /tmp/nb3.bnc /tmp/nb3.onnx /tmp/nb3.tflite
        [--rows 1000000] [--dtypes int64 int32 uint8] [--chunk-rows default none 16384]

Make the models with (BN, 3 bits, letter)::

    bnc-train --data letter --model nb --init ml --bits 3 --epochs 0 -o /tmp/nb3.bnc
    bnc-export /tmp/nb3.bnc --format onnx -o /tmp/nb3.onnx
    bnc-export /tmp/nb3.bnc --format tflite -o /tmp/nb3.tflite

``--chunk-rows none`` runs the adapters unchunked (``chunk_rows=None``, the behaviour before
chunking), ``default`` leaves the adapter's default. On a toolkit without the option (before the
change) only ``default`` applies, and it is the unchunked code.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

MIB = 1024 * 1024


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def worker(model: str, dtype: str, rows: int, chunk: str) -> dict:
    import gc

    import numpy as np

    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.runtimes.base import load_runtime

    options = {"threads": 1}
    if chunk != "default":
        options["chunk_rows"] = None if chunk == "none" else int(chunk)
    rt = load_runtime(model, **options)
    test = load_dataset("letter").x_test
    reps = -(-rows // test.shape[0])
    x = np.ascontiguousarray(np.tile(test, (reps, 1))[:rows].astype(dtype))
    rt.predict(x[:1000])  # warm-up: lazy allocations and library initialisation are not the input's
    gc.collect()
    base = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS (Linux >= 4.0)
    start = time.perf_counter()
    labels = rt.predict(x)
    seconds = time.perf_counter() - start
    peak = _status("VmHWM")
    return {
        "runtime": rt.name,
        "model": os.path.basename(model),
        "dtype": dtype,
        "rows": rows,
        "chunk": chunk,
        "input_mib": x.nbytes / MIB,
        "base_mib": base / MIB,
        "peak_mib": peak / MIB,
        "extra_mib": (peak - base) / MIB,
        "ratio": (peak - base) / x.nbytes,
        "seconds": seconds,
        "labels_sha256": hashlib.sha256(np.asarray(labels, dtype=np.int64).tobytes()).hexdigest()[:12],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", required=True, help=".bnc/.onnx/.tflite files")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dtypes", nargs="+", default=["int64", "int32", "uint8"])
    p.add_argument(
        "--chunk-rows",
        nargs="+",
        default=["none", "default"],
        help="'none' (unchunked), 'default', or a row count; several run side by side",
    )
    p.add_argument("--json", action="store_true", help="print one JSON line per measurement")
    p.add_argument("--worker", nargs=4, metavar=("MODEL", "DTYPE", "ROWS", "CHUNK"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        model, dtype, rows, chunk = args.worker
        print(json.dumps(worker(model, dtype, int(rows), chunk)))
        return 0
    print(
        f"{'runtime':<12}{'model':<16}{'dtype':<7}{'chunk':>8}{'input MiB':>10}{'base MiB':>10}"
        f"{'peak MiB':>10}{'extra MiB':>10}{'ratio':>7}{'seconds':>9}  labels"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for model in args.models:
        for dtype in args.dtypes:
            for chunk in args.chunk_rows:
                out = subprocess.run(
                    [sys.executable, __file__, "--models", model, "--worker", model, dtype, str(args.rows), chunk],
                    capture_output=True,
                    text=True,
                    env=env,
                )
                if out.returncode != 0:
                    tail = (out.stderr.strip().splitlines() or ["?"])[-1]
                    print(f"{model} {dtype} {chunk}: failed ({tail})")
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                if args.json:
                    print(json.dumps(r))
                    continue
                print(
                    f"{r['runtime']:<12}{r['model']:<16}{r['dtype']:<7}{r['chunk']:>8}{r['input_mib']:>10.1f}"
                    f"{r['base_mib']:>10.1f}{r['peak_mib']:>10.1f}{r['extra_mib']:>10.1f}{r['ratio']:>7.2f}"
                    f"{r['seconds']:>9.2f}  {r['labels_sha256']}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
