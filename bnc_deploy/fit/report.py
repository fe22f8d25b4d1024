"""``bnc-fit``'s reports: the stdout table, ``report.json``, ``report.md`` and the Pareto plot.

* :func:`format_table`: a few lines for people (budget vs measured per axis, errors, files).
* :func:`write_reports`: ``report.json`` (:meth:`FitResult.to_dict`), ``report.md`` (budget vs
  measured, validation and test error, every candidate with what its measurement said, the pruned
  cells with their lower bounds, the refused ones with the reason) and, when matplotlib is
  installed, the Pareto plot as ``pareto.png`` and ``pareto.svg`` (the same figure): validation
  error against each budget axis, measured values where measured (the analytic size/operations
  otherwise), the Pareto front and the limit drawn. Each file is written atomically; a plot that
  cannot be drawn removes the plot files of an earlier fit.
"""

from __future__ import annotations

import json
from pathlib import Path

from bnc_deploy.fileio import atomic_write_bytes, atomic_write_with
from bnc_deploy.fit.result import Candidate, FitResult
from bnc_deploy.targets.budget import AXES, UNITS

PLOT_FILE = "pareto.png"
#: The plot's files, one per format (``PLOT_FILE`` first).
PLOT_FILES = (PLOT_FILE, "pareto.svg")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f} %"


def _num(axis: str, value) -> str:
    if value is None:
        return "-"
    text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
    return f"{text} {UNITS[axis]}"


def _rows(result: FitResult) -> list[tuple[str, str, str]]:
    """(axis, budget, measured) for the limited axes, then the other measured ones."""
    limits = result.budget.limits()
    measured = result.chosen.measured if result.chosen else None
    axes = [a for a in AXES if a in limits or (measured is not None and measured.get(a) is not None)]
    return [(a, _num(a, limits.get(a)), _num(a, measured.get(a) if measured is not None else None)) for a in axes]


def format_table(result: FitResult) -> str:
    """The stdout summary: status, budget vs measured, model, errors, files."""
    status = "fits" if result.fits else "NOTHING FITS"
    lines = [f"bnc-fit: {result.data} on {result.target}: {status}"]
    lines.append(f"  {'axis':<14}{'budget':>18}{'measured':>18}")
    for axis, limit, value in _rows(result):
        lines.append(f"  {axis:<14}{limit:>18}{value:>18}")
    if result.chosen is not None:
        c = result.chosen.candidate
        lines.append(f"  model         {c.label}, {result.chosen.variant} export")
        lines.append(f"  error         validation {_pct(c.val_error)}, test {_pct(c.test_error)}")
        lines.append(f"  file          {', '.join(result.files)}")
        lines.append(f"  model file    {result.model_path}")
    else:
        lines.append(f"  {result.message}")
    lines.append(
        f"  search        {len(result.candidates)} candidates, {len(result.attempts)} measured, "
        f"{result.trained} configurations trained now, {result.skipped} resumed; {result.seconds:.1f} s"
    )
    return "\n".join(lines)


def _attempt_note(result: FitResult, candidate: Candidate) -> str:
    notes = []
    for a in result.attempts:
        if a.candidate.id == candidate.id:
            notes.append(f"{a.variant}: " + ("fits" if a.fits else "; ".join(a.why) or "does not fit"))
    return " / ".join(notes) or "not measured"


def format_markdown(result: FitResult) -> str:
    """``report.md``: the summary, the candidates, the pruned cells, the search settings."""
    out = [f"# bnc-fit: {result.data} on {result.target}", ""]
    out.append("**" + ("A model fits." if result.fits else f"Nothing fits: {result.message}") + "**")
    out += ["", "Selected on the validation split; the test error is reported, never used to choose.", ""]
    out += ["| axis | budget | measured |", "|---|---:|---:|"]
    out += [f"| {a} | {lim} | {val} |" for a, lim, val in _rows(result)]
    if result.chosen is not None:
        c = result.chosen.candidate
        out += ["", f"Model: {c.label}, {result.chosen.variant} export; validation error {_pct(c.val_error)}, "]
        out[-1] += f"test error {_pct(c.test_error)}. Files: {', '.join(result.files)}; `{result.model_path}`."
        methods = result.chosen.measurement.get("methods", {})
        if methods:
            out += ["", "How each axis was measured:", ""] + [f"- {a}: {m}" for a, m in methods.items()]
    out += ["", "## Candidates (best of each cell, by validation error)", ""]
    out += ["| # | model | val error | test error | size (bits) | ops | measurement |"]
    out += ["|---|---|---:|---:|---:|---:|---|"]
    for i, c in enumerate(result.candidates, 1):
        out.append(
            f"| {i} | {c.label} | {_pct(c.val_error)} | {_pct(c.test_error)} | {c.size_bits:,} | {c.ops:,} | "
            f"{_attempt_note(result, c)} |"
        )
    pruned = [c for c in result.cells if c["pruned"] or c.get("refused")]
    if pruned:
        out += ["", "## Not trained (a lower bound exceeds the budget, or the target takes no such model)", ""]
        for c in pruned:
            why = c.get("refused") or ", ".join(
                f"{p['axis']} >= {_num(p['axis'], p['lower_bound'])}" for p in c["pruned"]
            )
            size = " " + "x".join(str(w) for w in c["widths"]) if c.get("widths") else ""
            size += f" lambda_MS {c['size_penalty']:g}" if c.get("size_penalty") is not None else ""
            out.append(f"- {c['family']} {c['bits']}-bit{size}: {why}")
    dirs = result.sweep_dirs or ((result.sweep_dir,) if result.sweep_dir else ())
    out += ["", "## Search", "", "- sweep directories: " + (", ".join(f"`{d}`" for d in dirs) or "none")]
    out.append(f"- trained now: {result.trained}; resumed: {result.skipped}; {result.seconds:.1f} s")
    out.append(f"- settings: `{json.dumps(result.settings, sort_keys=True)}`")
    if (Path(result.out_dir) / PLOT_FILE).exists():
        out += ["", f"![Pareto front]({PLOT_FILE}) ([SVG]({PLOT_FILES[1]}))"]
    return "\n".join(out) + "\n"


def write_reports(result: FitResult, out_dir) -> list[str]:
    """Write ``report.json``, ``report.md`` and (with matplotlib) ``pareto.png`` and ``pareto.svg``;
    return their paths."""
    out = Path(out_dir)
    written = plot_pareto(result, out)
    if not written:
        for name in PLOT_FILES:
            (out / name).unlink(missing_ok=True)  # never a plot of an earlier fit
    data = result.to_dict()
    data["reports"] = [str(out / "report.json"), str(out / "report.md")] + written
    atomic_write_bytes(out / "report.json", (json.dumps(data, indent=2, default=str) + "\n").encode())
    atomic_write_bytes(out / "report.md", format_markdown(result).encode())
    return data["reports"]


def _points(result: FitResult, axis: str) -> list[tuple[float, float, bool, bool]]:
    """(cost on ``axis``, validation error, measured?, chosen?) per candidate with both known."""
    points = []
    for c in result.candidates:
        values = [a.measured.get(axis) for a in result.attempts if a.candidate.id == c.id]
        values = [v for v in values if v is not None]
        analytic = {"bits": c.size_bits, "ops": c.ops}.get(axis)
        value = min(values) if values else analytic
        if value is None or c.val_error is None:
            continue
        chosen = result.chosen is not None and result.chosen.candidate.id == c.id
        points.append((float(value), 100 * c.val_error, bool(values), chosen))
    return points


def plot_pareto(result: FitResult, out_dir: Path) -> list[str]:
    """The Pareto plot in ``out_dir`` as :data:`PLOT_FILES` (PNG, SVG): one panel per budget axis
    (``bits`` without a budget); their paths, none without matplotlib or a point to draw."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    axes = list(result.budget.axes()) or ["bits"]
    panels = [(a, _points(result, a)) for a in axes]
    panels = [(a, p) for a, p in panels if p]
    if not panels:
        return []
    fig, grid = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, (axis, points) in zip(grid[0], panels):
        _draw_panel(ax, axis, points, result.budget.limits().get(axis))
    fig.suptitle(
        f"bnc-fit: {result.data} on {result.target} (validation error; filled: measured on the target)", fontsize=10
    )
    fig.tight_layout()
    written = []
    for name in PLOT_FILES:
        path = Path(out_dir) / name
        kind = path.suffix[1:]
        atomic_write_with(path, lambda tmp, kind=kind: fig.savefig(tmp, format=kind, dpi=120))
        written.append(str(path))
    plt.close(fig)
    return written


def _draw_panel(ax, axis: str, points, limit) -> None:
    for x, y, measured, chosen in points:
        ax.scatter(
            [x],
            [y],
            marker="*" if chosen else "o",
            s=140 if chosen else 30,
            facecolors="C1" if chosen else ("C0" if measured else "none"),
            edgecolors="C1" if chosen else "C0",
        )
    front, best = [], float("inf")
    for x, y, _, _ in sorted(points):
        if y < best:
            front.append((x, y))
            best = y
    if front:
        ax.step([p[0] for p in front], [p[1] for p in front], where="post", color="C2", label="Pareto front")
    if limit is not None:
        ax.axvline(limit, color="C3", linestyle="--", label=f"budget {_num(axis, limit)}")
    ax.set_xscale("log")
    ax.set_xlabel(f"{axis} ({UNITS[axis]}, log scale)")
    ax.set_ylabel("validation error (%)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
