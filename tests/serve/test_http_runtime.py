"""Runtime ``http`` (the V2 client side): a served model runs like a local file, and
``bnc-profile --runtime http --url`` measures it."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("uvicorn", reason="the 'serve' extra is not installed")

from serve_support import ServerProcess, build_repository, valid_rows

from bnc_deploy.errors import ConfigError, InputError, RuntimeLoadError
from bnc_deploy.runtimes.base import EXTENSIONS, load_runtime, runtime_class
from bnc_deploy.runtimes.http_adapter import HttpAdapter, parse_url
from bnc_deploy.testing import runtimes_for

KEY = "http-runtime-test-key-0123456789"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("http_rt")
    models = build_repository(tmp / "repo", tflite=False)
    keys = tmp / "keys"
    keys.write_text(KEY + "\n")
    with ServerProcess(tmp / "repo", args=["--api-key-file", keys]) as proc:
        yield proc, models


def test_served_models_run_like_local_files(server):
    proc, models = server
    for name in ("nb_onnx", "tan_onnx", "dnn_onnx", "nb_bnc", "raw_onnx"):
        model = models[name]
        x = valid_rows(model, n=40, seed=5)
        local = load_runtime(model.path)
        rt = load_runtime(model.path, "http", url=proc.url, api_key=KEY)  # the model named by the stem
        assert rt.model == name and rt.name == "http"
        for key in ("class_names", "feature_names", "cardinalities", "input", "bits", "model_kind"):
            assert rt.metadata[key] == local.metadata[key], (name, key)
        scores, label = rt.run(x)
        want_scores, want_label = local.run(x)
        assert scores.dtype == np.float64 and np.array_equal(scores, want_scores), name
        assert np.array_equal(label, want_label) and np.array_equal(rt.predict(x[:3]), want_label[:3]), name
        raw, lab = rt.invoke(rt.prepare(x[:1]))  # the timed path: one round trip
        assert raw.dtype == local.invoke(local.prepare(x[:1]))[0].dtype and lab.tolist() == want_label[:1].tolist()
        rt.close()


def test_input_is_checked_locally_and_server_errors_are_clear(server):
    proc, models = server
    rt = HttpAdapter(url=proc.url.removeprefix("http://"), model="nb_onnx", api_key=KEY)
    bad = valid_rows(models["nb_onnx"], n=3)
    bad[2, 1] = 99
    with pytest.raises(InputError, match=r"nb_onnx input: feature 1 .*99.*row 2"):
        rt.run(bad)
    with pytest.raises(RuntimeLoadError, match="no_such_model.*404"):
        HttpAdapter(url=proc.url, model="no_such_model", api_key=KEY)
    with pytest.raises(RuntimeLoadError, match="401"):
        HttpAdapter(url=proc.url, model="nb_onnx")  # no token
    with pytest.raises(RuntimeLoadError, match="cannot reach"):
        HttpAdapter(url="http://127.0.0.1:9", model="nb_onnx", timeout=2)
    with pytest.raises(ConfigError):
        HttpAdapter(model="nb_onnx")
    with pytest.raises(ConfigError):
        parse_url("ftp://host:1")
    version = rt.metadata["served_version"]
    ok = HttpAdapter(url=proc.url, model="nb_onnx", version=version, api_key=KEY)
    assert np.array_equal(ok.predict(valid_rows(models["nb_onnx"])), rt.predict(valid_rows(models["nb_onnx"])))
    with pytest.raises(RuntimeLoadError, match="404"):
        HttpAdapter(url=proc.url, model="nb_onnx", version="000000000000", api_key=KEY)


def test_http_has_no_extension_so_the_conformance_matrix_never_picks_it():
    assert runtime_class("http").extensions == ()
    assert "http" not in EXTENSIONS.values()
    for ext in (".onnx", ".tflite", ".bnc", ".h"):
        assert "http" not in runtimes_for(ext)


def test_bnc_profile_runtime_http_measures_the_served_model(server, capsys, monkeypatch):
    from bnc_deploy.cli.profile import main

    proc, models = server
    nb = models["nb_onnx"].path
    with pytest.raises(SystemExit) as info:
        main([str(nb), "--runtime", "http"])
    assert info.value.code == 2 and "--url" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main([str(nb), "--url", proc.url])
    assert info.value.code == 2
    # A server with --api-key-file: the token comes from BNC_DEPLOY_API_KEY.
    monkeypatch.setenv("BNC_DEPLOY_API_KEY", KEY)
    assert (
        main(
            [
                str(nb),
                "--runtime",
                "http",
                "--url",
                proc.url,
                "--json",
                "--runs",
                "5",
                "--repeats",
                "1",
                "--warmup",
                "1",
                "--throughput-repeats",
                "0",
            ]
        )
        == 0
    )
    (row,) = json.loads(capsys.readouterr().out)
    assert row["runtime"] == "http" and row["latency_us_p50_batch1"] > 0


def test_bnc_profile_against_an_open_server(tmp_path, capsys):
    from bnc_deploy.cli.profile import main

    models = build_repository(tmp_path / "repo", tflite=False)
    with ServerProcess(tmp_path / "repo") as proc:
        nb = models["nb_onnx"].path
        code = main(
            [
                str(nb),
                "--runtime",
                "http,onnxruntime",
                "--url",
                proc.url,
                "--json",
                "--runs",
                "20",
                "--repeats",
                "1",
                "--warmup",
                "5",
                "--throughput-repeats",
                "1",
            ]
        )
        assert code == 0
        rows = json.loads(capsys.readouterr().out)
        by_runtime = {(r["runtime"], r["threads"]): r for r in rows}
        served = by_runtime[("http", 1)]
        local = by_runtime[("onnxruntime", 1)]
        assert served["file"] == str(nb) and served["size_bits"] == local["size_bits"]
        assert served["latency_us_p50_batch1"] > 0 and served["throughput_rows_per_s"] > 0
        # --model: the served name when the local file's stem differs
        renamed = tmp_path / "renamed.onnx"
        renamed.write_bytes(nb.read_bytes())
        code = main(
            [str(renamed), "--runtime", "http", "--url", proc.url, "--model", "nb_onnx", "--no-latency", "--json"]
        )
        assert code == 0
        (row,) = json.loads(capsys.readouterr().out)
        assert row["runtime"] == "http" and row["file"] == str(renamed)
        with pytest.raises(SystemExit) as info:  # without --model the stem names a model not served
            main([str(renamed), "--runtime", "http", "--url", proc.url, "--no-latency"])
        assert info.value.code == 2 and "renamed" in capsys.readouterr().err
