"""The native runtime's host kernel: the C wrapper compiled around an exported header (:func:`wrapper_source`).

The wrapper's kernel lays the model out for SIMD, classes as vector lanes: at load (``bncn_init``)
it expands the header's code stream (``PREFIX_code(k)``, packed or not) into a table of
``1 + N_ROWS`` rows (row 0 the class prior, then the stacked tables in stream order) of ``LANES``
unsigned accumulator lanes, ``LANES`` = the class count rounded up to a 32-byte vector (pad lanes:
the prior's are the type's maximum, the tables' 0, so a pad lane never wins the argmin over a real
class). A row is: check every code (``x_i <= max_code_i`` on whole vectors of codes, as unsigned
numbers so that a negative code is refused too), compute each feature's table row (naive Bayes:
``row_offset_i + x_i``; TAN: ``row_offset_i + x_i * stride_i + x_pa(i)``, the header's formula), add
the ``D`` table rows into a ``LANES``-wide accumulator (GNU C vector types: one or two vector adds
per feature; plain loops for other compilers), take the first minimum in one min reduction over
``sum << KEY_SHIFT | lane`` (smallest sum, then first lane: the first class on ties, as every
format), and write ``label`` (int64) and, when asked, ``scores[c] = -(double)sum_c * 2^-B_F``
(float64): the reference's expression, exact because the sums are integers far below 2^53 and the
step is a power of two. The lanes are ``uint8_t``, ``uint16_t`` or ``uint32_t``: the narrowest type
whose maximum is at least ``(D + 1) * (2^B - 1)``, the largest possible sum (a prior code plus ``D``
table codes of at most ``2^B - 1`` each), so no lane can wrap; the wrapper states it with an
``#error`` the compiler checks. Raw-input files bin each row with the header's own ``PREFIX_bin``
(float32 comparisons) and then run the same kernel; float64 raw input is rounded to float32 in C
(the same single rounding as ``astype(float32)``), after refusing anything beyond the float32 range,
NaN or inf. Float (unquantized) models have no C export (the exporter refuses them), so there is no
float kernel.

Rows as lanes (section ``rows_lanes``; compilers targeting AVX-512 BW + VBMI, ``NF <= 1024`` and
sums within 16 bits, ``(D + 1) * (2^B - 1) <= 65535``): the code batches take blocks of up to 128
rows (two 64-row halves) with one byte lane per row, the last block part-filled (its missing rows
are summed as zero codes and discarded). The block becomes one 64-byte vector per feature: uint8
rows of few features (``RL_WIN``) by masked byte permutations of each 8 rows' contiguous bytes
(one per 128-byte window; no byte past the array is read), other rows narrowed to bytes and
written as each row's qwords of 8 features, a byte permutation of each 8 x 8 tile; then one 8 x 8
qword transpose across the 8 row groups. The same unsigned range check marks a refused row (its
lanes are computed and discarded): as wider codes are narrowed, and for uint8 codes once per
feature on the laid-out block. The vectors are turned into table indices (TAN: ``x_i * stride_i +
x_pa``, the product looked up), and each class's sum is its prior plus, per feature, one byte
permutation of the feature's codes of that class (at most 256 codes: one ``vpermb`` for 64, one
``vpermi2b`` for 128, two and a blend for 256), added in byte lanes for ``255 // (2^B - 1)``
features (no byte can wrap) and then in 16-bit lanes. With at most 3 bits a table byte holds two
classes' codes in its nibbles, so one permutation serves both: ``15 // (2^B - 1)`` lookups are
summed in the nibbles before they are split into the two classes' byte sums. The label is the
first minimum (a strictly smaller sum replaces) and the scores are the same expression as above,
so the outputs are identical to the class-lanes kernel's. ``bncn_init`` picks it when every
feature's table has at most 256 entries and its estimated cost is below the class-lanes kernel's
(the estimate in the C, fitted to ``benchmarks/bench_inference.py``: many features and few
classes, usps and satimage, take rows as lanes; letter keeps classes as lanes; ``-DBNCN_RL_FORCE=0``
or ``1`` in the flags overrides it, for benchmarks); fewer than ``RL_MIN_ROWS`` (16) rows, the
one-row slots and raw inputs use the class-lanes kernel.

Entry points (the ``long`` ones return the number of rows they refused):

* ``int bncn_init(void)``: fill the tables once (before any other call); returns ``LANES``;
* ``int bncn_kernel(void)``: after init, 1 where the batches run rows as lanes, else 0;
* ``long bncn_batch_T(const T *x, long n, double *scores, int64_t *labels, int threads)`` for
  ``T`` in :data:`CODE_TYPES` (``u8``, ``i32``, ``i64``) or, raw files, :data:`RAW_TYPES` (``f32``,
  ``f64``): rows ``0 .. n-1`` over up to ``threads`` pthreads of at least
  :data:`MIN_ROWS_PER_THREAD` rows each; ``scores`` may be NULL (labels only);
* ``void *bncn_slot(int k)`` and ``int bncn_one_K(void)``, ``K < ROW_SLOTS``: static one-row buffers
  (input NF int64 / double, scores NC double, label int64) and an argument-free call on each;
* ``long bncn_api_u8(const uint8_t *x, long n, int32_t *scores, int32_t *labels)``: the header's
  own ``PREFIX_log_joint``/``PREFIX_predict`` over a batch, for the adapter's load-time check.

Host-only: GNU C vector types where the compiler has them (GCC, clang), plain C99 loops otherwise;
the exported header is included unchanged. NumPy and the standard library only.

The C is written as C in ``runtimes/native_kernel.c`` (package data): the wrapper in order, cut into
named sections (:func:`bnc_deploy.formats.c_template.template_sections`, as the C exporter's
``c_bnc.h``). :func:`wrapper_source` only picks the sections (the rows-as-lanes section with its
NB or TAN pieces, one codes kernel per code type, the raw kernels for raw files, one call per row
slot) and fills in their ``string.Template`` placeholders:
the prefix, the lane and key types, numbers. The wrapper's bytes key the adapter's compile cache.
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.errors import RuntimeLoadError
from bnc_deploy.formats.c_template import template_sections

#: Bytes of one SIMD vector the class lanes are padded to (AVX2; two SSE/NEON registers).
VECTOR_BYTES = 32
#: A thread gets at least this many rows (~70 us of work: threads are started per call, ~10-50 us each).
MIN_ROWS_PER_THREAD = 8192
#: At most this many threads per call.
MAX_THREADS = 64
#: One-row buffers per compiled library (threads calling at once each take one; beyond: the batch path).
ROW_SLOTS = 8

#: Kernel input dtypes -> (C type, NumPy type, the cast that widens a code to uint64 for the scalar
#: range check, the unsigned type and the vector bytes of the vector range check). Codes are compared
#: as unsigned numbers of their own width, so a negative one is huge and refused.
CODE_TYPES = {
    "u8": ("uint8_t", np.uint8, "(uint64_t)", "uint8_t", 16),
    "i32": ("int32_t", np.int32, "(uint64_t)(uint32_t)", "uint32_t", 32),
    "i64": ("int64_t", np.int64, "(uint64_t)", "uint64_t", 32),
}
RAW_TYPES = {"f32": ("float", np.float32), "f64": ("double", np.float64)}
#: The C of the wrapper (package data, beside this module), cut into sections; see its first comment.
TEMPLATE = "native_kernel.c"


def lanes_type(n_features: int, bits: int) -> tuple[str, int]:
    """``(C type, max value)`` of the narrowest unsigned lane that holds ``(D + 1) * (2^B - 1)``."""
    largest = (n_features + 1) * (2**bits - 1)
    for width in (8, 16, 32):
        if largest <= 2**width - 1:
            return f"uint{width}_t", 2**width - 1
    raise RuntimeLoadError(f"code sums up to {largest} do not fit 32 bits")


def wrapper_source(
    name: str, *, n_features: int, n_classes: int, bits: int, frac_bits: int, tan: bool, raw: bool
) -> str:
    """The C wrapper for a header with prefix ``name`` (see the module docstring)."""
    acc, acc_max = lanes_type(n_features, bits)
    per_vector = VECTOR_BYTES // (acc_max.bit_length() // 8)
    lanes = -(-n_classes // per_vector) * per_vector
    step = float.hex(2.0**-frac_bits)
    key_shift = max(1, (lanes - 1).bit_length())
    key_type = next(f"uint{w}_t" for w in (16, 32, 64) if (acc_max << key_shift | (lanes - 1)) < 2**w)
    sections = template_sections(__package__, TEMPLATE)
    common = {"prefix": name, "PREFIX": name.upper()}
    head = {"lanes": lanes, "step": step, "min_rows_per_thread": MIN_ROWS_PER_THREAD, "max_threads": MAX_THREADS}
    head |= {"acc": acc, "acc_max": acc_max, "key": key_type, "key_shift": key_shift, "vector_bytes": VECTOR_BYTES}
    parts = [sections["head"].substitute(common, **head)]
    shape = "tan" if tan else "naive_bayes"
    rows_lanes = {
        "rl_entries": sections[f"rl_entries_{shape}"].substitute(common).removesuffix("\n"),
        "rl_index": sections[f"rl_index_{shape}"].substitute(common),
    }
    parts.append(sections["rows_lanes"].substitute(common, **rows_lanes))
    # one line of C (a table row's expression): the codes kernel's line supplies the rest
    row = sections["row_tan" if tan else "row_naive_bayes"].substitute(common).removesuffix("\n")
    for suffix, (ctype, _, widen, utype, check_bytes) in CODE_TYPES.items():
        kernel = {"suffix": suffix, "ctype": ctype, "widen": widen, "utype": utype, "check_bytes": check_bytes}
        parts.append(sections["codes_kernel"].substitute(common, row=row, **kernel))
    parts.append(sections["init_inputs"].substitute(common))
    parts += [sections["init_input"].substitute(common, suffix=suffix) for suffix in CODE_TYPES]
    parts.append(sections["init_inputs_end"].substitute(common))
    if raw:
        for suffix, (ctype, _) in RAW_TYPES.items():
            parts.append(sections["raw_kernel"].substitute(common, suffix=suffix, ctype=ctype))
    one_type, one_kernel = ("double", "f64") if raw else ("int64_t", "i64")
    parts.append(sections["one_row"].substitute(common, in_type=one_type, row_slots=ROW_SLOTS))
    parts += [sections["one_row_fn"].substitute(common, k=k, suffix=one_kernel) for k in range(ROW_SLOTS)]
    return "".join(parts)
