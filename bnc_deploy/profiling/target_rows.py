"""``bnc-profile --target``: the rows of model files run on an emulated target.

The run itself is the target's (e.g. :func:`bnc_deploy.targets.aarch64.check_files`, one emulator
run for all files); this module turns its report into one row per file: the file's analytic costs
and graph count, the target's labels and scores against this host's (``target_*`` keys), the test
error of the target's labels with the test split. No latency: emulated timings are not the target's.
"""

from __future__ import annotations

from pathlib import Path

from bnc_deploy.profiling.facts import model_facts
from bnc_deploy.profiling.options import LoadOptions, TestSplit
from bnc_deploy.profiling.rows import base_row


def target_rows(
    target: str, files: list[str], report: dict, data: TestSplit | None, *, env: dict, load_options: LoadOptions
) -> list[dict]:
    """One row per entry of ``report["files"]`` (the target's report on ``files``, in order)."""
    data = None if data is None else TestSplit(*data)
    rows = []
    for f, e in zip(files, report["files"]):
        row = base_row(model_facts(f, **load_options.for_file(f)), env)
        ref = e["reference"]
        row.update(
            runtime=e["runtime"],
            threads=None if e["runtime"] == "numpy" else 1,
            target=target,
            target_method=report["method"],
            target_label_agreement=e["label_agreement"],
            target_exact=e["exact"],
            target_max_abs_score_diff=e["max_abs_score_diff"],
            target_reference_exact=None if ref is None else ref["exact"],
            target_check_set=e["check_set"],
            target_ok=e["ok"],
        )
        if data is not None:
            row.update(dataset=data.name, fold=data.fold, n_test_rows=int(len(data.y)))
        if e["test_error"] is not None:
            row.update(
                test_error=e["test_error"], test_error_source=f"{e['runtime']} on {target} (emulated), test split"
            )
        if e["error"]:
            row["notes"].append(f"{Path(f).name} failed on {target}: {e['error']}")
        row["notes"].append(
            f"--target {target}: emulated (qemu-user), compared with this host on "
            f"{e['rows_source'].split(' (')[0]}; no latency"
        )
        rows.append(row)
    return rows
