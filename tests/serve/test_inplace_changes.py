"""A served file changed in place (not by write-then-rename) never crashes the server or changes
what a served version answers.

``cp new.tflite repo/m.tflite`` truncates and rewrites the same inode; a disk error or an editor
flips or zeroes bytes. Adapters load model files from bytes read once (``runtimes/base.py``), so
a loaded version is immune, and the repository refuses a damaged file by its seal and keeps the
last good version serving. Checked for every served format (``.onnx``, ``.ort``, ``.tflite``,
``.h``, ``.bnc``), for a long-lived :func:`load_runtime` (in a subprocess, so that a crash is a
failure, not the end of the test run) and for ``bnc-serve --poll`` under requests.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from serve_support import ServerProcess

from bnc_deploy.artifacts import save_artifact
from bnc_deploy.runtimes.base import load_runtime
from bnc_deploy.testing import random_bnc_artifact
from bnc_deploy.validation import random_valid_codes
from bnc_deploy.verify import export_path

CARDS = [4, 3, 5, 2, 4, 3]
#: Served suffix -> exporter format (None: the .bnc model file itself).
FORMATS = {".onnx": "onnx", ".ort": "ort", ".tflite": "tflite", ".h": "c", ".bnc": None}


def _available(suffix: str) -> bool:
    import importlib.util

    if suffix == ".tflite":
        return importlib.util.find_spec("tensorflow") is not None and importlib.util.find_spec("ai_edge_litert")
    if suffix == ".h":
        return shutil.which(os.environ.get("CC", "cc")) is not None
    return True


SUFFIXES = [s for s in FORMATS if _available(s)]


def _write_model(art, path: Path, suffix: str) -> bytes:
    fmt = FORMATS[suffix]
    if fmt is None:
        save_artifact(art, path)
    else:
        export_path(art, path, fmt)
    return path.read_bytes()


def _two_versions(folder: Path, suffix: str) -> tuple[bytes, bytes]:
    """Two files of one format with the same inputs and classes and different tables."""
    rng = np.random.default_rng(7)
    out = []
    for tag in ("a", "b"):
        art = random_bnc_artifact(rng, n_classes=4, tan=tag == "b", bits=3, int_bits=2, cardinalities=CARDS)
        out.append(_write_model(art, folder / f"stage_{tag}{suffix}", suffix))
    return out[0], out[1]


def _damage(path: Path, how: str) -> None:
    """Change ``path`` in place (same inode): ``truncate`` to half, ``flip`` a byte, ``zero`` a region."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        if how == "truncate":
            f.truncate(size // 2)
        elif how == "flip":
            f.seek(size // 2)
            b = f.read(1)
            f.seek(size // 2)
            f.write(bytes([b[0] ^ 0xFF]))
        else:
            f.seek(size // 4)
            f.write(b"\0" * (size // 2))


def _rewrite(path: Path, data: bytes) -> None:
    """What ``cp`` does to an existing file: truncate, then write the new content (same inode)."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(data)


_LONG_LIVED = r"""
import sys, numpy as np
from pathlib import Path
from bnc_deploy.runtimes.base import load_runtime
path, how = Path(sys.argv[1]), sys.argv[2]
x = np.load(sys.argv[3])
rt = load_runtime(path)
before = rt.run(x)
size = path.stat().st_size
with open(path, "r+b") as f:
    if how == "truncate":
        f.truncate(size // 2)
    elif how == "flip":
        f.seek(size // 2); b = f.read(1); f.seek(size // 2); f.write(bytes([b[0] ^ 0xFF]))
    elif how == "zero":
        f.seek(size // 4); f.write(b"\0" * (size // 2))
    else:
        f.truncate(0); f.write(Path(sys.argv[4]).read_bytes())
for _ in range(3):
    after = rt.run(x)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1]), "outputs changed"
print("same outputs")
"""


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("how", ["truncate", "flip", "zero", "rewrite"])
def test_long_lived_runtime_ignores_in_place_changes(tmp_path, suffix, how):
    """A loaded adapter computes the same after its file is damaged or rewritten in place (the
    process neither dies nor changes its answers)."""
    a, b = _two_versions(tmp_path, suffix)
    path = tmp_path / f"m{suffix}"
    path.write_bytes(a)
    np.save(tmp_path / "x.npy", random_valid_codes(np.asarray(CARDS), 64, 3))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _LONG_LIVED,
            str(path),
            how,
            str(tmp_path / "x.npy"),
            str(tmp_path / f"stage_b{suffix}"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "same outputs" in done.stdout, (
        f"{suffix} {how}: exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    )


def _digest(scores, labels, dtype) -> str:
    """Of the scores as the server's datatype (FP32 JSON numbers read back as float32) and the labels."""
    return hashlib.sha256(np.asarray(scores, dtype).tobytes() + np.asarray(labels, np.int64).tobytes()).hexdigest()


class _Client(threading.Thread):
    """Infer requests in a loop until stopped; every answer is checked against the outputs of the
    version it names (a request may also get 503 while no version serves)."""

    def __init__(self, port: int, model: str, x: np.ndarray, expected: dict[str, str], dtype) -> None:
        super().__init__(daemon=True)
        self.port, self.model, self.expected, self.dtype = port, model, expected, dtype
        self.body = json.dumps(
            {"inputs": [{"name": "x", "datatype": "INT64", "shape": list(x.shape), "data": x.ravel().tolist()}]}
        ).encode()
        self.stop = threading.Event()
        self.versions: dict[str, int] = {}
        self.problems: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                conn.request("POST", f"/v2/models/{self.model}/infer", body=self.body)
                r = conn.getresponse()
                status, body = r.status, r.read()
            except OSError as exc:
                self.problems.append(f"{self.model}: request failed ({exc})")
                return
            finally:
                conn.close()
            if status == 503:
                continue
            if status != 200:
                self.problems.append(f"{self.model}: status {status}: {body[:300]!r}")
                continue
            out = json.loads(body)
            got = {o["name"]: o["data"] for o in out["outputs"]}
            version = out["model_version"]
            self.versions[version] = self.versions.get(version, 0) + 1
            want = self.expected.get(version)
            if want is None:
                self.problems.append(f"{self.model}: answered as unknown version {version}")
            elif _digest(got["log_joint"], got["label"], self.dtype) != want:
                self.problems.append(f"{self.model}: outputs differ from version {version}'s")


@pytest.mark.slow
def test_server_keeps_serving_through_in_place_changes(tmp_path):
    """``bnc-serve --poll``: while clients request every model, each file is truncated, flipped and
    zeroed in place (then restored), and finally rewritten in place with a second version. The
    server never dies, answers 200 or 503 only, every answer matches the version it names, the
    damaged content never serves, and the rewritten version is served at the end."""
    repo = tmp_path / "repo"
    repo.mkdir()
    x = random_valid_codes(np.asarray(CARDS), 5, 11)
    plan = {}
    for suffix in SUFFIXES:
        stage = tmp_path / suffix.lstrip(".")
        stage.mkdir()
        a, b = _two_versions(stage, suffix)
        expected = {}
        # The server answers FP32 scores for exported files and FP64 for .bnc (as the runtime computes).
        dtype = np.float64 if suffix == ".bnc" else np.float32
        for data in (a, b):
            scores, labels = load_runtime(stage / f"check{suffix}", data=data).run(x)
            expected[hashlib.sha256(data).hexdigest()[:12]] = _digest(scores, labels, dtype)
        name = f"m_{suffix.lstrip('.')}"
        (repo / f"{name}{suffix}").write_bytes(a)
        plan[name] = (repo / f"{name}{suffix}", a, b, expected, dtype)
    with ServerProcess(repo, args=["--poll", "0.1"], ready_timeout=120) as proc:
        clients = [
            _Client(proc.http_port, name, x, expected, dtype) for name, (_, _, _, expected, dtype) in plan.items()
        ]
        for c in clients:
            c.start()
        try:
            for how in ("truncate", "flip", "zero"):
                for path, *_ in plan.values():
                    _damage(path, how)
                time.sleep(1.0)  # polls try the damaged files while requests run
                assert proc.proc.poll() is None, f"bnc-serve died after '{how}':\n{proc.log()[-3000:]}"
                for path, a, *_ in plan.values():
                    _rewrite(path, a)
                time.sleep(0.5)
            for path, _, b, *_ in plan.values():
                _rewrite(path, b)
            deadline = time.monotonic() + 60
            want = {name: hashlib.sha256(b).hexdigest()[:12] for name, (_, _, b, *_) in plan.items()}
            while time.monotonic() < deadline:
                status, index = proc.json("POST", "/v2/repository/index")
                serving = {e["name"]: e["version"] for e in index}
                if all(serving.get(n) == v for n, v in want.items()):
                    break
                time.sleep(0.2)
            assert all(serving.get(n) == v for n, v in want.items()), index
            time.sleep(0.5)  # requests on the rewritten versions
        finally:
            for c in clients:
                c.stop.set()
            for c in clients:
                c.join(60)
        assert proc.proc.poll() is None, f"bnc-serve died:\n{proc.log()[-3000:]}"
        for c in clients:
            assert not c.problems, c.problems[:5]
            assert set(c.versions) == set(plan[c.model][3]), (c.model, c.versions)
        assert proc.stop() == 0, proc.log()[-3000:]
