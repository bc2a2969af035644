/* 3-D tensor parallelism, the cube of Bian et al. with perfect load
 * balance (docs/parallelism.md, 3-D). tp = q^3 ranks (i,j,k);
 * every rank holds 1/q^3 of every activation and weight. An activation of
 * parity p is split by i and two more coordinates a, b:
 *   parity 0: token block i*q + j, feature block k   (a = j, b = k)
 *   parity 1: token block i*q + k, feature block j   (a = k, b = j)
 * A linear with input parity p all-gathers X over line a, W over WEIGHT (i),
 * multiplies, and reduce-scatters over line b: the output has a and b
 * swapped, i.e. parity 1-p. Every collective moves whole rows of row-major
 * buffers (tokens, weight rows), so none needs packing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/grid.h"
#include "layout/layout.h"

/* workspace slots (layout.h), planned at build and reused by every operator */
enum { S_XH, S_WH, S_Z, S_DYH, S_DXH, S_DWH, S_DW, S_RED, S_RED2, S_H, NSLOT };

/* X^ of one forward input. Pipelines keep several micro-batches in flight,
 * each in its own input buffer, so X^ is kept per input pointer, in a pool
 * of entries sized at build (plan); N = -1 marks an entry free. */
typedef struct xsaved {
    const float *x;
    int N;
    float *xh;
    size_t cap;
} xsaved;

/* What a linear or the head keeps from forward for backward when
 * save_gathered = 1: W^ (the weights do not change in between) and X^. */
typedef struct gathered {
    float *wh;
    size_t capw, needw, needx;
    int wvalid;
    xsaved *xs;
    int nxs;
    struct gathered *next;
} gathered;

typedef struct tp3d {
    gathered *saved; /* every one made, freed with the layout */
    gathered *head;  /* the tied head's X^ and wte^ */
    size_t wire_in, wire_out; /* --comm-dtype bf16: the blocking staging of INPUT and OUTPUT */
} tp3d;

/* The roles of a parity: a joins i in the token block, b picks the feature
 * block; la/lb are their lines, pa the plane where a is fixed (i, b vary),
 * pb the plane where b is fixed (i, a vary). */
typedef struct roles {
    int a, b;
    cb_comm *la, *lb, *pa, *pb;
} roles;

static roles roles_of(cb_layout *L, int parity) {
    cb_grid *g = L->grid;
    if (parity == 0) return (roles){g->at.j, g->at.k, &g->input, &g->output, &g->out_w, &g->in_w};
    return (roles){g->at.k, g->at.j, &g->output, &g->input, &g->in_w, &g->out_w};
}

/* The non-blocking gather (X^) and reduce-scatter (dX) of an activation
 * over c, in bf16 under --comm-dtype bf16, staged in S_H: half 0 for the
 * gather, half 1 for the reduce-scatter (backward has both in flight; both
 * of all = p*n values, so the slot never grows between them). */
static uint16_t *stage(cb_layout *L, size_t all, int half) {
    return (uint16_t *)cb_layout_scratch(L, S_H, 2 * all * sizeof(uint16_t)) + half * all;
}

static void igather_act(cb_layout *L, cb_comm *c, const char *tag, const float *x, float *xh,
                        size_t n, cb_comm_req *r) {
    if (L->wire_bf16) cb_comm_iallgather_bf16f(c, tag, x, xh, n, stage(L, c->size * n, 0), r);
    else cb_comm_iallgather(c, tag, x, xh, n, r);
}

static void ireduce_scatter_act(cb_layout *L, cb_comm *c, const char *tag, const float *dxh,
                                float *dx, size_t n, cb_comm_req *r) {
    if (L->wire_bf16) cb_comm_ireduce_scatter_bf16f(c, tag, dxh, dx, n, stage(L, c->size * n, 1), r);
    else cb_comm_ireduce_scatter(c, tag, dxh, dx, n, r);
}

/* (i, a, b) of tensor rank t for a parity, without the grid */
static void coords_of(const cb_layout *L, int t, int parity, int *i, int *a, int *b) {
    int q = L->q, j = (t / q) % q, k = t % q;
    *i = t / (q * q);
    *a = parity ? k : j;
    *b = parity ? j : k;
}

static int64_t vocab_pad(const cb_layout *L, int64_t V) {
    int64_t q2 = (int64_t)L->q * L->q;
    return (V + q2 - 1) / q2 * q2;
}

/* n floats of scratch slot s; contents undefined */
static float *scratch(cb_layout *L, int s, size_t n) {
    return cb_layout_scratch(L, s, sizeof(float) * n);
}

static float *zeroed(cb_layout *L, int s, size_t n) {
    return cb_layout_zeroed(L, s, sizeof(float) * n);
}

/* A kept operand grown to n floats: only without a plan (layouts driven
 * outside a graph); a planned one was sized at build. */
static float *grow(cb_layout *L, float *p, size_t *cap, size_t n) {
    if (n <= *cap) return p;
    free(p);
    L->scratch_bytes += sizeof(float) * (n - *cap);
    *cap = n;
    p = malloc(sizeof(float) * (n ? n : 1));
    if (!p) cb_layout_oom("the gathered 3-D operands kept for backward");
    return p;
}

static gathered *new_gathered(cb_layout *L) {
    tp3d *P = L->priv;
    gathered *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->next = P->saved;
    P->saved = s;
    return s;
}

/* The entry of input x: the one already keyed by x, else a free one; without
 * a plan the pool grows by one. NULL: none (X^ is then not kept). */
static xsaved *entry_for(cb_layout *L, gathered *s, const float *x) {
    xsaved *free_e = NULL;
    for (int i = 0; i < s->nxs; i++) {
        if (s->xs[i].x == x) return &s->xs[i];
        if (!free_e && s->xs[i].N < 0) free_e = &s->xs[i];
    }
    if (free_e || L->ws.planned) return free_e;
    xsaved *xs = realloc(s->xs, sizeof *xs * (s->nxs + 1));
    if (!xs) cb_layout_oom("the gathered 3-D operands kept for backward");
    s->xs = xs;
    s->xs[s->nxs] = (xsaved){.N = -1};
    return &s->xs[s->nxs++];
}

/* Forward: where to gather W^ and X^ of input x; with save_gathered = 0,
 * scratch, and whatever was kept before is stale. A planned pool with no
 * free entry leaves X^ in scratch: backward gathers it again. */
static void gather_into(cb_layout *L, gathered **sp, const float *x, int N, size_t nx, size_t nw,
                        float **xh, float **wh) {
    if (!L->save_gathered) {
        if (*sp) {
            (*sp)->wvalid = 0;
            for (int i = 0; i < (*sp)->nxs; i++) (*sp)->xs[i].N = -1;
        }
        *xh = scratch(L, S_XH, nx);
        *wh = scratch(L, S_WH, nw);
        return;
    }
    if (!*sp && !L->ws.planned && !(*sp = new_gathered(L)))
        cb_layout_oom("the gathered 3-D operands kept for backward");
    gathered *s = *sp;
    xsaved *e = s ? entry_for(L, s, x) : NULL;
    if (s && !L->ws.planned) {
        s->wh = grow(L, s->wh, &s->capw, nw);
        if (e) e->xh = grow(L, e->xh, &e->cap, nx);
    }
    int keepw = s && s->capw >= nw, keepx = e && e->cap >= nx;
    if (s) s->wvalid = keepw;
    *wh = keepw ? s->wh : scratch(L, S_WH, nw);
    if (keepx) e->x = x, e->N = N;
    else L->ws.unkept++;
    *xh = keepx ? e->xh : scratch(L, S_XH, nx);
}

/* Backward: the kept X^ of input x and W^, NULL where they must be gathered
 * again. Backward consumes X^, so only a forward of that very buffer since
 * the last backward counts (every rank decides alike). */
static void kept(const cb_layout *L, gathered *s, const float *x, int N, float **xh,
                 float **wh) {
    *xh = *wh = NULL;
    if (!L->save_gathered || !s) return;
    for (int i = 0; i < s->nxs; i++)
        if (s->xs[i].x == x && s->xs[i].N == N) {
            *xh = s->xs[i].xh;
            s->xs[i].N = -1;
        }
    if (s->wvalid) *wh = s->wh;
}

/* x was rewritten outside the operators: no X^ kept of it is valid. */
static void input_rewritten(cb_layout *L, const float *x) {
    tp3d *P = L->priv;
    for (gathered *s = P->saved; s; s = s->next)
        for (int i = 0; i < s->nxs; i++)
            if (s->xs[i].x == x) s->xs[i].N = -1;
}

static void add(cb_layout *L, float *acc, const float *x, size_t n) {
    L->k->residual_forward(L->k, acc, acc, x, n);
}

/* Plan of a kept pair: inflight more entries of nx floats (a layer applied
 * twice keeps the inputs of both uses) and W^ of nw, made now (small),
 * filled by plan_alloc. A pool that cannot be made is left out: its
 * operands are then gathered again in backward. */
static void plan_kept(cb_layout *L, gathered **sp, size_t nx, size_t nw, int inflight) {
    if (!*sp) *sp = new_gathered(L);
    gathered *s = *sp;
    if (!s) return;
    int n = s->nxs + (inflight > 0 ? inflight : 1);
    xsaved *xs = realloc(s->xs, sizeof *xs * n);
    if (!xs) return;
    for (int i = s->nxs; i < n; i++) xs[i] = (xsaved){.N = -1};
    s->xs = xs, s->nxs = n;
    s->needx = nx > s->needx ? nx : s->needx;
    s->needw = nw > s->needw ? nw : s->needw;
}

static size_t kept_bytes(const tp3d *P) {
    size_t n = 0;
    for (const gathered *s = P->saved; s; s = s->next) n += s->needw + s->nxs * s->needx;
    return n * sizeof(float) + (P->wire_in + P->wire_out) * sizeof(uint16_t);
}

/* p grown to n floats, or *ok = 0 (p kept) */
static float *grow_planned(cb_layout *L, float *p, size_t *cap, size_t n, int *ok) {
    if (n <= *cap) return p;
    float *b = malloc(sizeof(float) * n);
    if (!b) return *ok = 0, p;
    free(p);
    L->scratch_bytes += sizeof(float) * (n - *cap);
    *cap = n;
    return b;
}

static int plan_alloc(cb_layout *L, cb_err *e) {
    tp3d *P = L->priv;
    int ok = 1;
    for (gathered *s = P->saved; s && ok; s = s->next) {
        s->wh = grow_planned(L, s->wh, &s->capw, s->needw, &ok);
        s->wvalid = 0;
        for (int i = 0; i < s->nxs && ok; i++)
            s->xs[i].xh = grow_planned(L, s->xs[i].xh, &s->xs[i].cap, s->needx, &ok);
    }
    if (ok && (cb_comm_reserve_wire(&L->grid->input, P->wire_in) ||
               cb_comm_reserve_wire(&L->grid->output, P->wire_out)))
        ok = 0;
    return ok ? CB_OK
              : cb_fail(e, CB_ENOMEM, "out of memory for the gathered 3-D operands kept for "
                                      "backward and the bf16 staging: %zu bytes", kept_bytes(P));
}

/* ------------------------------------------------------------ shapes */

/* batch % q^2, d_model % q^2 (weight rows are split q^2 ways), heads % q;
 * the vocabulary is padded to a multiple of q^2 and the padding reported */
static int check(const cb_layout *L, int B, int T, int C, int NH, int V, cb_err *e) {
    int q = L->q, q2 = q * q;
    char who[64], what[16];
    (void)T;
    snprintf(who, sizeof who, "--tp-mode 3d with tp %d (q=%d)", L->tp, q);
    if (B % q2)
        return cb_fail(e, CB_EINPUT,
                       "%s needs the batch of each data-parallel rank divisible by q^2=%d "
                       "sequences (token blocks are whole sequences); got batch %d: use batch %d",
                       who, q2, B, (B / q2 + 1) * q2);
    int rc = cb_layout_check_widths(C, NH, q2, q, who, "weight rows are split q^2 ways", NULL, e);
    if (rc) return rc;
    snprintf(what, sizeof what, "q^2=%d", q2);
    cb_layout_note_pad((cb_layout *)L, V, vocab_pad(L, V), what);
    return CB_OK;
}

static void act_shape(const cb_layout *L, int N, int H, int parity, int *rows, int *cols) {
    (void)parity;
    *rows = N / (L->q * L->q);
    *cols = H / L->q;
}

/* columns: block blk of nblk in each of the parts equal sections of C */
static void col_blocks(cb_shard *s, int64_t C, int parts, int nblk, int blk) {
    int64_t sec = C / parts, w = sec / nblk;
    s->nseg = parts;
    for (int g = 0; g < parts; g++) {
        s->col0[g] = g * sec + blk * w;
        s->ncol[g] = w;
    }
}

static cb_shard act_shard(const cb_layout *L, int tp_rank, int N, int H, int parity, int parts) {
    int q = L->q, i, a, b;
    coords_of(L, tp_rank, parity, &i, &a, &b);
    int64_t nb = N / (q * q);
    cb_shard s = {.R = N, .C = H, .rows_pad = N, .row0 = (i * q + a) * nb, .nrows = nb,
                  .owner = 1};
    col_blocks(&s, H, parts, q, b);
    return s;
}

/* the local logits (tokens i*q+k, vocabulary block j), then their losses */
static size_t logits_numel(const cb_layout *L, int N, int V) {
    int q = L->q;
    size_t nb = (size_t)N / (q * q);
    return nb * (size_t)(vocab_pad(L, V) / q) + nb;
}

/* Linear W [in, out], input parity p: rows block b*q + i of q^2, columns
 * block a (per part); its bias: columns block a, replicated over (i, b).
 * LayerNorm on parity p: features block b, replicated over (i, a).
 * wte [V, C]: rows block j*q + i of the padded V, columns block k (a linear
 * of parity 1 with the weight transposed); wpe [T_pad, C], T_pad = T up to
 * a multiple of q^2: rows block i*q + j (the rank in the INPUT x WEIGHT
 * plane), columns block k like the features of a parity-0 activation, so
 * 1/q^3 and nothing replicated. */
static cb_shard shard(const cb_layout *L, int tp_rank, cb_param_kind kind, int64_t R, int64_t C,
                      int parts, int parity) {
    int q = L->q, i, a, b;
    int par = kind == CB_P_EMBED || kind == CB_P_POS ? 0 : parity;
    coords_of(L, tp_rank, par, &i, &a, &b);
    cb_shard s = {.R = R, .C = C, .rows_pad = R, .row0 = 0, .nrows = R, .owner = 1};
    switch (kind) {
    case CB_P_LINEAR_W:
        s.nrows = R / (q * q);
        s.row0 = (b * q + i) * s.nrows;
        col_blocks(&s, C, parts, q, a);
        break;
    case CB_P_LINEAR_B:
        col_blocks(&s, C, parts, q, a);
        s.owner = i == 0 && b == 0;
        break;
    case CB_P_NORM:
        col_blocks(&s, C, 1, q, b);
        s.owner = i == 0 && a == 0;
        break;
    case CB_P_EMBED: /* parity 0 coordinates: a = j, b = k */
        s.rows_pad = vocab_pad(L, R);
        s.nrows = s.rows_pad / (q * q);
        s.row0 = (a * q + i) * s.nrows;
        col_blocks(&s, C, 1, q, b);
        break;
    case CB_P_VOCAB: { /* the head's vocabulary block j, replicated over (i, k): out_w */
        int64_t vb = vocab_pad(L, C) / q, j = (tp_rank / q) % q;
        s = cb_vocab_bias_shard(C, j * vb, vb, tp_rank / (q * q) == 0 && tp_rank % q == 0);
        break;
    }
    case CB_P_POS: /* parity 0 coordinates: a = j, b = k */
        s.rows_pad = (R + q * q - 1) / (q * q) * (q * q);
        s.nrows = s.rows_pad / (q * q);
        s.row0 = (i * q + a) * s.nrows;
        col_blocks(&s, C, 1, q, b);
        break;
    }
    return s;
}

/* ------------------------------------------------------------ linear */

/* Any user linear must split like the GPT's; a mismatch is a programming
 * error that would otherwise corrupt memory on some ranks only. */
static void linear_shape_check(const cb_layout *L, const cb_linear *l, int N) {
    int q = L->q, q2 = q * q, parts = l->parts > 0 ? l->parts : 1;
    if (l->in % q2 || l->out % (parts * q) || N % q2 || parts > CB_SHARD_MAXSEG)
        cb_comm_fatal("--tp-mode 3d: a linear needs in % q^2 == 0, out % (parts*q) == 0 and "
                      "tokens % q^2 == 0; change the layer widths or the batch");
}

/* x (N/q^2, in/q) parity p -> y (N/q^2, out/q) parity 1-p:
 * X^ = gather_a(x), W^ = gather_i(w), y = reduce-scatter_b(X^ W^) + b */
static void linear_forward(cb_layout *L, cb_linear *l, const float *x, float *y, int N) {
    linear_shape_check(L, l, N);
    roles r = roles_of(L, l->parity);
    int q = L->q;
    size_t nb = (size_t)N / (q * q), nh = (size_t)N / q, in = l->in / q, out = l->out / q,
           wr = l->in / (q * q);
    gathered *s = l->saved;
    float *xh, *wh;
    gather_into(L, &s, x, N, nh * in, in * out, &xh, &wh);
    l->saved = s;
    cb_comm_req rq[2];
    igather_act(L, r.la, "linear.fwd", x, xh, nb * in, &rq[0]);
    cb_comm_iallgather(&L->grid->weight, "linear.fwd", l->w, wh, wr * out, &rq[1]);
    cb_comm_waitall(rq, 2);
    float *z = scratch(L, S_Z, nh * out);
    L->k->matmul_forward(L->k, z, xh, wh, NULL, (int)nh, (int)in, (int)out);
    cb_layout_reduce_scatter(L, r.lb, "linear.fwd", z, y, nb * out);
    if (l->b) L->k->bias_add(L->k, y, l->b, (int)nb, (int)out);
}

/* dy parity 1-p -> dx parity p: dY^ = gather_b(dy); dx = reduce-scatter_a
 * (dY^ W^T) overlapped with dW^ = X^T dY^ (in row blocks, MPI progress
 * between them: cb_layout_dw_overlapped); dw += reduce-scatter_i(dW^);
 * db += all-reduce over the plane (i, b) of the column sums of dy (= for
 * both when l->overwrite). */
static void linear_backward(cb_layout *L, cb_linear *l, const float *x, const float *dy,
                            float *dx, int N) {
    linear_shape_check(L, l, N);
    roles r = roles_of(L, l->parity);
    cb_comm *W = &L->grid->weight;
    int q = L->q;
    size_t nb = (size_t)N / (q * q), nh = (size_t)N / q, in = l->in / q, out = l->out / q,
           wr = l->in / (q * q);
    cb_comm_req rb, rx, rw, rdx, rdw;
    float *dbt = NULL;
    if (l->db) {
        dbt = zeroed(L, S_RED, out);
        L->k->bias_backward(L->k, dbt, dy, (int)nb, (int)out);
        cb_comm_iallreduce(r.pa, "bias.bwd", NULL, dbt, out, CB_COMM_SUM, &rb);
    }
    float *xh, *wh;
    kept(L, l->saved, x, N, &xh, &wh);
    int gx = !xh, gw = !wh;
    if (gx) igather_act(L, r.la, "linear.bwd", x, xh = scratch(L, S_XH, nh * in), nb * in, &rx);
    if (gw)
        cb_comm_iallgather(W, "linear.bwd", l->w, wh = scratch(L, S_WH, in * out), wr * out, &rw);
    float *dyh = scratch(L, S_DYH, nh * out);
    cb_layout_allgather(L, r.lb, "linear.bwd", dy, dyh, nb * out);
    if (gw) cb_comm_wait(&rw);
    float *dxh = scratch(L, S_DXH, nh * in);
    L->k->head_forward(L->k, dxh, dyh, wh, (int)nh, (int)out, (int)in); /* dY^ W^T */
    ireduce_scatter_act(L, r.la, "linear.bwd", dxh, dx, nb * in, &rdx);
    if (gx) cb_comm_wait(&rx);
    float *dwh = scratch(L, S_DWH, in * out), *dwl = scratch(L, S_DW, wr * out);
    cb_comm_req *pend[2] = {&rdx, l->db ? &rb : NULL};
    cb_layout_dw_overlapped(L, dwh, dyh, xh, (int)nh, (int)in, (int)out, pend, 2, 0);
    cb_comm_ireduce_scatter(W, "linear.bwd", dwh, dwl, wr * out, &rdw);
    cb_comm_wait(&rdx);
    cb_comm_wait(&rdw);
    cb_layout_grad_put(L, l->dw, dwl, wr * out, l->overwrite);
    if (l->db) {
        cb_comm_wait(&rb);
        cb_layout_grad_put(L, l->db, dbt, out, l->overwrite);
    }
}

/* ------------------------------------------------------------ LayerNorm */

/* x, y (N/q^2, C/q): features split along line b (ops.c); the weight and
 * bias are replicated over the plane (i, a), which sums their gradients */
static void norm_forward(cb_layout *L, const cb_norm *n, const float *x, float *y, float *mean,
                         float *rstd, int N) {
    int q = L->q;
    cb_split_norm_forward(L, roles_of(L, n->parity).lb, S_RED, n, x, y, mean, rstd, N / (q * q),
                          n->C / q);
}

static void norm_backward(cb_layout *L, cb_norm *n, const float *x, const float *dy, float *dx,
                          const float *mean, const float *rstd, int N) {
    roles r = roles_of(L, n->parity);
    int q = L->q;
    cb_split_norm_backward(L, r.lb, r.pb, S_RED, S_RED2, n, x, dy, dx, mean, rstd, N / (q * q),
                           n->C / q);
}

/* ------------------------------------------------------------ embedding */

/* Sizes of the vocabulary-parallel pieces: wte shard vr x c (rows block
 * j*q + i), gathered over WEIGHT to vb x c (rows block j, from v0). */
typedef struct vocab {
    size_t vr, vb, c;
    int64_t v0;
} vocab;

static vocab vocab_of(cb_layout *L, int V, int C) {
    int q = L->q;
    size_t vp = (size_t)vocab_pad(L, V);
    return (vocab){vp / (q * q), vp / q, (size_t)C / q, (int64_t)L->grid->at.j * (int64_t)(vp / q)};
}

/* Position rows per rank: T_pad / q^2. */
static size_t pos_rows(const cb_layout *L, int T) {
    size_t q2 = (size_t)L->q * L->q;
    return ((size_t)T + q2 - 1) / q2;
}

/* x (B*T/q^2, C/q) parity 0 = wte[ids] + wpe[t]: the one-hot linear of
 * parity 1 with wte as its weight. Rows of token block i whose id lies in
 * vocabulary block j are copied from wte^, the rest are zero, and the
 * reduce-scatter over INPUT sums the one non-zero row per token. The
 * positions, T_pad x C/q of feature block k, are all-gathered over the
 * INPUT x WEIGHT plane (whole sequences need every position). */
static void embed_forward(cb_layout *L, const cb_embed *e, const int *ids, int B, int T,
                          float *x) {
    cb_grid *g = L->grid;
    int q = L->q;
    size_t N = (size_t)B * T, nh = N / q, nb = N / (q * q);
    vocab v = vocab_of(L, e->V, e->C);
    float *wh = scratch(L, S_WH, v.vb * v.c), *z = scratch(L, S_Z, nh * v.c);
    cb_comm_allgather(&g->weight, "embed.fwd", e->wte, wh, v.vr * v.c);
    const int *id = ids + (size_t)g->at.i * nh;
    L->k->embedding_rows(L->k, z, id, wh, (int)v.v0, (int)v.vb, (int)nh, (int)v.c);
    cb_layout_reduce_scatter(L, &g->input, "embed.fwd", z, x, nb * v.c);
    size_t tr = pos_rows(L, e->T), t0 = (size_t)(g->at.i * q + g->at.j) * nb;
    float *pe = scratch(L, S_RED, tr * q * q * v.c);
    cb_comm_allgather(&g->in_w, "embed.fwd", e->wpe, pe, tr * v.c);
    L->k->position_add(L->k, x, pe, (int)t0, T, (int)nb, (int)v.c);
}

/* dwte += reduce-scatter over WEIGHT of the rows of gather_INPUT(dx) added
 * at their ids (token order, reproducible); dwpe += reduce-scatter over the
 * INPUT x WEIGHT plane of the local position sums (T_pad x C/q) */
static void embed_backward(cb_layout *L, cb_embed *e, const int *ids, int B, int T,
                           const float *dx) {
    cb_grid *g = L->grid;
    int q = L->q;
    size_t N = (size_t)B * T, nh = N / q, nb = N / (q * q);
    vocab v = vocab_of(L, e->V, e->C);
    float *dyh = scratch(L, S_DYH, nh * v.c);
    cb_layout_allgather(L, &g->input, "embed.bwd", dx, dyh, nb * v.c);
    float *dwh = zeroed(L, S_DWH, v.vb * v.c), *dwl = scratch(L, S_DW, v.vr * v.c);
    const int *id = ids + (size_t)g->at.i * nh;
    L->k->embedding_rows_backward(L->k, dwh, dyh, id, (int)v.v0, (int)v.vb, (int)nh, (int)v.c);
    cb_comm_req rq[2];
    cb_comm_ireduce_scatter(&g->weight, "embed.bwd", dwh, dwl, v.vr * v.c, &rq[0]);
    size_t tr = pos_rows(L, e->T), t0 = (size_t)(g->at.i * q + g->at.j) * nb;
    float *dpe = e->dwpe ? zeroed(L, S_RED, tr * q * q * v.c) : NULL; /* NULL: fixed positions */
    if (dpe) {
        L->k->position_backward(L->k, dpe, dx, (int)t0, T, (int)nb, (int)v.c);
        cb_comm_ireduce_scatter(&g->in_w, "embed.bwd", NULL, dpe, tr * v.c, &rq[1]);
    }
    cb_comm_waitall(rq, dpe ? 2 : 1);
    add(L, e->dwte, dwl, v.vr * v.c);
    if (dpe) add(L, e->dwpe, dpe, tr * v.c);
}

/* ------------------------------------------------------------ LM head */

/* logits (N/q^2 tokens block i*q+k, V_pad/q block j) = reduce-scatter over
 * OUTPUT of gather_INPUT(x) gather_WEIGHT(wte)^T; returns the mean loss */
static float head_forward(cb_layout *L, const cb_embed *e, const float *x, const int *targets,
                          float *logits, int N) {
    cb_grid *g = L->grid;
    tp3d *P = L->priv;
    int q = L->q;
    size_t nh = (size_t)N / q, nb = (size_t)N / (q * q);
    vocab v = vocab_of(L, e->V, e->C);
    float *xh, *wh;
    gather_into(L, &P->head, x, N, nh * v.c, v.vb * v.c, &xh, &wh);
    cb_comm_req rq[2];
    igather_act(L, &g->input, "head.fwd", x, xh, nb * v.c, &rq[0]);
    cb_comm_iallgather(&g->weight, "head.fwd", e->wte, wh, v.vr * v.c, &rq[1]);
    cb_comm_waitall(rq, 2);
    float *z = scratch(L, S_Z, nh * v.vb);
    L->k->head_forward(L->k, z, xh, wh, (int)nh, (int)v.c, (int)v.vb);
    cb_layout_reduce_scatter(L, &g->output, "head.fwd", z, logits, nb * v.vb);
    cb_vocab_bias_add(L, e, logits, (int)nb, (int)v.vb, (int)v.v0);
    const int *tg = targets ? targets + (size_t)(g->at.i * q + g->at.k) * nb : NULL;
    double sum = cb_vocab_loss_forward(L, &g->input, S_RED, e, logits, logits + nb * v.vb, tg, (int)nb,
                                       (int)v.vb, (int)v.v0); /* vocabulary split along INPUT */
    if (!targets) return 0.0f;
    cb_comm_allreduce_f64(&g->out_w, "head.fwd", NULL, &sum, 1, CB_COMM_SUM);
    return (float)(sum / N);
}

/* dlogits = (p - onehot) dloss/N; dx = reduce-scatter over INPUT of
 * dZ^ wte^ overlapped with dwte^ = dZ^T X^, reduce-scattered over WEIGHT
 * (added into dwte, or written: e->overwrite) */
static void head_backward(cb_layout *L, cb_embed *e, const float *x, const int *targets,
                          float *logits, float dloss, float *dx, int N) {
    cb_grid *g = L->grid;
    tp3d *P = L->priv;
    int q = L->q;
    size_t nh = (size_t)N / q, nb = (size_t)N / (q * q);
    vocab v = vocab_of(L, e->V, e->C);
    float *xh, *wh;
    kept(L, P->head, x, N, &xh, &wh);
    int gx = !xh, gw = !wh;
    cb_comm_req rx, rw, rdx, rdw;
    if (gx)
        igather_act(L, &g->input, "head.bwd", x, xh = scratch(L, S_XH, nh * v.c), nb * v.c, &rx);
    if (gw)
        cb_comm_iallgather(&g->weight, "head.bwd", e->wte, wh = scratch(L, S_WH, v.vb * v.c),
                           v.vr * v.c, &rw);
    float dl = dloss / N;
    const int *tg = targets + (size_t)(g->at.i * q + g->at.k) * nb;
    cb_vocab_loss_backward(L, e, logits, tg, (int)v.v0, dl, (int)nb, (int)v.vb);
    cb_vocab_bias_backward(L, S_RED, &g->out_w, e, logits, (int)v.v0, (int)nb, (int)v.vb);
    float *dzh = scratch(L, S_DYH, nh * v.vb);
    cb_layout_allgather(L, &g->output, "head.bwd", logits, dzh, nb * v.vb);
    if (gw) cb_comm_wait(&rw);
    float *dxh = scratch(L, S_DXH, nh * v.c);
    L->k->matmul_forward(L->k, dxh, dzh, wh, NULL, (int)nh, (int)v.vb, (int)v.c);
    ireduce_scatter_act(L, &g->input, "head.bwd", dxh, dx, nb * v.c, &rdx);
    if (gx) cb_comm_wait(&rx);
    float *dwh = scratch(L, S_DWH, v.vb * v.c), *dwl = scratch(L, S_DW, v.vr * v.c);
    cb_comm_req *pend[1] = {&rdx};
    cb_layout_dw_overlapped(L, dwh, xh, dzh, (int)nh, (int)v.vb, (int)v.c, pend, 1, 0);
    cb_comm_ireduce_scatter(&g->weight, "head.bwd", dwh, dwl, v.vr * v.c, &rdw);
    cb_comm_wait(&rdx);
    cb_comm_wait(&rdw);
    cb_layout_grad_put(L, e->dwte, dwl, v.vr * v.c, e->overwrite);
}

/* ------------------------------------------------------------ lifetime */

static void layout_free(cb_layout *L) {
    tp3d *P = L->priv;
    if (P) {
        for (gathered *s = P->saved, *ns; s; s = ns) {
            ns = s->next;
            for (int i = 0; i < s->nxs; i++) free(s->xs[i].xh);
            free(s->xs);
            free(s->wh);
            free(s);
        }
        free(P);
    }
    free(L);
}

static void reserve(cb_layout *L, int slot, size_t n) { cb_layout_reserve(L, slot, sizeof(float) * n); }

/* --comm-dtype bf16: the staging of the non-blocking activation traffic
 * (S_H) and of the blocking traffic on lb (its c->wire, which plan_alloc
 * sizes) */
static void plan_wire(cb_layout *L, cb_comm *lb, size_t nh, size_t in, size_t out) {
    if (!L->wire_bf16) return;
    tp3d *P = L->priv;
    size_t *w = lb == &L->grid->input ? &P->wire_in : &P->wire_out;
    cb_layout_reserve(L, S_H, 2 * nh * in * sizeof(uint16_t));
    if (nh * out > *w) *w = nh * out;
}

/* The buffers of a linear-like product of (nh, in) by (in, out) on nb local
 * rows (forward and backward), and its kept X^ and W^. */
static void plan_product(cb_layout *L, gathered **sp, size_t nh, size_t in, size_t out,
                         size_t ndw, int inflight) {
    reserve(L, S_XH, nh * in), reserve(L, S_WH, in * out), reserve(L, S_Z, nh * out);
    reserve(L, S_DYH, nh * out), reserve(L, S_DXH, nh * in), reserve(L, S_DWH, in * out);
    reserve(L, S_DW, ndw), reserve(L, S_RED, out);
    if (L->save_gathered) plan_kept(L, sp, nh * in, in * out, inflight);
}

static void plan(cb_layout *L, const cb_layout_use *u) {
    tp3d *P = L->priv;
    size_t q = L->q, N = (size_t)u->B * u->T, nh = N / q, nb = N / (q * q);
    if (u->op == CB_OP_LINEAR) {
        gathered *s = u->lin->saved;
        size_t out = u->lin->out / q;
        plan_product(L, &s, nh, u->lin->in / q, out, u->lin->in / (q * q) * out, u->inflight);
        u->lin->saved = s;
        plan_wire(L, roles_of(L, u->lin->parity).lb, nh, u->lin->in / q, out);
    } else if (u->op == CB_OP_NORM) {
        cb_split_norm_reserve(L, S_RED, S_RED2, (int)nb, u->norm->C / L->q);
    } else if (u->op == CB_OP_HEAD || u->op == CB_OP_EMBED) {
        vocab v = vocab_of(L, u->emb->V, u->emb->C);
        if (u->op == CB_OP_HEAD)
            plan_product(L, &P->head, nh, v.c, v.vb, v.vr * v.c, u->inflight);
        plan_wire(L, u->op == CB_OP_HEAD ? &L->grid->output : &L->grid->input, nh, v.c,
                  u->op == CB_OP_HEAD ? v.vb : v.c);
        cb_vocab_loss_reserve(L, S_RED, (int)nb, u->emb);
        if (u->bias) cb_vocab_bias_reserve(L, S_RED, (int)(vocab_pad(L, u->emb->V) / L->q));
        reserve(L, S_WH, v.vb * v.c), reserve(L, S_Z, nh * v.c), reserve(L, S_DYH, nh * v.c);
        reserve(L, S_DWH, v.vb * v.c), reserve(L, S_DW, v.vr * v.c);
        reserve(L, S_RED, pos_rows(L, u->emb->T) * q * q * v.c);
    }
    L->ws.kept_need = kept_bytes(P);
}

static const cb_layout_ops OPS = {
    .name = "3d",
    .check = check,
    .act_shape = act_shape,
    .act_shard = act_shard,
    .att_numel = cb_split_att_numel,
    .logits_numel = logits_numel,
    .shard = shard,
    .embed_forward = embed_forward,
    .embed_backward = embed_backward,
    .norm_forward = norm_forward,
    .norm_backward = norm_backward,
    .linear_forward = linear_forward,
    .linear_backward = linear_backward,
    .input_rewritten = input_rewritten,
    .attention_forward = cb_split_attention_forward,
    .attention_backward = cb_split_attention_backward,
    .head_forward = head_forward,
    .head_backward = head_backward,
    .free = layout_free,
    .plan = plan,
    .plan_alloc = plan_alloc,
};

int cb_layout_3d(cb_grid *g, cb_layout **out, cb_err *e) {
    int q = cb_grid_side(g->tp, CB_TP_3D);
    if (q < 1 || q * q * q != g->tp)
        return cb_fail(e, CB_EINPUT, "--tp-mode 3d needs --tp a perfect cube (8, 27, 64); got %d",
                       g->tp);
    cb_layout *L = calloc(1, sizeof *L);
    tp3d *P = calloc(1, sizeof *P);
    if (!L || !P) {
        free(L);
        free(P);
        return cb_fail(e, CB_ENOMEM, "out of memory creating the 3-D layout");
    }
    *L = (cb_layout){.ops = &OPS, .mode = CB_LAYOUT_3D, .tp = g->tp, .q = q,
                     .caps = CB_LAYOUT_ROWS, .tp_rank = g->at.t, .grid = g,
                     .k = cb_kernels_default(), .save_gathered = 1,
                     .overlap_chunks = CB_OVERLAP_CHUNKS, .priv = P};
    *out = L;
    return CB_OK;
}
