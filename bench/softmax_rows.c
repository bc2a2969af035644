/* The row-wise fp32 kernels whose cost grows with T or V, at GPT-2 124M's
 * shapes (B=4, 12 heads): the causal softmax and its backward over
 * (B*NH, T, T) at T=1024, the loss's softmax over (B*T, V=50304) at T=64.
 * Best of R rounds on the threads OpenMP gives; build the tree before a
 * change beside this one to compare (docs/precision.md).
 * Run: make && OMP_NUM_THREADS=2 build/bench/softmax_rows [R] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

enum { BH = 48, T = 1024, N = 256, V = 50304 };

static double ms_since(double t0) { return (omp_get_wtime() - t0) * 1e3; }

int main(int argc, char **argv) {
    int R = argc > 1 ? atoi(argv[1]) : 5;
    size_t na = (size_t)BH * T * T;
    float *s = malloc(na * 4), *d = malloc(na * 4), *lg = malloc((size_t)N * V * 4);
    float *loss = malloc(N * 4);
    int *tg = malloc(N * sizeof(int));
    if (!s || !d || !lg || !loss || !tg || R < 1) {
        fprintf(stderr, "softmax_rows: out of memory (0.5 GB) or R < 1\n");
        return 3;
    }
    for (int i = 0; i < N; i++) tg[i] = (i * 7919) % V;
    const cb_kernels *k = cb_kernels_cpu();
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < R; r++) {
        for (size_t i = 0; i < na; i++)
            s[i] = (float)(i % 13) * 0.1f, d[i] = (float)(i % 7) * 0.01f;
        for (size_t i = 0; i < (size_t)N * V; i++) lg[i] = (float)(i % 17) * 0.2f;
        double t0 = omp_get_wtime(), t;
#pragma omp parallel for schedule(static)
        for (int bh = 0; bh < BH; bh++)
            cb_cpu_masked_softmax(s + (size_t)bh * T * T, T, T, T, T, 1);
        t = ms_since(t0), best[0] = t < best[0] ? t : best[0];
        t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (int bh = 0; bh < BH; bh++)
            cb_cpu_masked_softmax_backward(d + (size_t)bh * T * T, s + (size_t)bh * T * T, T, T, T,
                                           T, 1, 0.125f);
        t = ms_since(t0), best[1] = t < best[1] ? t : best[1];
        t0 = omp_get_wtime();
        k->crossentropy_forward(k, loss, lg, tg, N, V);
        t = ms_since(t0), best[2] = t < best[2] ? t : best[2];
    }
    printf("row kernels, %d threads, best of %d rounds (one layer's attention at T=1024, B=4)\n"
           "  causal softmax (48,1024,1024)     %8.2f ms\n"
           "  softmax backward (48,1024,1024)   %8.2f ms\n"
           "  cross-entropy forward (256,50304) %8.2f ms\n",
           omp_get_max_threads(), R, best[0], best[1], best[2]);
    free(s), free(d), free(lg), free(loss), free(tg);
    return 0;
}
