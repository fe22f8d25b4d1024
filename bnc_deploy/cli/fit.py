"""``bnc-fit``: the most accurate classifier that fits a device budget, exported and measured on the target.

    bnc-fit --data letter --target cortex-m4 --max-flash 2KiB -o fit-letter
    bnc-fit --data usps --target cortex-m4 --max-flash 6KiB --max-ram 1KiB
    bnc-fit --data satimage --target web --max-file-bytes 16KiB --json

Budgets (units accepted: ``2KiB``, ``1.5kB``, ``20k``, ``250us``): --max-flash, --max-ram, --max-ops,
--max-bits, --max-file-bytes, --max-latency-us, --max-instructions; a budget the target cannot
measure is refused. Families: nb, tan, plus fc (and cnn on image data) where the target takes DNN
models (DNNs sized to the budget); tan-learn (the learned TAN) when listed in --families.
Configurations whose lower bounds exceed the budget are never trained; the others train through
the sweep engine (``DIR/sweep/``, rerunning resumes) within the time budget (default 12 minutes
for the whole search, measuring included; ``--time-budget none``: no limit) and are ranked on a
validation split; candidates are exported and measured on the target in that order, and the first
measured to fit is written to ``DIR`` (``model.bnc``, the deployable file, ``report.json``,
``report.md``, ``pareto.png``, ``pareto.svg``). Progress goes to stderr (a line per stage and per
measured candidate with the best so far that fits) unless --quiet or --json.

Exit status 0 when a model fits; 2 with one line naming the smallest cost reached and the flag to
relax when nothing fits (the reports are written all the same), or for bad options or data.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from bnc_deploy.cli.common import cli_main, print_json
from bnc_deploy.errors import ConfigError, require_extra
from bnc_deploy.fit import FAMILIES, InfeasibleBudget, SpaceSettings, fit_to_budget
from bnc_deploy.fit.plan import DEFAULT_TIME_BUDGET
from bnc_deploy.fit.report import format_table
from bnc_deploy.targets.base import target_names
from bnc_deploy.targets.budget import AXES

PROG = "bnc-fit"
INTERRUPTED = "interrupted; finished sweep chunks stay in DIR/sweep (rerun the command to resume)"
#: What each budget flag limits (the measurement is the target's: ``bnc-target`` describes it).
BUDGET_HELP = {
    "flash": "bytes of code + constant tables in flash (Cortex-M: from the target toolchain)",
    "ram": "bytes of static data + worst-case stack, or the TFLM arena",
    "ops": "analytic operations per prediction",
    "bits": "model size in bits (B x parameters)",
    "file_bytes": "bytes of each exported file",
    "latency_us": "batch-1 latency measured on this host (host targets only)",
    "instructions": "executed instructions per prediction on the emulated Cortex-M board",
}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*(s|m|min|h)?\s*$")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Train, export and measure the most accurate BN or DNN classifier that fits a device budget.",
        epilog=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", required=True, metavar="PATH_OR_NAME", help="dataset name or file (as for bnc-train)")
    p.add_argument("--target", required=True, metavar="NAME", help="deploy target: " + ", ".join(target_names()))
    budget = p.add_argument_group("budget (units: B, kB, KiB, MiB; k, M; us, ms, s)")
    for axis in AXES:
        budget.add_argument(
            "--max-" + axis.replace("_", "-"), dest=f"max_{axis}", metavar="LIMIT", default=None, help=BUDGET_HELP[axis]
        )
    search = p.add_argument_group("search")
    search.add_argument(
        "--families",
        default=None,
        metavar="LIST",
        help=f"comma list of {', '.join(FAMILIES)} (default: nb,tan, plus fc and on image data cnn where the "
        "target takes DNN models; tan-learn, the learned TAN over lambda_MS, only when listed)",
    )
    search.add_argument(
        "--time-budget",
        default=None,
        metavar="T",
        help=f"wall time of the whole search (training planned to fit after an allowance for measuring: fewer "
        f"draws, learning rates, epochs when over; more epochs, up to 500, when there is room): seconds, or 10m, "
        f"1h; none for no limit (default {DEFAULT_TIME_BUDGET / 60:g}m)",
    )
    search.add_argument("--seed", type=int, default=0, help="seed of the split, the draws and the training")
    search.add_argument(
        "--epochs",
        type=int,
        default=None,
        metavar="E",
        help="epochs per configuration (default 100, raised to fit the time budget; given: kept)",
    )
    search.add_argument("--draws", type=int, default=None, metavar="N", help="hybrid-loss draws per configuration")
    search.add_argument("--bits", default=None, metavar="LIST", help="bit widths to search (default 1..8)")
    run = p.add_argument_group("run")
    run.add_argument("--device", default="cpu", metavar="cpu|cuda|auto", help="where the batched trainer runs")
    run.add_argument("--backend", choices=("local", "ray"), default="local", help="the sweep's backend")
    run.add_argument("-o", "--output", default=None, metavar="DIR", help="output folder (default fit-DATA-TARGET)")
    run.add_argument("--json", action="store_true", help="print report.json's content instead of the table")
    run.add_argument("--quiet", action="store_true", help="no progress lines or bar on stderr")
    return p


def parse_duration(text: str | None) -> float | None:
    """Seconds from ``90``, ``90s``, ``10m``, ``1.5h``; the default time budget for None; None (no
    limit) for ``none``; ConfigError naming --time-budget otherwise."""
    if text is None:
        return DEFAULT_TIME_BUDGET
    if text.strip().lower() == "none":
        return None
    m = _DURATION.match(text)
    if m is None:
        raise ConfigError(f"--time-budget: expected seconds or a duration like 10m or 1h, got {text!r}")
    scale = {"s": 1, None: 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
    return float(m.group(1)) * scale


def parse_bits(text: str | None) -> tuple[int, ...] | None:
    """Bit widths from ``1..4`` or ``1,2,8``; ConfigError naming --bits otherwise."""
    if text is None:
        return None
    try:
        if ".." in text:
            lo, hi = (int(v) for v in text.split(".."))
            return tuple(range(lo, hi + 1))
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"--bits: expected a range like 1..8 or a list like 1,2,4, got {text!r}") from None


def settings_from_args(args) -> SpaceSettings:
    # Epochs given on the command line are kept: the time budget may cut them, never raise them.
    changes = {"epochs": args.epochs, "max_epochs": args.epochs, "draws": args.draws, "bits": parse_bits(args.bits)}
    return SpaceSettings(**{k: v for k, v in changes.items() if v is not None})


def default_output(data: str, target: str) -> Path:
    return Path(f"fit-{Path(data).stem or data}-{target}")


@cli_main(PROG, interrupted=INTERRUPTED)
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.target not in target_names():
        raise ConfigError(f"--target: unknown target {args.target!r}; targets: {', '.join(target_names())}")
    require_extra(PROG, "train", "torch")
    flags = {f"max_{axis}": getattr(args, f"max_{axis}") for axis in AXES}
    families = args.families.split(",") if args.families is not None else None
    try:
        result = fit_to_budget(
            args.data,
            args.target,
            out_dir=args.output or default_output(args.data, args.target),
            families=families,
            seed=args.seed,
            time_budget=parse_duration(args.time_budget),
            settings=settings_from_args(args),
            device=args.device,
            backend=args.backend,
            progress=not (args.quiet or args.json),
            **flags,
        )
    except InfeasibleBudget as exc:
        if args.json and exc.result is not None:
            print_json(exc.result.to_dict())
        raise
    if args.json:
        print_json(result.to_dict())
    else:
        print(format_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
