/* Partition profiling: the time of each module of a declared model, for
 * --partition auto. World rank 0 builds a copy of the declaration alone
 * (one stage, the serial layout, one micro-batch of the run's Bm x T rows),
 * runs one warm-up and two timed forward + backward passes with every node
 * timed, keeps each node's faster pass, sums the nodes into modules and
 * broadcasts the times, so every rank computes the same partition. The
 * copy holds the whole model on rank 0 while it runs (one micro-batch of
 * activations, the parameters, gradients and AdamW moments). */
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

/* The declaration of m (layers, values, nodes) on d, not built. */
static cb_model *copy_declaration(const cb_model *m, cb_dist *d) {
    cb_model *c = cb_model_new(d, m->Bm, m->T);
    if (!c) return NULL;
    c->layers = calloc((size_t)m->nlayers + 1, sizeof *c->layers);
    c->acts = calloc((size_t)m->nacts + 1, sizeof *c->acts);
    c->nodes = calloc((size_t)m->nnodes + 1, sizeof *c->nodes);
    int ok = c->layers && c->acts && c->nodes;
    for (int i = 0; ok && i < m->nlayers; i++, c->nlayers++) {
        if (!(c->layers[i] = malloc(sizeof **c->layers))) ok = 0;
        else *c->layers[i] = *m->layers[i], c->layers[i]->m = c;
        if (ok) c->layers[i]->t[0] = c->layers[i]->t[1] = -1;
    }
    for (int i = 0; ok && i < m->nacts; i++, c->nacts++) {
        if (!(c->acts[i] = malloc(sizeof **c->acts))) ok = 0;
        else *c->acts[i] = *m->acts[i], c->acts[i]->m = c;
    }
    if (ok) memcpy(c->nodes, m->nodes, sizeof *c->nodes * m->nnodes);
    for (int i = 0; ok && i < m->nnodes; i++)
        if (m->nodes[i].l) c->nodes[i].l = c->layers[m->nodes[i].l->idx];
    c->clayers = c->nlayers, c->cacts = c->nacts, c->nnodes = c->cnodes = ok ? m->nnodes : 0;
    c->loss_node = m->loss_node;
    c->local = 1;
    if (!ok) {
        cb_model_free(c);
        return NULL;
    }
    return c;
}

/* ms[i]: node i's forward + backward, the faster of two timed passes. */
static int time_nodes(const cb_model *m, double *ms, cb_err *e) {
    cb_dist *d = NULL;
    cb_model *c = NULL;
    cb_adamw_config none = {0};
    size_t N = (size_t)m->Bm * m->T;
    int *ids = calloc(2 * N + 1, sizeof(int));
    double *t = calloc((size_t)m->nnodes + 1, sizeof *t);
    int rc = ids && t ? cb_dist_data_parallel(&d, 1, 0, CB_DP_EMBED_AUTO, 0, e)
                      : cb_fail(e, CB_ENOMEM, "out of memory profiling the partition");
    if (!rc && !(c = copy_declaration(m, d)))
        rc = cb_fail(e, CB_ENOMEM, "out of memory profiling the partition");
    if (!rc) rc = cb_model_build(c, 1, &none, e);
    for (size_t i = 0; i < N && ids; i++) ids[i] = (int)(i * 7 % 97), ids[N + i] = (int)(i * 13 % 89);
    for (int pass = 0; !rc && pass < 3; pass++) { /* pass 0 warms up */
        memset(t, 0, sizeof *t * m->nnodes);
        c->node_ms = t, c->ids = ids, c->targets = ids + N;
        cb_graph_forward(c, 0, 0, 1);
        cb_graph_backward(c, 0, 0);
        for (int i = 0; pass && i < m->nnodes; i++)
            if (pass == 1 || t[i] < ms[i]) ms[i] = t[i];
    }
    cb_model_free(c);
    if (d) cb_dist_free(d);
    free(ids), free(t);
    return rc;
}

int cb_graph_profile(cb_model *m, const int *u, int n, cb_pp_module *mod, cb_err *e) {
    double *ms = calloc((size_t)m->nnodes + 1, sizeof *ms);
    int rc = ms ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory profiling the partition");
    if (!rc && m->d->g.world_rank == 0) rc = time_nodes(m, ms, e);
    if (!rc) e->code = CB_OK;
    rc = cb_comm_agree_err(cb_comm_world(), e);
    if (!rc) cb_comm_bcast_bytes(cb_comm_world(), "pp.plan", ms, sizeof *ms * m->nnodes, 0);
    for (int k = 0; !rc && k < n; k++) {
        mod[k].time_ms = 0;
        for (int i = u[k]; i < u[k + 1]; i++) mod[k].time_ms += ms[i];
    }
    free(ms);
    return rc;
}
