/* Incremental decoding of an encoder-decoder (cb_model_decode_*,
 * include/cubist.h): the declared model's own nodes, weights and layout
 * operators, run on one position at a time. The encoder's nodes (those
 * that do not depend on the decoder's id field) run once, on each
 * source's row (a source's beams share it, their rows given copies of
 * its values); each step runs the decoder's nodes on position t of each
 * row. Linears and the head take position t of every row in one product
 * (one read of the weights for all the rows); the other per-position
 * operators (LayerNorm, ReLU, add, embedding) see one row; self-attention
 * reads the keys and values of positions 0..t, which earlier steps wrote
 * into the value's own buffer (each value has its own place in the slot
 * when nothing is recomputed, so the buffers are the KV cache, planned at
 * build), and cross-attention the encoder's keys and values, computed
 * once. */
#include <omp.h>
#include <string.h>
#include <time.h>

#include "graph/graph.h"
#include "util/clock.h"

static size_t row_floats(const cb_model *m, int v) {
    return cb_graph_value_floats(m, v) / ((size_t)m->Bm * m->T);
}

/* n->dec: node n reads the decoder's id field, or a value such a node wrote */
static void mark_decoder(cb_model *m, int field) {
    for (int i = 0; i < m->nnodes; i++) {
        gnode *n = &m->nodes[i];
        n->dec = (n->kind == N_EMBED || n->kind == N_LOOKUP) && n->field == field;
        for (int k = 0; k < n->nin; k++) n->dec |= m->nodes[m->acts[n->in[k]]->node].dec;
    }
}

/* A decoder node this file runs a position at a time: per-position
 * operators, and self-attention only when causal (a later position cannot
 * change an earlier one). */
static int row_wise(const gnode *n) {
    if (n->kind == N_ATTN) return n->nin > 1 || (n->l->attn_flags & CB_ATTN_CAUSAL);
    return n->kind == N_EMBED || n->kind == N_LINEAR || n->kind == N_NORM || n->kind == N_RELU ||
           n->kind == N_GELU || n->kind == N_ADD || n->kind == N_DROP || n->kind == N_LOSS;
}

/* Value v is the encoder's and a decoder node reads it (the cross-
 * attention's keys and values, or whatever else crosses to the decoder). */
static int crosses(const cb_model *m, int v) {
    if (m->nodes[m->acts[v]->node].dec) return 0;
    for (int i = 0; i < m->nnodes; i++)
        for (int k = 0; m->nodes[i].dec && k < m->nodes[i].nin; k++)
            if (m->nodes[i].in[k] == v) return 1;
    return 0;
}

/* Rows [0, n) of value v to rows [0, n beams): row r takes row r / beams,
 * from the last row down, so no source row is overwritten before its
 * beams have read it (r / beams < r for r > 0). */
static void spread_rows(cb_model *m, int v, int n, int beams) {
    float *x = cb_graph_eval_val(m, v);
    size_t row = (size_t)m->T * row_floats(m, v);
    for (int r = n * beams - 1; r > 0; r--)
        memcpy(x + (size_t)r * row, x + (size_t)(r / beams) * row, sizeof(float) * row);
}

int cb_model_decode_start(cb_model *m, const int *ids, int field, int sources, int beams,
                          cb_err *e) {
    if (!m->built || m->P > 1 || m->v > 1 || !(m->L->caps & CB_LAYOUT_SAMPLES) ||
        m->d->recompute != RC_NONE || m->loss_node < 0 || m->nodes[m->loss_node].kind != N_LOSS ||
        m->nodes[m->loss_node].l2)
        return cb_fail(e, CB_EINPUT, "decoding needs a built model ending in cb_op_lm_loss on one "
                                     "stage, a layout that samples (one process or --dp) and no "
                                     "--recompute; run it so");
    if (field < 0 || field >= m->fields)
        return cb_fail(e, CB_EINPUT, "decoding field %d: the model's rows carry %d id fields", field,
                       m->fields);
    if (m->T < 2)
        return cb_fail(e, CB_EINPUT, "decoding needs at least 2 positions (BOS, then a token); "
                                     "build the model with seq_len >= 2");
    if (sources < 1 || beams < 1 || sources > m->Bm / beams)
        return cb_fail(e, CB_EINPUT, "decoding %d sources x %d beams: the model holds %d rows; "
                                     "build it with that many", sources, beams, m->Bm);
    m->ids = ids, m->targets = NULL, m->training = 0, m->dec_beams = beams;
    mark_decoder(m, field);
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].dec && !row_wise(&m->nodes[i]))
            return cb_fail(e, CB_EINPUT, "decoding: node %d of the decoder is not causal or not "
                                         "per position; declare a causal decoder", i);
    double w0 = omp_get_wtime(), c0 = cb_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (int i = 0; i < m->nnodes; i++)
        if (!m->nodes[i].dec) cb_graph_eval_node(m, i, sources);
    for (int v = 0; beams > 1 && v < m->nacts; v++)
        if (crosses(m, v)) spread_rows(m, v, sources, beams);
    cb_decode_info *in = &m->dec_info;
    in->encoder_rows += sources;
    in->encoder_s += omp_get_wtime() - w0;
    in->encoder_cpu_s += cb_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    return CB_OK;
}

/* Attention node n for query row (b, t): self-attention over keys 0..t
 * of row b's QKV output (causal by construction), cross-attention over
 * row b's encoder keys (its source's), masked by its source row's key
 * length. */
static void attend_row(cb_model *m, const gnode *n, int b, int t) {
    const cb_layer *l = n->l;
    int T = m->T, C = l->C, cross = n->nin > 1;
    const float *x = cb_graph_eval_val(m, n->in[0]);
    const float *kv = cross ? cb_graph_eval_val(m, n->in[1]) : x;
    const int *kl = m->lens[l->len_set[1]];
    cb_attn a = {.B = 1, .Tq = 1, .Tk = cross ? T : t + 1, .C = C, .NH = l->heads,
                 .ldq = cross ? C : 3 * C, .ldkv = cross ? 2 * C : 3 * C,
                 .koff = cross ? 0 : C, .voff = cross ? C : 2 * C,
                 .klen = cross && kl && (l->attn_flags & CB_ATTN_PADDED) ? kl + b / m->dec_beams : NULL};
    size_t q = (size_t)b * T + t, kr = (size_t)b * T;
    m->L->ops->attention_forward(m->L, &a, x + q * a.ldq, kv + kr * a.ldkv,
                                 cb_graph_eval_val(m, n->out) + q * C, m->att_scratch);
}

/* Position t of rows [0, rows) of value v to buf, (rows, the value's
 * width) contiguous; back: buf to the rows. */
static void rows_at(cb_model *m, int v, int t, int rows, float *buf, int back) {
    size_t h = row_floats(m, v);
    float *x = cb_graph_eval_val(m, v) + (size_t)t * h;
    for (int b = 0; b < rows; b++) {
        float *r = x + (size_t)b * m->T * h, *c = buf + (size_t)b * h;
        memcpy(back ? r : c, back ? c : r, sizeof(float) * h);
    }
}

/* A linear node or the head on position t of every row at once: one
 * product reads each weight once for all the rows, where a row at a time
 * reads it once a row. Input and output go through m->tmp, which holds a
 * whole value (Bm x T rows, T >= 2), so rows x (in + out) fits. The head
 * leaves each row's probabilities in probs (rows x V). */
static void node_rows(cb_model *m, int i, int t, int rows, float *probs) {
    const gnode *n = &m->nodes[i];
    cb_layout *L = m->L;
    float *x = m->tmp, *y = m->tmp + (size_t)rows * row_floats(m, n->in[0]);
    rows_at(m, n->in[0], t, rows, x, 0);
    if (n->kind == N_LINEAR) {
        L->ops->linear_forward(L, &n->l->lin, x, y, rows);
        rows_at(m, n->out, t, rows, y, 1);
        return;
    }
    float *s = cb_graph_eval_kept(m, i); /* logits (rows, V), then rows losses */
    L->ops->head_forward(L, &n->l->emb, x, NULL, s, rows);
    memcpy(probs, s, sizeof(float) * (size_t)rows * n->l->emb.V);
}

/* Any other node on position t of row b. */
static void node_row(cb_model *m, int i, int b, int t) {
    const gnode *n = &m->nodes[i];
    cb_layout *L = m->L;
    cb_layer *l = n->l;
    size_t r = (size_t)b * m->T + t;
    float *x = n->nin > 0 ? cb_graph_eval_val(m, n->in[0]) + r * row_floats(m, n->in[0]) : NULL;
    float *y = n->out >= 0 ? cb_graph_eval_val(m, n->out) + r * row_floats(m, n->out) : NULL;
    size_t ny = n->out >= 0 ? row_floats(m, n->out) : 0;
    switch (n->kind) {
    case N_EMBED: cb_graph_embed(m, l, m->ids + r * m->fields + n->field, t, 1, 1, y, ny); break;
    case N_NORM: {
        float *s = cb_graph_eval_kept(m, i);
        L->ops->norm_forward(L, &l->norm, x, y, s + r, s + n->keep / 2 + r, 1);
        break;
    }
    case N_ATTN: attend_row(m, n, b, t); break;
    case N_RELU: L->k->relu_forward(L->k, y, x, ny); break;
    case N_GELU: (n->erf ? L->k->gelu_erf_forward : L->k->gelu_forward)(L->k, y, x, ny); break;
    case N_ADD:
        L->k->residual_forward(L->k, y, x, cb_graph_eval_val(m, n->in[1]) + r * ny, ny);
        break;
    case N_DROP: memcpy(y, x, sizeof(float) * ny); break;
    }
}

void cb_model_decode_step(cb_model *m, int t, int rows, float *probs) {
    double w0 = omp_get_wtime(), c0 = cb_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (int i = 0; i < m->nnodes; i++) {
        int k = m->nodes[i].kind;
        if (m->nodes[i].dec && (k == N_LINEAR || k == N_LOSS)) node_rows(m, i, t, rows, probs);
        else for (int b = 0; m->nodes[i].dec && b < rows; b++) node_row(m, i, b, t);
    }
    cb_decode_info *in = &m->dec_info;
    in->decoder_positions += rows;
    in->decoder_s += omp_get_wtime() - w0;
    in->decoder_cpu_s += cb_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
}

void cb_model_decode_info(const cb_model *m, cb_decode_info *info) { *info = m->dec_info; }

/* Only self-attention's input is read at earlier positions, so only it
 * moves; m->tmp holds any value whole. */
void cb_model_decode_reorder(cb_model *m, const int *from, int rows, int t) {
    for (int i = 0; i < m->nnodes; i++) {
        const gnode *n = &m->nodes[i];
        if (n->kind != N_ATTN || n->nin > 1 || !n->dec) continue;
        float *x = cb_graph_eval_val(m, n->in[0]);
        size_t h = row_floats(m, n->in[0]), row = (size_t)m->T * h, len = (size_t)(t + 1) * h;
        for (int r = 0; r < rows; r++) memcpy(m->tmp + r * row, x + (size_t)from[r] * row, sizeof(float) * len);
        for (int r = 0; r < rows; r++) memcpy(x + r * row, m->tmp + r * row, sizeof(float) * len);
    }
}
