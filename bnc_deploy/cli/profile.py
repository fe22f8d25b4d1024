"""``bnc-profile``: size, operations, accuracy and latency of model files, per runtime; Pareto plots.

Usage::

    bnc-profile FILE... [--data PATH_OR_NAME [--fold K]] [--runtime onnxruntime,litert]
                [--json] [--plot OUT.png] [--nodes] [--no-latency] [--runs N] [--warmup N]
                [--repeats N] [--latency-mode {session,adapter}] [--key FILE] [--no-integrity-check]
    bnc-profile FILE... --target aarch64 [--data PATH_OR_NAME [--fold K]] [--json]

FILE is a model file (``.bnc``: the NumPy reference, analytic costs), an exported file
(``.onnx``/``.tflite``: analytic costs from its metadata, plus the graph count, which must equal
them; ``.h``, a C export: costs from its metadata, no graph to count), or a JSON result file (rows of an earlier ``--json`` run or ``bnc-train --json``; taken
as they are, for tables and plots over many runs). BN classifiers and quantized DNNs alike: the
costs follow the model kind (``model_kind`` ``"bnc"``/``"dnn"``; DNNs: ``structure`` ``fc``/``cnn``,
``bits`` = bits per weight, size and operations by the paper's DNN conventions, see
:mod:`bnc_deploy.costs`), and so does the graph count (:mod:`bnc_deploy.profiling.graph_count`).

Each model file is run in every selected runtime that reads it: ``.bnc`` -> numpy;
``.onnx`` -> onnxruntime with 1 thread and with its default threads; ``.tflite`` -> LiteRT with
1 thread; ``.h`` -> native (compiled with the host C compiler, 1 thread). With ``--data`` the test split gives the test error (through each runtime) and the
rows to time; without it the latency runs on seeded random valid codes and the test error is
the one stored in a ``.bnc`` model (exports: none).

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
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bnc_deploy.cli.common import cli_main, print_json
from bnc_deploy.errors import ConfigError, InputError, MetadataError, RuntimeLoadError, require_extra
from bnc_deploy.formats.integrity import read_key

PROG = "bnc-profile"
MODEL_SUFFIXES = (".bnc", ".onnx", ".ort", ".tflite", ".h")
#: Exported files without a graph to count (C: costs from the metadata only).
UNCOUNTED_SUFFIXES = (".h",)
RESULT_SUFFIXES = (".json",)
#: Seeded random rows timed when no --data is given.
RANDOM_ROWS = 1000

#: Keys every --json row has (scripts rely on them; only ever added to).
JSON_KEYS = (
    "file", "format", "model_kind", "structure", "lowering", "bits", "quantized", "runtime", "threads",
    "dataset", "fold", "n_test_rows", "test_error", "test_error_source", "n_parameters", "size_bits", "n_ops",
    "argmax_comparisons", "addressing_ops", "graph_ops", "graph_param_bits", "graph_storage_bits", "graph_macs",
    "graph_lookups", "graph_categories", "graph_complete", "graph_unknown_ops", "graph_matches_analytic",
    "latency_mode", "latency_input", "latency_us_p50_batch1", "latency_us_p99_batch1", "latency_us_mean_batch1",
    "latency_runs", "throughput_rows_per_s", "throughput_batch", "file_bytes", "cpu", "environment", "pareto",
    "notes",
    # --target (emulated; None on host rows): the file run on the target vs the same file on this host
    "target", "target_method", "target_label_agreement", "target_exact", "target_max_abs_score_diff",
    "target_reference_exact", "target_check_set", "target_ok",
)
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
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE", help="model files (.bnc, .onnx, .ort, .tflite, .h) or JSON result files")
    p.add_argument("--data", metavar="PATH_OR_NAME", help="dataset whose test split gives the error and the timed rows")
    p.add_argument("--fold", type=int, default=None, metavar="K", help="1-based fold of --data (default 1)")
    p.add_argument("--runtime", default=None, metavar="LIST",
                   help="comma-separated runtimes to use (numpy, onnxruntime, litert, native; default: all)")
    p.add_argument("--json", action="store_true", help="print a JSON list of objects instead of a table")
    p.add_argument("--plot", metavar="OUT.png",
                   help="write error vs size / operations / bit width as OUT.png and OUT.svg (a .png or .svg "
                        "suffix is replaced, any other kept: run.v2.png -> run.v2.png, run.v2.svg)")
    p.add_argument("--nodes", action="store_true", help="also show the per-node operation table of exported graphs")
    p.add_argument("--key", metavar="FILE",
                   help="key file of exports signed with bnc-export --sign-key (raw bytes, at least 32)")
    p.add_argument("--no-integrity-check", action="store_true",
                   help="load exported files even if their integrity digest does not match (modified after export)")
    p.add_argument("--target", choices=TARGETS,
                   help="run the files on this emulated target instead (aarch64: qemu-user in the root of "
                        "'bnc-target setup --target aarch64'): label agreement, bit-identical scores and max "
                        "|Δ score| against this host, the test error there with --data; analytic costs; no latency")
    served = p.add_argument_group("served models (--runtime http)")
    served.add_argument("--url", metavar="URL",
                        help="with --runtime http: the Open Inference Protocol (KServe V2) server serving FILE, "
                             "e.g. http://127.0.0.1:8000 (bnc-serve); FILE still gives the costs")
    served.add_argument("--model", metavar="NAME",
                        help="with --runtime http: the served model's name (default: FILE's stem, as bnc-serve names it)")
    timing = p.add_argument_group("latency")
    timing.add_argument("--no-latency", action="store_true", help="skip timing (costs and accuracy only)")
    timing.add_argument("--runs", type=int, default=200, metavar="N",
                        help="timed batch-1 calls per block (default 200)")
    timing.add_argument("--repeats", type=int, default=3, metavar="N", help="blocks of --runs calls (default 3)")
    timing.add_argument("--warmup", type=int, default=20, metavar="N", help="untimed calls first (default 20)")
    timing.add_argument("--throughput-repeats", type=int, default=5, metavar="N",
                        help="timed full-batch passes (default 5; 0 skips throughput)")
    timing.add_argument("--latency-mode", choices=("session", "adapter"), default="session",
                        help="time the bare runtime call (default) or the adapter call with input validation")
    return p


@cli_main(PROG)
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.fold is not None and args.data is None:
        parser.error("--fold needs --data")
    if args.plot:  # before measuring, not after: the extra, and both files can be written
        require_extra("plotting (--plot)", "plot", "matplotlib")
        from bnc_deploy.profiling.pareto import check_plot_path

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
        from bnc_deploy.profiling.pareto import plot_overview

        written = plot_overview(unique_models(rows), args.plot)
        print(f"{PROG}: wrote {', '.join(written)}", file=sys.stderr)
    return 0


# -- orchestration ---------------------------------------------------------------------------------------
def parse_runtimes(spec: str | None) -> list[str]:
    """Runtime names from ``--runtime`` (ConfigError naming an unknown one)."""
    from bnc_deploy.runtimes.base import RUNTIMES

    if spec is None:
        return ["numpy", "onnxruntime", "litert", "native"]
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in RUNTIMES]
    if unknown or not names:
        raise ConfigError(f"--runtime: unknown runtime {', '.join(map(repr, unknown)) or repr(spec)}; "
                          f"choose from {', '.join(sorted(RUNTIMES))}")
    return names


def check_files(files) -> None:
    for f in files:
        p = Path(f)
        if p.is_dir():
            raise IsADirectoryError(f"{p}: is a directory, not a model or result file")
        if p.suffix.lower() not in MODEL_SUFFIXES + RESULT_SUFFIXES:
            raise ConfigError(f"{p}: unknown file type {p.suffix or '(none)'!r}; expected "
                              f"{', '.join(MODEL_SUFFIXES + RESULT_SUFFIXES)}")
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such file")


def run(args) -> tuple[list[dict], list[str]]:
    """Profile every FILE; return (rows, per-node tables)."""
    from bnc_deploy.profiling.latency import environment
    from bnc_deploy.profiling.pareto import load_records, mark_pareto

    check_files(args.files)
    runtimes = parse_runtimes(args.runtime)
    load_options = {"verify_integrity": not args.no_integrity_check,
                    "key": read_key(args.key) if args.key else None}
    http_options = served_model_options(args, runtimes)
    data = load_test_split(args.data, args.fold) if args.data else None
    env = environment()
    options = dict(latency=not args.no_latency, runs=args.runs, warmup=args.warmup, repeats=args.repeats,
                   throughput_repeats=args.throughput_repeats, mode=args.latency_mode)
    rows, tables = [], []
    if args.target:
        if http_options is not None or args.runtime is not None:
            raise ConfigError("--target runs each file in its default runtime on the target: drop --runtime/--url")
        models = [f for f in args.files if Path(f).suffix.lower() in MODEL_SUFFIXES]
        rows.extend(load_records([f for f in args.files if Path(f).suffix.lower() in RESULT_SUFFIXES]))
        if models:
            rows.extend(profile_target(args.target, models, data, env=env, load_options=load_options))
        mark_pareto(rows, by="dataset")
        return rows, tables
    for f in args.files:
        if Path(f).suffix.lower() in RESULT_SUFFIXES:
            rows.extend(load_records([f]))
            continue
        model_rows, table = profile_model(f, runtimes, data, env=env, nodes=args.nodes, load_options=load_options,
                                          http_options=http_options, **options)
        rows.extend(model_rows)
        if table:
            tables.append(table)
    mark_pareto(rows, by="dataset")
    return rows, tables


def profile_target(target: str, files: list[str], data, *, env: dict, load_options: dict) -> list[dict]:
    """One row per model file run on an emulated ``target`` (:mod:`bnc_deploy.targets.aarch64`, one
    emulator run for all files): the file's analytic costs and graph count, the target's labels and
    scores against this host's (``target_*`` keys), the test error of the target's labels with
    ``data``. No latency: emulated timings are not the target's."""
    from bnc_deploy.targets import aarch64

    report = aarch64.check_files(files, data=data, verify_integrity=load_options["verify_integrity"],
                                 key=load_options["key"])
    rows = []
    for f, e in zip(files, report["files"]):
        facts = model_facts(f, **({} if Path(f).suffix.lower() == ".bnc" else load_options))
        row = base_row(facts, env)
        ref = e["reference"]
        row.update(runtime=e["runtime"], threads=None if e["runtime"] == "numpy" else 1, target=target,
                   target_method=report["method"], target_label_agreement=e["label_agreement"],
                   target_exact=e["exact"], target_max_abs_score_diff=e["max_abs_score_diff"],
                   target_reference_exact=None if ref is None else ref["exact"], target_check_set=e["check_set"],
                   target_ok=e["ok"])
        if data is not None:
            row.update(dataset=data[2], fold=data[3], n_test_rows=int(len(data[1])))
        if e["test_error"] is not None:
            row.update(test_error=e["test_error"], test_error_source=f"{e['runtime']} on {target} (emulated), test split")
        if e["error"]:
            row["notes"].append(f"{Path(f).name} failed on {target}: {e['error']}")
        row["notes"].append(f"--target {target}: emulated (qemu-user), compared with this host on "
                            f"{e['rows_source'].split(' (')[0]}; no latency")
        rows.append(row)
    return rows


def served_model_options(args, runtimes: list[str]) -> dict | None:
    """``{"url", "model"}`` for the ``http`` runtime (a served model), or None when it is not
    selected; ConfigError when --url and --runtime http do not come together."""
    if "http" not in runtimes:
        if args.url or args.model:
            raise ConfigError("--url/--model apply to --runtime http only")
        return None
    if not args.url:
        raise ConfigError("--runtime http needs --url (the server, e.g. http://127.0.0.1:8000)")
    models = [f for f in args.files if Path(f).suffix.lower() in MODEL_SUFFIXES]
    if args.model and len(models) > 1:
        raise ConfigError("--model names one served model: give one FILE with it (or let each FILE's stem name it)")
    return {"url": args.url, "model": args.model}


def load_test_split(spec: str, fold: int | None):
    """``(x_test, y_test, name, fold)`` of a dataset spec (DatasetError names the problem)."""
    from bnc_deploy.datasets import load_dataset

    ds = load_dataset(spec, fold=1 if fold is None else fold)
    return ds.x_test, ds.y_test, ds.name, ds.fold


def model_facts(path, *, verify_integrity: bool = True, key: bytes | None = None) -> dict:
    """Costs of one model file: analytic (artifact or metadata) and, for exports, the graph count.

    BN classifiers and DNNs alike: ``.bnc`` artifacts by their kind (:func:`analytic_costs`),
    exported files from their metadata (:func:`costs_from_metadata`, by ``model_kind``). An
    export's integrity digest is checked first (``key``: of a signed file), unless
    ``verify_integrity`` is False.
    """
    from bnc_deploy.costs import COST_MODELS, analytic_costs, costs_from_metadata

    p = Path(path)
    suffix = p.suffix.lower()
    facts = {"file": str(p), "format": suffix.lstrip("."), "file_bytes": p.stat().st_size, "notes": []}
    if suffix == ".bnc":
        from bnc_deploy.artifacts import load_artifact

        artifact = load_artifact(p)
        costs = analytic_costs(artifact)
        data = artifact.metadata.get("data", {})
        facts.update(model_kind=artifact.kind, structure=artifact.structure, lowering=None,
                     bits=artifact.bits_per_parameter, quantized=artifact.is_quantized, input="codes",
                     cardinalities=[int(c) for c in artifact.cardinalities], artifact=artifact,
                     stored_dataset=data.get("name"), stored_fold=data.get("fold"),
                     stored_test_error=artifact.metadata.get("errors", {}).get("test"), graph=None)
    else:
        from bnc_deploy.formats.integrity import verify_file
        from bnc_deploy.profiling.graph_count import count_graph

        if not verify_integrity:
            facts["notes"].append("integrity digest not checked (--no-integrity-check)")
        elif verify_file(p, key=key) is None:  # IntegrityError (exit 2) when modified after export
            facts["notes"].append(f"{p.name} has no integrity digest (exported by an older bnc-deploy; "
                                  "re-export it to protect it)")
        if suffix in UNCOUNTED_SUFFIXES:  # a C file has no graph: costs from its metadata, no graph count
            from bnc_deploy.formats.c import read_c_metadata

            count, meta = None, read_c_metadata(p)
            facts["notes"].append(f"{suffix} files have no graph to count: costs from the file's metadata")
        else:
            count = count_graph(p)
            meta = count.metadata
        if not meta:
            raise MetadataError(f"{p}: not a bnc-deploy export (no 'bnc_deploy' metadata)")
        kind = meta.get("model_kind", "bnc")
        if kind not in COST_MODELS:
            raise MetadataError(f"{p}: no analytic cost model for model kind {kind!r}")
        try:
            costs = costs_from_metadata(meta)
            facts.update(model_kind=kind, structure=meta["structure"], lowering=meta.get("lowering"),
                         bits=meta["bits"], quantized=meta["quantized"], input=meta["input"],
                         cardinalities=list(meta["cardinalities"]), graph=count)
        except (KeyError, TypeError) as exc:
            raise MetadataError(f"{p}: incomplete {kind} metadata (no {exc})") from None
    facts["costs"] = costs
    return facts


def profile_model(path, runtimes, data, *, env: dict, latency: bool = True, runs: int = 200, warmup: int = 20,
                  repeats: int = 3, throughput_repeats: int = 5, mode: str = "session",
                  nodes: bool = False, load_options: dict | None = None,
                  http_options: dict | None = None) -> tuple[list[dict], str]:
    """Rows (one per runtime setting that reads the file) and the per-node table (if ``nodes``).

    ``load_options``: ``verify_integrity`` and ``key`` for exported files (default: check, no key).
    ``http_options``: ``url`` and ``model`` of the server serving ``path`` when ``runtimes`` has
    ``http`` (the file gives the costs, the server the accuracy and latency).
    """
    from bnc_deploy.profiling.latency import RUNTIMES_FOR_SUFFIX, THREAD_CONFIGS

    load_options = {} if Path(path).suffix.lower() == ".bnc" else dict(load_options or {})
    facts = model_facts(path, **load_options)
    base = base_row(facts, env)
    if data is not None:
        base.update(dataset=data[2], fold=data[3], n_test_rows=int(len(data[1])))
    elif facts.get("stored_test_error") is not None:
        base.update(dataset=facts["stored_dataset"], fold=facts["stored_fold"],
                    test_error=facts["stored_test_error"], test_error_source="model metadata")
    table = facts["graph"].table() if nodes and facts["graph"] is not None else ""
    if nodes and facts["graph"] is not None:
        base["graph_nodes"] = [vars(n) for n in facts["graph"].nodes]
    from bnc_deploy.runtimes.base import EXTENSIONS

    suffix = Path(path).suffix.lower()
    wanted = [r for r in RUNTIMES_FOR_SUFFIX.get(suffix, (EXTENSIONS.get(suffix),)) if r in runtimes]
    if http_options is not None:  # a served model runs whatever the file's type
        wanted.append("http")
    if not wanted:
        base["notes"].append(f"no selected runtime reads {Path(path).suffix} files")
        return [base], table
    if facts["input"] != "codes":
        base["notes"].append("raw-input file: costs only, not run (datasets give codes; profile the .bnc model "
                             "or a codes export for accuracy and latency)")
        return [base], table
    rows = []
    for runtime in wanted:
        for threads in THREAD_CONFIGS.get(runtime, (1,)):
            rows.append(run_one(path, runtime, threads, facts, dict(base, notes=list(base["notes"])), data,
                                latency=latency, runs=runs, warmup=warmup, repeats=repeats,
                                throughput_repeats=throughput_repeats, mode=mode,
                                load_options=dict(load_options, **http_options) if runtime == "http" else load_options))
    return rows, table


def base_row(facts: dict, env: dict) -> dict:
    costs, count = facts["costs"], facts["graph"]
    row = dict.fromkeys(JSON_KEYS)
    row.update(file=facts["file"], format=facts["format"], model_kind=facts["model_kind"],
               structure=facts["structure"], lowering=facts["lowering"], bits=facts["bits"],
               quantized=facts["quantized"], n_parameters=costs.n_parameters, size_bits=costs.size_bits,
               n_ops=costs.n_ops, argmax_comparisons=costs.argmax_comparisons, addressing_ops=costs.addressing_ops,
               file_bytes=facts["file_bytes"], cpu=env["cpu"], environment=env, notes=list(facts["notes"]))
    if count is not None:
        totals = count.totals()
        check = count.compare(costs.size_bits, costs.n_ops)
        row.update(graph_ops=count.paper_ops, graph_param_bits=count.param_bits,
                   graph_storage_bits=count.storage_bits, graph_macs=count.macs, graph_lookups=count.lookups,
                   graph_categories={k: totals[k] for k in ("arithmetic", "addressing", "binning", "guard", "argmax",
                                                             "rescale", "load-time")} |
                   {"folded": totals["folded_additions"]},
                   graph_complete=count.complete, graph_unknown_ops=count.unknown_ops,
                   graph_matches_analytic=check["size_bits"]["equal"] and check["n_ops"]["equal"])
        if not count.complete:
            row["notes"].append(f"graph count incomplete: no rule for {', '.join(count.unknown_ops)}")
    return row


def run_one(path, runtime, threads, facts, row, data, *, latency, runs, warmup, repeats, throughput_repeats,
            mode, load_options: dict | None = None) -> dict:
    """Accuracy and latency of one (file, runtime, threads)."""
    from bnc_deploy.profiling.latency import measure_accuracy, measure_latency
    from bnc_deploy.runtimes.base import load_runtime

    try:
        adapter = load_runtime(path, runtime, threads=threads, **(load_options or {}))
    except ImportError as exc:
        raise RuntimeLoadError(f"{path}: runtime {runtime!r} is not available ({exc})") from None
    row.update(runtime=runtime, threads=threads if runtime != "numpy" else None)
    if data is not None:
        x, y = data[0], data[1]
        try:
            acc = measure_accuracy(adapter, x, y)
        except InputError as exc:  # the adapter's input check: codes outside the model's features
            raise InputError(f"{path}: --data does not fit this model: {exc}") from None
        row.update(test_error=acc["test_error"], test_error_source=f"{runtime} on the test split")
        timed, how = x, "test split rows"
    else:
        timed, how = random_codes(facts), f"{RANDOM_ROWS} seeded random valid codes (no --data)"
    if latency:
        t = measure_latency(adapter, timed, runs=runs, warmup=warmup, repeats=repeats,
                            throughput_repeats=throughput_repeats, mode=mode)
        row.update(latency_mode=mode, latency_input=how, latency_us_p50_batch1=round(t.p50_us, 2),
                   latency_us_p99_batch1=round(t.p99_us, 2), latency_us_mean_batch1=round(t.mean_us, 2),
                   latency_runs=t.runs * t.repeats,
                   throughput_rows_per_s=None if t.throughput_rows_per_s is None else round(t.throughput_rows_per_s),
                   throughput_batch=t.throughput_batch)
    return row


def random_codes(facts: dict, n: int = RANDOM_ROWS, seed: int = 0) -> np.ndarray:
    artifact = facts.get("artifact")
    if artifact is not None and artifact.check_x is not None and len(artifact.check_x):
        return np.asarray(artifact.check_x, dtype=np.int64)
    cards = np.asarray(facts["cardinalities"], dtype=np.int64)
    return (np.random.default_rng(seed).random((n, cards.size)) * cards).astype(np.int64)


def unique_models(rows: list[dict]) -> list[dict]:
    """One row per model file (the first runtime's), for plots."""
    seen, out = set(), []
    for r in rows:
        key = r.get("file")
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


# -- output ------------------------------------------------------------------------------------------------
def _fmt(value, spec: str = ",", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def format_table(rows: list[dict]) -> str:
    """One line per (file, runtime, threads); '*' marks Pareto-optimal models (size, ops, error)."""
    head = (f"{'file':<28} {'runtime':<11} {'thr':>3} {'error %':>7} {'size bits':>11} {'ops':>7} {'graph':>7} "
            f"{'p50 µs':>8} {'p99 µs':>8} {'rows/s':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        name = Path(str(r.get("file", ""))).name
        name = name if len(name) <= 27 else "…" + name[-26:]
        mark = "*" if r.get("pareto") else " "
        graph = r.get("graph_ops")
        graph_s = "-" if graph is None and r.get("graph_matches_analytic") is None else \
            ("=" if r.get("graph_matches_analytic") else _fmt(graph))
        threads = "def" if r.get("runtime") == "onnxruntime" and r.get("threads") is None else _fmt(r.get("threads"))
        error = None if r.get("test_error") is None else 100 * r["test_error"]
        lines.append(f"{mark}{name:<27} {str(r.get('runtime') or '-'):<11} {threads:>3} {_fmt(error, '.2f'):>7} "
                     f"{_fmt(r.get('size_bits')):>11} {_fmt(r.get('n_ops')):>7} {graph_s:>7} "
                     f"{_fmt(r.get('latency_us_p50_batch1'), ',.1f'):>8} "
                     f"{_fmt(r.get('latency_us_p99_batch1'), ',.1f'):>8} "
                     f"{_fmt(r.get('throughput_rows_per_s')):>11}")
    env = next((r["environment"] for r in rows if r.get("environment")), None)
    lines.append("-" * len(head))
    lines += format_target_lines(rows)
    lines.append("* Pareto-optimal in (size bits, ops, test error) per dataset; graph '=' : the exported graph's "
                 "counted ops and parameter bits equal the analytic ones")
    if env:
        v = env.get("versions", {})
        lines.append(f"CPU {env['cpu']} ({env['usable_cpus']} usable of {env['cpu_count']}), Python {env['python']}, "
                     + ", ".join(f"{k} {v[k]}" for k in ("numpy", "onnxruntime", "ai-edge-litert", "tensorflow-cpu",
                                                         "tensorflow") if k in v))
    notes = sorted({n for r in rows for n in (r.get("notes") or [])})
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def format_target_lines(rows: list[dict]) -> list[str]:
    """The --target columns (none when no row ran on a target)."""
    target_rows = [r for r in rows if r.get("target")]
    if not target_rows:
        return []
    lines = [(f"{'file':<28} {'target':<8} {'labels = host':>13} {'bit-identical':>13} {'max |Δ score|':>13} "
              f"{'= model':>7}  check set")]
    for r in target_rows:
        name = Path(str(r.get("file", ""))).name
        name = name if len(name) <= 27 else "…" + name[-26:]
        agree, diff = r.get("target_label_agreement"), r.get("target_max_abs_score_diff")
        ref = r.get("target_reference_exact")
        lines.append(f" {name:<27} {r['target']:<8} {_fmt(agree, '.4f'):>13} "
                     f"{'-' if r.get('target_exact') is None else ('yes' if r['target_exact'] else 'no'):>13} "
                     f"{_fmt(diff, '.3g'):>13} {'-' if ref is None else ('yes' if ref else 'no'):>7}  "
                     f"{r.get('target_check_set') or '-'}  {'PASS' if r.get('target_ok') else 'FAIL'}")
    lines.append("target: emulated (qemu-user); labels/scores against the same file on this host, '= model': "
                 "bit-identical with the .bnc given; no latency on an emulator")
    lines.append("-" * len(lines[0]))
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
