"""Training of differentiable, size-aware TAN structures (paper, Sec. IV): candidate sets, their
costs, the temperature schedule, the epoch loop and the conversion to an ordinary TAN model file.

The model itself (the candidate tables, the straight-through Gumbel-softmax and the expected-size
penalty) is :mod:`bnc_deploy.models.structure_learning`, whose docstring describes the method.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch

from bnc_deploy.errors import ConfigError
from bnc_deploy.models.structure_learning import (
    NO_PARENT,
    UNUSED_SLOT,
    StructureLearningTAN,
    expected_size_penalty,
    gumbel_softmax_st,
)
from bnc_deploy.train.loop import fit_epochs

# -- candidate sets and their costs -----------------------------------------------------------------
def feature_order(n_features: int, how: str = "identity", seed: int = 0, data=None) -> np.ndarray:
    """A fixed ordering of the features, shape (D,).

    ``"identity"``; a seeded ``"random"`` permutation; or ``"chow-liu"``: breadth-first order of
    the Chow-Liu tree (``data = (x, y, cardinalities, n_classes)``), so every Chow-Liu edge points
    from an earlier to a later feature and is among the candidates of "TAN all".
    """
    if how == "identity":
        return np.arange(n_features, dtype=np.int64)
    if how == "random":
        return np.random.default_rng(seed).permutation(n_features).astype(np.int64)
    if how == "chow-liu":
        from bnc_deploy.train.chow_liu import chow_liu_parents

        if data is None:  # a caller's bug (no flag reaches this): plain ValueError
            raise ValueError('order "chow-liu" needs the training data (x, y, cardinalities, n_classes)')
        parents = chow_liu_parents(*data)
        depth = np.zeros(n_features, dtype=np.int64)
        for _ in range(n_features):  # depth in the tree; a tree is at most D deep
            depth = np.where(parents >= 0, depth[np.maximum(parents, 0)] + 1, 0)
        return np.argsort(depth, kind="stable").astype(np.int64)
    raise ConfigError(f"unknown feature order {how!r}: use 'identity', 'random' or 'chow-liu'")


def candidate_parents(order: np.ndarray, max_candidates: int | None = 8, seed: int = 0,
                      cardinalities: np.ndarray | None = None) -> np.ndarray:
    """Candidate parents per feature, shape (D, J) with ``J = 1 + min(K, D - 1)``.

    Row ``i`` belongs to feature ``i`` (not to its position). Slot 0 is :data:`NO_PARENT`; slots
    ``1..`` hold feature indices that precede ``i`` in ``order`` ("TAN all" when
    ``max_candidates`` is None, else a seeded random subset of at most K predecessors, "TAN
    subset"), ascending; unused slots are :data:`UNUSED_SLOT`. The first feature has none.
    With ``cardinalities``, constant features (one value) are neither parents nor children:
    conditioning on a constant is naive Bayes under another name (and costs nothing, so the size
    penalty could not tell the two apart), and a constant child has nothing to gain.
    """
    order = np.asarray(order, dtype=np.int64)
    d = order.shape[0]
    if sorted(order.tolist()) != list(range(d)):  # a caller's bug: plain ValueError
        raise ValueError(f"order must be a permutation of 0..{d - 1}")
    if max_candidates is not None and max_candidates < 1:
        raise ConfigError(f"max_candidates must be >= 1 or None (all predecessors), got {max_candidates}")
    k = d - 1 if max_candidates is None else min(max_candidates, max(d - 1, 0))
    position = np.empty(d, dtype=np.int64)
    position[order] = np.arange(d)
    is_predecessor = position[None, :] < position[:, None]                      # (D, D): j before i
    if cardinalities is not None:
        informative = np.asarray(cardinalities) > 1
        is_predecessor &= informative[None, :] & informative[:, None]
    # Random keys for predecessors, +inf elsewhere; the K smallest keys are a uniform subset.
    keys = np.where(is_predecessor, np.random.default_rng(seed).random((d, d)), np.inf)
    chosen = np.argsort(keys, axis=1, kind="stable")[:, :k]                      # (D, k) feature ids
    # Valid ids first (ascending), non-predecessors (fewer than k exist) last, then marked unused.
    chosen = np.sort(np.where(np.take_along_axis(is_predecessor, chosen, axis=1), chosen, d + chosen), axis=1)
    slots = np.where(chosen < d, chosen, UNUSED_SLOT)
    return np.concatenate([np.full((d, 1), NO_PARENT, dtype=np.int64), slots.astype(np.int64)], axis=1)


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


def candidate_parameter_counts(cardinalities: np.ndarray, candidates: np.ndarray, n_classes: int,
                               mode: str = "added") -> np.ndarray:
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
    own = card[:, None] * parent_card * n_classes                                # (D, J)
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
    ``size_penalty``: lambda_MS. ``size_penalty_mode``: "added" (over naive Bayes) or "absolute".
    ``finetune_epochs``: epochs of (quantization-aware, if ``bits``) training of the extracted TAN.
    """

    candidates: int | None = 8
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
        if not (self.structure_lr > 0 and self.tau_start > 0 and self.tau_end > 0):
            raise ConfigError("structure learning rate and temperatures must be > 0")
        if self.finetune_epochs < 0:
            raise ConfigError(f"--finetune-epochs must be >= 0, got {self.finetune_epochs}")


def build_structure_model(dataset, config, sl: StructureLearningConfig) -> StructureLearningTAN:
    """The structure-learning model for ``dataset`` (seeded by ``config.seed``)."""
    order = feature_order(dataset.n_features, sl.order, seed=config.seed,
                          data=(dataset.x_train, dataset.y_train, dataset.cardinalities, dataset.n_classes))
    candidates = candidate_parents(order, sl.candidates, seed=config.seed, cardinalities=dataset.cardinalities)
    return StructureLearningTAN(dataset.cardinalities, dataset.n_classes, candidates, init=config.init,
                                data=(dataset.x_train, dataset.y_train), smoothing=config.smoothing,
                                generator=torch.Generator().manual_seed(config.seed))


def fit_structure(model: StructureLearningTAN, dataset, config, sl: StructureLearningConfig) -> dict:
    """Train CPTs (hybrid loss, ``config``'s schedule) and structure logits (own Adam) jointly.

    Returns the per-epoch history: lr, tau, train loss/error (sampled structures), test error
    of the argmax structure, expected added parameters, argmax parameters, features with a parent.
    """
    from bnc_deploy.train.losses import make_loss

    loss_fn = make_loss(config.loss, hybrid_lambda=config.hybrid_lambda, hybrid_gamma=config.hybrid_gamma,
                        hybrid_eta=config.hybrid_eta)
    counts = torch.as_tensor(candidate_parameter_counts(model.cardinalities, model.candidates, model.n_classes,
                                                        sl.size_penalty_mode), dtype=torch.float32)
    added = torch.as_tensor(candidate_parameter_counts(model.cardinalities, model.candidates, model.n_classes),
                            dtype=torch.float32)
    idx_train, y_train = model.flat_indices(dataset.x_train), torch.as_tensor(dataset.y_train, dtype=torch.int64)
    idx_test, y_test = model.flat_indices(dataset.x_test), torch.as_tensor(dataset.y_test, dtype=torch.int64)
    # Two optimizers: the CPTs follow the decaying schedule (the loop sets their rate), the
    # structure logits keep a constant one.
    cpt_opt = torch.optim.Adam([model.rho, model.class_rho], lr=config.lr, eps=config.adam_eps, fused=True)
    phi_opt = torch.optim.Adam([model.phi], lr=sl.structure_lr, eps=config.adam_eps)
    step = _StructureStep(model, loss_fn, counts, sl.size_penalty, (cpt_opt, phi_opt),
                          gumbel=torch.Generator().manual_seed(config.seed + 2))
    taus = temperatures(config.epochs, sl.tau_start, sl.tau_end)
    history = {key: [] for key in ("lr", "tau", "train_loss", "train_error", "test_error",
                                   "expected_added_parameters", "n_parameters", "n_with_parent", "seconds")}

    def start_epoch(epoch: int) -> None:
        step.tau = float(taus[epoch - 1])

    def record(stats) -> None:
        if not math.isfinite(stats.train_loss):
            raise FloatingPointError(f"structure learning loss became {stats.train_loss} at tau={step.tau:.3g}; "
                                     "try a smaller --lr")
        # Measured before the evaluation below, as this history always has been.
        seconds = stats.seconds()
        _record_epoch(history, model, added, idx_test, y_test, lr=stats.lr, tau=taus[stats.epoch - 1],
                      loss=stats.train_loss, train_error=stats.train_error, seconds=seconds)
        if config.progress and stats.epoch % max(1, config.epochs // 10) == 0:
            print(f"  epoch {stats.epoch}: loss {history['train_loss'][-1]:.4g}, test error "
                  f"{history['test_error'][-1]:.4f}, {history['n_parameters'][-1]} parameters",
                  file=sys.stderr, flush=True)

    # This trainer reports progress as a line every tenth of the run (as it always has), not as a bar.
    fit_epochs(idx_train, y_train, step=step, record=record, optimizer=cpt_opt,
               learning_rates=config.learning_rates(), batch_size=config.batch_size, seed=config.seed,
               start_epoch=start_epoch, progress=False)
    return history


class _StructureStep:
    """The loop's step: one update of CPTs and structure logits on a batch, at the epoch's ``tau``."""

    def __init__(self, model, loss_fn, counts, size_penalty: float, optimizers, gumbel: torch.Generator) -> None:
        self.model, self.loss_fn, self.counts, self.size_penalty = model, loss_fn, counts, size_penalty
        self.optimizers, self.gumbel = optimizers, gumbel
        self.tau = float("nan")   # set by the loop's start_epoch

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
    :class:`~bnc_deploy.train.bnc.TrainResult`; the artifact's metadata gains ``structure_learning``.
    """
    from bnc_deploy.train.bnc import train_bnc

    sl = sl or StructureLearningConfig()
    sl.validate()
    config.validate()
    if config.model != "tan":
        raise ConfigError("structure learning needs --model tan")
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    model = build_structure_model(dataset, config, sl)
    history = fit_structure(model, dataset, config, sl)
    parents = model.parents()
    extracted = model.to_classifier()
    finetune = replace(config, epochs=sl.finetune_epochs, structure="learn")
    result = train_bnc(dataset, finetune, parents=parents, structure_source="learned",
                       init_rho=(extracted.class_rho.detach(), extracted.rho.detach()))
    probabilities = model.structure_probabilities().detach().numpy()
    result.artifact.metadata["structure_learning"] = {
        "settings": asdict(sl),
        "epochs": config.epochs,
        "candidates": model.candidates.tolist(),
        "structure_probabilities": np.round(probabilities, 6).tolist(),
        "naive_bayes_parameters": naive_bayes_parameters(dataset.cardinalities, dataset.n_classes),
        "history": history,
        "seconds": time.perf_counter() - started,
    }
    result.seconds = time.perf_counter() - started
    return result
