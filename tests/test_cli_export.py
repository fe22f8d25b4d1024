"""``bnc-export``: exit codes, JSON report, verification, and clear errors for bad models and data."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from test_export_onnx import discretizer_dict, random_artifact  # noqa: E402

from bnc_deploy.artifacts import BNCArtifact, save_artifact  # noqa: E402
from bnc_deploy.cli.export import main  # noqa: E402
from bnc_deploy.quantizers import FixedPointLogQuantizer

REPO = Path(__file__).resolve().parent.parent
JSON_KEYS = {
    "agreement",
    "exact",
    "file_bytes",
    "size_bits",
    "n_ops",
    "format",
    "lowering",
    "output",
    "n_parameters",
    "bits",
    "runtime",
    "n_rows",
}


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def quantized_model(tmp_path) -> tuple[BNCArtifact, Path]:
    artifact = random_artifact(np.random.default_rng(40), bits=3, int_bits=2, tan=True, n_check=50)
    path = tmp_path / "q.bnc"
    save_artifact(artifact, path)
    return artifact, path


# -- success paths --------------------------------------------------------------------------------------
@pytest.mark.parametrize("lowering", ["gather", "onehot-fc"])
def test_quantized_export_is_exact_json(capsys, tmp_path, quantized_model, lowering):
    artifact, model = quantized_model
    out_path = tmp_path / "q.onnx"
    code, out, err = run_cli(capsys, model, "--format", "onnx", "--lowering", lowering, "-o", out_path, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert JSON_KEYS <= report.keys()
    assert report["agreement"] == 1.0 and report["exact"] is True and report["n_rows"] == 50
    assert report["file_bytes"] == out_path.stat().st_size > 0
    assert (report["size_bits"], report["n_ops"], report["n_parameters"], report["bits"]) == (
        artifact.size_bits,
        artifact.n_ops,
        artifact.n_parameters,
        3,
    )
    assert (report["format"], report["lowering"], report["runtime"]) == ("onnx", lowering, "onnxruntime")
    assert report["output"] == str(out_path)


def test_float_export_reports_label_agreement(capsys, tmp_path):
    artifact = random_artifact(np.random.default_rng(41), tan=False)
    save_artifact(artifact, tmp_path / "f.bnc")
    code, out, err = run_cli(capsys, tmp_path / "f.bnc", "--format", "onnx", "-o", tmp_path / "f.onnx", "--json")
    report = json.loads(out)
    assert code == 0, err
    assert report["agreement"] == 1.0 and report["bits"] == 32
    assert report["exact"] is False and report["exact_expected"] is False


def test_human_table(capsys, tmp_path, quantized_model):
    code, out, _ = run_cli(capsys, quantized_model[1], "--format", "onnx", "-o", tmp_path / "q.onnx")
    assert code == 0
    for text in ("file size", "parameters", "operations", "label agreement", "100.00%", "bit-identical", "EXACT"):
        assert text in out


def test_raw_inputs_export(capsys, tmp_path):
    cuts = [[0.1, 0.5, 2.0], [], [1 / 3, 7.25]]
    artifact = random_artifact(
        np.random.default_rng(42),
        bits=5,
        int_bits=3,
        tan=True,
        cardinalities=[4, 1, 3],
        discretizer=discretizer_dict(cuts),
    )
    save_artifact(artifact, tmp_path / "r.bnc")
    code, out, err = run_cli(
        capsys, tmp_path / "r.bnc", "--format", "onnx", "--raw-inputs", "-o", tmp_path / "r.onnx", "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["raw_inputs"] is True and report["exact"] is True


def test_exit_1_when_an_exact_lowering_disagrees(capsys, tmp_path, quantized_model, monkeypatch):
    from bnc_deploy.runtimes.onnxruntime_adapter import OnnxRuntimeAdapter

    original = OnnxRuntimeAdapter._run

    def off_by_one_step(self, x):  # a runtime that is wrong in one log_joint entry
        lj, label = original(self, x)
        lj = lj.copy()
        lj[3, 0] -= 0.5
        return lj, label

    monkeypatch.setattr(OnnxRuntimeAdapter, "_run", off_by_one_step)
    code, out, err = run_cli(capsys, quantized_model[1], "--format", "onnx", "-o", tmp_path / "q.onnx", "--json")
    assert code == 1
    assert json.loads(out)["exact"] is False and "not bit-exact" in err


def test_no_check_set_and_no_data_exports_unverified(capsys, tmp_path):
    q = FixedPointLogQuantizer(2, 1)
    artifact = BNCArtifact(
        parents=[-1],
        cardinalities=[2],
        class_names=["a", "b"],
        feature_names=["u"],
        quantizer=q,
        class_codes=np.array([0, 1], np.uint8),
        table_codes=np.array([[0, 3], [2, 1]], np.uint8),
    )
    save_artifact(artifact, tmp_path / "n.bnc")
    code, out, _ = run_cli(capsys, tmp_path / "n.bnc", "--format", "onnx", "-o", tmp_path / "n.onnx", "--json")
    report = json.loads(out)
    assert code == 0 and report["n_rows"] == 0 and report["agreement"] is None


def test_data_file_uses_its_test_split(capsys, tmp_path):
    """--data with a paper-format .npz (1-based values) and --fold."""
    rng = np.random.default_rng(43)
    cards = [3, 2, 4]
    artifact = random_artifact(rng, bits=4, tan=True, cardinalities=cards)
    save_artifact(artifact, tmp_path / "m.bnc")
    x = (rng.integers(0, cards, size=(90, 3)) + 1).astype(np.uint8)
    x[: len(cards)] = np.array(cards) + 0  # every value occurs, so the loader infers the same cardinalities
    y = rng.integers(0, artifact.n_classes, 90).astype(np.uint8)
    y[: artifact.n_classes] = np.arange(artifact.n_classes)
    np.savez(
        tmp_path / "d.npz",
        n_folds=np.int64(1),
        x_tr_fold1=x[:60],
        t_tr_fold1=y[:60],
        x_te_fold1=x[60:],
        t_te_fold1=y[60:],
    )
    code, out, err = run_cli(
        capsys,
        tmp_path / "m.bnc",
        "--format",
        "onnx",
        "-o",
        tmp_path / "m.onnx",
        "--data",
        tmp_path / "d.npz",
        "--fold",
        1,
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["n_rows"] == 30 and report["exact"] is True and "test split" in report["data"]


# -- exit 2: bad input, one line, no traceback ------------------------------------------------------------
def _corrupt_variants(good: Path, tmp_path: Path) -> dict[str, Path]:
    data = good.read_bytes()
    variants = {
        "truncated.bnc": data[: len(data) // 2],
        "garbage.bnc": b"PK\x03\x04" + b"\x00" * 64,
        "empty.bnc": b"",
        "flipped.bnc": bytearray(data),
    }
    variants["flipped.bnc"][len(data) // 2] ^= 0xFF
    paths = {}
    for name, content in variants.items():
        paths[name] = tmp_path / name
        paths[name].write_bytes(bytes(content))
    # Tampered: a table rewritten consistently inside the ZIP (CRCs fine), header's hash now wrong.
    tampered = tmp_path / "tampered.bnc"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(tampered, "w") as dst:
        for entry in src.namelist():
            content = src.read(entry)
            if entry == "arrays/table_codes.npy":
                table = np.load(io.BytesIO(content))
                table[0, 0] = (int(table[0, 0]) + 1) % 8
                buffer = io.BytesIO()
                np.save(buffer, table)
                content = buffer.getvalue()
            dst.writestr(entry, content)
    paths["tampered.bnc"] = tampered
    paths["missing.bnc"] = tmp_path / "missing.bnc"
    return paths


def test_corrupted_models_exit_2_naming_the_file(capsys, tmp_path, quantized_model):
    for name, path in _corrupt_variants(quantized_model[1], tmp_path).items():
        code, out, err = run_cli(capsys, path, "--format", "onnx", "-o", tmp_path / "x.onnx")
        assert code == 2, name
        assert name in err and err.startswith("bnc-export: error:") and "Traceback" not in err, err
        assert not (tmp_path / "x.onnx").exists()
    assert (
        "hash mismatch" in run_cli(capsys, tmp_path / "tampered.bnc", "--format", "onnx", "-o", tmp_path / "x.onnx")[2]
    )


def test_bad_data_exit_2(capsys, tmp_path, quantized_model):
    artifact, model = quantized_model
    code, _, err = run_cli(capsys, model, "--format", "onnx", "-o", tmp_path / "x.onnx", "--data", "no-such-set")
    assert code == 2 and "unknown dataset 'no-such-set'" in err
    # out of range: a data file whose codes exceed the model's cardinalities
    rng = np.random.default_rng(44)
    d = artifact.n_features
    x = (rng.integers(0, 9, size=(40, d)) + 1).astype(np.uint8)
    y = rng.integers(0, artifact.n_classes, 40).astype(np.uint8)
    np.savez(
        tmp_path / "wide.npz",
        n_folds=np.int64(1),
        x_tr_fold1=x[:20],
        t_tr_fold1=y[:20],
        x_te_fold1=x[20:],
        t_te_fold1=y[20:],
    )
    code, _, err = run_cli(
        capsys, model, "--format", "onnx", "-o", tmp_path / "x.onnx", "--data", tmp_path / "wide.npz"
    )
    assert code == 2 and "outside its range" in err and "Traceback" not in err


def test_usage_errors_exit_2(capsys, tmp_path, quantized_model):
    model = quantized_model[1]
    with pytest.raises(SystemExit) as info:
        main([str(model), "--format", "onnx", "-o", str(tmp_path / "x.onnx"), "--fold", "2"])
    assert info.value.code == 2 and "--fold needs --data" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main([str(model), "--format", "pmml", "-o", str(tmp_path / "x")])
    assert info.value.code == 2
    code, _, err = run_cli(capsys, model, "--format", "onnx", "--raw-inputs", "-o", tmp_path / "x.onnx")
    assert code == 2 and "discretizer" in err


def test_tflite_format_exports_or_explains(capsys, tmp_path, quantized_model):
    """The TFLite exporter is another module: either it runs exactly, or the CLI says what is missing."""
    code, out, err = run_cli(capsys, quantized_model[1], "--format", "tflite", "-o", tmp_path / "q.tflite", "--json")
    if code == 2:
        assert "not available" in err and "Traceback" not in err
    else:
        assert code == 0, err
        report = json.loads(out)
        assert report["exact"] is True and report["runtime"] == "litert" and report["format"] == "tflite"


# -- the real data ----------------------------------------------------------------------------------------
def letter_nb_artifact(root: Path) -> BNCArtifact:
    """Add-one ML naive Bayes on letter's training split, quantized at 3 bits (B_I = 2)."""
    data = np.load(root / "discretized" / "letter.npz")
    x, y = data["x_tr_fold1"].astype(np.int64) - 1, data["t_tr_fold1"].astype(np.int64)
    x_te = data["x_te_fold1"].astype(np.int64) - 1
    cards = np.maximum(x.max(axis=0), x_te.max(axis=0)) + 1
    c = int(y.max()) + 1
    counts = [np.stack([np.bincount(x[y == k, i], minlength=cards[i]) for k in range(c)], 1) for i in range(len(cards))]
    table = np.concatenate([np.log((n + 1.0) / (n + 1.0).sum(axis=0)) for n in counts])
    prior = np.log((np.bincount(y, minlength=c) + 1.0) / (len(y) + c))
    q = FixedPointLogQuantizer(3, 2)
    return BNCArtifact(
        parents=np.full(len(cards), -1),
        cardinalities=cards,
        class_names=[chr(65 + k) for k in range(c)],
        feature_names=[f"f{i}" for i in range(len(cards))],
        quantizer=q,
        class_codes=q.to_codes(prior),
        table_codes=q.to_codes(table),
    )


@pytest.mark.shared_data
def test_letter_every_test_row_identical(capsys, tmp_path, shared_datasets):
    save_artifact(letter_nb_artifact(shared_datasets), tmp_path / "letter.bnc")
    code, out, err = run_cli(
        capsys,
        tmp_path / "letter.bnc",
        "--format",
        "onnx",
        "-o",
        tmp_path / "letter.onnx",
        "--data",
        "letter",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["n_rows"] == 6658 and report["exact"] is True and report["agreement"] == 1.0


def test_console_entry_in_subprocess_without_torch(tmp_path, quantized_model):
    code = (
        "import sys; from bnc_deploy.cli.export import main; rc = main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(quantized_model[1]),
            "--format",
            "onnx",
            "-o",
            str(tmp_path / "s.onnx"),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["exact"] is True
