"""``kill -9`` during writes (issue 11 item 6): a process that writes a model file or an export over and
over is SIGKILLed at random moments. Afterwards the target is absent (killed before the first write
finished) or one complete version that loads and verifies, never a partial file. A killed writer
can leave its temporary file (``.NAME.<random>.tmpSUFFIX``, nothing else); it is listed by
:func:`bnc_deploy.fileio.stray_temporaries` and safe to delete when no writer runs.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rel_support import ROOT

KILLS = 8

MODEL_WRITER = r"""
import sys
import numpy as np
from bnc_deploy.artifacts import save_artifact
from bnc_deploy.testing import random_bnc_artifact

target = sys.argv[1]
art = random_bnc_artifact(np.random.default_rng(0), d=300, n_classes=20, max_card=60, tan=False, bits=None)
print("ready", flush=True)
i = 0
while True:
    art.feature_names[0] = f"version{i}"
    save_artifact(art, target)
    print(i, flush=True)
    i += 1
"""

EXPORT_WRITER = r"""
import sys
from bnc_deploy.artifacts import load_artifact
from bnc_deploy.verify import export_file

model, target = sys.argv[1], sys.argv[2]
art = load_artifact(model)
print("ready", flush=True)
i = 0
while True:
    export_file(art, target, "onnx", lowering=("gather", "onehot-fc")[i % 2])
    print(i, flush=True)
    i += 1
"""


def _kill_at_random(code: str, args: list, seed: int, window: float) -> int:
    """Start the writer, wait until it is ready, SIGKILL it after a random delay; versions written."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(random.Random(seed).uniform(0.0, window))
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    return len(out.split())


def _check_leftovers(target: Path) -> int:
    """Only the target and the documented temporaries may be there; delete those (the clean-up)."""
    from bnc_deploy.fileio import stray_temporaries

    strays = stray_temporaries(target)
    others = [p.name for p in target.parent.iterdir() if p != target and p not in strays]
    assert others == [], f"unexpected files after kill -9: {others}"
    for p in strays:
        assert p.name.startswith(f".{target.name}.") and p.name.endswith(f".tmp{target.suffix}")
        p.unlink()
    return len(strays)


def test_kill9_while_writing_model_files(tmp_path):
    from bnc_deploy.artifacts import load_artifact

    target = tmp_path / "big.bnc"
    seen_complete = 0
    for k in range(KILLS):
        _kill_at_random(MODEL_WRITER, [target], seed=k, window=1.0)
        if target.exists():
            artifact = load_artifact(target)  # ArtifactError (a failure here) if partial or mixed
            assert artifact.feature_names[0].startswith("version")
            seen_complete += 1
        else:
            assert seen_complete == 0, "a published file disappeared"
        _check_leftovers(target)
    assert seen_complete > 0


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    from bnc_deploy.artifacts import save_artifact
    from bnc_deploy.testing import random_bnc_artifact

    path = tmp_path_factory.mktemp("kill9") / "m.bnc"
    save_artifact(random_bnc_artifact(np.random.default_rng(3), d=12, n_classes=5, tan=True, bits=3, int_bits=2), path)
    return path


def test_kill9_while_exporting(tmp_path, small_model):
    pytest.importorskip("onnxruntime")
    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.reference import reference_predictor
    from bnc_deploy.runtimes.base import load_runtime
    from bnc_deploy.verify import verification_rows

    artifact = load_artifact(small_model)
    x, _ = verification_rows(artifact)
    reference = reference_predictor(artifact).log_joint(x)
    target = tmp_path / "m.onnx"
    seen_complete = 0
    for k in range(KILLS):
        _kill_at_random(EXPORT_WRITER, [small_model, target], seed=100 + k, window=1.0)
        if target.exists():
            rt = load_runtime(target, threads=1)  # RuntimeLoadError (a failure here) if partial
            scores, label = rt.run(x)
            np.testing.assert_array_equal(scores, reference)
            np.testing.assert_array_equal(label, np.argmax(reference, axis=1))
            seen_complete += 1
        _check_leftovers(target)
    assert seen_complete > 0
