"""Training of differentiable, size-aware TAN structures (paper, Sec. IV): candidate sets, their
costs, the temperature schedule, the epoch loop and the conversion to an ordinary TAN model file.

The model itself (the candidate tables, the straight-through Gumbel-softmax and the expected-size
penalty) is :mod:`bnc_deploy.models.structure_learning`, whose docstring describes the method.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

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


def candidate_parents(
    order: np.ndarray, max_candidates: int | None = 8, seed: int = 0, cardinalities: np.ndarray | None = None
) -> np.ndarray:
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
    is_predecessor = position[None, :] < position[:, None]  # (D, D): j before i
    if cardinalities is not None:
        informative = np.asarray(cardinalities) > 1
        is_predecessor &= informative[None, :] & informative[:, None]
    # Random keys for predecessors, +inf elsewhere; the K smallest keys are a uniform subset.
    keys = np.where(is_predecessor, np.random.default_rng(seed).random((d, d)), np.inf)
    chosen = np.argsort(keys, axis=1, kind="stable")[:, :k]  # (D, k) feature ids
    # Valid ids first (ascending), non-predecessors (fewer than k exist) last, then marked unused.
    chosen = np.sort(np.where(np.take_along_axis(is_predecessor, chosen, axis=1), chosen, d + chosen), axis=1)
    slots = np.where(chosen < d, chosen, UNUSED_SLOT)
    return np.concatenate([np.full((d, 1), NO_PARENT, dtype=np.int64), slots.astype(np.int64)], axis=1)


# -- explicit orderings and candidate sets (--candidates-file) ------------------------------------------
@dataclass(frozen=True)
class CandidateSets:
    """A fixed ordering and candidate parent sets read from a file by :func:`read_candidates_file`.

    ``ordering[p]``: the feature at position p (a permutation of 0..D-1). ``parents[f]``: the
    candidate feature parents of feature f, ascending (``-1``, "class only", is dropped: slot 0 of
    our layout is always "no parent"). ``entry``: the dataset entry of a settings file, None for a
    plain file. ``sha256``: of the file's bytes (what a resumed sweep compares, not the path).
    """

    path: str
    entry: str | None
    sha256: str
    ordering: tuple
    parents: tuple

    def array(self) -> np.ndarray:
        """The (D, J) candidates of :class:`StructureLearningTAN`: slot 0 :data:`NO_PARENT`, then
        the feature candidates ascending, padded with :data:`UNUSED_SLOT`; ``J = 1 + max_f |parents[f]|``."""
        d = len(self.parents)
        j = 1 + max((len(p) for p in self.parents), default=0)
        out = np.full((d, j), UNUSED_SLOT, dtype=np.int64)
        out[:, 0] = NO_PARENT
        for f, parents in enumerate(self.parents):
            out[f, 1 : 1 + len(parents)] = parents
        return out

    def describe(self) -> dict:
        """JSON facts for metadata: where the sets came from, their digest, and the ordering."""
        return {"path": self.path, "entry": self.entry, "sha256": self.sha256, "ordering": list(self.ordering)}


def split_candidates_spec(spec: str) -> tuple[str, str | None]:
    """``"FILE#NAME"`` -> ``(FILE, NAME)``; ``"FILE"`` -> ``(FILE, None)``.

    A ``#`` is a separator only when the whole text is not itself an existing file (a file name
    may contain ``#``).
    """
    spec = str(spec)
    if "#" in spec and not Path(spec).is_file():
        path, entry = spec.rsplit("#", 1)
        if not entry.strip():
            raise ConfigError(f"--candidates-file {spec}: no dataset name after '#'")
        return path, entry.strip()
    return spec, None


def settings_entry_name(dataset_name: str) -> str:
    """The entry of the authors' settings file that a loaded dataset picks: its name without ``-raw``
    (``letter-raw`` has ``letter``'s features, undiscretized)."""
    return dataset_name.removesuffix("-raw")


def read_candidates_file(spec: str, dataset_name: str, n_features: int) -> CandidateSets:
    """Read and strictly check an ordering with candidate parent sets (``--candidates-file``).

    ``spec`` is a JSON file in one of two forms:

    * ``{"ordering": [...], "candidates": [[...], ...]}``: ``ordering[p]`` is the feature at
      position p; ``candidates[f]`` lists the candidate parents of feature f (original indices;
      ``-1`` = class only, optional, as "no parent" is always slot 0). Other keys are ignored.
    * the authors' settings file (``pgm2020_tan_subset_settings.json``: a ``settings`` list of
      entries with ``dataset``, ``ordering`` and ``candidates_original``): the entry whose
      ``dataset`` is :func:`settings_entry_name` of ``dataset_name``, or the one named by a
      ``FILE#NAME`` suffix.

    The sets are kept as given. In particular constant features (one value) stay candidates and
    children, unlike :func:`candidate_parents` without a file: the authors' sets include them
    (letter's feature 1), and a constant parent costs nothing and changes nothing but which
    table the child trains, so it cannot make the model larger.

    ConfigError naming the file (and entry), the feature and the value unless: ``ordering`` is a
    permutation of 0..D-1 (``D = n_features``), there is one candidate list per feature, every
    candidate is -1 or a feature index in range, not the feature itself, not repeated, and comes
    before its child in the ordering (so every structure is acyclic).
    """
    path, entry = split_candidates_spec(spec)
    where = f"candidates file {path}"
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{where} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where}: not a JSON file ({exc})") from None
    if isinstance(data, dict) and "settings" in data:
        settings = data["settings"]
        if not isinstance(settings, list) or not all(isinstance(s, dict) for s in settings):
            raise ConfigError(f"{where}: 'settings' must be a list of per-dataset objects")
        names = [str(s.get("dataset")) for s in settings]
        wanted = entry if entry is not None else settings_entry_name(dataset_name)
        if wanted not in names:
            if entry is not None:
                raise ConfigError(
                    f"{where} has no settings for dataset {entry!r} (named by #{entry}); it has {', '.join(names)}"
                )
            raise ConfigError(
                f"{where} has no settings for the loaded dataset {dataset_name!r} (entry {wanted!r}); "
                f"it has {', '.join(names)}; name an entry with {path}#NAME"
            )
        setting = settings[names.index(wanted)]
        where, entry = f"{where}#{wanted}", wanted
        if "ordering" not in setting or "candidates_original" not in setting:
            raise ConfigError(f"{where}: the entry needs 'ordering' and 'candidates_original'")
        ordering, candidates = setting["ordering"], setting["candidates_original"]
    elif isinstance(data, dict) and "ordering" in data and "candidates" in data:
        if entry is not None:
            raise ConfigError(
                f"{where}: '#{entry}' picks a dataset of a settings file (one with a 'settings' "
                "list); this file holds a single ordering"
            )
        ordering, candidates = data["ordering"], data["candidates"]
    else:
        raise ConfigError(
            f"{where}: expected a JSON object with 'ordering' and 'candidates' (per feature, "
            "-1 = class only), or the authors' settings file (a 'settings' list of datasets)"
        )
    order = _check_ordering(ordering, n_features, where, dataset_name)
    parents = _check_candidates(candidates, order, where, dataset_name)
    return CandidateSets(
        path=str(path), entry=entry, sha256=hashlib.sha256(raw).hexdigest(), ordering=tuple(order), parents=parents
    )


def _is_index(value) -> bool:
    # JSON true/false are not indices, although Python's bool is an int.
    return isinstance(value, int) and not isinstance(value, bool)


def _check_ordering(ordering, d: int, where: str, dataset_name: str) -> list[int]:
    if not isinstance(ordering, list) or not all(_is_index(v) for v in ordering):
        raise ConfigError(f"{where}: ordering must be a list of feature indices, got {str(ordering)[:80]}")
    if len(ordering) != d:
        raise ConfigError(f"{where}: ordering has {len(ordering)} entries, but {dataset_name} has {d} features")
    first_at: dict[int, int] = {}
    for p, f in enumerate(ordering):
        if not 0 <= f < d:
            raise ConfigError(f"{where}: ordering position {p} is feature {f}, outside 0..{d - 1}")
        if f in first_at:
            raise ConfigError(
                f"{where}: ordering is not a permutation of 0..{d - 1}: feature {f} is at positions "
                f"{first_at[f]} and {p}"
            )
        first_at[f] = p
    return list(ordering)


def _check_candidates(candidates, order: list[int], where: str, dataset_name: str) -> tuple:
    d = len(order)
    if not isinstance(candidates, list) or not all(isinstance(c, list) for c in candidates):
        raise ConfigError(f"{where}: candidates must be a list with one list of parents per feature")
    if len(candidates) != d:
        raise ConfigError(
            f"{where}: candidates has {len(candidates)} lists, but {dataset_name} has {d} features "
            "(one list per feature, by original index)"
        )
    position = {f: p for p, f in enumerate(order)}
    parents = []
    for f, given in enumerate(candidates):
        seen = set()
        for v in given:
            if not _is_index(v):
                raise ConfigError(f"{where}: feature {f}: candidate {v!r} is not a feature index (-1 = class only)")
            if v in seen:
                raise ConfigError(f"{where}: feature {f}: candidate {v} is listed twice")
            seen.add(v)
            if v == NO_PARENT:
                continue
            if not 0 <= v < d:
                raise ConfigError(f"{where}: feature {f}: candidate {v} is outside -1..{d - 1} (-1 = class only)")
            if v == f:
                raise ConfigError(f"{where}: feature {f}: candidate {v} is the feature itself")
            if position[v] > position[f]:
                raise ConfigError(
                    f"{where}: feature {f}: candidate {v} comes after it in the ordering (position "
                    f"{position[v]} > {position[f]}); a parent must precede its child, so that "
                    "every structure is acyclic"
                )
        parents.append(tuple(sorted(seen - {NO_PARENT})))
    return tuple(parents)


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


def fit_structure(model: StructureLearningTAN, dataset, config, sl: StructureLearningConfig) -> dict:
    """Train CPTs (hybrid loss, ``config``'s schedule) and structure logits (own Adam) jointly.

    Returns the per-epoch history: lr, tau, train loss/error (sampled structures), test error
    of the argmax structure, expected added parameters, argmax parameters, features with a parent.
    """
    from bnc_deploy.train.losses import make_loss

    loss_fn = make_loss(
        config.loss, hybrid_lambda=config.hybrid_lambda, hybrid_gamma=config.hybrid_gamma, hybrid_eta=config.hybrid_eta
    )
    counts = torch.as_tensor(
        candidate_parameter_counts(model.cardinalities, model.candidates, model.n_classes, sl.size_penalty_mode),
        dtype=torch.float32,
    )
    added = torch.as_tensor(
        candidate_parameter_counts(model.cardinalities, model.candidates, model.n_classes), dtype=torch.float32
    )
    idx_train, y_train = model.flat_indices(dataset.x_train), torch.as_tensor(dataset.y_train, dtype=torch.int64)
    idx_test, y_test = model.flat_indices(dataset.x_test), torch.as_tensor(dataset.y_test, dtype=torch.int64)
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
    taus = temperatures(config.epochs, sl.tau_start, sl.tau_end)
    history = {
        key: []
        for key in (
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
    }

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
    (settings, candidates, ``candidates_file``: :meth:`CandidateSets.describe` or None, history).
    """
    from bnc_deploy.train.bnc import train_bnc

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
