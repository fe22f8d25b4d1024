/* native_dnn.c: the C of the native runtime's host wrapper for DNN headers (runtimes/native_dnn.py).
 *
 * This file is package data, not a source to compile. Its one section is filled in with Python's
 * string.Template (bnc_deploy.formats.c_template) and compiled around the exported header, included
 * unchanged as "model.h": ${prefix} is the header's identifier prefix, ${PREFIX} its macro prefix.
 * The wrapper runs the header's own functions (PREFIX_logits and PREFIX_predict, both, so the
 * verifier certifies both) over a batch, and turns the integer logits back into float32 bit for bit
 * (the sign-magnitude binary32 pattern of the exporter's contract). Host-only: it may use float.
 * Every section must end with a newline; a literal dollar sign is written $$.
 */
//@ wrapper
/* Host-only batch wrapper around an exported bnc-deploy DNN header (bnc_deploy.runtimes.native_dnn). */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "model.h"

#define NF ${PREFIX}_N_FEATURES
#define NC ${PREFIX}_N_CLASSES

static double bnnd_float(int32_t key)
{
    uint32_t bits = key < 0 ? 0x80000000u | (uint32_t)(-(int64_t)key) : (uint32_t)key;
    float f;
    memcpy(&f, &bits, sizeof f);
    return (double)f;
}

/* Rows 0 .. n-1 of x (n x NF codes): logits (n x NC float64 of the float32 logits; NULL: none),
 * integer logits (n x NC; NULL: none) and labels (-1 and NaN for a refused row). Returns the number
 * of refused rows, or -(row + 1) when PREFIX_predict disagrees with the integer logits' argmax. */
long bnnd_batch(const uint8_t *x, long n, double *logits, int32_t *keys, int64_t *labels)
{
    long r, refused = 0;
    int c;
    for (r = 0; r < n; ++r) {
        const uint8_t *row = x + r * NF;
        int32_t out[NC];
        int best = 0, label = ${prefix}_predict(row);
        if (${prefix}_logits(row, out) != 0) {
            ++refused;
            labels[r] = -1;
            for (c = 0; logits != NULL && c < NC; ++c) {
                logits[r * NC + c] = NAN;
            }
            if (label != -1) {
                return -(r + 1);
            }
            continue;
        }
        for (c = 1; c < NC; ++c) {
            if (out[c] > out[best]) {
                best = c;
            }
        }
        if (label != best) {
            return -(r + 1);
        }
        labels[r] = label;
        for (c = 0; c < NC; ++c) {
            if (logits != NULL) {
                logits[r * NC + c] = bnnd_float(out[c]);
            }
            if (keys != NULL) {
                keys[r * NC + c] = out[c];
            }
        }
    }
    return refused;
}

/* The header's integer logit of class c for an output accumulator acc (the tests sweep every acc). */
int32_t bnnd_logit(int32_t acc, int c)
{
    return ${prefix}_logit(acc, c);
}
