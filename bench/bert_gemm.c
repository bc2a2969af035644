/* Every matrix product of one BERT-base training step (B=8, T=128, C=768,
 * NH=12, V=30522, the decoder on P=19 rows of each sequence), as the CPU
 * kernels call cblas_sgemm, timed on one thread in the thread's CPU time
 * (load-proof up to the frequency the host gives), each next to a 2048^3
 * sgemm timed in the same round: where the step's GEMM time goes and
 * whether any shape or orientation runs below OpenBLAS's large-matrix
 * rate. Then attention's products of one layer (96 (b,h) pairs of 128 x
 * 128 x 64) through OpenBLAS and through cb_small_gemm (the kernel's),
 * alternated, and the whole attention kernel, forward and backward with the
 * probabilities' dropout 0.1, on the same thread. Last, the same on 4 KiB
 * pages against huge pages (cb_mem_hugepages, src/util/mem.c), alternated:
 * the FFN-up products and the AdamW kernel over 16M parameters. Best of
 * R rounds.
 * Run: make && OMP_NUM_THREADS=1 build/bench/bert_gemm [R] (docs/bert.md) */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels.h"
#include "kernels/small_gemm.h"
#include "util/mem.h"

enum { B = 8, T = 128, C = 768, NH = 12, HS = C / NH, N = B * T, V = 30522, P = 19 * B };

void openblas_set_num_threads(int);

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* C (M,Nc) += op(A) op(B), row-major, as the kernels call it */
typedef struct shape {
    const char *what;
    int ta, tb, M, Nc, K, per_step; /* calls of this shape per step */
} shape;

static const shape SHAPES[] = {
    {"QKV forward            x W", 0, 0, N, 3 * C, C, 12},
    {"QKV dx                 dy W^T", 0, 1, N, C, 3 * C, 12},
    {"QKV dW                 x^T dy", 1, 0, C, 3 * C, N, 12},
    {"attn out forward", 0, 0, N, C, C, 12},
    {"attn out dx", 0, 1, N, C, C, 12},
    {"attn out dW", 1, 0, C, C, N, 12},
    {"FFN up forward", 0, 0, N, 4 * C, C, 12},
    {"FFN up dx", 0, 1, N, C, 4 * C, 12},
    {"FFN up dW", 1, 0, C, 4 * C, N, 12},
    {"FFN down forward", 0, 0, N, C, 4 * C, 12},
    {"FFN down dx", 0, 1, N, 4 * C, C, 12},
    {"FFN down dW", 1, 0, 4 * C, C, N, 12},
    {"MLM transform forward", 0, 0, N, C, C, 1},
    {"MLM transform dx", 0, 1, N, C, C, 1},
    {"MLM transform dW", 1, 0, C, C, N, 1},
    {"decoder forward        h wte^T", 0, 1, P, V, C, 1},
    {"decoder dh             dl wte", 0, 0, P, C, V, 1},
    {"decoder dwte           dl^T h", 1, 0, V, C, P, 1},
};

static float *A, *Bm, *Cm;

static double gemm_s(int ta, int tb, int M, int Nc, int K) {
    double t = cpu_s();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                Nc, K, 1.0f, A, ta ? M : K, Bm, tb ? K : Nc, 1.0f, Cm, Nc);
    return cpu_s() - t;
}

static double min2(double a, double b) { return a < b ? a : b; }

static void products(int R) {
    int n = (int)(sizeof SHAPES / sizeof *SHAPES);
    double tot = 0, tot_ref = 0;
    printf("%-32s %6s %6s %6s %9s %8s %8s %6s\n", "product (one thread, CPU time)", "M", "N", "K",
           "ms", "GFLOP/s", "2048^3", "ratio");
    for (int i = 0; i < n; i++) {
        const shape *s = &SHAPES[i];
        double best = 1e30, ref = 1e30;
        for (int r = 0; r < R; r++) { /* alternated: both see the same host frequency */
            best = min2(best, gemm_s(s->ta, s->tb, s->M, s->Nc, s->K));
            ref = min2(ref, gemm_s(0, 0, 2048, 2048, 2048));
        }
        double f = 2.0 * s->M * s->Nc * s->K, rate = f / best / 1e9, rr = 2.0 * 2048 * 2048 * 2048 / ref / 1e9;
        printf("%-32s %6d %6d %6d %9.2f %8.1f %8.1f %6.2f\n", s->what, s->M, s->Nc, s->K, best * 1e3,
               rate, rr, rate / rr);
        tot += best * s->per_step, tot_ref += f / (rr * 1e9) * s->per_step;
    }
    printf("step's products: %.0f ms of one thread (%.0f ms at each one's 2048^3 rate)\n",
           tot * 1e3, tot_ref * 1e3);
}

/* C = alpha op(A) op(B) through OpenBLAS (small 0) or cb_small_gemm (1) */
static void pair_gemm(int small, int ta, int tb, int M, int Nc, int K, float alpha, const float *a,
                      int lda, const float *b, int ldb, float *c, int ldc) {
    if (small) cb_small_gemm(ta, tb, M, Nc, K, alpha, a, lda, b, ldb, c, ldc);
    else
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, Nc, K, alpha, a, lda, b, ldb, 0.0f, c, ldc);
}

/* one layer's 96 pairs: the six products of attention_forward/backward */
static double pair_products(int sm, float *qkv, float *att, float *o, float *dq, float *sc,
                            float *dy) {
    double t = cpu_s();
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, ld = 3 * C;
        const float *q = qkv + (size_t)b * T * ld + h * HS, *k = q + C, *v = q + 2 * C;
        float *s = att + (size_t)bh * T * T, *ds = sc + (size_t)bh * T * T;
        float *d = dq + (size_t)b * T * ld + h * HS, *ob = o + (size_t)b * T * C + h * HS;
        const float *g = dy + (size_t)b * T * C + h * HS;
        pair_gemm(sm, 0, 1, T, T, HS, 1.0f, q, ld, k, ld, s, T);
        pair_gemm(sm, 0, 0, T, HS, T, 1.0f, s, T, v, ld, ob, C);
        pair_gemm(sm, 0, 1, T, T, HS, 1.0f, g, C, v, ld, ds, T);
        pair_gemm(sm, 1, 0, T, HS, T, 1.0f, s, T, g, C, d + 2 * C, ld);
        pair_gemm(sm, 0, 0, T, HS, T, 1.0f, ds, T, k, ld, d, ld);
        pair_gemm(sm, 1, 0, T, HS, T, 1.0f, ds, T, q, ld, d + C, ld);
    }
    return cpu_s() - t;
}

static void attention(int R) {
    size_t na = (size_t)B * NH * T * T, nq = (size_t)N * 3 * C;
    float *qkv = malloc(nq * 4), *o = malloc((size_t)N * C * 4), *dq = malloc(nq * 4);
    float *att = malloc(2 * na * 4), *sc = malloc(na * 4), *dy = malloc((size_t)N * C * 4);
    if (!qkv || !o || !dq || !att || !sc || !dy) return;
    for (size_t i = 0; i < nq; i++) qkv[i] = (float)((int)(i % 201) - 100) * 1e-2f;
    for (size_t i = 0; i < (size_t)N * C; i++) dy[i] = (float)((int)(i % 37) - 18) * 1e-2f;
    const cb_kernels *k = cb_kernels_cpu();
    cb_attn a = cb_attn_self(B, T, C, NH, 0, NULL);
    a.drop = 0.1f, a.drop_key = 0x5eed, a.NHg = NH;
    double fwd = 1e30, bwd = 1e30, prod = 1e30, small = 1e30, ref = 1e30, t;
    for (int r = 0; r < R; r++) {
        t = cpu_s();
        k->attention_forward(k, &a, o, att, qkv, qkv);
        fwd = min2(fwd, cpu_s() - t);
        t = cpu_s();
        k->attention_backward(k, &a, dq, dq, sc, dy, qkv, qkv, att);
        bwd = min2(bwd, cpu_s() - t);
        prod = min2(prod, pair_products(0, qkv, att, o, dq, sc, dy));
        small = min2(small, pair_products(1, qkv, att, o, dq, sc, dy));
        ref = min2(ref, gemm_s(0, 0, 2048, 2048, 2048));
    }
    double f = 6.0 * 2 * T * T * HS * B * NH, rr = 2.0 * 2048 * 2048 * 2048 / ref / 1e9;
    printf("attention, one layer (one thread, CPU time): forward %.2f ms, backward %.2f ms, of "
           "which the 6 x %d products through OpenBLAS %.2f ms (%.1f GFLOP/s; 2048^3 %.1f, ratio "
           "%.2f), through cb_small_gemm (the kernel's) %.2f ms (%.1f GFLOP/s, ratio %.2f)\n",
           fwd * 1e3, bwd * 1e3, B * NH, prod * 1e3, f / prod / 1e9, rr, f / prod / 1e9 / rr,
           small * 1e3, f / small / 1e9, f / small / 1e9 / rr);
    free(qkv), free(o), free(dq), free(att), free(sc), free(dy);
}

/* n floats, 2 MiB-aligned, on huge pages or not, filled */
static float *buffer(size_t n, int huge) {
    void *p = NULL;
    size_t bytes = (n * sizeof(float) + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    if (posix_memalign(&p, 2u << 20, bytes)) return NULL;
    if (huge) cb_mem_hugepages(p, bytes);
    float *f = p;
    for (size_t i = 0; i < n; i++) f[i] = (float)(i % 7) * 1e-2f;
    return f;
}

/* FFN up forward, dx, dW and one AdamW pass: 4 KiB pages against huge */
static void hugepages(int R) {
    const cb_kernels *k = cb_kernels_cpu();
    size_t n = (size_t)4 * C * N, na = (size_t)16 << 20;
    float *x[2][3], *o[2][4];
    double gemm[2] = {1e30, 1e30}, adam[2] = {1e30, 1e30};
    for (int h = 0; h < 2; h++) {
        for (int j = 0; j < 3; j++) x[h][j] = buffer(n, h);
        for (int j = 0; j < 4; j++) o[h][j] = buffer(na, h);
        for (int j = 0; j < 3; j++) if (!x[h][j]) return;
        for (int j = 0; j < 4; j++) if (!o[h][j]) return;
    }
    for (int r = 0; r < R; r++)
        for (int h = 0; h < 2; h++) {
            float *a = x[h][0], *w = x[h][1], *y = x[h][2];
            double t = cpu_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, 4 * C, C, 1.0f, a, C, w, 4 * C,
                        0.0f, y, 4 * C);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, C, 4 * C, 1.0f, y, 4 * C, w,
                        4 * C, 0.0f, a, C);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, 4 * C, N, 1.0f, a, C, y, 4 * C,
                        1.0f, w, 4 * C);
            gemm[h] = min2(gemm[h], cpu_s() - t);
            t = cpu_s();
            k->adamw(k, o[h][0], o[h][1], 1.0f, o[h][2], o[h][3], na, 1e-4f, 0.9f, 0.999f, 1e-6f,
                     0.0f, 0.1f, 0.001f);
            adam[h] = min2(adam[h], cpu_s() - t);
        }
    printf("4 KiB pages / huge pages (one thread, CPU time): FFN up's 3 products %.2f / %.2f ms "
           "(x%.3f), AdamW over 16M parameters %.2f / %.2f ms (x%.3f)\n", gemm[0] * 1e3,
           gemm[1] * 1e3, gemm[0] / gemm[1], adam[0] * 1e3, adam[1] * 1e3, adam[0] / adam[1]);
    for (int h = 0; h < 2; h++) {
        for (int j = 0; j < 3; j++) free(x[h][j]);
        for (int j = 0; j < 4; j++) free(o[h][j]);
    }
}

int main(int argc, char **argv) {
    int R = argc > 1 ? atoi(argv[1]) : 3;
    size_t n = (size_t)V * C + 16;
    if (R < 1) R = 1;
    A = malloc(n * 4), Bm = malloc(n * 4), Cm = malloc(n * 4);
    if (!A || !Bm || !Cm) {
        fprintf(stderr, "bert_gemm: out of memory (300 MB)\n");
        return 3;
    }
    for (size_t i = 0; i < n; i++) A[i] = (i % 7) * 1e-2f, Bm[i] = (i % 5) * 1e-2f, Cm[i] = 0.0f;
    openblas_set_num_threads(1);
    omp_set_num_threads(1);
    printf("BERT-base step's products, best of %d rounds, %s\n", R, cb_blas_note());
    products(R);
    attention(R);
    hugepages(R);
    free(A), free(Bm), free(Cm);
    return 0;
}
