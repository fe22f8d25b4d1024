"""ORT format exports (issue 16, item 1): ``bnc-export --format ort`` for BN and DNN models.

Checked here: the file is an ORT flatbuffer saved with no graph optimization - for quantized NB and
TAN the ORT lookup graph (``exporters.onnx_bnc.build_ort_lookup_model``: no load-time nodes, the
codes stored for GatherBlockQuantized, 4 bits where they fit; letter-shaped NB 3-bit at most 1.5x
the ``.onnx``), otherwise the ONNX export itself (uint8 tables and int8 weights as stored there) -
smaller than onnxruntime's default optimized conversion, runs bit-identically to the ``.onnx``
export in onnxruntime, keeps our metadata and a working integrity seal, is read by the runtimes (by
extension and by content) and the profiler's graph count (D * C operations, the analytic
parameter bits), and its reduced-operator config (``bnc-ort-config``, written by onnxruntime's own
tool) matches the operators of its graph.

Needs onnx and onnxruntime (the ``runtime`` extra, installed with the base package).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from bnc_deploy.cli.ort_config import main as ort_config_main
from bnc_deploy.errors import RuntimeLoadError
from bnc_deploy.exporters.base import exporter_for
from bnc_deploy.formats import integrity
from bnc_deploy.formats.ort import (
    config_operators,
    is_ort,
    ort_operators,
    ort_to_onnx,
    read_ort_export_metadata,
    required_operators_config,
)
from bnc_deploy.profiling.graph_count import count_graph
from bnc_deploy.runtimes.base import EXTENSIONS, load_runtime
from bnc_deploy.testing import check_export, random_bnc_artifact, random_dnn_artifact
from bnc_deploy.verify import export_file, verification_rows


def _nb(seed=0, bits=3, tan=False, **kw):
    return random_bnc_artifact(
        np.random.default_rng(seed),
        d=8,
        n_classes=5,
        tan=tan,
        bits=bits,
        int_bits=None if bits is None else min(bits, 2),
        n_check=40,
        **kw,
    )


@pytest.fixture(scope="module")
def nb_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ort")
    artifact = _nb()
    export_file(artifact, folder / "m.onnx", "onnx")
    report = export_file(artifact, folder / "m.ort", "ort")
    return artifact, folder / "m.onnx", folder / "m.ort", report


LOOKUP_OPS = [
    "Clip",
    "GatherElements",
    "Cast",
    "GatherBlockQuantized",
    "ReduceSum",
    "ArgMax",
    "ReduceSum",
    "IsNaN",
    "Where",
]


def _stored_table(graph, artifact):
    """The ORT lookup graph's table, unpacked to one value per (row, class): [n_rows + 1, C]."""
    stored = {t.name: onnx.numpy_helper.to_array(t) for t in graph.graph.initializer}
    table = stored["T"]
    assert table.dtype == np.uint8
    if table.shape[1] * 2 == artifact.n_classes:  # 4 bits, low nibble first
        table = np.stack([table & 15, table >> 4], axis=-1).reshape(table.shape[0], -1)
    return table.astype(np.int64), stored


def test_ort_export_is_the_lookup_graph_with_the_codes_stored(nb_files):
    artifact, onnx_path, ort_path, report = nb_files
    data = ort_path.read_bytes()
    assert is_ort(data) and not is_ort(onnx_path.read_bytes())
    assert report.exact and report.scores_identical and report.format == "ort"
    meta = read_ort_export_metadata(ort_path)
    assert meta["format"] == "ort" and meta["exact"] is True and meta["index_guard"] == "clip"
    assert meta["ort"]["graph_optimization"] == "disabled" and meta["ort"]["onnxruntime"] == ort.__version__
    assert meta["prior_folded_into_feature"] == 0 and meta["n_nodes"] == len(LOOKUP_OPS)
    graph = ort_to_onnx(ort_path)
    assert [n.op_type for n in graph.graph.node] == LOOKUP_OPS  # no load-time nodes
    assert {n.domain for n in graph.graph.node} == {"", "com.microsoft"}
    table, stored = _stored_table(graph, artifact)
    expected = artifact.table_codes.astype(np.int64)
    expected[: artifact.rows_per_feature[0]] += artifact.class_codes  # the prior, folded at export
    assert np.array_equal(table[:-1], expected) and not table[-1].any()
    scales = stored["S"].reshape(-1)
    assert np.all(scales[:-1] == -artifact.quantizer.step) and np.isnan(scales[-1])  # the NaN row
    assert not any(a.dtype == np.float32 and a.size >= artifact.table_codes.size for a in stored.values())


@pytest.mark.parametrize("seed,tan,bits", [(0, False, 3), (1, False, 8), (2, True, 3), (3, True, 5)])
def test_invalid_codes_give_nan_scores_and_label_minus_one(tmp_path, seed, tan, bits):
    """The guard of the ONNX contract, fed to the bare ``.ort`` file (NB and TAN; 4-bit and byte
    storage; 8 bits: the prior added per call): any code outside 0 .. |X_i| - 1 (negative, just
    above, far above, int64 extremes) makes that row's scores NaN and its label -1; valid rows are
    untouched and bit-identical to the ``.onnx`` file."""
    artifact = random_bnc_artifact(
        np.random.default_rng(seed),
        d=6,
        n_classes=4,
        tan=tan,
        bits=bits,
        int_bits=2,
        cardinalities=[3, 1, 5, 2, 4, 5],
        n_check=10,
    )
    assert tan == bool((artifact.parents >= 0).any())
    export_file(artifact, tmp_path / "m.onnx", "onnx")
    export_file(artifact, tmp_path / "m.ort", "ort")
    rng = np.random.default_rng(seed)
    card = artifact.cardinalities
    x = rng.integers(0, card, size=(400, len(card))).astype(np.int64)
    bad = rng.random(x.shape) < 0.05
    x[bad] = rng.choice([-1, -7, 5, 6, 1000, np.iinfo(np.int64).max, np.iinfo(np.int64).min], size=bad.sum())
    for i in range(len(card)):  # just above each feature's range
        x[i, i] = card[i]
    invalid = ((x < 0) | (x >= card[None, :])).any(axis=1)
    outs = {}
    for name in ("m.onnx", "m.ort"):
        session = ort.InferenceSession(str(tmp_path / name), providers=["CPUExecutionProvider"])
        outs[name] = session.run(None, {"x": x})
    scores, labels = outs["m.ort"]
    graph_ops = [n.op_type for n in ort_to_onnx(tmp_path / "m.ort").graph.node]
    assert "GatherBlockQuantized" in graph_ops and ("Gather" in graph_ops) == tan
    assert ("Add" in graph_ops) == (tan or bits == 8)  # TAN index arithmetic; 8 bits: the prior per call
    assert invalid.any() and (~invalid).any()
    assert np.isnan(scores[invalid]).all() and (labels[invalid] == -1).all()
    assert np.isfinite(scores[~invalid]).all() and (labels[~invalid] >= 0).all()
    assert np.array_equal(labels, outs["m.onnx"][1])
    assert np.array_equal(scores.view(np.int32), outs["m.onnx"][0].view(np.int32))


def _size_ratio(artifact, folder):
    export_file(artifact, folder / "m.onnx", "onnx")
    export_file(artifact, folder / "m.ort", "ort")
    return (folder / "m.ort").stat().st_size / (folder / "m.onnx").stat().st_size


LETTER_CARDINALITIES = [5, 1, 5, 3, 4, 13, 14, 13, 13, 14, 14, 13, 9, 9, 8, 8]


@pytest.mark.parametrize("cardinalities", [LETTER_CARDINALITIES, [10] * 16])
def test_letter_shaped_nb_ort_is_at_most_1_5x_the_onnx(tmp_path, cardinalities):
    """Issue 16's acceptance, without the datasets: a letter-shaped NB (16 features, 26 classes,
    3 bits; letter's cardinalities, and 10 each) as ``.ort`` is at most 1.5x its ``.onnx``."""
    artifact = random_bnc_artifact(
        np.random.default_rng(7),
        d=16,
        n_classes=26,
        tan=False,
        bits=3,
        int_bits=2,
        cardinalities=np.array(cardinalities),
        n_check=8,
    )
    ratio = _size_ratio(artifact, tmp_path)
    assert ratio <= 1.5, ratio


def test_letter_shaped_tan_ort_is_about_the_onnx_size(tmp_path):
    """TAN: the lookup graph's 4-bit table outweighs its [(K + 2)**2, D] index map: the ``.ort`` is
    about the ``.onnx``'s size (the ONNX graph as ORT: 1.4x), and counts D * C operations."""
    artifact = random_bnc_artifact(
        np.random.default_rng(8),
        d=16,
        n_classes=26,
        tan=True,
        bits=3,
        int_bits=2,
        cardinalities=np.array(LETTER_CARDINALITIES),
        n_check=8,
    )
    assert (artifact.parents >= 0).any()
    ratio = _size_ratio(artifact, tmp_path)
    assert ratio <= 1.1, ratio
    check = count_graph(tmp_path / "m.ort").compare()
    assert check["n_ops"]["equal"] and check["size_bits"]["equal"], check


def test_letter_nb_ort_is_at_most_1_5x_the_onnx(tmp_path):
    """The same on the real letter NB 3-bit (ML counts, no epochs), when the datasets are here."""
    import subprocess
    import sys
    from pathlib import Path

    from bnc_deploy.artifacts import load_artifact

    data = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
    data = Path(os.environ.get("BNC_DEPLOY_DATA_DIR", data))
    if not (data / "discretized").is_dir():
        pytest.skip(f"no datasets at {data}")
    pytest.importorskip("torch")
    model = tmp_path / "letter-nb3.bnc"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from bnc_deploy.cli.train import main; main()",
            "--data",
            "letter",
            "--model",
            "nb",
            "--init",
            "ml",
            "--epochs",
            "0",
            "--bits",
            "3",
            "--int-bits",
            "2",
            "--quiet",
            "-o",
            str(model),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, BNC_DEPLOY_DATA_DIR=str(data)),
    )
    ratio = _size_ratio(load_artifact(model), tmp_path)
    assert ratio <= 1.5, ratio
    count = count_graph(tmp_path / "m.ort")
    assert count.compare()["n_ops"]["graph"] == 16 * 26 and count.compare()["size_bits"]["equal"]


def test_ort_export_is_smaller_than_the_default_optimized_conversion(tmp_path):
    """A letter-sized NB (16 features, 26 classes, 3 bits): the default conversion's optimizer folds the
    uint8 table into float32 (4 bytes per entry); the unoptimized export keeps one byte per entry."""
    artifact = random_bnc_artifact(
        np.random.default_rng(5),
        d=16,
        n_classes=26,
        tan=False,
        bits=3,
        int_bits=2,
        cardinalities=np.full(16, 10),
        n_check=10,
    )
    export_file(artifact, tmp_path / "m.onnx", "onnx")
    export_file(artifact, tmp_path / "m.ort", "ort")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # folds the table to float
    options.optimized_model_filepath = str(tmp_path / "optimized.ort")
    options.add_session_config_entry("session.save_model_format", "ORT")
    ort.InferenceSession(str(tmp_path / "m.onnx"), options, providers=["CPUExecutionProvider"])
    folded = [onnx.numpy_helper.to_array(t) for t in ort_to_onnx(tmp_path / "optimized.ort").graph.initializer]
    assert any(a.dtype == np.float32 and a.size >= artifact.table_codes.size for a in folded)
    ours, optimized = (tmp_path / "m.ort").stat().st_size, (tmp_path / "optimized.ort").stat().st_size
    assert ours + 2 * artifact.table_codes.size < optimized, (ours, optimized)


def test_ort_outputs_are_bit_identical_to_the_onnx_export(nb_files):
    artifact, onnx_path, ort_path, _ = nb_files
    x, _ = verification_rows(artifact)
    a = load_runtime(onnx_path, threads=1)
    b = load_runtime(ort_path, threads=1)
    assert type(b).__name__ == "OnnxRuntimeAdapter" and b.ort_format and not a.ort_format
    (sa, la), (sb, lb) = a.run(x), b.run(x)
    assert np.array_equal(la, lb) and np.array_equal(sa.view(np.int64), sb.view(np.int64))


def test_metadata_and_seal_survive_the_conversion(nb_files, tmp_path):
    _, _, ort_path, _ = nb_files
    data = ort_path.read_bytes()
    seal = integrity.verify_bytes(data, where=str(ort_path))
    assert seal is not None and seal.sealed and seal.scheme == "sha256"
    rt = load_runtime(ort_path)
    assert rt.metadata["integrity"] == seal.value and rt.metadata["format"] == "ort"
    # One flipped byte of the stored table: refused on load, naming the file.
    stored = {t.name: onnx.numpy_helper.to_array(t) for t in ort_to_onnx(ort_path).graph.initializer}
    table_at = data.find(stored["T"].tobytes()[:16])
    assert table_at > 0
    bad = tmp_path / "bad.ort"
    bad.write_bytes(data[:table_at] + bytes([data[table_at] ^ 1]) + data[table_at + 1 :])
    with pytest.raises(integrity.IntegrityError, match="modified after export") as err:
        load_runtime(bad)
    assert str(bad) in str(err.value)


def test_signed_ort_file_needs_its_key(tmp_path):
    key = os.urandom(32)
    export_file(_nb(1), tmp_path / "s.ort", "ort", key=key)
    assert load_runtime(tmp_path / "s.ort", key=key).metadata["integrity"].startswith("hmac-sha256:")
    with pytest.raises(integrity.IntegrityError, match="signed"):
        load_runtime(tmp_path / "s.ort")


def test_ort_is_told_by_content_not_by_name(nb_files, tmp_path):
    _, _, ort_path, _ = nb_files
    assert EXTENSIONS[".ort"] == "onnxruntime"
    other = tmp_path / "model.bin"
    other.write_bytes(ort_path.read_bytes())
    rt = load_runtime(other, "onnxruntime")
    assert rt.ort_format and rt.metadata["format"] == "ort"


def test_a_non_ort_file_named_ort_is_refused_naming_it(tmp_path):
    bad = tmp_path / "junk.ort"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(RuntimeLoadError, match="junk.ort"):
        load_runtime(bad, verify_integrity=False)


@pytest.mark.parametrize("options", [{"lowering": "onehot-fc"}, {"raw_inputs": True}, {"pack_bits": True}])
def test_bn_options_pass_through_to_the_onnx_graph(tmp_path, options):
    from bnc_deploy.testing import discretizer_dict

    card = [3, 4, 2, 5, 3, 2, 4, 3]
    extra = (
        {"discretizer": discretizer_dict([[float(k) for k in range(c - 1)] for c in card])}
        if options.get("raw_inputs")
        else {}
    )
    artifact = _nb(2, tan=True, cardinalities=card, **extra)
    result = check_export(artifact, "ort", tmp_path, **options)
    meta = result["report"].metadata
    assert meta["format"] == "ort" and result["runtimes"]["onnxruntime"]["exact"]
    if "lowering" in options:
        assert meta["lowering"] == "onehot-fc"
    if options.get("raw_inputs"):
        assert meta["input"] == "raw"
    if options.get("pack_bits"):
        assert meta["table_storage"].startswith("bitplanes")


@pytest.mark.parametrize(
    "kw",
    [
        {"activation": "sign"},
        {"architecture": "cnn", "activation": "sign", "encoding": "onehot", "hidden": (3,)},
        {"activation": "relu", "bits": 4},
    ],
)
def test_dnn_ort_export(tmp_path, kw):
    artifact = random_dnn_artifact(3, **kw)
    result = check_export(artifact, "ort", tmp_path)
    meta = result["report"].metadata
    assert meta["model_kind"] == "dnn" and meta["format"] == "ort"
    graph = ort_to_onnx(tmp_path / "model.ort")
    assert any(onnx.numpy_helper.to_array(t).dtype == np.int8 for t in graph.graph.initializer)
    if kw["activation"] == "sign":
        assert meta["exact"] and result["runtimes"]["onnxruntime"]["exact"]


def test_required_operators_config_matches_the_metadata(nb_files):
    _, _, ort_path, _ = nb_files
    meta = read_ort_export_metadata(ort_path)
    operators = ort_operators(ort_path)
    assert "operators" not in meta["ort"]  # the file's graph says it (bnc-ort-config)
    assert operators["com.microsoft"] == {"1": ["GatherBlockQuantized"]}
    text = required_operators_config([ort_path])
    assert text.startswith("# Generated from model/s:") and "ai.onnx;" in text and "com.microsoft;1;" in text
    assert config_operators(text) == operators
    typed = required_operators_config([ort_path], type_reduction=True)
    assert '"uint8_t"' in typed and config_operators(typed) == operators


def test_bnc_ort_config_cli_writes_the_config(nb_files, tmp_path, capsys):
    _, onnx_path, ort_path, _ = nb_files
    out = tmp_path / "cfg" / "required_operators.config"
    assert ort_config_main([str(ort_path), "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert config_operators(out.read_text()) == ort_operators(ort_path)
    with pytest.raises(SystemExit) as exc:
        ort_config_main([str(onnx_path), "-o", str(tmp_path / "x.config")])
    assert exc.value.code == 2 and "not an ORT format model" in capsys.readouterr().err
    assert not (tmp_path / "x.config").exists()


def test_bnc_ort_config_refuses_a_modified_file(nb_files, tmp_path, capsys):
    _, _, ort_path, _ = nb_files
    data = bytearray(ort_path.read_bytes())
    data[-9] ^= 1
    bad = tmp_path / "bad.ort"
    bad.write_bytes(bytes(data))
    with pytest.raises(SystemExit) as exc:
        ort_config_main([str(bad), "-o", str(tmp_path / "x.config")])
    assert exc.value.code == 2 and "modified after export" in capsys.readouterr().err
    assert not (tmp_path / "x.config").exists()


def test_profiler_counts_the_ort_graph_like_the_onnx_graph(nb_files):
    """Different graphs, the same paper counts: D * C operations ((D - 1) * C in the ReduceSum, C folded:
    the prior, added to feature 0's rows at export instead of at load) and the analytic parameter bits
    (the NaN-scale guard row is not a parameter)."""
    artifact, onnx_path, ort_path, _ = nb_files
    a, b = count_graph(onnx_path), count_graph(ort_path)
    assert b.metadata["format"] == "ort" and b.path == str(ort_path) and b.complete
    for key in ("paper_ops", "param_elements", "param_bits", "per_row_additions", "folded_additions"):
        assert a.totals()[key] == b.totals()[key], key
    check = b.compare()
    assert check["size_bits"]["equal"] and check["n_ops"]["equal"], check
    assert b.paper_ops == artifact.n_features * artifact.n_classes
    assert b.totals()["n_load_time_nodes"] == 0 and b.totals()["lookups"] == artifact.n_features * artifact.n_classes
    assert count_graph(ort_path.read_bytes()).totals() == b.totals()


def test_bnc_profile_reads_ort_files(nb_files, capsys):
    from bnc_deploy.cli.profile import main as profile_main

    _, _, ort_path, _ = nb_files
    assert profile_main([str(ort_path), "--no-latency", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and rows[0]["runtime"] == "onnxruntime" and rows[0]["format"] == "ort"
    assert rows[0]["graph_matches_analytic"] is True


def test_exporter_registration():
    for kind in ("bnc", "dnn"):
        spec = exporter_for(kind, "ort")
        assert spec.extension == ".ort" and spec.runtime == "onnxruntime"
        assert spec.options[:-1] == exporter_for(kind, "onnx").options
        assert spec.option_names[-1] == "ort_optimization"


def test_basic_optimization_folds_the_table_and_stays_exact(tmp_path):
    artifact = _nb(4)
    result = check_export(artifact, "ort", tmp_path, ort_optimization="basic")
    meta = result["report"].metadata
    assert meta["ort"]["graph_optimization"] == "basic" and result["runtimes"]["onnxruntime"]["exact"]
    graph = ort_to_onnx(tmp_path / "model.ort")
    folded = [onnx.numpy_helper.to_array(t) for t in graph.graph.initializer]
    assert not any(a.dtype == np.uint8 for a in folded)  # the uint8 table was folded away
    assert any(a.dtype == np.float32 and a.size >= artifact.table_codes.size for a in folded)
    # The operators are the converted graph's (fewer than the ONNX graph's), as onnxruntime's tool reads them.
    operators = ort_operators(tmp_path / "model.ort")
    assert config_operators(required_operators_config([tmp_path / "model.ort"])) == operators
    assert "Concat" not in str(operators)


def test_gather_grouped_needs_the_basic_optimization():
    from bnc_deploy.errors import ExportError

    spec = exporter_for("bnc", "ort")
    if "gather-grouped" not in {o.name: o for o in spec.options}["lowering"].choices:
        pytest.skip("this ONNX exporter has no gather-grouped lowering")
    with pytest.raises(ExportError, match="ORT format sessions do not fold constants at load"):
        spec.build(_nb(6), lowering="gather-grouped")
