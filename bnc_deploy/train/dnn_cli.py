"""``bnc-train`` adapter of the quantized DNN baselines (``--model fc`` and ``--model cnn``).

Contract: :class:`bnc_deploy.train.TrainerFamily`. The family's flags live in their own help
group: ``--layers``, ``--weight-bits``, ``--activation``, ``--batch-norm``, ``--one-hot``, one of
``--match-bits``/``--match-ops``/``--hidden``, and (CNN only) ``--image-shape``/``--pixel-order``;
another family's model refuses each of them. ``--lr-decay`` defaults to 1e-4 here. ``--json``
adds ``model_kind: "dnn"``, the architecture, widths, encoding, sizing target and achieved
budget, and the torch/reference agreement.

Importing this module imports no torch; the methods import the trainer (and torch) when they run.
"""

from __future__ import annotations

from bnc_deploy.errors import ConfigError
from bnc_deploy.train.arguments import flag

#: This family's flags (attribute names), in the order a refusal names them.
OWN_FLAGS = (
    "layers",
    "weight_bits",
    "activation",
    "batch_norm",
    "one_hot",
    "match_bits",
    "match_ops",
    "hidden",
    "image_shape",
    "pixel_order",
)
#: ``--lr-decay`` when not given (the paper's DNN schedule decays to lr0 * 1e-4).
DEFAULT_LR_DECAY = 1e-4


class DnnFamily:
    """Fully connected nets and CNNs with few-bit DoReFa weights, sized explicitly or to a budget."""

    def add_arguments(self, parser, model_group) -> None:
        dnn = parser.add_argument_group("DNN baselines (--model fc or cnn)")
        dnn.add_argument(
            "--layers",
            type=int,
            default=None,
            metavar="L",
            help="fc: weight layers L in 2..5 (default 2); cnn: convolution layers 1..2 (default 2)",
        )
        dnn.add_argument(
            "--weight-bits",
            type=int,
            default=None,
            metavar="B",
            help="bits per weight B in 1..8 (DoReFa; 1 = sign); default 2",
        )
        dnn.add_argument(
            "--activation",
            choices=("relu", "sign"),
            default=None,
            help="hidden activation (default relu); sign is stochastic in training, +1 for >= 0 at inference",
        )
        dnn.add_argument(
            "--batch-norm", action="store_true", help="batch norm after every hidden affine map / convolution"
        )
        dnn.add_argument(
            "--one-hot",
            action="store_true",
            help="one-hot encode the discrete features (default: standardize them with the training mean/std)",
        )
        size = dnn.add_mutually_exclusive_group()
        size.add_argument(
            "--match-bits",
            type=int,
            default=None,
            metavar="T",
            help="choose widths/channels so the model needs about T bits (the paper's accounting)",
        )
        size.add_argument(
            "--match-ops",
            type=int,
            default=None,
            metavar="T",
            help="choose widths/channels so the model needs about T operations per row",
        )
        size.add_argument(
            "--hidden",
            default=None,
            metavar="W[,W...]",
            help="explicit hidden widths (fc, one per hidden layer or one for all) or channels "
            "(cnn: C1 or C1,C2; one value gives C1,2*C1)",
        )
        dnn.add_argument(
            "--image-shape",
            default=None,
            metavar="HxW",
            help="cnn: image shape of the features (known for usps, mnist, digits)",
        )
        dnn.add_argument(
            "--pixel-order",
            choices=("row-major", "column-major"),
            default=None,
            help="cnn: how features map to pixels (known for usps, mnist, digits)",
        )

    def flags_given(self, args) -> list[str]:
        # "Given" means neither None nor False (store_true flags default to False).
        return [flag(name) for name in OWN_FLAGS if getattr(args, name) not in (None, False)]

    def foreign_flag_hint(self, flags: list[str]) -> str:
        return " (use --weight-bits for DNN weights)" if "--bits" in flags else ""

    def config_from_args(self, args, *, progress: bool):
        from bnc_deploy.artifacts.encoding import parse_image_shape
        from bnc_deploy.train.dnn import DNNConfig

        if args.model != "cnn" and (args.image_shape or args.pixel_order):
            raise ConfigError("--image-shape and --pixel-order apply only to --model cnn")
        config = DNNConfig(
            architecture=args.model,
            layers=args.layers if args.layers is not None else 2,
            weight_bits=args.weight_bits if args.weight_bits is not None else 2,
            activation=args.activation or "relu",
            batch_norm=args.batch_norm,
            one_hot=args.one_hot,
            hidden=parse_hidden(args.hidden),
            match_bits=args.match_bits,
            match_ops=args.match_ops,
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            lr_decay=args.lr_decay if args.lr_decay is not None else DEFAULT_LR_DECAY,
            adam_eps=args.adam_eps,
            seed=args.seed,
            image_shape=parse_image_shape(args.image_shape) if args.image_shape else None,
            pixel_order=args.pixel_order,
            progress=progress,
        )
        config.validate()
        return config

    def input_paths(self, args) -> tuple:
        return ()

    def train(self, dataset, config):
        from bnc_deploy.train.dnn import train_dnn

        return train_dnn(dataset, config)

    def summary(self, result, dataset, config) -> dict:
        artifact = result.artifact
        sizing = config.sizing or {}
        return {
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

    def format_summary(self, r: dict) -> str:
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
            f"  size        {r['size_bits']:,} bits ({r['size_bits'] / 8 / 1024:.2f} KiB)"
            + (target if r["target_kind"] == "bits" else ""),
            f"  operations  {r['n_ops']:,} (MACs + batch-norm outputs + biases)"
            + (target if r["target_kind"] == "ops" else ""),
            f"  train error {100 * r['train_error']:.2f} %",
        ]
        if r["val_error"] is not None:
            lines.append(f"  val error   {100 * r['val_error']:.2f} %")
        lines.append(f"  test error  {100 * r['test_error']:.2f} %")
        if r["epochs"] == 0:  # allowed (sizing, export checks), but never silently
            lines.append("  untrained   --epochs 0: the weights are the random initialization")
        lines.append(f"  wrote       {r['model']}")
        return "\n".join(lines)


def parse_hidden(text: str | None) -> list[int] | None:
    """``--hidden "16,8"`` -> ``[16, 8]``; ConfigError naming the value if it is not integers."""
    if text is None:
        return None
    try:
        return [int(v) for v in str(text).split(",")]
    except ValueError:
        raise ConfigError(f"--hidden {text!r} must be comma-separated integers") from None


#: The adapter ``TRAINERS`` points at.
FAMILY = DnnFamily()
