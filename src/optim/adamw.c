#include "optim/adamw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/mem.h"

float cb_lr_at(const cb_adamw_config *c, int s) {
    if (s < c->warmup) return c->lr * (float)(s + 1) / (float)c->warmup;
    int span = c->steps - c->warmup;
    double p = (double)(s - c->warmup) / (span > 1 ? span : 1);
    if (p > 1.0) p = 1.0;
    return (float)(c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * p)));
}

float cb_clip_scale(float clip, double norm) {
    if (clip <= 0.0f) return 1.0f;
    double s = clip / (norm + 1e-6);
    return s < 1.0 ? (float)s : 1.0f;
}

int cb_adamw_init(cb_adamw *o, const cb_adamw_config *c, size_t lo, size_t hi, cb_err *e) {
    memset(o, 0, sizeof *o);
    o->c = *c;
    o->lo = lo;
    o->hi = hi;
    o->m = calloc(hi - lo + 1, sizeof(float));
    o->v = calloc(hi - lo + 1, sizeof(float));
    cb_mem_hugepages(o->m, sizeof(float) * (hi - lo + 1));
    cb_mem_hugepages(o->v, sizeof(float) * (hi - lo + 1));
    if (!o->m || !o->v) {
        cb_adamw_free(o);
        return cb_fail(e, CB_ENOMEM, "out of memory for AdamW state (%zu parameters)", hi - lo);
    }
    return CB_OK;
}

void cb_adamw_free(cb_adamw *o) {
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

static int decays(const cb_adamw_config *c, const cb_tensor_info *t) {
    return t->decay || (c->decay_embeddings && t->layer == -1);
}

void cb_adamw_step(cb_adamw *o, const cb_kernels *k, float *params, const float *grads, float gs,
                   const cb_tensor_info *tensors, int ntensor, float lr) {
    const cb_adamw_config *c = &o->c;
    o->t++;
    if (ntensor > 0)
        cb_kernels_params_written(params, tensors[ntensor - 1].offset + tensors[ntensor - 1].numel);
    float bc1 = 1.0f - powf(c->beta1, (float)o->t), bc2 = 1.0f - powf(c->beta2, (float)o->t);
    for (int i = 0; i < ntensor; i++) {
        size_t a = tensors[i].offset, b = a + tensors[i].numel;
        if (a < o->lo) a = o->lo;
        if (b > o->hi) b = o->hi;
        if (a >= b) continue;
        float wd = decays(c, &tensors[i]) ? c->weight_decay : 0.0f;
        k->adamw(k, params + a, grads + a, gs, o->m + (a - o->lo), o->v + (a - o->lo), b - a, lr,
                 c->beta1, c->beta2, c->eps, wd, bc1, bc2);
    }
}
