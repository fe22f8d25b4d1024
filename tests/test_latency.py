"""The latency harness (``bnc_deploy.profiling.latency``) times any adapter through its public
``prepare``/``invoke`` (session mode) or ``run`` (adapter mode) only.

The proof that it does not reach into runtimes: a toy adapter registered with
``register_runtime`` - unknown name, no ``session``, ``interpreter`` or ``predictor`` - is timed
like the built-in ones, with exactly the calls the protocol promises; and the harness's source
uses none of those handles nor the runtimes' names.
"""

from __future__ import annotations

import ast
import inspect
from collections import Counter

import numpy as np
import pytest

from bnc_deploy.artifacts import load_artifact, save_artifact
from bnc_deploy.errors import ConfigError, InputError
from bnc_deploy.formats.bnc import export_metadata
from bnc_deploy.profiling import latency
from bnc_deploy.profiling.latency import measure_latency
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.runtimes.base import EXTENSIONS, RUNTIMES, RuntimeAdapter, load_runtime, register_runtime
from bnc_deploy.testing import random_bnc_artifact

CARDS = [3, 1, 4, 2]


class ToyAdapter(RuntimeAdapter):
    """A runtime the harness has never heard of: a ``.bnc`` file behind prepare/invoke, counting calls."""

    name = "toy"
    extensions = (".toy",)

    def _load(self, path, data):
        artifact = load_artifact(path, data=data)
        self._tables = ReferencePredictor(artifact)
        self.calls = Counter()
        return export_metadata(artifact, format="bnc")

    def _prepare(self, checked):
        self.calls["prepare"] += 1
        return ("toy", checked.shape[0], checked.copy())

    def invoke(self, prepared):
        tag, rows, x = prepared
        assert tag == "toy" and x.shape[0] == rows
        self.calls["invoke"] += 1
        self.calls[f"invoke_rows_{rows}"] += 1
        scores = self._tables.log_joint(x)
        return scores, np.argmax(scores, axis=1)


class StaticToyAdapter(ToyAdapter):
    """The same, claiming a file with a fixed batch of 2 rows per runtime call."""

    name = "toy-static"
    extensions = (".toy2",)
    static_batch = 2


@pytest.fixture
def toy_file(tmp_path):
    artifact = random_bnc_artifact(np.random.default_rng(3), bits=3, tan=True, cardinalities=CARDS)
    path = tmp_path / "m.toy"
    save_artifact(artifact, path)
    for cls in (ToyAdapter, StaticToyAdapter):
        register_runtime(cls.name, cls, extensions=cls.extensions)
    try:
        yield path, artifact
    finally:
        for cls in (ToyAdapter, StaticToyAdapter):
            RUNTIMES.pop(cls.name, None)
            for ext in cls.extensions:
                EXTENSIONS.pop(ext, None)


def codes(artifact, n, seed=0):
    return np.random.default_rng(seed).integers(0, artifact.cardinalities, size=(n, artifact.n_features))


def test_toy_adapter_is_timed_through_prepare_and_invoke(toy_file):
    path, artifact = toy_file
    adapter = load_runtime(path)  # by its registered extension
    assert type(adapter) is ToyAdapter
    for handle in ("session", "interpreter", "predictor"):
        assert not hasattr(adapter, handle)
    x = codes(artifact, 30)
    t = measure_latency(adapter, x, runs=7, warmup=3, repeats=2, throughput_repeats=4)
    assert (t.runtime, t.mode, t.runs, t.repeats, t.warmup) == ("toy", "session", 7, 2, 3)
    assert len(t.block_p50_us) == 2 and 0 < t.min_us <= t.p50_us <= t.p99_us
    assert t.throughput_rows == 30 and t.throughput_batch == "one call of 30 rows" and t.throughput_rows_per_s > 0
    # 7 distinct rows prepared once each, the full batch once; every timed or warm-up call is one invoke
    assert adapter.calls["prepare"] == 7 + 1
    assert adapter.calls["invoke_rows_1"] == 3 + 7 * 2
    assert adapter.calls["invoke_rows_30"] == 1 + 4


def test_adapter_mode_times_run(toy_file, monkeypatch):
    path, artifact = toy_file
    adapter = load_runtime(path, "toy")
    runs = Counter()
    original_run = adapter.run

    def counted_run(x):
        runs[len(x)] += 1
        return original_run(x)

    monkeypatch.setattr(adapter, "run", counted_run)
    t = measure_latency(adapter, codes(artifact, 12), runs=5, warmup=2, repeats=3, throughput_repeats=2, mode="adapter")
    assert t.mode == "adapter" and t.throughput_batch == "one call of 12 rows"
    assert runs == {1: 2 + 5 * 3, 12: 1 + 2}
    assert adapter.calls["invoke"] == sum(runs.values())  # run = prepare + invoke underneath


def test_static_batch_throughput_is_one_call_per_chunk(toy_file):
    path, artifact = toy_file
    adapter = load_runtime(path, "toy-static")
    t = measure_latency(adapter, codes(artifact, 9), runs=4, warmup=1, repeats=1, throughput_repeats=3)
    assert t.throughput_batch == "static batch 2: 4 calls"  # the partial last chunk is left out
    assert adapter.calls["invoke_rows_2"] == 4 * (1 + 3)
    t = measure_latency(adapter, codes(artifact, 9), runs=4, warmup=1, repeats=1, throughput_repeats=3, mode="adapter")
    assert t.throughput_batch == "one call of 9 rows"  # run() takes any number of rows


def test_bad_arguments(toy_file):
    path, artifact = toy_file
    adapter = load_runtime(path)
    x = codes(artifact, 5)
    with pytest.raises(ConfigError, match="unknown latency mode 'bare'"):
        measure_latency(adapter, x, mode="bare")
    with pytest.raises(ValueError, match="runs >= 1"):
        measure_latency(adapter, x, runs=0)
    with pytest.raises(ValueError, match="no rows"):
        measure_latency(adapter, x[:0])
    bad = x.copy()
    bad[1, 2] = 4
    with pytest.raises(InputError, match="feature 2 .*value 4.*row 1"):
        measure_latency(adapter, bad)


def test_harness_source_does_not_reach_into_runtimes():
    """No runtime handles, no output-name contract, no branching on runtime names in the harness."""
    tree = ast.parse(inspect.getsource(latency))
    forbidden_attributes = {"session", "interpreter", "predictor", "_allocated_rows"}
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not used & forbidden_attributes
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert "contract_outputs" not in names and "INPUT_NAME" not in names
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            constants = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
            assert not constants & set(RUNTIMES), f"line {node.lineno} compares with a runtime name"


# -- the built-in adapters, both modes ------------------------------------------------------------------
def _real_files(tmp_path):
    pytest.importorskip("onnxruntime")
    from exports import export_onnx

    artifact = random_bnc_artifact(np.random.default_rng(8), bits=4, int_bits=2, tan=True, cardinalities=CARDS)
    save_artifact(artifact, tmp_path / "m.bnc")
    files = [tmp_path / "m.bnc", export_onnx(artifact, tmp_path / "m.onnx")]
    try:
        import ai_edge_litert  # noqa: F401
        import tensorflow  # noqa: F401
    except ImportError:
        return artifact, files
    from exports import export_tflite

    files += [
        export_tflite(artifact, tmp_path / "g.tflite"),
        export_tflite(artifact, tmp_path / "s.tflite", lowering="onehot-fc"),
    ]
    return artifact, files


def test_builtin_adapters_in_both_modes(tmp_path):
    artifact, files = _real_files(tmp_path)
    x = codes(artifact, 25)
    for path in files:
        adapter = load_runtime(path, threads=1)
        for mode in latency.MODES:
            t = measure_latency(adapter, x, runs=5, warmup=2, repeats=2, throughput_repeats=2, mode=mode)
            assert t.runtime == adapter.name and t.mode == mode and t.p50_us > 0 and t.throughput_rows_per_s > 0
            static = adapter.static_batch if mode == "session" else None
            expected = f"static batch {static}: {25 // static} calls" if static else "one call of 25 rows"
            assert t.throughput_batch == expected, (path.name, mode)
        # timing leaves the adapter answering correctly at every batch size
        np.testing.assert_array_equal(adapter.predict(x), ReferencePredictor(artifact).predict(x))
        np.testing.assert_array_equal(adapter.predict(x[:1]), ReferencePredictor(artifact).predict(x[:1]))
