/* The models other than GPT, planned from their declared graph: the
 * model is declared on a serial layout as pipeline rank s of the layout
 * and planned by the engine itself (cb_graph_plan_only), so its
 * parameters, activation plan, workspace and pipeline messages are the
 * ones a real run plans (one source of truth, no formula per model); each
 * node is costed as a one-row layer (GEMMs, attention, memory-bound
 * bytes per token) at the cluster's rates. Under tensor parallelism the
 * engine plans tensor rank 0 on its layout (1-D, 2-D or 3-D), made on a
 * grid without communicators, which planning never uses; the traffic is
 * counted node by node with the per-operator counts of counts.c. See
 * docs/plan.md. */
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"
#include "plan/plan.h"

static cb_model *declare(const cb_plan_model *pm, cb_dist *d, int batch, int T) {
    cb_model *m = cb_model_new(d, batch, T);
    if (!m) return NULL;
    if (pm->family == CB_PLAN_FAM_BERT) cb_model_declare_bert(m, &pm->bert);
    else if (pm->family == CB_PLAN_FAM_NMT) cb_model_declare_nmt(m, &pm->nmt);
    else if (pm->family == CB_PLAN_FAM_NCF) cb_model_declare_ncf(m, &pm->ncf);
    else cb_model_declare_gpt(m, &pm->gpt);
    return m;
}

/* The engine's options of a layout on pipeline rank s, as cubist train
 * sets them (src/train/run.c): its micro-batches, schedule, chunks,
 * recompute; the partition auto from FLOP counts (train --no-profile).
 * Tensor parallelism: the layout of tensor rank 0 (2-D: on the diagonal;
 * 3-D: every rank alike), made on a grid without communicators, which
 * planning never uses. */
static int dist_of(const cb_plan_job *j, const cb_plan_layout *l, int s, cb_dist *d, cb_err *e) {
    static const cb_pp_kind K[] = {CB_PP_GPIPE, CB_PP_1F1B, CB_PP_INTERLEAVED};
    const cb_plan_model *pm = j->model;
    memset(d, 0, sizeof *d);
    d->g.dp = d->g.tp = 1, d->g.pp = l->pp, d->g.at.p = s;
    if (l->tp > 1) {
        d->g.tp = l->tp, d->g.mode = l->mode, d->g.q = cb_grid_side(l->tp, l->mode);
        int rc = l->mode == CB_TP_1D   ? cb_layout_1d(&d->g, &d->L, e)
                 : l->mode == CB_TP_2D ? cb_layout_2d(&d->g, &d->L, e)
                                       : cb_layout_3d(&d->g, &d->L, e);
        if (rc) return rc;
        d->L->noted_pad = 1; /* the vocabulary's padding: train's note, not the plan's */
        if (l->mode == CB_TP_3D) d->L->save_gathered = l->gathered;
        d->L->wire_bf16 = j->comm_bf16;
    } else if (!(d->L = cb_layout_serial()))
        return cb_fail(e, CB_ENOMEM, "out of memory planning the model");
    if (j->bf16 && cb_kernels_bf16()) d->L->k = cb_kernels_bf16(); /* its attention_saved */
    d->M = l->M, d->sched = K[l->schedule], d->v = l->schedule == CB_PLAN_INTERLEAVED ? l->v : 1;
    d->partition = "auto", d->mem_weight = 0.8, d->embed_grad = CB_DP_EMBED_DENSE;
    d->recompute = l->recompute ? RC_BLOCK : RC_NONE;
    /* whole blocks as modules: GPT's and the translation model's tasks
     * (src/train/task_gpt.c, task_nmt.c); BERT and NCF by operation */
    d->block_units = pm->family == CB_PLAN_FAM_GPT || pm->family == CB_PLAN_FAM_NMT;
    return CB_OK;
}

/* One node's forward work per token as a one-row layer: a linear's GEMM,
 * attention's scores and context (4 T C, keys as many as queries), the
 * memory-bound kernels' bytes read and written (a LayerNorm and residual
 * add in mem_norm, replicated under 1-D), the exact GELU and dropout per
 * element (they compute more than they move: calibrated rates), the
 * loss's GEMM against the table and its cross-entropy over V logits. */
static cb_plan_layer node_layer(const cb_model *m, const gnode *n) {
    cb_plan_layer y = {.name = "node", .count = 1};
    double H = m->acts[n->out >= 0 ? n->out : n->in[0]]->H;
    double Hin = n->nin ? m->acts[n->in[0]]->H : H;
    switch (n->kind) {
    case N_LINEAR: y.ngemm = 1, y.gemm[0] = (cb_plan_gemm){n->l->lin.in, n->l->lin.out}; break;
    case N_ATTN: /* with dropout of the probabilities: a mask element per key and head */
        y.attn_flops = 4.0 * m->T * n->l->C, y.head_size = (double)n->l->C / n->l->heads;
        y.seq = m->T;
        if (n->l->attn_drop > 0) y.ew[CB_PLAN_EW_DROPOUT] = (double)m->T * n->l->heads;
        break;
    case N_EMBED: y.mem_bytes = 12 * H; break;
    case N_MUL: y.mem_bytes = 12 * H; break;
    case N_NORM: y.mem_norm = 8 * H; break;
    case N_ADD: y.mem_norm = 12 * H; break;
    case N_GELU:
        if (n->erf) y.ew[CB_PLAN_EW_GELU_ERF] = H;
        else y.mem_bytes = 8 * H; /* tanh: the memory-bound probe's own GELU */
        break;
    case N_DROP: y.ew[CB_PLAN_EW_DROPOUT] = H; break;
    case N_LOSS:
        y.ngemm = 1, y.gemm[0] = (cb_plan_gemm){Hin, n->l->emb.V};
        y.mem_bytes = 12.0 * n->l->emb.V;
        break;
    default: y.mem_bytes = 8 * (n->nin ? Hin : H); /* lookup, ReLU, concat, logit */
    }
    return y;
}

static int m_slots(const cb_plan_model *pm) {
    return pm->family == CB_PLAN_FAM_BERT ? cb_bert_predictions(&pm->bert) : 0;
}

/* Tensor traffic of one node, one micro-batch of tok tokens, by the
 * layout's operators (counts.c, cb_plan_tp_*): a linear, a LayerNorm on
 * its input's parity, the embedding (positions learned or fixed), the
 * head and its loss (weighted: smoothing or ignored targets, as
 * cb_loss_plain decides; the MLM head's decoder bias and, on a parity-1
 * input, three moves of it to parity 0: forward, again before backward,
 * the gradient back, into one buffer that the layout is told was
 * rewritten; the head on head_tok rows: the MLM head's slots, exec.c's
 * mlm_gather), and the whole-tensor moves of src/layout/rec.c: a
 * lookup table's output and gradient, a concatenation's two inputs and
 * its gradient, the logistic head's logits and weight gradient. */
static void node_tp(const cb_model *m, const gnode *n, cb_plan_tpop *o, double tok,
                    double head_tok) {
    const cb_layer *l = n->l;
    double H = n->nin ? m->acts[n->in[0]]->H : 0;
    int par = n->nin ? m->acts[n->in[0]]->parity : 0;
    switch (n->kind) {
    case N_LINEAR: cb_plan_tp_linear(o, tok, l->lin.in, l->lin.out, l->parity); break;
    case N_NORM: cb_plan_tp_norm(o, tok, H, par); break;
    case N_EMBED: cb_plan_tp_embed(o, tok, l->emb.C, l->emb.V, m->T, !l->sinusoid); break;
    case N_LOOKUP:
        for (int k = 0; k < 2; k++) cb_plan_tp_whole(o, 4 * tok * m->acts[n->out]->H);
        break;
    case N_CONCAT:
        cb_plan_tp_whole(o, 4 * tok * H), cb_plan_tp_whole(o, 4 * tok * m->acts[n->in[1]]->H);
        cb_plan_tp_whole(o, 4 * tok * m->acts[n->out]->H);
        break;
    case N_LOGIT: cb_plan_tp_whole(o, 4 * tok), cb_plan_tp_whole(o, 4.0 * l->norm.C); break;
    case N_LOSS:
        cb_plan_tp_head(o, head_tok, l->emb.C, l->emb.V, !cb_loss_plain(&l->emb), n->l2 != NULL,
                        n->l2 && par == 1);
        if (n->l2 && par == 1)
            for (int k = 0; k < 3; k++) cb_plan_tp_whole(o, 4 * tok * H);
        break;
    }
}

/* --precision bf16: what the bf16 table holds for the stage's products and
 * attention beside the plain copies of the linears' and the head's
 * weights, bytes (predict.c, cb_plan_bf16_*) */
static double held(const cb_model *m, const cb_plan_layout *l, int s, int tok, int head_tok,
                   int nthr, double *packed_out) {
    double need[CB_BF16_SLOTS] = {0}, packed = 0;
    for (int i = 0; i < m->nnodes; i++) {
        const gnode *n = &m->nodes[i];
        const cb_layer *y = n->l;
        if (n->vs % l->pp != s) continue;
        if (n->kind == N_LINEAR)
            cb_plan_bf16_linear(l, nthr, need, &packed, tok, y->lin.in, y->lin.out, y->parity);
        if (n->kind == N_LOSS)
            cb_plan_bf16_head(l, nthr, need, &packed, head_tok, y->emb.C, y->emb.V);
        if (n->kind == N_LOGIT)
            cb_plan_bf16_logit(l, need, &packed, tok, y->norm.C, y->norm.parity);
        if (n->kind == N_ATTN) {
            cb_attn a = cb_attn_self(tok / m->T, m->T, y->C, y->heads,
                                     !!(y->attn_flags & CB_ATTN_CAUSAL), NULL);
            a.drop = y->attn_drop;
            cb_plan_bf16_attention(l, nthr, need, a);
        }
    }
    *packed_out = packed;
    return cb_kernels_bf16_need_bytes(need) + packed;
}

/* The partition a plan made, as --partition's list: each virtual stage's
 * first node (every node is a module) and the end. */
static void partition_of(const cb_model *m, char *part, size_t cap) {
    size_t n = 0;
    for (int i = 0, vs = 0; i < m->nnodes && n < cap; i++)
        if (i == 0 || m->nodes[i].vs != m->nodes[i - 1].vs)
            n += (size_t)snprintf(part + n, cap - n, "%s%d", vs++ ? "," : "", i);
    if (n < cap) snprintf(part + n, cap - n, ",%d", m->nnodes);
}

int cb_plan_graph_stage(const cb_plan_job *j, const cb_plan_layout *l, int s, char *part,
                        size_t cap, cb_plan_gstage *g, cb_err *e) {
    const cb_plan_model *pm = j->model;
    int rows = j->batch / l->M / l->dp;
    double tok = (double)rows * j->T;
    cb_plan_tpop o = cb_plan_tpop_of(l->mode, l->tp, j->comm_bf16, l->gathered, 0);
    cb_dist d;
    memset(g, 0, sizeof *g);
    int rc = dist_of(j, l, s, &d, e);
    if (rc) return rc;
    /* the MLM head's rows where the layout gathers them: a fixed count per
     * sequence (src/graph/exec.c, mlm_gather), else every token */
    int slots = m_slots(pm);
    double head_tok = slots && (d.L->caps & CB_LAYOUT_ROWS) ? (double)rows * slots : tok;
    int reuse = part && part[0] && !d.block_units;
    if (reuse) d.partition = part;
    cb_model *m = declare(pm, &d, rows * l->M, j->T);
    cb_graph_planned pl;
    rc = cb_graph_plan_only(m, &pl, e);
    if (!rc && part && !part[0] && !d.block_units && l->pp > 1) partition_of(m, part, cap);
    if (!rc) {
        g->params = pl.params, g->act = pl.act, g->ws = pl.ws, g->zeroed = pl.zeroed;
        g->send_floats = pl.send_floats, g->msgs = pl.msgs;
        for (int i = 0; i < m->nnodes; i++) {
            const gnode *n = &m->nodes[i];
            if (n->vs % l->pp != s) continue;
            cb_plan_layer y = node_layer(m, n);
            double t = n->kind == N_LOSS ? head_tok : tok;
            cb_plan_kparts k = cb_plan_layer_parts(j->cluster, &y, l, t);
            g->k.gemm_s += k.gemm_s, g->k.attn_s += k.attn_s, g->k.mem_s += k.mem_s;
            node_tp(m, n, &o, tok, head_tok);
            if (n->kind == N_LOSS && n->l2) g->stat_bytes[0] = 8; /* src/graph/exec.c */
            if (n->kind == N_EMBED) g->lookups += 1;
            if (n->kind == N_LOSS && n->l->emb.has_ignore) g->stat_bytes[1] = 16;
            if (n->kind == N_LINEAR) g->bf16_weights += (double)n->l->lin.in * n->l->lin.out;
            if (n->kind == N_LOSS)
                g->bf16_weights += cb_plan_bf16_head_weights(l, n->l->emb.V, n->l->emb.C);
        }
        g->tp_sent = o.sent, g->tp_calls = o.calls;
        if (j->bf16)
            g->bf16_staging =
                held(m, l, s, (int)tok, (int)head_tok, j->cluster->threads, &g->bf16_packed);
    }
    cb_model_free(m);
    cb_layout_free(d.L);
    return rc;
}

/* The whole model's parameters: the engine's table of one stage. */
static int finish(cb_plan_model *m, const char *name, cb_err *e) {
    snprintf(m->name, sizeof m->name, "%s", name);
    cb_plan_cluster c = {.peak_flops = 1, .mem_bandwidth = 1, .attn_efficiency = 1, .neff = 1,
                         .eff_intensity = {1}, .eff = {1}};
    cb_plan_job j = {m, &c, 1, m->T, 25e6, 0, 0};
    cb_plan_layout l = {1, 1, 1, CB_TP_1D, CB_PLAN_GPIPE, 1, 1, 0, 0, 1, CB_DP_EMBED_DENSE};
    cb_plan_gstage g;
    int rc = cb_plan_graph_stage(&j, &l, 0, NULL, 0, &g, e);
    m->params = g.params;
    return rc;
}

int cb_plan_model_bert(const cb_bert_config *c, cb_plan_model *m, cb_err *e) {
    memset(m, 0, sizeof *m);
    m->family = CB_PLAN_FAM_BERT, m->bert = *c, m->T = c->seq_len;
    m->gpt = (cb_gpt_config){c->n_layer, c->d_model, c->n_head, c->seq_len, c->vocab};
    return finish(m, c->roberta ? "roberta" : "bert", e);
}

int cb_plan_model_nmt(const cb_nmt_config *c, int T, cb_plan_model *m, cb_err *e) {
    memset(m, 0, sizeof *m);
    m->family = CB_PLAN_FAM_NMT, m->nmt = *c, m->T = T;
    m->gpt = (cb_gpt_config){c->enc_layers + c->dec_layers, c->d_model, c->n_head, T, c->vocab};
    return finish(m, "nmt", e);
}

int cb_plan_model_ncf(const cb_ncf_config *c, cb_plan_model *m, cb_err *e) {
    memset(m, 0, sizeof *m);
    m->family = CB_PLAN_FAM_NCF, m->ncf = *c, m->T = 1;
    m->gpt = (cb_gpt_config){c->n_mlp - 1, c->mlp[0], 1, 1, c->users + c->items};
    return finish(m, "ncf", e);
}
