/* The built-in GPT behind data parallelism's model interface (dp.h): its
 * lookup rows, the split path's exclusion, its grad hook and norm. The one
 * place that reads the GPT's fields for data parallelism. */
#include <string.h>

#include "model/gpt_internal.h"
#include "train/dp.h"

/* The last micro-batch's lookup: ids and the residual stream's gradient
 * at the embedding's output. */
static size_t gpt_lookup(void *ctx, const int **ids, const float **rows) {
    const cb_gpt *m = ctx;
    *ids = m->slots[0].inp;
    *rows = m->d_res;
    return (size_t)m->curB * m->curT;
}

static void gpt_exclude(void *ctx) { ((cb_gpt *)ctx)->no_lookup_grad = 1; }

static void gpt_detach(void *ctx) {
    cb_gpt *m = ctx;
    cb_gpt_set_grad_hook(m, NULL, NULL);
    m->no_lookup_grad = 0;
}

static double gpt_sumsq(void *ctx) { return gpt_grad_sumsq(ctx); }

static void gpt_hook(void *ctx, int first, int last) { cb_dp_ready(ctx, first, last); }

/* The whole wte first in the block, both the embedding and the head here,
 * wte's rows not sharded (a layout that replicates the embedding). */
static int split_ok(const cb_gpt *m) {
    const cb_tensor_info *w = m->pt.n ? &m->pt.t[0] : NULL;
    return m->has_embed && m->has_head && (m->L->caps & CB_LAYOUT_WHOLE) && w &&
           !strcmp(w->name, "wte.weight") && w->offset == 0;
}

int cb_dp_init(cb_dp *d, cb_comm *c, cb_gpt *m, int zero, int embed, double bucket_mb,
               size_t max_tokens, cb_err *e) {
    cb_dp_model src = {.ctx = m, .split_ok = split_ok(m), .lookup = gpt_lookup,
                       .exclude_lookup = gpt_exclude, .detach = gpt_detach,
                       .grad_sumsq = gpt_sumsq};
    int rc = cb_dp_init_model(d, c, &src, cb_gpt_params(m), cb_gpt_grads(m), gpt_tensors(m),
                              cb_gpt_num_tensors(m), cb_gpt_num_params(m), zero, embed, bucket_mb,
                              max_tokens, e);
    if (!rc) cb_gpt_set_grad_hook(m, gpt_hook, d);
    return rc;
}
