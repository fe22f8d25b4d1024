"""C99 exporter for quantized Bayesian network classifiers (naive Bayes and TAN): one header file.

``bnc-export MODEL --format c -o model.h [--name PREFIX] [--pack-bits] [--raw-inputs] [--no-self-test]`` writes a
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
``int PREFIX_predict_proba(const uint8_t *x, uint16_t *out)``
    ``out[c] / 2^16`` approximates ``p(c | x)``, the softmax of the scores (unsigned Q0.16; 1.0 is
    written 65535), in integer arithmetic (Arithmetic, below). Returns 0, or -1 for an invalid
    ``x`` (``out`` untouched).
``int PREFIX_self_test(void)`` (unless ``--no-self-test``)
    Runs the stored self-test rows (:func:`self_test_rows`: the first rows of the model's check set,
    else seeded random rows; at most :data:`SELF_TEST_MAX_ROWS` rows and
    :data:`SELF_TEST_MAX_BYTES` bytes) through ``PREFIX_predict`` and ``PREFIX_log_joint`` and
    compares them with the reference's labels and code sums, stored beside them as ``static const``
    arrays (as ExecuTorch's bundled programs carry their test inputs and outputs). Returns 0 when
    every row matches, else the 1-based index of the first row that does not.
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
Integers only: codes are added in the narrowest unsigned type that holds the largest possible sum
``(D + 1) * (2^B - 1)`` (:func:`accumulator_type`: ``uint8_t``, ``uint16_t`` or ``uint32_t``) and negated
into ``int32_t``. The sums are exactly the reference's integer sums, so labels and scores are
bit-identical with the model file (the verifier checks it on the check set / ``--data`` test split and
random rows before publishing). Float models are refused (``C export needs a quantized model (--bits)``).

Kernels (:func:`lane_layout`, metadata ``kernel``), chosen by the exporter from that bound, then by the
compiler from the target's macros:

``lanes8`` (largest sum <= 255)
    Four classes per 32-bit word, one byte lane each: a plain 32-bit addition adds four classes, and since
    no lane can exceed 255 no carry ever crosses into the next lane, on any core (no SIMD instruction is
    needed for the sums). Blocks of up to 8 words are summed over the ``1 + D`` rows in registers. The
    first smallest sum: with ``__ARM_FEATURE_DSP`` (Cortex-M4/M7) the lane-wise minimum of all words by
    ``USUB8``/``SEL``, then the first lane equal to it by a zero-byte test; elsewhere one comparison per
    class.
``lanes16`` (largest sum <= 65535)
    Each word of four byte codes is added into an even and an odd word of two 16-bit lanes: ``UXTAB16``
    with the DSP extension (two byte-to-halfword additions in one instruction), a mask and an add
    elsewhere. Blocks of up to 4 words (8 accumulators).
``scalar`` (larger sums)
    One ``uint32_t`` per class, one code at a time.

Lanes past the last class start at the lane's maximum and add zeros, so they are never below a real sum
and, coming after every class, never the first minimum. ``predict`` reads the lanes directly;
``log_joint``, ``predict_proba`` and the self-test read the per-class sums out of them.

Posteriors (``predict_proba``): with ``d_c = max score - scores[c] >= 0`` (an integer) and the step
``s = 2^-B_F`` (natural log: the quantizer stores ``log p`` in nats), ``p(c | x) = x_c / sum_k x_k``
with ``x_c = exp(-d_c * s)``. ``e_c`` approximates ``x_c`` in Q1.31: starting from ``2^31``, one
rounded product ``(e * T_j + 2^30) >> 31`` with ``T_j = round(2^31 * exp(-2^j * s))`` (exact decimal
arithmetic, :func:`exp_q31_table`) for every set bit ``j < J`` of ``d_c``; 0 when ``d_c >= 2^J``
(:func:`exp_terms`: then ``x_c <= e^-32 < 2^-32``). Each product adds at most ``2^-32`` (the
factor's rounding; ``e <= 1``) plus ``2^-32`` (the product's), so ``|e_c / 2^31 - x_c| <= eps =
max(J, 1) * 2^-31``, and the top class (``d = 0``) is exactly ``2^31``. With ``E = sum e_c / 2^31 >= 1``
the fixed-point posterior ``e_c / (2^31 E)`` is within ``(eps + p_c (C - 1) eps) / E <= C * eps``
of ``p(c | x)``. ``out[c] = min(65535, round(2^16 e_c / sum e))`` (a 17-bit restoring division,
half up) adds at most ``2^-17``, or, where it clamps (``e_c / sum e >= 1 - 2^-17``), at most
``2^-16``. Hence ``|out[c] / 2^16 - p(c | x)| <= max(2^-16, 2^-17 + C * eps)``
(:func:`proba_error_bound`; ``2^-16`` whenever ``C * J <= 2^14``), and since the rounded values'
exact sum is ``2^16``, ``|sum_c out[c] - 2^16| <= (C - 1) / 2 + 1 = (C + 1) / 2``.

Storage
-------
One code stream of ``n_parameters = C * (1 + n_rows)`` B-bit codes: the class prior (stream row
0), then the stacked tables of ``BNCArtifact`` (stream row ``1 + offset_i + x_i * |X_pa(i)| +
x_pa(i)``), ``C`` codes per row. Without ``--pack-bits``, one byte per code: for the lane kernels a
``uint32_t`` array, each row ``ceil(C / 4)`` words with class ``c`` in byte ``c % 4`` (value bits ``8 * (c %
4)``, so the layout does not depend on the CPU's byte order) of word ``c / 4`` and zero bytes past the last
class (``PREFIX_TABLE_BYTES = 4 * ceil(C / 4) * (1 + n_rows)``); for the scalar kernel a ``uint8_t``
array of the stream (``PREFIX_TABLE_BYTES = n_parameters``). With ``--pack-bits`` a ``uint8_t`` bit stream,
LSB first: code ``k`` is the ``B`` bits starting at bit ``k * B``, bit ``j`` of the stream being bit ``j %
8`` of byte ``j / 8`` (a code may straddle two bytes): ``ceil(n_parameters * B / 8)`` bytes, the paper's
``B * |theta|`` bits rounded up to bytes, plus 3 zero guard bytes (``PREFIX_TABLE_BYTES`` counts them).
The packed kernels read the four codes of a lane word as one 32-bit window (assembled from bytes by
value: a single unaligned load where the core has one), shifted by the row's first bit and a compile-time
offset, then spread to bytes (B = 7: two windows); the guard bytes keep every window inside the array.

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

import decimal
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._bnc_options import RAW_INPUTS, RAW_INPUTS_NEED_DISCRETIZER, codes_of
from bnc_deploy.exporters._c_bnc_layout import (
    KERNEL_TEXT,
    PACKED_GUARD_BYTES,
    TABLE_LAYOUTS,
    accumulator_type,
    code_stream,
    lane_layout,
    lane_rows,
    lane_values,
    pack_codes,
    table_storage,
    uint_type,
)
from bnc_deploy.exporters.base import Option, Refusal, float_model, register_exporter
from bnc_deploy.formats.bnc import export_metadata, padded_thresholds, raw_cut_points
from bnc_deploy.formats.c import check_c_name, comment_text, metadata_comment
from bnc_deploy.formats.c_template import template_sections
from bnc_deploy.formats.checkset import random_rows
from bnc_deploy.version import __version__

if TYPE_CHECKING:
    from bnc_deploy.artifacts.bnc import BNCArtifact

#: Default prefix of the generated identifiers.
DEFAULT_NAME = "bnc"
#: ``--name``: the option of every C exporter (BN and DNN headers).
NAME = Option(
    "name",
    "str",
    DEFAULT_NAME,
    help="C export: prefix of the generated identifiers, a C identifier "
    f"(default: {DEFAULT_NAME}; macros use it upper-cased)",
)
#: ``--pack-bits``: the option of every C exporter (BN tables, DNN weights; the ONNX exporters' has the same help).
PACK_BITS = Option(
    "pack_bits",
    "bool",
    False,
    help="quantized models: store the B-bit codes (BN tables, DNN weights) "
    "packed to B bits each (C: one bit stream; ONNX: bit-planes) "
    "instead of one byte each",
)
#: Largest cardinality a uint8_t code can address.
MAX_CARDINALITY = 256
#: Values per line in the generated arrays.
PER_LINE = 20
#: The C of the header (package data, beside this module), cut into sections; see its first comment.
TEMPLATE = "c_bnc.h"
#: ``PREFIX_self_test``: at most this many stored rows, and at most this many bytes of rows and
#: expected values (labels; code sums in the narrowest type of the largest possible sum), at least one row.
SELF_TEST_MAX_ROWS = 64
SELF_TEST_MAX_BYTES = 4096
#: ``PREFIX_predict_proba``: fractional bits of the factors and of exp (Q1.31) and of the output (Q0.16).
EXP_FRAC_BITS = 31
PROBA_FRAC_BITS = 16


def exp_terms(frac_bits: int, max_sum: int) -> int:
    """``J = PREFIX_EXP_TERMS``: the factors ``exp(-2^j * 2^-B_F)``, ``j < J``, that ``predict_proba``
    multiplies. ``J = B_F + 5`` (at least 0) is the first ``J`` with ``2^J * 2^-B_F >= 32``, so
    every ``d >= 2^J`` has ``exp(-d * 2^-B_F) <= e^-32 < 2^-32`` (written 0); ``J`` is capped at the
    bit length of ``max_sum``, the largest possible ``d``."""
    return min(max(0, frac_bits + 5), int(max_sum).bit_length())


def exp_q31_table(frac_bits: int, terms: int) -> list[int]:
    """``round(2^31 * exp(-2^j * 2^-B_F))`` for ``j < terms``, from correctly rounded decimal
    arithmetic (not the platform's libm), so the same model always gives the same bytes."""
    ctx = decimal.Context(prec=60, rounding=decimal.ROUND_HALF_EVEN)
    table = []
    for j in range(terms):
        x = ctx.exp(-ctx.power(decimal.Decimal(2), j - frac_bits))
        table.append(int(ctx.multiply(x, decimal.Decimal(2**EXP_FRAC_BITS)).to_integral_value()))
    return table


def proba_error_bound(n_classes: int, terms: int) -> float:
    """The proven bound on ``|out[c] / 2^16 - p(c | x)|`` of ``predict_proba`` (module docstring)."""
    exp_error = n_classes * max(terms, 1) * 2.0**-EXP_FRAC_BITS
    return max(2.0**-PROBA_FRAC_BITS, 2.0 ** -(PROBA_FRAC_BITS + 1) + exp_error)


def self_test_rows(artifact: BNCArtifact) -> tuple[np.ndarray, str]:
    """``(rows (n, D) int64, what they are)`` stored for ``PREFIX_self_test``: the first rows of
    the model's check set, else seeded random valid rows; at most :data:`SELF_TEST_MAX_ROWS` rows
    and :data:`SELF_TEST_MAX_BYTES` bytes (one code byte per feature, a label, ``C`` sums)."""
    d, c = artifact.n_features, artifact.n_classes
    per_row = d + _type_bytes(uint_type(c - 1)) + c * _type_bytes(_self_test_sum_type(artifact))
    n = max(1, min(SELF_TEST_MAX_ROWS, SELF_TEST_MAX_BYTES // per_row))
    check = artifact.check_x
    if check is not None and len(check):
        rows = np.asarray(check, dtype=np.int64)[:n]
        which = f"all {len(rows)}" if len(rows) == len(check) else f"the first {len(rows)}"
        return rows, f"{which} of the model's {len(check)} check rows"
    return random_rows(artifact, n), f"{n} seeded random valid rows: the model stores no check set"


def _self_test_sum_type(artifact: BNCArtifact) -> str:
    """The stored code sums' type: the narrowest that holds every possible sum, ``(D + 1) * (2^B - 1)``."""
    return uint_type((artifact.n_features + 1) * codes_of(artifact).quantizer.max_code)


def _type_bytes(ctype: str) -> int:
    return int(ctype.removeprefix("uint").removesuffix("_t")) // 8


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


def _array_2d(ctype: str, name: str, rows: np.ndarray) -> list[str]:
    """``static const ctype name[n][m]``, one row per line (wrapped every :data:`PER_LINE` values)."""
    n, m = rows.shape
    lines = [f"static const {ctype} {name}[{n}][{m}] = {{"]
    for row in rows:
        chunks = [", ".join(str(int(v)) for v in row[k : k + PER_LINE]) for k in range(0, m, PER_LINE)]
        lines.append("    {" + ",\n     ".join(chunks) + "},")
    return lines + ["};"]


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


def _codes_rows(artifact: BNCArtifact, name: str, lanes: bool) -> list[str]:
    """The unpacked ``PREFIX_codes`` array: one line per stream row (``lanes``: the row's lane words, else its
    codes as bytes), a comment before each feature's rows."""
    if lanes:
        words = lane_rows(artifact)
        ctype, size = "uint32_t", int(words.size)
        row_text = [", ".join(_hex32(v) for v in row) for row in words]
    else:
        stream = code_stream(artifact).reshape(-1, artifact.n_classes)
        ctype, size = "uint8_t", int(stream.size)
        row_text = [", ".join(str(int(v)) for v in row) for row in stream]
    lines = [f"static const {ctype} {name}_codes[{size}] = {{", "    /* class prior */ " + row_text[0] + ","]
    for i in range(artifact.n_features):
        start, rows = 1 + int(artifact.row_offsets[i]), int(artifact.rows_per_feature[i])
        lines.append(f"    /* feature {i}: {comment_text(artifact.feature_names[i])} */")
        lines += ["    " + row_text[r] + "," for r in range(start, start + rows)]
    return lines + ["};"]


def _lines(values: Iterable[str]) -> str:
    """A multi-line placeholder value: the template line supplies the last newline."""
    return "\n".join(values)


def build_c_source(
    artifact: BNCArtifact,
    *,
    name: str = DEFAULT_NAME,
    pack_bits: bool = False,
    raw_inputs: bool = False,
    self_test: bool = True,
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
    values = _model_values(artifact, name, packed, raw_inputs, self_test)
    sections = _sections(artifact, name, values, packed, raw_inputs)
    if self_test:
        values.update(_self_test_values(artifact, name))
        sections.insert(sections.index("macros"), "head_self_test")
        # the arrays after the other arrays, before the first function (the code lookup)
        sections.insert(next(k for k, s in enumerate(sections) if s.startswith("code_")), "arrays_self_test")
        sections.insert(sections.index("end"), "self_test")
    template = template_sections(__package__, TEMPLATE)
    return "".join(template[section].substitute(values) for section in sections)


def _self_test_values(artifact: BNCArtifact, name: str) -> dict[str, object]:
    """The placeholders of the self-test sections: the rows, the reference's labels and code sums."""
    from bnc_deploy.reference import reference_predictor  # lazy, as formats.checkset does

    rows, source = self_test_rows(artifact)
    reference = reference_predictor(artifact)
    sums, labels = reference.integer_scores(rows), reference.predict(rows)
    return {
        "self_test_rows": len(rows),
        "self_test_source": source,
        "self_test_max": SELF_TEST_MAX_ROWS,
        "self_test_max_bytes": SELF_TEST_MAX_BYTES,
        "self_test_x_array": _lines(_array_2d("uint8_t", f"{name}_self_test_x", rows)),
        "self_test_label_array": _lines(_array(uint_type(artifact.n_classes - 1), f"{name}_self_test_label", labels)),
        "self_test_sum_array": _lines(_array_2d(_self_test_sum_type(artifact), f"{name}_self_test_sum", sums)),
    }


def _model_values(
    artifact: BNCArtifact, name: str, packed: np.ndarray | None, raw_inputs: bool, self_test: bool = True
) -> dict[str, object]:
    """The placeholders every variant of the header fills in: names, model facts, metadata, the
    arrays of the NB part (``packed``: the bit stream of ``--pack-bits``, None for one byte per code;
    ``self_test``: whether the header has ``PREFIX_self_test``, recorded in the metadata)."""
    q = codes_of(artifact).quantizer
    d, bits = artifact.n_features, q.total_bits
    pack_bits = packed is not None
    acc, lanes = accumulator_type(d, bits), lane_layout(d, bits)
    table_bytes, storage = table_storage(artifact, None if packed is None else int(packed.size))
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
            "table_storage": storage,
            "kernel": lanes or "scalar",
            "c_standard": "c99",
            "self_test": bool(self_test),
        },
    )
    offsets = artifact.row_offsets + 1  # stream row 0 is the prior
    terms = exp_terms(q.frac_bits, (d + 1) * q.max_code)
    bound = proba_error_bound(artifact.n_classes, terms)
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
        "n_parameters": int(artifact.n_parameters),
        "size_bits": artifact.size_bits,
        "n_ops": artifact.n_ops,
        "n_rows": artifact.n_rows,
        "table_bytes": table_bytes,
        "table_layout": TABLE_LAYOUTS["packed" if pack_bits else storage],
        "kernel_text": KERNEL_TEXT[lanes or "scalar"],
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
        "row_offset_array": _lines(_array(uint_type(int(offsets.max())), f"{name}_row_offset", offsets)),
        "acc": acc,
        "code_mask": 2**bits - 1,
        "last_code_bit": bits - 1,
        "n_stream_rows": 1 + artifact.n_rows,
        **lane_values(artifact.n_classes, bits, (d + 1) * q.max_code, lanes),
        "exp_terms": terms,
        "exp_array": _lines(
            _array("uint32_t", f"{name}_exp_q31", exp_q31_table(q.frac_bits, terms), fmt=_hex32, per_line=6)
        ),
        "proba_bound": ("2^-16" if bound == 2.0**-PROBA_FRAC_BITS else f"{bound:.6g}"),
        "proba_sum_bound": f"{(artifact.n_classes + 1) / 2:g}",
    }


def _hex32(value: int) -> str:
    return f"0x{int(value):08x}u"


def _sections(
    artifact: BNCArtifact, name: str, values: dict[str, object], packed: np.ndarray | None, raw_inputs: bool
) -> list[str]:
    """The template's sections for the model and options, in order; adds the placeholders of the
    TAN, code-storage and raw-input arrays to ``values``."""
    d, bits = artifact.n_features, codes_of(artifact).quantizer.total_bits
    tan = artifact.structure == "tan"
    sections = ["head"] + (["head_raw"] if raw_inputs else []) + ["macros"]
    sections += ["lane_words", "arrays"] if lane_layout(d, bits) else ["arrays"]
    if tan:
        sections.append("arrays_tan")
        strides = artifact.parent_cardinalities
        values["parent_array"] = _lines(
            _array("int16_t" if d < 2**15 else "int32_t", f"{name}_parent", artifact.parents)
        )
        values["stride_array"] = _lines(_array(uint_type(int(strides.max())), f"{name}_stride", strides))
    lanes = lane_layout(d, bits)
    if packed is not None:
        sections.append("codes_packed")
        guarded = np.concatenate([packed, np.zeros(PACKED_GUARD_BYTES, dtype=np.uint8)])
        values["codes_array"] = _lines(
            _array("uint8_t", f"{name}_codes", guarded, fmt=lambda v: f"0x{int(v):02x}", per_line=16)
        )
    else:
        sections.append("codes_lanes" if lanes else "codes_bytes")
        values["codes_array"] = _lines(_codes_rows(artifact, name, lanes is not None))
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
        values["cut_begin_array"] = _lines(_array(uint_type(int(begin.max())), f"{name}_cut_begin", begin))
    storage = "packed" if packed is not None else ("lanes" if lanes else "bytes")
    sections += [f"code_{storage}", "row_tan" if tan else "row_naive_bayes"]
    sections += [f"word_{storage}", lanes, "lanes"] if lanes else ["sums_scalar"]
    sections += ["predict_lanes" if lanes else "predict_scalar", "log_joint", "proba"] + (["raw"] if raw_inputs else [])
    sections.append("end")
    return sections


def build_c_bytes(
    artifact: BNCArtifact,
    *,
    name: str = DEFAULT_NAME,
    pack_bits: bool = False,
    raw_inputs: bool = False,
    self_test: bool = True,
) -> bytes:
    """The header file's bytes (ASCII) for the verifier (:mod:`bnc_deploy.verify`)."""
    source = build_c_source(artifact, name=name, pack_bits=pack_bits, raw_inputs=raw_inputs, self_test=self_test)
    return source.encode("ascii")


register_exporter(
    "bnc",
    "c",
    build_c_bytes,
    extension=".h",
    runtime="native",
    description="header-only C99 library: const integer tables, integer sums, bit-exact (quantized models)",
    options=[
        NAME,
        PACK_BITS,
        RAW_INPUTS,
        Option(
            "self_test",
            "bool",
            True,
            help="C export: include PREFIX_self_test(), which runs up to "
            f"{SELF_TEST_MAX_ROWS} stored check rows against their stored reference labels and scores "
            "(default: included; --no-self-test leaves it and its rows out)",
        ),
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
