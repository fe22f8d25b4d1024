"""Profiling report: letter and usps, NB and Chow-Liu TAN, float32 and 1..8 bits.

    python benchmarks/profile_report.py [--out out/profile_report] [--quick] [--runs N]

For every (dataset, structure, bit width) it trains the maximum-likelihood model
(``bnc-train --init ml --epochs 0``; B_I is bnc-train's default for each B), exports ONNX and
TFLite (gather lowering, verified by bnc-export) and profiles the three files with the
``bnc-profile`` machinery on the test split: analytic size/ops, the graph count (which must equal
them), test error per runtime, batch-1 latency (p50/p99) and full-batch throughput in numpy,
onnxruntime (1 thread and default threads) and LiteRT (1 thread).

A second part checks analytic == graph count on letter, satimage and usps, NB and TAN, for every
export variant: ONNX gather / onehot-fc / pack-bits and TFLite gather / onehot-fc (equal-cast, and
the relu builder at 3 bits), at float and 1..8 bits (onehot-fc and pack-bits at 3 and 8 bits and float).

Writes to the output folder: ``rows.json`` (one object per file and runtime setting, the
``bnc-profile --json`` schema), ``models.json`` and ``table.txt`` (one line per model),
``graph_checks.json``/``graph_checks.txt``, ``environment.json``, and the three plots
``error_vs_size``, ``error_vs_ops``, ``error_vs_bits`` (PNG and SVG). Models go to ``models/``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from bnc_deploy.cli import export as export_cli  # noqa: E402
from bnc_deploy.cli import profile as profile_cli  # noqa: E402
from bnc_deploy.cli import train as train_cli  # noqa: E402
from bnc_deploy.costs import analytic_costs
from bnc_deploy.profiling.graph_count import count_graph  # noqa: E402
from bnc_deploy.profiling.latency import environment  # noqa: E402
from bnc_deploy.profiling.pareto import mark_pareto, plot_all  # noqa: E402

BIT_WIDTHS = [None, 1, 2, 3, 4, 5, 6, 7, 8]
STRUCTURES = ("nb", "tan")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def quietly(function, *args):
    """Run a CLI's ``run`` without its progress output."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return function(*args)


def train(dataset: str, structure: str, bits: int | None, out: Path) -> Path:
    """Maximum-likelihood model via bnc-train (in process: torch is imported once)."""
    argv = [
        "--data",
        dataset,
        "--model",
        structure,
        "--init",
        "ml",
        "--epochs",
        "0",
        "--threads",
        "1",
        "--quiet",
        "-o",
        str(out),
    ]
    if structure == "tan":
        argv += ["--structure", "chow-liu"]
    if bits is not None:
        argv += ["--bits", str(bits)]
    quietly(train_cli.run, train_cli.build_parser().parse_args(argv))
    return out


def export(model: Path, fmt: str, out: Path, *extra: str) -> Path:
    """bnc-export (exports and verifies against the model's check set); raises on disagreement."""
    report = quietly(
        export_cli.run, export_cli.build_parser().parse_args([str(model), "--format", fmt, "-o", str(out), *extra])
    )
    if report["exact_expected"] and report["exact"] is False:
        raise SystemExit(f"{out} is not bit-exact with {model}: {report}")
    return out


def width_name(bits: int | None) -> str:
    return "float" if bits is None else f"{bits}bit"


# -- part 1: the report ------------------------------------------------------------------------------------
def profile_models(datasets, widths, models_dir: Path, runs: int, env: dict) -> list[dict]:
    rows = []
    for dataset in datasets:
        data = profile_cli.load_test_split(dataset, None)
        for structure in STRUCTURES:
            for bits in widths:
                stem = models_dir / f"{dataset}_{structure}_{width_name(bits)}"
                t0 = time.perf_counter()
                model = train(dataset, structure, bits, stem.with_suffix(".bnc"))
                files = [
                    model,
                    export(model, "onnx", stem.with_suffix(".onnx")),
                    export(model, "tflite", stem.with_suffix(".tflite")),
                ]
                for f in files:
                    file_rows, _ = profile_cli.profile_model(
                        f,
                        ["numpy", "onnxruntime", "litert"],
                        data,
                        env=env,
                        runs=runs,
                        repeats=3,
                        warmup=20,
                        throughput_repeats=5,
                    )
                    for r in file_rows:
                        r.update(model_id=str(stem), group=f"{dataset} {structure.upper()}")
                    rows.extend(file_rows)
                log(
                    f"  {stem.name}: error {100 * rows[-1]['test_error']:.2f} %, {rows[-1]['size_bits']:,} bits, "
                    f"{rows[-1]['n_ops']:,} ops ({time.perf_counter() - t0:.1f} s)"
                )
    return rows


def model_table(rows: list[dict]) -> tuple[list[dict], str]:
    """One record per model (the runtimes side by side) and its text table."""
    models: dict[str, dict] = {}
    for r in rows:
        m = models.setdefault(
            r["model_id"],
            {
                "model_id": r["model_id"],
                "dataset": r["dataset"],
                "structure": r["structure"],
                "group": r["group"],
                "bits": r["bits"],
                "quantized": r["quantized"],
                "test_error": r["test_error"],
                "size_bits": r["size_bits"],
                "n_ops": r["n_ops"],
                "n_parameters": r["n_parameters"],
                "graph_equal": {},
                "errors": {},
                "p50_us": {},
                "p99_us": {},
                "rows_per_s": {},
            },
        )
        key = r["runtime"] + ("" if r["runtime"] == "numpy" else f"-{r['threads'] or 'def'}")
        m["errors"][key] = r["test_error"]
        m["p50_us"][key], m["p99_us"][key] = r["latency_us_p50_batch1"], r["latency_us_p99_batch1"]
        m["rows_per_s"][key] = r["throughput_rows_per_s"]
        if r["format"] != "bnc":
            m["graph_equal"][r["format"]] = r["graph_matches_analytic"]
    records = list(models.values())
    mark_pareto(records, by="dataset")
    keys = ["numpy", "onnxruntime-1", "onnxruntime-def", "litert-1"]
    short = ["np", "ort1", "ortD", "lite1"]
    block = lambda title: f"{title:^31}"  # noqa: E731
    head1 = f"{'':<39}{block('batch-1 p50 (µs)')} {block('batch-1 p99 (µs)')} {block('throughput (k rows/s)')}"
    head2 = f"{'dataset':<9}{'model':<6}{'bits':>5} {'error %':>8} {'size bits':>10} {'ops':>5} " + " ".join(
        " ".join(f"{k:>7}" for k in short) for _ in range(3)
    )
    lines = [head1, head2, "-" * len(head2)]
    for m in records:
        equal = "" if m["graph_equal"] and all(m["graph_equal"].values()) else " (graph count differs!)"
        same_error = len({round(e, 12) for e in m["errors"].values()}) == 1
        p50 = " ".join(f"{m['p50_us'].get(k) or 0:>7.1f}" for k in keys)
        p99 = " ".join(f"{m['p99_us'].get(k) or 0:>7.1f}" for k in keys)
        thr = " ".join(f"{(m['rows_per_s'].get(k) or 0) / 1e3:>7,.0f}" for k in keys)
        lines.append(
            f"{m['dataset']:<9}{m['structure'].upper():<6}{'f32' if not m['quantized'] else m['bits']:>5} "
            f"{100 * m['test_error']:>6.2f}{'' if same_error else '!'}{'*' if m['pareto'] else ' '} "
            f"{m['size_bits']:>10,} {m['n_ops']:>5,} {p50} {p99} {thr}{equal}"
        )
    lines += [
        "-" * len(head2),
        "* Pareto-optimal in (size bits, ops, test error) within the dataset. '!': runtimes disagree on the "
        "test error.",
        "Every row: the ONNX and TFLite graph counts equal the analytic size and ops unless marked.",
        "np = numpy reference (.bnc), ort1/ortD = onnxruntime 1 thread / default threads, lite1 = LiteRT 1 thread.",
        "Latency: bare runtime call, batch 1, 3 blocks of --runs calls after 20 warm-up calls. Throughput: "
        "the whole test split in one call (median of 5).",
    ]
    return records, "\n".join(lines)


# -- part 2: analytic == graph count for every export variant ---------------------------------------------
def graph_checks(datasets, widths, models_dir: Path) -> tuple[list[dict], str]:
    checks = []
    for dataset in datasets:
        for structure in STRUCTURES:
            for bits in widths:
                stem = models_dir / f"{dataset}_{structure}_{width_name(bits)}"
                model = stem.with_suffix(".bnc")
                if not model.exists():
                    train(dataset, structure, bits, model)
                variants = [("onnx", "gather", ()), ("tflite", "gather", ())]
                if bits in (None, 3, 8):
                    variants += [
                        ("onnx", "onehot-fc", ("--lowering", "onehot-fc")),
                        ("tflite", "onehot-fc", ("--lowering", "onehot-fc")),
                    ]
                    if bits is not None:
                        variants.append(("onnx", "pack-bits", ("--pack-bits",)))
                if bits == 3:
                    variants.append(("tflite", "onehot-fc relu", ("--lowering", "onehot-fc", "--onehot", "relu")))
                from bnc_deploy.artifacts import load_artifact

                costs = analytic_costs(load_artifact(model))
                for fmt, variant, extra in variants:
                    suffix = "" if variant == "gather" else "_" + variant.replace(" ", "_")
                    path = stem.parent / f"{stem.name}{suffix}.{fmt}"
                    if not path.exists():
                        export(model, fmt, path, *extra)
                    count = count_graph(path)
                    t = count.totals()
                    checks.append(
                        {
                            "dataset": dataset,
                            "structure": structure,
                            "bits": bits,
                            "format": fmt,
                            "variant": variant,
                            "file": str(path),
                            "analytic_size_bits": costs.size_bits,
                            "graph_param_bits": count.param_bits,
                            "analytic_ops": costs.n_ops,
                            "graph_ops": count.paper_ops,
                            "per_row_additions": t["arithmetic"],
                            "folded": t["folded_additions"],
                            "macs": t["macs"],
                            "addressing": t["addressing"],
                            "guard": t["guard"],
                            "argmax": t["argmax"],
                            "rescale": t["rescale"],
                            "storage_bits": count.storage_bits,
                            "complete": count.complete,
                            "equal": count.param_bits == costs.size_bits and count.paper_ops == costs.n_ops,
                        }
                    )
            log(f"  checked {dataset} {structure}")
    head = (
        f"{'dataset':<9}{'model':<6}{'bits':>5} {'file':<7}{'variant':<16}{'size bits':>11} {'graph':>11} "
        f"{'ops':>6} {'graph':>6} {'= per-row':>9} {'+ folded':>8} {'MACs':>8} {'equal':>6}"
    )
    lines = [head, "-" * len(head)]
    for c in checks:
        lines.append(
            f"{c['dataset']:<9}{c['structure'].upper():<6}{'f32' if c['bits'] is None else c['bits']:>5} "
            f"{c['format']:<7}{c['variant']:<16}{c['analytic_size_bits']:>11,} {c['graph_param_bits']:>11,} "
            f"{c['analytic_ops']:>6,} {'?' if c['graph_ops'] is None else format(c['graph_ops'], ','):>6} "
            f"{c['per_row_additions']:>9,} {c['folded']:>8,} {c['macs']:>8,} "
            f"{'yes' if c['equal'] else 'NO':>6}"
        )
    n_equal = sum(c["equal"] for c in checks)
    lines += [
        "-" * len(head),
        f"{n_equal} of {len(checks)} exported graphs: counted ops and parameter bits equal the analytic model",
    ]
    return checks, "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "out" / "profile_report"), help="output folder")
    p.add_argument("--datasets", default="letter,usps", help="report datasets (default letter,usps)")
    p.add_argument("--check-datasets", default="letter,satimage,usps", help="graph-count check datasets")
    p.add_argument("--runs", type=int, default=200, help="timed batch-1 calls per block (3 blocks)")
    p.add_argument("--quick", action="store_true", help="float and 3 bits only, 50 runs")
    args = p.parse_args(argv)
    widths = [None, 3] if args.quick else BIT_WIDTHS
    runs = 50 if args.quick else args.runs
    out = Path(args.out)
    models_dir = out / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    env = environment()
    (out / "environment.json").write_text(json.dumps(env, indent=2))
    started = time.perf_counter()

    log(f"part 1: profiling {args.datasets} NB/TAN at {', '.join(width_name(b) for b in widths)}")
    rows = profile_models(args.datasets.split(","), widths, models_dir, runs, env)
    mark_pareto(rows, by="dataset")
    (out / "rows.json").write_text(json.dumps(rows, indent=1))
    records, table = model_table(rows)
    (out / "models.json").write_text(json.dumps(records, indent=1))
    header = (
        f"bnc-deploy profile report ({time.strftime('%Y-%m-%d %H:%M')}), CPU {env['cpu']} "
        f"({env['usable_cpus']} usable cores), Python {env['python']}, "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    )
    (out / "table.txt").write_text(header + "\n\n" + table + "\n")
    plots = plot_all(records, out, note="maximum-likelihood models (bnc-train --init ml --epochs 0), test split")

    log(f"part 2: analytic == graph count on {args.check_datasets}")
    checks, check_table = graph_checks(args.check_datasets.split(","), widths, models_dir)
    (out / "graph_checks.json").write_text(json.dumps(checks, indent=1))
    (out / "graph_checks.txt").write_text(check_table + "\n")

    print(header)
    print()
    print(table)
    print()
    print(check_table)
    print()
    print(
        f"wrote {out}/: rows.json, models.json, table.txt, graph_checks.json, graph_checks.txt, environment.json, "
        + ", ".join(Path(p).name for p in plots)
        + f" ({time.perf_counter() - started:.0f} s)"
    )
    return 0 if all(c["equal"] for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
