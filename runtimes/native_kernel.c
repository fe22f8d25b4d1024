/* native_kernel.c: the C of the native runtime's host wrapper (runtimes/native_kernel.py, wrapper_source).
 *
 * This file is package data, not a source to compile. It is the generated wrapper written out in
 * order, cut into sections by marker lines "//@ <section>" (bnc_deploy.formats.c_template); the
 * runtime writes the sections below, each filled in with Python's string.Template, and compiles the
 * result around the exported header (included unchanged as "model.h"). This text, before the first
 * marker, is not written.
 *
 * Placeholders of every section: ${prefix} is the header's identifier prefix (bnc_predict),
 * ${PREFIX} its macro prefix (upper case). Of head: ${lanes} (classes rounded up to a vector),
 * ${step} (2^-B_F as a C99 hexadecimal double), ${min_rows_per_thread}, ${max_threads},
 * ${acc} / ${acc_max} (the lane type and its maximum), ${key} / ${key_shift} (the argmin key type and
 * the lane bits), ${vector_bytes}. Of the per-type sections: ${suffix} (u8, i32, i64; f32, f64), ${ctype}
 * (the input's C type), and for codes_kernel ${utype} / ${check_bytes} (the unsigned type and the
 * vector bytes of the range check), ${widen} (the cast that widens a code to uint64_t for the scalar
 * range check) and ${row} (the row_naive_bayes or row_tan expression, filled in).
 *
 * Sections, in the order they are written:
 *   head                          includes, macros, the lane table, bncn_init, bncn_eval, threads,
 *                                 bncn_api_u8 (the header's own API, for the load-time check)
 *   codes_kernel                  once per code type (u8, i32, i64): the range check on whole
 *                                 vectors, the table rows, bncn_batch_${suffix}
 *   row_naive_bayes or row_tan    not written alone: one line, the C expression of feature i's table
 *                                 row (${row} of codes_kernel, without its newline). size_t, not
 *                                 uint32_t: the compiler folds row_offset[i] * LANES into the
 *                                 address, no 32-bit wrap to keep
 *   init_inputs, init_input (once per code type), init_inputs_end
 *                                 bncn_init_inputs, calling each code type's init
 *   raw_kernel (raw files)        once per raw type (f32, f64): to float32 (refusing non-finite or
 *                                 out-of-range values, never converting them), the header's
 *                                 ${prefix}_bin, then the u8 kernel
 *   one_row                       static one-row slots (input NF int64 or double | scores NC double |
 *                                 label int64, all 8-byte members, so no padding); ${in_type},
 *                                 ${row_slots}
 *   one_row_fn                    once per slot ${k}: an argument-free call on the slot, the cheapest
 *                                 ctypes call (${suffix}: i64, raw files f64)
 *
 * Contract: the wrapper's bytes key the compile cache, so an edit here recompiles every model (and
 * must keep tests/test_native_runtime.py passing). Every section must end with a newline; sections
 * after head start with an empty line where the wrapper has one. A literal dollar sign is written $$.
 */
//@ head
/* Host-only batch kernels around an exported bnc-deploy C header (bnc_deploy.runtimes.native_kernel).
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

#define NF ${PREFIX}_N_FEATURES
#define NC ${PREFIX}_N_CLASSES
#define LANES ${lanes}
#define NROWS (1UL + ${PREFIX}_N_ROWS)
#define STEP ${step}
#define MIN_ROWS_PER_THREAD ${min_rows_per_thread}L
#define MAX_THREADS ${max_threads}
typedef ${acc} acc_t;
#define ACC_MAX ((acc_t)~(acc_t)0)
typedef ${key} key_t;
#define KEY_SHIFT ${key_shift}

/* No lane can wrap: a class's sum is its prior code plus NF table codes, each at most 2^B - 1, so at
 * most (NF + 1) * (2^B - 1), which acc_t holds (pad lanes start at ACC_MAX and only add 0). */
#if (NF + 1) * ((1UL << ${PREFIX}_BITS) - 1) > ${acc_max}UL
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
                bncn_table[r][c] = c < NC ? (acc_t)${prefix}_code(r * (uint32_t)NC + (uint32_t)c)
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
typedef acc_t bncn_vec __attribute__((vector_size(${vector_bytes})));
#define NVEC (LANES * (int)sizeof(acc_t) / ${vector_bytes})
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
        if (${prefix}_log_joint(row, scores + r * NC) != 0) {
            ++refused;
        }
        labels[r] = ${prefix}_predict(row);
    }
    return refused;
}
//@ codes_kernel

#if defined(__GNUC__)
/* The range check on whole vectors of XL_${suffix} codes (as unsigned: a negative code is huge), then the rest. */
typedef ${utype} bncn_xv_${suffix} __attribute__((vector_size(${check_bytes})));
#define XL_${suffix} (${check_bytes} / (int)sizeof(${utype}))
static bncn_xv_${suffix} bncn_xmax_${suffix}[NF / XL_${suffix} + 1];

static void bncn_init_${suffix}(void)
{
    int i;
    for (i = 0; i < (NF / XL_${suffix}) * XL_${suffix}; ++i) {
        bncn_xmax_${suffix}[i / XL_${suffix}][i % XL_${suffix}] = (${utype})${prefix}_max_code[i];
    }
}
#else
static void bncn_init_${suffix}(void)
{
}
#endif

static inline int bncn_index_${suffix}(const ${ctype} *x, size_t *idx)
{
    int i = 0;
    unsigned bad = 0;
#if defined(__GNUC__)
    {
        bncn_xv_${suffix} any;
        uint64_t words[${check_bytes} / 8];
        int k;
        memset(&any, 0, sizeof any);
        for (k = 0; k < NF / XL_${suffix}; ++k) {
            bncn_xv_${suffix} v;
            memcpy(&v, x + k * XL_${suffix}, sizeof v);
            any |= (bncn_xv_${suffix})(v > bncn_xmax_${suffix}[k]);
        }
        memcpy(words, &any, sizeof words);
        for (k = 0; k < ${check_bytes} / 8; ++k) {
            bad |= (unsigned)(words[k] != 0);
        }
        i = (NF / XL_${suffix}) * XL_${suffix};
    }
#endif
    for (; i < NF; ++i) {
        bad |= (unsigned)(${widen}x[i] > (uint64_t)${prefix}_max_code[i]);
    }
    if (bad) {
        return -1;
    }
    for (i = 0; i < NF; ++i) {
        idx[i] = ${row};
    }
    return 0;
}

static long bncn_rows_${suffix}(const void *xv, long first, long last, double *scores, int64_t *labels)
{
    const ${ctype} *x = (const ${ctype} *)xv;
    size_t idx[NF];
    long r, refused = 0;
    for (r = first; r < last; ++r) {
        if (bncn_index_${suffix}(x + r * NF, idx) != 0) {
            bncn_refuse(r, scores, labels);
            ++refused;
            continue;
        }
        bncn_eval(idx, scores != NULL ? scores + r * NC : NULL, labels + r);
    }
    return refused;
}

long bncn_batch_${suffix}(const ${ctype} *x, long n, double *scores, int64_t *labels, int threads)
{
    return bncn_split(bncn_rows_${suffix}, x, n, scores, labels, threads);
}
//@ row_naive_bayes
(size_t)${prefix}_row_offset[i] + (size_t)x[i]
//@ row_tan
(size_t)${prefix}_row_offset[i] + (size_t)x[i] * (size_t)${prefix}_stride[i] + (${prefix}_parent[i] >= 0 ? (size_t)x[${prefix}_parent[i]] : 0u)
//@ init_inputs

static void bncn_init_inputs(void)
{
//@ init_input
    bncn_init_${suffix}();
//@ init_inputs_end
}
//@ raw_kernel

static long bncn_rows_${suffix}(const void *xv, long first, long last, double *scores, int64_t *labels)
{
    const ${ctype} *x = (const ${ctype} *)xv;
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
        if (bad || ${prefix}_bin(v, codes) != 0 || bncn_index_u8(codes, idx) != 0) {
            bncn_refuse(r, scores, labels);
            ++refused;
            continue;
        }
        bncn_eval(idx, scores != NULL ? scores + r * NC : NULL, labels + r);
    }
    return refused;
}

long bncn_batch_${suffix}(const ${ctype} *x, long n, double *scores, int64_t *labels, int threads)
{
    return bncn_split(bncn_rows_${suffix}, x, n, scores, labels, threads);
}
//@ one_row

struct bncn_slot {
    ${in_type} x[NF];
    double scores[NC];
    int64_t label;
};
static struct bncn_slot bncn_slots[${row_slots}];

void *bncn_slot(int k)
{
    return (k >= 0 && k < ${row_slots}) ? (void *)&bncn_slots[k] : NULL;
}
//@ one_row_fn

int bncn_one_${k}(void)
{
    return (int)bncn_rows_${suffix}(bncn_slots[${k}].x, 0, 1, bncn_slots[${k}].scores, &bncn_slots[${k}].label);
}
