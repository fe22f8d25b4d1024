"""Cortex-M deploy targets (``cortex-m0``, ``cortex-m3``, ``cortex-m4``, ``cortex-m7``): the C export.

Measured with the Cortex-M check's own tools (:mod:`bnc_deploy.targets.cortex_m`, its module
docstring says how), so a budget is measured exactly as ``python -m bnc_deploy.targets.cortex_m``
reports the model's size:

* **flash** = ``.text* + .rodata*`` and **ram** = ``.data* + .bss*`` + the worst-case stack
  (GCC ``-fstack-usage``/``-fcallgraph-info``) of the header's own object file compiled with
  ``arm-none-eabi-gcc -mcpu=<cpu> -Os`` calling only ``PREFIX_predict``
  (:func:`~bnc_deploy.targets.cortex_m_build.model_footprint`, the report's "model" figures). RAM is
  None (unmeasured) when the stack is not statically bounded;
* **instructions** (M0, M3, M4, M7: the micro:bit and MPS2 boards QEMU models) = executed instructions of
  one ``predict`` call, the mean over the check rows net of the call loop, rounded up
  (:func:`~bnc_deploy.targets.cortex_m.check_header` under ``qemu-system-arm -icount shift=0``;
  not cycles: QEMU is not cycle-accurate). Measuring it runs every check row on the emulated
  board, so parity is checked there too; a failing row is a problem of the measurement.

Parity on every target: the verifier runs the header in the ``native`` runtime (host C compiler)
against the NumPy reference.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bnc_deploy.costs import CostReport
from bnc_deploy.targets.base import Export, ExportedFile, Target, register_target, table_bytes_lower_bound

FLASH_METHOD = (
    "arm-none-eabi-size -A of the header's own object (arm-none-eabi-gcc -mcpu={cpu} -Os, only predict "
    "called): .text* + .rodata*"
)
RAM_METHOD = (
    "the same object's .data* + .bss* + worst-case stack of predict (-fstack-usage, -fcallgraph-info=su); "
    "None when the stack is not bounded"
)
INSTRUCTIONS_METHOD = (
    "executed instructions per predict call on QEMU {board} (-icount shift=0, the board's timer calibrated), mean "
    "over the check rows net of the call loop, rounded up; not cycles"
)
NO_LATENCY = "QEMU is not cycle-accurate: no latency on an emulated Cortex-M (use --max-instructions)"


@dataclass(frozen=True)
class CortexMTarget(Target):
    """A Cortex-M core: ``cpu`` (``-mcpu``) and the QEMU ``board`` that runs it (None: none wired)."""

    cpu: str = "cortex-m4"
    board: str | None = None

    def measure_files(
        self, artifact: Any, files: tuple[ExportedFile, ...], workdir: Path, axes: tuple[str, ...]
    ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        from bnc_deploy.formats.c import read_c_metadata
        from bnc_deploy.targets import cortex_m_build as build

        header = files[0].path
        prefix = read_c_metadata(header)["c_name"]
        tools = build.find_tools((self.board,) if self.board else ())
        folder = workdir / f"{self.name}-build"
        folder.mkdir(parents=True, exist_ok=True)
        details: dict[str, Any] = {"toolchain": tools.gcc_version, "cpu": self.cpu}
        problems: list[str] = []
        values: dict[str, Any] = {}
        model = None
        if "instructions" in axes:
            model, values["instructions"] = self._run_board(header, artifact, tools, folder, details, problems)
        if model is None and {"flash", "ram"} & set(axes):
            shutil.copyfile(header, folder / "model.h")
            try:
                model = build.model_footprint(folder / "model.h", prefix, self.cpu, tools, folder)
            except build.BuildError as exc:
                problems.append(f"{self.name}: {exc}")
        if model is not None:
            details["model"] = {k: v for k, v in model.items() if k != "with_log_joint"}
            values["flash"] = int(model["flash_bytes"])
            bounded = model["stack_bytes"] is not None and model["stack_bounded"]
            values["ram"] = int(model["ram_bytes"]) if bounded else None
            if "ram" in axes and not bounded:
                problems.append(f"{self.name}: the stack of predict is not statically bounded; RAM not measured")
        return values, details, problems

    def _run_board(self, header: Path, artifact, tools, folder: Path, details: dict, problems: list):
        """Run the check on the board: ``(the model footprint or None, instructions per predict or None)``."""
        from bnc_deploy.targets.cortex_m import check_header

        report = check_header(header, artifact, boards=[self.board], tools=tools, workdir=folder)
        board = report["boards"][0]
        details["board"] = {
            "board": self.board,
            "ok": board["ok"],
            "passed": board["passed"],
            "n_rows": board["n_rows"],
            "instructions": board["instructions"],
            "errors": board["errors"],
        }
        if not board["ok"]:
            problems.append(
                f"{self.name}: {board['failed']} of {board['n_rows']} rows failed on QEMU {self.board}"
                + (f" ({board['errors'][0]})" if board["errors"] else "")
            )
        ins = board["instructions"]
        count = math.ceil(ins["predict_per_row"]) if ins.get("available") else None
        if count is None:
            problems.append(f"{self.name}: no instruction count from QEMU {self.board}")
        return board.get("model"), count

    def estimate_bounds(self, costs: CostReport) -> dict[str, Any]:
        """flash >= the table codes: ``ceil(bits / 8)``, and at least one byte per entry with ``pack_bits`` off."""
        if costs.kind != "bnc":
            return {}
        packed = dict(self.exports[0].options).get("pack_bits", False)
        bound = table_bytes_lower_bound(costs)
        return {"flash": bound if packed else max(bound, int(costs.n_parameters))}


def cortex_m_target(name: str, cpu: str, board: str | None) -> CortexMTarget:
    """The target of ``cpu`` (``-mcpu``) run on QEMU ``board`` (None: sizes only)."""
    methods = {"flash": FLASH_METHOD.format(cpu=cpu), "ram": RAM_METHOD}
    not_measurable = {"latency_us": NO_LATENCY}
    if board is not None:
        methods["instructions"] = INSTRUCTIONS_METHOD.format(board=board)
        parity = (
            f"the verifier (the header in the native runtime on the host) and, when instructions are measured, "
            f"every check row on QEMU {board} against the NumPy reference"
        )
    else:
        not_measurable["instructions"] = f"no QEMU board for {cpu} in the Cortex-M check (cortex_m_build.BOARDS)"
        parity = "the verifier (the header in the native runtime on the host); no emulated board"
    where = f"QEMU {board}" if board else "toolchain sizes only"
    return CortexMTarget(
        name=name,
        description=f"Arm {cpu.replace('cortex', 'Cortex')}: header-only C export, arm-none-eabi-gcc -Os ({where})",
        exports=(Export("c", (("pack_bits", False),), kinds=("bnc",)),),
        methods=methods,
        not_measurable=not_measurable,
        parity=parity,
        cpu=cpu,
        board=board,
    )


register_target(cortex_m_target("cortex-m0", "cortex-m0", "microbit"))
register_target(cortex_m_target("cortex-m3", "cortex-m3", "mps2-an385"))
register_target(cortex_m_target("cortex-m4", "cortex-m4", "mps2-an386"))
register_target(cortex_m_target("cortex-m7", "cortex-m7", "mps2-an500"))
