/* Calibration: the rates of this machine from a probe (src/plan/probe.c
 * times the real kernels; tests feed a fake). A GEMM's efficiency is kept
 * against its arithmetic intensity 2mkn / 4(mk + kn + mn) FLOP per byte,
 * the one number that tells a skinny GEMM from a square one; collectives
 * as alpha + sent / beta from a small and a large vector. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"

const char *const CB_PLAN_OPS[5] = {"allreduce", "allgather", "reduce_scatter", "bcast", "p2p"};

double cb_plan_op_sent(const char *op, int p, double n) {
    double b = 4 * n;
    if (!strcmp(op, "allreduce")) return 2.0 * (p - 1) / p * b;
    if (!strcmp(op, "p2p")) return b;
    return (p - 1.0) / p * b;
}

static double intensity(double m, double k, double n) {
    return 2 * m * k * n / (4 * (m * k + k * n + m * n));
}

static void calibrate_gemm(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    static const int SIZES[] = {16, 32, 64, 128, 256, 512, 1024};
    int n = quick ? 6 : 7;
    double rate[7], best = 0;
    for (int i = 0; i < n; i++) {
        double s = SIZES[i];
        rate[i] = 3 * 2 * s * s * s / pr->gemm(pr->ctx, SIZES[i], SIZES[i], SIZES[i]);
        if (rate[i] > best) best = rate[i];
    }
    c->peak_flops = best;
    c->neff = n;
    /* A GEMM does not get slower as its intensity grows; a dip is another
     * process taking the core, so the curve keeps its running maximum. */
    for (int i = 0; i < n; i++) {
        c->eff_intensity[i] = intensity(SIZES[i], SIZES[i], SIZES[i]);
        c->eff[i] = fmax(rate[i] / best, i ? c->eff[i - 1] : 0);
    }
}

/* The block's memory-bound kernels on (N, C): 72 C bytes per token forward
 * (src/plan/model.c: two LayerNorms, GELU over 4C, two residuals), twice
 * that backward. N 16384 x C 128: about 120 MB of buffers, several times
 * a CPU's last-level cache, as a step's activations are (a probe that
 * fits in cache measures the cache: 10% faster on one core here, more on
 * a team of threads that share one memory bus). */
static void calibrate_memory(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    (void)quick;
    int N = 16384, C = 128;
    c->mem_bandwidth = 3.0 * 72 * C * N / pr->memory(pr->ctx, N, C);
}

/* Attention at its FLOP count (4 T C per token forward, scores and
 * context, no causal discount), forward + backward = 3x, by head size:
 * the kernel's inner loops run over the head's C / NH channels, so a
 * small head runs slower (1 thread here: 0.55 of peak at 32 against 0.65
 * at 64). B 32: probabilities of tens of MB, out of the caches like the
 * step's (a small batch kept in cache runs 10-20% faster than the model
 * sees it). attn_efficiency is the curve's value at head size 64. */
static void calibrate_attention(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    int B = quick ? 16 : 32, T = 128, C = 256;
    double flops = 3.0 * 4 * T * C * (double)B * T;
    c->natt = 0;
    for (int hs = 16; hs <= 128; hs *= 2, c->natt++) {
        c->att_hs[c->natt] = hs;
        double t = pr->attention(pr->ctx, B, T, C, C / hs);
        c->att_eff[c->natt] = fmin(1, flops / t / c->peak_flops);
    }
    c->attn_efficiency = c->att_eff[2];
}

/* alpha, beta from a small (64 floats) and a large vector. */
void cb_plan_calibrate_comm(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    int small = 64, large = quick ? 1 << 18 : 1 << 20, p = pr->ranks;
    c->ncoll = 0;
    for (int i = 0; i < 5; i++) {
        const char *op = CB_PLAN_OPS[i];
        double t1 = pr->coll(pr->ctx, op, small), t2 = pr->coll(pr->ctx, op, large);
        double s1 = cb_plan_op_sent(op, p, small), s2 = cb_plan_op_sent(op, p, large);
        double beta = t2 > t1 ? (s2 - s1) / (t2 - t1) : s2 / t2;
        cb_plan_coll *k = &c->coll[c->ncoll++];
        snprintf(k->op, sizeof k->op, "%s", op);
        k->ranks = p, k->beta = beta, k->alpha = fmax(t1 - s1 / beta, 1e-9);
    }
    /* The tier of a node's own links: the point-to-point fit. */
    c->intra = (cb_plan_tier){c->coll[4].beta, c->coll[4].alpha};
    c->inter = c->intra;
}

/* The exact GELU (erf) and dropout (a counter-based hash per element):
 * per element, forward + backward, on 4M elements (out of cache). Their
 * time follows their arithmetic, not their bytes (docs/plan.md). */
static void calibrate_elementwise(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    int n = quick ? 1 << 20 : 1 << 22;
    for (int k = 0; k < CB_PLAN_NEW && pr->elementwise; k++)
        c->ew_s[k] = pr->elementwise(pr->ctx, k, n) / n;
}

void cb_plan_calibrate(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    calibrate_gemm(pr, quick, c);
    calibrate_memory(pr, quick, c);
    calibrate_attention(pr, quick, c);
    calibrate_elementwise(pr, quick, c);
    if (pr->ranks >= 2) cb_plan_calibrate_comm(pr, quick, c);
}
