"""Fayyad–Irani discretization of the paper's raw datasets: time and average values per feature.

Usage::

    python benchmarks/discretization_report.py [--data-dir DIR] [--seed 0]

For letter-raw, satimage-raw (fold 1), usps-raw and mnist it splits the raw data with the paper's
protocol, times the discretizer (fit on the training part, transform of train and test) and prints
the average number of values per feature beside the paper's figure and, where the authors
published their discretized file, that file's average.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
from bnc_deploy.datasets import DatasetError, find_data_dir, load_dataset, loaders, splits  # noqa: E402
from bnc_deploy.datasets.discretize import FayyadIraniDiscretizer

#: name -> (raw reader, files under the data dir, protocol, paper's average, published npz name)
CASES = {
    "letter-raw": (loaders.read_letter, ["raw/letter/letter-recognition.data"], splits.HOLDOUT_PROTOCOL, 9.1, "letter"),
    "satimage-raw": (
        loaders.read_satimage,
        ["raw/satimage/sat.trn", "raw/satimage/sat.tst"],
        splits.CV_PROTOCOL,
        11.5,
        "satimage",
    ),
    "usps-raw": (loaders.read_usps_mat, ["raw/usps/usps_all.mat"], splits.HOLDOUT_PROTOCOL, 3.4, "usps"),
    "mnist": (loaders.read_mnist_bicubic, ["raw/mnist/mnist.npz"], splits.TRAIN_TEST_PROTOCOL, 13.2, None),
    "mnist-mean2x2": (loaders.read_mnist_npz, ["raw/mnist/mnist.npz"], splits.HOLDOUT_PROTOCOL, 13.2, None),
}


def _published_average(name: str | None, data_dir) -> str:
    """Average values per feature of the authors' discretized file (fold 1), or '-'."""
    if name is None:
        return "-"
    try:
        return f"{load_dataset(name, data_dir=data_dir).cardinalities.mean():.2f}"
    except DatasetError:
        return "-"


def report_row(name: str, data_dir, seed: int) -> str:
    read, files, protocol, paper, published = CASES[name]
    start = time.perf_counter()
    raw = read(*(data_dir / f for f in files))
    load_s = time.perf_counter() - start
    train, test = splits.split_indices(
        raw.x.shape[0], protocol, fold=1, seed=seed, n_train=getattr(raw, "n_train", None)
    )
    start = time.perf_counter()
    model = FayyadIraniDiscretizer().fit(raw.x[train], raw.y[train])
    model.transform(raw.x[train])
    model.transform(raw.x[test])
    disc_s = time.perf_counter() - start
    n_values = model.n_values_
    return (
        f"{name:<13} {len(train):>6}x{raw.x.shape[1]:<4} {load_s:>7.2f} {disc_s:>9.2f} "
        f"{n_values.mean():>8.2f} {int(n_values.min()):>4}-{int(n_values.max()):<3} "
        f"{paper:>6.1f} {_published_average(published, data_dir):>10}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="folder with raw/ and discretized/ (default: find_data_dir)")
    parser.add_argument("--seed", type=int, default=0, help="split seed")
    args = parser.parse_args()
    data_dir = find_data_dir(args.data_dir)
    print(f"data: {data_dir}   split seed: {args.seed}   numpy {np.__version__}")
    print(
        f"{'dataset':<13} {'train':>11} {'load s':>7} {'discret s':>9} {'avg vals':>8} {'range':>8} "
        f"{'paper':>6} {'published':>10}"
    )
    for name in CASES:
        print(report_row(name, data_dir, args.seed), flush=True)


if __name__ == "__main__":
    main()
