/* The step's weight-gradient products of GPT-2 124M at 256 rows (T=64,
 * B=4; 12 blocks' c_attn, attn c_proj, c_fc, mlp c_proj, and the tied
 * head), 123,568,128 gradient floats, in the thread's CPU time (one
 * thread: load-proof), best of R rounds, the ways alternated:
 *   before  memset of the whole gradient, then every product accumulating
 *           (the step's old zeroing pass)
 *   now     every product overwriting (acc 0: the step's first write)
 *   clear   each product's block cleared just before it, then accumulating
 *           (what the bf16 table's overwrite runs on AMX)
 * for the fp32 table (OpenBLAS, beta 0) or the bf16 one (oneDNN: on AMX
 * the block cleared in place, then the sum post-op; without AMX the
 * product alone; docs/precision.md says why).
 * Run: make && OMP_NUM_THREADS=1 build/bench/dw_first_write [R] [fp32|bf16] [rows (256)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

enum { C = 768, V = 50304, SHAPES = 5 };
static int N = 256;
static const int shape[SHAPES][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {V, C}};
static const int count[SHAPES] = {12, 12, 12, 12, 1}; /* the last: the head's (V,C) */

/* every product of a step into dw (the tensors side by side); a second
 * product for the head's input gradient into dx, as the step runs it.
 * acc 2: each block cleared, then accumulated */
static void products(const cb_kernels *k, float *dw, float *dx, const float *x, const float *dy,
                     int acc) {
    size_t off = 0;
    for (int s = 0; s < SHAPES; s++)
        for (int c = 0; c < count[s]; c++) {
            if (acc == 2) memset(dw + off, 0, sizeof(float) * shape[s][0] * shape[s][1]);
            if (s < SHAPES - 1)
                k->matmul_backward(k, NULL, dw + off, NULL, dy, x, NULL, N, shape[s][0], shape[s][1],
                                   acc > 0);
            else k->head_backward(k, dx, dw + off, dy, x, x, N, C, V, acc > 0);
            off += (size_t)shape[s][0] * shape[s][1];
        }
}

int main(int argc, char **argv) {
    int R = argc > 1 ? atoi(argv[1]) : 7;
    if (argc > 3 && atoi(argv[3]) > 0) N = atoi(argv[3]);
    const cb_kernels *k = argc > 2 && !strcmp(argv[2], "fp32") ? cb_kernels_cpu() : cb_kernels_bf16();
    if (!k) return fprintf(stderr, "dw_first_write: oneDNN did not start\n"), 1;
    size_t n = 0, nio = (size_t)N * V;
    for (int s = 0; s < SHAPES; s++) n += (size_t)count[s] * shape[s][0] * shape[s][1];
    float *dw = calloc(n, sizeof(float)), *x = malloc(sizeof(float) * nio);
    float *dy = malloc(sizeof(float) * nio), *dx = malloc(sizeof(float) * (size_t)N * C);
    if (!dw || !x || !dy || !dx) return fprintf(stderr, "dw_first_write: out of memory\n"), 1;
    for (size_t i = 0; i < nio; i++)
        x[i] = (float)((i * 37) % 101) * 0.01f - 0.5f, dy[i] = (float)((i * 13) % 97) * 0.01f - 0.5f;
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 4; j++) {
            int way = (j + r) % 4; /* 0 before, 1 now, 2 the memset alone, 3 clear */
            double t0 = cpu_ms();
            if (way == 0 || way == 2) memset(dw, 0, sizeof(float) * n);
            if (way != 2) products(k, dw, dx, x, dy, way == 1 ? 0 : way == 3 ? 2 : 1);
            double t = cpu_ms() - t0;
            if (t < best[way]) best[way] = t;
        }
    printf("%s, %zu gradient floats, thread CPU ms, best of %d: before (memset, then accumulate) "
           "%.1f, now (first write overwrites) %.1f, each block cleared then accumulated %.1f; "
           "the memset alone %.1f\n",
           k == cb_kernels_cpu() ? "fp32" : "bf16", n, R, best[0], best[1], best[3], best[2]);
    free(dw), free(x), free(dy), free(dx);
    return 0;
}
