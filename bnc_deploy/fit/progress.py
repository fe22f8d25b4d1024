"""``bnc-fit``'s progress lines: one per stage, one per measured candidate with the best so far that fits.

Contract
--------
* :class:`Progress` writes whole lines, each prefixed ``bnc-fit:``, to its stream (default
  ``sys.stderr``, looked up at each line, so a captured stderr gets them) and flushes each; when
  disabled it writes nothing. The sweep's own tqdm bar (``sweep.runner``) runs between the lines.
* :meth:`Progress.measured` says what one measurement found (``fits`` or the exceeded axes) and
  the best candidate measured to fit so far (``best so far that fits: nb 3-bit packed, val 20.1 %,
  flash 1,678 B``), or ``none yet``.
"""

from __future__ import annotations

import sys
from typing import TextIO

from bnc_deploy.fit.result import Attempt
from bnc_deploy.targets.budget import UNITS, Budget


def show(axis: str, value: float | None) -> str:
    """``1,678 B``, ``3.25 us``; ``-`` for None."""
    if value is None:
        return "-"
    text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
    return f"{text} {UNITS[axis]}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def describe_fit(attempt: Attempt, budget: Budget) -> str:
    """``nb 3-bit packed, val 20.1 %, flash 1,678 B`` (the budget's axes, else the file bytes)."""
    axes = budget.axes() or tuple(a for a in ("file_bytes",) if attempt.measured.get(a) is not None)
    costs = ", ".join(f"{a} {show(a, attempt.measured.get(a))}" for a in axes)
    text = f"{attempt.candidate.short} {attempt.variant}, val {pct(attempt.candidate.val_error)}"
    return f"{text}, {costs}" if costs else text


class Progress:
    """Progress lines on ``stream`` (default: the current ``sys.stderr``) when ``enabled``."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = bool(enabled)
        self.stream = stream
        self.best: Attempt | None = None

    def line(self, text: str) -> None:
        if not self.enabled:
            return
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write(f"bnc-fit: {text}\n")
        stream.flush()

    def measured(self, attempt: Attempt, budget: Budget) -> None:
        """One line for ``attempt``; it becomes the best so far when it fits and none did before
        (candidates are measured best validation error first)."""
        if attempt.fits and self.best is None:
            self.best = attempt
        verdict = "fits" if attempt.fits else "; ".join(attempt.why) or "does not fit"
        best = "none yet" if self.best is None else describe_fit(self.best, budget)
        self.line(
            f"measured {attempt.candidate.short} {attempt.variant} (val {pct(attempt.candidate.val_error)}): "
            f"{verdict}; best so far that fits: {best}"
        )
