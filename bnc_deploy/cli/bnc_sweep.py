"""``bnc-sweep``: train a grid of configurations at once (batched, CPU or GPU, local or on Ray), resumable.

    bnc-sweep --data letter --model nb --bits 1..8 --int-bits 1..6 --draws 100 --lr 3e-2,3e-3 --epochs 500 -o DIR
    bnc-sweep --preset icpr2020-nb --data letter --device cuda -o DIR
    bnc-sweep --grid grid.toml -o DIR [--resume]

Every axis flag takes a value list: ``1..8`` (inclusive range), ``3e-2,3e-3``, ``logspace(-7,1,41)``,
``float`` for an unquantized model. One value is a fixed setting; several are an axis of the full
product. ``--draws N`` adds N joint (λ, γ) draws from the paper's distributions (λ = 10^U(1, 3),
γ = 10^U(-1, 2), η = 10; seeded by ``--draw-seed``); ``--draws icpr2020[:N]`` takes the authors' own
draws (``../shared/paper/structures``). Flags given with ``--grid``/``--preset`` override its values.

Writes ``DIR/results.sqlite`` (one row per configuration, written transactionally per chunk),
``DIR/results.csv``, ``DIR/summary.json`` and the kept models in ``DIR/models/``.

Exit status 0; 2 with a one-line message for bad options or data; 130 after ^C (finished chunks
stay in DIR; ``--resume`` continues).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bnc_deploy.cli.common import cli_main, print_json
from bnc_deploy.errors import ConfigError, require_extra
from bnc_deploy.sweep.grid import GridSpec, describe, load_grid_file
from bnc_deploy.sweep.paper import icpr2020_draws, paper_batch_size, preset
from bnc_deploy.sweep.records import KEYS, LABEL_KEYS, parse_values
from bnc_deploy.sweep.runner import DEFAULT_GROUP_BY, SweepOptions, check_plan, protocol_label, records_of, run_sweep
from bnc_deploy.train.arguments import use_threads

PROG = "bnc-sweep"
INTERRUPTED = "interrupted; finished chunks stay in DIR (rerun with --resume to continue)"

#: Axis flags: flag -> record key (value lists).
AXIS_FLAGS = {
    "--model": "model",
    "--structure": "structure",
    "--bits": "bits",
    "--int-bits": "int_bits",
    "--lr": "lr",
    "--lr-decay": "lr_decay",
    "--seeds": "seed",
    "--split-seed": "split_seed",
    "--loss": "loss",
    "--hybrid-lambda": "hybrid_lambda",
    "--hybrid-gamma": "hybrid_gamma",
    "--hybrid-eta": "hybrid_eta",
    "--init": "init",
    "--adam-eps": "adam_eps",
    "--epochs": "epochs",
    "--batch-size": "batch_size",
    "--fold": "fold",
    # structure learning
    "--size-penalty": "size_penalty",
    "--candidates": "candidates",
    "--candidates-file": "candidates_file",
    "--structure-lr": "structure_lr",
    "--tau-start": "tau_start",
    "--tau-end": "tau_end",
    "--finetune-epochs": "finetune_epochs",
    # DNNs
    "--layers": "layers",
    "--weight-bits": "weight_bits",
    "--activation": "activation",
    "--batch-norm": "batch_norm",
    "--one-hot": "one_hot",
    "--match-bits": "match_bits",
    "--match-ops": "match_ops",
    "--hidden": "hidden",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Train a grid of BN classifier (or DNN) configurations at once and select the best "
        "per model size; resumable.",
        epilog=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_grid_flags(p.add_argument_group("grid"))
    _add_selection_flags(p.add_argument_group("selection"))
    _add_run_flags(p.add_argument_group("run"))
    return p


def _add_grid_flags(grid) -> None:
    """The data and the grid: a grid file or preset, the axis flags (hidden), joint draws."""
    grid.add_argument("--data", metavar="PATH_OR_NAME", help="dataset name or file (as for bnc-train)")
    grid.add_argument("--grid", metavar="FILE", help="grid file (TOML or JSON: [axes], [draws], [fixed])")
    grid.add_argument(
        "--preset", metavar="NAME", help="the paper's grids: icpr2020-nb, icpr2020-tan, icpr2020-structure"
    )
    for flag, key in AXIS_FLAGS.items():
        grid.add_argument(flag, dest=f"axis_{key}", metavar="VALUES", default=None, help=argparse.SUPPRESS)
    grid.add_argument(
        "--draws",
        metavar="N|icpr2020[:N]",
        help="joint (lambda, gamma) draws: N from the paper's "
        "distributions, or the authors' own (icpr2020, the first N with :N)",
    )
    grid.add_argument("--draw-seed", type=int, default=0, metavar="S", help="seed of --draws N (default 0)")


def _add_selection_flags(sel) -> None:
    """How configurations are ranked and stopped early."""
    sel.add_argument(
        "--select",
        choices=("validation", "test"),
        default="validation",
        help="rank on the validation split (default) or on the test split (the paper's protocol, "
        "labelled so in every output)",
    )
    sel.add_argument(
        "--validation",
        type=float,
        default=None,
        metavar="F",
        help="validation fraction of the training rows (default 0.2 with --select validation, else 0)",
    )
    sel.add_argument("--halving", action="store_true", help="successive halving: stop weak configurations early")
    sel.add_argument("--halving-rate", type=float, default=3.0, metavar="R", help="keep 1/R at each rung (default 3)")
    sel.add_argument("--min-rung", type=int, default=5, metavar="E", help="earliest rung epoch (default 5)")
    sel.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="E",
        help="also measure validation/test error every E epochs (default: the last epoch and rungs)",
    )
    sel.add_argument(
        "--group-by",
        default=None,
        metavar="KEYS",
        help="keys of a selection group (default: model, structure, bits and the DNN size keys)",
    )


def _add_run_flags(run) -> None:
    """Where and how the sweep runs, what it keeps and prints."""
    run.add_argument("--device", default="cpu", metavar="cpu|cuda|auto", help="where the batched trainer runs")
    run.add_argument("--backend", choices=("local", "ray"), default="local", help="local (default) or a Ray cluster")
    run.add_argument("--address", default=None, metavar="ADDR", help="Ray cluster address (default: start a local one)")
    run.add_argument("--ray-cpus", type=int, default=None, metavar="N", help="CPUs of a local Ray instance")
    run.add_argument(
        "--max-configs",
        type=int,
        default=None,
        metavar="N",
        help="configurations per chunk (default: all that fit in memory)",
    )
    run.add_argument("--threads", type=int, default=None, metavar="N", help="torch CPU threads")
    run.add_argument(
        "--keep",
        choices=("best", "all", "none"),
        default="best",
        help="model files kept: the best per group (default), all, or none",
    )
    run.add_argument("--resume", action="store_true", help="continue the sweep in DIR (skip finished configurations)")
    run.add_argument(
        "--dry-run", action="store_true", help="print the plan (configurations, configuration-epochs) and exit"
    )
    run.add_argument("-o", "--output", required=True, metavar="DIR", help="sweep directory")
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.add_argument("--quiet", action="store_true", help="no progress bar")


def grid_from_args(args):
    """The GridSpec of ``--grid``/``--preset`` (or an empty one) with the flags applied."""
    if args.grid and args.preset:
        raise ConfigError("give --grid or --preset, not both")
    if args.grid:
        spec = load_grid_file(args.grid)
    elif args.preset:
        spec = preset(args.preset, data=args.data)
    else:
        spec = GridSpec(axes={}, draws={}, fixed={})
    axes, draws, fixed = dict(spec.axes), dict(spec.draws), dict(spec.fixed)

    def put(key, values):
        for section in (axes, fixed):
            section.pop(key, None)
        if key in draws:
            raise ConfigError(f"--{key.replace('_', '-')}: the grid draws {key} jointly; drop the flag or the draws")
        if len(values) == 1:
            fixed[key] = values[0]
        else:
            axes[key] = values

    if args.data is not None:
        put("data", [args.data])
    for flag, key in AXIS_FLAGS.items():
        text = getattr(args, f"axis_{key}")
        if text is not None:
            put(key, parse_values(text, key, flag=flag))
    if args.draws is not None:
        for key in ("hybrid_lambda", "hybrid_gamma", "hybrid_eta"):
            if key in axes or key in fixed and key != "hybrid_eta":
                raise ConfigError(f"--draws sets {key}; drop --{key.replace('_', '-')}")
        if args.draws.startswith("icpr2020"):
            authors = icpr2020_draws()
            n = _draw_count(args.draws, len(authors["hybrid_lambda"]))
            draws = {key: list(values)[:n] for key, values in authors.items()}
        else:
            n = _draw_count("x:" + args.draws, None)
            draws = {
                "n": n,
                "seed": args.draw_seed,
                "hybrid_lambda": {"log10_uniform": [1, 3]},
                "hybrid_gamma": {"log10_uniform": [-1, 2]},
            }
            fixed.setdefault("hybrid_eta", 10.0)
    data = fixed.get("data")
    if "batch_size" not in fixed and "batch_size" not in axes and args.preset and isinstance(data, str):
        if paper_batch_size(data):  # the presets use the paper's batch size unless told otherwise
            fixed["batch_size"] = paper_batch_size(data)
    if args.validation is not None:
        put("validation", [args.validation])
    elif "validation" not in axes and "validation" not in fixed:  # a grid file's own value stays
        fixed["validation"] = 0.2 if args.select == "validation" else 0.0
    return GridSpec(axes=axes, draws=draws, fixed=fixed).normalized()


def _draw_count(text: str, available: int | None) -> int:
    _, _, count = text.partition(":")
    if not count:
        if available is None:
            raise ConfigError("--draws needs a number or icpr2020[:N]")
        return available
    try:
        n = int(count)
    except ValueError:
        raise ConfigError(f"--draws: {count!r} is not a number of draws") from None
    if n < 1 or (available is not None and n > available):
        raise ConfigError(f"--draws: {n} draws out of range (1..{available or 'any'})")
    return n


def options_from_args(args):
    if args.max_configs is not None and args.max_configs < 1:
        raise ConfigError(f"--max-configs must be >= 1, got {args.max_configs}")
    if args.halving_rate <= 1:
        raise ConfigError(f"--halving-rate must be > 1, got {args.halving_rate}")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise ConfigError(f"--checkpoint-every must be >= 1, got {args.checkpoint_every}")
    group_by = tuple(k.strip() for k in args.group_by.split(",")) if args.group_by else DEFAULT_GROUP_BY
    if args.group_by:
        unknown = [k for k in group_by if k not in KEYS or k in LABEL_KEYS]
        if unknown:
            raise ConfigError(
                f"--group-by {args.group_by!r}: unknown key {unknown[0]!r}; keys: "
                f"{', '.join(sorted(set(KEYS) - LABEL_KEYS))}"
            )
    return SweepOptions(
        directory=Path(args.output),
        select=args.select,
        device=args.device,
        backend=args.backend,
        address=args.address,
        halving=args.halving,
        halving_rate=args.halving_rate,
        min_rung=args.min_rung,
        checkpoint_every=args.checkpoint_every,
        keep=args.keep,
        max_configs=args.max_configs,
        resume=args.resume,
        group_by=group_by,
        progress=not (args.quiet or args.json),
        ray_num_cpus=args.ray_cpus,
    )


@cli_main(PROG, interrupted=INTERRUPTED)
def main(argv: list[str] | None = None) -> int:
    require_extra(PROG, "train", "torch")
    args = build_parser().parse_args(argv)
    spec = grid_from_args(args)
    options = options_from_args(args)
    if args.threads is not None:
        use_threads(args.threads)
    # Lazy: the batched trainer imports torch (extra "train"; require_extra above names it if missing).
    from bnc_deploy.train.bnc_batched import resolve_device

    records = records_of(spec)
    if not (options.backend == "ray" and options.address):
        # A missing GPU fails before anything is written (a Ray cluster's GPUs are not on this machine).
        resolve_device(options.device)
    check_plan(records, options)  # so does a bad configuration (also for --dry-run)
    config_epochs = sum(r["epochs"] for r in records)
    plan = (
        f"{describe(spec)}; {config_epochs:,} configuration-epochs; {protocol_label(options.select)}; "
        f"device {options.device}, backend {options.backend}"
    )
    if args.dry_run:
        if args.json:
            print_json({"configurations": len(records), "config_epochs": config_epochs, "plan": plan})
        else:
            print(plan)
        return 0
    if not args.json and not args.quiet:
        print(plan, file=sys.stderr, flush=True)
    summary = run_sweep(spec, options)
    if args.json:
        print_json(summary.to_dict())
    else:
        print(format_summary(summary))
    return 0


def format_summary(s) -> str:
    lines = [
        f"{s.configurations} configurations in {s.directory}: {s.trained} trained now, {s.skipped} already done, "
        f"{s.stopped} stopped early, {s.failed} failed; {s.seconds:.1f} s, "
        f"{s.config_epochs_per_second:,.0f} configuration-epochs/s on {s.device} ({s.backend})",
        f"best per group ({s.protocol}):",
    ]
    for group, best in s.best.items():
        final = best["final"]
        val, test = final.get("val_error"), final.get("test_error")
        lines.append(
            f"  {group}: val {_pct(val)}  test {_pct(test)}  {best['size_bits']:,} bits  "
            f"{best['model_path'] or '(no model kept)'}"
        )
    lines.append(f"table: {s.table}  csv: {s.csv}")
    return "\n".join(lines)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.2f} %"


if __name__ == "__main__":
    raise SystemExit(main())
