"""The C and linker sources of the Cortex-M test programs (``bnc_deploy.targets.cortex_m``).

The C is written as C in package data beside this module: ``cortex_m_sources.c`` (the start-up
code, the test driver, the footprint object) and ``cortex_m_link.ld`` (the linker script), cut into
named sections and filled in with ``string.Template``
(:func:`bnc_deploy.formats.c_template.template_sections`, as the C exporter's ``c_bnc.h``); split
from ``cortex_m.py`` so that module holds only the logic. Start-up code and linker script follow
QEMU's MPS2 memory map (code at 0x0, RAM at 0x20000000); the driver template (``$P`` = the header's
prefix, ``$M`` the same upper-cased) runs ``model.h`` on the rows of ``rows.h`` and exits with its
number of failures through semihosting.
"""

from __future__ import annotations

from bnc_deploy.formats.c_template import template_sections

#: QEMU hw/arm/mps2.c, AN385/AN386/AN500: ZBT SSRAM1 (code) and ZBT SSRAM2&3 (data), 4 MiB each.
FLASH_ORIGIN, FLASH_LENGTH = 0x00000000, 4 * 2**20
RAM_ORIGIN, RAM_LENGTH = 0x20000000, 4 * 2**20
#: Stack and heap reserved in the test image (sections ``.stack``/``.heap``).
STACK_BYTES, HEAP_BYTES = 16 * 1024, 32 * 1024
#: Exit code of the program on a fault (HardFault and other exceptions).
FAULT_EXIT = 255

#: The C of the programs (sections ``startup``, ``driver``, ``footprint``) and the linker script
#: (section ``link``): package data beside this module, see their first comments.
TEMPLATE_C, TEMPLATE_LD = "cortex_m_sources.c", "cortex_m_link.ld"

_C = template_sections(__package__, TEMPLATE_C)
#: ``startup.c``: vector table, reset handler, fault handler (exit code :data:`FAULT_EXIT`).
STARTUP_C = _C["startup"].substitute(fault_exit=FAULT_EXIT)
#: ``link.ld``: the memory map above, heap and stack.
LINK_LD = template_sections(__package__, TEMPLATE_LD)["link"].substitute(
    flash_origin=f"{FLASH_ORIGIN:08X}",
    flash_length=FLASH_LENGTH,
    ram_origin=f"{RAM_ORIGIN:08X}",
    ram_length=RAM_LENGTH,
    heap_bytes=HEAP_BYTES,
    stack_bytes=STACK_BYTES,
)
#: The test program; ``$P`` is the header's prefix, ``$M`` the same upper-cased, ``$sentinel``,
#: ``$max_printed``, ``$calibration`` (``cortex_m_build.driver_source``).
DRIVER_C = _C["driver"]
#: The footprint object: ``PREFIX_predict`` (and ``PREFIX_log_joint`` with ``-DWITH_LOG_JOINT=1``); ``$P``.
FOOTPRINT_C = _C["footprint"]
