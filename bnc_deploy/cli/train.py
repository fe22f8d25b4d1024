"""``bnc-train``: train a naive Bayes or TAN classifier, or a quantized DNN baseline, and write its model file.

Scripts rely on this interface: flags and JSON keys are only ever added, never renamed.

The command knows no model family: ``--model``'s choices, each family's flags, its
configuration, trainer, ``--json`` keys and summary come from :data:`bnc_deploy.train.TRAINERS`
(see :class:`bnc_deploy.train.TrainerFamily`). This module declares the flags every model
shares, refuses one family's flags for another family's model, checks ``-o`` before any work,
and writes the model file.
"""

from __future__ import annotations

import argparse
import sys

from bnc_deploy.cli.common import cli_main, print_json
from bnc_deploy.errors import require_extra
from bnc_deploy.train import DEFAULT_TRAINER, TRAINERS, families

PROG = "bnc-train"


def build_parser() -> argparse.ArgumentParser:
    defaults = _defaults()
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Train a Bayesian network classifier (naive Bayes or TAN) with few-bit parameters, "
        "or a quantized DNN baseline (fully connected or CNN), and write a versioned model file.",
        epilog="Examples:\n"
        "  bnc-train --data digits --model nb --bits 3 -o nb3.bnc\n"
        "  bnc-train --data letter --model nb --epochs 0 -o letter_ml.bnc   (maximum likelihood)\n"
        "  bnc-train --data letter --model nb --bits 3 --init uniform -o nb3u.bnc   (the paper's start)\n"
        "  bnc-train --data letter --model tan --structure chow-liu --bits 8 --int-bits 3 -o tan8.bnc\n"
        "  bnc-train --data usps --model fc --layers 3 --weight-bits 2 --batch-norm --match-bits 25950 -o fc.bnc\n"
        "  bnc-train --data usps --model cnn --layers 2 --weight-bits 2 --batch-norm --match-bits 25950 -o cnn.bnc",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_data_arguments(p)
    _add_model_arguments(p)
    _add_training_arguments(p, defaults)
    _add_output_arguments(p)
    return p


def _add_data_arguments(p: argparse.ArgumentParser) -> None:
    """The dataset, its fold, the validation split and a CSV file's label column."""
    data = p.add_argument_group("data")
    data.add_argument(
        "--data",
        default="digits",
        metavar="PATH_OR_NAME",
        help="dataset name (digits, letter, satimage, usps, letter-raw, satimage-raw, usps-raw, mnist, mnist-mean2x2) "
        "or a file (.npz, .csv, .data, .mat); default: digits (built in)",
    )
    data.add_argument("--fold", type=int, default=1, metavar="K", help="1-based fold (satimage has 5); default 1")
    data.add_argument(
        "--validation",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="carve a seeded validation split of this fraction (in (0, 1)) from the training part",
    )
    data.add_argument(
        "--label-column",
        type=label_column,
        default=None,
        metavar="NAME|INDEX",
        help="CSV files: the label column, by header name or 0-based index (-1: the last); "
        "default: the column named label, class or target (any case), else the last",
    )


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    """``--model``, then every family's own flags (in registration order)."""
    model = p.add_argument_group("model")
    model_help = "; ".join(f"{spec.name}: {spec.help}" for spec in TRAINERS.values())
    model.add_argument(
        "--model", choices=tuple(TRAINERS), default=DEFAULT_TRAINER, help=f"{model_help} (default {DEFAULT_TRAINER})"
    )
    for family in _family_adapters().values():
        family.add_arguments(p, model)


def _add_training_arguments(p: argparse.ArgumentParser, defaults) -> None:
    """The flags every model shares, with the BN trainer's defaults."""
    train = p.add_argument_group("training")
    train.add_argument(
        "--epochs",
        type=int,
        default=defaults.epochs,
        metavar="N",
        help="epochs (default 500); 0 for nb/tan: the maximum-likelihood model (--init ml, the default)",
    )
    train.add_argument("--batch-size", type=int, default=defaults.batch_size, metavar="N", help="default 100")
    train.add_argument(
        "--lr",
        type=float,
        default=defaults.lr,
        metavar="X",
        help="initial learning rate (default 3e-3; the paper's DNN grid is 3e-2, 3e-3, 3e-4)",
    )
    train.add_argument(
        "--lr-decay",
        type=float,
        default=None,
        metavar="F",
        help="final learning rate = lr * F, log-linear per epoch (default 1e-3 for BNs, 1e-4 for DNNs)",
    )
    train.add_argument(
        "--loss",
        choices=("hybrid", "nll", "cll"),
        default=defaults.loss,
        help="hybrid generative-discriminative (default), nll (generative), cll (conditional)",
    )
    train.add_argument("--hybrid-lambda", type=float, default=defaults.hybrid_lambda, metavar="L", help="default 18.70")
    train.add_argument("--hybrid-gamma", type=float, default=defaults.hybrid_gamma, metavar="G", help="default 0.1277")
    train.add_argument("--hybrid-eta", type=float, default=defaults.hybrid_eta, metavar="E", help="default 10")
    train.add_argument(
        "--adam-eps",
        type=float,
        default=defaults.adam_eps,
        metavar="EPS",
        help="Adam epsilon (default 1e-7, TensorFlow's, as in the paper's reference code)",
    )
    train.add_argument(
        "--seed", type=int, default=defaults.seed, metavar="S", help="seed for init, shuffling and splits"
    )
    train.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="torch CPU threads (default 1: the tensors are small, and thread hand-offs cost more "
        "than they save; measured with benchmarks/bench_train_epoch.py)",
    )


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    """The model file and how the result is reported."""
    out = p.add_argument_group("output")
    out.add_argument("-o", "--output", required=True, metavar="MODEL", help="model file to write (.bnc)")
    out.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    out.add_argument("--quiet", action="store_true", help="no progress bar")


def label_column(text: str) -> int | str:
    """``--label-column``: an integer is a 0-based column index, anything else a header name."""
    try:
        return int(text)
    except ValueError:
        return text


def _defaults():
    """Defaults of the shared training flags (the BN trainer's schedule, as they always were)."""
    from bnc_deploy.train.bnc import TrainConfig

    return TrainConfig()


def _family_adapters() -> dict:
    """Family name -> its adapter, in registration order."""
    return {family: TRAINERS[models[0]].load() for family, models in families().items()}


@cli_main(PROG)
def main(argv: list[str] | None = None) -> int:
    require_extra(PROG, "train", "torch", "tqdm")  # before the parser: its defaults live in torch modules
    args = build_parser().parse_args(argv)
    result = run(args)
    from bnc_deploy.fileio import holds

    # Concurrent writers to one -o: the last complete one wins; say so if that was not this one.
    result["owned"] = bool(result["owned"] and holds(args.output, result["file_sha256"]))
    if not result["owned"]:
        print(
            f"{PROG}: warning: {args.output} was replaced by another writer after this one; the file on disk is theirs",
            file=sys.stderr,
        )
    if args.json:
        print_json(result)
    else:
        print(TRAINERS[args.model].load().format_summary(result))
    return 0


def run(args) -> dict:
    """Check the flags and ``-o``, load data, train, save; return the JSON summary."""
    from bnc_deploy.datasets import check_validation_fraction, load_dataset
    from bnc_deploy.fileio import check_output_path
    from bnc_deploy.train.arguments import use_threads

    use_threads(args.threads)
    check_validation_fraction(args.validation, "--validation")
    spec = TRAINERS[args.model]
    refuse_other_families_flags(args, spec.family)
    family = spec.load()
    config = family.config_from_args(args, progress=not (args.quiet or args.json) and sys.stderr.isatty())
    # Before the (possibly long) work: a directory, an input, or an unwritable folder fails now.
    check_output_path(args.output, inputs=(args.data, *family.input_paths(args)), what="model file")
    dataset = load_dataset(
        args.data, fold=args.fold, seed=args.seed, validation_fraction=args.validation, label_column=args.label_column
    )
    result = family.train(dataset, config)
    return saved_summary(args, dataset, result, config.epochs) | family.summary(result, dataset, config)


def refuse_other_families_flags(args, family: str) -> None:
    """ConfigError if a flag of another family than ``family`` is given, e.g. ``--one-hot`` for ``--model nb``."""
    from bnc_deploy.train.arguments import applies_only

    adapters = _family_adapters()
    for other, models in families().items():
        if other == family:
            continue
        used = adapters[other].flags_given(args)
        if used:  # the chosen family may point to its own flag (--bits -> --weight-bits)
            raise applies_only(used, "--model " + " or ".join(models) + adapters[family].foreign_flag_hint(used))


def saved_summary(args, dataset, result, epochs: int) -> dict:
    """Save the trained model to ``--output``; the JSON keys every model kind reports."""
    from bnc_deploy.artifacts import publish_artifact

    artifact = result.artifact
    digest, published = publish_artifact(artifact, args.output)
    errors = artifact.metadata["errors"]
    return {
        "model": str(args.output),
        "test_error": errors["test"],
        "train_error": errors["train"],
        "val_error": errors.get("val"),
        "n_parameters": artifact.n_parameters,
        "size_bits": artifact.size_bits,
        "n_ops": artifact.n_ops,
        "dataset": dataset.name,
        "fold": dataset.fold,
        "n_features": dataset.n_features,
        "n_classes": dataset.n_classes,
        "epochs": epochs,
        "seconds": round(result.seconds, 3),
        "content_sha256": digest,
        "file_sha256": published.sha256,
        "owned": published.owned,
    }


if __name__ == "__main__":
    raise SystemExit(main())
