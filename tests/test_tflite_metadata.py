"""Standard TFLite model metadata (issue 16, item 4): ``bnc-export --format tflite --metadata``.

The file carries the ``TFLITE_METADATA`` buffer (tflite-support's ``metadata_schema.fbs``) next to
our ``bnc_deploy`` buffer, and ``labels.txt`` (TENSOR_AXIS_LABELS of the score output) zipped onto
its end. Checked: it reads back with our reader and - where tflite-support is installed - with the
official ``MetadataDisplayer`` and minimum-parser-version calculator; the model runs unchanged in
LiteRT (outputs bit-identical to the file without metadata); the integrity seal covers the
appended labels; bad class names are refused.

Needs TensorFlow and ai-edge-litert. The official-reader checks need ``tflite-support`` installed
WITHOUT its dependencies (``pip install --no-deps tflite-support==0.4.4``: its wheel pins
``protobuf<4``, which TensorFlow 2.21 refuses, but its metadata module does not use protobuf);
they are skipped, saying so, where it is missing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TFLite export needs TensorFlow (pip install 'bnc-deploy[convert]')")
pytest.importorskip("ai_edge_litert", reason="the verifier runs TFLite files in LiteRT (pip install ai-edge-litert)")

from bnc_deploy.errors import ExportError, MetadataError
from bnc_deploy.formats import integrity
from bnc_deploy.formats.tflite import inspect_tflite, read_tflite_metadata
from bnc_deploy.formats.tflite_metadata import (
    MIN_PARSER_VERSION,
    TFLITE_METADATA,
    read_associated_files,
    read_model_metadata,
)
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import random_bnc_artifact, random_dnn_artifact
from bnc_deploy.verify import export_file, verification_rows


def _official():
    """tflite-support's metadata module (None when not installed)."""
    try:
        from tensorflow_lite_support.metadata.cc.python import _pywrap_metadata_version
        from tensorflow_lite_support.metadata.python import metadata
    except ImportError:
        return None
    return metadata, _pywrap_metadata_version


OFFICIAL = _official()
needs_official = pytest.mark.skipif(
    OFFICIAL is None, reason="tflite-support is not installed (CI: pip install --no-deps tflite-support==0.4.4)"
)


def _bnc(seed=0, **kw):
    return random_bnc_artifact(
        np.random.default_rng(seed), d=5, n_classes=4, tan=True, bits=3, int_bits=2, n_check=30, **kw
    )


@pytest.fixture(scope="module")
def bnc_pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("md")
    artifact = _bnc()
    export_file(artifact, folder / "plain.tflite", "tflite")
    report = export_file(artifact, folder / "md.tflite", "tflite", metadata=True)
    return artifact, folder / "plain.tflite", folder / "md.tflite", report


def test_metadata_buffer_reads_back(bnc_pair):
    artifact, _, path, report = bnc_pair
    assert report.exact
    summary = inspect_tflite(path)
    assert TFLITE_METADATA in summary.metadata and "bnc_deploy" in summary.metadata
    md = read_model_metadata(summary.metadata[TFLITE_METADATA])
    assert md["min_parser_version"] == MIN_PARSER_VERSION and md["author"] == "bnc-deploy"
    assert "naive Bayes" in md["name"] and f"{artifact.n_classes} classes" in md["description"]
    assert [t["name"] for t in md["inputs"]] == ["x"]
    assert [t["name"] for t in md["outputs"]] == ["log_joint", "label"]
    scores, label = md["outputs"]
    assert scores["associated_files"] == [
        {"name": "labels.txt", "type": "TENSOR_AXIS_LABELS", "description": "class names, one per line, in score order"}
    ]
    assert "int64" in label["description"] and "-1" in label["description"]
    for name in artifact.feature_names:
        assert name in md["inputs"][0]["description"]
    ours = read_tflite_metadata(path)
    assert ours["tflite_metadata"]["associated_files"] == ["labels.txt"]


def test_labels_file_is_zipped_onto_the_model(bnc_pair):
    artifact, plain, path, _ = bnc_pair
    data = path.read_bytes()
    files = read_associated_files(data)
    assert files == {"labels.txt": ("\n".join(artifact.class_names) + "\n").encode()}
    assert read_associated_files(plain.read_bytes()) == {}


def test_model_runs_unchanged_in_litert(bnc_pair):
    artifact, plain, path, _ = bnc_pair
    x, _ = verification_rows(artifact)
    (sa, la), (sb, lb) = load_runtime(plain).run(x), load_runtime(path).run(x)
    assert np.array_equal(la, lb) and np.array_equal(sa, sb)
    a, b = inspect_tflite(plain), inspect_tflite(path)
    assert a.op_names == b.op_names and [t.data for t in a.tensors] == [t.data for t in b.tensors]
    # The signature LiteRT's Android API (runSignature) uses is there and runs.
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path)).get_signature_runner("serving_default")
    out = runner(x=x[:3].astype(np.int32))
    assert np.array_equal(out["label"], la[:3])


def test_seal_covers_the_appended_labels(bnc_pair, tmp_path):
    _, _, path, _ = bnc_pair
    data = path.read_bytes()
    assert integrity.verify_bytes(data).sealed
    at = data.rfind(b"class1")
    assert at > len(data) - 400  # in the ZIP tail, not in the flatbuffer
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(data[:at] + b"CLASS1" + data[at + 6 :])
    with pytest.raises(integrity.IntegrityError, match="modified after export"):
        load_runtime(bad)


@needs_official
def test_official_displayer_reads_the_file(bnc_pair):
    metadata, version = OFFICIAL
    artifact, _, path, _ = bnc_pair
    displayer = metadata.MetadataDisplayer.with_model_file(str(path))
    assert displayer.get_packed_associated_file_list() == ["labels.txt"]
    assert displayer.get_associated_file_buffer("labels.txt").decode().splitlines() == list(artifact.class_names)
    official = json.loads(displayer.get_metadata_json())
    ours = read_model_metadata(inspect_tflite(path).metadata[TFLITE_METADATA])
    assert official["name"] == ours["name"] and official["min_parser_version"] == ours["min_parser_version"]
    sub = official["subgraph_metadata"][0]
    assert [t["name"] for t in sub["output_tensor_metadata"]] == ["log_joint", "label"]
    assert sub["output_tensor_metadata"][0]["associated_files"][0]["type"] == "TENSOR_AXIS_LABELS"
    assert sub["input_tensor_metadata"][0]["content"]["content_properties_type"] == "FeatureProperties"
    buffer = bytes(displayer.get_metadata_buffer())
    assert version.GetMinimumMetadataParserVersion(buffer) == MIN_PARSER_VERSION


@pytest.mark.parametrize("options", [{"profile": "web"}, {"raw_inputs": True}])
def test_metadata_with_other_options(tmp_path, options):
    from bnc_deploy.testing import discretizer_dict

    card = [3, 4, 2, 5, 3]
    extra = (
        {"discretizer": discretizer_dict([[float(k) for k in range(c - 1)] for c in card])}
        if options.get("raw_inputs")
        else {}
    )
    artifact = _bnc(1, cardinalities=card, **extra)
    report = export_file(artifact, tmp_path / "m.tflite", "tflite", metadata=True, **options)
    assert report.exact
    md = read_model_metadata(inspect_tflite(tmp_path / "m.tflite").metadata[TFLITE_METADATA])
    if options.get("profile") == "web":
        assert "int32" in md["outputs"][1]["description"] and "static batch" in md["inputs"][0]["description"]
    else:
        assert md["inputs"][0]["description"].startswith("float32") and "raw" in md["inputs"][0]["description"]


def test_dnn_metadata(tmp_path):
    artifact = random_dnn_artifact(0, activation="sign")
    report = export_file(artifact, tmp_path / "d.tflite", "tflite", metadata=True)
    assert report.exact
    data = (tmp_path / "d.tflite").read_bytes()
    md = read_model_metadata(inspect_tflite(data).metadata[TFLITE_METADATA])
    assert [t["name"] for t in md["outputs"]] == ["logits", "label"] and "logits" in md["outputs"][0]["description"]
    assert read_associated_files(data)["labels.txt"].decode().splitlines() == list(artifact.class_names)


def test_class_names_that_cannot_be_lines_are_refused(tmp_path):
    artifact = _bnc(2)
    artifact.class_names = ["a", "b\nc", "d", "e"]
    with pytest.raises(ExportError, match="cannot be a line of labels.txt"):
        export_file(artifact, tmp_path / "x.tflite", "tflite", metadata=True)
    assert not list(tmp_path.iterdir())


def test_reader_refuses_other_buffers():
    with pytest.raises(MetadataError, match="M001"):
        read_model_metadata(b"\x00" * 32)


def test_cli_flag(tmp_path, capsys):
    from bnc_deploy.artifacts import save_artifact
    from bnc_deploy.cli.export import main as export_main

    artifact = _bnc(3)
    model = tmp_path / "m.bnc"
    save_artifact(artifact, model)
    assert export_main([str(model), "--format", "tflite", "--metadata", "-o", str(tmp_path / "m.tflite")]) == 0
    assert TFLITE_METADATA in inspect_tflite(tmp_path / "m.tflite").metadata
    capsys.readouterr()
    try:
        code = export_main([str(model), "--format", "onnx", "--metadata", "-o", str(tmp_path / "m.onnx")])
    except SystemExit as exc:
        code = exc.code
    assert code == 2 and "--metadata does not apply" in capsys.readouterr().err
    assert not (tmp_path / "m.onnx").exists()


def test_metadata_with_the_micro_profile(tmp_path):
    """TFLite Micro reads the flatbuffer and ignores the labels ZIP after it (the arena is measured
    on the file with the tail)."""
    pytest.importorskip("tflite_micro", reason="needs tflite-micro (the 'micro' extra)")
    from bnc_deploy.runtimes.tflm_adapter import TFLMAdapter

    artifact = _bnc(5)
    report = export_file(artifact, tmp_path / "m.tflite", "tflite", metadata=True, profile="micro")
    assert report.exact and report.metadata["tflm"]["arena_bytes"] > 0
    x, _ = verification_rows(artifact)
    scores, label = TFLMAdapter(tmp_path / "m.tflite").run(x)
    ref_scores, ref_label = load_runtime(tmp_path / "m.tflite").run(x)
    assert np.array_equal(label, ref_label) and np.array_equal(scores, ref_scores)
    assert "labels.txt" in read_associated_files((tmp_path / "m.tflite").read_bytes())
