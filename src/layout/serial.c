/* The serial layout: every tensor whole on one rank; each operator is the
 * kernel itself. The reference every other layout is checked against. */
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"

static int check(const cb_layout *L, int B, int T, int C, int NH, int V, cb_err *e) {
    (void)L, (void)B, (void)T, (void)C, (void)NH, (void)V, (void)e;
    return CB_OK;
}

static void act_shape(const cb_layout *L, int N, int H, int parity, int *rows, int *cols) {
    (void)L, (void)parity;
    *rows = N;
    *cols = H;
}

static cb_shard act_shard(const cb_layout *L, int tp_rank, int N, int H, int parity, int parts) {
    (void)L, (void)tp_rank, (void)parity, (void)parts;
    return (cb_shard){.R = N, .C = H, .rows_pad = N, .row0 = 0, .nrows = N, .nseg = 1,
                      .col0 = {0}, .ncol = {H}, .owner = 1};
}

/* the logits, then the per-token losses */
static size_t logits_numel(const cb_layout *L, int N, int V) {
    (void)L;
    return (size_t)N * V + N;
}

static cb_shard shard(const cb_layout *L, int tp_rank, cb_param_kind kind, int64_t R, int64_t C,
                      int parts, int parity) {
    (void)L, (void)tp_rank, (void)kind, (void)parts, (void)parity;
    return (cb_shard){.R = R, .C = C, .rows_pad = R, .row0 = 0, .nrows = R, .nseg = 1,
                      .col0 = {0}, .ncol = {C}, .owner = 1};
}

static void embed_forward(cb_layout *L, const cb_embed *e, const int *ids, int B, int T,
                          float *x) {
    L->k->encoder_forward(L->k, x, ids, e->wte, e->wpe, B, T, e->C);
}

static void embed_backward(cb_layout *L, cb_embed *e, const int *ids, int B, int T,
                           const float *dx) {
    L->k->encoder_backward(L->k, e->dwte, e->dwpe, dx, ids, B, T, e->C);
}

static void norm_forward(cb_layout *L, const cb_norm *n, const float *x, float *y, float *mean,
                         float *rstd, int N) {
    L->k->layernorm_forward(L->k, y, mean, rstd, x, n->w, n->b, N, n->C);
}

static void norm_backward(cb_layout *L, cb_norm *n, const float *x, const float *dy, float *dx,
                          const float *mean, const float *rstd, int N) {
    L->k->layernorm_backward(L->k, dx, n->dw, n->db, dy, x, n->w, mean, rstd, N, n->C,
                             !n->overwrite);
}

static void linear_forward(cb_layout *L, cb_linear *l, const float *x, float *y, int N) {
    L->k->matmul_forward(L->k, y, x, l->w, l->b, N, l->in, l->out);
}

static void linear_backward(cb_layout *L, cb_linear *l, const float *x, const float *dy,
                            float *dx, int N) {
    L->k->matmul_backward(L->k, dx, l->dw, l->db, dy, x, l->w, N, l->in, l->out, !l->overwrite);
}

enum { S_LOSS }; /* label smoothing's statistics (ops.c) */

/* A smoothed or weighted loss takes the split operator's path with no
 * reduction; the plain one the whole-row kernel, as before. */
static float head_forward(cb_layout *L, const cb_embed *e, const float *x, const int *targets,
                          float *logits, int N) {
    float *losses = logits + (size_t)N * e->V;
    L->k->head_forward(L->k, logits, x, e->wte, N, e->C, e->V);
    cb_vocab_bias_add(L, e, logits, N, e->V, 0);
    if (targets && !cb_loss_plain(e))
        return (float)(cb_vocab_loss_forward(L, NULL, S_LOSS, e, logits, losses, targets, N, e->V, 0) / N);
    L->k->crossentropy_forward(L->k, losses, logits, targets, N, e->V);
    if (!targets) return 0.0f;
    return (float)(L->k->sum(L->k, losses, (size_t)N) / N);
}

static void head_backward(cb_layout *L, cb_embed *e, const float *x, const int *targets,
                          float *logits, float dloss, float *dx, int N) {
    if (cb_loss_plain(e)) L->k->crossentropy_backward(L->k, logits, targets, dloss / N, N, e->V);
    else cb_vocab_loss_backward(L, e, logits, targets, 0, dloss / N, N, e->V);
    cb_vocab_bias_backward(L, 0, NULL, e, logits, 0, N, e->V);
    L->k->head_backward(L->k, dx, e->dwte, logits, x, e->wte, N, e->C, e->V, !e->overwrite);
}

static void plan(cb_layout *L, const cb_layout_use *u) {
    if (u->op == CB_OP_HEAD && !cb_loss_plain(u->emb)) cb_vocab_loss_reserve(L, S_LOSS, u->B * u->T, u->emb);
}

static void layout_free(cb_layout *L) { free(L); }

static const cb_layout_ops OPS = {
    .name = "serial",
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
    .plan = plan,
    .free = layout_free,
};

cb_layout *cb_layout_serial(void) {
    cb_layout *L = malloc(sizeof *L);
    if (L) *L = (cb_layout){.ops = &OPS, .mode = CB_LAYOUT_SERIAL, .tp = 1, .q = 1,
                            .caps = CB_LAYOUT_WHOLE | CB_LAYOUT_SAMPLES | CB_LAYOUT_ROWS,
                            .k = cb_kernels_default()};
    return L;
}
