"""``bnc-demo``: the main job on the built-in digits data, end to end.

Trains naive Bayes and Chow-Liu TAN classifiers on scikit-learn's 8x8 digits (float and few-bit)
and two quantized DNN baselines (a 2-bit sign FC net and a 2-bit ReLU CNN), and writes their
model files to ``out/``; exports each one to ONNX and TFLite; runs the exported files in
onnxruntime and LiteRT on every test row, compares them with the NumPy reference predictor of
the model file, and prints one table.

``--data`` takes any dataset ``bnc-train`` reads; the CNN is trained only on image data (a dataset
with a known image layout), and skipped with a note for the others. Exit status 0; 2 with a
one-line message for a bad ``--data`` or ``--out``; 130 after ^C (the files finished so far stay).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bnc_deploy.artifacts.encoding import IMAGE_LAYOUTS
from bnc_deploy.cli.common import cli_main
from bnc_deploy.errors import OutputError, require_extra

#: (name, bnc-train flags) of the models the demo trains.
DEMO_MODELS = [
    ("nb-ml-float", ["--model", "nb", "--init", "ml", "--epochs", "0"]),
    ("nb-3bit", ["--model", "nb", "--init", "ml", "--bits", "3", "--epochs", "30", "--lr", "3e-2"]),
    ("tan-ml-float", ["--model", "tan", "--init", "ml", "--epochs", "0"]),
    ("tan-3bit", ["--model", "tan", "--init", "ml", "--bits", "3", "--epochs", "30", "--lr", "3e-2"]),
    (
        "fc-sign-2bit",
        [
            "--model",
            "fc",
            "--activation",
            "sign",
            "--batch-norm",
            "--weight-bits",
            "2",
            "--hidden",
            "32",
            "--epochs",
            "20",
            "--lr",
            "3e-2",
        ],
    ),
    (
        "cnn-relu-2bit",
        [
            "--model",
            "cnn",
            "--layers",
            "1",
            "--batch-norm",
            "--weight-bits",
            "2",
            "--hidden",
            "8",
            "--epochs",
            "10",
            "--lr",
            "3e-2",
        ],
    ),
]


PROG = "bnc-demo"
#: After ^C: the models finished so far are complete files in OUT (each written atomically).
INTERRUPTED = "interrupted; the files finished so far stay in the output folder"


@cli_main(PROG, interrupted=INTERRUPTED)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="out", help="folder for the model and exported files (default: out/)")
    parser.add_argument(
        "--data",
        default="digits",
        help="dataset (default: the built-in digits); the CNN is trained only on image data "
        f"({', '.join(sorted(IMAGE_LAYOUTS))})",
    )
    args = parser.parse_args(argv)

    require_extra(PROG, "all", "torch", "tqdm", "tensorflow")  # trains (torch), exports TFLite (TensorFlow)
    from bnc_deploy.datasets import load_dataset

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} is a file; give a folder")
    dataset = load_dataset(args.data)  # a bad --data fails now, before any model is trained
    models = demo_models(dataset.name)
    for name in sorted(set(dict(DEMO_MODELS)) - set(dict(models))):
        print(
            f"{name}: skipped ({dataset.name} is not an image dataset; the CNN needs one of "
            f"{', '.join(sorted(IMAGE_LAYOUTS))})",
            file=sys.stderr,
            flush=True,
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create --out {out}: {exc.strerror or exc}") from None
    rows = [demo_model(name, flags, args.data, out) for name, flags in models]
    print()
    print(format_table(rows))
    if len(models) < len(DEMO_MODELS):
        print(f"(cnn skipped: {dataset.name} is not an image dataset)")
    print(f"\nfiles in {out}/ ; next: bnc-train --help, bnc-export --help")
    return 0


def demo_models(dataset_name: str) -> list[tuple[str, list[str]]]:
    """The demo's models for a dataset: all of :data:`DEMO_MODELS`, less the CNN for non-image data."""
    return [
        (name, flags)
        for name, flags in DEMO_MODELS
        if "cnn" not in flags[flags.index("--model") + 1] or dataset_name in IMAGE_LAYOUTS
    ]


def demo_model(name: str, flags: list[str], data: str, out: Path) -> dict:
    """Train one model, export it to ONNX and TFLite, run both; return one table row."""
    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.cli import train as train_cli
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.exporters.base import exporter_for
    from bnc_deploy.reference import reference_predictor
    from bnc_deploy.runtimes.base import load_runtime
    from bnc_deploy.verify import export_path

    stem = out / f"{data}-{name}"
    print(f"{name}: training ...", flush=True)
    trained = train_cli.run(
        train_cli.build_parser().parse_args(["--data", data, "--quiet", "-o", f"{stem}.bnc", *flags])
    )
    artifact = load_artifact(f"{stem}.bnc")  # everything below starts from the file
    test = load_dataset(data)
    reference = reference_predictor(artifact)
    ref_labels, ref_scores = reference.predict(test.x_test), reference.log_joint(test.x_test)
    row = {
        "name": name,
        "bits": trained["bits"],
        "size_bits": artifact.size_bits,
        "n_ops": artifact.n_ops,
        "test_error": float(np.mean(ref_labels != test.y_test)),
        "kind": artifact.kind,
        "exact_expected": artifact.is_quantized if artifact.kind == "bnc" else artifact.activation == "sign",
    }
    for fmt in ("onnx", "tflite"):
        runtime = exporter_for(artifact.kind, fmt).runtime
        print(f"{name}: exporting {fmt} and running it in {runtime} ...", flush=True)
        path = export_path(artifact, f"{stem}.{fmt}", fmt)  # verified against the model before it is published
        adapter = load_runtime(path, runtime=runtime, threads=1)
        scores, labels = adapter.run(test.x_test)
        row[f"{fmt}_bytes"] = path.stat().st_size
        row[f"{fmt}_agreement"] = float(np.mean(labels == ref_labels))
        row[f"{fmt}_exact"] = bool(row["exact_expected"] and np.array_equal(scores, ref_scores))
    return row


def format_table(rows: list[dict]) -> str:
    header = (
        f"{'model':<14}{'bits':>5}{'size bits':>11}{'ops':>7}{'test err %':>11}"
        f"{'onnx bytes':>12}{'tflite bytes':>14}{'agree onnx':>12}{'agree tflite':>14}  scores"
    )
    lines = [header]
    for r in rows:
        bits = "f32" if r["bits"] is None else str(r["bits"])
        if r["onnx_exact"] and r["tflite_exact"]:
            exact = "bit-exact"
        elif r["exact_expected"]:
            exact = "NOT EXACT"
        else:
            exact = "float / int8 (labels compared)" if r["kind"] == "dnn" else "float"
        lines.append(
            f"{r['name']:<14}{bits:>5}{r['size_bits']:>11,}{r['n_ops']:>7,}{100 * r['test_error']:>11.2f}"
            f"{r['onnx_bytes']:>12,}{r['tflite_bytes']:>14,}{100 * r['onnx_agreement']:>11.2f}%"
            f"{100 * r['tflite_agreement']:>13.2f}%  {exact}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
