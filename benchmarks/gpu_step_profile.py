"""Where a batched trainer's GPU epoch goes: wall time against the GPU's busy time, and the kernels
that take it (``torch.profiler``), per kind of configuration and way of stepping.

An epoch whose kernels add up to far less than its wall time waits on launches and Python (CUDA
graphs help); one whose kernels fill it is bound by them (only less work helps: fewer passes over
memory, smaller tables). Each profiled call's setup and the copies of its results are in its wall
time. The configurations are ``benchmarks/bench_sweep.py``'s.

    python benchmarks/gpu_step_profile.py [--kinds tan:1024,fc:192] [--gpu-steps eager,graphs] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_sweep  # noqa: E402

from bnc_deploy.datasets import load_dataset  # noqa: E402


def profile(kind: str, m: int, steps: str, data: str, top: int, device: str = "cuda") -> dict:
    name = bench_sweep.kind_data(kind, argparse.Namespace(data=data, cnn_data="usps"))
    dataset = load_dataset(name, validation_fraction=0.2, seed=0)

    def run(epochs: int) -> float:
        return bench_sweep.batched_seconds(dataset, kind, m, epochs, device, False, gpu_steps=steps)

    run(2)  # compile, capture and allocate outside the profile
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        started = time.perf_counter()
        run(1)
        wall = time.perf_counter() - started
    events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(e.self_device_time_total for e in events) / 1e6
    events.sort(key=lambda e: e.self_device_time_total, reverse=True)
    kernels = [{"name": e.key[:90], "calls": e.count, "seconds": e.self_device_time_total / 1e6} for e in events[:top]]
    return {"kind": kind, "M": m, "gpu_steps": steps, "wall_seconds": wall, "gpu_busy_seconds": busy, "top": kernels}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="tan:1024,fc:192", help="kind:M pairs (kinds of bench_sweep.py)")
    parser.add_argument("--gpu-steps", default="eager,graphs", help="ways of stepping (bench_sweep.py --gpu-steps)")
    parser.add_argument("--data", default="letter")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--json", default=None)
    parser.add_argument("--device", default="cuda", help="cuda (cpu: a smoke run of this script, no GPU kernels)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("gpu_step_profile: torch sees no CUDA GPU")
    rows = []
    for item in args.kinds.split(","):
        kind, m = item.split(":")
        for steps in args.gpu_steps.split(","):
            row = profile(kind, int(m), steps, args.data, args.top, args.device)
            rows.append(row)
            print(
                f"{kind} M={m} {steps}: one epoch {row['wall_seconds']:.3f} s wall, "
                f"{row['gpu_busy_seconds']:.3f} s of kernels",
                flush=True,
            )
            for k in row["top"]:
                print(f"    {k['seconds']:8.4f} s  {k['calls']:6d}  {k['name']}")
    if args.json:
        name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
        Path(args.json).write_text(json.dumps({"device": name, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
