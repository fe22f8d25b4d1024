"""``--lowering auto``: time every lowering an exporter declares in the format's runtime, keep the fastest.

Used by the verifier (:func:`bnc_deploy.verify.export_file`) before it builds the file it
publishes; an exporter never runs what it builds and refuses ``auto`` itself.

The candidates are every declared lowering but ``auto`` (ONNX: ``gather``, ``onehot-fc``,
``gather-grouped``) and, for ONNX files (``pack_words`` declared), ``gather`` and
``gather-grouped`` with it (candidates ``gather+pack-words``, ``gather-grouped+pack-words``). Each
file is built with the caller's other options and sealed like the final one, written to a private
temporary folder, loaded in the exporter's runtime with one thread, and timed on seeded random
valid rows (raw-input files get the rows' raw representatives). Only the runtime's own call is
timed (``RuntimeAdapter.invoke`` on prepared input: the adapter's checks cost every candidate
alike). The candidates take turns in :data:`ROUNDS` rounds of about :data:`ROUND_SECONDS` each, so
a noisy machine slows them alike; the score is the median call (a candidate whose first call is
over :data:`SLOW_FACTOR` times the fastest first call keeps that call as its time). A lowering the
exporter refuses for this model (say, ``gather-grouped`` with very large cardinalities,
``pack_words`` with float tables) is skipped and its reason recorded.

Which batch: with ``--lowering-batch N``, the candidates are timed at ``N`` rows and the fastest
is kept. Without it, they are timed at 1 row and at :data:`LARGE_BATCH` rows, and the pick is the
fastest at :data:`LARGE_BATCH` among the candidates whose 1-row call is within
:data:`LATENCY_SLACK` of the fastest 1-row call (the others are not timed at the large batch):
a graph that serves large batches at full speed and single rows within a small factor of the
best, never the graph that is fastest at 1 row and several times slower on a test set.

The record (metadata ``lowering_auto`` of the published file, and the export report)::

    {"batch": 4096, "runtime": "onnxruntime", "threads": 1, "chosen": "gather-grouped",
     "candidate": "gather-grouped+pack-words", "median_seconds": {"gather": 0.021, ...},
     "refused": {"name": "reason", ...},
     # without --lowering-batch only:
     "latency_batch": 1, "latency_median_seconds": {"gather": 1.8e-05, ...},
     "not_timed_at_batch": {"onehot-fc": "1-row call 124.2x the fastest (> 2.0x)"}}

``chosen`` is the lowering (metadata ``lowering``), ``candidate`` the candidate's name. The choice
holds for this machine and runtime version; the timings say what it was based on. Exactness is
not part of the choice: every candidate is exact where the model is (the chosen file is verified
like any other before it is published).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bnc_deploy.errors import ExportError
from bnc_deploy.formats.bnc import AUTO_LOWERING
from bnc_deploy.validation import random_valid_codes

#: Without ``--lowering-batch``: the candidates are timed at 1 row and at this many.
LARGE_BATCH = 4096
#: Without ``--lowering-batch``: the pick is fastest at LARGE_BATCH among the candidates whose
#: 1-row call takes at most this factor of the fastest 1-row call.
LATENCY_SLACK = 2.0
#: A candidate whose first call takes more than this factor of the fastest first call is not
#: timed in rounds (its first call is its time): one-hot products at thousands of rows take seconds.
SLOW_FACTOR = 20.0
#: Lowerings also tried with ``pack_words`` (exporters/onnx_bnc.py), as ``<lowering>+pack-words``.
PACKED_LOWERINGS = ("gather", "gather-grouped")
#: Rounds in which the candidates take turns.
ROUNDS = 5
#: Target seconds of calls per candidate and round (at least MIN_CALLS calls).
ROUND_SECONDS = 0.04
MIN_CALLS = 3


def wants_auto(options: dict) -> bool:
    return options.get("lowering") == AUTO_LOWERING


def candidates(declared: dict, format: str = "onnx") -> dict[str, dict]:
    """``{candidate name: options}``: every declared lowering but ``auto``, and (ONNX files) those
    of :data:`PACKED_LOWERINGS` also with ``pack_words`` (the ORT exporter declares the option too,
    but its own lookup graph for ``gather`` does not pack)."""
    found: dict[str, dict] = {}
    for lowering in declared["lowering"].choices:
        if lowering == AUTO_LOWERING:
            continue
        found[lowering] = {"lowering": lowering}
        if lowering in PACKED_LOWERINGS and "pack_words" in declared and format == "onnx":
            found[f"{lowering}+pack-words"] = {"lowering": lowering, "pack_words": True}
    return found


def choose_lowering(artifact, format: str, options: dict, *, build, key: bytes | None = None) -> tuple[dict, dict]:
    """``(options with the chosen lowering and its record, record)`` (see the module docstring).

    ``build``: the verifier's ``build(artifact, format, key=, **options) -> (sealed bytes, options)``
    (passed in: the verifier imports this module, not the other way round)."""
    from bnc_deploy.exporters.base import exporter_for

    spec = exporter_for(artifact.kind, format)
    declared = {o.name: o for o in spec.options}
    if "lowering" not in declared or AUTO_LOWERING not in declared["lowering"].choices:
        raise ExportError(f"--lowering auto is not offered by the {format} exporter")
    batch = options.get("lowering_batch")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ExportError(f"--lowering-batch must be a positive integer, got {batch!r}")
    batches = [batch] if batch is not None else [1, LARGE_BATCH]
    tried = candidates(declared, format)
    common = {k: v for k, v in options.items() if k not in ("lowering", "lowering_timings", "pack_words")}
    refused: dict[str, str] = {}
    seconds: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bnc-lowering-") as folder:
        paths = {}
        for name, chosen_options in tried.items():
            try:
                data, _ = build(artifact, format, key=key, **common, **chosen_options)
            except ExportError as exc:
                refused[name] = str(exc)
                continue
            paths[name] = Path(folder) / f"{len(paths)}{spec.extension}"
            paths[name].write_bytes(data)
        if not paths:
            raise ExportError(
                "--lowering auto: every lowering was refused for this model: "
                + "; ".join(f"{k}: {v}" for k, v in refused.items())
            )
        slow: dict[str, str] = {}
        for rows in batches:
            codes = random_valid_codes(artifact.cardinalities, rows, 0)
            timed = {n: p for n, p in paths.items() if n not in slow}
            seconds[rows] = _time({n: _runner(p, spec.runtime, artifact, codes, key) for n, p in timed.items()})
            if rows != batches[-1]:  # too slow at 1 row to be picked: not timed at the large batch
                fastest = min(seconds[rows].values())
                slow = {
                    n: f"1-row call {t / fastest:.1f}x the fastest (> {LATENCY_SLACK}x)"
                    for n, t in seconds[rows].items()
                    if t > LATENCY_SLACK * fastest
                }
    chosen = _least_worst(seconds)
    record = {
        "batch": batches[-1],
        "runtime": spec.runtime,
        "threads": 1,
        "chosen": tried[chosen]["lowering"],
        "candidate": chosen,
        "median_seconds": seconds[batches[-1]],
        "refused": refused,
    }
    if len(batches) > 1:
        record["latency_batch"], record["latency_median_seconds"] = batches[0], seconds[batches[0]]
        record["not_timed_at_batch"] = slow
    resolved = {**options, **tried[chosen], "lowering_timings": json.dumps(record, sort_keys=True)}
    return resolved, record


def _least_worst(seconds: dict[int, dict[str, float]]) -> str:
    """One batch: the fastest candidate. Two (1 row, then :data:`LARGE_BATCH`): the fastest at the
    large batch among those whose 1-row call is within :data:`LATENCY_SLACK` of the fastest 1-row
    call (ties: the first declared)."""
    *small, large = seconds.values()
    names = [n for n in large if not small or small[0][n] <= LATENCY_SLACK * min(small[0].values())]
    return min(names or list(large), key=lambda name: large[name])


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
    """Median seconds per call of each runner, interleaved over :data:`ROUNDS` rounds (see
    :data:`SLOW_FACTOR` for a candidate far slower than the others)."""
    first = {}
    for name, run in runners.items():
        started = time.perf_counter()
        run()
        first[name] = max(time.perf_counter() - started, 1e-7)
    fastest = min(first.values())
    timed = {name: run for name, run in runners.items() if first[name] <= SLOW_FACTOR * fastest}
    calls = {name: max(MIN_CALLS, int(ROUND_SECONDS / first[name])) for name in timed}
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(ROUNDS):
        for name, run in timed.items():
            for _ in range(calls[name]):
                started = time.perf_counter()
                run()
                samples[name].append(time.perf_counter() - started)
    return {name: float(np.median(samples[name])) if name in timed else first[name] for name in runners}
