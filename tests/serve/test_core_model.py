"""The serving core: ServedModel and ModelRepository on real exported files (no HTTP).

Every model of the test repository (BN NB/TAN/raw in ONNX, TFLite and .bnc; sign-FC DNN in ONNX
and TFLite) answers bit-identically to ``load_runtime(file).run(x)``; readiness needs the stored
check set; bad input raises the adapters' errors; the version is the file content's hash.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

pytest.importorskip("starlette", reason="bnc-serve needs the 'serve' extra")

import serve_support as ss

from bnc_deploy.errors import InputError
from bnc_deploy.formats.checkset import CHECK_KEY
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.serve.errors import BadRequest, ModelNotFound, ModelNotReady, status_of
from bnc_deploy.serve.model import ModelLoadError, ServedModel
from bnc_deploy.serve.repository import ModelRepository


@pytest.fixture(scope="module")
def repo_files(tmp_path_factory):
    return ss.build_repository(tmp_path_factory.mktemp("core") / "repo")


@pytest.fixture(scope="module")
def repository(repo_files):
    repo = ModelRepository(next(iter(repo_files.values())).path.parent)
    repo.load_all()
    yield repo
    repo.close()


def test_every_model_is_ready_and_bit_identical_to_its_runtime(repository, repo_files):
    assert {e["name"] for e in repository.index()} == set(repo_files)
    assert all(e["state"] == "READY" and e["reason"] == "" for e in repository.index()), repository.index()
    assert repository.ready()
    for name, mf in repo_files.items():
        model = repository.get(name)
        x = ss.valid_rows(mf, n=9, seed=3)
        scores, labels = load_runtime(mf.path).run(x)
        out = dict(model.infer({"x": x}))
        assert list(out) == [model.scores_name, "label"]
        assert out["label"].dtype == np.int64 and out["label"].shape == (9,)
        assert out[model.scores_name].shape == (9, len(mf.artifact.class_names))
        # The served dtype is the file's (float32; float64 for .bnc); widening is exact.
        assert out[model.scores_name].dtype == (np.float64 if mf.format == "bnc" else np.float32)
        np.testing.assert_array_equal(out[model.scores_name].astype(np.float64), scores)
        np.testing.assert_array_equal(out["label"], labels)
        assert model.version == hashlib.sha256(mf.path.read_bytes()).hexdigest()[:12]


def test_metadata_describes_tensors_and_model_facts(repository, repo_files):
    meta = repository.get("nb_onnx").metadata()
    art = repo_files["nb_onnx"].artifact
    assert meta["name"] == "nb_onnx" and meta["versions"] == [repository.get("nb_onnx").version]
    assert meta["inputs"] == [{"name": "x", "datatype": "INT64", "shape": [-1, art.n_features]}]
    assert meta["outputs"] == [
        {"name": "log_joint", "datatype": "FP32", "shape": [-1, art.n_classes]},
        {"name": "label", "datatype": "INT64", "shape": [-1]},
    ]
    p = meta["parameters"]
    assert p["class_names"] == list(art.class_names) and p["cardinalities"] == [int(c) for c in art.cardinalities]
    assert p["bits"] == 3 and p["n_ops"] == art.n_ops and p["runtime"] == "onnxruntime"
    if "tan_tflite" in repo_files:
        assert repository.get("tan_tflite").metadata()["inputs"][0]["datatype"] == "INT32"
    assert repository.get("raw_onnx").metadata()["inputs"][0]["datatype"] == "FP32"
    assert repository.get("dnn_onnx").metadata()["outputs"][0]["name"] == "logits"


def test_output_subset_and_classification(repository, repo_files):
    model = repository.get("nb_onnx")
    x = ss.valid_rows(repo_files["nb_onnx"], n=4)
    scores, labels = load_runtime(repo_files["nb_onnx"].path).run(x)
    assert [n for n, _ in model.infer({"x": x}, ["label"])] == ["label"]
    out = dict(model.infer({"x": x}, ["log_joint", "label"], classification={"log_joint": 2, "label": 1}))
    names = repo_files["nb_onnx"].artifact.class_names
    assert out["label"].tolist() == [names[k].encode() for k in labels]
    assert out["log_joint"].shape == (4, 2)
    for r in range(4):
        best = int(np.argmax(scores[r]))  # first maximum, as the label
        value, index, cname = out["log_joint"][r, 0].decode().split(":")
        assert (int(index), cname, np.float32(value)) == (best, names[best], np.float32(scores[r, best]))
        second = out["log_joint"][r, 1].decode().split(":")
        assert np.float32(second[0]) <= np.float32(value)


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ({"x": np.zeros((2, 3), np.int64)}, "expected shape"),  # wrong feature count
        ({"x": np.zeros(6, np.int64)}, "expected shape"),  # 1-D
        ({"y": np.zeros((1, 6), np.int64)}, "takes one input"),  # wrong name
    ],
)
def test_bad_requests_are_bad_request(repository, inputs, match):
    with pytest.raises(BadRequest, match=match):
        repository.get("nb_onnx").infer(inputs)


def test_bad_values_raise_the_adapters_message(repository, repo_files):
    model = repository.get("nb_onnx")
    x = ss.valid_rows(repo_files["nb_onnx"], n=3)
    bad = x.copy()
    bad[2, 1] = int(repo_files["nb_onnx"].artifact.cardinalities[1])  # out of range
    with pytest.raises(InputError, match=r"feature 1 \('feat1'\) has value \d+ in row 2"):
        model.infer({"x": bad})
    neg = x.copy()
    neg[0, 0] = -1
    with pytest.raises(InputError, match="value -1 in row 0"):
        model.infer({"x": neg})
    with pytest.raises(InputError, match="integer dtype"):
        model.infer({"x": x.astype(np.float32)})
    raw = ss.valid_rows(repo_files["raw_onnx"], n=2).copy()
    raw[1, 2] = np.nan
    with pytest.raises(InputError, match=r"feature 2 .* in row 1, which is not a finite float32"):
        repository.get("raw_onnx").infer({"x": raw})
    assert status_of(InputError("x"))[:2] == (400, "INVALID_ARGUMENT")
    with pytest.raises(BadRequest, match="no output"):
        model.infer({"x": x}, ["probabilities"])
    with pytest.raises(BadRequest, match="classification"):
        model.infer({"x": x}, classification={"label": -1})


def test_zero_rows_give_empty_outputs(repository):
    out = dict(repository.get("dnn_onnx").infer({"x": np.zeros((0, repository.get("dnn_onnx").n_features), np.int64)}))
    assert out["logits"].shape == (0, 3) and out["label"].shape == (0,)


def test_unknown_model_and_version(repository):
    with pytest.raises(ModelNotFound):
        repository.get("nope")
    with pytest.raises(ModelNotFound, match="no version"):
        repository.get("nb_onnx", "0123456789ab")
    assert repository.get("nb_onnx", repository.get("nb_onnx").version) is repository.get("nb_onnx")
    assert status_of(ModelNotFound("x"))[:2] == (404, "NOT_FOUND")
    assert status_of(ModelNotReady("x"))[:2] == (503, "UNAVAILABLE")
    assert status_of(RuntimeError("boom"))[:2] == (500, "INTERNAL")


def test_a_file_that_does_not_reproduce_its_check_set_is_not_ready(tmp_path, monkeypatch):
    """Seal a file whose stored check set is wrong (the check entry tampered before sealing)."""
    import bnc_deploy.formats.bnc as fbnc
    from bnc_deploy.verify import build

    art = ss.bn_artifacts()["nb"]
    real = fbnc.check_entry

    def wrong(*a, **k):
        entry = real(*a, **k)
        entry["labels"] = [(v + 1) % art.n_classes for v in entry["labels"]]
        return entry

    monkeypatch.setattr(fbnc, "check_entry", wrong)
    data, _ = build(art, "onnx")
    monkeypatch.undo()
    (tmp_path / "bad.onnx").write_bytes(data)
    with pytest.raises(ModelLoadError, match=r"check set: row 0 gave label \d, the model file's reference says \d"):
        ServedModel("bad", tmp_path / "bad.onnx")
    repo = ModelRepository(tmp_path)
    repo.load_all()
    assert repo.index() == [{"name": "bad", "version": "", "state": "UNAVAILABLE", "reason": repo.index()[0]["reason"]}]
    assert "check set" in repo.index()[0]["reason"]
    assert not repo.ready()
    with pytest.raises(ModelNotReady, match="check set"):
        repo.get("bad")


def test_files_without_check_set_and_corrupt_files_are_refused(tmp_path, monkeypatch):
    import bnc_deploy.formats.bnc as fbnc
    from bnc_deploy.verify import build

    art = ss.bn_artifacts()["tan"]
    monkeypatch.setattr(fbnc, "check_entry", lambda *a, **k: None)
    data, _ = build(art, "onnx")
    monkeypatch.undo()
    (tmp_path / "old.onnx").write_bytes(data)
    with pytest.raises(ModelLoadError, match="stores no check set"):
        ServedModel("old", tmp_path / "old.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match="junk.onnx"):
        ServedModel("junk", tmp_path / "junk.onnx")


def test_exported_metadata_carries_a_small_check_set(repo_files):
    for mf in repo_files.values():
        if mf.format == "bnc":
            continue
        meta = load_runtime(mf.path).metadata
        entry = meta[CHECK_KEY]
        assert 1 <= len(entry["rows"]) <= 8 and len(entry["labels"]) == len(entry["rows"])
        assert len(entry["scores_sha256"]) == 64
    # An exact file stores the artifact's own check rows first.
    nb = repo_files["nb_onnx"]
    meta = load_runtime(nb.path).metadata
    assert meta["exact"] and meta[CHECK_KEY]["rows"] == nb.artifact.check_x[:8].astype(int).tolist()


def test_repository_layout_ignores_temp_names_and_flags_ambiguous_stems(tmp_path, repo_files):
    src = repo_files["nb_onnx"].path
    (tmp_path / "a.onnx").write_bytes(src.read_bytes())
    (tmp_path / ".a.onnx.x1.tmp.onnx").write_bytes(b"partial")
    (tmp_path / "b.onnx.tmp").write_bytes(b"partial")
    (tmp_path / "notes.txt").write_text("x")
    repo = ModelRepository(tmp_path)
    repo.load_all()
    assert [e["name"] for e in repo.index()] == ["a"]
    (tmp_path / "a.bnc").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="ambiguous"):
        repo.load("a")
    assert repo.get("a").version  # the loaded one keeps serving
    assert "ambiguous" in repo.index()[0]["reason"] and repo.index()[0]["state"] == "READY"
