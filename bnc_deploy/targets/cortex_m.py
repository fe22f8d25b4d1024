"""Run an exported C classifier (``bnc-export --format c``) on emulated Cortex-M boards and check it.

Emulated, not on hardware: the header is cross-compiled with ``arm-none-eabi-gcc -Os`` into a
bare-metal program for an Arm MPS2 board and run in ``qemu-system-arm``; the program computes
``PREFIX_log_joint`` and ``PREFIX_predict`` for every check row on the emulated CPU and compares
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
rows), as :mod:`bnc_deploy.verify` uses. A row passes when ``log_joint`` returns 0 with every
score equal to ``-(reference code sum)`` and ``predict`` returns the reference label. Besides,
one invalid row per feature (code = cardinality, where that fits a byte) must make both
functions return -1 and leave ``scores`` untouched; raw-input headers (``--raw-inputs``) also run
``PREFIX_log_joint_raw``/``PREFIX_predict_raw`` on the raw representatives of the rows
(:func:`bnc_deploy.formats.bnc.raw_representatives`, float32 as exact hexadecimal literals) and on
NaN/+-inf rows, which must be refused.

Boards (QEMU machines; the memory map is QEMU's ``hw/arm/mps2.c``, the same for the three)
------------------------------------------------------------------------------------------
========== ========== =====================================================================
board      CPU        memory used by the program
========== ========== =====================================================================
mps2-an385 Cortex-M3  code/constants: ZBT SSRAM1 0x00000000 (4 MiB, the "flash"),
mps2-an386 Cortex-M4  data/bss/heap/stack: ZBT SSRAM2&3 0x20000000 (4 MiB)
mps2-an500 Cortex-M7
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
clock by exactly 1 ns per executed instruction; the program reads the MPS2 CMSDK dual timer
(25 MHz, 40 ns per tick) around loops over the rows, and calibrates the ratio with a loop of
known length (``subs``/``bne``, 2 instructions x 100,000): ``instructions = ticks * (200,000 /
calibration ticks)``. Reported: executed instructions per row of ``predict`` and ``log_joint``,
net of the same loop calling an empty function (resolution: one tick, 40 instructions, per
loop over all rows). On the real chip cycles per instruction differ by core and memory.

Exit status: 0 when every row passes on every board; 1 when some row fails or a program crashes
or times out; 2 for usage errors (missing toolchain - naming the Debian packages -, a header not
exported from ``--model``, a modified header, bad data).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from bnc_deploy.errors import BncDeployError, ConfigError, InputError, MetadataError

#: board -> (``-mcpu``, description). Memory map: :data:`FLASH_ORIGIN`/:data:`RAM_ORIGIN`.
BOARDS: dict[str, tuple[str, str]] = {
    "mps2-an385": ("cortex-m3", "Arm MPS2 AN385, Cortex-M3"),
    "mps2-an386": ("cortex-m4", "Arm MPS2 AN386, Cortex-M4"),
    "mps2-an500": ("cortex-m7", "Arm MPS2 AN500, Cortex-M7"),
}
DEFAULT_BOARDS = tuple(BOARDS)
#: Debian packages that provide everything (bookworm: gcc 12.2, newlib 3.3, QEMU 7.2).
DEBIAN_PACKAGES = ("gcc-arm-none-eabi", "libnewlib-arm-none-eabi", "qemu-system-arm")
INSTALL_HINT = "apt-get install --no-install-recommends " + " ".join(DEBIAN_PACKAGES)
#: QEMU hw/arm/mps2.c, AN385/AN386/AN500: ZBT SSRAM1 (code) and ZBT SSRAM2&3 (data), 4 MiB each.
FLASH_ORIGIN, FLASH_LENGTH = 0x00000000, 4 * 2**20
RAM_ORIGIN, RAM_LENGTH = 0x20000000, 4 * 2**20
#: Stack and heap reserved in the test image (sections ``.stack``/``.heap``).
STACK_BYTES, HEAP_BYTES = 16 * 1024, 32 * 1024
#: Compiler flags of every build (``-mcpu`` is the board's).
CFLAGS = ("-mthumb", "-Os", "-std=c99", "-Wall", "-Wextra", "-ffunction-sections", "-fdata-sections")
LDFLAGS = ("-nostartfiles", "--specs=nano.specs", "--specs=rdimon.specs", "-Wl,--gc-sections")
QEMU_FLAGS = ("-nographic", "-monitor", "none", "-serial", "none", "-no-reboot",
              "-semihosting-config", "enable=on,target=native", "-icount", "shift=0")
#: Random rows added to the check rows (as the verifier does).
N_RANDOM_ROWS = 256
#: Bytes of check-row arrays per test program; more rows are split over several programs.
ROW_BYTES_PER_IMAGE = 1 << 20
#: Failing rows the program prints (all are counted).
MAX_PRINTED = 1000
#: Failures kept with full detail in the report.
MAX_DETAILED = 20
#: Seconds a compilation / an emulator run may take.
COMPILE_TIMEOUT_S, RUN_TIMEOUT_S = 300, 120
#: Calibration loop: iterations of ``subs``/``bne`` (2 instructions each).
CALIBRATION_ITERATIONS = 100_000
#: Exit code of the program on a fault (HardFault and other exceptions).
FAULT_EXIT = 255
SENTINEL = 0x5A5A5A5A

STARTUP_C = r"""/* Bare-metal start-up for QEMU's MPS2 boards (bnc_deploy.targets.cortex_m). */
#include <stdint.h>
#include <stdlib.h>

extern uint32_t __data_load__, __data_start__, __data_end__, __bss_start__, __bss_end__, __stack_top__;
extern int main(void);
extern void initialise_monitor_handles(void);
extern void _exit(int status);
void Reset_Handler(void);
void Fault_Handler(void);

/* Semihosting SYS_WRITE0: a message that does not depend on the C library's state. */
static void semihosting_write0(const char *text)
{
    register uint32_t op __asm__("r0") = 0x04u;
    register const char *arg __asm__("r1") = text;
    __asm__ volatile ("bkpt 0xab" : "+r"(op) : "r"(arg) : "memory");
}

void Fault_Handler(void)
{
    semihosting_write0("\nFAULT the program took an exception (HardFault/MemManage/BusFault/UsageFault)\n");
    _exit(%d);
}

__attribute__((section(".vectors"), used))
const void *const vector_table[16] = {
    &__stack_top__, (const void *)Reset_Handler,
    (const void *)Fault_Handler, (const void *)Fault_Handler, (const void *)Fault_Handler,
    (const void *)Fault_Handler, (const void *)Fault_Handler, 0, 0, 0, 0,
    (const void *)Fault_Handler, (const void *)Fault_Handler, 0,
    (const void *)Fault_Handler, (const void *)Fault_Handler,
};

void Reset_Handler(void)
{
    uint32_t *src = &__data_load__, *dst = &__data_start__;
    while (dst < &__data_end__) {
        *dst++ = *src++;
    }
    for (dst = &__bss_start__; dst < &__bss_end__; ++dst) {
        *dst = 0u;
    }
    initialise_monitor_handles();
    exit(main());
}
""" % FAULT_EXIT

LINK_LD = """\
/* MPS2 AN385/AN386/AN500 in QEMU (hw/arm/mps2.c): ZBT SSRAM1 at 0 holds code and constants
   (the "flash"), ZBT SSRAM2&3 at 0x20000000 holds data, heap and stack. */
MEMORY
{
    FLASH (rx)  : ORIGIN = 0x%08X, LENGTH = %d
    RAM   (rwx) : ORIGIN = 0x%08X, LENGTH = %d
}
ENTRY(Reset_Handler)
SECTIONS
{
    .text : { KEEP(*(.vectors)) *(.text*) KEEP(*(.init)) KEEP(*(.fini)) } > FLASH
    .rodata : { . = ALIGN(4); *(.rodata*) . = ALIGN(4); } > FLASH
    .ARM.exidx : { *(.ARM.exidx*) } > FLASH
    .data : { . = ALIGN(4); __data_start__ = .; *(.data*) . = ALIGN(4); __data_end__ = .; } > RAM AT > FLASH
    __data_load__ = LOADADDR(.data);
    .bss (NOLOAD) : { . = ALIGN(4); __bss_start__ = .; *(.bss*) *(COMMON) . = ALIGN(4); __bss_end__ = .; } > RAM
    .heap (NOLOAD) : { . = ALIGN(8); end = .; __end__ = .; . += %d; } > RAM
    .stack (NOLOAD) : { . = ALIGN(8); . += %d; __stack_top__ = .; } > RAM
}
""" % (FLASH_ORIGIN, FLASH_LENGTH, RAM_ORIGIN, RAM_LENGTH, HEAP_BYTES, STACK_BYTES)

#: The test program; ``$P`` is the header's prefix, ``$M`` the same upper-cased.
DRIVER_C = string.Template(r"""/* Generated by bnc_deploy.targets.cortex_m: runs model.h on the rows of rows.h. */
#include <stdint.h>
#include <stdio.h>
#include "model.h"
#include "rows.h"

/* CMSDK APB dual timer 1 of the MPS2 boards (25 MHz, 32-bit, counts down). */
#define TIMER1_LOAD (*(volatile uint32_t *)0x40002000u)
#define TIMER1_VALUE (*(volatile uint32_t *)0x40002004u)
#define TIMER1_CONTROL (*(volatile uint32_t *)0x40002008u)
#define SENTINEL ((int32_t)0x${sentinel})
#define MAX_PRINTED ${max_printed}u

static volatile int32_t sink;
static unsigned printed;

__attribute__((noinline)) static int call_baseline(const uint8_t *x, int32_t *scores)
{
    scores[0] = (int32_t)x[0];
    return 0;
}

__attribute__((noinline)) static int call_predict(const uint8_t *x, int32_t *scores)
{
    (void)scores;
    return ${P}_predict(x);
}

__attribute__((noinline)) static int call_log_joint(const uint8_t *x, int32_t *scores)
{
    return ${P}_log_joint(x, scores);
}

static void fill(int32_t *scores)
{
    int c;
    for (c = 0; c < ${M}_N_CLASSES; ++c) {
        scores[c] = SENTINEL;
    }
}

static void report(const char *tag, unsigned r, int rc, int label, const int32_t *scores)
{
    int c;
    if (printed++ >= MAX_PRINTED) {
        return;
    }
    printf("%s %u %d %d", tag, r, rc, label);
    for (c = 0; c < ${M}_N_CLASSES; ++c) {
        printf(" %ld", (long)scores[c]);
    }
    printf("\n");
}

static unsigned check_rows(void)
{
    unsigned r, failures = 0;
    int32_t scores[${M}_N_CLASSES];
    for (r = 0; r < N_CHECK; ++r) {
        int c, rc, label, ok;
        fill(scores);
        rc = call_log_joint(check_x[r], scores);
        label = call_predict(check_x[r], scores);
        ok = rc == 0 && label == (int)check_label[r];
        for (c = 0; c < ${M}_N_CLASSES; ++c) {
            if (scores[c] != -(int32_t)check_sum[r][c]) {
                ok = 0;
            }
        }
        if (!ok) {
            ++failures;
            report("FAIL", r, rc, label, scores);
        }
    }
    return failures;
}

static unsigned check_invalid(void)
{
    unsigned r, failures = 0;
    int32_t scores[${M}_N_CLASSES];
    for (r = 0; r < N_INVALID; ++r) {
        int c, rc, label, ok;
        fill(scores);
        rc = ${P}_log_joint(invalid_x[r], scores);
        label = ${P}_predict(invalid_x[r]);
        ok = rc == -1 && label == -1;
        for (c = 0; c < ${M}_N_CLASSES; ++c) {
            if (scores[c] != SENTINEL) {
                ok = 0;
            }
        }
        if (!ok) {
            ++failures;
            report("INVALID", r, rc, label, scores);
        }
    }
    return failures;
}

#if N_RAW > 0
static unsigned check_raw(void)
{
    unsigned r, failures = 0;
    int32_t scores[${M}_N_CLASSES];
    for (r = 0; r < N_RAW; ++r) {
        int c, rc, label, ok;
        fill(scores);
        rc = ${P}_log_joint_raw(raw_x[r], scores);
        label = ${P}_predict_raw(raw_x[r]);
        if (raw_label[r] < 0) {
            ok = rc == -1 && label == -1;
            for (c = 0; c < ${M}_N_CLASSES; ++c) {
                if (scores[c] != SENTINEL) {
                    ok = 0;
                }
            }
        } else {
            ok = rc == 0 && label == (int)raw_label[r];
            for (c = 0; c < ${M}_N_CLASSES; ++c) {
                if (scores[c] != -(int32_t)raw_sum[r][c]) {
                    ok = 0;
                }
            }
        }
        if (!ok) {
            ++failures;
            report("RAW", r, rc, label, scores);
        }
    }
    return failures;
}
#endif

static uint32_t loop_ticks(int (*call)(const uint8_t *, int32_t *))
{
    unsigned r;
    int32_t scores[${M}_N_CLASSES];
    uint32_t start = TIMER1_VALUE, stop;
    for (r = 0; r < N_CHECK; ++r) {
        sink += call(check_x[r], scores);
    }
    stop = TIMER1_VALUE;
    return start - stop;
}

static void timing(void)
{
    uint32_t n = ${calibration}u, start, calibration, baseline, predict, log_joint;
    start = TIMER1_VALUE;
    __asm__ volatile ("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
    calibration = start - TIMER1_VALUE;
    baseline = loop_ticks(call_baseline);
    predict = loop_ticks(call_predict);
    log_joint = loop_ticks(call_log_joint);
    printf("TIMING %lu %lu %lu %lu %lu\n", (unsigned long)${calibration}u * 2ul, (unsigned long)calibration,
           (unsigned long)baseline, (unsigned long)predict, (unsigned long)log_joint);
}

int main(void)
{
    unsigned failures, invalid_failures, raw_failures = 0, total;
    TIMER1_CONTROL = 0u;
    TIMER1_LOAD = 0xFFFFFFFFu;
    TIMER1_CONTROL = 0x82u; /* enable, free-running, 32-bit, prescale 1, no interrupt */
    failures = check_rows();
    invalid_failures = check_invalid();
#if N_RAW > 0
    raw_failures = check_raw();
#endif
    timing();
    total = failures + invalid_failures + raw_failures;
    printf("RESULT %u %u %u %u %u %u\n", (unsigned)N_CHECK, failures, (unsigned)N_INVALID, invalid_failures,
           (unsigned)N_RAW, raw_failures);
    return total > 254u ? 254 : (int)total;
}
""")

FOOTPRINT_C = string.Template(r"""/* The model's own footprint: only what a deployment calls. */
#include "model.h"
int bnc_target_predict(const uint8_t *x);
int bnc_target_predict(const uint8_t *x)
{
    return ${P}_predict(x);
}
#if WITH_LOG_JOINT
int bnc_target_log_joint(const uint8_t *x, int32_t *scores);
int bnc_target_log_joint(const uint8_t *x, int32_t *scores)
{
    return ${P}_log_joint(x, scores);
}
#endif
""")


class ToolchainError(BncDeployError):
    """The cross compiler, newlib or QEMU is missing or too old (the message names the packages)."""


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
    missing = [name for name, path in (("arm-none-eabi-gcc (gcc-arm-none-eabi)", gcc),
                                       ("arm-none-eabi-size (binutils-arm-none-eabi)", size),
                                       ("qemu-system-arm (qemu-system-arm)", qemu)) if path is None]
    if missing:
        raise ToolchainError(f"{', '.join(missing)} not found on PATH; on Debian/Ubuntu: {INSTALL_HINT}")
    for specs in ("nano.specs", "rdimon.specs"):
        found = _output([gcc, f"-print-file-name={specs}"]).strip()
        if not found or not os.path.isabs(found):
            raise ToolchainError(f"arm-none-eabi-gcc cannot find {specs} (newlib with semihosting); on "
                                 f"Debian/Ubuntu: {INSTALL_HINT}")
    machines = _output([qemu, "-machine", "help"])
    absent = [b for b in boards if not re.search(rf"^{re.escape(b)}\s", machines, re.M)]
    if absent:
        raise ToolchainError(f"{qemu} has no machine {', '.join(absent)} (QEMU 6.0 or newer models AN385, "
                             f"AN386 and AN500); on Debian/Ubuntu: {INSTALL_HINT}")
    return Tools(gcc=gcc, size=size, qemu=qemu, gcc_version=_output([gcc, "--version"]).splitlines()[0].strip(),
                 qemu_version=_output([qemu, "--version"]).splitlines()[0].strip())


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
# What to check: rows and the reference's values
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

    def chunk(self, start: int, stop: int) -> "CheckRows":
        """Rows ``start:stop`` (invalid and raw rows go with the first chunk only)."""
        first = start == 0
        return replace(self, x=self.x[start:stop], sums=self.sums[start:stop], labels=self.labels[start:stop],
                       invalid=self.invalid if first else self.invalid[:0],
                       raw_x=self.raw_x if first else None, raw_sums=self.raw_sums if first else None,
                       raw_labels=self.raw_labels if first else None)


def check_rows(artifact, rows=None, *, source: str | None = None, n_random: int = N_RANDOM_ROWS,
               raw_inputs: bool = False) -> CheckRows:
    """Rows (the given ones, else the model's check set, then ``n_random`` seeded random rows) and the
    reference's integer sums and labels for them; invalid rows; raw rows when ``raw_inputs``."""
    from bnc_deploy.reference import reference_predictor
    from bnc_deploy.validation import check_codes, random_valid_codes

    if not artifact.is_quantized:
        raise InputError("the C export needs a quantized model (integer code sums)")
    given = rows if rows is not None else artifact.check_x
    parts = []
    if given is not None:
        parts.append(check_codes(given, artifact.cardinalities, artifact.feature_names,
                                 where=source or "check rows"))
    n_given = int(parts[0].shape[0]) if parts else 0
    if n_random:
        parts.append(random_valid_codes(artifact.cardinalities, n_random, 0))
    if not parts:
        raise InputError("no rows to check: the model stores no check set; pass --data or --random N")
    x = np.concatenate(parts).astype(np.int64)
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
    out = CheckRows(x=x, sums=sums, labels=labels, invalid=invalid, n_given=n_given, n_random=int(n_random),
                    source=source)
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
# Generated sources
# ================================================================================================
def _uint_type(max_value: int) -> str:
    for bits in (8, 16, 32):
        if max_value < 2 ** bits:
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
    max_sum = (n_features + 1) * (2 ** bits - 1)
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
    return DRIVER_C.substitute(P=prefix, M=prefix.upper(), sentinel=f"{SENTINEL:08X}", max_printed=MAX_PRINTED,
                               calibration=CALIBRATION_ITERATIONS)


# ================================================================================================
# Build and run
# ================================================================================================
def _compile(cmd: list[str], cwd: Path, what: str) -> str:
    """Run a compiler command in ``cwd``; return its warnings (stderr); BuildError when it fails."""
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what}: the compiler ran longer than {COMPILE_TIMEOUT_S} s") from None
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.splitlines()
        hint = ""
        if "will not fit in region" in done.stderr or "overflowed by" in done.stderr:
            hint = (f" (the program does not fit the board's {FLASH_LENGTH // 2**20} MiB code memory / "
                    f"{RAM_LENGTH // 2**20} MiB RAM)")
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
    return {"flash_bytes": flash, "ram_bytes": ram, "heap_bytes": get(".heap", 0),
            "sections": {k: v for k, v in sections.items() if not k.startswith((".debug", ".comment", ".ARM.attr"))}}


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


def model_footprint(header: Path, prefix: str, cpu: str, tools: Tools, workdir: Path,
                    with_log_joint: bool = False) -> dict:
    """The header's own FLASH/RAM on ``cpu`` (see the module docstring, Sizes)."""
    tag = "both" if with_log_joint else "predict"
    src = workdir / f"footprint_{tag}.c"
    src.write_text(FOOTPRINT_C.substitute(P=prefix), encoding="ascii")
    obj = workdir / f"footprint_{tag}.o"
    cmd = [tools.gcc, f"-mcpu={cpu}", *CFLAGS, "-fstack-usage", "-fcallgraph-info=su",
           f"-DWITH_LOG_JOINT={int(with_log_joint)}", "-c", src.name, "-o", obj.name]
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
        for entry in (["bnc_target_predict"] + (["bnc_target_log_joint"] if with_log_joint else [])):
            s, ext, b = _stack_from_callgraph(ci_text, entry)
            stacks.append(s)
            external += ext
            bounded = b
        stack = None if any(s is None for s in stacks) else max(stacks)
    return {
        "entry_points": ["predict", "log_joint"] if with_log_joint else ["predict"],
        "code_bytes": code, "table_bytes": tables, "codes_bytes": codes, "index_bytes": tables - codes,
        "flash_bytes": code + tables,
        "data_bss_bytes": static, "stack_bytes": stack, "stack_bounded": bounded,
        "ram_bytes": None if stack is None else static + stack,
        "external_calls": sorted(set(external)), "compiler_warnings": warnings,
        "sections": {k: v for k, v in sections.items() if k.startswith((".text", ".rodata", ".data", ".bss"))
                     and v},
    }


def build_image(header: Path, prefix: str, rows: CheckRows, cpu: str, tools: Tools, workdir: Path,
                n_features: int, n_classes: int, bits: int) -> tuple[Path, str]:
    """Write the sources into ``workdir`` and link ``image.elf``; return (path, compiler warnings)."""
    (workdir / "startup.c").write_text(STARTUP_C, encoding="ascii")
    (workdir / "link.ld").write_text(LINK_LD, encoding="ascii")
    (workdir / "driver.c").write_text(driver_source(prefix), encoding="ascii")
    (workdir / "rows.h").write_text(rows_header(rows, n_features, n_classes, bits), encoding="ascii")
    _copy(header, workdir / "model.h")
    elf = workdir / "image.elf"
    cmd = [tools.gcc, f"-mcpu={cpu}", *CFLAGS, *LDFLAGS, "-T", "link.ld", "-Wl,-Map=image.map",
           "startup.c", "driver.c", "-o", elf.name]
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
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              errors="replace")
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
                res.failures.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3]),
                                     [int(v) for v in parts[4:]]))
            except ValueError:
                pass
        elif parts[0] == "RESULT" and len(parts) == 7:
            res.result = tuple(int(v) for v in parts[1:])
        elif parts[0] == "TIMING" and len(parts) == 6:
            res.timing = tuple(int(v) for v in parts[1:])
        elif parts[0] == "FAULT":
            res.fault = True
    return res


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
        raise ConfigError(f"{header} was not exported from this model (its artifact_sha256 "
                          f"{str(meta.get('artifact_sha256'))[:12]}... differs from the model's {expected[:12]}...); "
                          "pass the .bnc it was exported from")
    return meta


def check_header(header, artifact, *, boards=DEFAULT_BOARDS, rows: CheckRows | None = None,
                 tools: Tools | None = None, verify_integrity: bool = True, key: bytes | None = None,
                 workdir=None, timeout: float = RUN_TIMEOUT_S, footprint: bool = True) -> dict:
    """Cross-compile ``header`` for each board, run the check rows in QEMU, return the report.

    ``artifact``: the model the header was exported from (the ground truth). ``rows``: from
    :func:`check_rows` (default: the model's check set + 256 random rows; raw rows when the header
    takes raw inputs). ``workdir``: keep the build files there (default: a temporary folder).
    Raises ToolchainError, MetadataError/ConfigError (wrong header) and IntegrityError (modified
    header); failing rows, failed builds, crashes and timeouts are in the report (``ok`` False).
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
    d, c, bits = artifact.n_features, artifact.n_classes, artifact.bits_per_parameter
    per_row = d + c * 4 + 2 + (4 * d if raw else 0)
    rows_per_image = max(1, ROW_BYTES_PER_IMAGE // per_row)
    n = rows.x.shape[0]
    bounds = [(s, min(n, s + rows_per_image)) for s in range(0, max(n, 1), rows_per_image)]
    report = {
        "target": "cortex-m",
        "method": "emulated: arm-none-eabi-gcc -Os, bare metal on QEMU MPS2 boards (semihosting); QEMU is not "
                  "cycle-accurate: instruction counts, no latency",
        "header": str(header), "header_sha256": hashlib.sha256(header.read_bytes()).hexdigest(),
        "c_name": prefix, "model_kind": artifact.kind, "structure": artifact.structure,
        "n_features": d, "n_classes": c, "bits": bits, "n_parameters": artifact.n_parameters,
        "size_bits": artifact.size_bits, "size_bytes": math.ceil(artifact.size_bits / 8),
        "table_bytes": meta.get("table_bytes"), "table_storage": meta.get("table_storage"),
        "input": meta.get("input", "codes"),
        "rows": {"source": rows.source, "n_given": rows.n_given, "n_random": rows.n_random, "n_rows": int(n),
                 "n_invalid": int(rows.invalid.shape[0]), "n_raw": rows.n_raw, "n_programs": len(bounds)},
        "toolchain": {"gcc": tools.gcc_version, "qemu": tools.qemu_version, "cflags": list(CFLAGS),
                      "ldflags": list(LDFLAGS), "qemu_flags": list(QEMU_FLAGS)},
        "boards": [],
    }
    with tempfile.TemporaryDirectory(prefix="bnc-cortex-m-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        for board in boards:
            report["boards"].append(_check_board(header, prefix, artifact, rows, bounds, board, tools, root,
                                                 timeout, footprint))
    report["ok"] = all(b["ok"] for b in report["boards"])
    return report


def _check_board(header, prefix, artifact, rows, bounds, board, tools, root, timeout, footprint) -> dict:
    cpu = BOARDS[board][0]
    folder = root / board
    folder.mkdir(parents=True, exist_ok=True)
    entry = {"board": board, "cpu": cpu, "description": BOARDS[board][1], "n_rows": int(rows.x.shape[0]),
             "passed": 0, "failed": 0, "failed_rows": [], "failures": [], "invalid_failed": 0, "raw_failed": 0,
             "exit_codes": [], "errors": [], "compiler_warnings": [], "wall_s": 0.0}
    _copy(header, folder / "model.h")
    if footprint:
        try:
            entry["model"] = model_footprint(folder / "model.h", prefix, cpu, tools, folder)
            entry["model"]["with_log_joint"] = model_footprint(folder / "model.h", prefix, cpu, tools, folder,
                                                               with_log_joint=True)
        except BuildError as exc:
            entry["errors"].append(str(exc))
    calib = [0, 0]
    ticks = np.zeros(3)
    timed_rows = 0
    for k, (start, stop) in enumerate(bounds):
        part = rows.chunk(start, stop)
        sub = folder if len(bounds) == 1 else folder / f"part{k}"
        sub.mkdir(exist_ok=True)
        _copy(header, sub / "model.h")
        try:
            elf, warnings = build_image(sub / "model.h", prefix, part, cpu, tools, sub, artifact.n_features,
                                        artifact.n_classes, artifact.bits_per_parameter)
        except BuildError as exc:
            entry["errors"].append(str(exc))
            entry["failed"] += int(part.x.shape[0])
            entry["failed_rows"] += list(range(start, stop))
            continue
        if warnings:
            entry["compiler_warnings"].append(warnings)
        if k == 0:
            entry["image"] = image_sizes(parse_size_a(_output([tools.size, "-A", str(elf)])))
        res = run_image(elf, board, tools, timeout)
        entry["wall_s"] += res.wall_s
        entry["exit_codes"].append(res.exit_code)
        if res.timed_out or res.result is None:
            why = ("timed out after %.0f s" % timeout if res.timed_out else
                   "took an exception (fault)" if res.fault or res.exit_code == FAULT_EXIT else f"ended without a result (exit code {res.exit_code})")
            entry["errors"].append(f"rows {start}..{stop - 1}: the program {why}; output tail: "
                                   + " | ".join(res.stdout.strip().splitlines()[-3:]))
            entry["failed"] += int(part.x.shape[0])
            entry["failed_rows"] += list(range(start, stop))
            continue
        n_check, failed, _, invalid_failed, _, raw_failed = res.result
        entry["passed"] += n_check - failed
        entry["failed"] += failed
        entry["invalid_failed"] += invalid_failed
        entry["raw_failed"] += raw_failed
        expected_exit = min(failed + invalid_failed + raw_failed, 254)
        if res.exit_code != expected_exit:
            entry["errors"].append(f"rows {start}..{stop - 1}: exit code {res.exit_code}, the program reported "
                                   f"{expected_exit} failures")
        for tag, r, rc, label, scores in res.failures:
            detail = {"kind": {"FAIL": "row", "INVALID": "invalid", "RAW": "raw"}[tag], "rc": rc, "label": label,
                      "scores": scores}
            if tag == "FAIL":
                detail.update(row=start + r, x=rows.x[start + r].tolist(),
                              expected_label=int(rows.labels[start + r]),
                              expected_scores=(-rows.sums[start + r]).tolist())
                entry["failed_rows"].append(start + r)
            elif tag == "INVALID":
                detail.update(row=r, x=part.invalid[r].tolist(), expected_label=-1, expected_scores="untouched")
            else:
                detail.update(row=r, x=[float(v) for v in part.raw_x[r]], expected_label=int(part.raw_labels[r]),
                              expected_scores=(-part.raw_sums[r]).tolist() if part.raw_labels[r] >= 0 else "untouched")
            if len(entry["failures"]) < MAX_DETAILED:
                entry["failures"].append(detail)
        if res.timing is not None:
            calib[0] += res.timing[0]
            calib[1] += res.timing[1]
            ticks += np.array(res.timing[2:], dtype=float)
            timed_rows += n_check
    entry["instructions"] = _instructions(calib, ticks, timed_rows)
    entry["ok"] = (entry["failed"] == 0 and entry["invalid_failed"] == 0 and entry["raw_failed"] == 0
                   and not entry["errors"] and entry["passed"] == entry["n_rows"])
    return entry


def _instructions(calib, ticks, n_rows) -> dict:
    base = {"method": "QEMU -icount shift=0 (1 instruction = 1 ns of virtual time), CMSDK timer at 25 MHz, "
                      "calibrated with a 2 x 100,000-instruction loop; executed instructions, not cycles"}
    if not calib[1] or not n_rows:
        return {**base, "available": False}
    per_tick = calib[0] / calib[1]
    baseline, predict, log_joint = ticks * per_tick / n_rows
    return {**base, "available": True, "instructions_per_tick": round(per_tick, 3), "n_rows": int(n_rows),
            "predict_per_row": round(predict - baseline, 1), "log_joint_per_row": round(log_joint - baseline, 1),
            "call_overhead_per_row": round(baseline, 1),
            "resolution_per_row": round(per_tick / n_rows, 2)}


# ================================================================================================
# Report
# ================================================================================================
def format_report(r: dict) -> str:
    rows = r["rows"]
    given = f"{rows['n_given']:,} from the {rows['source']}" if rows["n_given"] else "none given"
    lines = [
        f"Cortex-M check of {r['header']} (emulated in QEMU, not on hardware)",
        f"  model      {r['structure'].upper()} {r['model_kind']}, {r['n_features']} features, "
        f"{r['n_classes']} classes, B = {r['bits']} bits",
        f"  B*|theta|  {r['bits']} x {r['n_parameters']:,} = {r['size_bits']:,} bits ({r['size_bytes']:,} B); "
        f"tables in the header: {r['table_bytes']:,} B ({r['table_storage']})",
        f"  rows       {rows['n_rows']:,} ({given} + {rows['n_random']:,} random), {rows['n_invalid']} invalid rows "
        f"that must be refused" + (f", {rows['n_raw']} raw-input rows" if rows["n_raw"] else ""),
        "",
        f"  {'board':<11} {'cpu':<10} {'rows passed':>14} {'invalid':>8}  {'FLASH code + tables':>22}  "
        f"{'RAM data+bss+stack':>19}  {'instr/row predict':>17} {'log_joint':>9}",
    ]
    for b in r["boards"]:
        m = b.get("model")
        flash = f"{m['code_bytes']:,} + {m['table_bytes']:,} B" if m else "-"
        ram = (f"{m['data_bss_bytes']} + {m['stack_bytes']} B" if m and m["stack_bytes"] is not None else "-")
        ins = b["instructions"]
        pred = f"{ins['predict_per_row']:,.0f}" if ins.get("available") else "n/a"
        lj = f"{ins['log_joint_per_row']:,.0f}" if ins.get("available") else "n/a"
        inv = f"{rows['n_invalid'] - b['invalid_failed']}/{rows['n_invalid']}"
        lines.append(f"  {b['board']:<11} {b['cpu']:<10} {b['passed']:>6,}/{b['n_rows']:<7,} {inv:>8}  {flash:>22}  "
                     f"{ram:>19}  {pred:>17} {lj:>9}  {'PASS' if b['ok'] else 'FAIL'}")
    for b in r["boards"]:
        if rows["n_raw"]:
            lines.append(f"  {b['board']}: raw-input rows passed {rows['n_raw'] - b['raw_failed']}/{rows['n_raw']}")
        for f in b["failures"]:
            lines.append(f"  {b['board']}: {f['kind']} row {f['row']}: got label {f['label']} (rc {f['rc']}), "
                         f"expected {f['expected_label']}; scores {f['scores']} vs {f['expected_scores']}")
        more = b["failed"] + b["invalid_failed"] + b["raw_failed"] - len(b["failures"])
        if more > 0:
            lines.append(f"  {b['board']}: ... {more} more failing rows (--json lists them)")
        for e in b["errors"]:
            lines.append(f"  {b['board']}: error: {e}")
        for w in b["compiler_warnings"] + ([b["model"]["compiler_warnings"]] if b.get("model") and
                                           b["model"]["compiler_warnings"] else []):
            lines.append(f"  {b['board']}: compiler warnings: {w.splitlines()[0]}")
    first = r["boards"][0] if r["boards"] else None
    lines += [
        "",
        "  FLASH = .text + .rodata, RAM = .data + .bss + worst-case stack (GCC -fstack-usage), of the header's own",
        "  object file (arm-none-eabi-size -A; only predict called; with log_joint too: --json).",
    ]
    if first and first.get("model"):
        m = first["model"]
        lines.append(f"  Tables on {first['board']}: {m['codes_bytes']:,} B of codes + {m['index_bytes']:,} B of index "
                     f"arrays (largest codes, row offsets, parents, strides); B*|theta| = {r['size_bytes']:,} B.")
    if first and first.get("image"):
        img = first["image"]
        lines.append(f"  Whole test program on {first['board']} (harness, newlib-nano, semihosting, check rows): "
                     f"FLASH {img['flash_bytes']:,} B, RAM {img['ram_bytes']:,} B "
                     f"(+ {img['heap_bytes']:,} B heap).")
    lines.append("  QEMU is not cycle-accurate: instructions are executed instructions (-icount), net of the call loop;")
    lines.append("  cycles and latency on a real chip differ by core, clock and memory wait states.")
    lines.append(f"  {'PASS' if r['ok'] else 'FAIL'}: {sum(b['ok'] for b in r['boards'])} of {len(r['boards'])} boards")
    return "\n".join(lines)


# ================================================================================================
# Command line
# ================================================================================================
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bnc_deploy.targets.cortex_m",
        description="Cross-compile an exported C classifier (.h) for Cortex-M, run it on emulated MPS2 boards "
                    "(qemu-system-arm, semihosting) against the NumPy reference, report rows passed, FLASH/RAM "
                    "and instruction counts (QEMU is not cycle-accurate). Needs the Debian packages "
                    + ", ".join(DEBIAN_PACKAGES) + ".")
    p.add_argument("file", help="MODEL.h (a C export; then --model is required) or MODEL.bnc (exported to C here)")
    p.add_argument("--model", metavar="MODEL.bnc", help="the model the .h was exported from (the ground truth)")
    p.add_argument("--board", action="append", choices=[*BOARDS, "all"],
                   help="board to run on (repeatable; default: all three)")
    p.add_argument("--data", metavar="PATH_OR_NAME", help="check the TEST split of this data set instead of the "
                                                          "model's check set")
    p.add_argument("--fold", type=int, default=None, metavar="K", help="1-based fold of --data (default 1)")
    p.add_argument("--random", type=int, default=N_RANDOM_ROWS, metavar="N",
                   help=f"seeded random valid rows added (default {N_RANDOM_ROWS})")
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
                raise ConfigError(f"{path} is a C header: pass --model MODEL.bnc, the model it was exported from "
                                  "(the expected values come from the model's NumPy reference)")
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
        report = check_header(header, artifact, boards=boards, rows=rows, tools=tools,
                              verify_integrity=not args.no_integrity_check, key=key, workdir=workdir,
                              timeout=args.timeout)
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
