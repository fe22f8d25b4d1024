"""``bnc-profile``: size, operations, accuracy and latency of model files, per runtime; Pareto plots.

Usage::

    bnc-profile FILE... [--data PATH_OR_NAME [--fold K]] [--runtime onnxruntime,litert]
                [--json] [--plot OUT.png] [--nodes] [--no-latency] [--runs N] [--warmup N]
                [--repeats N] [--latency-mode {session,adapter}] [--key FILE] [--no-integrity-check]
    bnc-profile FILE... --target aarch64 [--data PATH_OR_NAME [--fold K]] [--json]

FILE is a model file (``.bnc``: the NumPy reference, analytic costs), an exported file
(``.onnx``/``.tflite``: analytic costs from its metadata, plus the graph count, which must equal
them; ``.h``, a C export: costs from its metadata, no graph to count), or a JSON result file (rows
of an earlier ``--json`` run or ``bnc-train --json``; taken as they are, for tables and plots over
many runs). BN classifiers and quantized DNNs alike: the costs follow the model kind
(``model_kind`` ``"bnc"``/``"dnn"``; DNNs: ``structure`` ``fc``/``cnn``, ``bits`` = bits per weight,
size and operations by the paper's DNN conventions, see :mod:`bnc_deploy.costs`), and so does the
graph count (:mod:`bnc_deploy.profiling.graph_count`).

Each model file is run in every selected runtime that reads it: ``.bnc`` -> numpy;
``.onnx`` -> onnxruntime with 1 thread and with its default threads; ``.tflite`` -> LiteRT with
1 thread; ``.h`` -> native (compiled with the host C compiler, 1 thread); the map is
:func:`bnc_deploy.runtimes.base.default_runtime`. With ``--data`` the test split gives the test
error (through each runtime) and the rows to time; without it the latency runs on seeded random
valid codes and the test error is the one stored in a ``.bnc`` model (exports: none).

``--runtime http --url URL [--model NAME]`` also runs each FILE as served by an Open Inference
Protocol server (``bnc-serve --repository DIR``, model NAME, default the file's stem): the
accuracy and the batch-1 latency (one HTTP round trip per call) are the served model's, the
costs the file's (runtime ``http``, :mod:`bnc_deploy.runtimes.http_adapter`).

``--json`` prints a list of objects, one per (file, runtime, threads). Scripts rely on these
keys (only ever added to): ``file``, ``runtime``, ``threads``, ``test_error``, ``size_bits``,
``n_ops``, ``latency_us_p50_batch1``, ``latency_us_p99_batch1``, ``throughput_rows_per_s``,
``graph_ops``, ``graph_param_bits``, ``graph_matches_analytic``, ``pareto``, ``cpu``.

``--target aarch64`` runs every model FILE on emulated aarch64 instead (qemu-user in the root of
``bnc-target setup --target aarch64``, :mod:`bnc_deploy.targets.aarch64`): one row per file with
its analytic costs and graph count, the test error of the aarch64 labels (``--data``), and the
``target_*`` keys: label agreement with this host, bit-identical scores, max |delta score|,
bit-identical with a ``.bnc`` model given among the FILEs, the stored check set, pass/fail. No
latency (``latency_*`` stay None): an emulator's timings are not the target's.

Every exported file's integrity digest (:mod:`bnc_deploy.formats.integrity`) is checked before it
is counted or run: a file modified after export stops the run with exit status 2 and
``<file>: the file was modified after export (...)``. ``--key FILE`` gives the key of signed files
(``bnc-export --sign-key``); ``--no-integrity-check`` skips the check.

Exit status 0; 2 with a one-line message for a missing file, an unknown file type or runtime,
data that does not fit a model, or a runtime that is not installed (any other error is a bug and
shows its traceback); 130 after ^C; 141, silently, when stdout's reader goes away (``| head``).

This module parses the arguments, calls :mod:`bnc_deploy.profiling` (files, facts, runner,
target_rows, table, pareto) and prints; the profiling itself lives there.
"""

from __future__ import annotations

import argparse
import sys

from bnc_deploy.cli.common import cli_main, print_json
from bnc_deploy.datasets import load_dataset
from bnc_deploy.errors import ConfigError, require_extra
from bnc_deploy.formats.integrity import read_key
from bnc_deploy.profiling.files import check_files, is_model_file, is_result_file
from bnc_deploy.profiling.latency import environment
from bnc_deploy.profiling.options import LoadOptions, ServedModel, TestSplit, TimingSettings
from bnc_deploy.profiling.pareto import check_plot_path, load_records, mark_pareto, plot_overview
from bnc_deploy.profiling.rows import JSON_KEYS, unique_models
from bnc_deploy.profiling.runner import DEFAULT_RUNTIMES, ProfileRun, profile_files, profile_model
from bnc_deploy.profiling.table import format_table
from bnc_deploy.profiling.target_rows import target_rows
from bnc_deploy.runtimes.base import RUNTIMES
from bnc_deploy.targets import aarch64

# JSON_KEYS and profile_model are re-exported: tests and benchmarks/profile_report.py import them from here.
__all__ = ["JSON_KEYS", "build_parser", "load_test_split", "main", "profile_model", "run"]

PROG = "bnc-profile"
#: Targets of --target (bnc_deploy.targets.aarch64: emulated, compared with this host; no latency).
TARGETS = ("aarch64",)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Profile bnc-deploy model files: size in bits, operations (analytic and counted in the "
        "exported graph), test error and latency per runtime, with Pareto plots.",
        epilog="Examples:\n"
        "  bnc-profile nb3.bnc nb3.onnx nb3.tflite --data letter\n"
        "  bnc-profile out/*.onnx --data usps --runtime onnxruntime --json > usps.json\n"
        "  bnc-profile usps.json letter.json --plot pareto.png",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "files", nargs="+", metavar="FILE", help="model files (.bnc, .onnx, .ort, .tflite, .h) or JSON result files"
    )
    p.add_argument("--data", metavar="PATH_OR_NAME", help="dataset whose test split gives the error and the timed rows")
    p.add_argument("--fold", type=int, default=None, metavar="K", help="1-based fold of --data (default 1)")
    p.add_argument(
        "--runtime",
        default=None,
        metavar="LIST",
        help="comma-separated runtimes to use (numpy, onnxruntime, litert, native; default: all)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list of objects instead of a table")
    p.add_argument(
        "--plot",
        metavar="OUT.png",
        help="write error vs size / operations / bit width as OUT.png and OUT.svg (a .png or .svg "
        "suffix is replaced, any other kept: run.v2.png -> run.v2.png, run.v2.svg)",
    )
    p.add_argument("--nodes", action="store_true", help="also show the per-node operation table of exported graphs")
    p.add_argument(
        "--key", metavar="FILE", help="key file of exports signed with bnc-export --sign-key (raw bytes, at least 32)"
    )
    p.add_argument(
        "--no-integrity-check",
        action="store_true",
        help="load exported files even if their integrity digest does not match (modified after export)",
    )
    p.add_argument(
        "--target",
        choices=TARGETS,
        help="run the files on this emulated target instead (aarch64: qemu-user in the root of "
        "'bnc-target setup --target aarch64'): label agreement, bit-identical scores and max "
        "|Δ score| against this host, the test error there with --data; analytic costs; no latency",
    )
    served = p.add_argument_group("served models (--runtime http)")
    served.add_argument(
        "--url",
        metavar="URL",
        help="with --runtime http: the Open Inference Protocol (KServe V2) server serving FILE, "
        "e.g. http://127.0.0.1:8000 (bnc-serve); FILE still gives the costs",
    )
    served.add_argument(
        "--model",
        metavar="NAME",
        help="with --runtime http: the served model's name (default: FILE's stem, as bnc-serve names it)",
    )
    timing = p.add_argument_group("latency")
    timing.add_argument("--no-latency", action="store_true", help="skip timing (costs and accuracy only)")
    timing.add_argument(
        "--runs", type=int, default=200, metavar="N", help="timed batch-1 calls per block (default 200)"
    )
    timing.add_argument("--repeats", type=int, default=3, metavar="N", help="blocks of --runs calls (default 3)")
    timing.add_argument("--warmup", type=int, default=20, metavar="N", help="untimed calls first (default 20)")
    timing.add_argument(
        "--throughput-repeats",
        type=int,
        default=5,
        metavar="N",
        help="timed full-batch passes (default 5; 0 skips throughput)",
    )
    timing.add_argument(
        "--latency-mode",
        choices=("session", "adapter"),
        default="session",
        help="time the bare runtime call (default) or the adapter call with input validation",
    )
    return p


@cli_main(PROG)
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.fold is not None and args.data is None:
        parser.error("--fold needs --data")
    if args.plot:  # before measuring, not after: the extra, and both files can be written
        require_extra("plotting (--plot)", "plot", "matplotlib")
        check_plot_path(args.plot, inputs=tuple(args.files))
    rows, tables = run(args)
    if args.json:
        print_json(rows)
    else:
        print(format_table(rows))
        for table in tables:
            print()
            print(table)
    if args.plot:
        written = plot_overview(unique_models(rows), args.plot)
        print(f"{PROG}: wrote {', '.join(written)}", file=sys.stderr)
    return 0


def run(args) -> ProfileRun:
    """Profile every FILE (on this host, or on ``--target``); return the rows and per-node tables."""
    check_files(args.files)
    runtimes = parse_runtimes(args.runtime)
    load = LoadOptions(verify_integrity=not args.no_integrity_check, key=read_key(args.key) if args.key else None)
    served = served_model(args, runtimes)
    data = load_test_split(args.data, args.fold) if args.data else None
    env = environment()
    if args.target:
        if served is not None or args.runtime is not None:
            raise ConfigError("--target runs each file in its default runtime on the target: drop --runtime/--url")
        return ProfileRun(run_target(args.target, args.files, data, env=env, load=load), [])
    timing = TimingSettings(
        latency=not args.no_latency,
        runs=args.runs,
        warmup=args.warmup,
        repeats=args.repeats,
        throughput_repeats=args.throughput_repeats,
        mode=args.latency_mode,
    )
    return profile_files(
        args.files, runtimes, data, env=env, timing=timing, nodes=args.nodes, load_options=load, http_options=served
    )


def run_target(target: str, files: list[str], data: TestSplit | None, *, env: dict, load: LoadOptions) -> list[dict]:
    """The result files' rows, then one row per model file run on the emulated ``target``."""
    models = [f for f in files if is_model_file(f)]
    rows = load_records([f for f in files if is_result_file(f)])
    if models:
        report = aarch64.check_files(models, data=data, verify_integrity=load.verify_integrity, key=load.key)
        rows.extend(target_rows(target, models, report, data, env=env, load_options=load))
    mark_pareto(rows, by="dataset")
    return rows


def parse_runtimes(spec: str | None) -> list[str]:
    """Runtime names from ``--runtime`` (ConfigError naming an unknown one)."""
    if spec is None:
        return list(DEFAULT_RUNTIMES)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in RUNTIMES]
    if unknown or not names:
        raise ConfigError(
            f"--runtime: unknown runtime {', '.join(map(repr, unknown)) or repr(spec)}; "
            f"choose from {', '.join(sorted(RUNTIMES))}"
        )
    return names


def served_model(args, runtimes: list[str]) -> ServedModel | None:
    """The served model of the ``http`` runtime, or None when it is not selected; ConfigError when
    --url and --runtime http do not come together."""
    if "http" not in runtimes:
        if args.url or args.model:
            raise ConfigError("--url/--model apply to --runtime http only")
        return None
    if not args.url:
        raise ConfigError("--runtime http needs --url (the server, e.g. http://127.0.0.1:8000)")
    if args.model and len([f for f in args.files if is_model_file(f)]) > 1:
        raise ConfigError("--model names one served model: give one FILE with it (or let each FILE's stem name it)")
    return ServedModel(args.url, args.model)


def load_test_split(spec: str, fold: int | None) -> TestSplit:
    """The test split of a dataset spec (DatasetError names the problem)."""
    return TestSplit.from_dataset(load_dataset(spec, fold=1 if fold is None else fold))


if __name__ == "__main__":
    raise SystemExit(main())
