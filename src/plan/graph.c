/* The models other than GPT, planned from their declared graph: the
 * model is declared on a serial layout as pipeline rank s of the layout
 * and planned by the engine itself (cb_graph_plan_only), so its
 * parameters, activation plan, workspace and pipeline messages are the
 * ones a real run plans (one source of truth, no formula per model); each
 * node is costed as a one-row layer (GEMMs, attention, memory-bound
 * bytes per token) at the cluster's rates. Under 1-D tensor parallelism
 * the engine plans tensor rank 0 on a 1-D layout that needs no
 * communicator to plan; the traffic follows the nodes' parities and the
 * layout's operators. See docs/plan.md. */
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
 * recompute; the partition auto from FLOP counts (train --no-profile). */
static int dist_of(const cb_plan_model *pm, const cb_plan_layout *l, int s, cb_dist *d, cb_err *e) {
    static const cb_pp_kind K[] = {CB_PP_GPIPE, CB_PP_1F1B, CB_PP_INTERLEAVED};
    memset(d, 0, sizeof *d);
    d->g.dp = d->g.tp = 1, d->g.pp = l->pp, d->g.at.p = s;
    if (l->tp > 1 && l->mode == CB_TP_1D) { /* tensor rank 0's plan: the layout plans alone */
        d->g.tp = l->tp, d->g.mode = CB_TP_1D;
        if (cb_layout_1d(&d->g, &d->L, e)) return e->code;
        d->L->noted_pad = 1; /* the vocabulary's padding: train's note, not the plan's */
    } else if (!(d->L = cb_layout_serial()))
        return cb_fail(e, CB_ENOMEM, "out of memory planning the model");
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

static double ring(double p, double bytes) { return cb_plan_ring_allreduce(p, bytes); }

/* 1-D tensor traffic of one node, one micro-batch of tok tokens, from
 * the parities and the 1-D layout's operators (src/layout/tp1d.c, rec.c):
 * (the loss's head on head_tok rows: the MLM head's masked rows) a column-parallel linear (parity-0 input) all-reduces its input's
 * gradient backward, a row-parallel one its output forward; the
 * vocabulary-parallel embedding its output, a lookup table its output and
 * its gradient; a LayerNorm of split features (parity 1) its row
 * statistics (2 doubles a row) forward and backward; the loss a MAX and a
 * SUM of row statistics (a second SUM under label smoothing) and its
 * input's gradient, the MLM head also its decoder bias's gradient and, on
 * a parity-1 input, three moves of it to parity 0 (forward, again before
 * backward, the gradient back). */
static void node_tp(const cb_model *m, const gnode *n, double P, double tok, double head_tok,
                    double *sent, double *calls) {
    if (P <= 1) return;
    const cb_layer *l = n->l;
    double H = n->nin ? m->acts[n->in[0]]->H : 0;
    int split = n->nin && m->acts[n->in[0]]->parity == 1;
    if (n->kind == N_LINEAR) {
        *sent += ring(P, 4 * tok * (l->parity == 0 ? l->lin.in : l->lin.out)), *calls += 1;
    } else if (n->kind == N_EMBED || n->kind == N_LOOKUP) {
        int k = n->kind == N_LOOKUP ? 2 : 1;
        *sent += k * ring(P, 4 * tok * m->acts[n->out]->H), *calls += k;
    } else if (n->kind == N_NORM && split) {
        *sent += 2 * ring(P, 16 * tok), *calls += 2;
    } else if (n->kind == N_LOSS) {
        double t = head_tok;
        *sent += ring(P, 4 * t) + ring(P, 8 * t) + ring(P, 4 * t * H), *calls += 3;
        if (l->emb.smooth > 0) *sent += ring(P, 8 * t), *calls += 1; /* the smoothing's sum */
        if (n->l2) *sent += ring(P, 4.0 * l->emb.V), *calls += 1;
        if (n->l2 && split) *sent += 3 * ring(P, 4 * tok * H), *calls += 3;
    }
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
    double tok = (double)rows * j->T, P = l->tp;
    cb_dist d;
    memset(g, 0, sizeof *g);
    int rc = dist_of(pm, l, s, &d, e);
    if (rc) return rc;
    /* the MLM head's rows where the layout gathers them: a fixed count per
     * sequence (src/graph/exec.c, mlm_gather), else every token */
    double head_tok = m_slots(pm) && (d.L->caps & CB_LAYOUT_ROWS) ? (double)rows * m_slots(pm) : tok;
    int reuse = part && part[0] && !d.block_units;
    if (reuse) d.partition = part;
    cb_model *m = declare(pm, &d, rows * l->M, j->T);
    cb_graph_planned pl;
    rc = cb_graph_plan_only(m, &pl, e);
    if (!rc && part && !part[0] && !d.block_units && l->pp > 1) partition_of(m, part, cap);
    if (!rc) {
        g->params = pl.params, g->act = pl.act, g->ws = pl.ws;
        g->send_floats = pl.send_floats, g->msgs = pl.msgs;
        for (int i = 0; i < m->nnodes; i++) {
            const gnode *n = &m->nodes[i];
            if (n->vs % l->pp != s) continue;
            cb_plan_layer y = node_layer(m, n);
            double t = n->kind == N_LOSS ? head_tok : tok;
            cb_plan_kparts k = cb_plan_layer_parts(j->cluster, &y, l, t);
            g->k.gemm_s += k.gemm_s, g->k.attn_s += k.attn_s, g->k.mem_s += k.mem_s;
            node_tp(m, n, P, tok, head_tok, &g->tp_sent, &g->tp_calls);
            if (n->kind == N_LOSS && n->l2) g->stat_bytes[0] = 8; /* src/graph/exec.c */
            if (n->kind == N_LOSS && n->l->emb.has_ignore) g->stat_bytes[1] = 16;
        }
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
    cb_plan_job j = {m, &c, 1, m->T, 25e6, 0};
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
