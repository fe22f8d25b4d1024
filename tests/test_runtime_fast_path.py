"""The small-batch path of ``RuntimeAdapter.run``/``predict``/``check`` (``runtimes/fused_check.py``).

For every registered runtime that is installed (the registry's adapters; a runtime whose framework,
exporter or compiler is missing is skipped, saying which): the fast path and the full path give
bit-identical outputs on valid inputs of every accepted dtype and layout, and the same exception
(type and message) on bad ones. The full path is the same adapter with its fused check switched
off. Also: the fused check never accepts what the full check refuses, it respects an explicit
``chunk_rows``, a subclass's own ``check`` is never bypassed, and threads calling ``run`` at once
get their own outputs. onnxruntime's IOBinding path (outputs bound once per thread and batch
size) gives ``InferenceSession.run``'s outputs bit for bit, in arrays a later call does not
rewrite. No timing assertions (benchmarks/bench_run_overhead.py measures).
"""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

from bnc_deploy.artifacts import save_artifact
from bnc_deploy.errors import InputError, MissingExtraError
from bnc_deploy.formats.metadata import INVALID_LABEL
from bnc_deploy.runtimes.base import RUNTIMES, check_raw, load_runtime, runtime_class
from bnc_deploy.runtimes.fused_check import FAST_ROWS, FusedCheck
from bnc_deploy.runtimes.reference_adapter import ReferenceAdapter
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact
from bnc_deploy.validation import check_codes

CARDS = [3, 1, 4, 2, 5]
CUTS = [[-1.0, 0.5], [0.25], [-3.0, 0.0, 2.5]]
#: Runtimes whose adapters may be called from several threads at once (LiteRT's and TFLM's
#: interpreters are not: bnc-serve runs them under a lock).
THREAD_SAFE = ("numpy", "onnxruntime", "native")
#: Runtimes with no file of their own to load here.
NOT_FILE_RUNTIMES = {"http": "the http runtime needs a running bnc-serve (tests/serve/test_http_runtime.py)"}


def _artifacts():
    codes = random_bnc_artifact(
        np.random.default_rng(21), bits=4, int_bits=2, tan=True, n_classes=3, cardinalities=CARDS
    )
    raw = random_bnc_artifact(
        np.random.default_rng(22),
        bits=3,
        int_bits=2,
        tan=True,
        n_classes=4,
        cardinalities=[len(c) + 1 for c in CUTS],
        discretizer=discretizer_dict(CUTS),
    )
    return {"codes": codes, "raw": raw}


def _export(runtime: str, kind: str, artifact, folder):
    """``(path, load options)`` of a file of ``kind`` for ``runtime``; skips when it cannot be made here."""
    raw = kind == "raw"
    if runtime == "numpy":
        path = folder / f"{kind}.bnc"
        save_artifact(artifact, path)
        return path, {"raw_inputs": raw}
    from bnc_deploy.verify import export_path

    if runtime == "onnxruntime":
        return export_path(artifact, folder / f"{kind}.onnx", "onnx", raw_inputs=raw), {}
    if runtime == "native":
        if shutil.which("cc") is None:
            pytest.skip("the native runtime needs a C compiler (cc)")
        return export_path(artifact, folder / f"{kind}.h", "c", raw_inputs=raw), {}
    if runtime in ("litert", "tflm"):
        pytest.importorskip("tensorflow", reason="TFLite exports need TensorFlow")
        options = {"profile": "micro"} if runtime == "tflm" else {}
        return export_path(artifact, folder / f"{kind}_{runtime}.tflite", "tflite", raw_inputs=raw, **options), {}
    pytest.skip(f"no export for runtime {runtime!r} in this test")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Built on first use: ``models(runtime, kind)`` -> a loaded adapter (the same one each time)."""
    folder = tmp_path_factory.mktemp("fast_path")
    artifacts, cache = _artifacts(), {}

    def get(runtime: str, kind: str):
        if runtime in NOT_FILE_RUNTIMES:
            pytest.skip(NOT_FILE_RUNTIMES[runtime])
        try:
            runtime_class(runtime)
        except MissingExtraError as exc:
            pytest.skip(f"runtime {runtime!r} is not installed: {exc}")
        if (runtime, kind) not in cache:
            path, options = _export(runtime, kind, artifacts[kind], folder)
            cache[runtime, kind] = load_runtime(path, runtime, **options)
        return cache[runtime, kind]

    return get


def _full(rt):
    """The same adapter's full path: its fused check switched off on the instance."""
    rt._fused_check = lambda x: None
    return rt


def _results(rt, x):
    """Every entry point's answer: ``("ok", arrays)`` or ``("error", type, message)``."""
    out = {}
    for name in ("run", "predict", "log_joint", "check"):
        try:
            value = getattr(rt, name)(x)
            arrays = value if isinstance(value, tuple) else (value,)
            out[name] = ("ok", [np.asarray(a) for a in arrays])
        except Exception as exc:  # noqa: BLE001 - the point is to compare whatever is raised
            out[name] = ("error", type(exc), str(exc))
    return out


def _assert_same(rt, x):
    """Fast and full paths of ``rt`` give the same results for ``x``; returns the fast ones."""
    fast = _results(rt, x)
    rt_full = _full(rt)
    try:
        full = _results(rt_full, x)
    finally:
        del rt.__dict__["_fused_check"]
    for name in fast:
        assert fast[name][0] == full[name][0], (name, fast[name], full[name])
        if fast[name][0] == "error":
            assert fast[name][1:] == full[name][1:], name
        else:
            for a, b in zip(fast[name][1], full[name][1]):
                assert a.dtype == b.dtype and a.shape == b.shape, name
                np.testing.assert_array_equal(a, b)
                assert a.tobytes() == b.tobytes(), name  # bit-identical (NaN payloads, -0.0)
    return fast


# -- inputs ---------------------------------------------------------------------------------------
def _valid_codes():
    rng = np.random.default_rng(5)
    rows = rng.integers(0, CARDS, size=(2 * FAST_ROWS, len(CARDS)))
    big_endian = rows[:3].astype(">i8")
    return {
        "int64 row (D,)": rows[0],
        "int64 (1, D)": rows[:1],
        "int64 (7, D)": rows[:7],
        "int64 FAST_ROWS": rows[:FAST_ROWS],
        "int64 FAST_ROWS + 1 (full path)": rows[: FAST_ROWS + 1],
        "int8": rows[:4].astype(np.int8),
        "uint8": rows[:4].astype(np.uint8),
        "int16": rows[:4].astype(np.int16),
        "uint16": rows[:4].astype(np.uint16),
        "int32": rows[:4].astype(np.int32),
        "uint32": rows[:4].astype(np.uint32),
        "uint64": rows[:4].astype(np.uint64),
        "big-endian int64": big_endian,
        "Fortran order": np.asfortranarray(rows[:5]),
        "strided columns": np.repeat(rows[:5], 2, axis=1)[:, ::2],
        "every maximum": np.asarray([CARDS], dtype=np.int64) - 1,
        "list": rows[:2].tolist(),
    }


def _bad_codes():
    rows = np.zeros((6, len(CARDS)), dtype=np.int64)
    high, negative, late = rows.copy(), rows.copy(), rows.copy()
    high[0, 2] = 4
    negative[0, 0] = -1
    late[3, 4] = 5
    many = np.zeros((FAST_ROWS + 3, len(CARDS)), dtype=np.int64)
    many[FAST_ROWS + 1, 1] = 1
    return {
        "value above range": high[:1],
        "negative value": negative[:1],
        "bad value in row 3": late,
        "bad value past FAST_ROWS": many,
        "int8 -1": negative[:1].astype(np.int8),
        "uint8 255": np.full((1, len(CARDS)), 255, dtype=np.uint8),
        "uint64 above 2^63": np.full((1, len(CARDS)), 2**63 + 1, dtype=np.uint64),
        "big-endian bad": high[:1].astype(">i8"),
        "whole-valued float64": rows[:1].astype(np.float64),
        "float64 NaN": np.full((1, len(CARDS)), np.nan),
        "bool": rows[:1].astype(bool),
        "object": rows[:1].astype(object),
        "too many columns": np.zeros((1, len(CARDS) + 1), dtype=np.int64),
        "too long row": np.zeros(len(CARDS) + 1, dtype=np.int64),
        "three dimensions": np.zeros((1, 1, len(CARDS)), dtype=np.int64),
        "list with a bad value": high[:2].tolist(),
    }


def _raw_inputs(valid: bool):
    d = len(CUTS)
    rng = np.random.default_rng(6)
    values = rng.normal(0.0, 3.0, size=(FAST_ROWS + 1, d))
    if valid:
        return {
            "float64 row (D,)": values[0],
            "float64 (5, D)": values[:5],
            "float64 FAST_ROWS + 1 (full path)": values,
            "float32": values[:5].astype(np.float32),
            "float16": values[:5].astype(np.float16),
            "int64": np.round(values[:5]).astype(np.int64),
            "uint8": np.abs(np.round(values[:5])).astype(np.uint8),
            "float64 at float32 max": np.full((1, d), float(np.finfo(np.float32).max)),
            "float64 rounding to float32 max": np.full((1, d), float(np.finfo(np.float32).max) * (1 + 2**-26)),
            "big-endian float64": values[:3].astype(">f8"),
            "list": values[:2].tolist(),
        }
    bad = {"NaN": np.nan, "inf": np.inf, "-inf": -np.inf, "float64 overflow": 1e39}
    out = {}
    for name, value in bad.items():
        x = values[:4].copy()
        x[2, 1] = value
        out[name] = x
    out["float32 NaN"] = out["NaN"].astype(np.float32)
    out["complex"] = values[:1].astype(np.complex128)
    out["bool"] = values[:1] > 0
    out["too many columns"] = np.zeros((1, d + 1))
    out["three dimensions"] = np.zeros((1, 1, d))
    return out


def _inputs(kind: str, valid: bool):
    if kind == "raw":
        return _raw_inputs(valid)
    return _valid_codes() if valid else _bad_codes()


# -- every installed runtime ----------------------------------------------------------------------
RUNTIME_NAMES = sorted(RUNTIMES)


@pytest.mark.parametrize("kind", ["codes", "raw"])
@pytest.mark.parametrize("runtime", RUNTIME_NAMES)
def test_valid_inputs_same_outputs(models, runtime, kind):
    rt = models(runtime, kind)
    for name, x in _inputs(kind, valid=True).items():
        results = _assert_same(rt, x)
        assert all(r[0] == "ok" for r in results.values()), (name, results)


@pytest.mark.parametrize("kind", ["codes", "raw"])
@pytest.mark.parametrize("runtime", RUNTIME_NAMES)
def test_bad_inputs_same_errors(models, runtime, kind):
    rt = models(runtime, kind)
    for name, x in _inputs(kind, valid=False).items():
        results = _assert_same(rt, x)
        assert all(r[0] == "error" for r in results.values()), (name, results)


@pytest.mark.parametrize("runtime", RUNTIME_NAMES)
def test_input_guard_same_error(models, runtime, monkeypatch):
    """A runtime whose guard fires on a checked row: the same RuntimeError, naming the same row."""
    if runtime == "native":
        pytest.skip("the native runtime runs valid NumPy batches in its own C path, not through _run")
    rt = models(runtime, "codes")
    x = np.zeros((3, len(CARDS)), dtype=np.int64)
    scores, labels = rt.run(x)
    labels = labels.copy()
    labels[1] = INVALID_LABEL
    monkeypatch.setattr(rt, "_run", lambda checked: (scores, labels))
    results = _assert_same(rt, x)
    assert results["run"][:2] == ("error", RuntimeError) and "row 1" in results["run"][2]


# -- the fused check against the full checks ------------------------------------------------------
INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_fused_codes_check_never_accepts_a_bad_value(dtype):
    cards = np.asarray([1, 2, 127, 128, 129, 255, 256, 257, 2**15, 2**31, 2**40], dtype=np.int64)
    fused = FusedCheck(cards, raw=False)
    info = np.iinfo(dtype)
    edges = np.asarray(
        sorted({int(v) for c in cards for v in (c - 1, c, c + 1, -1, 0, info.min, info.max, 2 ** (info.bits - 1))}),
        dtype=object,
    )
    edges = np.asarray([v for v in edges if info.min <= v <= info.max], dtype=dtype)
    rng = np.random.default_rng(int(np.dtype(dtype).itemsize))
    for _ in range(300):
        x = rng.choice(edges, size=(int(rng.integers(1, 5)), len(cards)))
        got = fused(x)
        try:
            want = check_codes(x, cards)
        except InputError:
            assert got is None
            continue
        if got is not None:
            assert got.dtype == want.dtype and np.array_equal(got, want)
    valid = np.zeros((2, len(cards)), dtype=dtype)
    assert fused(valid) is not None and fused(valid[0]) is not None, "a plain valid batch takes the fused check"


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.longdouble, np.int64, np.uint64])
def test_fused_raw_check_matches_check_raw(dtype):
    fused = FusedCheck(np.ones(4, dtype=np.int64), raw=True)
    f32max = float(np.finfo(np.float32).max)
    specials = [0.0, -0.0, 1.5, -7.25, f32max, -f32max, f32max * (1 + 2**-26), 1e39, -1e39, np.inf, -np.inf, np.nan]
    rng = np.random.default_rng(3)
    with np.errstate(over="ignore", invalid="ignore"):
        pool = np.asarray(specials, dtype=np.float64).astype(dtype)
    for _ in range(200):
        x = rng.choice(pool, size=(int(rng.integers(1, 4)), 4))
        got = fused(x)
        try:
            want = check_raw(x, 4)
        except InputError:
            assert got is None
            continue
        if got is not None:
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    assert fused(np.ones((2, 4), dtype=dtype)) is not None


def test_explicit_chunk_rows_is_kept(tmp_path, monkeypatch):
    """``chunk_rows=K`` runs more than K rows in calls of K rows, small batches included."""
    artifact = _artifacts()["codes"]
    save_artifact(artifact, tmp_path / "m.bnc")
    rt = load_runtime(tmp_path / "m.bnc", chunk_rows=2)
    calls = []
    inner = rt._run
    monkeypatch.setattr(rt, "_run", lambda checked: calls.append(len(checked)) or inner(checked))
    x = np.zeros((5, len(CARDS)), dtype=np.int64)
    rt.run(x)
    assert calls == [2, 2, 1]
    calls.clear()
    rt.run(x[:2])
    assert calls == [2]


def test_subclass_check_is_not_bypassed(tmp_path):
    seen = []

    class Checking(ReferenceAdapter):
        def check(self, x):
            seen.append(np.asarray(x).shape)
            return super().check(x)

    save_artifact(_artifacts()["codes"], tmp_path / "m.bnc")
    rt = Checking(tmp_path / "m.bnc")
    x = np.zeros((1, len(CARDS)), dtype=np.int64)
    rt.run(x)
    rt.predict(x)
    assert seen == [(1, len(CARDS))] * 2
    assert load_runtime(tmp_path / "m.bnc")._small_batches and not rt._small_batches


# -- threads --------------------------------------------------------------------------------------
@pytest.mark.parametrize("runtime", THREAD_SAFE)
def test_threads_get_their_own_outputs(models, runtime):
    rt = models(runtime, "codes")
    n_threads, calls = 6, 200
    rng = np.random.default_rng(9)
    rows = [rng.integers(0, CARDS, size=(int(rng.integers(1, 4)), len(CARDS))) for _ in range(n_threads * 8)]
    expected = [_full_run(rt, x) for x in rows]
    barrier = threading.Barrier(n_threads)
    failures: list[str] = []

    def work(t: int) -> None:
        barrier.wait()
        for k in range(calls):
            i = (t * 8 + k) % len(rows)
            scores, labels = rt.run(rows[i])
            if not (np.array_equal(scores, expected[i][0]) and np.array_equal(labels, expected[i][1])):
                failures.append(f"thread {t} call {k}: outputs of rows {i} differ")
            if not np.array_equal(rt.predict(rows[i]), expected[i][1]):
                failures.append(f"thread {t} call {k}: labels of rows {i} differ")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, failures[:5]


def _full_run(rt, x):
    rt_full = _full(rt)
    try:
        return rt_full.run(x)
    finally:
        del rt.__dict__["_fused_check"]


# -- onnxruntime: outputs bound once per thread ---------------------------------------------------
def test_onnxruntime_bound_outputs_are_session_run(models, tmp_path):
    """The IOBinding path of ``invoke`` gives ``InferenceSession.run``'s outputs bit for bit, in
    arrays the caller owns, for codes, raw and DNN files and every batch size up to FAST_ROWS."""
    pytest.importorskip("onnxruntime")
    from bnc_deploy.testing import random_dnn_artifact
    from bnc_deploy.verify import export_path

    dnn = load_runtime(
        export_path(random_dnn_artifact(5, architecture="fc", activation="sign", bits=2), tmp_path / "d.onnx", "onnx")
    )
    rng = np.random.default_rng(4)
    for rt in (models("onnxruntime", "codes"), models("onnxruntime", "raw"), dnn):
        assert rt._bindable_outputs() is not None
        for n in (1, 2, 3, 17, FAST_ROWS, FAST_ROWS + 1):
            if rt.raw_inputs:
                x = rng.normal(0.0, 3.0, size=(n, rt.n_features))
            else:
                x = rng.integers(0, rt.cardinalities, size=(n, rt.n_features))
            prepared = rt.prepare(x)
            got = rt.invoke(prepared)
            want = rt.session.run(rt._outputs, prepared)
            for a, b in zip(got, want):
                assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
            again = rt.invoke(rt.prepare(np.zeros_like(x)))
            assert all(a is not b for a, b in zip(got, again))
            for a, b in zip(got, want):  # a later call did not rewrite the returned arrays
                assert a.tobytes() == b.tobytes()
        bound = set(rt._local.bound)  # this thread's bindings (earlier tests may have added some)
        assert {1, 2, 3, 17, FAST_ROWS} <= bound and FAST_ROWS + 1 not in bound  # that one ran through session.run
