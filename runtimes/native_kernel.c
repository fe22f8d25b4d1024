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
 *   rows_lanes                    the rows-as-lanes kernel (AVX-512 BW + VBMI; else only an empty
 *                                 bncn_rl_init), bncn_kernel; ${rl_entries} (a feature's table
 *                                 entries) and ${rl_index} (bncn_rl_index_init and bncn_rl_index,
 *                                 a feature's table indices) are the rl_* sections below, filled in
 *   rl_entries_naive_bayes or rl_entries_tan, rl_index_naive_bayes or rl_index_tan
 *                                 not written alone: pieces of rows_lanes
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
static void bncn_rl_init(void);

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
        bncn_rl_init();
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
#define NVEC_CL (LANES * (int)sizeof(acc_t) / ${vector_bytes})

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
     * sum and, among equal sums, the first lane (LANES <= 2^KEY_SHIFT; key_t holds ACC_MAX's key).
     * A few classes: their lanes only (a pad lane's sum is ACC_MAX, which no class sum exceeds, and pads
     * come last); more: every lane, a loop the compiler vectorizes. */
    for (c = 0; c < (NC <= 8 ? NC : LANES); ++c) {
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
//@ rows_lanes

/* Rows as lanes (AVX-512 BW + VBMI): 64 rows per block, one byte lane per row. A block's codes become
 * one 64-byte vector per feature: uint8 rows of few features by byte permutations of the contiguous
 * rows (bncn_rl_gather_u8), other rows narrowed to bytes with the range check (bncn_rl_narrow_*, which
 * write each row as qwords of 8 features) and transposed (per 8 features: one byte permutation per 8
 * rows and one 8x8 qword transpose across the row groups). The table indices (TAN: x_i * stride_i +
 * x_pa, below 256) come from bncn_rl_index, and each class's sum is its prior plus one byte
 * permutation per feature (the feature's codes of that class, or of two classes in nibbles, at most
 * 256 of them, as 1, 2 or 4 vectors), added in byte lanes for RL_FLUSH features (no byte lane can
 * wrap) and then into 16-bit lanes ((NF + 1) * (2^B - 1) <= 65535 is required below). The first
 * minimum and the scores are those of bncn_eval (the sums are the same integers). Chosen at init when
 * every feature's table has at most 256 entries (bncn_rl_ok); a batch runs in blocks of up to
 * 64 * RL_SUB rows (the last one part-filled, its missing rows summed as zero codes), and fewer than
 * RL_MIN_ROWS rows (a short tail, one-row calls) take the class-lanes kernel. */
#if defined(__GNUC__) && defined(__AVX512BW__) && defined(__AVX512VBMI__) && NF <= 1024 && \
    (NF + 1) * ((1UL << ${PREFIX}_BITS) - 1) <= 65535UL
#define BNCN_RL 1
#include <immintrin.h>
#define RL_ROWS 64
/* 64-row sub-blocks summed together, so that each table vector loaded serves RL_SUB index vectors
 * (the byte sums of every class and sub-block stay in registers: NC * RL_SUB <= 24). Two: faster
 * than one on satimage TAN, whose tables exceed L1, and four slower on satimage NB
 * (benchmarks/bench_inference.py --runtimes native). */
#if NC <= 12 && NF <= 512
#define RL_SUB 2
#else
#define RL_SUB 1
#endif
#define RL_DP (((NF + 63) / 64) * 64)
#define RL_NQ ((NF + 7) / 8) /* qwords of 8 features per row */
#define RL_FLUSH (255 / (int)((1U << ${PREFIX}_BITS) - 1))
/* Codes of at most 3 bits: two classes per table byte (class 2p in the low nibble, 2p + 1 in the
 * high one), so one lookup serves two classes. RL_PAIR lookups are summed in the nibbles (no nibble can
 * pass 15) before they are split into the classes' byte sums (a mask, a shift and two additions). */
#if ${PREFIX}_BITS <= 3 && NC >= 2
#define RL_PAIR (15 / ((1 << ${PREFIX}_BITS) - 1))
#define RL_NT ((NC + 1) / 2)
#else
#define RL_PAIR 0
#define RL_NT NC
#endif
/* Fewer rows (the tail of a batch, one-row calls) take the class-lanes kernel: a block costs as much
 * for one row as for 64 * RL_SUB. */
#define RL_MIN_ROWS 16

static uint8_t bncn_rl_tab[(size_t)NF * NC * 256] BNCN_ALIGNED; /* feature i: NC rows of 64 * chunks[i] codes */
static uint32_t bncn_rl_off[NF];
static uint8_t bncn_rl_chunks[NF];
static uint64_t bncn_rl_max64[RL_DP + 64] BNCN_ALIGNED; /* + 64: no bounds warning on dead tails */
static uint32_t bncn_rl_max32[RL_DP + 64] BNCN_ALIGNED;
static uint8_t bncn_rl_max8[RL_DP + 64] BNCN_ALIGNED;
static int bncn_rl_ok;
/* uint8 input with few features (RL_WIN): a group of 8 rows is 8 * NF contiguous bytes, read as
 * RL_NP windows of 128 bytes. bncn_rl_widx[q][j] / bncn_rl_wmask[q][j]: the byte permutation of window j
 * (and the lanes it fills) that gives the group's features 8q .. 8q + 7 as 8 features x 8 rows (lane
 * 8f + r: feature 8q + f of row r; lanes past NF stay 0). Worth it while RL_NQ * RL_NP permutations
 * per group cost less than the row-by-row narrowing and its byte stage: with 6 classes, 5-15 % faster
 * at 24 to 48 features (up to 6 x 3 permutations), 21-31 % slower at 64 and 96 (satimage: 5 x 3). */
#define RL_NP ((NF + 15) / 16)
#if RL_NQ * RL_NP <= 24
#define RL_WIN 1
static uint8_t bncn_rl_widx[RL_NQ][RL_NP][64] BNCN_ALIGNED;
static __mmask64 bncn_rl_wmask[RL_NQ][RL_NP];
#else
#define RL_WIN 0
#endif

${rl_index}
static unsigned bncn_rl_entries(int i)
{
    return ${rl_entries};
}

static void bncn_rl_init(void)
{
    uint32_t off = 0, j;
    long rows_lanes = 0;
    int i, c;
    for (i = 0; i < NF; ++i) {
        unsigned entries = bncn_rl_entries(i);
        if (entries > 256u) {
            return; /* bncn_rl_ok stays 0: the class-lanes kernel */
        }
        bncn_rl_chunks[i] = (uint8_t)(entries <= 64u ? 1 : (entries <= 128u ? 2 : 4));
        bncn_rl_off[i] = off;
        for (c = 0; c < RL_NT; ++c) { /* a class, or with RL_PAIR the class pair 2c, 2c + 1 */
            for (j = 0; j < 64u * bncn_rl_chunks[i]; ++j) {
                uint32_t code = (uint32_t)${prefix}_row_offset[i] + j;
                unsigned byte = 0;
                if (j < entries && !RL_PAIR) {
                    byte = ${prefix}_code(code * (uint32_t)NC + (uint32_t)c);
                } else if (j < entries) {
                    byte = ${prefix}_code(code * (uint32_t)NC + 2u * (uint32_t)c);
                    if (2 * c + 1 < NC) {
                        byte |= (unsigned)${prefix}_code(code * (uint32_t)NC + 2u * (uint32_t)c + 1u) << 4;
                    }
                }
                bncn_rl_tab[off + j] = (uint8_t)byte;
            }
            off += 64u * bncn_rl_chunks[i];
        }
        bncn_rl_max64[i] = bncn_rl_max32[i] = bncn_rl_max8[i] = ${prefix}_max_code[i];
        rows_lanes += (long)RL_NT * (bncn_rl_chunks[i] == 4 ? 4 : 2);
    }
    bncn_rl_index_init();
#if RL_WIN
    {
        int q, f, r;
        for (q = 0; q < RL_NQ; ++q) {
            for (f = 0; f < 8 && 8 * q + f < NF; ++f) {
                for (r = 0; r < 8; ++r) {
                    unsigned src = (unsigned)(r * NF + 8 * q + f), lane = (unsigned)(8 * f + r);
                    bncn_rl_widx[q][src / 128u][lane] = (uint8_t)(src % 128u);
                    bncn_rl_wmask[q][src / 128u] |= (__mmask64)1 << lane;
                }
            }
        }
    }
#endif
    /* Vector instructions per 64 rows, estimated: rows as lanes, one permutation and one add per
     * feature and table row (two permutations and a blend for 256 codes) plus a term for the layout
     * and TAN indices (56 per 64 padded features); classes as lanes, per row and feature the index,
     * the load and NVEC adds. The term keeps the choices benchmarks/bench_inference.py measures best
     * (both kernels timed with -DBNCN_RL_FORCE): letter NB and TAN run faster as classes as lanes,
     * satimage and usps as rows as lanes. */
    rows_lanes += 56L * RL_DP;
#ifdef BNCN_RL_FORCE /* benchmarks: -DBNCN_RL_FORCE=0 or 1 overrides the estimate */
    bncn_rl_ok = BNCN_RL_FORCE;
    (void)rows_lanes;
#else
    bncn_rl_ok = rows_lanes < 64L * NF * (NVEC_CL + 2);
#endif
}

/* Each narrows row r's codes to bytes, written as the row's qwords of 8 features: tiles[q][k] holds
 * features 8q .. 8q + 7 of the block's row k (bytes past NF are 0); nonzero if a code is out of range.
 * The qword layout spares the transpose its first 8 x 8 qword stage: tiles[q][8g .. 8g + 7] is already
 * 8 rows x 8 features in one vector. Bytes need no narrowing, so their range check runs after the
 * transpose, one comparison per feature for the 64 rows (bncn_rl_rows), and this one only copies. */
static inline unsigned bncn_rl_narrow_u8(const void *xv, long r, uint64_t (*tiles)[RL_ROWS], int k)
{
    const uint8_t *x = (const uint8_t *)xv + (size_t)r * NF;
    int q;
    for (q = 0; q < NF / 8; ++q) {
        memcpy(&tiles[q][k], x + 8 * q, 8);
    }
#if NF % 8 != 0
    tiles[q][k] = 0;
    memcpy(&tiles[q][k], x + 8 * q, NF % 8); /* little-endian: byte f of the qword is feature 8q + f */
#endif
    return 0;
}

static inline unsigned bncn_rl_narrow_i32(const void *xv, long r, uint64_t (*tiles)[RL_ROWS], int k)
{
    const int32_t *x = (const int32_t *)xv + (size_t)r * NF;
    __mmask16 bad = 0;
    int j;
    for (j = 0; j < RL_NQ * 8; j += 16) { /* whole and masked vectors of 16 codes, zeros past NF */
        __mmask16 in = j + 16 <= NF ? (__mmask16)0xFFFF : (j < NF ? (__mmask16)((1u << (NF - j)) - 1) : 0);
        __m512i v = _mm512_maskz_loadu_epi32(in, x + j);
        __m128i b = _mm512_cvtepi32_epi8(v);
        bad |= _mm512_cmpgt_epu32_mask(v, _mm512_load_si512((const void *)(bncn_rl_max32 + j)));
        _mm_storel_epi64((__m128i *)(void *)&tiles[j / 8][k], b);
        if (j / 8 + 1 < RL_NQ) {
            _mm_storel_epi64((__m128i *)(void *)&tiles[j / 8 + 1][k], _mm_unpackhi_epi64(b, b));
        }
    }
    return bad != 0;
}

static inline unsigned bncn_rl_narrow_i64(const void *xv, long r, uint64_t (*tiles)[RL_ROWS], int k)
{
    const int64_t *x = (const int64_t *)xv + (size_t)r * NF;
    __mmask8 bad = 0;
    int j;
    for (j = 0; j < RL_NQ * 8; j += 8) { /* whole and masked vectors of 8 codes, zeros past NF */
        __mmask8 in = j + 8 <= NF ? (__mmask8)0xFF : (__mmask8)((1u << (NF - j)) - 1);
        __m512i v = _mm512_maskz_loadu_epi64(in, x + j);
        bad |= _mm512_cmpgt_epu64_mask(v, _mm512_load_si512((const void *)(bncn_rl_max64 + j)));
        _mm_storel_epi64((__m128i *)(void *)&tiles[j / 8][k], _mm512_cvtepi64_epi8(v));
    }
    return bad != 0;
}

/* Transpose the 8 x 8 qwords of v[0..7] (three rounds of two-register qword permutations), written
 * out round by round: GCC keeps the rounds of a loop over the strides in memory, not in registers. */
#define BNCN_RL_TR_PAIR(a, b, lo, hi)                                                                                  \
    do {                                                                                                               \
        __m512i a_ = (a);                                                                                              \
        (a) = _mm512_permutex2var_epi64(a_, (lo), (b));                                                                \
        (b) = _mm512_permutex2var_epi64(a_, (hi), (b));                                                                \
    } while (0)
static inline void bncn_rl_tr8(__m512i *v)
{
    const __m512i lo4 = _mm512_set_epi64(11, 10, 9, 8, 3, 2, 1, 0), hi4 = _mm512_set_epi64(15, 14, 13, 12, 7, 6, 5, 4);
    const __m512i lo2 = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0), hi2 = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    const __m512i lo1 = _mm512_set_epi64(14, 6, 12, 4, 10, 2, 8, 0), hi1 = _mm512_set_epi64(15, 7, 13, 5, 11, 3, 9, 1);
    BNCN_RL_TR_PAIR(v[0], v[4], lo4, hi4);
    BNCN_RL_TR_PAIR(v[1], v[5], lo4, hi4);
    BNCN_RL_TR_PAIR(v[2], v[6], lo4, hi4);
    BNCN_RL_TR_PAIR(v[3], v[7], lo4, hi4);
    BNCN_RL_TR_PAIR(v[0], v[2], lo2, hi2);
    BNCN_RL_TR_PAIR(v[1], v[3], lo2, hi2);
    BNCN_RL_TR_PAIR(v[4], v[6], lo2, hi2);
    BNCN_RL_TR_PAIR(v[5], v[7], lo2, hi2);
    BNCN_RL_TR_PAIR(v[0], v[1], lo1, hi1);
    BNCN_RL_TR_PAIR(v[2], v[3], lo1, hi1);
    BNCN_RL_TR_PAIR(v[4], v[5], lo1, hi1);
    BNCN_RL_TR_PAIR(v[6], v[7], lo1, hi1);
}

/* xt[f][k] = byte f % 8 of tiles[f / 8][k]: the block's qwords of 8 features to one vector of 64 rows
 * per feature. Per 8 features: a byte permutation of each 8 rows x 8 features vector into 8 features
 * x 8 rows, then one 8 x 8 qword transpose across the 8 row groups. */
static void bncn_rl_transpose(const uint64_t (*tiles)[RL_ROWS], uint8_t (*xt)[RL_ROWS])
{
    const __m512i bytes = _mm512_set_epi64(0x3f372f271f170f07LL, 0x3e362e261e160e06LL, 0x3d352d251d150d05LL,
                                           0x3c342c241c140c04LL, 0x3b332b231b130b03LL, 0x3a322a221a120a02LL,
                                           0x3931292119110901LL, 0x3830282018100800LL); /* byte 8f + r <- 8r + f */
    int q, g, f;
    for (q = 0; q < RL_NQ; ++q) {
        __m512i part[8];
        for (g = 0; g < 8; ++g) {
            part[g] = _mm512_permutexvar_epi8(bytes, _mm512_load_si512((const void *)(tiles[q] + 8 * g)));
        }
        bncn_rl_tr8(part); /* part[f]: feature 8q + f, rows 0 .. 63 */
        for (f = 0; f < 8 && 8 * q + f < NF; ++f) {
            _mm512_storeu_si512((void *)xt[8 * q + f], part[f]);
        }
    }
}

/* Bit k: the code of feature i in byte lane k (row k) is above the feature's largest. */
static inline uint64_t bncn_rl_above(__m512i codes, int i)
{
    return _mm512_cmpgt_epu8_mask(codes, _mm512_set1_epi8((char)bncn_rl_max8[i]));
}

#if RL_WIN
/* 64 bytes at x + at, of which `left` (may be <= 0) exist: past them, zeros (masked, no fault). */
static inline __m512i bncn_rl_load(const uint8_t *x, long at, long left)
{
    if (left >= 64) {
        return _mm512_loadu_si512((const void *)(x + at));
    }
    if (left <= 0) {
        return _mm512_setzero_si512();
    }
    return _mm512_maskz_loadu_epi8(((__mmask64)1 << left) - 1, (const void *)(x + at));
}

/* xt[f][k] = code f of row k, for the 64 rows of uint8 codes from x (`avail` bytes exist from x: rows
 * past them read as zeros). Per group of 8 rows, its RL_NP windows of 128 bytes are loaded once and
 * permuted (masked) into 8 features x 8 rows for each 8 features q; then per q, the 8 x 8 qword
 * transpose across the groups. ``whole``: every byte read exists (no masks). */
__attribute__((always_inline)) static inline void bncn_rl_gather_u8_as(const uint8_t *x, long avail,
                                                                       uint8_t (*xt)[RL_ROWS], int whole)
{
    __m512i vq[RL_NQ][8];
    int q, g, j, f;
    for (g = 0; g < 8; ++g) {
        __m512i w[2 * RL_NP];
        for (j = 0; j < 2 * RL_NP; ++j) {
            long at = (long)g * 8 * NF + 64L * j;
            w[j] = whole ? _mm512_loadu_si512((const void *)(x + at)) : bncn_rl_load(x, at, avail - at);
        }
        for (q = 0; q < RL_NQ; ++q) {
            __m512i v = _mm512_setzero_si512();
            for (j = 0; j < RL_NP; ++j) {
                v = _mm512_or_si512(v, _mm512_maskz_permutex2var_epi8(
                                           bncn_rl_wmask[q][j], w[2 * j],
                                           _mm512_load_si512((const void *)bncn_rl_widx[q][j]), w[2 * j + 1]));
            }
            vq[q][g] = v;
        }
    }
    for (q = 0; q < RL_NQ; ++q) {
        bncn_rl_tr8(vq[q]); /* vq[q][f]: feature 8q + f, rows 0 .. 63 */
        for (f = 0; f < 8 && 8 * q + f < NF; ++f) {
            _mm512_storeu_si512((void *)xt[8 * q + f], vq[q][f]);
        }
    }
}

static void bncn_rl_gather_u8(const uint8_t *x, long avail, uint8_t (*xt)[RL_ROWS])
{
    if (avail >= 56L * NF + 128L * RL_NP) { /* the farthest byte read: group 7's last window */
        bncn_rl_gather_u8_as(x, avail, xt, 1);
    } else {
        bncn_rl_gather_u8_as(x, avail, xt, 0);
    }
}
#endif

/* Adds the widened byte sums of every class and sub-block into acc (16-bit lanes) and clears them. */
static inline void bncn_rl_flush(__m512i (*part)[RL_SUB], uint16_t (*acc)[NC][RL_ROWS])
{
    int c, s;
    for (c = 0; c < NC; ++c) {
        for (s = 0; s < RL_SUB; ++s) {
            uint16_t *a = acc[s][c];
            __m512i lo = _mm512_loadu_si512((const void *)a), hi = _mm512_loadu_si512((const void *)(a + 32));
            lo = _mm512_add_epi16(lo, _mm512_cvtepu8_epi16(_mm512_castsi512_si256(part[c][s])));
            hi = _mm512_add_epi16(hi, _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(part[c][s], 1)));
            _mm512_storeu_si512((void *)a, lo);
            _mm512_storeu_si512((void *)(a + 32), hi);
            part[c][s] = _mm512_setzero_si512();
        }
    }
}

/* The table row's codes of the 64 rows of idx: t holds 64 * chunks codes, upper: index bit 7. */
__attribute__((always_inline)) static inline __m512i bncn_rl_look(const __m512i *t, int chunks, __m512i idx,
                                                                  __mmask64 upper)
{
    if (chunks == 1) {
        return _mm512_permutexvar_epi8(idx, _mm512_load_si512(t));
    }
    if (chunks == 2) {
        return _mm512_permutex2var_epi8(_mm512_load_si512(t), idx, _mm512_load_si512(t + 1));
    }
    return _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(_mm512_load_si512(t), idx, _mm512_load_si512(t + 1)),
                                  _mm512_permutex2var_epi8(_mm512_load_si512(t + 2), idx, _mm512_load_si512(t + 3)));
}

/* Feature i's lookups of every table row and sub-block, added to part (byte sums of classes, or
 * with RL_PAIR of class pairs' nibbles). One table shape per call, so the branches are hoisted. */
__attribute__((always_inline)) static inline void bncn_rl_feature(__m512i (*part)[RL_SUB], const __m512i *t,
                                                                  int chunks, const __m512i *idx)
{
    __mmask64 upper[RL_SUB];
    int c, s;
    for (s = 0; s < RL_SUB; ++s) {
        upper[s] = chunks == 4 ? _mm512_movepi8_mask(idx[s]) : 0;
    }
    for (c = 0; c < RL_NT; ++c) {
        for (s = 0; s < RL_SUB; ++s) {
            part[c][s] = _mm512_add_epi8(part[c][s], bncn_rl_look(t + chunks * c, chunks, idx[s], upper[s]));
        }
    }
}

/* Every class's sums of RL_SUB sub-blocks: prior + the NF looked-up codes, into acc[s][c][0 .. 63].
 * Features outer (one table shape), classes inner (one table vector for every sub-block). */
static inline void bncn_rl_sums(const uint8_t (*xt)[NF][RL_ROWS], uint16_t (*acc)[NC][RL_ROWS])
{
    __m512i part[NC][RL_SUB], idx[RL_SUB];
#if RL_PAIR
    __m512i nib[RL_NT][RL_SUB];
    const __m512i low = _mm512_set1_epi8(0x0F);
    int m = 0;
#else
    __m512i (*nib)[RL_SUB] = part; /* one class per table byte: the lookups go to the byte sums */
#endif
    int i, c, s, n = 0;
    for (c = 0; c < NC; ++c) {
        __m512i prior = _mm512_set1_epi16((short)${prefix}_code((uint32_t)c));
        for (s = 0; s < RL_SUB; ++s) {
            _mm512_storeu_si512((void *)acc[s][c], prior);
            _mm512_storeu_si512((void *)(acc[s][c] + 32), prior);
            part[c][s] = _mm512_setzero_si512();
        }
    }
#if RL_PAIR
    for (c = 0; c < RL_NT; ++c) {
        for (s = 0; s < RL_SUB; ++s) {
            nib[c][s] = _mm512_setzero_si512();
        }
    }
#endif
    for (i = 0; i < NF; ++i) {
        const __m512i *t = (const __m512i *)(const void *)(bncn_rl_tab + bncn_rl_off[i]);
        for (s = 0; s < RL_SUB; ++s) {
            idx[s] = bncn_rl_index(xt[s], i);
        }
        if (bncn_rl_chunks[i] == 1) {
            bncn_rl_feature(nib, t, 1, idx);
        } else if (bncn_rl_chunks[i] == 2) {
            bncn_rl_feature(nib, t, 2, idx);
        } else {
            bncn_rl_feature(nib, t, 4, idx);
        }
#if RL_PAIR
        if (++m == RL_PAIR || i + 1 == NF || n + 1 == RL_FLUSH) { /* the nibbles into the classes' bytes */
            for (c = 0; c < RL_NT; ++c) {
                for (s = 0; s < RL_SUB; ++s) {
                    part[2 * c][s] = _mm512_add_epi8(part[2 * c][s], _mm512_and_si512(nib[c][s], low));
                    if (2 * c + 1 < NC) {
                        part[2 * c + 1][s] = _mm512_add_epi8(
                            part[2 * c + 1][s], _mm512_and_si512(_mm512_srli_epi16(nib[c][s], 4), low));
                    }
                    nib[c][s] = _mm512_setzero_si512();
                }
            }
            m = 0;
        }
#endif
        if (++n == RL_FLUSH) {
            bncn_rl_flush(part, acc);
            n = 0;
        }
    }
    if (n > 0) {
        bncn_rl_flush(part, acc);
    }
}

typedef unsigned (*bncn_rl_narrow_fn)(const void *x, long r, uint64_t (*tiles)[RL_ROWS], int k);

/* Labels (first minimum: strictly smaller sums replace) and scores of the first `count` (1 .. 64) of
 * 64 rows from their sums. */
static inline long bncn_rl_output(uint16_t (*acc)[RL_ROWS], uint64_t bad, long r0, int count, double *scores,
                                  int64_t *labels)
{
    uint16_t best_label[RL_ROWS] BNCN_ALIGNED;
    long refused = 0;
    int k, c, h;
    for (h = 0; h < RL_ROWS; h += 32) {
        __m512i best = _mm512_loadu_si512((const void *)(acc[0] + h)), label = _mm512_setzero_si512();
        for (c = 1; c < NC; ++c) {
            __m512i sum = _mm512_loadu_si512((const void *)(acc[c] + h));
            __mmask32 less = _mm512_cmplt_epu16_mask(sum, best);
            best = _mm512_mask_mov_epi16(best, less, sum);
            label = _mm512_mask_mov_epi16(label, less, _mm512_set1_epi16((short)c));
        }
        _mm512_storeu_si512((void *)(best_label + h), label);
    }
    if (bad == 0 && scores == NULL) { /* labels only, every row valid: widened 8 at a time */
        for (k = 0; k < count; k += 8) {
            __mmask8 in = count - k >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (count - k)) - 1);
            __m128i eight = _mm_loadu_si128((const __m128i *)(const void *)(best_label + k));
            _mm512_mask_storeu_epi64((void *)(labels + r0 + k), in, _mm512_cvtepu16_epi64(eight));
        }
        return 0;
    }
    for (k = 0; k < count; ++k) {
        long r = r0 + k;
        if ((bad >> k) & 1u) {
            bncn_refuse(r, scores, labels);
            ++refused;
            continue;
        }
        labels[r] = (int64_t)best_label[k];
        if (scores != NULL) {
            for (c = 0; c < NC; ++c) {
                scores[r * NC + c] = -(double)acc[c][k] * STEP;
            }
        }
    }
    return refused;
}

/* Rows r0 .. r0 + count - 1 (1 <= count <= 64 * RL_SUB; the rows past them are summed as zero codes
 * and discarded; rows up to `end` exist); returns the number refused. ``bytes``: the input is uint8,
 * checked here on the transposed codes (the other types are checked as they are narrowed). Inlined
 * into each input type's rows loop, so that its narrowing is inlined too. */
__attribute__((always_inline)) static inline long bncn_rl_rows(bncn_rl_narrow_fn narrow, int bytes, const void *x,
                                                               long r0, long count, long end, double *scores,
                                                               int64_t *labels)
{
    uint64_t tiles[RL_NQ][RL_ROWS] BNCN_ALIGNED;
    uint8_t xt[RL_SUB][NF][RL_ROWS] BNCN_ALIGNED;
    uint16_t acc[RL_SUB][NC][RL_ROWS] BNCN_ALIGNED;
    uint64_t bad[RL_SUB] = {0};
    long refused = 0;
    int k, s;
    (void)end; /* read only by the uint8 gather */
    for (s = 0; s < RL_SUB; ++s) {
        uint8_t (*sxt)[RL_ROWS] = xt[s];
        long first = r0 + RL_ROWS * s, rows = count - RL_ROWS * s;
        rows = rows < 0 ? 0 : (rows > RL_ROWS ? RL_ROWS : rows);
#if RL_WIN
        if (bytes) {
            /* the rows past `rows` that exist are read, not used: a group's windows overreach */
            bncn_rl_gather_u8((const uint8_t *)x + (size_t)first * NF, (rows > 0 ? end - first : 0) * NF, sxt);
        } else
#endif
        {
            int q;
            for (k = 0; k < rows; ++k) {
                bad[s] |= (uint64_t)narrow(x, first + k, tiles, k) << k;
            }
            for (; k < RL_ROWS; ++k) { /* past the rows: zero codes */
                for (q = 0; q < RL_NQ; ++q) {
                    tiles[q][k] = 0;
                }
            }
            bncn_rl_transpose((const uint64_t(*)[RL_ROWS])tiles, sxt);
        }
        for (k = 0; bytes && k < NF; ++k) { /* (checked apart from the gather: measured faster) */
            bad[s] |= bncn_rl_above(_mm512_loadu_si512((const void *)sxt[k]), k);
        }
    }
    bncn_rl_sums((const uint8_t(*)[NF][RL_ROWS])xt, acc);
    for (s = 0; RL_ROWS * s < count; ++s) {
        long rows = count - RL_ROWS * s;
        rows = rows > RL_ROWS ? RL_ROWS : rows;
        refused += bncn_rl_output(acc[s], bad[s], r0 + RL_ROWS * s, (int)rows, scores, labels);
    }
    return refused;
}
#else
#define BNCN_RL 0
static void bncn_rl_init(void)
{
}
#endif

/* Which kernel the batch calls use for whole blocks: 1 rows as lanes, 0 classes as lanes. */
int bncn_kernel(void)
{
#if BNCN_RL
    return bncn_rl_ok;
#else
    return 0;
#endif
}
//@ rl_entries_naive_bayes
(unsigned)${prefix}_max_code[i] + 1u
//@ rl_entries_tan
((unsigned)${prefix}_max_code[i] + 1u) * (unsigned)${prefix}_stride[i]
//@ rl_index_naive_bayes
static void bncn_rl_index_init(void)
{
}

/* Feature i's table indices of 64 rows: naive Bayes, the codes. */
static inline __m512i bncn_rl_index(const uint8_t (*xt)[RL_ROWS], int i)
{
    return _mm512_loadu_si512((const void *)xt[i]);
}
//@ rl_index_tan
/* x * stride_i for x < 128, the products mod 256: a valid row's index x_i * stride_i + x_pa is below 256. */
static uint8_t bncn_rl_mul[NF][128] BNCN_ALIGNED;

static void bncn_rl_index_init(void)
{
    unsigned j;
    int i;
    for (i = 0; i < NF; ++i) {
        for (j = 0; j < 128u; ++j) {
            bncn_rl_mul[i][j] = (uint8_t)(j * (unsigned)${prefix}_stride[i]);
        }
    }
}

/* Feature i's table indices of 64 rows: x_i * stride_i + x_pa in byte lanes (below 256 for a valid row;
 * x_i * stride_i looked up, x_i < 128 for a valid row: a parent has at least 2 values). */
static inline __m512i bncn_rl_index(const uint8_t (*xt)[RL_ROWS], int i)
{
    __m512i own = _mm512_loadu_si512((const void *)xt[i]);
    if (${prefix}_parent[i] < 0 && ${prefix}_stride[i] == 1) {
        return own;
    }
    own = _mm512_permutex2var_epi8(_mm512_load_si512((const void *)bncn_rl_mul[i]), own,
                                   _mm512_load_si512((const void *)(bncn_rl_mul[i] + 64)));
    if (${prefix}_parent[i] >= 0) {
        own = _mm512_add_epi8(own, _mm512_loadu_si512((const void *)xt[${prefix}_parent[i]]));
    }
    return own;
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
    long r = first, refused = 0;
#if BNCN_RL
    if (bncn_rl_ok) {
        while (last - r >= RL_MIN_ROWS) {
            long count = last - r < (long)RL_ROWS * RL_SUB ? last - r : (long)RL_ROWS * RL_SUB;
            int bytes = sizeof(${ctype}) == 1;
            refused += bncn_rl_rows(bncn_rl_narrow_${suffix}, bytes, xv, r, count, last, scores, labels);
            r += count;
        }
    }
#endif
    for (; r < last; ++r) {
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
