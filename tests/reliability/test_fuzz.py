"""Property-based fuzzing of the readers of untrusted files (issue 11 item 6): random bytes and
mutated valid files give only the documented error, never another exception, a crash or a wrong
answer.

* ``load_runtime`` on random bytes named ``.onnx``/``.tflite``/``.bnc``, and on valid exports with
  bytes flipped, zeroed or cut off: RuntimeLoadError (the integrity check, on by default, refuses
  every changed byte of an export; a file whose bytes did not change loads and runs exactly);
* ``load_artifact`` on random bytes and on mutated valid model files: ArtifactError, or (a change
  to bytes the content hash does not cover, e.g. a ZIP timestamp) the same model;
* the CSV reader (``load_dataset("x.csv")``) on random text and on random number grids:
  DatasetError or a dataset.

Examples are bounded so the file runs in well under a minute.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bnc_deploy.artifacts import ArtifactError, load_artifact, save_artifact
from bnc_deploy.errors import DatasetError, RuntimeLoadError
from bnc_deploy.runtimes.base import load_runtime, runtime_class
from bnc_deploy.testing import random_bnc_artifact

FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def _available(runtime: str) -> bool:
    try:
        runtime_class(runtime)
        return True
    except ImportError:
        return False


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def valid_files(folder):
    """name -> (bytes, artifact) of a valid model file and exports of it."""
    from bnc_deploy.verify import export_path

    artifact = random_bnc_artifact(np.random.default_rng(7), d=5, n_classes=3, tan=True, bits=3, int_bits=2)
    files = {}
    path = folder / "valid.bnc"
    save_artifact(artifact, path)
    files[".bnc"] = path.read_bytes()
    if _available("onnxruntime"):
        files[".onnx"] = export_path(artifact, folder / "valid.onnx", "onnx").read_bytes()
    try:
        import tensorflow  # noqa: F401 - the converter

        if _available("litert"):
            files[".tflite"] = export_path(
                artifact, folder / "valid.tflite", "tflite", lowering="onehot-fc"
            ).read_bytes()
    except ImportError:
        pass
    return files, artifact


def mutate(data: bytes, draw_ops) -> bytes:
    b = bytearray(data)
    for kind, at, value in draw_ops:
        if not b:
            break
        at %= len(b)
        if kind == "flip":
            b[at] ^= 1 << (value % 8)
        elif kind == "set":
            b[at] = value % 256
        elif kind == "zero":
            b[at : at + 1 + value % 64] = bytes(len(b[at : at + 1 + value % 64]))
        elif kind == "cut":
            del b[at:]
        elif kind == "insert":
            b[at:at] = bytes([value % 256]) * (1 + value % 7)
    return bytes(b)


OPS = st.lists(
    st.tuples(st.sampled_from(["flip", "set", "zero", "cut", "insert"]), st.integers(0, 2**20), st.integers(0, 255)),
    min_size=1,
    max_size=4,
)


# -- load_runtime ------------------------------------------------------------------------------------
@FUZZ
@given(data=st.binary(max_size=2048), ext=st.sampled_from([".onnx", ".tflite", ".bnc"]))
def test_load_runtime_random_bytes(folder, data, ext):
    runtime = {".onnx": "onnxruntime", ".tflite": "litert", ".bnc": "numpy"}[ext]
    if not _available(runtime):
        pytest.skip(f"{runtime} is not installed")
    path = folder / f"random{ext}"
    path.write_bytes(data)
    with pytest.raises(RuntimeLoadError):
        load_runtime(path)


@FUZZ
@given(ops=OPS, ext=st.sampled_from([".onnx", ".tflite", ".bnc"]))
def test_load_runtime_mutated_files(folder, valid_files, ops, ext):
    files, artifact = valid_files
    if ext not in files:
        pytest.skip(f"no {ext} exporter or runtime installed")
    data = mutate(files[ext], ops)
    path = folder / f"mutated{ext}"
    path.write_bytes(data)
    if data != files[ext]:
        if ext == ".bnc":
            # A model file's content hash covers what the model is, not every ZIP byte: a load is
            # fine as long as the model is the same one.
            try:
                rt = load_runtime(path)
            except RuntimeLoadError:
                return
            assert rt.artifact.content_sha256 == load_artifact(folder / "valid.bnc").content_sha256
        else:
            with pytest.raises(RuntimeLoadError):
                load_runtime(path)
        return
    rt = load_runtime(path)  # unchanged bytes: loads and is exact
    x = np.random.default_rng(0).integers(0, artifact.cardinalities, size=(20, artifact.n_features))
    from bnc_deploy.reference import reference_predictor

    np.testing.assert_array_equal(rt.log_joint(x), reference_predictor(artifact).log_joint(x))


# -- load_artifact -----------------------------------------------------------------------------------
@FUZZ
@given(data=st.binary(max_size=4096))
def test_load_artifact_random_bytes(folder, data):
    path = folder / "random-artifact.bnc"
    path.write_bytes(data)
    with pytest.raises(ArtifactError):
        load_artifact(path)


@FUZZ
@given(ops=OPS)
def test_load_artifact_mutated(folder, valid_files, ops):
    files, artifact = valid_files
    path = folder / "mutated-artifact.bnc"
    path.write_bytes(mutate(files[".bnc"], ops))
    try:
        loaded = load_artifact(path)
    except ArtifactError:
        return
    assert loaded.content_sha256 == load_artifact(folder / "valid.bnc").content_sha256  # never a different model


def test_zip_damage_found_by_fuzzing_is_an_artifact_error(folder, valid_files):
    """Regressions: an entry header whose "encrypted" bit or compression method was flipped made
    zipfile raise RuntimeError / NotImplementedError, which escaped load_artifact."""
    files, _ = valid_files
    data = files[".bnc"]
    header = data.index(b"PK\x03\x04")
    for offset, value in ((6, data[header + 6] | 1), (8, 99)):  # flag bit 0: encrypted; method 99
        damaged = bytearray(data)
        damaged[header + offset] = value
        central = bytes(damaged).index(b"PK\x01\x02")
        damaged[central + offset + 2] = value  # the central directory's copy
        path = folder / "zip-damage.bnc"
        path.write_bytes(bytes(damaged))
        with pytest.raises(ArtifactError, match="corrupt"):
            load_artifact(path)


# -- the CSV reader ----------------------------------------------------------------------------------
CSV_ALPHABET = st.sampled_from(list("0123456789,,,\n\n.-+eE abcxyz\"'\t;") + ["nan", "inf", "label", "\r\n", "é"])


def _load_csv(folder, text: str, name: str = "fuzz.csv"):
    from bnc_deploy.datasets import load_dataset

    path = folder / name
    path.write_text(text, encoding="utf-8")
    try:
        return load_dataset(str(path))
    except DatasetError:
        return None


@FUZZ
@given(text=st.lists(CSV_ALPHABET, max_size=300).map("".join))
def test_read_csv_random_text(folder, text):
    _load_csv(folder, text)


@FUZZ
@given(text=st.text(max_size=400))
def test_read_csv_any_text(folder, text):
    _load_csv(folder, text)


@FUZZ
@given(
    rows=st.integers(1, 40),
    cols=st.integers(1, 5),
    seed=st.integers(0, 2**16),
    header=st.booleans(),
    labels=st.sampled_from(["int", "text", "float", "mixed"]),
)
def test_read_csv_number_grids(folder, rows, cols, seed, header, labels):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, cols)).round(3)
    y = {
        "int": rng.integers(0, 3, rows).astype(str),
        "text": rng.choice(["a", "b", "c"], rows),
        "float": rng.normal(size=rows).round(2).astype(str),
        "mixed": rng.choice(["1", "b", "2.5"], rows),
    }[labels]
    lines = [",".join([f"f{j}" for j in range(cols)] + ["label"])] if header else []
    lines += [",".join([*map(str, x[i]), y[i]]) for i in range(rows)]
    dataset = _load_csv(folder, "\n".join(lines) + "\n", "grid.csv")
    if dataset is not None:
        val = 0 if dataset.x_val is None else dataset.x_val.shape[0]
        n = dataset.x_train.shape[0] + dataset.x_test.shape[0] + val
        assert n == rows
        assert np.all(dataset.x_train >= 0) and np.all(dataset.x_train < dataset.cardinalities[None, :])
