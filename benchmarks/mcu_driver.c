/* mcu_driver.c: the test program of benchmarks/bench_mcu.py, one for every model it compares.
 *
 * Compiled as is (no template), beside two generated files that hold only data and names:
 *   bench_model.h  includes the model's header (a bnc-export --format c header, or the code
 *                  emlearn's converter generated) and defines
 *                    BENCH_INPUT_T       the type of one feature (uint8_t codes or float raw values)
 *                    BENCH_N_FEATURES    features per row
 *                    BENCH_PREDICT(x)    the model's own predict call on a row x (const BENCH_INPUT_T *)
 *   bench_rows.h   (not in the footprint build) N_ROWS, the test rows bench_x[N_ROWS][BENCH_N_FEATURES],
 *                  the labels the model gives them on the host bench_expected[] and the true labels
 *                  bench_truth[]
 *
 * With -DBENCH_FOOTPRINT=1 only bnc_target_predict() is compiled: the object the model's FLASH and
 * stack are measured on (the same entry name as bnc_deploy.targets.cortex_m's footprint object).
 * Otherwise the program runs every row on the board, counts the rows whose label differs from the
 * host's (printed as "FAIL row 0 board_label host_label") and the test errors, then times the
 * predict loop against an empty call on the board's timer (board_timer.h), as bnc_deploy's driver does (QEMU
 * -icount shift=0: 1 instruction = 1 ns of virtual time), and prints
 *   TIMING calibration_instructions calibration_ticks baseline_ticks predict_ticks predict_ticks
 *   BENCH n_rows disagreements test_errors
 * The start-up code, linker script, flags and QEMU options are bnc_deploy's (targets/cortex_m_*).
 */
#include <stdint.h>
#include <stdio.h>
#include "bench_model.h"

int bnc_target_predict(const BENCH_INPUT_T *x);

#if BENCH_FOOTPRINT
int bnc_target_predict(const BENCH_INPUT_T *x)
{
    return (int)(BENCH_PREDICT(x));
}
#else
#include "bench_rows.h"

#include "board_timer.h" /* the board's tick counter: bnc_deploy/targets/cortex_m_sources.c, section timer */
#define CALIBRATION 100000u
#define MAX_PRINTED 1000u

static volatile int32_t sink;

__attribute__((noinline)) int bnc_target_predict(const BENCH_INPUT_T *x)
{
    return (int)(BENCH_PREDICT(x));
}

__attribute__((noinline)) static int call_baseline(const BENCH_INPUT_T *x)
{
    return x[0] > (BENCH_INPUT_T)0;
}

static uint32_t loop_ticks(int (*call)(const BENCH_INPUT_T *))
{
    unsigned r;
    uint32_t start = board_ticks();
    for (r = 0; r < N_ROWS; ++r) {
        sink += call(bench_x[r]);
    }
    return board_ticks() - start;
}

int main(void)
{
    unsigned r, disagreements = 0, errors = 0, printed = 0;
    uint32_t n = CALIBRATION, start, calibration, baseline, predict;
    board_timer_start();
    for (r = 0; r < N_ROWS; ++r) {
        int label = bnc_target_predict(bench_x[r]);
        if (label != (int)bench_expected[r]) {
            ++disagreements;
            if (printed++ < MAX_PRINTED) {
                printf("FAIL %u 0 %d %d\n", r, label, (int)bench_expected[r]);
            }
        }
        if (label != (int)bench_truth[r]) {
            ++errors;
        }
    }
    start = board_ticks();
    /* unified syntax: GCC switches Thumb-1 (Cortex-M0) inline assembly to divided syntax otherwise */
    __asm__ volatile (".syntax unified\n1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
    calibration = board_ticks() - start;
    baseline = loop_ticks(call_baseline);
    predict = loop_ticks(bnc_target_predict);
    printf("TIMING %lu %lu %lu %lu %lu\n", (unsigned long)CALIBRATION * 2ul, (unsigned long)calibration,
           (unsigned long)baseline, (unsigned long)predict, (unsigned long)predict);
    printf("BENCH %u %u %u\n", (unsigned)N_ROWS, disagreements, errors);
    return 0;
}
#endif
