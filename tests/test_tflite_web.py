"""TFLite web profile (issue 16, item 2): ``bnc-export --format tflite --profile web [--web-batch N]``.

What LiteRT.js (``@litertjs/core``) needs and the default files lack: an int32 ``label`` (it
refuses int64 tensors) and a static batch. Checked here in LiteRT (Python): no int64 tensor
anywhere, the static input shape, metadata, exactness unchanged (bit-identical to the default
profile's file), several rows run through the padded chunks, and the options refused where they
do not apply. The browser run itself is the web tests' (tests/web, Node + Chromium).

Needs TensorFlow (to export) and ai-edge-litert (the verifier's runtime); skipped when missing.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TFLite export needs TensorFlow (pip install 'bnc-deploy[convert]')")
pytest.importorskip("ai_edge_litert", reason="the verifier runs TFLite files in LiteRT (pip install ai-edge-litert)")

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters.base import exporter_for
from bnc_deploy.formats.metadata import INVALID_LABEL
from bnc_deploy.formats.tflite import inspect_tflite, read_tflite_metadata
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import check_export, random_bnc_artifact, random_dnn_artifact
from bnc_deploy.verify import export_file, verification_rows

WEB = {"profile": "web"}


def _bnc(seed=0, bits=3, tan=True, **kw):
    return random_bnc_artifact(
        np.random.default_rng(seed),
        d=6,
        n_classes=4,
        tan=tan,
        bits=bits,
        int_bits=None if bits is None else min(bits, 2),
        n_check=30,
        **kw,
    )


def _assert_web_file(path, batch: int, n_features: int) -> None:
    summary = inspect_tflite(path)
    assert not [t.name for t in summary.tensors if t.dtype == "INT64"]
    x = summary.tensors[summary.inputs[0]]
    assert x.shape == [batch, n_features] and x.shape_signature == [batch, n_features]
    assert summary.tensors[summary.outputs[1]].dtype == "INT32"
    meta = read_tflite_metadata(path)
    assert (meta["profile"], meta["batch"], meta["label_dtype"]) == ("web", f"static {batch}", "int32")


@pytest.mark.parametrize(
    "kind,make,options",
    [
        ("bnc", lambda: _bnc(0, tan=False), {}),
        ("bnc", lambda: _bnc(1, bits=8), {}),
        ("bnc", lambda: _bnc(2, bits=None), {}),
        ("bnc", lambda: _bnc(3, bits=4), {"lowering": "onehot-fc"}),
        ("bnc", lambda: _bnc(4, bits=4), {"lowering": "onehot-fc", "onehot": "relu"}),
        ("dnn", lambda: random_dnn_artifact(0, activation="sign"), {}),
        ("dnn", lambda: random_dnn_artifact(1, architecture="cnn", activation="relu", bits=4, hidden=(3,)), {}),
        (
            "dnn",
            lambda: random_dnn_artifact(2, architecture="cnn", activation="sign", encoding="onehot", hidden=(3,)),
            {},
        ),
    ],
)
def test_web_files_run_in_litert_as_exactly_as_default_files(tmp_path, kind, make, options):
    artifact = make()
    web = check_export(artifact, "tflite", tmp_path / "web", **WEB, **options)
    default = check_export(artifact, "tflite", tmp_path / "default", **options)
    path = tmp_path / "web" / "model.tflite"
    _assert_web_file(path, 1, artifact.n_features)
    meta = web["report"].metadata
    assert meta["exact"] == default["report"].metadata["exact"]
    x, _ = verification_rows(artifact)
    a, b = load_runtime(tmp_path / "default" / "model.tflite"), load_runtime(path)
    assert b.static_batch == 1
    (sa, la), (sb, lb) = a.run(x), b.run(x)
    # The same graph but for the label's integer type: identical outputs, also for inexact files.
    assert np.array_equal(la, lb) and np.array_equal(sa, sb, equal_nan=True)


@pytest.mark.parametrize("batch", [3, 16])
def test_web_batch_n_pads_the_last_chunk(tmp_path, batch):
    artifact = _bnc(5)
    check_export(artifact, "tflite", tmp_path, **WEB, web_batch=batch)
    path = tmp_path / "model.tflite"
    _assert_web_file(path, batch, artifact.n_features)
    rt = load_runtime(path)
    assert rt.static_batch == batch
    x, _ = verification_rows(artifact)
    for n in (1, batch - 1, batch + 1, len(x)):
        scores, label = rt.run(x[:n])
        assert scores.shape == (n, artifact.n_classes) and label.shape == (n,)


def test_web_guard_gives_int32_minus_one(tmp_path):
    """The guard still works with an int32 label: an invalid row (bypassing the adapter's checks)."""
    from ai_edge_litert.interpreter import Interpreter

    artifact = _bnc(6)
    export_file(artifact, tmp_path / "w.tflite", "tflite", **WEB, web_batch=2)
    it = Interpreter(model_path=str(tmp_path / "w.tflite"))
    it.allocate_tensors()
    runner = it.get_signature_runner("serving_default")
    x = np.zeros((2, artifact.n_features), dtype=np.int32)
    x[1, 0] = int(artifact.cardinalities[0])  # one past the last code
    out = runner(x=x)
    assert out["label"].dtype == np.int32 and out["label"][1] == INVALID_LABEL and out["label"][0] >= 0
    assert np.isnan(out["log_joint"][1]).all() and np.isfinite(out["log_joint"][0]).all()


def test_web_options_are_refused_where_they_do_not_apply():
    artifact = _bnc(7, bits=4)
    build = exporter_for("bnc", "tflite").build
    with pytest.raises(ExportError, match="--web-batch applies to --profile web only"):
        build(artifact, web_batch=4)
    with pytest.raises(ExportError, match="onehot-fc lowering has a static batch of 1"):
        build(artifact, lowering="onehot-fc", profile="web", web_batch=4)
    for bad in (0, -1, 10**6, True):
        with pytest.raises(ExportError, match="--web-batch must be an integer"):
            build(artifact, profile="web", web_batch=bad)
    with pytest.raises(ExportError, match="--web-batch applies to --profile web only"):
        exporter_for("dnn", "tflite").build(random_dnn_artifact(0), profile="micro", web_batch=2)


def test_web_profile_is_declared_for_both_kinds():
    for kind in ("bnc", "dnn"):
        options = {o.name: o for o in exporter_for(kind, "tflite").options}
        assert "web" in options["profile"].choices and options["web_batch"].default == 1
