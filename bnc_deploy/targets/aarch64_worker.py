"""The program ``bnc_deploy.targets.aarch64`` runs inside the emulated aarch64 root.

It is this package's own code (copied into the root's job folder in the installed layout), so
the files are opened and run by the same adapters as on the host::

    /venv/bin/python -m bnc_deploy.targets.aarch64_worker JOB.json

``JOB.json``: ``{"files": [{"path", "runtime" (or null: by extension), "rows" (.npy), "out" (.npz),
"verify_integrity"}]}``. For each file: ``load_runtime(path, runtime, threads=1)`` (integrity seal
checked unless ``verify_integrity`` is false: a signed file the host checked with its key), ``run(rows)``,
and the file's stored check set compared (:func:`bnc_deploy.formats.checkset.compare_check`);
the scores (float64, widened exactly from the runtime's float32) and labels go to ``out``. A file
that fails to load or run gets ``error`` (one line) and the others still run. Prints one JSON
object: ``machine``, ``python``, package ``versions`` and one entry per file.
"""

from __future__ import annotations

import json
import platform
import sys
from importlib import metadata as importlib_metadata
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    from bnc_deploy.formats.checkset import CHECK_KEY, check_inputs, compare_check
    from bnc_deploy.runtimes.base import load_runtime

    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(argv[0]).read_text())
    results = []
    for item in job["files"]:
        entry = {"path": item["path"]}
        try:
            rt = load_runtime(
                item["path"], item.get("runtime"), threads=1, verify_integrity=item.get("verify_integrity", True)
            )
            entry["runtime"] = rt.name
            scores, labels = rt.run(np.load(item["rows"]))
            np.savez(item["out"], scores=scores, labels=labels)
            if rt.metadata.get(CHECK_KEY) is not None:
                cx = check_inputs(rt.metadata, where=item["path"])
                c_scores, c_labels = rt.run(cx)
                entry["check_set"] = compare_check(rt.metadata, c_labels, c_scores) or "ok"
        except Exception as exc:  # noqa: BLE001 - reported per file: one broken file must not hide the others' results
            entry["error"] = f"{type(exc).__name__}: " + " ".join(str(exc).split())
        results.append(entry)
    versions = {}
    for name in ("numpy", "onnx", "onnxruntime", "ai-edge-litert"):
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            versions[name] = None
    print(
        json.dumps(
            {"machine": platform.machine(), "python": platform.python_version(), "versions": versions, "files": results}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
