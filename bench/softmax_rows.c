/* The row-wise fp32 kernels whose cost grows with T or V, at GPT-2 124M's
 * shapes (B=4, 12 heads): the causal softmax and its backward over
 * (B*NH, T, T) at T=1024, the loss's softmax over (B*T, V=50304) at T=64;
 * and, for the bf16 table's attention, each softmax followed by a
 * separate rounding pass to bf16 (before) against the softmax writing
 * the bf16 operands in its own pass (after: P forward, dS and P backward), rows interleaved in every
 * round. Best of R rounds on the threads OpenMP gives.
 * Run: make && OMP_NUM_THREADS=2 build/bench/softmax_rows [R] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

enum { BH = 48, T = 1024, N = 256, V = 50304 };
enum { FWD, BWD, FWD_RND, FWD_FUSED, BWD_RND, BWD_FUSED, XENT, NROWS };
static const char *const names[NROWS] = {
    "causal softmax (48,1024,1024)", "softmax backward (48,1024,1024)",
    "bf16: softmax, then a rounding pass", "bf16: softmax writing bf16 P",
    "bf16: backward, then rounding dS and P", "bf16: backward writing bf16 dS and P",
    "cross-entropy forward (256,50304)"};

typedef struct bufs {
    float *s, *d;
    uint16_t *h, *hp;
} bufs;

static double ms_since(double t0) { return (omp_get_wtime() - t0) * 1e3; }

/* h (n) = bf16(x): the bf16 table's separate rounding pass */
static void round_pass(uint16_t *h, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) h[i] = cb_bf16_round(x[i]);
}

static void softmax(const bufs *b, int row) {
    size_t TT = (size_t)T * T;
    uint16_t *h = row == FWD_FUSED || row == BWD_FUSED ? b->h : NULL;
    if (row == FWD || row == FWD_RND || row == FWD_FUSED) {
#pragma omp parallel for schedule(static)
        for (int bh = 0; bh < BH; bh++)
            cb_cpu_masked_softmax(b->s + bh * TT, h ? h + bh * TT : NULL, T, T, T, T, 1);
    } else {
#pragma omp parallel for schedule(static)
        for (int bh = 0; bh < BH; bh++)
            cb_cpu_masked_softmax_backward(b->d + bh * TT, h ? h + bh * TT : NULL,
                                           h ? b->hp + bh * TT : NULL, b->s + bh * TT, T, T, T,
                                           T, 1, 0.125f);
    }
    if (row == FWD_RND) round_pass(b->h, b->s, BH * TT);
    if (row == BWD_RND) round_pass(b->h, b->d, BH * TT), round_pass(b->hp, b->s, BH * TT);
}

int main(int argc, char **argv) {
    int R = argc > 1 ? atoi(argv[1]) : 5;
    size_t na = (size_t)BH * T * T;
    bufs b = {malloc(na * 4), malloc(na * 4), malloc(na * 2), malloc(na * 2)};
    float *lg = malloc((size_t)N * V * 4), *loss = malloc(N * 4);
    int *tg = malloc(N * sizeof(int));
    if (!b.s || !b.d || !b.h || !b.hp || !lg || !loss || !tg || R < 1) {
        fprintf(stderr, "softmax_rows: out of memory (0.7 GB) or R < 1\n");
        return 3;
    }
    for (int i = 0; i < N; i++) tg[i] = (i * 7919) % V;
    const cb_kernels *k = cb_kernels_cpu();
    double best[NROWS];
    for (int w = 0; w < NROWS; w++) best[w] = 1e30;
    for (int r = 0; r < R; r++)
        for (int w = 0; w < NROWS; w++) {
            for (size_t i = 0; i < na; i++)
                b.s[i] = (float)(i % 13) * 0.1f, b.d[i] = (float)(i % 7) * 0.01f;
            for (size_t i = 0; i < (size_t)N * V; i++) lg[i] = (float)(i % 17) * 0.2f;
            double t0 = omp_get_wtime(), t;
            if (w == XENT) k->crossentropy_forward(k, loss, lg, tg, N, V);
            else if (w == BWD || w == BWD_RND || w == BWD_FUSED) {
                softmax(&b, FWD); /* probabilities to differentiate, untimed */
                t0 = omp_get_wtime();
                softmax(&b, w);
            } else softmax(&b, w);
            t = ms_since(t0);
            best[w] = t < best[w] ? t : best[w];
        }
    printf("row kernels, %d threads, best of %d interleaved rounds (one layer's attention at "
           "T=1024, B=4)\n", omp_get_max_threads(), R);
    for (int w = 0; w < NROWS; w++) printf("  %-38s %8.2f ms\n", names[w], best[w]);
    printf("  fused / separate: forward %.3f, backward %.3f\n", best[FWD_FUSED] / best[FWD_RND],
           best[BWD_FUSED] / best[BWD_RND]);
    free(b.s), free(b.d), free(b.h), free(b.hp), free(lg), free(loss), free(tg);
    return 0;
}
