"""``bnc-profile``: JSON schema, table, plots, result files and one-line errors (exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from exports import export_onnx  # noqa: E402

from bnc_deploy.artifacts import save_artifact  # noqa: E402
from bnc_deploy.artifacts.bnc import BNCArtifact  # noqa: E402
from bnc_deploy.cli.profile import JSON_KEYS, main  # noqa: E402
from bnc_deploy.errors import ConfigError  # noqa: E402
from bnc_deploy.quantizers import FixedPointLogQuantizer

#: Keys the issue names; scripts rely on them.
REQUIRED = ("file", "runtime", "test_error", "size_bits", "n_ops", "latency_us_p50_batch1", "throughput_rows_per_s")
QUICK = ["--runs", "5", "--repeats", "1", "--warmup", "1", "--throughput-repeats", "1"]


def digits_like_artifact(bits, tan=False, seed=0) -> BNCArtifact:
    """The built-in digits layout (64 features, values 0..16, 10 classes) with random codes."""
    d, k, c = 64, 17, 10
    parents = np.array([-1] + list(range(d - 1))) if tan else -np.ones(d, dtype=np.int64)
    cards = np.full(d, k)
    rows = int((cards * np.where(parents >= 0, k, 1)).sum())
    rng = np.random.default_rng(seed)
    q = FixedPointLogQuantizer(bits, 2)
    rng_x = np.random.default_rng(seed + 1)
    return BNCArtifact(
        parents=parents,
        cardinalities=cards,
        class_names=[str(i) for i in range(c)],
        feature_names=[f"px{i}" for i in range(d)],
        quantizer=q,
        class_codes=rng.integers(0, q.max_code + 1, c).astype(np.uint8),
        table_codes=rng.integers(0, q.max_code + 1, (rows, c)).astype(np.uint8),
        metadata={"data": {"name": "digits", "fold": 1}, "errors": {"test": 0.5}},
        check_x=rng_x.integers(0, k, (50, d)),
        check_y=rng_x.integers(0, c, 50),
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("profile")
    out = {}
    for name, bits, tan in (("nb3", 3, False), ("tan2", 2, True)):
        a = digits_like_artifact(bits, tan)
        save_artifact(a, root / f"{name}.bnc")
        export_onnx(a, root / f"{name}.onnx")
        out[name] = (root / f"{name}.bnc", root / f"{name}.onnx", a)
    return root, out


def run_json(capsys, argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_schema_without_data(files, capsys):
    _, f = files
    bnc, onnx_path, a = f["nb3"]
    rows = run_json(capsys, [str(bnc), str(onnx_path), "--no-latency"])
    assert [(r["file"], r["runtime"], r["threads"]) for r in rows] == [
        (str(bnc), "numpy", None),
        (str(onnx_path), "onnxruntime", 1),
        (str(onnx_path), "onnxruntime", None),
    ]
    for r in rows:
        assert set(JSON_KEYS) <= set(r) and set(REQUIRED) <= set(r)
        assert (r["size_bits"], r["n_ops"]) == (a.size_bits, a.n_ops) == (3 * 10 * (1 + 64 * 17), 640)
        assert r["latency_us_p50_batch1"] is None  # --no-latency
    assert rows[0]["test_error"] == 0.5 and rows[0]["test_error_source"] == "model metadata"
    assert rows[1]["test_error"] is None  # an export carries no data
    assert rows[1]["graph_matches_analytic"] is True and rows[1]["graph_ops"] == 640
    assert rows[1]["graph_param_bits"] == a.size_bits and rows[1]["graph_categories"]["folded"] == 10
    assert rows[0]["graph_ops"] is None  # .bnc: analytic only


def test_latency_and_accuracy_with_data(files, capsys):
    _, f = files
    bnc, onnx_path, a = f["tan2"]
    rows = run_json(capsys, [str(bnc), str(onnx_path), "--data", "digits", "--runtime", "numpy,onnxruntime", *QUICK])
    assert len(rows) == 3
    errors = {r["test_error"] for r in rows}
    assert len(errors) == 1 and 0 <= errors.pop() <= 1  # every runtime agrees (exact export)
    for r in rows:
        assert r["dataset"] == "digits" and r["n_test_rows"] > 0
        assert r["latency_us_p50_batch1"] > 0 and r["latency_us_p99_batch1"] >= r["latency_us_p50_batch1"]
        assert r["throughput_rows_per_s"] > 0 and r["latency_runs"] == 5
        assert r["cpu"] and r["environment"]["versions"]["numpy"] == np.__version__
        assert r["pareto"] is True  # one model, many runtimes


def test_runtime_filter_and_table(files, capsys):
    _, f = files
    bnc, onnx_path, _ = f["nb3"]
    assert main([str(bnc), str(onnx_path), "--runtime", "onnxruntime", "--no-latency"]) == 0
    out = capsys.readouterr().out
    assert "nb3.onnx" in out and "onnxruntime" in out and "def" in out
    assert "no selected runtime reads .bnc files" in out
    assert "CPU " in out and "Pareto-optimal" in out


def test_nodes_table(files, capsys):
    _, f = files
    assert main([str(f["nb3"][1]), "--no-latency", "--nodes"]) == 0
    out = capsys.readouterr().out
    assert "ReduceSum" in out and "paper operations = arithmetic 630 + folded at load 10 = 640" in out


def test_result_files_and_plot(files, capsys, tmp_path):
    root, f = files
    rows = run_json(capsys, [str(f["nb3"][0]), str(f["tan2"][0]), "--no-latency"])
    results = tmp_path / "rows.json"
    results.write_text(json.dumps(rows))
    out_png = tmp_path / "plots" / "overview.png"
    assert main([str(results), "--plot", str(out_png)]) == 0
    captured = capsys.readouterr()
    assert out_png.is_file() and out_png.with_suffix(".svg").is_file()
    assert "wrote" in captured.err and "nb3.bnc" in captured.out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["missing.onnx"], "missing.onnx: no such file"),
        (["model.txt"], "unknown file type '.txt'"),
        (["{onnx}", "--runtime", "tensorrt"], "unknown runtime 'tensorrt'"),
        (["{onnx}", "--data", "no-such-dataset"], "unknown dataset 'no-such-dataset'"),
        (["{bnc}", "--data", "{bad_npz}"], "bad.npz"),
    ],
)
def test_user_errors_exit_2_with_one_line(files, capsys, tmp_path, argv, message):
    _, f = files
    (tmp_path / "model.txt").write_text("x")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    subs = {
        "{onnx}": str(f["nb3"][1]),
        "{bnc}": str(f["nb3"][0]),
        "{bad_npz}": str(tmp_path / "bad.npz"),
        "model.txt": str(tmp_path / "model.txt"),
        "missing.onnx": str(tmp_path / "missing.onnx"),
    }
    with pytest.raises(SystemExit) as exc:
        main([subs.get(a, a) for a in argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bnc-profile: error:") and message in err and "\n" not in err


def test_data_that_does_not_fit_is_a_user_error(files, capsys):
    _, f = files
    from support import make_synthetic_dataset

    ds = make_synthetic_dataset()
    path = f["nb3"][0].parent / "small.npz"
    # the paper's fold format (1-based values): 6 features, where the model has 64
    np.savez(
        path,
        x_tr_fold1=ds.x_train + 1,
        t_tr_fold1=ds.y_train,
        x_te_fold1=ds.x_test + 1,
        t_te_fold1=ds.y_test,
        n_folds=1,
    )
    with pytest.raises(SystemExit) as exc:
        main([str(f["nb3"][1]), "--data", str(path), "--no-latency"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("bnc-profile: error:") and "does not fit this model" in err and "64" in err


def test_fold_needs_data(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["x.onnx", "--fold", "2"])
    assert exc.value.code == 2 and "--fold needs --data" in capsys.readouterr().err


# -- the library behind the command ---------------------------------------------------------------------
def test_each_suffix_runs_in_its_default_runtime():
    """bnc-profile measures each file in the runtime bnc_deploy.runtimes.base maps its suffix to."""
    from bnc_deploy.profiling.files import check_files
    from bnc_deploy.profiling.options import ServedModel
    from bnc_deploy.profiling.runner import runtimes_for
    from bnc_deploy.runtimes.base import model_suffixes

    every = ["numpy", "onnxruntime", "litert", "native", "tflm", "http"]
    assert {s: runtimes_for(f"m{s}", every) for s in model_suffixes()} == {
        ".bnc": ["numpy"],
        ".onnx": ["onnxruntime"],
        ".ort": ["onnxruntime"],
        ".tflite": ["litert"],
        ".h": ["native"],
    }
    assert runtimes_for("m.onnx", ["numpy"]) == [] and runtimes_for("m.xyz", every) == []
    assert runtimes_for("m.bnc", ["numpy"], ServedModel("http://x")) == ["numpy", "http"]
    with pytest.raises(ConfigError, match=r"expected \.bnc, \.onnx, \.ort, \.tflite, \.h, \.json$"):
        check_files(["m.xyz"])


def test_typed_inputs(files):
    from bnc_deploy.cli.profile import load_test_split
    from bnc_deploy.profiling.facts import ModelFacts, model_facts
    from bnc_deploy.profiling.options import LoadOptions

    split = load_test_split("digits", None)
    x, y, name, fold = split  # still a tuple: aarch64.check_files unpacks it
    assert (name, fold) == ("digits", 1) and split.x is x and split.y is y and len(x) == len(y) > 0
    assert LoadOptions().for_file("m.bnc") == {}  # a model has no digest to check
    assert LoadOptions(False, b"k").for_file("m.onnx") == {"verify_integrity": False, "key": b"k"}
    _, f = files
    bnc, onnx_path, a = f["nb3"]
    facts = model_facts(onnx_path)
    assert isinstance(facts, ModelFacts) and facts.format == "onnx" and facts.artifact is None
    assert facts.graph is not None and facts.costs.size_bits == a.size_bits and facts.input == "codes"
    facts = model_facts(bnc)
    assert facts.graph is None and facts.artifact is not None and facts.stored_test_error == 0.5


def test_the_command_holds_no_function_level_imports():
    """Profiling logic lives in bnc_deploy.profiling; the command parses, calls it and prints."""
    import ast
    import inspect

    import bnc_deploy.cli.profile as cli

    tree = ast.parse(inspect.getsource(cli))
    lazy = [
        node.lineno
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    assert lazy == []
