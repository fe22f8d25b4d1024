"""Pareto analysis and plots over profiled models (size in bits, operations, test error).

Records are plain dicts (``bnc-profile --json`` rows, ``bnc-train --json`` summaries, or report
rows) with at least ``test_error``, ``size_bits`` and ``n_ops``; the plots also use ``bits``
(bits per parameter; 32 or ``quantized: false`` means float), ``dataset`` and ``structure``.

Plots (matplotlib, Agg backend: no display needed), each saved as PNG and SVG:

* error vs size (bits, log scale), one line per model family, Pareto points ringed;
* error vs operations (log scale), marker **area proportional to size** (the paper's Fig. 6);
* error vs bit width (1..8 and float), one line per model family.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from bnc_deploy.errors import MissingExtraError, OutputError, ResultFileError
from bnc_deploy.fileio import atomic_write_with, check_output_path

# matplotlib (the "plot" extra) is imported inside the plotting functions only: reading records
# and marking the Pareto front must work in a base install.

#: Objectives, all minimized.
OBJECTIVES = ("size_bits", "n_ops", "test_error")
FLOAT_BITS = 32


# -- records -------------------------------------------------------------------------------------------
def load_records(paths) -> list[dict]:
    """Records from JSON files: a list of objects, one object, or ``{"records": [...]}``.

    Raises FileNotFoundError / ResultFileError naming the file.
    """
    records = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            raise IsADirectoryError(f"{p}: is a directory, not a JSON result file")
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such result file")
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise ResultFileError(f"{p}: not a JSON result file ({exc})") from None
        if isinstance(data, dict):
            data = data.get("records", [data])
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise ResultFileError(f"{p}: expected a JSON object or a list of objects")
        for r in data:
            r.setdefault("file", str(p))
        records.extend(data)
    return records


def is_float(record: dict) -> bool:
    return record.get("quantized") is False or record.get("bits") in (None, FLOAT_BITS)


def family(record: dict) -> str:
    """The series a record belongs to: ``group``, else ``"<dataset> <STRUCTURE>"``."""
    if record.get("group"):
        return str(record["group"])
    parts = [str(record[k]) for k in ("dataset",) if record.get(k)]
    if record.get("structure"):
        parts.append(str(record["structure"]).upper())
    return " ".join(parts) or "models"


# -- Pareto ----------------------------------------------------------------------------------------------
def dominates(a: dict, b: dict, keys=OBJECTIVES) -> bool:
    """``a`` is no worse than ``b`` in every key and better in at least one (all minimized)."""
    return all(a[k] <= b[k] for k in keys) and any(a[k] < b[k] for k in keys)


def pareto_front(records: list[dict], keys=OBJECTIVES) -> list[int]:
    """Indices of the non-dominated records (records missing a key are left out), input order."""
    usable = [i for i, r in enumerate(records) if all(r.get(k) is not None for k in keys)]
    return [i for i in usable if not any(dominates(records[j], records[i], keys) for j in usable if j != i)]


def mark_pareto(records: list[dict], by: str | None = "dataset", keys=OBJECTIVES) -> list[dict]:
    """Set ``record["pareto"]`` (True/False; None if a key is missing), the front taken within each
    value of ``by`` (models of different datasets are not comparable). Duplicate rows of one model
    (several runtimes) share the flag of their first occurrence."""
    groups: dict = {}
    for i, r in enumerate(records):
        groups.setdefault(r.get(by) if by else None, []).append(i)
    for members in groups.values():
        models, first = [], {}
        for i in members:
            key = (records[i].get("model_id") or records[i].get("file"), *(records[i].get(k) for k in keys))
            first.setdefault(key, i)
            models.append(first[key])
        unique = sorted(set(models))
        front = {unique[j] for j in pareto_front([records[i] for i in unique], keys)}
        for i, m in zip(members, models):
            missing = any(records[i].get(k) is None for k in keys)
            records[i]["pareto"] = None if missing else m in front
    return records


# -- plots -----------------------------------------------------------------------------------------------
def _pyplot():
    # matplotlib is an optional extra ("plot"): imported on first use, named when missing
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingExtraError("plotting (--plot)", "plot", exc) from None

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    return plt


def _series(records):
    """``{family: [records sorted by size]}`` of records with an error, size and ops."""
    out: dict[str, list] = {}
    for r in records:
        if r.get("test_error") is None or r.get("size_bits") is None:
            continue
        out.setdefault(family(r), []).append(r)
    return {k: sorted(v, key=lambda r: r["size_bits"]) for k, v in sorted(out.items())}


def _style(index: int):
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]
    markers = ["o", "^", "s", "D", "v", "P", "X", "*"]
    return colors[index % len(colors)], markers[index % len(markers)]


def _ring_pareto(ax, xs, ys, flags, label_done: list):
    ring = [(x, y) for x, y, f in zip(xs, ys, flags) if f]
    if ring:
        ax.scatter(
            [p[0] for p in ring],
            [p[1] for p in ring],
            s=160,
            facecolors="none",
            edgecolors="black",
            linewidths=1.2,
            zorder=4,
            label=None if label_done else "Pareto-optimal (per dataset)",
        )
        label_done.append(True)


def plot_error_vs_size(ax, records: list[dict]) -> None:
    """Test error (%) against parameter memory (bits, log scale), one line per family."""
    ringed: list = []
    for k, (name, rs) in enumerate(_series(records).items()):
        color, marker = _style(k)
        xs, ys = [r["size_bits"] for r in rs], [100 * r["test_error"] for r in rs]
        ax.plot(xs, ys, marker=marker, color=color, label=name, linewidth=1.2, markersize=5)
        for r, x, y in zip(rs, xs, ys):
            ax.annotate(
                "f" if is_float(r) else str(r.get("bits", "")),
                (x, y),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
                color=color,
            )
        _ring_pareto(ax, xs, ys, [r.get("pareto") for r in rs], ringed)
    ax.set_xscale("log")
    _log_axis(ax.xaxis, _bits_label)
    ax.set_xlabel("model size (bits of parameters, log scale)")
    ax.set_ylabel("test error (%)")
    ax.set_title("Test error vs size (labels: bits per parameter, f = float32)")
    ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith("Pareto"))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=8)


def plot_error_vs_ops(ax, records: list[dict], max_area: float = 900.0) -> None:
    """Test error (%) against operations per row (log scale), marker area proportional to size.

    Markers are drawn largest first so small models stay visible on top of large ones at the
    same operation count (all BN models of a dataset share ``D * C``).
    """
    from matplotlib.lines import Line2D  # optional extra "plot": only when drawing

    series = _series(records)
    sizes = [r["size_bits"] for rs in series.values() for r in rs]
    top = max(sizes) if sizes else 1
    points, handles, labels = [], [], []
    for k, (name, rs) in enumerate(series.items()):
        color, marker = _style(k)
        points += [
            (max(max_area * r["size_bits"] / top, 2.0), r["n_ops"], 100 * r["test_error"], color, marker) for r in rs
        ]
        handles.append(Line2D([], [], linestyle="", marker=marker, color=color, markersize=7, alpha=0.8))
        labels.append(name)
    for area, x, y, color, marker in sorted(points, key=lambda p: -p[0]):
        ax.scatter([x], [y], s=area, color=color, marker=marker, alpha=0.35, edgecolors=color, linewidths=0.8)
    for value in _size_key(top):  # the area key: proxy circles at true scale
        area = max(max_area * value / top, 2.0)
        handles.append(
            Line2D(
                [],
                [],
                linestyle="",
                marker="o",
                markersize=np.sqrt(area),
                markerfacecolor="none",
                markeredgecolor="gray",
            )
        )
        labels.append(f"size {_bits_label(value)}")
    ax.set_xscale("log")
    _log_axis(ax.xaxis, lambda v: f"{v:,.0f}")
    ax.set_xlabel("operations per row (additions / MACs, log scale)")
    ax.set_ylabel("test error (%)")
    ax.set_title("Test error vs operations (marker area ∝ size in bits)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(
        handles,
        labels,
        fontsize=8,
        labelspacing=1.6,
        borderpad=1.0,
        handletextpad=1.2,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    ax.margins(x=0.3, y=0.15)


def _log_axis(axis, label) -> None:
    """Plain tick labels on a log axis: ``label(value)`` at 1, 2 and 5 times powers of ten (every
    tick when the axis spans less than a factor of 4, where those may all fall outside).

    Fewer where they would not fit side by side (many decades on a narrow axis, e.g. the size
    panel of the three-panel overview): 1 and 3 times powers of ten, then powers of ten only, then
    every n-th power of ten, so the labels never overlap.
    """
    from matplotlib.ticker import FuncFormatter  # optional extra "plot": only when drawing

    cache: dict = {}

    def text(value, _pos):
        if value <= 0:
            return ""
        low, high = sorted(axis.get_view_interval())
        if low > 0 and high / low < 4:
            return f"{value:,.0f}"  # a narrow range (models of one budget): every tick, all digits
        exponent = np.floor(np.log10(value) + 1e-9)
        lead = value / 10.0**exponent
        state = (low, high, axis.axes.bbox.width, axis.axes.bbox.height, axis.figure.dpi)
        if cache.get("state") != state:  # the formatter runs per tick and draw: decide once per layout
            cache.update(state=state, choice=_labelled_leads(axis, low, high, label))
        leads, every = cache["choice"]
        if not any(abs(lead - d) < 1e-6 for d in leads):
            return ""
        return label(value) if every == 1 or (lead == 1 and int(exponent) % every == 0) else ""

    axis.set_major_formatter(FuncFormatter(text))
    axis.set_minor_formatter(FuncFormatter(text))
    axis.set_tick_params(which="both", length=3.5)  # minor labels on the same baseline as major ones


#: Least gap between neighbouring tick labels, as a fraction of the widest label's width.
_LABEL_GAP = 0.3


@functools.lru_cache(maxsize=256)
def _text_width(text: str, size: float) -> float:
    """Width of ``text`` in points in the default font at ``size`` points."""
    from matplotlib.textpath import TextPath  # optional extra "plot": only when drawing

    return TextPath((0, 0), text, size=size).get_extents().width


def _labelled_leads(axis, low: float, high: float, label) -> tuple[tuple, int]:
    """Which ticks of a log axis get a label: ``(leading digits, every n-th decade)``, chosen so
    that the widest label (measured in the tick font size) fits between neighbours, with a gap, on
    the axis' current length."""
    # optional extra "plot": only when drawing
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties

    if not low > 0:
        return (1, 2, 5), 1
    decades = max(np.log10(high / low), 1e-9)
    length = axis.axes.bbox.width if axis.axis_name == "x" else axis.axes.bbox.height  # display pixels
    size = FontProperties(size=rcParams[f"{axis.axis_name}tick.labelsize"]).get_size_in_points()
    samples = [
        label(10.0**e * d)
        for e in range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
        for d in (1, 2, 5)
    ]
    widest = max(_text_width(t, size) for t in samples if t) * axis.figure.dpi / 72.0  # pixels
    per_decade = length / decades / (widest * (1 + _LABEL_GAP))  # labels that fit side by side per decade
    if per_decade >= 1 / np.log10(2):  # 1, 2, 5: the closest neighbours are 0.30 decades apart
        return (1, 2, 5), 1
    if per_decade >= 1 / np.log10(3):  # 1, 3: 0.48 decades apart
        return (1, 3), 1
    if per_decade >= 1:
        return (1,), 1
    return (1,), int(np.ceil(1 / per_decade))


def _size_key(top: float) -> list[float]:
    """Two or three round sizes (powers of ten) for the marker-area legend."""
    exp = int(np.floor(np.log10(top))) if top > 0 else 0
    values = [10.0**e for e in (exp - 1, exp)] + ([top] if top > 2 * 10.0**exp else [])
    return [v for v in values if v > 0]


def _bits_label(value: float) -> str:
    for unit, scale in (("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} bits"


def plot_error_vs_bits(ax, records: list[dict]) -> None:
    """Test error (%) against bits per parameter (1..8, and float32 at the right)."""
    series = _series(records)
    widths = sorted({int(r["bits"]) for rs in series.values() for r in rs if not is_float(r)})
    float_x = (max(widths) if widths else 8) + 1.5
    for k, (name, rs) in enumerate(series.items()):
        color, marker = _style(k)
        quant = sorted((r for r in rs if not is_float(r)), key=lambda r: r["bits"])
        ax.plot(
            [r["bits"] for r in quant],
            [100 * r["test_error"] for r in quant],
            marker=marker,
            color=color,
            label=name,
            linewidth=1.2,
            markersize=5,
        )
        floats = [r for r in rs if is_float(r)]
        if floats:
            ax.scatter(
                [float_x] * len(floats),
                [100 * r["test_error"] for r in floats],
                marker=marker,
                color=color,
                s=36,
                zorder=3,
            )
            if quant:
                ax.plot(
                    [quant[-1]["bits"], float_x],
                    [100 * quant[-1]["test_error"], 100 * floats[0]["test_error"]],
                    color=color,
                    linestyle=":",
                    linewidth=1,
                )
    has_float = any(is_float(r) for rs in series.values() for r in rs)
    ax.set_xticks(widths + ([float_x] if has_float else []))
    ax.set_xticklabels([str(w) for w in widths] + (["float32"] if has_float else []))
    ax.set_xlabel("bits per parameter")
    ax.set_ylabel("test error (%)")
    ax.set_title("Test error vs bit width")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


PLOTS = {"error_vs_size": plot_error_vs_size, "error_vs_ops": plot_error_vs_ops, "error_vs_bits": plot_error_vs_bits}


#: The files each plot is written as, in this order.
PLOT_SUFFIXES = (".png", ".svg")


def plot_paths(path) -> list[Path]:
    """The files a plot named ``path`` is written as: ``run.png`` -> ``run.png``, ``run.svg``.

    Only a ``.png`` or ``.svg`` suffix is replaced; any other dot stays part of the name
    (``run.v2.png`` -> ``run.v2.png``, ``run.v2.svg``; ``run.v2`` -> ``run.v2.png``, ``run.v2.svg``).
    """
    path = Path(path)
    base = path.with_suffix("") if path.suffix.lower() in PLOT_SUFFIXES else path
    return [base.with_name(base.name + suffix) for suffix in PLOT_SUFFIXES]


def check_plot_path(path, *, inputs: tuple = ()) -> list[Path]:
    """Before any work: the plot files of ``path`` can be written (OutputError naming the file:
    a directory, a read-only folder, one of ``inputs``); return them."""
    if Path(path).is_dir():
        raise OutputError(f"plot {path} is a directory; give a file name, e.g. {Path(path) / 'pareto.png'}")
    return [check_output_path(p, inputs=inputs, what="plot") for p in plot_paths(path)]


def save_figure(fig, path) -> list[str]:
    """Save ``fig`` as the files of :func:`plot_paths` (PNG and SVG), each written atomically
    (:func:`bnc_deploy.fileio.atomic_write_with`); return both paths."""
    written = []
    for out in plot_paths(path):
        fmt = out.suffix.lstrip(".")
        atomic_write_with(out, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight"))
        written.append(str(out))
    return written


def plot_all(records: list[dict], out_dir, prefix: str = "", note: str = "") -> list[str]:
    """The three plots as separate figures ``<out_dir>/<prefix><name>.png|.svg``; return the paths.

    ``note`` (e.g. how the models were trained) is added under each title.
    """
    plt = _pyplot()
    written = []
    for name, draw in PLOTS.items():
        fig, ax = plt.subplots(figsize=(8, 5.2))
        draw(ax, records)
        if note:
            ax.set_title(f"{ax.get_title()}\n{note}", fontsize=11)
        written += save_figure(fig, Path(out_dir) / f"{prefix}{name}.png")
        plt.close(fig)
    return written


def plot_overview(records: list[dict], path, note: str = "") -> list[str]:
    """The three plots side by side in one figure, written as the files of :func:`plot_paths`."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(23, 6.5), gridspec_kw={"width_ratios": [1, 1.15, 1]})
    for ax, draw in zip(axes, PLOTS.values()):
        draw(ax, records)
    if note:
        fig.suptitle(note, fontsize=12)
    fig.tight_layout()
    written = save_figure(fig, path)
    plt.close(fig)
    return written
