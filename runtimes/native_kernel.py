"""The native runtime's host kernel: the C wrapper compiled around an exported header (:func:`wrapper_source`).

The wrapper's kernel lays the model out for SIMD, classes as vector lanes: at load
(``bncn_init``) it expands the header's code stream (``PREFIX_code(k)``, packed or not) into a
table of ``1 + N_ROWS`` rows (row 0 the class prior, then the stacked tables in stream order) of
``LANES`` unsigned accumulator lanes, ``LANES`` = the class count rounded up to a 32-byte vector
(pad lanes: the prior's are the type's maximum, the tables' 0, so a pad lane never wins the
argmin over a real class). A row is: check every code (``x_i <= max_code_i`` on whole vectors
of codes, as unsigned numbers so that a negative code is refused too), compute each feature's
table row (naive Bayes: ``row_offset_i + x_i``; TAN: ``row_offset_i + x_i * stride_i + x_pa(i)``,
the header's formula), add the ``D`` table rows into a ``LANES``-wide accumulator (GNU C vector
types: one or two vector adds per feature; plain loops for other compilers), take the first
minimum in one min reduction over ``sum << KEY_SHIFT | lane`` (smallest sum, then first lane:
the first class on ties, as every format), and write ``label`` (int64) and, when asked, ``scores[c] = -(double)sum_c * 2^-B_F`` (float64): the
reference's expression, exact because the sums are integers far below 2^53 and the step is a
power of two. The lanes are ``uint8_t``, ``uint16_t`` or ``uint32_t``: the narrowest type whose
maximum is at least ``(D + 1) * (2^B - 1)``, the largest possible sum (a prior code plus ``D``
table codes of at most ``2^B - 1`` each), so no lane can wrap; the wrapper states it with an
``#error`` the compiler checks. Raw-input files bin each row with the header's own
``PREFIX_bin`` (float32 comparisons) and then run the same kernel; float64 raw input is rounded
to float32 in C (the same single rounding as ``astype(float32)``), after refusing anything beyond
the float32 range, NaN or inf. Float (unquantized) models have no C export (the exporter refuses
them), so there is no float kernel.

Entry points (the ``long`` ones return the number of rows they refused):

* ``int bncn_init(void)``: fill the tables once (before any other call); returns ``LANES``;
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
"""

from __future__ import annotations

import numpy as np

from bnc_deploy.errors import RuntimeLoadError

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
CODE_TYPES = {"u8": ("uint8_t", np.uint8, "(uint64_t)", "uint8_t", 16),
              "i32": ("int32_t", np.int32, "(uint64_t)(uint32_t)", "uint32_t", 32),
              "i64": ("int64_t", np.int64, "(uint64_t)", "uint64_t", 32)}
RAW_TYPES = {"f32": ("float", np.float32), "f64": ("double", np.float64)}

_WRAPPER_HEAD = r"""/* Host-only batch kernels around an exported bnc-deploy C header (bnc_deploy.runtimes.native_kernel).
 * The header is included unchanged; nothing here is part of the exported file. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200112L /* pthreads under -std=c99 */
#endif
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if BNCN_THREADS
#include <pthread.h>
#endif
#include "model.h"

#define NF @M@_N_FEATURES
#define NC @M@_N_CLASSES
#define LANES @LANES@
#define NROWS (1UL + @M@_N_ROWS)
#define STEP @STEP@
#define MIN_ROWS_PER_THREAD @MINROWS@L
#define MAX_THREADS @MAXTHREADS@
typedef @ACC@ acc_t;
#define ACC_MAX ((acc_t)~(acc_t)0)
typedef @KEY@ key_t;
#define KEY_SHIFT @KEYSHIFT@

/* No lane can wrap: a class's sum is its prior code plus NF table codes, each at most 2^B - 1, so at
 * most (NF + 1) * (2^B - 1), which acc_t holds (pad lanes start at ACC_MAX and only add 0). */
#if (NF + 1) * ((1UL << @M@_BITS) - 1) > @ACCMAXNUM@UL
#error "the accumulator lanes are too narrow for this model"
#endif

#if defined(__GNUC__)
#define BNCN_ALIGNED __attribute__((aligned(64)))
#else
#define BNCN_ALIGNED
#endif

/* The code stream as LANES-wide rows of acc_t: row 0 the class prior, then the stacked tables. */
static acc_t bncn_table[NROWS][LANES] BNCN_ALIGNED;
static int bncn_ready;

static void bncn_init_inputs(void);

/* Fill the tables once (the adapter calls it under a lock before any kernel); returns LANES. */
int bncn_init(void)
{
    uint32_t r;
    int c;
    if (!bncn_ready) {
        for (r = 0; r < (uint32_t)NROWS; ++r) {
            for (c = 0; c < LANES; ++c) {
                bncn_table[r][c] = c < NC ? (acc_t)@P@_code(r * (uint32_t)NC + (uint32_t)c)
                                          : (r == 0 ? ACC_MAX : (acc_t)0);
            }
        }
        bncn_init_inputs();
        bncn_ready = 1;
    }
    return LANES;
}

/* One row from its table rows: label (first minimum) and, if scores != NULL, -(sum) * 2^-B_F. */
#if defined(__GNUC__)
/* GNU C vectors: the LANES lanes are NVEC whole vectors, added with one instruction each. */
typedef acc_t bncn_vec __attribute__((vector_size(@VBYTES@)));
#define NVEC (LANES * (int)sizeof(acc_t) / @VBYTES@)
#endif

static inline void bncn_eval(const size_t *idx, double *scores, int64_t *label)
{
    acc_t acc[LANES];
    key_t best = (key_t)~(key_t)0;
    int c, i;
#if defined(__GNUC__)
    bncn_vec v[NVEC];
    memcpy(v, bncn_table[0], sizeof v);
    for (i = 0; i < NF; ++i) {
        const bncn_vec *t = (const bncn_vec *)bncn_table[idx[i]];
        for (c = 0; c < NVEC; ++c) {
            v[c] += t[c];
        }
    }
    memcpy(acc, v, sizeof acc);
#else
    memcpy(acc, bncn_table[0], sizeof acc);
    for (i = 0; i < NF; ++i) {
        const acc_t *t = bncn_table[idx[i]];
        for (c = 0; c < LANES; ++c) {
            acc[c] = (acc_t)(acc[c] + t[c]);
        }
    }
#endif
    /* First minimum in one min reduction: key = sum << KEY_SHIFT | lane is smallest for the smallest
     * sum and, among equal sums, the first lane (LANES <= 2^KEY_SHIFT; key_t holds ACC_MAX's key). */
    for (c = 0; c < LANES; ++c) {
        key_t key = (key_t)(((key_t)acc[c] << KEY_SHIFT) | (key_t)c);
        best = key < best ? key : best;
    }
    *label = (int64_t)(best & (((key_t)1 << KEY_SHIFT) - 1));
    if (scores != NULL) {
        for (c = 0; c < NC; ++c) {
            scores[c] = -(double)acc[c] * STEP;
        }
    }
}

static inline void bncn_refuse(long r, double *scores, int64_t *labels)
{
    int c;
    labels[r] = -1;
    if (scores != NULL) {
        for (c = 0; c < NC; ++c) {
            scores[r * NC + c] = NAN;
        }
    }
}

typedef long (*bncn_rows_fn)(const void *x, long first, long last, double *scores, int64_t *labels);

#if BNCN_THREADS
struct bncn_job {
    bncn_rows_fn fn;
    const void *x;
    long first, last;
    double *scores;
    int64_t *labels;
    long refused;
};

static void *bncn_work(void *arg)
{
    struct bncn_job *job = (struct bncn_job *)arg;
    job->refused = job->fn(job->x, job->first, job->last, job->scores, job->labels);
    return NULL;
}
#endif

/* Rows 0..n-1 on up to `threads` threads (contiguous ranges); returns the number of refused rows. */
static long bncn_split(bncn_rows_fn fn, const void *x, long n, double *scores, int64_t *labels, int threads)
{
#if BNCN_THREADS
    long parts = n / MIN_ROWS_PER_THREAD;
    if (parts > threads) {
        parts = threads;
    }
    if (parts > MAX_THREADS) {
        parts = MAX_THREADS;
    }
    if (parts >= 2) {
        struct bncn_job jobs[MAX_THREADS];
        pthread_t tids[MAX_THREADS];
        int started[MAX_THREADS];
        long k, refused = 0;
        for (k = 0; k < parts; ++k) {
            jobs[k].fn = fn;
            jobs[k].x = x;
            jobs[k].first = n * k / parts;
            jobs[k].last = n * (k + 1) / parts;
            jobs[k].scores = scores;
            jobs[k].labels = labels;
            jobs[k].refused = 0;
        }
        for (k = 1; k < parts; ++k) {
            started[k] = pthread_create(&tids[k], NULL, bncn_work, &jobs[k]) == 0;
        }
        bncn_work(&jobs[0]);
        for (k = 1; k < parts; ++k) {
            if (started[k]) {
                pthread_join(tids[k], NULL);
            } else {
                bncn_work(&jobs[k]); /* no thread to be had: this one does the part */
            }
        }
        for (k = 0; k < parts; ++k) {
            refused += jobs[k].refused;
        }
        return refused;
    }
#else
    (void)threads;
#endif
    return fn(x, 0, n, scores, labels);
}

/* The header's own API over a batch (today's loop): for the load-time check of the kernel. */
long bncn_api_u8(const uint8_t *x, long n, int32_t *scores, int32_t *labels)
{
    long r, refused = 0;
    for (r = 0; r < n; ++r) {
        const uint8_t *row = x + r * NF;
        if (@P@_log_joint(row, scores + r * NC) != 0) {
            ++refused;
        }
        labels[r] = @P@_predict(row);
    }
    return refused;
}
"""

# Codes input of C type XT: check, table rows, eval; the batch entry point and (int64) the one-row entry point.
_CODES_KERNEL = r"""
#if defined(__GNUC__)
/* The range check on whole vectors of XL_@T@ codes (as unsigned: a negative code is huge), then the rest. */
typedef @UT@ bncn_xv_@T@ __attribute__((vector_size(@XB@)));
#define XL_@T@ (@XB@ / (int)sizeof(@UT@))
static bncn_xv_@T@ bncn_xmax_@T@[NF / XL_@T@ + 1];

static void bncn_init_@T@(void)
{
    int i;
    for (i = 0; i < (NF / XL_@T@) * XL_@T@; ++i) {
        bncn_xmax_@T@[i / XL_@T@][i % XL_@T@] = (@UT@)@P@_max_code[i];
    }
}
#else
static void bncn_init_@T@(void)
{
}
#endif

static inline int bncn_index_@T@(const @XT@ *x, size_t *idx)
{
    int i = 0;
    unsigned bad = 0;
#if defined(__GNUC__)
    {
        bncn_xv_@T@ any;
        uint64_t words[@XB@ / 8];
        int k;
        memset(&any, 0, sizeof any);
        for (k = 0; k < NF / XL_@T@; ++k) {
            bncn_xv_@T@ v;
            memcpy(&v, x + k * XL_@T@, sizeof v);
            any |= (bncn_xv_@T@)(v > bncn_xmax_@T@[k]);
        }
        memcpy(words, &any, sizeof words);
        for (k = 0; k < @XB@ / 8; ++k) {
            bad |= (unsigned)(words[k] != 0);
        }
        i = (NF / XL_@T@) * XL_@T@;
    }
#endif
    for (; i < NF; ++i) {
        bad |= (unsigned)(@WIDEN@x[i] > (uint64_t)@P@_max_code[i]);
    }
    if (bad) {
        return -1;
    }
    for (i = 0; i < NF; ++i) {
        idx[i] = @ROW@;
    }
    return 0;
}

static long bncn_rows_@T@(const void *xv, long first, long last, double *scores, int64_t *labels)
{
    const @XT@ *x = (const @XT@ *)xv;
    size_t idx[NF];
    long r, refused = 0;
    for (r = first; r < last; ++r) {
        if (bncn_index_@T@(x + r * NF, idx) != 0) {
            bncn_refuse(r, scores, labels);
            ++refused;
            continue;
        }
        bncn_eval(idx, scores != NULL ? scores + r * NC : NULL, labels + r);
    }
    return refused;
}

long bncn_batch_@T@(const @XT@ *x, long n, double *scores, int64_t *labels, int threads)
{
    return bncn_split(bncn_rows_@T@, x, n, scores, labels, threads);
}
"""

_NB_ROW = "(size_t)@P@_row_offset[i] + (size_t)x[i]"
_TAN_ROW = ("(size_t)@P@_row_offset[i] + (size_t)x[i] * (size_t)@P@_stride[i]"
            " + (@P@_parent[i] >= 0 ? (size_t)x[@P@_parent[i]] : 0u)")
# (size_t, not uint32_t: the compiler folds row_offset[i] * LANES into the address, no 32-bit wrap to keep)

# Raw input of C type XT: to float32 (refusing non-finite or out-of-range values), the header's binning, eval.
_RAW_KERNEL = r"""
static long bncn_rows_@T@(const void *xv, long first, long last, double *scores, int64_t *labels)
{
    const @XT@ *x = (const @XT@ *)xv;
    float v[NF];
    uint8_t codes[NF];
    size_t idx[NF];
    long r, refused = 0;
    int i;
    for (r = first; r < last; ++r) {
        unsigned bad = 0;
        for (i = 0; i < NF; ++i) {
            /* Beyond the float32 range (or NaN, inf): refused, and never converted (that would be undefined). */
            double value = (double)x[r * NF + i];
            if (fabs(value) <= (double)FLT_MAX) {
                v[i] = (float)value;
            } else {
                v[i] = 0.0f;
                bad = 1;
            }
        }
        if (bad || @P@_bin(v, codes) != 0 || bncn_index_u8(codes, idx) != 0) {
            bncn_refuse(r, scores, labels);
            ++refused;
            continue;
        }
        bncn_eval(idx, scores != NULL ? scores + r * NC : NULL, labels + r);
    }
    return refused;
}

long bncn_batch_@T@(const @XT@ *x, long n, double *scores, int64_t *labels, int threads)
{
    return bncn_split(bncn_rows_@T@, x, n, scores, labels, threads);
}
"""

# One-row slots: static buffers (input NF int64 or double | scores NC double | label int64, all 8-byte
# members, so no padding) and one argument-free function per slot, the cheapest ctypes call.
_ONE_ROW = r"""
struct bncn_slot {
    @IN@ x[NF];
    double scores[NC];
    int64_t label;
};
static struct bncn_slot bncn_slots[@NSLOTS@];

void *bncn_slot(int k)
{
    return (k >= 0 && k < @NSLOTS@) ? (void *)&bncn_slots[k] : NULL;
}
"""
_ONE_ROW_FN = r"""
int bncn_one_@K@(void)
{
    return (int)bncn_rows_@T@(bncn_slots[@K@].x, 0, 1, bncn_slots[@K@].scores, &bncn_slots[@K@].label);
}
"""


def lanes_type(n_features: int, bits: int) -> tuple[str, int]:
    """``(C type, max value)`` of the narrowest unsigned lane that holds ``(D + 1) * (2^B - 1)``."""
    largest = (n_features + 1) * (2 ** bits - 1)
    for width in (8, 16, 32):
        if largest <= 2 ** width - 1:
            return f"uint{width}_t", 2 ** width - 1
    raise RuntimeLoadError(f"code sums up to {largest} do not fit 32 bits")


def wrapper_source(name: str, *, n_features: int, n_classes: int, bits: int, frac_bits: int, tan: bool,
                   raw: bool) -> str:
    """The C wrapper for a header with prefix ``name`` (see the module docstring)."""
    acc, acc_max = lanes_type(n_features, bits)
    per_vector = VECTOR_BYTES // (acc_max.bit_length() // 8)
    lanes = -(-n_classes // per_vector) * per_vector
    step = float.hex(2.0 ** -frac_bits)
    key_shift = max(1, (lanes - 1).bit_length())
    key_type = next(f"uint{w}_t" for w in (16, 32, 64) if (acc_max << key_shift | (lanes - 1)) < 2 ** w)
    parts = [_WRAPPER_HEAD]
    row = _TAN_ROW if tan else _NB_ROW
    for suffix, (ctype, _, widen, utype, vbytes) in CODE_TYPES.items():
        parts.append(_CODES_KERNEL.replace("@T@", suffix).replace("@XT@", ctype).replace("@WIDEN@", widen)
                     .replace("@ROW@", row).replace("@UT@", utype).replace("@XB@", str(vbytes)))
    parts.append("\nstatic void bncn_init_inputs(void)\n{\n"
                 + "".join(f"    bncn_init_{suffix}();\n" for suffix in CODE_TYPES) + "}\n")
    if raw:
        for suffix, (ctype, _) in RAW_TYPES.items():
            parts.append(_RAW_KERNEL.replace("@T@", suffix).replace("@XT@", ctype))
    one_type, one_kernel = ("double", "f64") if raw else ("int64_t", "i64")
    parts.append(_ONE_ROW.replace("@IN@", one_type))
    parts += [_ONE_ROW_FN.replace("@K@", str(k)).replace("@T@", one_kernel) for k in range(ROW_SLOTS)]
    text = "".join(parts)
    for key, value in {"@P@": name, "@M@": name.upper(), "@LANES@": str(lanes), "@STEP@": step,
                       "@MINROWS@": str(MIN_ROWS_PER_THREAD), "@MAXTHREADS@": str(MAX_THREADS), "@ACC@": acc,
                       "@ACCMAXNUM@": str(acc_max), "@KEY@": key_type,
                       "@KEYSHIFT@": str(key_shift), "@NSLOTS@": str(ROW_SLOTS), "@VBYTES@": str(VECTOR_BYTES)}.items():
        text = text.replace(key, value)
    return text
