/* A linear's bias gradient (the column sums of dout (N,OC), with dout
 * rounded to bf16 from the same reads, as the bf16 table's backward runs
 * it) two ways, on the two threads of a VM whose CPUs the hypervisor puts
 * near each other (one last-level cache) or apart:
 *   columns  each thread sums a chunk of the columns over every row (the
 *            kernel before 2026-11-29): half of each thread's reads are
 *            rows the other thread wrote in the pass before
 *   blocks   cb_cpu_bias_backward: each thread sums the row blocks it
 *            wrote, then the blocks' partials are added by column
 * Each window: a producer pass writes dout by a static row loop (as the
 * step's element-wise passes do), a consumer reads h, the way timed in
 * between; the best of 20 such rounds a way, then the cores' round trip
 * says where they sat. The consumer reads either each thread's own half
 * of h's rows (a product split by rows) or all of h on every thread (one
 * split by columns, which leaves every line of h in both cores' caches,
 * so writing it again costs the same either way). oneDNN splits the
 * step's products its own way; the two consumers bound what the way of
 * summing can change. Prints microseconds a call by placement, for
 * GPT-2's widths at N rows.
 * Run: make && OMP_NUM_THREADS=2 build/bench/colsum_place [seconds (30)] [N (256)] */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/peak.h"

enum { WIDTHS = 3, WAYS = 2, READS = 2 };
static const int width[WIDTHS] = {768, 2304, 3072};

static void columns(float *db, const float *d, int N, int OC, uint16_t *h) {
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int c0 = (int)((long)OC * t / nt), c1 = (int)((long)OC * (t + 1) / nt);
        memset(db + c0, 0, sizeof(float) * (size_t)(c1 - c0));
        for (int i = 0; i < N; i++) {
            const float *r = d + (size_t)i * OC;
            uint16_t *o = h + (size_t)i * OC;
#pragma omp simd
            for (int c = c0; c < c1; c++) {
                db[c] += r[c];
                o[c] = cb_bf16_round(r[c]);
            }
        }
    }
}

static void produce(float *d, size_t n, float v) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) d[i] = v + (float)(i % 97) * 1e-3f;
}

static volatile float sink;
/* all: every thread reads all of h; else each its static half */
static void consume(const uint16_t *h, size_t n, int all) {
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        size_t i0 = all ? 0 : n * t / nt, i1 = all ? n : n * (t + 1) / nt;
        unsigned s = 0;
        for (size_t i = i0; i < i1; i += 32) s += h[i];
        sink = (float)s;
    }
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 30;
    int N = argc > 2 ? atoi(argv[2]) : 256;
    size_t n = (size_t)N * width[WIDTHS - 1];
    float *d = aligned_alloc(64, n * sizeof(float)), *db = aligned_alloc(64, 4096 * sizeof(float));
    uint16_t *h = aligned_alloc(64, n * sizeof(uint16_t));
    if (!d || !db || !h) return 1;
    double sum[2][READS][WIDTHS][WAYS] = {{{{0}}}};
    int cnt[2] = {0, 0};
    double end = omp_get_wtime() + secs;
    while (omp_get_wtime() < end) {
        double best[READS][WIDTHS][WAYS];
        for (int all = 0; all < READS; all++)
            for (int w = 0; w < WIDTHS; w++)
                for (int way = 0; way < WAYS; way++) {
                    best[all][w][way] = INFINITY;
                    for (int r = 0; r < 20; r++) {
                        size_t m = (size_t)N * width[w];
                        produce(d, m, (float)r);
                        consume(h, m, all);
                        double t0 = omp_get_wtime();
                        if (way == 0) columns(db, d, N, width[w], h);
                        else cb_cpu_bias_backward(db, d, N, width[w], 0, h);
                        t0 = omp_get_wtime() - t0;
                        if (t0 < best[all][w][way]) best[all][w][way] = t0;
                    }
                }
        double rt = cb_core_round_trip_quick() * 1e9;
        if (!isfinite(rt)) {
            fprintf(stderr, "colsum_place: needs a team of two threads (OMP_NUM_THREADS=2)\n");
            return 2;
        }
        int s = rt > CB_RT_NEAR_NS;
        for (int all = 0; all < READS; all++)
            for (int w = 0; w < WIDTHS; w++)
                for (int way = 0; way < WAYS; way++) sum[s][all][w][way] += best[all][w][way];
        cnt[s]++;
    }
    printf("bias gradient of (%d, OC) with its bf16 rounding, 2 threads, microseconds a call "
           "(mean over windows of each window's best of 20)\n", N);
    for (int s = 0; s < 2; s++) {
        if (!cnt[s]) continue;
        printf("cores %s (round trip %s %.0f ns), %d windows:\n", s ? "apart" : "near",
               s ? ">" : "<=", CB_RT_NEAR_NS, cnt[s]);
        for (int all = 0; all < READS; all++)
            for (int w = 0; w < WIDTHS; w++)
                printf("  h read by %-15s OC %4d  columns %7.1f  row blocks %7.1f  (%.2fx)\n",
                       all ? "both threads," : "rows' threads,", width[w],
                       sum[s][all][w][0] / cnt[s] * 1e6, sum[s][all][w][1] / cnt[s] * 1e6,
                       sum[s][all][w][0] / sum[s][all][w][1]);
    }
    free(d), free(db), free(h);
    return 0;
}
