"""One step of the batched TAN structure-learning trainer (:mod:`bnc_deploy.train.structure_batched`).

:class:`SLChunk` holds the tensors of ``M`` configurations whose candidate sets have one shape
(D, J): the candidate rows of each configuration's ``rho (R_j, K, C)`` in one compact buffer
(:class:`Layout`), ``class_rho (M, C)``, structure logits ``phi (M, D, J)``, both Adams' state and
the per-configuration constants. :func:`step` updates them on one batch each.

Why the bits equal the single run's (:func:`bnc_deploy.train.structure_learning.fit_structure`,
whose autograd graph this step computes in closed form):

* every per-configuration value comes from the same kernel as in the single run, on data laid
  out so that the kernel does the same arithmetic: the log-softmax over a row's values, the
  softmaxes over slots and their backward kernels work row by row (a leading configuration axis,
  or dropping the padding values, leaves each row's arithmetic unchanged); fused Adam's pieces end
  where the single run's tensor ends (:class:`Layout`);
* the two products whose summation order is MKL's own (``s @ gathered`` and the slot gradient
  ``gathered @ grad``) run per configuration on blocks that start 64-byte aligned, as the single
  run's freshly allocated tensors do (MKL's ``sgemv`` rounds differently on misaligned rows):
  :mod:`bnc_deploy.train.structure_batched_products`;
* the table gradient is one ``index_add_`` whose additions per table entry come in the single
  run's order (batch rows in order), then the log-softmax backward on the touched rows only, its
  sum over values on the single run's (rows, K, C) shape (reductions round by shape);
* the hybrid loss takes autograd's upstream gradient (a float32 1.0, so ``float32(lam) / n``
  rounded in float32, unlike ``train_bnc``'s closed-form step); CPTs use torch's fused Adam
  (:func:`bnc_deploy.train.bnc_batched_step._adam`), ``phi`` the single-tensor Adam's op sequence.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from bnc_deploy.models.structure_learning import _GUMBEL_EPS
from bnc_deploy.train.batched_adam import ADAM_UNIT, contiguous_runs, group_rates, schedule_groups
from bnc_deploy.train.bnc_batched_step import Chunk, _adam, _cll, _exclusion_mask, _nll
from bnc_deploy.train.structure_batched_products import (
    ALIGN,
    gathered_blocks,
    log_joint_of_samples,
    products_are_bag_sums,
    slot_grad,
)
from bnc_deploy.train.structure_learning import candidate_parameter_counts

__all__ = ["Layout", "SLChunk", "step"]

#: Positions (in the chunk) of configurations that share a learning-rate schedule and eps.
Members = tuple[int, ...]
#: fused Adam's (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs).
AdamLists = tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]

#: torch's default Adam betas, which the single run's structure optimizer uses.
BETA1, BETA2 = 0.9, 0.999
#: theta's value past a row's own values (exp gives exactly 0, like the single run's PAD - max - lse).
_NEVER = -1e4


# -- where the candidate rows live -----------------------------------------------------------------
class Layout:
    """Compact storage of M configurations' candidate rows (rho, Adam's state, theta, gradients).

    The single run's ``rho (R, K, C)`` pads every row to K values (padding at PAD, never trained).
    Here rows ``[a, b)`` with the same number of values ``v`` (the child's cardinality) form a span,
    stored as one contiguous block ``(M, n, v, C)``: one log-softmax per span then reads and writes
    contiguous memory, and the padding is neither normalised nor updated (about 40% of letter's
    table). ``n >= b - a`` rounds each configuration's part up to whole 16-float units, so fused Adam
    runs every real entry through its vector loop, as the single run does; only the single run's last
    ``R_j K C mod 16`` entries take its scalar loop, so the last span ``[last, R)`` keeps all K
    values and starts at a row where ``last K C`` is whole units (:meth:`adam_pieces`). One extra
    row at the end (``sentinel``) reads as 0 in gradients and as "never" (exp = 0) in theta.
    """

    def __init__(self, values: np.ndarray, rows: np.ndarray, k: int, c: int, slot_starts: np.ndarray) -> None:
        self.rows, self.k, self.c, self.r = rows, k, c, len(values)
        unit = ALIGN // math.gcd(k * c, ALIGN)
        last = max(0, (int(rows.min()) - -(-ALIGN // (k * c))) // unit * unit)
        # Preferably where a slot of the last feature starts in every configuration (``slot_starts``):
        # then no slot straddles two spans and each slot's entries are an affine function of the
        # parent's value (SLChunk._affine), and only the last feature's rows keep all K values.
        fits = slot_starts[(slot_starts <= last) & (slot_starts % unit == 0)]
        last = int(fits.max()) if len(fits) else last
        cuts = np.flatnonzero(np.diff(values[:last])) + 1
        bounds = [(int(a), int(b), int(values[a])) for a, b in zip(np.r_[0, cuts], np.r_[cuts, last]) if b > a]
        self.spans = []  # (first row, end row, values, rows allocated)
        for a, b, v in bounds:
            n = b - a
            while n * v * c % ALIGN:
                n += 1
            self.spans.append((a, b, v, n))
        self.spans.append((last, self.r, k, self.r - last))
        self.values = np.zeros(self.r, dtype=np.int64)
        for a, b, v, _ in self.spans:
            self.values[a:b] = v
        self.resize(len(rows))

    def resize(self, m: int) -> None:
        """Offsets (in C-rows) of each span's block for ``m`` configurations."""
        self.m, self.offsets, total = m, [], 0
        for _, _, v, n in self.spans:
            self.offsets.append(total)
            total += m * n * v
        self.sentinel = total

    def lookup(self) -> np.ndarray:
        """(M, R) int64: the C-row of (configuration j, row r, value 0) in the compact buffers."""
        table = np.zeros((self.m, self.r), dtype=np.int64)
        j = np.arange(self.m)[:, None]
        for (a, b, v, n), off in zip(self.spans, self.offsets):
            table[:, a:b] = off + (j * n + np.arange(b - a)[None, :]) * v
        return table

    def block(self, flat: torch.Tensor, s: int) -> torch.Tensor:
        _, _, v, n = self.spans[s]
        off = self.offsets[s]
        return flat[off : off + self.m * n * v].view(self.m, n, v, self.c)

    def new(self, fill: float, device: torch.device) -> torch.Tensor:
        return torch.full((self.sentinel + 1, self.c), fill, device=device)

    def pack(self, padded: list[torch.Tensor], device: torch.device) -> torch.Tensor:
        """The compact buffer of the configurations' ``rho`` (R_j, K, C) each."""
        flat = self.new(0.0, device)
        for s, (a, b, v, _) in enumerate(self.spans):
            block = self.block(flat, s)
            for j, rho in enumerate(padded):
                end = min(b, rho.shape[0])
                block[j, : end - a] = rho[a:end, :v].to(device)
        return flat

    def unpack(self, flat: torch.Tensor, j: int, base: torch.Tensor) -> torch.Tensor:
        """Configuration ``j``'s (R_j, K, C) tensor: ``base`` (its padding) with the compact values."""
        out = base.detach().clone()
        for s, (a, b, v, _) in enumerate(self.spans):
            end = min(b, out.shape[0])
            out[a:end, :v] = self.block(flat, s)[j, : end - a].cpu()
        return out

    def select(self, flat: torch.Tensor, idx: torch.Tensor, m: int) -> torch.Tensor:
        """The buffer of configurations ``idx`` (the layout resized to ``m`` of them afterwards)."""
        blocks = [self.block(flat, s).index_select(0, idx) for s in range(len(self.spans))]
        sentinel = flat[self.sentinel :]
        return torch.cat([b.reshape(-1, self.c) for b in blocks] + [sentinel])

    def adam_pieces(self, flat: torch.Tensor, members: Members) -> list[torch.Tensor]:
        """Contiguous pieces of ``members``' entries on which fused Adam rounds as in each single run:
        whole 16-float units (its vector loop) but for the single run's last ``R_j K C mod 16``
        entries (its scalar loop)."""
        pieces: list[torch.Tensor] = []
        for s in range(len(self.spans) - 1):
            block = self.block(flat, s)
            pieces += [block[a:b].reshape(-1) for a, b in contiguous_runs(list(members))]
        last, end = self.spans[-1][0], len(self.spans) - 1
        block = self.block(flat, end)
        for j in members:
            # From an aligned row to the configuration's end: its last R_j K C mod 16 entries are
            # this piece's last, so they alone take the scalar loop, as in the single run.
            pieces.append(block[j].reshape(-1)[: (int(self.rows[j]) - last) * self.k * self.c])
        return pieces


# -- the chunk's state ------------------------------------------------------------------------------
class SLChunk:
    """Tensors of M configurations with candidate sets of one shape (D, J), on one device.

    ``members``: objects with ``config``, ``sl``, ``model`` (the single run's initial
    :class:`~bnc_deploy.models.structure_learning.StructureLearningTAN`, on the CPU).
    """

    def __init__(self, members: list[Any], device: torch.device, batch: int) -> None:
        self.members = list(members)
        self.device = device
        models = [mb.model for mb in members]
        t = models[0]
        self.d, self.n_slots, self.k, self.c = len(t.cardinalities), t.n_slots, t.k_max, t.n_classes
        self.rows = np.array([mod.n_rows for mod in models], dtype=np.int64)
        self.r = int(self.rows.max())
        dj = self.d * self.n_slots
        starts = [np.cumsum(mod.slot_rows.ravel()) - mod.slot_rows.ravel() for mod in models]
        last_feature = max(int(mod.row_offsets[-1, 0]) for mod in models)
        common = functools.reduce(np.intersect1d, starts)
        common = common[common >= last_feature]
        self.layout = Layout(_row_values(models, self.r), self.rows, self.k, self.c, common)

        def stack(make: Callable[[Any], torch.Tensor]) -> torch.Tensor:
            return torch.stack([make(mod) for mod in models]).to(device).contiguous()

        configs = [mb.config for mb in members]
        sls = [mb.sl for mb in members]

        def floats(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=device)

        # Everything with a configuration axis (keep() selects along it).
        self.state: dict[str, torch.Tensor] = {
            "class_rho": stack(lambda mod: mod.class_rho.detach()),
            "phi": stack(lambda mod: mod.phi.detach()),
            "slot_free": stack(lambda mod: ~mod.slot_used),
            "slot_offset": stack(lambda mod: mod._slot_offset.reshape(dj)),
            "slot_parent": stack(lambda mod: mod._slot_parent.reshape(dj)),
            "has_parent": stack(lambda mod: mod._slot_has_parent.reshape(dj).long()),
            "slot_rows": stack(lambda mod: torch.as_tensor(mod.slot_rows.reshape(dj))),
            "counts": torch.stack([torch.as_tensor(_counts(mod, s)) for mod, s in zip(models, sls)]).to(device),
            "penalty": floats([s.size_penalty for s in sls]),
            "lam": floats([c.hybrid_lambda for c in configs]),
            "gamma": floats([c.hybrid_gamma for c in configs]),
            "eta": floats([c.hybrid_eta for c in configs]),
            "phi_eps": floats([c.adam_eps for c in configs]),
        }
        for name in ("class_rho", "phi"):
            self.state[f"{name}_exp_avg"] = torch.zeros_like(self.state[name])
            self.state[f"{name}_exp_avg_sq"] = torch.zeros_like(self.state[name])
        # The candidate rows, compact (Layout), with Adam's state.
        rho = self.layout.pack([mod.rho.detach() for mod in models], device)
        self.flat = {"rho": rho, "exp_avg": torch.zeros_like(rho), "exp_avg_sq": torch.zeros_like(rho)}
        self.rates = (
            np.stack([c.learning_rates() for c in configs]) if configs[0].epochs else np.zeros((len(configs), 0))
        )
        self.eps = [c.adam_eps for c in configs]
        self.structure_lr = np.array([s.structure_lr for s in sls], dtype=np.float64)
        self.seeds = [c.seed for c in configs]
        self.gumbel = [torch.Generator().manual_seed(c.seed + 2) for c in configs]
        # Fused Adam's step (float32, as torch keeps it) and the structure Adam's step count.
        self.step = torch.zeros((), dtype=torch.float32, device=device)
        self.phi_step = 0
        self.bag_sums = device.type == "cuda" or products_are_bag_sums(self.d, self.n_slots, batch * self.c)
        self._reset_buffers()

    @property
    def m(self) -> int:
        return self.state["phi"].shape[0]

    def _reset_buffers(self) -> None:
        """Work buffers sized by M (rebuilt when configurations leave)."""
        lay, dev = self.layout, self.device
        self.grads = [lay.new(0.0, dev), torch.zeros_like(self.state["class_rho"])]
        # Entries past a row's values (and the sentinel) keep a value whose exp is 0, as the single
        # run's PAD - max - logsumexp has.
        self.theta = lay.new(_NEVER, dev)
        lookup = lay.lookup()
        self.lookup = torch.as_tensor(lookup, device=dev)
        self.affine = self._affine(lookup)
        self.values = torch.as_tensor(lay.values, device=dev)
        self.touched = torch.zeros(self.m * self.r, dtype=torch.bool, device=dev)
        self.last_entries = self.last_rows = torch.zeros(0, dtype=torch.int64, device=dev)
        self._adam_lists: dict[Members, AdamLists] = {}
        self._cache: dict[str, Any] = {}

    def keep(self, mask: np.ndarray) -> None:
        """Drop configurations (early stop): select along the configuration axis only."""
        keep = np.flatnonzero(mask)
        idx = torch.as_tensor(keep, device=self.device)
        self.state = {name: t.index_select(0, idx).contiguous() for name, t in self.state.items()}
        self.flat = {name: self.layout.select(t, idx, len(keep)) for name, t in self.flat.items()}
        self.layout.rows = self.rows = self.rows[keep]
        self.layout.resize(len(keep))
        self.members = [self.members[i] for i in keep]
        self.rates, self.structure_lr = self.rates[keep], self.structure_lr[keep]
        self.eps = [self.eps[i] for i in keep]
        self.seeds = [self.seeds[i] for i in keep]
        self.gumbel = [self.gumbel[i] for i in keep]
        self._reset_buffers()

    def rho(self, j: int) -> torch.Tensor:
        """Configuration ``j``'s ``rho`` (R_j, K, C) on the CPU, in the single run's layout."""
        return self.layout.unpack(self.flat["rho"], j, self.members[j].model.rho)

    def log_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``theta`` (compact) and ``class_theta`` (M, C): the single run's ``log_softmax(rho, 1)``.

        Over each row's own values only (:class:`Layout`): the single run's padding entries add
        exp(PAD - max) = 0 after them to the same sequential sum and are never the max, so every real
        entry gets the same bits.
        """
        rho, theta = self.flat["rho"], self.theta
        for s in range(len(self.layout.spans)):
            torch._log_softmax(self.layout.block(rho, s), 2, False, out=self.layout.block(theta, s))
        return theta, torch.log_softmax(self.state["class_rho"], dim=1)

    # -- fused Adam's view of the chunk (the interface of bnc_batched_step._adam) ------------------
    def adam_groups(self) -> list[tuple[int, float, Members]]:
        """:func:`~bnc_deploy.train.batched_adam.schedule_groups` of the chunk (cached)."""
        if "groups" not in self._cache:
            self._cache["groups"] = schedule_groups(self.rates, self.eps)
        groups_: list[tuple[int, float, Members]] = self._cache["groups"]
        return groups_

    def adam_lists(self, members: Members) -> AdamLists:
        """(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs) of ``members`` for fused Adam (cached):
        the candidate rows' :meth:`Layout.adam_pieces`, and ``class_rho`` per configuration unless
        whole units (``batched_adam.ADAM_UNIT``)."""
        if members not in self._adam_lists:
            f, s = self.flat, self.state
            lists = [
                self.layout.adam_pieces(t, members) for t in (f["rho"], self.grads[0], f["exp_avg"], f["exp_avg_sq"])
            ]
            cls = (s["class_rho"], self.grads[1], s["class_rho_exp_avg"], s["class_rho_exp_avg_sq"])
            if self.device.type == "cuda" or self.c % ADAM_UNIT == 0:
                pieces: list[slice | int] = [slice(a, b) for a, b in contiguous_runs(list(members))]
            else:
                pieces = list(members)
            for k, tensor in enumerate(cls):
                lists[k] += [tensor[p] for p in pieces]
            self._adam_lists[members] = (lists[0], lists[1], lists[2], lists[3], [])
        return self._adam_lists[members]

    # -- per-batch data ------------------------------------------------------------------------------
    def batch_entries(self, xbt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The compact C-row of every (slot, batch row), slot-major (M, D*J, B) as the single run
        gathers them, and the slots' parent values (M, D*J, B), from the codes ``xbt`` (M, D, B).

        The single run's :meth:`StructureLearningTAN.flat_indices` up to the layout (integers),
        computed per batch, which costs less than storing M index tables.
        """
        m, b = self.m, xbt.shape[2]
        dj, o = self.d * self.n_slots, xbt.shape[0]  # o: 1 (one shared order) or M
        s, codes = self.state, xbt.reshape(-1, b)
        # Rows of codes, one index_select each (a gather along a middle axis is far slower).
        first = self._constant(f"code_rows{o}", lambda: torch.arange(o, device=self.device)[:, None] * self.d)
        parent = codes.index_select(0, (s["slot_parent"] + first).view(-1)).view(m, dj, b)
        own_rows = torch.arange(self.d, device=self.device).repeat_interleave(self.n_slots)[None, :] + first
        own = codes.index_select(0, self._constant(f"own{o}", lambda: own_rows.view(-1))).view(o, dj, b)
        if self.affine is not None:
            base, stride = self.affine
            return parent.mul(stride[:, :, None]).add_(base[:, :, None]).add_(own), parent
        rows = parent.mul(s["has_parent"][:, :, None]).add_(s["slot_offset"][:, :, None])
        return self.entries(rows, own.expand(m, dj, b)), parent

    def _affine(self, lookup: np.ndarray) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Per (configuration, slot): the compact C-row of its first row and the step per parent
        value, when every slot's rows lie evenly in one span (a span boundary inside a slot: None,
        and :meth:`entries` looks every row up)."""
        s = self.state
        if not self.m:
            return None
        offset, has_parent, n_rows = (s[k].cpu().numpy() for k in ("slot_offset", "has_parent", "slot_rows"))
        base = np.take_along_axis(lookup, offset, axis=1)
        value = self.layout.values[offset]
        step = np.arange(self.k)  # a parent has at most K values
        rows = np.minimum(offset[..., None] + step, self.r - 1)
        real = (step < n_rows[..., None]) & (has_parent[..., None] > 0)
        even = np.take_along_axis(lookup, rows.reshape(self.m, -1), axis=1).reshape(rows.shape)
        if not np.all(~real | (even == base[..., None] + step * value[..., None])):
            return None
        return torch.as_tensor(base, device=self.device), torch.as_tensor(value * has_parent, device=self.device)

    def entries(self, rows: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
        """Compact C-rows of (configuration, table row ``rows`` (M, ...), value ``own``)."""
        m = rows.shape[0]
        return self.lookup.gather(1, rows.reshape(m, -1)).view(rows.shape).add_(own)

    def noise(self, n_batches: int) -> torch.Tensor:
        """The epoch's Gumbel noise (M, n_batches, D, J): each configuration's generator draws, in one
        call, the values its single run draws batch by batch (same stream, same order)."""
        shape = (n_batches, self.d, self.n_slots)
        u = torch.stack([torch.rand(shape, generator=g) for g in self.gumbel]).to(self.device)
        return -torch.log(-torch.log(u + _GUMBEL_EPS) + _GUMBEL_EPS)  # gumbel_softmax_st's noise

    def _constant(self, name: str, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        if name not in self._cache:
            self._cache[name] = make()
        value: torch.Tensor = self._cache[name]
        return value


def _counts(model: Any, sl: Any) -> np.ndarray:
    """The size penalty's parameter counts (D, J) of ``model``'s slots, float32 as the single run's."""
    counts = candidate_parameter_counts(model.cardinalities, model.candidates, model.n_classes, sl.size_penalty_mode)
    return counts.astype(np.float32)


def _row_values(models: list[Any], n_rows: int) -> np.ndarray:
    """Values per table row (its child feature's cardinality; the largest over the configurations
    where their layouts differ, which is exact too: the others' extra entries are padding)."""
    values = np.zeros(n_rows, dtype=np.int64)
    for mod in models:
        d = len(mod.cardinalities)
        feature = np.repeat(np.repeat(np.arange(d), mod.n_slots), mod.slot_rows.ravel())
        values[: len(feature)] = np.maximum(values[: len(feature)], mod.cardinalities[feature])
    return values


# -- one step ---------------------------------------------------------------------------------------
def _hybrid(chunk: SLChunk, log_joint: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean hybrid loss (M,) and dL/dlog_joint (M, n, C): ``_kernels.hybrid_forward``/``hybrid_backward``
    operation for operation, with the upstream gradient autograd gives ``HybridLossFn`` (float32 1.0)."""
    m, n, c = log_joint.shape
    s = chunk.state
    lam, gamma, eta = (s[k].view(m, 1, 1) for k in ("lam", "gamma", "eta"))
    true = log_joint.gather(2, labels[..., None])
    mask = _exclusion_mask(c, log_joint.device)
    z = (log_joint * eta).add_(mask.index_select(0, labels.reshape(-1)).view(m, n, c))
    z_max = z.amax(dim=2, keepdim=True)
    w = z.sub_(z_max).exp_()
    total = w.sum(dim=2, keepdim=True)
    smooth_max = total.log().add_(z_max).div_(eta).add_(gamma).sub_(true)
    active = smooth_max > 0
    loss = smooth_max.clamp_min_(0).mul_(lam).sub_(true).mean(dim=(1, 2))
    # (grad * lam) / n and grad / n in float32 with grad = 1.0: float32(float32(lam) / n), float32(1 / n).
    lam_over_n = chunk._constant(f"lam/{n}", lambda: s["lam"].view(m, 1, 1) / n)
    inv_n = chunk._constant(f"1/{n}", lambda: torch.ones((), device=log_joint.device) / n)
    coef = active.to(w.dtype).mul_(lam_over_n)
    grad = w.div_(total).mul_(coef)
    grad.scatter_(2, labels[..., None], coef.add(inv_n).neg_())
    return loss, grad


def _loss(
    chunk: SLChunk, name: str, log_joint: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    if name == "hybrid":
        return _hybrid(chunk, log_joint, labels)
    loss, grad = _nll(log_joint, labels) if name == "nll" else _cll(log_joint, labels)
    return loss, grad


def _phi_grad(
    chunk: SLChunk, grad_s: torch.Tensor, soft: torch.Tensor, probs: torch.Tensor, tau: float
) -> torch.Tensor:
    """dL/dphi (M, D, J): the single run's autograd through the straight-through sample and the penalty."""
    m = chunk.m
    shape = (m, chunk.d, chunk.n_slots)
    grad = torch._softmax_backward_data(grad_s.view(shape), soft, -1, soft.dtype).div_(tau)
    if bool((chunk.state["penalty"] != 0).any()):
        # d(lam_MS * sum softmax(phi) * counts): float32(lam_MS) * counts into the softmax backward
        # (a configuration without penalty adds exact zeros).
        upstream = chunk.state["penalty"].view(m, 1, 1) * chunk.state["counts"]
        grad = grad + torch._softmax_backward_data(upstream, probs, -1, probs.dtype)
    return grad.masked_fill_(chunk.state["slot_free"], 0.0)


def _table_grad(
    chunk: SLChunk, chosen: torch.Tensor, rows: torch.Tensor, grad: torch.Tensor, theta: torch.Tensor
) -> None:
    """dL/drho into ``chunk.grads[0]``: the chosen slots' entries (M, B, D) get the batch rows'
    gradients in batch order (one ``index_add_``), then the log-softmax backward on the touched table
    rows (``rows`` (M, D, B)) over all K values as the single run sums them; the rest stays 0."""
    m, b, d = chosen.shape
    k, c = chunk.k, chunk.c
    contrib = grad[:, :, None, :].expand(m, b, d, c).reshape(-1, c)
    table = chunk.grads[0]
    table.index_fill_(0, chunk.last_entries, 0.0)  # last step's rows: the rest is still 0
    if chunk.device.type == "cuda":
        table.index_put_((chosen.view(-1),), contrib, accumulate=True)  # sorted segments: deterministic
    else:
        table.index_add_(0, chosen.view(-1), contrib)
    touched = chunk.touched
    touched.index_fill_(0, chunk.last_rows, False)
    base = chunk._constant("row_base", lambda: torch.arange(m, device=chunk.device).view(m, 1, 1) * chunk.r)
    touched[(rows + base).view(-1)] = True
    touched_rows = touched.nonzero().squeeze(1)  # ascending, as torch.unique gives them
    # Each touched row's K entries in the compact buffers: the sum over K takes the single run's
    # shape (values past the row's own read the sentinel's 0, as the single run's padding adds 0);
    # the update g - exp(theta) * sum, elementwise, runs on the row's own values only (the rest is 0).
    value = chunk._constant("k", lambda: torch.arange(k, device=chunk.device))
    start = chunk.lookup.view(-1).index_select(0, touched_rows)
    real = value < chunk.values.index_select(0, touched_rows % chunk.r)[:, None]  # (T, K)
    entries = torch.where(real, start[:, None] + value, chunk.layout.sentinel).view(-1)
    g = table.index_select(0, entries).view(-1, c)
    total = g.view(-1, k, c).sum(dim=1)  # (T, C)
    where = real.view(-1).nonzero().squeeze(1)
    own = entries.index_select(0, where)
    update = theta.index_select(0, own).exp_().mul_(total.index_select(0, where // k))
    table.index_copy_(0, own, g.index_select(0, where).sub_(update))
    chunk.last_entries, chunk.last_rows = own, touched_rows


def _phi_adam(chunk: SLChunk, grad: torch.Tensor) -> None:
    """torch's single-tensor Adam (the single run's structure optimizer) on every configuration's
    ``phi`` at once; ``addcdiv_(value=-step)`` is ``param + (value * exp_avg) / denom`` in float32."""
    s = chunk.state
    chunk.phi_step += 1
    s["phi_exp_avg"].lerp_(grad, 1 - BETA1)
    s["phi_exp_avg_sq"].mul_(BETA2).addcmul_(grad, grad, value=1 - BETA2)
    count = float(chunk.phi_step)
    bias_correction1, bias_correction2 = 1 - BETA1**count, 1 - BETA2**count
    denom = (s["phi_exp_avg_sq"].sqrt() / bias_correction2**0.5).add_(s["phi_eps"].view(-1, 1, 1))
    neg_step = torch.tensor(-(chunk.structure_lr / bias_correction1), dtype=torch.float32).to(chunk.device)
    s["phi"].add_((s["phi_exp_avg"] * neg_step.view(-1, 1, 1)).div_(denom))


def _chosen(
    chunk: SLChunk, entries: torch.Tensor, parent: torch.Tensor, flat_slots: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampled slots' compact entries (M, B, D), in the single run's (batch row, feature) order,
    and their table rows (M, D, B), from every slot's ``entries`` and ``parent`` values (M, D*J, B)."""
    s, (m, dj, b) = chunk.state, entries.shape
    pick = (flat_slots + chunk._constant("slot_rows", lambda: torch.arange(m, device=chunk.device)[:, None] * dj)).view(
        -1
    )
    chosen = entries.view(-1, b).index_select(0, pick).view(m, -1, b)
    rows = parent.view(-1, b).index_select(0, pick).view(m, -1, b)
    rows.mul_(s["has_parent"].gather(1, flat_slots)[:, :, None]).add_(
        s["slot_offset"].gather(1, flat_slots)[:, :, None]
    )
    return chosen.transpose(1, 2).contiguous(), rows


def step(
    chunk: SLChunk, xbt: torch.Tensor, labels: torch.Tensor, gumbel: torch.Tensor, tau: float, epoch: int, loss: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """One update of every configuration on its batch; returns (loss (M,), log_joint (M, B, C))."""
    s = chunk.state
    m, d = chunk.m, chunk.d
    entries, parent = chunk.batch_entries(xbt)  # (M, D*J, B) each
    slot_major = entries.view(m, -1)  # the single run's gather order
    theta, class_theta = chunk.log_tables()
    logits = s["phi"].masked_fill(s["slot_free"], float("-inf"))
    soft = torch.softmax((logits + gumbel) / tau, dim=-1)
    # The straight-through sample's value is exactly one-hot (hard + (soft - soft) adds zeros): the
    # slot of the largest soft value per feature.
    flat_slots = soft.argmax(dim=-1) + chunk._constant(
        "fbase", lambda: torch.arange(d, device=chunk.device) * chunk.n_slots
    )
    chosen, rows = _chosen(chunk, entries, parent, flat_slots)
    # every slot's terms at the batch's entries, gathered once on the CPU for both products
    blocks = None if chunk.device.type == "cuda" else gathered_blocks(chunk, theta, slot_major)
    log_joint = log_joint_of_samples(chunk, (theta, class_theta), blocks, chosen, flat_slots)
    value, grad = _loss(chunk, loss, log_joint, labels)
    probs = torch.softmax(logits, dim=-1)
    penalized = s["penalty"] != 0
    if bool(penalized.any()):
        value = torch.where(penalized, value + s["penalty"] * (probs * s["counts"]).sum(dim=(1, 2)), value)
    grad_phi = _phi_grad(chunk, slot_grad(chunk, theta, slot_major, blocks, grad), soft, probs, tau)
    _table_grad(chunk, chosen, rows, grad, theta)
    grad_class = grad.sum(dim=1)
    torch.sub(grad_class, class_theta.exp() * grad_class.sum(dim=1, keepdim=True), out=chunk.grads[1])
    _adam(cast(Chunk, chunk), group_rates(chunk, epoch))  # duck-typed: step, rates, adam_groups(), adam_lists()
    _phi_adam(chunk, grad_phi)
    return value, log_joint
