"""The ``edgetpu`` one-hot builder (``--lowering onehot-fc --onehot edgetpu``) and the report's
op versions and mapped-prefix run (static: the Edge TPU compiler is not run)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

from exports import export_tflite
from test_export_tflite import random_artifact

from bnc_deploy.exporters._onehot_fc_plan import INT8_OUTPUT_LEVELS, onehot_fc_plan
from bnc_deploy.formats.tflite import inspect_tflite, read_tflite_metadata
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.targets import edgetpu_prefix
from bnc_deploy.targets.edgetpu import EDGETPU_SUPPORTED_OPS, edgetpu_compatibility, format_report, main, op_versions
from bnc_deploy.targets.edgetpu_prefix import run_prefix

#: What must never run before the class scores on an Edge TPU file.
CPU_ONLY = ("DEQUANTIZE", "GATHER", "CAST", "EQUAL", "ARG_MAX", "ARG_MIN", "SELECT_V2", "ONE_HOT")


def assert_scores_on_edgetpu(path) -> dict:
    """Everything before the first CPU op is mapped, in the table and 8-bit; the first CPU op is the
    DEQUANTIZE of int8 partial scores; every FULLY_CONNECTED (one-hot and table) is mapped."""
    report = edgetpu_compatibility(path)
    summary = inspect_tflite(path)
    first = report["first_cpu_op"]
    assert first is not None and report["n_mapped"] == first, format_report(report)
    assert report["ops"][first]["op"] == "DEQUANTIZE"
    assert summary.tensors[summary.ops[first].inputs[0]].dtype == "INT8"
    for entry, op in zip(report["ops"][:first], summary.ops[:first]):
        assert entry["op"] in EDGETPU_SUPPORTED_OPS and entry["op"] not in CPU_ONLY and entry["problems"] == []
        for t in op.outputs:
            assert summary.tensors[t].dtype == "INT8" and summary.tensors[t].shape_signature == summary.tensors[t].shape
    assert all(e["placement"] == "edgetpu" for e in report["ops"] if e["op"] == "FULLY_CONNECTED")
    assert report["static_shapes"] and report["op_versions_ok"] is True
    return report


@pytest.mark.parametrize("structure,bits,seed", [("nb", 3, 1), ("tan", 3, 2), ("tan", 7, 3), ("nb", 7, 4)])
def test_random_models_map_to_the_scores_and_the_prefix_is_exact(tmp_path, structure, bits, seed):
    artifact = random_artifact(seed, bits, 3, structure=structure, n_features=7, n_classes=4)
    path = export_tflite(artifact, tmp_path / "m.tflite", lowering="onehot-fc", onehot="edgetpu")  # verified exact
    meta = read_tflite_metadata(path)
    assert meta["exact"] and meta["onehot_fc"]["builder"] == "edgetpu" and meta["onehot_fc"]["prior_in_group0"]
    report = assert_scores_on_edgetpu(path)
    prefix = run_prefix(path, artifact, report, n_random=64)
    assert prefix["exact"] and prefix["class_scores_equal"] and prefix["invalid_rows_flagged"]
    assert any(b["compared_as"] in ("partial sums + guard", "class code sums + guard") for b in prefix["boundary"])


def test_one_group_hands_the_class_scores_themselves_to_the_cpu(tmp_path):
    """Small NB 3-bit model: one group whose FC bias is the prior, so the int8 boundary tensor holds
    each class's whole code sum - the class scores - and equals the reference's integer scores."""
    artifact = random_artifact(5, 3, 2, structure="nb", n_features=5, n_classes=3)
    plan = onehot_fc_plan(artifact, "edgetpu")
    assert len(plan.groups) == 1 and np.array_equal(plan.prior_units, artifact.class_codes)
    path = export_tflite(artifact, tmp_path / "nb.tflite", lowering="onehot-fc", onehot="edgetpu")
    summary = inspect_tflite(path)
    fcs = [op for op in summary.ops if op.name == "FULLY_CONNECTED"]
    table_fc = [op for op in fcs if summary.tensors[op.outputs[0]].shape == [1, artifact.n_classes]]
    assert len(table_fc) == 1 and len(table_fc[0].inputs) == 3  # the prior as int32 bias
    assert np.array_equal(np.frombuffer(summary.tensors[table_fc[0].inputs[2]].data, np.int32), artifact.class_codes)
    prefix = run_prefix(path, artifact, edgetpu_compatibility(path), n_random=32)
    assert prefix["exact"] and prefix["class_scores_equal"]
    assert {b["compared_as"] for b in prefix["boundary"]} >= {"class code sums"}


def test_prefix_check_can_fail(tmp_path, monkeypatch):
    """The comparison is real: a reference off by one code in one place is reported as not exact."""
    artifact = random_artifact(6, 4, 3, structure="tan", n_features=5, n_classes=3)
    path = export_tflite(artifact, tmp_path / "t.tflite", lowering="onehot-fc", onehot="edgetpu")
    real = edgetpu_prefix.expected_prefix

    def off_by_one(*args):
        values = real(*args)
        values[-1, 0] += 1
        return values

    monkeypatch.setattr(edgetpu_prefix, "expected_prefix", off_by_one)
    prefix = run_prefix(path, artifact, edgetpu_compatibility(path), n_random=8)
    assert not prefix["exact"] and any(b["max_abs_diff"] == 1.0 for b in prefix["boundary"] if b["compared_as"])


def test_prefix_check_refuses_other_files_and_models(tmp_path):
    artifact = random_artifact(7, 3, 2, structure="nb", n_features=4, n_classes=3)
    gather = export_tflite(artifact, tmp_path / "g.tflite")
    with pytest.raises(ValueError, match="int8 one-hot builder"):
        run_prefix(gather, artifact, edgetpu_compatibility(gather))
    path = export_tflite(artifact, tmp_path / "e.tflite", lowering="onehot-fc", onehot="edgetpu")
    with pytest.raises(ValueError, match="not exported from this model"):
        other = random_artifact(8, 3, 2, structure="nb", n_features=4, n_classes=3)
        run_prefix(path, other, edgetpu_compatibility(path))


@pytest.mark.parametrize("seed", range(6))
def test_groups_fit_int8_per_class_with_the_prior(seed):
    """Every group's largest output for every class (prior included in group 0) fits 0..255, and
    packing per class never needs more groups than the relu builder's packing."""
    artifact = random_artifact(seed, 7, 3, structure="tan", n_features=8, n_classes=5)
    plan = onehot_fc_plan(artifact, "edgetpu")
    rows = artifact.rows_per_feature
    offsets = artifact.row_offsets
    for k, (a, b) in enumerate(plan.groups):
        peak = sum(
            artifact.table_codes[offsets[i] : offsets[i] + rows[i]].astype(np.int64).max(axis=0) for i in range(a, b)
        )
        if k == 0:
            peak = peak + artifact.class_codes.astype(np.int64)
        assert np.all(peak <= INT8_OUTPUT_LEVELS)
    assert len(plan.groups) <= len(onehot_fc_plan(artifact, "relu").groups) + 1  # the prior may cost one


def test_graph_count_equals_analytic():
    from test_graph_count import artifact, assert_graph_equals_analytic, structure

    from bnc_deploy.exporters.tflite_bnc import build_tflite_model
    from bnc_deploy.profiling.graph_count import count_graph

    for kind in ("nb", "tan"):
        a = artifact([3, 4, 2, 5, 1, 3], structure(kind, 6), 4, 3, seed=3)
        count = count_graph(build_tflite_model(a, lowering="onehot-fc", onehot="edgetpu"))
        assert_graph_equals_analytic(count, a)
        assert any("the prior" in (n.note or "") for n in count.nodes)


def test_op_versions_against_tflite_2_5(tmp_path):
    from bnc_deploy.formats.tflite import OpInfo, TFLiteSummary

    def fake(*ops):
        return TFLiteSummary([OpInfo(k, name, v, [], []) for k, (name, v) in enumerate(ops)], [], [], [], {})

    ok = {
        (v["op"], v["version"]): v
        for v in op_versions(fake(("FULLY_CONNECTED", 9), ("FULLY_CONNECTED", 10), ("MUL", 7), ("WHILE", 1)))
    }
    assert ok["FULLY_CONNECTED", 9]["runtime_ok"] and ok["FULLY_CONNECTED", 9]["runtime_max_version"] == 9
    assert ok["FULLY_CONNECTED", 10]["runtime_ok"] is False and ok["FULLY_CONNECTED", 10]["min_runtime"] == "2.11.0"
    assert ok["MUL", 7]["runtime_ok"] is False and ok["MUL", 7]["min_runtime"] == "> 2.13"
    assert ok["WHILE", 1]["runtime_ok"] is None and ok["WHILE", 1]["compiler_limit"] == "unknown"


def test_cli_prints_versions_and_prefix(tmp_path, capsys):
    from bnc_deploy.artifacts import load_artifact, save_artifact

    model = tmp_path / "m.bnc"
    save_artifact(random_artifact(9, 3, 2, structure="tan", n_features=5, n_classes=3), model)
    artifact = load_artifact(model)
    path = export_tflite(artifact, tmp_path / "m.tflite", lowering="onehot-fc", onehot="edgetpu")
    assert main([str(path), "--model", str(model), "--random-rows", "16"]) == 0
    out = capsys.readouterr().out
    assert "static, compiler not run" in out and "op versions run on TF Lite 2.5.0" in out
    assert "vs the reference" in out and "EXACT" in out


# -- letter (skipped without ../shared) -------------------------------------------------------------------------
@pytest.mark.shared_data
@pytest.mark.parametrize(
    "args",
    [
        ["--model", "nb", "--bits", "3", "--int-bits", "2"],
        ["--model", "tan", "--structure", "chow-liu", "--bits", "7", "--int-bits", "3"],
    ],
)
def test_letter_scores_on_edgetpu_and_exact(shared_datasets, tmp_path, args):
    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.cli.train import main as train
    from bnc_deploy.datasets import load_dataset

    model = tmp_path / "m.bnc"
    assert train(["--data", "letter", "--init", "ml", "--epochs", "0", *args, "-o", str(model)]) == 0
    artifact = load_artifact(model)
    path = export_tflite(artifact, tmp_path / "m.tflite", lowering="onehot-fc", onehot="edgetpu")
    report = assert_scores_on_edgetpu(path)
    ds = load_dataset("letter")
    prefix = run_prefix(path, artifact, report, rows=ds.x_test[:300], n_random=64)
    assert prefix["exact"] and prefix["class_scores_equal"] and prefix["invalid_rows_flagged"]
    assert ReferencePredictor(artifact).integer_scores(ds.x_test[:5]).shape == (5, artifact.n_classes)


def test_edgetpu_builder_refuses_raw_inputs_and_wide_features():
    from bnc_deploy.errors import ExportError

    artifact = random_artifact(10, 3, 2, structure="nb", n_features=3, n_classes=2)
    with pytest.raises(ExportError, match="edgetpu one-hot builder takes int8 codes"):
        onehot_fc_plan(artifact, "edgetpu", raw_inputs=True)
    artifact.cardinalities = artifact.cardinalities.copy()
    artifact.cardinalities[0] = 129
    with pytest.raises(ExportError, match="edgetpu one-hot builder needs cardinalities <= 128"):
        onehot_fc_plan(artifact, "edgetpu")
