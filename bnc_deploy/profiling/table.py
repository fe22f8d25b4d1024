"""The text table of ``bnc-profile`` (without ``--json``): one line per (file, runtime, threads),
the ``--target`` columns, the machine and the notes."""

from __future__ import annotations

from pathlib import Path

#: The versions shown under the table, in this order (when installed).
TABLE_VERSIONS = ("numpy", "onnxruntime", "ai-edge-litert", "tensorflow-cpu", "tensorflow")


def _fmt(value, spec: str = ",", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _short_name(row: dict) -> str:
    name = Path(str(row.get("file", ""))).name
    return name if len(name) <= 27 else "…" + name[-26:]


def format_table(rows: list[dict]) -> str:
    """One line per (file, runtime, threads); '*' marks Pareto-optimal models (size, ops, error)."""
    head = (
        f"{'file':<28} {'runtime':<11} {'thr':>3} {'error %':>7} {'size bits':>11} {'ops':>7} {'graph':>7} "
        f"{'p50 µs':>8} {'p99 µs':>8} {'rows/s':>11}"
    )
    lines = [head, "-" * len(head)]
    lines += [_row_line(r) for r in rows]
    env = next((r["environment"] for r in rows if r.get("environment")), None)
    lines.append("-" * len(head))
    lines += format_target_lines(rows)
    lines.append(
        "* Pareto-optimal in (size bits, ops, test error) per dataset; graph '=' : the exported graph's "
        "counted ops and parameter bits equal the analytic ones"
    )
    if env:
        v = env.get("versions", {})
        lines.append(
            f"CPU {env['cpu']} ({env['usable_cpus']} usable of {env['cpu_count']}), Python {env['python']}, "
            + ", ".join(f"{k} {v[k]}" for k in TABLE_VERSIONS if k in v)
        )
    notes = sorted({n for r in rows for n in (r.get("notes") or [])})
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def _row_line(r: dict) -> str:
    mark = "*" if r.get("pareto") else " "
    graph = r.get("graph_ops")
    graph_s = (
        "-"
        if graph is None and r.get("graph_matches_analytic") is None
        else ("=" if r.get("graph_matches_analytic") else _fmt(graph))
    )
    threads = "def" if r.get("runtime") == "onnxruntime" and r.get("threads") is None else _fmt(r.get("threads"))
    error = None if r.get("test_error") is None else 100 * r["test_error"]
    return (
        f"{mark}{_short_name(r):<27} {str(r.get('runtime') or '-'):<11} {threads:>3} {_fmt(error, '.2f'):>7} "
        f"{_fmt(r.get('size_bits')):>11} {_fmt(r.get('n_ops')):>7} {graph_s:>7} "
        f"{_fmt(r.get('latency_us_p50_batch1'), ',.1f'):>8} "
        f"{_fmt(r.get('latency_us_p99_batch1'), ',.1f'):>8} "
        f"{_fmt(r.get('throughput_rows_per_s')):>11}"
    )


def _yes_no(value) -> str:
    return "-" if value is None else ("yes" if value else "no")


def format_target_lines(rows: list[dict]) -> list[str]:
    """The --target columns (none when no row ran on a target)."""
    target_rows = [r for r in rows if r.get("target")]
    if not target_rows:
        return []
    lines = [
        (
            f"{'file':<28} {'target':<8} {'labels = host':>13} {'bit-identical':>13} {'max |Δ score|':>13} "
            f"{'= model':>7}  check set"
        )
    ]
    for r in target_rows:
        agree, diff = r.get("target_label_agreement"), r.get("target_max_abs_score_diff")
        lines.append(
            f" {_short_name(r):<27} {r['target']:<8} {_fmt(agree, '.4f'):>13} "
            f"{_yes_no(r.get('target_exact')):>13} "
            f"{_fmt(diff, '.3g'):>13} {_yes_no(r.get('target_reference_exact')):>7}  "
            f"{r.get('target_check_set') or '-'}  {'PASS' if r.get('target_ok') else 'FAIL'}"
        )
    lines.append(
        "target: emulated (qemu-user); labels/scores against the same file on this host, '= model': "
        "bit-identical with the .bnc given; no latency on an emulator"
    )
    lines.append("-" * len(lines[0]))
    return lines
