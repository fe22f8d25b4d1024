"""``--pack-words`` (packed lookups of ``gather`` and ``gather-grouped``, ``exporters/_onnx_bnc_grouped.py``):
each table row's C codes as float64 words of b-bit fields, looked up with GatherElements, summed and
unpacked. What must hold: bit-identical ``log_joint`` and labels for quantized models on every
valid row (one word and several, 1 to 8 bits, NB and TAN, raw inputs), NaN / -1 for every invalid
row and only those, the metadata names the packing, and the option is refused where it does not
apply (``onehot-fc``, a float model)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._onnx_bnc_grouped import FLOAT64_WORD_BITS, word_packing
from bnc_deploy.exporters.onnx_bnc import build_onnx_model
from bnc_deploy.formats.metadata import INVALID_LABEL, METADATA_KEY, parse_metadata
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact


def run(model, x):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"])
    return s.run(["log_joint", "label"], {"x": x})


def metadata(model) -> dict:
    return parse_metadata({p.key: p.value for p in model.metadata_props}[METADATA_KEY])


CASES = [  # (tan, bits, d, classes): one word and several
    (False, 3, 6, 4),
    (True, 3, 9, 5),
    (False, 8, 16, 26),
    (True, 8, 12, 11),
    (False, 1, 30, 40),
    (True, 5, 40, 3),
]


@pytest.mark.parametrize("lowering", ["gather", "gather-grouped"])
@pytest.mark.parametrize("case", CASES, ids=[f"{'tan' if c[0] else 'nb'}-b{c[1]}-d{c[2]}-c{c[3]}" for c in CASES])
def test_packed_words_are_exact_and_guard_every_invalid_row(case, lowering):
    tan, bits, d, n_classes = case
    rng = np.random.default_rng(d * 100 + n_classes)
    artifact = random_bnc_artifact(rng, tan=tan, bits=bits, d=d, n_classes=n_classes)
    model = build_onnx_model(artifact, lowering=lowering, pack_words=True)
    field_bits, per_word, words = word_packing(artifact)
    assert per_word * field_bits <= FLOAT64_WORD_BITS and words * per_word >= n_classes
    assert (d + 1) * artifact.quantizer.max_code < 2**field_bits
    meta = metadata(model)
    assert meta["packed_words"] == words and meta["field_bits"] == field_bits and meta["exact"]
    ref = ReferencePredictor(artifact)
    cards = np.asarray(artifact.cardinalities)
    for n in (1, 7, 500):
        x = rng.integers(0, cards, size=(n, d)).astype(np.int64)
        lj, label = run(model, x)
        assert np.array_equal(label, ref.predict(x)) and np.array_equal(lj, ref.log_joint(x))
    x = rng.integers(0, cards, size=(40, d)).astype(np.int64)
    bad = np.arange(0, 40, 3)
    x[bad, rng.integers(0, d, size=bad.size)] = rng.choice([-1, 10**12, -(10**12), int(cards.max()) + 1], bad.size)
    invalid = ~((x >= 0) & (x < cards)).all(axis=1)
    lj, label = run(model, x)
    assert (label[invalid] == INVALID_LABEL).all() and np.isnan(lj[invalid]).all()
    assert np.array_equal(lj[~invalid], ref.log_joint(x[~invalid])) and np.array_equal(
        label[~invalid], ref.predict(x[~invalid])
    )


def test_packed_words_with_raw_inputs():
    rng = np.random.default_rng(3)
    cuts = [[0.5, 1.5], [], [-1.0, 0.0, 1.0], [2.0], [-0.5]]
    artifact = random_bnc_artifact(
        rng, tan=True, bits=3, d=5, n_classes=4, cardinalities=[3, 1, 4, 2, 2], discretizer=discretizer_dict(cuts)
    )
    ref = ReferencePredictor(artifact)
    x = rng.normal(size=(300, 5)).astype(np.float32) * 3
    x[5, 2], x[9, 0] = np.nan, np.inf
    ok = np.setdiff1d(np.arange(300), [5, 9])
    for lowering in ("gather", "gather-grouped"):
        lj, label = run(build_onnx_model(artifact, lowering=lowering, pack_words=True, raw_inputs=True), x)
        assert label[5] == label[9] == INVALID_LABEL and np.isnan(lj[[5, 9]]).all()
        assert np.array_equal(label[ok], ref.predict_raw(x[ok])) and np.array_equal(lj[ok], ref.log_joint_raw(x[ok]))


def test_pack_words_is_refused_where_it_does_not_apply():
    rng = np.random.default_rng(4)
    quantized = random_bnc_artifact(rng, bits=3, d=4)
    with pytest.raises(ExportError, match="--pack-words packs the table rows of --lowering gather or"):
        build_onnx_model(quantized, lowering="onehot-fc", pack_words=True)
    with pytest.raises(ExportError, match="--pack-words packs integer codes"):
        build_onnx_model(random_bnc_artifact(rng, bits=None, d=4), lowering="gather-grouped", pack_words=True)
    assert "packed_words" not in metadata(build_onnx_model(quantized, lowering="gather-grouped"))


def test_the_ort_export_honours_pack_words(tmp_path):
    """The ORT format's own lookup graph has no packed words: with ``--pack-words`` the ORT file is the packed
    ONNX graph converted (never the option silently dropped), exact as the ONNX one."""
    from bnc_deploy.exporters.ort_format import build_ort_bytes, ort_lookup_applies

    artifact = random_bnc_artifact(np.random.default_rng(7), tan=True, bits=3, d=9, n_classes=5)
    assert ort_lookup_applies(artifact) and not ort_lookup_applies(artifact, pack_words=True)
    data = build_ort_bytes(artifact, lowering="gather", pack_words=True)
    path = tmp_path / "m.ort"
    path.write_bytes(data)
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = parse_metadata(s.get_modelmeta().custom_metadata_map[METADATA_KEY])
    assert meta["format"] == "ort" and meta["packed_words"] >= 1
    x = np.random.default_rng(8).integers(0, np.asarray(artifact.cardinalities), size=(300, 9)).astype(np.int64)
    log_joint, label = s.run(["log_joint", "label"], {"x": x})
    ref = ReferencePredictor(artifact)
    assert np.array_equal(log_joint, ref.log_joint(x)) and np.array_equal(label, ref.predict(x))


@pytest.mark.parametrize("lowering", ["gather", "gather-grouped"])
def test_the_graph_profiler_counts_every_op_of_a_packed_graph(tmp_path, lowering):
    """bnc-profile's graph count has a rule for every op the packed lookups use (the bit fields' Floor too)."""
    from bnc_deploy.profiling.graph_count import count_graph

    artifact = random_bnc_artifact(np.random.default_rng(9), tan=True, bits=3, d=9, n_classes=5)
    path = tmp_path / "m.onnx"
    path.write_bytes(build_onnx_model(artifact, lowering=lowering, pack_words=True).SerializeToString())
    counted = count_graph(path)
    assert counted.complete and not counted.unknown_ops
