"""``--lowering auto`` (``bnc_deploy.autolowering``): the verifier times every declared lowering in
the runtime, publishes the fastest, and records the timings in the file; exporters refuse ``auto``."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("onnxruntime")

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters.base import exporter_for
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import example_artifacts
from bnc_deploy.verify import export_file


@pytest.fixture(scope="module")
def artifacts():
    return example_artifacts("bnc")


@pytest.mark.parametrize("example", ["nb-3bit", "tan-7bit", "tan-float"])
@pytest.mark.parametrize("batch", [1, 300])
def test_auto_publishes_the_fastest_measured_lowering_with_its_timings(tmp_path, artifacts, example, batch):
    artifact = artifacts[example]
    report = export_file(artifact, tmp_path / "m.onnx", "onnx", lowering="auto", lowering_batch=batch)
    record = report.lowering_auto
    meta = load_runtime(report.path, "onnxruntime").metadata
    assert meta["lowering_auto"] == record and meta["lowering"] == record["chosen"] == report.lowering
    assert record["batch"] == batch and record["runtime"] == "onnxruntime" and record["threads"] == 1
    # Every declared lowering was either timed or refused with a reason; the choice is the fastest.
    candidates = {"gather", "onehot-fc", "gather-grouped", "gather+pack-words", "gather-grouped+pack-words"}
    assert set(record["median_seconds"]) | set(record["refused"]) == candidates
    assert all(reason for reason in record["refused"].values())
    assert record["candidate"] == min(record["median_seconds"], key=record["median_seconds"].get)
    assert record["chosen"] == record["candidate"].removesuffix("+pack-words")
    assert meta.get("packed_words") is not None if record["candidate"].endswith("+pack-words") else True
    assert all(s > 0 for s in record["median_seconds"].values())
    assert report.exact == artifact.is_quantized
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]  # no candidate file left behind


def test_ort_format_records_why_a_candidate_was_refused(tmp_path, artifacts):
    report = export_file(artifacts["nb-3bit"], tmp_path / "m.ort", "ort", lowering="auto")
    record = report.lowering_auto
    assert "ORT format sessions do not fold constants" in record["refused"]["gather-grouped"]
    assert load_runtime(report.path, "onnxruntime").metadata["lowering_auto"] == record


def test_exporters_refuse_auto_because_they_never_run_files(artifacts):
    for fmt in ("onnx", "ort"):
        with pytest.raises(ExportError, match="which an exporter never does"):
            exporter_for("bnc", fmt).build(artifacts["nb-3bit"], lowering="auto")


@pytest.mark.parametrize("batch", [0, -3, True, 2.5])
def test_bad_lowering_batch_is_refused_and_nothing_is_written(tmp_path, artifacts, batch):
    with pytest.raises(ExportError, match="--lowering-batch must be a positive integer"):
        export_file(artifacts["nb-3bit"], tmp_path / "m.onnx", "onnx", lowering="auto", lowering_batch=batch)
    assert not list(tmp_path.iterdir())


def test_formats_without_auto_refuse_it_by_name(tmp_path, artifacts):
    from bnc_deploy.exporters.base import formats

    if "tflite" not in formats():
        pytest.skip("no TFLite exporter here (extra 'tflite')")
    with pytest.raises(ExportError, match="--lowering auto is not offered by the tflite exporter"):
        export_file(artifacts["nb-3bit"], tmp_path / "m.tflite", "tflite", lowering="auto")
    assert not list(tmp_path.iterdir())


def test_cli_reports_the_choice_and_hides_the_internal_option(tmp_path, artifacts, capsys):
    from bnc_deploy.artifacts import save_artifact
    from bnc_deploy.cli.export import main

    model = tmp_path / "m.bnc"
    save_artifact(artifacts["nb-3bit"], model)
    assert (
        main(
            [
                str(model),
                "--format",
                "onnx",
                "--lowering",
                "auto",
                "--lowering-batch",
                "64",
                "-o",
                str(tmp_path / "m.onnx"),
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["lowering"] == report["lowering_auto"]["chosen"] and report["lowering_auto"]["batch"] == 64
    assert main([str(model), "--format", "onnx", "--lowering", "auto", "-o", str(tmp_path / "t.onnx")]) == 0
    assert "lowering auto" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main([str(model), "--format", "onnx", "--lowering-timings", "{}", "-o", str(tmp_path / "x.onnx")])
    assert exc.value.code == 2


@pytest.mark.parametrize("example", ["nb-3bit", "tan-float"])
def test_auto_without_a_batch_times_one_row_and_a_large_batch(tmp_path, artifacts, example):
    """The default: fastest at LARGE_BATCH among the candidates whose 1-row call is within
    LATENCY_SLACK of the fastest 1-row call; slower ones are not timed at the large batch."""
    from bnc_deploy.autolowering import LARGE_BATCH, LATENCY_SLACK

    report = export_file(artifacts[example], tmp_path / "m.onnx", "onnx", lowering="auto")
    record = report.lowering_auto
    assert record["batch"] == LARGE_BATCH and record["latency_batch"] == 1
    small, large = record["latency_median_seconds"], record["median_seconds"]
    fast = min(small.values())
    eligible = {n for n, t in small.items() if t <= LATENCY_SLACK * fast}
    assert set(large) == eligible and set(record["not_timed_at_batch"]) == set(small) - eligible
    assert record["candidate"] == min(eligible, key=large.get)
    assert report.lowering == record["chosen"]
    if not artifacts[example].is_quantized:  # word packing needs integer codes
        assert {"gather+pack-words", "gather-grouped+pack-words"} <= set(record["refused"])
