"""Training of differentiable, size-aware TAN structures (paper, Sec. IV): the ``--candidates``
value, the costs of candidate parents, the temperature schedule, the epoch loop and the conversion
to an ordinary TAN model file.

The candidate parent sets themselves (generated, or read from ``--candidates-file``) are
:mod:`bnc_deploy.train.candidate_sets`. The model (the candidate tables, the straight-through
Gumbel-softmax and the expected-size penalty) is :mod:`bnc_deploy.models.structure_learning`,
whose docstring describes the method.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch

from bnc_deploy.errors import ConfigError
from bnc_deploy.models.structure_learning import (
    UNUSED_SLOT,
    StructureLearningTAN,
    expected_size_penalty,
    gumbel_softmax_st,
)
from bnc_deploy.train.candidate_sets import (
    CandidateSets,
    candidate_parents,
    feature_order,
    read_candidates_file,
    split_candidates_spec,
)
from bnc_deploy.train.loop import fit_epochs


# -- the --candidates value and the costs of candidate parents --------------------------------------
def parse_candidates(text) -> int | None:
    """``--candidates`` value: a positive int K, or ``0``/``"all"`` for every predecessor (None)."""
    text = str(text).strip().lower()
    if text in ("0", "all"):
        return None
    try:
        k = int(text)
    except ValueError:
        raise ConfigError(f"--candidates must be a positive integer, 0 or 'all', got {text!r}") from None
    if k < 0:
        raise ConfigError(f"--candidates must be a positive integer, 0 or 'all', got {k}")
    return k


def candidate_parameter_counts(
    cardinalities: np.ndarray, candidates: np.ndarray, n_classes: int, mode: str = "added"
) -> np.ndarray:
    """Parameters ``n_ij`` of every (feature, slot), shape (D, J), float64; 0 for unused slots.

    ``"added"``: what slot j adds over naive Bayes, ``|X_i|*|X_j|*C - |X_i|*C`` (0 for no parent).
    ``"absolute"``: the CPT's own size, ``|X_i|*|X_j|*C`` (``|X_i|*C`` for no parent). The two
    differ by ``|X_i|*C`` in every slot of feature i; since ``softmax(phi_i)`` sums to one this
    shifts the penalty by a constant, so both give the same gradients (only the value differs).
    """
    if mode not in ("added", "absolute"):
        raise ConfigError(f"unknown size penalty mode {mode!r}: use 'added' or 'absolute'")
    card = np.asarray(cardinalities, dtype=np.float64)
    used = candidates != UNUSED_SLOT
    parent_card = np.where(candidates >= 0, card[np.maximum(candidates, 0)], 1.0)
    own = card[:, None] * parent_card * n_classes  # (D, J)
    counts = own - card[:, None] * n_classes if mode == "added" else own
    return np.where(used, counts, 0.0)


def naive_bayes_parameters(cardinalities: np.ndarray, n_classes: int) -> int:
    """Parameters of naive Bayes, class prior included: ``C * (1 + sum_i |X_i|)``."""
    return int(n_classes * (1 + int(np.sum(cardinalities))))


def tan_parameters(cardinalities: np.ndarray, parents: np.ndarray, n_classes: int) -> int:
    """Parameters of a TAN with ``parents`` (``-1``: class only): ``C * (1 + sum_i |X_i| |X_pa(i)|)``."""
    card = np.asarray(cardinalities, dtype=np.int64)
    parent_card = np.where(parents >= 0, card[np.maximum(parents, 0)], 1)
    return int(n_classes * (1 + int(np.sum(card * parent_card))))


def temperatures(epochs: int, start: float = 10.0, end: float = 0.1) -> np.ndarray:
    """Per-epoch Gumbel temperature, log-linear from ``start`` to ``end`` (like the learning rate)."""
    if epochs <= 1:
        return np.full(epochs, start)
    return start * (end / start) ** (np.arange(epochs) / (epochs - 1))


# -- training ---------------------------------------------------------------------------------------
@dataclass
class StructureLearningConfig:
    """Settings of structure learning on top of a :class:`~bnc_deploy.train.bnc.TrainConfig`.

    ``candidates``: at most K candidate parents per feature (None: all predecessors).
    ``candidates_file``: an explicit ordering and candidate sets (:func:`read_candidates_file`;
    ``FILE`` or ``FILE#DATASET``) instead of ``order`` and ``candidates``, which must then keep
    their defaults (a non-default value would be silently ignored, so it is refused).
    ``size_penalty``: lambda_MS. ``size_penalty_mode``: "added" (over naive Bayes) or "absolute".
    ``finetune_epochs``: epochs of (quantization-aware, if ``bits``) training of the extracted TAN.
    """

    candidates: int | None = 8
    candidates_file: str | None = None
    size_penalty: float = 1e-3
    size_penalty_mode: str = "added"
    order: str = "identity"
    structure_lr: float = 1e-3
    tau_start: float = 10.0
    tau_end: float = 0.1
    finetune_epochs: int = 0

    def validate(self) -> None:
        if self.candidates is not None and self.candidates < 1:
            raise ConfigError(f"--candidates must be >= 1 (or 0/all for every predecessor), got {self.candidates}")
        if not (self.size_penalty >= 0 and math.isfinite(self.size_penalty)):
            raise ConfigError(f"--size-penalty must be a finite number >= 0, got {self.size_penalty}")
        if self.size_penalty_mode not in ("added", "absolute"):
            raise ConfigError(f"unknown size penalty mode {self.size_penalty_mode!r}: use 'added' or 'absolute'")
        if self.order not in ("identity", "random", "chow-liu"):
            raise ConfigError(f"unknown feature order {self.order!r}: use 'identity', 'random' or 'chow-liu'")
        for name in ("structure_lr", "tau_start", "tau_end"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"--{name.replace('_', '-')} must be a finite number > 0, got {value}")
        if self.candidates_file is not None:
            self._validate_candidates_file()
        if self.finetune_epochs < 0:
            raise ConfigError(f"--finetune-epochs must be >= 0, got {self.finetune_epochs}")

    def _validate_candidates_file(self) -> None:
        """The file exists and ``candidates``/``order`` keep their defaults; the sets themselves are
        checked against the dataset (which this config does not know) by :func:`read_candidates_file`."""
        if not isinstance(self.candidates_file, str) or not self.candidates_file.strip():
            raise ConfigError(f"--candidates-file must name a file, got {self.candidates_file!r}")
        defaults = {f.name: f.default for f in fields(self)}
        for name in ("candidates", "order"):
            value = getattr(self, name)
            if value != defaults[name]:
                raise ConfigError(
                    f"--candidates-file {self.candidates_file} gives the ordering and candidate sets; "
                    f"--{name} {'all' if value is None else value} cannot be given with it"
                )
        path, _ = split_candidates_spec(self.candidates_file)
        if not Path(path).is_file():
            raise ConfigError(f"candidates file {path} does not exist")


def structure_candidates(dataset, config, sl: StructureLearningConfig) -> tuple[np.ndarray, CandidateSets | None]:
    """The (D, J) candidates for ``dataset``, and the :class:`CandidateSets` they came from (or None).

    With ``sl.candidates_file`` the file's sets, as given; else :func:`candidate_parents` of
    :func:`feature_order` (``sl.order``, ``sl.candidates``, seeded by ``config.seed``).
    """
    if sl.candidates_file is not None:
        sets = read_candidates_file(sl.candidates_file, dataset.name, dataset.n_features)
        return sets.array(), sets
    order = feature_order(
        dataset.n_features,
        sl.order,
        seed=config.seed,
        data=(dataset.x_train, dataset.y_train, dataset.cardinalities, dataset.n_classes),
    )
    return candidate_parents(order, sl.candidates, seed=config.seed, cardinalities=dataset.cardinalities), None


def build_structure_model(
    dataset, config, sl: StructureLearningConfig, candidates: np.ndarray | None = None
) -> StructureLearningTAN:
    """The structure-learning model for ``dataset`` (seeded by ``config.seed``); ``candidates``
    (D, J) default to :func:`structure_candidates`."""
    if candidates is None:
        candidates, _ = structure_candidates(dataset, config, sl)
    return StructureLearningTAN(
        dataset.cardinalities,
        dataset.n_classes,
        candidates,
        init=config.init,
        data=(dataset.x_train, dataset.y_train),
        smoothing=config.smoothing,
        generator=torch.Generator().manual_seed(config.seed),
    )


#: The per-epoch series of :func:`fit_structure`'s history, in order.
HISTORY_KEYS = (
    "lr",
    "tau",
    "train_loss",
    "train_error",
    "test_error",
    "expected_added_parameters",
    "n_parameters",
    "n_with_parent",
    "seconds",
)


def fit_structure(model: StructureLearningTAN, dataset, config, sl: StructureLearningConfig) -> dict:
    """Train CPTs (hybrid loss, ``config``'s schedule) and structure logits (own Adam) jointly.

    Returns the per-epoch history: lr, tau, train loss/error (sampled structures), test error
    of the argmax structure, expected added parameters, argmax parameters, features with a parent.
    """
    step, cpt_opt = _structure_step(model, config, sl)
    added = torch.as_tensor(
        candidate_parameter_counts(model.cardinalities, model.candidates, model.n_classes), dtype=torch.float32
    )
    idx_train, y_train = model.flat_indices(dataset.x_train), torch.as_tensor(dataset.y_train, dtype=torch.int64)
    idx_test, y_test = model.flat_indices(dataset.x_test), torch.as_tensor(dataset.y_test, dtype=torch.int64)
    taus = temperatures(config.epochs, sl.tau_start, sl.tau_end)
    history: dict[str, list] = {key: [] for key in HISTORY_KEYS}

    def start_epoch(epoch: int) -> None:
        step.tau = float(taus[epoch - 1])

    def record(stats) -> None:
        if not math.isfinite(stats.train_loss):
            raise FloatingPointError(
                f"structure learning loss became {stats.train_loss} at tau={step.tau:.3g}; try a smaller --lr"
            )
        # Measured before the evaluation below, as this history always has been.
        seconds = stats.seconds()
        _record_epoch(
            history,
            model,
            added,
            idx_test,
            y_test,
            lr=stats.lr,
            tau=taus[stats.epoch - 1],
            loss=stats.train_loss,
            train_error=stats.train_error,
            seconds=seconds,
        )
        if config.progress and stats.epoch % max(1, config.epochs // 10) == 0:
            print(
                f"  epoch {stats.epoch}: loss {history['train_loss'][-1]:.4g}, test error "
                f"{history['test_error'][-1]:.4f}, {history['n_parameters'][-1]} parameters",
                file=sys.stderr,
                flush=True,
            )

    # This trainer reports progress as a line every tenth of the run (as it always has), not as a bar.
    fit_epochs(
        idx_train,
        y_train,
        step=step,
        record=record,
        optimizer=cpt_opt,
        learning_rates=config.learning_rates(),
        batch_size=config.batch_size,
        seed=config.seed,
        start_epoch=start_epoch,
        progress=False,
    )
    return history


def _structure_step(model: StructureLearningTAN, config, sl: StructureLearningConfig):
    """The loop's step for ``model`` (loss, size penalty, both optimizers, seeded Gumbel noise) and
    the CPTs' optimizer, whose rate the loop sets."""
    from bnc_deploy.train.losses import make_loss

    loss_fn = make_loss(
        config.loss, hybrid_lambda=config.hybrid_lambda, hybrid_gamma=config.hybrid_gamma, hybrid_eta=config.hybrid_eta
    )
    counts = torch.as_tensor(
        candidate_parameter_counts(model.cardinalities, model.candidates, model.n_classes, sl.size_penalty_mode),
        dtype=torch.float32,
    )
    # Two optimizers: the CPTs follow the decaying schedule (the loop sets their rate), the
    # structure logits keep a constant one.
    cpt_opt = torch.optim.Adam([model.rho, model.class_rho], lr=config.lr, eps=config.adam_eps, fused=True)
    phi_opt = torch.optim.Adam([model.phi], lr=sl.structure_lr, eps=config.adam_eps)
    step = _StructureStep(
        model,
        loss_fn,
        counts,
        sl.size_penalty,
        (cpt_opt, phi_opt),
        gumbel=torch.Generator().manual_seed(config.seed + 2),
    )
    return step, cpt_opt


class _StructureStep:
    """The loop's step: one update of CPTs and structure logits on a batch, at the epoch's ``tau``."""

    def __init__(self, model, loss_fn, counts, size_penalty: float, optimizers, gumbel: torch.Generator) -> None:
        self.model, self.loss_fn, self.counts, self.size_penalty = model, loss_fn, counts, size_penalty
        self.optimizers, self.gumbel = optimizers, gumbel
        self.tau = float("nan")  # set by the loop's start_epoch

    def __call__(self, indices, labels):
        """Returns (loss value, detached log_joint (n, C)) of one sampled structure."""
        logits = self.model.structure_logits()
        log_joint = self.model(indices, gumbel_softmax_st(logits, self.tau, self.gumbel))
        loss = self.loss_fn(log_joint, labels)
        if self.size_penalty:
            # Expected size under softmax(phi) (not the sample): a smooth, low-variance gradient.
            loss = loss + self.size_penalty * expected_size_penalty(logits, self.counts)
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for optimizer in self.optimizers:
            optimizer.step()
        return loss.item(), log_joint.detach()


@torch.no_grad()
def _record_epoch(history, model, added, idx_test, y_test, *, lr, tau, loss, train_error, seconds) -> None:
    parents = model.parents()
    history["lr"].append(float(lr))
    history["tau"].append(float(tau))
    history["train_loss"].append(float(loss))
    history["train_error"].append(float(train_error))
    history["test_error"].append(float((model.argmax_log_joint(idx_test).argmax(1) != y_test).float().mean()))
    history["expected_added_parameters"].append(float((model.structure_probabilities() * added).sum()))
    history["n_parameters"].append(tan_parameters(model.cardinalities, parents, model.n_classes))
    history["n_with_parent"].append(int(np.sum(parents >= 0)))
    history["seconds"].append(float(seconds))


def train_learned_tan(dataset, config, sl: StructureLearningConfig | None = None):
    """Learn a TAN structure with its CPTs, then freeze the argmax structure into a TAN artifact.

    ``config`` (a :class:`~bnc_deploy.train.bnc.TrainConfig`) gives the loss, schedule, epochs,
    seed and bits. The extracted classifier starts from the jointly trained CPTs; with
    ``sl.finetune_epochs > 0`` it is trained further by the ordinary trainer (quantization-aware
    when ``config.bits`` is set), with 0 a quantized model is the rounded float one. Returns a
    :class:`~bnc_deploy.train.bnc.TrainResult`; the artifact's metadata gains ``structure_learning``
    (settings, candidates, ``candidates_file``: :meth:`.CandidateSets.describe` or None, history).
    """
    sl = sl or StructureLearningConfig()
    sl.validate()
    config.validate()
    if config.model != "tan":
        raise ConfigError("structure learning needs --model tan")
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    candidates, sets = structure_candidates(dataset, config, sl)
    model = build_structure_model(dataset, config, sl, candidates)
    history = fit_structure(model, dataset, config, sl)
    return finish_learned_tan(dataset, config, sl, model, sets, history, started)


def finish_learned_tan(
    dataset, config, sl: StructureLearningConfig, model: StructureLearningTAN, sets, history: dict, started: float
):
    """The trained ``model``'s TAN artifact (fine-tuned when ``sl.finetune_epochs``), as
    :func:`train_learned_tan` returns it: shared with the batched trainer
    (:mod:`bnc_deploy.train.structure_batched`), so both write the same model files.
    ``started``: the ``time.perf_counter()`` the run's seconds count from."""
    from bnc_deploy.train.bnc import train_bnc

    parents = model.parents()
    extracted = model.to_classifier()
    finetune = replace(config, epochs=sl.finetune_epochs, structure="learn")
    result = train_bnc(
        dataset,
        finetune,
        parents=parents,
        structure_source="learned",
        init_rho=(extracted.class_rho.detach(), extracted.rho.detach()),
    )
    probabilities = model.structure_probabilities().detach().numpy()
    result.artifact.metadata["structure_learning"] = {
        "settings": asdict(sl),
        "epochs": config.epochs,
        "candidates": model.candidates.tolist(),
        # Where explicit sets came from (path, dataset entry, sha256 of the file, ordering).
        "candidates_file": None if sets is None else sets.describe(),
        "structure_probabilities": np.round(probabilities, 6).tolist(),
        "naive_bayes_parameters": naive_bayes_parameters(dataset.cardinalities, dataset.n_classes),
        "history": history,
        "seconds": time.perf_counter() - started,
    }
    result.seconds = time.perf_counter() - started
    return result
