"""``bnc-train`` adapter of the Bayesian network classifiers (``--model nb`` and ``--model tan``).

Contract: :class:`bnc_deploy.train.TrainerFamily`. The family's flags are ``--structure``
(``chow-liu``, ``learn`` or a file of parents), the structure-learning flags (:data:`LEARN_FLAGS`, only
with ``--structure learn``), ``--bits``/``--int-bits``, ``--init`` and ``--smoothing``. Another family's
model refuses ``--structure`` (other than ``chow-liu``), ``--bits``, ``--int-bits`` and the
structure-learning flags; ``--init`` and ``--smoothing`` are accepted and ignored there, as they
always were. ``--init`` defaults to ``ml`` (:data:`DEFAULT_INIT`, issue 26), not to ``TrainConfig``'s
``uniform``, the paper's start, which ``bnc-sweep``, ``bnc-reproduce`` and the paper presets keep;
``--init uniform`` with fewer than :data:`~bnc_deploy.train.arguments.UNIFORM_MIN_EPOCHS` epochs warns.
``--json`` adds ``structure``, ``parents``, ``bits``, ``int_bits``, ``frac_bits``,
``structure_source`` and ``n_parameters_nb_multiple``.

Importing this module imports no torch; the methods import the trainer (and torch) when they run.
"""

from __future__ import annotations

from dataclasses import dataclass

from bnc_deploy.errors import ConfigError
from bnc_deploy.train.arguments import UNIFORM_MIN_EPOCHS, applies_only, flag, refuse_random_model, warn_short_uniform

#: ``--structure`` when not given.
DEFAULT_STRUCTURE = "chow-liu"
#: ``--init`` when not given: maximum likelihood, as the scikit-learn estimators. A uniform start
#: needs many epochs (issue 26: breast cancer, TAN 3 bits, 30 epochs: 14 % test error with uniform,
#: 3.7 % with ml); ``TrainConfig.init`` stays ``uniform`` so that the sweeps and the paper's
#: protocol keep their start.
DEFAULT_INIT = "ml"
#: Flags (attribute names) that apply only with ``--structure learn``.
LEARN_FLAGS = (
    "candidates",
    "candidates_file",
    "size_penalty",
    "size_penalty_mode",
    "structure_lr",
    "tau_start",
    "tau_end",
    "finetune_epochs",
)
#: Flags of this family (besides ``--structure``) that another family's model refuses, in message order.
OWN_FLAGS = ("bits", "int_bits", *LEARN_FLAGS)


@dataclass
class BncPlan:
    """A validated BN run: the trainer's configuration, and structure learning's (or None)."""

    config: object  # bnc_deploy.train.bnc.TrainConfig
    learn: object | None = None  # bnc_deploy.train.structure_learning.StructureLearningConfig

    @property
    def epochs(self) -> int:
        return self.config.epochs


class BncFamily:
    """Naive Bayes and TAN, with few-bit parameters; TAN structures from Chow-Liu, a file, or learned."""

    def add_arguments(self, parser, model_group) -> None:
        # The dataclass defaults are the single source of the flag defaults (cheap: no data), except
        # --init (DEFAULT_INIT).
        from bnc_deploy.train.bnc import TrainConfig

        defaults = TrainConfig()
        model_group.add_argument(
            "--structure",
            default=defaults.structure,
            metavar="{chow-liu,learn,FILE}",
            help="TAN structure: chow-liu (default), learn (differentiable, model-size-aware structure "
            "learning), or a file of parents (.bnc model, JSON list, or ints)",
        )
        _add_structure_learning_arguments(model_group)
        _add_quantization_arguments(model_group)
        _add_initialization_arguments(model_group, defaults)

    def flags_given(self, args) -> list[str]:
        used = [flag(name) for name in OWN_FLAGS if getattr(args, name) is not None]
        if args.structure != DEFAULT_STRUCTURE:
            used.append("--structure")
        return used

    def foreign_flag_hint(self, flags: list[str]) -> str:
        return ""

    def config_from_args(self, args, *, progress: bool) -> BncPlan:
        from bnc_deploy.train.bnc import TrainConfig

        config = TrainConfig(
            model=args.model,
            structure=args.structure,
            bits=args.bits,
            int_bits=args.int_bits,
            init=args.init,
            smoothing=args.smoothing,
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            lr_decay=args.lr_decay if args.lr_decay is not None else TrainConfig().lr_decay,
            loss=args.loss,
            hybrid_lambda=args.hybrid_lambda,
            hybrid_gamma=args.hybrid_gamma,
            hybrid_eta=args.hybrid_eta,
            seed=args.seed,
            adam_eps=args.adam_eps,
            progress=progress,
        )
        config.validate()
        refuse_random_model(args.epochs, args.init)
        learn = structure_learning_config(args)
        warn_short_uniform(args.epochs, args.init)  # once the flags are known to be valid
        return BncPlan(config, learn)

    def input_paths(self, args) -> tuple:
        if args.structure == "learn":
            if args.candidates_file is None:
                return ()
            from bnc_deploy.train.candidate_sets import split_candidates_spec

            return (split_candidates_spec(args.candidates_file)[0],)
        return () if args.structure == DEFAULT_STRUCTURE else (args.structure,)

    def train(self, dataset, plan: BncPlan):
        if plan.learn is not None:
            from bnc_deploy.train.structure_learning import train_learned_tan

            return train_learned_tan(dataset, plan.config, plan.learn)
        from bnc_deploy.train.bnc import train_bnc

        return train_bnc(dataset, plan.config)

    def summary(self, result, dataset, plan: BncPlan) -> dict:
        artifact = result.artifact
        q = artifact.quantizer
        return {
            "structure": artifact.structure,
            "parents": artifact.parents.tolist(),
            "bits": q.total_bits if q else None,
            "int_bits": q.int_bits if q else None,
            "frac_bits": q.frac_bits if q else None,
            "structure_source": artifact.metadata.get("structure_source"),
            "n_parameters_nb_multiple": artifact.n_parameters
            / (dataset.n_classes * (1 + int(dataset.cardinalities.sum()))),
        }

    def format_summary(self, r: dict) -> str:
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


def _add_structure_learning_arguments(model_group) -> None:
    """The flags of ``--structure learn`` (:data:`LEARN_FLAGS`)."""
    model_group.add_argument(
        "--candidates",
        default=None,
        metavar="K",
        help="--structure learn: at most K random candidate parents per feature among its "
        "predecessors (default 8); 0 or 'all' for every predecessor",
    )
    model_group.add_argument(
        "--candidates-file",
        default=None,
        metavar="FILE[#DATASET]",
        help="--structure learn: a fixed feature ordering and candidate parent sets from a JSON file, "
        '{"ordering": [...], "candidates": [[...], ...]} (per feature, -1 = class only), or the '
        "authors' pgm2020_tan_subset_settings.json (the entry of the loaded dataset, or #DATASET); "
        "not with --candidates",
    )
    model_group.add_argument(
        "--size-penalty",
        type=float,
        default=None,
        metavar="LAMBDA",
        help="--structure learn: weight lambda_MS of the expected model size (default 1e-3)",
    )
    model_group.add_argument(
        "--size-penalty-mode",
        choices=("added", "absolute"),
        default=None,
        help="--structure learn: count parameters added over naive Bayes (default) or all",
    )
    model_group.add_argument(
        "--structure-lr",
        type=float,
        default=None,
        metavar="X",
        help="--structure learn: constant Adam learning rate of the structure logits (default 1e-3)",
    )
    model_group.add_argument(
        "--tau-start",
        type=float,
        default=None,
        metavar="T",
        help="--structure learn: Gumbel-softmax temperature of the first epoch (default 10)",
    )
    model_group.add_argument(
        "--tau-end",
        type=float,
        default=None,
        metavar="T",
        help="--structure learn: temperature of the last epoch, log-linear in between (default 0.1)",
    )
    model_group.add_argument(
        "--finetune-epochs",
        type=int,
        default=None,
        metavar="N",
        help="--structure learn: epochs of (quantization-aware with --bits) training of the "
        "learned TAN, starting from its jointly trained tables (default 0)",
    )


def _add_quantization_arguments(model_group) -> None:
    """``--bits`` and ``--int-bits``: the fixed-point format of the parameters."""
    model_group.add_argument(
        "--bits",
        type=int,
        default=None,
        metavar="B",
        help="bits per parameter B = B_I + B_F in 1..8; omit for a float32 model",
    )
    model_group.add_argument(
        "--int-bits",
        type=int,
        default=None,
        metavar="I",
        help="integer bits B_I in 1..6 (B_F = B - B_I may be negative); default 1 for B=1, 2 for B<=3, else 3",
    )


def _add_initialization_arguments(model_group, defaults) -> None:
    """``--init`` (default :data:`DEFAULT_INIT`) and ``--smoothing`` (the trainer's default)."""
    model_group.add_argument(
        "--init",
        choices=("uniform", "ml"),
        default=DEFAULT_INIT,
        help="default ml: start from maximum-likelihood tables (counts + --smoothing); uniform: "
        "rho ~ U(-0.1, 0.1), the paper's start (bnc-reproduce, bnc-sweep and the paper presets keep "
        f"it), which needs many epochs (warns below {UNIFORM_MIN_EPOCHS})",
    )
    model_group.add_argument(
        "--smoothing", type=float, default=defaults.smoothing, help="pseudo-counts for --init ml (default 1)"
    )


def structure_learning_config(args):
    """StructureLearningConfig for ``--structure learn`` (validated), else None; learn-only flags need it.

    ``--candidates-file`` refuses ``--candidates`` (the file gives the candidate sets). The shared
    ``--lr``, ``--lr-decay``, ``--loss`` and ``--hybrid-*`` flags are the TrainConfig's, which
    structure learning trains its CPTs with.
    """
    if args.structure != "learn":
        used = [flag(name) for name in LEARN_FLAGS if getattr(args, name) is not None]
        if used:
            raise applies_only(used, "--structure learn")
        return None
    from bnc_deploy.train.structure_learning import StructureLearningConfig, parse_candidates

    if args.candidates_file is not None and args.candidates is not None:
        raise ConfigError(
            f"--candidates-file {args.candidates_file} gives every feature's candidate parents; "
            f"--candidates {args.candidates} cannot also be given"
        )
    sl = StructureLearningConfig()
    if args.candidates is not None:
        sl.candidates = parse_candidates(args.candidates)
    for name in LEARN_FLAGS[1:]:
        if getattr(args, name) is not None:
            setattr(sl, name, getattr(args, name))
    sl.validate()
    return sl


#: The adapter ``TRAINERS`` points at.
FAMILY = BncFamily()
