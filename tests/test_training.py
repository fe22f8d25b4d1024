import json

import numpy as np
import pytest
from support import make_synthetic_dataset

from bnc_deploy.artifacts import load_artifact, save_artifact
from bnc_deploy.quantizers import UnsupportedBitWidth
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.train.bnc import TrainConfig, default_int_bits, load_structure_file, train_bnc


def quick(**kw):
    base = dict(epochs=4, batch_size=32, lr=3e-2, progress=False)
    base.update(kw)
    return TrainConfig(**base)


def test_learning_rate_decays_log_linearly_to_a_thousandth():
    lrs = TrainConfig(epochs=5, lr=3e-3).learning_rates()
    assert lrs[0] == pytest.approx(3e-3) and lrs[-1] == pytest.approx(3e-6)
    assert np.allclose(np.diff(np.log(lrs)), np.log(1e-3) / 4)


def test_training_is_seeded_and_reproducible():
    ds = make_synthetic_dataset()
    a = train_bnc(ds, quick(seed=7, bits=3))
    b = train_bnc(ds, quick(seed=7, bits=3))
    c = train_bnc(ds, quick(seed=8, bits=3))
    assert np.array_equal(a.artifact.table_codes, b.artifact.table_codes)
    assert a.history["train_loss"] == b.history["train_loss"]
    assert a.history["train_loss"] != c.history["train_loss"]


@pytest.mark.parametrize("model", ["nb", "tan"])
@pytest.mark.parametrize("bits", [None, 1, 4, 8])
def test_training_learns_and_artifact_matches(model, bits):
    ds = make_synthetic_dataset()
    result = train_bnc(ds, quick(model=model, bits=bits, epochs=15))
    art = result.artifact
    assert art.structure == model and art.is_quantized == (bits is not None)
    errors = art.metadata["errors"]
    majority = np.bincount(ds.y_test).max() / len(ds.y_test)
    assert errors["test"] < 1 - majority  # better than guessing the majority class
    assert errors["test"] == pytest.approx(np.mean(ReferencePredictor(art).predict(ds.x_test) != ds.y_test))
    assert art.metadata["torch_reference_agreement"] == 1.0
    history = result.history
    assert len(history["train_loss"]) == 15 and len(history["test_error"]) == 15
    if bits is None or bits >= 4:  # at 1 bit the loss surface is too coarse to decrease monotonically
        assert history["train_loss"][-1] < history["train_loss"][0]


def test_ml_with_zero_epochs_is_count_based_and_history_is_empty():
    ds = make_synthetic_dataset()
    result = train_bnc(ds, quick(init="ml", epochs=0))
    assert result.history["train_loss"] == []
    # Class prior from add-one counts.
    counts = np.bincount(ds.y_train, minlength=ds.n_classes) + 1.0
    assert np.allclose(np.exp(result.artifact.class_logp), counts / counts.sum(), atol=1e-6)


def test_validation_split_is_tracked():
    ds = make_synthetic_dataset().with_validation(0.2, seed=1)
    result = train_bnc(ds, quick())
    assert len(result.history["val_error"]) == 4
    assert "val" in result.artifact.metadata["errors"]


def test_metadata_records_config_data_library_and_check_set(tmp_path):
    ds = make_synthetic_dataset()
    art = train_bnc(ds, quick(bits=2, int_bits=2, seed=3)).artifact
    path = tmp_path / "m.bnc"
    save_artifact(art, path)
    meta = load_artifact(path).metadata
    assert meta["config"]["bits"] == 2 and meta["config"]["seed"] == 3
    assert meta["data"]["n_train"] == 300 and meta["library"]["bnc_deploy"]
    assert art.check_x.shape == (150, ds.n_features) and art.check_x.dtype == np.uint8
    json.dumps(meta, allow_nan=False)


def test_structure_from_file_and_errors(tmp_path):
    ds = make_synthetic_dataset()
    good = tmp_path / "parents.json"
    good.write_text(json.dumps({"parents": [-1, 0, 1, 2, 3, 4]}))
    art = train_bnc(ds, quick(model="tan", structure=str(good))).artifact
    assert art.parents.tolist() == [-1, 0, 1, 2, 3, 4]
    txt = tmp_path / "parents.txt"
    txt.write_text("-1 0 0 0 0 0")
    assert load_structure_file(txt, 6).tolist() == [-1, 0, 0, 0, 0, 0]
    cyclic = tmp_path / "cyclic.json"
    cyclic.write_text("[1, 0, -1, -1, -1, -1]")
    with pytest.raises(ValueError, match="cycle"):
        load_structure_file(cyclic, 6)
    short = tmp_path / "short.json"
    short.write_text("[-1, 0]")
    with pytest.raises(ValueError, match="expected 6 integer parents"):
        load_structure_file(short, 6)
    with pytest.raises(ValueError, match="does not exist"):
        load_structure_file(tmp_path / "nope.json", 6)


def test_config_validation():
    ds = make_synthetic_dataset()
    with pytest.raises(UnsupportedBitWidth):
        train_bnc(ds, quick(bits=9))
    with pytest.raises(ValueError, match="needs --bits"):
        train_bnc(ds, quick(int_bits=2))
    with pytest.raises(ValueError, match="larger than the training set"):
        train_bnc(ds, quick(batch_size=10_000))
    with pytest.raises(ValueError, match="unknown model"):
        train_bnc(ds, quick(model="svm"))
    assert [default_int_bits(b) for b in range(1, 9)] == [1, 2, 2, 3, 3, 3, 3, 3]


@pytest.mark.parametrize("bits", [None, 3])
@pytest.mark.parametrize("model_kind", ["nb", "tan"])
def test_closed_form_step_equals_autograd(bits, model_kind):
    """The training fast path (no autograd) must produce autograd's gradients of the hybrid loss."""
    import torch

    from bnc_deploy.models.bnc import BayesNetClassifier
    from bnc_deploy.quantizers import FixedPointLogQuantizer
    from bnc_deploy.train.bnc import closed_form_step
    from bnc_deploy.train.losses import HybridLoss

    ds = make_synthetic_dataset(seed=4)
    parents = None if model_kind == "nb" else [-1, 0, 1, 2, 0, 4]
    quantizer = None if bits is None else FixedPointLogQuantizer(bits, 2)
    model = BayesNetClassifier(
        ds.cardinalities, ds.n_classes, parents, quantizer=quantizer, generator=torch.Generator().manual_seed(3)
    )
    indices, labels = model.flat_indices(ds.x_train[:50]), torch.as_tensor(ds.y_train[:50])
    loss_fn = HybridLoss(5.0, 0.3, 10.0)

    loss, _ = closed_form_step(model, loss_fn, indices, labels)
    fast = (model.rho.grad.clone(), model.class_rho.grad.clone())

    model.zero_grad()
    class_theta, theta = model.log_tables()  # plain torch expressions, differentiated by autograd
    log_joint = theta.reshape(-1, ds.n_classes)[indices].sum(dim=1) + class_theta
    true = log_joint.gather(1, labels[:, None])[:, 0]
    others = log_joint.masked_fill(torch.nn.functional.one_hot(labels, ds.n_classes).bool(), float("-inf"))
    smooth = torch.logsumexp(10.0 * (0.3 + others - true[:, None]), dim=1) / 10.0
    plain_loss = (-true + 5.0 * torch.relu(smooth)).mean()
    plain_loss.backward()
    assert float(loss) == pytest.approx(plain_loss.item(), rel=1e-5)
    assert torch.allclose(fast[0], model.rho.grad, atol=1e-6)
    assert torch.allclose(fast[1], model.class_rho.grad, atol=1e-6)


# -- the shared epoch loop (train/loop.py) ----------------------------------------------------------
def _recording_step(seen, optimizer, n_classes=2):
    """A step that records (lr, batch rows) and reports loss = call number, every row right."""
    import torch

    def step(x, y):
        seen.append((optimizer.param_groups[0]["lr"], x[:, 0].long().tolist()))
        return torch.tensor(float(len(seen))), torch.nn.functional.one_hot(y, n_classes).float()

    return step


@pytest.mark.parametrize("gather_per_epoch", [False, True])
def test_epoch_loop_schedule_shuffle_and_dropped_batch(gather_per_epoch):
    import torch

    from bnc_deploy.train.loop import fit_epochs

    rows = torch.arange(10)
    inputs, labels = rows.float()[:, None], rows % 2
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    seen, records = [], []
    fit_epochs(
        inputs,
        labels,
        step=_recording_step(seen, optimizer),
        record=records.append,
        optimizer=optimizer,
        learning_rates=np.array([0.5, 0.25]),
        batch_size=4,
        seed=7,
        gather_per_epoch=gather_per_epoch,
    )
    # Per epoch: the rate of the schedule, a fresh randperm from the seed + 1 generator, two full
    # batches of 4 (the last 2 rows dropped).
    shuffle = torch.Generator().manual_seed(8)
    expected = []
    for lr in (0.5, 0.25):
        order = torch.randperm(10, generator=shuffle).tolist()
        expected += [(lr, order[0:4]), (lr, order[4:8])]
    assert seen == expected
    assert [(r.epoch, r.lr, r.train_loss, r.train_error) for r in records] == [(1, 0.5, 1.5, 0.0), (2, 0.25, 3.5, 0.0)]


def test_epoch_loop_counts_wrong_rows_and_checks_the_batch_size():
    import torch

    from bnc_deploy.errors import ConfigError
    from bnc_deploy.train.loop import fit_epochs

    inputs, labels = torch.zeros(6, 1), torch.tensor([0, 1, 1, 1, 0, 1])
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    always_zero = lambda x, y: (torch.tensor(0.0), torch.tensor([[1.0, 0.0]]).expand(len(y), 2))  # noqa: E731
    records = []
    fit_epochs(
        inputs,
        labels,
        step=always_zero,
        record=records.append,
        optimizer=optimizer,
        learning_rates=np.array([1.0]),
        batch_size=6,
        seed=0,
    )
    assert records[0].train_error == pytest.approx(4 / 6)
    with pytest.raises(ConfigError, match="larger than the training set"):
        fit_epochs(
            inputs,
            labels,
            step=always_zero,
            record=records.append,
            optimizer=optimizer,
            learning_rates=np.array([1.0]),
            batch_size=7,
            seed=0,
        )
    # No epochs: nothing runs and nothing is checked (the maximum-likelihood model with --epochs 0).
    fit_epochs(
        inputs,
        labels,
        step=always_zero,
        record=records.append,
        optimizer=optimizer,
        learning_rates=np.array([]),
        batch_size=7,
        seed=0,
    )
    assert len(records) == 1


def test_user_caused_training_errors_are_config_errors(tmp_path):
    """Bad flag values and structure files are ConfigError: the CLI reports them in one line (exit 2)."""
    from bnc_deploy.errors import ConfigError
    from bnc_deploy.train.dnn import DNNConfig
    from bnc_deploy.train.sizing import match_fc
    from bnc_deploy.train.structure_learning import StructureLearningConfig, parse_candidates
    from bnc_deploy.train.structure_sweep import parse_grid, parse_lambdas

    ds = make_synthetic_dataset()
    bad = tmp_path / "parents.txt"
    bad.write_text("0 0 x")
    for call in (
        lambda: train_bnc(ds, quick(int_bits=2)),
        lambda: train_bnc(ds, quick(batch_size=10_000)),
        lambda: train_bnc(ds, quick(loss="mse")),
        lambda: load_structure_file(bad, 6),
        lambda: DNNConfig(layers=9, hidden=[4]).validate(),
        lambda: parse_candidates("x"),
        lambda: StructureLearningConfig(size_penalty=-1).validate(),
        lambda: parse_lambdas("a"),
        lambda: parse_grid("1:2"),
        lambda: match_fc(64, 10, 2, 2, False, target_bits=1),
    ):
        with pytest.raises(ConfigError):
            call()
