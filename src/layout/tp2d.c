/* 2-D tensor parallelism (SUMMA / Optimus), tp = q^2, rank (r, c) with
 * t = r * q + c; grid->row holds the ranks of row r (rank c), grid->col
 * those of column c (rank r).
 *
 * Every activation (both parities) is N/q tokens (token block r, whole
 * sequences) x H/q features (block c; a parts > 1 tensor has each section
 * split q ways, local columns [q_c | k_c | v_c]). A weight W [in, out] is
 * in/q rows (block r) x out/q columns (block c, parts-aware). Biases and
 * LayerNorm vectors: block c, replicated over r (owner r == 0), gradients
 * all-reduced over the column. wte [V_pad, C], V_pad = V rounded up to a
 * multiple of q: vocabulary block c x feature block r, i.e. the head's
 * weight wte^T [C, V_pad] cut like any linear weight, so the head is a plain
 * SUMMA and its logits are N/q tokens x V_pad/q vocabulary. wpe [T_pad, C],
 * T_pad = T rounded up to a multiple of q: position block r x feature block
 * c (1/q^2, like every weight); the forward all-gathers the column's
 * position blocks (every token block holds whole sequences, so all T
 * positions), the backward reduce-scatters the position sums back.
 *
 * Linears follow docs/parallelism.md: forward in q broadcast steps (block t of X
 * along the row, block t of W along the column, the next pair in flight
 * while the current product runs); backward dX = dY W^T broadcasts W along
 * the column and reduces the partial to c = t along the row, dW = X^T dY
 * broadcasts X along the row and reduces to r = t along the column. Per
 * linear, forward + backward, every rank is charged 3 (q-1)/q^2
 * (N in + in out) elements, so a GPT block costs 3 (q-1)/q^2
 * (7 N h + 12 h^2). Scratch is a double buffer of one block of each
 * operand, not a gathered row or column. Every GEMM of a step runs in row
 * blocks with MPI progress on the broadcasts in flight between them
 * (layout.h, overlap_chunks): otherwise the next block's broadcast would
 * not move until the step's GEMM ends. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/grid.h"
#include "layout/layout.h"

/* Workspace slots (layout.h), planned at build and reused by every operator. */
enum { S_A0, S_A1, S_B0, S_B1, S_T1, S_T2, S_T3, S_H0, S_H1, NSCR };

/* The largest in-place reduces on the row and the column (cb_comm_reserve). */
typedef struct tp2d {
    size_t red_row, red_col;
    size_t wire_row; /* --comm-dtype bf16: the row's largest blocking bf16 staging */
} tp2d;

static float *scratch(cb_layout *L, int slot, size_t n) {
    return cb_layout_scratch(L, slot, sizeof(float) * n);
}

static cb_comm *rowg(cb_layout *L) { return &L->grid->row; }
static cb_comm *colg(cb_layout *L) { return &L->grid->col; }
static int vpad(const cb_layout *L, int V) { return (V + L->q - 1) / L->q * L->q; }

/* One operand of a SUMMA: block t comes from rank t of comm; while step t
 * computes, block t+1 is already being broadcast into the other buffer. */
typedef struct bpipe {
    cb_comm *comm;
    const char *tag;
    const float *mine;
    size_t n;
    int q;
    float *buf[2];
    cb_comm_req req[2];
    uint16_t *h[2]; /* an activation's pipe under --comm-dtype bf16: the bf16 staging; else NULL */
} bpipe;

static void bp_post(bpipe *p, int t) {
    float *b = p->buf[t & 1];
    if (p->comm->rank == t) memcpy(b, p->mine, sizeof(float) * p->n);
    if (p->h[0]) cb_comm_ibcast_bf16f(p->comm, p->tag, b, p->n, t, p->h[t & 1], &p->req[t & 1]);
    else cb_comm_ibcast(p->comm, p->tag, b, p->n, t, &p->req[t & 1]);
}

/* mine (n) is this rank's block; slot and slot+1 hold the two buffers;
 * act: an activation, broadcast in bf16 under --comm-dtype bf16 */
static bpipe bp_start(cb_layout *L, cb_comm *comm, const char *tag, const float *mine, size_t n,
                      int slot, int act) {
    bpipe p = {comm, tag, mine, n, L->q, {scratch(L, slot, n), scratch(L, slot + 1, n)}, {{0}},
               {NULL, NULL}};
    if (act && L->wire_bf16)
        for (int i = 0; i < 2; i++) p.h[i] = cb_layout_scratch(L, S_H0 + i, sizeof(uint16_t) * n);
    bp_post(&p, 0);
    return p;
}

/* block t, waiting for it and starting t+1 */
static const float *bp_get(bpipe *p, int t) {
    cb_comm_wait(&p->req[t & 1]);
    if (t + 1 < p->q) bp_post(p, t + 1);
    return p->buf[t & 1];
}

/* The broadcast of block t+1, in flight once block t was taken; NULL after the last. */
static cb_comm_req *next_req(bpipe *p, int t) { return t + 1 < p->q ? &p->req[(t + 1) & 1] : NULL; }

/* y (n, b) = x (n, a) w (a, b) [+ bias] in L->overlap_chunks token blocks,
 * MPI progress on the two pending broadcasts between them (layout.h) */
static void mm_rows(cb_layout *L, float *y, const float *x, const float *w, const float *bias,
                    int n, int a, int b, cb_comm_req *const *pend) {
    int k = L->overlap_chunks > 1 ? L->overlap_chunks : 1;
    for (int c = 0; c < k; c++) {
        int r0 = n * c / k, r1 = n * (c + 1) / k;
        if (r1 > r0)
            L->k->matmul_forward(L->k, y + (size_t)r0 * b, x + (size_t)r0 * a, w, bias, r1 - r0, a, b);
        if (c + 1 < k) cb_layout_progress(pend, 2);
    }
}

/* y (n, b) = x (n, a) w (b, a)^T, likewise */
static void mmt_rows(cb_layout *L, float *y, const float *x, const float *w, int n, int a, int b,
                     cb_comm_req *const *pend) {
    int k = L->overlap_chunks > 1 ? L->overlap_chunks : 1;
    for (int c = 0; c < k; c++) {
        int r0 = n * c / k, r1 = n * (c + 1) / k;
        if (r1 > r0) L->k->head_forward(L->k, y + (size_t)r0 * b, x + (size_t)r0 * a, w, r1 - r0, a, b);
        if (c + 1 < k) cb_layout_progress(pend, 2);
    }
}

/* Sum over the ranks of comm of a local contribution v (n), added into acc. */
static void reduce_add(cb_layout *L, cb_comm *comm, const char *tag, float *v, float *acc,
                       size_t n, int overwrite) {
    cb_comm_allreduce(comm, tag, NULL, v, n, CB_COMM_SUM);
    cb_layout_grad_put(L, acc, v, n, overwrite);
}

/* ------------------------------------------------------------ shapes */

/* batch % q, d_model % q, heads % q; the vocabulary is padded to a
 * multiple of q and the padding reported */
static int check(const cb_layout *L, int B, int T, int C, int NH, int V, cb_err *e) {
    (void)T;
    int q = L->q, tp = L->tp;
    char who[64], what[16];
    if (q * q != tp)
        return cb_fail(e, CB_EINPUT, "--tp-mode 2d needs --tp a perfect square (4, 9, 16...); got %d",
                       tp);
    snprintf(who, sizeof who, "--tp-mode 2d with tp %d (q=%d)", tp, q);
    if (B % q)
        return cb_fail(e, CB_EINPUT,
                       "%s needs the batch of each data-parallel rank divisible by q=%d sequences "
                       "(token blocks are whole sequences); got batch %d: use batch %d",
                       who, q, B, (B / q + 1) * q);
    int rc = cb_layout_check_widths(C, NH, q, q, who, "activations and weights are split q ways "
                                    "along it", NULL, e);
    if (rc) return rc;
    snprintf(what, sizeof what, "q=%d", q);
    cb_layout_note_pad((cb_layout *)L, V, vpad(L, V), what);
    return CB_OK;
}

static void act_shape(const cb_layout *L, int N, int H, int parity, int *rows, int *cols) {
    (void)parity;
    *rows = N / L->q;
    *cols = H / L->q;
}

/* columns block c of a width split into parts sections, each cut q ways */
static void col_blocks(cb_shard *s, int q, int c, int64_t H, int parts) {
    int64_t w = H / parts / q;
    s->nseg = parts;
    for (int g = 0; g < parts; g++) {
        s->col0[g] = g * (H / parts) + c * w;
        s->ncol[g] = w;
    }
}

static cb_shard act_shard(const cb_layout *L, int tp_rank, int N, int H, int parity, int parts) {
    (void)parity;
    int q = L->q, r = tp_rank / q, c = tp_rank % q;
    cb_shard s = {.R = N, .C = H, .rows_pad = N, .row0 = (int64_t)r * (N / q), .nrows = N / q,
                  .owner = 1};
    col_blocks(&s, q, c, H, parts);
    return s;
}

/* the local logits (tokens r x vocabulary block c), then the per-token losses */
static size_t logits_numel(const cb_layout *L, int N, int V) {
    size_t n = (size_t)N / L->q;
    return n * (vpad(L, V) / L->q) + n;
}

static cb_shard shard(const cb_layout *L, int tp_rank, cb_param_kind kind, int64_t R, int64_t C,
                      int parts, int parity) {
    (void)parity;
    int q = L->q, r = tp_rank / q, c = tp_rank % q;
    cb_shard s = {.R = R, .C = C, .rows_pad = R, .row0 = 0, .nrows = R, .owner = r == 0};
    switch (kind) {
    case CB_P_LINEAR_W:
        s.row0 = r * (R / q);
        s.nrows = R / q;
        s.owner = 1;
        col_blocks(&s, q, c, C, parts);
        break;
    case CB_P_LINEAR_B:
        col_blocks(&s, q, c, C, parts);
        break;
    case CB_P_NORM:
        col_blocks(&s, q, c, C, 1);
        break;
    case CB_P_VOCAB: /* the head's vocabulary block c, replicated over r */
        s = cb_vocab_bias_shard(C, c * (vpad(L, C) / q), vpad(L, C) / q, r == 0);
        break;
    case CB_P_POS:
        s.rows_pad = (R + q - 1) / q * q;
        s.nrows = s.rows_pad / q;
        s.row0 = r * s.nrows;
        s.owner = 1;
        col_blocks(&s, q, c, C, 1);
        break;
    case CB_P_EMBED:
        s.rows_pad = (R + q - 1) / q * q;
        s.row0 = c * (s.rows_pad / q);
        s.nrows = s.rows_pad / q;
        s.owner = 1;
        col_blocks(&s, q, r, C, 1);
        break;
    }
    return s;
}

/* ------------------------------------------------------------ embedding */

/* The partner (c, r) swaps blocks with (r, c): send (n) out, recv (n) in. */
static void transpose_swap(cb_layout *L, const char *tag, const float *send, float *recv,
                           size_t n) {
    int q = L->q, r = L->grid->at.r, c = L->grid->at.c, partner = c * q + r;
    if (partner == L->tp_rank) {
        memcpy(recv, send, sizeof(float) * n);
        return;
    }
    cb_comm_req rq[2];
    cb_comm_irecv(&L->grid->tpg, tag, recv, n, partner, 41, &rq[0]);
    cb_comm_isend(&L->grid->tpg, tag, send, n, partner, 41, &rq[1]);
    cb_comm_waitall(rq, 2);
}

/* x (N/q, C/q) = wte[ids] + wpe[t]. Each rank looks up its vocabulary block
 * for all N tokens (feature block r, zero where the id is elsewhere); a
 * reduce-scatter over the row leaves tokens c x features r, which is the
 * block of the transposed rank (c, r): one swap puts it in place. The
 * positions (T_pad x C/q, feature block c) are all-gathered over the
 * column from its q position blocks. */
static void embed_forward(cb_layout *L, const cb_embed *e, const int *ids, int B, int T,
                          float *x) {
    int q = L->q, r = L->grid->at.r, c = L->grid->at.c, N = B * T, n = N / q, cq = e->C / q;
    int Vq = vpad(L, e->V) / q;
    float *part = scratch(L, S_T1, (size_t)N * cq), *blk = scratch(L, S_T2, (size_t)n * cq);
    L->k->embedding_rows(L->k, part, ids, e->wte, c * Vq, Vq, N, cq);
    cb_layout_reduce_scatter(L, rowg(L), "embed.fwd", part, blk, (size_t)n * cq);
    transpose_swap(L, "embed.fwd", blk, x, (size_t)n * cq);
    int tq = (e->T + q - 1) / q; /* position rows per rank */
    float *wpe = scratch(L, S_T2, (size_t)tq * q * cq);
    cb_comm_allgather(colg(L), "embed.fwd", e->wpe, wpe, (size_t)tq * cq);
    L->k->position_add(L->k, x, wpe, r * n, T, n, cq);
}

/* The mirror: swap, all-gather over the row (all N tokens x features r),
 * scatter-add the ids of my vocabulary block in token order; the position
 * sums (T_pad x C/q) reduce-scattered over the column to their owners. */
static void embed_backward(cb_layout *L, cb_embed *e, const int *ids, int B, int T,
                           const float *dx) {
    int q = L->q, r = L->grid->at.r, c = L->grid->at.c, N = B * T, n = N / q, cq = e->C / q;
    int Vq = vpad(L, e->V) / q;
    float *full = scratch(L, S_T1, (size_t)N * cq);
    transpose_swap(L, "embed.bwd", dx, full + (size_t)c * n * cq, (size_t)n * cq);
    cb_layout_allgather(L, rowg(L), "embed.bwd", NULL, full, (size_t)n * cq);
    L->k->embedding_rows_backward(L->k, e->dwte, full, ids, c * Vq, Vq, N, cq);
    if (!e->dwpe) return; /* fixed positions */
    int tq = (e->T + q - 1) / q;
    float *dpe = cb_layout_zeroed(L, S_T2, sizeof(float) * tq * q * cq);
    L->k->position_backward(L->k, dpe, dx, r * n, T, n, cq);
    cb_comm_reduce_scatter(colg(L), "embed.bwd", NULL, dpe, (size_t)tq * cq);
    L->k->residual_forward(L->k, e->dwpe, e->dwpe, dpe, (size_t)tq * cq);
}

/* ------------------------------------------------------------ LayerNorm */

/* Features split along the row (ops.c); the weight and bias are
 * replicated down the column, which sums their gradients. */
static void norm_forward(cb_layout *L, const cb_norm *nm, const float *x, float *y, float *mean,
                         float *rstd, int N) {
    cb_split_norm_forward(L, rowg(L), S_T1, nm, x, y, mean, rstd, N / L->q, nm->C / L->q);
}

static void norm_backward(cb_layout *L, cb_norm *nm, const float *x, const float *dy, float *dx,
                          const float *mean, const float *rstd, int N) {
    cb_split_norm_backward(L, rowg(L), colg(L), S_T1, S_T2, nm, x, dy, dx, mean, rstd, N / L->q,
                           nm->C / L->q);
}

/* ------------------------------------------------------------ linears */

/* y[r,c] (N/q, out/q) = sum_t x[r,t] (N/q, in/q) @ w[t,c] (in/q, out/q) + b_c */
static void linear_forward(cb_layout *L, cb_linear *l, const float *x, float *y, int N) {
    int q = L->q, n = N / q, a = l->in / q, b = l->out / q;
    float *tmp = scratch(L, S_T1, (size_t)n * b);
    bpipe px = bp_start(L, rowg(L), "linear.fwd", x, (size_t)n * a, S_A0, 1);
    bpipe pw = bp_start(L, colg(L), "linear.fwd", l->w, (size_t)a * b, S_B0, 0);
    for (int t = 0; t < q; t++) {
        const float *xt = bp_get(&px, t), *wt = bp_get(&pw, t);
        cb_comm_req *pend[2] = {next_req(&px, t), next_req(&pw, t)};
        mm_rows(L, t ? tmp : y, xt, wt, t ? NULL : l->b, n, a, b, pend);
        if (t) L->k->residual_forward(L->k, y, y, tmp, (size_t)n * b);
    }
}

/* Step t: dx[r,t] = sum_c dy[r,c] w[t,c]^T, reduced along the row to c = t
 * (overwrites); dw[t,c] += sum_r x[r,t]^T dy[r,c], reduced along the column
 * to r = t (accumulates, or overwrites: l->overwrite); db_c summed over the
 * column. */
static void linear_backward(cb_layout *L, cb_linear *l, const float *x, const float *dy,
                            float *dx, int N) {
    int q = L->q, n = N / q, a = l->in / q, b = l->out / q;
    int r = L->grid->at.r, c = L->grid->at.c;
    float *part = scratch(L, S_T1, (size_t)n * a), *z = scratch(L, S_T2, (size_t)a * b);
    bpipe pw = bp_start(L, colg(L), "linear.bwd", l->w, (size_t)a * b, S_B0, 0);
    bpipe px = bp_start(L, rowg(L), "linear.bwd", x, (size_t)n * a, S_A0, 1);
    for (int t = 0; t < q; t++) {
        const float *wt = bp_get(&pw, t);
        int root = c == t;
        cb_comm_req *pend[2] = {next_req(&pw, t), &px.req[t & 1]};
        mmt_rows(L, root ? dx : part, dy, wt, n, b, a, pend);
        cb_layout_reduce(L, rowg(L), "linear.bwd", root ? NULL : part, root ? dx : NULL,
                       (size_t)n * a, t);
        const float *xt = bp_get(&px, t);
        root = r == t;
        pend[1] = next_req(&px, t);
        cb_layout_dw_overlapped(L, root ? l->dw : z, dy, xt, n, a, b, pend, 2,
                                root && !l->overwrite);
        cb_comm_reduce(colg(L), "linear.bwd", root ? NULL : z, root ? l->dw : NULL,
                       (size_t)a * b, t);
    }
    if (!l->db) return;
    float *g = cb_layout_zeroed(L, S_T3, sizeof(float) * b);
    L->k->bias_backward(L->k, g, dy, n, b);
    reduce_add(L, colg(L), "linear.bwd", g, l->db, b, l->overwrite);
}

/* ------------------------------------------------------------ LM head */

/* logits[r,c] (N/q, V_pad/q) = sum_t x[r,t] wte(t,c)^T, SUMMA with wte^T
 * as the weight; then the vocabulary-parallel cross-entropy along the row:
 * MAX of the row maxima, SUM of (exp-sum, target logit). Padded vocabulary
 * columns get probability 0. Probabilities stay in logits for backward. */
static float head_forward(cb_layout *L, const cb_embed *e, const float *x, const int *targets,
                          float *logits, int N) {
    int q = L->q, n = N / q, cq = e->C / q, Vq = vpad(L, e->V) / q, c = L->grid->at.c;
    int r = L->grid->at.r, v0 = c * Vq;
    float *tmp = scratch(L, S_T1, (size_t)n * Vq), *losses = logits + (size_t)n * Vq;
    bpipe px = bp_start(L, rowg(L), "head.fwd", x, (size_t)n * cq, S_A0, 1);
    bpipe pw = bp_start(L, colg(L), "head.fwd", e->wte, (size_t)Vq * cq, S_B0, 0);
    for (int t = 0; t < q; t++) {
        const float *xt = bp_get(&px, t), *wt = bp_get(&pw, t);
        cb_comm_req *pend[2] = {next_req(&px, t), next_req(&pw, t)};
        mmt_rows(L, t ? tmp : logits, xt, wt, n, cq, Vq, pend);
        if (t) L->k->residual_forward(L->k, logits, logits, tmp, (size_t)n * Vq);
    }
    cb_vocab_bias_add(L, e, logits, n, Vq, v0);
    double sum = cb_vocab_loss_forward(L, rowg(L), S_T2, e, logits, losses,
                                       targets ? targets + (size_t)r * n : NULL, n, Vq, v0);
    if (!targets) return 0.0f;
    cb_comm_allreduce_f64(colg(L), "head.fwd", NULL, &sum, 1, CB_COMM_SUM);
    return (float)(sum / N);
}

/* dlogits = (p - onehot) dloss / N in place; dx[r,t] = sum_c dlogits[r,c]
 * wte(t,c) reduced along the row to c = t; dwte(t,c) += sum_r
 * dlogits[r,c]^T x[r,t] reduced along the column to r = t. */
static void head_backward(cb_layout *L, cb_embed *e, const float *x, const int *targets,
                          float *logits, float dloss, float *dx, int N) {
    int q = L->q, n = N / q, cq = e->C / q, Vq = vpad(L, e->V) / q;
    int r = L->grid->at.r, c = L->grid->at.c, v0 = c * Vq;
    cb_vocab_loss_backward(L, e, logits, targets + (size_t)r * n, v0, dloss / N, n, Vq);
    cb_vocab_bias_backward(L, S_T2, colg(L), e, logits, v0, n, Vq); /* token blocks r */
    float *part = scratch(L, S_T1, (size_t)n * cq), *z = scratch(L, S_T2, (size_t)Vq * cq);
    bpipe pw = bp_start(L, colg(L), "head.bwd", e->wte, (size_t)Vq * cq, S_B0, 0);
    bpipe px = bp_start(L, rowg(L), "head.bwd", x, (size_t)n * cq, S_A0, 1);
    for (int t = 0; t < q; t++) {
        const float *wt = bp_get(&pw, t);
        int root = c == t;
        cb_comm_req *pend[2] = {next_req(&pw, t), &px.req[t & 1]};
        mm_rows(L, root ? dx : part, logits, wt, NULL, n, Vq, cq, pend);
        cb_layout_reduce(L, rowg(L), "head.bwd", root ? NULL : part, root ? dx : NULL,
                       (size_t)n * cq, t);
        const float *xt = bp_get(&px, t);
        root = r == t;
        pend[1] = next_req(&px, t);
        cb_layout_dw_overlapped(L, root ? e->dwte : z, xt, logits, n, Vq, cq, pend, 2,
                                root && !e->overwrite);
        cb_comm_reduce(colg(L), "head.bwd", root ? NULL : z, root ? e->dwte : NULL,
                       (size_t)Vq * cq, t);
    }
}

/* ------------------------------------------------------------ lifetime */

static void layout_free(cb_layout *L) {
    free(L->priv);
    free(L);
}

/* The reduces' copies, counted in kept_need by the plan. */
static int plan_alloc(cb_layout *L, cb_err *e) {
    tp2d *p = L->priv;
    if (cb_comm_reserve(rowg(L), p->red_row) || cb_comm_reserve(colg(L), p->red_col) ||
        cb_comm_reserve_wire(rowg(L), p->wire_row))
        return cb_fail(e, CB_ENOMEM, "out of memory for the 2-D reduces' buffers: %zu bytes",
                       L->ws.kept_need);
    return CB_OK;
}

static void reserve(cb_layout *L, int slot, size_t n) { cb_layout_reserve(L, slot, sizeof(float) * n); }

/* the bytes plan_alloc reserves in the communicators */
static void count_kept(cb_layout *L) {
    tp2d *p = L->priv;
    L->ws.kept_need = sizeof(float) * (p->red_row + p->red_col) + sizeof(uint16_t) * p->wire_row;
}

/* A SUMMA's double buffers of an (n, a) and an (a, b) operand, its partial
 * product (n, b) and, backward, the partial dx (n, a) and dw (a, b). */
static void reserve_summa(cb_layout *L, size_t n, size_t a, size_t b) {
    tp2d *p = L->priv;
    p->red_row = n * a > p->red_row ? n * a : p->red_row;
    p->red_col = a * b > p->red_col ? a * b : p->red_col;
    if (L->wire_bf16) { /* the bf16 reduce of dx (send and result), the pipes' staging */
        p->wire_row = 2 * n * a > p->wire_row ? 2 * n * a : p->wire_row;
        cb_layout_reserve(L, S_H0, sizeof(uint16_t) * n * a);
        cb_layout_reserve(L, S_H1, sizeof(uint16_t) * n * a);
    }
    count_kept(L);
    reserve(L, S_A0, n * a), reserve(L, S_A1, n * a);
    reserve(L, S_B0, a * b), reserve(L, S_B1, a * b);
    reserve(L, S_T1, n * (a > b ? a : b)), reserve(L, S_T2, a * b);
}

static void plan(cb_layout *L, const cb_layout_use *u) {
    size_t q = L->q, N = (size_t)u->B * u->T, n = N / q;
    if (u->op == CB_OP_LINEAR) {
        reserve_summa(L, n, u->lin->in / q, u->lin->out / q);
        reserve(L, S_T3, u->lin->out / q);
    } else if (u->op == CB_OP_NORM) {
        cb_split_norm_reserve(L, S_T1, S_T2, (int)n, u->norm->C / L->q);
    } else if (u->op == CB_OP_HEAD) {
        size_t cq = u->emb->C / q, Vq = vpad(L, u->emb->V) / q;
        reserve_summa(L, n, cq, Vq);
        cb_vocab_loss_reserve(L, S_T2, (int)n, u->emb);
        if (u->bias) cb_vocab_bias_reserve(L, S_T2, (int)Vq);
    } else if (u->op == CB_OP_EMBED) {
        size_t cq = u->emb->C / q, tq = (u->emb->T + q - 1) / q;
        reserve(L, S_T1, N * cq);
        reserve(L, S_T2, n * cq > tq * q * cq ? n * cq : tq * q * cq);
        if (L->wire_bf16) { /* the bf16 reduce-scatter and all-gather over the row */
            tp2d *p = L->priv;
            p->wire_row = N * cq > p->wire_row ? N * cq : p->wire_row;
            count_kept(L);
        }
    }
}

static const cb_layout_ops OPS = {
    .name = "2d",
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

int cb_layout_2d(cb_grid *g, cb_layout **out, cb_err *e) {
    if (g->q < 1 || g->q * g->q != g->tp)
        return cb_fail(e, CB_EINPUT, "--tp-mode 2d needs --tp a perfect square (4, 9, 16...); got %d",
                       g->tp);
    cb_layout *L = malloc(sizeof *L);
    tp2d *p = calloc(1, sizeof *p);
    if (!L || !p) {
        free(L);
        free(p);
        return cb_fail(e, CB_ENOMEM, "out of memory creating the 2-D layout");
    }
    *L = (cb_layout){.ops = &OPS, .mode = CB_LAYOUT_2D, .tp = g->tp, .q = g->q,
                     .caps = CB_LAYOUT_ROWS, .tp_rank = g->at.t, .grid = g,
                     .k = cb_kernels_default(),
                     .overlap_chunks = CB_OVERLAP_CHUNKS, .priv = p};
    *out = L;
    return CB_OK;
}
