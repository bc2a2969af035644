/* The distributed operators that every split layout shares, written once:
 * each layout hands them the communicators along which it split the data
 * (layout.h). All arithmetic is in kernels; these move data and reduce. */
#include "layout/layout.h"

#include <string.h>

#include "comm/grid.h"

/* One numerics for every layout: the row moments [sum x, sum x^2] in
 * double, reduced in one all-reduce, variance E[x^2] - mean^2 (the
 * kernel's comment says why that is exact enough); the backward's two row
 * sums likewise. */
void cb_split_norm_forward(cb_layout *L, cb_comm *feat, int slot, const cb_norm *n,
                           const float *x, float *y, float *mean, float *rstd, int N, int Cl) {
    double *s = cb_layout_scratch(L, slot, 2 * sizeof(double) * (size_t)N);
    L->k->layernorm_stats(L->k, s, x, N, Cl);
    cb_comm_allreduce_f64(feat, "norm.fwd", NULL, s, 2 * (size_t)N, CB_COMM_SUM);
    L->k->layernorm_apply(L->k, y, mean, rstd, x, n->w, n->b, s, N, Cl, n->C);
}

/* dx accumulates; the weight and bias gradients (n->overwrite) are summed
 * over rep (their copies) while the row sums are reduced over feat */
void cb_split_norm_backward(cb_layout *L, cb_comm *feat, cb_comm *rep, int slot, int slot2,
                            cb_norm *n, const float *x, const float *dy, float *dx,
                            const float *mean, const float *rstd, int N, int Cl) {
    float *g = NULL;
    cb_comm_req rg;
    if (rep) {
        g = cb_layout_scratch(L, slot2, 2 * sizeof(float) * (size_t)Cl);
        L->k->layernorm_param_grads(L->k, g, g + Cl, dy, x, mean, rstd, N, Cl, 0);
        cb_comm_iallreduce(rep, "norm.bwd", NULL, g, 2 * (size_t)Cl, CB_COMM_SUM, &rg);
    } else {
        L->k->layernorm_param_grads(L->k, n->dw, n->db, dy, x, mean, rstd, N, Cl, !n->overwrite);
    }
    double *s = cb_layout_scratch(L, slot, 2 * sizeof(double) * (size_t)N);
    L->k->layernorm_backward_stats(L->k, s, dy, x, n->w, mean, rstd, N, Cl);
    cb_comm_allreduce_f64(feat, "norm.bwd", NULL, s, 2 * (size_t)N, CB_COMM_SUM);
    L->k->layernorm_backward_apply(L->k, dx, s, dy, x, n->w, mean, rstd, N, Cl, n->C);
    if (!rep) return;
    cb_comm_wait(&rg);
    cb_layout_grad_put(L, n->dw, g, (size_t)Cl, n->overwrite);
    cb_layout_grad_put(L, n->db, g + Cl, (size_t)Cl, n->overwrite);
}

void cb_split_norm_reserve(cb_layout *L, int slot, int slot2, int N, int Cl) {
    cb_layout_reserve(L, slot, 2 * sizeof(double) * (size_t)N);
    cb_layout_reserve(L, slot2, 2 * sizeof(float) * (size_t)Cl);
}

/* Columns of [v0, v0 + Vl) below the true vocabulary V */
static int valid_cols(int V, int v0, int Vl) { return V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0; }

/* MAX of the row maxima, then SUM of (exp-sum, target logit): two
 * all-reduces of N and 2N floats; padded columns get probability 0. */
double cb_vocab_ce_forward(cb_layout *L, cb_comm *vocab, int slot, float *logits, float *losses,
                           const int *targets, int N, int Vl, int v0, int V) {
    int valid = valid_cols(V, v0, Vl);
    float *mx = cb_layout_scratch(L, slot, 3 * sizeof(float) * (size_t)N), *st = mx + N;
    L->k->crossentropy_max(L->k, mx, logits, N, Vl, valid);
    if (vocab) cb_comm_allreduce(vocab, "head.fwd", NULL, mx, (size_t)N, CB_COMM_MAX);
    L->k->crossentropy_exp(L->k, st, logits, mx, targets, v0, N, Vl, valid);
    if (vocab) cb_comm_allreduce(vocab, "head.fwd", NULL, st, 2 * (size_t)N, CB_COMM_SUM);
    double sum = L->k->crossentropy_normalize(L->k, losses, logits, st, mx, N, Vl, valid);
    int ignored = 0;
    for (int i = 0; targets && i < N; i++)
        if (targets[i] < 0) { /* the MLM's unmasked positions: no loss, no gradient */
            losses[i] = 0.0f, ignored = 1;
            memset(logits + (size_t)i * Vl, 0, sizeof(float) * (size_t)Vl);
        }
    return ignored ? L->k->sum(L->k, losses, (size_t)N) : sum;
}

void cb_vocab_bias_add(cb_layout *L, const cb_embed *e, float *logits, int N, int Vl, int v0) {
    int valid = valid_cols(e->V, v0, Vl);
    if (!e->bias) return;
    if (valid == Vl) L->k->bias_add(L->k, logits, e->bias, N, Vl);
    else /* the last block: the bias stops at the true vocabulary */
        for (int i = 0; i < N && valid > 0; i++)
            L->k->bias_add(L->k, logits + (size_t)i * Vl, e->bias, 1, valid);
}

/* The bias's block [v0, v0 + Vl) cut at V, as a 1-D tensor's columns
 * (CB_P_VOCAB): each layout's shard of the decoder bias */
cb_shard cb_vocab_bias_shard(int64_t V, int64_t v0, int64_t Vl, int owner) {
    int64_t n = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0;
    return (cb_shard){.R = 1, .C = V, .rows_pad = 1, .row0 = 0, .nrows = 1, .nseg = 1,
                      .col0 = {v0}, .ncol = {n}, .owner = owner};
}

void cb_vocab_bias_backward(cb_layout *L, int slot, cb_comm *share, const cb_embed *e,
                            const float *dlogits, int v0, int N, int Vl) {
    if (!e->dbias) return;
    int valid = valid_cols(e->V, v0, Vl);
    if (!share && valid == Vl) {
        L->k->bias_backward(L->k, e->dbias, dlogits, N, Vl);
        return;
    }
    /* the block's sums over this rank's tokens, then over the other token
     * blocks of the same vocabulary block; the padded columns dropped */
    float *g = cb_layout_zeroed(L, slot, sizeof(float) * (size_t)Vl);
    L->k->bias_backward(L->k, g, dlogits, N, Vl);
    if (share) cb_comm_allreduce(share, "head.bwd", NULL, g, (size_t)Vl, CB_COMM_SUM);
    L->k->residual_forward(L->k, e->dbias, e->dbias, g, (size_t)valid);
}

void cb_vocab_bias_reserve(cb_layout *L, int slot, int Vl) {
    cb_layout_reserve(L, slot, sizeof(float) * (size_t)Vl);
}

void cb_vocab_ce_reserve(cb_layout *L, int slot, int N) {
    cb_layout_reserve(L, slot, 3 * sizeof(float) * (size_t)N);
}

int cb_loss_plain(const cb_embed *e) { return e->smooth == 0.0f && !e->has_ignore; }

/* The smoothing statistics sit after the cross-entropy's 3N floats of the
 * same slot, taken before it overwrites the logits. */
double cb_vocab_loss_forward(cb_layout *L, cb_comm *vocab, int slot, const cb_embed *e,
                             float *logits, float *losses, const int *targets, int N, int Vl,
                             int v0) {
    if (!targets || cb_loss_plain(e))
        return cb_vocab_ce_forward(L, vocab, slot, logits, losses, targets, N, Vl, v0, e->V);
    float *st = (float *)cb_layout_scratch(L, slot, 5 * sizeof(float) * (size_t)N) + 3 * (size_t)N;
    L->k->crossentropy_smooth_stats(L->k, st, logits, targets, v0, N, Vl, valid_cols(e->V, v0, Vl));
    if (vocab) cb_comm_allreduce(vocab, "head.fwd", NULL, st, 2 * (size_t)N, CB_COMM_SUM);
    cb_vocab_ce_forward(L, vocab, slot, logits, losses, targets, N, Vl, v0, e->V);
    L->k->crossentropy_smooth_loss(L->k, losses, st, targets, e->smooth, e->V,
                                   e->has_ignore ? e->ignore : -1, e->loss_scale, N);
    return L->k->sum(L->k, losses, (size_t)N);
}

void cb_vocab_loss_backward(cb_layout *L, const cb_embed *e, float *logits, const int *targets,
                            int v0, float dloss, int N, int Vl) {
    if (cb_loss_plain(e)) L->k->crossentropy_backward_cols(L->k, logits, targets, v0, dloss, N, Vl);
    else L->k->crossentropy_smooth_backward(L->k, logits, targets, v0, dloss, e->smooth, e->V,
                                            e->has_ignore ? e->ignore : -1, e->loss_scale, N, Vl,
                                            valid_cols(e->V, v0, Vl));
}

void cb_vocab_loss_reserve(cb_layout *L, int slot, int N, const cb_embed *e) {
    cb_layout_reserve(L, slot, (cb_loss_plain(e) ? 3 : 5) * sizeof(float) * (size_t)N);
}

/* Attention needs no communication in any layout: a rank's parity-1
 * pieces hold whole sequences (a token block) and whole heads (a feature
 * block of each section). a is the micro-batch's; this rank's part is
 * read off the shard of a's output, and its lengths start at the block's
 * first sequence. */
static cb_attn local_attn(const cb_layout *L, const cb_attn *a) {
    cb_shard s = L->ops->act_shard(L, L->tp_rank, a->B * a->Tq, a->C, 1, 1);
    int f = a->C / (int)cb_shard_cols(&s), b0 = (int)(s.row0 / a->Tq);
    cb_attn l = *a;
    l.B = (int)(s.nrows / a->Tq), l.C = a->C / f, l.NH = a->NH / f;
    l.b0 = a->b0 + b0, l.h0 = a->h0 + (int)(s.col0[0] / (a->C / a->NH)); /* dropout's indices */
    l.ldq = a->ldq / f, l.ldkv = a->ldkv / f, l.koff = a->koff / f, l.voff = a->voff / f;
    if (a->qlen) l.qlen = a->qlen + b0;
    if (a->klen) l.klen = a->klen + b0;
    return l;
}

void cb_split_attention_forward(cb_layout *L, const cb_attn *a, const float *q, const float *kv,
                                float *y, float *att) {
    cb_attn l = local_attn(L, a);
    L->k->attention_forward(L->k, &l, y, att, q, kv);
}

void cb_split_attention_backward(cb_layout *L, const cb_attn *a, const float *q, const float *kv,
                                 const float *att, const float *dy, float *dq, float *dkv,
                                 float *scratch) {
    cb_attn l = local_attn(L, a);
    L->k->attention_backward(L->k, &l, dq, dkv, scratch, dy, q, kv, att);
}

size_t cb_split_att_numel(const cb_layout *L, const cb_attn *a) {
    cb_attn l = local_attn(L, a);
    return L->k->attention_saved(L->k, &l);
}
