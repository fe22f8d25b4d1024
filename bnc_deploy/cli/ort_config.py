"""``bnc-ort-config``: the reduced-operator config a minimal ONNX Runtime build needs for ``.ort`` exports.

Usage::

    bnc-ort-config FILE.ort [FILE.ort ...] [-o required_operators.config] [--types] [--key FILE]
                   [--no-integrity-check]

Writes the config onnxruntime's build reads (``./build.sh --minimal_build --include_ops_by_config
required_operators.config``, the file ``python -m onnxruntime.tools.convert_onnx_models_to_ort``
writes beside its conversions) for every given ``.ort`` file (``bnc-export --format ort``): one
line per domain and opset listing the operators, e.g. ``ai.onnx;17;Add,ArgMax,Cast,...``.
``--types`` adds the element types each operator's kernels must support (type reduction,
``--enable_reduced_operator_type_support``; default name ``required_operators_and_types.config``).
The text is written by onnxruntime's own ``create_config_from_models``
(:func:`bnc_deploy.formats.ort.required_operators_config`), then published atomically
(:mod:`bnc_deploy.fileio`). Default output: beside the first file, under onnxruntime's file name.

Each file's integrity digest is checked first (``--key`` for signed files), so the config
describes the files ``bnc-export`` verified. Exit status 0; 2 with one line for a missing,
modified or non-ORT file or an output that cannot be written; 130 after ^C (nothing written).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bnc_deploy.cli.common import cli_main
from bnc_deploy.errors import RuntimeLoadError
from bnc_deploy.fileio import atomic_write_bytes, check_output_path
from bnc_deploy.formats import integrity
from bnc_deploy.formats.ort import CONFIG_NAME, TYPED_CONFIG_NAME, is_ort, required_operators_config

PROG = "bnc-ort-config"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Write the reduced-operator config (required_operators.config) that a minimal ONNX Runtime "
        "build needs to run the given .ort exports.",
        epilog="Example:\n  bnc-export nb3.bnc --format ort -o nb3.ort\n  bnc-ort-config nb3.ort -o "
        "required_operators.config",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="+", metavar="FILE.ort", help="ORT format exports (bnc-export --format ort)")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help=f"file to write (default: {CONFIG_NAME}, or {TYPED_CONFIG_NAME} with --types, beside the first file)",
    )
    p.add_argument(
        "--types",
        action="store_true",
        help="include the element types each operator needs (for --enable_reduced_operator_type_support builds)",
    )
    p.add_argument("--key", metavar="FILE", help="key file of exports signed with bnc-export --sign-key")
    p.add_argument(
        "--no-integrity-check",
        action="store_true",
        help="use files even if their integrity digest does not match (modified after export)",
    )
    return p


@cli_main(PROG)
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    files = [Path(f) for f in args.files]
    key = integrity.read_key(args.key) if args.key else None
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(f"{f}: no such file")
        data = f.read_bytes()
        if not is_ort(data):
            raise RuntimeLoadError(
                f"{f}: not an ORT format model (missing the ORTM identifier; export one with bnc-export --format ort)"
            )
        if not args.no_integrity_check:
            integrity.verify_bytes(data, key=key, where=str(f))
    name = TYPED_CONFIG_NAME if args.types else CONFIG_NAME
    output = check_output_path(args.output or files[0].parent / name, inputs=tuple(files))
    text = required_operators_config(files, type_reduction=args.types)
    published = atomic_write_bytes(output, text.encode("utf-8"))
    print(f"{PROG}: wrote {published.path} ({len(files)} model{'s' if len(files) != 1 else ''})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
