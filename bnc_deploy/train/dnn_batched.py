"""Batched training of many quantized FC nets / CNNs at once: one tensor program per architecture.

The DNN baselines of a sweep are small nets; this trainer runs the ``M`` configurations of one
architecture (layers and widths) as ONE program (:class:`~bnc_deploy.models.dnn_stacked.StackedDNN`):
one forward and backward pass, one loss, one fused Adam call per learning-rate group per step. It
runs on the CPU or on a GPU (``device="cuda"``). ``bnc-train-dnn`` (:func:`bnc_deploy.train.dnn.train_dnn`)
is this trainer with one configuration.

Contract
--------
* **The single run's algorithm**: cross-entropy, Adam (torch's fused kernel), the log-linear
  learning-rate decay, a per-epoch reshuffle from a generator seeded ``seed + 1`` with the last
  incomplete batch dropped, the initialisation of :func:`bnc_deploy.train.dnn.build_model` under
  ``torch.manual_seed(seed)``, stochastic signs from a generator seeded ``seed + 2``, latent
  weights clamped to [-1, 1] after every step.
* **A batch of one is the single run, and on the CPU a configuration's result does not depend on
  what it was batched with** (bit for bit: history, weights, model file): every configuration keeps
  its own initialisation, data order and sign stream, and the stacked program computes each
  configuration's slice with the single network's kernels and shapes
  (:mod:`bnc_deploy.models.dnn_stacked` says how). ``tests/test_dnn_batched.py`` checks both. On a
  GPU the results are deterministic for a given chunk, not the CPU's bits.
* Configurations of one call may differ in anything :class:`~bnc_deploy.train.dnn.DNNConfig` holds.
  They are grouped into **buckets** that share :func:`bucket_key` (architecture, layers, resolved
  widths, activation, batch norm, input encoding, epochs, batch size), run back to back; within a
  bucket they may differ in lr, lr decay, Adam's eps, weight bits and seed. Where widths mix (a GPU),
  a bucket is padded to its widest net, so it is cut by size into the programs that do the least
  padded work (:func:`width_programs`): a budget grid's nets span up to 80x in size.
* Evaluation (validation and test error) runs at the ``checkpoints`` epochs only (None: every
  epoch, the single run's history); training loss and error are measured on the fly every epoch.
* ``on_checkpoint(view) -> keep mask or None`` stops configurations early (successive halving):
  a stopped configuration keeps its state at that epoch; the others continue exactly as if they
  had never been batched with it. A configuration whose loss stops being finite stops there with
  ``error`` set; its companions go on.
* Memory: ``max_configs`` (default: from the device's memory) splits a bucket into equal chunks that run
  one after another; results come back in input order.
* On a GPU each step is replayed as a CUDA graph (:mod:`bnc_deploy.train.cuda_graph`; ``cuda_graphs=False``
  steps eagerly): the same kernels, launched at once; the learning rate then reaches fused Adam as a
  tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from bnc_deploy.datasets.base import DiscreteDataset
from bnc_deploy.models.dnn_stacked import StackedDNN, write_back
from bnc_deploy.train import cuda_graph
from bnc_deploy.train.batched_adam import ADAM_UNIT, contiguous_runs, group_rates, rate_table, schedule_groups
from bnc_deploy.train.bnc_batched import CheckpointView, resolve_device
from bnc_deploy.train.common import TrainResult, log_linear_rates
from bnc_deploy.train.dnn_batched_loop import DNNRun, run_chunk_epochs

#: Rows per forward pass when evaluating (as the single run evaluates).
EVAL_ROWS = 1024
#: Bytes of one step's activations that a CPU chunk aims to stay within (beyond, it runs slower).
CPU_STEP_BYTES = 32 << 20
#: What one more padded program costs per step beyond its configurations' work (kernel launches and
#: the passes that do not grow with the stack), in configurations of its bucket's widest net. On one
#: H200 a letter FC program's epoch cost 20.1 ms plus 0.546 ms per configuration of its widest (the
#: paper forecast's probe): about 37.
PROGRAM_OVERHEAD_CONFIGS = 32
#: Candidate cuts of :func:`width_programs` (distinct widths; a grid has a few dozen per bucket).
MAX_CUTS = 256


def bucket_key(config, widths: Sequence[int], mix_widths: bool = False) -> tuple:
    """Configurations with equal keys train in one program (given the same data); with
    ``mix_widths`` the widths may differ (the program pads them)."""
    return (
        config.architecture,
        config.layers,
        None if mix_widths else tuple(int(w) for w in widths),
        config.activation,
        config.batch_norm,
        config.one_hot,
        config.image_shape,
        config.pixel_order,
        config.epochs,
        config.batch_size,
    )


def train_dnn_batched(
    dataset: DiscreteDataset,
    configs: Sequence,
    *,
    device: str = "cpu",
    checkpoints: Sequence[int] | None = None,
    on_checkpoint: Callable[[CheckpointView], np.ndarray | None] | None = None,
    build: bool | Callable[[int, DNNRun], bool] = True,
    max_configs: int | None = None,
    on_epoch: Callable[[int, int], None] | None = None,
    progress: bool = False,
    mix_widths: bool | None = None,
    cuda_graphs: bool = True,
    split_widths: bool = True,
) -> list[DNNRun]:
    """Train every configuration of ``configs`` (:class:`~bnc_deploy.train.dnn.DNNConfig`) on ``dataset``.

    ``checkpoints``: epochs (1-based) at which validation and test error are measured (None: every
    epoch; the last epoch always is). ``build``: True to make each configuration's model file
    (``.result``, as ``train_dnn`` returns it), False for none, or ``build(i, run)`` per configuration.
    ``on_epoch(epoch, active)`` after every epoch; ``progress`` shows a bar per chunk.
    ``mix_widths`` (default: on CUDA only): configurations whose widths differ share a program,
    padded to the widest with the padding masked out. A GPU then runs a budget grid in a few large
    programs instead of one per width; on the CPU it would give up the bit-exact contract (the
    padded products sum in another order), so it is off there. ``cuda_graphs``: replay each step on a
    GPU as a CUDA graph (no effect on the CPU). ``split_widths``: cut a mixed bucket by size
    (:func:`width_programs`); False pads each bucket to its widest net as one program.
    """
    from bnc_deploy.train.dnn_model import input_spec, resolve_widths

    configs = list(configs)
    dev = resolve_device(device)
    mix = dev.type == "cuda" if mix_widths is None else bool(mix_widths)
    buckets: dict[tuple, list[int]] = {}
    specs, widths = [], []
    spec_of: dict = {}  # the encoding is fitted once per kind of input
    for i, config in enumerate(configs):
        config.validate()
        encoding = (config.architecture, config.one_hot, config.image_shape, config.pixel_order)
        if encoding not in spec_of:
            spec_of[encoding] = input_spec(dataset, config)
        specs.append(spec_of[encoding])
        widths.append(resolve_widths(config, specs[-1], dataset.n_classes))
        buckets.setdefault(bucket_key(config, widths[-1], mix), []).append(i)
    runs: list[DNNRun | None] = [None] * len(configs)
    programs = []
    for members in buckets.values():
        if not (mix and split_widths):
            programs.append(members)
            continue
        # A padded program costs its widest net for every configuration: cut the bucket by size.
        costs = [_step_floats(configs[i], specs[i], widths[i], dataset.n_classes) for i in members]
        for part in width_programs(costs, PROGRAM_OVERHEAD_CONFIGS * max(costs)):
            programs.append([members[k] for k in part])
    for members in programs:
        # One learning-rate schedule and eps side by side: fused Adam then takes one slice per group.
        members = sorted(members, key=lambda i: (configs[i].lr, configs[i].lr_decay, configs[i].adam_eps))
        widest = max(members, key=lambda i: sum(widths[i]))
        size = max_configs or default_max_configs(configs[widest], specs[widest], widths[widest], dataset, dev)
        # Chunks of equal size (within one): a short last chunk would run at a small stack's rate.
        for positions in np.array_split(np.asarray(members), -(-len(members) // size)):
            chunk = _ChunkRun(
                dataset,
                [configs[i] for i in positions],
                specs[positions[0]],
                [widths[i] for i in positions],
                dev,
                cuda_graphs,
            )
            ran = chunk.train(checkpoints, on_checkpoint, positions, on_epoch, progress)
            for pos, run, state in zip(positions, ran, chunk.states):
                run.state = state
                wanted = build(int(pos), run) if callable(build) else build
                if wanted and run.error is None:
                    run.result = finish_run(dataset, run, specs[pos])
                runs[int(pos)] = run
    return [run for run in runs if run is not None]


def width_programs(costs: Sequence[float], overhead: float, min_gain: float = 1.25) -> list[list[int]]:
    """Positions of ``costs`` (one configuration's padded work each) cut into programs of ascending
    cost that minimise the work of a padded bucket: the sum over programs of ``overhead`` plus its
    configurations times its largest cost (it pads every configuration to its widest).

    Cuts fall between distinct costs only (at most :data:`MAX_CUTS` candidates, evenly spread), so
    equal networks stay in one program; a program's positions keep their input order. The bucket
    stays one program unless the cut does ``min_gain`` times less work (the overhead is a model)."""
    order = sorted(range(len(costs)), key=lambda i: (costs[i], i))
    ends = [j + 1 for j in range(len(order)) if j + 1 == len(order) or costs[order[j + 1]] != costs[order[j]]]
    if len(ends) > MAX_CUTS:
        ends = [ends[round(k * (len(ends) - 1) / (MAX_CUTS - 1))] for k in range(MAX_CUTS)]
    # best[e]: least work of the first ends[e] sorted configurations; cut[e]: where its last program starts.
    best, cut = [], []
    for e, end in enumerate(ends):
        widest = costs[order[end - 1]]
        options = [(overhead + end * widest, -1)]
        options += [(best[p] + overhead + (end - ends[p]) * widest, p) for p in range(e)]
        work, start = min(options)
        best.append(work)
        cut.append(start)
    if not ends or overhead + len(order) * costs[order[-1]] < min_gain * best[-1]:
        return [list(range(len(costs)))] if costs else []
    parts, e = [], len(ends) - 1
    while e >= 0:
        start = ends[cut[e]] if cut[e] >= 0 else 0
        parts.append(sorted(order[start : ends[e]]))
        e = cut[e]
    return parts[::-1]


def _step_floats(config, spec, widths: Sequence[int], n_classes: int) -> int:
    """Floats one configuration's training step moves: ~8 activation-sized buffers per row of a batch
    (forward, its quantized/normalised copies and gradients), ~6 parameter-sized ones (latent, codes,
    gradient, Adam's two, a copy)."""
    per_row = _activation_floats(config, spec, widths)
    return 8 * per_row * config.batch_size + 6 * _parameter_floats(config, spec, widths, n_classes)


def default_max_configs(config, spec, widths: Sequence[int], dataset: DiscreteDataset, device: torch.device) -> int:
    """Configurations per chunk so that a chunk's step and evaluation fit comfortably in memory."""
    per_row = _activation_floats(config, spec, widths)
    per_config = 4 * _step_floats(config, spec, widths, dataset.n_classes)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(max(1, min(4096, free * 0.5 // max(per_config, 1))))
    # On the CPU a step is memory-bound once a batch's activations outgrow the caches (see the CNN
    # rows of `benchmarks/bench_sweep.py --models cnn --timing steady` at M = 16 and 64).
    cached = CPU_STEP_BYTES // max(1, 4 * per_row * config.batch_size)
    return int(max(1, min(4096, cached, (2 << 30) // max(per_config, 1))))


def _activation_floats(config, spec, widths: Sequence[int]) -> int:
    """Floats of one row's activations through the network (the unfolded convolution inputs included)."""
    if config.architecture == "fc":
        return int(spec.n_inputs + sum(widths))
    h, w = spec.image_shape
    total, channels = 0, spec.channels
    for c in widths:
        total += h * w * (9 * channels + 2 * c)
        channels, h, w = c, h // 2, w // 2
    return int(total + channels * h * w)


def _parameter_floats(config, spec, widths: Sequence[int], n_classes: int) -> int:
    if config.architecture == "fc":
        sizes = [spec.n_inputs, *widths, n_classes]
        return int(sum(a * b for a, b in zip(sizes, sizes[1:])))
    h, w = spec.image_shape
    total, channels = 0, spec.channels
    for c in widths:
        total += 9 * channels * c
        channels, h, w = c, h // 2, w // 2
    return int(total + channels * h * w * n_classes)


def _eval_group(per_row: int, m: int, device: torch.device) -> int:
    """Configurations evaluated together so that their activations on ``EVAL_ROWS`` rows fit."""
    budget = (4 << 30) if device.type == "cuda" else (256 << 20)
    return int(max(1, min(m, budget // max(1, 4 * 6 * per_row * EVAL_ROWS))))


class _ChunkRun:
    """One chunk of one bucket: its data on the device, its nets, the epoch loop and the records."""

    def __init__(
        self,
        dataset: DiscreteDataset,
        configs: list,
        spec,
        widths: list[list[int]],
        device: torch.device,
        cuda_graphs: bool = False,
    ):
        from bnc_deploy.train.dnn_model import build_model

        self.configs, self.device = configs, device
        nets = []
        for config, own in zip(configs, widths):
            # The single run's initialisation: global seed, then the net (Glorot from torch's global RNG).
            torch.manual_seed(config.seed)
            nets.append(build_model(config, spec, dataset.n_classes, own))
        self.net = StackedDNN(nets, [c.weight_bits for c in configs], [c.seed + 2 for c in configs], device)
        self.states: list[dict | None] = [None] * len(configs)
        self.tensors = {"train": (spec.encode(dataset.x_train), torch.from_numpy(dataset.y_train))}
        if dataset.x_val is not None:
            self.tensors["val"] = (spec.encode(dataset.x_val), torch.from_numpy(dataset.y_val))
        self.tensors["test"] = (spec.encode(dataset.x_test), torch.from_numpy(dataset.y_test))
        self.tensors = {k: (x.to(device), y.to(device)) for k, (x, y) in self.tensors.items()}
        self.rates = np.stack([log_linear_rates(c.lr, c.lr_decay, c.epochs) for c in configs])
        self.eps = [float(c.adam_eps) for c in configs]
        self.active = np.arange(len(configs))
        self.step_count = torch.zeros((), dtype=torch.float32, device=device)
        self.adam = [(torch.zeros_like(p), torch.zeros_like(p)) for p in self.net.parameters()]
        self._adam_lists: list | None = None
        widest = max(widths, key=sum)
        self.eval_group = _eval_group(_activation_floats(configs[0], spec, widest), len(configs), device)
        # A sign net's replays draw from its CUDA generator (registered with the graph); ReLU nets draw nothing.
        sign = device.type == "cuda" and self.net.activation != "relu"
        generators = [self.net.cuda_generator] if sign else []
        self.graph = cuda_graph.step_graph(device, cuda_graphs, generators)
        self._lr_table: torch.Tensor | None = None  # (groups, epochs) on the device, for the graph
        self._groups: list[tuple[int, float, tuple[int, ...]]] | None = None
        self._generation = 0  # counts drop(): a captured step holds the tensors of one generation

    # -- one batch ----------------------------------------------------------------------------------
    def train_batch(
        self, idx: torch.Tensor, spread: torch.Tensor, which: list[int], epoch: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`step` on the rows ``idx`` (G, B) of the training data (labels routed by ``spread``),
        replayed as a CUDA graph when there is one."""
        x_train, y_train = self.tensors["train"]
        if self.graph is None:
            return self.step(x_train[idx], y_train[idx].index_select(0, spread), which, group_rates(self, epoch))
        if self._lr_table is None:
            self._lr_table = rate_table(self)

        def body(inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
            rows = inputs["idx"]
            x, y = x_train[rows], y_train[rows].index_select(0, inputs["spread"])
            return self.step(x, y, which, list(inputs["lr"].unbind(0)))

        inputs = {"idx": idx, "spread": spread, "lr": self._lr_table[:, epoch - 1]}
        return self.graph.step((self._generation, tuple(which)), inputs, body)

    # -- one step ---------------------------------------------------------------------------------
    def step(self, x: torch.Tensor, y: torch.Tensor, which: list[int], lrs: list) -> tuple[torch.Tensor, torch.Tensor]:
        """One update of every active configuration on its batch: ((m,) losses, (m,) wrong rows).

        ``x`` (G, B, ...): the batches of the G data orders; configuration j trains on ``x[which[j]]``
        with labels ``y[j]``; ``lrs``: each Adam group's learning rate (a float, or a 0-dim tensor on
        the device)."""
        params = self.net.parameters()
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            else:
                p.grad.zero_()
        logits = self.net.forward(x, training=True, which=which)
        m, b, c = logits.shape
        losses = F.cross_entropy(logits.reshape(m * b, c), y.reshape(-1), reduction="none").view(m, b).mean(1)
        losses.sum().backward()
        self._adam(params, lrs)
        self.net.clamp_latent_()
        wrong = (logits.detach().argmax(dim=2) != y).sum(dim=1)
        return losses.detach(), wrong

    def _adam(self, params: list[torch.Tensor], lrs: list) -> None:
        self.step_count += 1
        if self._adam_lists is None:
            self._adam_lists = self._group_lists(params)
        for (_, eps, lists), lr in zip(self._adam_lists, lrs, strict=True):
            torch._fused_adam_(
                *lists,
                [self.step_count] * len(lists[0]),
                lr=lr,
                beta1=0.9,
                beta2=0.999,
                weight_decay=0.0,
                eps=eps,
                amsgrad=False,
                maximize=False,
            )

    def adam_groups(self) -> list[tuple[int, float, tuple[int, ...]]]:
        """:func:`~bnc_deploy.train.batched_adam.schedule_groups` of the active configurations (cached)."""
        if self._groups is None:
            self._groups = schedule_groups(self.rates, self.eps)
        return self._groups

    def _group_lists(self, params: list[torch.Tensor]) -> list[tuple[int, float, list]]:
        """Per group of equal schedule and eps: (first member, eps, fused Adam's tensor lists).

        Views of the stacked tensors, valid until configurations are dropped; the gradients are
        the ``.grad`` tensors, which backward accumulates into in place (``zero_grad`` zeroes them).
        """
        out = []
        for first, eps, members in self.adam_groups():
            lists: list[list] = [[], [], [], [], []]
            for p, (avg, avg_sq) in zip(params, self.adam):
                whole = self.device.type == "cuda" or p[0].numel() % ADAM_UNIT == 0
                pieces = [slice(a, b) for a, b in contiguous_runs(members)] if whole else members
                for piece in pieces:
                    for k, t in enumerate((p, p.grad, avg, avg_sq)):
                        lists[k].append(t[piece])
            out.append((first, eps, lists))
        return out

    # -- evaluation ---------------------------------------------------------------------------------
    @torch.no_grad()
    def errors(self, name: str) -> np.ndarray:
        """Eval-mode error of every active configuration on split ``name`` (first maximum, as ``predict_torch``)."""
        x, y = self.tensors[name]
        wrong = torch.zeros(self.net.m, dtype=torch.int64, device=self.device)
        for start in range(0, self.net.m, self.eval_group):
            part = slice(start, min(self.net.m, start + self.eval_group))
            for r in range(0, x.shape[0], EVAL_ROWS):
                logits = self.net.forward(x[r : r + EVAL_ROWS], training=False, members=part)
                wrong[part] += (logits.argmax(dim=2) != y[r : r + EVAL_ROWS]).sum(dim=1)
        n = x.shape[0]
        return wrong.cpu().numpy() / n if n else np.full(self.net.m, np.nan)

    # -- the loop -----------------------------------------------------------------------------------
    def train(self, checkpoints, on_checkpoint, positions: np.ndarray, on_epoch, progress: bool) -> list[DNNRun]:
        return run_chunk_epochs(self, checkpoints, on_checkpoint, positions, on_epoch, progress)

    def drop(self, keep: np.ndarray, epoch: int, stopped: dict, error: str | None = None) -> None:
        """Stop the active configurations ``keep`` rejects, keeping their state at ``epoch``."""
        for j in np.flatnonzero(~keep):
            pos = int(self.active[j])
            self.states[pos] = self.net.state_of(int(j))
            stopped[pos] = (epoch, error)
        idx_list = [int(j) for j in np.flatnonzero(keep)]
        idx = torch.as_tensor(idx_list, dtype=torch.int64, device=self.device)
        self.net.keep(idx, idx_list)
        self.adam = [(a.index_select(0, idx).contiguous(), s.index_select(0, idx).contiguous()) for a, s in self.adam]
        self._adam_lists = self._lr_table = self._groups = None
        self._generation += 1
        self.rates = self.rates[keep]
        self.eps = [self.eps[j] for j in idx_list]
        self.active = self.active[keep]


def finish_run(dataset: DiscreteDataset, run: DNNRun, spec=None) -> TrainResult:
    """The configuration's model file, made and checked as the single run makes it (``spec``: its
    input encoding, fitted again when not given)."""
    from bnc_deploy.train.dnn_model import build_model, check_reference_agrees, input_spec, to_artifact

    if run.state is None:
        raise ValueError("this run has no trained state (it was not trained)")
    spec = spec or input_spec(dataset, run.config)
    net = build_model(run.config, spec, dataset.n_classes, list(run.config.sizing["widths"]))
    write_back(net, run.state)
    net.eval()
    seconds = float(sum(run.history.get("seconds", [])))
    artifact = to_artifact(net, spec, dataset, run.config, run.history, seconds)
    check_reference_agrees(net, artifact, spec.encode(dataset.x_test), dataset.x_test, dataset.y_test)
    return TrainResult(artifact=artifact, history=run.history, seconds=seconds)
