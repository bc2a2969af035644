/* The gradient norm's pass at GPT-2 124M's size (124,475,904 floats):
 * sumsq over the whole gradient after all of it was written (the pass at
 * the update, before), against sumsq of each piece right after it was
 * written (taken in backward where a tensor's gradient becomes final,
 * after; the piece is fc's weight, 768 x 3072 floats, 9.4 MB). The
 * writes are not timed. Best of R interleaved rounds on the threads
 * OpenMP gives; both give the same sum.
 * Run: make && OMP_NUM_THREADS=1 build/bench/grad_norm [R] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

enum { PIECE = 768 * 3072 };

/* g[a, a+m) written as a backward product would leave it */
static void write_piece(float *g, size_t a, size_t m) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = a; i < a + m; i++) g[i] = (float)(i % 97) * 1e-3f;
}

/* ms of the sumsq passes; hot: each piece right after its write, else
 * one pass after every write; *s the sum */
static double norm_ms(float *g, size_t n, int hot, double *s) {
    const cb_kernels *k = cb_kernels_cpu();
    double ms = 0.0, t0;
    *s = 0.0;
    for (size_t a = 0; a < n; a += PIECE) {
        write_piece(g, a, a + PIECE < n ? PIECE : n - a);
        if (!hot) continue;
        t0 = omp_get_wtime();
        *s += k->sumsq(k, g + a, a + PIECE < n ? PIECE : n - a);
        ms += (omp_get_wtime() - t0) * 1e3;
    }
    t0 = omp_get_wtime();
    for (size_t a = 0; a < n && !hot; a += PIECE)
        *s += k->sumsq(k, g + a, a + PIECE < n ? PIECE : n - a);
    return ms + (hot ? 0.0 : (omp_get_wtime() - t0) * 1e3);
}

int main(int argc, char **argv) {
    int R = argc > 1 ? atoi(argv[1]) : 7;
    size_t n = 124475904;
    float *g = malloc(n * sizeof(float));
    if (!g || R < 1) {
        fprintf(stderr, "grad_norm: out of memory (0.5 GB) or R < 1\n");
        return 3;
    }
    double best[2] = {1e30, 1e30}, s[2];
    for (int r = 0; r < R; r++)
        for (int hot = 0; hot < 2; hot++) {
            double t = norm_ms(g, n, hot, &s[hot]);
            best[hot] = t < best[hot] ? t : best[hot];
        }
    printf("gradient norm of 124M floats, %d threads, best of %d interleaved rounds\n"
           "  one pass after the whole gradient      %8.2f ms\n"
           "  each 9.4 MB piece right after written   %8.2f ms  (%.3f; sums %s)\n",
           omp_get_max_threads(), R, best[0], best[1], best[1] / best[0],
           s[0] == s[1] ? "equal" : "DIFFER");
    free(g);
    return s[0] != s[1];
}
