"""``bnc-export``: write a model artifact as ONNX or TFLite, then verify the file against the artifact.

Usage::

    bnc-export MODEL --format {onnx,tflite} [--lowering {gather,onehot-fc}] [--raw-inputs]
               -o OUT [--data PATH_OR_NAME [--fold K]] [--opset N] [--pack-bits]
               [--onehot {equal-cast,relu}] [--output-layer {int8,float32}] [--json]

After writing ``OUT`` the file is run in its runtime (onnxruntime / LiteRT, one thread) on the
verification rows — the TEST split of ``--data``, else the check set stored in the artifact —
and compared with the artifact's NumPy reference predictor. A raw-input export is fed the raw
value on the upper edge of each row's bins (``exporters.common.raw_representatives``), and the
reference codes are what the artifact's discretizer makes of those values: datasets carry codes,
not the raw values behind them.

Exit status: 0 on success; 1 when a lowering that is exact by design (quantized ``gather``; see
the file's ``exact`` metadata) disagrees with the artifact on any row's label or log_joint;
2 on bad input (missing/corrupt model, bad data spec or data out of the model's range,
unsupported option), with a one-line message and no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from bnc_deploy.cli.common import EXIT_USAGE
from bnc_deploy.formats.bnc import LOWERINGS, is_exact_lowering, raw_representatives
from bnc_deploy.errors import ExportError

FORMATS = ("onnx", "tflite")
#: Runtime used to verify each format.
VERIFY_RUNTIME = {"onnx": "onnxruntime", "tflite": "litert"}


class CLIError(Exception):
    """Bad input: reported as ``bnc-export: error: ...`` with exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bnc-export",
        description="Export a bnc-deploy model (.bnc) to ONNX or TFLite and verify the file against the model.")
    p.add_argument("model", metavar="MODEL", help="model file written by bnc-train (.bnc)")
    p.add_argument("--format", required=True, choices=FORMATS, help="output format")
    p.add_argument("--lowering", default="gather", choices=LOWERINGS,
                   help="table lookup as an integer gather (default, exact) or one-hot times table (FC layer)")
    p.add_argument("--raw-inputs", action="store_true",
                   help="embed the model's discretizer: the file takes raw float32 feature values")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="file to write")
    p.add_argument("--data", metavar="PATH_OR_NAME",
                   help="verify on this dataset's test split (a name such as 'letter' or a file); "
                        "default: the check set stored in the model")
    p.add_argument("--fold", type=int, default=None, metavar="K", help="1-based fold of --data (default 1)")
    p.add_argument("--opset", type=int, default=None, help="ONNX opset (default: the exporter's)")
    p.add_argument("--onehot", choices=("equal-cast", "relu"), default="equal-cast",
                   help="TFLite onehot-fc lowering: build the one-hot with EQUAL+CAST (default) or from int8 "
                        "ops the Edge TPU maps (FC+ReLU, MINIMUM, SUB, MUL; cardinalities <= 128, codes input)")
    p.add_argument("--pack-bits", action="store_true",
                   help="ONNX, quantized models: store the B-bit codes (BN tables, DNN weights) as bit-planes "
                        "instead of one byte each")
    p.add_argument("--output-layer", choices=("int8", "float32"), default=None,
                   help="TFLite, ReLU DNNs: the output layer in int8 (default, full-integer) or float32 "
                        "(int8 logits can merge near-ties; float32 keeps them apart)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.fold is not None and args.data is None:
        parser.error("--fold needs --data")
    if args.format != "onnx" and (args.opset is not None or args.pack_bits):
        parser.error("--opset and --pack-bits apply to --format onnx only")
    if args.onehot != "equal-cast" and not (args.format == "tflite" and args.lowering == "onehot-fc"):
        parser.error("--onehot applies to --format tflite --lowering onehot-fc only")
    if args.output_layer is not None and args.format != "tflite":
        parser.error("--output-layer applies to --format tflite only")
    try:
        report = run(args)
    except CLIError as exc:
        print(f"bnc-export: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(report, allow_nan=False))
    else:
        print(format_table(report))
    if report["exact_expected"] and report["exact"] is False:
        print(f"bnc-export: error: {report['output']} is not bit-exact with {report['model']} "
              f"({report['label_mismatches']} label mismatch(es), "
              f"{'logits' if report.get('model_kind') == 'dnn' else 'log_joint'} identical: "
              f"{report['log_joint_identical']})", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> dict:
    """Load, export, verify; return the report dict. Raises CLIError for bad input."""
    from bnc_deploy.artifacts import ArtifactError, load_artifact

    try:
        artifact = load_artifact(args.model)
    except ArtifactError as exc:
        raise CLIError(str(exc)) from None
    if args.output_layer is not None and not (artifact.kind == "dnn" and artifact.activation == "relu"):
        raise CLIError("--output-layer applies to ReLU DNN models only (sign networks always compute their "
                       "output layer exactly in float32; BN classifiers have none)")
    x, y, data_desc = verification_rows(artifact, args.data, args.fold)
    if artifact.kind == "dnn":
        return run_dnn(artifact, args, x, y, data_desc)
    output = export(artifact, args)
    report = {
        "model": str(args.model), "output": str(output), "format": args.format, "lowering": args.lowering,
        "raw_inputs": bool(args.raw_inputs), "file_bytes": output.stat().st_size,
        "n_parameters": artifact.n_parameters, "bits": artifact.bits_per_parameter,
        "size_bits": artifact.size_bits, "n_ops": artifact.n_ops, "runtime": VERIFY_RUNTIME[args.format],
        "data": data_desc,
    }
    report.update(verify(artifact, output, args, x, y))
    return report


def run_dnn(artifact, args: argparse.Namespace, x, y, data_desc: str) -> dict:
    """Export and verify a DNN artifact (FC/CNN): the same report keys as for BNs, plus the
    accuracy of the reference on the same rows and the change the export makes."""
    bn_only = [flag for flag, used in (("--lowering", args.lowering != "gather"), ("--raw-inputs", args.raw_inputs))
               if used]
    if bn_only:
        raise CLIError(f"{', '.join(bn_only)} {'applies' if len(bn_only) == 1 else 'apply'} to Bayesian network "
                       "classifiers only; DNN exports take feature codes and have one lowering per activation")
    with _export_errors(args.output):
        if args.format == "onnx":
            from bnc_deploy.exporters.onnx_dnn import DEFAULT_OPSET, export_onnx_dnn

            facts = export_onnx_dnn(artifact, args.output, opset=DEFAULT_OPSET if args.opset is None else args.opset,
                                    pack_bits=args.pack_bits)
        else:
            export_tflite_dnn = _tflite_exporter("tflite_dnn", "export_tflite_dnn")
            representative = _representative_rows(artifact, args)
            facts = export_tflite_dnn(artifact, args.output, representative=representative,
                                      output_layer=args.output_layer or "int8")
    output = Path(args.output)
    meta = facts.get("metadata", {}) if isinstance(facts, dict) else {}
    report = {
        "model": str(args.model), "output": str(output), "format": args.format,
        "lowering": meta.get("lowering"), "raw_inputs": False, "file_bytes": output.stat().st_size,
        "model_kind": "dnn", "architecture": artifact.architecture, "activation": artifact.activation,
        "hidden_widths": artifact.hidden_widths, "weight_bits": artifact.weight_bits,
        "n_parameters": artifact.n_parameters, "bits": artifact.weight_bits,
        "size_bits": artifact.size_bits, "n_ops": artifact.n_ops, "runtime": VERIFY_RUNTIME[args.format],
        "data": data_desc,
    }
    report.update(verify_dnn(artifact, output, args, x, y))
    return report


def _representative_rows(artifact, args: argparse.Namespace):
    """Rows for TFLite full-integer calibration (ReLU nets): the --data training split, else the
    model's check set (None lets the exporter use the check set)."""
    if args.data is None or artifact.activation != "relu":
        return None
    from bnc_deploy.datasets import load_dataset

    ds = load_dataset(args.data, fold=1 if args.fold is None else args.fold)
    rng = np.random.default_rng(0)
    rows = rng.permutation(ds.x_train.shape[0])[:1000]
    return ds.x_train[np.sort(rows)]


def verify_dnn(artifact, output: Path, args: argparse.Namespace, x, y) -> dict:
    """Run a DNN export in its runtime on ``x``; compare labels and logits with the reference."""
    from bnc_deploy.reference.dnn import DNNReferencePredictor

    rt = _open_runtime(output, args.format)
    result = {"n_rows": 0, "agreement": None, "exact": None, "exact_expected": bool(rt.metadata.get("exact")),
              "label_mismatches": None, "log_joint_identical": None, "max_abs_log_joint_diff": None,
              "logits_identical": None, "max_abs_logit_diff": None, "accuracy": None,
              "reference_accuracy": None, "accuracy_change": None, "n_nodes": rt.metadata.get("n_nodes")}
    if x is None:
        return result
    ref_logits = DNNReferencePredictor(artifact).logits(x)
    ref_label = np.argmax(ref_logits, axis=1)
    logits, label = rt.run(x)
    mismatches = int(np.count_nonzero(label != ref_label))
    identical = bool(np.array_equal(logits, ref_logits))
    n = int(x.shape[0])
    diff = float(np.max(np.abs(logits - ref_logits))) if n else 0.0
    accuracy = float(np.mean(label == y)) if n else None
    ref_accuracy = float(np.mean(ref_label == y)) if n else None
    result.update(
        n_rows=n, agreement=1.0 - mismatches / n if n else 1.0, label_mismatches=mismatches,
        log_joint_identical=identical, logits_identical=identical, exact=mismatches == 0 and identical,
        max_abs_log_joint_diff=diff, max_abs_logit_diff=diff, accuracy=accuracy, reference_accuracy=ref_accuracy,
        accuracy_change=None if accuracy is None else accuracy - ref_accuracy)
    return result


def verification_rows(artifact, spec: str | None, fold: int | None) -> tuple[np.ndarray | None, np.ndarray | None, str]:
    """``(x codes (n, D) int64, y (n,), description)`` to verify on; x is None when there are none."""
    from bnc_deploy.validation import InputError, check_codes

    if spec is None:
        if artifact.check_x is None:
            return None, None, "none (the model stores no check set; pass --data)"
        x, y, desc = artifact.check_x, artifact.check_y, "check set stored in the model"
    else:
        from bnc_deploy.datasets import DatasetError, load_dataset

        try:
            ds = load_dataset(spec, fold=1 if fold is None else fold)
        except (DatasetError, OSError, ValueError) as exc:
            raise CLIError(f"--data {spec}: {exc}") from None
        x, y, desc = ds.x_test, ds.y_test, f"{ds.name} test split, fold {ds.fold}"
    try:
        x = check_codes(x, artifact.cardinalities, artifact.feature_names, where=f"--data {spec}" if spec else desc)
    except InputError as exc:
        raise CLIError(f"{exc} (does the data match the model's {artifact.n_features} features?)") from None
    return x, np.asarray(y), desc


def export(artifact, args: argparse.Namespace) -> Path:
    """Write the file with the chosen exporter; return its path. Raises CLIError."""
    with _export_errors(args.output):
        if args.format == "onnx":
            from bnc_deploy.exporters.onnx_bnc import DEFAULT_OPSET, export_onnx

            opset = DEFAULT_OPSET if args.opset is None else args.opset
            return Path(export_onnx(artifact, args.output, raw_inputs=args.raw_inputs,
                                    lowering=args.lowering, opset=opset, pack_bits=args.pack_bits))
        export_tflite = _tflite_exporter("tflite_bnc", "export_tflite")
        return Path(export_tflite(artifact, args.output, lowering=args.lowering, raw_inputs=args.raw_inputs,
                                  onehot=args.onehot))


@contextmanager
def _export_errors(output):
    """An exporter's refusal or a write failure becomes a one-line CLIError."""
    try:
        yield
    except ExportError as exc:
        raise CLIError(str(exc)) from None
    except OSError as exc:
        raise CLIError(f"cannot write {output}: {exc}") from None


def _tflite_exporter(module: str, function: str):
    """``bnc_deploy.exporters.<module>.<function>``; CLIError saying what to install if TensorFlow is missing."""
    import importlib

    try:
        return getattr(importlib.import_module(f"bnc_deploy.exporters.{module}"), function)
    except ImportError as exc:
        hint = ("this bnc-deploy has no TFLite exporter" if (exc.name or "").startswith("bnc_deploy")
                else "install the export extras: pip install 'bnc-deploy[export]'")
        raise CLIError(f"TFLite export is not available ({exc}); {hint}") from None


def _open_runtime(output: Path, fmt: str):
    """The runtime adapter that verifies ``output`` (1 thread); CLIError if it cannot load it."""
    from bnc_deploy.runtimes.base import RuntimeLoadError, load_runtime

    try:
        return load_runtime(output, VERIFY_RUNTIME[fmt], threads=1)
    except ImportError as exc:
        raise CLIError(f"wrote {output} but cannot verify it: {exc}") from None
    except RuntimeLoadError as exc:
        raise CLIError(f"wrote {output} but its runtime cannot load it: {exc}") from None


def verify(artifact, output: Path, args: argparse.Namespace, x, y) -> dict:
    """Run ``output`` in its runtime on ``x`` and compare with the reference predictor."""
    from bnc_deploy.reference.bnc import ReferencePredictor
    from bnc_deploy.validation import InputError

    rt = _open_runtime(output, args.format)
    expected_exact = bool(rt.metadata.get("exact", is_exact_lowering(artifact, args.lowering)))
    result = {"n_rows": 0, "agreement": None, "exact": None, "exact_expected": expected_exact,
              "label_mismatches": None, "log_joint_identical": None, "max_abs_log_joint_diff": None,
              "accuracy": None, "n_nodes": rt.metadata.get("n_nodes")}
    if x is None:
        return result
    reference = ReferencePredictor(artifact)
    if args.raw_inputs:
        fed = raw_representatives(artifact, x)
        codes = reference.discretize(fed.astype(np.float64))
    else:
        fed = codes = x
    ref_lj = reference.log_joint(codes)
    ref_label = np.argmax(ref_lj, axis=1)
    try:
        lj, label = rt.run(fed)
    except InputError as exc:  # e.g. a raw representative beyond float32 range: the data, not the file
        raise CLIError(f"cannot verify {output}: {exc}") from None
    mismatches = int(np.count_nonzero(label != ref_label))
    identical = bool(np.array_equal(lj, ref_lj))
    n = int(x.shape[0])
    result.update(
        n_rows=n, agreement=1.0 - mismatches / n if n else 1.0, label_mismatches=mismatches,
        log_joint_identical=identical, exact=mismatches == 0 and identical,
        max_abs_log_joint_diff=float(np.max(np.abs(lj - ref_lj))) if n else 0.0,
        accuracy=float(np.mean(label == y)) if n else None)
    return result


def format_table(r: dict) -> str:
    """A short human-readable summary of the report."""
    if r.get("model_kind") == "dnn":
        return format_dnn_table(r)
    inputs = "raw float32 inputs" if r["raw_inputs"] else "integer code inputs"
    nodes = f" ({r['n_nodes']} graph nodes)" if r.get("n_nodes") is not None else ""
    lines = [
        f"bnc-export: wrote {r['output']} ({r['format']}, {r['lowering']}, {inputs})",
        f"  {'file size':<18}{r['file_bytes']:,} bytes",
        f"  {'parameters':<18}{r['n_parameters']:,} x {r['bits']} bits = {r['size_bits']:,} bits "
        f"({r['size_bits'] / 8:,.0f} bytes)",
        f"  {'operations':<18}{r['n_ops']:,} additions per row{nodes}",
        f"  {'verified on':<18}{r['n_rows']:,} rows: {r['data']} ({r['runtime']}, 1 thread)",
    ]
    if r["n_rows"]:
        lines += [
            f"  {'label agreement':<18}{100 * r['agreement']:.2f}% ({r['label_mismatches']} mismatch(es))",
            f"  {'log_joint':<18}" + ("bit-identical" if r["log_joint_identical"]
                                      else f"max |diff| {r['max_abs_log_joint_diff']:.3g}"),
            f"  {'test accuracy':<18}{100 * r['accuracy']:.2f}%",
        ]
    status = ("EXACT" if r["exact"] else "NOT EXACT (expected exact)" if r["exact_expected"]
              else "labels only (lowering not exact by design)") if r["n_rows"] else "not verified"
    lines.append(f"  {'result':<18}{status}")
    return "\n".join(lines)


def format_dnn_table(r: dict) -> str:
    widths = ",".join(map(str, r["hidden_widths"]))
    lines = [
        f"bnc-export: wrote {r['output']} ({r['format']}, {r['lowering']}, integer code inputs)",
        f"  {'model':<18}{r['architecture'].upper()} {widths}, {r['weight_bits']}-bit weights, {r['activation']}",
        f"  {'file size':<18}{r['file_bytes']:,} bytes",
        f"  {'size':<18}{r['size_bits']:,} bits ({r['n_parameters']:,} weights x {r['weight_bits']} bits + "
        "batch norm + biases)",
        f"  {'operations':<18}{r['n_ops']:,} per row (MACs + batch-norm outputs + biases)",
        f"  {'verified on':<18}{r['n_rows']:,} rows: {r['data']} ({r['runtime']}, 1 thread)",
    ]
    if r["n_rows"]:
        lines += [
            f"  {'label agreement':<18}{100 * r['agreement']:.2f}% ({r['label_mismatches']} mismatch(es))",
            f"  {'logits':<18}" + ("bit-identical" if r["logits_identical"]
                                   else f"max |diff| {r['max_abs_logit_diff']:.3g}"),
            f"  {'test accuracy':<18}{100 * r['accuracy']:.2f}% (reference {100 * r['reference_accuracy']:.2f}%, "
            f"change {100 * r['accuracy_change']:+.2f} points)",
        ]
    status = ("EXACT" if r["exact"] else "NOT EXACT (expected exact)" if r["exact_expected"]
              else "labels only (not exact by design)") if r["n_rows"] else "not verified"
    lines.append(f"  {'result':<18}{status}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
