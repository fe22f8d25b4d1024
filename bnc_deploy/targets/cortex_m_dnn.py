"""Run an exported sign-DNN C header (``bnc-export --format c`` on a DNN model) on emulated Cortex-M boards.

The DNN counterpart of :mod:`bnc_deploy.targets.cortex_m` (BN headers), built from the same
pieces (:mod:`~bnc_deploy.targets.cortex_m_build`: the toolchain, the start-up code and linker
script, the model-footprint object, QEMU): the header is cross-compiled with ``arm-none-eabi-gcc
-Os`` into a bare-metal program for one of the check's boards (MPS2 M3/M4/M7, micro:bit M0) and run
in ``qemu-system-arm``; the program
(``cortex_m_dnn.c``, package data) calls ``PREFIX_logits`` and ``PREFIX_predict`` on every row and
compares them with the values the NumPy reference computed on the host (compiled in as constant
arrays), then exits with its number of failures::

    python -m bnc_deploy.targets.cortex_m_dnn MODEL.bnc [--data usps] [--board mps2-an386] [--name P] [--json]
    python -m bnc_deploy.targets.cortex_m_dnn MODEL.h --model MODEL.bnc ...

Ground truth: the model file. Expected values are
:class:`~bnc_deploy.reference.dnn.DNNReferencePredictor`'s float32 logits as the header's integers
(:func:`bnc_deploy.exporters.c_dnn.logit_key`) and its labels. Given a ``.bnc``, the header is
exported first through the one verifier (which checks it on the host too). Rows: the test split of
``--data`` (else the model's check set) plus ``--random`` seeded random rows (the verifier's rows),
and one invalid row per feature (code = cardinality), which must give -1 from both functions and
leave the logits untouched. A row passes when ``logits`` returns 0 with every integer logit equal
to the reference's and ``predict`` returns the reference label.

Sizes, as for BN headers: **model** is the header's own footprint (an object holding only
``PREFIX_predict``; FLASH = ``.text*`` + ``.rodata*``, RAM = ``.data*`` + ``.bss*`` + the worst-case
stack from ``-fstack-usage``/``-fcallgraph-info=su``); **image** the whole test program.
Instructions per row (QEMU ``-icount shift=0``: executed instructions, not cycles, QEMU is not
cycle-accurate), net of a loop calling an empty function.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bnc_deploy.errors import BncDeployError, ConfigError, MetadataError
from bnc_deploy.formats.c import read_c_metadata
from bnc_deploy.formats.c_template import template_sections
from bnc_deploy.formats.checkset import N_RANDOM_ROWS, verification_rows
from bnc_deploy.targets.cortex_m import instruction_counts
from bnc_deploy.targets.cortex_m_build import (
    BOARD_FAMILY,
    BOARDS,
    CFLAGS,
    FAMILY_DEFINES,
    LDFLAGS,
    MAX_PRINTED,
    RUN_TIMEOUT_S,
    SENTINEL,
    BuildError,
    Tools,
    _c_rows,
    _compile,
    _output,
    find_tools,
    image_sizes,
    model_footprint,
    parse_size_a,
    row_bytes_per_image,
    run_image,
)
from bnc_deploy.targets.cortex_m_sources import BOARD_TIMER_H, STARTUP_C, link_ld

#: The driver's C (package data beside this module).
TEMPLATE = "cortex_m_dnn.c"
CALIBRATION_ITERATIONS = 100_000
DEFAULT_BOARD = "mps2-an386"


def dnn_check_rows(
    artifact: Any, rows: Any = None, n_random: int = N_RANDOM_ROWS, header: Path | None = None
) -> dict[str, Any]:
    """The rows (given ones, else the check set, then ``n_random`` random rows), the expected integer
    logits and labels, and one invalid row per feature. Expected: the reference's, for an exact
    header (sign networks); for a ReLU header (``exact`` false: it computes the int8 TFLite file, not
    the float reference), the same header compiled for the host by the native runtime."""
    from bnc_deploy.exporters.c_dnn import logit_key
    from bnc_deploy.reference import reference_predictor

    x, n_given = verification_rows(artifact, rows, n_random, where="check rows")
    exact = header is None or bool(read_c_metadata(header).get("exact"))
    if exact:
        reference = reference_predictor(artifact)
        logits = reference.logits(x).astype(np.float32)
        keys = np.vectorize(logit_key, otypes=[np.int64])(logits).reshape(logits.shape)
        labels = reference.predict(x)
    else:
        from bnc_deploy.runtimes.base import load_runtime

        host = load_runtime(header, "native")
        keys, labels = host.integer_logits(x), host.predict(x)  # type: ignore[attr-defined]
    cards = np.asarray(artifact.cardinalities, dtype=np.int64)
    invalid = [np.where(np.arange(len(cards)) == i, card, 0) for i, card in enumerate(cards) if card <= 255]
    return {
        "x": x,
        "keys": keys,
        "labels": labels,
        "expected": "the NumPy reference" if exact else "the header on the host (native runtime)",
        "invalid": np.array(invalid, dtype=np.int64).reshape(-1, len(cards)),
        "n_given": int(n_given),
        "n_random": int(len(x) - n_given),
    }


def rows_header(rows: dict[str, Any], start: int, stop: int, with_invalid: bool) -> str:
    """``rows.h``: rows ``start:stop``, their expected integer logits and labels (and the invalid rows)."""
    invalid = rows["invalid"] if with_invalid else rows["invalid"][:0]
    parts = [
        "/* Generated by bnc_deploy.targets.cortex_m_dnn: rows and the NumPy reference's values. */",
        f"#define N_CHECK {stop - start}u",
        f"#define N_INVALID {invalid.shape[0]}u",
        _c_rows("uint8_t", "check_x", rows["x"][start:stop]),
        _c_rows("int32_t", "check_logit", rows["keys"][start:stop]),
        _c_rows("uint16_t", "check_label", rows["labels"][start:stop]),
        _c_rows("uint8_t", "invalid_x", invalid),
    ]
    return "\n".join(parts) + "\n"


def driver_source(prefix: str) -> str:
    return template_sections(__package__, TEMPLATE)["driver"].substitute(
        P=prefix,
        M=prefix.upper(),
        sentinel=f"{SENTINEL:08X}",
        max_printed=MAX_PRINTED,
        calibration=CALIBRATION_ITERATIONS,
    )


def _build(header: Path, prefix: str, rows_h: str, board: str, tools: Tools, workdir: Path) -> tuple[Path, str]:
    cpu, family = BOARDS[board][0], BOARD_FAMILY[board]
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "startup.c").write_text(STARTUP_C, encoding="ascii")
    (workdir / "link.ld").write_text(link_ld(family), encoding="ascii")
    (workdir / "board_timer.h").write_text(BOARD_TIMER_H, encoding="ascii")
    (workdir / "driver.c").write_text(driver_source(prefix), encoding="ascii")
    (workdir / "rows.h").write_text(rows_h, encoding="ascii")
    (workdir / "model.h").write_bytes(header.read_bytes())
    flags = [f"-mcpu={cpu}", *CFLAGS, *FAMILY_DEFINES[family], *LDFLAGS, "-T", "link.ld"]
    cmd = [tools.gcc, *flags, "startup.c", "driver.c", "-o", "image.elf"]
    warnings = _compile(cmd, workdir, f"building the test program for {cpu}")
    return workdir / "image.elf", warnings


def check_dnn_header(
    header: Path,
    artifact: Any,
    *,
    boards: tuple[str, ...] = (DEFAULT_BOARD,),
    rows: dict[str, Any] | None = None,
    tools: Tools | None = None,
    workdir: Path | None = None,
    timeout: float = RUN_TIMEOUT_S,
) -> dict[str, Any]:
    """Cross-compile ``header`` for each board, run every row in QEMU, return the report (``ok``)."""
    from bnc_deploy.formats.metadata import artifact_hash

    header = Path(header)
    unknown = [b for b in boards if b not in BOARDS]
    if unknown:
        raise ConfigError(f"unknown board {unknown[0]!r}; choose from {', '.join(BOARDS)}")
    meta = read_c_metadata(header)
    if meta.get("model_kind") != "dnn" or meta.get("format") != "c":
        raise MetadataError(f"{header}: not a DNN C export")
    if meta.get("artifact_sha256") != artifact_hash(artifact):
        raise ConfigError(f"{header} was not exported from this model (artifact_sha256 differs)")
    tools = tools or find_tools(boards)
    rows = rows if rows is not None else dnn_check_rows(artifact, header=header)
    n = int(rows["x"].shape[0])
    per_image = max(1, row_bytes_per_image(boards) // (artifact.n_features + 4 * artifact.n_classes + 2))
    report: dict[str, Any] = {
        "target": "cortex-m",
        "method": "emulated: arm-none-eabi-gcc -Os, bare metal on QEMU boards (semihosting); "
        "instruction counts, not cycles",
        "header": str(header),
        "c_name": meta["c_name"],
        "model_kind": "dnn",
        "architecture": artifact.architecture,
        "weight_bits": artifact.weight_bits,
        "size_bits": artifact.size_bits,
        "rows": {"n_rows": n, "n_given": rows["n_given"], "n_random": rows["n_random"], "expected": rows["expected"]},
        "n_invalid": int(rows["invalid"].shape[0]),
        "toolchain": {"gcc": tools.gcc_version, "qemu": tools.qemu_version, "cflags": list(CFLAGS)},
        "boards": [],
    }
    with tempfile.TemporaryDirectory(prefix="bnc-cortex-m-dnn-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        for board in boards:
            report["boards"].append(_check_board(header, meta["c_name"], rows, board, tools, root, per_image, timeout))
    report["ok"] = all(b["ok"] for b in report["boards"])
    return report


def _check_board(header, prefix, rows, board, tools, root, per_image, timeout) -> dict[str, Any]:
    cpu = BOARDS[board][0]
    n = int(rows["x"].shape[0])
    entry: dict[str, Any] = {"board": board, "cpu": cpu, "n_rows": n, "passed": 0, "failed": 0, "invalid_failed": 0}
    entry.update(errors=[], failures=[], exit_codes=[])
    folder = root / board
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.h").write_bytes(Path(header).read_bytes())
    try:
        entry["model"] = model_footprint(folder / "model.h", prefix, cpu, tools, folder)
    except BuildError as exc:
        entry["errors"].append(str(exc))
    calib, ticks = np.zeros(2), np.zeros(3)
    for k, start in enumerate(range(0, max(n, 1), per_image)):
        stop = min(n, start + per_image)
        try:
            elf, _ = _build(header, prefix, rows_header(rows, start, stop, k == 0), board, tools, folder / f"part{k}")
        except BuildError as exc:
            entry["errors"].append(str(exc))
            continue
        if k == 0:
            entry["image"] = image_sizes(parse_size_a(_output([tools.size, "-A", str(elf)])))
        result = run_image(elf, board, tools, timeout)
        entry["exit_codes"].append(result.exit_code)
        if result.result is None or result.timed_out or result.fault:
            entry["errors"].append(f"part {k}: no result (exit {result.exit_code}, timed out {result.timed_out})")
            continue
        n_check, failed, _, invalid_failed = result.result[:4]
        entry["passed"] += n_check - failed
        entry["failed"] += failed
        entry["invalid_failed"] += invalid_failed
        entry["failures"] += [(tag, start + r, rc, label) for tag, r, rc, label, _ in result.failures[:20]]
        if result.timing is not None:
            calib += result.timing[:2]
            ticks += np.asarray(result.timing[2:], dtype=np.float64)
    entry["instructions"] = _instructions(calib, ticks, n, board)
    entry["ok"] = not entry["errors"] and entry["failed"] == 0 and entry["invalid_failed"] == 0 and entry["passed"] == n
    return entry


def _instructions(calib: np.ndarray, ticks: np.ndarray, n: int, board: str) -> dict[str, Any]:
    """The BN check's instruction counts (the third timed loop is ``logits``, not ``log_joint``)."""
    counts: dict[str, Any] = instruction_counts(calib, ticks, n, board)
    if counts.get("available"):
        counts["logits_per_row"] = counts.pop("log_joint_per_row")
    return counts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bnc_deploy.targets.cortex_m_dnn", description=__doc__.split("\n")[0])
    p.add_argument("file", help="a DNN model (.bnc), exported first, or an exported header (.h) with --model")
    p.add_argument("--model", help="the .bnc a given .h was exported from")
    p.add_argument("--data", help="verify on this dataset's test split (e.g. usps); default: the check set")
    p.add_argument("--fold", type=int, default=None)
    p.add_argument("--random", type=int, default=N_RANDOM_ROWS, help="seeded random rows added")
    p.add_argument("--board", action="append", choices=list(BOARDS), help=f"default {DEFAULT_BOARD}; repeatable")
    p.add_argument("--name", default="bnc", help="C prefix when exporting a .bnc")
    p.add_argument("--json", action="store_true")
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bnc_deploy.artifacts import load_artifact
    from bnc_deploy.verify import export_file

    path = Path(args.file)
    artifact = load_artifact(args.model if path.suffix == ".h" else path)
    x = None
    if args.data:
        from bnc_deploy.datasets import load_dataset

        ds = load_dataset(args.data, fold=args.fold or 1)
        x = ds.x_test
    boards = tuple(args.board or (DEFAULT_BOARD,))
    with tempfile.TemporaryDirectory(prefix="bnc-cortex-m-dnn-export-") as tmp:
        header = path
        if path.suffix != ".h":
            header = Path(tmp) / f"{args.name}.h"
            export_file(artifact, header, "c", rows=x, name=args.name)
        rows = dnn_check_rows(artifact, x, args.random, header=header)
        return check_dnn_header(header, artifact, boards=boards, rows=rows)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = run(args)
    except BncDeployError as exc:
        print(f"cortex_m_dnn: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        for b in report["boards"]:
            ins, model = b.get("instructions", {}), b.get("model", {})
            print(
                f"{b['board']} ({b['cpu']}): {b['passed']}/{b['n_rows']} rows exact, {b['failed']} failed, "
                f"invalid failed {b['invalid_failed']}; predict {ins.get('predict_per_row')} instructions/row; "
                f"model flash {model.get('flash_bytes')} B, RAM {model.get('ram_bytes')} B"
            )
            for error in b["errors"]:
                print(f"  error: {error}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
