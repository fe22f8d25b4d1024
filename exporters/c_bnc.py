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

Registered as the ``("bnc", "c")`` exporter (extension ``.h``, runtime ``native``).
"""

from __future__ import annotations

import numpy as np

import bnc_deploy
from bnc_deploy.errors import ExportError
from bnc_deploy.exporters._bnc_options import RAW_INPUTS
from bnc_deploy.exporters.base import Option, register_exporter
from bnc_deploy.formats.bnc import export_metadata, padded_thresholds, raw_cut_points
from bnc_deploy.formats.c import check_c_name, comment_text, metadata_comment

#: Default prefix of the generated identifiers.
DEFAULT_NAME = "bnc"
#: Largest cardinality a uint8_t code can address.
MAX_CARDINALITY = 256
#: Values per line in the generated arrays.
PER_LINE = 20


def accumulator_type(n_features: int, bits: int) -> str:
    """The narrowest unsigned type that holds every code sum: ``(D + 1) * (2^B - 1)``."""
    return "uint16_t" if (n_features + 1) * (2 ** bits - 1) < 2 ** 16 else "uint32_t"


def code_stream(artifact) -> np.ndarray:
    """All codes in stream order (prior, then the stacked table rows), uint8 of length n_parameters."""
    return np.concatenate([artifact.class_codes.reshape(-1), artifact.table_codes.reshape(-1)]).astype(np.uint8)


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
    flat = np.unpackbits(np.asarray(stream, dtype=np.uint8), bitorder="little")[:n * bits].reshape(n, bits)
    return (flat.astype(np.uint16) << np.arange(bits, dtype=np.uint16)[None, :]).sum(axis=1).astype(np.uint8)


def _uint_type(max_value: int) -> str:
    for bits in (8, 16, 32):
        if max_value < 2 ** bits:
            return f"uint{bits}_t"
    raise ExportError(f"value {max_value} does not fit 32 bits")


def _array(ctype: str, name: str, values, *, fmt=str, per_line: int = PER_LINE) -> list[str]:
    values = list(values)
    lines = [f"static const {ctype} {name}[{max(len(values), 1)}] = {{"]
    if not values:
        values = ["0"]  # C99 has no zero-length arrays; never read
    for k in range(0, len(values), per_line):
        lines.append("    " + ", ".join(fmt(v) for v in values[k:k + per_line]) + ",")
    lines.append("};")
    return lines


def _float_literal(value) -> str:
    """Exact C99 hexadecimal literal of a float32 value (finite)."""
    v = float(np.float32(value))
    mantissa, _, exponent = float.hex(abs(v)).partition("p")  # e.g. 0x1.9999980000000p-4
    mantissa = mantissa.rstrip("0").rstrip(".")
    return ("-" if v < 0 or (v == 0 and np.signbit(v)) else "") + f"{mantissa}p{exponent}f"


def _check(artifact, name: str, raw_inputs: bool) -> None:
    check_c_name(name)
    if artifact.kind != "bnc":
        raise ExportError(f"--format c exports Bayesian network classifiers, not {artifact.kind} models")
    if not artifact.is_quantized:
        raise ExportError("C export needs a quantized model (--bits): the C library accumulates integer "
                          "codes; this model has float tables")
    if artifact.n_features == 0:
        raise ExportError("cannot export a model without features")
    big = [i for i, c in enumerate(artifact.cardinalities) if int(c) > MAX_CARDINALITY]
    if big:
        i = big[0]
        raise ExportError(f"feature {i} ({artifact.feature_names[i]!r}) has {int(artifact.cardinalities[i])} "
                          f"values; the C API takes uint8_t codes (at most {MAX_CARDINALITY} values)")
    if raw_inputs:
        raw_cut_points(artifact)  # ExportError without a usable discretizer


def build_c_source(artifact, *, name: str = DEFAULT_NAME, pack_bits: bool = False,
                   raw_inputs: bool = False) -> str:
    """The text of the header file (see the module docstring for its contract)."""
    _check(artifact, name, raw_inputs)
    q = artifact.quantizer
    d, c, bits = artifact.n_features, artifact.n_classes, q.total_bits
    macro = name.upper()
    stream = code_stream(artifact)
    n_params = int(stream.size)
    assert n_params == artifact.n_parameters
    packed = pack_codes(stream, bits) if pack_bits else None
    table_bytes = int(packed.size) if pack_bits else n_params
    acc = accumulator_type(d, bits)
    meta = export_metadata(artifact, format="c", lowering="gather", raw_inputs=raw_inputs, input_dtype="uint8",
                           extra={"c_name": name, "exact": True, "accumulator": acc, "table_bytes": table_bytes,
                                  "table_storage": f"packed{bits}" if pack_bits else "uint8",
                                  "c_standard": "c99"})
    tan = artifact.structure == "tan"
    offsets = artifact.row_offsets + 1  # stream row 0 is the prior
    max_code = artifact.cardinalities - 1

    out: list[str] = []
    w = out.append
    w(f"/* {comment_text(name)}.h: {'TAN' if tan else 'naive Bayes'} classifier, a header-only C99 library "
      f"generated by bnc-deploy {comment_text(bnc_deploy.__version__)}")
    w(" * (bnc-export --format c). Do not edit: the file's integrity digest covers every byte.")
    w(" *")
    w(f" * Model: {d} features, {c} classes; B = {bits} bits per parameter (B_I = {q.int_bits}, "
      f"B_F = {q.frac_bits}),")
    w(f" *   {n_params} parameters ({artifact.size_bits} bits), {artifact.n_ops} additions per row;")
    w(f" *   tables {table_bytes} bytes ({'B-bit codes packed LSB first' if pack_bits else 'one byte per code'}).")
    w(f" * Source model (content SHA-256): {meta['artifact_sha256']}")
    w(" * Classes (index: name):")
    for k, cname in enumerate(artifact.class_names):
        w(f" *   {k}: {comment_text(cname)}")
    w(" * Features (index: name, cardinality, parent feature):")
    for i, fname in enumerate(artifact.feature_names):
        parent = int(artifact.parents[i])
        w(f" *   {i}: {comment_text(fname)}, {int(artifact.cardinalities[i])}, "
          f"{'-' if parent < 0 else parent}")
    w(" *")
    w(" * API (no malloc, no static state, no header beyond <stdint.h>; integer arithmetic only"
      + (" outside the *_raw binning" if raw_inputs else "") + "):")
    w(f" *   int {name}_predict(const uint8_t *x);")
    w(" *     x[i] = code of feature i. Returns the most probable class (the first on ties), or -1")
    w(f" *     when some x[i] >= {macro}_CARD_i (checked before any table is read).")
    w(f" *   int {name}_log_joint(const uint8_t *x, int32_t *scores);")
    w(f" *     scores[c] = -(sum of class c's codes): log p(c, x) = scores[c] * 2^-{macro}_STEP_SHIFT")
    w(f" *     ({macro}_STEP_SHIFT = B_F = {q.frac_bits}; negative B_F means a step of 2^|B_F|).")
    w(" *     Returns 0, or -1 for an invalid x (scores untouched).")
    if raw_inputs:
        w(f" *   int {name}_predict_raw(const float *x);")
        w(f" *   int {name}_log_joint_raw(const float *x, int32_t *scores);")
        w(" *     Raw float32 values; code_i = number of float32 thresholds t with x_i > t (the discretizer's")
        w(" *     cut points rounded down to float32, exact for float32 inputs). NaN or +-inf: -1.")
        w(" *     Do not compile with -ffast-math (it may drop the NaN test).")
    w(" */")
    w(metadata_comment(meta).rstrip("\n"))
    guard = f"{macro}_BNC_DEPLOY_MODEL_H"
    w(f"#ifndef {guard}")
    w(f"#define {guard}")
    w("")
    w("#include <stdint.h>")
    w("")
    defines = [
        ("N_FEATURES", d), ("N_CLASSES", c), ("BITS", bits), ("INT_BITS", q.int_bits),
        ("FRAC_BITS", f"({q.frac_bits})" if q.frac_bits < 0 else q.frac_bits),
        ("STEP_SHIFT", f"({q.frac_bits})" if q.frac_bits < 0 else q.frac_bits),
        ("N_PARAMETERS", f"{n_params}UL"), ("SIZE_BITS", f"{artifact.size_bits}UL"),
        ("N_OPS", f"{artifact.n_ops}UL"), ("TABLE_BYTES", f"{table_bytes}UL"),
        ("N_ROWS", f"{artifact.n_rows}UL"), ("PACKED", int(bool(pack_bits))), ("RAW_INPUTS", int(bool(raw_inputs))),
        ("INVALID", "(-1)"),
    ]
    for key, value in defines:
        w(f"#define {macro}_{key} {value}")
    for i, card in enumerate(artifact.cardinalities):
        w(f"#define {macro}_CARD_{i} {int(card)}")
    w("")

    # -- constant arrays ------------------------------------------------------------------------
    w("/* Largest valid code of each feature (cardinality - 1). */")
    out += _array("uint8_t", f"{name}_max_code", max_code)
    w("/* First code-stream row of each feature (row 0 is the class prior). */")
    out += _array(_uint_type(int(offsets.max())), f"{name}_row_offset", offsets)
    if tan:
        strides = artifact.parent_cardinalities
        w("/* Parent feature of each feature (-1: the class only) and the parent's cardinality. */")
        out += _array("int16_t" if d < 2 ** 15 else "int32_t", f"{name}_parent", artifact.parents)
        out += _array(_uint_type(int(strides.max())), f"{name}_stride", strides)
    if pack_bits:
        w(f"/* {n_params} {bits}-bit codes, LSB first: code k is bits k*{bits} .. k*{bits}+{bits - 1} of the "
          "stream, stream bit j = bit j%8 of byte j/8. */")
        out += _array("uint8_t", f"{name}_codes", packed, fmt=lambda v: f"0x{int(v):02x}", per_line=16)
    else:
        w(f"/* {n_params} codes, {c} per row: the class prior, then feature 0's rows, feature 1's, ... */")
        w(f"static const uint8_t {name}_codes[{n_params}] = {{")
        w("    /* class prior */ " + ", ".join(str(int(v)) for v in artifact.class_codes) + ",")
        table = artifact.table_codes
        for i in range(d):
            start, rows = int(artifact.row_offsets[i]), int(artifact.rows_per_feature[i])
            w(f"    /* feature {i}: {comment_text(artifact.feature_names[i])} */")
            for r in range(start, start + rows):
                w("    " + ", ".join(str(int(v)) for v in table[r]) + ",")
        w("};")
    if raw_inputs:
        thresholds, n_cuts = padded_thresholds(artifact)
        flat = [thresholds[i, k] for i in range(d) for k in range(int(n_cuts[i]))]
        begin = np.concatenate([[0], np.cumsum(n_cuts)]).astype(np.int64)
        w("/* Binning thresholds (float32, exact hexadecimal literals), feature i's are "
          f"{name}_cut_begin[i] .. {name}_cut_begin[i + 1] - 1. */")
        out += _array("float", f"{name}_thresholds", flat, fmt=_float_literal, per_line=6)
        out += _array(_uint_type(int(begin.max())), f"{name}_cut_begin", begin)
    w("")

    # -- functions ------------------------------------------------------------------------------
    if pack_bits:
        mask = 2 ** bits - 1
        w("/* Code k of the packed stream. */")
        w(f"static inline unsigned {name}_code(uint32_t k)")
        w("{")
        w(f"    uint32_t bit = k * {bits}u;")
        w(f"    unsigned value = (unsigned){name}_codes[bit >> 3] >> (bit & 7u);")
        if 8 % bits:
            w(f"    if ((bit & 7u) > {8 - bits}u) {{")
            w(f"        value |= (unsigned){name}_codes[(bit >> 3) + 1u] << (8u - (bit & 7u));")
            w("    }")
        w(f"    return value & {mask}u;")
        w("}")
    else:
        w(f"static inline unsigned {name}_code(uint32_t k)")
        w("{")
        w(f"    return {name}_codes[k];")
        w("}")
    w("")
    w("/* Code sums of x (0), or -1 if some code is out of range (then nothing is read). */")
    w(f"static inline int {name}_sums(const uint8_t *x, {acc} *sum)")
    w("{")
    w("    int i, c;")
    w(f"    for (i = 0; i < {macro}_N_FEATURES; ++i) {{")
    w(f"        if (x[i] > {name}_max_code[i]) {{")
    w("            return -1;")
    w("        }")
    w("    }")
    w(f"    for (c = 0; c < {macro}_N_CLASSES; ++c) {{")
    w(f"        sum[c] = ({acc}){name}_code((uint32_t)c);")
    w("    }")
    w(f"    for (i = 0; i < {macro}_N_FEATURES; ++i) {{")
    if tan:
        w(f"        uint32_t row = (uint32_t){name}_row_offset[i] + (uint32_t)x[i] * (uint32_t){name}_stride[i];")
        w("        uint32_t k;")
        w(f"        if ({name}_parent[i] >= 0) {{")
        w(f"            row += (uint32_t)x[{name}_parent[i]];")
        w("        }")
        w(f"        k = row * (uint32_t){macro}_N_CLASSES;")
    else:
        w(f"        uint32_t k = ((uint32_t){name}_row_offset[i] + (uint32_t)x[i]) * (uint32_t){macro}_N_CLASSES;")
    w(f"        for (c = 0; c < {macro}_N_CLASSES; ++c) {{")
    w(f"            sum[c] = ({acc})(sum[c] + {name}_code(k + (uint32_t)c));")
    w("        }")
    w("    }")
    w("    return 0;")
    w("}")
    w("")
    w(f"static inline int {name}_predict(const uint8_t *x)")
    w("{")
    w(f"    {acc} sum[{macro}_N_CLASSES];")
    w("    int c, best = 0;")
    w(f"    if ({name}_sums(x, sum) != 0) {{")
    w(f"        return {macro}_INVALID;")
    w("    }")
    w(f"    for (c = 1; c < {macro}_N_CLASSES; ++c) {{")
    w("        if (sum[c] < sum[best]) {")
    w("            best = c;")
    w("        }")
    w("    }")
    w("    return best;")
    w("}")
    w("")
    w(f"static inline int {name}_log_joint(const uint8_t *x, int32_t *scores)")
    w("{")
    w(f"    {acc} sum[{macro}_N_CLASSES];")
    w("    int c;")
    w(f"    if ({name}_sums(x, sum) != 0) {{")
    w(f"        return {macro}_INVALID;")
    w("    }")
    w(f"    for (c = 0; c < {macro}_N_CLASSES; ++c) {{")
    w("        scores[c] = -(int32_t)sum[c];")
    w("    }")
    w("    return 0;")
    w("}")
    if raw_inputs:
        w("")
        w("/* Raw float32 values -> codes (0), or -1 for NaN or +-inf. */")
        w(f"static inline int {name}_bin(const float *x, uint8_t *codes)")
        w("{")
        w("    int i;")
        w(f"    for (i = 0; i < {macro}_N_FEATURES; ++i) {{")
        w("        float v = x[i];")
        w("        unsigned code = 0;")
        w("        uint32_t k;")
        w("        if (!(v >= -0x1.fffffep+127f && v <= 0x1.fffffep+127f)) {")
        w("            return -1;")
        w("        }")
        w(f"        for (k = {name}_cut_begin[i]; k < {name}_cut_begin[i + 1]; ++k) {{")
        w(f"            if (v > {name}_thresholds[k]) {{")
        w("                ++code;")
        w("            }")
        w("        }")
        w("        codes[i] = (uint8_t)code;")
        w("    }")
        w("    return 0;")
        w("}")
        w("")
        w(f"static inline int {name}_predict_raw(const float *x)")
        w("{")
        w(f"    uint8_t codes[{macro}_N_FEATURES];")
        w(f"    if ({name}_bin(x, codes) != 0) {{")
        w(f"        return {macro}_INVALID;")
        w("    }")
        w(f"    return {name}_predict(codes);")
        w("}")
        w("")
        w(f"static inline int {name}_log_joint_raw(const float *x, int32_t *scores)")
        w("{")
        w(f"    uint8_t codes[{macro}_N_FEATURES];")
        w(f"    if ({name}_bin(x, codes) != 0) {{")
        w(f"        return {macro}_INVALID;")
        w("    }")
        w(f"    return {name}_log_joint(codes, scores);")
        w("}")
    w("")
    w(f"#endif /* {guard} */")
    return "\n".join(out) + "\n"


def build_c_bytes(artifact, *, name: str = DEFAULT_NAME, pack_bits: bool = False, raw_inputs: bool = False) -> bytes:
    """The header file's bytes (ASCII) for the verifier (:mod:`bnc_deploy.verify`)."""
    return build_c_source(artifact, name=name, pack_bits=pack_bits, raw_inputs=raw_inputs).encode("ascii")


register_exporter(
    "bnc", "c", build_c_bytes, extension=".h", runtime="native",
    description="header-only C99 library: const integer tables, integer sums, bit-exact (quantized models)",
    options=[
        Option("name", "str", DEFAULT_NAME, help="C export: prefix of the generated identifiers, a C identifier "
                                                  f"(default: {DEFAULT_NAME}; macros use it upper-cased)"),
        Option("pack_bits", "bool", False, help="quantized models: store the B-bit codes (BN tables, DNN weights) "
                                                "packed to B bits each (C: one bit stream; ONNX: bit-planes) "
                                                "instead of one byte each"),
        RAW_INPUTS,
    ])
