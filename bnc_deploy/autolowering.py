"""``--lowering auto``: time every lowering an exporter declares in the format's runtime, keep the fastest.

Used by the verifier (:func:`bnc_deploy.verify.export_file`) before it builds the file it
publishes; an exporter never runs what it builds and refuses ``auto`` itself.

For each declared lowering but ``auto`` (ONNX: ``gather``, ``onehot-fc``, ``gather-grouped``) the
file is built with the caller's other options and sealed like the final one, written to a private
temporary folder, loaded in the exporter's runtime with one thread, and timed on ``batch`` seeded
random valid rows (``--lowering-batch``, default 1; raw-input files get the rows' raw
representatives). Only the runtime's own call is timed (``RuntimeAdapter.invoke`` on prepared
input: the adapter's checks cost every candidate alike). The candidates take turns in
:data:`ROUNDS` rounds of about :data:`ROUND_SECONDS` each, so a noisy machine slows them alike;
the score is the median call. A lowering the exporter refuses for this model (say,
``gather-grouped`` with very large cardinalities) is skipped and its reason recorded.

The record (metadata ``lowering_auto`` of the published file, and the export report)::

    {"batch": 1, "runtime": "onnxruntime", "threads": 1, "chosen": "gather",
     "median_seconds": {"gather": 1.8e-05, ...}, "refused": {"name": "reason", ...}}

The choice holds for this machine and runtime version; the timings say what it was based on.
Exactness is not part of the choice: every candidate is exact where the model is (the chosen
file is verified like any other before it is published).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bnc_deploy.errors import ExportError
from bnc_deploy.formats.bnc import AUTO_LOWERING

#: Rounds in which the candidates take turns.
ROUNDS = 5
#: Target seconds of calls per candidate and round (at least MIN_CALLS calls).
ROUND_SECONDS = 0.04
MIN_CALLS = 3


def wants_auto(options: dict) -> bool:
    return options.get("lowering") == AUTO_LOWERING


def choose_lowering(artifact, format: str, options: dict, *, build, key: bytes | None = None) -> tuple[dict, dict]:
    """``(options with the chosen lowering and its record, record)`` (see the module docstring).

    ``build``: the verifier's ``build(artifact, format, key=, **options) -> (sealed bytes, options)``
    (passed in: the verifier imports this module, not the other way round)."""
    from bnc_deploy.exporters.base import exporter_for
    from bnc_deploy.validation import random_valid_codes

    spec = exporter_for(artifact.kind, format)
    declared = {o.name: o for o in spec.options}
    if "lowering" not in declared or AUTO_LOWERING not in declared["lowering"].choices:
        raise ExportError(f"--lowering auto is not offered by the {format} exporter")
    batch = options.get("lowering_batch")
    batch = 1 if batch is None else batch
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ExportError(f"--lowering-batch must be a positive integer, got {batch!r}")
    candidates = [c for c in declared["lowering"].choices if c != AUTO_LOWERING]
    rows = random_valid_codes(artifact.cardinalities, batch, 0)
    common = {k: v for k, v in options.items() if k not in ("lowering", "lowering_timings")}
    refused, runners = {}, {}
    with tempfile.TemporaryDirectory(prefix="bnc-lowering-") as folder:
        for lowering in candidates:
            try:
                data, _ = build(artifact, format, key=key, **common, lowering=lowering)
            except ExportError as exc:
                refused[lowering] = str(exc)
                continue
            path = Path(folder) / f"{lowering}{spec.extension}"
            path.write_bytes(data)
            runners[lowering] = _runner(path, spec.runtime, artifact, rows, key)
        if not runners:
            raise ExportError(
                "--lowering auto: every lowering was refused for this model: "
                + "; ".join(f"{k}: {v}" for k, v in refused.items())
            )
        seconds = _time(runners)
    chosen = min(seconds, key=seconds.get)
    record = {
        "batch": batch,
        "runtime": spec.runtime,
        "threads": 1,
        "chosen": chosen,
        "median_seconds": seconds,
        "refused": refused,
    }
    return {**options, "lowering": chosen, "lowering_timings": json.dumps(record, sort_keys=True)}, record


def _runner(path: Path, runtime: str, artifact, rows: np.ndarray, key: bytes | None):
    """A zero-argument call of the loaded file on the prepared rows."""
    from bnc_deploy.runtimes.base import load_runtime

    rt = load_runtime(path, runtime, threads=1, **({} if key is None else {"key": key}))
    fed = rows
    if rt.raw_inputs:
        from bnc_deploy.formats.bnc import raw_representatives

        fed = raw_representatives(artifact, rows)
    prepared = rt.prepare(fed)
    rt.invoke(prepared)  # warm-up (first-call costs)
    return lambda: rt.invoke(prepared)


def _time(runners: dict) -> dict[str, float]:
    """Median seconds per call of each runner, interleaved over :data:`ROUNDS` rounds."""
    calls = {}
    for name, run in runners.items():  # calls per round
        started = time.perf_counter()
        run()
        one = max(time.perf_counter() - started, 1e-7)
        calls[name] = max(MIN_CALLS, int(ROUND_SECONDS / one))
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(ROUNDS):
        for name, run in runners.items():
            for _ in range(calls[name]):
                started = time.perf_counter()
                run()
                samples[name].append(time.perf_counter() - started)
    return {name: float(np.median(values)) for name, values in samples.items()}
