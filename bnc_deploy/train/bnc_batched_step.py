"""One step of the batched BN trainer (:mod:`bnc_deploy.train.bnc_batched`) for a block of configurations.

:class:`Chunk` holds the tensors of ``M`` configurations (parameters, Adam's state, quantizers,
loss parameters) with a leading configuration axis; :func:`run_epoch` trains them for one epoch
(quantized log tables, one gather-sum, the loss and its closed-form gradient, fused Adam) and
:func:`evaluate` measures their errors. Every per-configuration value is computed by the same
kernels on the same memory layout as the single-run trainer (``train.bnc``, ``models._kernels``),
which is what makes a configuration's result independent of its batch (see
:mod:`bnc_deploy.train.bnc_batched`).
"""

from __future__ import annotations

import numpy as np
import torch

from bnc_deploy.datasets.base import DiscreteDataset
from bnc_deploy.models._kernels import _ONEHOT_GRAD_MAX_ELEMENTS
from bnc_deploy.models.bnc import BayesNetClassifier
from bnc_deploy.train import cuda_graph
from bnc_deploy.train.batched_adam import ADAM_UNIT, contiguous_runs, group_rates, rate_table, schedule_groups
from bnc_deploy.train.bnc import TrainConfig

__all__ = ["Chunk", "evaluate", "run_epoch", "template_model"]


# -- the chunk's state ------------------------------------------------------------------------------
class Chunk:
    """Tensors of M configurations that share data, structure and schedule length."""

    def __init__(
        self,
        configs: list[TrainConfig],
        dataset: DiscreteDataset,
        parents: np.ndarray,
        device: torch.device,
        cuda_graphs: bool = False,
    ):
        self.configs = configs
        self.device = device
        self.graph = cuda_graph.step_graph(device, cuda_graphs)  # None: eager steps (always on the CPU)
        self.generation = 0  # counts keep(): a captured step holds the tensors of one generation
        m = len(configs)
        # The single run's own initialisation code, once per distinct initial table: an ML
        # initialisation depends on the data and smoothing only, a uniform one on the seed only.
        slots: dict = {}
        models, which = [], []
        for c in configs:
            key = ("ml", c.smoothing) if c.init == "ml" else (c.init, c.seed)
            if key not in slots:
                slots[key] = len(models)
                models.append(template_model(c, dataset, parents))
            which.append(slots[key])
        t = models[0]
        self.shape = tuple(t.rho.shape)  # (D, P, K, C)
        self.n_rows = int(np.prod(self.shape[:3]))
        self.n_classes = t.n_classes
        self.template = t
        pick = torch.as_tensor(which, device=device)
        self.rho = torch.stack([mod.rho.detach() for mod in models]).to(device).index_select(0, pick).contiguous()
        self.class_rho = torch.stack([mod.class_rho.detach() for mod in models]).to(device).index_select(0, pick)
        self.valid = t.valid.to(device)
        self.exp_avg = [torch.zeros_like(self.rho), torch.zeros_like(self.class_rho)]
        self.exp_avg_sq = [torch.zeros_like(self.rho), torch.zeros_like(self.class_rho)]
        self.grads = [torch.zeros_like(self.rho), torch.zeros_like(self.class_rho)]
        # Fused Adam's step (float32, as torch keeps it).
        self.step = torch.zeros((), dtype=torch.float32, device=device)
        self._adam_lists: dict = {}
        # Quantizers: per-configuration scale 2**B_F and bound U, broadcast over (D, P, K, C).
        quantizers = [c.quantizer() for c in configs]
        self.quantized = np.array([q is not None for q in quantizers])
        scale = [2.0**q.frac_bits if q is not None else 1.0 for q in quantizers]
        bound = [q.max_magnitude if q is not None else 0.0 for q in quantizers]
        self.scale = torch.tensor(scale, dtype=torch.float32, device=device)
        self.neg_bound = -torch.tensor(bound, dtype=torch.float32, device=device)
        self.is_quantized = torch.as_tensor(self.quantized, device=device)
        # Loss parameters (float32 per configuration, as the single run's Python scalars become).
        self.lam = np.array([c.hybrid_lambda for c in configs], dtype=np.float64)
        self.gamma = torch.tensor([c.hybrid_gamma for c in configs], dtype=torch.float32, device=device)
        self.eta = torch.tensor([c.hybrid_eta for c in configs], dtype=torch.float32, device=device)
        self.rates = np.stack([c.learning_rates() for c in configs]) if configs[0].epochs else np.zeros((m, 0))
        self.seeds = [c.seed for c in configs]
        self.eps = [c.adam_eps for c in configs]
        self._cache: dict = {}

    @property
    def m(self) -> int:
        return self.rho.shape[0]

    def adam_lists(self, members: tuple) -> tuple:
        """(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs) views of ``members`` for fused Adam (cached)."""
        if members not in self._adam_lists:
            per_tensor = [[], [], [], [], []]
            for tensors in zip([self.rho, self.class_rho], self.grads, self.exp_avg, self.exp_avg_sq):
                per_config = tensors[0][0].numel()
                if self.device.type == "cuda" or per_config % ADAM_UNIT == 0:
                    pieces = [
                        slice(a, b) for a, b in contiguous_runs(list(members))
                    ]  # one elementwise kernel: same math
                else:
                    pieces = list(members)
                for k, tensor in enumerate(tensors):
                    per_tensor[k].extend(tensor[p] for p in pieces)
            self._adam_lists[members] = tuple(per_tensor)
        return self._adam_lists[members]

    def keep(self, mask: np.ndarray) -> None:
        """Drop configurations (early stop): index_select along the configuration axis only."""
        idx = torch.as_tensor(np.flatnonzero(mask), device=self.device)
        self.generation += 1
        for name in ("rho", "class_rho", "scale", "neg_bound", "is_quantized", "gamma", "eta"):
            setattr(self, name, getattr(self, name).index_select(0, idx).contiguous())
        self.exp_avg = [t.index_select(0, idx).contiguous() for t in self.exp_avg]
        self.exp_avg_sq = [t.index_select(0, idx).contiguous() for t in self.exp_avg_sq]
        self.grads = [torch.zeros_like(self.rho), torch.zeros_like(self.class_rho)]
        self._adam_lists = {}
        self._cache = {}
        keep = np.flatnonzero(mask)
        self.quantized = self.quantized[keep]
        self.lam = self.lam[keep]
        self.rates = self.rates[keep]
        self.seeds = [self.seeds[i] for i in keep]
        self.eps = [self.eps[i] for i in keep]
        self.configs = [self.configs[i] for i in keep]

    def adam_groups(self) -> list[tuple[int, float, tuple]]:
        """:func:`schedule_groups` of the chunk (cached)."""
        if "groups" not in self._cache:
            self._cache["groups"] = schedule_groups(self.rates, self.eps)
        return self._cache["groups"]

    def rate_table(self) -> torch.Tensor:
        """:func:`rate_table` of the chunk (cached)."""
        return self.constant("rate_table", lambda: rate_table(self))

    def constant(self, name: str, make) -> torch.Tensor:
        """A per-chunk tensor built once (until configurations are dropped)."""
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]


def template_model(config: TrainConfig, dataset: DiscreteDataset, parents: np.ndarray) -> BayesNetClassifier:
    """The single run's model at initialisation (same seeds, same generator calls as ``train_bnc``)."""
    init_generator = torch.Generator().manual_seed(config.seed)
    return BayesNetClassifier(
        dataset.cardinalities,
        dataset.n_classes,
        parents,
        quantizer=config.quantizer(),
        init=config.init,
        data=(dataset.x_train, dataset.y_train),
        smoothing=config.smoothing,
        generator=init_generator,
    )


# -- one step -----------------------------------------------------------------------------------------
def _log_tables(chunk: Chunk):
    """Normalized tables ``theta`` (M, D, P, K, C), ``class_theta`` (M, C) and their quantized versions."""
    theta = torch.log_softmax(chunk.rho, dim=3)
    class_theta = torch.log_softmax(chunk.class_rho, dim=1)
    if not chunk.quantized.any():
        return theta, class_theta, theta, class_theta
    view = (-1, 1, 1, 1, 1)
    # Exactly the single run's ``round(theta * 2**B_F) / 2**B_F`` clamped to [-U, 0] (models._kernels).
    q = torch.round(theta * chunk.scale.view(view)).div_(chunk.scale.view(view))
    q = torch.maximum(q, chunk.neg_bound.view(view)).clamp_(max=0.0)
    cq = torch.round(class_theta * chunk.scale.view(-1, 1)).div_(chunk.scale.view(-1, 1))
    cq = torch.maximum(cq, chunk.neg_bound.view(-1, 1)).clamp_(max=0.0)
    if not chunk.quantized.all():
        q = torch.where(chunk.is_quantized.view(view), q, theta)
        cq = torch.where(chunk.is_quantized.view(-1, 1), cq, class_theta)
    return theta, class_theta, q, cq


def _gather_sum(table: torch.Tensor, class_table: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``log p(c, x)`` (M, n, C): per configuration ``class + sum_i table[indices[., i]]``.

    ``indices`` (M, n, D) rows of one configuration's flattened table; offsets make them rows of
    the stacked (M * R, C) table so one ``embedding_bag`` serves every configuration.
    """
    m, n, d = indices.shape
    n_rows, n_classes = table.shape[1] * table.shape[2] * table.shape[3], table.shape[-1]
    offsets = (torch.arange(m, device=indices.device) * n_rows).view(m, 1, 1)
    flat = (indices + offsets).view(m * n, d)
    log_joint = torch.nn.functional.embedding_bag(flat, table.reshape(m * n_rows, n_classes), mode="sum")
    return log_joint.view(m, n, n_classes).add_(class_table[:, None, :])


_MASKS: dict = {}


def _exclusion_mask(n_classes: int, device) -> torch.Tensor:
    key = (n_classes, str(device))
    if key not in _MASKS:
        _MASKS[key] = torch.zeros(n_classes, n_classes, device=device).fill_diagonal_(float("-inf"))
    return _MASKS[key]


def _hybrid(chunk: Chunk, log_joint: torch.Tensor, labels: torch.Tensor):
    """Per configuration: the mean hybrid loss (M,) and dL/dlog_joint (M, n, C).

    Operation for operation :func:`bnc_deploy.models._kernels.hybrid_forward`/``hybrid_backward``
    with per-configuration λ, γ, η (the single run's Python floats become the same float32s).
    """
    m, n, c = log_joint.shape
    true = log_joint.gather(2, labels[..., None])  # (M, n, 1)
    mask = _exclusion_mask(c, log_joint.device)
    # eta * lj rounded once, plus 0 or -inf: the single run's add_(lj, alpha=eta) gives the same bits.
    z = (log_joint * chunk.eta.view(m, 1, 1)).add_(mask.index_select(0, labels.reshape(-1)).view(m, n, c))
    z_max = z.amax(dim=2, keepdim=True)
    w = z.sub_(z_max).exp_()
    total = w.sum(dim=2, keepdim=True)
    smooth_max = total.log().add_(z_max).div_(chunk.eta.view(m, 1, 1)).add_(chunk.gamma.view(m, 1, 1)).sub_(true)
    active = smooth_max > 0
    lam = chunk.constant(
        "lam", lambda: torch.tensor(chunk.lam, dtype=torch.float32, device=log_joint.device).view(m, 1, 1)
    )
    loss = smooth_max.clamp_min_(0).mul_(lam).sub_(true).mean(dim=(1, 2))
    # hybrid_backward: coef = a * (lam / n); grad = w / total * coef, and -(coef + 1/n) at the label.
    lam_over_n = chunk.constant(
        f"lam/{n}", lambda: torch.tensor(chunk.lam / n, dtype=torch.float32, device=log_joint.device).view(m, 1, 1)
    )
    coef = active.to(w.dtype).mul_(lam_over_n)
    grad = w.div_(total).mul_(coef)
    grad.scatter_(2, labels[..., None], coef.add(1.0 / n).neg_())
    return loss, grad


def _nll(log_joint: torch.Tensor, labels: torch.Tensor):
    """``-log p(c_n, x_n)``: the single run's autograd gradient is -(1/n) at the label."""
    n = log_joint.shape[1]
    loss = -log_joint.gather(2, labels[..., None]).mean(dim=(1, 2))
    # float32(1/n) from the double 1/n equals autograd's float32 1/n (both correctly rounded).
    grad = torch.zeros_like(log_joint).scatter_(2, labels[..., None], -(1.0 / n))
    return loss, grad


def _cll(log_joint: torch.Tensor, labels: torch.Tensor):
    """Cross-entropy of ``p(c | x)``: log-softmax and its backward kernel, as autograd runs them."""
    m, n, c = log_joint.shape
    flat = log_joint.reshape(m * n, c)
    log_p = torch.log_softmax(flat, dim=1)
    # The reported loss per configuration through nll_loss itself: its own summation order (a
    # batched mean rounds differently), so the history equals the single run's.
    log_p3, labels2 = log_p.view(m, n, c), labels.reshape(m, n)
    loss = torch.stack([torch.nn.functional.nll_loss(log_p3[j], labels2[j]) for j in range(m)])
    grad_out = torch.zeros_like(flat).scatter_(1, labels.reshape(-1, 1), -(1.0 / n))
    grad = torch._log_softmax_backward_data(grad_out, log_p, 1, flat.dtype)
    return loss, grad.view(m, n, c)


def _table_grad(chunk: Chunk, indices: torch.Tensor, grad: torch.Tensor, shared: bool) -> torch.Tensor:
    """dL/dtheta (M, R, C) from dL/dlog_joint (M, n, C): each table row sums the gradients of the rows that read it.

    The same method per configuration as ``_kernels.log_joint_backward``: a one-hot count matrix
    times the gradient while ``n * R`` is small, else ``index_add_``.
    """
    m, n, d = indices.shape
    n_rows, n_classes = chunk.n_rows, chunk.n_classes
    if n * n_rows <= _ONEHOT_GRAD_MAX_ELEMENTS:
        ones = torch.ones((1, n, d) if shared else (m, n, d), device=grad.device)
        src = indices[:1] if shared else indices
        counts = torch.zeros(src.shape[0], n, n_rows, device=grad.device).scatter_add_(2, src, ones)
        if shared and grad.device.type == "cuda":
            # One (R, n) @ (n, M*C) product instead of M broadcast ones (no expanded count copies).
            folded = counts[0].T @ grad.permute(1, 0, 2).reshape(n, m * n_classes)
            return folded.view(n_rows, m, n_classes).permute(1, 0, 2)
        if shared:
            # (R, n) @ (M, n, C): on the CPU each configuration's product has the single run's bits.
            return torch.matmul(counts[0].T, grad)
        return torch.bmm(counts.transpose(1, 2), grad)
    offsets = (torch.arange(m, device=grad.device) * n_rows).view(m, 1, 1)
    table = torch.zeros(m * n_rows, n_classes, device=grad.device)
    for j in range(m):  # per configuration, in the single run's order of additions
        table[j * n_rows : (j + 1) * n_rows].index_add_(0, indices[j].reshape(-1), grad[j].repeat_interleave(d, dim=0))
    del offsets
    return table.view(m, n_rows, n_classes)


def _adam(chunk: Chunk, lrs) -> None:
    """torch's fused Adam on ``chunk.grads``, once per group of configurations with equal schedule and
    eps; ``lrs``: each group's learning rate (floats, or a (groups,) tensor on the device)."""
    chunk.step += 1
    for (_, eps, members), lr in zip(chunk.adam_groups(), lrs, strict=True):
        lists = chunk.adam_lists(members)
        torch._fused_adam_(
            *lists,
            [chunk.step] * len(lists[0]),
            lr=lr,
            beta1=0.9,
            beta2=0.999,
            weight_decay=0.0,
            eps=float(eps),
            amsgrad=False,
            maximize=False,
        )


# -- one epoch and an evaluation ------------------------------------------------------------------
def run_epoch(
    chunk: Chunk, perms: dict, epoch: int, train_idx, train_y, n_batches: int, batch: int, loss_name: str, device
) -> tuple[np.ndarray, np.ndarray]:
    """One epoch of every configuration of ``chunk``: (mean batch loss, training error) per configuration."""
    seeds = chunk.seeds
    shared = len(set(seeds)) == 1
    if shared:
        order = perms[seeds[0]].to(device)[None, :]
    else:
        order = torch.stack([perms[s] for s in seeds]).to(device)
    loss_sum = torch.zeros(chunk.m, dtype=torch.float64, device=device)
    wrong = torch.zeros(chunk.m, dtype=torch.int64, device=device)

    def body(inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        return _batch_step(chunk, inputs["rows"], train_idx, train_y, shared, loss_name, inputs["lr"])

    for b in range(n_batches):
        rows = order[:, b * batch : (b + 1) * batch]  # (1 or M, batch)
        if chunk.graph is None:
            loss, errors = _batch_step(chunk, rows, train_idx, train_y, shared, loss_name, group_rates(chunk, epoch))
        else:
            inputs = {"rows": rows, "lr": chunk.rate_table()[:, epoch - 1]}
            loss, errors = chunk.graph.step((chunk.generation, shared), inputs, body)
        loss_sum += loss.double()
        wrong += errors
    return (loss_sum / n_batches).cpu().numpy(), wrong.cpu().numpy() / (n_batches * batch)


def _batch_step(
    chunk: Chunk, rows: torch.Tensor, train_idx, train_y, shared: bool, loss_name: str, lrs
) -> tuple[torch.Tensor, torch.Tensor]:
    """One update of every configuration on the training rows ``rows`` ((1 or M, batch)): (loss, wrong rows)."""
    idx = train_idx[rows].expand(chunk.m, -1, -1) if shared else train_idx[rows]
    labels = train_y[rows].expand(chunk.m, -1) if shared else train_y[rows]
    theta, class_theta, q, cq = _log_tables(chunk)
    log_joint = _gather_sum(q, cq, idx)
    loss, grad = _loss(chunk, log_joint, labels, loss_name)
    wrong = (log_joint.argmax(dim=2) != labels).sum(dim=1)
    grad_theta = _table_grad(chunk, idx, grad, shared).reshape(theta.shape)
    # log_softmax backward (g - softmax * sum g), written into the buffers fused Adam reads.
    torch.sub(grad_theta, theta.exp() * grad_theta.sum(dim=3, keepdim=True), out=chunk.grads[0])
    grad_class_theta = grad.sum(dim=1)
    torch.sub(grad_class_theta, class_theta.exp() * grad_class_theta.sum(dim=1, keepdim=True), out=chunk.grads[1])
    _adam(chunk, lrs)
    return loss, wrong


def _loss(chunk: Chunk, log_joint: torch.Tensor, labels: torch.Tensor, loss_name: str):
    """(loss (M,), dL/dlog_joint) of the chunk's loss."""
    if loss_name == "hybrid":
        return _hybrid(chunk, log_joint, labels.contiguous())
    if loss_name == "nll":
        return _nll(log_joint, labels.contiguous())
    return _cll(log_joint, labels.contiguous())


@torch.no_grad()
def evaluate(chunk: Chunk, evals: dict, budget: int = 1 << 28) -> dict:
    """Error per configuration on each evaluation split, as float32 ``mean(argmax != y)`` like the single run.

    Rows go in blocks so that the block's log-joints and indices stay within ``budget`` bytes.
    """
    _, _, q, cq = _log_tables(chunk)
    out = {}
    for name, (indices, labels) in evals.items():
        block = max(1, budget // (chunk.m * (chunk.n_classes * 4 + indices.shape[1] * 8)))
        wrong = torch.zeros(chunk.m, dtype=torch.int64, device=indices.device)
        for start in range(0, labels.shape[0], block):
            idx = indices[start : start + block]
            lj = _gather_sum(q, cq, idx[None].expand(chunk.m, -1, -1))
            wrong += (lj.argmax(dim=2) != labels[start : start + block]).sum(dim=1)
        n = labels.shape[0]
        # float32(count) / float32(n): the single run's float32 mean of 0/1 values, bit for bit.
        out[name] = (
            (wrong.cpu().numpy().astype(np.float32) / np.float32(n))
            if n
            else np.full(chunk.m, np.nan, dtype=np.float32)
        )
    return out
