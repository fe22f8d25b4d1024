"""``bnc-structure-sweep``: learned TAN structures over a grid of size penalties lambda_MS.

Writes one model file per lambda, ``trajectory.csv``, ``trajectory.json`` and the plots
(``trajectory.png/.svg``: error and parameters over lambda; ``pareto.png/.svg``: Pareto front).
The training flags (``--lr``, ``--lr-decay``, ``--loss``, ``--hybrid-*``) and the structure-learning
flags have ``bnc-train``'s names and defaults (taken from ``TrainConfig`` and ``StructureLearningConfig``);
``trajectory.json`` records them all (``train_config``, ``structure_learning``, ``candidates_file``).

Exit status 0; 2 with a one-line message for bad options, data or reference models; 130 after ^C
(the lambdas finished so far stay in OUTDIR; ``--resume`` continues).
"""

from __future__ import annotations

import argparse
import sys
import time

from bnc_deploy.cli.common import cli_main, print_json
from bnc_deploy.errors import ConfigError, require_extra

PROG = "bnc-structure-sweep"
#: After ^C: the lambdas finished so far are complete model files in OUTDIR.
INTERRUPTED = "interrupted; finished lambdas stay in OUTDIR (rerun with --resume to continue)"


def _defaults():
    """``(TrainConfig(), StructureLearningConfig())``: the single source of the flag defaults, shared
    with ``bnc-train`` (imports torch, so the parser is built after ``require_extra``)."""
    from bnc_deploy.train.bnc import TrainConfig
    from bnc_deploy.train.structure_learning import StructureLearningConfig

    return TrainConfig(), StructureLearningConfig()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Learn TAN structures with a model-size penalty over a grid of lambda_MS and write the "
        "accuracy/size trajectory (CSV, JSON, plots).",
        epilog="Examples:\n"
        "  bnc-structure-sweep --data letter --grid 1e-7:10:9 --epochs 500 --jobs 2 -o sweep-letter\n"
        "  bnc-structure-sweep --data satimage --fold 1 --batch-size 50 --lambdas 1e-6,1e-4,1e-2,1 -o sweep-sat",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", required=True, metavar="PATH_OR_NAME", help="dataset name or file (as for bnc-train)")
    p.add_argument("--fold", type=int, default=1, metavar="K", help="1-based fold (default 1)")
    grid = p.add_mutually_exclusive_group(required=True)
    grid.add_argument("--lambdas", metavar="L1,L2,...", help="comma-separated size penalties")
    grid.add_argument("--grid", metavar="LOW:HIGH:N", help="N log-spaced size penalties from LOW to HIGH")
    train, learn = _defaults()
    _add_structure_flags(p, learn)
    _add_training_flags(p, train)
    _add_run_flags(p)
    return p


def _add_structure_flags(p: argparse.ArgumentParser, learn) -> None:
    """The structure-learning flags (defaults: ``learn``, a ``StructureLearningConfig``)."""
    # --candidates and --order default to None, so that --candidates-file can refuse them when given.
    p.add_argument(
        "--candidates",
        default=None,
        metavar="K",
        help=f"at most K random candidate parents per feature (default {learn.candidates}); 0 or 'all' "
        "for every predecessor",
    )
    p.add_argument(
        "--order",
        choices=("identity", "random", "chow-liu"),
        default=None,
        help="fixed feature ordering: identity (default), seeded random, or breadth-first Chow-Liu tree",
    )
    p.add_argument(
        "--candidates-file",
        default=None,
        metavar="FILE[#DATASET]",
        help='a fixed ordering and candidate parent sets from a JSON file, {"ordering": [...], '
        '"candidates": [[...], ...]} (per feature, -1 = class only), or the authors\' '
        "pgm2020_tan_subset_settings.json (the entry of the loaded dataset, or #DATASET); "
        "not with --candidates or --order",
    )
    p.add_argument(
        "--size-penalty-mode",
        choices=("added", "absolute"),
        default=learn.size_penalty_mode,
        help="count parameters added over naive Bayes (default) or all parameters",
    )
    p.add_argument(
        "--structure-lr",
        type=float,
        default=learn.structure_lr,
        metavar="X",
        help=f"constant Adam learning rate of the structure logits (default {learn.structure_lr:g})",
    )
    p.add_argument(
        "--tau-start",
        type=float,
        default=learn.tau_start,
        metavar="T",
        help=f"Gumbel-softmax temperature of the first epoch (default {learn.tau_start:g})",
    )
    p.add_argument(
        "--tau-end",
        type=float,
        default=learn.tau_end,
        metavar="T",
        help=f"temperature of the last epoch, log-linear in between (default {learn.tau_end:g})",
    )


def _add_training_flags(p: argparse.ArgumentParser, train) -> None:
    """The training flags, ``bnc-train``'s (defaults: ``train``, a ``TrainConfig``), and quantization."""
    p.add_argument(
        "--epochs", type=int, default=train.epochs, metavar="N", help=f"epochs per lambda (default {train.epochs})"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=train.batch_size,
        metavar="N",
        help=f"default {train.batch_size} (the paper: 50 for satimage)",
    )
    p.add_argument(
        "--lr",
        type=float,
        default=train.lr,
        metavar="X",
        help=f"initial learning rate of the CPTs (default {train.lr:g}; the paper's grid: 3e-2, 3e-3)",
    )
    p.add_argument(
        "--lr-decay",
        type=float,
        default=train.lr_decay,
        metavar="F",
        help=f"final CPT learning rate = lr * F, log-linear per epoch (default {train.lr_decay:g})",
    )
    p.add_argument(
        "--loss",
        choices=("hybrid", "nll", "cll"),
        default=train.loss,
        help="hybrid generative-discriminative (default), nll (generative), cll (conditional)",
    )
    p.add_argument(
        "--hybrid-lambda", type=float, default=train.hybrid_lambda, metavar="L", help=f"default {train.hybrid_lambda:g}"
    )
    p.add_argument(
        "--hybrid-gamma", type=float, default=train.hybrid_gamma, metavar="G", help=f"default {train.hybrid_gamma:g}"
    )
    p.add_argument(
        "--hybrid-eta", type=float, default=train.hybrid_eta, metavar="E", help=f"default {train.hybrid_eta:g}"
    )
    p.add_argument("--init", choices=("uniform", "ml"), default=train.init, help="CPT initialisation (default uniform)")
    p.add_argument("--bits", type=int, default=None, metavar="B", help="quantize the extracted TANs to B bits")
    p.add_argument("--int-bits", type=int, default=None, metavar="I", help="integer bits with --bits")
    p.add_argument(
        "--finetune-epochs",
        type=int,
        default=0,
        metavar="N",
        help="(quantization-aware) epochs on each extracted TAN (default 0)",
    )


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    """Seed, parallelism, reference models, resuming and the output."""
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed (ordering, candidates, init, shuffling)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="lambdas trained side by side, 1 thread each")
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="MODEL",
        help="a model file to draw in the Pareto plot (e.g. a Chow-Liu TAN); repeatable",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="reuse model files already in OUTDIR (lambda_<value>.bnc) instead of retraining them; "
        "refused (before any training) if one was trained with other settings",
    )
    p.add_argument("-o", "--output", required=True, metavar="OUTDIR", help="folder for models, CSV, JSON, plots")
    p.add_argument("--json", action="store_true", help="print one JSON object (rows and paths)")
    p.add_argument("--quiet", action="store_true", help="no per-lambda lines")


@cli_main(PROG, interrupted=INTERRUPTED)
def main(argv: list[str] | None = None) -> int:
    require_extra(PROG, "train", "torch", "matplotlib")
    args = build_parser().parse_args(argv)
    result = run(args)
    if args.json:
        print_json(result)
    return 0


def run(args) -> dict:
    from bnc_deploy.datasets import load_dataset
    from bnc_deploy.train.structure_learning import naive_bayes_parameters, structure_candidates
    from bnc_deploy.train.structure_sweep import (
        parse_grid,
        parse_lambdas,
        reference_point,
        sweep,
        sweep_meta,
        write_outputs,
    )

    lambdas = parse_lambdas(args.lambdas) if args.lambdas is not None else parse_grid(args.grid)
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    config = _train_config(args)
    sl = _structure_config(args)
    dataset = load_dataset(args.data, fold=args.fold, seed=args.seed)  # fail early on bad data
    # Fail early on a bad candidates file too (it is checked against the dataset), before any training.
    _, sets = structure_candidates(dataset, config, sl) if sl.candidates_file is not None else (None, None)
    nb = naive_bayes_parameters(dataset.cardinalities, dataset.n_classes)
    references = [reference_point(path, nb) for path in args.reference]
    log = (lambda line: None) if (args.quiet or args.json) else (lambda line: print(line, file=sys.stderr, flush=True))
    started = time.perf_counter()
    rows = sweep(
        args.data,
        args.fold,
        config,
        sl,
        lambdas,
        args.output,
        jobs=args.jobs,
        log=log,
        resume=args.resume,
        dataset=dataset,
    )
    meta = sweep_meta(
        args.data,
        args.fold,
        config,
        sl,
        lambdas,
        time.perf_counter() - started,
        candidates_file=None if sets is None else sets.describe(),
    )
    meta["naive_bayes_parameters"] = nb
    paths = write_outputs(rows, args.output, meta, references)
    if not args.json:
        print(f"wrote {', '.join(paths.values())}")
    return {"rows": rows, "paths": paths, "naive_bayes_parameters": nb, "references": references}


def _train_config(args):
    """The ``TrainConfig`` of every lambda's training, validated."""
    from bnc_deploy.train.arguments import refuse_random_model
    from bnc_deploy.train.bnc import TrainConfig

    config = TrainConfig(
        model="tan",
        structure="learn",
        bits=args.bits,
        int_bits=args.int_bits,
        init=args.init,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        lr_decay=args.lr_decay,
        loss=args.loss,
        hybrid_lambda=args.hybrid_lambda,
        hybrid_gamma=args.hybrid_gamma,
        hybrid_eta=args.hybrid_eta,
        seed=args.seed,
        progress=False,
    )
    config.validate()
    refuse_random_model(args.epochs, args.init)
    return config


def _structure_config(args):
    """The ``StructureLearningConfig`` of the flags, validated (``--candidates-file`` excludes
    ``--candidates`` and ``--order``)."""
    from bnc_deploy.train.structure_learning import StructureLearningConfig, parse_candidates

    if args.candidates_file is not None:
        given = [
            f"{name} {value}"
            for name, value in (("--candidates", args.candidates), ("--order", args.order))
            if value is not None
        ]
        if given:
            raise ConfigError(
                f"--candidates-file {args.candidates_file} gives the ordering and candidate sets; "
                f"{' and '.join(given)} cannot also be given"
            )
    sl = StructureLearningConfig(
        size_penalty_mode=args.size_penalty_mode,
        finetune_epochs=args.finetune_epochs,
        structure_lr=args.structure_lr,
        tau_start=args.tau_start,
        tau_end=args.tau_end,
        candidates_file=args.candidates_file,
    )
    if args.candidates is not None:
        sl.candidates = parse_candidates(args.candidates)
    if args.order is not None:
        sl.order = args.order
    sl.validate()
    return sl


if __name__ == "__main__":
    raise SystemExit(main())
