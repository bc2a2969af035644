/* Running a built model: each node's forward and backward through the
 * tensor layout's operators and the kernel table, a chunk's micro-batch
 * with its messages, the step (schedule, tied copies, data parallelism,
 * clipping, AdamW), evaluation and checkpoints. See graph.h. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/graph.h"
#include "util/rng.h"
#include "layout/rec.h"

static double now_ms(void) { return omp_get_wtime() * 1e3; }

/* ---------------------------------------------------------------- buffers */

/* Value v of the micro-batch in slot: every value a chunk reads is its own
 * or received (an edge), so it is in this chunk's slot or shared block. */
static float *val(cb_model *m, gchunk *ch, int slot, int v) {
    (void)m;
    return ch->val_shared[v] ? ch->shared + ch->val_off[v]
                             : ch->slot + (size_t)slot * ch->slot_floats + ch->val_off[v];
}

static float *grad(gchunk *ch, int slot, int v) {
    return ch->grad_in_slot[v] ? ch->slot + (size_t)slot * ch->slot_floats + ch->grad_off[v]
                               : ch->grad + ch->grad_off[v];
}

static float *kept(cb_model *m, gchunk *ch, int slot, int i) {
    const gnode *n = &m->nodes[i];
    if (!n->keep) return NULL;
    int shared = n->recompute && (m->d->recompute == RC_SELECTIVE || n->rseg >= 0);
    return shared ? ch->shared + ch->keep_off[i]
                  : ch->slot + (size_t)slot * ch->slot_floats + ch->keep_off[i];
}

/* ---------------------------------------------------------------- nodes */

/* Id field f of micro-batch rows [r0, r0 + N) (each row has m->fields ids). */
static const int *field_ids(cb_model *m, size_t r0, int N, int f) {
    if (m->fields == 1) return m->ids + r0;
    const int *src = m->ids + r0 * m->fields + f;
    for (int i = 0; i < N; i++) m->fids[i] = src[(size_t)i * m->fields];
    return m->fids;
}

static void concat_parities(const cb_model *m, const gnode *n, int *par) {
    par[0] = m->acts[n->in[0]]->parity, par[1] = m->acts[n->in[1]]->parity;
    par[2] = m->acts[n->out]->parity;
}

/* The recommendation nodes (layout/rec.h); the loss is returned. */
static float rec_forward(cb_model *m, const gnode *n, float *x, float *x2, float *y, float *s,
                         size_t r0) {
    cb_layout *L = m->L;
    int N = m->Bm * m->T, par[3];
    size_t ny = n->out >= 0 ? cb_graph_value_floats(m, n->out) : 0;
    switch (n->kind) {
    case N_LOOKUP:
        cb_rec_lookup_forward(L, &n->l->emb, field_ids(m, r0, N, n->field), N, y, m->rec_scratch);
        break;
    case N_MUL: L->k->mul_forward(L->k, y, x, x2, ny); break;
    case N_RELU: L->k->relu_forward(L->k, y, x, ny); break;
    case N_CONCAT:
        concat_parities(m, n, par);
        cb_rec_concat_forward(L, x, m->acts[n->in[0]]->H, x2, m->acts[n->in[1]]->H, par, N, y,
                              m->rec_scratch);
        break;
    case N_LOGIT:
        return cb_rec_logistic_forward(L, &n->l->norm, x, m->targets ? m->targets + r0 : NULL, s, N);
    }
    return 0.0f;
}

/* The MLM loss (cb_op_mlm_loss): the layout's tied head with the decoder
 * bias (cb_embed.bias, bound at build) and the vocabulary-parallel
 * cross-entropy, whose negative targets are ignored. Its input has the
 * parity of the LayerNorm before it (1); where the layout splits parities
 * differently it is moved to parity 0, the head's, in m->rec_scratch
 * (full value, then the moved input, then its gradient). The head
 * returns the sum over this micro-batch's masked positions / N; the
 * result is its share of the step's mean (m->loss_scale, mlm_count). */
static const float *mlm_input(cb_model *m, const gnode *n, const float *x, int N) {
    cb_layout *L = m->L;
    int C = n->l->emb.C;
    if (m->acts[n->in[0]]->parity == 0 || (L->caps & CB_LAYOUT_WHOLE)) return x;
    float *x0 = m->rec_scratch + (size_t)N * C;
    cb_rec_reparity(L, x, N, C, 1, 0, x0, m->rec_scratch);
    L->ops->input_rewritten(L, x0); /* one buffer for every micro-batch */
    return x0;
}

/* The decoder reads m->mlm_slots rows of each sequence where the layout
 * holds blocks of whole sequences (CB_LAYOUT_ROWS: every layout's
 * parity-0 shard is such a block), as BERT's max_predictions_per_seq:
 * the sequence's masked positions (target >= 0) in order, the first
 * mlm_slots of them, then its first row with target -1 in the slots left
 * (no loss, no gradient). So the head's row count, Bm x mlm_slots, is
 * the same for every batch (the planner counts it, the buffers are
 * planned at build), and each rank's share of those rows comes from its
 * own block of sequences: no communication. The slots' targets and
 * source rows for the whole micro-batch go to m->mlm_tg and m->mlm_src
 * (the head reads every target), this rank's rows of x (its block of
 * rows and columns, sh) to m->mlm_rows. Returns the slot count. */
static int mlm_gather(cb_model *m, const float *x, const int *tg, int N, const cb_shard *sh) {
    int P = m->mlm_slots, Nm = 0, T = m->T;
    size_t w = cb_shard_cols(sh);
    for (int r = 0; r < N; r += T) {
        int end = Nm + P;
        for (int i = r; i < r + T && Nm < end; i++)
            if (tg[i] >= 0) m->mlm_src[Nm] = i, m->mlm_tg[Nm++] = tg[i];
        while (Nm < end) m->mlm_src[Nm] = r, m->mlm_tg[Nm++] = -1;
    }
    int j0 = (int)(sh->row0 / T * P), nj = (int)(sh->nrows / T * P);
    for (int j = 0; j < nj; j++)
        memcpy(m->mlm_rows + j * w, x + (m->mlm_src[j0 + j] - sh->row0) * w, sizeof(float) * w);
    m->L->ops->input_rewritten(m->L, m->mlm_rows); /* one buffer for every micro-batch */
    return Nm;
}

/* dx (this rank's block) = the slots' gradient rows dc put back at the
 * masked positions they came from, zeros elsewhere */
static void mlm_scatter(const cb_model *m, float *dx, const float *dc, const cb_shard *sh) {
    size_t w = cb_shard_cols(sh);
    int P = m->mlm_slots, j0 = (int)(sh->row0 / m->T * P), nj = (int)(sh->nrows / m->T * P);
    memset(dx, 0, sizeof(float) * (size_t)sh->nrows * w);
    for (int j = 0; j < nj; j++)
        if (m->mlm_tg[j0 + j] >= 0)
            memcpy(dx + (m->mlm_src[j0 + j] - sh->row0) * w, dc + j * w, sizeof(float) * w);
}

/* this rank's block of the head's input (parity 0) */
static cb_shard mlm_shard(const cb_model *m, int N, int C) {
    return m->L->ops->act_shard(m->L, m->L->tp_rank, N, C, 0, 1);
}

static float mlm_forward(cb_model *m, const gnode *n, const float *x, const int *tg, float *s,
                         int N) {
    cb_layout *L = m->L;
    const float *x0 = mlm_input(m, n, x, N);
    if (!tg || !m->mlm_rows) {
        float mean = L->ops->head_forward(L, &n->l->emb, x0, tg, s, N);
        return tg ? (float)((double)mean * N * m->loss_scale) : 0.0f;
    }
    cb_shard sh = mlm_shard(m, N, n->l->emb.C);
    int Nm = mlm_gather(m, x0, tg, N, &sh);
    float mean = L->ops->head_forward(L, &n->l->emb, m->mlm_rows, m->mlm_tg, s, Nm);
    return (float)((double)mean * Nm * m->loss_scale);
}

static void mlm_backward(cb_model *m, const gnode *n, const float *x, const int *tg, float *s,
                         float *dx, int N) {
    cb_layout *L = m->L;
    int C = n->l->emb.C;
    const float *x0 = mlm_input(m, n, x, N);
    float *d0 = x0 == x ? dx : m->rec_scratch + 2 * (size_t)N * C;
    if (!m->mlm_rows) {
        L->ops->head_backward(L, &n->l->emb, x0, tg, s, m->grad_scale * N, d0, N);
    } else { /* the forward's gather again: another micro-batch may have run since */
        cb_shard sh = mlm_shard(m, N, C);
        int Nm = mlm_gather(m, x0, tg, N, &sh);
        float *dc = m->mlm_rows + (size_t)Nm * C;
        L->ops->head_backward(L, &n->l->emb, m->mlm_rows, m->mlm_tg, s, m->grad_scale * Nm, dc, Nm);
        mlm_scatter(m, d0, dc, &sh);
    }
    if (d0 != dx) cb_rec_reparity(L, d0, N, C, 0, 1, dx, m->rec_scratch);
}

/* The MLM loss is the mean over the targets >= 0 of the first nmb
 * micro-batches of every data-parallel rank: counted here, before any
 * micro-batch, so each one knows its share. Collective over dp. */
static void mlm_count(cb_model *m, int nmb) {
    if (m->loss_node < 0 || !m->nodes[m->loss_node].l2 || !m->targets) return;
    double c = 0;
    int P = m->mlm_rows ? m->mlm_slots : m->T; /* the decoder's rows: see mlm_gather */
    for (size_t r = 0; r < (size_t)nmb * m->Bm; r++) {
        int k = 0;
        for (int i = 0; i < m->T; i++) k += m->targets[r * m->T + i] >= 0;
        c += k < P ? k : P;
    }
    int dp = m->d->g.dp;
    if (dp > 1) cb_comm_allreduce_f64(&m->d->g.dpg, "mlm.count", &c, &c, 1, CB_COMM_SUM);
    m->loss_scale = c > 0 ? (double)nmb * dp / c : 0.0;
    m->grad_scale = c > 0 ? (float)(dp / c) : 0.0f;
}

/* y = s wte[ids] + pos as s (wte[ids] + pos / s): the layouts' one lookup
 * with the shard of the fixed table divided by s (element-wise, so the same
 * under every layout); two roundings more than s wte + pos, 1e-7 relative.
 * B rows of T positions from position t0; t0 > 0 (decoding one position)
 * only under the serial layout, whose table is whole in position order. */
void cb_graph_embed(cb_model *m, cb_layer *l, const int *ids, int t0, int B, int T, float *y,
                    size_t ny) {
    cb_layout *L = m->L;
    cb_embed em = l->emb;
    if (l->emb_scale) {
        size_t np = m->pt.t[l->t[1]].numel;
        float inv = 1.0f / l->emb_scale;
        for (size_t i = 0; i < np; i++) l->wpe_scaled[i] = em.wpe[i] * inv;
        em.wpe = l->wpe_scaled;
    }
    em.wpe += (size_t)t0 * em.C;
    L->ops->embed_forward(L, &em, ids, B, T, y);
    if (l->emb_scale) L->k->scale(L->k, y, l->emb_scale, ny);
}

/* Dropout of node n on micro-batch mb (y may be x): each block of the
 * local piece at the global rows and columns it holds, the mask from
 * (seed, node, step, global index), so every layout, micro-batch split
 * and recompute drops the same elements. Outside training: a copy. */
static void dropout(cb_model *m, const gnode *n, int mb, float *y, const float *x) {
    cb_layout *L = m->L;
    const cb_act *a = m->acts[n->out];
    int N = m->Bm * m->T, first, count;
    size_t nv = cb_graph_value_floats(m, n->out);
    if (!m->training || n->p == 0) {
        if (y != x) memcpy(y, x, sizeof(float) * nv);
        return;
    }
    cb_model_rows(m, &first, &count);
    cb_shard s = L->ops->act_shard(L, L->tp_rank, N, a->H, a->parity, a->parts);
    char nm[32];
    snprintf(nm, sizeof nm, "dropout.%d", n->drop_ix);
    uint64_t key = cb_rng_subkey(cb_rng_key(m->seed, nm), (uint64_t)m->step);
    int64_t row0 = ((int64_t)first + (int64_t)mb * m->Bm) * m->T + s.row0;
    int ld = (int)cb_shard_cols(&s), c = 0;
    for (int g = 0; g < s.nseg; c += (int)s.ncol[g++])
        L->k->dropout(L->k, y + c, x + c, (int)s.nrows, (int)s.ncol[g], ld, row0, s.col0[g], a->H,
                      key, n->p);
}

/* Attention node n on micro-batch mb: self-attention reads a QKV output,
 * cross-attention queries (C) and a KV output (2C); the lengths of the
 * step's rows mask padded queries and keys when the layer asks. */
static const int *lens_of(const cb_model *m, const cb_layer *l, int which, int mb) {
    const int *lens = m->lens[l->len_set[which]];
    return lens && (l->attn_flags & CB_ATTN_PADDED) ? lens + (size_t)mb * m->Bm : NULL;
}

static cb_attn attn_of(const cb_model *m, const gnode *n, int mb) {
    const cb_layer *l = n->l;
    int causal = !!(l->attn_flags & CB_ATTN_CAUSAL);
    cb_attn a = cb_attn_self(m->Bm, m->T, l->C, l->heads, causal, lens_of(m, l, 0, mb));
    a.klen = lens_of(m, l, 1, mb);
    if (m->training && l->attn_drop > 0) { /* indices of the step's whole batch */
        int first, count;
        cb_model_rows(m, &first, &count);
        a.drop = l->attn_drop, a.NHg = l->heads, a.b0 = (int64_t)first + (int64_t)mb * m->Bm;
        a.drop_key = cb_rng_subkey(cb_rng_key(m->seed, l->name), (uint64_t)m->step);
    }
    if (n->nin > 1) a.ldq = l->C, a.ldkv = 2 * l->C, a.koff = 0, a.voff = l->C;
    return a;
}

static void node_forward(cb_model *m, gchunk *ch, int slot, int mb, int i, int count_loss) {
    const gnode *n = &m->nodes[i];
    cb_layout *L = m->L;
    const cb_kernels *k = L->k;
    int N = m->Bm * m->T;
    size_t r0 = (size_t)mb * N;
    float *x = n->nin > 0 ? val(m, ch, slot, n->in[0]) : NULL;
    float *y = n->out >= 0 ? val(m, ch, slot, n->out) : NULL, *s = kept(m, ch, slot, i);
    cb_layer *l = n->l;
    switch (n->kind) {
    case N_EMBED:
        cb_graph_embed(m, l, field_ids(m, r0, N, n->field), 0, m->Bm, m->T, y,
                       cb_graph_value_floats(m, n->out));
        break;
    case N_LINEAR: L->ops->linear_forward(L, &l->lin, x, y, N); break;
    case N_NORM: L->ops->norm_forward(L, &l->norm, x, y, s, s + n->keep / 2, N); break;
    case N_ATTN: {
        cb_attn a = attn_of(m, n, mb);
        L->ops->attention_forward(L, &a, x, n->nin > 1 ? val(m, ch, slot, n->in[1]) : x, y, s);
        break;
    }
    case N_GELU:
        (n->erf ? k->gelu_erf_forward : k->gelu_forward)(k, y, x, cb_graph_value_floats(m, n->out));
        break;
    case N_DROP: dropout(m, n, mb, y, x); break;
    case N_ADD:
        k->residual_forward(k, y, x, val(m, ch, slot, n->in[1]), cb_graph_value_floats(m, n->out));
        break;
    case N_LOSS: { /* no targets: probabilities for sampling (cb_model_probs) */
        const int *tg = m->targets ? m->targets + r0 : NULL;
        float loss = n->l2 ? mlm_forward(m, n, x, tg, s, N)
                           : L->ops->head_forward(L, &l->emb, x, tg, s, N);
        if (count_loss) m->loss_sum += loss;
        break;
    }
    default: {
        float loss = rec_forward(m, n, x, n->nin > 1 ? val(m, ch, slot, n->in[1]) : NULL, y, s, r0);
        if (count_loss && n->kind == N_LOGIT) m->loss_sum += loss;
    }
    }
}

/* dst (n) gets src: copied, or added when acc */
static void share(cb_model *m, float *dst, const float *src, size_t n, int acc) {
    if (acc) m->L->k->residual_forward(m->L->k, dst, dst, src, n);
    else memcpy(dst, src, sizeof(float) * n);
}

/* Backward of a node with two inputs whose shares were written to m->tmp
 * and m->tmp2. */
static void share2(cb_model *m, gchunk *ch, int slot, const gnode *n) {
    share(m, grad(ch, slot, n->in[0]), m->tmp, cb_graph_value_floats(m, n->in[0]), n->acc[0]);
    share(m, grad(ch, slot, n->in[1]), m->tmp2, cb_graph_value_floats(m, n->in[1]), n->acc[1]);
}

/* A table's lookup rows to the sparse and split embedding paths (dp.h). */
/* The split path adds the lookup rows of its tables itself; a lookup of
 * another table (BERT's token types) keeps its own backward. */
static int skip_rows(const cb_model *m, const gnode *n) {
    return m->no_lookup && n->l->t[0] >= 0 && n->l->t[0] < m->ntables;
}

static void lookup_rows(cb_model *m, const gnode *n, const int *ids, const float *dy) {
    if (m->d->g.dp > 1 && (m->dp.sparse || m->dp.split))
        cb_dp_lookup_rows(&m->dp, n->l->t[0], ids, dy, (size_t)m->Bm * m->T);
}

/* The recommendation nodes' backward; 1 when the gradient of input 0 is
 * still to be added from `to` (as the node_backward cases that break). */
static int rec_backward(cb_model *m, gchunk *ch, int slot, const gnode *n, float *x, float *dy,
                        float *to, float *s, size_t r0) {
    cb_layout *L = m->L;
    int N = m->Bm * m->T, par[3];
    size_t ny = n->out >= 0 ? cb_graph_value_floats(m, n->out) : 0;
    switch (n->kind) {
    case N_LOOKUP: {
        const int *ids = field_ids(m, r0, N, n->field);
        if (!skip_rows(m, n)) cb_rec_lookup_backward(L, &n->l->emb, ids, N, dy, m->rec_scratch);
        lookup_rows(m, n, ids, dy);
        return 0;
    }
    case N_MUL:
        L->k->mul_backward(L->k, m->tmp, m->tmp2, x, val(m, ch, slot, n->in[1]), dy, ny);
        share2(m, ch, slot, n);
        return 0;
    case N_RELU: L->k->relu_backward(L->k, to, x, dy, ny); return 1;
    case N_CONCAT:
        concat_parities(m, n, par);
        cb_rec_concat_backward(L, dy, m->acts[n->in[0]]->H, m->acts[n->in[1]]->H, par, N, m->tmp,
                               m->tmp2, m->rec_scratch);
        share2(m, ch, slot, n);
        return 0;
    case N_LOGIT:
        cb_rec_logistic_backward(L, &n->l->norm, x, m->targets + r0, s, 1.0f / m->M, to, N,
                                 m->rec_scratch);
        return 1;
    }
    return 0;
}

static void node_backward(cb_model *m, gchunk *ch, int slot, int mb, int i) {
    const gnode *n = &m->nodes[i];
    cb_layout *L = m->L;
    const cb_kernels *k = L->k;
    int N = m->Bm * m->T;
    size_t r0 = (size_t)mb * N;
    cb_layer *l = n->l;
    float *x = n->nin > 0 ? val(m, ch, slot, n->in[0]) : NULL, *s = kept(m, ch, slot, i);
    float *dy = n->out >= 0 ? grad(ch, slot, n->out) : NULL;
    size_t ny = n->out >= 0 ? cb_graph_value_floats(m, n->out) : 0;
    if (dy && n->zero_dy) memset(dy, 0, sizeof(float) * ny);
    float *dx = n->nin > 0 ? grad(ch, slot, n->in[0]) : NULL;
    size_t nx = n->nin > 0 ? cb_graph_value_floats(m, n->in[0]) : 0;
    float *to = n->nin > 0 && n->acc[0] ? m->tmp : dx; /* overwriting operators write here */
    int ow = n->ow_mb == mb; /* the step's first write of the node's dense parameter gradients */
    switch (n->kind) {
    case N_EMBED: {
        cb_embed em = l->emb; /* the split path adds the lookup rows itself */
        if (skip_rows(m, n)) em.dwte = NULL;
        const int *ids = field_ids(m, r0, N, n->field);
        if (l->emb_scale) k->scale(k, dy, l->emb_scale, ny); /* d(s wte[id]); fixed positions */
        L->ops->embed_backward(L, &em, ids, m->Bm, m->T, dy);
        lookup_rows(m, n, ids, dy);
        return;
    }
    case N_LINEAR:
        l->lin.overwrite = ow;
        L->ops->linear_backward(L, &l->lin, x, dy, to, N);
        break;
    case N_NORM:
        l->norm.overwrite = ow;
        if (!n->acc[0]) memset(dx, 0, sizeof(float) * nx);
        L->ops->norm_backward(L, &l->norm, x, dy, dx, s, s + n->keep / 2, N);
        return;
    case N_ATTN: {
        cb_attn a = attn_of(m, n, mb);
        if (n->nin == 1) {
            L->ops->attention_backward(L, &a, x, x, s, dy, to, to, m->att_scratch);
            break;
        }
        float *dkv = grad(ch, slot, n->in[1]);
        L->ops->attention_backward(L, &a, x, val(m, ch, slot, n->in[1]), s, dy, to,
                                   n->acc[1] ? m->tmp2 : dkv, m->att_scratch);
        if (n->acc[1]) share(m, dkv, m->tmp2, cb_graph_value_floats(m, n->in[1]), 1);
        break;
    }
    case N_GELU: (n->erf ? k->gelu_erf_backward : k->gelu_backward)(k, to, x, dy, nx); break;
    case N_DROP: dropout(m, n, mb, to, dy); break;
    case N_ADD: /* the aliased input's gradient is dy's buffer already */
        if (n->alias != 1) share(m, grad(ch, slot, n->in[1]), dy, ny, n->acc[1]);
        if (n->alias != 0) share(m, dx, dy, ny, n->acc[0]);
        return;
    case N_LOSS:
        l->emb.overwrite = ow;
        if (n->l2) mlm_backward(m, n, x, m->targets + r0, s, to, N);
        else L->ops->head_backward(L, &l->emb, x, m->targets + r0, s, 1.0f / m->M, to, N);
        break;
    default:
        if (!rec_backward(m, ch, slot, n, x, dy, to, s, r0)) return;
    }
    if (n->acc[0]) share(m, dx, m->tmp, nx, 1);
}

/* A rerun's output may be an input that a layout keeps derived state of
 * (3-D's gathered X^): the same pointer now holds another micro-batch. */
static void rerun(cb_model *m, gchunk *ch, int slot, int mb, int i) {
    node_forward(m, ch, slot, mb, i, 0);
    const gnode *n = &m->nodes[i];
    if (n->out >= 0) m->L->ops->input_rewritten(m->L, val(m, ch, slot, n->out));
}

/* Before node i's backward: block recompute reruns node i's block when i
 * is its last node here; selective reruns attention before its own
 * backward and a GELU before its reader's. */
static void recompute_before(cb_model *m, gchunk *ch, int slot, int mb, int i) {
    const gnode *n = &m->nodes[i];
    if (m->d->recompute == RC_BLOCK && n->recompute &&
        (i + 1 == ch->n1 || m->nodes[i + 1].rseg != n->rseg)) {
        int j = i;
        while (j > ch->n0 && m->nodes[j - 1].rseg == n->rseg) j--;
        for (; j <= i; j++) rerun(m, ch, slot, mb, j);
    } else if (m->d->recompute == RC_SELECTIVE) {
        if (n->kind == N_ATTN) rerun(m, ch, slot, mb, i);
        if (i > ch->n0 && m->nodes[i - 1].recompute && m->nodes[i - 1].kind == N_GELU)
            rerun(m, ch, slot, mb, i - 1);
    }
}

/* ---------------------------------------------------------------- chunks */

static int mtag(const cb_model *m, const gedge *g, int mb, int dir) {
    return ((g->tag * m->M + mb) << 1) | dir;
}

static int slot_acquire(gchunk *ch, int mb) {
    int s = ch->free_slot[--ch->nfree];
    ch->slot_of[mb] = s;
    return s;
}

static void slot_release(gchunk *ch, int mb) { ch->free_slot[ch->nfree++] = ch->slot_of[mb]; }

/* Sends n floats of src over edge x as micro-batch mb's message, from a
 * copy that stays untouched until the step ends. */
static void send(cb_model *m, gchunk *ch, int x, int mb, const float *src, size_t n, int to,
                 const char *tag, int dir) {
    float *b = ch->sendbuf + (size_t)mb * ch->send_floats + ch->send_off[x];
    memcpy(b, src, sizeof(float) * n);
    cb_comm_isend(&m->d->g.ppg, tag, b, n, to, mtag(m, &m->edges[x], mb, dir), &ch->pend[ch->npend++]);
}

/* The pipeline rank of virtual stage vs. */
#define RANK(m, vs) ((vs) % (m)->P)

void cb_graph_forward(cb_model *m, int c, int mb, int train) {
    gchunk *ch = &m->ch[c];
    cb_comm *pp = &m->d->g.ppg;
    int slot = slot_acquire(ch, mb);
    if (!train) slot_release(ch, mb); /* evaluation keeps nothing: the slot is free again */
    double t0 = now_ms();
    for (int x = 0; x < ch->nein; x++) {
        const gedge *g = &m->edges[ch->ein[x]];
        cb_comm_recv(pp, "pp.act", val(m, ch, slot, g->v), cb_graph_value_floats(m, g->v),
                     RANK(m, g->from), mtag(m, g, mb, 0));
    }
    double t1 = now_ms();
    for (int i = ch->n0; i < ch->n1; i++) {
        double s = m->node_ms ? now_ms() : 0;
        node_forward(m, ch, slot, mb, i, 1);
        if (m->node_ms) m->node_ms[i] += now_ms() - s;
    }
    m->info.wait_ms += t1 - t0;
    m->info.forward_ms += now_ms() - t1;
    for (int x = 0; x < ch->neout; x++) {
        const gedge *g = &m->edges[ch->eout[x]];
        send(m, ch, ch->eout[x], mb, val(m, ch, slot, g->v), cb_graph_value_floats(m, g->v),
             RANK(m, g->to), "pp.act", 0);
    }
}

/* One process: the sums of squares of the gradients node n finished,
 * read while its backward's writes are still in cache (the clip's norm
 * then needs no pass over the whole gradient); the values and their
 * order of summation (grad_sumsq) are cb_ptable_sumsq's. */
static void take_sumsq(cb_model *m, const gnode *n) {
    const cb_kernels *k = m->L->k;
    for (int j = 0; j < 2; j++) {
        int t = n->fin[j];
        if (t >= 0 && m->pt.t[t].owner)
            m->gss[t] = k->sumsq(k, m->grads + m->pt.t[t].offset, m->pt.t[t].numel);
    }
}

/* The gradient's sum of squares over this rank's tensors, in table order:
 * the ones taken in backward, the others now */
static double grad_sumsq(cb_model *m) {
    if (!m->gss) return cb_ptable_sumsq(&m->pt, m->grads);
    const cb_kernels *k = m->L->k;
    double s = 0.0;
    for (int t = 0; t < m->pt.n; t++) {
        const cb_tensor_info *x = &m->pt.t[t];
        if (x->owner) s += m->gss[t] >= 0 ? m->gss[t] : k->sumsq(k, m->grads + x->offset, x->numel);
        m->gss[t] = -1;
    }
    return s;
}

void cb_graph_backward(cb_model *m, int c, int mb) {
    gchunk *ch = &m->ch[c];
    cb_comm *pp = &m->d->g.ppg;
    int slot = ch->slot_of[mb], prev = -1;
    double t0 = now_ms();
    for (int x = 0; x < ch->neout; x++) { /* the readers' shares, the first one overwriting */
        const gedge *g = &m->edges[ch->eout[x]];
        size_t n = cb_graph_value_floats(m, g->v);
        float *d = grad(ch, slot, g->v);
        cb_comm_recv(pp, "pp.grad", g->v == prev ? m->tmp : d, n, RANK(m, g->to), mtag(m, g, mb, 1));
        if (g->v == prev) share(m, d, m->tmp, n, 1);
        prev = g->v;
    }
    int dp = m->d->g.dp > 1, last = mb == m->M - 1;
    double t1 = now_ms();
    m->info.wait_ms += t1 - t0;
    if (dp && m->v == 1) cb_dp_begin_backward(&m->dp, last); /* buckets start on the last */
    for (int i = ch->n1 - 1; i >= ch->n0; i--) {
        recompute_before(m, ch, slot, mb, i);
        double s = m->node_ms ? now_ms() : 0;
        node_backward(m, ch, slot, mb, i);
        if (m->node_ms) m->node_ms[i] += now_ms() - s;
        for (int k = 0; dp && last && k < 2; k++)
            if (m->nodes[i].fin[k] >= 0) cb_dp_ready(&m->dp, m->nodes[i].fin[k], m->nodes[i].fin[k]);
        if (m->gss && last) take_sumsq(m, &m->nodes[i]);
        if (dp) cb_dp_ready(&m->dp, 1, 0); /* MPI progress on the buckets in flight */
    }
    for (int x = 0; x < ch->nein; x++) {
        const gedge *g = &m->edges[ch->ein[x]];
        send(m, ch, ch->ein[x], mb, grad(ch, slot, g->v), cb_graph_value_floats(m, g->v),
             RANK(m, g->from), "pp.grad", 1);
    }
    slot_release(ch, mb);
    m->info.backward_ms += now_ms() - t1;
}

void cb_graph_wait_all(cb_model *m) {
    for (int c = 0; c < m->v; c++) {
        cb_comm_waitall(m->ch[c].pend, m->ch[c].npend);
        m->ch[c].npend = 0;
    }
}

/* ---------------------------------------------------------------- ties */

/* Tensors held on several pipeline ranks: the copies' gradients are added
 * on the owner (in rank order, so the sum is the same on every run). */
static void tie_grads(cb_model *m) {
    cb_comm *pp = &m->d->g.ppg;
    for (int i = 0; i < m->ntie; i++) {
        const cb_tensor_info *t = &m->pt.t[m->tie_t[i]];
        float *g = m->grads + t->offset;
        int own = m->tie_owner_rank[i];
        if (own != m->me) {
            cb_comm_send(pp, "pp.tie", g, t->numel, own, 1);
            continue;
        }
        for (int r = 0; r < m->P && r < 31; r++)
            if (r != own && (m->tie_ranks[i] >> r & 1)) {
                cb_comm_recv(pp, "pp.tie", m->tmp, t->numel, r, 1);
                share(m, g, m->tmp, t->numel, 1);
            }
    }
}

/* After the update: the owner's values to every copy. */
static void tie_params(cb_model *m) {
    cb_comm *pp = &m->d->g.ppg;
    for (int i = 0; i < m->ntie; i++) {
        const cb_tensor_info *t = &m->pt.t[m->tie_t[i]];
        float *p = m->params + t->offset;
        int own = m->tie_owner_rank[i];
        if (own != m->me) {
            cb_comm_recv(pp, "pp.tie", p, t->numel, own, 2);
            continue;
        }
        for (int r = 0; r < m->P && r < 31; r++)
            if (r != own && (m->tie_ranks[i] >> r & 1)) cb_comm_send(pp, "pp.tie", p, t->numel, r, 2);
    }
}

/* ---------------------------------------------------------------- steps */

/* The step's loss on every rank: the loss node's rank has the sum of the
 * micro-batches' means; then the mean over the data-parallel ranks. */
static float step_loss(cb_model *m, int nmb) {
    float v = (float)(m->loss_sum / nmb);
    if (m->P > 1) cb_comm_bcast(&m->d->g.ppg, "loss", &v, 1, RANK(m, m->nodes[m->loss_node].vs));
    if (m->d->g.dp > 1) {
        cb_comm_allreduce(&m->d->g.dpg, "loss", &v, &v, 1, CB_COMM_SUM);
        v /= m->d->g.dp;
    }
    return v;
}

/* Gradients summed over the data-parallel ranks (ZeRO-1: this rank's
 * shard [lo, hi) of them) and averaged; clipped to the global norm; one
 * AdamW update of [lo, hi); ZeRO-1 then all-gathers the parameters. */
static float update(cb_model *m, int step) {
    const cb_kernels *k = m->L->k;
    cb_grid *g = &m->d->g;
    size_t lo = m->opt.lo, hi = m->opt.hi;
    double ss;
    if (g->dp > 1) {
        for (int i = 0; i < m->ntie; i++) cb_dp_ready(&m->dp, m->tie_t[i], m->tie_t[i]);
        cb_dp_reduce(&m->dp);
        k->scale(k, m->grads + lo, 1.0f / g->dp, hi - lo);
        ss = cb_dp_grad_sumsq(&m->dp);
    } else {
        ss = grad_sumsq(m);
    }
    if (m->on_grads) m->on_grads(m, step, m->on_grads_ctx);
    cb_comm_allreduce_f64(&g->model, "norm", &ss, &ss, 1, CB_COMM_SUM);
    double norm = sqrt(ss);
    float s = cb_clip_scale(m->opt.c.clip, norm);
    cb_adamw_step(&m->opt, k, m->params, m->grads, s, m->pt.t, m->pt.n, cb_lr_at(&m->opt.c, step));
    if (g->dp > 1) cb_dp_sync_params(&m->dp);
    return (float)norm;
}

/* The plan missed a use if the workspace grew during a step or a kept
 * input found no entry: not an error of the user's (the step went on,
 * growing or gathering again), a defect of the plan, said once so the
 * tests see it. */
static void check_planned(cb_model *m) {
    static int said;
    const cb_workspace *w = &m->L->ws;
    if ((!w->grew && !w->unkept) || said) return;
    said = 1;
    fprintf(stderr, "cubist: rank %d: internal: the tensor-parallel workspace plan missed a use "
                    "(%d slots grown during a step, %d gathered inputs not kept)\n",
            m->d->g.world_rank, w->grew, w->unkept);
}

/* Ignored targets (cb_layer_set_loss): the loss is the mean over the real
 * targets of the whole step on every data-parallel rank, so a real row
 * weighs rows / real rows in the mean over rows that the engine takes. */
static void loss_weights(cb_model *m, const int *targets, int nmb) {
    const gnode *n = &m->nodes[m->loss_node];
    if (n->kind != N_LOSS) return;
    cb_embed *e = &n->l->emb;
    e->loss_scale = 1.0f;
    if (!e->has_ignore || !targets) return;
    size_t rows = (size_t)nmb * m->Bm * m->T;
    double c[2] = {0.0, (double)rows};
    for (size_t i = 0; i < rows; i++) c[0] += targets[i] != e->ignore;
    if (m->d->g.dp > 1) cb_comm_allreduce_f64(&m->d->g.dpg, "loss", NULL, c, 2, CB_COMM_SUM);
    e->loss_scale = c[0] > 0 ? (float)(c[1] / c[0]) : 0.0f;
}

float cb_graph_grad_step(cb_model *m, const int *ids, const int *targets) {
    m->ids = ids;
    m->targets = targets;
    m->loss_sum = 0.0;
    loss_weights(m, targets, m->M);
    cb_kernels_reads_per_update(m->M); /* each weight is read m->M times before the update */
    m->training = 1; /* dropout draws the masks of step m->step */
    mlm_count(m, m->M);
    for (int z = 0; z < m->nzero; z++) /* the rest is overwritten first (graph.h) */
        cb_cpu_zero(m->grads + m->zero_runs[2 * z], m->zero_runs[2 * z + 1]);
    if (m->d->g.dp > 1 && m->v > 1) cb_dp_begin_backward(&m->dp, 1); /* armed for the step */
    for (int a = 0; a < m->nsched; a++) {
        const cb_pp_action *x = &m->acts_sched[a];
        if (x->bwd) cb_graph_backward(m, x->chunk, x->mb);
        else cb_graph_forward(m, x->chunk, x->mb, 1);
    }
    cb_graph_wait_all(m);
    tie_grads(m);
    m->training = 0; /* evaluation and probabilities drop nothing */
    return step_loss(m, m->M);
}

float cb_model_train_step(cb_model *m, const int *ids, const int *targets, int step,
                          float *grad_norm) {
    double t0 = now_ms();
    m->info = (cb_model_step_info){0};
    m->step = step;
    float loss = cb_graph_grad_step(m, ids, targets);
    double t1 = now_ms();
    float norm = update(m, step);
    tie_params(m);
    if (m->ntie) cb_kernels_params_written(m->params, m->pt.nparams); /* copies received */
    if (grad_norm) *grad_norm = norm;
    cb_model_step_info *in = &m->info;
    in->update_ms = now_ms() - t1;
    in->step_ms = now_ms() - t0;
    in->bubble = in->step_ms > 0 ? 1 - (in->forward_ms + in->backward_ms) / in->step_ms : 0;
    check_planned(m);
    return loss;
}

void cb_model_last_step(const cb_model *m, cb_model_step_info *info) { *info = m->info;
}

float cb_graph_eval(cb_model *m, const int *ids, const int *targets, int nmb) {
    m->ids = ids;
    m->targets = targets;
    m->loss_sum = 0.0;
    loss_weights(m, targets, nmb);
    mlm_count(m, nmb);
    for (int mb = 0; mb < nmb; mb++)
        for (int c = 0; c < m->v; c++) cb_graph_forward(m, c, mb, 0);
    cb_graph_wait_all(m);
    return step_loss(m, nmb);
}

float cb_model_eval(cb_model *m, const int *ids, const int *targets) {
    return cb_graph_eval(m, ids, targets, m->M);
}

const float *cb_model_probs(cb_model *m, const int *ids) {
    if (!m->built || m->P > 1 || m->v > 1 || m->M > 1 || !(m->L->caps & CB_LAYOUT_SAMPLES) ||
        m->nodes[m->loss_node].kind != N_LOSS)
        return NULL;
    m->ids = ids;
    m->targets = NULL;
    cb_graph_forward(m, 0, 0, 0);
    cb_graph_wait_all(m);
    return kept(m, &m->ch[0], m->ch[0].slot_of[0], m->loss_node);
}

static int eval_slot(const gchunk *ch) { return ch->free_slot[ch->nfree - 1]; }

float *cb_graph_eval_val(cb_model *m, int v) { return val(m, &m->ch[0], eval_slot(&m->ch[0]), v); }

float *cb_graph_eval_kept(cb_model *m, int i) { return kept(m, &m->ch[0], eval_slot(&m->ch[0]), i); }

/* Every operator takes its row count from m->Bm, and under a layout that
 * samples (serial tensors) a value is (Bm x T, H) row-major, so B rows of
 * the planned micro-batch are its first B x T rows: nothing new to plan. */
void cb_graph_eval_node(cb_model *m, int i, int B) {
    int Bm = m->Bm;
    m->Bm = B;
    node_forward(m, &m->ch[0], eval_slot(&m->ch[0]), 0, i, 0);
    m->Bm = Bm;
}

int cb_model_scores(cb_model *m, const int *ids, float *scores, cb_err *e) {
    if (!m->built || m->nodes[m->loss_node].kind != N_LOGIT)
        return cb_fail(e, CB_EINPUT, "cb_model_scores needs a built model that ends in "
                                     "cb_op_logistic_loss");
    const gnode *ln = &m->nodes[m->loss_node];
    cb_grid *g = &m->d->g;
    size_t N = (size_t)m->Bm * m->T, mine = (size_t)m->Bl * m->T;
    int lc = ln->vs / m->P, here = RANK(m, ln->vs) == m->me;
    float *part = malloc(sizeof(float) * mine);
    if (!part) return cb_fail(e, CB_ENOMEM, "out of memory for a batch's scores");
    m->ids = ids;
    m->targets = NULL;
    for (int mb = 0; mb < m->M; mb++)
        for (int c = 0; c < m->v; c++) {
            cb_graph_forward(m, c, mb, 0);
            if (here && c == lc)
                memcpy(part + mb * N, kept(m, &m->ch[c], m->ch[c].slot_of[mb], m->loss_node),
                       sizeof(float) * N);
        }
    cb_graph_wait_all(m);
    if (m->P > 1) cb_comm_bcast(&g->ppg, "scores", part, mine, RANK(m, ln->vs));
    if (g->dp > 1) cb_comm_allgather(&g->dpg, "scores", part, scores, mine);
    else memcpy(scores, part, sizeof(float) * mine);
    free(part);
    return CB_OK;
}

/* ---------------------------------------------------------------- checkpoints */

/* Part files of a checkpoint under --pp: path.vsK for pipeline rank K. */
static void part_path(char *out, size_t cap, const char *path, int vs) {
    snprintf(out, cap, "%s.vs%d", path, vs);
}

/* The parts' tensors into one file, each name once, metadata of part 0. */
static int merge_parts(const char *path, int n, cb_err *e) {
    cb_st_file *f = calloc((size_t)n, sizeof *f);
    int total = 0, cnt = 0, rc = f ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory merging %s", path);
    char pp[4200];
    for (int i = 0; !rc && i < n; i++) {
        part_path(pp, sizeof pp, path, i);
        rc = cb_st_open(pp, &f[i], e);
        if (!rc) total += f[i].n;
    }
    cb_st_entry *t = rc ? NULL : calloc((size_t)total + 1, sizeof *t);
    const char **meta = rc ? NULL : calloc(2 * (size_t)f[0].nmeta + 1, sizeof *meta);
    if (!rc && (!t || !meta)) rc = cb_fail(e, CB_ENOMEM, "out of memory merging %s", path);
    for (int i = 0; !rc && i < n; i++)
        for (int j = 0; j < f[i].n; j++) {
            const cb_st_tensor *x = &f[i].t[j];
            int dup = 0;
            for (int k = 0; k < cnt && !dup; k++) dup = !strcmp(t[k].name, x->name);
            if (dup) continue; /* the tied wte, held by two stages */
            t[cnt] = (cb_st_entry){.name = x->name, .ndim = x->ndim,
                                   .data = (const float *)(f[i].data + x->offset)};
            memcpy(t[cnt++].shape, x->shape, sizeof x->shape);
        }
    for (int i = 0; !rc && i < f[0].nmeta; i++) meta[2 * i] = f[0].meta_key[i], meta[2 * i + 1] = f[0].meta_val[i];
    if (!rc) rc = cb_st_write(path, t, cnt, meta, f[0].nmeta, e);
    for (int i = 0; f && i < n; i++) {
        if (f[i].map) cb_st_close(&f[i]);
        part_path(pp, sizeof pp, path, i);
        unlink(pp);
    }
    free(f), free(t), free(meta);
    return rc;
}

/* Blocks of parameter shape (weights, moments) into one file: the
 * moments of a ZeRO shard gathered on data-parallel rank 0 first; that rank
 * of every pipeline and tensor rank writes (tensor rank 0 gathers), under
 * --pp a part per pipeline rank that world rank 0 merges (a tensor held by
 * several ranks once). The file is the one-process file. */
int cb_graph_save_blocks(cb_model *m, int nb, const float *const *blocks, const char *const *prefix,
                         const char *path, const char *const *meta, int nmeta, cb_err *e) {
    e->code = CB_OK;
    e->msg[0] = '\0';
    char part[4200];
    if (m->P > 1) part_path(part, sizeof part, path, m->me);
    if (m->d->g.at.d == 0)
        cb_ptable_save(&m->pt, nb, blocks, prefix, m->P > 1 ? part : path, meta, nmeta, e);
    int rc = cb_comm_agree_err(cb_comm_world(), e);
    if (!rc && m->P > 1) {
        if (m->d->g.world_rank == 0) merge_parts(path, m->P, e);
        rc = cb_comm_agree_err(cb_comm_world(), e);
    }
    return rc;
}

int cb_model_save(cb_model *m, const char *path, cb_err *e) {
    const float *blocks[1] = {m->params};
    const char *prefix[1] = {""}, *meta[2] = {"format", "pt"};
    return cb_graph_save_blocks(m, 1, blocks, prefix, path, meta, 1, e);
}

/* The moments of the whole parameter block on data-parallel rank 0 (NULL
 * elsewhere): a ZeRO shard's gathered, else this rank's own. */
float *cb_graph_full_moments(cb_model *m, int *oom) {
    size_t n = m->pt.nparams;
    int zero = m->d->g.dp > 1 && m->dp.zero, root = m->d->g.at.d == 0;
    float *full = root ? malloc(sizeof(float) * 2 * n + 1) : NULL;
    *oom = root && !full;
    if (!zero) {
        if (full) memcpy(full, m->opt.m, sizeof(float) * n), memcpy(full + n, m->opt.v, sizeof(float) * n);
        return full;
    }
    cb_dp_gather(&m->dp, m->opt.m, full);
    cb_dp_gather(&m->dp, m->opt.v, full ? full + n : NULL);
    return full;
}

int cb_model_save_checkpoint(cb_model *m, const char *path, int step, cb_err *e) {
    int oom;
    float *full = cb_graph_full_moments(m, &oom);
    char st[24], t[24];
    snprintf(st, sizeof st, "%d", step);
    snprintf(t, sizeof t, "%d", m->opt.t);
    const float *blocks[3] = {m->params, full, full ? full + m->pt.nparams : NULL};
    const char *prefix[3] = {"", "m.", "v."}, *meta[6] = {"format", "pt", "step", st, "adam_t", t};
    int rc = oom ? cb_fail(e, CB_ENOMEM, "out of memory gathering the optimizer state for %s", path)
                 : CB_OK;
    rc = cb_comm_agree_err(cb_comm_world(), e);
    if (!rc) rc = cb_graph_save_blocks(m, 3, blocks, prefix, path, meta, 3, e); /* dp rank 0 writes */
    free(full);
    return rc;
}

int cb_model_load(cb_model *m, const char *path, cb_err *e) {
    e->code = CB_OK;
    e->msg[0] = '\0';
    cb_st_file f;
    if (!cb_st_open(path, &f, e)) {
        cb_ptable_load(&m->pt, m->params, "", &f, path, e);
        cb_st_close(&f);
    }
    return cb_comm_agree_err(cb_comm_world(), e);
}

/* One moment: the whole block read, this rank's optimizer range kept. */
static int load_moment(cb_model *m, float *dst, const char *prefix, const cb_st_file *f,
                       const char *path, float *full, cb_err *e) {
    int rc = cb_ptable_load(&m->pt, full, prefix, f, path, e);
    if (!rc) memcpy(dst, full + m->opt.lo, sizeof(float) * (m->opt.hi - m->opt.lo));
    return rc;
}

/* Both moments, through full (a whole block's floats). */
static int moments(cb_model *m, const cb_st_file *f, const char *path, float *full, cb_err *e) {
    int rc = load_moment(m, m->opt.m, "m.", f, path, full, e);
    return rc ? rc : load_moment(m, m->opt.v, "v.", f, path, full, e);
}

int cb_model_load_checkpoint(cb_model *m, const char *path, int *step, cb_err *e) {
    e->code = CB_OK;
    e->msg[0] = '\0';
    cb_st_file f;
    float *full = malloc(sizeof(float) * m->pt.nparams + 1);
    int rc = full ? cb_st_open(path, &f, e) : cb_fail(e, CB_ENOMEM, "out of memory reading %s", path);
    if (!rc) {
        const char *st = cb_st_meta(&f, "step"), *t = cb_st_meta(&f, "adam_t");
        if (!st || !t)
            rc = cb_fail(e, CB_EINPUT, "%s has no step or adam_t: it holds weights only (cb_model_save); "
                                       "load it with cb_model_load, or save with cb_model_save_checkpoint",
                         path);
        if (!rc) *step = atoi(st), m->opt.t = atoi(t);
        if (!rc) rc = cb_ptable_load(&m->pt, m->params, "", &f, path, e);
        if (!rc) rc = moments(m, &f, path, full, e);
        cb_st_close(&f);
    }
    free(full);
    return cb_comm_agree_err(cb_comm_world(), e);
}

int cb_graph_load_moments(cb_model *m, const cb_st_file *f, const char *path, cb_err *e) {
    float *full = malloc(sizeof(float) * m->pt.nparams + 1);
    int rc = full ? moments(m, f, path, full, e) : cb_fail(e, CB_ENOMEM, "out of memory reading %s", path);
    free(full);
    return rc;
}
