"""The search's training: the kept configurations through the sweep engine, and the trained
candidates read back from the sweep tables, best validation error first (used by the search and
by the probes, :func:`train_probes`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bnc_deploy.fit.result import Candidate
from bnc_deploy.fit.space import SearchSpace, SpaceSettings, search_specs


def run_search_sweeps(
    space: SearchSpace,
    settings: SpaceSettings,
    data_spec: str,
    seed: int,
    out: Path,
    device: str,
    backend: str,
    progress: bool,
) -> tuple[list[Path], int, int]:
    """Train (or resume) the kept configurations, one sweep per record shape (BN, DNN);
    ``(sweep directories, trained now, already done)``. A DNN's selection group adds its layers
    and widths to the sweep's default (each size of a weight bit width is one cell), a learned
    TAN's its lambda_MS."""
    from bnc_deploy.sweep.runner import DEFAULT_GROUP_BY, SweepOptions, run_sweep

    directories, trained, skipped = [], 0, 0
    for spec in search_specs(space, settings, data_spec, seed):
        ident = hashlib.sha256(spec.to_json().encode()).hexdigest()[:12]
        directory = out / "sweep" / ident
        extra = ("layers", "hidden") if "weight_bits" in spec.draws else ()
        extra += ("size_penalty",) if "size_penalty" in spec.draws else ()
        options = SweepOptions(
            directory=directory,
            select="validation",
            device=device,
            backend=backend,
            keep="best",
            halving=settings.halving,
            resume=True,
            progress=progress,
            group_by=DEFAULT_GROUP_BY + extra,
        )
        summary = run_sweep(spec, options)
        directories.append(directory)
        trained, skipped = trained + summary.trained, skipped + summary.skipped
    return directories, trained, skipped


def ranked_candidates(sweep_dirs: Iterable[Path]) -> list[Candidate]:
    """The kept model of each cell, best validation error first (ties: fewer bits, then id)."""
    from bnc_deploy.sweep.table import ResultsTable

    out = []
    for sweep_dir in sweep_dirs:
        table = ResultsTable(sweep_dir)
        try:
            rows = [r for r in table.rows() if r.get("model_path") and r["status"] == "done"]
        finally:
            table.close()
        for row in rows:
            final = row.get("final") or {}
            out.append(
                Candidate(
                    id=row["id"],
                    config=dict(row["config"]),
                    val_error=final.get("val_error"),
                    test_error=final.get("test_error"),
                    size_bits=int(row["size_bits"]),
                    ops=int(row["ops"]),
                    model_path=str(Path(sweep_dir) / row["model_path"]),
                )
            )
    inf = float("inf")
    out.sort(key=lambda c: (inf if c.val_error is None else c.val_error, c.size_bits, c.id))
    return out


@dataclass(frozen=True)
class SweepPlace:
    """Where and how a search trains: the data, the seed, the output folder, the device and backend."""

    data_spec: str
    seed: int
    out: Path
    device: str = "cpu"
    backend: str = "local"


def train_probes(records: dict, settings: SpaceSettings, place: SweepPlace, folder: str) -> dict:
    """Train one short configuration per key of ``records`` (key -> sweep record) in
    ``place.out / folder`` (resumed by a rerun); key -> its model file, or None when it did not
    train. The probes of :mod:`bnc_deploy.fit.latency_probe` and :mod:`bnc_deploy.fit.size_probe`."""
    space = SearchSpace((), tuple(records.values()))
    where = (place.data_spec, place.seed, place.out / folder, place.device, place.backend)
    dirs, _, _ = run_search_sweeps(space, settings, *where, False)
    trained = ranked_candidates(dirs)
    paths = {}
    for key, record in records.items():
        match = [c for c in trained if all(c.config.get(k) == v for k, v in record.items())]
        paths[key] = match[0].model_path if match else None
    return paths
