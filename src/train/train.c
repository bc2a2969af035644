#include "train/train.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/gpt_internal.h"

void cb_train_defaults(cb_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->B = 4;
    o->T = 64;
    o->accum = 1;
    o->steps = 100;
    o->opt = (cb_adamw_config){.lr = 3e-4f, .min_lr = 3e-5f, .beta1 = 0.9f, .beta2 = 0.95f,
                               .eps = 1e-8f, .weight_decay = 0.1f, .clip = 1.0f, .warmup = 0};
    o->seed = 1337;
    o->shuffle = 1;
    o->eval_batches = 10;
}

int cb_trainer_init(cb_trainer *t, const cb_train_opts *o, const cb_tokens *data, cb_err *e) {
    memset(t, 0, sizeof *t);
    t->o = *o;
    t->o.opt.steps = o->steps;
    int rc = cb_gpt_create(&o->model, o->B, o->T, &t->model, e);
    if (rc) return rc;
    t->inp = malloc(sizeof(int) * 2 * (size_t)o->B * o->T);
    if (!t->inp) return cb_fail(e, CB_ENOMEM, "out of memory for the batch");
    t->targets = t->inp + (size_t)o->B * o->T;
    if (o->init) rc = cb_gpt_load(t->model, o->init, e);
    else cb_gpt_init_random(t->model, o->seed);
    if (!rc) rc = cb_adamw_init(&t->opt, &t->o.opt, 0, cb_gpt_num_params(t->model), e);
    if (!rc && data)
        rc = cb_loader_init(&t->loader, data, o->B, o->T, o->shuffle, o->seed, o->data, e);
    return rc;
}

void cb_trainer_free(cb_trainer *t) {
    cb_gpt_free(t->model);
    cb_adamw_free(&t->opt);
    free(t->inp);
    memset(t, 0, sizeof *t);
}

static double now_ms(void) { return omp_get_wtime() * 1e3; }

void cb_trainer_step(cb_trainer *t, cb_step_stats *st) {
    cb_gpt *m = t->model;
    const cb_kernels *k = m->L->k;
    double t0 = now_ms(), fwd = 0, bwd = 0, loss = 0;
    cb_gpt_zero_grad(m);
    for (int a = 0; a < t->o.accum; a++) {
        cb_loader_next(&t->loader, t->inp, t->targets, 0, t->o.B);
        double ta = now_ms();
        loss += cb_gpt_forward(m, t->inp, t->targets, t->o.B, t->o.T);
        double tb = now_ms();
        cb_gpt_backward(m, 1.0f / t->o.accum);
        fwd += tb - ta;
        bwd += now_ms() - tb;
    }
    double topt = now_ms();
    if (t->step == 0 && t->o.dump_grads) {
        cb_err e;
        const float *g = m->grads;
        const char *prefix = "";
        if (gpt_save_blocks(m, 1, &g, &prefix, t->o.dump_grads, NULL, 0, &e))
            fprintf(stderr, "cubist: warning: %s\n", e.msg);
    }
    double norm = sqrt(gpt_grad_sumsq(m));
    float s = cb_clip_scale(t->o.opt.clip, norm);
    if (s < 1.0f) k->scale(m->grads, s, m->nparams);
    float lr = cb_lr_at(&t->o.opt, t->step);
    cb_adamw_step(&t->opt, k, m->params, m->grads, m->tensors, m->ntensor, lr);
    t->step++;
    double t1 = now_ms();
    *st = (cb_step_stats){.loss = (float)(loss / t->o.accum), .lr = lr, .grad_norm = (float)norm,
                          .step_ms = t1 - t0, .fwd_ms = fwd, .bwd_ms = bwd, .opt_ms = t1 - topt};
}

float cb_trainer_eval(cb_trainer *t, const cb_tokens *val, int n) {
    cb_loader l;
    if (cb_loader_init(&l, val, t->o.B, t->o.T, 0, 0, "", NULL)) return NAN;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        cb_loader_next(&l, t->inp, t->targets, 0, t->o.B);
        sum += cb_gpt_forward(t->model, t->inp, t->targets, t->o.B, t->o.T);
    }
    return (float)(sum / n);
}

/* ------------------------------------------------------------ checkpoints */

static char *state_path(const char *path) {
    size_t n = strlen(path) + 7;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s.state", path);
    return s;
}

int cb_trainer_save(cb_trainer *t, const char *path, cb_err *e) {
    int rc = cb_gpt_save(t->model, path, e);
    char *sp = state_path(path);
    if (!sp) return rc ? rc : cb_fail(e, CB_ENOMEM, "out of memory");
    char step[24], opt_t[24], k[24], rng[24];
    snprintf(step, sizeof step, "%d", t->step);
    snprintf(opt_t, sizeof opt_t, "%d", t->opt.t);
    snprintf(k, sizeof k, "%" PRIu64, t->loader.k);
    snprintf(rng, sizeof rng, "%" PRIu64, t->loader.rng.s);
    const char *meta[] = {"step", step, "adam_t", opt_t, "data_k", k, "data_rng", rng};
    const float *blocks[2] = {t->opt.m, t->opt.v};
    const char *prefixes[2] = {"m.", "v."};
    if (!rc) rc = gpt_save_blocks(t->model, 2, blocks, prefixes, sp, meta, 4, e);
    free(sp);
    return rc;
}

static int meta_u64(const cb_st_file *f, const char *key, const char *path, uint64_t *out,
                    cb_err *e) {
    const char *v = cb_st_meta(f, key);
    char *end = NULL;
    if (v) *out = strtoull(v, &end, 10);
    if (!v || *end)
        return cb_fail(e, CB_EINPUT,
                       "%s: metadata %s missing or not a number; is it a cubist optimizer state "
                       "file?",
                       path, key);
    return CB_OK;
}

static int load_state(cb_trainer *t, const char *path, cb_err *e) {
    cb_st_file f;
    int rc = cb_st_open(path, &f, e);
    if (rc) return rc;
    uint64_t step = 0, opt_t = 0;
    rc = meta_u64(&f, "step", path, &step, e);
    if (!rc) rc = meta_u64(&f, "adam_t", path, &opt_t, e);
    if (!rc) rc = meta_u64(&f, "data_k", path, &t->loader.k, e);
    if (!rc) rc = meta_u64(&f, "data_rng", path, &t->loader.rng.s, e);
    if (!rc) rc = gpt_load_block(t->model, t->opt.m, "m.", &f, path, e);
    if (!rc) rc = gpt_load_block(t->model, t->opt.v, "v.", &f, path, e);
    t->step = (int)step;
    t->opt.t = (int)opt_t;
    cb_st_close(&f);
    return rc;
}

int cb_trainer_resume(cb_trainer *t, const char *path, cb_err *e) {
    int rc = cb_gpt_load(t->model, path, e);
    char *sp = state_path(path);
    if (!sp) return rc ? rc : cb_fail(e, CB_ENOMEM, "out of memory");
    if (!rc) rc = load_state(t, sp, e);
    free(sp);
    return rc;
}
