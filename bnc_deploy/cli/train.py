"""``bnc-train``: train a naive Bayes or TAN classifier, or a quantized DNN baseline, and write its model file.

Scripts rely on this interface: flags and JSON keys are only ever added, never renamed.
"""

from __future__ import annotations

import argparse
import sys

from bnc_deploy.cli.common import print_json, user_errors

PROG = "bnc-train"


def build_parser() -> argparse.ArgumentParser:
    defaults = _defaults()
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Train a Bayesian network classifier (naive Bayes or TAN) with few-bit parameters, "
                    "or a quantized DNN baseline (fully connected or CNN), and write a versioned model file.",
        epilog="Examples:\n"
               "  bnc-train --data digits --model nb --bits 3 -o nb3.bnc\n"
               "  bnc-train --data letter --model nb --init ml --epochs 0 -o letter_ml.bnc   (maximum likelihood)\n"
               "  bnc-train --data letter --model tan --structure chow-liu --bits 8 --int-bits 3 -o tan8.bnc\n"
               "  bnc-train --data usps --model fc --layers 3 --weight-bits 2 --batch-norm --match-bits 25950 -o fc.bnc\n"
               "  bnc-train --data usps --model cnn --layers 2 --weight-bits 2 --batch-norm --match-bits 25950 -o cnn.bnc",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    data = p.add_argument_group("data")
    data.add_argument("--data", default="digits", metavar="PATH_OR_NAME",
                      help="dataset name (digits, letter, satimage, usps, letter-raw, satimage-raw, usps-raw, mnist) "
                           "or a file (.npz, .csv, .data, .mat); default: digits (built in)")
    data.add_argument("--fold", type=int, default=1, metavar="K", help="1-based fold (satimage has 5); default 1")
    data.add_argument("--validation", type=float, default=0.0, metavar="FRACTION",
                      help="carve a seeded validation split of this fraction from the training part")
    model = p.add_argument_group("model")
    model.add_argument("--model", choices=("nb", "tan", "fc", "cnn"), default=defaults.model,
                       help="nb/tan: Bayesian network classifier (default nb); fc/cnn: quantized DNN baseline")
    model.add_argument("--structure", default=defaults.structure, metavar="{chow-liu,learn,FILE}",
                       help="TAN structure: chow-liu (default), learn (differentiable, model-size-aware structure "
                            "learning), or a file of parents (.bnc model, JSON list, or ints)")
    model.add_argument("--candidates", default=None, metavar="K",
                       help="--structure learn: at most K random candidate parents per feature among its "
                            "predecessors (default 8); 0 or 'all' for every predecessor")
    model.add_argument("--size-penalty", type=float, default=None, metavar="LAMBDA",
                       help="--structure learn: weight lambda_MS of the expected model size (default 1e-3)")
    model.add_argument("--size-penalty-mode", choices=("added", "absolute"), default=None,
                       help="--structure learn: count parameters added over naive Bayes (default) or all")
    model.add_argument("--finetune-epochs", type=int, default=None, metavar="N",
                       help="--structure learn: epochs of (quantization-aware with --bits) training of the "
                            "learned TAN, starting from its jointly trained tables (default 0)")
    model.add_argument("--bits", type=int, default=None, metavar="B",
                       help="bits per parameter B = B_I + B_F in 1..8; omit for a float32 model")
    model.add_argument("--int-bits", type=int, default=None, metavar="I",
                       help="integer bits B_I in 1..6 (B_F = B - B_I may be negative); default 1 for B=1, 2 for B<=3, else 3")
    model.add_argument("--init", choices=("uniform", "ml"), default=defaults.init,
                       help="uniform: rho ~ U(-0.1, 0.1) (paper); ml: maximum likelihood counts + smoothing")
    model.add_argument("--smoothing", type=float, default=defaults.smoothing, help="pseudo-counts for --init ml (default 1)")
    dnn = p.add_argument_group("DNN baselines (--model fc or cnn)")
    dnn.add_argument("--layers", type=int, default=None, metavar="L",
                     help="fc: weight layers L in 2..5 (default 2); cnn: convolution layers 1..2 (default 2)")
    dnn.add_argument("--weight-bits", type=int, default=None, metavar="B",
                     help="bits per weight B in 1..8 (DoReFa; 1 = sign); default 2")
    dnn.add_argument("--activation", choices=("relu", "sign"), default=None,
                     help="hidden activation (default relu); sign is stochastic in training, +1 for >= 0 at inference")
    dnn.add_argument("--batch-norm", action="store_true", help="batch norm after every hidden affine map / convolution")
    dnn.add_argument("--one-hot", action="store_true",
                     help="one-hot encode the discrete features (default: standardize them with the training mean/std)")
    size = dnn.add_mutually_exclusive_group()
    size.add_argument("--match-bits", type=int, default=None, metavar="T",
                      help="choose widths/channels so the model needs about T bits (the paper's accounting)")
    size.add_argument("--match-ops", type=int, default=None, metavar="T",
                      help="choose widths/channels so the model needs about T operations per row")
    size.add_argument("--hidden", default=None, metavar="W[,W...]",
                      help="explicit hidden widths (fc, one per hidden layer or one for all) or channels "
                           "(cnn: C1 or C1,C2; one value gives C1,2*C1)")
    dnn.add_argument("--image-shape", default=None, metavar="HxW",
                     help="cnn: image shape of the features (known for usps, mnist, digits)")
    dnn.add_argument("--pixel-order", choices=("row-major", "column-major"), default=None,
                     help="cnn: how features map to pixels (known for usps, mnist, digits)")
    train = p.add_argument_group("training")
    train.add_argument("--epochs", type=int, default=defaults.epochs, metavar="N",
                       help="epochs (default 500); 0 with --init ml gives the maximum-likelihood model")
    train.add_argument("--batch-size", type=int, default=defaults.batch_size, metavar="N", help="default 100")
    train.add_argument("--lr", type=float, default=defaults.lr, metavar="X",
                       help="initial learning rate (default 3e-3; the paper's DNN grid is 3e-2, 3e-3, 3e-4)")
    train.add_argument("--lr-decay", type=float, default=None, metavar="F",
                       help="final learning rate = lr * F, log-linear per epoch (default 1e-3 for BNs, 1e-4 for DNNs)")
    train.add_argument("--loss", choices=("hybrid", "nll", "cll"), default=defaults.loss,
                       help="hybrid generative-discriminative (default), nll (generative), cll (conditional)")
    train.add_argument("--hybrid-lambda", type=float, default=defaults.hybrid_lambda, metavar="L", help="default 18.70")
    train.add_argument("--hybrid-gamma", type=float, default=defaults.hybrid_gamma, metavar="G", help="default 0.1277")
    train.add_argument("--hybrid-eta", type=float, default=defaults.hybrid_eta, metavar="E", help="default 10")
    train.add_argument("--adam-eps", type=float, default=defaults.adam_eps, metavar="EPS",
                       help="Adam epsilon (default 1e-7, TensorFlow's, as in the paper's reference code)")
    train.add_argument("--seed", type=int, default=defaults.seed, metavar="S", help="seed for init, shuffling and splits")
    train.add_argument("--threads", type=int, default=1, metavar="N",
                       help="torch CPU threads (default 1: the tensors are small, and thread hand-offs cost more "
                            "than they save; measured with benchmarks/bench_train_epoch.py)")
    out = p.add_argument_group("output")
    out.add_argument("-o", "--output", required=True, metavar="MODEL", help="model file to write (.bnc)")
    out.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


#: DNN-only flags (attribute names) and the BN-only flags a DNN run refuses.
_DNN_FLAGS = ("layers", "weight_bits", "activation", "batch_norm", "one_hot", "match_bits", "match_ops", "hidden",
              "image_shape", "pixel_order")
_BN_ONLY = {"bits": None, "int_bits": None, "candidates": None, "size_penalty": None, "size_penalty_mode": None,
            "finetune_epochs": None}


def _defaults():
    from bnc_deploy.train.bnc import TrainConfig

    return TrainConfig()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with user_errors(PROG):
        result = run(args)
    if args.json:
        print_json(result)
    else:
        print(format_summary(result))
    return 0


def run(args) -> dict:
    """Load data, train, save; return the JSON summary."""
    import torch

    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.train.bnc import TrainConfig, train_bnc

    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    if args.model in ("fc", "cnn"):
        return run_dnn(args)
    used = [f"--{name.replace('_', '-')}" for name in _DNN_FLAGS if getattr(args, name) not in (None, False)]
    if used:
        raise ValueError(f"{', '.join(used)} {'applies' if len(used) == 1 else 'apply'} only to --model fc or cnn")
    if args.lr_decay is None:
        args.lr_decay = TrainConfig().lr_decay
    config = TrainConfig(
        model=args.model, structure=args.structure, bits=args.bits, int_bits=args.int_bits, init=args.init,
        smoothing=args.smoothing, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
        lr_decay=args.lr_decay, loss=args.loss, hybrid_lambda=args.hybrid_lambda,
        hybrid_gamma=args.hybrid_gamma, hybrid_eta=args.hybrid_eta, seed=args.seed, adam_eps=args.adam_eps,
        progress=not (args.quiet or args.json) and sys.stderr.isatty())
    config.validate()  # fail on bad flags before loading (possibly large) data
    learn = _structure_learning_config(args)
    dataset = load_dataset(args.data, fold=args.fold, seed=args.seed, validation_fraction=args.validation)
    if learn is not None:
        from bnc_deploy.train.structure_learning import train_learned_tan

        result = train_learned_tan(dataset, config, learn)
    else:
        result = train_bnc(dataset, config)
    artifact = result.artifact
    summary = saved_summary(args, dataset, result, config.epochs)
    q = artifact.quantizer
    return summary | {
        "structure": artifact.structure,
        "parents": artifact.parents.tolist(),
        "bits": q.total_bits if q else None,
        "int_bits": q.int_bits if q else None,
        "frac_bits": q.frac_bits if q else None,
        "structure_source": artifact.metadata.get("structure_source"),
        "n_parameters_nb_multiple": artifact.n_parameters / (dataset.n_classes * (1 + int(dataset.cardinalities.sum()))),
    }


def saved_summary(args, dataset, result, epochs: int) -> dict:
    """Save the trained model to ``--output``; the JSON keys every model kind reports."""
    from bnc_deploy.artifacts import save_artifact

    artifact = result.artifact
    digest = save_artifact(artifact, args.output)
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
    }


def run_dnn(args) -> dict:
    """``--model fc|cnn``: train a quantized DNN baseline, save it, return the JSON summary."""
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.artifacts.encoding import parse_image_shape
    from bnc_deploy.train.dnn import DNNConfig, train_dnn

    used = [f"--{name.replace('_', '-')}" for name, default in _BN_ONLY.items() if getattr(args, name) != default]
    if args.structure != "chow-liu":
        used.append("--structure")
    if used:
        hint = " (use --weight-bits for DNN weights)" if "--bits" in used else ""
        raise ValueError(f"{', '.join(used)} {'applies' if len(used) == 1 else 'apply'} only to --model nb or tan{hint}")
    if args.model == "fc" and (args.image_shape or args.pixel_order):
        raise ValueError("--image-shape and --pixel-order apply only to --model cnn")
    hidden = None
    if args.hidden is not None:
        try:
            hidden = [int(v) for v in str(args.hidden).split(",")]
        except ValueError:
            raise ValueError(f"--hidden {args.hidden!r} must be comma-separated integers") from None
    config = DNNConfig(
        architecture=args.model, layers=args.layers if args.layers is not None else 2,
        weight_bits=args.weight_bits if args.weight_bits is not None else 2,
        activation=args.activation or "relu", batch_norm=args.batch_norm, one_hot=args.one_hot, hidden=hidden,
        match_bits=args.match_bits, match_ops=args.match_ops, epochs=args.epochs, batch_size=args.batch_size,
        lr=args.lr, lr_decay=args.lr_decay if args.lr_decay is not None else 1e-4, adam_eps=args.adam_eps,
        seed=args.seed, image_shape=parse_image_shape(args.image_shape) if args.image_shape else None,
        pixel_order=args.pixel_order, progress=not (args.quiet or args.json) and sys.stderr.isatty())
    config.validate()  # fail on bad flags before loading (possibly large) data
    dataset = load_dataset(args.data, fold=args.fold, seed=args.seed, validation_fraction=args.validation)
    result = train_dnn(dataset, config)
    artifact = result.artifact
    summary = saved_summary(args, dataset, result, config.epochs)
    sizing = config.sizing or {}
    return summary | {
        "model_kind": "dnn",
        "structure": artifact.architecture,
        "architecture": artifact.architecture,
        "hidden_widths": artifact.hidden_widths,
        "layers": config.layers,
        "bits": artifact.weight_bits,
        "weight_bits": artifact.weight_bits,
        "activation": artifact.activation,
        "batch_norm": config.batch_norm,
        "one_hot": config.one_hot,
        "input_encoding": artifact.input_encoding,
        "target_kind": sizing.get("target_kind"),
        "target": sizing.get("target"),
        "achieved_bits": artifact.size_bits,
        "achieved_ops": artifact.n_ops,
        "torch_reference_agreement": artifact.metadata.get("torch_reference_agreement"),
        "lr": config.lr,
    }


_LEARN_FLAGS = ("candidates", "size_penalty", "size_penalty_mode", "finetune_epochs")


def _structure_learning_config(args):
    """StructureLearningConfig for ``--structure learn`` (validated), else None; learn-only flags need it."""
    if args.structure != "learn":
        used = [f"--{name.replace('_', '-')}" for name in _LEARN_FLAGS if getattr(args, name) is not None]
        if used:
            raise ValueError(f"{', '.join(used)} {'applies' if len(used) == 1 else 'apply'} only to --structure learn")
        return None
    from bnc_deploy.train.structure_learning import StructureLearningConfig, parse_candidates

    sl = StructureLearningConfig()
    if args.candidates is not None:
        sl.candidates = parse_candidates(args.candidates)
    for name in _LEARN_FLAGS[1:]:
        if getattr(args, name) is not None:
            setattr(sl, name, getattr(args, name))
    sl.validate()
    return sl


def format_summary(r: dict) -> str:
    if r.get("model_kind") == "dnn":
        return format_dnn_summary(r)
    width = "float32" if r["bits"] is None else f"{r['bits']} bits (B_I={r['int_bits']}, B_F={r['frac_bits']})"
    lines = [
        f"trained {r['structure'].upper()} on {r['dataset']} (fold {r['fold']}): "
        f"{r['n_features']} features, {r['n_classes']} classes, {r['epochs']} epochs in {r['seconds']:.1f} s",
        f"  parameters  {r['n_parameters']:,} x {width}",
        f"  size        {r['size_bits']:,} bits ({r['size_bits'] / 8 / 1024:.2f} KiB)",
        f"  operations  {r['n_ops']:,} additions (+ argmax)",
        f"  train error {100 * r['train_error']:.2f} %",
    ]
    if r["val_error"] is not None:
        lines.append(f"  val error   {100 * r['val_error']:.2f} %")
    if r["structure_source"] == "learned":
        lines.append(f"  structure   learned, {r['n_parameters_nb_multiple']:.2f} x naive Bayes parameters")
    lines += [f"  test error  {100 * r['test_error']:.2f} %", f"  wrote       {r['model']}"]
    return "\n".join(lines)


def format_dnn_summary(r: dict) -> str:
    target = ""
    if r["target_kind"]:
        target = f" (target {r['target']:,} {r['target_kind']})"
    widths = ", ".join(str(w) for w in r["hidden_widths"])
    what = "channels" if r["architecture"] == "cnn" else "hidden units"
    lines = [
        f"trained {r['architecture'].upper()} ({what} {widths}; {r['weight_bits']}-bit weights, {r['activation']}"
        f"{', batch norm' if r['batch_norm'] else ''}, {r['input_encoding']} inputs) on {r['dataset']} "
        f"(fold {r['fold']}): {r['epochs']} epochs in {r['seconds']:.1f} s",
        f"  weights     {r['n_parameters']:,} x {r['weight_bits']} bits",
        f"  size        {r['size_bits']:,} bits ({r['size_bits'] / 8 / 1024:.2f} KiB)" + (target if r["target_kind"] == "bits" else ""),
        f"  operations  {r['n_ops']:,} (MACs + batch-norm outputs + biases)" + (target if r["target_kind"] == "ops" else ""),
        f"  train error {100 * r['train_error']:.2f} %",
    ]
    if r["val_error"] is not None:
        lines.append(f"  val error   {100 * r['val_error']:.2f} %")
    lines += [f"  test error  {100 * r['test_error']:.2f} %", f"  wrote       {r['model']}"]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
