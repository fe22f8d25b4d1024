import json
import zipfile

import numpy as np
import pytest

from bnc_deploy.artifacts import ArtifactError, BNCArtifact, container, load_artifact, save_artifact
from bnc_deploy.quantizers import FixedPointLogQuantizer
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.validation import InputError


def make_artifact(quantized=True, seed=0):
    rng = np.random.default_rng(seed)
    card = np.array([3, 2, 4, 1])
    parents = np.array([-1, 0, 1, -1])
    rows = 3 + 2 * 3 + 4 * 2 + 1
    common = dict(
        parents=parents,
        cardinalities=card,
        class_names=["a", "b", "c"],
        feature_names=["f0", "f1", "f2", "f3"],
        metadata={"note": "test", "errors": {"test": 0.25}},
        check_x=np.array([[0, 1, 3, 0], [2, 0, 0, 0]], dtype=np.uint8),
        check_y=np.array([0, 2]),
        discretizer=None,
    )
    if quantized:
        q = FixedPointLogQuantizer(3, 2)
        return BNCArtifact(
            quantizer=q,
            class_codes=rng.integers(0, 8, 3).astype(np.uint8),
            table_codes=rng.integers(0, 8, (rows, 3)).astype(np.uint8),
            **common,
        )
    return BNCArtifact(
        class_logp=-rng.random(3).astype(np.float32), table_logp=-rng.random((rows, 3)).astype(np.float32) * 4, **common
    )


@pytest.mark.parametrize("quantized", [True, False])
def test_round_trip_preserves_everything(tmp_path, quantized):
    a = make_artifact(quantized)
    path = tmp_path / "m.bnc"
    digest = save_artifact(a, path)
    b = load_artifact(path)
    assert b.content_sha256 == digest
    assert b.structure == "tan" and b.is_quantized == quantized
    assert np.array_equal(b.parents, a.parents) and np.array_equal(b.cardinalities, a.cardinalities)
    assert b.class_names == a.class_names and b.feature_names == a.feature_names
    assert b.metadata == a.metadata
    x = np.array([[0, 0, 0, 0], [2, 1, 3, 0], [1, 1, 2, 0]])
    assert np.array_equal(ReferencePredictor(a).log_joint(x), ReferencePredictor(b).log_joint(x))


def test_layout_offsets_and_costs():
    a = make_artifact()
    assert a.parent_cardinalities.tolist() == [1, 3, 2, 1]
    assert a.row_offsets.tolist() == [0, 3, 9, 17]
    assert a.n_parameters == 3 * (1 + 18)
    assert a.size_bits == a.n_parameters * 3
    assert a.n_ops == 4 * 3
    # TAN row index offset_i + x_i * |X_pa| + x_pa
    assert a.row_indices(np.array([[2, 1, 3, 0]])).tolist() == [[2, 3 + 1 * 3 + 2, 9 + 3 * 2 + 1, 17]]


def test_reference_log_joint_is_minus_code_sum_times_step():
    a = make_artifact()
    x = np.array([[1, 0, 2, 0]])
    rows = a.row_indices(x)[0]
    expected = -(a.class_codes.astype(int) + a.table_codes[rows].astype(int).sum(axis=0)) * 0.5
    assert np.array_equal(ReferencePredictor(a).log_joint(x)[0], expected)


def test_reference_rejects_bad_inputs_naming_feature_and_value():
    r = ReferencePredictor(make_artifact())
    with pytest.raises(InputError, match=r"feature 2 \('f2'\) has value 4"):
        r.predict([[0, 0, 4, 0]])
    with pytest.raises(InputError, match="value -1"):
        r.predict([[0, -1, 0, 0]])
    with pytest.raises(InputError, match="integer dtype"):
        r.predict(np.zeros((1, 4)))
    with pytest.raises(InputError, match="shape"):
        r.predict(np.zeros((2, 3), dtype=int))


def _rewrite(path, out, mutate_header=None, mutate_arrays=None):
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(out, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "header.json" and mutate_header:
                header = json.loads(data)
                mutate_header(header)
                data = json.dumps(header).encode()
            if item.filename.startswith("arrays/") and mutate_arrays:
                data = mutate_arrays(item.filename, data)
            zout.writestr(item, data)


def test_rejects_missing_truncated_garbage_and_foreign_files(tmp_path):
    path = tmp_path / "m.bnc"
    save_artifact(make_artifact(), path)
    with pytest.raises(ArtifactError, match="no such model file"):
        load_artifact(tmp_path / "absent.bnc")
    truncated = tmp_path / "truncated.bnc"
    truncated.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(ArtifactError, match="truncated.bnc"):
        load_artifact(truncated)
    garbage = tmp_path / "garbage.bnc"
    garbage.write_bytes(b"not a model at all")
    with pytest.raises(ArtifactError, match="not a bnc-deploy model file"):
        load_artifact(garbage)
    foreign = tmp_path / "foreign.bnc"
    with zipfile.ZipFile(foreign, "w") as zf:
        zf.writestr("something.txt", "hello")
    with pytest.raises(ArtifactError, match="not a bnc-deploy model file"):
        load_artifact(foreign)


def test_rejects_flipped_bytes(tmp_path):
    path = tmp_path / "m.bnc"
    save_artifact(make_artifact(), path)
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 3] ^= 0xFF
    bad = tmp_path / "flipped.bnc"
    bad.write_bytes(bytes(blob))
    with pytest.raises(ArtifactError, match="flipped.bnc"):
        load_artifact(bad)


def test_rejects_tampered_header_and_table(tmp_path):
    path = tmp_path / "m.bnc"
    save_artifact(make_artifact(), path)
    tampered = tmp_path / "tampered.bnc"
    _rewrite(path, tampered, mutate_header=lambda h: h.update(class_names=["x", "y", "z"]))
    with pytest.raises(ArtifactError, match="content hash mismatch"):
        load_artifact(tampered)

    def bump_codes(name, data):
        if name == "arrays/table_codes.npy":
            data = data[:-1] + bytes([(data[-1] + 1) % 8])
        return data

    tampered_table = tmp_path / "tampered_table.bnc"
    _rewrite(path, tampered_table, mutate_arrays=bump_codes)
    with pytest.raises(ArtifactError, match="content hash mismatch"):
        load_artifact(tampered_table)


def test_rejects_newer_format_version(tmp_path):
    path = tmp_path / "m.bnc"
    save_artifact(make_artifact(), path)
    future = tmp_path / "future.bnc"
    _rewrite(path, future, mutate_header=lambda h: h.update(format_version=container.FORMAT_VERSION + 1))
    with pytest.raises(ArtifactError, match="newer bnc-deploy.*Upgrade"):
        load_artifact(future)


def test_rejects_inconsistent_content_even_with_a_valid_hash(tmp_path):
    a = make_artifact()
    header, arrays = a.to_header_and_arrays()
    arrays["table_codes"] = np.full_like(arrays["table_codes"], 9)  # > 2**3 - 1
    path = tmp_path / "bad_codes.bnc"
    container.write_container(path, header, arrays)
    with pytest.raises(ArtifactError, match="bad_codes.bnc.*exceeds 7"):
        load_artifact(path)
    header, arrays = a.to_header_and_arrays()
    arrays["parents"] = np.array([1, 0, -1, -1])
    container.write_container(path, header, arrays)
    with pytest.raises(ArtifactError, match="cycle"):
        load_artifact(path)
    header, arrays = a.to_header_and_arrays()
    header["quantization"] = {"total_bits": 9, "int_bits": 3}
    container.write_container(path, header, arrays)
    with pytest.raises(ArtifactError, match="unsupported bit width"):
        load_artifact(path)


def test_constructor_validation():
    with pytest.raises(ArtifactError, match="float32"):
        BNCArtifact(
            parents=[-1],
            cardinalities=[2],
            class_names=["a", "b"],
            feature_names=["f"],
            class_logp=np.zeros(2),
            table_logp=np.zeros((2, 2), np.float32),
        )
    with pytest.raises(ArtifactError, match="<= 0"):
        BNCArtifact(
            parents=[-1],
            cardinalities=[2],
            class_names=["a", "b"],
            feature_names=["f"],
            class_logp=np.zeros(2, np.float32),
            table_logp=np.ones((2, 2), np.float32),
        )
