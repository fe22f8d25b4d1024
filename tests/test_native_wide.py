"""The native runtime's rows-as-lanes kernel (``runtimes/native_kernel.c``, section ``rows_lanes``).

Where the compiler targets AVX-512 BW + VBMI, a model whose every feature table has at most 256
entries, whose sums fit 16-bit lanes and whose estimated cost is lower than the class-lanes
kernel's runs its batches 64 rows at a time with rows as byte lanes. These tests pin the choice
(wide models with few classes: rows as lanes; few features, many classes: classes as lanes) and
check every output against the NumPy reference on every row: each input dtype, tables of every
size class (one, two and four 64-code vectors), 3 and 8 bits, blocks with a tail, invalid rows
inside a block, threads.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from bnc_deploy.formats.checkset import random_rows
from bnc_deploy.reference.bnc import ReferencePredictor
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.verify import export_file

CC = shutil.which(os.environ.get("CC") or "cc")
pytestmark = pytest.mark.skipif(CC is None, reason="the native runtime tests need a C compiler (cc)")


def _targets_vbmi() -> bool:
    """Whether the native runtime's default flags (-march=native) enable AVX-512 BW and VBMI."""
    if CC is None or os.environ.get("BNC_DEPLOY_NATIVE_CFLAGS"):
        return False
    done = subprocess.run(
        [CC, "-march=native", "-dM", "-E", "-x", "c", os.devnull], capture_output=True, text=True, check=False
    )
    return done.returncode == 0 and "__AVX512VBMI__" in done.stdout and "__AVX512BW__" in done.stdout


VBMI = _targets_vbmi()


def load(artifact, folder, name):
    path = folder / f"{name}.h"
    report = export_file(artifact, path, "c")
    assert report.exact and report.runtime == "native"
    return load_runtime(path, "native", threads=1)


def kernel(rt) -> int:
    return int(rt._lib.bncn_kernel())


def wide(seed: int, *, tan: bool, bits: int = 3, d: int = 96, n_classes: int = 6, cards=None):
    rng = np.random.default_rng(seed)
    cards = cards if cards is not None else rng.integers(2, 9, size=d)
    return random_bnc_artifact(rng, d=d, n_classes=n_classes, tan=tan, bits=bits, cardinalities=list(cards))


def rows_with_invalid(artifact, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random rows, some with one invalid code (negative, at |X_i|, huge); and the invalid mask."""
    rng = np.random.default_rng(seed)
    x = random_rows(artifact, n, seed=seed).astype(np.int64)
    bad = rng.choice(n, size=max(1, n // 9), replace=False)
    cols = rng.integers(0, artifact.n_features, size=bad.size)
    values = rng.choice([-1, 255, 1 << 40], size=bad.size)
    x[bad, cols] = np.where(values == 255, np.asarray(artifact.cardinalities)[cols], values)
    invalid = np.zeros(n, dtype=bool)
    invalid[bad] = True
    return x, invalid


def assert_exact(rt, artifact, x) -> None:
    ref = ReferencePredictor(artifact)
    for dtype in (np.int64, np.int32, np.uint8):
        cast = x.astype(dtype)
        # the dtype may wrap a value into range (int32(2^40) = 0): validity is that of the cast codes
        codes = cast.astype(np.int64)
        still = ~((codes >= 0) & (codes < np.asarray(artifact.cardinalities))).all(axis=1)
        scores, labels, refused = rt._call(np.ascontiguousarray(cast), True)
        valid = ~still
        assert refused == int(still.sum())
        assert (labels[still] == -1).all() and np.isnan(scores[still]).all()
        ok = cast[valid].astype(np.int64)
        assert np.array_equal(labels[valid], ref.predict(ok))
        assert np.array_equal(scores[valid], ref.log_joint(ok))
        _, only_labels, _ = rt._call(np.ascontiguousarray(cast), False)
        assert np.array_equal(only_labels, labels)


CASES = [
    # (name, tan, bits, d, classes, cards): table entries per feature below 64, 128 and 256
    ("nb-small", False, 3, 96, 6, None),
    ("nb-8bit", False, 8, 70, 10, None),
    ("nb-64", False, 3, 40, 4, [64] * 40),
    ("tan-128", True, 3, 48, 5, [11] * 48),
    ("tan-256", True, 3, 40, 6, [16] * 40),
    ("tan-mixed", True, 4, 130, 3, None),
    # few features: uint8 rows gathered by windows (a width not a multiple of 8); 1 and 2 bits; an odd
    # number of classes (two classes per table byte for up to 3 bits, the last one alone)
    ("nb-36-2bit", False, 2, 36, 7, None),
    ("nb-21-1bit", False, 1, 21, 3, None),
    ("tan-36-odd", True, 3, 36, 7, [12] * 36),
]


@pytest.mark.skipif(not VBMI, reason="rows as lanes needs a compiler targeting AVX-512 BW + VBMI (-march=native)")
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rows_as_lanes_match_the_reference_on_every_row(tmp_path, case):
    name, tan, bits, d, n_classes, cards = case
    artifact = wide(len(name), tan=tan, bits=bits, d=d, n_classes=n_classes, cards=cards)
    rt = load(artifact, tmp_path, name)
    assert kernel(rt) == 1
    # whole blocks; blocks and a tail (below 16 rows: the class-lanes kernel; from 16: a part block)
    for n in (15, 16, 17, 64, 100, 129, 200, 1000, 1284):
        x, invalid = rows_with_invalid(artifact, n, seed=n)
        assert_exact(rt, artifact, x)
        assert invalid.any()
    x = random_rows(artifact, 3 * 8192, seed=3).astype(np.int64)
    threaded = load_runtime(tmp_path / f"{name}.h", "native", threads=3)
    assert np.array_equal(threaded.predict(x), ReferencePredictor(artifact).predict(x))


def test_kernel_choice_by_shape(tmp_path):
    """Few features and many classes keep classes as lanes (one vector holds every class); many
    features and few classes take rows as lanes where the compiler offers it; a table of more than
    256 codes always keeps classes as lanes."""
    letter_like = wide(1, tan=False, d=16, n_classes=26)
    assert kernel(load(letter_like, tmp_path, "letter_like")) == 0
    usps_like = wide(2, tan=False, d=256, n_classes=10)
    assert kernel(load(usps_like, tmp_path, "usps_like")) == int(VBMI)
    too_big = wide(3, tan=True, d=64, n_classes=4, cards=[17] * 64)  # 17 x 17 = 289 codes per table
    assert kernel(load(too_big, tmp_path, "too_big")) == 0
    x, _ = rows_with_invalid(too_big, 200, seed=5)
    assert_exact(load_runtime(tmp_path / "too_big.h", "native"), too_big, x)


@pytest.mark.parametrize("seed", range(6))
def test_random_shapes_match_the_reference(tmp_path, seed):
    """Random widths, class counts, cardinalities (tables up to 256 codes), bits and structures,
    whichever kernel each gets: identical outputs on every row, invalid rows included."""
    rng = np.random.default_rng(100 + seed)
    d = int(rng.integers(1, 300))
    tan = bool(rng.integers(0, 2)) and d > 1
    cards = rng.integers(1, 17 if tan else 65, size=d)
    artifact = random_bnc_artifact(
        rng, d=d, n_classes=int(rng.integers(1, 14)), tan=tan, bits=int(rng.integers(1, 9)), cardinalities=list(cards)
    )
    rt = load(artifact, tmp_path, f"random{seed}")
    x, invalid = rows_with_invalid(artifact, int(rng.integers(64, 700)), seed=seed)
    assert invalid.any()
    assert_exact(rt, artifact, x)


GUARD_SCRIPT = r"""
import ctypes, mmap, sys
import numpy as np
from bnc_deploy.runtimes.base import load_runtime
rt = load_runtime(sys.argv[1], "native", threads=1)
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
d, page = rt.n_features, mmap.PAGESIZE
for n in [int(v) for v in sys.argv[2].split(",")]:
    size = -(-n * d // page) * page
    buf = mmap.mmap(-1, size + page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    if libc.mprotect(base + size, page, 0) != 0:  # PROT_NONE: a read past the array faults
        raise OSError(ctypes.get_errno(), "mprotect")
    x = np.frombuffer(buf, dtype=np.uint8, count=n * d, offset=size - n * d).reshape(n, d)
    codes = np.load(sys.argv[3])[:n]
    x[...] = codes
    got = rt.predict(x)
    np.save(sys.argv[4] + f"_{n}.npy", got)
print("ok")
"""


@pytest.mark.skipif(not VBMI, reason="rows as lanes needs a compiler targeting AVX-512 BW + VBMI (-march=native)")
@pytest.mark.skipif(os.name != "posix", reason="needs mmap and mprotect")
def test_uint8_rows_are_not_read_past_the_array(tmp_path):
    """uint8 batches end right before an unreadable page: every count of rows gives the reference's
    labels and no fault (the gather masks its loads past the array's last byte). In a subprocess, so
    that a fault fails this test alone."""
    import sys

    artifact = wide(7, tan=True, bits=3, d=36, n_classes=6, cards=[12] * 36)
    rt = load(artifact, tmp_path, "guard")
    assert kernel(rt) == 1
    counts = list(range(1, 140)) + [255, 256, 257, 1284]
    codes = random_rows(artifact, max(counts), seed=9).astype(np.uint8)
    np.save(tmp_path / "codes.npy", codes)
    script = tmp_path / "guard.py"
    script.write_text(GUARD_SCRIPT)
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            str(tmp_path / "guard.h"),
            ",".join(map(str, counts)),
            str(tmp_path / "codes.npy"),
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    ref = ReferencePredictor(artifact)
    for n in counts:
        assert np.array_equal(np.load(tmp_path / f"out_{n}.npy"), ref.predict(codes[:n].astype(np.int64))), n
