"""The torch model of differentiable, size-aware TAN structure learning (paper, Sec. IV).

The trainer, candidate sets and schedules are in :mod:`bnc_deploy.train.structure_learning`.


A fixed feature ordering makes every structure acyclic: feature ``i`` may only take a parent that
comes before it. Each feature has ``J = K + 1`` candidate *slots*: slot 0 is "no parent" (class
only, a ``(|X_i|, C)`` table), slots ``1..`` hold candidate parents ``j`` (a ``(|X_j|, |X_i|, C)``
table each). All candidate tables live in ONE tensor ``rho`` (rows of ``(K, C)``, see
:class:`StructureLearningTAN`) and are trained jointly. The structure is a one-hot ``s_i`` over the slots of feature
``i``::

    log p(c, x) = log p(c) + sum_i sum_j s_ij * log p_j(x_i | x_pa_j, c)

Each training step samples ``s`` with the straight-through Gumbel-softmax from structure logits
``phi`` (D, J) (forward: one-hot argmax; backward: gradient of the tempered softmax), and adds
the expected model size ``lambda_MS * sum_ij softmax(phi_i)_j * n_ij`` to the hybrid loss. The
forward pass is ONE log-softmax over ``rho`` and ONE gather over flat indices
``(n, D * J)`` precomputed per data set, weighted per (feature, slot) by ``s``: no Python loop
over features or candidates. After training the argmax structure is copied into an ordinary
:class:`~bnc_deploy.models.bnc.BayesNetClassifier` (see :meth:`StructureLearningTAN.to_classifier`),
so exporters, the reference predictor and quantization-aware fine-tuning all apply unchanged.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bnc_deploy.models.bnc import PAD, BayesNetClassifier

#: ``candidates`` entry of slot 0: the class is the only parent (naive Bayes for that feature).
NO_PARENT = -1
#: ``candidates`` entry of an unused slot (a feature with fewer predecessors than K).
UNUSED_SLOT = -2
#: Keeps ``log(-log(u))`` finite for u in {0, 1}, as in the reference implementation.
_GUMBEL_EPS = 1e-6


# -- sampling and penalty ---------------------------------------------------------------------------
def gumbel_softmax_st(logits: torch.Tensor, tau: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Straight-through Gumbel-softmax over the last axis.

    logits (..., J), ``-inf`` for impossible entries. Returns a one-hot tensor of the same shape
    whose VALUE is ``onehot(argmax(logits + g))`` and whose GRADIENT is that of
    ``softmax((logits + g) / tau)``, with Gumbel noise ``g = -log(-log(u + 1e-6) + 1e-6)``.
    """
    if not tau > 0:
        raise ValueError(f"Gumbel-softmax temperature must be > 0, got {tau}")
    u = torch.rand(logits.shape, generator=generator, dtype=logits.dtype)
    gumbel = -torch.log(-torch.log(u + _GUMBEL_EPS) + _GUMBEL_EPS)
    soft = torch.softmax((logits + gumbel) / tau, dim=-1)
    hard = torch.zeros_like(soft).scatter_(-1, soft.argmax(dim=-1, keepdim=True), 1.0)
    # hard + (soft - soft.detach()): forward value hard, backward identity onto soft.
    return hard + (soft - soft.detach())


def expected_size_penalty(logits: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``sum_i sum_j softmax(logits_i)_j * counts_ij`` (a scalar); logits and counts (D, J)."""
    return (torch.softmax(logits, dim=-1) * counts).sum()


# -- the model --------------------------------------------------------------------------------------
class CandidateLogJoint(torch.autograd.Function):
    """``log p(c, x)`` (n, C) of a weighted structure, with a closed-form, sparse backward.

    Inputs: ``rho`` (R, K, C) candidate rows, ``class_rho`` (C,), ``s`` (M,) slot weights
    (``M = D * J``), ``indices`` (n, M) int64 into ``rho.reshape(-1, C)``::

        theta = log_softmax(rho, dim=1);  G[m, n] = theta.flat[indices[n, m]]      # (M, n, C)
        log_joint[n] = log_softmax(class_rho) + sum_m s[m] * G[n, m]

    Why hand-written: autograd's ``embedding_bag`` backward and the full-table log-softmax
    backward took most of the step time; here the table gradient only touches the rows of
    slots with ``s != 0`` (one per feature for a sampled structure), and ``ds`` is one product.
    """

    @staticmethod
    def forward(ctx, rho, class_rho, s, indices):
        n_classes = rho.shape[-1]
        theta = torch.log_softmax(rho, dim=1)
        class_theta = torch.log_softmax(class_rho, dim=0)
        n = indices.shape[0]
        # Gather slot-major, (M, n, C): then the s-weighted sum and its gradient are plain
        # matrix-vector products on a contiguous (M, n*C) view, with no permute copies.
        gathered = nn.functional.embedding(indices.T, theta.view(-1, n_classes)).view(s.shape[0], -1)
        ctx.save_for_backward(theta, class_theta, gathered, s, indices)
        return torch.matmul(s, gathered).view(n, n_classes) + class_theta

    @staticmethod
    def backward(ctx, grad):
        theta, class_theta, gathered, s, indices = ctx.saved_tensors
        n_rows, k_max, n_classes = theta.shape
        grad_s = torch.mv(gathered, grad.reshape(-1))
        # Table gradient: only slots with s != 0 were used, so only their rows receive gradient.
        active = torch.nonzero(s).squeeze(1)
        entries = indices[:, active].reshape(-1)  # (n * |active|,)
        contrib = (grad[:, None, :] * s[active][None, :, None]).reshape(-1, n_classes)
        grad_theta = torch.zeros(n_rows * k_max, n_classes, dtype=grad.dtype).index_add_(0, entries, contrib)
        grad_theta = grad_theta.view(n_rows, k_max, n_classes)
        # log_softmax backward (g - softmax * sum_k g) on the touched rows only.
        rows = torch.unique(entries // k_max)
        g = grad_theta[rows]
        grad_rho = torch.zeros_like(theta)
        grad_rho[rows] = g - theta[rows].exp() * g.sum(dim=1, keepdim=True)
        grad_class = grad.sum(dim=0)
        grad_class_rho = grad_class - class_theta.exp() * grad_class.sum()
        return grad_rho, grad_class_rho, grad_s, None


class StructureLearningTAN(nn.Module):
    """All candidate CPTs of a TAN plus structure logits, trained jointly.

    Parameters
    ----------
    cardinalities : array (D,) of ints >= 1
    n_classes : int >= 2
    candidates : array (D, J) from :func:`candidate_parents`
    init : "uniform" (rho ~ U(-0.1, 0.1), the paper's) or "ml" (log counts + smoothing, every slot)
    data : (x, y) training codes for ``init="ml"``
    smoothing : pseudo-count for ``init="ml"``
    generator : torch.Generator for the uniform initialisation

    Layout (memory-aware): a padded ``(D, J, P, K, C)`` tensor would waste most of its rows (the
    no-parent slot needs one parent row, not ``P``; unused slots none), so candidate tables are
    stacked as ROWS: slot (i, j) owns ``|X_j|`` consecutive rows (1 for no parent) starting at
    ``row_offsets[i, j]``; row ``r`` is ``log p(X_i = . | x_j, c)`` over ``K = max |X_i|`` values
    (entries ``k >= |X_i|`` held at a very negative value). Attributes: ``rho`` (R, K, C),
    ``class_rho`` (C,), ``phi`` (D, J) (finite; unused slots are masked to ``-inf`` by
    :meth:`structure_logits`).
    """

    def __init__(
        self,
        cardinalities,
        n_classes: int,
        candidates,
        init: str = "uniform",
        data=None,
        smoothing: float = 1.0,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        cardinalities = np.asarray(cardinalities, dtype=np.int64)
        candidates = np.asarray(candidates, dtype=np.int64)
        d = cardinalities.shape[0]
        if n_classes < 2:
            raise ValueError(f"a classifier needs at least 2 classes, got {n_classes}")
        if candidates.ndim != 2 or candidates.shape[0] != d or not np.all(candidates[:, 0] == NO_PARENT):
            raise ValueError(f"candidates must have shape ({d}, J) with slot 0 = {NO_PARENT} (no parent)")
        if (
            np.any(candidates[:, 1:] >= d)
            or np.any(candidates[:, 1:] == np.arange(d)[:, None])
            or np.any(candidates[:, 1:] < UNUSED_SLOT)
        ):
            raise ValueError("candidates name a feature outside 0..D-1 or the feature itself")
        self.cardinalities, self.candidates, self.n_classes = cardinalities, candidates, int(n_classes)
        self.n_slots = candidates.shape[1]
        self.k_max = int(cardinalities.max(initial=1))
        used = candidates != UNUSED_SLOT
        # Rows per slot: |X_j| for a parent, 1 for no parent, 0 for an unused slot.
        slot_rows = np.where(used, np.where(candidates >= 0, cardinalities[np.maximum(candidates, 0)], 1), 0)
        self.slot_rows = slot_rows
        self.row_offsets = (np.cumsum(slot_rows.ravel()) - slot_rows.ravel()).reshape(d, self.n_slots)
        self.n_rows = int(slot_rows.sum())
        row_feature = np.repeat(np.repeat(np.arange(d), self.n_slots), slot_rows.ravel())  # (R,)
        shape = (self.n_rows, self.k_max, self.n_classes)
        valid = torch.arange(self.k_max)[None, :] < torch.as_tensor(cardinalities[row_feature])[:, None]
        self.register_buffer("valid", valid[..., None].expand(shape).contiguous(), persistent=False)
        self.register_buffer("slot_used", torch.as_tensor(used), persistent=False)
        # An unused slot reads its feature's no-parent row (valid, finite; its weight is 0).
        offsets = np.where(used, self.row_offsets, self.row_offsets[:, :1])
        self.register_buffer("_slot_offset", torch.as_tensor(offsets), persistent=False)
        self.register_buffer("_slot_parent", torch.as_tensor(np.maximum(candidates, 0)), persistent=False)
        self.register_buffer("_slot_has_parent", torch.as_tensor(candidates >= 0), persistent=False)
        rho, class_rho = self._initial_rho(shape, init, data, smoothing, generator)
        self.rho = nn.Parameter(torch.where(self.valid, rho, torch.full_like(rho, PAD)))
        self.class_rho = nn.Parameter(class_rho)
        self.phi = nn.Parameter(torch.zeros(d, self.n_slots))

    def _initial_rho(self, shape, init, data, smoothing, generator):
        if init == "uniform":
            return (
                torch.rand(shape, generator=generator) * 0.2 - 0.1,
                torch.rand((self.n_classes,), generator=generator) * 0.2 - 0.1,
            )
        if init != "ml":
            raise ValueError(f"unknown init {init!r}: use 'uniform' or 'ml'")
        if data is None:
            raise ValueError('init="ml" needs the training data (x, y)')
        x, y = np.asarray(data[0]), np.asarray(data[1], dtype=np.int64)
        used = self.slot_used.numpy().ravel()
        counts = np.zeros(int(np.prod(shape)))
        for start in range(0, x.shape[0], 2048):  # chunks bound the (rows, D*J) index memory
            entries = self.flat_indices(x[start : start + 2048]).numpy()[:, used]  # unused slots alias slot 0
            counts += np.bincount(
                (entries * self.n_classes + y[start : start + 2048, None]).ravel(), minlength=counts.size
            )
        class_counts = np.bincount(y, minlength=self.n_classes).astype(np.float64)
        return (
            torch.tensor(np.log(counts + smoothing).reshape(shape), dtype=torch.float32),
            torch.tensor(np.log(class_counts + smoothing), dtype=torch.float32),
        )

    # -- indices ------------------------------------------------------------------------------
    def flat_indices(self, x) -> torch.Tensor:
        """Entries of ``rho.reshape(-1, C)`` for every (row, feature, slot), shape (n, D * J), int64.

        Entry ``(row_offsets[i, j] + x_j) * K + x_i`` (``x_j = 0`` for no parent). Depends on
        data and candidates only: compute once per data set.
        """
        x = torch.as_tensor(np.asarray(x), dtype=torch.int64)
        parent_values = torch.where(self._slot_has_parent, x[:, self._slot_parent], torch.zeros((), dtype=torch.int64))
        entries = (self._slot_offset + parent_values) * self.k_max + x[:, :, None]  # (n, D, J)
        return entries.reshape(x.shape[0], -1)

    # -- structure ----------------------------------------------------------------------------
    def structure_logits(self) -> torch.Tensor:
        """``phi`` with unused slots at ``-inf`` (softmax gives them exactly 0), shape (D, J)."""
        return self.phi.masked_fill(~self.slot_used, float("-inf"))

    def structure_probabilities(self) -> torch.Tensor:
        """``softmax(phi_i)`` per feature, shape (D, J)."""
        return torch.softmax(self.structure_logits(), dim=-1)

    def argmax_slots(self) -> torch.Tensor:
        """Most probable slot per feature, shape (D,) int64 (ties: lowest slot, i.e. no parent first)."""
        return self.structure_logits().argmax(dim=-1)

    def parents(self) -> np.ndarray:
        """The argmax structure as parents (D,), ``-1`` = class only. Always acyclic."""
        slots = self.argmax_slots().numpy()
        return self.candidates[np.arange(len(slots)), slots].astype(np.int64)

    # -- log-likelihoods -----------------------------------------------------------------------
    def log_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalized ``(class (C,), rows (R, K, C))``: log-softmax over the feature's values."""
        return torch.log_softmax(self.class_rho, dim=0), torch.log_softmax(self.rho, dim=1)

    def forward(self, indices: torch.Tensor, structure: torch.Tensor) -> torch.Tensor:
        """``log p(c, x)`` (n, C) from :meth:`flat_indices` (n, D*J) and a structure ``s`` (D, J).

        ``s`` is one-hot for a discrete structure (e.g. :func:`gumbel_softmax_st`); any weights
        work. One gather of every (feature, slot) term, then one product with ``s``.
        """
        return CandidateLogJoint.apply(self.rho, self.class_rho, structure.reshape(-1), indices)

    @torch.no_grad()
    def argmax_log_joint(self, indices: torch.Tensor) -> torch.Tensor:
        """``log p(c, x)`` (n, C) of the argmax structure; gathers only the chosen slot per feature."""
        class_theta, theta = self.log_tables()
        n, d = indices.shape[0], self.cardinalities.shape[0]
        chosen = indices.view(n, d, self.n_slots).gather(2, self.argmax_slots().view(1, d, 1).expand(n, d, 1))
        return (
            nn.functional.embedding_bag(chosen.squeeze(2), theta.reshape(-1, self.n_classes), mode="sum") + class_theta
        )

    @torch.no_grad()
    def predict(self, x) -> np.ndarray:
        return self.argmax_log_joint(self.flat_indices(x)).argmax(dim=1).numpy()

    # -- export -------------------------------------------------------------------------------
    @torch.no_grad()
    def to_classifier(self, quantizer=None) -> BayesNetClassifier:
        """An ordinary :class:`BayesNetClassifier` with the argmax parents and the chosen CPTs.

        Its (unnormalized) ``rho`` is the chosen slot's rows, so a float classifier predicts
        exactly like :meth:`argmax_log_joint`.
        """
        parents = self.parents()
        model = BayesNetClassifier(self.cardinalities, self.n_classes, parents, quantizer=quantizer)
        d = self.cardinalities.shape[0]
        first = torch.as_tensor(self.row_offsets[np.arange(d), self.argmax_slots().numpy()])  # (D,)
        # Rows first + p for p < P' (clamped: rows past the slot's own are padding, masked below).
        rows = (first[:, None] + torch.arange(model.p_max)[None, :]).clamp_(max=self.n_rows - 1)
        chosen = self.rho[rows]  # (D, P', K, C)
        model.rho.copy_(torch.where(model.valid, chosen, torch.full_like(chosen, PAD)))
        model.class_rho.copy_(self.class_rho)
        return model
