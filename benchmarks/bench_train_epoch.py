"""Seconds per training epoch of letter naive Bayes (hybrid loss, batch 100), side by side with a baseline.

The baseline is the same model written the way the paper's reference implementation is
structured: one parameter tensor per feature and a Python loop over features in the forward
pass (gather + add per feature). Both run in this process, on the same data, with the same loss,
optimizer and batch order, so the ratio is meaningful on any machine.

Target (issue): <= 0.1 s per epoch on 2 cores (the reference implementation takes 0.15 s).

    python benchmarks/bench_train_epoch.py [--epochs 10] [--threads N] [--data letter]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
from torch import nn

from bnc_deploy.datasets import load_dataset
from bnc_deploy.models.bnc import BayesNetClassifier
from bnc_deploy.models.ste import fixed_point_ste
from bnc_deploy.quantizers import FixedPointLogQuantizer
from bnc_deploy.train.bnc import make_optimizer, train_epoch
from bnc_deploy.train.losses import HybridLoss


class PerFeatureLoopNB(nn.Module):
    """Baseline: a list of per-feature tables and a Python loop in forward (reference-code style)."""

    def __init__(self, cardinalities, n_classes, quantizer=None):
        super().__init__()
        self.quantizer = quantizer
        self.class_rho = nn.Parameter(torch.rand(n_classes) * 0.2 - 0.1)
        self.tables = nn.ParameterList([nn.Parameter(torch.rand(int(k), n_classes) * 0.2 - 0.1) for k in cardinalities])

    def forward(self, x):
        out = torch.log_softmax(self.class_rho, dim=0)
        if self.quantizer:
            out = fixed_point_ste(out, self.quantizer)
        for i, rho in enumerate(self.tables):
            theta = torch.log_softmax(rho, dim=0)
            if self.quantizer:
                theta = fixed_point_ste(theta, self.quantizer)
            out = out + theta[x[:, i]]
        return out


def time_epochs(model, indices, labels, epochs, batch_size=100, seed=0):
    loss_fn = HybridLoss(18.70, 0.1277, 10.0)
    optimizer = make_optimizer(model)
    generator = torch.Generator().manual_seed(seed)
    train_epoch(
        model, optimizer, loss_fn, indices, labels, torch.randperm(len(labels), generator=generator), batch_size
    )  # warm-up
    seconds, cpu_seconds = [], []
    for _ in range(epochs):
        order = torch.randperm(len(labels), generator=generator)
        tick, cpu_tick = time.perf_counter(), time.process_time()
        train_epoch(model, optimizer, loss_fn, indices, labels, order, batch_size)
        seconds.append(time.perf_counter() - tick)
        cpu_seconds.append(time.process_time() - cpu_tick)
    return seconds, cpu_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="letter")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, = cores)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    ds = load_dataset(args.data)
    labels = torch.as_tensor(ds.y_train)
    print(
        f"{args.data}: {ds.x_train.shape[0]} training rows, {ds.n_features} features, {ds.n_classes} classes, "
        f"batch 100; torch {torch.__version__}, {torch.get_num_threads()} thread(s); median of {args.epochs} epochs; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    # CPU seconds are reported too: on a shared machine they move less than wall time (with one
    # thread they are the work done; with more they add up the threads' time).
    print(f"{'model':<38}{'bits':>6}{'s/epoch':>10}{'min':>9}{'cpu s':>9}{'vs baseline':>13}")
    for quantizer in (None, FixedPointLogQuantizer(3, 2)):
        torch.manual_seed(0)
        ours = BayesNetClassifier(ds.cardinalities, ds.n_classes, quantizer=quantizer)
        ours_s = time_epochs(ours, ours.flat_indices(ds.x_train), labels, args.epochs)
        torch.manual_seed(0)
        base = PerFeatureLoopNB(ds.cardinalities, ds.n_classes, quantizer=quantizer)
        base_s = time_epochs(base, torch.as_tensor(ds.x_train), labels, args.epochs)
        bits = "float" if quantizer is None else str(quantizer.total_bits)
        for name, (s, cpu) in (
            ("bnc-deploy (stacked table, 1 gather)", ours_s),
            ("baseline (loop over features)", base_s),
        ):
            ratio = statistics.median(base_s[0]) / statistics.median(s)
            print(
                f"{name:<38}{bits:>6}{statistics.median(s):>10.4f}{min(s):>9.4f}{statistics.median(cpu):>9.4f}"
                f"{ratio:>12.2f}x"
            )
    print("target: <= 0.1 s/epoch on 2 cores (the paper's reference implementation: 0.15 s)")


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
