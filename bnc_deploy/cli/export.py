"""``bnc-export``: write a model file in a deployable format through the one verifier.

Usage::

    bnc-export MODEL --format FORMAT -o OUT [--data PATH_OR_NAME [--fold K]] [--json] [--sign-key FILE]
               [--package {cmake,arduino} (with --format c: OUT is a library folder)]
               [exporter options: --lowering {gather,onehot-fc,gather-grouped}, --raw-inputs, --opset N,
                --pack-bits, --onehot {equal-cast,relu,edgetpu}, --profile {default,micro,web}, --metadata,
                --output-layer {int8,float32}, ... (bnc-export --help lists them all)]

The formats and their options come from the exporter registry (:mod:`bnc_deploy.exporters.base`):
every registered exporter's format is a ``--format`` choice and every option it declares is a
flag (``pack_bits`` -> ``--pack-bits``), so a new exporter needs no edit here. An option the
chosen exporter does not declare is refused, naming the exporters that take it.

The file is built, written to a temporary file, run in its runtime (one thread) and compared
with the model file's NumPy reference predictor (:func:`bnc_deploy.verify.export_file`) on the
verification rows: the TEST split of ``--data``, else the check set stored in the model, plus 256
seeded random rows. It is published at ``OUT`` only if a file that promises exactness (see its
``exact`` metadata) is exact. The file carries a digest of all its bytes in its metadata
(``integrity``: its SHA-256, or its HMAC-SHA256 under ``--sign-key FILE``), which runtimes and
``bnc-profile`` check on load (:mod:`bnc_deploy.formats.integrity`). With ``--package cmake|arduino`` (``--format c``
only) ``OUT`` is a library folder: the header is exported through the same verifier into it
(``include/`` or ``src/``), the files around it are added (:mod:`bnc_deploy.formats.c_package`) and
the folder is renamed into place, all or nothing; an existing ``OUT`` must be an empty folder. A raw-input export
is fed the raw value on the
upper edge of each
row's bins, and the reference codes are what the model's discretizer makes of those values.

Exit status: 0 on success; 130 after Ctrl-C (nothing written); 1 when a file that promises exactness disagrees with
the model on any
row's label or score (nothing is written; an existing OUT is untouched); 2 on bad input
(missing/corrupt model, bad data spec or data out of the model's range, an option that does not
apply, an output path that cannot be written), with a one-line message and no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from bnc_deploy.cli.common import EXIT_USAGE, cli_main
from bnc_deploy.errors import BncDeployError

if TYPE_CHECKING:
    from bnc_deploy.verify import ExportResult


class CLIError(Exception):
    """Bad input: reported as ``bnc-export: error: ...`` with exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    from bnc_deploy.exporters.base import exporters, formats
    from bnc_deploy.formats.c_package import PACKAGE_KINDS

    p = argparse.ArgumentParser(
        prog="bnc-export",
        description="Export a bnc-deploy model (.bnc) and verify the file against the model before publishing it.",
    )
    p.add_argument("model", metavar="MODEL", help="model file written by bnc-train (.bnc)")
    p.add_argument("--format", required=True, choices=formats(), help="output format")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="file to write (a folder with --package)")
    p.add_argument(
        "--data",
        metavar="PATH_OR_NAME",
        help="verify on this dataset's test split (a name such as 'letter' or a file); "
        "default: the check set stored in the model",
    )
    p.add_argument("--fold", type=int, default=None, metavar="K", help="1-based fold of --data (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--package",
        choices=PACKAGE_KINDS,
        default=None,
        help="with --format c: write a library folder at OUT instead of a lone header: 'cmake' (CMakeLists.txt "
        "with an INTERFACE target named after --name, include/PREFIX.h, examples/self_test.c, README.md) or "
        "'arduino' (library.properties, src/PREFIX.h, an example sketch); the header is the verified one, "
        "byte-identical to --format c's; OUT must not exist or be an empty folder, and is written all or nothing",
    )
    p.add_argument(
        "--sign-key",
        metavar="FILE",
        help="sign the file with HMAC-SHA256 under the key in FILE (raw bytes, at least 32; e.g. "
        "head -c 32 /dev/urandom > model.key); loading it then needs the key "
        "(bnc-profile --key FILE, load_runtime(..., key=...)). Default: the file's SHA-256, "
        "which catches accidents and edits but not someone who recomputes it",
    )
    group = p.add_argument_group("exporter options (each applies to the formats and model kinds that declare it)")
    for option in _cli_options(exporters().values()).values():
        takers = ", ".join(option["takers"])
        if option["type"] == "bool":
            group.add_argument(
                option["flag"],
                dest=option["name"],
                action="store_const",
                const=not option["default"],  # --flag sets True; --no-flag (a True default) sets False
                default=None,
                help=f"{option['help']} [{takers}]",
            )
        else:
            group.add_argument(
                option["flag"],
                dest=option["name"],
                default=None,
                type=int if option["type"] == "int" else str,
                choices=option["choices"] or None,
                help=f"{option['help']} [{takers}]",
            )
    return p


def _cli_options(specs) -> dict[str, dict]:
    """Every declared option that is a flag, merged by name over the exporters that declare it."""
    merged: dict[str, dict] = {}
    for spec in sorted(specs, key=lambda s: (s.format, s.kind)):
        for option in spec.options:
            if option.type == "rows" or option.internal:
                continue
            entry = merged.setdefault(
                option.name,
                {
                    "name": option.name,
                    "flag": option.flag,
                    "type": option.type,
                    "default": option.default,
                    "help": option.help,
                    "choices": [],
                    "takers": [],
                },
            )
            entry["choices"] += [c for c in option.choices if c not in entry["choices"]]
            entry["takers"].append(f"{spec.format} ({spec.kind})")
    return merged


@cli_main("bnc-export")
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.fold is not None and args.data is None:
        parser.error("--fold needs --data")
    try:
        report = run(args)
    except CLIError as exc:
        print(f"bnc-export: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if report["published"]:
        from bnc_deploy.fileio import holds

        # Concurrent writers to one -o: the last complete one wins; say so if that was not this one.
        report["owned"] = bool(report["owned"] and holds(report["output"], report["sha256"]))
        if not report["owned"]:
            print(
                f"bnc-export: warning: {report['output']} was replaced by another writer after this one; "
                "the file on disk is theirs",
                file=sys.stderr,
            )
    if args.json:
        print(json.dumps(report, allow_nan=False))
    else:
        print(format_table(report))
    if report["exact_expected"] and report["exact"] is False:
        print(
            f"bnc-export: error: {report['output']} is not bit-exact with {report['model']} "
            f"({report['label_mismatches_all']} label mismatch(es) on {report['n_verified']} verification rows, "
            f"{report['scores_name']} identical: {report['log_joint_identical']}); nothing was written",
            file=sys.stderr,
        )
        return 1
    return 0


def run(args: argparse.Namespace) -> dict:
    """Load, export through the verifier, report. Raises CLIError for bad input."""
    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.exporters.base import exporter_for
    from bnc_deploy.fileio import check_output_path
    from bnc_deploy.formats.c_package import check_package_dir, header_path
    from bnc_deploy.formats.integrity import read_key
    from bnc_deploy.verify import VerificationError, export_file

    if args.package is not None and args.format != "c":
        raise CLIError(f"--package {args.package} needs --format c (got --format {args.format})")
    try:
        key = None if args.sign_key is None else read_key(args.sign_key)
        artifact = load_artifact(args.model)
        spec = exporter_for(artifact.kind, args.format)
        if args.package is None:
            output = check_output_path(args.output, inputs=(args.model,))
        else:
            output = check_package_dir(args.output, inputs=(args.model,))
    except BncDeployError as exc:
        raise CLIError(str(exc)) from None
    if args.package is None and output.suffix.lower() != spec.extension:
        print(
            f"bnc-export: warning: {output} does not end in {spec.extension}, the extension of "
            f"{args.format} files; runtimes pick their format by it",
            file=sys.stderr,
        )
    given = {name: getattr(args, name) for name in _cli_options(_all_specs()) if getattr(args, name, None) is not None}
    options = {name: value for name, value in given.items() if name in spec.option_names}
    not_declared = {name: value for name, value in given.items() if name not in spec.option_names}
    x, y, data_desc = verification_rows(artifact, args.data, args.fold)
    for option in spec.options:
        if option.type == "rows" and args.data is not None:
            options[option.name] = _training_rows(args.data, args.fold)
    export = partial(export_file, artifact, format=args.format, rows=x, labels=y, key=key, **options)
    published_at, package = output, None
    try:
        spec.resolve_options(not_declared)  # an option this exporter does not declare: ExportError naming takers
        if args.package is None:
            result = export(output)
        else:
            header = header_path(args.package, spec.resolve_options(options)["name"])
            published_at, package = output / header, {"kind": args.package, "dir": str(output), "files": []}
            result = _export_package(args.package, output, header, export, package)
    except VerificationError as exc:  # nothing published: the report says why
        result = exc.report
    except BncDeployError as exc:
        raise CLIError(str(exc)) from None
    except OSError as exc:
        raise CLIError(f"cannot write {output}: {exc.strerror or exc}") from None
    report = make_report(artifact, args, result, data_desc, output=str(published_at))
    if package is not None:
        report["package"] = package
    return report


def _export_package(kind: str, folder, header, export, package: dict) -> ExportResult:
    """``export(path)`` (the verifier) writes the header into a staged folder, the package's files are
    added around it, and the folder is renamed to ``folder``; on any failure nothing is left behind.
    Fills ``package["files"]`` once published."""
    from bnc_deploy.formats.c_package import publish_package, staged_package, write_package

    with staged_package(folder) as stage:
        result = export(stage / header)
        files = write_package(stage, kind, header)
        publish_package(stage, folder)
    package["files"] = files
    return result


def _all_specs():
    from bnc_deploy.exporters.base import exporters

    return exporters().values()


def _training_rows(spec: str, fold: int | None) -> np.ndarray:
    """Up to 1,000 seeded rows of the --data training split (calibration of int8 exports)."""
    from bnc_deploy.datasets import load_dataset

    ds = load_dataset(spec, fold=1 if fold is None else fold)
    rows = np.random.default_rng(0).permutation(ds.x_train.shape[0])[:1000]
    return ds.x_train[np.sort(rows)]


def verification_rows(artifact, spec: str | None, fold: int | None) -> tuple[np.ndarray | None, np.ndarray | None, str]:
    """``(x codes (n, D) int64, y (n,), description)`` to verify on; x is None when there are none."""
    from bnc_deploy.validation import InputError, check_codes

    if spec is None:
        if artifact.check_x is None:
            return None, None, "none (the model stores no check set; pass --data)"
        from bnc_deploy.verify import CHECK_SET_ROWS

        x, y, desc = artifact.check_x, artifact.check_y, CHECK_SET_ROWS
    else:
        from bnc_deploy.datasets import DatasetError, load_dataset

        try:
            ds = load_dataset(spec, fold=1 if fold is None else fold)
        except (DatasetError, OSError) as exc:
            raise CLIError(f"--data {spec}: {exc}") from None
        x, y, desc = ds.x_test, ds.y_test, f"{ds.name} test split, fold {ds.fold}"
    try:
        x = check_codes(x, artifact.cardinalities, artifact.feature_names, where=f"--data {spec}" if spec else desc)
    except InputError as exc:
        raise CLIError(f"{exc} (does the data match the model's {artifact.n_features} features?)") from None
    return x, np.asarray(y), desc


def make_report(artifact, args, result: ExportResult, data_desc: str, *, output: str | None = None) -> dict:
    """The ``--json`` object: the model's costs and facts, the file (``output``, default -o), the verification."""
    from bnc_deploy.verify import ExportReport

    output = str(args.output) if output is None else output
    return ExportReport.of(artifact, result, model=str(args.model), output=output, data=data_desc).to_dict()


def format_table(r: dict) -> str:
    """A short human-readable summary of the report (the model lines come from its kind)."""
    header = TABLE_HEADERS.get(r.get("model_kind"), _bnc_header)(r)
    inputs = "raw float32 inputs" if r["raw_inputs"] else "integer code inputs"
    action = "wrote" if r["published"] else "did NOT write"
    lines = [f"bnc-export: {action} {r['output']} ({r['format']}, {r['lowering']}, {inputs})", *header]
    if r.get("lowering_auto"):
        auto = r["lowering_auto"]
        timed = ", ".join(
            f"{name} {seconds * 1e6:,.1f} us"
            for name, seconds in sorted(auto["median_seconds"].items(), key=lambda kv: kv[1])
        )
        lines.append(
            f"  {'lowering auto':<18}{auto['chosen']}: median call at {auto['batch']:,} row(s) in "
            f"{auto['runtime']}: {timed}" + (f" (refused: {', '.join(auto['refused'])})" if auto["refused"] else "")
        )
    lines.append(
        f"  {'verified on':<18}{r['n_rows']:,} rows: {r['data']} + {r['n_random_rows']} random rows "
        f"({r['runtime']}, 1 thread)"
    )
    if r["n_rows"]:
        diff = "bit-identical" if r["log_joint_identical"] else f"max |diff| {r['max_abs_log_joint_diff']:.3g}"
        lines += [
            f"  {'label agreement':<18}{100 * r['agreement']:.2f}% ({r['label_mismatches']} mismatch(es))",
            f"  {r['scores_name']:<18}{diff}",
        ]
        if r["accuracy"] is not None:
            lines.append(
                f"  {'test accuracy':<18}{100 * r['accuracy']:.2f}% (reference {100 * r['reference_accuracy']:.2f}%, "
                f"change {100 * r['accuracy_change']:+.2f} points)"
            )
    status = (
        "EXACT"
        if r["exact"]
        else "NOT EXACT (expected exact)"
        if r["exact_expected"]
        else "labels only (not exact by design)"
    )
    lines.append(f"  {'result':<18}{status}")
    if r.get("integrity"):
        lines.append(f"  {'integrity':<18}{r['integrity']} digest in the file's metadata (checked on load)")
    if r.get("package"):
        pkg = r["package"]
        state = f"{len(pkg['files'])} files in {pkg['dir']}" if pkg["files"] else f"nothing written to {pkg['dir']}"
        lines.append(f"  {'package':<18}{pkg['kind']}: {state}")
    return "\n".join(lines)


def _bnc_header(r: dict) -> list[str]:
    nodes = f" ({r['n_nodes']} graph nodes)" if r.get("n_nodes") is not None else ""
    return [
        f"  {'file size':<18}{r['file_bytes']:,} bytes",
        f"  {'parameters':<18}{r['n_parameters']:,} x {r['bits']} bits = {r['size_bits']:,} bits "
        f"({r['size_bits'] / 8:,.0f} bytes)",
        f"  {'operations':<18}{r['n_ops']:,} additions per row{nodes}",
    ]


def _dnn_header(r: dict) -> list[str]:
    widths = ",".join(map(str, r["hidden_widths"]))
    return [
        f"  {'model':<18}{r['architecture'].upper()} {widths}, {r['weight_bits']}-bit weights, {r['activation']}",
        f"  {'file size':<18}{r['file_bytes']:,} bytes",
        f"  {'size':<18}{r['size_bits']:,} bits ({r['n_parameters']:,} weights x {r['weight_bits']} bits + "
        "batch norm + biases)",
        f"  {'operations':<18}{r['n_ops']:,} per row (MACs + batch-norm outputs + biases)",
    ]


#: Model kind -> the lines describing the model in the table (a new family adds its own).
TABLE_HEADERS = {"bnc": _bnc_header, "dnn": _dnn_header}


if __name__ == "__main__":
    sys.exit(main())
