"""Does rounding the standardized DNN inputs to a power-of-two grid move the error? (issue 18)

Our DNNs see each discrete feature as its standardized code ``(code - mean) / std`` (training
mean/std) *rounded* to the grid ``2**-e`` with integer codes clipped to +-63
(:func:`bnc_deploy.artifacts.encoding.fit_standardized_table`), so the first layer sums exact
integers in every runtime. The paper's authors fed the float standardized values. This script
trains the same FC nets twice on the same data, with the same seeds (initialization, batch order,
stochastic sign) and the same everything else:

* ``rounded``: the library's normal ``train_dnn`` path;
* ``float``: the authors' encoding, ``(code - mean) / std`` in float32, no rounding, no clipping;
* (optional, ``--encodings``) ``float-clipped``: float values clipped to the grid's range
  ``+-63 * 2**-e`` but not rounded, to tell the rounding's effect from the clip's.

and prints the test error side by side (the eval-mode torch net on its own inputs; for
``float`` also the error of the saved artifact, which always predicts from the rounded table),
the mean difference and its spread across seeds. It first reports, per feature, how many
distinct input values each encoding gives, whether the rounding keeps a feature's codes
distinct (injective), how many table entries are clipped at +-63, and the largest rounding
error in standard deviations (overall and among unclipped entries: <= half a grid step).

The float variant does not change the library: inside :func:`authors_float_inputs` the module
global ``bnc_deploy.train.dnn.input_spec`` is swapped for one that returns a
:class:`FloatInputSpec` (same table, float ``encode``), and ``_check_reference_agrees`` for a
version that records the torch/artifact agreement without raising (the artifact's reference
predictor uses the rounded table, so a float-trained net legitimately disagrees on a few rows).
Both are restored on exit.

Defaults are the issue's settings: usps (the paper's discretized data), FC ``--layers 2``,
2-bit weights, batch norm, width matched to the 3-bit naive Bayes size
(``C * (1 + sum |X_i|) * 3`` bits), lr 3e-3 decaying to 3e-7, batch 100, relu and sign.

    python benchmarks/dnn_input_rounding.py --epochs 200 --seeds 0,1,2,3,4 --json rounding.json
    python benchmarks/dnn_input_rounding.py --epochs 200 --seeds 0,1,2,3,4 --activations sign \
        --encodings rounded,float-clipped
    python benchmarks/dnn_input_rounding.py --encodings-only       # the table statistics only
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import sys
import time

import numpy as np

# ----------------------------------------------------------------------------- encodings


def float_standardized(x_train: np.ndarray, cardinalities: np.ndarray) -> np.ndarray:
    """(D, K) float64: the authors' ``(code - mean) / std`` per feature and code (0 for std 0)."""
    x = np.asarray(x_train, dtype=np.float64)
    cards = np.asarray(cardinalities, dtype=np.int64)
    mean, std = x.mean(axis=0), x.std(axis=0)
    values = (np.arange(int(cards.max()))[None, :] - mean[:, None]) / np.where(std > 0, std, 1.0)[:, None]
    values[std == 0] = 0.0
    return values


def encoding_report(dataset) -> dict:
    """Distinct values per feature, injectivity and rounding error of the rounded table vs float."""
    from bnc_deploy.artifacts.encoding import INPUT_CODE_MAX, fit_standardized_table

    table = fit_standardized_table(dataset.x_train, dataset.cardinalities)
    scale = float(table["input_scale"])
    exact = float_standardized(dataset.x_train, dataset.cardinalities)
    observed = np.concatenate(
        [dataset.x_train, dataset.x_test] + ([dataset.x_val] if dataset.x_val is not None else [])
    )
    distinct_float, distinct_rounded, not_injective, not_injective_observed = [], [], [], []
    clipped_entries, clipped_collisions_only = 0, True
    max_err = max_err_unclipped = 0.0
    for i, k in enumerate(int(c) for c in dataset.cardinalities):
        codes = table["input_codes"][i, :k].astype(np.int64)
        f = exact[i, :k]
        n_float, n_round = len(np.unique(f)), len(np.unique(codes))
        distinct_float.append(n_float)
        distinct_rounded.append(n_round)
        err = np.abs(codes * scale - f)
        clipped = np.abs(codes) >= INPUT_CODE_MAX
        clipped_entries += int(clipped.sum())
        max_err = max(max_err, float(err.max()))
        if (~clipped).any():
            max_err_unclipped = max(max_err_unclipped, float(err[~clipped].max()))
        if n_round < n_float:
            not_injective.append(i)
            # Is every collision between clipped entries (i.e. the clip merged them, not the rounding)?
            if len(np.unique(codes[~clipped])) < len(np.unique(f[~clipped])):
                clipped_collisions_only = False
        seen = np.unique(observed[:, i])
        if len(np.unique(codes[seen])) < len(np.unique(f[seen])):
            not_injective_observed.append(i)
    rows = table["input_codes"][np.arange(dataset.n_features)[None, :], dataset.x_train]
    return {
        "dataset": dataset.name,
        "features": int(dataset.n_features),
        "constant_features": int((dataset.x_train.std(axis=0) == 0).sum()),
        "grid_step_std": scale,
        "grid_shift_e": round(float(-np.log2(scale))),
        "distinct_per_feature_float": distinct_float,
        "distinct_per_feature_rounded": distinct_rounded,
        "distinct_float_total": int(sum(distinct_float)),
        "distinct_rounded_total": int(sum(distinct_rounded)),
        "features_not_injective": not_injective,
        "features_not_injective_on_observed_codes": not_injective_observed,
        "collisions_only_between_clipped_entries": clipped_collisions_only,
        "table_entries_clipped": clipped_entries,
        "train_values_clipped_fraction": float(np.mean(np.abs(rows) >= INPUT_CODE_MAX)),
        "max_rounding_error_std": max_err,
        "max_rounding_error_unclipped_std": max_err_unclipped,
        "half_grid_step_std": scale / 2,
    }


def print_encoding_report(r: dict) -> None:
    def spread(values):
        return f"min {min(values)}, median {statistics.median(values):g}, max {max(values)}"

    print(
        f"{r['dataset']}: {r['features']} features ({r['constant_features']} constant), "
        f"grid 2^-{r['grid_shift_e']} = {r['grid_step_std']:g} std, integer codes within +-63"
    )
    print(
        f"  distinct input values per feature  float:   {spread(r['distinct_per_feature_float'])} "
        f"(total {r['distinct_float_total']})"
    )
    print(
        f"                                     rounded: {spread(r['distinct_per_feature_rounded'])} "
        f"(total {r['distinct_rounded_total']})"
    )
    inj = not r["features_not_injective"]
    print(
        f"  rounding injective per feature:    {'yes, every feature' if inj else 'NO'}"
        + (
            ""
            if inj
            else f" ({len(r['features_not_injective'])} features merge codes, "
            f"{len(r['features_not_injective_on_observed_codes'])} of them among codes that "
            f"occur in the data; merges only between clipped entries: "
            f"{r['collisions_only_between_clipped_entries']})"
        )
    )
    print(
        f"  table entries clipped at +-63:     {r['table_entries_clipped']} "
        f"({100 * r['train_values_clipped_fraction']:.3f} % of the training values)"
    )
    print(
        f"  largest rounding error:            {r['max_rounding_error_std']:.4f} std "
        f"(unclipped entries: {r['max_rounding_error_unclipped_std']:.4f} std, half a step = "
        f"{r['half_grid_step_std']:g})"
    )


# ----------------------------------------------------------------------------- float variant


def _float_spec_class():
    import torch

    from bnc_deploy.artifacts.encoding import pixel_index
    from bnc_deploy.train.dnn import InputSpec

    @dataclasses.dataclass
    class FloatInputSpec(InputSpec):
        """InputSpec whose ``encode`` gives the authors' float standardized values (no grid, no clip).

        Everything else (the rounded table the artifact stores, widths, channels) is inherited.
        """

        float_values: np.ndarray | None = None  # (D, K) float64 from float_standardized

        def encode(self, x: np.ndarray) -> torch.Tensor:
            x = np.asarray(x, dtype=np.int64)
            values = self.float_values[np.arange(x.shape[1])[None, :], x]  # (n, D)
            if self.architecture == "cnn":
                values = values[:, pixel_index(self.image_shape, self.pixel_order)][:, None, :, :]
            return torch.from_numpy(values.astype(np.float32))

    return FloatInputSpec


@contextlib.contextmanager
def authors_float_inputs(clip: bool = False):
    """While active, ``train_dnn`` feeds float ``(code - mean) / std`` instead of the rounded grid.

    ``clip=True`` (the ``float-clipped`` diagnostic) clips the float values to the grid's range
    ``+-63 * 2**-e`` like the library does, without rounding: it separates the effect of the
    rounding from that of the clip.

    Monkeypatches two module globals of ``bnc_deploy.train.dnn`` (looked up at call time by
    ``train_dnn``) and restores them on exit; the library itself is unchanged.
    """
    from bnc_deploy.artifacts.encoding import INPUT_CODE_MAX
    from bnc_deploy.train import dnn

    FloatInputSpec = _float_spec_class()
    original_spec, original_check = dnn.input_spec, dnn._check_reference_agrees

    def float_input_spec(dataset, config):
        spec = original_spec(dataset, config)
        if spec.encoding != "standardized":
            raise ValueError("the float variant applies to standardized inputs only (not --one-hot)")
        inherited = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
        values = float_standardized(dataset.x_train, dataset.cardinalities)
        if clip:
            bound = INPUT_CODE_MAX * spec.input_scale
            values = np.clip(values, -bound, bound)
        return FloatInputSpec(**inherited, float_values=values)

    def lenient_check(model, artifact, *args):
        # The artifact predicts from the rounded table; record the agreement, never raise.
        try:
            original_check(model, artifact, *args)
        except AssertionError:
            artifact.metadata["reference_check_below_99_percent"] = True

    dnn.input_spec, dnn._check_reference_agrees = float_input_spec, lenient_check
    try:
        yield
    finally:
        dnn.input_spec, dnn._check_reference_agrees = original_spec, original_check


# ----------------------------------------------------------------------------- experiment

#: What ``--encodings`` may name.
ENCODINGS = ("rounded", "float", "float-clipped")


def train_once(
    dataset,
    *,
    activation: str,
    seed: int,
    epochs: int,
    match_bits: int,
    layers: int,
    weight_bits: int,
    lr: float,
    encoding: str,
) -> dict:
    from bnc_deploy.train.dnn import DNNConfig, train_dnn

    config = DNNConfig(
        architecture="fc",
        layers=layers,
        weight_bits=weight_bits,
        activation=activation,
        batch_norm=True,
        match_bits=match_bits,
        epochs=epochs,
        lr=lr,
        seed=seed,
        progress=False,
    )
    tick = time.perf_counter()
    patch = {
        "rounded": contextlib.nullcontext(),
        "float": authors_float_inputs(),
        "float-clipped": authors_float_inputs(clip=True),
    }[encoding]
    with patch:
        result = train_dnn(dataset, config)
    meta = result.artifact.metadata
    return {
        "encoding": encoding,
        "activation": activation,
        "seed": seed,
        "epochs": epochs,
        "hidden_widths": list(result.artifact.hidden_widths),
        "test_error": meta["torch_test_error"],  # torch net on its own inputs
        "running_train_error_last_epoch": (result.history["train_error"] or [None])[-1],
        "artifact_test_error": meta["errors"]["test"],  # reference predictor, rounded table
        "torch_reference_agreement": meta["torch_reference_agreement"],
        "seconds": time.perf_counter() - tick,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="usps")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--seeds", default="0,1", help="comma-separated seeds (default 0,1)")
    p.add_argument("--activations", default="relu,sign")
    p.add_argument(
        "--encodings",
        default="rounded,float",
        help="comma-separated, of rounded (ours), float (the authors'), float-clipped (diagnostic: "
        "float clipped to the grid's range, not rounded); default rounded,float",
    )
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--weight-bits", type=int, default=2)
    p.add_argument("--nb-bits", type=int, default=3, help="width matched to the NB size at this many bits")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--encodings-only", action="store_true", help="print the encoding statistics and stop")
    p.add_argument("--json", default=None, metavar="OUT", help="write the statistics and every run here")
    args = p.parse_args(argv)

    import torch

    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.errors import DatasetError

    torch.set_num_threads(args.threads)
    try:
        dataset = load_dataset(args.data)
    except DatasetError as exc:
        print(
            f"skipped: {args.data} is not available ({exc}); the paper's data lives in ../shared/datasets "
            "beside the clone (or $BNC_DEPLOY_DATA_DIR)"
        )
        return 0
    report = encoding_report(dataset)
    print_encoding_report(report)
    out = {"encoding": report, "runs": []}
    if not args.encodings_only:
        nb_parameters = int(dataset.n_classes * (1 + int(dataset.cardinalities.sum())))
        match_bits = nb_parameters * args.nb_bits
        seeds = [int(s) for s in args.seeds.split(",")]
        activations = args.activations.split(",")
        encodings = args.encodings.split(",")
        unknown = set(encodings) - set(ENCODINGS)
        if unknown:
            p.error(f"unknown encodings {sorted(unknown)}: choose from {', '.join(ENCODINGS)}")
        print(
            f"\nFC L={args.layers}, {args.weight_bits}-bit weights, batch norm, match_bits = {nb_parameters:,} NB "
            f"parameters x {args.nb_bits} = {match_bits:,} bits, lr {args.lr:g}, {args.epochs} epochs, "
            f"seeds {seeds}, {args.threads} thread(s)"
        )
        out["settings"] = {**vars(args), "match_bits": match_bits, "nb_parameters": nb_parameters}
        started = time.perf_counter()
        for activation in activations:
            for seed in seeds:
                for encoding in encodings:
                    run = train_once(
                        dataset,
                        activation=activation,
                        seed=seed,
                        epochs=args.epochs,
                        match_bits=match_bits,
                        layers=args.layers,
                        weight_bits=args.weight_bits,
                        lr=args.lr,
                        encoding=encoding,
                    )
                    out["runs"].append(run)
                    print(
                        f"  {activation:4s} seed {seed} {encoding:7s}: test error {100 * run['test_error']:.2f} % "
                        f"(widths {run['hidden_widths']}, {run['seconds']:.0f} s)",
                        flush=True,
                    )
        out["summary"] = print_table(out["runs"], activations, seeds, encodings)
        out["total_seconds"] = time.perf_counter() - started
        print(f"\ntotal {out['total_seconds']:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return 0


def print_table(runs: list[dict], activations, seeds, encodings) -> dict:
    """Test error per activation, seed and encoding; each other encoding's difference to ``rounded``."""
    by = {(r["activation"], r["seed"], r["encoding"]): r for r in runs}
    others = [e for e in encodings if e != "rounded"] if "rounded" in encodings else []
    head = ["activation", "seed", *encodings, *(f"{e} - rounded" for e in others)]
    if "float" in encodings:
        head.append("float net, rounded deploy")
    print("\n| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    summary = {}
    for activation in activations:
        errors = {e: [by[(activation, s, e)]["test_error"] for s in seeds] for e in encodings}
        diffs = {e: [a - b for a, b in zip(errors[e], errors["rounded"])] for e in others}
        for k, seed in enumerate(seeds):
            cells = [
                activation,
                str(seed),
                *(f"{100 * errors[e][k]:.2f} %" for e in encodings),
                *(f"{100 * diffs[e][k]:+.2f} pp" for e in others),
            ]
            if "float" in encodings:
                cells.append(f"{100 * by[(activation, seed, 'float')]['artifact_test_error']:.2f} %")
            print("| " + " | ".join(cells) + " |")
        cells = [
            activation,
            "mean (sd)",
            *(f"{100 * _mean(errors[e]):.2f} % ({100 * _sd(errors[e]):.2f})" for e in encodings),
            *(f"{100 * _mean(diffs[e]):+.2f} pp ({100 * _sd(diffs[e]):.2f})" for e in others),
        ]
        if "float" in encodings:
            cells.append("")
        print("| " + " | ".join(cells) + " |")
        summary[activation] = {
            **{f"mean_{e}": _mean(errors[e]) for e in encodings},
            **{f"seed_sd_{e}": _sd(errors[e]) for e in encodings},
            **{f"mean_diff_{e}": _mean(diffs[e]) for e in others},
            **{f"sd_diff_{e}": _sd(diffs[e]) for e in others},
        }
    return summary


def _mean(values) -> float:
    return statistics.mean(values)


def _sd(values) -> float:
    return statistics.stdev(values) if len(values) > 1 else float("nan")


if __name__ == "__main__":
    sys.exit(main())
