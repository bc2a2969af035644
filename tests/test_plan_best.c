/* The statistic that turns R calibrations into one cluster
 * (cb_plan_cluster_best, src/plan/calib.c): each rate the highest of the
 * runs, each time and latency the lowest, efficiencies the highest rate
 * (efficiency x its own run's peak) over the highest peak, the GEMM curve
 * kept non-decreasing, the bf16 rates the same way; the spread printed is
 * (max - min) / median. Single process, no timer: three crafted runs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"

static int failed;

static void check(const char *name, double got, double want) {
    int ok = fabs(got - want) <= 1e-12 * fmax(1, fabs(want));
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
    cb_plan_cluster_best(run, 3, &out, spread);
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
    cb_plan_cluster_best(run, 3, &out, spread);
    check("GEMM curve kept non-decreasing", out.eff[1], out.eff[0]);
    printf("%d failed\n", failed);
    return failed != 0;
}
