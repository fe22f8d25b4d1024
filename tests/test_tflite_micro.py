"""TFLite Micro profile (issue 14, item 4): ``bnc-export --format tflite --profile micro``.

Every micro export here goes through the one verifier (LiteRT) and is then run in the
``tflite-micro`` Python interpreter (the ``tflm`` runtime and the bare interpreter): exact where
the default lowering is exact (BN gather at every B, onehot-fc B <= 7, sign DNNs), label
agreement for ReLU DNNs; the guard (label -1, NaN scores) in the bare interpreter; operators
within TFLM's resolver; metadata that says micro and records the arena.

Needs TensorFlow (to export), ai-edge-litert (the verifier's runtime) and tflite-micro
(``pip install tflite-micro``; the ``micro`` extra); skipped, saying which, when one is missing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TFLite export needs TensorFlow (pip install 'bnc-deploy[convert]')")
pytest.importorskip("ai_edge_litert", reason="the verifier runs TFLite files in LiteRT (pip install ai-edge-litert)")
pytest.importorskip(
    "tflite_micro", reason="the TFLite Micro checks need tflite-micro (pip install tflite-micro, or the 'micro' extra)"
)

from tflite_micro.python.tflite_micro import runtime as tflm

from bnc_deploy.errors import ExportError, RuntimeLoadError
from bnc_deploy.exporters._tflite import MICRO_AVOIDED_OPS, TFLM_BUILTIN_OPS
from bnc_deploy.exporters.base import exporter_for
from bnc_deploy.formats.metadata import INVALID_LABEL
from bnc_deploy.formats.tflite import inspect_tflite, read_tflite_metadata
from bnc_deploy.reference import reference_predictor
from bnc_deploy.runtimes.base import EXTENSIONS, load_runtime
from bnc_deploy.runtimes.tflm_adapter import ARENA_SLACK, TFLMAdapter
from bnc_deploy.testing import (
    MIN_INEXACT_AGREEMENT,
    check_export,
    discretizer_dict,
    example_artifacts,
    random_bnc_artifact,
    random_dnn_artifact,
    runtimes_for,
)
from bnc_deploy.verify import export_file, verification_rows

MICRO = {"profile": "micro"}


def _bnc(seed: int, bits, tan: bool, **kw):
    int_bits = None if bits is None else min(bits, 3)
    return random_bnc_artifact(
        np.random.default_rng(seed), d=6, n_classes=4, tan=tan, bits=bits, int_bits=int_bits, n_check=60, **kw
    )


def _check_micro(artifact, folder, **options) -> dict:
    """check_export with the micro profile: it runs in LiteRT and TFLM (both accept micro files)."""
    result = check_export(artifact, "tflite", folder, **MICRO, **options)
    assert set(result["runtimes"]) == {"litert", "tflm"}, result["runtimes"]
    return result


def _assert_micro_metadata(meta: dict, path: Path) -> None:
    summary = inspect_tflite(path.read_bytes())
    assert meta["profile"] == "micro" and meta["batch"] == "static 1" and meta["label_dtype"] == "int32"
    tflm_meta = meta["tflm"]
    assert isinstance(tflm_meta["arena_bytes"], int) and tflm_meta["arena_bytes"] > 0
    assert tflm_meta["arena_bytes"] % 16 == 0 and tflm_meta["arena_bytes"] >= tflm_meta["arena_reported_bytes"]
    assert "tflite-micro" in tflm_meta["arena_measured_with"]
    assert tflm_meta["ops"] == sorted(set(summary.op_names))
    # ops within TFLM's resolver, none of the ones avoided (REDUCE_ALL is new in TFLM), no REDUCE_ANY
    assert set(summary.op_names) <= TFLM_BUILTIN_OPS - set(MICRO_AVOIDED_OPS), summary.op_names
    assert "REDUCE_ANY" not in summary.op_names
    assert not {t.dtype for t in summary.tensors} & {"INT64", "UINT8"}
    x, label = summary.tensors[summary.inputs[0]], summary.tensors[summary.outputs[1]]
    assert x.shape_signature == [1, len(meta["cardinalities"])] and label.dtype == "INT32"


# -- BN classifiers ----------------------------------------------------------------------------------------
BN_CASES = [  # (seed, bits, tan, lowering, onehot)
    (1, 1, False, "gather", None),
    (2, 3, True, "gather", None),
    (3, 5, False, "gather", None),
    (4, 8, True, "gather", None),
    (5, None, True, "gather", None),
    (6, 2, False, "onehot-fc", "equal-cast"),
    (7, 7, True, "onehot-fc", "equal-cast"),
    (8, 4, True, "onehot-fc", "relu"),
    (9, 8, False, "onehot-fc", "equal-cast"),
]


@pytest.mark.parametrize(
    "seed,bits,tan,lowering,onehot",
    BN_CASES,
    ids=[f"{'tan' if c[2] else 'nb'}-B{c[1]}-{c[3]}{'-' + c[4] if c[4] else ''}" for c in BN_CASES],
)
def test_bn_micro_export_runs_in_tflm_as_in_litert(tmp_path, seed, bits, tan, lowering, onehot):
    artifact = _bnc(seed, bits, tan)
    options = {"lowering": lowering} | ({"onehot": onehot} if onehot else {})
    result = _check_micro(artifact, tmp_path, **options)
    meta = result["report"].metadata
    _assert_micro_metadata(meta, tmp_path / "model.tflite")
    expect_exact = bits is not None and (lowering == "gather" or bits <= 7)
    assert meta["exact"] is expect_exact
    for name in ("litert", "tflm"):
        if expect_exact:
            assert result["runtimes"][name]["exact"], (name, result["runtimes"])
        else:
            assert result["runtimes"][name]["agreement"] >= MIN_INEXACT_AGREEMENT


def test_bn_micro_raw_inputs_exact_in_tflm(tmp_path):
    cuts = [[-1.0, 0.5], [0.25], [-3.0, 0.0, 2.5, 7.0], [1e-3]]
    artifact = random_bnc_artifact(
        np.random.default_rng(12),
        d=4,
        n_classes=3,
        tan=True,
        bits=4,
        int_bits=2,
        discretizer=discretizer_dict(cuts),
        cardinalities=[len(c) + 1 for c in cuts],
    )
    for lowering in ("gather", "onehot-fc"):
        folder = tmp_path / lowering
        folder.mkdir()
        result = _check_micro(artifact, folder, raw_inputs=True, lowering=lowering)
        assert result["runtimes"]["tflm"]["exact"], result["runtimes"]
        _assert_micro_metadata(result["report"].metadata, folder / "model.tflite")


def test_every_conformance_example_runs_in_tflm(tmp_path):
    """The conformance examples of both kinds with the micro profile, in LiteRT and TFLM."""
    for kind in ("bnc", "dnn"):
        for name, artifact in example_artifacts(kind).items():
            folder = tmp_path / f"{kind}-{name}"
            folder.mkdir()
            result = _check_micro(artifact, folder)
            meta = result["report"].metadata
            if meta["exact"]:
                assert result["runtimes"]["tflm"]["exact"], (kind, name)


# -- DNNs --------------------------------------------------------------------------------------------------
DNN_CASES = {
    "fc-sign-2bit": {"architecture": "fc", "activation": "sign", "bits": 2},
    "fc-sign-8bit": {"architecture": "fc", "activation": "sign", "bits": 8},
    "cnn-sign-onehot-column-major": {
        "architecture": "cnn",
        "activation": "sign",
        "bits": 3,
        "encoding": "onehot",
        "max_cardinality": 3,
        "pixel_order": "column-major",
    },
    "cnn-relu-2bit": {"architecture": "cnn", "activation": "relu", "bits": 2, "hidden": (4, 8), "image_shape": (8, 8)},
}


@pytest.mark.parametrize("name", list(DNN_CASES))
def test_dnn_micro_export_runs_in_tflm(tmp_path, name):
    artifact = random_dnn_artifact(5, **DNN_CASES[name])
    result = _check_micro(artifact, tmp_path)
    meta = result["report"].metadata
    _assert_micro_metadata(meta, tmp_path / "model.tflite")
    if artifact.activation == "sign":
        assert meta["exact"] and result["runtimes"]["tflm"]["exact"]
    else:  # int8 PTQ: labels reported, not promised (TFLM's reference kernels round like LiteRT's, mostly)
        assert not meta["exact"] and result["runtimes"]["tflm"]["agreement"] >= MIN_INEXACT_AGREEMENT


# -- the guard in the bare interpreter -----------------------------------------------------------------------
def _bare_run(model: bytes, arena: int, row: np.ndarray):
    interpreter = tflm.Interpreter.from_bytes(model, arena_size=arena)
    interpreter.set_input(np.asarray(row, dtype=np.int32)[None, :], 0)
    interpreter.invoke()
    return interpreter.get_output(0)[0], interpreter.get_output(1)[0]


@pytest.mark.parametrize(
    "kind,options",
    [("bnc", {"lowering": "gather"}), ("bnc", {"lowering": "onehot-fc"}), ("dnn", {})],
    ids=["bn-gather", "bn-onehot-fc", "dnn-sign"],
)
def test_guard_in_bare_tflm(tmp_path, kind, options):
    artifact = _bnc(21, 3, True) if kind == "bnc" else random_dnn_artifact(8, architecture="fc", bits=2)
    path = tmp_path / "model.tflite"
    report = export_file(artifact, path, "tflite", **MICRO, **options)
    model, arena = path.read_bytes(), report.metadata["tflm"]["arena_bytes"]
    x, _ = verification_rows(artifact, n_random=4)
    ref = reference_predictor(artifact)
    scores, label = _bare_run(model, arena, x[0])
    assert label.dtype == np.int32 and label == int(np.argmax(ref.log_joint(x[:1])[0]))
    cards = artifact.cardinalities
    for j, value in ((0, int(cards[0])), (len(cards) - 1, -1), (1, 10**6), (0, -(2**31))):
        bad = x[0].copy()
        bad[j] = value
        scores, label = _bare_run(model, arena, bad)
        assert label == INVALID_LABEL, (j, value, label)
        assert np.all(np.isnan(scores)), (j, value, scores)


# -- the runtime and the registry --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def micro_and_default(tmp_path_factory):
    root = tmp_path_factory.mktemp("micro")
    artifact = _bnc(31, 3, False)
    export_file(artifact, root / "micro.tflite", "tflite", **MICRO)
    export_file(artifact, root / "default.tflite", "tflite")
    return artifact, root / "micro.tflite", root / "default.tflite"


def test_tflm_runtime_refuses_default_profile_files(micro_and_default):
    _, _, default = micro_and_default
    with pytest.raises(RuntimeLoadError, match="--profile micro") as info:
        load_runtime(default, "tflm")
    assert str(default) in str(info.value) and "\n" not in str(info.value)
    # what the issue reports: the bare interpreter cannot load a default export (REDUCE_ANY)
    with pytest.raises(RuntimeError):
        tflm.Interpreter.from_bytes(default.read_bytes(), arena_size=2**20)


def test_tflm_is_not_the_default_and_is_offered_only_for_micro_files(micro_and_default):
    _, micro, default = micro_and_default
    assert EXTENSIONS[".tflite"] == "litert"
    assert type(load_runtime(micro)).__name__ == "LiteRTAdapter"
    assert "tflm" not in runtimes_for(".tflite") and "tflm" not in runtimes_for(
        ".tflite", read_tflite_metadata(default)
    )
    assert "tflm" in runtimes_for(".tflite", read_tflite_metadata(micro))
    assert TFLMAdapter.accepts({"profile": "micro"}) and not TFLMAdapter.accepts(None)


def test_tflm_runtime_uses_the_recorded_arena(micro_and_default):
    artifact, micro, _ = micro_and_default
    arena = read_tflite_metadata(micro)["tflm"]["arena_bytes"]
    rt = load_runtime(micro, "tflm")
    assert rt.arena_size == arena + ARENA_SLACK and rt.static_batch == 1
    x, _ = verification_rows(artifact, n_random=32)
    scores, label = rt.run(x)
    ref = reference_predictor(artifact).log_joint(x)
    assert label.dtype == np.int64 and np.array_equal(scores, ref) and np.array_equal(label, np.argmax(ref, axis=1))
    assert load_runtime(micro, "tflm", arena_size=arena).predict(x[:3]).shape == (3,)  # the minimum works
    with pytest.raises(RuntimeLoadError, match="arena"):
        load_runtime(micro, "tflm", arena_size=arena * 3 // 4)


def test_profile_is_declared_and_checked():
    for kind in ("bnc", "dnn"):
        spec = exporter_for(kind, "tflite")
        option = {o.name: o for o in spec.options}["profile"]
        assert option.default == "default" and {"default", "micro"} <= set(option.choices)
    with pytest.raises(ExportError, match="unknown profile"):
        exporter_for("bnc", "tflite").build(_bnc(1, 3, False), profile="tiny")


def test_ops_used_are_registered_in_the_installed_tflm(tmp_path):
    """The allow-list is TFLM's resolver (MicroMutableOpResolver); the ops the micro files use are
    also registration symbols of the installed interpreter binary."""
    from tflite_micro.python.tflite_micro import _runtime

    binary = Path(getattr(_runtime, "__file__", "") or "")
    if not binary.is_file():
        pytest.skip("the installed tflite-micro has no interpreter binary file to read")
    data = binary.read_bytes()
    used = set()
    for kind, artifact, options in (
        ("bnc", _bnc(41, 3, True), {}),
        ("bnc", _bnc(42, 3, True), {"lowering": "onehot-fc", "onehot": "relu"}),
        ("dnn", random_dnn_artifact(5, **DNN_CASES["cnn-relu-2bit"]), {}),
    ):
        path = tmp_path / f"{kind}{len(used)}.tflite"
        used |= set(export_file(artifact, path, "tflite", **MICRO, **options).metadata["tflm"]["ops"])
    missing = [op for op in sorted(used) if f"Register_{op}".encode() not in data]
    assert not missing, missing


def test_cli_export_profile_micro(tmp_path, capsys):
    from bnc_deploy.artifacts import save_artifact
    from bnc_deploy.cli.export import main

    model = tmp_path / "m.bnc"
    save_artifact(_bnc(51, 3, True), model)
    out = tmp_path / "m.tflite"
    assert main([str(model), "--format", "tflite", "--profile", "micro", "-o", str(out)]) in (0, None)
    rt = load_runtime(out, "tflm")
    assert rt.metadata["profile"] == "micro" and rt.metadata["tflm"]["arena_bytes"] > 0


@pytest.mark.parametrize("lowering", ["gather", "onehot-fc"])
@pytest.mark.parametrize("tan", [False, True])
def test_profiler_counts_micro_files_like_the_analytic_model(tmp_path, lowering, tan):
    """The micro guard's REDUCE_MAX has a counting rule: graph size and operations equal the
    paper's analytic numbers, with no unknown op (bnc-profile said "no rule for REDUCE_MAX")."""
    from bnc_deploy.profiling.graph_count import count_graph
    from bnc_deploy.verify import export_path

    artifact = _bnc(3, 3, tan)
    path = export_path(artifact, tmp_path / "m.tflite", "tflite", lowering=lowering, profile="micro")
    check = count_graph(path).to_dict()["check"]
    assert check["n_ops"] == {"graph": artifact.n_ops, "analytic": artifact.n_ops, "equal": True}
    assert check["size_bits"]["equal"] and check["size_bits"]["graph"] == artifact.size_bits
