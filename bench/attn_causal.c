/* The bf16 table's causal attention, forward and backward, at GPT-2
 * 124M's shape (B 4, T 1024, C 768, 12 heads; T and B from the command
 * line): the fused path (scores and probabilities block by block in each
 * thread's buffers, recomputed in the backward) against the path that
 * writes att (CB_BF16_FUSED=0's), the two alternated in every round.
 * Prints each path's best and median wall time and thread CPU time of
 * forward + backward, and the products' GFLOP/s (the causal half).
 * Run: make && OMP_NUM_THREADS=2 build/bench/attn_causal [rounds] [T] [B] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels.h"

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int R = argc > 1 ? atoi(argv[1]) : 5, T = argc > 2 ? atoi(argv[2]) : 1024,
        B = argc > 3 ? atoi(argv[3]) : 4, C = 768, NH = 12;
    if (R < 1 || T < 1 || B < 1) {
        fprintf(stderr, "usage: attn_causal [rounds >= 1] [T >= 1] [B >= 1]\n");
        return 2;
    }
    const cb_kernels *k = cb_kernels_bf16();
    if (!k) return 1;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = malloc(nq * 4), *dqkv = malloc(nq * 4), *out = malloc(no * 4),
          *dout = malloc(no * 4), *att = malloc(na * 4), *sc = malloc(na * 4);
    if (!qkv || !dqkv || !out || !dout || !att || !sc) return 1;
    srand(1);
    for (size_t i = 0; i < nq; i++) qkv[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t i = 0; i < no; i++) dout[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t i = 0; i < na; i++) att[i] = sc[i] = 0.0f;
    cb_attn a = cb_attn_self(B, T, C, NH, 1, NULL);
    double *w[2], *c[2];
    for (int p = 0; p < 2; p++) w[p] = malloc(R * sizeof(double)), c[p] = malloc(R * sizeof(double));
    for (int r = -1; r < R; r++) /* round -1 warms both paths up */
        for (int p = 0; p < 2; p++) {
            cb_kernels_bf16_fuse(p);
            double t0 = omp_get_wtime(), c0 = 0;
#pragma omp parallel reduction(+ : c0)
            c0 -= cpu_ms();
            k->attention_forward(k, &a, out, att, qkv, qkv);
            k->attention_backward(k, &a, dqkv, dqkv, sc, dout, qkv, qkv, att);
            double c1 = 0;
#pragma omp parallel reduction(+ : c1)
            c1 += cpu_ms();
            if (r >= 0) w[p][r] = (omp_get_wtime() - t0) * 1e3, c[p][r] = c0 + c1;
        }
    /* the causal half of the products: S, P V forward; S again (fused
     * only), dP, dV, dQ, dK backward; 2 B NH (T^2/2) hs FLOPs each */
    double unit = 2.0 * B * NH * (T * (double)T / 2) * (C / NH);
    const char *name[2] = {"writes att (CB_BF16_FUSED=0)", "fused"};
    printf("bf16 causal attention, B %d, T %d, C %d, %d heads, %d threads, %d rounds\n", B, T, C,
           NH, omp_get_max_threads(), R);
    for (int p = 0; p < 2; p++) {
        qsort(w[p], R, sizeof(double), cmp), qsort(c[p], R, sizeof(double), cmp);
        printf("%-30s wall best %8.1f median %8.1f ms  thread CPU best %8.1f ms  "
               "%6.1f GFLOP/s of causal products (best wall)\n",
               name[p], w[p][0], w[p][R / 2], c[p][0], unit * 6 / w[p][0] / 1e6);
    }
    printf("fused / writes att, best wall: %.3f, median: %.3f\n", w[1][0] / w[0][0],
           w[1][R / 2] / w[0][R / 2]);
    return 0;
}
