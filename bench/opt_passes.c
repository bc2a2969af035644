/* The optimizer's memory passes at GPT-2 124M's size (124,475,904
 * parameters), best of R interleaved rounds on the threads OpenMP gives:
 *   fp32  clip pass + AdamW (two passes over the gradients, before)
 *         against AdamW reading g * gs (one pass, cb_cpu_adamw)
 *   bf16  clip pass + AdamW + rounding the weights' bf16 copies (three)
 *         against one pass that also writes the copies
 * The step's other passes (zeroing, the norm) are the same in both.
 *   floor the fused bf16 pass's memory traffic with no AdamW arithmetic
 *         (read p, g, m, v; write p, m, v and the bf16 copy: 30 bytes a
 *         parameter): the bandwidth bound the fused pass can approach
 *   zeroing the gradient for the next step: the floor pass then memset
 *         (the step's way) against the floor pass writing g = 0 itself;
 *         the memset alone on one thread against split over the threads
 * Run: make && OMP_NUM_THREADS=2 build/bench/opt_passes [R] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

enum { SPLIT32, FUSED32, SPLIT16, FUSED16, FLOOR, ZERO_MEMSET, ZERO_FUSED, MEMSET1, MEMSETN, NWAYS };
static const char *const names[NWAYS] = {"fp32 clip pass + adamw", "fp32 adamw(g * gs)",
                                         "bf16 clip + adamw + round", "bf16 one fused pass",
                                         "bandwidth floor (same bytes)", "floor, then memset(g)",
                                         "floor writing g = 0", "memset(g), one thread",
                                         "memset(g), split over threads"};


typedef struct bufs {
    float *p, *g, *m, *v;
    uint16_t *bf;
    size_t n;
} bufs;

/* the fused bf16 pass's loads and stores, one add each (values stay
 * finite); zero: g is cleared in the same pass */
static void floor_pass(const bufs *b, int zero) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < b->n; i++) {
        float g = b->g[i];
        b->m[i] += g, b->v[i] += g;
        b->p[i] -= 1e-9f * g;
        b->bf[i] = (uint16_t)(b->p[i] > 0);
        if (zero) b->g[i] = 0.0f;
    }
}

static void fill_g(const bufs *b) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < b->n; i++) b->g[i] = 1e-3f * (float)(i % 89) / 89;
}

/* gs 0.999: a clip factor below 1 (the clip pass runs), and 0.999^R
 * keeps the repeatedly scaled gradients far from subnormal */
static double run(const bufs *b, int way) {
    const cb_kernels *k = cb_kernels_cpu();
    const float gs = 0.999f;
    double t0 = omp_get_wtime();
    if (way == MEMSET1) memset(b->g, 0, sizeof(float) * b->n);
    if (way == MEMSETN)
#pragma omp parallel
    {
        size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        size_t i0 = b->n * t / nt, i1 = b->n * (t + 1) / nt;
        memset(b->g + i0, 0, sizeof(float) * (i1 - i0));
    }
    if (way == FLOOR || way == ZERO_MEMSET || way == ZERO_FUSED) {
        floor_pass(b, way == ZERO_FUSED);
        if (way == ZERO_MEMSET) memset(b->g, 0, sizeof(float) * b->n);
    } else if (way >= MEMSET1) {
    } else if (way == SPLIT32 || way == SPLIT16) {
        k->scale(k, b->g, gs, b->n);
        cb_cpu_adamw(b->p, b->g, 1.0f, b->m, b->v, NULL, b->n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                     0.5f, 0.5f);
    } else {
        cb_cpu_adamw(b->p, b->g, gs, b->m, b->v, way == FUSED16 ? b->bf : NULL, b->n, 1e-4f, 0.9f,
                     0.95f, 1e-8f, 0.1f, 0.5f, 0.5f);
    }
    if (way == SPLIT16) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < b->n; i++) b->bf[i] = cb_bf16_round(b->p[i]);
    }
    double ms = (omp_get_wtime() - t0) * 1e3;
    if (way == ZERO_MEMSET || way == ZERO_FUSED || way >= MEMSET1) fill_g(b); /* untimed: the next rows' gradient */
    return ms;
}

int main(int argc, char **argv) {
    int R = argc > 1 ? atoi(argv[1]) : 5;
    bufs b = {.n = 124475904};
    b.p = malloc(b.n * 4), b.g = malloc(b.n * 4), b.m = malloc(b.n * 4), b.v = malloc(b.n * 4);
    b.bf = malloc(b.n * 2);
    if (!b.p || !b.g || !b.m || !b.v || !b.bf || R < 1) {
        fprintf(stderr, "opt_passes: out of memory (2.2 GB) or R < 1\n");
        return 3;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < b.n; i++) {
        b.p[i] = 0.02f * (float)(i % 97) / 97;
        b.m[i] = 0, b.v[i] = 1e-8f, b.bf[i] = 0;
    }
    fill_g(&b);
    double best[NWAYS];
    for (int w = 0; w < NWAYS; w++) best[w] = 1e30;
    for (int r = 0; r < R; r++)
        for (int w = 0; w < NWAYS; w++) {
            double t = run(&b, w);
            best[w] = t < best[w] ? t : best[w];
        }
    printf("optimizer passes, %zu parameters, %d threads, best of %d interleaved rounds\n", b.n,
           omp_get_max_threads(), R);
    for (int w = 0; w < NWAYS; w++) printf("  %-28s %8.1f ms\n", names[w], best[w]);
    printf("  fused / split: fp32 %.2f, bf16 %.2f\n", best[FUSED32] / best[SPLIT32],
           best[FUSED16] / best[SPLIT16]);
    printf("  bf16 fused pass / bandwidth floor %.2f (the floor moves %.1f GB/s)\n",
           best[FUSED16] / best[FLOOR], 30.0 * (double)b.n / best[FLOOR] / 1e6);
    printf("  zeroing in the pass / after it with memset %.2f\n",
           best[ZERO_FUSED] / best[ZERO_MEMSET]);
    free(b.p), free(b.g), free(b.m), free(b.v), free(b.bf);
    return 0;
}
