/* Why the GEMM peak moves between processes: every call of the 2048^3
 * sgemm (OpenBLAS) or bf16 matmul (oneDNN, fp32 result) timed from the
 * process's first call for S seconds, summed into windows of W ms. Each
 * window prints its GFLOP/s, the process's CPU time over wall time and
 * threads (below 1: the threads were off their cores) and the machine's
 * steal ticks from /proc/stat (the hypervisor running someone else).
 * Options: mpi (MPI_Init first, as `cubist bench` does), pad P (leading
 * dimensions 2048 + P, no power-of-two stride).
 * Run: OMP_NUM_THREADS=2 build/bench/peak_calls sgemm|bf16 [S] [W] [mpi] [pad P] */
#include <cblas.h>
#include <dnnl.h>
#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

enum { N = 2048, MAXCALLS = 100000 };

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static long steal_ticks(void) {
    FILE *f = fopen("/proc/stat", "r");
    long v[8] = {0};
    if (!f) return -1;
    if (fscanf(f, "cpu %ld %ld %ld %ld %ld %ld %ld %ld", v, v + 1, v + 2, v + 3, v + 4, v + 5,
               v + 6, v + 7) != 8)
        v[7] = -1;
    fclose(f);
    return v[7];
}

typedef struct ctx {
    int bf16, ld;
    float *a, *b, *c;
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_t prim;
    dnnl_exec_arg_t args[3];
} ctx;

static void chk(dnnl_status_t s) {
    if (s != dnnl_success) {
        fprintf(stderr, "peak_calls: oneDNN status %d\n", (int)s);
        exit(3);
    }
}

static dnnl_memory_t mem(ctx *x, dnnl_data_type_t t, void *p) {
    dnnl_dims_t d = {N, N}, s = {x->ld, 1};
    dnnl_memory_desc_t md;
    dnnl_memory_t m;
    chk(dnnl_memory_desc_init_by_strides(&md, 2, d, t, s));
    chk(dnnl_memory_create(&m, &md, x->eng, p));
    return m;
}

static void setup_bf16(ctx *x) {
    size_t nn = (size_t)N * x->ld;
    uint16_t *h = malloc(2 * nn * sizeof *h);
    for (size_t i = 0; i < 2 * nn; i++) h[i] = cb_bf16_round(x->a[i % nn]);
    chk(dnnl_engine_create(&x->eng, dnnl_cpu, 0));
    chk(dnnl_stream_create(&x->st, x->eng, dnnl_stream_default_flags));
    dnnl_memory_t a = mem(x, dnnl_bf16, h), b = mem(x, dnnl_bf16, h + nn),
                  c = mem(x, dnnl_f32, x->c);
    const dnnl_memory_desc_t *am, *bm, *cm;
    dnnl_memory_get_memory_desc(a, &am), dnnl_memory_get_memory_desc(b, &bm);
    dnnl_memory_get_memory_desc(c, &cm);
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    chk(dnnl_matmul_desc_init(&md, am, bm, NULL, cm));
    chk(dnnl_primitive_desc_create(&pd, &md, NULL, x->eng, NULL));
    chk(dnnl_primitive_create(&x->prim, pd));
    x->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, a};
    x->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, b};
    x->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, c};
}

static void call(ctx *x) {
    if (!x->bf16) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1, x->a, x->ld, x->b, x->ld,
                    0, x->c, x->ld);
        return;
    }
    chk(dnnl_primitive_execute(x->prim, x->st, 3, x->args));
    chk(dnnl_stream_wait(x->st));
}

int main(int argc, char **argv) {
    ctx x = {.bf16 = argc > 1 && !strcmp(argv[1], "bf16"), .ld = N};
    double S = argc > 2 ? atof(argv[2]) : 6, W = (argc > 3 ? atof(argv[3]) : 250) / 1e3;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "mpi")) MPI_Init(&argc, &argv);
        if (!strcmp(argv[i], "pad") && i + 1 < argc) x.ld = N + atoi(argv[++i]);
    }
    cpu_set_t cs;
    sched_getaffinity(0, sizeof cs, &cs);
    printf("%s, %d threads, ld %d, %d CPUs allowed, BLAS %s\n", x.bf16 ? "bf16" : "sgemm",
           omp_get_max_threads(), x.ld, CPU_COUNT(&cs), cb_blas_note());
    size_t nn = (size_t)N * x.ld;
    x.a = malloc(3 * nn * sizeof(float));
    for (size_t i = 0; i < 3 * nn; i++) x.a[i] = (float)(i % 7) * 0.1f;
    x.b = x.a + nn, x.c = x.b + nn;
    if (x.bf16) setup_bf16(&x);
    static double wall[MAXCALLS], cpu[MAXCALLS];
    long st0 = steal_ticks();
    double t0 = omp_get_wtime(), c0 = cpu_s(), t = t0;
    int n = 0;
    while (t - t0 < S && n < MAXCALLS) {
        call(&x);
        double t1 = omp_get_wtime(), c1 = cpu_s();
        wall[n] = t1 - t, cpu[n++] = c1 - c0;
        t = t1, c0 = c1;
    }
    printf("first calls (GFLOP/s):");
    for (int i = 0; i < n && i < 6; i++) printf(" %.0f", 2.0 * N * N * N / wall[i] / 1e9);
    printf("\n  window_s  calls  GFLOP/s  cpu/wall/threads  GFLOP/s in CPU time x threads\n");
    double best = 0, bestc = 0, elapsed = 0, flops = 2.0 * N * N * N * n, wsum = 0, csum = 0;
    for (int i = 0; i < n; i++) wsum += wall[i], csum += cpu[i];
    for (int i = 0; i < n;) {
        double w = 0, c = 0, start = elapsed;
        int k = 0;
        for (; i < n && (w < W || k == 0); i++, k++) w += wall[i], c += cpu[i];
        elapsed += w;
        double g = 2.0 * N * N * N * k / w / 1e9;
        if (g > best && w >= W) best = g;
        if (g * w * omp_get_max_threads() / c > bestc && w >= W) bestc = g * w * omp_get_max_threads() / c;
        int nt = omp_get_max_threads();
        printf("  %7.2f %6d %8.1f %8.2f %8.1f\n", start, k, g, c / w / nt, g * w * nt / c);
    }
    printf("best full window %.1f GFLOP/s, in CPU time %.1f; all calls %.1f, in CPU time x threads %.1f; steal "
           "ticks %ld\n", best, bestc, flops / wsum / 1e9, flops / csum * omp_get_max_threads() / 1e9,
           steal_ticks() - st0);
    return 0;
}
