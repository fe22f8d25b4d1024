"""The ``bnc-profile --json`` row: its keys (a contract: only ever added to) and the part every
row of a model file shares - description, analytic costs and the graph count."""

from __future__ import annotations

from bnc_deploy.profiling.facts import ModelFacts

#: Keys every --json row has (scripts rely on them; only ever added to).
JSON_KEYS = (
    "file",
    "format",
    "model_kind",
    "structure",
    "lowering",
    "bits",
    "quantized",
    "runtime",
    "threads",
    "dataset",
    "fold",
    "n_test_rows",
    "test_error",
    "test_error_source",
    "n_parameters",
    "size_bits",
    "n_ops",
    "argmax_comparisons",
    "addressing_ops",
    "graph_ops",
    "graph_param_bits",
    "graph_storage_bits",
    "graph_macs",
    "graph_lookups",
    "graph_categories",
    "graph_complete",
    "graph_unknown_ops",
    "graph_matches_analytic",
    "latency_mode",
    "latency_input",
    "latency_us_p50_batch1",
    "latency_us_p99_batch1",
    "latency_us_mean_batch1",
    "latency_runs",
    "throughput_rows_per_s",
    "throughput_batch",
    "file_bytes",
    "cpu",
    "environment",
    "pareto",
    "notes",
    # --target (emulated; None on host rows): the file run on the target vs the same file on this host
    "target",
    "target_method",
    "target_label_agreement",
    "target_exact",
    "target_max_abs_score_diff",
    "target_reference_exact",
    "target_check_set",
    "target_ok",
)
#: Operation categories of the graph count reported in ``graph_categories`` (plus ``folded``).
GRAPH_CATEGORIES = ("arithmetic", "addressing", "binning", "guard", "argmax", "rescale", "load-time")


def base_row(facts: ModelFacts, env: dict) -> dict:
    """A row with every key of :data:`JSON_KEYS` (None where unknown) and the file's facts filled in."""
    costs, count = facts.costs, facts.graph
    row = dict.fromkeys(JSON_KEYS)
    row.update(
        file=facts.file,
        format=facts.format,
        model_kind=facts.model_kind,
        structure=facts.structure,
        lowering=facts.lowering,
        bits=facts.bits,
        quantized=facts.quantized,
        n_parameters=costs.n_parameters,
        size_bits=costs.size_bits,
        n_ops=costs.n_ops,
        argmax_comparisons=costs.argmax_comparisons,
        addressing_ops=costs.addressing_ops,
        file_bytes=facts.file_bytes,
        cpu=env["cpu"],
        environment=env,
        notes=list(facts.notes),
    )
    if count is not None:
        totals = count.totals()
        check = count.compare(costs.size_bits, costs.n_ops)
        row.update(
            graph_ops=count.paper_ops,
            graph_param_bits=count.param_bits,
            graph_storage_bits=count.storage_bits,
            graph_macs=count.macs,
            graph_lookups=count.lookups,
            graph_categories={k: totals[k] for k in GRAPH_CATEGORIES} | {"folded": totals["folded_additions"]},
            graph_complete=count.complete,
            graph_unknown_ops=count.unknown_ops,
            graph_matches_analytic=check["size_bits"]["equal"] and check["n_ops"]["equal"],
        )
        if not count.complete:
            row["notes"].append(f"graph count incomplete: no rule for {', '.join(count.unknown_ops)}")
    return row


def copy_row(row: dict) -> dict:
    """A copy of ``row`` whose notes can be appended to without touching ``row``'s."""
    return dict(row, notes=list(row["notes"]))


def unique_models(rows: list[dict]) -> list[dict]:
    """One row per model file (the first runtime's), for plots."""
    seen, out = set(), []
    for r in rows:
        key = r.get("file")
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out
