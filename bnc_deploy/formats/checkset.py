"""The small check set stored in every exported file's metadata (key ``check``), and its comparison.

A server (``bnc-serve``) calls a model *ready* only after the loaded file reproduced this check
set, so "ready" means "loaded and computes what the model file computes", not "the process
started". The entry is built from the artifact by the shared metadata builders
(:func:`bnc_deploy.formats.bnc.export_metadata`, :func:`bnc_deploy.formats.dnn.dnn_export_metadata`),
so every exporter stores it without edits. It is kept small (it is in every file)::

    "check": {"rows": [[...], ...],      # up to CHECK_ROWS input rows, in the file's input form:
                                          # integer codes, or float32 raw values (input = "raw")
              "labels": [...],            # the reference predictor's labels of those rows
              "scores_sha256": "..."}     # SHA-256 of the reference scores as little-endian float32
                                          # (C order, rows x classes)

Which rows: a file whose metadata says ``exact`` stores the first rows of the artifact's check set
(else seeded random valid rows; the first two are all-zero and all-maximum). A file that is not
exact by design (float tables, int8 ReLU networks) stores the rows with the largest margin
between the reference's best and second-best score among the verification rows (below), so that
the tolerated arithmetic differences cannot flip a label.

Verification rows (:func:`verification_rows`), the one rule for the rows an export is run on
against the reference, wherever that happens (``bnc_deploy.verify``, the Cortex-M and Edge TPU
target checks, the candidates above): the given rows, else the artifact's check set, then
:data:`N_RANDOM_ROWS` seeded random valid rows (:func:`random_rows`, seed :data:`RANDOM_ROWS_SEED`).

Comparison (:func:`compare_check`): an exact file must reproduce every label and the scores' hash
(identical float32 scores); a file that is not exact must reproduce every label and give finite
scores (the tolerance: scores are not compared, as ``bnc_deploy.verify`` compares labels only for
such files). Raw-input rows are the upper bin edges the verifier also feeds
(:func:`bnc_deploy.formats.bnc.raw_representatives`); their expected labels are the reference's
on what its discretizer makes of them.

Plain NumPy/JSON. The reference predictor is imported lazily (it reads artifacts only).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypedDict, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from bnc_deploy.errors import MetadataError
from bnc_deploy.validation import check_codes, random_valid_codes

#: Metadata key of the entry.
CHECK_KEY = "check"
#: Rows stored per file (each file carries them, so few).
CHECK_ROWS = 8
#: Seeded random valid rows appended to the given rows or the check set (:func:`verification_rows`);
#: a file that is not exact picks its stored check rows among them.
N_RANDOM_ROWS = 256
#: Seed of those rows (one seed everywhere, so every check runs the same rows).
RANDOM_ROWS_SEED = 0


class HasCardinalities(Protocol):
    """A feature space's ``cardinalities`` (an artifact, a loaded runtime): what :func:`random_rows` needs."""

    @property
    def cardinalities(self) -> NDArray[np.int64]: ...


class FeatureSpace(HasCardinalities, Protocol):
    """What :func:`verification_rows` needs of a model: an artifact of any kind.

    It also reads ``check_x`` and ``feature_names`` where the model has them."""

    @property
    def n_features(self) -> int: ...


#: The model a check entry is built for (passed on to ``raw_values``).
M = TypeVar("M", bound=FeatureSpace)


class CheckEntry(TypedDict):
    """The ``check`` metadata entry (module docstring)."""

    rows: list[list[int]] | list[list[float]]
    labels: list[int]
    scores_sha256: str


def scores_digest(scores: ArrayLike) -> str:
    """SHA-256 hex of ``scores`` (n, C) as little-endian float32 in C order."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(scores, dtype="<f4")).tobytes()).hexdigest()


def random_rows(model: HasCardinalities, n: int = N_RANDOM_ROWS, seed: int = RANDOM_ROWS_SEED) -> NDArray[np.int64]:
    """``n`` seeded random valid code rows of ``model`` (anything with ``cardinalities``: an
    artifact, a loaded runtime), int64 (n, D); the first two are all-zero and all-maximum."""
    return random_valid_codes(model.cardinalities, n, seed)


def verification_rows(
    artifact: FeatureSpace,
    rows: ArrayLike | None = None,
    n_random: int = N_RANDOM_ROWS,
    seed: int = RANDOM_ROWS_SEED,
    *,
    where: str | None = None,
) -> tuple[NDArray[np.int64], int]:
    """``(x (n, D) int64, n_given)``: ``rows`` (else the artifact's check set ``check_x``, if it has
    one), then ``n_random`` seeded :func:`random_rows`. ``n_given`` counts the rows before them.

    An empty ``rows`` array means "no leading rows" (not the check set). ``where``: check the
    leading rows first (:func:`~bnc_deploy.validation.check_codes`: shape, integer dtype, every code
    in range; InputError naming ``where``); without it they are only cast to int64.
    """
    given = rows if rows is not None else getattr(artifact, "check_x", None)
    parts: list[NDArray[np.int64]] = []
    if given is not None and where is not None:
        parts.append(check_codes(given, artifact.cardinalities, getattr(artifact, "feature_names", None), where=where))
    elif given is not None:
        parts.append(np.asarray(given, dtype=np.int64).reshape(-1, artifact.n_features))
    n_given = int(parts[0].shape[0]) if parts else 0
    parts.append(random_rows(artifact, n_random, seed))
    return np.concatenate(parts), n_given


def check_entry(
    artifact: M,
    *,
    exact: bool,
    raw_values: Callable[[M, NDArray[np.int64]], NDArray[np.float32]] | None = None,
    n_rows: int = CHECK_ROWS,
) -> CheckEntry:
    """The ``check`` metadata entry of ``artifact`` exported with the given exactness.

    ``raw_values``: for a raw-input file, ``f(artifact, codes) -> float32 raw values`` (the BN
    contract's :func:`~bnc_deploy.formats.bnc.raw_representatives`, passed in to keep this module
    below ``formats.bnc``); None for files that take codes.
    """
    from bnc_deploy.reference import reference_predictor  # lazy: formats stays a light import

    reference = reference_predictor(artifact)
    codes, _ = verification_rows(artifact, n_random=n_rows if exact else N_RANDOM_ROWS)
    fed: NDArray[np.int64] | NDArray[np.float32] = codes
    if raw_values is not None:
        fed = raw_values(artifact, codes)
        codes = reference.discretize(fed.astype(np.float64))
    scores = reference.log_joint(codes)
    if exact:
        pick = np.arange(min(n_rows, len(codes)))
    else:
        # Largest best-minus-second-best margin first (stable, so the choice is reproducible).
        top2 = np.sort(scores, axis=1)[:, -2:] if scores.shape[1] > 1 else np.zeros((len(scores), 2))
        margin = top2[:, 1] - top2[:, 0]
        pick = np.sort(np.argsort(-margin, kind="stable")[:n_rows])
    fed, scores = fed[pick], scores[pick]
    rows = fed.astype(np.float32).tolist() if raw_values is not None else fed.astype(np.int64).tolist()
    return {"rows": rows, "labels": [int(v) for v in np.argmax(scores, axis=1)], "scores_sha256": scores_digest(scores)}


def check_inputs(meta: Mapping[str, Any], where: str = "model") -> NDArray[np.int64] | NDArray[np.float32] | None:
    """The stored check rows as the array to feed (int64 codes, or float32 raw values), or None
    when the file stores no check set (files exported before it existed).

    Raises MetadataError naming ``where`` when the entry is malformed.
    """
    entry = meta.get(CHECK_KEY)
    if entry is None:
        return None
    try:
        rows = entry["rows"]
        labels = entry["labels"]
        digest = entry["scores_sha256"]
        x: NDArray[np.int64] | NDArray[np.float32]
        x = np.asarray(rows, dtype=np.float32) if meta.get("input") == "raw" else np.asarray(rows, dtype=np.int64)
        d = len(meta["cardinalities"])
        ok = x.ndim == 2 and x.shape[1] == d and len(labels) == x.shape[0] and isinstance(digest, str)
    except (KeyError, TypeError, ValueError, OverflowError):
        ok = False
    if not ok or x.shape[0] == 0:
        raise MetadataError(f"{where}: malformed '{CHECK_KEY}' entry in the file's metadata")
    return x


def compare_check(meta: Mapping[str, Any], labels: ArrayLike, scores: ArrayLike) -> str | None:
    """None when ``labels`` (n,) and ``scores`` (n, C) reproduce the stored check set, else a
    one-line reason (the first differing row; exact files also compare the scores' hash)."""
    entry = meta[CHECK_KEY]
    expected = np.asarray(entry["labels"], dtype=np.int64)
    labels = np.asarray(labels).reshape(-1)
    if labels.shape != expected.shape:
        return f"check set: {labels.shape[0]} labels for {expected.shape[0]} rows"
    differ = np.flatnonzero(labels != expected)
    if differ.size:
        i = int(differ[0])
        return (
            f"check set: row {i} gave label {int(labels[i])}, the model file's reference says {int(expected[i])} "
            f"({differ.size} of {expected.size} rows differ)"
        )
    scores = np.asarray(scores)
    if meta.get("exact"):
        if scores_digest(scores) != entry["scores_sha256"]:
            return "check set: scores differ from the model file's reference (the file promises exact scores)"
    elif not np.all(np.isfinite(scores)):
        return "check set: non-finite scores on valid rows"
    return None
