"""The C and linker sources of the Cortex-M test programs (``bnc_deploy.targets.cortex_m``).

The C is written as C in package data beside this module: ``cortex_m_sources.c`` (the start-up
code, the test driver, the footprint object) and ``cortex_m_link.ld`` (the linker script), cut into
named sections and filled in with ``string.Template``
(:func:`bnc_deploy.formats.c_template.template_sections`, as the C exporter's ``c_bnc.h``); split
from ``cortex_m.py`` so that module holds only the logic. Start-up code and linker script follow
the board's memory map (:data:`MEMORY_MAPS`: code at 0x0, RAM at 0x20000000); the driver template (``$P`` = the header's
prefix, ``$M`` the same upper-cased) runs ``model.h`` on the rows of ``rows.h`` and exits with its
number of failures through semihosting.
"""

from __future__ import annotations

from dataclasses import dataclass

from bnc_deploy.formats.c_template import template_sections

#: QEMU hw/arm/mps2.c, AN385/AN386/AN500: ZBT SSRAM1 (code) and ZBT SSRAM2&3 (data), 4 MiB each.
FLASH_ORIGIN, FLASH_LENGTH = 0x00000000, 4 * 2**20
RAM_ORIGIN, RAM_LENGTH = 0x20000000, 4 * 2**20
#: Stack and heap reserved in the test image (sections ``.stack``/``.heap``).
STACK_BYTES, HEAP_BYTES = 16 * 1024, 32 * 1024


@dataclass(frozen=True)
class MemoryMap:
    """Where a board family's test program lives: code and constants in ``flash``, the rest in ``ram``."""

    flash_origin: int
    flash_length: int
    ram_origin: int
    ram_length: int
    stack_bytes: int
    heap_bytes: int


#: Board family -> memory map. ``nrf51``: QEMU hw/arm/nrf51_soc.c (the microbit machine), 256 KiB of flash at 0
#: and 16 KiB of SRAM at 0x20000000, so its stack and heap are smaller.
MEMORY_MAPS = {
    "mps2": MemoryMap(FLASH_ORIGIN, FLASH_LENGTH, RAM_ORIGIN, RAM_LENGTH, STACK_BYTES, HEAP_BYTES),
    "nrf51": MemoryMap(0x00000000, 256 * 1024, 0x20000000, 16 * 1024, 4 * 1024, 4 * 1024),
}
#: Exit code of the program on a fault (HardFault and other exceptions).
FAULT_EXIT = 255

#: The C of the programs (sections ``startup``, ``driver``, ``footprint``) and the linker script
#: (section ``link``): package data beside this module, see their first comments.
TEMPLATE_C, TEMPLATE_LD = "cortex_m_sources.c", "cortex_m_link.ld"

_C = template_sections(__package__, TEMPLATE_C)
#: ``startup.c``: vector table, reset handler, fault handler (exit code :data:`FAULT_EXIT`).
STARTUP_C = _C["startup"].substitute(fault_exit=FAULT_EXIT)


def link_ld(family: str = "mps2") -> str:
    """``link.ld`` of a board family (:data:`MEMORY_MAPS`): the memory map, heap and stack."""
    memory = MEMORY_MAPS[family]
    return template_sections(__package__, TEMPLATE_LD)["link"].substitute(
        flash_origin=f"{memory.flash_origin:08X}",
        flash_length=memory.flash_length,
        ram_origin=f"{memory.ram_origin:08X}",
        ram_length=memory.ram_length,
        heap_bytes=memory.heap_bytes,
        stack_bytes=memory.stack_bytes,
    )


#: ``link.ld`` of the MPS2 boards.
LINK_LD = link_ld("mps2")
#: ``board_timer.h``: the board's tick counter (``-DBOARD_NRF51=1`` selects the nRF51's).
BOARD_TIMER_H = _C["timer"].substitute()
#: The test program; ``$P`` is the header's prefix, ``$M`` the same upper-cased, ``$sentinel``,
#: ``$max_printed``, ``$calibration`` (``cortex_m_build.driver_source``).
DRIVER_C = _C["driver"]
#: The footprint object: ``PREFIX_predict`` (and ``PREFIX_log_joint`` with ``-DWITH_LOG_JOINT=1``); ``$P``.
FOOTPRINT_C = _C["footprint"]
