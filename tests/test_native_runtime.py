"""The native runtime (``runtimes/native_kernel.py``, ``runtimes/native_adapter.py``): kernel, fast paths, cache.

``tests/test_export_c.py`` checks the exported header itself (strict C99, sanitizers); here the
adapter's generated wrapper is checked against the NumPy reference: every accumulator lane type
(uint8/16/32), class counts around the vector width, NB and TAN, packed tables, raw inputs; the
one-row and batch fast paths for each input dtype, and that every refusal still ends in the
precise InputError of the generic path; threads, the GIL, chunking, the load-time self-check
and the compile cache key.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from bnc_deploy.errors import ConfigError, InputError, RuntimeLoadError
from bnc_deploy.formats.checkset import random_rows
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.runtimes import native_adapter, native_kernel
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import discretizer_dict, random_bnc_artifact
from bnc_deploy.verify import export_file

CC = shutil.which(os.environ.get("CC") or "cc")
pytestmark = pytest.mark.skipif(CC is None, reason="the native runtime tests need a C compiler (cc)")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("native")


def export(artifact, folder, name: str, **options):
    """Export (verified in the native runtime, as every C export is) and return the path."""
    path = folder / f"{name}.h"
    if not path.exists():
        report = export_file(artifact, path, "c", **options)
        assert report.exact and report.runtime == "native"
    return path


def rows_of(artifact, n: int, seed: int) -> np.ndarray:
    return np.concatenate([np.asarray(artifact.check_x, dtype=np.int64), random_rows(artifact, n, seed=seed)])


def assert_like_reference(rt, artifact, x) -> None:
    ref = ReferencePredictor(artifact)
    scores, labels = rt.run(x)
    assert scores.dtype == np.float64 and labels.dtype == np.int64
    assert scores.shape == (len(x), artifact.n_classes) and labels.shape == (len(x),)
    np.testing.assert_array_equal(labels, ref.predict(x))
    np.testing.assert_array_equal(scores, ref.log_joint(x))
    np.testing.assert_array_equal(rt.predict(x), labels)
    np.testing.assert_array_equal(rt.log_joint(x), scores)


# -- lane types and layouts ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "d,bits,expected",
    [(16, 3, "uint8_t"), (84, 2, "uint8_t"), (85, 2, "uint16_t"), (256, 8, "uint16_t"), (257, 8, "uint32_t")],
)
def test_lane_type_is_the_narrowest_that_cannot_wrap(d, bits, expected):
    """(D + 1) * (2^B - 1) is the largest sum: 85 * 3 = 255 fits uint8, 86 * 3 does not."""
    assert native_kernel.lanes_type(d, bits)[0] == expected


def test_every_section_of_the_kernel_source_is_written_and_filled(monkeypatch):
    """runtimes/native_kernel.c (package data): NB/TAN x codes/raw write every section, each with all of its
    placeholders filled (string.Template.substitute raises on a missing one); the wrapper is plain C."""
    sections = native_kernel.template_sections("bnc_deploy.runtimes", native_kernel.TEMPLATE)
    written = set()

    class Recording(dict):
        def __getitem__(self, key):
            written.add(key)
            return super().__getitem__(key)

    monkeypatch.setattr(native_kernel, "template_sections", lambda package, name: Recording(sections))
    for tan in (False, True):
        for raw in (False, True):
            text = native_kernel.wrapper_source(
                "my_model", n_features=5, n_classes=3, bits=4, frac_bits=-2, tan=tan, raw=raw
            )
            assert text.startswith("/* Host-only batch kernels") and text.endswith("}\n")
            assert "$" not in text and "//@" not in text and "my_model_predict(row)" in text
            assert ("my_model_stride[i]" in text) == tan and ("bncn_batch_f64" in text) == raw
    assert written == set(sections)


CASES = [  # (seed, d, classes, tan, bits, int_bits, pack): lanes u8/u16/u32, classes around 16/32 lanes
    (1, 7, 5, False, 3, 2, False),
    (2, 9, 31, True, 4, 2, True),
    (3, 6, 32, False, 2, 1, False),
    (4, 6, 33, True, 5, 3, False),
    (5, 40, 3, True, 7, 3, True),
    (6, 5, 17, False, 8, 5, False),
    (7, 3, 2, False, 3, 2, False),
    (8, 4, 300, True, 2, 1, False),
]


@pytest.mark.parametrize("case", CASES, ids=[f"d{c[1]}-c{c[2]}-{'tan' if c[3] else 'nb'}-b{c[4]}" for c in CASES])
def test_batches_of_every_input_dtype_match_the_reference(folder, case):
    seed, d, c, tan, bits, int_bits, pack = case
    artifact = random_bnc_artifact(
        np.random.default_rng(seed), d=d, n_classes=c, tan=tan, bits=bits, int_bits=int_bits, n_check=40
    )
    rt = load_runtime(export(artifact, folder, f"case{seed}", pack_bits=pack), threads=1)
    x = rows_of(artifact, 500, seed)
    for dtype in (np.int64, np.int32, np.uint8, np.uint16, np.int8):  # the last two: generic path
        assert_like_reference(rt, artifact, x.astype(dtype))
    assert_like_reference(rt, artifact, np.asfortranarray(x))  # not C-contiguous
    assert_like_reference(rt, artifact, x[::2])  # a strided view
    for i in range(0, len(x), 37):  # one row, both shapes
        ref = ReferencePredictor(artifact)
        for row in (x[i], x[i : i + 1], x[i].astype(np.uint8), x[i : i + 1].astype(np.int32)):
            scores, label = rt.run(row)
            assert scores.shape == (1, c) and label.shape == (1,)
            np.testing.assert_array_equal(scores, ref.log_joint(x[i : i + 1]))
            np.testing.assert_array_equal(label, ref.predict(x[i : i + 1]))
            np.testing.assert_array_equal(rt.predict(row), label)


def test_results_do_not_alias_between_calls(folder):
    artifact = random_bnc_artifact(
        np.random.default_rng(1), d=7, n_classes=5, tan=False, bits=3, int_bits=2, n_check=40
    )
    rt = load_runtime(export(artifact, folder, "case1"))
    x = rows_of(artifact, 20, 9)
    first_scores, first_label = rt.run(x[0])
    keep = first_scores.copy(), first_label.copy()
    for row in x[1:]:
        rt.run(row)
        rt.predict(row)
    np.testing.assert_array_equal(first_scores, keep[0])
    np.testing.assert_array_equal(first_label, keep[1])


# -- refusals keep their precise messages ----------------------------------------------------------------
@pytest.fixture(scope="module")
def nb(folder):
    artifact = random_bnc_artifact(
        np.random.default_rng(21),
        d=6,
        n_classes=4,
        tan=True,
        bits=4,
        int_bits=2,
        n_check=30,
        cardinalities=[3, 1, 5, 2, 6, 4],
    )
    return artifact, load_runtime(export(artifact, folder, "nb21"), threads=1)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.uint64, np.int16])
@pytest.mark.parametrize("n", [1, 2, 300])
def test_invalid_values_raise_the_generic_input_error(nb, dtype, n):
    artifact, rt = nb
    x = rows_of(artifact, n, 3)[:n].astype(dtype)
    bad_row = n - 1
    for feature, value in [(2, 5), (1, 1), (5, 200)] + ([(0, -1), (3, -128)] if np.dtype(dtype).kind == "i" else []):
        y = x.copy()
        y[bad_row, feature] = value
        for call in (rt.run, rt.predict, rt.log_joint):
            with pytest.raises(InputError, match=rf"feature {feature} .* in row {bad_row},"):
                call(y)
        if n == 1:
            with pytest.raises(InputError, match=rf"feature {feature} "):
                rt.predict(y[0])
    if dtype == np.uint64:  # 2^64 - 1 wraps to -1 in the one-row buffer: still refused, with its true value
        y = x.copy()
        y[bad_row, 4] = np.iinfo(np.uint64).max
        with pytest.raises(InputError, match=r"feature 4 .* value 18446744073709551615"):
            rt.run(y)


@pytest.mark.parametrize(
    "bad, pattern",
    [
        (np.zeros((6, 1), dtype=np.int64), "shape"),
        (np.zeros((1, 1, 6), dtype=np.int64), "shape"),
        (np.zeros((2, 5), dtype=np.int64), "shape"),
        (np.zeros((1, 6)), "integer dtype"),
        (np.zeros(6, dtype=bool), "integer dtype"),
        (np.zeros(6, dtype=np.float32), "integer dtype"),
    ],
)
def test_bad_shapes_and_dtypes_are_refused_like_everywhere(nb, bad, pattern):
    _, rt = nb
    with pytest.raises(InputError, match=pattern):
        rt.run(bad)
    with pytest.raises(InputError, match=pattern):
        rt.predict(bad)


def test_empty_input_and_lists(nb):
    artifact, rt = nb
    scores, labels = rt.run(np.zeros((0, 6), dtype=np.int64))
    assert scores.shape == (0, 4) and labels.shape == (0,)
    x = rows_of(artifact, 5, 4)
    np.testing.assert_array_equal(rt.predict(x.tolist()), ReferencePredictor(artifact).predict(x))


def test_one_feature_models_have_no_zero_dimensional_fast_path(folder):
    artifact = random_bnc_artifact(
        np.random.default_rng(22), d=1, n_classes=3, tan=False, bits=3, int_bits=2, cardinalities=[4], n_check=4
    )
    rt = load_runtime(export(artifact, folder, "d1"))
    with pytest.raises(InputError, match="shape"):
        rt.run(np.array(2))
    assert_like_reference(rt, artifact, np.arange(4).reshape(4, 1))
    np.testing.assert_array_equal(rt.predict(np.array([3])), ReferencePredictor(artifact).predict([[3]]))


def test_the_c_guard_fires_when_the_metadata_lies(nb):
    """Valid by the metadata but refused by the C code: the generic path's RuntimeError, not a wrong answer."""
    artifact, rt = nb
    x = rows_of(artifact, 3, 5)
    rt.cardinalities = rt.cardinalities.copy()
    rt.cardinalities[2] += 1  # the adapter now believes value 5 of feature 2 is valid
    x[1, 2] = 5
    try:
        with pytest.raises(RuntimeError, match="input guard rejected row 1"):
            rt.run(x)
        with pytest.raises(RuntimeError, match="input guard rejected row 0"):
            rt.predict(x[1])
    finally:
        rt.cardinalities[2] -= 1


# -- raw inputs ------------------------------------------------------------------------------------------
RAW_CUTS = [[0.5], [-1.0, 0.1, 2.5], [], [1e-3, 7.0], [-3.0e38, 3.0e38]]


@pytest.mark.parametrize("tan", [False, True], ids=["nb", "tan"])
def test_raw_inputs_float32_and_float64(folder, tan):
    cards = [len(c) + 1 for c in RAW_CUTS]
    artifact = random_bnc_artifact(
        np.random.default_rng(30 + tan),
        tan=tan,
        bits=4,
        int_bits=2,
        n_classes=6,
        cardinalities=cards,
        discretizer=discretizer_dict(RAW_CUTS),
        n_check=10,
    )
    rt = load_runtime(export(artifact, folder, f"raw{tan}", raw_inputs=True), threads=1)
    ref = ReferencePredictor(artifact)
    rng = np.random.default_rng(0)
    x = rng.normal(0.5, 2.0, size=(400, len(cards)))
    x[:5, 4] = [3.4028235e38, -3.4028235e38, 3.0e38, 1e-45, -0.0]
    # above FLT_MAX, rounds down to it: refused in C, the generic path runs it
    x[5, 4] = float(np.finfo(np.float32).max) + 2.0**102
    for dtype in (np.float64, np.float32):
        xd = x.astype(dtype)
        codes = ref.discretize(xd.astype(np.float32).astype(np.float64))
        scores, labels = rt.run(xd)
        np.testing.assert_array_equal(labels, ref.predict(codes))
        np.testing.assert_array_equal(scores, ref.log_joint(codes))
        np.testing.assert_array_equal(rt.predict(xd), labels)
        for i in (0, 1, 5, 17):
            np.testing.assert_array_equal(rt.run(xd[i])[0], scores[i : i + 1])
            np.testing.assert_array_equal(rt.predict(xd[i : i + 1]), labels[i : i + 1])
    for value in (np.nan, np.inf, -np.inf, 1e39):
        y = x.copy()
        y[7, 3] = value
        with pytest.raises(InputError, match=r"feature 3 .* in row 7"):
            rt.run(y)
        with pytest.raises(InputError, match="feature 3"):
            rt.predict(y[7])
    with pytest.raises(InputError, match="real numbers"):
        rt.run(np.zeros((2, len(cards)), dtype=bool))


# -- threads, the GIL, chunks ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big(folder):
    artifact = random_bnc_artifact(
        np.random.default_rng(40), d=12, n_classes=10, tan=True, bits=3, int_bits=2, n_check=10, max_card=8
    )
    return artifact, export(artifact, folder, "big")


def test_threads_split_rows_and_give_the_same_answers(big):
    artifact, path = big
    n = 4 * native_kernel.MIN_ROWS_PER_THREAD + 123
    x = random_rows(artifact, n, seed=7)
    one = load_runtime(path, threads=1)
    want = one.run(x)
    for threads in (2, 3, 64):
        rt = load_runtime(path, threads=threads)
        got = rt.run(x)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(rt.predict(x), want[1])
        y = x.copy()
        y[n - 5, 3] = 99  # in the last thread's part
        with pytest.raises(InputError, match=rf"feature 3 .* in row {n - 5},"):
            rt.run(y)
    np.testing.assert_array_equal(want[1], ReferencePredictor(artifact).predict(x))


def test_batch_calls_release_the_gil(big):
    """Structurally (a CDLL function, not PyDLL) and in effect: another Python thread runs during the C call."""
    artifact, path = big
    rt = load_runtime(path, threads=1)
    for fn in rt._batch.values():
        assert not fn._flags_ & ctypes._FUNCFLAG_PYTHONAPI
    assert gil_free_calls(rt.predict, np.tile(random_rows(artifact, 1000, seed=8).astype(np.uint8), (2000, 1))) >= 2


def gil_free_calls(call, x, tries: int = 3) -> int:
    """In how many of ``tries`` calls ``call(x)`` (2M rows: tens of ms) a spinning Python thread made
    progress in the middle third of the call.

    Holding the GIL through the call, the C code lets the spinner run only before it starts and after
    it returns (with a 1 ms switch interval, a few ms at most under load); with the GIL released the
    spinner runs all along."""
    stamps, stop = [], threading.Event()

    def spin():
        while not stop.is_set():
            stamps.append(time.perf_counter_ns())

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    thread = threading.Thread(target=spin)
    thread.start()
    free = 0
    try:
        time.sleep(0.005)
        for _ in range(tries):
            del stamps[:]
            t0 = time.perf_counter_ns()
            call(x)
            t1 = time.perf_counter_ns()
            third = (t1 - t0) // 3
            free += any(t0 + third < t < t1 - third for t in stamps)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    return free


def test_the_gil_check_detects_a_call_that_holds_the_gil(big):
    """The same check on the same kernel called through ctypes.PyDLL (GIL held) says no: it can fail."""
    artifact, path = big
    rt = load_runtime(path, threads=1)
    held = ctypes.PyDLL(str(rt.library_path)).bncn_batch_u8
    held.restype, held.argtypes = ctypes.c_long, rt._batch[np.dtype(np.uint8)].argtypes
    x = np.tile(random_rows(artifact, 1000, seed=8).astype(np.uint8), (2000, 1))
    labels = np.empty(len(x), dtype=np.int64)
    assert gil_free_calls(lambda x: held(x.ctypes.data, len(x), None, labels.ctypes.data, 1), x) <= 1


def test_concurrent_one_row_calls_from_many_threads(big):
    artifact, path = big
    rt = load_runtime(path)
    x = random_rows(artifact, 3000, seed=9)
    want_scores, want_labels = ReferencePredictor(artifact).log_joint(x), ReferencePredictor(artifact).predict(x)

    def work(start):
        for i in range(start, len(x), 16):
            scores, label = rt.run(x[i])
            assert label[0] == want_labels[i] and np.array_equal(scores[0], want_scores[i])
            assert rt.predict(x[i])[0] == want_labels[i]
        return True

    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(work, range(16)))


def test_chunk_rows_auto_is_one_call_and_explicit_chunks_are_kept(big):
    artifact, path = big
    rt = load_runtime(path)
    assert rt.chunk_rows is None
    rt = load_runtime(path, chunk_rows=100)
    calls = []
    inner = rt._run
    rt._run = lambda checked: calls.append(len(checked)) or inner(checked)
    x = random_rows(artifact, 250, seed=10)
    scores, labels = rt.run(x)
    assert calls == [100, 100, 50]
    np.testing.assert_array_equal(labels, ReferencePredictor(artifact).predict(x))
    np.testing.assert_array_equal(scores, ReferencePredictor(artifact).log_joint(x))
    calls.clear()
    rt.run(x[:100])
    assert calls == []  # at most chunk_rows rows: the fast path's one call
    with pytest.raises(ConfigError, match="chunk_rows"):
        rt.chunk_rows = 0


def test_prepare_invoke_and_the_guard(nb):
    artifact, rt = nb
    x = rows_of(artifact, 50, 11)
    prepared = rt.prepare(x)
    assert prepared.dtype == np.uint8 and prepared.flags.c_contiguous
    scores, labels = rt.invoke(prepared)
    np.testing.assert_array_equal(labels, ReferencePredictor(artifact).predict(x))
    np.testing.assert_array_equal(scores, ReferencePredictor(artifact).log_joint(x))
    bad = prepared.copy()
    bad[3, 2] = 7
    scores, labels = rt.invoke(bad)
    assert labels[3] == -1 and np.isnan(scores[3]).all() and not np.isnan(np.delete(scores, 3, axis=0)).any()
    # one row: the slot call, same guard
    scores, labels = rt.invoke(bad[3:4])
    assert labels.tolist() == [-1] and np.isnan(scores).all() and scores.shape == (1, 4)
    scores, labels = rt.invoke(prepared[5:6])
    np.testing.assert_array_equal(scores, ReferencePredictor(artifact).log_joint(x[5:6]))
    np.testing.assert_array_equal(labels, ReferencePredictor(artifact).predict(x[5:6]))
    with pytest.raises(RuntimeError, match="prepare"):
        rt.invoke(x)  # int64 is not what prepare() makes


# -- the load-time self-check, flags and the cache key --------------------------------------------------------
def test_table_rows_cover_every_table_row():
    artifact = random_bnc_artifact(np.random.default_rng(50), d=6, n_classes=3, tan=True, bits=3, int_bits=2)
    rows = native_adapter.table_rows(artifact.cardinalities, list(artifact.parents))
    seen = np.unique(artifact.row_indices(rows))
    assert np.array_equal(seen, np.arange(artifact.n_rows))


def test_a_kernel_that_disagrees_with_the_header_is_refused(folder, monkeypatch, tmp_path):
    artifact = random_bnc_artifact(np.random.default_rng(51), d=5, n_classes=7, tan=False, bits=3, int_bits=2)
    path = export(artifact, folder, "selfcheck")
    original = native_adapter.wrapper_source

    def broken(*args, **kwargs):  # the last feature's table row is never added
        return original(*args, **kwargs).replace(
            "for (i = 0; i < NF; ++i) {\n        const bncn_vec",
            "for (i = 0; i < NF - 1; ++i) {\n        const bncn_vec",
        )

    monkeypatch.setattr(native_adapter, "wrapper_source", broken)
    monkeypatch.setenv("BNC_DEPLOY_NATIVE_CACHE", str(tmp_path))
    with pytest.raises(RuntimeLoadError, match="disagrees with the header's own functions"):
        load_runtime(path)


def test_cflags_override_and_the_cache_key(folder, monkeypatch, tmp_path):
    artifact = random_bnc_artifact(np.random.default_rng(52), d=4, n_classes=3, tan=False, bits=3, int_bits=2)
    path = export(artifact, folder, "flags")
    monkeypatch.setenv("BNC_DEPLOY_NATIVE_CACHE", str(tmp_path))
    default = load_runtime(path)
    assert default.compile_flags[:1] == ("-O3",)
    monkeypatch.setenv(native_adapter.CFLAGS_ENV, "-O1 -fno-tree-vectorize")
    plain = load_runtime(path)
    assert plain.compile_flags[:2] == ("-O1", "-fno-tree-vectorize")
    assert plain.library_path != default.library_path
    x = random_rows(artifact, 100, seed=1)
    np.testing.assert_array_equal(plain.run(x)[0], default.run(x)[0])
    # another CPU (or the same flags on another machine) never reuses this library
    monkeypatch.setattr(native_adapter, "cpu_identity", lambda: "vendor_id=Other\nflags=sse2")
    assert load_runtime(path).library_path != plain.library_path
    for unsafe in ("-O2 -ffast-math", "-Ofast"):
        monkeypatch.setenv(native_adapter.CFLAGS_ENV, unsafe)
        with pytest.raises(RuntimeLoadError, match=f"{native_adapter.CFLAGS_ENV} must not contain"):
            load_runtime(path)


def test_cpu_identity_names_this_cpu():
    ident = native_adapter.cpu_identity()
    assert "machine=" in ident
    if os.path.exists("/proc/cpuinfo") and "flags" in Path("/proc/cpuinfo").read_text():
        assert "flags=" in ident and ("model name=" in ident or "model=" in ident)


# -- the wrapper under AddressSanitizer + UBSan ---------------------------------------------------------------
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1"]

DRIVER = r"""
#include "wrapper.c"
#include <stdio.h>
#include <stdlib.h>

/* argv: rows, input file (int64 codes or float64 raw values); writes labels then scores (threads = 3). */
int main(int argc, char **argv)
{
    long n, k, refused;
    size_t size = RAW ? sizeof(double) : sizeof(int64_t);
    FILE *in;
    void *x;
    double *scores;
    int64_t *labels;
    if (argc != 3 || (in = fopen(argv[2], "rb")) == NULL) {
        return 2;
    }
    n = atol(argv[1]);
    x = malloc(size * (size_t)(n * NF));        /* exactly the rows: ASan sees any read past them */
    scores = malloc(sizeof(double) * (size_t)(n * NC));
    labels = malloc(sizeof(int64_t) * (size_t)n);
    if (fread(x, size, (size_t)(n * NF), in) != (size_t)(n * NF)) {
        return 3;
    }
    bncn_init();
#if RAW
    {
        float *xf = malloc(sizeof(float) * (size_t)(n * NF));
        for (k = 0; k < n * NF; ++k) {
            double v = ((double *)x)[k];
            xf[k] = (v <= FLT_MAX && v >= -FLT_MAX) ? (float)v : (float)NAN;  /* no out-of-range conversion */
        }
        bncn_batch_f32(xf, n, NULL, labels, 2);
        free(xf);
    }
    refused = bncn_batch_f64(x, n, scores, labels, 3);
#else
    {
        uint8_t *xu = malloc((size_t)(n * NF));
        int32_t *xi = malloc(sizeof(int32_t) * (size_t)(n * NF));
        for (k = 0; k < n * NF; ++k) {
            xu[k] = (uint8_t)((int64_t *)x)[k];
            xi[k] = (int32_t)((int64_t *)x)[k];
        }
        bncn_batch_i32(xi, n, NULL, labels, 2);
        bncn_batch_u8(xu, n, scores, labels, 1);
        free(xu);
        free(xi);
    }
    refused = bncn_batch_i64(x, n, scores, labels, 3);
#endif
    bncn_one_0();
    bncn_one_7();
    fwrite(labels, sizeof(int64_t), (size_t)n, stdout);
    fwrite(scores, sizeof(double), (size_t)(n * NC), stdout);
    free(x);
    free(scores);
    free(labels);
    fclose(in);
    return refused >= 0 ? 0 : 1;
}
"""


def _sanitizers_work(folder) -> bool:
    (folder / "probe.c").write_text("int main(void) { return 0; }\n")
    done = subprocess.run(
        [CC, *SANITIZE, "-o", str(folder / "probe"), str(folder / "probe.c")], capture_output=True, check=False
    )
    return (
        done.returncode == 0
        and subprocess.run([str(folder / "probe")], capture_output=True, check=False).returncode == 0
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tan-packed-u8", "nb-u16-33", "raw-tan"])
def test_the_wrapper_is_clean_under_sanitizers(tmp_path, kind):
    """The wrapper's kernels (every input type, threads, one-row slots) on exactly-sized buffers, with
    invalid rows mixed in, under ASan + UBSan: no out-of-bounds access, no undefined behaviour."""
    from bnc_deploy.formats.c import read_c_metadata
    from bnc_deploy.verify import build

    if not _sanitizers_work(tmp_path):
        pytest.skip("this compiler cannot build with -fsanitize=address,undefined")
    rng = np.random.default_rng(60)
    raw = kind.startswith("raw")
    if raw:
        cards = [len(c) + 1 for c in RAW_CUTS]
        artifact = random_bnc_artifact(
            rng, tan=True, bits=4, int_bits=2, n_classes=6, cardinalities=cards, discretizer=discretizer_dict(RAW_CUTS)
        )
    elif kind.startswith("tan"):
        artifact = random_bnc_artifact(rng, d=9, n_classes=31, tan=True, bits=4, int_bits=2)
    else:
        artifact = random_bnc_artifact(rng, d=40, n_classes=33, tan=False, bits=7, int_bits=3)
    data, _ = build(artifact, "c", pack_bits=kind.startswith("tan"), raw_inputs=raw)
    meta = read_c_metadata(data)
    (tmp_path / "model.h").write_bytes(data)
    (tmp_path / "wrapper.c").write_text(
        native_kernel.wrapper_source(
            "bnc",
            n_features=artifact.n_features,
            n_classes=artifact.n_classes,
            bits=meta["bits"],
            frac_bits=meta["frac_bits"],
            tan=meta["structure"] == "tan",
            raw=raw,
        )
    )
    (tmp_path / "driver.c").write_text(DRIVER)
    binary = tmp_path / "driver"
    done = subprocess.run(
        [
            CC,
            "-std=c99",
            "-Wall",
            "-Wextra",
            *SANITIZE,
            "-pthread",
            "-DBNCN_THREADS=1",
            f"-DRAW={int(raw)}",
            "-o",
            str(binary),
            str(tmp_path / "driver.c"),
            "-lm",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    n = 2 * native_kernel.MIN_ROWS_PER_THREAD + 7  # threads split it
    if raw:
        x = rng.normal(0, 3, size=(n, artifact.n_features)).astype(np.float32).astype(np.float64)
        x[5, 1], x[7, 0], x[9, 2] = np.nan, 1e300, -np.inf
    else:
        x = rng.integers(0, artifact.cardinalities, size=(n, artifact.n_features)).astype(np.int64)
        x[3, 0], x[4, 1], x[n - 1, -1] = -1, 300, 2**62
    (tmp_path / "in.bin").write_bytes(np.ascontiguousarray(x).tobytes())
    out = subprocess.run([str(binary), str(n), str(tmp_path / "in.bin")], capture_output=True, check=False)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-3000:]
    labels = np.frombuffer(out.stdout[: 8 * n], dtype=np.int64)
    scores = np.frombuffer(out.stdout[8 * n :], dtype=np.float64).reshape(n, artifact.n_classes)
    ref = ReferencePredictor(artifact)
    if raw:
        good = np.isfinite(x).all(axis=1) & (np.abs(x) <= np.finfo(np.float32).max).all(axis=1)
        codes = ref.discretize(x[good])
    else:
        good = ((x >= 0) & (x < artifact.cardinalities)).all(axis=1)
        codes = x[good]
    assert (~good).sum() == 3
    np.testing.assert_array_equal(labels[good], ref.predict(codes))
    np.testing.assert_array_equal(scores[good], ref.log_joint(codes))
    assert np.all(labels[~good] == -1) and np.isnan(scores[~good]).all()
