"""Training Bayesian network classifiers: data -> torch model -> :class:`BNCArtifact`.

The schedule follows the paper's reference code: Adam; the learning rate decays log-linearly
per epoch from ``lr`` to ``lr * lr_decay`` (default 1e-3) over the run; the training set is
reshuffled every epoch and the last incomplete batch is dropped; everything is seeded. The
epochs run in :func:`bnc_deploy.train.loop.fit_epochs`; this module supplies the step
(:func:`bnc_step`) and the per-epoch record.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from bnc_deploy.artifacts import BNCArtifact, load_artifact
from bnc_deploy.artifacts.bnc import check_acyclic
from bnc_deploy.datasets.base import DiscreteDataset
from bnc_deploy.errors import ArtifactError, ConfigError
from bnc_deploy.models._kernels import hybrid_backward, hybrid_forward, log_joint_backward, log_joint_forward
from bnc_deploy.models.bnc import BayesNetClassifier
from bnc_deploy.quantizers import FixedPointLogQuantizer
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.train.chow_liu import chow_liu_parents
from bnc_deploy.train.common import (
    EpochHistory,
    TrainResult,
    check_schedule,
    check_set,
    log_linear_rates,
    record_errors,
    run_metadata,
)
from bnc_deploy.train.loop import fit_epochs, run_epoch
from bnc_deploy.train.losses import HybridLoss, exclusion_mask, make_loss


def default_int_bits(total_bits: int) -> int:
    """Integer bits used when only ``--bits`` is given: 1 for B=1, 2 for B=2..3, else 3.

    These are the settings of the issue's letter experiments; the best ``B_I`` is data
    dependent, so sweeps should set it explicitly.
    """
    return 1 if total_bits == 1 else 2 if total_bits <= 3 else 3


@dataclass
class TrainConfig:
    """Everything that determines a training run (stored in the artifact's metadata)."""

    model: str = "nb"  # "nb" or "tan"
    structure: str = "chow-liu"  # TAN only: "chow-liu" or a file with parents
    bits: int | None = None  # None: float model
    int_bits: int | None = None  # None: default_int_bits(bits)
    init: str = "uniform"  # "uniform" or "ml"
    smoothing: float = 1.0  # pseudo-counts for init="ml"
    epochs: int = 500
    batch_size: int = 100
    lr: float = 3e-3
    lr_decay: float = 1e-3  # final learning rate = lr * lr_decay
    loss: str = "hybrid"  # "hybrid", "nll" or "cll"
    hybrid_lambda: float = 18.70
    hybrid_gamma: float = 0.1277
    hybrid_eta: float = 10.0
    seed: int = 0
    adam_eps: float = 1e-7  # TensorFlow/Keras' default, as in the paper's reference code
    progress: bool = True

    def validate(self) -> None:
        if self.model not in ("nb", "tan"):
            raise ConfigError(f"unknown model {self.model!r}: use 'nb' or 'tan'")
        if self.model == "nb" and self.structure != "chow-liu":
            raise ConfigError(f"--structure {self.structure} applies to --model tan only (naive Bayes has no parents)")
        check_schedule(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr, lr_decay=self.lr_decay)
        if self.init not in ("uniform", "ml"):
            raise ConfigError(f"unknown init {self.init!r}: use 'uniform' or 'ml'")
        if not self.adam_eps > 0:
            raise ConfigError(f"Adam eps must be > 0, got {self.adam_eps}")
        if self.smoothing < 0:
            raise ConfigError(f"smoothing must be >= 0, got {self.smoothing}")
        if self.int_bits is not None and self.bits is None:
            raise ConfigError("--int-bits needs --bits (a float model has no integer bits)")
        self.quantizer()  # raises UnsupportedBitWidth for bad widths
        make_loss(
            self.loss, hybrid_lambda=self.hybrid_lambda, hybrid_gamma=self.hybrid_gamma, hybrid_eta=self.hybrid_eta
        )

    def quantizer(self) -> FixedPointLogQuantizer | None:
        if self.bits is None:
            return None
        int_bits = self.int_bits if self.int_bits is not None else default_int_bits(self.bits)
        return FixedPointLogQuantizer(self.bits, int_bits)

    def learning_rates(self) -> np.ndarray:
        """Per-epoch learning rates, log-linear from ``lr`` to ``lr * lr_decay``."""
        return log_linear_rates(self.lr, self.lr_decay, self.epochs)


def resolve_parents(config: TrainConfig, dataset: DiscreteDataset) -> tuple[np.ndarray, str]:
    """Parents for the configured structure, and a description of where they came from."""
    d = dataset.n_features
    if config.model == "nb":
        return np.full(d, -1, dtype=np.int64), "naive Bayes"
    if config.structure == "chow-liu":
        parents = chow_liu_parents(dataset.x_train, dataset.y_train, dataset.cardinalities, dataset.n_classes)
        return parents, "chow-liu"
    return load_structure_file(config.structure, d), str(config.structure)


#: What ``--structure FILE`` accepts, for messages.
STRUCTURE_FILE_HELP = (
    "a structure file is a .bnc model (its parents are reused), a JSON list of parents "
    '(or {"parents": [...]}), or integers separated by spaces or commas: one parent index '
    "per feature, -1 for none"
)


def load_structure_file(path: str | Path, n_features: int) -> np.ndarray:
    """Parents from a file: a model file (``.bnc``), JSON (a list, or ``{"parents": [...]}``), or text ints.

    ConfigError naming the file (and saying what a structure file is) for anything else.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"structure file {path} is a directory; {STRUCTURE_FILE_HELP}")
    if not path.is_file():
        raise ConfigError(f"structure file {path} does not exist (use --structure chow-liu or a file of parents)")
    if path.suffix == ".bnc":
        parents = load_artifact(path).parents
    else:
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(
                f"structure file {path} is not a text file (an exported model such as .onnx or "
                f".tflite cannot give a structure); {STRUCTURE_FILE_HELP}"
            ) from None
        except OSError as exc:
            raise ConfigError(f"structure file {path}: cannot read ({exc.strerror or exc})") from None
        try:
            data = json.loads(text)
            parents = data["parents"] if isinstance(data, dict) else data
        except json.JSONDecodeError:
            try:
                parents = [int(tok) for tok in text.replace(",", " ").split()]
            except ValueError as exc:
                raise ConfigError(
                    f"structure file {path}: not JSON and not a list of integers ({exc}); {STRUCTURE_FILE_HELP}"
                ) from None
        except (KeyError, TypeError):
            raise ConfigError(
                f"structure file {path}: JSON must be a list of parents or have a 'parents' key"
            ) from None
    parents = np.asarray(parents)
    if parents.shape != (n_features,) or not np.issubdtype(parents.dtype, np.integer):
        raise ConfigError(
            f"structure file {path}: expected {n_features} integer parents, got {parents.tolist()[:10]}..."
        )
    bad = (parents < -1) | (parents >= n_features) | (parents == np.arange(n_features))
    if bad.any():
        i = int(np.argmax(bad))
        raise ConfigError(f"structure file {path}: feature {i} has invalid parent {int(parents[i])}")
    try:
        check_acyclic(parents.astype(np.int64))
    except ArtifactError as exc:
        raise ConfigError(f"structure file {path}: {exc}") from None
    return parents.astype(np.int64)


def _error(model: BayesNetClassifier, indices: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(indices).argmax(dim=1) != labels).float().mean()) if len(labels) else float("nan")


def train_bnc(
    dataset: DiscreteDataset,
    config: TrainConfig,
    *,
    parents: np.ndarray | None = None,
    structure_source: str | None = None,
    init_rho: tuple | None = None,
) -> TrainResult:
    """Train a BN classifier on ``dataset`` and return its artifact and per-epoch history.

    Hooks for callers that found the structure themselves (``models.structure_learning``):
    ``parents`` (D,) overrides ``config.structure``; ``init_rho = (class_rho (C,), rho (D, P, K, C))``
    in ``BayesNetClassifier``'s layout replaces ``config.init`` (e.g. fine-tuning trained CPTs).
    """
    config.validate()
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    init_generator = torch.Generator().manual_seed(config.seed)
    if parents is None:
        parents, structure_source = resolve_parents(config, dataset)
    model = BayesNetClassifier(
        dataset.cardinalities,
        dataset.n_classes,
        parents,
        quantizer=config.quantizer(),
        init=config.init,
        data=(dataset.x_train, dataset.y_train),
        smoothing=config.smoothing,
        generator=init_generator,
    )
    if init_rho is not None:
        _load_rho(model, *init_rho)
    loss_fn = make_loss(
        config.loss, hybrid_lambda=config.hybrid_lambda, hybrid_gamma=config.hybrid_gamma, hybrid_eta=config.hybrid_eta
    )
    splits = {"train": (dataset.x_train, dataset.y_train), "test": (dataset.x_test, dataset.y_test)}
    if dataset.x_val is not None:
        splits["val"] = (dataset.x_val, dataset.y_val)
    tensors = {name: (model.flat_indices(x), torch.as_tensor(y, dtype=torch.int64)) for name, (x, y) in splits.items()}
    history = _fit(model, loss_fn, tensors, config)

    artifact = _to_artifact(
        model, dataset, config, parents, structure_source, history, seconds=time.perf_counter() - started
    )
    _check_reference_agrees(model, artifact, tensors["test"][0], dataset.x_test)
    return TrainResult(artifact=artifact, history=history, seconds=time.perf_counter() - started)


@torch.no_grad()
def _load_rho(model: BayesNetClassifier, class_rho, rho) -> None:
    """Start ``model`` from given unnormalized tables; padding entries are reset to the model's own."""
    rho, class_rho = torch.as_tensor(rho, dtype=torch.float32), torch.as_tensor(class_rho, dtype=torch.float32)
    if rho.shape != model.rho.shape or class_rho.shape != model.class_rho.shape:
        # A caller's bug (no flag reaches this), so a plain ValueError with its traceback.
        raise ValueError(
            f"init_rho shapes {tuple(class_rho.shape)}, {tuple(rho.shape)} do not match the model's "
            f"{tuple(model.class_rho.shape)}, {tuple(model.rho.shape)}"
        )
    model.rho.copy_(torch.where(model.valid, rho, model.rho))
    model.class_rho.copy_(class_rho)


def bnc_step(model, optimizer, loss_fn):
    """The loop's ``step(indices, labels) -> (loss, log_joint)`` for a BN classifier.

    With the hybrid loss the closed-form step sets the gradients (no autograd engine; same
    gradients, see ``models._kernels``); anything else goes through autograd.
    """
    if isinstance(model, BayesNetClassifier) and isinstance(loss_fn, HybridLoss):

        def step(indices, labels):
            loss, log_joint = closed_form_step(model, loss_fn, indices, labels)
            optimizer.step()
            return loss, log_joint
    else:

        def step(indices, labels):
            log_joint = model(indices)
            loss = loss_fn(log_joint, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            return loss, log_joint

    return step


def train_epoch(
    model, optimizer, loss_fn, indices: torch.Tensor, labels: torch.Tensor, order: torch.Tensor, batch_size: int
) -> tuple[float, int]:
    """One pass over ``order`` in full batches (the last incomplete batch is dropped).

    Returns the summed batch losses and the number of misclassified training rows, both
    measured on the fly (before each update), as the paper's reference code reports them.
    (The epoch of :func:`_fit`, callable alone: ``benchmarks/bench_train_epoch.py`` times it.)
    """
    return run_epoch(bnc_step(model, optimizer, loss_fn), indices, labels, order, batch_size, gather_per_epoch=True)


@torch.no_grad()
def closed_form_step(model: BayesNetClassifier, loss_fn: HybridLoss, indices, labels):
    """Set ``model.rho.grad``/``model.class_rho.grad`` to the hybrid loss gradient; return (loss, log_joint)."""
    log_joint, saved_lj = log_joint_forward(model.rho, model.class_rho, indices, model.quant_params)
    mask = exclusion_mask(log_joint.shape[1], log_joint.dtype, log_joint.device)
    loss, saved_loss = hybrid_forward(log_joint, labels, loss_fn.lam, loss_fn.gamma, loss_fn.eta, mask)
    model.rho.grad, model.class_rho.grad = log_joint_backward(saved_lj, hybrid_backward(saved_loss))
    return loss, log_joint


def make_optimizer(model, eps: float = 1e-7) -> torch.optim.Optimizer:
    """Adam; the fused implementation saves kernel launches on these small tensors.

    ``eps`` defaults to 1e-7, TensorFlow's default, which the paper's reference code used (torch's
    is 1e-8). At few bits it matters: a larger eps damps the updates of rarely-seen table rows,
    whose tiny gradients would otherwise flip quantized values back and forth to the end.
    """
    return torch.optim.Adam(model.parameters(), lr=1e-3, eps=eps, fused=True)


def _fit(model, loss_fn, tensors, config: TrainConfig) -> dict:
    history = EpochHistory()
    optimizer = make_optimizer(model, config.adam_eps)
    # gather_per_epoch: the index tensors are small, and one gather per epoch is the fastest.
    fit_epochs(
        *tensors["train"],
        step=bnc_step(model, optimizer, loss_fn),
        record=history.recorder(partial(_error, model), tensors),
        optimizer=optimizer,
        learning_rates=config.learning_rates(),
        batch_size=config.batch_size,
        seed=config.seed,
        gather_per_epoch=True,
        progress=config.progress,
        postfix=history.postfix,
    )
    return history.finish()


def _to_artifact(
    model, dataset: DiscreteDataset, config: TrainConfig, parents, structure_source, history, seconds
) -> BNCArtifact:
    discretizer = dataset.discretizer.to_dict() if dataset.discretizer is not None else None
    metadata = run_metadata(dataset, config, history, seconds, structure_source=structure_source)
    check_x, check_y = check_set(dataset, config.seed)
    artifact = model.to_artifact(
        dataset.class_names,
        dataset.feature_names,
        discretizer=discretizer,
        metadata=metadata,
        check_x=check_x,
        check_y=check_y,
    )
    record_errors(artifact, ReferencePredictor(artifact), dataset)
    return artifact


def _check_reference_agrees(model, artifact, test_indices, x_test) -> None:
    """The artifact must predict exactly what the trained torch model predicts.

    Quantized models: integer arithmetic, so any mismatch is a bug and raises. Float models:
    both sum float log-probabilities in different orders, so the agreement is recorded.
    """
    with torch.no_grad():
        torch_labels = model(test_indices).argmax(dim=1).numpy()
    ref_labels = ReferencePredictor(artifact).predict(x_test)
    agreement = float(np.mean(torch_labels == ref_labels)) if len(ref_labels) else 1.0
    artifact.metadata["torch_reference_agreement"] = agreement
    if artifact.is_quantized and agreement != 1.0:
        raise AssertionError(
            f"internal error: quantized artifact disagrees with the torch model on "
            f"{int(np.sum(torch_labels != ref_labels))} test rows"
        )
