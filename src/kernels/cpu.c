/* CPU kernels: matrix products through OpenBLAS (cblas_sgemm) but for
 * attention's per-head ones (small_gemm.c), everything
 * else in plain C loops that the compiler vectorises, threaded with OpenMP.
 * OpenBLAS is the OpenMP build, so a GEMM called outside a parallel region
 * uses the whole team and one called inside runs on its calling thread. */
#include <cblas.h>
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "kernels/small_gemm.h"
#include "util/rng.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* e^x for x in float range, within 2 ulp: Cody-Waite reduction by ln 2 and
 * the Cephes polynomial. Unlike libm's expf it inlines and vectorises, which
 * is what makes GELU and the softmaxes memory-bound rather than call-bound. */
static inline float exp_approx(float x) {
    x = x < -87.3f ? -87.3f : x; /* ternaries, not fminf/floorf: those stay libm calls */
    x = x > 88.3f ? 88.3f : x;
    float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return p * s;
}

/* tanh through e^(2u); the absolute error stays below 1e-7 */
static inline float tanh_approx(float u) { return 1.0f - 2.0f / (exp_approx(2.0f * u) + 1.0f); }

/* out (B,T,C) = wte[inp] + wpe[t] */
static void encoder_forward(const cb_kernels *k, float *out, const int *inp, const float *wte,
                            const float *wpe, int B, int T, int C) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *we = wte + (size_t)inp[bt] * C, *pe = wpe + (size_t)(bt % T) * C;
        float *o = out + (size_t)bt * C;
        for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
    }
}

/* Serial in the token order: two positions may hold the same token, and a
 * fixed order keeps the sums reproducible. The cost is B*T*C adds. */
static void encoder_backward(const cb_kernels *k, float *dwte, float *dwpe, const float *dout,
                             const int *inp, int B, int T, int C) {
    (void)k;
    for (int bt = 0; bt < B * T; bt++) {
        const float *d = dout + (size_t)bt * C;
        if (dwpe) {
            float *pe = dwpe + (size_t)(bt % T) * C;
            for (int c = 0; c < C; c++) pe[c] += d[c];
        }
        if (!dwte) continue;
        float *we = dwte + (size_t)inp[bt] * C;
        for (int c = 0; c < C; c++) we[c] += d[c];
    }
}

/* out (N,C) normalised over C; mean, rstd (N) */
static void layernorm_forward(const cb_kernels *k, float *out, float *mean, float *rstd,
                              const float *inp, const float *w, const float *b, int N, int C) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float m = 0.0f, v = 0.0f;
#pragma omp simd reduction(+ : m)
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float s = 1.0f / sqrtf(v / C + 1e-5f);
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

/* Column sums over the rows of an (N,C) tensor (a bias's gradient, a
 * LayerNorm's dw and db) by row blocks: the rows are cut into CS_BLOCKS
 * blocks, each thread sums its own blocks' rows (thread t of nt: blocks
 * [CS_BLOCKS t/nt, CS_BLOCKS (t+1)/nt), the rows a static row loop gives
 * it when N is even), each block into its partial in cs_part, and after a
 * barrier every thread adds the blocks' partials, in block order, for its
 * share of the columns. So a thread reads only the rows it wrote in the
 * pass before, whose cache lines are in its own core's cache, where a
 * column per thread read half of every row from the other core's: with
 * the two CPUs of a VM in different last-level caches, a bias gradient of
 * (256, 768) took 47 us that way and 12 by rows, 3.5-4x at GPT-2's
 * widths, where each thread then reads its own rows; where both read all
 * of the rounded copy, writing it costs the same either way
 * (bench/colsum_place; docs/results.md, 2026-11-29, "Column sums by row
 * blocks"). The sums' bits depend on N and the blocks only, not on the
 * thread count (tests/test_ops.c). Columns go in tiles of CS_TILE, the
 * partials' room, fixed: 256 KB for any model. */
#define CS_BLOCKS 16
#define CS_TILE 2048
static float cs_part[2][CS_BLOCKS][CS_TILE];

static int cs_row(int N, int b) { return (int)((long)N * b / CS_BLOCKS); }

/* Called by every thread of a parallel region, as its last work (the
 * region's closing barrier is the last tile's: no thread may read db, dw
 * or the partials after it inside the region): db (C) (+)= (acc) the
 * column sums of d (N,C); h (N,C), when not NULL, gets d rounded to bf16
 * from the same reads; dw (C), when not NULL, (+)= the column sums of
 * d times x normalised by mean and rstd (N) (a LayerNorm's weight
 * gradient). */
static void colsums(float *db, float *dw, const float *d, const float *x, const float *mean,
                    const float *rstd, uint16_t *h, int N, int C, int acc) {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int b0 = CS_BLOCKS * t / nt, b1 = CS_BLOCKS * (t + 1) / nt;
    for (int c0 = 0; c0 < C; c0 += CS_TILE) {
        int w = C - c0 < CS_TILE ? C - c0 : CS_TILE;
        for (int b = b0; b < b1; b++) {
            float *pb = cs_part[0][b], *pw = cs_part[1][b];
            memset(pb, 0, sizeof(float) * (size_t)w);
            if (dw) memset(pw, 0, sizeof(float) * (size_t)w);
            for (int i = cs_row(N, b); i < cs_row(N, b + 1); i++) {
                const float *di = d + (size_t)i * C + c0;
                if (dw) {
                    const float *xi = x + (size_t)i * C + c0;
                    float m = mean[i], s = rstd[i];
#pragma omp simd
                    for (int c = 0; c < w; c++) {
                        pw[c] += (xi[c] - m) * s * di[c];
                        pb[c] += di[c];
                    }
                } else if (h) {
                    uint16_t *o = h + (size_t)i * C + c0;
#pragma omp simd
                    for (int c = 0; c < w; c++) {
                        pb[c] += di[c];
                        o[c] = cb_bf16_round(di[c]);
                    }
                } else {
#pragma omp simd
                    for (int c = 0; c < w; c++) pb[c] += di[c];
                }
            }
        }
#pragma omp barrier
        for (int c = w * t / nt; c < w * (t + 1) / nt; c++) {
            float sb = 0.0f, sw = 0.0f;
            for (int b = 0; b < CS_BLOCKS; b++) {
                sb += cs_part[0][b][c];
                if (dw) sw += cs_part[1][b][c];
            }
            db[c0 + c] = acc ? db[c0 + c] + sb : sb;
            if (dw) dw[c0 + c] = acc ? dw[c0 + c] + sw : sw;
        }
        if (c0 + CS_TILE < C) {
#pragma omp barrier /* the next tile writes the partials again */
        }
    }
}

/* dinp (N,C) accumulates, each thread over the rows of its blocks (colsums);
 * dw, db (C) (+)= (acc) their column sums by row blocks (colsums) */
static void layernorm_backward(const cb_kernels *k, float *dinp, float *dw, float *db,
                               const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C, int acc) {
    (void)k;
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        for (int i = cs_row(N, CS_BLOCKS * t / nt); i < cs_row(N, CS_BLOCKS * (t + 1) / nt);
             i++) {
            const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
            float m = mean[i], s = rstd[i], dmean = 0.0f, dproj = 0.0f;
#pragma omp simd reduction(+ : dmean, dproj)
            for (int c = 0; c < C; c++) {
                float dn = w[c] * d[c];
                dmean += dn;
                dproj += dn * (x[c] - m) * s;
            }
            dmean /= C;
            dproj /= C;
            float *di = dinp + (size_t)i * C;
            for (int c = 0; c < C; c++) {
                float n = (x[c] - m) * s;
                di[c] += (w[c] * d[c] - dmean - n * dproj) * s;
            }
        }
        colsums(db, dw, dout, inp, mean, rstd, NULL, N, C, acc);
    }
}

/* out (N,OC) = inp (N,IC) @ w (IC,OC) + bias */
static void matmul_forward(const cb_kernels *k, float *out, const float *inp, const float *w,
                           const float *bias, int N, int IC, int OC) {
    (void)k;
    float beta = 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i++) memcpy(out + (size_t)i * OC, bias, sizeof(float) * OC);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OC, IC, 1.0f, inp, IC, w, OC, beta,
                out, OC);
}

/* Column sums of dout (N,OC) into dbias (+= with acc) by row blocks
 * (colsums); h (N,OC, may be NULL): dout rounded to bf16 from the same
 * reads (the bf16 table's operand of the linear's products), the sums'
 * bits unchanged. */
void cb_cpu_bias_backward(float *dbias, const float *dout, int N, int OC, int acc, uint16_t *h) {
#pragma omp parallel
    colsums(dbias, NULL, dout, NULL, NULL, NULL, h, N, OC, acc);
}

/* dinp (N,IC) = dout @ w^T; dw (IC,OC) += inp^T @ dout; dbias += sum dout
 * (without acc: = ; OpenBLAS's beta 0 clears C and then accumulates as
 * beta 1 does) */
static void matmul_backward(const cb_kernels *k, float *dinp, float *dw, float *dbias,
                            const float *dout, const float *inp, const float *w, int N, int IC,
                            int OC, int acc) {
    (void)k;
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, IC, OC, 1.0f, dout, OC, w, OC, 0.0f,
                    dinp, IC);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, IC, OC, N, 1.0f, inp, IC, dout, OC,
                acc ? 1.0f : 0.0f, dw, OC);
    if (dbias) cb_cpu_bias_backward(dbias, dout, N, OC, acc, NULL);
}

static void matmul_backward_dw_rows(const cb_kernels *k, float *dw, const float *dout,
                                    const float *inp, int N, int IC, int OC, int r0, int r1,
                                    int acc) {
    (void)k;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, OC, N, 1.0f, inp + r0, IC, dout,
                OC, acc ? 1.0f : 0.0f, dw + (size_t)r0 * OC, OC);
}

/* out (N,V) = inp (N,C) @ w (V,C)^T */
static void head_forward(const cb_kernels *k, float *out, const float *inp, const float *w, int N,
                         int C, int V) {
    (void)k;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, V, C, 1.0f, inp, C, w, C, 0.0f, out, V);
}

static void head_backward(const cb_kernels *k, float *dinp, float *dw, const float *dout,
                          const float *inp, const float *w, int N, int C, int V, int acc) {
    (void)k;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, V, 1.0f, dout, V, w, C, 0.0f, dinp,
                C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, C, N, 1.0f, dout, V, inp, C,
                acc ? 1.0f : 0.0f, dw, C);
}

cb_attn cb_attn_self(int B, int T, int C, int NH, int causal, const int *lens) {
    return (cb_attn){.B = B, .Tq = T, .Tk = T, .C = C, .NH = NH, .ldq = 3 * C, .ldkv = 3 * C,
                     .koff = C, .voff = 2 * C, .causal = causal, .qlen = lens, .klen = lens};
}

static int clamp_len(const int *len, int b, int T) {
    if (!len) return T;
    return len[b] < 0 ? 0 : len[b] > T ? T : len[b];
}

void cb_attn_rows(const cb_attn *a, int b, int *nq, int *nk) {
    *nq = clamp_len(a->qlen, b, a->Tq);
    *nk = clamp_len(a->klen, b, a->Tk);
}

int cb_attn_seen(int t, int nq, int nk, int causal) {
    if (t >= nq) return 0;
    return causal && t + 1 < nk ? t + 1 : nk;
}

/* row r (n) *= inv, and h (n, may be NULL) = r rounded to bf16 in the
 * same pass: the operand of the bf16 table's P V, with no second read of P */
static void scale_row(float *r, float inv, uint16_t *h, int n) {
    if (!h) {
        for (int j = 0; j < n; j++) r[j] *= inv;
        return;
    }
#pragma omp simd
    for (int j = 0; j < n; j++) {
        r[j] *= inv;
        h[j] = cb_bf16_round(r[j]);
    }
}

/* r (n) <- e^(r - max r); returns their sum */
static float exp_row(float *r, int n) {
    float mx = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; j++) mx = r[j] > mx ? r[j] : mx;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        r[j] = exp_approx(r[j] - mx);
        sum += r[j];
    }
    return sum;
}

void cb_cpu_masked_softmax(float *s, uint16_t *s16, int Tq, int Tk, int nq, int nk, int causal) {
    for (int t = 0; t < Tq; t++) {
        float *r = s + (size_t)t * Tk;
        uint16_t *h = s16 ? s16 + (size_t)t * Tk : NULL;
        int lim = cb_attn_seen(t, nq, nk, causal);
        float sum = exp_row(r, lim);
        scale_row(r, lim ? 1.0f / sum : 0.0f, h, lim);
        for (int j = lim; j < Tk; j++) r[j] = 0.0f;
        if (h) memset(h + lim, 0, sizeof(uint16_t) * (Tk - lim));
    }
}

/* rows [r0, r1) of hs columns at p (row stride ld) set to zero */
static void zero_rows(float *p, int r0, int r1, int hs, int ld) {
    for (int r = r0; r < r1; r++) memset(p + (size_t)r * ld, 0, sizeof(float) * hs);
}

/* y = x's block of rows x ncol (row stride ld) dropped with probability
 * p: element (i, c) is draw g0 + i H + c of key's counter stream, kept
 * iff (U >> 40) / 2^24 >= p, compared as integers (the quotient is exact
 * in float, so (U >> 40) >= ceil(p 2^24) is the same test). y may be x. */
static void drop_block(float *y, const float *x, int rows, int ncol, int ld, uint64_t g0,
                       uint64_t H, uint64_t key, float p) {
    float s = 1.0f / (1.0f - p);
    uint64_t thr = (uint64_t)ceilf(p * 16777216.0f);
    for (int i = 0; i < rows; i++) {
        uint64_t gi = g0 + (uint64_t)i * H;
        const float *xr = x + (size_t)i * ld;
        float *yr = y + (size_t)i * ld;
#pragma omp simd
        for (int c = 0; c < ncol; c++)
            yr[c] = (cb_rng_bits_at(key, gi + (uint64_t)c) >> 40) >= thr ? xr[c] * s : 0.0f;
    }
}

/* attention's probability dropout of pair bh: d = dropped p, (Tq,Tk) each */
static void attn_drop_pair(const cb_attn *a, int bh, const float *p, float *d) {
    int64_t b = bh / a->NH, h = bh % a->NH;
    uint64_t g0 = (uint64_t)(((a->b0 + b) * a->NHg + a->h0 + h) * a->Tq) * (uint64_t)a->Tk;
    drop_block(d, p, a->Tq, a->Tk, a->Tk, g0, (uint64_t)a->Tk, a->drop_key, a->drop);
}

void cb_attn_drop_grad_row(float *g, const float *d, int n, float p) {
    float s = 1.0f / (1.0f - p);
#pragma omp simd
    for (int j = 0; j < n; j++) g[j] = d[j] != 0.0f ? g[j] * s : 0.0f;
}

/* dp (nq rows of Tk) through the dropout, each row over the keys it sees:
 * zero where d dropped, scaled elsewhere */
static void attn_drop_grad_pair(const cb_attn *a, float *dp, const float *d, int nq, int nk) {
    for (int i = 0; i < nq; i++)
        cb_attn_drop_grad_row(dp + (size_t)i * a->Tk, d + (size_t)i * a->Tk,
                              cb_attn_seen(i, nq, nk, a->causal), a->drop);
}

void cb_cpu_attn_dropout(const cb_attn *a, float *att) {
    size_t n = (size_t)a->Tq * a->Tk, all = n * a->B * a->NH;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < a->B * a->NH; bh++) attn_drop_pair(a, bh, att + bh * n, att + all + bh * n);
}

/* The (b,h) pair's operands in a's layout */
typedef struct attn_ptrs {
    size_t q, k, v, o; /* offsets of the head's first query, key, value, output */
    int nq, nk;
} attn_ptrs;

static attn_ptrs attn_at(const cb_attn *a, int b, int h) {
    int hs = a->C / a->NH;
    attn_ptrs p = {.q = (size_t)b * a->Tq * a->ldq + h * hs,
                   .k = (size_t)b * a->Tk * a->ldkv + a->koff + h * hs,
                   .v = (size_t)b * a->Tk * a->ldkv + a->voff + h * hs,
                   .o = (size_t)b * a->Tq * a->C + h * hs};
    cb_attn_rows(a, b, &p.nq, &p.nk);
    return p;
}

/* Causal attention in blocks of BLOCK_ROWS query rows: block [r0, r1)
 * sees keys [0, min(r1, nk)) only, so its products skip the keys none of
 * its rows sees (at T 1024, 8 blocks leave 9/16 of the T x T products);
 * in backward dK and dV go by blocks of keys, key block [k0, k1) seen by
 * query rows [k0, nq) only. Without causal one block of every row and key. */
#define BLOCK_ROWS 128

/* the block's rows: BLOCK_ROWS, or CB_CPU_BLOCK_ROWS (tests: blocks at
 * small T), read once, outside the parallel regions */
static int causal_rows(void) {
    static int n;
    if (!n) {
        const char *e = getenv("CB_CPU_BLOCK_ROWS");
        n = e && atoi(e) > 0 ? atoi(e) : BLOCK_ROWS;
    }
    return n;
}

/* the keys that query rows [0, r1) see of nk */
static int block_keys(const cb_attn *a, int r1, int nk) { return a->causal && r1 < nk ? r1 : nk; }

/* the first query row that sees key k0 */
static int block_first_row(const cb_attn *a, int k0) { return a->causal ? k0 : 0; }

/* rows of a block of n rows or keys (rows: causal_rows()) */
static int block_rows(const cb_attn *a, int rows, int n) { return a->causal ? rows : n; }

/* A pair's product by blocks of rb query rows, block [r0, r1) against the
 * keys it sees (kb of them): with keys_out, out[r0:r1, 0:kb] (row stride
 * ldo) = alpha x[r0:r1] y[0:kb]^T (S, dP: x queries' rows of hs, y keys'
 * rows); without, out[r0:r1, 0:hs] = x[r0:r1, 0:kb] y[0:kb] (O, dQ: x the
 * block's rows of probabilities or dS, y the keys' rows). */
static void query_blocks(const cb_attn *a, int rb, int nq, int nk, int hs, int keys_out,
                         float alpha, const float *x, int ldx, const float *y, int ldy, float *out,
                         int ldo) {
    for (int r0 = 0; r0 < nq; r0 += rb) {
        int r1 = r0 + rb < nq ? r0 + rb : nq, kb = block_keys(a, r1, nk);
        cb_small_gemm(0, keys_out, r1 - r0, keys_out ? kb : hs, keys_out ? hs : kb, alpha,
                      x + (size_t)r0 * ldx, ldx, y, ldy, out + (size_t)r0 * ldo, ldo);
    }
}

/* A pair's dV or dK by blocks of kb keys: out[k0:k1] (rows of hs, stride
 * ldo) = m[t0:nq, k0:k1]^T x[t0:nq], m the probabilities or dS (row stride
 * Tk), t0 the first row that sees key k0; zero where no row sees the block */
static void key_blocks(const cb_attn *a, int kb, int nq, int nk, int hs, const float *m,
                       const float *x, int ldx, float *out, int ldo) {
    for (int k0 = 0; k0 < nk; k0 += kb) {
        int k1 = k0 + kb < nk ? k0 + kb : nk, t0 = block_first_row(a, k0);
        if (t0 < nq)
            cb_small_gemm(1, 0, k1 - k0, hs, nq - t0, 1.0f, m + (size_t)t0 * a->Tk + k0, a->Tk,
                          x + (size_t)t0 * ldx, ldx, out + (size_t)k0 * ldo, ldo);
        else
            zero_rows(out, k0, k1, hs, ldo);
    }
}

size_t cb_cpu_attention_saved(const cb_kernels *k, const cb_attn *a) {
    (void)k;
    return (a->drop > 0 ? 2 : 1) * (size_t)a->B * a->NH * a->Tq * a->Tk;
}

/* out (B,Tq,C), att (B,NH,Tq,Tk): S = Q K^T / sqrt(hs) and O = P V over
 * the valid rows only, block by block (above). One (b,h) pair per task;
 * each GEMM runs on its calling thread. The softmax writes every row of
 * att whole, zeros past its keys. */
static void attention_forward(const cb_kernels *k, const cb_attn *a, float *out, float *att,
                              const float *q, const float *kv) {
    (void)k;
    int hs = a->C / a->NH, Tq = a->Tq, Tk = a->Tk;
    float scale = 1.0f / sqrtf((float)hs);
    int rows = causal_rows();
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < a->B * a->NH; bh++) {
        attn_ptrs p = attn_at(a, bh / a->NH, bh % a->NH);
        float *s = att + (size_t)bh * Tq * Tk, *o = out + p.o;
        int nq = p.nk ? p.nq : 0, rb = block_rows(a, rows, nq);
        query_blocks(a, rb, nq, p.nk, hs, 1, scale, q + p.q, a->ldq, kv + p.k, a->ldkv, s, Tk);
        float *pv = a->drop > 0 ? s + (size_t)a->B * a->NH * Tq * Tk : s; /* P V's P */
        cb_cpu_masked_softmax(s, NULL, Tq, Tk, p.nq, p.nk, a->causal);
        if (a->drop > 0) attn_drop_pair(a, bh, s, pv);
        query_blocks(a, rb, nq, p.nk, hs, 0, 1.0f, pv, Tk, kv + p.v, a->ldkv, o, a->C);
        zero_rows(o, nq, Tq, hs, a->C);
    }
}

/* dS row from dP row d and P row r (n): into d, or only as bf16 into h
 * when h is given (the bf16 table's operand; its fp32 form is not needed),
 * with P in bf16 into hp from the same reads */
static void dsoftmax_row(float *d, const float *r, float dot, float scale, uint16_t *h,
                         uint16_t *hp, int n) {
    if (!h) {
        for (int j = 0; j < n; j++) d[j] = r[j] * (d[j] - dot) * scale;
        return;
    }
    if (hp) {
#pragma omp simd
        for (int j = 0; j < n; j++) hp[j] = cb_bf16_round(r[j]);
    }
#pragma omp simd
    for (int j = 0; j < n; j++) {
        float x = r[j] * (d[j] - dot) * scale;
        h[j] = cb_bf16_round(x);
    }
}

void cb_cpu_masked_softmax_backward(float *dp, uint16_t *ds16, uint16_t *p16, const float *p,
                                    int Tq, int Tk, int nq, int nk, int causal, float scale) {
    for (int t = 0; t < Tq; t++) {
        float *d = dp + (size_t)t * Tk, dot = 0.0f;
        const float *r = p + (size_t)t * Tk;
        size_t o = (size_t)t * Tk;
        int lim = cb_attn_seen(t, nq, nk, causal);
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < lim; j++) dot += r[j] * d[j];
        dsoftmax_row(d, r, dot, scale, ds16 ? ds16 + o : NULL, p16 ? p16 + o : NULL, lim);
        if (ds16) {
            memset(ds16 + o + lim, 0, sizeof(uint16_t) * (Tk - lim));
            if (p16) memset(p16 + o + lim, 0, sizeof(uint16_t) * (Tk - lim));
        } else {
            for (int j = lim; j < Tk; j++) d[j] = 0.0f;
        }
    }
}

/* dV = P^T dY, dP = dY V^T, dS by the softmax backward (scale folded in),
 * dQ = dS K, dK = dS^T Q, each over the valid rows, block by block
 * (above): dP and dQ by blocks of query rows, dV and dK by blocks of keys
 * (no block adds into another's rows); padding rows zero */
static void attention_backward(const cb_kernels *k, const cb_attn *a, float *dq, float *dkv,
                               float *scratch, const float *dout, const float *q, const float *kv,
                               const float *att) {
    (void)k;
    int hs = a->C / a->NH, Tq = a->Tq, Tk = a->Tk;
    float scale = 1.0f / sqrtf((float)hs);
    int rows = causal_rows();
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < a->B * a->NH; bh++) {
        attn_ptrs p = attn_at(a, bh / a->NH, bh % a->NH);
        const float *pr = att + (size_t)bh * Tq * Tk, *dy = dout + p.o;
        const float *pd = a->drop > 0 ? pr + (size_t)a->B * a->NH * Tq * Tk : pr;
        float *ds = scratch + (size_t)bh * Tq * Tk;
        int nq = p.nk ? p.nq : 0, nk = p.nq ? p.nk : 0, rb = block_rows(a, rows, nq),
            kb = block_rows(a, rows, nk);
        query_blocks(a, rb, nq, nk, hs, 1, 1.0f, dy, a->C, kv + p.v, a->ldkv, ds, Tk); /* dP */
        key_blocks(a, kb, nq, nk, hs, pd, dy, a->C, dkv + p.v, a->ldkv);          /* dV */
        if (a->drop > 0) attn_drop_grad_pair(a, ds, pd, nq, nk);
        cb_cpu_masked_softmax_backward(ds, NULL, NULL, pr, Tq, Tk, nq, nk, a->causal, scale);
        query_blocks(a, rb, nq, nk, hs, 0, 1.0f, ds, Tk, kv + p.k, a->ldkv, dq + p.q, a->ldq);
        key_blocks(a, kb, nq, nk, hs, ds, q + p.q, a->ldq, dkv + p.k, a->ldkv); /* dK */
        zero_rows(dq + p.q, nq, Tq, hs, a->ldq);
        zero_rows(dkv + p.k, nk, Tk, hs, a->ldkv);
        zero_rows(dkv + p.v, nk, Tk, hs, a->ldkv);
    }
}

static void gelu_forward(const cb_kernels *k, float *out, const float *inp, size_t n) {
    (void)k;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_approx(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

static void gelu_backward(const cb_kernels *k, float *dinp, const float *inp, const float *dout,
                          size_t n) {
    (void)k;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanh_approx(u), sech2 = 1.0f - th * th;
        float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
    }
}

/* erf(x) as x P(x^2) / Q(x^2) on x clamped to [-4, 4] (erf(4) rounds to
 * 1 in float), the rational fit of Eigen's and XLA's float erf: within
 * 5e-7 of erf over every float (4.2e-7 measured on a 1e-5 grid of
 * [-10, 10]; libm's erff: 5e-8), and unlike erff it inlines and
 * vectorises. tests/test_ops.c checks the GELUs built on it against libm. */
static inline float erf_approx(float x) {
    x = x > 4.0f ? 4.0f : x;
    x = x < -4.0f ? -4.0f : x;
    float x2 = x * x, p = -2.72614225801306e-10f, q = -1.45660718464996e-05f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 - 2.10102402082508e-06f;
    p = p * x2 - 5.69250639462346e-05f;
    p = p * x2 - 7.34990630326855e-04f;
    p = p * x2 - 2.95459980854025e-03f;
    p = p * x2 - 1.60960333262415e-02f;
    q = q * x2 - 2.13374055278905e-04f;
    q = q * x2 - 1.68282697438203e-03f;
    q = q * x2 - 7.37332916720468e-03f;
    q = q * x2 - 1.42647390514189e-02f;
    return x * p / q;
}

/* The exact GELU, x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (BERT's) */
static void gelu_erf_forward(const cb_kernels *k, float *out, const float *inp, size_t n) {
    (void)k;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = 0.5f * inp[i] * (1.0f + erf_approx(inp[i] * (float)M_SQRT1_2));
}

/* d/dx x Phi(x) = Phi(x) + x phi(x) */
static void gelu_erf_backward(const cb_kernels *k, float *dinp, const float *inp,
                              const float *dout, size_t n) {
    (void)k;
    const float c = 0.3989422804014327f; /* 1 / sqrt(2 pi) */
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], cdf = 0.5f * (1.0f + erf_approx(x * (float)M_SQRT1_2));
        dinp[i] = dout[i] * (cdf + x * c * exp_approx(-0.5f * x * x));
    }
}

static void dropout(const cb_kernels *k, float *y, const float *x, int rows, int ncol, int ld,
                    int64_t row0, int64_t col0, int64_t H, uint64_t key, float p) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++)
        drop_block(y + (size_t)i * ld, x + (size_t)i * ld, 1, ncol, ld,
                   (uint64_t)(row0 + i) * (uint64_t)H + (uint64_t)col0, (uint64_t)H, key, p);
}

static void residual_forward(const cb_kernels *k, float *out, const float *a, const float *b,
                             size_t n) {
    (void)k;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* logits (N,V) -> probabilities in place; losses (N) */
static void crossentropy_forward(const cb_kernels *k, float *losses, float *logits,
                                 const int *targets, int N, int V) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = logits + (size_t)i * V, inv = 1.0f / exp_row(r, V);
        for (int j = 0; j < V; j++) r[j] *= inv;
        if (targets) losses[i] = targets[i] < 0 ? 0.0f : -logf(r[targets[i]]);
    }
}

void cb_cpu_crossentropy_backward(float *probs, const int *targets, float dloss, int N, int V,
                                  uint16_t *h, int64_t ldh) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = probs + (size_t)i * V, d = targets[i] < 0 ? 0.0f : dloss;
        int t = targets[i];
        if (h) {
            uint16_t *o = h + (size_t)i * ldh;
#pragma omp simd
            for (int j = 0; j < V; j++) {
                r[j] *= d;
                o[j] = cb_bf16_round(r[j]);
            }
            if (t >= 0) r[t] -= dloss, o[t] = cb_bf16_round(r[t]);
        } else {
            for (int j = 0; j < V; j++) r[j] *= d;
            if (t >= 0) r[t] -= dloss;
        }
    }
}

static void crossentropy_backward(const cb_kernels *k, float *probs, const int *targets,
                                  float dloss, int N, int V) {
    (void)k;
    cb_cpu_crossentropy_backward(probs, targets, dloss, N, V, NULL, 0);
}

/* ---------------------------------------------------------------- split operators */

static double sum_ordered(const cb_kernels *k, const float *x, size_t n) {
    (void)k;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    return s;
}

/* Row moments in double: E[x^2] - mean^2 is then exact to ~1e-16 relative
 * of E[x^2], far below float's resolution of the variance unless
 * |mean| / std passes 1e4, and one reduction carries both sums. */
static void layernorm_stats(const cb_kernels *k, double *stats, const float *inp, int N, int C) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        double a = 0.0, b = 0.0;
        for (int c = 0; c < C; c++) a += x[c], b += (double)x[c] * x[c];
        stats[2 * i] = a;
        stats[2 * i + 1] = b;
    }
}

static void layernorm_apply(const cb_kernels *k, float *out, float *mean, float *rstd,
                            const float *inp, const float *w, const float *b,
                            const double *stats, int N, int C, int Ctot) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        double m = stats[2 * i] / Ctot, v = stats[2 * i + 1] / Ctot - m * m;
        float mf = (float)m, sf = (float)(1.0 / sqrt((v > 0 ? v : 0) + 1e-5));
        const float *x = inp + (size_t)i * C;
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - mf) * sf * w[c] + b[c];
        mean[i] = mf;
        rstd[i] = sf;
    }
}

static void layernorm_backward_stats(const cb_kernels *k, double *stats, const float *dout,
                                     const float *inp, const float *w, const float *mean,
                                     const float *rstd, int N, int C) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
        double a = 0.0, b = 0.0;
        for (int c = 0; c < C; c++) {
            double dn = (double)w[c] * d[c];
            a += dn;
            b += dn * (x[c] - mean[i]) * rstd[i];
        }
        stats[2 * i] = a;
        stats[2 * i + 1] = b;
    }
}

static void layernorm_backward_apply(const cb_kernels *k, float *dinp, const double *stats,
                                     const float *dout, const float *inp, const float *w,
                                     const float *mean, const float *rstd, int N, int C,
                                     int Ctot) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        float dmean = (float)(stats[2 * i] / Ctot), dproj = (float)(stats[2 * i + 1] / Ctot);
        float *di = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) di[c] += (w[c] * d[c] - dmean - (x[c] - m) * s * dproj) * s;
    }
}

/* dw, db (C) (+)= (acc) their column sums by row blocks (colsums) */
static void layernorm_param_grads(const cb_kernels *k, float *dw, float *db, const float *dout,
                                  const float *inp, const float *mean, const float *rstd, int N,
                                  int C, int acc) {
    (void)k;
#pragma omp parallel
    colsums(db, dw, dout, inp, mean, rstd, NULL, N, C, acc);
}

static void crossentropy_max(const cb_kernels *k, float *mx, const float *logits, int N, int V,
                             int valid) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *r = logits + (size_t)i * V;
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int j = 0; j < valid; j++) m = r[j] > m ? r[j] : m;
        mx[i] = m;
    }
}

/* exp_approx, as the whole-row kernel: libm's expf does not vectorise and
 * took 330-370 of the 440-530 ms of the smoothed loss's kernels at 1024 x
 * 50260 logits (now 48-63 ms). */
static void crossentropy_exp(const cb_kernels *k, float *stats, float *logits, const float *mx,
                             const int *targets, int v0, int N, int V, int valid) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = logits + (size_t)i * V, sum = 0.0f, m = mx[i];
        int tj = targets ? targets[i] - v0 : -1;
        stats[2 * i + 1] = tj >= 0 && tj < valid ? r[tj] : 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < valid; j++) {
            r[j] = exp_approx(r[j] - m);
            sum += r[j];
        }
        for (int j = valid; j < V; j++) r[j] = 0.0f;
        stats[2 * i] = sum;
    }
}

/* The loss as log(sum) - (logit - max), not -log(p): no underflow to
 * infinity when the target's probability is below float's range. */
static double crossentropy_normalize(const cb_kernels *k, float *losses, float *logits,
                                     const float *stats, const float *mx, int N, int V,
                                     int valid) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = logits + (size_t)i * V, inv = 1.0f / stats[2 * i];
        for (int j = 0; j < valid; j++) r[j] *= inv;
        losses[i] = logf(stats[2 * i]) - (stats[2 * i + 1] - mx[i]);
    }
    return sum_ordered(k, losses, (size_t)N); /* in row order: the same on every rank and every run */
}

static void crossentropy_backward_cols(const cb_kernels *k, float *probs, const int *targets,
                                       int v0, float dloss, int N, int V) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = probs + (size_t)i * V;
        for (int j = 0; j < V; j++) r[j] *= dloss;
        int tj = targets[i] - v0;
        if (tj >= 0 && tj < V) r[tj] -= dloss;
    }
}

static void crossentropy_smooth_stats(const cb_kernels *k, float *st, const float *logits,
                                      const int *targets, int v0, int N, int V, int valid) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *r = logits + (size_t)i * V;
        double s = 0.0; /* a row of V logits: fp32 would lose ~V ulp */
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < valid; j++) s += r[j];
        int tj = targets[i] - v0;
        st[2 * i] = (float)s;
        st[2 * i + 1] = tj >= 0 && tj < valid ? r[tj] : 0.0f;
    }
}

static float row_weight(const int *targets, int i, int ignore, float scale) {
    return ignore >= 0 && targets[i] == ignore ? 0.0f : scale;
}

static void crossentropy_smooth_loss(const cb_kernels *k, float *losses, const float *st,
                                     const int *targets, float eps, int Vtot, int ignore,
                                     float scale, int N) {
    (void)k;
    for (int i = 0; i < N; i++)
        losses[i] = row_weight(targets, i, ignore, scale) *
                    (losses[i] + eps * (st[2 * i + 1] - st[2 * i] / (float)Vtot));
}

static void crossentropy_smooth_backward(const cb_kernels *k, float *probs, const int *targets,
                                         int v0, float dloss, float eps, int Vtot, int ignore,
                                         float scale, int N, int V, int valid) {
    (void)k;
    const float u = eps / (float)Vtot;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = probs + (size_t)i * V, w = row_weight(targets, i, ignore, scale) * dloss;
        for (int j = 0; j < valid; j++) r[j] = w * (r[j] - u);
        for (int j = valid; j < V; j++) r[j] = 0.0f;
        int tj = targets[i] - v0;
        if (tj >= 0 && tj < valid) r[tj] -= w * (1.0f - eps);
    }
}

static void embedding_rows(const cb_kernels *k, float *out, const int *ids, const float *table,
                           int v0, int Vl, int N, int C) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * C;
        int id = ids[i] - v0;
        if (id >= 0 && id < Vl) memcpy(o, table + (size_t)id * C, sizeof(float) * C);
        else memset(o, 0, sizeof(float) * C);
    }
}

static void embedding_rows_backward(const cb_kernels *k, float *dtable, const float *dout,
                                    const int *ids, int v0, int Vl, int N, int C) {
    (void)k;
    for (int i = 0; i < N; i++) {
        int id = ids[i] - v0;
        if (id < 0 || id >= Vl) continue;
        float *we = dtable + (size_t)id * C;
        const float *d = dout + (size_t)i * C;
        for (int c = 0; c < C; c++) we[c] += d[c];
    }
}

static void position_add(const cb_kernels *k, float *out, const float *wpe, int t0, int T, int N,
                         int C) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *pe = wpe + (size_t)((t0 + i) % T) * C;
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] += pe[c];
    }
}

static void position_backward(const cb_kernels *k, float *dwpe, const float *dout, int t0, int T,
                              int N, int C) {
    (void)k;
    for (int i = 0; i < N; i++) {
        float *pe = dwpe + (size_t)((t0 + i) % T) * C;
        const float *d = dout + (size_t)i * C;
        for (int c = 0; c < C; c++) pe[c] += d[c];
    }
}

static void bias_add(const cb_kernels *k, float *out, const float *bias, int N, int OC) {
    (void)k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * OC;
        for (int c = 0; c < OC; c++) o[c] += bias[c];
    }
}

static void bias_backward_k(const cb_kernels *k, float *dbias, const float *dout, int N, int OC) {
    (void)k;
    cb_cpu_bias_backward(dbias, dout, N, OC, 1, NULL);
}

/* Counter-based draws: element i depends on (key, e0 + i) only. */
static void fill_normal(const cb_kernels *k, float *out, size_t n, uint64_t key, uint64_t e0,
                        float sd, float value) {
    (void)k;
#pragma omp parallel for schedule(static) if (n > 4096)
    for (size_t i = 0; i < n; i++) out[i] = sd != 0.0f ? sd * cb_rng_normal_at(key, e0 + i) : value;
}

static void fill_sinusoid(const cb_kernels *k, float *out, size_t n, uint64_t e0, int C) {
    (void)k;
    for (size_t i = 0; i < n; i++) {
        uint64_t e = e0 + i, t = e / (uint64_t)C, j = e % (uint64_t)C;
        double a = (double)t / pow(10000.0, (double)(j - j % 2) / C);
        out[i] = (float)(j % 2 ? cos(a) : sin(a));
    }
}

/* Each thread sums a fixed static range; the partials are added in thread
 * order, so the result depends only on the thread count. */
static double sumsq(const cb_kernels *k, const float *x, size_t n) {
    (void)k;
    double part[256] = {0};
    int nt = 1;
#pragma omp parallel
    {
        int t = omp_get_thread_num();
        nt = omp_get_num_threads();
        size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        if (t < 256) part[t] = s;
    }
    double s = 0.0;
    for (int t = 0; t < nt && t < 256; t++) s += part[t];
    return s;
}

static void scale(const cb_kernels *k, float *x, float s, size_t n) {
    (void)k;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* One element of AdamW: m, v updated in place, the new parameter returned */
static inline float adamw_one(float p, float g, float *m, float *v, float lr, float beta1,
                              float beta2, float eps, float wd, float bc1, float bc2) {
    float mi = beta1 * *m + (1.0f - beta1) * g;
    float vi = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mi;
    *v = vi;
    float pi = p - lr * wd * p;
    return pi - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
}

void cb_cpu_zero(float *x, size_t n) {
#pragma omp parallel if (n > (1u << 20))
    {
        size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        memset(x + n * t / nt, 0, sizeof(float) * (n * (t + 1) / nt - n * t / nt));
    }
}

/* AdamW over elements [i0, i1) */
static inline void adamw_range(float *p, const float *g, float gs, float *m, float *v, size_t i0,
                               size_t i1, float lr, float beta1, float beta2, float eps, float wd,
                               float bc1, float bc2) {
#pragma omp simd
    for (size_t i = i0; i < i1; i++)
        p[i] = adamw_one(p[i], g[i] * gs, m + i, v + i, lr, beta1, beta2, eps, wd, bc1, bc2);
}

/* bf (32) = bf16(x (32)) by cb_bf16_round's arithmetic, stored past the
 * cache where the CPU can (bf 64-byte aligned): a plain store first reads
 * each line it writes, 2 bytes a parameter of the update's 32, for a copy
 * that the next forward reads long after it has left the cache */
static inline void bf16_stream32(uint16_t *bf, const float *x) {
#ifdef __AVX512F__
    __m256i h[2];
    for (int j = 0; j < 2; j++) {
        __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + 16 * j));
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
        h[j] = _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16));
    }
    _mm512_stream_si512((void *)bf, _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1));
#else
    for (int j = 0; j < 32; j++) bf[j] = cb_bf16_round(x[j]);
#endif
}

/* AdamW over [i0, i1) writing bf too: 32-element blocks from the first
 * 64-byte boundary of bf streamed, the ends stored plainly */
static void adamw_bf16_range(float *p, const float *g, float gs, float *m, float *v, uint16_t *bf,
                             size_t i0, size_t i1, float lr, float beta1, float beta2, float eps,
                             float wd, float bc1, float bc2) {
    size_t a = i0;
    while (a < i1 && ((uintptr_t)(bf + a) & 63)) a++;
    size_t b = a + (i1 - a) / 32 * 32;
    for (size_t i = a; i < b; i += 32) {
        adamw_range(p, g, gs, m, v, i, i + 32, lr, beta1, beta2, eps, wd, bc1, bc2);
        bf16_stream32(bf + i, p + i);
    }
    adamw_range(p, g, gs, m, v, i0, a, lr, beta1, beta2, eps, wd, bc1, bc2);
    adamw_range(p, g, gs, m, v, b, i1, lr, beta1, beta2, eps, wd, bc1, bc2);
    for (size_t i = i0; i < a; i++) bf[i] = cb_bf16_round(p[i]);
    for (size_t i = b; i < i1; i++) bf[i] = cb_bf16_round(p[i]);
#ifdef __AVX512F__
    _mm_sfence(); /* this thread's streamed stores land before the region's barrier */
#endif
}

/* The gradient is read as fl(g * gs), the value a separate scaling pass
 * would have stored, so folding the clip into the update changes no bit
 * and saves a read and a write of every gradient. bf (n, may be NULL)
 * receives the new parameters rounded to bf16 in the same pass. Each
 * element's arithmetic is the same in every path (no contraction in ISO
 * C), so the split into threads and blocks changes no bit. */
void cb_cpu_adamw(float *p, const float *g, float gs, float *m, float *v, uint16_t *bf, size_t n,
                  float lr, float beta1, float beta2, float eps, float wd, float bc1, float bc2) {
    if (!bf) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            p[i] = adamw_one(p[i], g[i] * gs, m + i, v + i, lr, beta1, beta2, eps, wd, bc1, bc2);
        return;
    }
#pragma omp parallel
    {
        size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        adamw_bf16_range(p, g, gs, m, v, bf, n * t / nt, n * (t + 1) / nt, lr, beta1, beta2, eps,
                         wd, bc1, bc2);
    }
}

static void adamw(const cb_kernels *k, float *p, const float *g, float gs, float *m, float *v,
                  size_t n, float lr, float beta1, float beta2, float eps, float wd, float bc1,
                  float bc2) {
    (void)k;
    cb_cpu_adamw(p, g, gs, m, v, NULL, n, lr, beta1, beta2, eps, wd, bc1, bc2);
}

static void mul_forward(const cb_kernels *k, float *out, const float *a, const float *b, size_t n) {
    (void)k;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] * b[i];
}

static void mul_backward(const cb_kernels *k, float *da, float *db, const float *a, const float *b,
                         const float *dout, size_t n) {
    (void)k;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = dout[i], ai = a[i]; /* da may alias a's gradient, never a itself */
        da[i] = d * b[i];
        db[i] = d * ai;
    }
}

static void relu_forward(const cb_kernels *k, float *out, const float *inp, size_t n) {
    (void)k;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

static void relu_backward(const cb_kernels *k, float *dinp, const float *inp, const float *dout,
                          size_t n) {
    (void)k;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

static void logistic_forward(const cb_kernels *k, float *losses, const float *logits,
                             const int *labels, int N) {
    (void)k;
    for (int i = 0; i < N; i++) {
        float z = logits[i]; /* log(1 + e^z) without overflow */
        losses[i] = fmaxf(z, 0.0f) + log1pf(expf(-fabsf(z))) - (labels[i] ? z : 0.0f);
    }
}

static void logistic_backward(const cb_kernels *k, float *dlogits, const float *logits,
                              const int *labels, float scale, int N) {
    (void)k;
    for (int i = 0; i < N; i++) {
        float z = logits[i], s = z >= 0 ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
        dlogits[i] = (s - (labels[i] ? 1.0f : 0.0f)) * scale;
    }
}

static const cb_kernels cpu = {
    .name = "cpu",
    .encoder_forward = encoder_forward,
    .encoder_backward = encoder_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
    .head_forward = head_forward,
    .head_backward = head_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .attention_saved = cb_cpu_attention_saved,
    .matmul_backward_dw_rows = matmul_backward_dw_rows,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .gelu_erf_forward = gelu_erf_forward,
    .gelu_erf_backward = gelu_erf_backward,
    .dropout = dropout,
    .residual_forward = residual_forward,
    .crossentropy_forward = crossentropy_forward,
    .crossentropy_backward = crossentropy_backward,
    .layernorm_stats = layernorm_stats,
    .layernorm_apply = layernorm_apply,
    .layernorm_backward_stats = layernorm_backward_stats,
    .layernorm_backward_apply = layernorm_backward_apply,
    .layernorm_param_grads = layernorm_param_grads,
    .crossentropy_max = crossentropy_max,
    .crossentropy_exp = crossentropy_exp,
    .crossentropy_normalize = crossentropy_normalize,
    .crossentropy_backward_cols = crossentropy_backward_cols,
    .crossentropy_smooth_stats = crossentropy_smooth_stats,
    .crossentropy_smooth_loss = crossentropy_smooth_loss,
    .crossentropy_smooth_backward = crossentropy_smooth_backward,
    .embedding_rows = embedding_rows,
    .embedding_rows_backward = embedding_rows_backward,
    .position_add = position_add,
    .position_backward = position_backward,
    .bias_add = bias_add,
    .bias_backward = bias_backward_k,
    .fill_normal = fill_normal,
    .fill_sinusoid = fill_sinusoid,
    .sum = sum_ordered,
    .sumsq = sumsq,
    .scale = scale,
    .adamw = adamw,
    .mul_forward = mul_forward,
    .mul_backward = mul_backward,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .logistic_forward = logistic_forward,
    .logistic_backward = logistic_backward,
};

const cb_kernels *cb_kernels_cpu(void) { return &cpu; }

/* OpenBLAS picks its kernels when it loads: from OPENBLAS_CORETYPE if set,
 * else from the CPU's model number. Both fail on some machines: a pinned
 * core (Haswell's AVX2 kernels, set on shared hosts) forgoes AVX-512, about
 * 2.7x of sgemm here, and Debian's OpenBLAS 0.3.21 does not know newer
 * models (Intel family 6 model 207, Emerald Rapids) and falls back to its
 * SSE3 "Prescott" kernels, 7-9x slower than its AVX-512 ones on the same
 * cores (measured 2026-11-27, 2048^3 sgemm, 2 threads: Prescott 30-43,
 * Haswell 98, SkylakeX 269 GFLOP/s). So cubist names the core from the
 * CPU's feature bits, which do not age: SkylakeX where AVX-512 F, CD, BW,
 * DQ and VL run with the OS saving their state, Haswell where AVX2 and FMA
 * do, else OpenBLAS's own detection; CUBIST_BLAS_CORETYPE pins a core on
 * purpose. The choice is made by re-executing the program once with
 * OPENBLAS_CORETYPE set before main runs, so the cubist binary and every
 * program linking the library run the same kernels, and a PyTorch run by
 * `cubist bench` inherits them. glibc passes (argc, argv, envp) to the
 * constructors of a program. */
static const char *blas_why = "OpenBLAS's detection";

static const char *core_from_cpuid(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return NULL; /* OSXSAVE */
    int fma = (c >> 12) & 1, avx = (c >> 28) & 1;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    unsigned long long xcr0 = ((unsigned long long)hi << 32) | lo;
    a = b = c = d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return NULL;
    unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31);
    if ((xcr0 & 0xe6) == 0xe6 && (b & avx512) == avx512) return "SkylakeX"; /* F DQ CD BW VL */
    if ((xcr0 & 6) == 6 && avx && fma && ((b >> 5) & 1)) return "Haswell";  /* AVX2 */
    return NULL;
}

__attribute__((constructor)) static void choose_blas_core(int argc, char **argv, char **envp) {
    (void)argc, (void)envp;
    const char *want = getenv("CUBIST_BLAS_CORETYPE"), *have = getenv("OPENBLAS_CORETYPE");
    blas_why = want ? "CUBIST_BLAS_CORETYPE" : "chosen by cubist from CPUID";
    if (!want && !(want = core_from_cpuid())) blas_why = "OpenBLAS's detection";
    if (!argv || (want ? (have && !strcmp(want, have)) : !have)) return;
    if (want) setenv("OPENBLAS_CORETYPE", want, 1);
    else unsetenv("OPENBLAS_CORETYPE");
    execv("/proc/self/exe", argv);
}

char *openblas_get_corename(void);

const char *cb_blas_note(void) {
    static char note[96];
    if (!note[0]) snprintf(note, sizeof note, "%s (%s)", openblas_get_corename(), blas_why);
    return note;
}
