"""Where the C header keeps its codes, and which kernel sums them (the exporter's "Kernels" and "Storage").

The code stream (:func:`code_stream`: the class prior, then the stacked tables, ``C`` codes per row) is
stored one byte per code as lane words (:func:`lane_rows`, for the ``lanes8``/``lanes16`` kernels), one byte
per code as a plain stream (the ``scalar`` kernel), or packed to ``B`` bits (:func:`pack_codes`); the kernel
follows from the largest possible sum (:func:`accumulator_type`, :func:`lane_layout`). Split from
:mod:`bnc_deploy.exporters.c_bnc`, which writes the header.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._bnc_options import codes_of

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact

#: Zero bytes after the packed stream: the 32-bit window read at the byte of any code stays inside the array.
PACKED_GUARD_BYTES = 3
#: Lane words summed in registers per block (8 accumulators: 8 words of 8-bit lanes, 4 of even/odd 16-bit ones).
LANE_BLOCK_WORDS = {"lanes8": 8, "lanes16": 4}


def accumulator_type(n_features: int, bits: int) -> str:
    """The narrowest unsigned type that holds every code sum: ``(D + 1) * (2^B - 1)``."""
    return uint_type((n_features + 1) * (2**bits - 1))


def lane_layout(n_features: int, bits: int) -> str | None:
    """The lane kernel of the sums (``"lanes8"``, ``"lanes16"``), or None for the scalar one: four 8-bit or
    two 16-bit lanes per 32-bit word when the largest possible sum fits the lane (module docstring)."""
    return {"uint8_t": "lanes8", "uint16_t": "lanes16"}.get(accumulator_type(n_features, bits))


def lane_words(n_classes: int) -> int:
    """32-bit words per stream row in the lane layout: four classes per word."""
    return -(-n_classes // 4)


def table_storage(artifact: BNCArtifact, packed_bytes: int | None) -> tuple[int, str]:
    """``(bytes of the PREFIX_codes array, metadata table_storage)``: ``packed_bytes`` (the bit stream's bytes,
    None without ``--pack-bits``) plus the guard bytes; lane words; or one byte per code."""
    if packed_bytes is not None:
        return packed_bytes + PACKED_GUARD_BYTES, f"packed{codes_of(artifact).quantizer.total_bits}"
    if lane_layout(artifact.n_features, codes_of(artifact).quantizer.total_bits) is not None:
        return 4 * lane_words(artifact.n_classes) * (1 + artifact.n_rows), "uint8-lanes"
    return int(artifact.n_parameters), "uint8"


def lane_rows(artifact: BNCArtifact) -> np.ndarray:
    """The code stream as lane words: ``(1 + n_rows, lane_words)`` uint32, class ``c`` of a row in byte ``c % 4``
    of word ``c // 4`` (value bits ``8 * (c % 4)`` ..), 0 past the last class."""
    c = artifact.n_classes
    rows = code_stream(artifact).reshape(-1, c).astype(np.uint32)
    padded = np.zeros((rows.shape[0], 4 * lane_words(c)), dtype=np.uint32)
    padded[:, :c] = rows
    quads = padded.reshape(rows.shape[0], -1, 4)
    words: np.ndarray = (quads << (8 * np.arange(4, dtype=np.uint32))).sum(axis=2, dtype=np.uint32)
    return words


def code_stream(artifact: BNCArtifact) -> np.ndarray:
    """All codes in stream order (prior, then the stacked table rows), uint8 of length n_parameters."""
    return np.concatenate([codes_of(artifact).prior.reshape(-1), codes_of(artifact).table.reshape(-1)]).astype(np.uint8)


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """B-bit codes -> LSB-first bit stream, uint8 of length ``ceil(len(codes) * bits / 8)``.

    Bit ``j`` of code ``k`` is stream bit ``k * bits + j``, i.e. bit ``(k * bits + j) % 8`` of
    byte ``(k * bits + j) // 8``.
    """
    codes = np.asarray(codes, dtype=np.uint8).reshape(-1)
    planes = ((codes[:, None] >> np.arange(bits, dtype=np.uint8)[None, :]) & 1).astype(np.uint8)  # [n, B]
    return np.packbits(planes.reshape(-1), bitorder="little")


def unpack_codes(stream: np.ndarray, bits: int, n: int) -> np.ndarray:
    """Inverse of :func:`pack_codes` (what the C code computes per lookup)."""
    flat = np.unpackbits(np.asarray(stream, dtype=np.uint8), bitorder="little")[: n * bits].reshape(n, bits)
    sums: np.ndarray = (flat.astype(np.uint16) << np.arange(bits, dtype=np.uint16)[None, :]).sum(axis=1)
    return sums.astype(np.uint8)


def uint_type(max_value: int) -> str:
    for bits in (8, 16, 32):
        if max_value < 2**bits:
            return f"uint{bits}_t"
    raise ExportError(f"value {max_value} does not fit 32 bits")


TABLE_LAYOUTS = {
    "uint8": "one byte per code",
    "uint8-lanes": "one byte per code, rows padded to 32-bit words",
    "packed": "B-bit codes packed LSB first",
}


KERNEL_TEXT = {
    "lanes8": "four 8-bit class lanes per 32-bit addition",
    "lanes16": "two 16-bit class lanes per 32-bit addition (UXTAB16 with the Arm DSP extension)",
    "scalar": "one 32-bit sum per class",
}


def lane_values(n_classes: int, bits: int, max_sum: int, lanes: str | None) -> dict[str, object]:
    """The lane kernels' placeholders: words per row and per register block, the pad lanes' start values in the
    last word (the lane's maximum: never below a real sum, and after every real class), the last group's mask."""
    words, tail = lane_words(n_classes), n_classes % 4
    real = range(tail or 4)  # the classes of the last word
    pad8 = sum(0xFF << (8 * q) for q in range(4) if q not in real)
    pad_even = sum(0xFFFF << (16 * h) for h in range(2) if 2 * h not in real)
    pad_odd = sum(0xFFFF << (16 * h) for h in range(2) if 2 * h + 1 not in real)
    return {
        "lane_words": words,
        "block_words": min(words, LANE_BLOCK_WORDS[lanes or "lanes8"]),
        "max_sum": max_sum,
        "pad_last": f"{pad8:08X}",
        "pad_even_last": f"{pad_even:08X}",
        "pad_odd_last": f"{pad_odd:08X}",
        "last_group_mask": f"0x{(1 << (bits * tail)) - 1 if tail else 0xFFFFFFFF:X}",
    }
