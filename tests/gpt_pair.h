/* The GPT graph (cb_model_declare_gpt) built twice, on a tensor layout and
 * serially on each rank, driven without the optimizer: each step runs
 * forward and backward of every micro-batch (cb_graph_grad_step) and the
 * test updates the parameters itself (plain SGD on the local shards), so
 * gradients and parameters can be compared tensor by tensor. Included by
 * tests/test_layout_2d.c and test_layout_3d.c. */
#ifndef GPT_PAIR_H
#define GPT_PAIR_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

static const cb_adamw_config PAIR_OPT = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                                         .eps = 1e-8f, .steps = 1};

/* GPT c on d for steps of M micro-batches of B sequences, weights from
 * seed (the same values under every layout); NULL with e on failure. */
static cb_model *pair_build(cb_dist *d, const cb_gpt_config *c, int B, int M, uint64_t seed,
                            cb_err *e) {
    d->M = M;
    cb_model *m = cb_model_new(d, M * B, c->seq_len);
    if (m) cb_model_declare_gpt(m, c);
    if (!cb_model_build(m, seed, &PAIR_OPT, e)) return m;
    cb_model_free(m);
    return NULL;
}

/* One step's gradients from zero; the step's mean loss. */
static float pair_grads(cb_model *m, const int *ids, const int *targets) {
    memset(m->grads, 0, sizeof(float) * m->pt.nparams);
    return cb_graph_grad_step(m, ids, targets);
}

static void pair_sgd(cb_model *m, float lr) {
    for (size_t i = 0; i < m->pt.nparams; i++) m->params[i] -= lr * m->grads[i];
}

/* Worst relative error (max |diff| / max |ref| per tensor) of a
 * parameter-shaped block of m, each tensor gathered to tensor rank 0,
 * against the same block of the serial s; on every rank, *worst the
 * tensor's index. */
static double pair_diff(cb_model *s, cb_model *m, const float *sb, const float *mb, int *worst) {
    double w = 0.0;
    for (int i = 0; i < m->pt.n; i++) {
        const cb_tensor_info *t = &m->pt.t[i];
        const cb_tensor_split *sp = &m->pt.split[i];
        int two = t->ndim == 2;
        size_t n = cb_ptable_full_numel(&m->pt, i);
        float *full = calloc(n ? n : 1, sizeof(float));
        cb_layout_gather(m->L, sp->kind, two ? t->shape[0] : 1, two ? t->shape[1] : t->shape[0],
                         sp->parts, sp->parity, mb + t->offset, full);
        const float *ref = sb + s->pt.t[i].offset;
        double d = 0.0, mx = 0.0;
        for (size_t k = 0; k < n; k++) {
            d = fmax(d, fabs((double)full[k] - ref[k]));
            mx = fmax(mx, fabs(ref[k]));
        }
        if (m->L->tp_rank == 0 && d / fmax(mx, 1e-30) > w) w = d / fmax(mx, 1e-30), *worst = i;
        free(full);
    }
    double in[2] = {w, m->L->tp_rank == 0 ? *worst : 0}, out[2];
    cb_comm_allreduce_f64(&m->d->g.tpg, "test", in, out, 2, CB_COMM_MAX);
    *worst = (int)out[1];
    return out[0];
}

#endif
