"""Deploy targets and budgets (``bnc_deploy.targets.base``, ``budget``, ``target_*``): units, strict
budgets, the target registry, refused axes, and real measurements of exported files.

The Cortex-M measurements need ``gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm``; they
are skipped, with the reason, when missing, unless ``BNC_DEPLOY_REQUIRE_CORTEX_M=1`` (CI: then they
fail), as in ``tests/test_cortex_m.py``. TFLite targets need TensorFlow and LiteRT; ``tflm`` also
tflite-micro.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os

import numpy as np
import pytest

from bnc_deploy.costs import bnc_cost_terms
from bnc_deploy.errors import ConfigError
from bnc_deploy.targets import cortex_m_build
from bnc_deploy.targets.base import (
    Export,
    Target,
    get_target,
    register_target,
    target_names,
    targets,
    unregister_target,
)
from bnc_deploy.targets.budget import AXES, Budget, Measured, parse_count, parse_size, parse_time_us
from bnc_deploy.testing import random_bnc_artifact, random_dnn_artifact

MISSING = cortex_m_build.tools_available()
REQUIRED = os.environ.get("BNC_DEPLOY_REQUIRE_CORTEX_M", "") not in ("", "0")
needs_toolchain = pytest.mark.skipif(
    MISSING is not None and not REQUIRED, reason=f"Cortex-M toolchain not installed: {MISSING}"
)
needs_onnxruntime = pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime")
_TFLITE = [m for m in ("tensorflow", "ai_edge_litert") if importlib.util.find_spec(m) is None]
needs_tflite = pytest.mark.skipif(bool(_TFLITE), reason=f"TFLite export needs {', '.join(_TFLITE)}")
needs_tflm = pytest.mark.skipif(
    bool(_TFLITE) or importlib.util.find_spec("tflite_micro") is None, reason="needs TensorFlow, LiteRT, tflite-micro"
)


def _model():
    return random_bnc_artifact(np.random.default_rng(31), d=7, n_classes=4, tan=True, bits=3, int_bits=2, n_check=30)


# ================================================================================================
# Units
# ================================================================================================
@pytest.mark.parametrize(
    "text, expected",
    [
        ("2KiB", 2048),
        ("2kib", 2048),
        ("2kB", 2000),
        ("2 KB", 2000),
        ("512B", 512),
        ("512", 512),
        (512, 512),
        ("1.5KiB", 1536),
        ("4MiB", 4 * 2**20),
        ("1MB", 10**6),
        ("1GiB", 2**30),
        ("0", 0),
    ],
)
def test_sizes_parse_with_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["2K", "2 KiBs", "abc", "-1", -1, "1.5B", "0.1KiB", "", True, "2KiB4", "nan"])
def test_bad_sizes_name_the_flag_and_the_value(text):
    with pytest.raises(ValueError, match=r"--max-ram.*") as err:
        parse_size(text, "--max-ram")
    assert repr(text) in str(err.value) or str(text) in str(err.value)


def test_counts_and_times_parse():
    assert parse_count("20k") == 20_000
    assert parse_count("1.5M") == 1_500_000
    assert parse_count(7) == 7
    assert parse_time_us("250") == 250.0
    assert parse_time_us("250us") == 250.0
    assert parse_time_us("1.5ms") == 1500.0
    assert parse_time_us("0.01s") == pytest.approx(10_000.0)
    assert parse_time_us(2.5) == 2.5
    for bad, parse, flag in (
        ("1.5", parse_count, "--max-ops"),
        ("3x", parse_count, "--max-instructions"),
        ("1h", parse_time_us, "--max-latency-us"),
        ("-3", parse_time_us, "--max-latency-us"),
        (float("inf"), parse_time_us, "--max-latency-us"),
    ):
        with pytest.raises(ValueError, match=flag):
            parse(bad, flag)


def test_budget_from_flags_takes_axes_fields_and_flags():
    budget = Budget.from_flags(
        {"--max-flash": "2KiB", "max_ram": "512", "ops": 100, "max-latency-us": "1ms", "bits": None}
    )
    assert budget == Budget(max_flash=2048, max_ram=512, max_ops=100, max_latency_us=1000.0)
    assert budget.axes() == ("flash", "ram", "ops", "latency_us")
    assert Budget().axes() == ()
    with pytest.raises(ValueError, match="--max-file-bytes.*'lots'"):
        Budget.from_flags({"max_file_bytes": "lots"})
    with pytest.raises(ValueError, match="unknown budget 'max_speed'"):
        Budget.from_flags({"max_speed": 3})
    with pytest.raises(ValueError, match="--max-flash"):
        Budget(max_flash=-1)
    with pytest.raises(ValueError, match="--max-bits"):
        Budget(max_bits=1.5)


# ================================================================================================
# Strict budgets
# ================================================================================================
def test_a_cost_one_over_the_budget_is_exceeded_and_an_equal_one_fits():
    budget = Budget(max_flash=2048, max_latency_us=100.0)
    assert budget.exceeded(Measured(flash=2048, latency_us=100.0)) == []
    assert budget.fits(Measured(flash=2048, latency_us=100.0))
    assert budget.exceeded(Measured(flash=2049, latency_us=100.0)) == [("flash", 2049, 2048)]
    assert not budget.fits(Measured(flash=2049, latency_us=100.0))
    assert budget.exceeded(Measured(flash=1, latency_us=100.001)) == [("latency_us", 100.001, 100.0)]
    assert budget.describe(Measured(flash=2049)) == ["flash 2049 B > 2048 B", "latency_us not measured"]


def test_an_unmeasured_axis_never_fits():
    budget = Budget(max_ram=10)
    assert budget.exceeded(Measured()) == []
    assert budget.unmeasured(Measured(flash=1)) == ["ram"]
    assert not budget.fits(Measured(flash=1))
    assert Budget().fits(Measured())


def test_measured_to_dict_has_every_axis():
    m = Measured(flash=3, instructions=9)
    assert m.to_dict() == {a: (3 if a == "flash" else 9 if a == "instructions" else None) for a in AXES}
    assert m.measured_axes() == ("flash", "instructions")
    with pytest.raises(ValueError, match="unknown budget axis 'speed'"):
        m.get("speed")


# ================================================================================================
# Registry
# ================================================================================================
def test_builtin_targets_are_registered():
    names = target_names()
    for name in ("cortex-m0", "cortex-m3", "cortex-m4", "cortex-m7", "tflm", "web", "x86-64", "server"):
        assert name in names
    for name in ("android", "aarch64", "edgetpu"):
        assert name in names
    json.dumps([t.describe() for t in targets().values()])
    for name in ("cortex-m3", "cortex-m4", "cortex-m7"):
        assert get_target(name).board in cortex_m_build.BOARDS


def test_a_toy_target_registers_once():
    toy = Target(name="toy-test-target", description="a toy", exports=(Export("onnx"),))
    register_target(toy)
    try:
        assert "toy-test-target" in target_names()
        assert get_target("toy-test-target") is toy
        with pytest.raises(ConfigError, match="target 'toy-test-target' is already registered"):
            register_target(Target(name="toy-test-target", description="another", exports=(Export("onnx"),)))
        other = Target(name="toy-test-target", description="replacement", exports=(Export("onnx"),))
        register_target(other, overwrite=True)
        assert get_target("toy-test-target") is other
    finally:
        unregister_target("toy-test-target")
    assert "toy-test-target" not in target_names()


def test_an_unknown_target_lists_the_names():
    with pytest.raises(ConfigError, match=r"unknown target 'cortex-m99'; targets: .*cortex-m4.*x86-64"):
        get_target("cortex-m99")


def test_a_budget_on_an_axis_the_target_cannot_measure_is_refused():
    with pytest.raises(
        ConfigError, match=r"target web cannot measure --max-latency-us \(.*\); it measures .*--max-file-bytes"
    ):
        get_target("web").check_budget(Budget(max_latency_us=100))
    with pytest.raises(ConfigError, match=r"target x86-64 cannot measure --max-instructions"):
        get_target("x86-64").check_budget(Budget(max_instructions=100))
    with pytest.raises(ConfigError, match="target tflm cannot measure --max-flash"):
        get_target("tflm").cannot_fit(Budget(max_flash=100), _model())
    get_target("cortex-m4").check_budget(Budget(max_flash=1, max_ram=1, max_instructions=1, max_bits=1))


def test_latency_only_on_host_targets_and_instructions_only_on_emulated_boards():
    for name, target in targets().items():
        assert ("latency_us" in target.axes) == (name in ("x86-64", "server")), name
        assert ("instructions" in target.axes) == (name in ("cortex-m0", "cortex-m3", "cortex-m4", "cortex-m7")), name
        assert {"ops", "bits", "file_bytes"} <= set(target.axes), name
        assert not set(target.axes) & set(target.not_measurable), name
        assert set(target.axes) | set(target.not_measurable) == set(AXES), name


def test_a_kind_without_export_is_refused():
    with pytest.raises(ConfigError, match="target cortex-m4 takes bnc models, not dnn models"):
        get_target("cortex-m4").measure(random_dnn_artifact(0), "unused")


# ================================================================================================
# Estimates (before training)
# ================================================================================================
def test_estimates_prune_configurations_before_training():
    costs = bnc_cost_terms([3, 4, 2], [-1, 0, 1], 3, 4)
    m4 = get_target("cortex-m4")
    bound = m4.estimate(costs)
    assert bound.bits == costs.size_bits and bound.ops == costs.n_ops
    assert bound.flash == costs.n_parameters  # one byte per code, unpacked
    assert m4.with_options("c", pack_bits=True).estimate(costs).flash == math.ceil(costs.size_bits / 8)
    assert m4.cannot_fit(Budget(max_bits=costs.size_bits), costs) == []
    assert m4.cannot_fit(Budget(max_bits=costs.size_bits - 1), costs) == [
        ("bits", costs.size_bits, costs.size_bits - 1)
    ]
    assert m4.cannot_fit(Budget(max_flash=costs.n_parameters - 1), costs)
    assert get_target("web").estimate(costs).flash is None  # not an axis of web


# ================================================================================================
# Real measurements
# ================================================================================================
def _check_file_bytes(measurement):
    sizes = [os.path.getsize(f.path) for f in measurement.files]
    assert [f.file_bytes for f in measurement.files] == sizes
    assert [f.result.file_bytes for f in measurement.files] == sizes
    assert measurement.measured.file_bytes == max(sizes)
    one_less = Budget(max_file_bytes=max(sizes) - 1)
    assert not measurement.fits(one_less)
    assert measurement.fits(Budget(max_file_bytes=max(sizes)))


@needs_toolchain
def test_cortex_m4_measures_the_reported_model_size(tmp_path):
    from bnc_deploy.targets.cortex_m import check_header

    art = _model()
    target = get_target("cortex-m4")
    m = target.measure(art, tmp_path / "m4")
    assert m.ok, m.problems
    assert m.path.suffix == ".h" and m.parity[0].exact
    report = check_header(m.path, art, boards=["mps2-an386"], workdir=tmp_path / "report")
    board = report["boards"][0]
    assert board["ok"]
    assert m.measured.flash == board["model"]["flash_bytes"] > 0
    assert m.measured.ram == board["model"]["ram_bytes"] > 0
    assert m.measured.instructions == math.ceil(board["instructions"]["predict_per_row"]) > 0
    assert m.measured.bits == art.size_bits and m.measured.ops == art.n_ops
    est = target.estimate(art)
    assert est.flash <= m.measured.flash and est.file_bytes <= m.measured.file_bytes
    flash = m.measured.flash
    assert m.fits(Budget(max_flash=flash, max_ram=m.measured.ram))
    assert not m.fits(Budget(max_flash=flash - 1))
    assert Budget(max_flash=flash - 1).exceeded(m.measured) == [("flash", flash, flash - 1)]
    _check_file_bytes(m)


@needs_toolchain
def test_cortex_m0_sizes_from_the_toolchain_and_instructions_on_the_microbit(tmp_path):
    art = _model()
    m = get_target("cortex-m0").measure(art, tmp_path, axes=["flash", "ram"])
    assert m.ok, m.problems
    assert m.measured.flash > 0 and m.measured.ram > 0
    assert m.measured.instructions is None and m.measured.file_bytes is None  # not asked: no board run
    assert m.details["model"]["flash_bytes"] == m.measured.flash
    assert "-mcpu=cortex-m0" in m.methods["flash"]
    m = get_target("cortex-m0").measure(art, tmp_path / "board", axes=["instructions"])
    assert m.ok, m.problems
    assert m.measured.instructions > 0 and "QEMU microbit" in m.methods["instructions"]
    assert m.details["board"]["passed"] == m.details["board"]["n_rows"]


@needs_tflite
@needs_onnxruntime
def test_web_measures_the_larger_file(tmp_path):
    m = get_target("web").measure(_model(), tmp_path)
    assert m.ok
    assert [f.format for f in m.files] == ["tflite", "onnx"]
    assert m.files[0].result.metadata["profile"] == "web"
    _check_file_bytes(m)
    assert m.measured.latency_us is None and m.measured.flash is None


@needs_onnxruntime
def test_x86_64_measures_latency_of_the_native_file(tmp_path):
    target = dataclasses.replace(get_target("x86-64"), runs=20, repeats=1, warmup=2)
    m = target.measure(_model(), tmp_path)
    assert [(f.format, f.result.runtime) for f in m.files] == [("c", "native")]  # a BN model: C alone
    _check_file_bytes(m)
    if target.machines and os.uname().machine.lower() not in target.machines:
        assert m.measured.latency_us is None and m.problems
        return
    assert m.ok, m.problems
    timings = m.details["latency"]
    assert set(timings) == {f.path.name for f in m.files}
    assert m.measured.latency_us == max(t["p50_us"] for t in timings.values()) > 0
    assert not m.fits(Budget(max_latency_us=m.measured.latency_us / 2))


@needs_onnxruntime
def test_server_measures_latency_in_onnxruntime(tmp_path):
    target = dataclasses.replace(get_target("server"), runs=20, repeats=1, warmup=2)
    m = target.measure(_model(), tmp_path)
    assert m.ok, m.problems
    assert [(f.format, f.result.runtime) for f in m.files] == [("onnx", "onnxruntime")]
    assert m.measured.latency_us == m.details["latency"]["server.onnx"]["p50_us"] > 0


@needs_onnxruntime
def test_measuring_only_some_axes_leaves_the_others_unmeasured(tmp_path):
    m = get_target("server").measure(_model(), tmp_path, axes=["bits"])
    assert m.measured.measured_axes() == ("bits",)
    assert not m.fits(Budget(max_file_bytes=10**9))  # file bytes not measured: never reported as fitting


@needs_tflm
def test_tflm_measures_the_arena(tmp_path):
    m = get_target("tflm").measure(_model(), tmp_path)
    assert m.ok, m.problems
    meta = m.files[0].result.metadata
    assert meta["profile"] == "micro"
    assert meta["tflm"]["arena_bytes"] == m.measured.ram > 0
    assert [v.runtime for v in m.files[0].extra] == ["tflm"] and m.files[0].extra[0].exact
    _check_file_bytes(m)
    assert not m.fits(Budget(max_ram=m.measured.ram - 1))
    assert m.fits(Budget(max_ram=m.measured.ram))


@needs_tflite
def test_edgetpu_checks_the_mapped_part(tmp_path):
    m = get_target("edgetpu").measure(_model(), tmp_path)
    assert m.ok, m.problems
    report = m.details["edgetpu"]
    assert 0 < report["n_mapped"] <= report["n_ops"]
    assert report["prefix"]["class_scores_equal"] is True
    _check_file_bytes(m)


@needs_tflite
def test_android_ships_ort_and_tflite_with_metadata(tmp_path):
    m = get_target("android").measure(_model(), tmp_path)
    assert m.ok, m.problems
    assert [(f.format, f.path.name) for f in m.files] == [("ort", "android.ort"), ("tflite", "android.tflite")]
    assert [f.result.runtime for f in m.files] == ["onnxruntime", "litert"]
    assert all(f.result.exact for f in m.files)
    import zipfile

    assert zipfile.is_zipfile(m.files[1].path)  # the TFLite metadata's associated files ride in a zip tail
    _check_file_bytes(m)
    assert m.measured.latency_us is None and m.measured.ram is None


@needs_tflite
def test_aarch64_ships_onnx_and_tflite_verified_on_the_host(tmp_path):
    m = get_target("aarch64").measure(_model(), tmp_path)
    assert m.ok, m.problems
    assert [f.format for f in m.files] == ["onnx", "tflite"] and all(f.result.exact for f in m.files)
    _check_file_bytes(m)
    with pytest.raises(ConfigError, match="qemu-user"):
        get_target("aarch64").check_budget(Budget(max_latency_us=10))
