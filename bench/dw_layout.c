/* A weight gradient's bf16 product dW (M,N) = X^T dY, X an activation of
 * K rows (K,M) and dY (K,N), in the three layouts its A can take:
 * X read transposed and dense (oneDNN picks brgemm), X's rows padded by
 * 16 elements (a row stride past the row's end: oneDNN's gemm:jit, what
 * the bf16 table does from JIT_ROWS rows, src/kernels/bf16.c) and X^T
 * written out plain (M,K), as a transposing rounding pass would give.
 * Prints each one's best wall time of R interleaved rounds and its
 * GFLOP/s, with oneDNN's kernel for it. The figures of docs/precision.md,
 * "The weight gradients on gemm:jit", e.g. the FFN's up projection at
 * T=1024, B=4: OMP_NUM_THREADS=2 build/bench/dw_layout 768 3072 4096
 * Run: make && OMP_NUM_THREADS=2 build/bench/dw_layout M N K [R] */
#include <dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define PAD 16

static dnnl_engine_t eng;
static dnnl_stream_t strm;

static void ck(dnnl_status_t s, const char *what) {
    if (s == dnnl_success) return;
    fprintf(stderr, "dw_layout: oneDNN %s failed (status %d)\n", what, (int)s);
    exit(3);
}

typedef struct mm {
    dnnl_primitive_t p;
    dnnl_memory_t a, b, c;
    const char *impl;
} mm;

/* C (M,N) f32 = A (M,K) B (K,N), A's element (m,k) at m sm + k sk */
static mm make(int M, int N, int K, int64_t sm, int64_t sk, void *A, void *B, float *C) {
    dnnl_memory_desc_t ad, bd, cd;
    dnnl_dims_t a_d = {M, K}, b_d = {K, N}, c_d = {M, N};
    dnnl_dims_t a_s = {sm, sk}, b_s = {N, 1}, c_s = {N, 1};
    ck(dnnl_memory_desc_init_by_strides(&ad, 2, a_d, dnnl_bf16, a_s), "A");
    ck(dnnl_memory_desc_init_by_strides(&bd, 2, b_d, dnnl_bf16, b_s), "B");
    ck(dnnl_memory_desc_init_by_strides(&cd, 2, c_d, dnnl_f32, c_s), "C");
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    mm r;
    ck(dnnl_matmul_desc_init(&md, &ad, &bd, NULL, &cd), "matmul descriptor");
    ck(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL), "matmul primitive descriptor");
    ck(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &r.impl), "query");
    ck(dnnl_primitive_create(&r.p, pd), "matmul");
    ck(dnnl_memory_create(&r.a, &ad, eng, A), "memory");
    ck(dnnl_memory_create(&r.b, &bd, eng, B), "memory");
    ck(dnnl_memory_create(&r.c, &cd, eng, C), "memory");
    return r;
}

static double run(const mm *m) {
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, m->a}, {DNNL_ARG_WEIGHTS, m->b}, {DNNL_ARG_DST, m->c}};
    double t0 = omp_get_wtime();
    ck(dnnl_primitive_execute(m->p, strm, 3, args), "matmul run");
    ck(dnnl_stream_wait(strm), "wait");
    return omp_get_wtime() - t0;
}

int main(int argc, char **argv) {
    int M = argc > 3 ? atoi(argv[1]) : 0, N = argc > 3 ? atoi(argv[2]) : 0,
        K = argc > 3 ? atoi(argv[3]) : 0, R = argc > 4 ? atoi(argv[4]) : 5;
    if (M < 1 || N < 1 || K < 1 || R < 1) {
        fprintf(stderr, "usage: dw_layout M N K [rounds >= 1]\n");
        return 2;
    }
    ck(dnnl_engine_create(&eng, dnnl_cpu, 0), "engine");
    ck(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags), "stream");
    size_t na = (size_t)K * (M + PAD), nb = (size_t)K * N;
    uint16_t *a = malloc(2 * na), *b = malloc(2 * nb);
    float *c = malloc(4 * (size_t)M * N);
    if (!a || !b || !c) return 1;
    for (size_t i = 0; i < na; i++) a[i] = (uint16_t)(0x3f80 + i % 7); /* 1.0 .. 1.05 */
    for (size_t i = 0; i < nb; i++) b[i] = (uint16_t)(0x3f00 + i % 5); /* 0.5 .. 0.52 */
    const char *name[3] = {"X transposed, dense", "X transposed, rows padded", "X^T written plain"};
    mm m[3] = {make(M, N, K, 1, M, a, b, c), make(M, N, K, 1, M + PAD, a, b, c),
               make(M, N, K, K, 1, a, b, c)};
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = -1; r < R; r++) /* round -1 warms up */
        for (int i = 0; i < 3; i++) {
            double t = run(&m[i]);
            if (r >= 0 && t < best[i]) best[i] = t;
        }
    printf("dW %d x %d over %d rows, %d threads, best of %d\n", M, N, K, omp_get_max_threads(), R);
    for (int i = 0; i < 3; i++)
        printf("  %-26s %-22s %8.2f ms %7.1f GFLOP/s\n", name[i], m[i].impl, best[i] * 1e3,
               2.0 * M * N * K / best[i] * 1e-9);
    printf("  padded / dense: %.2fx the rate\n", best[0] / best[1]);
    return 0;
}
