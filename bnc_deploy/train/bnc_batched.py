"""Batched training of many BN classifiers at once: one tensor program with a leading configuration axis.

The models of a sweep are tiny, so the work is many small models. This trainer runs ``M``
configurations as ONE program: parameters ``rho (M, D, P, K, C)`` and ``class_rho (M, C)``, one
log-softmax, one quantizer pass, one gather-sum and one closed-form backward for all of them per
step, and one fused Adam call per learning-rate group. It runs on the CPU or on a GPU
(``device="cuda"``).

Contract
--------
* **Same algorithm as ``bnc-train``** (:func:`bnc_deploy.train.bnc.train_bnc`): the paper's hybrid
  loss (or ``nll``/``cll``), QAT with the straight-through estimator, Adam (torch's fused kernel),
  log-linear learning-rate decay, a per-epoch reshuffle from a generator seeded ``seed + 1``, the
  last incomplete batch dropped, initialisation from a generator seeded ``seed``.
* **Batch of one = bnc-train, bit for bit**, and **a configuration's result does not depend on what
  it was batched with**: every configuration keeps its own data order and initialisation, and
  every per-configuration value is computed by the same kernels on the same memory layout as the
  single-run trainer (each configuration's slice of ``rho`` is laid out exactly like the single
  run's tensor). ``tests/test_bnc_batched.py`` checks both on the CPU. On a GPU results are
  deterministic per configuration but not equal to the CPU's bits (different kernels).
* Configurations of one call must share the data (dataset, fold, validation split), the model and
  structure (parents), batch size, epochs and loss; they may differ in lr, lr decay, λ, γ, η, B,
  B_I (or float), seed, init, smoothing and Adam's eps. :func:`chunk_key` is the sharing rule;
  :class:`~bnc_deploy.errors.ConfigError` otherwise.
* Evaluation (validation and test error) runs at the ``checkpoints`` epochs only (every epoch
  gives the single run's full history); training loss and error are measured on the fly every
  epoch, as the single run does.
* ``on_checkpoint(epoch, view) -> keep mask or None`` lets a caller stop configurations early
  (successive halving): stopped configurations leave the tensors and finish with their state at
  that epoch; the others continue exactly as if they had never been batched with them.
* Memory: ``max_configs`` (default: from the device's free memory) splits larger calls into
  chunks that run one after another; results come back in input order.

Only this module and ``bnc.py`` build model files from the trained tables
(:func:`finish_artifact`, the single run's own artifact code).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bnc_deploy.datasets.base import DiscreteDataset
from bnc_deploy.errors import ConfigError
from bnc_deploy.models.bnc import BayesNetClassifier
from bnc_deploy.train.bnc import (
    TrainConfig,
    _check_reference_agrees,
    _to_artifact,
    resolve_parents,
)
from bnc_deploy.train.common import TrainResult

#: Fields of TrainConfig that configurations of one call must share (besides the data).
SHARED_FIELDS = ("model", "structure", "epochs", "batch_size", "loss")
#: Fields that may differ within one call.
VARYING_FIELDS = ("bits", "int_bits", "init", "smoothing", "lr", "lr_decay", "hybrid_lambda", "hybrid_gamma",
                  "hybrid_eta", "seed", "adam_eps")


def chunk_key(config: TrainConfig) -> tuple:
    """Configurations with equal keys can be trained in one batched call (given the same data)."""
    return tuple(getattr(config, name) for name in SHARED_FIELDS)


def resolve_device(device: str | None) -> torch.device:
    """``"cpu"``, ``"cuda"[:N]`` or ``"auto"`` (a GPU when torch sees one). ConfigError for a GPU that is absent."""
    device = device or "cpu"
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"unknown device {device!r}: use cpu, cuda, cuda:N or auto") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: torch sees no CUDA GPU here (torch {torch.__version__}; "
                          f"use --device cpu or auto)")
    if resolved.type not in ("cpu", "cuda"):
        raise ConfigError(f"unsupported device {device!r}: use cpu, cuda, cuda:N or auto")
    return resolved


def describe_device(device: str | None) -> str:
    """The resolved device in words (``cuda (NVIDIA H100 80GB HBM3)``, ``cpu (2 threads)``)."""
    resolved = resolve_device(device)
    if resolved.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(resolved)})"
    return f"cpu ({torch.get_num_threads()} threads)"


@dataclass
class BatchedRun:
    """One configuration's outcome: its history, final tables, and (when built) its model file."""

    config: TrainConfig
    history: dict
    checkpoints: list[dict]          # {"epoch", "train_loss", "train_error", "val_error", "test_error"}
    stopped_at: int | None           # epoch of an early stop (halving), else None
    class_rho: np.ndarray            # (C,) float32, unnormalized
    rho: np.ndarray                  # (D, P, K, C) float32, unnormalized, padded
    seconds: float                   # this configuration's share of the chunk's wall time
    result: TrainResult | None = None


@dataclass
class CheckpointView:
    """What ``on_checkpoint`` sees: the epoch and, per active configuration (input indices), its errors."""

    epoch: int
    indices: np.ndarray              # input positions of the active configurations
    train_error: np.ndarray
    train_loss: np.ndarray
    val_error: np.ndarray | None
    test_error: np.ndarray


# -- the chunk's state ------------------------------------------------------------------------------
class _Chunk:
    """Tensors of M configurations that share data, structure and schedule length."""

    def __init__(self, configs: list[TrainConfig], dataset: DiscreteDataset, parents: np.ndarray,
                 device: torch.device):
        self.configs = configs
        self.device = device
        m = len(configs)
        # One template model per configuration: the single run's own initialisation code (an ML
        # initialisation depends on the data and smoothing only, so it is built once per smoothing).
        ml: dict = {}
        models = []
        for c in configs:
            if c.init == "ml":
                if c.smoothing not in ml:
                    ml[c.smoothing] = _template(c, dataset, parents)
                models.append(ml[c.smoothing])
            else:
                models.append(_template(c, dataset, parents))
        t = models[0]
        self.shape = tuple(t.rho.shape)                                      # (D, P, K, C)
        self.n_rows = int(np.prod(self.shape[:3]))
        self.n_classes = t.n_classes
        self.template = t
        self.rho = torch.stack([mod.rho.detach() for mod in models]).to(device).contiguous()
        self.class_rho = torch.stack([mod.class_rho.detach() for mod in models]).to(device).contiguous()
        self.valid = t.valid.to(device)
        self.exp_avg = [torch.zeros_like(self.rho), torch.zeros_like(self.class_rho)]
        self.exp_avg_sq = [torch.zeros_like(self.rho), torch.zeros_like(self.class_rho)]
        self.grads = [torch.zeros_like(self.rho), torch.zeros_like(self.class_rho)]
        self.step = torch.zeros((), dtype=torch.float32, device=device)  # fused Adam's step (float32, as torch keeps it)
        self._adam_lists: dict = {}
        # Quantizers: per-configuration scale 2**B_F and bound U, broadcast over (D, P, K, C).
        quantizers = [c.quantizer() for c in configs]
        self.quantized = np.array([q is not None for q in quantizers])
        scale = [2.0 ** q.frac_bits if q is not None else 1.0 for q in quantizers]
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
                if self.device.type == "cuda" or per_config % _ADAM_UNIT == 0:
                    pieces = [slice(a, b) for a, b in _runs(list(members))]   # one elementwise kernel: same math
                else:
                    pieces = list(members)
                for k, tensor in enumerate(tensors):
                    per_tensor[k].extend(tensor[p] for p in pieces)
            self._adam_lists[members] = tuple(per_tensor)
        return self._adam_lists[members]

    def keep(self, mask: np.ndarray) -> None:
        """Drop configurations (early stop): index_select along the configuration axis only."""
        idx = torch.as_tensor(np.flatnonzero(mask), device=self.device)
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
        """``(first member, eps, members)`` per group of equal learning-rate schedule and eps (cached)."""
        if "groups" not in self._cache:
            groups: dict = {}
            for j in range(self.m):
                groups.setdefault((self.rates[j].tobytes(), self.eps[j]), []).append(j)
            self._cache["groups"] = [(members[0], eps, tuple(members)) for (_, eps), members in groups.items()]
        return self._cache["groups"]

    def constant(self, name: str, make) -> torch.Tensor:
        """A per-chunk tensor built once (until configurations are dropped)."""
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]


def _template(config: TrainConfig, dataset: DiscreteDataset, parents: np.ndarray) -> BayesNetClassifier:
    """The single run's model at initialisation (same seeds, same generator calls as ``train_bnc``)."""
    init_generator = torch.Generator().manual_seed(config.seed)
    return BayesNetClassifier(dataset.cardinalities, dataset.n_classes, parents, quantizer=config.quantizer(),
                              init=config.init, data=(dataset.x_train, dataset.y_train),
                              smoothing=config.smoothing, generator=init_generator)


# -- one step -----------------------------------------------------------------------------------------
def _log_tables(chunk: _Chunk):
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


def _hybrid(chunk: _Chunk, log_joint: torch.Tensor, labels: torch.Tensor):
    """Per configuration: the mean hybrid loss (M,) and dL/dlog_joint (M, n, C).

    Operation for operation :func:`bnc_deploy.models._kernels.hybrid_forward`/``hybrid_backward``
    with per-configuration λ, γ, η (the single run's Python floats become the same float32s).
    """
    m, n, c = log_joint.shape
    true = log_joint.gather(2, labels[..., None])                                          # (M, n, 1)
    mask = _exclusion_mask(c, log_joint.device)
    # eta * lj rounded once, plus 0 or -inf: the single run's add_(lj, alpha=eta) gives the same bits.
    z = (log_joint * chunk.eta.view(m, 1, 1)).add_(mask.index_select(0, labels.reshape(-1)).view(m, n, c))
    z_max = z.amax(dim=2, keepdim=True)
    w = z.sub_(z_max).exp_()
    total = w.sum(dim=2, keepdim=True)
    smooth_max = total.log().add_(z_max).div_(chunk.eta.view(m, 1, 1)).add_(chunk.gamma.view(m, 1, 1)).sub_(true)
    active = smooth_max > 0
    lam = chunk.constant("lam", lambda: torch.tensor(chunk.lam, dtype=torch.float32,
                                                     device=log_joint.device).view(m, 1, 1))
    loss = smooth_max.clamp_min_(0).mul_(lam).sub_(true).mean(dim=(1, 2))
    # hybrid_backward: coef = a * (lam / n); grad = w / total * coef, and -(coef + 1/n) at the label.
    lam_over_n = chunk.constant(f"lam/{n}", lambda: torch.tensor(chunk.lam / n, dtype=torch.float32,
                                                                 device=log_joint.device).view(m, 1, 1))
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


#: Mirrors ``models._kernels._ONEHOT_GRAD_MAX_ELEMENTS`` (the single run's choice per configuration).
from bnc_deploy.models._kernels import _ONEHOT_GRAD_MAX_ELEMENTS


def _table_grad(chunk: _Chunk, indices: torch.Tensor, grad: torch.Tensor, shared: bool) -> torch.Tensor:
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
        table[j * n_rows:(j + 1) * n_rows].index_add_(0, indices[j].reshape(-1),
                                                      grad[j].repeat_interleave(d, dim=0))
    del offsets
    return table.view(m, n_rows, n_classes)


#: torch's CPU fused Adam splits each tensor into 16-float units and runs the vector loop over whole
#: vectors and a scalar loop over the tensor's last ``numel % vector`` elements, and the two loops
#: round differently. A configuration's slice of a stacked tensor therefore gets the single run's
#: bits only if its size is a multiple of this; otherwise each configuration is passed as its own
#: tensor (its tail then runs the scalar loop, as in the single run).
_ADAM_UNIT = 16


def _adam(chunk: _Chunk, epoch: int) -> None:
    """torch's fused Adam on ``chunk.grads``, once per group of configurations with equal schedule and eps."""
    chunk.step += 1
    for first, eps, members in chunk.adam_groups():
        lists = chunk.adam_lists(members)
        torch._fused_adam_(*lists, [chunk.step] * len(lists[0]), lr=float(chunk.rates[first, epoch - 1]), beta1=0.9,
                           beta2=0.999, weight_decay=0.0, eps=float(eps), amsgrad=False, maximize=False)


def _runs(members: list[int]) -> list[tuple[int, int]]:
    """Contiguous [start, stop) runs of sorted indices (fused Adam takes contiguous slices)."""
    runs, start = [], members[0]
    for prev, cur in itertools.pairwise(members):
        if cur != prev + 1:
            runs.append((start, prev + 1))
            start = cur
    runs.append((start, members[-1] + 1))
    return runs


# -- the loop -----------------------------------------------------------------------------------------
def train_bnc_batched(dataset: DiscreteDataset, configs: Sequence[TrainConfig], *, device: str = "cpu",
                      checkpoints: Sequence[int] | None = None,
                      on_checkpoint: Callable[[CheckpointView], np.ndarray | None] | None = None,
                      build: bool | Callable[[int, BatchedRun], bool] = True,
                      max_configs: int | None = None, parents: np.ndarray | None = None,
                      structure_source: str | None = None,
                      on_epoch: Callable[[int, int], None] | None = None) -> list[BatchedRun]:
    """Train every configuration of ``configs`` (sharing :func:`chunk_key`) on ``dataset``.

    ``checkpoints``: epochs (1-based) at which validation and test error are measured (None: every
    epoch, which is the single run's history; the last epoch is always one). ``build``: True to make
    each configuration's model file (:class:`TrainResult` in ``.result``, as ``train_bnc`` returns),
    False for none, or ``build(i, run)`` to decide per configuration (e.g. only the best ones).
    ``on_epoch(epoch, active)`` after every epoch (progress bars).
    """
    configs = list(configs)
    if not configs:
        return []
    for c in configs:
        c.validate()
    first = chunk_key(configs[0])
    for i, c in enumerate(configs):
        if chunk_key(c) != first:
            diff = [f"{n}={getattr(c, n)!r} (first: {getattr(configs[0], n)!r})"
                    for n in SHARED_FIELDS if getattr(c, n) != getattr(configs[0], n)]
            raise ConfigError(f"configuration {i} cannot be batched with configuration 0: {', '.join(diff)}")
    dev = resolve_device(device)
    if parents is None:
        parents, structure_source = resolve_parents(configs[0], dataset)
    size = max_configs or _default_max_configs(configs[0], dataset, parents, dev)
    # Configurations with one learning-rate schedule and eps side by side: fused Adam then takes
    # one slice per group instead of one per configuration (results do not depend on the order).
    order = sorted(range(len(configs)), key=lambda i: (configs[i].lr, configs[i].lr_decay, configs[i].adam_eps))
    runs: list[BatchedRun | None] = [None] * len(configs)
    for start in range(0, len(order), size):
        positions = np.asarray(order[start:start + size])
        ran = _train_chunk(dataset, [configs[i] for i in positions], parents, dev, checkpoints, on_checkpoint,
                           positions, on_epoch)
        for pos, run in zip(positions, ran):
            wanted = build(int(pos), run) if callable(build) else build
            if wanted:
                run.result = finish_artifact(run, dataset, parents, structure_source)
            runs[int(pos)] = run
    return runs


def _default_max_configs(config: TrainConfig, dataset: DiscreteDataset, parents, device: torch.device) -> int:
    """Configurations per chunk so that the chunk's tensors fit comfortably in memory."""
    per_config = _table_size(dataset, parents) * 4
    n_eval = max(len(dataset.y_test), len(dataset.y_val) if dataset.y_val is not None else 0)
    # ~10 parameter-sized buffers (rho, Adam's two, theta, its quantized copy, gradients) plus the
    # evaluation's log-joint block and the batch's one-hot counts.
    # ~14 parameter-sized buffers at the peak of a step (rho, Adam's two, gradients, theta, its
    # quantized copy, exp(theta), the table gradient and temporaries) plus one evaluation block.
    per_config = per_config * 14 + min(n_eval, 4096) * dataset.n_classes * 4
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget = free * 0.5
    else:
        budget = 2 << 30   # 2 GiB on the CPU: fits CI machines, and larger chunks gain nothing there
    return max(1, int(budget // max(per_config, 1)))


#: CPU blocks: configurations whose tables together hold about this many floats are stepped as one
#: tensor program. A block's step then works in the caches; larger blocks were slower per
#: configuration-epoch on the 2-core CI machine (letter NB: M = 64 fastest, M = 256 slower).
CPU_BLOCK_FLOATS = 1 << 19


def _table_size(dataset: DiscreteDataset, parents: np.ndarray) -> int:
    """Floats of one configuration's padded ``rho`` (D, P, K, C)."""
    cards = np.asarray(dataset.cardinalities, dtype=np.int64)
    p_card = np.where(parents >= 0, cards[np.maximum(parents, 0)], 1)
    return int(len(cards) * max(int(p_card.max(initial=1)), 1) * max(int(cards.max(initial=1)), 1) * dataset.n_classes)


def _block_size(n_params: int, device: torch.device, m: int) -> int:
    if device.type == "cuda":
        return m
    return max(1, CPU_BLOCK_FLOATS // max(n_params, 1))


@dataclass
class _Block:
    chunk: _Chunk
    active: np.ndarray          # chunk positions (0..M-1) of the block's configurations still training


def _run_epoch(chunk: _Chunk, perms: dict, epoch: int, train_idx, train_y, n_batches: int, batch: int,
               loss_name: str, device) -> tuple[np.ndarray, np.ndarray]:
    """One epoch of every configuration of ``chunk``: (mean batch loss, training error) per configuration."""
    seeds = chunk.seeds
    shared = len(set(seeds)) == 1
    if shared:
        order = perms[seeds[0]].to(device)[None, :]
    else:
        order = torch.stack([perms[s] for s in seeds]).to(device)
    loss_sum = torch.zeros(chunk.m, dtype=torch.float64, device=device)
    wrong = torch.zeros(chunk.m, dtype=torch.int64, device=device)
    for b in range(n_batches):
        rows = order[:, b * batch:(b + 1) * batch]                           # (1 or M, batch)
        idx = train_idx[rows].expand(chunk.m, -1, -1) if shared else train_idx[rows]
        labels = train_y[rows].expand(chunk.m, -1) if shared else train_y[rows]
        theta, class_theta, q, cq = _log_tables(chunk)
        log_joint = _gather_sum(q, cq, idx)
        if loss_name == "hybrid":
            loss, grad = _hybrid(chunk, log_joint, labels.contiguous())
        elif loss_name == "nll":
            loss, grad = _nll(log_joint, labels.contiguous())
        else:
            loss, grad = _cll(log_joint, labels.contiguous())
        loss_sum += loss.double()
        wrong += (log_joint.argmax(dim=2) != labels).sum(dim=1)
        grad_theta = _table_grad(chunk, idx, grad, shared).reshape(theta.shape)
        # log_softmax backward (g - softmax * sum g), written into the buffers fused Adam reads.
        torch.sub(grad_theta, theta.exp() * grad_theta.sum(dim=3, keepdim=True), out=chunk.grads[0])
        grad_class_theta = grad.sum(dim=1)
        torch.sub(grad_class_theta, class_theta.exp() * grad_class_theta.sum(dim=1, keepdim=True),
                  out=chunk.grads[1])
        _adam(chunk, epoch)
    return (loss_sum / n_batches).cpu().numpy(), wrong.cpu().numpy() / (n_batches * batch)


def _train_chunk(dataset, configs, parents, device, checkpoints, on_checkpoint, positions, on_epoch) -> list[BatchedRun]:
    """Train ``configs`` together (memory permitting) in blocks stepped one after another each epoch.

    All blocks advance epoch by epoch, so a checkpoint (and ``on_checkpoint``, e.g. halving)
    sees every configuration of the chunk at once.
    """
    started = time.perf_counter()
    m0 = len(configs)
    size = _block_size(_table_size(dataset, parents), device, m0)
    blocks = [_Block(_Chunk(configs[a:a + size], dataset, parents, device), np.arange(a, min(a + size, m0)))
              for a in range(0, m0, size)]
    t = blocks[0].chunk.template
    epochs, batch = configs[0].epochs, configs[0].batch_size
    loss_name = configs[0].loss
    train_idx = t.flat_indices(dataset.x_train).to(device)
    train_y = torch.as_tensor(dataset.y_train, dtype=torch.int64, device=device)
    evals = {"test": (t.flat_indices(dataset.x_test).to(device),
                      torch.as_tensor(dataset.y_test, dtype=torch.int64, device=device))}
    if dataset.x_val is not None:
        evals["val"] = (t.flat_indices(dataset.x_val).to(device),
                        torch.as_tensor(dataset.y_val, dtype=torch.int64, device=device))
    n = train_y.shape[0]
    n_batches = n // batch
    if epochs and n_batches == 0:
        raise ConfigError(f"batch size {batch} is larger than the training set ({n} rows)")
    wanted = set(range(1, epochs + 1)) if checkpoints is None else {e for e in checkpoints if 1 <= e <= epochs}
    if epochs:
        wanted.add(epochs)
    # Dense (configuration x epoch) records, filled for the active rows each epoch (active only
    # shrinks, so a configuration's record is a prefix); per-configuration lists are built at the end.
    per_epoch = {key: np.full((m0, epochs), np.nan) for key in ("lr", "train_loss", "train_error", "seconds")}
    last_epoch = np.zeros(m0, dtype=np.int64)
    check_epochs: list[int] = []
    per_check = {key: np.full((m0, len(wanted)), np.nan) for key in ("val_error", "test_error")}
    stopped: dict[int, tuple] = {}
    # One shuffle stream per distinct seed: configurations with equal seeds share their order.
    generators = {s: torch.Generator().manual_seed(s + 1) for s in sorted({c.seed for c in configs})}
    for epoch in range(1, epochs + 1):
        epoch_started = time.perf_counter()
        perms = {s: torch.randperm(n, generator=g) for s, g in generators.items()}
        for blk in blocks:
            losses, errors = _run_epoch(blk.chunk, perms, epoch, train_idx, train_y, n_batches, batch, loss_name,
                                        device)
            if not np.all(np.isfinite(losses)):
                bad = int(blk.active[np.flatnonzero(~np.isfinite(losses))[0]])
                raise FloatingPointError(f"configuration {int(positions[bad])}: training loss became "
                                         f"{losses[~np.isfinite(losses)][0]} in epoch {epoch}; try a smaller lr")
            per_epoch["lr"][blk.active, epoch - 1] = blk.chunk.rates[:, epoch - 1]
            per_epoch["train_loss"][blk.active, epoch - 1] = losses
            per_epoch["train_error"][blk.active, epoch - 1] = errors
            last_epoch[blk.active] = epoch
        measured = epoch in wanted
        if measured:
            check_epochs.append(epoch)
            for blk in blocks:
                for name, values in _evaluate(blk.chunk, evals).items():
                    per_check[f"{name}_error"][blk.active, len(check_epochs) - 1] = values
        active = np.concatenate([blk.active for blk in blocks])
        per_epoch["seconds"][active, epoch - 1] = (time.perf_counter() - epoch_started) / len(active)
        if on_epoch is not None:
            on_epoch(epoch, len(active))
        if measured and on_checkpoint is not None and epoch < epochs:
            k = len(check_epochs) - 1
            view = CheckpointView(epoch, positions[active], per_epoch["train_error"][active, epoch - 1],
                                  per_epoch["train_loss"][active, epoch - 1],
                                  per_check["val_error"][active, k] if "val" in evals else None,
                                  per_check["test_error"][active, k])
            keep = on_checkpoint(view)
            if keep is not None and not np.all(keep):
                keep = np.asarray(keep, dtype=bool)
                start = 0
                for blk in blocks:
                    part = keep[start:start + blk.chunk.m]
                    start += blk.chunk.m
                    for j in np.flatnonzero(~part):
                        stopped[int(blk.active[j])] = (epoch, blk.chunk.rho[j].cpu().numpy().copy(),
                                                       blk.chunk.class_rho[j].cpu().numpy().copy())
                    if not part.all():
                        blk.chunk.keep(part)
                        blk.active = blk.active[part]
                blocks = [blk for blk in blocks if blk.chunk.m > 0]
                if not blocks:
                    break
    total = time.perf_counter() - started
    final = {int(pos): (blk.chunk.rho[j].cpu().numpy(), blk.chunk.class_rho[j].cpu().numpy())
             for blk in blocks for j, pos in enumerate(blk.active)}
    out: list[BatchedRun] = []
    has_val = "val" in evals
    for pos in range(m0):
        n_epochs = int(last_epoch[pos])
        n_checks = sum(1 for e in check_epochs if e <= n_epochs)
        # The single run's key order (train.common.HISTORY_KEYS).
        h = {key: per_epoch[key][pos, :n_epochs].tolist() for key in ("lr", "train_loss", "train_error")}
        if has_val:
            h["val_error"] = per_check["val_error"][pos, :n_checks].tolist()
        h["test_error"] = per_check["test_error"][pos, :n_checks].tolist()
        h["seconds"] = per_epoch["seconds"][pos, :n_epochs].tolist()
        points = [{"epoch": e, "train_loss": h["train_loss"][e - 1], "train_error": h["train_error"][e - 1],
                   "val_error": h["val_error"][k] if has_val else None, "test_error": h["test_error"][k]}
                  for k, e in enumerate(check_epochs[:n_checks])]
        if checkpoints is not None:
            h["checkpoint_epochs"] = check_epochs[:n_checks]
        if pos in stopped:
            epoch_stopped, rho, class_rho = stopped[pos]
        else:
            epoch_stopped = None
            rho, class_rho = final[pos]
        out.append(BatchedRun(config=configs[pos], history=h, checkpoints=points, stopped_at=epoch_stopped,
                              class_rho=class_rho, rho=rho, seconds=total / m0))
    return out


@torch.no_grad()
def _evaluate(chunk: _Chunk, evals: dict, budget: int = 1 << 28) -> dict:
    """Error per configuration on each evaluation split, as float32 ``mean(argmax != y)`` like the single run.

    Rows go in blocks so that the block's log-joints and indices stay within ``budget`` bytes.
    """
    _, _, q, cq = _log_tables(chunk)
    out = {}
    for name, (indices, labels) in evals.items():
        block = max(1, budget // (chunk.m * (chunk.n_classes * 4 + indices.shape[1] * 8)))
        wrong = torch.zeros(chunk.m, dtype=torch.int64, device=indices.device)
        for start in range(0, labels.shape[0], block):
            idx = indices[start:start + block]
            lj = _gather_sum(q, cq, idx[None].expand(chunk.m, -1, -1))
            wrong += (lj.argmax(dim=2) != labels[start:start + block]).sum(dim=1)
        n = labels.shape[0]
        # float32(count) / float32(n): the single run's float32 mean of 0/1 values, bit for bit.
        out[name] = (wrong.cpu().numpy().astype(np.float32) / np.float32(n)) if n else \
            np.full(chunk.m, np.nan, dtype=np.float32)
    return out


def finish_artifact(run: BatchedRun, dataset: DiscreteDataset, parents: np.ndarray,
                    structure_source: str | None) -> TrainResult:
    """The configuration's model file, built by the single run's own code (reference check included)."""
    model = _template(run.config, dataset, parents)
    with torch.no_grad():
        model.rho.copy_(torch.as_tensor(run.rho))
        model.class_rho.copy_(torch.as_tensor(run.class_rho))
    seconds = run.seconds
    artifact = _to_artifact(model, dataset, run.config, parents, structure_source, run.history, seconds=seconds)
    test_indices = model.flat_indices(dataset.x_test)
    _check_reference_agrees(model, artifact, test_indices, dataset.x_test)
    if run.stopped_at is not None:
        artifact.metadata["stopped_at_epoch"] = run.stopped_at
    return TrainResult(artifact=artifact, history=run.history, seconds=seconds)
