/* Every kernel's backward against central finite differences of its forward,
 * and (with --dump DIR) a safetensors file per op for tests/torch/ops_ref.py,
 * which recomputes forward and backward in PyTorch (fp64 autograd).
 *
 * Each case defines L = sum(out * dout) for a random dout; the analytic
 * gradient of every differentiable input comes from the kernel's backward.
 * Dump format, one file per op (<op>.safetensors): inputs as in.<name>
 * (token ids and targets stored as float), the upstream gradient in.dout,
 * outputs as out.<name>, gradients as grad.<name>; sizes in __metadata__
 * (B T C NH N V IC OC, dloss). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"
#include "kernels/kernels.h"
#include "kernels/small_gemm.h"
#include "util/rng.h"

#define MAXT 6

typedef struct op_case op_case;
struct op_case {
    const char *name;
    int n;                    /* tensors: inputs then outputs */
    const char *names[MAXT];  /* "in.x" / "out.y" */
    float *t[MAXT];
    size_t len[MAXT];
    float *grad[MAXT];        /* backward result for differentiable inputs */
    float *dout;              /* same length as t[iout] */
    int iout;                 /* index of the output L is taken over */
    int B, T, C, NH, V, IC, OC;
    int Tk, causal;           /* general attention: key length (0: self-attention), mask */
    float drop;               /* general attention: dropout of the probabilities */
    float dloss;
    void (*fwd)(op_case *);
    void (*bwd)(op_case *);
    float *work, *work2;      /* scratch */
};

static const cb_kernels *K;
static int failures, passes;

static float *randn(cb_rng *r, size_t n, float s) {
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = cb_rng_normal(r) * s;
    return p;
}

static int add(op_case *c, const char *name, float *data, size_t len, int diff) {
    c->names[c->n] = name;
    c->t[c->n] = data;
    c->len[c->n] = len;
    c->grad[c->n] = diff ? calloc(len, sizeof(float)) : NULL;
    return c->n++;
}

static double loss_of(op_case *c) {
    c->fwd(c);
    double s = 0;
    for (size_t i = 0; i < c->len[c->iout]; i++) s += (double)c->t[c->iout][i] * c->dout[i];
    return s;
}

static void zero_grads(op_case *c) {
    for (int i = 0; i < c->n; i++)
        if (c->grad[i]) memset(c->grad[i], 0, sizeof(float) * c->len[i]);
}

/* Central differences at up to 48 coordinates per input, step h. fp32
 * forwards limit the agreement to about 1e-3 relative; 2e-2 leaves room for
 * the curvature of GELU and softmax while still catching any wrong term. */
static void check_fd(op_case *c, float h) {
    zero_grads(c);
    c->fwd(c);
    c->bwd(c);
    cb_rng r;
    cb_rng_seed(&r, 7);
    for (int i = 0; i < c->n; i++) {
        if (!c->grad[i]) continue;
        double worst = 0;
        for (int s = 0; s < 48; s++) {
            size_t j = cb_rng_below(&r, c->len[i]);
            float x = c->t[i][j];
            c->t[i][j] = x + h;
            double lp = loss_of(c);
            c->t[i][j] = x - h;
            double lm = loss_of(c);
            c->t[i][j] = x;
            double fd = (lp - lm) / (2 * h), an = c->grad[i][j];
            double err = fabs(fd - an) / fmax(fmax(fabs(fd), fabs(an)), 1e-2);
            if (err > worst) worst = err;
        }
        int ok = worst <= 2e-2;
        ok ? passes++ : failures++;
        printf("%s %s finite-difference d%s: max rel err %.2e (tol 2e-2)\n", ok ? "PASS" : "FAIL",
               c->name, c->names[i] + 3, worst);
    }
    c->fwd(c); /* leave outputs of the unperturbed inputs for the dump */
}

static void dump(op_case *c, const char *dir) {
    cb_st_entry e[2 * MAXT + 1];
    char names[MAXT][64];
    int n = 0;
    for (int i = 0; i < c->n; i++)
        e[n++] = (cb_st_entry){c->names[i], 1, {(int64_t)c->len[i]}, c->t[i]};
    e[n++] = (cb_st_entry){"in.dout", 1, {(int64_t)c->len[c->iout]}, c->dout};
    for (int i = 0; i < c->n; i++) {
        if (!c->grad[i]) continue;
        snprintf(names[i], sizeof names[i], "grad.%s", c->names[i] + 3);
        e[n++] = (cb_st_entry){names[i], 1, {(int64_t)c->len[i]}, c->grad[i]};
    }
    char v[9][32], path[512];
    const char *keys[9] = {"B", "T", "C", "NH", "V", "IC", "OC", "N", "dloss"};
    int vals[8] = {c->B, c->T, c->C, c->NH, c->V, c->IC, c->OC, c->B * c->T};
    const char *meta[18];
    for (int i = 0; i < 9; i++) {
        if (i < 8) snprintf(v[i], sizeof v[i], "%d", vals[i]);
        else snprintf(v[i], sizeof v[i], "%.9g", c->dloss);
        meta[2 * i] = keys[i];
        meta[2 * i + 1] = v[i];
    }
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, c->name);
    cb_err err;
    if (cb_st_write(path, e, n, meta, 9, &err)) {
        printf("FAIL dump %s: %s\n", c->name, err.msg);
        failures++;
    }
    zero_grads(c);
    c->bwd(c); /* the dump must hold one backward's gradients, not two */
}

/* ---------------------------------------------------------------- ops */

static void enc_fwd(op_case *c) {
    int *ids = (int *)c->work;
    for (int i = 0; i < c->B * c->T; i++) ids[i] = (int)c->t[0][i];
    K->encoder_forward(K, c->t[3], ids, c->t[1], c->t[2], c->B, c->T, c->C);
}
static void enc_bwd(op_case *c) {
    int *ids = (int *)c->work;
    K->encoder_backward(K, c->grad[1], c->grad[2], c->dout, ids, c->B, c->T, c->C);
}

static void ln_fwd(op_case *c) {
    int N = c->B * c->T;
    K->layernorm_forward(K, c->t[3], c->work, c->work + N, c->t[0], c->t[1], c->t[2], N, c->C);
}
static void ln_bwd(op_case *c) {
    int N = c->B * c->T;
    K->layernorm_backward(K, c->grad[0], c->grad[1], c->grad[2], c->dout, c->t[0], c->t[1], c->work,
                          c->work + N, N, c->C, 1);
}

static void mm_fwd(op_case *c) {
    K->matmul_forward(K, c->t[3], c->t[0], c->t[1], c->t[2], c->B * c->T, c->IC, c->OC);
}
static void mm_bwd(op_case *c) {
    K->matmul_backward(K, c->grad[0], c->grad[1], c->grad[2], c->dout, c->t[0], c->t[1], c->B * c->T,
                       c->IC, c->OC, 1);
}

static void head_fwd(op_case *c) {
    K->head_forward(K, c->t[2], c->t[0], c->t[1], c->B * c->T, c->C, c->V);
}
static void head_bwd(op_case *c) {
    K->head_backward(K, c->grad[0], c->grad[1], c->dout, c->t[0], c->t[1], c->B * c->T, c->C, c->V,
                     1);
}

static void att_fwd(op_case *c) {
    cb_attn a = cb_attn_self(c->B, c->T, c->C, c->NH, 1, NULL);
    K->attention_forward(K, &a, c->t[1], c->t[2], c->t[0], c->t[0]);
}
static void att_bwd(op_case *c) {
    cb_attn a = cb_attn_self(c->B, c->T, c->C, c->NH, 1, NULL);
    K->attention_backward(K, &a, c->grad[0], c->grad[0], c->work, c->dout, c->t[0], c->t[0],
                          c->t[2]);
}

/* General attention: self-attention on in.qkv with in.lens, or
 * cross-attention of in.q (B,T,C) over in.kv (B,Tk,2C) with in.qlen,
 * in.klen; work2 holds the lengths as ints (queries, then keys). */
static cb_attn att_general(op_case *c) {
    const int *len = (const int *)c->work2;
    cb_attn a = cb_attn_self(c->B, c->T, c->C, c->NH, c->causal, len);
    if (c->Tk) a.Tk = c->Tk, a.ldq = c->C, a.ldkv = 2 * c->C, a.koff = 0, a.voff = c->C;
    if (c->Tk) a.klen = len + c->B;
    if (c->drop > 0) /* a piece at sequence 1, head 1 of 2 NH */
        a.drop = c->drop, a.drop_key = 0x5eed, a.b0 = 1, a.h0 = 1, a.NHg = 2 * c->NH;
    int *w = (int *)c->work2, nt = c->Tk ? 2 : 1; /* the length tensors precede out.out */
    for (int s = 0; s < nt; s++)
        for (int b = 0; b < c->B; b++) w[s * c->B + b] = (int)c->t[c->iout - nt + s][b];
    return a;
}
static void attg_fwd(op_case *c) {
    cb_attn a = att_general(c);
    K->attention_forward(K, &a, c->t[c->iout], c->t[c->iout + 1], c->t[0],
                         c->Tk ? c->t[1] : c->t[0]);
}
static void attg_bwd(op_case *c) {
    cb_attn a = att_general(c);
    float *dkv = c->Tk ? c->grad[1] : c->grad[0];
    K->attention_backward(K, &a, c->grad[0], dkv, c->work, c->dout, c->t[0],
                          c->Tk ? c->t[1] : c->t[0], c->t[c->iout + 1]);
}

static void gelu_fwd(op_case *c) { K->gelu_forward(K, c->t[1], c->t[0], c->len[0]); }
static void gelu_bwd(op_case *c) { K->gelu_backward(K, c->grad[0], c->t[0], c->dout, c->len[0]); }

/* losses = crossentropy(logits); L = sum(losses * dout) with dout = dloss
 * everywhere, which is what the kernel's backward differentiates. */
static void xent_fwd(op_case *c) {
    int N = c->B * c->T;
    int *tg = (int *)c->work;
    for (int i = 0; i < N; i++) tg[i] = (int)c->t[1][i];
    memcpy(c->t[3], c->t[0], sizeof(float) * c->len[0]);
    K->crossentropy_forward(K, c->t[2], c->t[3], tg, N, c->V);
}
static void xent_bwd(op_case *c) {
    int N = c->B * c->T;
    xent_fwd(c);
    K->crossentropy_backward(K, c->t[3], (int *)c->work, c->dloss, N, c->V);
    for (size_t i = 0; i < c->len[0]; i++) c->grad[0][i] += c->t[3][i];
    xent_fwd(c);
}

/* The recommendation kernels (NCF). */
static void mul_fwd(op_case *c) { K->mul_forward(K, c->t[2], c->t[0], c->t[1], c->len[0]); }
static void mul_bwd(op_case *c) {
    K->mul_backward(K, c->grad[0], c->grad[1], c->t[0], c->t[1], c->dout, c->len[0]);
}

static void relu_fwd(op_case *c) { K->relu_forward(K, c->t[1], c->t[0], c->len[0]); }
static void relu_bwd(op_case *c) { K->relu_backward(K, c->grad[0], c->t[0], c->dout, c->len[0]); }

static void lookup_fwd(op_case *c) {
    int *ids = (int *)c->work, N = c->B * c->T;
    for (int i = 0; i < N; i++) ids[i] = (int)c->t[0][i];
    K->embedding_rows(K, c->t[2], ids, c->t[1], 0, c->V, N, c->C);
}
static void lookup_bwd(op_case *c) {
    K->embedding_rows_backward(K, c->grad[1], c->dout, (int *)c->work, 0, c->V, c->B * c->T,
                               c->C);
}

/* losses of logits against 0/1 labels; L = sum(losses * dloss) */
static void logistic_fwd(op_case *c) {
    int *y = (int *)c->work, N = c->B * c->T;
    for (int i = 0; i < N; i++) y[i] = (int)c->t[1][i];
    K->logistic_forward(K, c->t[2], c->t[0], y, N);
}
static void logistic_bwd(op_case *c) {
    int N = c->B * c->T;
    float *d = c->work2;
    K->logistic_backward(K, d, c->t[0], (int *)c->work, c->dloss, N);
    for (int i = 0; i < N; i++) c->grad[0][i] += d[i];
}

/* The split operators' kernels (ops.c) over one shard (Ctot = C, the whole
 * vocabulary): the same LayerNorm and cross-entropy, checked the same way;
 * the layout tests check them split across ranks against the serial layout. */
static void ln_split_fwd(op_case *c) {
    int N = c->B * c->T;
    double *st = (double *)(c->work + 2 * N);
    K->layernorm_stats(K, st, c->t[0], N, c->C);
    K->layernorm_apply(K, c->t[3], c->work, c->work + N, c->t[0], c->t[1], c->t[2], st, N, c->C,
                       c->C);
}
static void ln_split_bwd(op_case *c) {
    int N = c->B * c->T;
    double *st = (double *)(c->work + 2 * N);
    K->layernorm_param_grads(K, c->grad[1], c->grad[2], c->dout, c->t[0], c->work, c->work + N, N,
                             c->C, 1);
    K->layernorm_backward_stats(K, st, c->dout, c->t[0], c->t[1], c->work, c->work + N, N, c->C);
    K->layernorm_backward_apply(K, c->grad[0], st, c->dout, c->t[0], c->t[1], c->work, c->work + N,
                                N, c->C, c->C);
}
static void xent_split_fwd(op_case *c) {
    int N = c->B * c->T;
    int *tg = (int *)c->work;
    float *mx = c->work + N, *st = mx + N;
    for (int i = 0; i < N; i++) tg[i] = (int)c->t[1][i];
    memcpy(c->t[3], c->t[0], sizeof(float) * c->len[0]);
    K->crossentropy_max(K, mx, c->t[3], N, c->V, c->V);
    K->crossentropy_exp(K, st, c->t[3], mx, tg, 0, N, c->V, c->V);
    K->crossentropy_normalize(K, c->t[2], c->t[3], st, mx, N, c->V, c->V);
}
static void xent_split_bwd(op_case *c) {
    int N = c->B * c->T;
    xent_split_fwd(c);
    K->crossentropy_backward_cols(K, c->t[3], (int *)c->work, 0, c->dloss, N, c->V);
    for (size_t i = 0; i < c->len[0]; i++) c->grad[0][i] += c->t[3][i];
    xent_split_fwd(c);
}

/* The same with label smoothing 0.1 and targets 3 weighted 0, the others
 * 1.3 (tests/torch/ops_ref.py's SMOOTH_*): the statistics from the logits
 * first, then the cross-entropy, then the smoothed, weighted losses. */
enum { SMOOTH_IGNORE = 3 };
static const float SMOOTH_EPS = 0.1f, SMOOTH_SCALE = 1.3f;
static void xent_smooth_fwd(op_case *c) {
    int N = c->B * c->T;
    float *sm = c->work + 4 * N;
    xent_split_fwd(c); /* targets into work, the losses, the probabilities */
    K->crossentropy_smooth_stats(K, sm, c->t[0], (int *)c->work, 0, N, c->V, c->V);
    K->crossentropy_smooth_loss(K, c->t[2], sm, (int *)c->work, SMOOTH_EPS, c->V, SMOOTH_IGNORE,
                                SMOOTH_SCALE, N);
}
static void xent_smooth_bwd(op_case *c) {
    int N = c->B * c->T;
    xent_smooth_fwd(c);
    K->crossentropy_smooth_backward(K, c->t[3], (int *)c->work, 0, c->dloss, SMOOTH_EPS, c->V,
                                    SMOOTH_IGNORE, SMOOTH_SCALE, N, c->V, c->V);
    for (size_t i = 0; i < c->len[0]; i++) c->grad[0][i] += c->t[3][i];
    xent_smooth_fwd(c);
}

static float *ids(cb_rng *r, size_t n, int V) {
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = (float)cb_rng_below(r, V);
    return p;
}

static void run(op_case *c, cb_rng *r, float h, const char *dir) {
    c->dout = randn(r, c->len[c->iout], 1.0f);
    if (c->dloss != 0)
        for (size_t i = 0; i < c->len[c->iout]; i++) c->dout[i] = c->dloss;
    check_fd(c, h);
    if (dir) dump(c, dir);
    for (int i = 0; i < c->n; i++) {
        free(c->t[i]);
        free(c->grad[i]);
    }
    free(c->dout);
    free(c->work);
}

/* A cross-entropy case: logits (N,V), targets -> losses (N), probs (N,V);
 * work floats of scratch; ign >= 0: every fifth target is ign. */
static void run_xent(op_case c, cb_rng *r, size_t work, const char *dir, int ign) {
    size_t N = (size_t)c.B * c.T, NV = N * c.V;
    add(&c, "in.logits", randn(r, NV, 2), NV, 1);
    add(&c, "in.targets", ids(r, N, c.V), N, 0);
    for (size_t i = 0; ign >= 0 && i < N; i += 5) c.t[1][i] = (float)ign;
    c.iout = add(&c, "out.losses", calloc(N, 4), N, 0);
    add(&c, "out.probs", calloc(NV, 4), NV, 0);
    c.work = calloc(work, sizeof(float));
    run(&c, r, 1e-2f, dir);
}

/* Bidirectional padded self-attention over 3 sequences: a whole one, an
 * empty one, a short one. drop > 0: with dropout of the probabilities, a
 * fixed mask, so the finite differences see the function the backward
 * differentiates (not dumped: test_bert checks the masks against PyTorch). */
static void run_padded(const char *name, float drop, int T, int C, int NH, cb_rng *r,
                       const char *dir) {
    op_case ap = {.name = name, .B = 3, .T = T, .C = C, .NH = NH, .drop = drop, .fwd = attg_fwd,
                  .bwd = attg_bwd};
    float lens[3] = {(float)T, 0, 3};
    size_t n3 = (size_t)3 * T * C, na = (size_t)3 * NH * T * T, nk = drop > 0 ? 2 * na : na;
    add(&ap, "in.qkv", randn(r, 3 * n3, 1), 3 * n3, 1);
    add(&ap, "in.lens", memcpy(malloc(sizeof lens), lens, sizeof lens), 3, 0);
    ap.iout = add(&ap, "out.out", calloc(n3, 4), n3, 0);
    add(&ap, "out.att", calloc(nk, 4), nk, 0); /* with dropout, the dropped copy too */
    ap.work = calloc(na, sizeof(float));
    ap.work2 = calloc(3, sizeof(int));
    run(&ap, r, 1e-2f, drop > 0 ? NULL : dir);
    free(ap.work2);
}

/* The erf GELU (a rational erf, not libm's erff) against x Phi(x) and its
 * derivative in double over a 1e-4 grid of [-12, 12]: the error is
 * |x|/2 x erf's (< 5e-7) plus a few roundings of the result, so the
 * bound is 3e-7 (|x| + 1) absolute (measured 2.1e-7; the same formula
 * with libm's erff 8e-8). */
static void check_gelu_erf(void) {
    size_t n = 240001;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    float *one = malloc(sizeof(float) * n), *dy = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = -12.0f + 1e-4f * (float)i, one[i] = 1.0f;
    K->gelu_erf_forward(K, y, x, n);
    K->gelu_erf_backward(K, dy, x, one, n);
    double wf = 0, wb = 0;
    for (size_t i = 0; i < n; i++) {
        double v = x[i], cdf = 0.5 * (1 + erf(v * M_SQRT1_2)), b = 1 + fabs(v);
        double pdf = exp(-0.5 * v * v) / sqrt(2 * M_PI);
        wf = fmax(wf, fabs(y[i] - v * cdf) / b);
        wb = fmax(wb, fabs(dy[i] - (cdf + v * pdf)) / b);
    }
    for (int d = 0; d < 2; d++) {
        double w = d ? wb : wf;
        int ok = w <= 3e-7;
        ok ? passes++ : failures++;
        printf("%s gelu_erf %s against libm's erf in double, x in [-12, 12]: max |err|/(1+|x|) "
               "%.2e (tol 3e-7)\n", ok ? "PASS" : "FAIL", d ? "backward" : "forward", w);
    }
    free(x), free(y), free(one), free(dy);
}

/* Dropout's kernel (vectorised, integer threshold) drops exactly the
 * elements the definition in kernels.h names: U(key, r H + c) / 2^24 < p
 * by cb_rng_uniform_at, at an offset block (row0 5, col0 3, H 40) */
static void check_dropout(void) {
    int rows = 7, ncol = 13, ld = 16, H = 40, bad = 0, kept = 0;
    float p = 0.3f, s = 1.0f / (1.0f - p), x[7 * 16], y[7 * 16];
    uint64_t key = cb_rng_subkey(cb_rng_key(9, "dropout.0"), 4);
    for (int i = 0; i < rows * ld; i++) x[i] = (float)(i + 1);
    K->dropout(K, y, x, rows, ncol, ld, 5, 3, H, key, p);
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < ncol; c++) {
            int o = i * ld + c;
            float want = cb_rng_uniform_at(key, (uint64_t)(5 + i) * H + 3 + c) >= p ? x[o] * s : 0;
            bad += y[o] != want, kept += y[o] != 0;
        }
    int ok = !bad && kept > 0 && kept < rows * ncol;
    ok ? passes++ : failures++;
    printf("%s dropout kernel against cb_rng_uniform_at: %d of %d differ, %d kept\n",
           ok ? "PASS" : "FAIL", bad, rows * ncol, kept);
}

/* The column sums (a bias's gradient with its bf16 copy, LayerNorm's dw
 * and db, alone and with its dinp, accumulating and not) by row blocks
 * (src/kernels/cpu.c, colsums): the same bits on 1, 2, 3 and 5 threads,
 * and each sum against double within N 2^-24 sum|terms| (fp32 sums of N
 * terms in any order), on shapes below, at and across the 16 row blocks
 * and the 2048-column tiles. */
typedef struct cs_out { float *db, *dw, *dx; uint16_t *h; } cs_out;

static void cs_run(int N, int C, int acc, const float *d, const float *x, const float *w,
                   const float *mean, const float *rstd, cs_out *o) {
    for (int i = 0; i < C; i++) o[0].db[i] = o[1].db[i] = o[2].db[i] = acc ? 0.5f : 9.0f;
    for (int i = 0; i < C; i++) o[1].dw[i] = o[2].dw[i] = acc ? -0.25f : 9.0f;
    for (size_t i = 0; i < (size_t)N * C; i++) o[2].dx[i] = 0.125f;
    cb_cpu_bias_backward(o[0].db, d, N, C, acc, o[0].h);
    K->layernorm_param_grads(K, o[1].dw, o[1].db, d, x, mean, rstd, N, C, acc);
    K->layernorm_backward(K, o[2].dx, o[2].dw, o[2].db, d, x, w, mean, rstd, N, C, acc);
}

static void check_colsums(cb_rng *r) {
    static const int shapes[][2] = {{1, 5}, {10, 12}, {16, 768}, {17, 33}, {257, 2049}, {300, 4100}};
    static const int threads[] = {1, 2, 3, 5};
    int was = omp_get_max_threads(), bitdiff = 0, n = 0;
    double worst = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int acc = 0; acc < 2; acc++) {
            int N = shapes[s][0], C = shapes[s][1];
            size_t nc = (size_t)N * C;
            float *d = randn(r, nc, 1), *x = randn(r, nc, 1), *w = randn(r, C, 1);
            float *mean = randn(r, N, 0.1f), *rstd = malloc(sizeof(float) * N);
            for (int i = 0; i < N; i++) rstd[i] = 0.5f + 0.01f * (float)(i % 7);
            cs_out o[4][3];
            for (int t = 0; t < 4; t++)
                for (int k = 0; k < 3; k++)
                    o[t][k] = (cs_out){malloc(4 * C), malloc(4 * C), malloc(4 * nc), malloc(2 * nc)};
            for (int t = 0; t < 4; t++) {
                omp_set_num_threads(threads[t]);
                cs_run(N, C, acc, d, x, w, mean, rstd, o[t]);
            }
            omp_set_num_threads(was);
            for (int t = 1; t < 4; t++) {
                for (int k = 0; k < 3; k++) bitdiff += memcmp(o[t][k].db, o[0][k].db, 4 * C) != 0;
                for (int k = 1; k < 3; k++) bitdiff += memcmp(o[t][k].dw, o[0][k].dw, 4 * C) != 0;
                bitdiff += memcmp(o[t][0].h, o[0][0].h, 2 * nc) != 0;
                bitdiff += memcmp(o[t][2].dx, o[0][2].dx, 4 * nc) != 0;
            }
            for (int c = 0; c < C; c++) {
                double sb = acc ? 0.5 : 0, sw = acc ? -0.25 : 0, mb = fabs(sb), mw = fabs(sw);
                for (int i = 0; i < N; i++) {
                    double dv = d[(size_t)i * C + c], nv = ((double)x[(size_t)i * C + c] - mean[i]) * rstd[i];
                    sb += dv, mb += fabs(dv), sw += nv * dv, mw += fabs(nv * dv);
                }
                for (int k = 0; k < 3; k++)
                    worst = fmax(worst, fabs(o[0][k].db[c] - sb) / ((N + 2) * 0x1p-24 * mb + 1e-30));
                for (int k = 1; k < 3; k++)
                    worst = fmax(worst, fabs(o[0][k].dw[c] - sw) / ((N + 4) * 0x1p-24 * mw + 1e-30));
            }
            for (size_t i = 0; i < nc; i++) bitdiff += o[0][0].h[i] != cb_bf16_round(d[i]);
            n++;
            for (int t = 0; t < 4; t++)
                for (int k = 0; k < 3; k++) free(o[t][k].db), free(o[t][k].dw), free(o[t][k].dx), free(o[t][k].h);
            free(d), free(x), free(w), free(mean), free(rstd);
        }
    int ok = !bitdiff && worst <= 1.0;
    ok ? passes++ : failures++;
    printf("%s column sums by row blocks (bias with its bf16 copy, LayerNorm's dw, db, dinp), %d "
           "shapes x acc: %d differ in bits across 1, 2, 3, 5 threads; max |err| / (N 2^-24 "
           "sum|terms|) %.3f (tol 1)\n", ok ? "PASS" : "FAIL", n, bitdiff, worst);
}

/* Attention's small products (cb_small_gemm) against a double-precision
 * product, every orientation, on shapes around its 16-wide vectors,
 * 64-column panels, 4-row tiles and 16 x 16 transposes (1..70 in each
 * dimension, K 0 included), then BERT-base's 128 x 128 x 64 and one past
 * its own limit (OpenBLAS's); row strides wider than the rows, whose
 * extra columns must stay untouched. Per element |c - ref| <= K 2^-24
 * sum_k |a b| + tiny: fp32 sums of K terms in any order. */
static double small_gemm_case(cb_rng *r, int ta, int tb, int M, int N, int Kd, float alpha) {
    int lda = (ta ? M : Kd) + 3, ldb = (tb ? Kd : N) + 2, ldc = N + 5;
    size_t na = (size_t)(ta ? Kd : M) * lda + 1, nb = (size_t)(tb ? N : Kd) * ldb + 1;
    float *a = randn(r, na, 1), *b = randn(r, nb, 1), *c = malloc(sizeof(float) * M * ldc);
    for (int i = 0; i < M * ldc; i++) c[i] = 7.0f;
    cb_small_gemm(ta, tb, M, N, Kd, alpha, a, lda, b, ldb, c, ldc);
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < Kd && j < N; k++) {
                double x = ta ? a[(size_t)k * lda + i] : a[(size_t)i * lda + k];
                double y = tb ? b[(size_t)j * ldb + k] : b[(size_t)k * ldb + j];
                ref += alpha * x * y, mag += fabs(alpha * x * y);
            }
            if (j >= N) ref = 7.0;
            double e = fabs(c[i * ldc + j] - ref) / ((Kd + 1) * 0x1p-24 * mag + 1e-30);
            worst = fmax(worst, e);
        }
    free(a), free(b), free(c);
    return worst;
}

static void check_small_gemm(cb_rng *r) {
    static const int dims[] = {1, 3, 4, 15, 16, 17, 33, 64, 65, 70};
    double worst = 0;
    int n = 0, nd = (int)(sizeof dims / sizeof *dims);
    for (int o = 0; o < 4; o++)
        for (int x = 0; x < nd; x++)
            for (int y = 0; y < nd; y++) {
                int M = dims[x], N = dims[y], Kd = dims[(x + 2 * y + o) % nd] - (x == y);
                float alpha = x & 1 ? 0.125f : 1.0f;
                worst = fmax(worst, small_gemm_case(r, o & 1, o >> 1, M, N, Kd, alpha));
                n++;
            }
    for (int o = 0; o < 4; o++, n += 2) {
        worst = fmax(worst, small_gemm_case(r, o & 1, o >> 1, 128, 128, 64, 1.0f));
        worst = fmax(worst, small_gemm_case(r, o & 1, o >> 1, 257, 64, 128, 1.0f));
    }
    int ok = worst <= 1.0;
    ok ? passes++ : failures++;
    printf("%s cb_small_gemm against double, %d shapes x orientations: max |err| / (K 2^-24 "
           "sum|ab|) %.3f (tol 1), padding columns untouched\n", ok ? "PASS" : "FAIL", n, worst);
}

int main(int argc, char **argv) {
    const char *dir = argc == 3 && !strcmp(argv[1], "--dump") ? argv[2] : NULL;
    K = cb_kernels_cpu();
    cb_rng r;
    cb_rng_seed(&r, 42);
    int B = 2, T = 5, C = 12, NH = 3, V = 11, N = B * T;

    op_case enc = {.name = "encoder", .B = B, .T = T, .C = C, .fwd = enc_fwd, .bwd = enc_bwd};
    add(&enc, "in.inp", ids(&r, N, V), N, 0);
    add(&enc, "in.wte", randn(&r, (size_t)V * C, 1), (size_t)V * C, 1);
    add(&enc, "in.wpe", randn(&r, (size_t)T * C, 1), (size_t)T * C, 1);
    enc.iout = add(&enc, "out.out", calloc(N * C, 4), N * C, 0);
    enc.work = calloc(N, sizeof(int));
    enc.V = V;
    run(&enc, &r, 1e-2f, dir);

    op_case ln = {.name = "layernorm", .B = B, .T = T, .C = C, .fwd = ln_fwd, .bwd = ln_bwd};
    add(&ln, "in.inp", randn(&r, N * C, 1), N * C, 1);
    add(&ln, "in.w", randn(&r, C, 1), C, 1);
    add(&ln, "in.b", randn(&r, C, 1), C, 1);
    ln.iout = add(&ln, "out.out", calloc(N * C, 4), N * C, 0);
    ln.work = calloc(2 * N, sizeof(float));
    run(&ln, &r, 1e-2f, dir);

    op_case lns = {.name = "layernorm_split", .B = B, .T = T, .C = C, .fwd = ln_split_fwd,
                   .bwd = ln_split_bwd};
    add(&lns, "in.inp", randn(&r, N * C, 1), N * C, 1);
    add(&lns, "in.w", randn(&r, C, 1), C, 1);
    add(&lns, "in.b", randn(&r, C, 1), C, 1);
    lns.iout = add(&lns, "out.out", calloc(N * C, 4), N * C, 0);
    lns.work = calloc(2 * N + 4 * N, sizeof(float)); /* mean, rstd, then 2N doubles */
    run(&lns, &r, 1e-2f, dir);

    int IC = 7, OC = 9;
    op_case mm = {.name = "matmul", .B = B, .T = T, .IC = IC, .OC = OC, .fwd = mm_fwd,
                  .bwd = mm_bwd};
    add(&mm, "in.inp", randn(&r, N * IC, 1), N * IC, 1);
    add(&mm, "in.w", randn(&r, IC * OC, 1), IC * OC, 1);
    add(&mm, "in.bias", randn(&r, OC, 1), OC, 1);
    mm.iout = add(&mm, "out.out", calloc(N * OC, 4), N * OC, 0);
    run(&mm, &r, 1e-2f, dir);

    op_case hd = {.name = "head", .B = B, .T = T, .C = C, .V = V, .fwd = head_fwd,
                  .bwd = head_bwd};
    add(&hd, "in.inp", randn(&r, N * C, 1), N * C, 1);
    add(&hd, "in.w", randn(&r, V * C, 1), V * C, 1);
    hd.iout = add(&hd, "out.out", calloc(N * V, 4), N * V, 0);
    run(&hd, &r, 1e-2f, dir);

    op_case at = {.name = "attention", .B = B, .T = T, .C = C, .NH = NH, .fwd = att_fwd,
                  .bwd = att_bwd};
    add(&at, "in.qkv", randn(&r, N * 3 * C, 1), N * 3 * C, 1);
    at.iout = add(&at, "out.out", calloc(N * C, 4), N * C, 0);
    add(&at, "out.att", calloc((size_t)B * NH * T * T, 4), (size_t)B * NH * T * T, 0);
    at.work = calloc((size_t)B * NH * T * T, sizeof(float));
    run(&at, &r, 1e-2f, dir);

    run_padded("attention_padded", 0, T, C, NH, &r, dir);
    run_padded("attention_padded_dropout", 0.3f, T, C, NH, &r, dir);

    size_t n3 = (size_t)3 * T * C;
    /* causal cross-attention, 5 queries over 7 keys, padded on both sides */
    int Tk = 7;
    op_case ac = {.name = "attention_cross", .B = 3, .T = T, .Tk = Tk, .C = C, .NH = NH,
                  .causal = 1, .fwd = attg_fwd, .bwd = attg_bwd};
    float ql[3] = {(float)T, 2, 0}, kl[3] = {(float)Tk, 3, 4};
    size_t nk = (size_t)3 * Tk * 2 * C, na = (size_t)3 * NH * T * Tk;
    add(&ac, "in.q", randn(&r, n3, 1), n3, 1);
    add(&ac, "in.kv", randn(&r, nk, 1), nk, 1);
    add(&ac, "in.qlen", memcpy(malloc(sizeof ql), ql, sizeof ql), 3, 0);
    add(&ac, "in.klen", memcpy(malloc(sizeof kl), kl, sizeof kl), 3, 0);
    ac.iout = add(&ac, "out.out", calloc(n3, 4), n3, 0);
    add(&ac, "out.att", calloc(na, 4), na, 0);
    ac.work = calloc(na, sizeof(float));
    ac.work2 = calloc(6, sizeof(int));
    run(&ac, &r, 1e-2f, dir);
    free(ac.work2);

    op_case ge = {.name = "gelu", .B = B, .T = T, .C = C, .fwd = gelu_fwd, .bwd = gelu_bwd};
    add(&ge, "in.inp", randn(&r, N * C, 2), N * C, 1);
    ge.iout = add(&ge, "out.out", calloc(N * C, 4), N * C, 0);
    run(&ge, &r, 1e-3f, dir);

    op_case xe = {.name = "crossentropy", .B = B, .T = T, .V = V, .dloss = 0.37f,
                  .fwd = xent_fwd, .bwd = xent_bwd};
    run_xent(xe, &r, N, dir, -1); /* work: targets */
    op_case xs = {.name = "crossentropy_split", .B = B, .T = T, .V = V, .dloss = 0.37f,
                  .fwd = xent_split_fwd, .bwd = xent_split_bwd};
    run_xent(xs, &r, 4 * (size_t)N, dir, -1); /* work: targets, mx, 2N stats */
    op_case xm = {.name = "crossentropy_smooth", .B = B, .T = T, .V = V, .dloss = 0.37f,
                  .fwd = xent_smooth_fwd, .bwd = xent_smooth_bwd};
    run_xent(xm, &r, 6 * (size_t)N, dir, SMOOTH_IGNORE); /* + 2N smoothing statistics */

    op_case mu = {.name = "mul", .B = B, .T = T, .C = C, .fwd = mul_fwd, .bwd = mul_bwd};
    add(&mu, "in.a", randn(&r, N * C, 1), N * C, 1);
    add(&mu, "in.b", randn(&r, N * C, 1), N * C, 1);
    mu.iout = add(&mu, "out.out", calloc(N * C, 4), N * C, 0);
    run(&mu, &r, 1e-2f, dir);

    op_case re = {.name = "relu", .B = B, .T = T, .C = C, .fwd = relu_fwd, .bwd = relu_bwd};
    float *rx = randn(&r, N * C, 1); /* away from the kink, where differences are one-sided */
    for (int i = 0; i < N * C; i++) rx[i] += rx[i] >= 0 ? 0.1f : -0.1f;
    add(&re, "in.inp", rx, N * C, 1);
    re.iout = add(&re, "out.out", calloc(N * C, 4), N * C, 0);
    run(&re, &r, 1e-2f, dir);

    op_case lk = {.name = "lookup", .B = B, .T = T, .C = C, .V = V, .fwd = lookup_fwd,
                  .bwd = lookup_bwd};
    add(&lk, "in.ids", ids(&r, N, V), N, 0);
    add(&lk, "in.table", randn(&r, (size_t)V * C, 1), (size_t)V * C, 1);
    lk.iout = add(&lk, "out.out", calloc(N * C, 4), N * C, 0);
    lk.work = calloc(N, sizeof(int));
    run(&lk, &r, 1e-2f, dir);

    op_case lg = {.name = "logistic", .B = B, .T = T, .dloss = 0.29f, .fwd = logistic_fwd,
                  .bwd = logistic_bwd};
    add(&lg, "in.logits", randn(&r, N, 3), N, 1);
    add(&lg, "in.labels", ids(&r, N, 2), N, 0);
    lg.iout = add(&lg, "out.losses", calloc(N, 4), N, 0);
    lg.work = calloc(N, sizeof(int));
    lg.work2 = calloc(N, sizeof(float));
    run(&lg, &r, 1e-2f, dir);
    free(lg.work2);

    check_gelu_erf();
    check_dropout();
    check_small_gemm(&r);
    check_colsums(&r);
    (void)passes;
    return failures != 0;
}
