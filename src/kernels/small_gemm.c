/* Attention's per-(b,h) products (cpu.c) on the calling thread. For one
 * head of BERT-base (128 x 128 x 64) OpenBLAS runs at half its
 * large-matrix rate: each call packs both operands and blocks for caches
 * that these operands (32-64 KB) already sit in. Here the product reads
 * B from a contiguous copy (64 columns a panel, four AVX-512 vectors,
 * the last masked) and broadcasts A's elements from where they lie, four
 * rows at a time: 16 accumulators. The copy matters: B's rows in place
 * are heads of the interleaved qkv (row stride 3C floats, 9 KB), which
 * all fall in a quarter of the L1's sets and evict each other; the
 * A B^T orientation (Q K^T, dY V^T) transposes B into it. Each output
 * is one chain of fused multiply-adds in k order, then times alpha (as
 * OpenBLAS's SkylakeX kernel at these sizes, mostly to the bit): the same
 * bits on any thread count and layout (a pair is always one call).
 * Shapes past SG_MAX, and builds without AVX-512, go to cblas_sgemm. */
#include "kernels/small_gemm.h"

#include <cblas.h>
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

enum { SG_MAX = 256, SG_PACK = 128 * 128 };

#ifdef __AVX512F__
/* C rows [0, R) x the panel's columns (masks m) = alpha sum_k a(r, k) B[k],
 * a(r, k) = A[r ars + k aks] */
static inline __attribute__((always_inline)) void tile(int R, int K, const float *A, size_t ars,
                                                       size_t aks, const float *B, size_t ldb,
                                                       const __mmask16 m[4], float alpha, float *C,
                                                       size_t ldc) {
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 4; v++) acc[r][v] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb;
        __m512 bv[4];
        for (int v = 0; v < 4; v++) bv[v] = _mm512_maskz_loadu_ps(m[v], b + 16 * v);
        for (int r = 0; r < R; r++) {
            __m512 a = _mm512_set1_ps(A[r * ars + k * aks]);
            for (int v = 0; v < 4; v++) acc[r][v] = _mm512_fmadd_ps(a, bv[v], acc[r][v]);
        }
    }
    __m512 s = _mm512_set1_ps(alpha);
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 4; v++)
            _mm512_mask_storeu_ps(C + r * ldc + 16 * v, m[v], _mm512_mul_ps(acc[r][v], s));
}

/* dst (16 rows, stride ldd) = the 16 x 16 block at src (stride lds)
 * transposed: rows of four in 128-bit lanes (unpacks), then the 4 x 4
 * lanes of each column group (two rounds of lane shuffles) */
static inline void tr16(float *dst, size_t ldd, const float *src, size_t lds) {
    __m512 r[16], u[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
    for (int i = 0; i < 16; i += 2) {
        u[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 4; g++) { /* r[4g + c]: lane L holds column 4L + c of rows 4g.. */
        __m512d a = _mm512_castps_pd(u[4 * g]), b = _mm512_castps_pd(u[4 * g + 1]);
        __m512d c = _mm512_castps_pd(u[4 * g + 2]), d = _mm512_castps_pd(u[4 * g + 3]);
        r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int c = 0; c < 4; c++) {
        __m512 p = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88),
               q = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
        __m512 x = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        __m512 y = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
        _mm512_storeu_ps(dst + (size_t)c * ldd, _mm512_shuffle_f32x4(p, x, 0x88));
        _mm512_storeu_ps(dst + (size_t)(4 + c) * ldd, _mm512_shuffle_f32x4(q, y, 0x88));
        _mm512_storeu_ps(dst + (size_t)(8 + c) * ldd, _mm512_shuffle_f32x4(p, x, 0xdd));
        _mm512_storeu_ps(dst + (size_t)(12 + c) * ldd, _mm512_shuffle_f32x4(q, y, 0xdd));
    }
}

/* bt (K,N) = B^T, B (N,K) of row stride ldb: 16 x 16 blocks, the edges
 * element by element */
static void transpose(float *bt, const float *B, int N, int K, size_t ldb) {
    int N16 = N / 16 * 16, K16 = K / 16 * 16;
    for (int j = 0; j < N16; j += 16)
        for (int k = 0; k < K16; k += 16)
            tr16(bt + (size_t)k * N + j, (size_t)N, B + j * ldb + k, ldb);
    for (int j = 0; j < N; j++)
        for (int k = j < N16 ? K16 : 0; k < K; k++) bt[(size_t)k * N + j] = B[j * ldb + k];
}

/* C (M,N) = alpha a B, a(i, k) = A[i ars + k aks], B (K,N) row stride ldb */
static void gemm_rows(int M, int N, int K, float alpha, const float *A, size_t ars, size_t aks,
                      const float *B, size_t ldb, float *C, size_t ldc) {
    for (int c0 = 0; c0 < N; c0 += 64) {
        int n = N - c0 < 64 ? N - c0 : 64;
        __mmask16 m[4];
        for (int v = 0; v < 4; v++) {
            int w = n - 16 * v;
            m[v] = w >= 16 ? (__mmask16)0xffff : w <= 0 ? 0 : (__mmask16)((1u << w) - 1);
        }
        int i = 0;
        for (; i + 4 <= M; i += 4)
            tile(4, K, A + i * ars, ars, aks, B + c0, ldb, m, alpha, C + i * ldc + c0, ldc);
        const float *a = A + i * ars;
        float *c = C + i * ldc + c0;
        switch (M - i) {
        case 3: tile(3, K, a, ars, aks, B + c0, ldb, m, alpha, c, ldc); break;
        case 2: tile(2, K, a, ars, aks, B + c0, ldb, m, alpha, c, ldc); break;
        case 1: tile(1, K, a, ars, aks, B + c0, ldb, m, alpha, c, ldc); break;
        }
    }
}

/* bt (K,N) = op(B) contiguous: B (K,N) copied, or B (N,K) transposed */
static void copy_b(float *bt, int tb, int N, int K, const float *B, size_t ldb) {
    if (tb)
        transpose(bt, B, N, K, ldb);
    else
        for (int k = 0; k < K; k++) memcpy(bt + (size_t)k * N, B + k * ldb, sizeof(float) * N);
}
#endif

void cb_small_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
#ifdef __AVX512F__
    static _Thread_local float bt[SG_PACK];
    if (M <= SG_MAX && N <= SG_MAX && K <= SG_MAX && (size_t)K * N <= SG_PACK) {
        if (K > 0) copy_b(bt, tb, N, K, B, (size_t)ldb);
        gemm_rows(M, N, K, alpha, A, ta ? 1 : (size_t)lda, ta ? (size_t)lda : 1, bt, (size_t)N, C,
                  (size_t)ldc);
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
}
