"""The batched structure-learning trainer (``bnc_deploy.train.structure_batched``) against the single run.

The contract: a batch of one reproduces ``train_learned_tan`` bit for bit (history, parents,
structure probabilities, model file), and a configuration's result does not depend on what it was
batched with (mixed λ_MS, seeds, learning rates, candidate sets of two shapes, early stops of its
companions). Small synthetic data with mixed cardinalities (the compact table layout's spans and
fused Adam's scalar tail both matter), on the CPU; the GPU test runs only where torch sees one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bnc_deploy.datasets.base import DiscreteDataset
from bnc_deploy.errors import ConfigError
from bnc_deploy.train.bnc import TrainConfig
from bnc_deploy.train.structure_batched import chunk_key, train_learned_tan_batched
from bnc_deploy.train.structure_learning import StructureLearningConfig, train_learned_tan

EPOCHS = 3


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: thread hand-offs cost more than they save (and the CI machine is shared)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def mixed_dataset(cardinalities=(3, 5, 2, 4, 1, 6, 3), n=330, seed=0) -> DiscreteDataset:
    """Features with different cardinalities, each a noisy function of its predecessor and the class."""
    rng = np.random.default_rng(seed)
    card = np.asarray(cardinalities)
    y = rng.integers(0, 3, size=n)
    x = np.zeros((n, len(card)), dtype=np.int64)
    x[:, 0] = np.where(rng.random(n) < 0.7, y % card[0], rng.integers(0, card[0], n))
    for i in range(1, len(card)):
        x[:, i] = np.where(rng.random(n) < 0.8, (x[:, i - 1] + y) % card[i], rng.integers(0, card[i], n))
    split = 2 * n // 3
    return DiscreteDataset(
        name="mixed",
        x_train=x[:split],
        y_train=y[:split],
        x_test=x[split:],
        y_test=y[split:],
        cardinalities=card,
        class_names=[str(c) for c in range(3)],
        feature_names=[f"f{i}" for i in range(len(card))],
    )


@pytest.fixture(scope="module")
def data():
    return mixed_dataset()


def _pair(**kw) -> tuple[TrainConfig, StructureLearningConfig]:
    sl_fields = {f for f in StructureLearningConfig.__dataclass_fields__}
    config = {"model": "tan", "structure": "learn", "epochs": EPOCHS, "batch_size": 30, "progress": False}
    sl = {"size_penalty": 1e-3, "candidates": 3, "structure_lr": 0.05}
    for key, value in kw.items():
        (sl if key in sl_fields else config)[key] = value
    return TrainConfig(**config), StructureLearningConfig(**sl)


def _same_history(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for key in a:
        if key != "seconds":
            assert a[key] == b[key], key


def _same_result(single, batched) -> None:
    """Two TrainResults of structure learning are the same model file, timings aside."""
    a, b = single.artifact, batched.artifact
    np.testing.assert_array_equal(a.parents, b.parents)
    if a.is_quantized:
        np.testing.assert_array_equal(a.table_codes, b.table_codes)
    else:
        np.testing.assert_array_equal(a.table_logp, b.table_logp)
        np.testing.assert_array_equal(a.class_logp, b.class_logp)
    assert a.metadata["errors"] == b.metadata["errors"]
    assert a.metadata["config"] == b.metadata["config"]
    sa, sb = a.metadata["structure_learning"], b.metadata["structure_learning"]
    assert {k: v for k, v in sa.items() if k not in ("history", "seconds")} == {
        k: v for k, v in sb.items() if k not in ("history", "seconds")
    }
    _same_history(sa["history"], sb["history"])
    _same_history(single.history, batched.history)


def _same_run(a, b) -> None:
    np.testing.assert_array_equal(a.rho, b.rho)
    np.testing.assert_array_equal(a.class_rho, b.class_rho)
    np.testing.assert_array_equal(a.phi, b.phi)
    _same_history(a.history, b.history)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"loss": "nll", "init": "ml", "size_penalty": 0.0},
        {"loss": "cll", "order": "random", "size_penalty_mode": "absolute", "lr": 0.02},
        {"bits": 4, "finetune_epochs": 1, "candidates": None, "order": "chow-liu"},
        {"epochs": 0},
    ],
    ids=["hybrid", "nll-ml-init", "cll-random-order", "finetuned-4bit-all-predecessors", "no-epochs"],
)
def test_batch_of_one_equals_train_learned_tan_bit_for_bit(data, kw):
    pair = _pair(**kw)
    single = train_learned_tan(data, *pair)
    [run] = train_learned_tan_batched(data, [pair])
    _same_result(single, run.result)
    np.testing.assert_array_equal(run.parents, single.artifact.parents)


def test_fused_adams_scalar_tail_stays_where_the_single_run_has_it(tmp_path):
    """The single run's last (R K C mod 16) table entries take fused Adam's scalar loop, which rounds
    differently: here they are real, always trained entries (the last feature, with the most values,
    has only its no-parent row, the table's last), so the layout must end a piece on them."""
    wide_last = mixed_dataset(cardinalities=(3, 5, 2, 4, 1, 3, 6))
    path = tmp_path / "sets.json"
    sets = {"ordering": [6, 0, 1, 2, 3, 4, 5], "candidates": [[6], [0], [1, 6], [2], [3], [4, 0], []]}
    path.write_text(json.dumps(sets))
    pairs = [
        _pair(candidates_file=str(path), candidates=8, epochs=6, batch_size=20),
        _pair(candidates_file=str(path), candidates=8, epochs=6, batch_size=20, seed=1, lr=0.03),
    ]
    runs = train_learned_tan_batched(wide_last, pairs)
    assert runs[0].rho.size % 16 and runs[0].rho.shape[0] == 37  # 37 rows x 6 values x 3 classes
    for pair, run in zip(pairs, runs):
        _same_result(train_learned_tan(wide_last, *pair), run.result)


def _mixed_pairs(tmp_path) -> list:
    # A candidates file with its own ordering and sets: another number of slots (J = 3), its own bucket.
    path = tmp_path / "sets.json"
    path.write_text(
        json.dumps({"ordering": [6, 5, 4, 3, 2, 1, 0], "candidates": [[1, 3], [2], [5], [4, 6], [], [6], []]})
    )
    return [
        _pair(),
        _pair(seed=1, lr=0.02, size_penalty=0.0),
        _pair(seed=2, size_penalty=1.0, structure_lr=0.01, order="random"),
        _pair(seed=1, adam_eps=1e-8, lr_decay=0.1, hybrid_lambda=5.0, hybrid_gamma=1.0, hybrid_eta=3.0),
        _pair(seed=3, candidates_file=str(path), candidates=8, size_penalty=0.01),
        _pair(seed=0, size_penalty=1e-5, tau_start=10.0),
    ]


def test_result_does_not_depend_on_companions(data, tmp_path):
    pairs = _mixed_pairs(tmp_path)
    together = train_learned_tan_batched(data, pairs, build=lambda i, run: i in (2, 4))
    assert [r.candidates.shape[1] for r in together] == [4, 4, 4, 4, 3, 4]
    for pair, run in zip(pairs, together):
        [alone] = train_learned_tan_batched(data, [pair], build=False)
        _same_run(run, alone)
    for i in (2, 4):
        _same_result(train_learned_tan(data, *pairs[i]), together[i].result)
    assert together[0].result is None


def test_per_configuration_products_where_they_are_not_bag_sums(data, tmp_path, monkeypatch):
    """Where MKL's one-hot product is not the sequential sum of the chosen rows (checked per shape),
    each configuration's log-joint is the single run's own product: same results."""
    import bnc_deploy.train.structure_batched_step as step_module

    pairs = _mixed_pairs(tmp_path)[:3]
    bags = train_learned_tan_batched(data, pairs, build=False)
    monkeypatch.setattr(step_module, "products_are_bag_sums", lambda *args: False)
    products = train_learned_tan_batched(data, pairs, build=False)
    for a, b in zip(bags, products):
        _same_run(a, b)


def test_chunks_and_checkpoints_do_not_change_results(data, tmp_path):
    pairs = _mixed_pairs(tmp_path)
    whole = train_learned_tan_batched(data, pairs, build=False)
    pieces = train_learned_tan_batched(data, pairs, build=False, max_configs=2, checkpoints=[1])
    for a, b in zip(whole, pieces):
        np.testing.assert_array_equal(a.rho, b.rho)
        assert a.history["train_loss"] == b.history["train_loss"]
        assert b.history["test_error"] == [a.history["test_error"][0], a.history["test_error"][-1]]
        assert b.history["checkpoint_epochs"] == [1, EPOCHS]
        assert [p["epoch"] for p in b.checkpoints] == [1, EPOCHS]


def test_early_stops_leave_the_others_untouched(data):
    pairs = [
        _pair(seed=s % 3, size_penalty=lam, lr=lr)
        for s, (lam, lr) in enumerate([(1e-4, 3e-3), (1e-2, 3e-3), (1.0, 3e-2), (0.0, 3e-2), (1e-3, 1e-2), (0.1, 1e-2)])
    ]
    seen = []

    def halve(view):
        seen.append(view)
        keep = np.zeros(len(view.indices), dtype=bool)
        keep[np.argsort(view.test_error, kind="stable")[: len(keep) // 2]] = True
        return keep

    runs = train_learned_tan_batched(data, pairs, checkpoints=[1], on_checkpoint=halve)
    assert len(seen) == 1 and seen[0].epoch == 1 and sorted(seen[0].indices) == list(range(6))
    stopped = [i for i, r in enumerate(runs) if r.stopped_at == 1]
    survivors = [i for i, r in enumerate(runs) if r.stopped_at is None]
    assert len(stopped) == 3 and len(survivors) == 3
    for i in survivors:
        [alone] = train_learned_tan_batched(data, [pairs[i]], build=False, checkpoints=[1])
        _same_run(runs[i], alone)
    for i in stopped:
        [alone] = train_learned_tan_batched(
            data, [pairs[i]], build=False, checkpoints=[1], on_checkpoint=lambda v: np.zeros(1, dtype=bool)
        )
        _same_run(runs[i], alone)
        [full] = train_learned_tan_batched(data, [pairs[i]], build=False)
        assert runs[i].history["train_loss"] == full.history["train_loss"][:1]
        assert len(runs[i].history["lr"]) == 1 and runs[i].checkpoints[-1]["epoch"] == 1
        assert runs[i].result.artifact.metadata["stopped_at_epoch"] == 1


def test_unbatchable_pairs_are_refused_by_name(data):
    with pytest.raises(ConfigError, match=r"configuration 1 cannot be batched.*epochs=2"):
        train_learned_tan_batched(data, [_pair(), _pair(epochs=2)])
    with pytest.raises(ConfigError, match=r"configuration 1 cannot be batched.*tau_end=0.5"):
        train_learned_tan_batched(data, [_pair(), _pair(tau_end=0.5)])
    with pytest.raises(ConfigError, match="model tan"):
        train_learned_tan_batched(data, [(TrainConfig(model="nb", epochs=1, progress=False), None)])
    assert chunk_key(*_pair(lr=1.0, seed=4, size_penalty=3.0, order="random")) == chunk_key(*_pair())
    assert train_learned_tan_batched(data, []) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch (CI has none)")
def test_gpu_runs_deterministically_and_close_to_the_cpu(data, tmp_path):
    pairs = _mixed_pairs(tmp_path)
    gpu = train_learned_tan_batched(data, pairs, device="cuda", build=False)
    again = train_learned_tan_batched(data, pairs, device="cuda", build=False)
    cpu = train_learned_tan_batched(data, pairs, build=False)
    for a, b, c in zip(gpu, again, cpu):
        _same_run(a, b)
        # Other kernels round differently; a few epochs on little data stay close.
        assert abs(a.history["test_error"][-1] - c.history["test_error"][-1]) < 0.1
