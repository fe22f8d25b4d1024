"""``bnc-reproduce``: the paper's figures, one command each, through the sweep engine (resumable).

    bnc-reproduce fig6 --data letter -o paper-letter                  # quick protocol, 2 cores
    bnc-reproduce all --data usps --protocol paper --device cuda -o paper-usps

Each figure's grids run as sweeps in ``DIR/sweeps/<name>`` (shared between figures, always
resumed: rerunning a command continues where it stopped and never redoes a finished
configuration). The figure is written as ``DIR/<fig>.csv`` (one row per selected point),
``DIR/<fig>.json`` and ``DIR/<fig>.png``/``.svg``. ``--protocol`` is documented in
:mod:`bnc_deploy.sweep.paper`; ``--select test`` is the paper's selection (on the test split) and
is labelled so in every output.

Exit status 0; 2 with a one-line message for bad options or data; 130 after ^C.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
from pathlib import Path

from bnc_deploy.cli.common import cli_main, print_json
from bnc_deploy.errors import require_extra
from bnc_deploy.fileio import atomic_write_bytes
from bnc_deploy.profiling.pareto import (
    _pyplot,
    mark_pareto,
    plot_error_vs_bits,
    plot_error_vs_ops,
    plot_error_vs_size,
    save_figure,
)
from bnc_deploy.sweep.estimate import describe, planned_config_epochs, probe
from bnc_deploy.sweep.grid import GridSpec, count
from bnc_deploy.sweep.paper import FIGURES, IMAGE_DATASETS, dataset_name, plan, selected_points
from bnc_deploy.sweep.runner import SweepOptions, check_plan, protocol_label, records_of, run_sweep
from bnc_deploy.sweep.table import TABLE_FILE, ResultsTable

PROG = "bnc-reproduce"
INTERRUPTED = "interrupted; finished configurations stay in DIR/sweeps (rerun the same command to continue)"

TITLES = {
    "fig3": "Test error vs memory (bits)",
    "fig4": "Test error vs operations",
    "fig5": "Size-aware TAN structure learning",
    "fig6": "Test error vs bits per parameter",
    "fig7": "Pareto front: error, operations, bits",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Reproduce the paper's figures through the sweep engine.",
        epilog=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "figure", choices=(*FIGURES, "all"), help="which figure (all: fig3, fig4 where it applies, fig5, fig6, fig7)"
    )
    p.add_argument("--data", required=True, metavar="NAME", help="letter, satimage, usps or mnist (or a file)")
    p.add_argument(
        "--protocol",
        choices=("quick", "paper", "smoke"),
        default="quick",
        help="quick: a documented reduction for 2 cores (default); paper: the authors' full grids; "
        "smoke: a few configurations for a few epochs (tests the pipeline, not for results)",
    )
    p.add_argument(
        "--select",
        choices=("validation", "test"),
        default="validation",
        help="validation (default, recommended) or test (the authors' protocol)",
    )
    p.add_argument("--validation", type=float, default=0.2, metavar="F", help="validation fraction (default 0.2)")
    p.add_argument("--backend", choices=("local", "ray"), default="local")
    p.add_argument("--address", default=None, metavar="ADDR", help="Ray cluster address")
    p.add_argument("--device", default="cpu", metavar="cpu|cuda|auto")
    p.add_argument("--max-configs", type=int, default=None, metavar="N", help="configurations per chunk")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the configuration-epochs, run nothing")
    p.add_argument(
        "--estimate",
        action="store_true",
        help="also time a short probe of each kind of configuration on --device and print the estimated "
        "time (always done before a --protocol paper run starts)",
    )
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def figures_of(name: str, data: str) -> list[str]:
    if name != "all":
        return [name]
    return [f for f in FIGURES if f != "fig4" or dataset_name(data) in IMAGE_DATASETS]


@cli_main(PROG, interrupted=INTERRUPTED)
def main(argv: list[str] | None = None) -> int:
    require_extra(PROG, "train", "torch", "matplotlib")
    args = build_parser().parse_args(argv)
    out = Path(args.output)
    plans = [plan(fig, args.data, args.protocol) for fig in figures_of(args.figure, args.data)]
    sweeps: dict[str, object] = {}
    for p in plans:
        for sweep in p.sweeps:
            sweeps.setdefault(sweep.name, sweep)
    # The validation fraction is part of every grid (selection needs it; ids include it).
    for sweep in sweeps.values():
        fixed = dict(sweep.spec.fixed)
        fixed["validation"] = args.validation if args.select == "validation" else 0.0
        sweep.spec = GridSpec(axes=sweep.spec.axes, draws=sweep.spec.draws, fixed=fixed).normalized(sweep.name)
    records = {name: records_of(s.spec) for name, s in sweeps.items()}
    tasks = {name: check_plan(records[name], _options(s, out, args)) for name, s in sweeps.items()}
    planned = {name: sum(planned_config_epochs(t) for t in ts) for name, ts in tasks.items()}
    lines = [
        f"{name}: {count(s.spec):,} configurations, {count(s.spec) * s.spec.fixed.get('epochs', 500):,} "
        f"configuration-epochs" + (f" ({planned[name]:,} with successive halving)" if s.halving else "")
        for name, s in sweeps.items()
    ]
    total = sum(count(s.spec) * s.spec.fixed.get("epochs", 500) for s in sweeps.values())
    total_planned = sum(planned.values())
    header = (
        f"{', '.join(p.figure for p in plans)} on {args.data}, {args.protocol} protocol, "
        f"{protocol_label(args.select)}: {total:,} configuration-epochs at most"
        + (f", {total_planned:,} as planned" if total_planned != total else "")
    )
    estimate = None
    if args.estimate or (args.protocol == "paper" and not args.dry_run):
        # A resumed run forecasts what it has left (and probes only the kinds left).
        left = [
            t
            for name, s in sweeps.items()
            for t in check_plan(_not_done(records[name], out / "sweeps" / name), _options(s, out, args))
        ]
        estimate = _estimate(left, args)
        lines.append(estimate["text"])
    if args.dry_run:
        if args.json:
            print_json(
                {
                    "plan": header,
                    "sweeps": lines,
                    "config_epochs": total,
                    "planned_config_epochs": total_planned,
                    **({"estimate": estimate} if estimate else {}),
                }
            )
        else:
            print(header)
            print("\n".join(f"  {line}" for line in lines))
        return 0
    if not (args.json or args.quiet):
        print(header, file=sys.stderr)
        print("\n".join(f"  {line}" for line in lines), file=sys.stderr, flush=True)
    started = time.perf_counter()
    results = {name: _run(sweep, out, args) for name, sweep in sweeps.items()}
    written = {}
    for p in plans:
        written[p.figure] = write_figure(p, sweeps, results, out, args)
    summary = {
        "figures": written,
        "protocol": args.protocol,
        "select": args.select,
        "selection": protocol_label(args.select),
        "seconds": time.perf_counter() - started,
        "sweeps": {name: r["summary"] for name, r in results.items()},
    }
    if args.json:
        print_json(summary)
    else:
        for fig, files in written.items():
            print(f"{fig}: {', '.join(files['files'])} ({files['points']} points)")
    return 0


def _options(sweep, out: Path, args):
    return SweepOptions(
        directory=out / "sweeps" / sweep.name,
        select=args.select,
        device=args.device,
        backend=args.backend,
        address=args.address,
        halving=sweep.halving,
        max_configs=args.max_configs,
        resume=True,
        group_by=sweep.group_by,
        progress=not (args.json or args.quiet),
    )


def _not_done(records: list[dict], directory: Path) -> list[dict]:
    """``records`` less those the sweep in ``directory`` has rows for (what a resumed run trains)."""
    if not (directory / TABLE_FILE).exists():
        return records
    with ResultsTable.open_existing(directory) as table:
        done = table.done_ids()
    return [r for r in records if r["id"] not in done]


def _estimate(tasks: list, args) -> dict:
    """The probe's forecast over all sweeps' chunk tasks."""
    if not (args.json or args.quiet):
        print("timing a short probe of each kind of configuration ...", file=sys.stderr, flush=True)
    estimates = probe(tasks, device=args.device)
    return {
        "text": describe(estimates, args.device),
        "seconds": sum(e.seconds for e in estimates),
        "families": {
            e.family: {
                "configurations": e.configurations,
                "config_epochs": e.config_epochs,
                "probed": e.probed,
                "seconds_per_config_epoch": e.seconds_per_config_epoch,
                "seconds_per_config": e.seconds_per_config,
                "chunk_epochs": e.chunk_epochs,
                "seconds_per_chunk_epoch": e.seconds_per_chunk_epoch,
                "seconds": e.seconds,
            }
            for e in estimates
        },
    }


def _run(sweep, out: Path, args) -> dict:
    options = _options(sweep, out, args)
    directory = options.directory
    if not (args.json or args.quiet):
        print(f"sweep {sweep.name} -> {directory}", file=sys.stderr, flush=True)
    summary = run_sweep(sweep.spec, options)
    table = ResultsTable(directory)
    try:
        rows = table.rows()
    finally:
        table.close()
    return {
        "summary": {
            "configurations": summary.configurations,
            "trained": summary.trained,
            "skipped": summary.skipped,
            "seconds": summary.seconds,
            "config_epochs": summary.config_epochs,
        },
        "rows": rows,
    }


def write_figure(p, sweeps: dict, results: dict, out: Path, args) -> dict:
    """The figure's points (selected per group), CSV, JSON and plot."""
    metric = "val_error" if args.select == "validation" else "test_error"
    points = []
    for sweep in p.sweeps:
        points += selected_points(results[sweep.name]["rows"], sweep, metric)
    if p.figure == "fig7":
        mark_pareto(points, by="dataset", keys=("size_bits", "n_ops", "test_error"))
    else:
        mark_pareto(
            points, by="dataset", keys=("size_bits", "test_error") if p.figure != "fig4" else ("n_ops", "test_error")
        )
    out.mkdir(parents=True, exist_ok=True)
    columns = [
        "group",
        "dataset",
        "bits",
        "size_penalty",
        "size_bits",
        "n_ops",
        "n_parameters",
        "train_error",
        "val_error",
        "test_error",
        "pareto",
        "config_id",
        "model_path",
        "selection",
    ]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for point in points:
        writer.writerow({**point, "selection": protocol_label(args.select)})
    atomic_write_bytes(out / f"{p.figure}.csv", buffer.getvalue().encode())
    meta = {
        "figure": p.figure,
        "data": p.data,
        "protocol": p.protocol,
        "select": args.select,
        "selection": protocol_label(args.select),
        "points": points,
    }
    atomic_write_bytes(out / f"{p.figure}.json", (json.dumps(meta, indent=2, default=str) + "\n").encode())
    files = [str(out / f"{p.figure}.csv"), str(out / f"{p.figure}.json")]
    files += plot_figure(p, points, out / f"{p.figure}.png", args)
    return {"files": files, "points": len(points)}


def plot_figure(p, points: list[dict], path: Path, args) -> list[str]:
    plt = _pyplot()
    note = f"{p.data}, {p.protocol} protocol, {protocol_label(args.select)}"
    if p.figure == "fig5":
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
        rows = sorted((q for q in points if q["size_penalty"] is not None), key=lambda q: q["size_penalty"])
        lams = [q["size_penalty"] for q in rows]
        ax1.semilogx(lams, [100 * q["test_error"] for q in rows], "o-", color="#1f77b4", label="test error")
        ax1.set_xlabel("size penalty λ_MS")
        ax1.set_ylabel("test error (%)", color="#1f77b4")
        twin = ax1.twinx()
        twin.semilogx(lams, [q["n_parameters"] for q in rows], "s--", color="#d62728", label="parameters")
        twin.set_ylabel("parameters", color="#d62728")
        ax1.grid(True, alpha=0.3)
        ax1.set_title("Error and size over λ_MS")
        plot_error_vs_size(ax2, points)
        fig.subplots_adjust(wspace=0.45)  # room for the twin axis' label between the panels
    elif p.figure == "fig6":
        fig, ax = plt.subplots(figsize=(8, 5.2))
        plot_error_vs_bits(ax, points)
    elif p.figure == "fig4":
        fig, ax = plt.subplots(figsize=(8, 5.2))
        plot_error_vs_ops(ax, points)
    elif p.figure == "fig7":
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.2))
        plot_error_vs_size(ax1, points)
        plot_error_vs_ops(ax2, points)
    else:
        fig, ax = plt.subplots(figsize=(8, 5.2))
        plot_error_vs_size(ax, points)
    fig.suptitle(f"{TITLES[p.figure]} ({note})", fontsize=11)
    written = save_figure(fig, path)
    plt.close(fig)
    return written


if __name__ == "__main__":
    raise SystemExit(main())
