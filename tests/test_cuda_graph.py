"""Steps replayed as CUDA graphs (``train.cuda_graph``): the input staging, re-capture after an early
stop and the eager fallback, checked on the CPU with a capture that replays by calling the step
again; on a GPU, the real graphs against eager steps."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from support import make_synthetic_dataset

from bnc_deploy.datasets import load_dataset
from bnc_deploy.train import cuda_graph
from bnc_deploy.train.bnc import TrainConfig
from bnc_deploy.train.bnc_batched import train_bnc_batched
from bnc_deploy.train.cuda_graph import WARMUP_STEPS, StepGraph
from bnc_deploy.train.dnn import DNNConfig
from bnc_deploy.train.dnn_batched import train_dnn_batched

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")


def _call_again(fn):
    """A stand-in for the CUDA capture: the "replay" runs the step's Python again on the staged inputs."""
    return fn


def test_replays_read_the_inputs_of_their_own_step():
    state = torch.zeros(3)
    graph = StepGraph(_call_again, on_cuda=False)
    seen = []

    def body(inputs):
        seen.append(inputs["x"].clone())
        state.add_(inputs["x"])
        return (state.clone(),)

    for step in range(WARMUP_STEPS + 4):
        (out,) = graph.step("a", {"x": torch.full((3,), float(step))}, body)
        assert out.tolist() == [sum(range(step + 1))] * 3
    assert [s[0].item() for s in seen] == list(range(WARMUP_STEPS + 4))
    assert graph.replays == 4 and graph.failed is None


def test_a_new_key_warms_up_and_captures_again():
    captured = []

    def capture(fn):
        captured.append(fn)
        return fn

    graph = StepGraph(capture, on_cuda=False)
    for key in ["a"] * (WARMUP_STEPS + 2) + ["b"] * (WARMUP_STEPS + 2):
        graph.step(key, {"x": torch.ones(1)}, lambda inputs: (inputs["x"] * 2,))
    assert len(captured) == 2 and graph.replays == 4


def test_a_step_that_cannot_be_captured_runs_eagerly_and_says_why():
    def capture(fn):
        raise RuntimeError("operation not permitted when stream is capturing")

    graph = StepGraph(capture, on_cuda=False)
    calls = []

    def body(inputs):
        calls.append(1)
        return (inputs["x"] + 1,)

    with pytest.warns(UserWarning, match="not permitted"):
        for _ in range(WARMUP_STEPS + 3):
            (out,) = graph.step("a", {"x": torch.zeros(1)}, body)
            assert out.item() == 1.0
    assert len(calls) == WARMUP_STEPS + 3 and graph.replays == 0
    assert "not permitted" in graph.failed


@pytest.fixture
def replay_by_calling(monkeypatch):
    """The trainers' graphs on the CPU: staged inputs, tensor learning rates, re-capture after drops."""
    made = []

    def make(device, enabled, generators=()):
        if not enabled:
            return None
        made.append(StepGraph(_call_again, on_cuda=False))
        return made[-1]

    monkeypatch.setattr(cuda_graph, "step_graph", make)
    return made


def _halve(view):
    keep = np.zeros(len(view.indices), dtype=bool)
    keep[np.argsort(view.val_error, kind="stable")[: max(1, len(keep) // 2)]] = True
    return keep


#: Learning rates a float32 tensor holds exactly, without decay: a graph's steps are then the eager
#: steps bit for bit. With a decaying schedule, only the rate's last bit may differ.
EXACT_RATES = {"lr_decay": 1.0}


def _dnn_configs(**kw):
    base = DNNConfig("fc", layers=3, weight_bits=2, activation="relu", batch_norm=True, hidden=[7], epochs=5)
    base = replace(base, batch_size=32, progress=False, **kw)
    return [replace(base, seed=s, lr=lr) for s, lr in [(0, 2**-8), (1, 2**-5), (0, 2**-5), (2, 2**-8)]]


@pytest.mark.parametrize("schedule", [EXACT_RATES, {}], ids=["exact-rates", "decaying"])
def test_graphed_dnn_steps_train_as_eager_steps(replay_by_calling, schedule):
    ds = make_synthetic_dataset(n_train=330, n_test=170, seed=3).with_validation(0.2, seed=0)
    common = {"build": False, "checkpoints": [2, 5], "on_checkpoint": _halve}
    eager = train_dnn_batched(ds, _dnn_configs(**schedule), cuda_graphs=False, **common)
    graphed = train_dnn_batched(ds, _dnn_configs(**schedule), cuda_graphs=True, **common)
    (graph,) = replay_by_calling
    assert graph.replays > 0 and graph.failed is None
    for a, b in zip(eager, graphed, strict=True):
        assert a.stopped_at == b.stopped_at
        if schedule:
            assert a.history["train_loss"] == b.history["train_loss"]
            for wa, wb in zip(a.state["weights"], b.state["weights"], strict=True):
                torch.testing.assert_close(wa, wb, rtol=0, atol=0)
        else:
            np.testing.assert_allclose(a.history["train_loss"], b.history["train_loss"], rtol=1e-6)


@pytest.mark.parametrize("schedule", [EXACT_RATES, {}], ids=["exact-rates", "decaying"])
def test_graphed_bn_steps_train_as_eager_steps(replay_by_calling, schedule):
    digits = load_dataset("digits", validation_fraction=0.2, seed=0)
    base = TrainConfig(bits=3, int_bits=2, epochs=4, batch_size=50, progress=False, **schedule)
    configs = [replace(base, lr=lr, seed=s) for lr, s in [(2**-8, 0), (2**-5, 0), (2**-8, 1), (2**-6, 1)]]
    common = {"build": False, "checkpoints": [2, 4], "on_checkpoint": _halve}
    eager = train_bnc_batched(digits, configs, cuda_graphs=False, **common)
    graphed = train_bnc_batched(digits, configs, cuda_graphs=True, **common)
    assert replay_by_calling and all(g.replays > 0 and g.failed is None for g in replay_by_calling)
    for a, b in zip(eager, graphed, strict=True):
        assert a.stopped_at == b.stopped_at
        if schedule:
            np.testing.assert_array_equal(a.rho, b.rho)
            assert a.history["train_loss"] == b.history["train_loss"]
        else:
            np.testing.assert_allclose(a.history["train_loss"], b.history["train_loss"], rtol=1e-6)


@needs_cuda
def test_cuda_graphs_replay_and_agree_with_eager_steps():
    """On a GPU: the steps are captured (no fallback) and train as the eager steps do."""
    ds = make_synthetic_dataset(n_train=330, n_test=170, seed=3).with_validation(0.2, seed=0)
    configs = _dnn_configs() + [replace(c, activation="sign") for c in _dnn_configs()]
    with_graphs = train_dnn_batched(ds, configs, device="cuda", build=False)
    eager = train_dnn_batched(ds, configs, device="cuda", build=False, cuda_graphs=False)
    for a, b in zip(with_graphs, eager, strict=True):
        if a.config.activation == "relu":  # sign nets draw other random numbers in a graph
            for wa, wb in zip(a.state["weights"], b.state["weights"], strict=True):
                torch.testing.assert_close(wa, wb, rtol=1e-4, atol=1e-4)
    digits = load_dataset("digits", validation_fraction=0.2, seed=0)
    bn = [TrainConfig(bits=3, int_bits=2, epochs=3, batch_size=50, progress=False, lr=lr) for lr in (3e-3, 3e-2)]
    for a, b in zip(
        train_bnc_batched(digits, bn, device="cuda", build=False),
        train_bnc_batched(digits, bn, device="cuda", build=False, cuda_graphs=False),
        strict=True,
    ):
        np.testing.assert_allclose(a.rho, b.rho, rtol=1e-4, atol=1e-4)
