"""The Cortex-M toolchain side of ``bnc_deploy.targets.cortex_m``: find the cross compiler and QEMU,
generate the test program's sources, compile and size it, run it on an emulated board.

Split from ``cortex_m.py`` (which chooses the rows, computes the reference's values and writes the
report); constants of the build (flags, boards, memory map in ``cortex_m_sources``) and
:class:`CheckRows`, the rows a test program embeds, live here, below ``cortex_m.py``.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from bnc_deploy.errors import BncDeployError, InputError
from bnc_deploy.targets.cortex_m_sources import BOARD_TIMER_H, DRIVER_C, FOOTPRINT_C, STARTUP_C, link_ld

#: board -> (``-mcpu``, description).
BOARDS: dict[str, tuple[str, str]] = {
    "mps2-an385": ("cortex-m3", "Arm MPS2 AN385, Cortex-M3"),
    "mps2-an386": ("cortex-m4", "Arm MPS2 AN386, Cortex-M4"),
    "mps2-an500": ("cortex-m7", "Arm MPS2 AN500, Cortex-M7"),
    "microbit": ("cortex-m0", "BBC micro:bit (nRF51822), Cortex-M0"),
}
#: board -> family: its memory map (``cortex_m_sources.MEMORY_MAPS``) and timer (``board_timer.h``).
BOARD_FAMILY = {"mps2-an385": "mps2", "mps2-an386": "mps2", "mps2-an500": "mps2", "microbit": "nrf51"}
#: Compiler definitions of a family's test program (the timer it reads), and that timer.
FAMILY_DEFINES = {"mps2": (), "nrf51": ("-DBOARD_NRF51=1",)}
FAMILY_TIMER = {"mps2": "CMSDK timer at 25 MHz", "nrf51": "nRF51 TIMER0 at 16 MHz"}
DEFAULT_BOARDS = tuple(BOARDS)
#: Debian packages that provide everything (bookworm: gcc 12.2, newlib 3.3, QEMU 7.2).
DEBIAN_PACKAGES = ("gcc-arm-none-eabi", "libnewlib-arm-none-eabi", "qemu-system-arm")
INSTALL_HINT = "apt-get install --no-install-recommends " + " ".join(DEBIAN_PACKAGES)
#: Compiler flags of every build (``-mcpu`` is the board's).
CFLAGS = ("-mthumb", "-Os", "-std=c99", "-Wall", "-Wextra", "-ffunction-sections", "-fdata-sections")
LDFLAGS = ("-nostartfiles", "--specs=nano.specs", "--specs=rdimon.specs", "-Wl,--gc-sections")
QEMU_FLAGS = (
    "-nographic",
    "-monitor",
    "none",
    "-serial",
    "none",
    "-no-reboot",
    "-semihosting-config",
    "enable=on,target=native",
    "-icount",
    "shift=0",
)
#: Bytes of check-row arrays per test program; more rows are split over several programs (a quarter of
#: the code memory on the micro:bit's 256 KiB).
ROW_BYTES_PER_IMAGE = 1 << 20
FAMILY_ROW_BYTES = {"mps2": ROW_BYTES_PER_IMAGE, "nrf51": 64 * 1024}


def row_bytes_per_image(boards) -> int:
    """Bytes of check rows per program that fit every board of ``boards``."""
    return min(FAMILY_ROW_BYTES[BOARD_FAMILY[b]] for b in boards)


#: Failing rows the program prints (all are counted).
MAX_PRINTED = 1000
#: Failures kept with full detail in the report.
MAX_DETAILED = 20
#: Seconds a compilation / an emulator run may take.
COMPILE_TIMEOUT_S, RUN_TIMEOUT_S = 300, 120
#: Calibration loop: iterations of ``subs``/``bne`` (2 instructions each).
CALIBRATION_ITERATIONS = 100_000
SENTINEL = 0x5A5A5A5A


class ToolchainError(BncDeployError):
    """The cross compiler, newlib or QEMU is missing or too old (the message names the packages)."""


# ================================================================================================
# The rows a test program embeds
# ================================================================================================
@dataclass
class CheckRows:
    """The rows a test program runs and the values the reference expects (all computed on the host).

    ``x`` (n, D) codes; ``sums`` (n, C) reference code sums (scores are their negation); ``labels``
    (n,); ``invalid`` (m, D) rows that must be refused; ``raw_x`` (k, D) float32 and ``raw_sums``,
    ``raw_labels`` (-1: must be refused) for raw-input headers; ``source`` says where rows come from.
    """

    x: np.ndarray
    sums: np.ndarray
    labels: np.ndarray
    invalid: np.ndarray
    n_given: int
    n_random: int
    source: str
    raw_x: np.ndarray | None = None
    raw_sums: np.ndarray | None = None
    raw_labels: np.ndarray | None = None

    @property
    def n_raw(self) -> int:
        return 0 if self.raw_x is None else int(self.raw_x.shape[0])

    def chunk(self, start: int, stop: int) -> CheckRows:
        """Rows ``start:stop`` (invalid and raw rows go with the first chunk only)."""
        first = start == 0
        return replace(
            self,
            x=self.x[start:stop],
            sums=self.sums[start:stop],
            labels=self.labels[start:stop],
            invalid=self.invalid if first else self.invalid[:0],
            raw_x=self.raw_x if first else None,
            raw_sums=self.raw_sums if first else None,
            raw_labels=self.raw_labels if first else None,
        )


# ================================================================================================
# Tools
# ================================================================================================
@dataclass(frozen=True)
class Tools:
    gcc: str
    size: str
    qemu: str
    gcc_version: str = ""
    qemu_version: str = ""


def find_tools(boards=DEFAULT_BOARDS) -> Tools:
    """The cross toolchain and emulator on PATH; ToolchainError naming the Debian packages if not."""
    gcc, size, qemu = (shutil.which(n) for n in ("arm-none-eabi-gcc", "arm-none-eabi-size", "qemu-system-arm"))
    missing = [
        name
        for name, path in (
            ("arm-none-eabi-gcc (gcc-arm-none-eabi)", gcc),
            ("arm-none-eabi-size (binutils-arm-none-eabi)", size),
            ("qemu-system-arm (qemu-system-arm)", qemu),
        )
        if path is None
    ]
    if missing:
        raise ToolchainError(f"{', '.join(missing)} not found on PATH; on Debian/Ubuntu: {INSTALL_HINT}")
    for specs in ("nano.specs", "rdimon.specs"):
        found = _output([gcc, f"-print-file-name={specs}"]).strip()
        if not found or not os.path.isabs(found):
            raise ToolchainError(
                f"arm-none-eabi-gcc cannot find {specs} (newlib with semihosting); on Debian/Ubuntu: {INSTALL_HINT}"
            )
    machines = _output([qemu, "-machine", "help"])
    absent = [b for b in boards if not re.search(rf"^{re.escape(b)}\s", machines, re.M)]
    if absent:
        raise ToolchainError(
            f"{qemu} has no machine {', '.join(absent)} (QEMU 6.0 or newer models AN385, "
            f"AN386, AN500 and microbit); on Debian/Ubuntu: {INSTALL_HINT}"
        )
    return Tools(
        gcc=gcc,
        size=size,
        qemu=qemu,
        gcc_version=_output([gcc, "--version"]).splitlines()[0].strip(),
        qemu_version=_output([qemu, "--version"]).splitlines()[0].strip(),
    )


def tools_available() -> str | None:
    """None when every tool is there, else the reason (for skipping tests)."""
    try:
        find_tools()
    except ToolchainError as exc:
        return str(exc)
    return None


def _output(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


# ================================================================================================
# Generated sources
# ================================================================================================
def _uint_type(max_value: int) -> str:
    for bits in (8, 16, 32):
        if max_value < 2**bits:
            return f"uint{bits}_t"
    raise InputError(f"value {max_value} does not fit 32 bits")


def _c_rows(ctype: str, name: str, array: np.ndarray, fmt=lambda v: str(int(v))) -> str:
    array = np.asarray(array)
    n = array.shape[0]
    dims = "".join(f"[{d}]" for d in array.shape[1:])
    lines = [f"static const {ctype} {name}[{max(n, 1)}]{dims} = {{"]
    if n == 0:
        lines.append("    {0}," if array.ndim > 1 else "    0,")
    for row in array:
        if array.ndim == 1:
            lines.append(f"    {fmt(row)},")
        else:
            lines.append("    {" + ", ".join(fmt(v) for v in np.asarray(row).reshape(-1)) + "},")
    lines.append("};")
    return "\n".join(lines)


def _float_literal(value) -> str:
    v = float(np.float32(value))
    if math.isnan(v):
        return "(0.0f / 0.0f)"
    if math.isinf(v):
        return "(1.0f / 0.0f)" if v > 0 else "(-1.0f / 0.0f)"
    return ("-" if math.copysign(1.0, v) < 0 else "") + float.hex(abs(v)) + "f"


def rows_header(rows: CheckRows, n_features: int, n_classes: int, bits: int) -> str:
    """``rows.h``: the rows and the expected values as constant arrays (they live in flash)."""
    max_sum = (n_features + 1) * (2**bits - 1)
    sum_type = _uint_type(max_sum)
    label_type = _uint_type(max(n_classes - 1, 0))
    d = n_features
    parts = [
        "/* Generated by bnc_deploy.targets.cortex_m: rows and the NumPy reference's values. */",
        f"#define N_CHECK {rows.x.shape[0]}u",
        f"#define N_INVALID {rows.invalid.shape[0]}u",
        f"#define N_RAW {rows.n_raw}",
        _c_rows("uint8_t", "check_x", rows.x.reshape(-1, d)),
        _c_rows(sum_type, "check_sum", rows.sums.reshape(-1, n_classes)),
        _c_rows(label_type, "check_label", rows.labels.reshape(-1)),
        _c_rows("uint8_t", "invalid_x", rows.invalid.reshape(-1, d)),
    ]
    if rows.n_raw:
        parts += [
            _c_rows("float", "raw_x", rows.raw_x.reshape(-1, d), fmt=_float_literal),
            _c_rows(sum_type, "raw_sum", rows.raw_sums.reshape(-1, n_classes)),
            _c_rows("int16_t", "raw_label", rows.raw_labels.reshape(-1)),
        ]
    return "\n".join(parts) + "\n"


def driver_source(prefix: str) -> str:
    return DRIVER_C.substitute(
        P=prefix,
        M=prefix.upper(),
        sentinel=f"{SENTINEL:08X}",
        max_printed=MAX_PRINTED,
        calibration=CALIBRATION_ITERATIONS,
    )


# ================================================================================================
# Build and run
# ================================================================================================
def _compile(cmd: list[str], cwd: Path, what: str) -> str:
    """Run a compiler command in ``cwd``; return its warnings (stderr); BuildError when it fails."""
    try:
        done = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what}: the compiler ran longer than {COMPILE_TIMEOUT_S} s") from None
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.splitlines()
        hint = ""
        if "will not fit in region" in done.stderr or "overflowed by" in done.stderr:
            hint = " (the program does not fit the board's code memory or RAM: cortex_m_sources.MEMORY_MAPS)"
        raise BuildError(f"{what} failed{hint}: {errors[0] if errors else done.returncode}")
    return done.stderr.strip()


def _copy(source: Path, target: Path) -> None:
    if Path(source).resolve() != Path(target).resolve():
        shutil.copyfile(source, target)


class BuildError(RuntimeError):
    """The generated program did not compile or link (a finding of the check, not a usage error)."""


def parse_size_a(text: str) -> dict[str, int]:
    """``arm-none-eabi-size -A`` output -> {section: bytes} (allocated sections and debug alike)."""
    sections = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith(".") and parts[1].isdigit():
            sections[parts[0]] = int(parts[1])
    return sections


def image_sizes(sections: dict[str, int]) -> dict:
    """FLASH/RAM of a linked image from its sections."""
    get = sections.get
    flash = get(".text", 0) + get(".rodata", 0) + get(".ARM.exidx", 0) + get(".data", 0)
    ram = get(".data", 0) + get(".bss", 0) + get(".stack", 0)
    return {
        "flash_bytes": flash,
        "ram_bytes": ram,
        "heap_bytes": get(".heap", 0),
        "sections": {k: v for k, v in sections.items() if not k.startswith((".debug", ".comment", ".ARM.attr"))},
    }


def _stack_from_callgraph(ci_text: str, entry: str) -> tuple[int | None, list[str], bool]:
    """Worst-case stack of ``entry`` from a ``-fcallgraph-info=su`` file: (bytes, external callees,
    bounded). Functions without stack information (library calls) are listed, not counted."""
    frames, qualifiers, edges = {}, {}, {}
    for m in re.finditer(r'node: \{ title: "([^"]+)" label: "([^"]*)"', ci_text):
        size = re.search(r"(\d+) bytes \(([^)]*)\)", m.group(2))
        if size:
            frames[m.group(1)] = int(size.group(1))
            qualifiers[m.group(1)] = size.group(2)
    for m in re.finditer(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"', ci_text):
        edges.setdefault(m.group(1), []).append(m.group(2))
    external: list[str] = []

    def depth(node: str, path: tuple) -> int:
        if node in path:
            raise ValueError("recursion")
        if node not in frames:
            external.append(node.split(":")[-1])
            return 0
        return frames[node] + max((depth(t, path + (node,)) for t in edges.get(node, [])), default=0)

    if entry not in frames:
        return None, [], False
    try:
        total = depth(entry, ())
    except ValueError:
        return None, [], False
    bounded = all(q == "static" or "bounded" in q for q in qualifiers.values())
    return total, sorted(set(external)), bounded


def model_footprint(
    header: Path, prefix: str, cpu: str, tools: Tools, workdir: Path, with_log_joint: bool = False
) -> dict:
    """The header's own FLASH/RAM on ``cpu`` (see the module docstring, Sizes)."""
    tag = "both" if with_log_joint else "predict"
    src = workdir / f"footprint_{tag}.c"
    src.write_text(FOOTPRINT_C.substitute(P=prefix), encoding="ascii")
    obj = workdir / f"footprint_{tag}.o"
    cmd = [
        tools.gcc,
        f"-mcpu={cpu}",
        *CFLAGS,
        "-fstack-usage",
        "-fcallgraph-info=su",
        f"-DWITH_LOG_JOINT={int(with_log_joint)}",
        "-c",
        src.name,
        "-o",
        obj.name,
    ]
    warnings = _compile(cmd, workdir, "compiling the model header")
    sections = parse_size_a(_output([tools.size, "-A", str(obj)]))
    code = sum(v for k, v in sections.items() if k.startswith(".text"))
    tables = sum(v for k, v in sections.items() if k.startswith(".rodata"))
    codes = sections.get(f".rodata.{prefix}_codes", 0)
    static = sum(v for k, v in sections.items() if k.startswith((".data", ".bss")))
    ci = workdir / f"footprint_{tag}.ci"
    stack, external, bounded = None, [], False
    if ci.is_file():
        ci_text = ci.read_text(encoding="utf-8", errors="replace")
        stacks = []
        for entry in ["bnc_target_predict"] + (["bnc_target_log_joint"] if with_log_joint else []):
            s, ext, b = _stack_from_callgraph(ci_text, entry)
            stacks.append(s)
            external += ext
            bounded = b
        stack = None if any(s is None for s in stacks) else max(stacks)
    return {
        "entry_points": ["predict", "log_joint"] if with_log_joint else ["predict"],
        "code_bytes": code,
        "table_bytes": tables,
        "codes_bytes": codes,
        "index_bytes": tables - codes,
        "flash_bytes": code + tables,
        "data_bss_bytes": static,
        "stack_bytes": stack,
        "stack_bounded": bounded,
        "ram_bytes": None if stack is None else static + stack,
        "external_calls": sorted(set(external)),
        "compiler_warnings": warnings,
        "sections": {k: v for k, v in sections.items() if k.startswith((".text", ".rodata", ".data", ".bss")) and v},
    }


def build_image(
    header: Path,
    prefix: str,
    rows: CheckRows,
    cpu: str,
    tools: Tools,
    workdir: Path,
    n_features: int,
    n_classes: int,
    bits: int,
    board: str = "mps2-an386",
) -> tuple[Path, str]:
    """Write the sources for ``board`` (its memory map and timer; ``cpu`` is its ``-mcpu``) into ``workdir`` and
    link ``image.elf``; return (path, compiler warnings)."""
    family = BOARD_FAMILY[board]
    (workdir / "startup.c").write_text(STARTUP_C, encoding="ascii")
    (workdir / "link.ld").write_text(link_ld(family), encoding="ascii")
    (workdir / "board_timer.h").write_text(BOARD_TIMER_H, encoding="ascii")
    (workdir / "driver.c").write_text(driver_source(prefix), encoding="ascii")
    (workdir / "rows.h").write_text(rows_header(rows, n_features, n_classes, bits), encoding="ascii")
    _copy(header, workdir / "model.h")
    elf = workdir / "image.elf"
    cmd = [
        tools.gcc,
        f"-mcpu={cpu}",
        *CFLAGS,
        *FAMILY_DEFINES[family],
        *LDFLAGS,
        "-T",
        "link.ld",
        "-Wl,-Map=image.map",
        "startup.c",
        "driver.c",
        "-o",
        elf.name,
    ]
    warnings = _compile(cmd, workdir, f"building the test program for {cpu}")
    return elf, warnings


@dataclass
class RunResult:
    exit_code: int | None
    stdout: str
    wall_s: float
    timed_out: bool = False
    failures: list = field(default_factory=list)  # (tag, row, rc, label, scores)
    result: tuple | None = None  # N_CHECK, failures, N_INVALID, invalid failures, N_RAW, raw failures
    timing: tuple | None = None  # calibration instructions, calibration ticks, baseline, predict, log_joint
    fault: bool = False


def run_image(elf: Path, board: str, tools: Tools, timeout: float = RUN_TIMEOUT_S) -> RunResult:
    """Run ``elf`` on ``board`` in QEMU (semihosting, -icount shift=0) and parse what it printed."""
    cmd = [tools.qemu, "-M", board, *QEMU_FLAGS, "-kernel", str(elf)]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, errors="replace"
        )
        out, code, timed_out = done.stdout + done.stderr, done.returncode, False
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or b""
        out = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        code, timed_out = None, True
    res = RunResult(exit_code=code, stdout=out, wall_s=time.perf_counter() - start, timed_out=timed_out)
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] in ("FAIL", "INVALID", "RAW") and len(parts) >= 4:
            try:
                res.failures.append(
                    (parts[0], int(parts[1]), int(parts[2]), int(parts[3]), [int(v) for v in parts[4:]])
                )
            except ValueError:
                pass
        elif parts[0] == "RESULT" and len(parts) == 7:
            res.result = tuple(int(v) for v in parts[1:])
        elif parts[0] == "TIMING" and len(parts) == 6:
            res.timing = tuple(int(v) for v in parts[1:])
        elif parts[0] == "FAULT":
            res.fault = True
    return res
