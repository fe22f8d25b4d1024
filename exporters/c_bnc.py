"""C99 exporter for quantized Bayesian network classifiers (naive Bayes and TAN): one header file.

``bnc-export MODEL --format c -o model.h [--name PREFIX] [--pack-bits] [--raw-inputs]`` writes a
header-only C99 library (``static const`` tables, ``static inline`` functions, an ``#ifndef``
guard). ``PREFIX`` (default ``bnc``) starts every identifier: functions and arrays use it as
given, macros upper-cased (``bnc_predict``, ``BNC_N_FEATURES``).

API
---
``int PREFIX_predict(const uint8_t *x)``
    ``x[i]``: the code of feature ``i`` (``PREFIX_N_FEATURES`` bytes). Returns the most probable
    class ``0 .. PREFIX_N_CLASSES - 1`` (the first one on ties, as every other format), or -1 when
    some ``x[i] >= PREFIX_CARD_i``. Every code is checked before any table is read, so an invalid
    code never reads out of bounds or another feature's table.
``int PREFIX_log_joint(const uint8_t *x, int32_t *scores)``
    Writes ``scores[c] = -(prior code + sum of the D table codes of class c)``, so
    ``log p(c, x) = scores[c] * 2^-PREFIX_FRAC_BITS`` (``PREFIX_STEP_SHIFT`` is the same number;
    it is negative when ``B_I > B``, then the step is ``2^|B_F|``). Returns 0, or -1 for an invalid
    ``x`` (``scores`` untouched). The most probable class is the first index of the largest score.
``--raw-inputs``: ``int PREFIX_predict_raw(const float *x)``, ``int PREFIX_log_joint_raw(const float
*x, int32_t *scores)``
    Raw float32 feature values, binned with the model's discretizer: ``code_i = number of
    thresholds t_ik with x_i > t_ik`` (the thresholds are ``formats.bnc.float32_thresholds`` of the
    cut points, stored as exact hexadecimal float32 literals), which is the discretizer's
    ``searchsorted(cuts, x, side="left")`` for every float32 ``x``. NaN and +-inf return -1. This is
    the only code that uses ``float`` (only comparisons: no FPU arithmetic; compile without
    ``-ffast-math``, which may drop the NaN test).

Arithmetic
----------
Integers only: codes are added in ``uint16_t`` when ``(D + 1) * (2^B - 1) < 65536`` (the largest
possible sum), else ``uint32_t``, and negated into ``int32_t``. The sums are exactly the
reference's integer sums, so labels and scores are bit-identical with the model file (the
verifier checks it on the check set / ``--data`` test split and random rows before publishing).
Float models are refused (``C export needs a quantized model (--bits)``).

Storage
-------
One code stream of ``n_parameters = C * (1 + n_rows)`` B-bit codes: the class prior (stream row
0), then the stacked tables of ``BNCArtifact`` (stream row ``1 + offset_i + x_i * |X_pa(i)| +
x_pa(i)``), ``C`` codes per row. By default one ``uint8_t`` per code (``PREFIX_TABLE_BYTES =
n_parameters``); with ``--pack-bits`` a ``uint8_t`` bit stream, LSB first: code ``k`` is the
``B`` bits starting at bit ``k * B``, bit ``j`` of the stream being bit ``j % 8`` of byte ``j / 8``
(a code may straddle two bytes), so ``PREFIX_TABLE_BYTES = ceil(n_parameters * B / 8)``, the
paper's ``B * |theta|`` bits rounded up to bytes. Unpacking is a shift and a mask per lookup.

Dependencies: ``<stdint.h>`` only (no other header, no libc call, no malloc, no static state).
The model facts are ``#define``s and a comment block; the export metadata JSON is embedded in one
comment (:mod:`bnc_deploy.formats.c`), read back by the ``native`` runtime and ``bnc-profile``.

Source
------
The C is written as C in ``exporters/c_bnc.h`` (package data): the generated header in order,
cut into named sections (NB or TAN sums, byte or packed lookup, the raw-input binning, ...). This
module only picks the sections for the model and options and fills in their ``string.Template``
placeholders with data: numbers, names, the metadata comment and the constant arrays
(:func:`bnc_deploy.formats.c_template.template_sections`, shared with the native runtime's kernel
and the Cortex-M target). The same model and options give the same bytes (the tests compile every
variant).

Registered as the ``("bnc", "c")`` exporter (extension ``.h``, runtime ``native``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._bnc_options import RAW_INPUTS, RAW_INPUTS_NEED_DISCRETIZER, codes_of
from bnc_deploy.exporters.base import Option, Refusal, float_model, register_exporter
from bnc_deploy.formats.bnc import export_metadata, padded_thresholds, raw_cut_points
from bnc_deploy.formats.c import check_c_name, comment_text, metadata_comment
from bnc_deploy.formats.c_template import template_sections
from bnc_deploy.version import __version__

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact

#: Default prefix of the generated identifiers.
DEFAULT_NAME = "bnc"
#: Largest cardinality a uint8_t code can address.
MAX_CARDINALITY = 256
#: Values per line in the generated arrays.
PER_LINE = 20
#: The C of the header (package data, beside this module), cut into sections; see its first comment.
TEMPLATE = "c_bnc.h"


def accumulator_type(n_features: int, bits: int) -> str:
    """The narrowest unsigned type that holds every code sum: ``(D + 1) * (2^B - 1)``."""
    return "uint16_t" if (n_features + 1) * (2**bits - 1) < 2**16 else "uint32_t"


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


def _uint_type(max_value: int) -> str:
    for bits in (8, 16, 32):
        if max_value < 2**bits:
            return f"uint{bits}_t"
    raise ExportError(f"value {max_value} does not fit 32 bits")


def _array(
    ctype: str, name: str, values: Iterable[Any], *, fmt: Callable[[Any], str] = str, per_line: int = PER_LINE
) -> list[str]:
    values = list(values)
    lines = [f"static const {ctype} {name}[{max(len(values), 1)}] = {{"]
    if not values:
        values = ["0"]  # C99 has no zero-length arrays; never read
    for k in range(0, len(values), per_line):
        lines.append("    " + ", ".join(fmt(v) for v in values[k : k + per_line]) + ",")
    lines.append("};")
    return lines


def _float_literal(value: float | np.floating[Any]) -> str:
    """Exact C99 hexadecimal literal of a float32 value (finite)."""
    v = float(np.float32(value))
    mantissa, _, exponent = float.hex(abs(v)).partition("p")  # e.g. 0x1.9999980000000p-4
    mantissa = mantissa.rstrip("0").rstrip(".")
    return ("-" if v < 0 or (v == 0 and np.signbit(v)) else "") + f"{mantissa}p{exponent}f"


def _check(artifact: BNCArtifact, name: str, raw_inputs: bool) -> None:
    check_c_name(name)
    if artifact.kind != "bnc":
        raise ExportError(f"--format c exports Bayesian network classifiers, not {artifact.kind} models")
    if not artifact.is_quantized:
        raise ExportError(
            "C export needs a quantized model (--bits): the C library accumulates integer "
            "codes; this model has float tables"
        )
    if artifact.n_features == 0:
        raise ExportError("cannot export a model without features")
    big = [i for i, c in enumerate(artifact.cardinalities) if int(c) > MAX_CARDINALITY]
    if big:
        i = big[0]
        raise ExportError(
            f"feature {i} ({artifact.feature_names[i]!r}) has {int(artifact.cardinalities[i])} "
            f"values; the C API takes uint8_t codes (at most {MAX_CARDINALITY} values)"
        )
    if raw_inputs:
        raw_cut_points(artifact)  # ExportError without a usable discretizer


def _codes_rows(artifact: BNCArtifact, name: str) -> list[str]:
    """The unpacked ``PREFIX_codes`` array: one line per stream row, a comment before each feature's rows."""
    lines = [
        f"static const uint8_t {name}_codes[{artifact.n_parameters}] = {{",
        "    /* class prior */ " + ", ".join(str(int(v)) for v in codes_of(artifact).prior) + ",",
    ]
    table = codes_of(artifact).table
    for i in range(artifact.n_features):
        start, rows = int(artifact.row_offsets[i]), int(artifact.rows_per_feature[i])
        lines.append(f"    /* feature {i}: {comment_text(artifact.feature_names[i])} */")
        lines += ["    " + ", ".join(str(int(v)) for v in table[r]) + "," for r in range(start, start + rows)]
    return lines + ["};"]


def _lines(values: Iterable[str]) -> str:
    """A multi-line placeholder value: the template line supplies the last newline."""
    return "\n".join(values)


def build_c_source(
    artifact: BNCArtifact, *, name: str = DEFAULT_NAME, pack_bits: bool = False, raw_inputs: bool = False
) -> str:
    """The text of the header file (see the module docstring for its contract).

    The C is ``c_bnc.h``: this function picks its sections for the model and options and
    fills in their placeholders with the model's data.
    """
    _check(artifact, name, raw_inputs)
    bits = codes_of(artifact).quantizer.total_bits
    stream = code_stream(artifact)
    assert int(stream.size) == artifact.n_parameters
    packed = pack_codes(stream, bits) if pack_bits else None
    values = _model_values(artifact, name, packed, raw_inputs)
    sections = _sections(artifact, name, values, packed, raw_inputs)
    template = template_sections(__package__, TEMPLATE)
    return "".join(template[section].substitute(values) for section in sections)


def _model_values(artifact: BNCArtifact, name: str, packed: np.ndarray | None, raw_inputs: bool) -> dict[str, object]:
    """The placeholders every variant of the header fills in: names, model facts, metadata, the
    arrays of the NB part (``packed``: the bit stream of ``--pack-bits``, None for one byte per code)."""
    q = codes_of(artifact).quantizer
    d, bits = artifact.n_features, q.total_bits
    pack_bits = packed is not None
    n_params = int(artifact.n_parameters)
    table_bytes = int(packed.size) if packed is not None else n_params
    acc = accumulator_type(d, bits)
    meta = export_metadata(
        artifact,
        format="c",
        lowering="gather",
        raw_inputs=raw_inputs,
        input_dtype="uint8",
        extra={
            "c_name": name,
            "exact": True,
            "accumulator": acc,
            "table_bytes": table_bytes,
            "table_storage": f"packed{bits}" if pack_bits else "uint8",
            "c_standard": "c99",
        },
    )
    offsets = artifact.row_offsets + 1  # stream row 0 is the prior
    return {
        "prefix": name,
        "PREFIX": name.upper(),
        "file_name": comment_text(name),
        "structure": "TAN" if artifact.structure == "tan" else "naive Bayes",
        "version": comment_text(__version__),
        "n_features": d,
        "n_classes": artifact.n_classes,
        "bits": bits,
        "int_bits": q.int_bits,
        "frac_bits": q.frac_bits,
        # a negative macro value is parenthesized, so that ``x - PREFIX_FRAC_BITS`` stays right
        "frac_bits_macro": f"({q.frac_bits})" if q.frac_bits < 0 else q.frac_bits,
        "n_parameters": n_params,
        "size_bits": artifact.size_bits,
        "n_ops": artifact.n_ops,
        "n_rows": artifact.n_rows,
        "table_bytes": table_bytes,
        "table_layout": "B-bit codes packed LSB first" if pack_bits else "one byte per code",
        "packed": int(pack_bits),
        "raw_inputs": int(bool(raw_inputs)),
        "artifact_sha256": meta["artifact_sha256"],
        "class_list": _lines(f" *   {k}: {comment_text(c)}" for k, c in enumerate(artifact.class_names)),
        "feature_list": _lines(
            f" *   {i}: {comment_text(f)}, {int(artifact.cardinalities[i])}, "
            f"{'-' if artifact.parents[i] < 0 else int(artifact.parents[i])}"
            for i, f in enumerate(artifact.feature_names)
        ),
        "arithmetic_scope": " outside the *_raw binning" if raw_inputs else "",
        "metadata": metadata_comment(meta).rstrip("\n"),
        "card_macros": _lines(
            f"#define {name.upper()}_CARD_{i} {int(c)}" for i, c in enumerate(artifact.cardinalities)
        ),
        "max_code_array": _lines(_array("uint8_t", f"{name}_max_code", artifact.cardinalities - 1)),
        "row_offset_array": _lines(_array(_uint_type(int(offsets.max())), f"{name}_row_offset", offsets)),
        "acc": acc,
        "code_mask": 2**bits - 1,
        "last_code_bit": bits - 1,
        "max_aligned_shift": 8 - bits,
    }


def _sections(
    artifact: BNCArtifact, name: str, values: dict[str, object], packed: np.ndarray | None, raw_inputs: bool
) -> list[str]:
    """The template's sections for the model and options, in order; adds the placeholders of the
    TAN, code-storage and raw-input arrays to ``values``."""
    d, bits = artifact.n_features, codes_of(artifact).quantizer.total_bits
    tan = artifact.structure == "tan"
    sections = ["head"] + (["head_raw"] if raw_inputs else []) + ["macros", "arrays"]
    if tan:
        sections.append("arrays_tan")
        strides = artifact.parent_cardinalities
        values["parent_array"] = _lines(
            _array("int16_t" if d < 2**15 else "int32_t", f"{name}_parent", artifact.parents)
        )
        values["stride_array"] = _lines(_array(_uint_type(int(strides.max())), f"{name}_stride", strides))
    if packed is not None:
        sections.append("codes_packed")
        values["codes_array"] = _lines(
            _array("uint8_t", f"{name}_codes", packed, fmt=lambda v: f"0x{int(v):02x}", per_line=16)
        )
    else:
        sections.append("codes_bytes")
        values["codes_array"] = _lines(_codes_rows(artifact, name))
    if raw_inputs:
        sections.append("arrays_raw")
        thresholds, n_cuts = padded_thresholds(artifact)
        begin = np.concatenate([[0], np.cumsum(n_cuts)]).astype(np.int64)
        values["thresholds_array"] = _lines(
            _array(
                "float",
                f"{name}_thresholds",
                [thresholds[i, k] for i in range(d) for k in range(int(n_cuts[i]))],
                fmt=_float_literal,
                per_line=6,
            )
        )
        values["cut_begin_array"] = _lines(_array(_uint_type(int(begin.max())), f"{name}_cut_begin", begin))
    if packed is None:
        sections.append("code_bytes")
    else:
        # when B does not divide 8 some codes span two bytes, and only then the lookup reads a second byte
        sections.append("code_packed_straddle" if 8 % bits else "code_packed")
    sections += ["sums_tan" if tan else "sums_naive_bayes", "predict"] + (["raw"] if raw_inputs else []) + ["end"]
    return sections


def build_c_bytes(
    artifact: BNCArtifact, *, name: str = DEFAULT_NAME, pack_bits: bool = False, raw_inputs: bool = False
) -> bytes:
    """The header file's bytes (ASCII) for the verifier (:mod:`bnc_deploy.verify`)."""
    return build_c_source(artifact, name=name, pack_bits=pack_bits, raw_inputs=raw_inputs).encode("ascii")


register_exporter(
    "bnc",
    "c",
    build_c_bytes,
    extension=".h",
    runtime="native",
    description="header-only C99 library: const integer tables, integer sums, bit-exact (quantized models)",
    options=[
        Option(
            "name",
            "str",
            DEFAULT_NAME,
            help="C export: prefix of the generated identifiers, a C identifier "
            f"(default: {DEFAULT_NAME}; macros use it upper-cased)",
        ),
        Option(
            "pack_bits",
            "bool",
            False,
            help="quantized models: store the B-bit codes (BN tables, DNN weights) "
            "packed to B bits each (C: one bit stream; ONNX: bit-planes) "
            "instead of one byte each",
        ),
        RAW_INPUTS,
    ],
    refusals=[
        Refusal(
            "the C library sums integer codes in integer arithmetic; a float model has float tables and no "
            "codes (export it as onnx or tflite, or train with --bits)",
            r"C export needs a quantized model",
            models=float_model,
        ),
        RAW_INPUTS_NEED_DISCRETIZER,
    ],
)
