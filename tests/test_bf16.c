/* The bf16 kernel table against the fp32 CPU table, kernel by kernel.
 *
 * Tolerances. bf16 keeps 8 significant bits, so rounding an fp32 operand
 * has relative error at most u = 2^-8 (half a unit in the 8th bit), and a product of two rounded
 * operands at most 2u + u^2. Accumulating K such products in fp32 adds at
 * most K 2^-24 relative to sum |a||b| per order, two orders compared. So
 * element by element, with A = sum_k |a_ik||b_kj| (computed by the fp32
 * kernel itself on |inputs|):
 *   bf16 vs fp32:               |d| <= (2^-7 + 2^-16 + 2K 2^-24) A + 2^-23 |c0|
 *   bf16 vs bf16-rounded fp32:  |d| <= 2K 2^-24 A + 2^-23 |c0|
 * (c0: the value an accumulating output starts from). The second is the
 * reference path: the fp32 kernel on operands rounded to bf16 first forms
 * the same exact products (8 x 8 bits fit in fp32's 24), so oneDNN and it
 * differ only in summation order. Each case must also differ from fp32
 * somewhere, or it did not run in bf16. Attention has its own bounds
 * below. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"
#include "kernels/kernels.h"
#include "util/rng.h"

#define MAXIO 4
#define U 0x1p-8 /* bf16 keeps 8 significant bits: round to nearest errs by at most 2^-8 relative */

static int failures, passes;
static cb_rng rng;

static void report(int ok, const char *what, double worst) {
    printf("%s %s (worst error / bound %.3g)\n", ok ? "PASS" : "FAIL", what, worst);
    if (ok) passes++;
    else failures++;
}

static float *randn(size_t n, float s) {
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = cb_rng_normal(&rng) * s;
    return p;
}

static float round_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A product kernel called on inputs in[], writing outputs out[] that start
 * from c0[] (accumulating outputs) */
typedef struct gcase {
    const char *name;
    int nin, nout, K;
    size_t in_n[MAXIO], out_n[MAXIO];
    int acc[MAXIO]; /* output accumulates: starts from random values */
    int bias_in, bias_out; /* the bias input, the dbias output (+1; 0 none): fp32 on both paths */
    void (*run)(const cb_kernels *k, float **in, float **out, const int *dims);
    int dims[4];
    int weight; /* the weight input (+1; 0 none) */
} gcase;

static float **alloc_outs(const gcase *c, float **c0, int absolute) {
    float **o = calloc(MAXIO, sizeof *o);
    for (int i = 0; i < c->nout; i++) {
        o[i] = calloc(c->out_n[i], sizeof(float));
        if (!c->acc[i]) continue;
        for (size_t j = 0; j < c->out_n[i]; j++) o[i][j] = absolute ? fabsf(c0[i][j]) : c0[i][j];
    }
    return o;
}

static float keep(float f) { return f; }

/* the inputs through f; a bias keeps its values under rounding */
static float **transform(const gcase *c, float **in, float (*f)(float)) {
    float **t = calloc(MAXIO, sizeof *t);
    for (int i = 0; i < c->nin; i++) {
        float (*g)(float) = f == round_bf16 && c->bias_in == i + 1 ? keep : f;
        t[i] = malloc(sizeof(float) * c->in_n[i]);
        for (size_t j = 0; j < c->in_n[i]; j++) t[i][j] = g(in[i][j]);
    }
    return t;
}

static void free_all(float **p, int n) {
    for (int i = 0; i < n; i++) free(p[i]);
    free(p);
}

/* worst |got - want| / (rel A + 2^-23 |c0|) over the outputs (dbias
 * left out when skip_dbias: the reference rounded the dout it sums); *differs
 * says whether any element differs at all */
static double worst_ratio(const gcase *c, float **got, float **want, float **A, float **c0,
                          double rel, int skip_dbias, int *differs) {
    double worst = 0;
    for (int i = 0; i < c->nout; i++)
        for (size_t j = 0; j < c->out_n[i] && !(skip_dbias && c->bias_out == i + 1); j++) {
            double d = fabs((double)got[i][j] - want[i][j]);
            double b = rel * A[i][j] + (c->acc[i] ? 0x1p-23 * fabs(c0[i][j]) : 0) + 1e-30;
            if (d > 0) *differs = 1;
            if (d / b > worst) worst = d / b;
        }
    return worst;
}

/* kept: the weight input lies in a parameter block, so the bf16 table
 * reads its kept copy in oneDNN's own layout (the path of a model's
 * weights); else it is rounded at the call (a layout's panel) */
static void check_case(const gcase *c, const cb_kernels *bf, int kept) {
    float **in = calloc(MAXIO, sizeof *in), **c0 = calloc(MAXIO, sizeof *c0);
    for (int i = 0; i < c->nin; i++) in[i] = randn(c->in_n[i], 1.0f);
    float *wk = kept ? in[c->weight - 1] : NULL;
    if (wk) cb_kernels_params_written(wk, c->in_n[c->weight - 1]);
    for (int i = 0; i < c->nout; i++) c0[i] = randn(c->out_n[i], 1.0f);
    const cb_kernels *cpu = cb_kernels_cpu();
    float **ob = alloc_outs(c, c0, 0), **of = alloc_outs(c, c0, 0), **oa = alloc_outs(c, c0, 1);
    float **orf = alloc_outs(c, c0, 0);
    float **ain = transform(c, in, fabsf), **rin = transform(c, in, round_bf16);
    c->run(bf, in, ob, c->dims);
    if (wk) cb_kernels_params_freed(wk);
    c->run(cpu, in, of, c->dims);
    c->run(cpu, ain, oa, c->dims);
    c->run(cpu, rin, orf, c->dims);
    double sum_order = 2.0 * c->K * 0x1p-24;
    int differs = 0, dummy = 0;
    double w = worst_ratio(c, ob, of, oa, c0, 2 * U + U * U + sum_order, 0, &differs);
    char what[160];
    const char *how = kept ? " (kept weight)" : "";
    snprintf(what, sizeof what, "%s%s: bf16 vs fp32 within (2^-7 + 2^-16 + 2K 2^-24) A, K=%d", c->name, how, c->K);
    report(w <= 1.0, what, w);
    snprintf(what, sizeof what, "%s%s: bf16 differs from fp32 (the products ran in bf16)", c->name, how);
    report(differs, what, 0);
    w = worst_ratio(c, ob, orf, oa, c0, sum_order, 1, &dummy);
    snprintf(what, sizeof what, "%s%s: oneDNN vs fp32 on bf16-rounded operands within 2K 2^-24 A", c->name, how);
    report(w <= 1.0, what, w);
    free_all(ob, c->nout), free_all(of, c->nout), free_all(oa, c->nout), free_all(orf, c->nout);
    free_all(ain, c->nin), free_all(rin, c->nin), free_all(in, c->nin), free_all(c0, c->nout);
}

/* dims: N IC OC */
static void run_matmul_fwd(const cb_kernels *k, float **in, float **out, const int *d) {
    k->matmul_forward(k, out[0], in[0], in[1], in[2], d[0], d[1], d[2]);
}
static void run_matmul_bwd(const cb_kernels *k, float **in, float **out, const int *d) {
    k->matmul_backward(k, out[0], out[1], out[2], in[0], in[1], in[2], d[0], d[1], d[2], 1);
}
/* rows [IC/4, 3IC/4) of dw */
static void run_dw_rows(const cb_kernels *k, float **in, float **out, const int *d) {
    k->matmul_backward_dw_rows(k, out[0], in[0], in[1], d[0], d[1], d[2], d[1] / 4, 3 * d[1] / 4,
                               1);
}
/* dims: N C V */
static void run_head_fwd(const cb_kernels *k, float **in, float **out, const int *d) {
    k->head_forward(k, out[0], in[0], in[1], d[0], d[1], d[2]);
}
static void run_head_bwd(const cb_kernels *k, float **in, float **out, const int *d) {
    k->head_backward(k, out[0], out[1], in[0], in[1], in[2], d[0], d[1], d[2], 1);
}

/* N rows: 96; 1024, where a kept weight is read in oneDNN's own layout
 * (src/kernels/bf16.c, PACK_ROWS); and 2048, where on AMX a weight
 * gradient's activation (and the head's dlogits) is read with padded rows
 * (JIT_ROWS: oneDNN's gemm:jit) */
static void gemm_cases(const cb_kernels *bf, int N) {
    int IC = 80, OC = 112, C = 64, V = 200;
    size_t nic = (size_t)N * IC, noc = (size_t)N * OC, w = (size_t)IC * OC;
    gcase cases[] = {
        {"matmul_forward", 3, 1, IC, {nic, w, OC}, {noc}, {0}, 3, 0, run_matmul_fwd, {N, IC, OC}, 2},
        {"matmul_backward", 3, 3, N > OC ? N : OC, {noc, nic, w}, {nic, w, OC}, {0, 1, 1}, 0, 3,
         run_matmul_bwd, {N, IC, OC}, 3},
        {"matmul_backward_dw_rows", 2, 1, N, {noc, nic}, {w}, {1}, 0, 0, run_dw_rows, {N, IC, OC}, 0},
        {"head_forward", 2, 1, C, {(size_t)N * C, (size_t)V * C}, {(size_t)N * V}, {0}, 0, 0,
         run_head_fwd, {N, C, V}, 2},
        {"head_backward", 3, 2, V, {(size_t)N * V, (size_t)N * C, (size_t)V * C},
         {(size_t)N * C, (size_t)V * C}, {0, 1}, 0, 0, run_head_bwd, {N, C, V}, 3},
    };
    printf("# products of %d rows\n", N);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int kept = 0; kept <= (cases[i].weight > 0); kept++) check_case(&cases[i], bf, kept);
}

/* Accumulating weight gradients larger than one block of the bf16
 * table's accumulation (ACC_FLOATS, 2^20 floats, in src/kernels/bf16.c:
 * without AMX the product is written a block of rows at a time into
 * scratch and added to dW): 1040 x 1024 and the head's 1100 x 1024 take
 * two blocks each, the second of 16 and 76 rows */
static void acc_block_cases(const cb_kernels *bf) {
    int N = 64, IC = 1040, OC = 1024, C = 1024, V = 1100;
    size_t nic = (size_t)N * IC, noc = (size_t)N * OC, w = (size_t)IC * OC;
    gcase cases[] = {
        {"matmul_backward, dW of two accumulation blocks", 3, 3, OC, {noc, nic, w}, {nic, w, OC},
         {0, 1, 1}, 0, 3, run_matmul_bwd, {N, IC, OC}, 3},
        {"head_backward, dW of two accumulation blocks", 3, 2, V,
         {(size_t)N * V, (size_t)N * C, (size_t)V * C}, {(size_t)N * C, (size_t)V * C}, {0, 1}, 0, 0,
         run_head_bwd, {N, C, V}, 3},
    };
    printf("# accumulating products over several blocks\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], bf, 1);
}

/* Forward reference of the bf16 path in double: S from rounded q, k;
 * the CPU softmax; O from rounded P and v. */
static void attention_ref(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *s = att + ((size_t)b * NH + h) * T * T;
            const float *base = qkv + (size_t)b * T * 3 * C + h * hs;
            for (int t = 0; t < T; t++)
                for (int j = 0; j < T; j++) {
                    double acc = 0;
                    for (int d = 0; d < hs; d++)
                        acc += (double)round_bf16(base[(size_t)t * 3 * C + d]) *
                               round_bf16(base[(size_t)j * 3 * C + C + d]);
                    s[(size_t)t * T + j] = (float)acc * scale;
                }
            cb_cpu_masked_softmax(s, NULL, T, T, T, T, 1);
            for (int t = 0; t < T; t++)
                for (int d = 0; d < hs; d++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++)
                        acc += (double)round_bf16(s[(size_t)t * T + j]) *
                               round_bf16(base[(size_t)j * 3 * C + 2 * C + d]);
                    out[((size_t)b * T + t) * C + h * hs + d] = (float)acc;
                }
        }
}

static double rel_frobenius(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / den);
}

/* Forward: oneDNN against the double reference of the same roundings:
 * S's products are exact, so S differs by fp32 summation (hs 2^-24
 * relative to sum |q||k|, |S| <= 1.5 x that here), which the softmax
 * turns into at most 2 max|dS| relative on P, times 2^-8 when P's
 * rounding flips; O then sums T products of at most 2^-8 + 2T 2^-24
 * relative error each: bound (2^-8 + 2T 2^-24) sum_j P |v| <= that x max|v|.
 * Against fp32, the same with 2u per operand in S too: relative Frobenius
 * within 4 (2u + u^2) + 2T 2^-24, every stage's rounding counted twice
 * (two products, softmax's gain of 2).
 * Backward: four products chained through the softmax backward, each
 * rounding both operands (2u + u^2), the softmax backward doubling what
 * enters it: relative Frobenius within 8 (2u + u^2) = 2^-5 + 2^-15. */
static void attention_cases(const cb_kernels *bf) {
    int B = 2, T = 24, C = 64, NH = 4;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    const cb_kernels *cpu = cb_kernels_cpu();
    float *qkv = randn(nq, 1.0f), *dout = randn(no, 1.0f);
    float *ob = calloc(no, 4), *of = calloc(no, 4), *orf = calloc(no, 4);
    float *ab = calloc(na, 4), *af = calloc(na, 4), *ar = calloc(na, 4);
    cb_attn a = cb_attn_self(B, T, C, NH, 1, NULL);
    bf->attention_forward(bf, &a, ob, ab, qkv, qkv);
    cpu->attention_forward(cpu, &a, of, af, qkv, qkv);
    attention_ref(orf, ar, qkv, B, T, C, NH);
    double maxv = 0;
    for (size_t i = 0; i < nq; i++) maxv = fmax(maxv, fabs(qkv[i]));
    double worst = 0, bound = (0x1p-8 + 2.0 * T * 0x1p-24) * maxv;
    for (size_t i = 0; i < no; i++) worst = fmax(worst, fabs((double)ob[i] - orf[i]) / bound);
    report(worst <= 1.0, "attention_forward: oneDNN vs bf16 reference within (2^-8 + 2T 2^-24) max|v|", worst);
    double r = rel_frobenius(ob, of, no), tol = 4 * (2 * U + U * U) + 2.0 * T * 0x1p-24;
    report(r <= tol && r > 0, "attention_forward: bf16 vs fp32 relative Frobenius within 4(2u+u^2)+2T 2^-24, nonzero", r / tol);
    float *db = calloc(nq, 4), *df = calloc(nq, 4), *sb = calloc(na, 4), *sf = calloc(na, 4);
    bf->attention_backward(bf, &a, db, db, sb, dout, qkv, qkv, ab);
    cpu->attention_backward(cpu, &a, df, df, sf, dout, qkv, qkv, af);
    r = rel_frobenius(db, df, nq), tol = 8 * (2 * U + U * U);
    report(r <= tol && r > 0, "attention_backward: bf16 vs fp32 relative Frobenius within 8(2u+u^2), nonzero", r / tol);
    free(qkv), free(dout), free(ob), free(of), free(orf), free(ab), free(af), free(ar);
    free(db), free(df), free(sb), free(sf);
}

/* The general attention (cb_attn) in bf16 against fp32: causal
 * cross-attention of Tq = 20 queries over Tk = 28 keys with padded
 * queries and keys (a sequence without keys among them), and the
 * bidirectional padded self-attention, also with dropout 0.2 of the
 * probabilities (a piece at sequence 1 and head 2 of 8). Causal attention
 * runs in blocks of query rows (src/kernels/bf16.c; at this T only with
 * CB_BF16_BLOCK_ROWS=1, tests/test_bf16_kernels.sh), each seeing only the
 * keys its rows see: T = 27 (not a multiple of 16 or 4, the blocks of
 * forward and backward), T = 3 (fewer rows than blocks), with padding,
 * with dropout, and cross-attention with more queries than keys; and the
 * non-causal cross-attention. T = 300 takes the fused causal path at the
 * default 128 rows a block (two blocks of 150), and so does T = 256 at
 * head sizes 32 and 64 (GPT-2's; blocks of 128 rows seeing 128 and 256
 * keys), as does every causal case
 * without dropout under CB_BF16_BLOCK_ROWS=1 (the script runs those once
 * more with CB_BF16_FUSED=0, the unfused blocks). The same
 * bounds as the causal case (masking and dropout only remove terms; the
 * dropout scale is exact in both); padding rows must come out exactly
 * zero in the output and in every gradient, and the probabilities att
 * (both halves with dropout) exactly zero wherever a row does not see the
 * key. */
static void attention_general_cases(const cb_kernels *bf) {
    const cb_kernels *cpu = cb_kernels_cpu();
    static const struct {
        const char *nm;
        int Tq, Tk, causal, cross, padded;
        float drop;
        int nh; /* heads (0: 4, head size 16) */
    } cases[] = {
        {"self padded", 20, 20, 0, 0, 1, 0.0f, 0},
        {"cross causal padded", 20, 28, 1, 1, 1, 0.0f, 0},
        {"self padded, dropout 0.2", 20, 20, 0, 0, 1, 0.2f, 0},
        {"causal T=27 (not a multiple of the blocks)", 27, 27, 1, 0, 0, 0.0f, 0},
        {"causal T=3 (fewer rows than blocks)", 3, 3, 1, 0, 0, 0.0f, 0},
        {"causal padded T=27", 27, 27, 1, 0, 1, 0.0f, 0},
        {"causal padded T=27, dropout 0.2", 27, 27, 1, 0, 1, 0.2f, 0},
        {"cross causal padded Tq=28 > Tk=20", 28, 20, 1, 1, 1, 0.0f, 0},
        {"cross padded Tq=20, Tk=28", 20, 28, 0, 1, 1, 0.0f, 0},
        {"causal padded T=300 (fused at the default rows)", 300, 300, 1, 0, 1, 0.0f, 0},
        {"causal padded T=256, head size 32 (fused)", 256, 256, 1, 0, 1, 0.0f, 2},
        {"causal T=256, head size 64 (fused)", 256, 256, 1, 0, 0, 0.0f, 1},
    };
    int B = 3, C = 64;
    for (size_t cs = 0; cs < sizeof cases / sizeof cases[0]; cs++) {
        int NH = cases[cs].nh ? cases[cs].nh : 4;
        int cross = cases[cs].cross, Tq = cases[cs].Tq, Tk = cases[cs].Tk;
        int lens[6] = {Tq, 7, 0, Tk, 0, 11};
        cb_attn a = cb_attn_self(B, Tq, C, NH, cases[cs].causal, cases[cs].padded ? lens : NULL);
        if (cross) {
            a.Tk = Tk, a.ldq = C, a.ldkv = 2 * C, a.koff = 0, a.voff = C;
            if (cases[cs].padded) a.klen = lens + 3;
        }
        if (cases[cs].drop > 0)
            a.drop = cases[cs].drop, a.drop_key = 0x5eed, a.b0 = 1, a.h0 = 2, a.NHg = 8;
        size_t nq = (size_t)B * Tq * a.ldq, nkv = (size_t)B * Tk * a.ldkv, no = (size_t)B * Tq * C;
        size_t na1 = (size_t)B * NH * Tq * Tk, na = na1 * (a.drop > 0 ? 2 : 1); /* + the dropped copy */
        float *q = randn(nq, 1.0f), *kv = cross ? randn(nkv, 1.0f) : q, *dout = randn(no, 1.0f);
        /* bf16's att exactly as large as the table plans it (attention_saved:
         * the fused path's is smaller), so a write past it is a fault under ASan */
        size_t nab = bf->attention_saved(bf, &a);
        float *ob = calloc(no, 4), *of = calloc(no, 4), *ab = malloc(nab * 4), *af = calloc(na, 4);
        float *sb = calloc(na, 4), *sf = calloc(na, 4);
        float *dqb = calloc(nq, 4), *dqf = calloc(nq, 4);
        float *dkb = cross ? calloc(nkv, 4) : dqb, *dkf = cross ? calloc(nkv, 4) : dqf;
        for (size_t i = 0; i < nab; i++) ab[i] = NAN; /* every element must be written */
        bf->attention_forward(bf, &a, ob, ab, q, kv);
        cpu->attention_forward(cpu, &a, of, af, q, kv);
        bf->attention_backward(bf, &a, dqb, dkb, sb, dout, q, kv, ab);
        cpu->attention_backward(cpu, &a, dqf, dkf, sf, dout, q, kv, af);
        const char *nm = cases[cs].nm;
        char what[200];
        double r = rel_frobenius(ob, of, no), tol = 4 * (2 * U + U * U) + 2.0 * Tk * 0x1p-24;
        snprintf(what, sizeof what,
                 "attention %s forward: bf16 vs fp32 within 4(2u+u^2)+2Tk 2^-24, nonzero", nm);
        report(r <= tol && r > 0, what, r / tol);
        double rq = rel_frobenius(dqb, dqf, nq), rk = cross ? rel_frobenius(dkb, dkf, nkv) : 0;
        tol = 8 * (2 * U + U * U);
        snprintf(what, sizeof what,
                 "attention %s backward: bf16 vs fp32 within 8(2u+u^2), nonzero", nm);
        report(fmax(rq, rk) <= tol && rq > 0, what, fmax(rq, rk) / tol);
        /* padding rows: output rows of queries past qlen, gradients of queries past qlen
         * and of keys and values past klen (q's columns [0, C), kv's k and v) */
        double bad = 0;
        for (int b = 0; b < B; b++) {
            int ql, kl;
            cb_attn_rows(&a, b, &ql, &kl);
            for (int i = 0; i < Tq; i++)
                for (int c = 0; c < C; c++) {
                    int padq = i >= ql || !kl;
                    size_t o = ((size_t)b * Tq + i) * C + c, g = ((size_t)b * Tq + i) * a.ldq + c;
                    if (padq) bad += fabs(ob[o]) + fabs(dqb[g]);
                }
            for (int j = 0; j < Tk; j++)
                for (int c = 0; c < C; c++) {
                    size_t g = ((size_t)b * Tk + j) * a.ldkv;
                    if (j >= kl || !ql)
                        bad += fabs(dkb[g + a.koff + c]) + fabs(dkb[g + a.voff + c]);
                }
        }
        snprintf(what, sizeof what,
                 "attention %s: padding rows zero in bf16 (output, dq, dk, dv)", nm);
        report(bad == 0, what, bad);
        /* att where the row does not see the key: exactly zero (both halves),
         * where the table keeps it (cb_kernels_bf16_att_at: the fused causal
         * path keeps each row up to the keys of its block, rows packed), and
         * every kept element written (NaN counts); the fused path's att is
         * smaller than B NH Tq Tk */
        double masked = 0;
        for (int b = 0; b < B; b++) {
            int ql, kl;
            cb_attn_rows(&a, b, &ql, &kl);
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < Tq; i++)
                    for (int j = cb_attn_seen(i, ql, kl, a.causal); j < Tk; j++) {
                        long long at = cb_kernels_bf16_att_at(&a, b * NH + h, i, j);
                        for (size_t half = 0; at >= 0 && half < nab; half += na1) {
                            float v = ab[half + (size_t)at];
                            masked += v == 0.0f ? 0.0 : 1.0; /* NaN (unwritten) counts */
                        }
                    }
        }
        snprintf(what, sizeof what,
                 "attention %s: probabilities exactly zero where masked in bf16%s%s", nm,
                 a.drop > 0 ? " (and dropped)" : "",
                 nab < na ? " (fused: rows packed, up to each row's block's keys)" : "");
        report(masked == 0, what, masked);
        free(q), free(dout), free(ob), free(of), free(ab), free(af), free(sb), free(sf);
        free(dqb), free(dqf);
        if (cross) free(kv), free(dkb), free(dkf);
    }
}

/* The table copies the CPU table: the non-product kernels are the same
 * functions, so a kernel added there is inherited. */
static void inherits(const cb_kernels *bf) {
    const cb_kernels *cpu = cb_kernels_cpu();
    int same = bf->layernorm_forward == cpu->layernorm_forward && bf->scale == cpu->scale &&
               bf->crossentropy_forward == cpu->crossentropy_forward &&
               bf->gelu_forward == cpu->gelu_forward && bf->matmul_forward != cpu->matmul_forward;
    report(same, "bf16 table: the CPU table with its products replaced", 0);
}

/* The bf16 copy of a weight kept between calls: a weight inside a
 * parameter block is rounded again after cb_kernels_params_written, and a
 * buffer outside any block (a layout's reused panel) at every call. */
static void weight_copies(const cb_kernels *bf) {
    int N = 8, IC = 16, OC = 24;
    size_t nw = (size_t)IC * OC;
    float *x = randn((size_t)N * IC, 1.0f), *params = randn(nw + 8, 1.0f), *panel = randn(nw, 1.0f);
    float *y = calloc((size_t)N * OC, 4), *y2 = calloc((size_t)N * OC, 4);
    float *w = params + 8;
    cb_kernels_params_written(params, nw + 8);
    bf->matmul_forward(bf, y, x, w, NULL, N, IC, OC);
    for (size_t i = 0; i < nw; i++) w[i] = -w[i];
    cb_kernels_params_written(params, nw + 8);
    bf->matmul_forward(bf, y2, x, w, NULL, N, IC, OC);
    int ok = 1;
    for (int i = 0; i < N * OC; i++) ok &= y2[i] == -y[i];
    report(ok, "weight copy: a parameter written (negated) is rounded again", 0);
    bf->matmul_forward(bf, y, x, panel, NULL, N, IC, OC);
    for (size_t i = 0; i < nw; i++) panel[i] = -panel[i];
    bf->matmul_forward(bf, y2, x, panel, NULL, N, IC, OC);
    ok = 1;
    for (int i = 0; i < N * OC; i++) ok &= y2[i] == -y[i];
    report(ok, "weight copy: a buffer outside the parameters is rounded at every call", 0);
    /* AdamW refreshes the copy of a weight it updates whole */
    float *g = randn(nw, 1.0f), *m = calloc(nw, 4), *v = calloc(nw, 4), *w2 = malloc(4 * nw);
    float *m2 = calloc(nw, 4), *v2 = calloc(nw, 4);
    memcpy(w2, w, 4 * nw);
    const cb_kernels *cpu = cb_kernels_cpu();
    cb_kernels_params_written(params, nw + 8);
    bf->adamw(bf, w, g, 1.0f, m, v, nw, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f);
    cpu->adamw(cpu, w2, g, 1.0f, m2, v2, nw, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f);
    ok = !memcmp(w, w2, 4 * nw) && !memcmp(m, m2, 4 * nw) && !memcmp(v, v2, 4 * nw);
    report(ok, "adamw: the CPU table's update, bit for bit", 0);
    bf->matmul_forward(bf, y, x, w, NULL, N, IC, OC);  /* the refreshed copy */
    bf->matmul_forward(bf, y2, x, w2, NULL, N, IC, OC); /* rounded now (not a parameter) */
    report(!memcmp(y, y2, 4 * (size_t)N * OC), "adamw: the weight's bf16 copy holds the updated values", 0);
    free(g), free(m), free(v), free(w2), free(m2), free(v2);
    cb_kernels_params_freed(params);
    free(x), free(params), free(panel), free(y), free(y2);
}

/* The same at 1024 rows, where the product reads the kept copy in
 * oneDNN's own layout: a written parameter, and AdamW's update, must each
 * make it stale (the product after them equals one from a fresh copy) */
static void packed_copies(const cb_kernels *bf) {
    int N = 1024, IC = 48, OC = 64;
    size_t nw = (size_t)IC * OC;
    float *x = randn((size_t)N * IC, 1.0f), *params = randn(nw, 1.0f);
    float *y = calloc((size_t)N * OC, 4), *y2 = calloc((size_t)N * OC, 4);
    cb_kernels_params_written(params, nw);
    bf->matmul_forward(bf, y, x, params, NULL, N, IC, OC);
    for (size_t i = 0; i < nw; i++) params[i] = -params[i];
    cb_kernels_params_written(params, nw);
    bf->matmul_forward(bf, y2, x, params, NULL, N, IC, OC);
    int ok = 1;
    for (int i = 0; i < N * OC; i++) ok &= y2[i] == -y[i];
    report(ok, "kept weight, 1024 rows: a parameter written (negated) is reordered again", 0);
    float *g = randn(nw, 1.0f), *m = calloc(nw, 4), *v = calloc(nw, 4);
    bf->adamw(bf, params, g, 1.0f, m, v, nw, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f);
    bf->matmul_forward(bf, y, x, params, NULL, N, IC, OC);  /* the copy AdamW wrote */
    cb_kernels_params_written(params, nw);
    bf->matmul_forward(bf, y2, x, params, NULL, N, IC, OC); /* rounded and reordered afresh */
    report(!memcmp(y, y2, 4 * (size_t)N * OC), "kept weight, 1024 rows: AdamW's update reaches the reordered copy", 0);
    cb_kernels_params_freed(params);
    free(g), free(m), free(v), free(x), free(params), free(y), free(y2);
}

/* AdamW reads the gradient as g * gs: the same bits as scaling the
 * gradient first (the clip's separate pass before) and updating with 1,
 * in both tables */
static void adamw_clip_fused(const cb_kernels *bf) {
    size_t n = 1003; /* not a multiple of the vector width */
    const cb_kernels *cpu = cb_kernels_cpu();
    const cb_kernels *tab[2] = {cpu, bf};
    for (int t = 0; t < 2; t++) {
        float *p = randn(n, 1.0f), *g = randn(n, 3.0f), *m = randn(n, 0.1f), *v = calloc(n, 4);
        float *p2 = malloc(4 * n), *g2 = malloc(4 * n), *m2 = malloc(4 * n), *v2 = calloc(n, 4);
        memcpy(p2, p, 4 * n), memcpy(g2, g, 4 * n), memcpy(m2, m, 4 * n);
        tab[t]->adamw(tab[t], p, g, 0.37f, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f);
        cpu->scale(cpu, g2, 0.37f, n);
        cpu->adamw(cpu, p2, g2, 1.0f, m2, v2, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f);
        int ok = !memcmp(p, p2, 4 * n) && !memcmp(m, m2, 4 * n) && !memcmp(v, v2, 4 * n);
        report(ok,
               t ? "adamw gs (bf16 table): the scaled-gradient update, bit for bit"
                 : "adamw gs (cpu table): the scaled-gradient update, bit for bit",
               0);
        free(p), free(g), free(m), free(v), free(p2), free(g2), free(m2), free(v2);
    }
}

/* cb_cpu_adamw writing the bf16 copy (streamed in 32-element blocks from
 * the copy's first 64-byte boundary, the ends stored plainly) gives the
 * bits of the update without a copy, then rounded: every start offset
 * within a cache line, lengths around the block, 1 and 2 threads */
static void adamw_copy_streamed(void) {
    enum { MAXN = 1003 };
    float *p = randn(MAXN + 32, 1.0f), *g = randn(MAXN + 32, 3.0f), *m0 = randn(MAXN + 32, 0.1f);
    float *q = malloc(4 * (MAXN + 32)), *m = malloc(4 * (MAXN + 32)), *v = calloc(MAXN + 32, 4);
    float *q2 = malloc(4 * (MAXN + 32)), *m2 = malloc(4 * (MAXN + 32)), *v2 = calloc(MAXN + 32, 4);
    uint16_t *raw = aligned_alloc(64, 64 * ((2 * (MAXN + 64) + 63) / 64));
    const size_t lens[] = {1, 31, 32, 33, 63, 95, 257, MAXN};
    int ok = 1, nt0 = omp_get_max_threads();
    for (int nt = 1; nt <= 2; nt++) {
        omp_set_num_threads(nt);
        for (int off = 0; off < 32; off++)
            for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
                size_t n = lens[l];
                uint16_t *bf = raw + off;
                memcpy(q, p, 4 * n), memcpy(q2, p, 4 * n), memcpy(m, m0, 4 * n), memcpy(m2, m0, 4 * n);
                memset(v, 0, 4 * n), memset(v2, 0, 4 * n);
                cb_cpu_adamw(q, g, 0.37f, m, v, bf, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f);
                cb_cpu_adamw(q2, g, 0.37f, m2, v2, NULL, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f,
                             0.05f);
                ok &= !memcmp(q, q2, 4 * n) && !memcmp(m, m2, 4 * n) && !memcmp(v, v2, 4 * n);
                for (size_t i = 0; i < n; i++) ok &= bf[i] == cb_bf16_round(q2[i]);
            }
    }
    omp_set_num_threads(nt0);
    report(ok, "adamw with the bf16 copy (streamed stores): the update and its rounding, bit for bit, "
               "every alignment", 0);
    free(p), free(g), free(m0), free(q), free(m), free(v), free(q2), free(m2), free(v2), free(raw);
}

/* The softmax and its backward writing their bf16 results in the same
 * pass (the bf16 table's attention operands P, dS and P again) give the bits of
 * the fp32 result rounded afterwards, masked and padding rows included */
static void softmax_bf16_fused(void) {
    enum { T = 37, NQ = 33, NK = 29 }; /* rows past nq and keys past nk are padding */
    size_t n = (size_t)T * T;
    float *s = randn(n, 2.0f), *s2 = malloc(4 * n), *d = randn(n, 1.0f), *d2 = malloc(4 * n);
    uint16_t *h = malloc(2 * n), *h2 = malloc(2 * n);
    int ok = 1;
    for (int causal = 0; causal < 2; causal++) {
        memcpy(s2, s, 4 * n);
        cb_cpu_masked_softmax(s, NULL, T, T, NQ, NK, causal);
        cb_cpu_masked_softmax(s2, h, T, T, NQ, NK, causal);
        for (size_t i = 0; i < n; i++) ok &= s2[i] == s[i] && h[i] == cb_bf16_round(s[i]);
        memcpy(d2, d, 4 * n);
        cb_cpu_masked_softmax_backward(d, NULL, NULL, s, T, T, NQ, NK, causal, 0.3f);
        cb_cpu_masked_softmax_backward(d2, h, h2, s, T, T, NQ, NK, causal, 0.3f);
        for (size_t i = 0; i < n; i++)
            ok &= h[i] == cb_bf16_round(d[i]) && h2[i] == cb_bf16_round(s[i]);
        memcpy(d, d2, 4 * n); /* the fused backward leaves dP as it read it */
    }
    report(ok, "softmax and its backward writing bf16 in the same pass: the rounded fp32 result, bit for bit", 0);
    free(s), free(s2), free(d), free(d2), free(h), free(h2);
}

/* The parameter-gradient kernels' acc 0 (the step's first write: no
 * zeroing pass, graph.h) against acc 1 over zeroed gradients: the same
 * bits, under both tables, with the outputs first filled with NaN so a
 * float left unwritten shows. N rows; N = 4096 puts the GEMMs' reduction
 * over several of oneDNN's and OpenBLAS's K blocks. */
static float *nans(size_t n) {
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static void same_bits(const char *what, const cb_kernels *k, int N, const float *a,
                      const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(a + i, b + i, sizeof(float)) != 0;
    char msg[160];
    snprintf(msg, sizeof msg, "%s %s, %d rows: overwrite (acc 0) = accumulate into zeros, bit for bit",
             k == cb_kernels_cpu() ? "fp32" : "bf16", what, N);
    report(bad == 0, msg, (double)bad);
}

static void overwrite_cases(const cb_kernels *k, int N) {
    int IC = 80, OC = 112, C = 64, V = 200;
    float *x = randn((size_t)N * IC, 1.0f), *dy = randn((size_t)N * OC, 1.0f);
    float *w = randn((size_t)IC * OC, 1.0f), *o[3], *z[3], *dx = calloc((size_t)N * IC, 4);
    size_t n[3] = {(size_t)IC * OC, (size_t)OC, (size_t)C}, big = (size_t)V * C + n[0];
    for (int i = 0; i < 3; i++) o[i] = nans(big), z[i] = calloc(big, 4); /* any of the outputs */
    k->matmul_backward(k, dx, o[0], o[1], dy, x, w, N, IC, OC, 0);
    k->matmul_backward(k, dx, z[0], z[1], dy, x, w, N, IC, OC, 1);
    same_bits("matmul_backward dw", k, N, o[0], z[0], n[0]);
    same_bits("matmul_backward dbias", k, N, o[1], z[1], n[1]);
    if (k != cb_kernels_cpu()) { /* the sums taken in the rounding pass: the fp32 table's bits */
        const cb_kernels *f = cb_kernels_cpu();
        float *dxf = calloc((size_t)N * IC, 4), *dwf = calloc(n[0], 4), *dbf = nans(n[1]);
        f->matmul_backward(f, dxf, dwf, dbf, dy, x, w, N, IC, OC, 0);
        size_t bad = 0;
        for (size_t i = 0; i < n[1]; i++) bad += memcmp(o[1] + i, dbf + i, sizeof(float)) != 0;
        char msg[160];
        snprintf(msg, sizeof msg, "bf16 matmul_backward dbias, %d rows: the fp32 table's sums, bit for "
                 "bit", N);
        report(bad == 0, msg, (double)bad);
        free(dxf), free(dwf), free(dbf);
    }
    for (size_t i = 0; i < n[0]; i++) o[0][i] = NAN, z[0][i] = 0;
    k->matmul_backward_dw_rows(k, o[0], dy, x, N, IC, OC, 0, IC, 0);
    k->matmul_backward_dw_rows(k, z[0], dy, x, N, IC, OC, 0, IC, 1);
    same_bits("matmul_backward_dw_rows", k, N, o[0], z[0], n[0]);
    float *lo = randn((size_t)N * V, 1.0f), *h = randn((size_t)N * C, 1.0f);
    float *wte = randn((size_t)V * C, 1.0f);
    for (size_t i = 0; i < (size_t)V * C; i++) o[0][i] = NAN, z[0][i] = 0;
    k->head_backward(k, dx, o[0], lo, h, wte, N, C, V, 0);
    k->head_backward(k, dx, z[0], lo, h, wte, N, C, V, 1);
    same_bits("head_backward dw", k, N, o[0], z[0], (size_t)V * C);
    float *mean = randn((size_t)N, 0.1f), *rstd = randn((size_t)N, 1.0f);
    for (int i = 1; i < 3; i++)
        for (int c = 0; c < C; c++) o[i][c] = NAN, z[i][c] = 0;
    k->layernorm_backward(k, dx, o[1], o[2], h, lo, wte, mean, rstd, N, C, 0);
    k->layernorm_backward(k, dx, z[1], z[2], h, lo, wte, mean, rstd, N, C, 1);
    same_bits("layernorm_backward dw", k, N, o[1], z[1], (size_t)C);
    same_bits("layernorm_backward db", k, N, o[2], z[2], (size_t)C);
    for (int i = 1; i < 3; i++)
        for (int c = 0; c < C; c++) o[i][c] = NAN, z[i][c] = 0;
    k->layernorm_param_grads(k, o[1], o[2], h, lo, mean, rstd, N, C, 0);
    k->layernorm_param_grads(k, z[1], z[2], h, lo, mean, rstd, N, C, 1);
    same_bits("layernorm_param_grads dw", k, N, o[1], z[1], (size_t)C);
    same_bits("layernorm_param_grads db", k, N, o[2], z[2], (size_t)C);
    free(x), free(dy), free(w), free(dx), free(lo), free(h), free(wte), free(mean), free(rstd);
    for (int i = 0; i < 3; i++) free(o[i]), free(z[i]);
}

/* Attention in chunks of pairs splits the pairs so that no thread idles:
 * B 8 of 4 heads at T 64 (32 pairs, every divisor up to 32 fitting a
 * chunk) runs as two chunks of 16 on two threads, not one chunk of 32 on
 * one of them (it ran at half the rate of B 16). The staging planned for
 * it holds each thread's chunk of P and dS in bf16: 2 x 16 x 64 x 64
 * halves a thread; one thread keeps the one chunk of 32. */
static void chunk_balance(void) {
    const char *fu = getenv("CB_BF16_FUSED");
    if (getenv("CB_BF16_BLOCK_ROWS") || (fu && !strcmp(fu, "0"))) {
        printf("(attention in chunks is off with small blocks or no fusion: the default run checks it)\n");
        return;
    }
    cb_attn a = cb_attn_self(8, 64, 256, 4, 1, NULL);
    double n1[CB_BF16_SLOTS] = {0}, n2[CB_BF16_SLOTS] = {0};
    cb_kernels_bf16_need_attention(n1, &a, 1);
    cb_kernels_bf16_need_attention(n2, &a, 2);
    double want1 = 2.0 * 32 * 64 * 64, want2 = 2 * 2.0 * 16 * 64 * 64;
    report(n1[1] == want1 && n2[1] == want2,
           "attention in chunks: 32 pairs on 2 threads run as 2 chunks of 16 (P, dS staged per thread)",
           fmax(fabs(n1[1] - want1) / want1, fabs(n2[1] - want2) / want2));
}

/* The bf16 table's loss gradient writes its bf16 copy for the LM head's
 * backward in the same pass: the head's dX and dW, and the fp32 gradient
 * itself, are bit for bit those of the CPU table's loss gradient followed
 * by the head rounding its operand; and once another product has taken
 * the copy's scratch (a forward product between them), the head rounds
 * again and still gets them (with the copy trusted anyway, it reads the
 * other product's operand). */
static void loss_gradient_copy(const cb_kernels *bf) {
    const cb_kernels *cpu = cb_kernels_cpu();
    int N = 37, C = 64, V = 300, IC = 80, OC = 96;
    size_t nl = (size_t)N * V;
    float *logits = randn(nl + N, 3.0f), *x = randn((size_t)N * C, 1.0f);
    float *w = randn((size_t)V * C, 0.5f), *xo = randn((size_t)N * IC, 1.0f);
    float *wo = randn((size_t)IC * OC, 1.0f), *yo = calloc((size_t)N * OC, 4);
    int *tg = malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) tg[i] = i % 7 == 3 ? -1 : (i * 131) % V;
    cpu->crossentropy_forward(cpu, logits + nl, logits, tg, N, V);
    float *p[3], *dx[3], *dw[3];
    for (int c = 0; c < 3; c++) {
        p[c] = malloc(4 * nl), memcpy(p[c], logits, 4 * nl);
        dx[c] = calloc((size_t)N * C, 4), dw[c] = calloc((size_t)V * C, 4);
    }
    float dloss = 1.0f / N;
    cpu->crossentropy_backward(cpu, p[0], tg, dloss, N, V); /* the reference */
    bf->head_backward(bf, dx[0], dw[0], p[0], x, w, N, C, V, 0);
    double a[CB_RND_N], b[CB_RND_N], c2[CB_RND_N], d[CB_RND_N];
    bf->crossentropy_backward(bf, p[1], tg, dloss, N, V); /* the copy, used */
    cb_kernels_bf16_round_ms(a);
    bf->head_backward(bf, dx[1], dw[1], p[1], x, w, N, C, V, 0);
    cb_kernels_bf16_round_ms(b);
    bf->crossentropy_backward(bf, p[2], tg, dloss, N, V); /* the copy, taken */
    bf->matmul_forward(bf, yo, xo, wo, NULL, N, IC, OC);
    cb_kernels_bf16_round_ms(c2);
    bf->head_backward(bf, dx[2], dw[2], p[2], x, w, N, C, V, 0);
    cb_kernels_bf16_round_ms(d);
    report(b[CB_RND_GRAD] == a[CB_RND_GRAD] && d[CB_RND_GRAD] > c2[CB_RND_GRAD],
           "loss gradient's bf16 copy: the head rounds no gradient after it, and rounds once it is taken",
           0);
    for (int c = 1; c < 3; c++) {
        size_t bad = 0;
        for (size_t i = 0; i < nl; i++) bad += memcmp(p[c] + i, p[0] + i, 4) != 0;
        for (size_t i = 0; i < (size_t)N * C; i++) bad += memcmp(dx[c] + i, dx[0] + i, 4) != 0;
        for (size_t i = 0; i < (size_t)V * C; i++) bad += memcmp(dw[c] + i, dw[0] + i, 4) != 0;
        report(bad == 0,
               c == 1 ? "loss gradient's bf16 copy: dlogits, head dX and dW bit for bit as rounding after"
                      : "loss gradient's bf16 copy taken by a product between: the head rounds again, bit for bit",
               (double)bad);
    }
    for (int c = 0; c < 3; c++) free(p[c]), free(dx[c]), free(dw[c]);
    free(logits), free(x), free(w), free(xo), free(wo), free(yo), free(tg);
}

int main(void) {
    cb_rng_seed(&rng, 17);
    const cb_kernels *bf = cb_kernels_bf16();
    if (!bf) {
        printf("FAIL oneDNN did not start\n");
        return 1;
    }
    printf("%s\n", cb_kernels_bf16_note());
    inherits(bf);
    gemm_cases(bf, 96);
    gemm_cases(bf, 1024);
    gemm_cases(bf, 2048);
    acc_block_cases(bf);
    for (int N = 96; N <= 4096; N *= 4) {
        overwrite_cases(cb_kernels_cpu(), N);
        overwrite_cases(bf, N);
    }
    attention_cases(bf);
    attention_general_cases(bf);
    chunk_balance();
    loss_gradient_copy(bf);
    weight_copies(bf);
    packed_copies(bf);
    adamw_clip_fused(bf);
    adamw_copy_streamed();
    softmax_bf16_fused();
    printf("%d passed, %d failed\n", passes, failures);
    return failures != 0;
}
