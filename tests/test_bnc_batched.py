"""The batched BN trainer (``bnc_deploy.train.bnc_batched``) against the single-run trainer.

The contract: a batch of one reproduces ``train_bnc`` bit for bit (tables, codes, history), and a
configuration's result does not depend on what it was batched with (mixed lr, λ, γ, B, B_I, float,
init, eps, seeds; chunking; early stops of its companions). All on the CPU; the GPU test runs only
where torch sees a GPU.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from bnc_deploy.artifacts import load_artifact, save_artifact
from bnc_deploy.datasets import load_dataset
from bnc_deploy.errors import ConfigError
from bnc_deploy.train.bnc import TrainConfig, train_bnc
from bnc_deploy.train.bnc_batched import chunk_key, resolve_device, train_bnc_batched

EPOCHS = 3


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", validation_fraction=0.2, seed=0)


def _base(**kw) -> TrainConfig:
    return TrainConfig(**{"bits": 3, "int_bits": 2, "epochs": EPOCHS, "batch_size": 50, "progress": False, **kw})


def _same_history(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for key in a:
        if key != "seconds":
            assert a[key] == b[key], key


def _same_artifact(a, b) -> None:
    if a.is_quantized:
        np.testing.assert_array_equal(a.table_codes, b.table_codes)
        np.testing.assert_array_equal(a.class_codes, b.class_codes)
    else:
        np.testing.assert_array_equal(a.table_logp, b.table_logp)
        np.testing.assert_array_equal(a.class_logp, b.class_logp)
    np.testing.assert_array_equal(a.parents, b.parents)
    assert a.metadata["errors"] == b.metadata["errors"]
    assert a.metadata["config"] == b.metadata["config"]
    _same_history(a.metadata["history"], b.metadata["history"])


@pytest.mark.parametrize(
    "config",
    [
        _base(),
        _base(bits=None, int_bits=None),
        _base(model="tan", bits=4, int_bits=3),
        _base(loss="nll", bits=2, int_bits=2),
        _base(loss="cll", init="ml", lr=3e-2),
    ],
    ids=["nb-3bit", "nb-float", "tan-chow-liu-4bit", "nll-2bit", "cll-ml-init"],
)
def test_batch_of_one_equals_train_bnc_bit_for_bit(digits, config):
    single = train_bnc(digits, config)
    [run] = train_bnc_batched(digits, [config])
    _same_artifact(single.artifact, run.result.artifact)
    _same_history(single.history, run.history)


def _mixed(seeds) -> list[TrainConfig]:
    base = _base()
    variants = [
        base,
        replace(base, lr=3e-2),
        replace(base, bits=None, int_bits=None),
        replace(base, bits=8, int_bits=3, hybrid_lambda=50.0, hybrid_gamma=2.0, hybrid_eta=3.0),
        replace(base, init="ml"),
        replace(base, bits=1, int_bits=1),
        replace(base, adam_eps=1e-8),
        replace(base, lr_decay=1e-2),
    ]
    return [replace(c, seed=s) for c, s in zip(variants, seeds)]


@pytest.mark.parametrize("seeds", [[0] * 8, [0, 1, 2, 0, 1, 2, 0, 1]], ids=["shared-order", "own-orders"])
def test_result_does_not_depend_on_companions(digits, seeds):
    configs = _mixed(seeds)
    together = train_bnc_batched(digits, configs, build=False)
    for config, run in zip(configs, together):
        [alone] = train_bnc_batched(digits, [config], build=False)
        np.testing.assert_array_equal(run.rho, alone.rho)
        np.testing.assert_array_equal(run.class_rho, alone.class_rho)
        _same_history(run.history, alone.history)


def test_chunking_and_checkpoints_do_not_change_results(digits):
    configs = _mixed([0, 1, 0, 1, 0, 1, 0, 1])
    whole = train_bnc_batched(digits, configs, build=False, checkpoints=[EPOCHS])
    pieces = train_bnc_batched(digits, configs, build=False, checkpoints=[1, EPOCHS], max_configs=3)
    for a, b in zip(whole, pieces):
        np.testing.assert_array_equal(a.rho, b.rho)
        assert a.history["train_loss"] == b.history["train_loss"]
        assert a.history["test_error"] == b.history["test_error"][-1:]
        assert a.checkpoints[-1] == b.checkpoints[-1]
    assert [p["epoch"] for p in pieces[0].checkpoints] == [1, EPOCHS]
    assert pieces[0].history["checkpoint_epochs"] == [1, EPOCHS]


def test_early_stops_leave_the_others_untouched(digits):
    configs = _mixed([0] * 8)
    seen = []

    def halve(view):
        seen.append(view)
        keep = np.zeros(len(view.indices), dtype=bool)
        keep[np.argsort(view.val_error, kind="stable")[: len(keep) // 2]] = True
        return keep

    runs = train_bnc_batched(digits, configs, build=False, checkpoints=[1, EPOCHS], on_checkpoint=halve)
    assert len(seen) == 1 and seen[0].epoch == 1 and len(seen[0].indices) == 8
    survivors = [i for i, r in enumerate(runs) if r.stopped_at is None]
    stopped = [i for i, r in enumerate(runs) if r.stopped_at == 1]
    assert len(survivors) == 4 and len(stopped) == 4
    for i in survivors:
        [alone] = train_bnc_batched(digits, [configs[i]], build=False, checkpoints=[1, EPOCHS])
        np.testing.assert_array_equal(runs[i].rho, alone.rho)
        assert runs[i].history["train_loss"] == alone.history["train_loss"]
    for i in stopped:
        [alone] = train_bnc_batched(
            digits,
            [configs[i]],
            build=False,
            checkpoints=[1, EPOCHS],
            on_checkpoint=lambda view: np.zeros(1, dtype=bool),
        )
        np.testing.assert_array_equal(runs[i].rho, alone.rho)
        assert len(runs[i].history["train_loss"]) == 1 and runs[i].checkpoints[-1]["epoch"] == 1


def test_models_are_ordinary_model_files(digits, tmp_path):
    from bnc_deploy.cli.export import main as export_main

    runs = train_bnc_batched(digits, _mixed([0] * 3)[:3], build=lambda i, run: i != 1)
    assert runs[1].result is None and runs[0].result is not None
    path = tmp_path / "m.bnc"
    save_artifact(runs[2].result.artifact, path)
    assert load_artifact(path).metadata["config"]["bits"] is None
    assert export_main([str(path), "--format", "onnx", "-o", str(tmp_path / "m.onnx")]) == 0
    assert (tmp_path / "m.onnx").stat().st_size > 0


def test_incompatible_configurations_are_refused_by_name(digits):
    with pytest.raises(ConfigError, match=r"configuration 1 cannot be batched.*batch_size=20"):
        train_bnc_batched(digits, [_base(), _base(batch_size=20)])
    assert chunk_key(_base(lr=1.0, bits=None, int_bits=None, seed=4)) == chunk_key(_base())
    with pytest.raises(ConfigError, match="unknown device"):
        resolve_device("tpu0")


def test_cuda_refused_clearly_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the refusal applies only without one")
    with pytest.raises(ConfigError, match="torch sees no CUDA GPU"):
        resolve_device("cuda")
    assert resolve_device("auto").type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch (CI has none)")
def test_gpu_matches_cpu_closely(digits):
    configs = _mixed([0] * 8)
    cpu = train_bnc_batched(digits, configs, build=False, checkpoints=[EPOCHS])
    gpu = train_bnc_batched(digits, configs, build=False, checkpoints=[EPOCHS], device="cuda")
    for a, b in zip(cpu, gpu):
        # Different kernels round differently; a few-bit model may flip a few codes, not its accuracy.
        assert abs(a.checkpoints[-1]["test_error"] - b.checkpoints[-1]["test_error"]) < 0.03


def test_cpu_blocks_step_in_turn_and_halving_sees_them_all(digits, monkeypatch):
    """Blocks of 3 configurations (as larger tables would get): same results, and the halving
    callback still ranks all 8 configurations at once."""
    import bnc_deploy.train.bnc_batched as batched

    configs = _mixed([0, 1, 0, 1, 0, 1, 0, 1])
    whole = train_bnc_batched(digits, configs, build=False, checkpoints=[1, EPOCHS])
    monkeypatch.setattr(batched, "CPU_BLOCK_FLOATS", 3 * batched._table_size(digits, np.full(64, -1)))
    seen = []

    def halve(view):
        seen.append(len(view.indices))
        keep = np.zeros(len(view.indices), dtype=bool)
        keep[np.argsort(view.val_error, kind="stable")[:3]] = True
        return keep

    blocked = train_bnc_batched(digits, configs, build=False, checkpoints=[1, EPOCHS])
    for a, b in zip(whole, blocked):
        np.testing.assert_array_equal(a.rho, b.rho)
        _same_history(a.history, b.history)
    halved = train_bnc_batched(digits, configs, build=False, checkpoints=[1, EPOCHS], on_checkpoint=halve)
    assert seen == [8]
    survivors = [i for i, r in enumerate(halved) if r.stopped_at is None]
    assert len(survivors) == 3
    for i in survivors:
        np.testing.assert_array_equal(halved[i].rho, whole[i].rho)
