/* The statistic that turns R calibrations into one cluster
 * (cb_plan_cluster_best, src/plan/calib.c): each rate the highest of the
 * runs, each time and latency the lowest, efficiencies the highest rate
 * (efficiency x its own run's peak) over the highest peak, the GEMM curve
 * kept non-decreasing, the bf16 rates the same way; the spread printed is
 * (max - min) / median. Single process, no timer: three crafted runs.
 * Then the figures of one placement of the cores (the validation's
 * near and apart calibrations): a probe with no window in the wanted
 * state returns INFINITY, the calibration writes 0 (not measured), and
 * cb_plan_cluster_best takes such a figure from the fallback cluster
 * (every calibration's best), the others from the runs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"

static int failed;

/* A probe at 100 GFLOP/s on every GEMM but those of 1024 rows and more,
 * memory at 10 GB/s and attention at 20 GFLOP/s, except what `missing`
 * names: never timed in the wanted state (INFINITY) */
enum { MISS_BIG = 1, MISS_MEM = 2, MISS_ATT = 4, MISS_EW = 8 };
static int missing;
static double f_gemm(void *ctx, int m, int k, int n) {
    (void)ctx;
    return (missing & MISS_BIG) && m >= 1024 ? INFINITY : 3 * 2.0 * m * k * n / 100e9;
}
static double f_memory(void *ctx, int N, int C) {
    (void)ctx;
    return missing & MISS_MEM ? INFINITY : 3.0 * 72 * C * N / 10e9;
}
static double f_attention(void *ctx, int B, int T, int C, int NH) {
    (void)ctx, (void)NH;
    return missing & MISS_ATT ? INFINITY : 3.0 * 4 * T * C * (double)B * T / 20e9;
}
static double f_ew(void *ctx, int kind, int n) {
    (void)ctx, (void)kind;
    return missing & MISS_EW ? INFINITY : n * 1e-9;
}

/* both streams at once: GEMMs at 0.8 of their rate alone, the
 * memory-bound kernels at 12 GB/s each; the update alone at 10 GB/s and
 * never together (1e30) */
static double f_gshared(void *ctx, int m, int k, int n, int streams) {
    (void)ctx, (void)m, (void)k, (void)n, (void)streams;
    return 0.8;
}
static double f_shared(void *ctx, int N, int C, int streams) {
    (void)ctx, (void)streams;
    return 3.0 * 72 * C * N / 12e9;
}
static double f_upd(void *ctx, int n, int streams) {
    (void)ctx;
    return streams > 1 ? 1e30 : 40.0 * n / 10e9;
}

static void check(const char *name, double got, double want) {
    int ok = want == 0 ? got == 0 : fabs(got - want) <= 1e-12 * fabs(want);
    printf("%s %s: %.12g (want %.12g)\n", ok ? "PASS" : "FAIL", name, got, want);
    failed += !ok;
}

int main(void) {
    static cb_plan_cluster run[3], out;
    double spread[CB_PLAN_NSPREAD];
    const double peak[3] = {100e9, 200e9, 180e9}, mem[3] = {30e9, 20e9, 25e9};
    /* run 0 is fast on small GEMMs, run 1 (the highest peak) slow on them:
     * the best small-GEMM rate is run 0's, 0.6 x 100 = 60 GFLOP/s */
    const double eff0[3] = {0.6, 0.2, 0.25}, eff1[3] = {0.7, 0.9, 0.8};
    for (int r = 0; r < 3; r++) {
        cb_plan_cluster *c = &run[r];
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "run %d", r);
        c->peak_flops = peak[r], c->mem_bandwidth = mem[r];
        c->neff = 2, c->eff_intensity[0] = 4, c->eff_intensity[1] = 64;
        c->eff[0] = eff0[r], c->eff[1] = eff1[r];
        c->nshape = 1, c->shape[0][0] = 256, c->shape[0][1] = 128, c->shape[0][2] = 128;
        c->shape[0][3] = eff0[r];
        c->ew_s[0] = 1e-9 * (3 - r); /* the last run's the lowest */
        c->ncoll = 1, snprintf(c->coll[0].op, sizeof c->coll[0].op, "allreduce");
        c->coll[0].ranks = 2, c->coll[0].alpha = 1e-6 * (r + 1), c->coll[0].beta = 1e9 * (3 - r);
        c->bf16.peak_flops = 2 * peak[2 - r], c->bf16.neff = 1, c->bf16.eff_intensity[0] = 4;
        c->bf16.eff[0] = eff0[r];
    }
    run[2].mem_bandwidth = 0; /* not measured in this run: left out */
    cb_plan_cluster_best(run, 3, NULL, &out, spread);
    check("peak: the highest", out.peak_flops, 200e9);
    check("memory bandwidth: the highest of the runs that measured it", out.mem_bandwidth, 30e9);
    check("GEMM efficiency: the highest rate over the highest peak", out.eff[0], 60e9 / 200e9);
    check("GEMM efficiency at 64: 0.9 of the highest peak", out.eff[1], 0.9);
    check("shape efficiency: the highest rate over the highest peak", out.shape[0][3], 0.3);
    check("element-wise seconds: the lowest", out.ew_s[0], 1e-9);
    check("collective alpha: the lowest", out.coll[0].alpha, 1e-6);
    check("collective beta: the highest", out.coll[0].beta, 3e9);
    /* bf16: peaks 360, 400, 200 GFLOP/s; rates 0.6 x 360, 0.2 x 400, 0.25 x 200 */
    check("bf16 peak: the highest", out.bf16.peak_flops, 400e9);
    check("bf16 efficiency: the highest rate over the highest peak", out.bf16.eff[0], 216e9 / 400e9);
    check("peak spread: (max - min) / median", spread[CB_PLAN_SPREAD_PEAK], 100e9 / 180e9);
    /* a curve point below its left neighbour is raised to it */
    run[0].eff[1] = 0.1, run[1].eff[1] = 0.1, run[2].eff[1] = 0.1;
    cb_plan_cluster_best(run, 3, NULL, &out, spread);
    check("GEMM curve kept non-decreasing", out.eff[1], out.eff[0]);

    /* one placement's calibration: the large GEMMs, memory, attention and
     * the element-wise kernels never in the wanted state */
    cb_plan_probe pr = {f_gemm, f_memory, f_attention, NULL, NULL, 1,
                        f_ew,   NULL,     0,           NULL, NULL, NULL};
    static cb_plan_cluster place, all, got;
    memset(&place, 0, sizeof place), memset(&all, 0, sizeof all);
    missing = MISS_BIG | MISS_MEM | MISS_ATT | MISS_EW;
    cb_plan_calibrate(&pr, 0, &place);
    cb_plan_calibrate_bf16(&pr, 0, &place); /* bf16 the same probe: the same holes */
    check("unplaced GEMM of 1024: efficiency 0, not measured", place.eff[6], 0);
    check("placed GEMM of 512: 100 GFLOP/s, the peak", place.eff[5] * place.peak_flops, 100e9);
    check("unplaced memory rate: 0", place.mem_bandwidth, 0);
    check("unplaced attention: 0", place.att_eff[2] + place.att_seq_eff[0], 0);
    check("unplaced element-wise seconds: 0", place.ew_s[0], 0);
    check("shape of 1024 rows: 0", place.shape[place.nshape - 1][3], 0);
    /* every calibration's best, all timed, 1024 at the fallback's 150 */
    missing = 0;
    cb_plan_calibrate(&pr, 0, &all);
    cb_plan_calibrate_bf16(&pr, 0, &all);
    double p0 = all.peak_flops; /* the others' rates as they were: eff x 150 */
    all.peak_flops = 150e9, all.eff[6] = 1;
    for (int i = 0; i < all.neff - 1; i++) all.eff[i] = place.eff[i] * place.peak_flops / 150e9;
    for (int i = 0; i < all.nshape; i++) all.shape[i][3] *= p0 / 150e9;
    for (int i = 0; i < all.natt; i++) all.att_eff[i] *= p0 / 150e9;
    for (int i = 0; i < all.nseq; i++) all.att_seq_eff[i] *= p0 / 150e9;
    cb_plan_cluster_best(&place, 1, &all, &got, spread);
    check("the fallback's GEMM of 1024 raises the peak", got.peak_flops, 150e9);
    check("the placed GEMM of 512 keeps its rate", got.eff[5] * got.peak_flops, 100e9);
    check("memory from the fallback", got.mem_bandwidth, 10e9);
    check("attention from the fallback, as a rate", got.att_eff[2] * got.peak_flops,
          all.att_eff[2] * all.peak_flops);
    check("element-wise seconds from the fallback", got.ew_s[0], 1e-9);
    check("bf16: the placed GEMM of 512 from the run", got.bf16.eff[5] * got.bf16.peak_flops,
          100e9);
    check("bf16: attention from the fallback", got.bf16.att_seq_eff[0], all.bf16.att_seq_eff[0]);
    check("bf16: shape of 4096 rows from the fallback", got.bf16.shape[got.bf16.nshape - 1][3],
          all.bf16.shape[all.bf16.nshape - 1][3]);
    cb_plan_cluster_best(&place, 1, NULL, &got, spread);
    check("without a fallback, unmeasured memory stays 0", got.mem_bandwidth, 0);
    /* a fallback 1.25x faster on everything the runs measured: what they
     * did not measure, at its rate over 1.25 */
    static cb_plan_cluster fast;
    fast = all, fast.peak_flops *= 1.25, fast.mem_bandwidth *= 1.25, fast.ew_s[0] /= 1.25;
    cb_plan_cluster_best(&place, 1, &fast, &got, spread);
    check("a faster fallback: memory at the runs' speed", got.mem_bandwidth, 10e9);
    check("a faster fallback: element-wise seconds at the runs' speed", got.ew_s[0], 1e-9);
    check("a faster fallback: attention at the runs' speed, as a rate",
          got.att_eff[2] * got.peak_flops, all.att_eff[2] * all.peak_flops);
    check("a faster fallback: the placed GEMM of 512 keeps its own rate",
          got.eff[5] * got.peak_flops, 100e9);
    check("a faster fallback: the GEMM of 1024 by the curve's ratio", got.eff[6] * got.peak_flops,
          150e9);
    /* a fallback whose curves have other points fills the figures, not the curves */
    all.shape[0][1] *= 2;
    cb_plan_cluster_best(&place, 1, &all, &got, spread);
    check("fallback of other shapes: attention not filled", got.att_eff[2], 0);
    check("fallback of other shapes: memory still filled", got.mem_bandwidth, 10e9);

    /* the figures of one thread a device with every device at once alone
     * (the validation's calibrations of them by placement): the GEMM's
     * share and the memory-bound rate written, the update never together
     * (0: not measured), every other figure as it was */
    static cb_plan_cluster sh;
    cb_plan_probe ps = {NULL, NULL, NULL, NULL, NULL, 1, NULL, f_shared, 0, f_upd, f_gshared, NULL};
    memset(&sh, 0, sizeof sh);
    sh.threads = 1, sh.devices_per_node = 2, sh.peak_flops = 123e9, sh.mem_bandwidth = 7e9;
    cb_plan_calibrate_shared(&ps, 0, &sh);
    check("shared: the GEMM's share", sh.gemm_shared, 0.8);
    check("shared: memory-bound rate with both streaming", sh.mem_bandwidth_shared, 12e9);
    check("shared: the update never together, 0", sh.update_bandwidth_shared, 0);
    check("shared: the peak untouched", sh.peak_flops, 123e9);
    check("shared: the memory rate alone untouched", sh.mem_bandwidth, 7e9);
    static cb_plan_cluster q;
    memset(&q, 0, sizeof q);
    q.threads = 1, q.devices_per_node = 2;
    cb_plan_calibrate_shared(&ps, 1, &q);
    check("shared with quick: not measured", q.gemm_shared + q.mem_bandwidth_shared, 0);
    q.threads = 2;
    cb_plan_calibrate_shared(&ps, 0, &q);
    check("shared with 2 threads a device: not measured", q.gemm_shared + q.mem_bandwidth_shared,
          0);
    printf("%d failed\n", failed);
    return failed != 0;
}
