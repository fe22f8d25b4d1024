"""Candidate parent sets of TAN structure learning: which features may be each feature's parent.

Generated (:func:`feature_order`, then :func:`candidate_parents`: every predecessor, or a seeded
random subset of them) or read from a file (``--candidates-file``: :func:`read_candidates_file`
returns :class:`CandidateSets`, checked strictly against the dataset). The training that picks
among them is :mod:`bnc_deploy.train.structure_learning`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bnc_deploy.errors import ConfigError
from bnc_deploy.models.structure_learning import NO_PARENT, UNUSED_SLOT


# -- generated candidate sets -----------------------------------------------------------------------
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


# -- explicit orderings and candidate sets (--candidates-file) --------------------------------------
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
