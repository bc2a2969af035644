/* What the bf16 table's weight products would gain from weights kept in
 * oneDNN's own (blocked, VNNI) layout instead of the plain one it reads now
 * (src/kernels/bf16.c): a oneDNN bf16 matmul C (M,N) f32 = A (M,K) B (K,N),
 * B plain row-major (tb 0) or transposed (tb 1, a (N,K) matrix, as the LM
 * head and the backward dx products read their weights), against the same
 * product with B reordered once into the format the primitive chooses
 * (format_tag any). With a plain B the primitive repacks it at every call.
 * Times are the calling thread's CPU time, so run it on one thread: then
 * oneDNN computes in this thread and the figures hold on a busy machine.
 * Best of R interleaved rounds of 5 calls each; the one reorder's wall
 * time (what a step would pay per weight and orientation) printed too.
 * Run: make && OMP_NUM_THREADS=1 build/bench/bf16_pack M K N tb [R]
 * e.g. the 124M fc at T=64, B=4: build/bench/bf16_pack 256 768 3072 0 */
#include <dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static dnnl_engine_t eng;
static dnnl_stream_t strm;

static void ck(dnnl_status_t s, const char *what) {
    if (s == dnnl_success) return;
    fprintf(stderr, "bf16_pack: oneDNN %s failed (status %d)\n", what, (int)s);
    exit(3);
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct mm {
    dnnl_primitive_t p;
    dnnl_memory_t a, b, c;
} mm;

/* b (the primitive's format) = reorder of src (bd); its wall time in ms */
static double reorder(const dnnl_memory_desc_t *bd, void *B, const dnnl_memory_desc_t *wmd,
                      dnnl_memory_t *b) {
    dnnl_memory_t src;
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t rp;
    ck(dnnl_memory_create(&src, bd, eng, B), "memory");
    ck(dnnl_memory_create(b, wmd, eng, DNNL_MEMORY_ALLOCATE), "memory");
    ck(dnnl_reorder_primitive_desc_create(&rpd, bd, eng, wmd, eng, NULL), "reorder descriptor");
    ck(dnnl_primitive_create(&rp, rpd), "reorder");
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, *b}};
    double t0 = omp_get_wtime();
    ck(dnnl_primitive_execute(rp, strm, 2, args), "reorder run");
    ck(dnnl_stream_wait(strm), "wait");
    double ms = (omp_get_wtime() - t0) * 1e3;
    dnnl_primitive_destroy(rp);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(src);
    return ms;
}

/* A (M,K), B (K,N) plain or transposed, C (M,N); packed: B in the
 * primitive's own format (*ms: the reorder's time) */
static mm make(int M, int K, int N, int tb, int packed, void *A, void *B, float *C, double *ms) {
    dnnl_memory_desc_t ad, bd, cd, bany;
    dnnl_dims_t a_d = {M, K}, b_d = {K, N}, c_d = {M, N};
    dnnl_dims_t a_s = {K, 1}, b_s = {tb ? 1 : N, tb ? K : 1}, c_s = {N, 1};
    ck(dnnl_memory_desc_init_by_strides(&ad, 2, a_d, dnnl_bf16, a_s), "A");
    ck(dnnl_memory_desc_init_by_strides(&bd, 2, b_d, dnnl_bf16, b_s), "B");
    ck(dnnl_memory_desc_init_by_strides(&cd, 2, c_d, dnnl_f32, c_s), "C");
    ck(dnnl_memory_desc_init_by_tag(&bany, 2, b_d, dnnl_bf16, dnnl_format_tag_any), "B any");
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    mm r;
    ck(dnnl_matmul_desc_init(&md, &ad, packed ? &bany : &bd, NULL, &cd), "matmul descriptor");
    ck(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL), "matmul primitive descriptor");
    ck(dnnl_primitive_create(&r.p, pd), "matmul");
    ck(dnnl_memory_create(&r.a, &ad, eng, A), "memory");
    ck(dnnl_memory_create(&r.c, &cd, eng, C), "memory");
    if (packed) *ms = reorder(&bd, B, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), &r.b);
    else ck(dnnl_memory_create(&r.b, &bd, eng, B), "memory");
    dnnl_primitive_desc_destroy(pd);
    return r;
}

/* CPU seconds of one call, the mean of reps */
static double run(mm *m, int reps) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m->a}, {DNNL_ARG_WEIGHTS, m->b}, {DNNL_ARG_DST, m->c}};
    double t0 = cpu_now();
    for (int i = 0; i < reps; i++) {
        ck(dnnl_primitive_execute(m->p, strm, 3, args), "matmul run");
        ck(dnnl_stream_wait(strm), "wait");
    }
    return (cpu_now() - t0) / reps;
}

static void destroy(mm *m) {
    dnnl_primitive_destroy(m->p);
    dnnl_memory_destroy(m->a), dnnl_memory_destroy(m->b), dnnl_memory_destroy(m->c);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: OMP_NUM_THREADS=1 bf16_pack M K N tb [rounds]\n");
        return 2;
    }
    int M = atoi(argv[1]), K = atoi(argv[2]), N = atoi(argv[3]), tb = atoi(argv[4]);
    int R = argc > 5 ? atoi(argv[5]) : 5;
    if (M < 1 || K < 1 || N < 1 || R < 1) {
        fprintf(stderr, "bf16_pack: M, K, N and rounds must be positive\n");
        return 2;
    }
    ck(dnnl_engine_create(&eng, dnnl_cpu, 0), "engine");
    ck(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags), "stream");
    uint16_t *A = malloc(2 * (size_t)M * K), *B = malloc(2 * (size_t)K * N);
    float *C = malloc(4 * (size_t)M * N);
    if (!A || !B || !C) {
        fprintf(stderr, "bf16_pack: out of memory\n");
        return 4;
    }
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (uint16_t)(0x3f80 + i % 64);
    for (size_t i = 0; i < (size_t)K * N; i++) B[i] = (uint16_t)(0x3c00 + i % 97);
    double ms = 0, plain = 1e30, packed = 1e30;
    mm p = make(M, K, N, tb, 0, A, B, C, &ms), q = make(M, K, N, tb, 1, A, B, C, &ms);
    run(&p, 2), run(&q, 2);
    for (int r = 0; r < R; r++) {
        double x = run(&p, 5), y = run(&q, 5);
        plain = x < plain ? x : plain, packed = y < packed ? y : packed;
    }
    double f = 2.0 * M * K * N;
    printf("M %d K %d N %d %s, %d thread(s), CPU time, best of %d: plain %.3f ms (%.0f GFLOP/s), "
           "packed %.3f ms (%.0f GFLOP/s), packed / plain %.3f; the reorder %.3f ms wall\n",
           M, K, N, tb ? "B transposed" : "B plain", omp_get_max_threads(), R, plain * 1e3,
           f / plain / 1e9, packed * 1e3, f / packed / 1e9, packed / plain, ms);
    destroy(&p), destroy(&q);
    free(A), free(B), free(C);
    dnnl_stream_destroy(strm);
    dnnl_engine_destroy(eng);
    return 0;
}
