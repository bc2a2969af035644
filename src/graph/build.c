/* Building a declared model: checks, the pipeline partition of its nodes,
 * this rank's tensors, the chunks' memory plan (graph.h), data
 * parallelism and the optimizer. Collective; every rank reaches the same
 * verdict. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "layout/rec.h"
#include "pipeline/partition.h"
#include "util/mem.h"

#define BUCKET_MB 25.0 /* gradient fusion buckets, as cubist train's --bucket-mb default */

/* ---------------------------------------------------------------- checks */

static int uses_tensor(const gnode *n, int k) {
    if (!n->l || n->l->kind == G_ATTN) return 0;
    return n->kind == N_LOSS || n->kind == N_LOOKUP || n->kind == N_LOGIT ? k == 0 : 1;
}

/* node n uses tensor k of layer l (the MLM loss: its decoder bias too) */
static int node_uses(const gnode *n, const cb_layer *l, int k) {
    return (n->l == l && uses_tensor(n, k)) || (n->l2 == l && k == 0);
}

static int check_layer(cb_model *m, const cb_layer *l, cb_err *e) {
    cb_layout *L = m->L;
    if (l->kind == G_BIAS) return CB_OK;
    int tab = l->kind == G_EMBED || l->kind == G_LOOKUP;
    int V = tab ? l->emb.V : 0, NH = l->kind == G_ATTN ? l->heads : 0;
    int C = tab                                           ? l->emb.C
            : l->kind == G_NORM || l->kind == G_LOGIT ? l->norm.C
            : l->kind == G_ATTN ? l->C
                                : l->lin.in;
    int rc = L->ops->check(L, m->Bm, m->T, C, NH, V, e);
    if (!rc && l->kind == G_LINEAR)
        rc = L->ops->check(L, m->Bm, m->T, l->lin.out / l->lin.parts, NH, V, e);
    return rc;
}

static int check(cb_model *m, cb_err *e) {
    if (m->err.code) return cb_fail(e, m->err.code, "%s", m->err.msg);
    if (m->loss_node < 0)
        return cb_fail(e, CB_EINPUT, "the model declares no loss; end the graph with cb_op_lm_loss or "
                                     "cb_op_logistic_loss");
    if (m->B % m->d->g.dp)
        return cb_fail(e, CB_EINPUT, "batch %d does not divide over --dp %d; use a multiple of %d",
                       m->B, m->d->g.dp, m->d->g.dp);
    if (m->Bl % m->M)
        return cb_fail(e, CB_EINPUT,
                       "--micro-batches %d does not divide the %d sequences of a data-parallel "
                       "rank; use a divisor of %d", m->M, m->Bl, m->Bl);
    if (m->P * m->v > m->nnodes)
        return cb_fail(e, CB_EINPUT, "%d pipeline stages for a graph of %d operations; use fewer "
                                     "stages (--pp, --virtual-stages)", m->P * m->v, m->nnodes);
    for (int i = 0; i < m->nlayers; i++) {
        int rc = check_layer(m, m->layers[i], e);
        if (rc) return rc;
        if (m->layers[i]->parity < 0)
            return cb_fail(e, CB_EINPUT, "layer %s is declared but never used; apply it or drop it",
                           m->layers[i]->name);
    }
    return cb_pp_schedule_check(m->d->sched, m->P, m->v, m->M, e);
}

/* ---------------------------------------------------------------- partition */

/* FLOPs (forward + backward) and bytes of node i for one micro-batch:
 * what the partition balances. */
static void node_module(const cb_model *m, int i, const int *uses, cb_pp_module *x) {
    const gnode *n = &m->nodes[i];
    const cb_layer *l = n->l;
    double N = (double)m->Bm * m->T, f = sizeof(float);
    double H = n->out >= 0 ? m->acts[n->out]->H : 0;
    *x = (cb_pp_module){.act_bytes = f * N * H, .tie = l && uses && uses[l->idx] > 1 ? l->idx : -1,
                        .flops = 3 * N * H};
    if (n->kind == N_LINEAR) {
        double io = (double)l->lin.in * l->lin.out;
        x->flops = 6 * N * io, x->param_bytes = f * (io + l->lin.out);
    } else if (n->kind == N_ATTN) {
        x->flops = 12 * N * m->T * l->C;
        x->act_bytes += f * N * l->heads * m->T * (l->attn_drop > 0 ? 2 : 1);
    } else if (n->kind == N_NORM) {
        x->flops = 10 * N * l->norm.C, x->param_bytes = f * 2 * l->norm.C;
    } else if (n->kind == N_EMBED) {
        x->param_bytes = f * ((double)l->emb.V + l->emb.T) * l->emb.C;
    } else if (n->kind == N_LOSS) {
        x->flops = 6 * N * l->emb.C * l->emb.V, x->param_bytes = f * (double)l->emb.V * l->emb.C;
        x->act_bytes = f * N * (l->emb.V + 1);
    } else if (n->kind == N_LOOKUP) {
        x->param_bytes = f * (double)l->emb.V * l->emb.C;
    } else if (n->kind == N_LOGIT) {
        x->flops = 6 * N * l->norm.C, x->param_bytes = f * l->norm.C, x->act_bytes = f * 2 * N;
    }
    static const char *const op[N_KINDS] = {[N_GELU] = "gelu", [N_ADD] = "add", [N_MUL] = "mul",
                                            [N_RELU] = "relu", [N_CONCAT] = "concat",
                                            [N_DROP] = "dropout"};
    const char *nm = l ? l->name : op[n->kind];
    snprintf(x->name, sizeof x->name, "%.23s", nm);
}

/* The partition's modules, runs of nodes [u[k], u[k+1]): every node is
 * one, or under block_units each declared block is one and so is each run
 * of nodes between blocks (cubist train's GPT: the embedding, each block,
 * the head). Returns their count. */
static int module_starts(const cb_model *m, int *u) {
    int k = 0;
    for (int i = 0; i < m->nnodes; i++)
        if (!i || !m->d->block_units || m->nodes[i].seg != m->nodes[i - 1].seg) u[k++] = i;
    u[k] = m->nnodes;
    return k;
}

/* Bytes a node keeps per micro-batch that --recompute selective drops:
 * the attention probabilities and the GELU output. */
static double dropped(const cb_model *m, const gnode *n) {
    double N = (double)m->Bm * m->T, f = sizeof(float);
    if (n->kind == N_ATTN) return f * N * n->l->heads * m->T * (n->l->attn_drop > 0 ? 2 : 1);
    return n->kind == N_GELU ? f * N * m->acts[n->out]->H : 0;
}

/* A declared block's bytes per micro-batch under block recompute: its
 * input; uniform groups of k keep every k-th input; the block method's
 * first n blocks of each of nvs chunks (about nblk / nvs blocks each)
 * keep their input, the others everything. */
static double block_kept(const cb_model *m, const gnode *first, double full, int nblk) {
    const cb_dist *d = m->d;
    double input = sizeof(float) * (double)m->Bm * m->T * m->acts[first->in[0]]->H;
    if (d->rc_uniform) return input / (d->rc_layers > 0 ? d->rc_layers : 1);
    double per = (double)nblk / (m->P * m->v);
    double share = d->rc_layers == 0 || d->rc_layers >= per ? 1 : d->rc_layers / per;
    return share * input + (1 - share) * full;
}

/* Module k's figures: the sums of its nodes', the bytes kept under the
 * recompute (a block module is a declared block). */
static void module_of(const cb_model *m, const int *u, int k, const int *uses, int nblk,
                      cb_pp_module *x) {
    node_module(m, u[k], uses, x);
    double drop = dropped(m, &m->nodes[u[k]]);
    for (int i = u[k] + 1; i < u[k + 1]; i++) {
        cb_pp_module y;
        node_module(m, i, uses, &y);
        x->flops += y.flops, x->param_bytes += y.param_bytes, x->act_bytes += y.act_bytes;
        if (x->tie < 0) x->tie = y.tie;
        drop += dropped(m, &m->nodes[i]);
    }
    const gnode *first = &m->nodes[u[k]];
    if (m->d->recompute == RC_SELECTIVE) x->act_bytes -= drop;
    if (m->d->recompute == RC_BLOCK && m->d->block_units && first->seg >= 0 && first->nin)
        x->act_bytes = block_kept(m, first, x->act_bytes, nblk);
}

/* The partition's modules of a declared (not yet built) model. */
static int modules(cb_model *m, int *uses, int *u, cb_pp_module *mod) {
    int n = module_starts(m, u), nblk = 0;
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].l) uses[m->nodes[i].l->idx]++;
    for (int k = 0; k < n; k++) nblk += m->nodes[u[k]].seg >= 0;
    for (int k = 0; k < n; k++) module_of(m, u, k, uses, nblk, &mod[k]);
    return n;
}

int cb_model_print_partition(const cb_model *m, FILE *f) {
    const cb_dist *d = m->d;
    if (!m->part) return 0;
    fprintf(f, "partition of %d %s into %d stages, memory weight %g:\n", m->part->nmod,
            d->block_units ? "modules" : "operations", m->part->nstages, d->mem_weight);
    cb_pp_partition_print(f, m->part, m->part_mod, d->mem_weight, m->P);
    return 1;
}

static int partition(cb_model *m, cb_err *e) {
    cb_dist *d = m->d;
    int nvs = m->P * m->v;
    int *uses = calloc((size_t)m->nlayers + 1, sizeof(int)), *u = calloc((size_t)m->nnodes + 1, sizeof(int));
    cb_pp_module *mod = calloc((size_t)m->nnodes + 1, sizeof *mod);
    double *cost = calloc((size_t)m->nnodes + 1, sizeof *cost);
    cb_pp_partition pt;
    int rc = uses && u && mod && cost ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory partitioning");
    int n = rc ? 0 : modules(m, uses, u, mod);
    if (!rc && nvs > 1 && d->profile && !strcmp(d->partition, "auto"))
        rc = cb_graph_profile(m, u, n, mod, e);
    if (!rc) cb_pp_module_costs(mod, n, d->mem_weight, cost);
    if (!rc && nvs == 1) pt = (cb_pp_partition){.nstages = 1, .nmod = n, .bound = {0, n}};
    else if (!rc && !strcmp(d->partition, "auto"))
        rc = m->v > 1 ? cb_pp_partition_interleaved(cost, n, m->P, m->v, &pt, e)
                      : cb_pp_partition_auto(cost, n, m->P, &pt, e);
    else if (!rc && !strcmp(d->partition, "equal")) rc = cb_pp_partition_equal(cost, n, nvs, &pt, e);
    else if (!rc) rc = cb_pp_partition_parse(d->partition, cost, n, nvs, &pt, e);
    for (int s = 0; !rc && s < nvs; s++)
        for (int i = u[pt.bound[s]]; i < u[pt.bound[s + 1]]; i++) m->nodes[i].vs = s;
    if (!rc && nvs > 1 && d->print_partition) { /* kept for cb_model_print_partition */
        m->part = malloc(sizeof pt);
        if (!m->part) rc = cb_fail(e, CB_ENOMEM, "out of memory keeping the partition");
        else *m->part = pt, m->part_mod = mod, mod = NULL;
    }
    for (int i = 0; !rc && i < m->nnodes; i++) {
        cb_pp_module y;
        node_module(m, i, uses, &y);
        m->flops += y.flops;
    }
    free(uses), free(u), free(mod), free(cost);
    return rc;
}

/* ---------------------------------------------------------------- tensors */

static void tensor_spec(const cb_layer *l, int k, char *name, size_t cap, int64_t *d0,
                        int64_t *d1, int *decay, cb_param_kind *kind, int *init) {
    const char *suffix = k == 0 ? "weight" : l->kind == G_EMBED ? "pos" : "bias";
    if (k == 1 && l->pos[0]) snprintf(name, cap, "%s.weight", l->pos);
    else snprintf(name, cap, "%s.%s", l->name, suffix);
    *d1 = 0;
    *decay = 0;
    if (l->kind == G_LOOKUP) { /* one tensor, row-sharded like the vocabulary */
        *d0 = l->emb.V;
        *d1 = l->emb.C;
        *decay = 1; /* NCF's factors are regularised (He et al.: L2 on the embeddings) */
        *kind = CB_P_EMBED;
        *init = CB_INIT_NORMAL;
    } else if (l->kind == G_LOGIT) { /* one weight vector, sharded like x's features */
        *d0 = l->norm.C;
        *decay = 1;
        *kind = CB_P_NORM;
        *init = CB_INIT_NORMAL;
    } else if (l->kind == G_EMBED) {
        *d0 = k == 0 ? l->emb.V : l->emb.T;
        *d1 = l->emb.C;
        *kind = k == 0 ? CB_P_EMBED : CB_P_POS;
        *init = k == 1 && l->sinusoid ? CB_INIT_SINUSOID : CB_INIT_NORMAL;
    } else if (l->kind == G_BIAS) { /* one vector, "<name>.bias" */
        snprintf(name, cap, "%s.bias", l->name);
        *d0 = l->lin.out;
        *kind = CB_P_VOCAB; /* the MLM decoder bias: split like the head's vocabulary */
        *init = CB_INIT_ZERO;
    } else if (l->kind == G_LINEAR) {
        *d0 = k == 0 ? l->lin.in : l->lin.out;
        if (k == 0) *d1 = l->lin.out;
        *decay = k == 0;
        *kind = k == 0 ? CB_P_LINEAR_W : CB_P_LINEAR_B;
        *init = k == 0 ? CB_INIT_NORMAL : CB_INIT_ZERO;
    } else {
        *d0 = l->norm.C;
        *kind = CB_P_NORM;
        *init = k == 0 ? CB_INIT_ONE : CB_INIT_ZERO;
    }
}

/* Which pipeline ranks hold tensor k of layer l: a bit mask (ranks < 64
 * share it; more ranks hold every tensor they touch alike). */
static uint64_t holders(const cb_model *m, const cb_layer *l, int k, int *owner_vs) {
    uint64_t h = 0;
    *owner_vs = -1;
    for (int i = 0; i < m->nnodes; i++) {
        const gnode *n = &m->nodes[i];
        if (!node_uses(n, l, k)) continue;
        h |= 1ull << (n->vs % m->P % 64);
        if (*owner_vs < 0 || n->vs < *owner_vs) *owner_vs = n->vs;
    }
    return h;
}

/* This rank's tensors in declaration order; a copy held for a later stage
 * is not its owner (norm, checkpoint) and is listed in the ties. */
static int make_table(cb_model *m, cb_err *e) {
    m->tie_t = calloc(2 * (size_t)m->nlayers + 1, sizeof(int));
    m->tie_owner_rank = calloc(2 * (size_t)m->nlayers + 1, sizeof(int));
    m->tie_ranks = calloc(2 * (size_t)m->nlayers + 1, sizeof(int));
    if (!m->tie_t || !m->tie_owner_rank || !m->tie_ranks)
        return cb_fail(e, CB_ENOMEM, "out of memory declaring the model");
    for (int i = 0; i < m->nlayers; i++) {
        cb_layer *l = m->layers[i];
        for (int k = 0; k < 2 && l->kind != G_ATTN; k++) {
            int ovs;
            uint64_t h = holders(m, l, k, &ovs);
            l->owner_vs[k] = ovs;
            if (!(h >> (m->me % 64) & 1)) continue;
            char name[80];
            int64_t d0, d1;
            int decay, init;
            cb_param_kind kind;
            tensor_spec(l, k, name, sizeof name, &d0, &d1, &decay, &kind, &init);
            /* -1: --decay-embed applies (not to a fixed sinusoidal table) */
            int fixed = l->kind == G_EMBED && k == 1 && l->sinusoid;
            int t = cb_ptable_add(&m->pt, name, d0, d1, decay, l->kind == G_EMBED && !fixed ? -1 : i,
                                 kind, l->parts, l->parity);
            if (t < 0) return cb_fail(e, CB_ENOMEM, "out of memory declaring the model");
            l->t[k] = t;
            if (ovs % m->P != m->me) m->pt.t[t].owner = 0;
            if (h & (h - 1)) { /* held on several ranks */
                m->tie_t[m->ntie] = t;
                m->tie_owner_rank[m->ntie] = ovs % m->P;
                m->tie_ranks[m->ntie++] = (int)(h & 0x7fffffff);
            }
        }
    }
    return CB_OK;
}

/* The tensors each node of this rank finishes: it uses them, no node
 * before it on this rank does (backward meets that one last), and no other
 * rank holds a copy (those are final after the copies' shares are added). */
static void mark_final(cb_model *m) {
    for (int i = 0; i < m->nnodes; i++) {
        gnode *n = &m->nodes[i];
        n->fin[0] = n->fin[1] = -1;
        if (n->vs % m->P != m->me || !n->l) continue;
        for (int k = 0; k < 2; k++) {
            int t = n->l->t[k], earlier = 0;
            if (t < 0 || !uses_tensor(n, k)) continue;
            for (int j = 0; j < i && !earlier; j++)
                earlier = m->nodes[j].l == n->l && m->nodes[j].vs % m->P == m->me &&
                          uses_tensor(&m->nodes[j], k);
            for (int x = 0; x < m->ntie; x++) earlier |= m->tie_t[x] == t;
            if (!earlier) n->fin[k] = t;
        }
        if (n->l2 && n->l2->t[0] >= 0) n->fin[1] = n->l2->t[0]; /* its only user; fin[1]: the
                                                                    embedding's pos is not used */
    }
}

/* Points each layer at its shards on this rank. */
static void bind(cb_model *m, cb_layer *l) {
    float *p[2] = {NULL, NULL}, *g[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++)
        if (l->t[k] >= 0) {
            p[k] = m->params + m->pt.t[l->t[k]].offset;
            g[k] = m->grads + m->pt.t[l->t[k]].offset;
        }
    if (l->kind == G_LINEAR) {
        l->lin.parity = l->parity;
        l->lin.w = p[0], l->lin.b = p[1], l->lin.dw = g[0], l->lin.db = g[1];
    } else if (l->kind == G_NORM) {
        l->norm.parity = l->parity;
        l->norm.w = p[0], l->norm.b = p[1], l->norm.dw = g[0], l->norm.db = g[1];
    } else if (l->kind == G_EMBED || l->kind == G_LOOKUP) {
        /* a sinusoidal table gets no gradient (dwpe NULL): it stays zero, and
         * AdamW without decay leaves the table as it was drawn */
        l->emb.wte = p[0], l->emb.wpe = p[1], l->emb.dwte = g[0];
        l->emb.dwpe = l->sinusoid ? NULL : g[1];
    } else if (l->kind == G_LOGIT) {
        l->norm.parity = l->parity;
        l->norm.w = p[0], l->norm.dw = g[0];
    } else if (l->kind == G_BIAS) {
        l->lin.b = p[0], l->lin.db = g[0];
    }
}

/* Each tensor from the counter-based generator: the serial model's values
 * under every layout and stage. */
static void fill(cb_model *m, uint64_t seed) {
    for (int i = 0; i < m->nlayers; i++) {
        const cb_layer *l = m->layers[i];
        for (int k = 0; k < 2; k++) {
            if (l->t[k] < 0) continue;
            char name[80];
            int64_t d0, d1;
            int decay, init;
            cb_param_kind kind;
            tensor_spec(l, k, name, sizeof name, &d0, &d1, &decay, &kind, &init);
            cb_ptable_init(&m->pt, m->params, l->t[k], init, l->init_sd, seed);
        }
    }
}

/* ---------------------------------------------------------------- memory plan */

size_t cb_graph_value_floats(const cb_model *m, int v) {
    int rows, cols;
    const cb_act *a = m->acts[v];
    m->L->ops->act_shape(m->L, m->Bm * m->T, a->H, a->parity, &rows, &cols);
    return (size_t)rows * cols;
}

static size_t keep_floats(const cb_model *m, const gnode *n) {
    cb_layout *L = m->L;
    int N = m->Bm * m->T, rows, cols;
    if (n->kind == N_NORM) {
        L->ops->act_shape(L, N, n->l->norm.C, n->l->parity, &rows, &cols);
        return 2 * (size_t)rows;
    }
    if (n->kind == N_ATTN) { /* training's call (with dropout, the dropped probabilities too) */
        cb_attn a = cb_attn_self(m->Bm, m->T, n->l->C, n->l->heads,
                                 !!(n->l->attn_flags & CB_ATTN_CAUSAL), NULL);
        a.drop = n->l->attn_drop;
        return L->ops->att_numel(L, &a);
    }
    if (n->kind == N_LOSS) return L->ops->logits_numel(L, N, n->l->emb.V);
    if (n->kind == N_LOGIT) return 2 * (size_t)N; /* every row's logit and loss */
    return 0;
}

/* Edges: a value read on a virtual stage other than its producer's. */
static int make_edges(cb_model *m, cb_err *e) {
    int cap = 16;
    m->edges = malloc(sizeof *m->edges * cap);
    if (!m->edges) return cb_fail(e, CB_ENOMEM, "out of memory planning the pipeline");
    for (int v = 0; v < m->nacts; v++) {
        int from = m->nodes[m->acts[v]->node].vs, last = -1;
        for (int i = 0; i < m->nnodes; i++) {
            const gnode *n = &m->nodes[i];
            int reads = (n->nin > 0 && n->in[0] == v) || (n->nin > 1 && n->in[1] == v);
            if (!reads || n->vs == from || n->vs == last) continue;
            last = n->vs; /* nodes are in stage order: one edge per reading stage */
            if (m->nedges == cap) {
                gedge *x = realloc(m->edges, sizeof *x * (cap *= 2));
                if (!x) return cb_fail(e, CB_ENOMEM, "out of memory planning the pipeline");
                m->edges = x;
            }
            m->edges[m->nedges] = (gedge){v, from, n->vs, m->nedges};
            m->nedges++;
        }
    }
    return CB_OK;
}

/* Whether node i's forward reruns before backward, and whether its output
 * (o) and kept state (k) then live in the shared buffers. */
static void recompute_flags(cb_model *m, const gchunk *ch, int i, int *o, int *k) {
    gnode *n = &m->nodes[i];
    *o = *k = 0;
    n->recompute = 0;
    int rc = m->d->recompute;
    if (rc == RC_BLOCK && n->rseg >= 0 && !IS_LOSS(n->kind)) {
        n->recompute = *k = 1;
        *o = n->out >= 0;
        for (int j = i + 1; *o && j < m->nnodes; j++) { /* every reader in the block, here */
            const gnode *r = &m->nodes[j];
            int reads = (r->nin > 0 && r->in[0] == n->out) || (r->nin > 1 && r->in[1] == n->out);
            if (reads && (r->rseg != n->rseg || j >= ch->n1)) *o = 0;
        }
    } else if (rc == RC_SELECTIVE && n->kind == N_ATTN) {
        n->recompute = *k = 1;
    } else if (rc == RC_SELECTIVE && n->kind == N_GELU && i + 1 < ch->n1) {
        int readers = 0; /* its one reader must be the next node */
        for (int j = i + 1; j < m->nnodes; j++) {
            const gnode *r = &m->nodes[j];
            readers += (r->nin > 0 && r->in[0] == n->out) + (r->nin > 1 && r->in[1] == n->out);
        }
        const gnode *r = &m->nodes[i + 1];
        n->recompute = *o = readers == 1 && r->in[0] == n->out;
    }
}

/* The recompute units of ch's nodes (rseg): its declared blocks in order,
 * the first --recompute-layers of them (block method), or groups of that
 * many (uniform method); -1 for nodes that keep their activations. */
static void recompute_units(cb_model *m, gchunk *ch) {
    int nblk = -1, prev = -1, n = m->d->rc_layers, uni = m->d->rc_uniform;
    for (int i = ch->n0; i < ch->n1; i++) {
        gnode *x = &m->nodes[i];
        if (x->seg >= 0 && x->seg != prev) nblk++;
        prev = x->seg;
        x->rseg = -1;
        if (x->seg < 0 || m->d->recompute != RC_BLOCK) continue;
        if (uni) x->rseg = nblk / (n > 0 ? n : 1);
        else if (n == 0 || nblk < n) x->rseg = nblk;
    }
}

/* Offsets of chunk ch's values, kept state and gradients (graph.h). */
static void plan_storage(cb_model *m, gchunk *ch) {
    size_t slot = 0, blk = 0, blk_max = 0, sel_o = 0, sel_k = 0;
    int cur_seg = -1;
    for (int v = 0; v < m->nacts; v++) ch->val_off[v] = ch->grad_off[v] = SIZE_MAX;
    for (int x = 0; x < ch->nein; x++) { /* received values: in the slot, gradient too */
        int v = m->edges[ch->ein[x]].v;
        size_t nf = cb_graph_value_floats(m, v);
        ch->val_off[v] = slot, slot += nf;
        ch->grad_off[v] = slot, slot += nf;
        ch->grad_in_slot[v] = 1;
    }
    size_t sel_base_o = 0, sel_base_k = 0;
    for (int i = ch->n0; i < ch->n1; i++) {
        gnode *n = &m->nodes[i];
        int o, k;
        recompute_flags(m, ch, i, &o, &k);
        if (n->rseg != cur_seg) blk = 0, cur_seg = n->rseg;
        size_t nf = n->out >= 0 ? cb_graph_value_floats(m, n->out) : 0, kf = keep_floats(m, n);
        n->keep = kf;
        int sel = m->d->recompute == RC_SELECTIVE;
        if (n->out >= 0) {
            ch->val_shared[n->out] = o;
            if (o && sel) ch->val_off[n->out] = sel_base_o, sel_o = nf > sel_o ? nf : sel_o;
            else if (o) ch->val_off[n->out] = blk, blk += nf;
            else ch->val_off[n->out] = slot, slot += nf;
        }
        ch->keep_off[i] = SIZE_MAX;
        if (kf && k && sel) ch->keep_off[i] = sel_base_k, sel_k = kf > sel_k ? kf : sel_k;
        else if (kf && k) ch->keep_off[i] = blk, blk += kf;
        else if (kf) ch->keep_off[i] = slot, slot += kf;
        if (blk > blk_max) blk_max = blk;
    }
    /* shared: block region [0, blk_max), then the selective output and kept regions */
    for (int i = ch->n0; i < ch->n1; i++) {
        gnode *n = &m->nodes[i];
        if (m->d->recompute != RC_SELECTIVE || !n->recompute) continue;
        if (n->out >= 0 && ch->val_shared[n->out]) ch->val_off[n->out] += blk_max;
        if (n->keep) ch->keep_off[i] += blk_max + sel_o;
    }
    ch->slot_floats = slot + 1;
    ch->shared_floats = blk_max + sel_o + sel_k + 1;
}

/* Whether each gradient share overwrites or accumulates, in the order
 * backward runs (graph.h). */
static void plan_backward(cb_model *m, gchunk *ch) {
    unsigned char *init = calloc((size_t)m->nacts + 1, 1);
    if (!init) return;
    for (int x = 0; x < ch->neout; x++) init[m->edges[ch->eout[x]].v] = 1;
    for (int i = ch->n1 - 1; i >= ch->n0; i--) {
        gnode *n = &m->nodes[i];
        n->zero_dy = n->out >= 0 && !init[n->out];
        if (n->out >= 0) init[n->out] = 1;
        n->alias = -1;
        if (n->kind == N_EMBED) continue;
        for (int j = 0; j < n->nin; j++) {
            n->acc[j] = init[n->in[j]];
            init[n->in[j]] = 1;
            int here = !ch->grad_in_slot[n->in[j]], dup = j == 1 && n->in[0] == n->in[1];
            if (n->kind == N_ADD && n->alias < 0 && !n->acc[j] && here && !dup) n->alias = j;
        }
    }
    free(init);
}

/* Backward time of node i in chunk ch: received shares arrive at 0, then
 * node n1-1 at 1, ..., node n0 last. */
#define BTIME(ch, i) ((ch)->n1 - (i))

/* The buffer of the output of the add whose gradient passes to v, -1. */
static int handed_over(const cb_model *m, const gchunk *ch, int v, const int *buf) {
    for (int i = ch->n0; i < ch->n1; i++) {
        const gnode *n = &m->nodes[i];
        if (n->kind == N_ADD && n->alias >= 0 && n->in[n->alias] == v) return buf[n->out];
    }
    return -1;
}

/* The smallest of nb buffers free before time t that holds nf floats, -1. */
static int smallest_free(const int *busy, const size_t *size, int nb, int t, size_t nf) {
    int b = -1;
    for (int k = 0; k < nb; k++)
        if (busy[k] < t && size[k] >= nf && (b < 0 || size[k] < size[b])) b = k;
    return b;
}

/* Gradient buffers of the values written in ch (graph.h): each lives from
 * its first share to its producer's backward; a buffer free before a life
 * starts is reused (the smallest that fits), an add's aliased input takes
 * its output's buffer. */
static int plan_grads(cb_model *m, gchunk *ch, cb_err *e) {
    int nv = m->nacts, nb = 0, *start = malloc(sizeof(int) * (nv + 1)), *buf = malloc(sizeof(int) * (nv + 1));
    size_t *boff = malloc(sizeof(size_t) * (nv + 1)), *bsize = malloc(sizeof(size_t) * (nv + 1));
    int *busy = malloc(sizeof(int) * (nv + 1)), *end = malloc(sizeof(int) * (nv + 1));
    if (!start || !buf || !boff || !bsize || !busy || !end) {
        free(start), free(buf), free(boff), free(bsize), free(busy), free(end);
        return cb_fail(e, CB_ENOMEM, "out of memory planning gradients");
    }
    for (int v = 0; v < nv; v++) start[v] = -1, buf[v] = -1;
    for (int i = ch->n0; i < ch->n1; i++)
        if (m->nodes[i].out >= 0) start[m->nodes[i].out] = end[m->nodes[i].out] = BTIME(ch, i);
    for (int x = 0; x < ch->neout; x++) start[m->edges[ch->eout[x]].v] = 0;
    for (int i = ch->n0; i < ch->n1; i++)
        for (int j = 0; j < m->nodes[i].nin; j++) {
            int v = m->nodes[i].in[j];
            if (start[v] > BTIME(ch, i)) start[v] = BTIME(ch, i);
        }
    size_t total = 0;
    for (int t = 0; t <= ch->n1 - ch->n0; t++) /* lives in order of their start */
        for (int v = 0; v < nv; v++) {
            if (start[v] != t || ch->grad_in_slot[v]) continue;
            size_t nf = cb_graph_value_floats(m, v);
            int b = handed_over(m, ch, v, buf);
            if (b < 0) b = smallest_free(busy, bsize, nb, t, nf);
            if (b < 0) b = nb++, boff[b] = total, bsize[b] = nf, total += nf;
            buf[v] = b;
            busy[b] = end[v];
            ch->grad_off[v] = boff[b];
        }
    ch->grad_floats = total + 1;
    free(start), free(buf), free(boff), free(bsize), free(busy), free(end);
    return CB_OK;
}

static int plan_chunk(cb_model *m, gchunk *ch, int c, cb_err *e) {
    ch->vs = c * m->P + m->me;
    ch->n0 = m->nnodes, ch->n1 = 0;
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].vs == ch->vs) {
            if (i < ch->n0) ch->n0 = i;
            ch->n1 = i + 1;
        }
    size_t nv = (size_t)m->nacts + 1;
    ch->val_off = calloc(nv, sizeof(size_t));
    ch->grad_off = calloc(nv, sizeof(size_t));
    ch->val_shared = calloc(nv, sizeof(int));
    ch->grad_in_slot = calloc(nv, sizeof(int));
    ch->keep_off = calloc((size_t)m->nnodes + 1, sizeof(size_t));
    ch->ein = calloc((size_t)m->nedges + 1, sizeof(int));
    ch->eout = calloc((size_t)m->nedges + 1, sizeof(int));
    ch->slot_of = calloc((size_t)m->M, sizeof(int));
    if (!ch->val_off || !ch->grad_off || !ch->val_shared || !ch->grad_in_slot || !ch->keep_off ||
        !ch->ein || !ch->eout || !ch->slot_of)
        return cb_fail(e, CB_ENOMEM, "out of memory planning the model's activations");
    for (int x = 0; x < m->nedges; x++) {
        if (m->edges[x].to == ch->vs) ch->ein[ch->nein++] = x;
        if (m->edges[x].from == ch->vs) ch->eout[ch->neout++] = x;
    }
    recompute_units(m, ch);
    plan_storage(m, ch);
    plan_backward(m, ch);
    if (plan_grads(m, ch, e)) return e->code;
    int inflight = cb_pp_max_inflight(m->acts_sched, m->nsched, c);
    ch->nslots = inflight > 0 ? inflight : 1;
    ch->send_off = calloc((size_t)m->nedges + 1, sizeof(size_t));
    if (!ch->send_off) return cb_fail(e, CB_ENOMEM, "out of memory planning the pipeline");
    for (int x = 0; x < ch->neout; x++) {
        ch->send_off[ch->eout[x]] = ch->send_floats;
        ch->send_floats += cb_graph_value_floats(m, m->edges[ch->eout[x]].v);
    }
    for (int x = 0; x < ch->nein; x++) {
        ch->send_off[ch->ein[x]] = ch->send_floats;
        ch->send_floats += cb_graph_value_floats(m, m->edges[ch->ein[x]].v);
    }
    return CB_OK;
}

/* Floats of a planned chunk's buffers. */
static size_t chunk_floats(const cb_model *m, const gchunk *ch) {
    return ch->nslots * ch->slot_floats + ch->grad_floats + ch->shared_floats +
           (size_t)m->M * ch->send_floats;
}

static int alloc_chunk(cb_model *m, gchunk *ch, cb_err *e) {
    size_t need = chunk_floats(m, ch);
    ch->slot = calloc((size_t)ch->nslots * ch->slot_floats, sizeof(float));
    ch->grad = calloc(ch->grad_floats, sizeof(float));
    ch->shared = calloc(ch->shared_floats, sizeof(float));
    cb_mem_hugepages(ch->slot, sizeof(float) * ch->nslots * ch->slot_floats);
    cb_mem_hugepages(ch->grad, sizeof(float) * ch->grad_floats);
    cb_mem_hugepages(ch->shared, sizeof(float) * ch->shared_floats);
    ch->free_slot = malloc(sizeof(int) * ch->nslots);
    ch->pend = calloc((size_t)m->M * (ch->nein + ch->neout) + 1, sizeof(cb_comm_req));
    ch->sendbuf = malloc(sizeof(float) * ((size_t)m->M * ch->send_floats + 1));
    if (!ch->slot || !ch->grad || !ch->shared || !ch->free_slot || !ch->pend || !ch->sendbuf)
        return cb_fail(e, CB_ENOMEM, "out of memory for the model's activations: %zu bytes on "
                                     "pipeline rank %d", need * sizeof(float), m->me);
    for (int s = 0; s < ch->nslots; s++) ch->free_slot[s] = ch->nslots - 1 - s;
    ch->nfree = ch->nslots;
    return CB_OK;
}

/* Floats of the engine's own scratch: a gradient share (or a tied
 * tensor's received gradient), attention's backward; a second share for
 * nodes with two inputs that may both accumulate (a product, a
 * concatenation, cross-attention); with the recommendation nodes, their
 * layout scratch (layout/rec.h) and one id field of a micro-batch (ints). None of them grows during a step. */
typedef struct scratch {
    size_t tmp, att, tmp2, rec, fids, mlm, mlm_tg;
} scratch;

static scratch scratch_floats(const cb_model *m) {
    size_t tie = 1, H = 1, N = (size_t)m->Bm * m->T;
    scratch s = {.tmp = 1, .att = 1};
    int two = 0, rec = 0;
    for (int v = 0; v < m->nacts; v++) {
        size_t n = cb_graph_value_floats(m, v);
        if (n > s.tmp) s.tmp = n;
        if ((size_t)m->acts[v]->H > H) H = (size_t)m->acts[v]->H;
    }
    for (int i = 0; i < m->nnodes; i++) {
        int k = m->nodes[i].kind;
        if (k == N_ATTN && m->nodes[i].keep > s.att) /* dL/dS of one copy */
            s.att = m->nodes[i].keep / (m->nodes[i].l->attn_drop > 0 ? 2 : 1);
        two |= k == N_MUL || k == N_CONCAT || (k == N_ATTN && m->nodes[i].nin > 1);
        rec |= k == N_LOOKUP || k == N_CONCAT || k == N_LOGIT;
        /* the MLM head's input moved to parity 0 and its gradient back */
        rec |= k == N_LOSS && m->nodes[i].l2 && !(m->L->caps & CB_LAYOUT_WHOLE);
        if (k == N_LOSS && m->nodes[i].l2 && m->mlm_slots && (m->L->caps & CB_LAYOUT_ROWS)) {
            size_t Nm = (size_t)m->Bm * m->mlm_slots; /* the same for every batch */
            s.mlm = 2 * Nm * (size_t)m->nodes[i].l->emb.C, s.mlm_tg = Nm;
        }
    }
    for (int i = 0; i < m->ntie; i++)
        if (m->pt.t[m->tie_t[i]].numel > tie) tie = m->pt.t[m->tie_t[i]].numel;
    if (tie > s.tmp) s.tmp = tie;
    s.tmp2 = two ? s.tmp : 0;
    s.rec = rec ? cb_rec_scratch_floats((int)N, (int)H) : 0;
    s.fids = m->fields > 1 ? N : 0;
    return s;
}

static size_t scratch_bytes(scratch s) {
    return sizeof(float) * (s.tmp + s.att + s.tmp2 + s.rec + s.mlm) +
           sizeof(int) * (s.fids + 2 * s.mlm_tg);
}

static int plan_scratch(cb_model *m, cb_err *e) {
    scratch s = scratch_floats(m);
    m->tmp = malloc(sizeof(float) * s.tmp);
    m->att_scratch = malloc(sizeof(float) * s.att);
    cb_mem_hugepages(m->tmp, sizeof(float) * s.tmp);
    cb_mem_hugepages(m->att_scratch, sizeof(float) * s.att);
    m->tmp2 = s.tmp2 ? malloc(sizeof(float) * s.tmp2) : NULL;
    m->rec_scratch = s.rec ? malloc(sizeof(float) * s.rec) : NULL;
    m->fids = s.fids ? malloc(sizeof(int) * s.fids) : NULL;
    m->mlm_rows = s.mlm ? malloc(sizeof(float) * s.mlm) : NULL;
    m->mlm_tg = s.mlm_tg ? malloc(sizeof(int) * s.mlm_tg) : NULL;
    m->mlm_src = s.mlm_tg ? malloc(sizeof(int) * s.mlm_tg) : NULL;
    if (!m->tmp || !m->att_scratch || (s.tmp2 && !m->tmp2) || (s.rec && !m->rec_scratch) ||
        (s.fids && !m->fids) || (s.mlm && !m->mlm_rows) ||
        (s.mlm_tg && (!m->mlm_tg || !m->mlm_src)))
        return cb_fail(e, CB_ENOMEM, "out of memory for scratch");
    return CB_OK;
}

/* Every operator of this rank declares its workspace for the shapes it
 * will run (layout.h, cb_layout_use); allocated once after the memory
 * check, so no step allocates. A node's input is in a slot (one per
 * micro-batch in flight) or in a buffer that recompute shares (one), so
 * the chunk's slots bound the inputs awaiting backward. */
static void plan_layout(cb_model *m) {
    static const int op[N_KINDS] = {[N_EMBED] = CB_OP_EMBED, [N_LINEAR] = CB_OP_LINEAR,
                                    [N_NORM] = CB_OP_NORM,   [N_ATTN] = CB_OP_ATTN,
                                    [N_GELU] = -1,           [N_ADD] = -1,
                                    [N_LOSS] = CB_OP_HEAD,   [N_LOOKUP] = -1,
                                    [N_MUL] = -1,            [N_RELU] = -1,
                                    [N_CONCAT] = -1,         [N_LOGIT] = -1,
                                    [N_DROP] = -1};
    m->L->wire_bf16 = m->d->comm_bf16 && m->L->tp > 1;
    for (int i = 0; i < m->nnodes; i++) {
        gnode *n = &m->nodes[i];
        if (n->vs % m->P != m->me || op[n->kind] < 0) continue;
        cb_layer *l = n->l;
        l->lin.parity = l->norm.parity = l->parity;
        cb_layout_use u = {.op = (cb_layout_op)op[n->kind], .B = m->Bm, .T = m->T,
                           .inflight = m->ch[n->vs / m->P].nslots, .lin = &l->lin,
                           .norm = &l->norm, .emb = &l->emb, .bias = n->l2 != NULL};
        cb_layout_plan(m->L, &u);
    }
}

/* ---------------------------------------------------------------- build */

static int defaults(cb_model *m) {
    cb_dist *d = m->d;
    m->v = d->sched == CB_PP_INTERLEAVED ? (d->v ? d->v : 2) : 1;
    m->M = d->M ? d->M : m->P == 1 ? 1 : m->Bl % m->P ? 1 : m->P;
    m->Bm = m->Bl / (m->M > 0 ? m->M : 1);
    return CB_OK;
}

static int plan(cb_model *m, cb_err *e) {
    int n = 2 * m->M * m->v;
    m->acts_sched = malloc(sizeof *m->acts_sched * n);
    if (!m->acts_sched) return cb_fail(e, CB_ENOMEM, "out of memory for the schedule");
    /* one stage runs 1F1B: one micro-batch in flight, gradient accumulation */
    cb_pp_kind k = m->P == 1 && m->v == 1 ? CB_PP_1F1B : m->d->sched;
    m->nsched = cb_pp_schedule(k, m->P, m->v, m->M, m->me, m->acts_sched);
    int rc = make_edges(m, e);
    m->ch = calloc((size_t)m->v, sizeof *m->ch);
    if (!rc && !m->ch) rc = cb_fail(e, CB_ENOMEM, "out of memory for the pipeline");
    for (int c = 0; !rc && c < m->v; c++) rc = plan_chunk(m, &m->ch[c], c, e);
    return rc;
}

/* This rank's bytes once built: parameters and gradients, AdamW's two
 * moments of its range, the activation plan (with the pipeline's message
 * buffers) and the workspace (the layout's and the engine's scratch);
 * against --max-memory. Not counted: the row buffers of the sparse and
 * split embedding paths (--embed-grad, one vocabulary of indices). */
static int check_memory(cb_model *m, cb_err *e) {
    double lim = m->d->max_memory, f = sizeof(float), np = (double)m->pt.nparams;
    int dp = m->d->g.dp > 1, zero = dp && m->d->zero;
    double opt = 2 * f * (zero ? np / m->d->g.dp : np), act = (double)cb_model_activation_bytes(m);
    double ws = (double)cb_layout_workspace_bytes(m->L) + (double)scratch_bytes(scratch_floats(m));
    double need = 2 * f * np + opt + act + ws;
    if (lim <= 0 || need <= lim) return CB_OK;
    return cb_fail(e, CB_ENOMEM,
                   "the model needs %.0f bytes on world rank %d (parameters and gradients %.0f, "
                   "AdamW %.0f, activations %.0f, workspace %.0f), over --max-memory %.0f; spread "
                   "it (--pp, --tp, --zero 1), --recompute block, fewer --micro-batches, or raise "
                   "the limit",
                   need, m->d->g.world_rank, 2 * f * np, opt, act, ws, lim);
}

static void exclude_lookup(void *ctx) { ((cb_model *)ctx)->no_lookup = 1; }

/* The layer whose table is tensor k, if it is an embedding's or a lookup's
 * table read by at least one node (*reads of them: the translation model's
 * one table is read by the source's and the decoder's lookups); NULL
 * otherwise. */
static const cb_layer *table_layer(const cb_model *m, int k, int *reads) {
    for (int i = 0; i < m->nlayers; i++) {
        const cb_layer *l = m->layers[i];
        if ((l->kind != G_EMBED && l->kind != G_LOOKUP) || l->t[0] != k) continue;
        *reads = 0;
        for (int j = 0; j < m->nnodes; j++)
            *reads += (m->nodes[j].kind == N_EMBED || m->nodes[j].kind == N_LOOKUP) &&
                      m->nodes[j].l == l;
        return *reads > 0 ? l : NULL;
    }
    return NULL;
}

/* The sparse and split paths' tables (dp.h): the leading tensors that are
 * lookup tables, whole on this one stage, contiguous from offset 0; only
 * table 0 may be the tied head's (*tied). *reads: the most lookups of one
 * table, each giving a micro-batch's rows to cb_dp_lookup_rows. */
static int lookup_tables(const cb_model *m, int *tied, int *reads) {
    const cb_layer *head = m->nodes[m->loss_node].kind == N_LOSS ? m->nodes[m->loss_node].l : NULL;
    int k = 0, r;
    *tied = 0, *reads = 1;
    if (m->P != 1 || !(m->L->caps & CB_LAYOUT_WHOLE)) return 0;
    for (size_t off = 0; k < m->pt.n && m->pt.t[k].offset == off; off += m->pt.t[k++].numel) {
        const cb_layer *l = table_layer(m, k, &r);
        if (!l || (l == head && k > 0)) break;
        if (l == head) *tied = 1;
        if (r > *reads) *reads = r;
    }
    return k;
}

static int init_dp(cb_model *m, cb_err *e) {
    int tied, reads, ntab = m->ntables = lookup_tables(m, &tied, &reads);
    cb_dp_model src = {.ctx = m, .ntables = ntab, .tied = tied, .split_ok = ntab > 0,
                       .exclude_lookup = exclude_lookup};
    int rc = cb_dp_init_model(&m->dp, &m->d->g.dpg, &src, m->params, m->grads, m->pt.t, m->pt.n,
                              m->pt.nparams, m->d->zero, m->d->embed_grad,
                              m->d->bucket_mb > 0 ? m->d->bucket_mb : BUCKET_MB,
                              (size_t)reads * m->Bl * m->T, e);
    return !rc && m->d->comm_bf16 ? cb_dp_comm_bf16(&m->dp, e) : rc;
}

/* The parameter gradients node n's backward writes (this rank's table
 * indices), each marked dense when every element is written (a linear's,
 * a LayerNorm's, the head's wte: those can be overwritten); the others add
 * rows or a reduced share (or, on the split embedding path, are left to
 * dp.c), which needs a cleared gradient. Returns their count. */
static int node_grads(const gnode *n, int *t, int *dense) {
    int k = 0;
    if (!n->l || n->kind == N_ATTN) return 0;
    for (int j = 0; j < 2; j++)
        if (n->l->t[j] >= 0 && uses_tensor(n, j) && !(n->kind == N_EMBED && j == 1 && n->l->sinusoid))
            t[k] = n->l->t[j], dense[k++] = n->kind == N_LINEAR || n->kind == N_NORM || n->kind == N_LOSS;
    if (n->l2 && n->l2->t[0] >= 0) t[k] = n->l2->t[0], dense[k++] = 0;
    return k;
}

/* Node n's backward of micro-batch mb meets the tensors in seen (1:
 * written before in the step): its dense ones are overwritten when none
 * is written yet (then ow_mb = mb), else it accumulates. */
static void first_write(gnode *n, int mb, unsigned char *seen, unsigned char *cleared) {
    int t[3], dense[3], k = node_grads(n, t, dense), fresh = 0, old = 0;
    for (int j = 0; j < k; j++)
        if (dense[j]) fresh += !seen[t[j]], old += seen[t[j]];
    int ow = fresh > 0 && old == 0;
    if (ow && n->ow_mb < 0) n->ow_mb = mb;
    for (int j = 0; j < k; j++) {
        if (!seen[t[j]] && !(ow && dense[j])) cleared[t[j]] = 1;
        seen[t[j]] = 1;
    }
}

/* The step's first write of each parameter gradient (graph.h), in the
 * order this rank's schedule runs the backwards; the tensors that must be
 * cleared instead, as runs of the gradient block (m->zero_runs). */
static int plan_first_writes(cb_model *m, cb_err *e) {
    int n = m->pt.n;
    unsigned char *seen = calloc((size_t)n + 1, 1), *cleared = calloc((size_t)n + 1, 1);
    m->zero_runs = malloc(sizeof(size_t) * 2 * ((size_t)n + 1));
    int rc = seen && cleared && m->zero_runs ? CB_OK
             : cb_fail(e, CB_ENOMEM, "out of memory planning the gradients' first writes");
    for (int i = 0; i < m->nnodes; i++) m->nodes[i].ow_mb = -1;
    for (int a = 0; !rc && a < m->nsched; a++) {
        const cb_pp_action *x = &m->acts_sched[a];
        const gchunk *ch = &m->ch[x->chunk];
        for (int i = ch->n1 - 1; x->bwd && i >= ch->n0; i--)
            first_write(&m->nodes[i], x->mb, seen, cleared);
    }
    m->nzero = 0;
    for (int t = 0; !rc && t < n; t++) {
        if (seen[t] && !cleared[t]) continue;
        size_t off = m->pt.t[t].offset, len = m->pt.t[t].numel, *r = m->zero_runs + 2 * m->nzero;
        if (m->nzero > 0 && r[-2] + r[-1] == off) r[-1] += len;
        else r[0] = off, r[1] = len, m->nzero++;
    }
    free(seen), free(cleared);
    return rc;
}

static void free_chunk(gchunk *ch);

/* For the startup report: the forward FLOPs the recompute reruns here, and
 * what this rank's plan would hold without recompute (planned again on
 * scratch chunks, then the real chunks' flags and offsets restored). */
static int plan_without_recompute(cb_model *m, cb_err *e) {
    int saved = m->d->recompute, rc = CB_OK;
    for (int c = 0; c < m->v; c++)
        for (int i = m->ch[c].n0; i < m->ch[c].n1; i++) {
            cb_pp_module y;
            node_module(m, i, NULL, &y);
            if (m->nodes[i].recompute) m->rc_flops += y.flops / 3; /* forward: 2 of fwd + bwd's 6 */
        }
    m->act_none_bytes = cb_model_activation_bytes(m);
    if (saved == RC_NONE) return CB_OK;
    size_t n = 0;
    m->d->recompute = RC_NONE;
    for (int c = 0; !rc && c < m->v; c++) {
        gchunk t = {0};
        rc = plan_chunk(m, &t, c, e);
        n += chunk_floats(m, &t);
        free_chunk(&t);
    }
    m->d->recompute = saved;
    for (int c = 0; !rc && c < m->v; c++) {
        gchunk *ch = &m->ch[c];
        recompute_units(m, ch);
        plan_storage(m, ch);
        plan_backward(m, ch);
        rc = plan_grads(m, ch, e);
    }
    m->act_none_bytes = n * sizeof(float);
    return rc;
}

int cb_graph_modules(cb_model *m, cb_pp_module *mod, int cap) {
    defaults(m);
    int *uses = calloc((size_t)m->nlayers + 1, sizeof(int)), *u = calloc((size_t)m->nnodes + 1, sizeof(int));
    cb_pp_module *all = calloc((size_t)m->nnodes + 1, sizeof *all);
    int n = uses && u && all ? modules(m, uses, u, all) : -1;
    if (n > cap) n = -1;
    if (n > 0) memcpy(mod, all, sizeof *mod * n);
    free(uses), free(u), free(all);
    return n;
}

static int clear_err(cb_err *e) {
    e->code = CB_OK;
    e->msg[0] = '\0';
    return CB_OK;
}

/* a scaled embedding's forward reads pos / s (its shard; exec.c) */
static int alloc_scaled_positions(cb_model *m, cb_err *e) {
    for (int i = 0; i < m->nlayers; i++) {
        cb_layer *l = m->layers[i];
        if (!l->emb_scale || l->t[1] < 0) continue;
        l->wpe_scaled = malloc(sizeof(float) * (m->pt.t[l->t[1]].numel + 1));
        if (!l->wpe_scaled) return cb_fail(e, CB_ENOMEM, "out of memory for %s's positions", l->name);
    }
    return CB_OK;
}

int cb_model_build(cb_model *m, uint64_t seed, const cb_adamw_config *opt, cb_err *e) {
    clear_err(e);
    if (!m) {
        cb_fail(e, CB_ENOMEM, "out of memory creating the model");
        return cb_comm_agree_err(cb_comm_world(), e);
    }
    defaults(m);
    m->seed = seed;
    int rc = m->built ? cb_fail(e, CB_EINPUT, "cb_model_build was called twice") : check(m, e);
    if (!rc) rc = partition(m, e);
    if (!rc) rc = make_table(m, e);
    if (!rc) rc = plan(m, e);
    if (!rc) rc = plan_without_recompute(m, e);
    if (!rc) plan_layout(m);
    if (!rc) rc = check_memory(m, e);
    for (int c = 0; !rc && c < m->v; c++) rc = alloc_chunk(m, &m->ch[c], e);
    if (!rc) rc = plan_scratch(m, e);
    if (!rc) rc = cb_layout_workspace_alloc(m->L, e);
    if (!rc) {
        m->params = calloc(m->pt.nparams + 1, sizeof(float));
        m->grads = calloc(m->pt.nparams + 1, sizeof(float));
        cb_mem_hugepages(m->params, sizeof(float) * (m->pt.nparams + 1));
        cb_mem_hugepages(m->grads, sizeof(float) * (m->pt.nparams + 1));
        m->gss = m->d->g.world_size == 1 ? malloc(sizeof(double) * (m->pt.n + 1)) : NULL;
        for (int t = 0; m->gss && t < m->pt.n; t++) m->gss[t] = -1;
        if (!m->params || !m->grads || (m->d->g.world_size == 1 && !m->gss))
            rc = cb_fail(e, CB_ENOMEM, "out of memory for %zu parameters", m->pt.nparams);
    }
    for (int i = 0; !rc && i < m->nlayers; i++) bind(m, m->layers[i]);
    if (!rc) rc = alloc_scaled_positions(m, e);
    if (!rc && m->loss_node >= 0 && m->nodes[m->loss_node].l2) { /* the head's decoder bias */
        cb_embed *h = &m->nodes[m->loss_node].l->emb;
        const cb_linear *b = &m->nodes[m->loss_node].l2->lin;
        h->bias = b->b, h->dbias = b->db;
    }
    if (!rc) mark_final(m);
    if (!rc) fill(m, seed);
    int dp = m->d->g.dp > 1;
    if (!rc && dp) rc = init_dp(m, e);
    if (!rc) rc = plan_first_writes(m, e);
    if (!rc) rc = cb_adamw_init(&m->opt, opt, dp ? m->dp.lo : 0, dp ? m->dp.hi : m->pt.nparams, e);
    m->built = !rc;
    return m->local ? rc : cb_comm_agree_err(cb_comm_world(), e);
}

void cb_model_sizes(const cb_model *m, size_t *params, size_t *adam) {
    *params = m->pt.nparams;
    *adam = 2 * (m->opt.hi - m->opt.lo);
}

size_t cb_model_activation_bytes(const cb_model *m) {
    size_t n = 0;
    for (int c = 0; c < m->v; c++) n += chunk_floats(m, &m->ch[c]);
    return n * sizeof(float);
}

void cb_model_rows(const cb_model *m, int *first, int *count) {
    *first = m->d->g.at.d * m->Bl;
    *count = m->Bl;
}

static void free_chunk(gchunk *ch) {
    free(ch->val_off), free(ch->grad_off), free(ch->val_shared), free(ch->grad_in_slot);
    free(ch->keep_off), free(ch->ein), free(ch->eout), free(ch->slot_of);
    free(ch->slot), free(ch->grad), free(ch->shared), free(ch->free_slot);
    free(ch->pend), free(ch->sendbuf), free(ch->send_off);
}

void cb_model_free(cb_model *m) {
    if (!m) return;
    for (int i = 0; i < m->nlayers; i++) free(m->layers[i]->wpe_scaled), free(m->layers[i]);
    for (int i = 0; i < m->nacts; i++) free(m->acts[i]);
    for (int c = 0; m->ch && c < m->v; c++) free_chunk(&m->ch[c]);
    if (m->built && m->d->g.dp > 1) cb_dp_free(&m->dp);
    if (m->built) cb_adamw_free(&m->opt);
    cb_ptable_free(&m->pt);
    free(m->layers), free(m->acts), free(m->nodes), free(m->edges), free(m->ch);
    free(m->acts_sched), free(m->tmp), free(m->att_scratch);
    free(m->tmp2), free(m->rec_scratch), free(m->fids);
    free(m->mlm_rows), free(m->mlm_tg), free(m->mlm_src);
    free(m->tie_t), free(m->tie_owner_rank), free(m->tie_ranks);
    free(m->part), free(m->part_mod);
    cb_kernels_params_freed(m->params);
    free(m->params), free(m->grads), free(m->gss), free(m->zero_runs);
    free(m);
}

/* The planner's read-only view (src/plan/graph.c): this rank's plan of a
 * declared model, made as cb_model_build makes it (partition, tensor
 * table, activation plan, layout workspace) but nothing allocated for
 * parameters, activations or workspace, and no communication. */
int cb_graph_plan_only(cb_model *m, cb_graph_planned *p, cb_err *e) {
    clear_err(e);
    if (!m) return cb_fail(e, CB_ENOMEM, "out of memory declaring the model");
    defaults(m);
    int rc = check(m, e);
    if (!rc) rc = partition(m, e);
    if (!rc) rc = make_table(m, e);
    if (!rc) rc = plan(m, e);
    if (!rc) rc = plan_first_writes(m, e);
    if (rc) return rc;
    plan_layout(m);
    *p = (cb_graph_planned){.params = (double)m->pt.nparams,
                            .act = (double)cb_model_activation_bytes(m),
                            .ws = (double)cb_layout_workspace_bytes(m->L) +
                                  (double)scratch_bytes(scratch_floats(m))};
    for (int c = 0; c < m->v; c++)
        p->send_floats += (double)m->ch[c].send_floats, p->msgs += m->ch[c].nein + m->ch[c].neout;
    for (int z = 0; z < m->nzero; z++) p->zeroed += (double)m->zero_runs[2 * z + 1];
    return CB_OK;
}
