"""Run an exported C classifier (``bnc-export --format c``) on emulated Cortex-M boards and check it.

Emulated, not on hardware: the header is cross-compiled with ``arm-none-eabi-gcc -Os`` into a
bare-metal program for an Arm MPS2 board or the BBC micro:bit and run in ``qemu-system-arm``; the
program computes ``PREFIX_log_joint`` and ``PREFIX_predict`` for every check row on the emulated CPU and compares
them with the values the NumPy reference computed on the host, then returns its number of
failures as the emulator's exit code (semihosting)::

    python -m bnc_deploy.targets.cortex_m MODEL.h --model MODEL.bnc [--board all] [--data SPEC] [--json]
    python -m bnc_deploy.targets.cortex_m MODEL.bnc [--pack-bits] [--name PREFIX] ...

Ground truth
------------
The **model file** is the ground truth, never the header: expected scores and labels are
``ReferencePredictor(artifact).integer_scores(x)`` and ``.predict(x)`` computed here, compiled
into the test program as constant arrays. Given a ``.h``, ``--model`` must name the ``.bnc`` it
was exported from (the header's ``artifact_sha256`` metadata must match the model's content
hash, and the header's integrity seal is checked unless ``--no-integrity-check``). Given a
``.bnc``, the C file is exported first through the one verifier
(:func:`bnc_deploy.verify.export_file`, which also checks it on the host) into a temporary
folder, with the exporter's options (``--pack-bits``, ``--name``, ``--raw-inputs``).

Rows: the check set stored in the model, or the test split of ``--data`` (``--fold``), plus
``--random`` seeded random valid rows (default 256; the first two are the all-zero and all-maximum
rows): the verifier's rows (:func:`bnc_deploy.formats.checkset.verification_rows`). A row passes
when ``log_joint`` returns 0 with every score equal to ``-(reference code sum)`` and ``predict``
returns the reference label. Besides, one invalid row per feature (code = cardinality, where that
fits a byte) must make both functions return -1 and leave ``scores`` untouched; raw-input headers
(``--raw-inputs``) also run ``PREFIX_log_joint_raw``/``PREFIX_predict_raw`` on the raw
representatives of the rows (:func:`bnc_deploy.formats.bnc.raw_representatives`, float32 as exact
hexadecimal literals) and on NaN/+-inf rows, which must be refused.

Boards (QEMU machines; memory maps in ``cortex_m_sources.MEMORY_MAPS``)
-----------------------------------------------------------------------
========== ========== =====================================================================
board      CPU        memory used by the program
========== ========== =====================================================================
mps2-an385 Cortex-M3  QEMU ``hw/arm/mps2.c``: code/constants in ZBT SSRAM1 at 0x00000000
mps2-an386 Cortex-M4  (4 MiB, the "flash"), data/bss/heap/stack in ZBT SSRAM2&3 at
mps2-an500 Cortex-M7  0x20000000 (4 MiB)
microbit   Cortex-M0  QEMU ``hw/arm/nrf51_soc.c`` (nRF51822): 256 KiB flash at 0x00000000,
                      16 KiB SRAM at 0x20000000 (smaller stack and heap; at most 64 KiB of
                      check rows per program)
========== ========== =====================================================================

The program: a 16-entry vector table and a reset handler (copy ``.data``, zero ``.bss``, stack
at the top of a reserved ``.stack`` section, ``initialise_monitor_handles``, ``exit(main())``)
from :data:`STARTUP_C`, the linker script :data:`LINK_LD`, newlib-nano with semihosting
(``--specs=nano.specs --specs=rdimon.specs``), soft-float, ``-mthumb -Os``. QEMU runs it with
``-semihosting-config enable=on,target=native`` (printf and the exit code reach the host).

Sizes
-----
* **model** (the headline): the header's own footprint, from ``arm-none-eabi-size -A`` of an
  object file holding only ``int f(const uint8_t *x) { return PREFIX_predict(x); }`` (``-Os
  -ffunction-sections -fdata-sections``): FLASH = ``.text*`` (code) + ``.rodata*`` (tables);
  RAM = ``.data*`` + ``.bss*`` (0: the library has no state) + the worst-case stack of the call
  chain from GCC's ``-fstack-usage``/``-fcallgraph-info=su``. The same with ``log_joint`` too is
  in the JSON (``with_log_joint``). Next to it: the paper's size ``B * |theta|`` bits.
* **image**: the whole test program (harness, newlib-nano, semihosting, the check rows),
  ``arm-none-eabi-size -A`` of the ELF; FLASH = ``.text + .rodata + .ARM.exidx + .data``
  (load image), RAM = ``.data + .bss + .stack`` (the heap newlib's printf may use is listed apart).

Instruction counts, not time
----------------------------
QEMU is **not cycle-accurate**: it models no pipeline, caches, flash wait states or bus timing,
so nothing here is a latency or cycle figure. With ``-icount shift=0`` QEMU advances its virtual
clock by exactly 1 ns per executed instruction; the program reads a free-running timer of the
board (the MPS2 CMSDK dual timer at 25 MHz, 40 ns per tick; the nRF51's TIMER0 at 16 MHz, 62.5 ns)
around loops over the rows, and calibrates the ratio with a loop of
known length (``subs``/``bne``, 2 instructions x 100,000): ``instructions = ticks * (200,000 /
calibration ticks)``. Reported: executed instructions per row of ``predict`` and ``log_joint``,
net of the same loop calling an empty function (resolution: one tick, 40 or 62.5 instructions,
per loop over all rows). On the real chip cycles per instruction differ by core and memory.

Exit status: 0 when every row passes on every board; 1 when some row fails or a program crashes
or times out; 2 for usage errors (missing toolchain - naming the Debian packages -, a header not
exported from ``--model``, a modified header, bad data).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

from bnc_deploy.errors import BncDeployError, ConfigError, InputError, MetadataError
from bnc_deploy.formats.checkset import N_RANDOM_ROWS, verification_rows
from bnc_deploy.targets.cortex_m_build import (
    BOARD_FAMILY,
    BOARDS,
    CFLAGS,
    DEBIAN_PACKAGES,
    DEFAULT_BOARDS,
    FAMILY_TIMER,
    LDFLAGS,
    MAX_DETAILED,
    QEMU_FLAGS,
    RUN_TIMEOUT_S,
    BuildError,
    CheckRows,
    Tools,
    _copy,
    _output,
    build_image,
    find_tools,
    image_sizes,
    model_footprint,
    parse_size_a,
    row_bytes_per_image,
    run_image,
)
from bnc_deploy.targets.cortex_m_report import format_report
from bnc_deploy.targets.cortex_m_sources import FAULT_EXIT


# ================================================================================================
# What to check: rows and the reference's values
# ================================================================================================
def check_rows(
    artifact, rows=None, *, source: str | None = None, n_random: int = N_RANDOM_ROWS, raw_inputs: bool = False
) -> CheckRows:
    """Rows (the given ones, else the model's check set, then ``n_random`` seeded random rows:
    :func:`~bnc_deploy.formats.checkset.verification_rows`) and the reference's integer sums and
    labels for them; invalid rows; raw rows when ``raw_inputs``."""
    from bnc_deploy.reference import reference_predictor

    if not artifact.is_quantized:
        raise InputError("the C export needs a quantized model (integer code sums)")
    x, n_given = verification_rows(artifact, rows, n_random, where=source or "check rows")
    if not x.shape[0]:
        raise InputError("no rows to check: the model stores no check set; pass --data or --random N")
    reference = reference_predictor(artifact)
    sums = reference.integer_scores(x)
    labels = reference.predict(x)
    cards = np.asarray(artifact.cardinalities, dtype=np.int64)
    invalid = []
    for i, card in enumerate(cards):
        if card <= 255:
            row = np.zeros(len(cards), dtype=np.int64)
            row[i] = card
            invalid.append(row)
    invalid = np.array(invalid, dtype=np.int64).reshape(-1, len(cards))
    if source is None:
        source = "check set stored in the model" if rows is None and n_given else ("given rows" if n_given else "none")
    out = CheckRows(
        x=x, sums=sums, labels=labels, invalid=invalid, n_given=n_given, n_random=int(n_random), source=source
    )
    if raw_inputs:
        from bnc_deploy.formats.bnc import raw_representatives

        raw = raw_representatives(artifact, x).astype(np.float32)
        codes = reference.discretize(raw.astype(np.float64))
        bad = np.zeros((3, artifact.n_features), dtype=np.float32)
        bad[:, 0] = [np.nan, np.inf, -np.inf]
        out.raw_x = np.concatenate([raw, bad])
        out.raw_sums = np.concatenate([reference.integer_scores(codes), np.zeros((3, artifact.n_classes), np.int64)])
        out.raw_labels = np.concatenate([reference.predict(codes), -np.ones(3, dtype=np.int64)])
    return out


# ================================================================================================
# The check
# ================================================================================================
def _header_facts(header: Path, artifact, verify_integrity: bool, key: bytes | None) -> dict:
    from bnc_deploy.formats.c import check_c_name, read_c_metadata
    from bnc_deploy.formats.metadata import artifact_hash

    if verify_integrity:
        from bnc_deploy.formats.integrity import verify_file

        verify_file(header, key=key)
    meta = read_c_metadata(header)
    if meta.get("format") not in (None, "c"):
        raise MetadataError(f"{header}: not a C export (format {meta.get('format')!r})")
    prefix = meta.get("c_name")
    if not isinstance(prefix, str):
        raise MetadataError(f"{header}: the metadata names no C prefix (c_name)")
    check_c_name(prefix, "c_name")
    expected = artifact_hash(artifact)
    if meta.get("artifact_sha256") != expected:
        raise ConfigError(
            f"{header} was not exported from this model (its artifact_sha256 "
            f"{str(meta.get('artifact_sha256'))[:12]}... differs from the model's {expected[:12]}...); "
            "pass the .bnc it was exported from"
        )
    return meta


def check_header(
    header,
    artifact,
    *,
    boards=DEFAULT_BOARDS,
    rows: CheckRows | None = None,
    tools: Tools | None = None,
    verify_integrity: bool = True,
    key: bytes | None = None,
    workdir=None,
    timeout: float = RUN_TIMEOUT_S,
    footprint: bool = True,
) -> dict:
    """Cross-compile ``header`` for each board, run the check rows in QEMU, return the report.

    ``artifact``: the model the header was exported from (the ground truth). ``rows``: from
    :func:`check_rows` (default: the model's check set + N_RANDOM_ROWS random rows; raw rows when
    the header takes raw inputs). ``workdir``: keep the build files there (default: a temporary
    folder). Raises :class:`~bnc_deploy.targets.cortex_m_build.ToolchainError`, MetadataError/
    ConfigError (wrong header) and IntegrityError (modified header); failing rows, failed builds,
    crashes and timeouts are in the report (``ok`` False).
    """
    header = Path(header)
    boards = list(boards)
    unknown = [b for b in boards if b not in BOARDS]
    if unknown:
        raise ConfigError(f"unknown board {unknown[0]!r}; choose from {', '.join(BOARDS)}")
    tools = tools or find_tools(boards)
    meta = _header_facts(header, artifact, verify_integrity, key)
    prefix = meta["c_name"]
    raw = meta.get("input") == "raw"
    rows = rows if rows is not None else check_rows(artifact, raw_inputs=raw)
    if rows.n_raw and not raw:
        raise ConfigError(f"{header} takes codes, not raw values: build the rows with raw_inputs=False")
    d, c = artifact.n_features, artifact.n_classes
    per_row = d + c * 4 + 2 + (4 * d if raw else 0)
    rows_per_image = max(1, row_bytes_per_image(boards) // per_row)
    n = rows.x.shape[0]
    bounds = [(s, min(n, s + rows_per_image)) for s in range(0, max(n, 1), rows_per_image)]
    report = _report_head(header, artifact, meta, rows, len(bounds), tools)
    with tempfile.TemporaryDirectory(prefix="bnc-cortex-m-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        for board in boards:
            report["boards"].append(
                _check_board(header, prefix, artifact, rows, bounds, board, tools, root, timeout, footprint)
            )
    report["ok"] = all(b["ok"] for b in report["boards"])
    return report


def _report_head(header: Path, artifact, meta: dict, rows: CheckRows, n_programs: int, tools: Tools) -> dict:
    """The report's facts of the header, the model, the rows and the toolchain (``boards``: empty)."""
    d, c, bits = artifact.n_features, artifact.n_classes, artifact.bits_per_parameter
    return {
        "target": "cortex-m",
        "method": "emulated: arm-none-eabi-gcc -Os, bare metal on QEMU boards (semihosting); QEMU is not "
        "cycle-accurate: instruction counts, no latency",
        "header": str(header),
        "header_sha256": hashlib.sha256(header.read_bytes()).hexdigest(),
        "c_name": meta["c_name"],
        "model_kind": artifact.kind,
        "structure": artifact.structure,
        "n_features": d,
        "n_classes": c,
        "bits": bits,
        "n_parameters": artifact.n_parameters,
        "size_bits": artifact.size_bits,
        "size_bytes": math.ceil(artifact.size_bits / 8),
        "table_bytes": meta.get("table_bytes"),
        "table_storage": meta.get("table_storage"),
        "input": meta.get("input", "codes"),
        "rows": {
            "source": rows.source,
            "n_given": rows.n_given,
            "n_random": rows.n_random,
            "n_rows": int(rows.x.shape[0]),
            "n_invalid": int(rows.invalid.shape[0]),
            "n_raw": rows.n_raw,
            "n_programs": n_programs,
        },
        "toolchain": {
            "gcc": tools.gcc_version,
            "qemu": tools.qemu_version,
            "cflags": list(CFLAGS),
            "ldflags": list(LDFLAGS),
            "qemu_flags": list(QEMU_FLAGS),
        },
        "boards": [],
    }


def _check_board(header, prefix, artifact, rows, bounds, board, tools, root, timeout, footprint) -> dict:
    cpu = BOARDS[board][0]
    folder = root / board
    folder.mkdir(parents=True, exist_ok=True)
    entry = {
        "board": board,
        "cpu": cpu,
        "description": BOARDS[board][1],
        "n_rows": int(rows.x.shape[0]),
        "passed": 0,
        "failed": 0,
        "failed_rows": [],
        "failures": [],
        "invalid_failed": 0,
        "raw_failed": 0,
        "exit_codes": [],
        "errors": [],
        "compiler_warnings": [],
        "wall_s": 0.0,
    }
    _copy(header, folder / "model.h")
    if footprint:
        try:
            entry["model"] = model_footprint(folder / "model.h", prefix, cpu, tools, folder)
            entry["model"]["with_log_joint"] = model_footprint(
                folder / "model.h", prefix, cpu, tools, folder, with_log_joint=True
            )
        except BuildError as exc:
            entry["errors"].append(str(exc))
    timing = _Timing()
    for k, (start, stop) in enumerate(bounds):
        sub = folder if len(bounds) == 1 else folder / f"part{k}"
        _run_part(entry, timing, header, prefix, artifact, rows, start, stop, k, board, tools, sub, timeout)
    entry["instructions"] = instruction_counts(timing.calib, timing.ticks, timing.rows, board)
    entry["ok"] = (
        entry["failed"] == 0
        and entry["invalid_failed"] == 0
        and entry["raw_failed"] == 0
        and not entry["errors"]
        and entry["passed"] == entry["n_rows"]
    )
    return entry


class _Timing:
    """The timer readings of a board's programs, summed: calibration (instructions, ticks), the
    ticks of the three loops (baseline, predict, log_joint), and the rows they timed."""

    def __init__(self) -> None:
        self.calib = [0, 0]
        self.ticks = np.zeros(3)
        self.rows = 0


def _run_part(entry, timing, header, prefix, artifact, rows, start, stop, k, board, tools, sub, timeout) -> None:
    """Build and run the program of rows ``start:stop`` (the ``k``-th) in ``sub``; add to ``entry``."""
    cpu = BOARDS[board][0]
    part = rows.chunk(start, stop)
    sub.mkdir(exist_ok=True)
    _copy(header, sub / "model.h")
    try:
        elf, warnings = build_image(
            sub / "model.h",
            prefix,
            part,
            cpu,
            tools,
            sub,
            artifact.n_features,
            artifact.n_classes,
            artifact.bits_per_parameter,
            board=board,
        )
    except BuildError as exc:
        entry["errors"].append(str(exc))
        entry["failed"] += int(part.x.shape[0])
        entry["failed_rows"] += list(range(start, stop))
        return
    if warnings:
        entry["compiler_warnings"].append(warnings)
    if k == 0:
        entry["image"] = image_sizes(parse_size_a(_output([tools.size, "-A", str(elf)])))
    res = run_image(elf, board, tools, timeout)
    entry["wall_s"] += res.wall_s
    entry["exit_codes"].append(res.exit_code)
    if res.timed_out or res.result is None:
        why = (
            f"timed out after {timeout:.0f} s"
            if res.timed_out
            else "took an exception (fault)"
            if res.fault or res.exit_code == FAULT_EXIT
            else f"ended without a result (exit code {res.exit_code})"
        )
        entry["errors"].append(
            f"rows {start}..{stop - 1}: the program {why}; output tail: "
            + " | ".join(res.stdout.strip().splitlines()[-3:])
        )
        entry["failed"] += int(part.x.shape[0])
        entry["failed_rows"] += list(range(start, stop))
        return
    n_check, failed, _, invalid_failed, _, raw_failed = res.result
    entry["passed"] += n_check - failed
    entry["failed"] += failed
    entry["invalid_failed"] += invalid_failed
    entry["raw_failed"] += raw_failed
    expected_exit = min(failed + invalid_failed + raw_failed, 254)
    if res.exit_code != expected_exit:
        entry["errors"].append(
            f"rows {start}..{stop - 1}: exit code {res.exit_code}, the program reported {expected_exit} failures"
        )
    for tag, r, rc, label, scores in res.failures:
        _record_failure(entry, tag, r, rc, label, scores, start, rows, part)
    if res.timing is not None:
        timing.calib[0] += res.timing[0]
        timing.calib[1] += res.timing[1]
        timing.ticks += np.array(res.timing[2:], dtype=float)
        timing.rows += n_check


def _record_failure(entry, tag, r, rc, label, scores, start, rows, part) -> None:
    """One failing row reported by the program (``tag``: FAIL, INVALID or RAW; ``r``: its index in ``part``)."""
    detail = {
        "kind": {"FAIL": "row", "INVALID": "invalid", "RAW": "raw"}[tag],
        "rc": rc,
        "label": label,
        "scores": scores,
    }
    if tag == "FAIL":
        detail.update(
            row=start + r,
            x=rows.x[start + r].tolist(),
            expected_label=int(rows.labels[start + r]),
            expected_scores=(-rows.sums[start + r]).tolist(),
        )
        entry["failed_rows"].append(start + r)
    elif tag == "INVALID":
        detail.update(row=r, x=part.invalid[r].tolist(), expected_label=-1, expected_scores="untouched")
    else:
        detail.update(
            row=r,
            x=[float(v) for v in part.raw_x[r]],
            expected_label=int(part.raw_labels[r]),
            expected_scores=(-part.raw_sums[r]).tolist() if part.raw_labels[r] >= 0 else "untouched",
        )
    if len(entry["failures"]) < MAX_DETAILED:
        entry["failures"].append(detail)


def instruction_counts(calib, ticks, n_rows, board: str = "mps2-an386") -> dict:
    """Executed instructions per row from the timer readings: calibration ``(instructions, ticks)``, the ticks of
    the empty, predict and log_joint loops summed over ``n_rows`` rows (module docstring)."""
    base = {
        "method": f"QEMU -icount shift=0 (1 instruction = 1 ns of virtual time), {FAMILY_TIMER[BOARD_FAMILY[board]]}, "
        "calibrated with a 2 x 100,000-instruction loop; executed instructions, not cycles"
    }
    if not calib[1] or not n_rows:
        return {**base, "available": False}
    per_tick = calib[0] / calib[1]
    baseline, predict, log_joint = ticks * per_tick / n_rows
    return {
        **base,
        "available": True,
        "instructions_per_tick": round(per_tick, 3),
        "n_rows": int(n_rows),
        "predict_per_row": round(predict - baseline, 1),
        "log_joint_per_row": round(log_joint - baseline, 1),
        "call_overhead_per_row": round(baseline, 1),
        "resolution_per_row": round(per_tick / n_rows, 2),
    }


# ================================================================================================
# Command line
# ================================================================================================
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bnc_deploy.targets.cortex_m",
        description="Cross-compile an exported C classifier (.h) for Cortex-M, run it on emulated boards "
        "(qemu-system-arm, semihosting) against the NumPy reference, report rows passed, FLASH/RAM "
        "and instruction counts (QEMU is not cycle-accurate). Needs the Debian packages "
        + ", ".join(DEBIAN_PACKAGES)
        + ".",
    )
    p.add_argument("file", help="MODEL.h (a C export; then --model is required) or MODEL.bnc (exported to C here)")
    p.add_argument("--model", metavar="MODEL.bnc", help="the model the .h was exported from (the ground truth)")
    p.add_argument(
        "--board", action="append", choices=[*BOARDS, "all"], help="board to run on (repeatable; default: all four)"
    )
    p.add_argument(
        "--data", metavar="PATH_OR_NAME", help="check the TEST split of this data set instead of the model's check set"
    )
    p.add_argument("--fold", type=int, default=None, metavar="K", help="1-based fold of --data (default 1)")
    p.add_argument(
        "--random",
        type=int,
        default=N_RANDOM_ROWS,
        metavar="N",
        help=f"seeded random valid rows added (default {N_RANDOM_ROWS})",
    )
    p.add_argument("--pack-bits", action="store_true", help="MODEL.bnc: export with --pack-bits")
    p.add_argument("--name", default=None, help="MODEL.bnc: C prefix of the export (default bnc)")
    p.add_argument("--raw-inputs", action="store_true", help="MODEL.bnc: export with --raw-inputs")
    p.add_argument("--no-integrity-check", action="store_true", help="check a .h whose seal does not verify")
    p.add_argument("--key", metavar="FILE", help="key file of a signed .h (hmac-sha256)")
    p.add_argument("--keep", metavar="DIR", help="keep the generated sources, ELF files and maps in DIR")
    p.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds per emulator run")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def _rows_from_data(artifact, spec: str, fold: int | None) -> tuple[np.ndarray, str]:
    from bnc_deploy.datasets import DatasetError, load_dataset

    try:
        ds = load_dataset(spec, fold=1 if fold is None else fold)
    except (DatasetError, OSError) as exc:
        raise InputError(f"--data {spec}: {exc}") from None
    return ds.x_test, f"{ds.name} test split, fold {ds.fold}"


def run(args: argparse.Namespace) -> dict:
    from bnc_deploy.artifacts import load_artifact

    boards = DEFAULT_BOARDS if not args.board or "all" in args.board else tuple(dict.fromkeys(args.board))
    tools = find_tools(boards)
    path = Path(args.file)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    is_header = path.suffix.lower() != ".bnc"
    key = None
    if args.key:
        from bnc_deploy.formats.integrity import read_key

        key = read_key(args.key)
    with tempfile.TemporaryDirectory(prefix="bnc-cortex-m-export-") as tmp:
        if is_header:
            if not args.model:
                raise ConfigError(
                    f"{path} is a C header: pass --model MODEL.bnc, the model it was exported from "
                    "(the expected values come from the model's NumPy reference)"
                )
            if args.pack_bits or args.raw_inputs or args.name:
                raise ConfigError("--pack-bits, --raw-inputs and --name apply when exporting a .bnc, not to a .h")
            artifact = load_artifact(args.model)
            header = path
        else:
            if args.model:
                raise ConfigError("--model is for a .h file; a .bnc is its own model")
            from bnc_deploy.verify import export_file

            artifact = load_artifact(path)
            options = {"pack_bits": args.pack_bits, "raw_inputs": args.raw_inputs}
            if args.name:
                options["name"] = args.name
            header = Path(tmp) / "model.h"
            export_file(artifact, header, "c", key=key, **options)
        given, source = (None, None)
        if args.data:
            given, source = _rows_from_data(artifact, args.data, args.fold)
        from bnc_deploy.formats.c import read_c_metadata

        raw = read_c_metadata(header).get("input") == "raw"
        rows = check_rows(artifact, given, source=source, n_random=args.random, raw_inputs=raw)
        workdir = Path(args.keep) if args.keep else None
        if workdir is not None:
            workdir.mkdir(parents=True, exist_ok=True)
        report = check_header(
            header,
            artifact,
            boards=boards,
            rows=rows,
            tools=tools,
            verify_integrity=not args.no_integrity_check,
            key=key,
            workdir=workdir,
            timeout=args.timeout,
        )
        report["header"] = str(path) if is_header else f"{path} (exported to C here)"
        report["model"] = str(args.model or path)
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m bnc_deploy.targets.cortex_m``: 0 all rows pass on all boards, 1 a failure, 2 a usage error."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.fold is not None and args.data is None:
        parser.error("--fold needs --data")
    if args.random < 0:
        parser.error("--random must be >= 0")
    try:
        report = run(args)
    except (BncDeployError, OSError) as exc:
        print(f"cortex-m: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
