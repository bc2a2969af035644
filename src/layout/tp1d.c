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

/* workspace slots (layout.h): the split LayerNorm's and the cross-entropy's */
enum { S_NORM, S_NORM2, S_CE };

static cb_comm *group(cb_layout *L) { return &L->grid->tpg; }

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
    case CB_P_VOCAB: /* the head's vocabulary block t */
        s = cb_vocab_bias_shard(C, (int64_t)t * vocab_local(L, (int)C), vocab_local(L, (int)C), 1);
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
    L->k->embedding_rows(L->k, x, ids, e->wte, v0, Vl, N, C);
    cb_layout_sum(L, group(L), "embed.fwd", x, (size_t)N * C);
    L->k->position_add(L->k, x, e->wpe, 0, T, N, C);
}

/* dx (B,T,C) replicated: local vocabulary rows and all of wpe accumulate,
 * in token order as the serial kernel does (repeated tokens). */
static void embed_backward(cb_layout *L, cb_embed *e, const int *ids, int B, int T,
                           const float *dx) {
    int C = e->C, Vl = vocab_local(L, e->V), v0 = L->tp_rank * Vl;
    if (e->dwpe) L->k->position_backward(L->k, e->dwpe, dx, 0, T, B * T, C);
    L->k->embedding_rows_backward(L->k, e->dwte, dx, ids, v0, Vl, B * T, C);
}

/* ---------------------------------------------------------------- layernorm */

/* Parity 1 (N, C/P local columns): the row statistics are sums over every
 * rank's columns (ops.c). Parity 0 is replicated: the plain kernel,
 * identical on every rank. */
static void norm_forward(cb_layout *L, const cb_norm *n, const float *x, float *y, float *mean,
                         float *rstd, int N) {
    if (n->parity) cb_split_norm_forward(L, group(L), S_NORM, n, x, y, mean, rstd, N, n->C / L->tp);
    else L->k->layernorm_forward(L->k, y, mean, rstd, x, n->w, n->b, N, n->C);
}

static void norm_backward(cb_layout *L, cb_norm *n, const float *x, const float *dy, float *dx,
                          const float *mean, const float *rstd, int N) {
    if (n->parity)
        cb_split_norm_backward(L, group(L), NULL, S_NORM, S_NORM2, n, x, dy, dx, mean, rstd, N,
                               n->C / L->tp);
    else L->k->layernorm_backward(L->k, dx, n->dw, n->db, dy, x, n->w, mean, rstd, N, n->C,
                                  !n->overwrite);
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
    cb_layout_sum(L, group(L), "linear.fwd", y, (size_t)N * l->out);
    if (l->b) L->k->bias_add(L->k, y, l->b, N, l->out);
}

/* Column-parallel: dx (N, in) summed over ranks. Row-parallel: dy is
 * replicated, so dx (N, in/P) is local and db is the same on every rank. */
static void linear_backward(cb_layout *L, cb_linear *l, const float *x, const float *dy,
                            float *dx, int N) {
    int P = L->tp;
    if (l->parity == 0) {
        L->k->matmul_backward(L->k, dx, l->dw, l->db, dy, x, l->w, N, l->in, l->out / P,
                              !l->overwrite);
        cb_layout_sum(L, group(L), "linear.bwd", dx, (size_t)N * l->in);
    } else {
        L->k->matmul_backward(L->k, dx, l->dw, l->db, dy, x, l->w, N, l->in / P, l->out,
                              !l->overwrite);
    }
}

/* ---------------------------------------------------------------- head */

/* Tied head and vocabulary-parallel cross-entropy (ops.c): x (N,C)
 * replicated, logits (N, V_pad/P) local, replaced by probabilities; losses
 * (N) follow. */
static float head_forward(cb_layout *L, const cb_embed *e, const float *x, const int *targets,
                          float *logits, int N) {
    int Vl = vocab_local(L, e->V), v0 = L->tp_rank * Vl;
    L->k->head_forward(L->k, logits, x, e->wte, N, e->C, Vl);
    cb_vocab_bias_add(L, e, logits, N, Vl, v0);
    double total = cb_vocab_loss_forward(L, group(L), S_CE, e, logits, logits + (size_t)N * Vl,
                                         targets, N, Vl, v0);
    return targets ? (float)(total / N) : 0.0f;
}

/* dlogits = (p - onehot) dloss/N locally; dx (N,C) = dlogits wte_shard
 * summed over ranks; dwte_shard += dlogits^T x. */
static void head_backward(cb_layout *L, cb_embed *e, const float *x, const int *targets,
                          float *logits, float dloss, float *dx, int N) {
    int Vl = vocab_local(L, e->V), v0 = L->tp_rank * Vl;
    cb_vocab_loss_backward(L, e, logits, targets, v0, dloss / N, N, Vl);
    cb_vocab_bias_backward(L, S_CE, NULL, e, logits, v0, N, Vl); /* every rank: all tokens */
    L->k->head_backward(L->k, dx, e->dwte, logits, x, e->wte, N, e->C, Vl, !e->overwrite);
    cb_layout_sum(L, group(L), "head.bwd", dx, (size_t)N * e->C);
}

/* --comm-dtype bf16: the group's staging (kept_need bytes) */
static int plan_alloc(cb_layout *L, cb_err *e) {
    if (cb_comm_reserve_wire(group(L), L->ws.kept_need / sizeof(uint16_t)))
        return cb_fail(e, CB_ENOMEM, "out of memory for the bf16 staging of the 1-D sums: %zu bytes",
                       L->ws.kept_need);
    return CB_OK;
}

static void plan(cb_layout *L, const cb_layout_use *u) {
    int N = u->B * u->T;
    if (L->wire_bf16) { /* the bf16 staging of the sums, allocated by plan_alloc */
        size_t w = u->op == CB_OP_LINEAR ? (u->lin->parity ? u->lin->out : u->lin->in)
                   : u->op == CB_OP_EMBED || u->op == CB_OP_HEAD ? u->emb->C : 0;
        size_t bytes = sizeof(uint16_t) * N * w;
        if (bytes > L->ws.kept_need) L->ws.kept_need = bytes;
    }
    if (u->op == CB_OP_NORM && u->norm->parity)
        cb_split_norm_reserve(L, S_NORM, S_NORM2, N, u->norm->C / L->tp);
    if (u->op == CB_OP_HEAD) cb_vocab_loss_reserve(L, S_CE, N, u->emb);
    if (u->op == CB_OP_HEAD && u->bias) cb_vocab_bias_reserve(L, S_CE, vocab_local(L, u->emb->V));
}

static void layout_free(cb_layout *L) { free(L); }

static const cb_layout_ops OPS = {
    .name = "1d",
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
    .input_rewritten = cb_layout_nothing_kept,
    .attention_forward = cb_split_attention_forward,
    .attention_backward = cb_split_attention_backward,
    .head_forward = head_forward,
    .head_backward = head_backward,
    .free = layout_free,
    .plan = plan,
    .plan_alloc = plan_alloc,
};

int cb_layout_1d(cb_grid *g, cb_layout **out, cb_err *e) {
    cb_layout *L = malloc(sizeof *L);
    if (!L) return cb_fail(e, CB_ENOMEM, "out of memory creating the 1-D tensor-parallel layout");
    *L = (cb_layout){.ops = &OPS, .mode = CB_LAYOUT_1D, .tp = g->tp, .q = g->tp,
                     .caps = CB_LAYOUT_ROWS, .tp_rank = g->at.t, .grid = g,
                     .k = cb_kernels_default()};
    *out = L;
    return CB_OK;
}
