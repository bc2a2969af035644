/* 1-D tensor parallelism (Megatron) over the P ranks of the tensor group.
 * Parity 0 activations (residual stream) are replicated N x H on every
 * rank; parity 1 activations are column block t, N x H/P (sections split
 * separately when parts > 1, so QKV is [q_t | k_t | v_t] of local heads).
 * A linear on parity 0 is column-parallel (no forward communication, dX
 * all-reduced in backward); on parity 1 it is row-parallel (Y all-reduced
 * in forward, bias added once after it). Replicated parameters (row-parallel
 * biases, LayerNorm vectors on parity 0, wpe) see replicated inputs and
 * replicated upstream gradients, so every copy computes the same gradient
 * without a reduction. The vocabulary is split by rows, padded to a
 * multiple of P. Per layer: 2 all-reduces of N x C forward, 2 backward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/grid.h"
#include "layout/layout.h"

typedef struct tp1d {
    float *f;
    size_t fcap;
    double *d;
    size_t dcap;
} tp1d;

static cb_comm *group(cb_layout *L) { return &L->grid->tpg; }

/* Reused scratch of at least n floats (n doubles); grown, never shrunk. */
static float *fscratch(cb_layout *L, size_t n) {
    tp1d *p = L->priv;
    if (n > p->fcap) {
        float *f = realloc(p->f, sizeof(float) * n);
        if (!f) cb_comm_fatal("out of memory for 1-D tensor-parallel scratch");
        p->f = f;
        L->scratch_bytes += sizeof(float) * (n - p->fcap);
        p->fcap = n;
    }
    return p->f;
}

static double *dscratch(cb_layout *L, size_t n) {
    tp1d *p = L->priv;
    if (n > p->dcap) {
        double *d = realloc(p->d, sizeof(double) * n);
        if (!d) cb_comm_fatal("out of memory for 1-D tensor-parallel scratch");
        p->d = d;
        L->scratch_bytes += sizeof(double) * (n - p->dcap);
        p->dcap = n;
    }
    return p->d;
}

/* ---------------------------------------------------------------- shapes */

static int vocab_local(const cb_layout *L, int V) { return (V + L->tp - 1) / L->tp; }

/* The largest tp below P that divides C and, with NH > 0, NH (1 always does). */
static int tp_fix(int C, int P, int NH) {
    int p = P - 1;
    while (p > 1 && ((NH > 0 && NH % p) || C % p)) p--;
    return p;
}

/* heads % tp, d_model % tp; the vocabulary is padded to a multiple of tp
 * and the padding reported */
static int check(const cb_layout *L, int B, int T, int C, int NH, int V, cb_err *e) {
    (void)B, (void)T;
    int P = L->tp;
    char who[48], alt[32], what[16];
    snprintf(who, sizeof who, "--tp-mode 1d with tp %d", P);
    snprintf(alt, sizeof alt, "--tp %d", tp_fix(C, P, NH));
    int rc = cb_layout_check_widths(C, NH, P, P, who, "column blocks", alt, e);
    if (rc) return rc;
    snprintf(what, sizeof what, "tp=%d", P);
    cb_layout_note_pad((cb_layout *)L, V, (int64_t)vocab_local(L, V) * P, what);
    return CB_OK;
}

static void act_shape(const cb_layout *L, int N, int H, int parity, int *rows, int *cols) {
    *rows = N;
    *cols = parity ? H / L->tp : H;
}

/* Columns of block t of each of `parts` equal sections of width C. */
static void split_cols(cb_shard *s, int t, int P, int parts) {
    if (parts < 1) parts = 1;
    int64_t w = s->C / parts / P;
    s->nseg = parts;
    for (int i = 0; i < parts; i++) {
        s->col0[i] = i * (s->C / parts) + t * w;
        s->ncol[i] = w;
    }
}

static cb_shard whole(int64_t R, int64_t C, int owner) {
    return (cb_shard){.R = R, .C = C, .rows_pad = R, .row0 = 0, .nrows = R, .nseg = 1,
                      .col0 = {0}, .ncol = {C}, .owner = owner};
}

static cb_shard act_shard(const cb_layout *L, int t, int N, int H, int parity, int parts) {
    cb_shard s = whole(N, H, t == 0);
    if (parity) {
        split_cols(&s, t, L->tp, parts);
        s.owner = 1;
    }
    return s;
}

static size_t att_numel(const cb_layout *L, int B, int T, int NH) {
    return (size_t)B * (NH / L->tp) * T * T;
}

/* the local logits N x V_pad/P, then the per-token losses */
static size_t logits_numel(const cb_layout *L, int N, int V) {
    return (size_t)N * vocab_local(L, V) + N;
}

static cb_shard shard(const cb_layout *L, int t, cb_param_kind kind, int64_t R, int64_t C,
                      int parts, int parity) {
    int P = L->tp;
    cb_shard s = whole(R, C, 1);
    switch (kind) {
    case CB_P_LINEAR_W:
        if (parity == 0) split_cols(&s, t, P, parts);
        else s.nrows = R / P, s.row0 = t * s.nrows;
        break;
    case CB_P_LINEAR_B:
        if (parity == 0) split_cols(&s, t, P, parts);
        else s.owner = t == 0;
        break;
    case CB_P_NORM:
        if (parity == 1) split_cols(&s, t, P, 1);
        else s.owner = t == 0;
        break;
    case CB_P_EMBED:
        s.rows_pad = (R + P - 1) / P * P;
        s.nrows = s.rows_pad / P;
        s.row0 = t * s.nrows;
        break;
    case CB_P_POS: s.owner = t == 0; break;
    }
    return s;
}

/* ---------------------------------------------------------------- embedding */

/* x (B,T,C) replicated = wte[ids] (rows of the local vocabulary block, zero
 * elsewhere, summed over ranks) + wpe[t] */
static void embed_forward(cb_layout *L, const cb_embed *e, const int *ids, int B, int T,
                          float *x) {
    int C = e->C, N = B * T, Vl = vocab_local(L, e->V), v0 = L->tp_rank * Vl;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < N; bt++) {
        float *o = x + (size_t)bt * C;
        int id = ids[bt] - v0;
        if (id >= 0 && id < Vl) memcpy(o, e->wte + (size_t)id * C, sizeof(float) * C);
        else memset(o, 0, sizeof(float) * C);
    }
    cb_comm_allreduce(group(L), "embed.fwd", NULL, x, (size_t)N * C, CB_COMM_SUM);
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < N; bt++) {
        float *o = x + (size_t)bt * C;
        const float *pe = e->wpe + (size_t)(bt % T) * C;
        for (int c = 0; c < C; c++) o[c] += pe[c];
    }
}

/* dx (B,T,C) replicated: local vocabulary rows and all of wpe accumulate,
 * serially in token order as the serial kernel does (repeated tokens). */
static void embed_backward(cb_layout *L, cb_embed *e, const int *ids, int B, int T,
                           const float *dx) {
    int C = e->C, Vl = vocab_local(L, e->V), v0 = L->tp_rank * Vl;
    for (int bt = 0; bt < B * T; bt++) {
        const float *d = dx + (size_t)bt * C;
        float *pe = e->dwpe + (size_t)(bt % T) * C;
        for (int c = 0; c < C; c++) pe[c] += d[c];
        int id = ids[bt] - v0;
        if (id < 0 || id >= Vl) continue;
        float *we = e->dwte + (size_t)id * C;
        for (int c = 0; c < C; c++) we[c] += d[c];
    }
}

/* ---------------------------------------------------------------- layernorm */

/* Parity 1 (N, C/P local columns): the row statistics are sums over every
 * rank's columns, all-reduced in double. */
static void norm_forward_split(cb_layout *L, const cb_norm *n, const float *x, float *y,
                               float *mean, float *rstd, int N) {
    int Cl = n->C / L->tp;
    double *s = dscratch(L, 2 * (size_t)N);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *r = x + (size_t)i * Cl;
        double a = 0.0, b = 0.0;
        for (int c = 0; c < Cl; c++) a += r[c], b += (double)r[c] * r[c];
        s[i] = a;
        s[N + i] = b;
    }
    cb_comm_allreduce_f64(group(L), "norm.fwd", NULL, s, 2 * (size_t)N, CB_COMM_SUM);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        double m = s[i] / n->C, v = s[N + i] / n->C - m * m;
        float mf = (float)m, sf = (float)(1.0 / sqrt((v > 0 ? v : 0) + 1e-5));
        const float *r = x + (size_t)i * Cl;
        float *o = y + (size_t)i * Cl;
        for (int c = 0; c < Cl; c++) o[c] = (r[c] - mf) * sf * n->w[c] + n->b[c];
        mean[i] = mf;
        rstd[i] = sf;
    }
}

static void norm_backward_split(cb_layout *L, cb_norm *n, const float *x, const float *dy,
                                float *dx, const float *mean, const float *rstd, int N) {
    int Cl = n->C / L->tp;
    double *s = dscratch(L, 2 * (size_t)N);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *r = x + (size_t)i * Cl, *d = dy + (size_t)i * Cl;
        double a = 0.0, b = 0.0;
        for (int c = 0; c < Cl; c++) {
            double dn = (double)n->w[c] * d[c];
            a += dn;
            b += dn * (r[c] - mean[i]) * rstd[i];
        }
        s[i] = a;
        s[N + i] = b;
    }
    cb_comm_allreduce_f64(group(L), "norm.bwd", NULL, s, 2 * (size_t)N, CB_COMM_SUM);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *r = x + (size_t)i * Cl, *d = dy + (size_t)i * Cl;
        float m = mean[i], sd = rstd[i], dmean = (float)(s[i] / n->C);
        float dproj = (float)(s[N + i] / n->C);
        float *di = dx + (size_t)i * Cl;
        for (int c = 0; c < Cl; c++) di[c] += (n->w[c] * d[c] - dmean - (r[c] - m) * sd * dproj) * sd;
    }
    for (int i = 0; i < N; i++) {
        const float *r = x + (size_t)i * Cl, *d = dy + (size_t)i * Cl;
        for (int c = 0; c < Cl; c++) {
            n->dw[c] += (r[c] - mean[i]) * rstd[i] * d[c];
            n->db[c] += d[c];
        }
    }
}

/* Parity 0 is replicated: the plain kernel, identical on every rank. */
static void norm_forward(cb_layout *L, const cb_norm *n, const float *x, float *y, float *mean,
                         float *rstd, int N) {
    if (n->parity) norm_forward_split(L, n, x, y, mean, rstd, N);
    else L->k->layernorm_forward(L->k, y, mean, rstd, x, n->w, n->b, N, n->C);
}

static void norm_backward(cb_layout *L, cb_norm *n, const float *x, const float *dy, float *dx,
                          const float *mean, const float *rstd, int N) {
    if (n->parity) norm_backward_split(L, n, x, dy, dx, mean, rstd, N);
    else L->k->layernorm_backward(L->k, dx, n->dw, n->db, dy, x, n->w, mean, rstd, N, n->C);
}

/* ---------------------------------------------------------------- linear */

/* y (N, out/P) = x (N, in) W[:, block t] + b[block t], or for parity 1
 * y (N, out) = sum over ranks of x (N, in/P) W[block t, :], then + b. */
static void linear_forward(cb_layout *L, cb_linear *l, const float *x, float *y, int N) {
    int P = L->tp;
    if (l->parity == 0) {
        L->k->matmul_forward(L->k, y, x, l->w, l->b, N, l->in, l->out / P);
        return;
    }
    L->k->matmul_forward(L->k, y, x, l->w, NULL, N, l->in / P, l->out);
    cb_comm_allreduce(group(L), "linear.fwd", NULL, y, (size_t)N * l->out, CB_COMM_SUM);
    if (!l->b) return;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *o = y + (size_t)i * l->out;
        for (int c = 0; c < l->out; c++) o[c] += l->b[c];
    }
}

/* Column-parallel: dx (N, in) summed over ranks. Row-parallel: dy is
 * replicated, so dx (N, in/P) is local and db is the same on every rank. */
static void linear_backward(cb_layout *L, cb_linear *l, const float *x, const float *dy,
                            float *dx, int N) {
    int P = L->tp;
    if (l->parity == 0) {
        L->k->matmul_backward(L->k, dx, l->dw, l->db, dy, x, l->w, N, l->in, l->out / P);
        cb_comm_allreduce(group(L), "linear.bwd", NULL, dx, (size_t)N * l->in, CB_COMM_SUM);
    } else {
        L->k->matmul_backward(L->k, dx, l->dw, l->db, dy, x, l->w, N, l->in / P, l->out);
    }
}

/* ---------------------------------------------------------------- attention */

/* qkv (B,T,3C/P) = [q | k | v] of this rank's NH/P heads: the plain kernel. */
static void attention_forward(cb_layout *L, const float *qkv, float *y, float *att, int B, int T,
                              int C, int NH) {
    L->k->attention_forward(L->k, y, att, qkv, B, T, C / L->tp, NH / L->tp);
}

static void attention_backward(cb_layout *L, const float *qkv, const float *att, const float *dy,
                               float *dqkv, float *scratch, int B, int T, int C, int NH) {
    L->k->attention_backward(L->k, dqkv, scratch, dy, qkv, att, B, T, C / L->tp, NH / L->tp);
}

/* ---------------------------------------------------------------- head */

/* Row maxima of the local logits (N, Vl); padded vocabulary columns (global
 * index >= V) become -inf so they take no probability. */
static void local_max(float *lg, float *mx, int N, int Vl, int v0, int V) {
    int valid = V - v0 < Vl ? (V - v0 > 0 ? V - v0 : 0) : Vl;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = lg + (size_t)i * Vl, m = -INFINITY;
        for (int j = valid; j < Vl; j++) r[j] = -INFINITY;
        for (int j = 0; j < valid; j++) m = r[j] > m ? r[j] : m;
        mx[i] = m;
    }
}

/* lg (N, Vl) -> exp(lg - max); st[i] = local sum, st[N + i] = the target's
 * logit when this rank holds it, else 0 */
static void local_exp(float *lg, const float *mx, float *st, const int *targets, int N, int Vl,
                      int v0) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = lg + (size_t)i * Vl, sum = 0.0f;
        int tj = targets ? targets[i] - v0 : -1;
        st[N + i] = tj >= 0 && tj < Vl ? r[tj] : 0.0f;
        for (int j = 0; j < Vl; j++) {
            r[j] = expf(r[j] - mx[i]);
            sum += r[j];
        }
        st[i] = sum;
    }
}

/* Tied head and vocabulary-parallel cross-entropy: x (N,C) replicated,
 * logits (N, V_pad/P) local, replaced by probabilities; losses (N) follow. */
static float head_forward(cb_layout *L, const cb_embed *e, const float *x, const int *targets,
                          float *logits, int N) {
    int Vl = vocab_local(L, e->V), v0 = L->tp_rank * Vl;
    float *losses = logits + (size_t)N * Vl, *mx = fscratch(L, 3 * (size_t)N), *st = mx + N;
    L->k->head_forward(L->k, logits, x, e->wte, N, e->C, Vl);
    local_max(logits, mx, N, Vl, v0, e->V);
    cb_comm_allreduce(group(L), "head.fwd", NULL, mx, N, CB_COMM_MAX);
    local_exp(logits, mx, st, targets, N, Vl, v0);
    cb_comm_allreduce(group(L), "head.fwd", NULL, st, 2 * (size_t)N, CB_COMM_SUM);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = logits + (size_t)i * Vl, inv = 1.0f / st[i];
        for (int j = 0; j < Vl; j++) r[j] *= inv;
        losses[i] = logf(st[i]) - (st[N + i] - mx[i]);
    }
    if (!targets) return 0.0f;
    double total = 0.0; /* in token order, as serial: the same on every rank and every run */
    for (int i = 0; i < N; i++) total += losses[i];
    return (float)(total / N);
}

/* dlogits = (p - onehot) dloss/N locally; dx (N,C) = dlogits wte_shard
 * summed over ranks; dwte_shard += dlogits^T x. */
static void head_backward(cb_layout *L, cb_embed *e, const float *x, const int *targets,
                          float *logits, float dloss, float *dx, int N) {
    int Vl = vocab_local(L, e->V), v0 = L->tp_rank * Vl;
    float g = dloss / N;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = logits + (size_t)i * Vl;
        for (int j = 0; j < Vl; j++) r[j] *= g;
        int tj = targets[i] - v0;
        if (tj >= 0 && tj < Vl) r[tj] -= g;
    }
    L->k->head_backward(L->k, dx, e->dwte, logits, x, e->wte, N, e->C, Vl);
    cb_comm_allreduce(group(L), "head.bwd", NULL, dx, (size_t)N * e->C, CB_COMM_SUM);
}

static void layout_free(cb_layout *L) {
    tp1d *p = L->priv;
    if (p) {
        free(p->f);
        free(p->d);
        free(p);
    }
    free(L);
}

static const cb_layout_ops OPS = {
    .name = "1d",
    .check = check,
    .act_shape = act_shape,
    .act_shard = act_shard,
    .att_numel = att_numel,
    .logits_numel = logits_numel,
    .shard = shard,
    .embed_forward = embed_forward,
    .embed_backward = embed_backward,
    .norm_forward = norm_forward,
    .norm_backward = norm_backward,
    .linear_forward = linear_forward,
    .linear_backward = linear_backward,
    .input_rewritten = cb_layout_nothing_kept,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .head_forward = head_forward,
    .head_backward = head_backward,
    .free = layout_free,
};

int cb_layout_1d(cb_grid *g, cb_layout **out, cb_err *e) {
    cb_layout *L = malloc(sizeof *L);
    tp1d *p = calloc(1, sizeof *p);
    if (!L || !p) {
        free(L);
        free(p);
        return cb_fail(e, CB_ENOMEM, "out of memory creating the 1-D tensor-parallel layout");
    }
    *L = (cb_layout){.ops = &OPS, .mode = CB_LAYOUT_1D, .tp = g->tp, .q = g->tp,
                     .tp_rank = g->at.t, .grid = g, .k = cb_kernels_default(), .priv = p};
    *out = L;
    return CB_OK;
}
