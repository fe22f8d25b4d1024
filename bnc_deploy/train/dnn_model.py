"""What a DNN training run is made of: its configuration (:class:`DNNConfig`), the input encoding
(:class:`InputSpec`), the widths matched to a budget, the torch network it starts from, and the
model file it ends as (:func:`to_artifact`, checked against torch by :func:`check_reference_agrees`).

The training itself is :mod:`bnc_deploy.train.dnn_batched` (one configuration: ``train_dnn``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from bnc_deploy.artifacts.dnn import DNNArtifact
from bnc_deploy.artifacts.encoding import encode_integer, fit_standardized_table, image_layout
from bnc_deploy.datasets.base import DiscreteDataset
from bnc_deploy.errors import ConfigError
from bnc_deploy.models.dnn import QuantCNN, QuantMLP
from bnc_deploy.quantizers import DoReFaWeightQuantizer
from bnc_deploy.reference.dnn import DNNReferencePredictor
from bnc_deploy.train.common import check_schedule, check_set, log_linear_rates, record_errors, run_metadata

#: Rows per forward pass when evaluating (bounds a CNN's activation memory).
EVAL_ROWS = 1024
#: The paper's learning-rate grid for DNNs.
PAPER_LEARNING_RATES = (3e-2, 3e-3, 3e-4)


@dataclass
class DNNConfig:
    """Everything that determines a DNN training run (stored in the artifact's metadata).

    ``layers``: FC weight layers ``L`` in 2..5; CNN convolution layers in 1..2.
    Exactly one of ``hidden`` (explicit widths/channels), ``match_bits`` or ``match_ops``.
    """

    architecture: str = "fc"  # "fc" or "cnn"
    layers: int = 2
    weight_bits: int = 2
    activation: str = "relu"  # "relu" or "sign"
    batch_norm: bool = False
    one_hot: bool = False
    hidden: list | None = None  # explicit widths (FC: L-1 values, or 1 repeated) / channels
    match_bits: int | None = None
    match_ops: int | None = None
    epochs: int = 100
    batch_size: int = 100
    lr: float = 3e-3
    lr_decay: float = 1e-4
    adam_eps: float = 1e-7
    seed: int = 0
    image_shape: tuple | None = None
    pixel_order: str | None = None
    progress: bool = True
    sizing: dict = field(default_factory=dict)  # filled in by resolve_widths

    def validate(self) -> None:
        if self.architecture not in ("fc", "cnn"):
            raise ConfigError(f"unknown architecture {self.architecture!r}: use fc or cnn")
        lo, hi = (2, 5) if self.architecture == "fc" else (1, 2)
        if not lo <= self.layers <= hi:
            what = "weight layers" if self.architecture == "fc" else "convolution layers"
            raise ConfigError(f"--layers {self.layers}: a {self.architecture} network has {lo}..{hi} {what}")
        DoReFaWeightQuantizer(self.weight_bits)  # UnsupportedBitWidth names the value
        if self.activation not in ("relu", "sign"):
            raise ConfigError(f"unknown activation {self.activation!r}: use relu or sign")
        given = [name for name in ("hidden", "match_bits", "match_ops") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ConfigError(
                "give exactly one of explicit widths (--hidden), --match-bits or --match-ops"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.hidden is not None:
            widths = list(self.hidden)
            if not widths or any(int(w) < 1 for w in widths):
                raise ConfigError(f"widths must be positive integers, got {widths}")
        for name in ("match_bits", "match_ops"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {value}")
        check_schedule(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr, lr_decay=self.lr_decay)

    def learning_rates(self) -> np.ndarray:
        """Per-epoch learning rates, log-linear from ``lr`` to ``lr * lr_decay``."""
        return log_linear_rates(self.lr, self.lr_decay, self.epochs)


@dataclass
class InputSpec:
    """The encoding chosen for a dataset (what the artifact stores about its inputs)."""

    encoding: str
    cardinalities: np.ndarray
    input_codes: np.ndarray | None
    input_scale: float
    mean: np.ndarray | None
    std: np.ndarray | None
    architecture: str
    image_shape: tuple | None
    pixel_order: str

    @property
    def channels(self) -> int:
        return 1 if self.encoding == "standardized" else int(self.cardinalities.max())

    @property
    def n_inputs(self) -> int:
        return len(self.cardinalities) if self.encoding == "standardized" else int(self.cardinalities.sum())

    def encode(self, x: np.ndarray) -> torch.Tensor:
        """Float32 network inputs (exact: integers times a power of two)."""
        ints = encode_integer(
            x,
            architecture=self.architecture,
            encoding=self.encoding,
            cardinalities=self.cardinalities,
            input_codes=self.input_codes,
            image_shape=self.image_shape,
            pixel_order=self.pixel_order,
        )
        return torch.from_numpy((ints * self.input_scale).astype(np.float32))


def input_spec(dataset: DiscreteDataset, config: DNNConfig) -> InputSpec:
    shape = order = None
    if config.architecture == "cnn":
        shape, order = image_layout(dataset.name, dataset.n_features, config.image_shape, config.pixel_order)
    if config.one_hot:
        return InputSpec(
            "onehot", dataset.cardinalities, None, 1.0, None, None, config.architecture, shape, order or "row-major"
        )
    table = fit_standardized_table(dataset.x_train, dataset.cardinalities)
    return InputSpec(
        "standardized",
        dataset.cardinalities,
        table["input_codes"],
        table["input_scale"],
        table["mean"],
        table["std"],
        config.architecture,
        shape,
        order or "row-major",
    )


def resolve_widths(config: DNNConfig, spec: InputSpec, n_classes: int) -> list[int]:
    """Hidden widths (FC) or channels (CNN): explicit, or matched to the bits/ops budget."""
    from bnc_deploy.train import sizing

    if config.hidden is not None:
        widths = [int(w) for w in config.hidden]
        want = config.layers - 1 if config.architecture == "fc" else config.layers
        if len(widths) == 1 and want > 1:
            widths = widths * want if config.architecture == "fc" else [widths[0], 2 * widths[0]]
        if len(widths) != want:
            raise ConfigError(f"{len(widths)} widths given for {want} hidden layers")
        config.sizing = {"target_kind": None, "widths": widths}
        return widths
    if config.architecture == "fc":
        result = sizing.match_fc(
            spec.n_inputs,
            n_classes,
            config.layers,
            config.weight_bits,
            config.batch_norm,
            target_bits=config.match_bits,
            target_ops=config.match_ops,
        )
    else:
        result = sizing.match_cnn(
            spec.image_shape,
            spec.channels,
            n_classes,
            config.layers,
            config.weight_bits,
            config.batch_norm,
            target_bits=config.match_bits,
            target_ops=config.match_ops,
        )
    config.sizing = result.to_dict()
    return list(result.widths)


def build_model(
    config: DNNConfig, spec: InputSpec, n_classes: int, widths: list[int], generator: torch.Generator | None = None
):
    if config.architecture == "fc":
        return QuantMLP(
            spec.n_inputs, n_classes, widths, config.weight_bits, config.activation, config.batch_norm, generator
        )
    return QuantCNN(
        spec.channels,
        spec.image_shape,
        n_classes,
        widths,
        config.weight_bits,
        config.activation,
        config.batch_norm,
        generator,
    )


@torch.no_grad()
def predict_torch(model, x: torch.Tensor) -> np.ndarray:
    """Eval-mode labels of the torch model (first maximum), in chunks."""
    was_training = model.training
    model.eval()
    out = [model(x[i : i + EVAL_ROWS]).argmax(dim=1) for i in range(0, x.shape[0], EVAL_ROWS)]
    model.train(was_training)
    return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.int64)


def to_artifact(model, spec: InputSpec, dataset: DiscreteDataset, config: DNNConfig, history, seconds) -> DNNArtifact:
    metadata = run_metadata(dataset, config, history, seconds, sizing=config.sizing)
    check_x, check_y = check_set(dataset, config.seed)
    artifact = DNNArtifact(
        architecture=config.architecture,
        cardinalities=dataset.cardinalities,
        class_names=dataset.class_names,
        feature_names=dataset.feature_names,
        weight_bits=config.weight_bits,
        activation=config.activation,
        input_encoding=spec.encoding,
        layers=model.to_layers(),
        input_codes=spec.input_codes,
        input_scale=spec.input_scale,
        image_shape=spec.image_shape,
        pixel_order=spec.pixel_order,
        input_mean=spec.mean,
        input_std=spec.std,
        discretizer=dataset.discretizer.to_dict() if dataset.discretizer is not None else None,
        metadata=metadata,
        check_x=check_x,
        check_y=check_y,
    )
    record_errors(artifact, DNNReferencePredictor(artifact), dataset)
    return artifact


def check_reference_agrees(
    model, artifact: DNNArtifact, x_test_encoded: torch.Tensor, x_test: np.ndarray, y_test: np.ndarray
) -> None:
    """Record how often the artifact's reference predicts what the eval-mode torch net predicts.

    Not bit-exact by nature: torch applies batch norm as ``(z - mean) / sqrt(var + eps) * gamma +
    beta`` in float32, the artifact the folded scale/shift (sign nets: exact integer thresholds),
    so a unit whose pre-activation is within float rounding of its threshold may flip. A large
    disagreement means a bug, so below 99 % this raises.
    """
    torch_labels = predict_torch(model, x_test_encoded)
    ref_labels = DNNReferencePredictor(artifact).predict(x_test)
    agreement = float(np.mean(torch_labels == ref_labels)) if len(ref_labels) else 1.0
    artifact.metadata["torch_reference_agreement"] = agreement
    artifact.metadata["torch_test_error"] = float(np.mean(torch_labels != y_test)) if len(y_test) else None
    if agreement < 0.99:
        raise AssertionError(
            f"internal error: the artifact agrees with the trained torch model on only "
            f"{100 * agreement:.2f} % of the test rows"
        )
