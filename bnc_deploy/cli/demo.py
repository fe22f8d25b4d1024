"""``bnc-demo``: the main job on the built-in digits data, end to end.

Trains naive Bayes and Chow-Liu TAN classifiers on scikit-learn's 8x8 digits (float and few-bit),
writes their model files to ``out/``, re-loads each file and checks that the NumPy reference
predictor reproduces the trained model, then prints one table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

#: (name, bnc-train flags) of the models the demo trains.
DEMO_MODELS = [
    ("nb-ml-float", ["--model", "nb", "--init", "ml", "--epochs", "0"]),
    ("nb-3bit", ["--model", "nb", "--init", "ml", "--bits", "3", "--epochs", "30", "--lr", "3e-2"]),
    ("tan-ml-float", ["--model", "tan", "--init", "ml", "--epochs", "0"]),
    ("tan-3bit", ["--model", "tan", "--init", "ml", "--bits", "3", "--epochs", "30", "--lr", "3e-2"]),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bnc-demo", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="out", help="folder for the model files (default: out/)")
    parser.add_argument("--data", default="digits", help="dataset (default: the built-in digits)")
    args = parser.parse_args(argv)

    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.cli import train as train_cli
    from bnc_deploy.cli.common import user_errors
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.reference import ReferencePredictor

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with user_errors("bnc-demo"):
        test = load_dataset(args.data)
        for name, flags in DEMO_MODELS:
            path = out / f"{args.data}-{name}.bnc"
            print(f"training {name} ...", flush=True)
            result = train_cli.run(train_cli.build_parser().parse_args(
                ["--data", args.data, "--quiet", "-o", str(path), *flags]))
            reference = ReferencePredictor(load_artifact(path))  # the file, not the in-memory model
            file_error = float((reference.predict(test.x_test) != test.y_test).mean())
            rows.append((name, result, file_error, path.stat().st_size))
    print()
    print(f"{'model':<14}{'bits':>6}{'params':>9}{'size bits':>11}{'ops':>7}{'test err %':>12}"
          f"{'from file %':>13}{'bytes':>8}")
    for name, r, file_error, size in rows:
        bits = "f32" if r["bits"] is None else str(r["bits"])
        print(f"{name:<14}{bits:>6}{r['n_parameters']:>9,}{r['size_bits']:>11,}{r['n_ops']:>7,}"
              f"{100 * r['test_error']:>12.2f}{100 * file_error:>13.2f}{size:>8,}")
    print(f"\nmodel files in {out}/ ; next: bnc-train --help")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
