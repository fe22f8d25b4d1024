"""The batched FC/CNN trainer's contract: a batch of one is ``train_dnn``, and on the CPU a
configuration's result does not depend on what it is batched with (bit for bit)."""

from __future__ import annotations

from copy import deepcopy
from dataclasses import replace

import numpy as np
import pytest
import torch
from support import make_synthetic_dataset

from bnc_deploy.errors import ConfigError
from bnc_deploy.train.dnn import DNNConfig, train_dnn
from bnc_deploy.train.dnn_batched import bucket_key, train_dnn_batched, width_programs


def _fc_data():
    ds = make_synthetic_dataset(n_train=330, n_test=170, seed=3)
    return ds.with_validation(0.2, seed=0)


def _image_data():
    return make_synthetic_dataset(n_train=240, n_test=120, cardinalities=(3,) * 16, n_classes=3, seed=1, name="tiny")


def _fc(**kw) -> DNNConfig:
    base = dict(layers=3, weight_bits=2, activation="relu", batch_norm=True, hidden=[7], epochs=4, batch_size=32)
    return DNNConfig("fc", **{**base, "progress": False, **kw})


def _cnn(**kw) -> DNNConfig:
    base = dict(layers=2, weight_bits=2, activation="relu", batch_norm=True, hidden=[3], epochs=3, batch_size=40)
    return DNNConfig("cnn", image_shape=(4, 4), **{**base, "progress": False, **kw})


def _same_history(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if key != "seconds":
            assert a[key] == b[key], key  # exact: the floats the runs recorded


def _same_model(a, b) -> None:
    """Two artifacts hold the same trained network (codes, folded batch norm, bias) and errors."""
    assert len(a.layers) == len(b.layers)
    for la, lb in zip(a.layers, b.layers):
        for name in ("codes", "scale", "shift", "bias"):
            va, vb = getattr(la, name), getattr(lb, name)
            assert (va is None) == (vb is None), name
            if va is not None:
                np.testing.assert_array_equal(va, vb, err_msg=name)
    assert a.metadata["errors"] == b.metadata["errors"]
    _same_history(a.metadata["history"], b.metadata["history"])


def _same_state(a: dict, b: dict) -> None:
    """The latent (float) weights, bias and batch-norm tensors, bit for bit."""
    for wa, wb in zip(a["weights"], b["weights"], strict=True):
        assert torch.equal(wa, wb)
    assert torch.equal(a["bias"], b["bias"])
    for la, lb in zip(a["bn"], b["bn"], strict=True):
        assert all(torch.equal(la[k], lb[k]) for k in la)


def _check_independent(ds, configs) -> None:
    batched = train_dnn_batched(ds, [replace(c) for c in configs])
    assert [r.config.seed for r in batched] == [c.seed for c in configs]  # input order
    for config, run in zip(configs, batched):
        (alone,) = train_dnn_batched(ds, [replace(config)])
        _same_state(run.state, alone.state)
        _same_history(run.history, alone.history)
        _same_model(run.result.artifact, alone.result.artifact)


@pytest.mark.parametrize("activation", ["relu", "sign"])
def test_fc_result_does_not_depend_on_companions(activation):
    configs = [
        _fc(activation=activation, lr=3e-2, weight_bits=2, seed=0),
        _fc(activation=activation, lr=3e-3, weight_bits=1, seed=1),
        _fc(activation=activation, lr=3e-2, weight_bits=4, seed=0),
        _fc(activation=activation, lr=3e-4, weight_bits=3, seed=5, adam_eps=1e-5),
    ]
    _check_independent(_fc_data(), configs)


@pytest.mark.parametrize("activation", ["relu", "sign"])
def test_cnn_result_does_not_depend_on_companions(activation):
    configs = [
        _cnn(activation=activation, lr=3e-2, seed=0),
        _cnn(activation=activation, lr=3e-3, weight_bits=1, seed=2),
        _cnn(activation=activation, lr=3e-2, weight_bits=8, seed=0),
    ]
    _check_independent(_image_data(), configs)


def test_a_batch_of_one_is_the_single_run():
    ds = _fc_data()
    config = _fc(seed=4, batch_norm=False, layers=2)
    (run,) = train_dnn_batched(ds, [replace(config)])
    _same_model(run.result.artifact, train_dnn(ds, replace(config)).artifact)


def test_architectures_go_in_buckets_and_results_keep_input_order():
    ds = _fc_data()
    configs = [_fc(hidden=[5], seed=0), _fc(hidden=[9], seed=0), _fc(hidden=[5], batch_norm=False, seed=1)]
    keys = {bucket_key(c, c.hidden * (c.layers - 1)) for c in configs}
    assert len(keys) == 3
    runs = train_dnn_batched(ds, [replace(c) for c in configs])
    assert [r.result.artifact.hidden_widths for r in runs] == [[5, 5], [9, 9], [5, 5]]
    for config, run in zip(configs, runs):
        _same_model(run.result.artifact, train_dnn(ds, replace(config)).artifact)


def test_early_stop_keeps_the_state_and_leaves_the_others_unchanged():
    ds = _fc_data()
    configs = [_fc(seed=s, lr=lr, epochs=5) for s, lr in [(0, 3e-2), (1, 3e-3), (2, 3e-2)]]

    def drop_the_middle(view):
        if view.epoch != 2:
            return None
        return view.indices != 1

    runs = train_dnn_batched(ds, [replace(c) for c in configs], on_checkpoint=drop_the_middle)
    assert runs[1].stopped_at == 2 and runs[0].stopped_at is None and runs[2].stopped_at is None
    alone = [train_dnn(ds, replace(c)) for c in configs]
    for i in (0, 2):
        _same_model(runs[i].result.artifact, alone[i].artifact)
    # the stopped one trained the first two epochs of its own run
    assert runs[1].history["train_loss"] == alone[1].history["train_loss"][:2]
    assert runs[1].history["test_error"] == alone[1].history["test_error"][:2]
    assert len(runs[1].result.artifact.metadata["history"]["lr"]) == 2


def test_checkpoints_evaluate_only_where_asked():
    ds = _fc_data()
    (run,) = train_dnn_batched(ds, [_fc(epochs=5)], checkpoints=[2])
    assert run.history["checkpoint_epochs"] == [2, 5]
    assert len(run.history["test_error"]) == 2 and len(run.history["train_loss"]) == 5
    full = train_dnn(ds, _fc(epochs=5)).history
    assert run.history["test_error"] == [full["test_error"][1], full["test_error"][4]]
    assert [p["epoch"] for p in run.checkpoints] == [2, 5]


def test_bad_configuration_is_refused_before_training():
    with pytest.raises(ConfigError, match="layers"):
        train_dnn_batched(_fc_data(), [_fc(), _fc(layers=9)])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")
def test_cuda_trains_and_is_deterministic():
    ds = _image_data()
    configs = [_cnn(seed=s, activation=a) for s in (0, 1) for a in ("relu", "sign")]
    a = train_dnn_batched(ds, [replace(c) for c in configs], device="cuda")
    b = train_dnn_batched(ds, [replace(c) for c in configs], device="cuda")
    for ra, rb in zip(a, b):
        _same_model(ra.result.artifact, rb.result.artifact)


@pytest.mark.parametrize("architecture", ["fc", "cnn"])
def test_mixed_widths_pad_to_the_widest_and_train_each_network_as_its_own(architecture):
    """What a GPU runs (``mix_widths``): configurations of different widths in one padded program.
    Each trains its own network (its widths, its model file); only the order of float sums differs
    from its single run, so the trained weights agree closely."""
    if architecture == "fc":
        ds, configs = _fc_data(), [_fc(hidden=[h], seed=s, epochs=2) for h, s in [(3, 0), (7, 1), (5, 0)]]
    else:
        ds, configs = _image_data(), [_cnn(hidden=[c], seed=s, epochs=2) for c, s in [(2, 0), (4, 1)]]
    runs = train_dnn_batched(ds, [replace(c) for c in configs], mix_widths=True)
    for config, run in zip(configs, runs):
        (alone,) = train_dnn_batched(ds, [replace(config)])
        assert run.result.artifact.hidden_widths == alone.result.artifact.hidden_widths
        for wa, wb in zip(run.state["weights"], alone.state["weights"], strict=True):
            assert wa.shape == wb.shape
            torch.testing.assert_close(wa, wb, rtol=0, atol=2e-3)
        torch.testing.assert_close(run.state["bias"], alone.state["bias"], rtol=0, atol=2e-3)
        assert run.history["test_error"][-1] == pytest.approx(alone.history["test_error"][-1], abs=0.02)


def _padded_work(parts, costs, overhead) -> float:
    return sum(overhead + len(p) * max(costs[i] for i in p) for p in parts)


def test_width_programs_cut_where_the_padded_work_is_least():
    """Against every cut of the sorted costs (small cases): the least padded work, equal costs never
    apart, positions in input order; one program unless the cut saves ``min_gain``."""
    import itertools

    rng = np.random.default_rng(0)
    for _ in range(200):
        costs = [float(c) for c in rng.integers(1, 40, size=int(rng.integers(1, 8)))]
        overhead = float(rng.integers(0, 60))
        parts = width_programs(costs, overhead, min_gain=1.0)
        assert sorted(i for p in parts for i in p) == list(range(len(costs)))
        assert all(p == sorted(p) for p in parts)
        assert all(max(costs[i] for i in a) < min(costs[i] for i in b) for a, b in zip(parts, parts[1:]))
        order = sorted(range(len(costs)), key=lambda i: costs[i])
        least = min(
            _padded_work([order[a:b] for a, b in zip((0, *cut), (*cut, len(order)))], costs, overhead)
            for k in range(len(order))
            for cut in itertools.combinations(range(1, len(order)), k)
        )
        assert _padded_work(parts, costs, overhead) == pytest.approx(least)
    assert width_programs([1.0] * 4 + [100.0] * 4, 5.0) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert width_programs([1.0] * 4 + [100.0] * 4, 1e4) == [list(range(8))]  # the cut would save under 1.25x
    assert width_programs([3.0, 3.0], 0.0) == [[0, 1]]


def test_a_mixed_bucket_of_far_apart_widths_runs_as_programs_cut_by_size(monkeypatch):
    """``mix_widths``: nets 20x apart in size train as two programs (two chunks, each its own
    epochs), results in input order; ``split_widths=False`` pads them into one. (Four nets are too
    few to pay for a program's overhead, so the overhead is set to nothing here.)"""
    from bnc_deploy.train import dnn_batched

    monkeypatch.setattr(dnn_batched, "PROGRAM_OVERHEAD_CONFIGS", 0)
    ds = _fc_data()
    configs = [_fc(hidden=[h], seed=s, epochs=2) for h, s in [(40, 0), (2, 1), (40, 1), (2, 0)]]

    def chunks(**kw) -> tuple[int, list]:
        firsts = []
        runs = train_dnn_batched(
            ds, [replace(c) for c in configs], mix_widths=True, on_epoch=lambda e, a: firsts.append(e), **kw
        )
        return firsts.count(1), runs

    n_cut, cut = chunks()
    n_padded, _ = chunks(split_widths=False)
    assert (n_cut, n_padded) == (2, 1)
    assert [r.result.artifact.hidden_widths for r in cut] == [[40, 40], [2, 2], [40, 40], [2, 2]]


@pytest.mark.parametrize("image", [(4, 4), (6, 6)])
def test_cnn_blocks_on_even_and_odd_maps_do_not_depend_on_companions(image):
    """ReLU CNN blocks on even maps run fused on the CPU, on odd maps (6 -> 3) written out; a
    network may have both, and either way a configuration's bits are its own."""
    pixels = image[0] * image[1]
    ds = make_synthetic_dataset(n_train=240, n_test=120, cardinalities=(3,) * pixels, n_classes=3, seed=1, name="tiny")
    configs = [_cnn(lr=3e-2, seed=0), _cnn(lr=3e-3, weight_bits=1, seed=3)]
    _check_independent(ds, [replace(c, image_shape=image) for c in configs])


@pytest.mark.parametrize("batch_norm", [True, False])
@pytest.mark.parametrize("channels", [[3], [3, 4]])
def test_stacked_cnn_step_computes_the_single_network(batch_norm, channels):
    """One training step of the stack (the CPU's fused blocks) against ``QuantCNN`` itself (conv2d,
    batch norm, ReLU, ``max_pool2d``): logits, gradients and running statistics agree to float
    rounding. One layer reads inputs of three values, whose sums are exact, so its pooling windows
    hold the same ties both ways (the first maximum wins); a second layer's sums round in another
    order than conv2d's, which would break ties differently, so two layers read Gaussian inputs."""
    from bnc_deploy.models.dnn import QuantCNN
    from bnc_deploy.models.dnn_stacked import StackedDNN

    torch.manual_seed(0)
    net = QuantCNN(2, (8, 8), 3, channels, 2, "relu", batch_norm)
    stack = StackedDNN([deepcopy(net)], [2], [1], torch.device("cpu"))
    x = torch.randint(-1, 2, (20, 2, 8, 8)).float() if len(channels) == 1 else torch.randn(20, 2, 8, 8)
    net.train()
    want = net(x)
    want.square().sum().backward()
    got = stack.forward(x, training=True)[0]
    got.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for w, block in zip(stack.weights, net.convs):
        torch.testing.assert_close(w.grad[0], block["conv"].weight.grad.flatten(1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(stack.weights[-1].grad[0], net.output.weight.grad, rtol=1e-4, atol=1e-4)
    for layer, block in zip(stack.bn, net.convs):
        for name in ("running_mean", "running_var"):
            torch.testing.assert_close(layer[name][0], getattr(block["bn"], name), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(layer["weight"].grad[0], block["bn"].weight.grad, rtol=1e-4, atol=1e-4)
