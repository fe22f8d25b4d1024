"""``bnc-profile`` on DNN models: ``.bnc`` artifacts and their ONNX/TFLite exports, alone and mixed with BN models.

One sign DNN trained for one epoch on the built-in digits data (its exports are exact, so every
runtime gives the same test error), one random ReLU CNN (no data: costs, graph count and latency on
valid codes), and a digits-shaped BN classifier for the mixed runs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

from exports import export_onnx  # noqa: E402
from onnx_dnn_probes import export_onnx_dnn  # noqa: E402
from tflite_dnn_probes import export_tflite_dnn  # noqa: E402

from bnc_deploy.artifacts import save_artifact  # noqa: E402
from bnc_deploy.artifacts.bnc import BNCArtifact  # noqa: E402
from bnc_deploy.cli.profile import JSON_KEYS, main  # noqa: E402
from bnc_deploy.datasets import load_dataset  # noqa: E402
from bnc_deploy.quantizers import FixedPointLogQuantizer
from bnc_deploy.reference.dnn import DNNReferencePredictor
from bnc_deploy.testing import random_dnn_artifact

QUICK = ["--runs", "5", "--repeats", "1", "--warmup", "1", "--throughput-repeats", "1"]


def digits_bn_artifact(bits=3, seed=0) -> BNCArtifact:
    """Naive Bayes over the digits layout (64 features, values 0..16, 10 classes), random codes."""
    d, k, c = 64, 17, 10
    rng = np.random.default_rng(seed)
    q = FixedPointLogQuantizer(bits, 2)
    return BNCArtifact(
        parents=-np.ones(d, dtype=np.int64),
        cardinalities=np.full(d, k),
        class_names=[str(i) for i in range(c)],
        feature_names=[f"px{i}" for i in range(d)],
        quantizer=q,
        class_codes=rng.integers(0, q.max_code + 1, c).astype(np.uint8),
        table_codes=rng.integers(0, q.max_code + 1, (d * k, c)).astype(np.uint8),
        metadata={"data": {"name": "digits", "fold": 1}, "errors": {"test": 0.5}},
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from bnc_deploy.train.dnn import DNNConfig, train_dnn

    root = tmp_path_factory.mktemp("profile_dnn")
    ds = load_dataset("digits")
    dnn = train_dnn(
        ds,
        DNNConfig(
            "fc", layers=2, weight_bits=2, activation="sign", batch_norm=True, hidden=[16], epochs=1, progress=False
        ),
    ).artifact
    save_artifact(dnn, root / "dnn.bnc")
    export_onnx_dnn(dnn, root / "dnn.onnx")
    export_tflite_dnn(dnn, root / "dnn.tflite")
    cnn = random_dnn_artifact(3, architecture="cnn", activation="relu", bits=4, hidden=(3, 4))
    save_artifact(cnn, root / "cnn.bnc")
    export_onnx_dnn(cnn, root / "cnn.onnx")
    export_tflite_dnn(cnn, root / "cnn.tflite")
    bn = digits_bn_artifact()
    save_artifact(bn, root / "nb3.bnc")
    export_onnx(bn, root / "nb3.onnx")
    reference_error = float(np.mean(DNNReferencePredictor(dnn).predict(ds.x_test) != ds.y_test))
    return {"root": root, "dnn": dnn, "cnn": cnn, "bn": bn, "reference_error": reference_error}


def files(models, *names):
    return [str(models["root"] / n) for n in names]


def run_json(capsys, argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_dnn_bnc_onnx_tflite_with_data_and_latency(models, capsys):
    dnn = models["dnn"]
    rows = run_json(capsys, [*files(models, "dnn.bnc", "dnn.onnx", "dnn.tflite"), "--data", "digits", *QUICK])
    assert [(r["format"], r["runtime"], r["threads"]) for r in rows] == [
        ("bnc", "numpy", None),
        ("onnx", "onnxruntime", 1),
        ("onnx", "onnxruntime", None),
        ("tflite", "litert", 1),
    ]
    costs = dnn.costs()
    for r in rows:
        assert set(JSON_KEYS) <= set(r)
        assert (r["model_kind"], r["structure"], r["bits"], r["quantized"]) == ("dnn", "fc", 2, True)
        assert (r["size_bits"], r["n_ops"], r["n_parameters"]) == (costs.size_bits, costs.n_ops, dnn.n_parameters)
        assert r["n_ops"] == 64 * 16 + 16 * 10 + 16 + 10  # MACs + batch-norm outputs + biases
        assert r["dataset"] == "digits" and r["n_test_rows"] > 0
        # sign exports are exact: every runtime gives the reference's test error
        assert r["test_error"] == pytest.approx(models["reference_error"], abs=0)
        assert r["latency_us_p50_batch1"] > 0 and r["throughput_rows_per_s"] > 0 and r["latency_runs"] == 5
    assert rows[0]["graph_ops"] is None and rows[0]["lowering"] is None
    for r in rows[1:]:
        assert r["graph_matches_analytic"] is True and r["graph_complete"] is True and r["graph_unknown_ops"] == []
        assert (r["graph_ops"], r["graph_param_bits"]) == (costs.n_ops, costs.size_bits)
        assert r["graph_macs"] == 64 * 16 + 16 * 10
        assert r["graph_categories"]["arithmetic"] == costs.n_ops and r["graph_categories"]["guard"] > 0
    assert [r["lowering"] for r in rows[1:]] == ["integer-sign", "integer-sign", "int8-sign"]


def test_cnn_without_data(models, capsys):
    cnn = models["cnn"]
    rows = run_json(capsys, [*files(models, "cnn.bnc", "cnn.onnx", "cnn.tflite"), *QUICK])
    assert len(rows) == 4
    for r in rows:
        assert (r["model_kind"], r["structure"], r["bits"]) == ("dnn", "cnn", 4)
        assert (r["size_bits"], r["n_ops"]) == (cnn.size_bits, cnn.n_ops)
        assert r["test_error"] is None and r["latency_us_p50_batch1"] > 0
        assert "random valid codes" in r["latency_input"]
    assert all(r["graph_matches_analytic"] for r in rows[1:])
    assert rows[-1]["lowering"] == "int8-ptq"


def test_table_and_nodes(models, capsys):
    assert main([*files(models, "dnn.onnx", "dnn.tflite", "cnn.tflite"), "--no-latency", "--nodes"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line[1:].startswith(("dnn.", "cnn."))]
    assert len(lines) == 4 and all(" = " in line for line in lines)  # graph column: '=' (matches)
    assert out.count("DNN: ops = MACs") == 3 and "DIFFERENT" not in out and "NOT COUNTED" not in out
    assert "FULLY_CONNECTED" in out and "Gemm" in out and "CONV_2D" in out


def test_mixed_bn_and_dnn_with_plot(models, capsys, tmp_path):
    out_png = tmp_path / "overview.png"
    argv = [
        *files(models, "nb3.bnc", "nb3.onnx", "dnn.bnc", "dnn.onnx", "dnn.tflite"),
        "--data",
        "digits",
        "--no-latency",
        "--json",
        "--plot",
        str(out_png),
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert {r["model_kind"] for r in rows} == {"bnc", "dnn"}
    assert {r["structure"] for r in rows} == {"nb", "fc"}
    assert all(r["test_error"] is not None and isinstance(r["pareto"], bool) for r in rows)
    exports = [r for r in rows if r["format"] != "bnc"]
    assert len(exports) == 5 and all(r["graph_matches_analytic"] for r in exports)
    assert out_png.is_file() and out_png.with_suffix(".svg").is_file() and "wrote" in captured.err

    # the same rows as a result file, for a later table / plot
    results = tmp_path / "rows.json"
    results.write_text(json.dumps(rows))
    assert main([str(results)]) == 0
    table = capsys.readouterr().out
    assert "dnn.tflite" in table and "nb3.onnx" in table


def test_unknown_model_kind_is_a_user_error(models, capsys, tmp_path):
    import onnx

    model = onnx.load(str(models["root"] / "dnn.onnx"))
    for prop in model.metadata_props:
        if prop.key == "bnc_deploy":
            meta = json.loads(prop.value)
            meta["model_kind"] = "svm"
            prop.value = json.dumps(meta)
    path = tmp_path / "svm.onnx"
    onnx.save(model, str(path))
    with pytest.raises(SystemExit) as exc:
        main([str(path), "--no-latency"])
    assert exc.value.code == 2 and "svm.onnx: the file was modified after export" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # behind the integrity check: the kind is refused too
        main([str(path), "--no-latency", "--no-integrity-check"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bnc-profile: error:") and "no analytic cost model for model kind 'svm'" in err
