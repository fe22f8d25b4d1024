"""One training step of a batched trainer replayed as a CUDA graph.

A batched step on a GPU is a few hundred small kernels; while a chunk holds few configurations the
GPU waits on Python and the launches rather than on the arithmetic (``benchmarks/bench_sweep.py
--devices cuda``: the rate grows with M long before the GPU is busy). :class:`StepGraph` captures
the step once and replays it, so a step costs one launch.

Contract
--------
* ``step(key, inputs, body)`` returns ``body(inputs)``'s outputs. ``inputs`` are the step's
  tensors that change from step to step (the batch's rows, this epoch's learning rates); they are
  copied into the graph's own input tensors before each replay. Everything else ``body`` reads or
  writes (parameters, optimizer state, generators) must stay the same tensors between captures.
* The outputs of a replay are the graph's own tensors: read them (queue work on them) before the
  next step.
* ``key`` names what the captured program depends on besides the inputs' values (the stack's
  configurations, their data routes). A new key runs :data:`WARMUP_STEPS` steps eagerly, on a side
  stream as CUDA requires before a capture, then captures again.
* A step that cannot be captured runs eagerly from then on, and the reason is kept in ``failed``
  and warned once: a graph is a speed-up, never a condition.
* Every warm-up and replayed step is a real training step; nothing runs twice.

On the CPU there is nothing to gain and the trainers do not use it (their bit-exact contract is
with the eager kernels). ``capture`` can be replaced (``tests/test_cuda_graph.py`` replays by calling
the body again) to check the input staging without a GPU.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch

#: Eager steps before each capture (CUDA needs the step's lazy initialisation done before capture).
WARMUP_STEPS = 3

Body = Callable[[dict[str, torch.Tensor]], tuple]


def cuda_capture(generators: Sequence[torch.Generator] = ()) -> Callable[[Callable[[], tuple]], Callable[[], tuple]]:
    """The CUDA capture: ``capture(fn)`` records ``fn`` as a graph (without running it) and returns
    its replay, which runs the recorded kernels and returns ``fn``'s output tensors.
    ``generators``: CUDA generators ``fn`` draws from (each replay then draws new numbers)."""

    def capture(fn: Callable[[], tuple]) -> Callable[[], tuple]:
        graph = torch.cuda.CUDAGraph()
        for generator in generators:
            graph.register_generator_state(generator)
        with torch.cuda.graph(graph):
            out = fn()

        def replay() -> tuple:
            graph.replay()
            return out

        return replay

    return capture


def step_graph(device: torch.device, enabled: bool, generators: Sequence[torch.Generator] = ()) -> StepGraph | None:
    """The trainers' :class:`StepGraph`: one on a GPU when ``enabled``, else None (eager steps)."""
    if not enabled or device.type != "cuda":
        return None
    return StepGraph(cuda_capture(generators))


class StepGraph:
    """Replays a batched trainer's step (see the module's contract)."""

    def __init__(self, capture: Callable[[Callable[[], tuple]], Callable[[], tuple]], *, on_cuda: bool = True):
        self.capture = capture
        self.on_cuda = on_cuda
        self.failed: str | None = None
        self.replays = 0
        self._key: object = None
        self._warm = 0
        self._static: dict[str, torch.Tensor] = {}
        self._replay: Callable[[], tuple] | None = None

    def step(self, key: object, inputs: dict[str, torch.Tensor], body: Body) -> tuple:
        if self.failed is not None:
            return body(inputs)
        if key != self._key:
            self._key, self._warm, self._replay, self._static = key, 0, None, {}
        if self._replay is None and self._warm < WARMUP_STEPS:
            self._warm += 1
            return self._eager_on_side_stream(inputs, body)
        if self._replay is None:
            self._static = {name: t.detach().clone() for name, t in inputs.items()}
            if self.on_cuda:  # the warm-up's cached blocks would sit beside the graph's own pool
                torch.cuda.empty_cache()
            try:
                self._replay = self.capture(lambda: body(self._static))
            except Exception as exc:  # a graph is a speed-up, never a condition
                self.failed = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"CUDA graph capture failed, stepping eagerly: {self.failed}", stacklevel=2)
                if self.on_cuda:
                    torch.cuda.synchronize()
                return body(inputs)
        for name, t in inputs.items():
            self._static[name].copy_(t)
        self.replays += 1
        return self._replay()

    def _eager_on_side_stream(self, inputs: dict[str, torch.Tensor], body: Body) -> tuple:
        if not self.on_cuda:
            return body(inputs)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = body(inputs)
        torch.cuda.current_stream().wait_stream(side)
        return out
