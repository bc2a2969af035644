#include "train/train.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

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
    o->exit_signal = "USR1";
    o->stall_timeout = -1;
    o->shuffle = 1;
    o->eval_batches = 10;
    o->tp_mode = "1d";
    o->bucket_mb = 25;
    o->embed_grad = "auto";
    o->tp3d_save = "gathered";
    o->save_dtype = "fp32";
    cb_pp_opts_defaults(&o->pipe);
}

int cb_trainer_init(cb_trainer *t, const cb_train_opts *o, const cb_tokens *data, cb_err *e) {
    return cb_trainer_init_dp(t, o, data, NULL, e);
}

/* Test-only failure drill: rank CUBIST_TEST_EXIT_RANK exits in the middle
 * of step CUBIST_TEST_EXIT_STEP (1-based), as a crashed rank would. */
static void test_exit_env(cb_trainer *t) {
    const char *r = getenv("CUBIST_TEST_EXIT_RANK"), *s = getenv("CUBIST_TEST_EXIT_STEP");
    t->exit_rank = r ? atoi(r) : -1;
    t->exit_step = s ? atoi(s) : 1;
}

/* Rows of the global micro-batch and the data-parallel state. */
static int init_dp(cb_trainer *t, cb_comm *dpc, cb_err *e) {
    int p = dpc ? dpc->size : 1, r = dpc ? dpc->rank : 0;
    t->rows = t->o.B / p;
    t->r0 = r * t->rows;
    test_exit_env(t);
    if (p == 1) return CB_OK;
    int embed, rc = cb_dp_embed_parse(t->o.embed_grad, &embed, e);
    if (rc) return rc;
    t->dp = calloc(1, sizeof *t->dp);
    if (!t->dp) return cb_fail(e, CB_ENOMEM, "out of memory");
    return cb_dp_init(t->dp, dpc, t->model, t->o.zero, embed, t->o.bucket_mb,
                      (size_t)t->o.accum * t->rows * t->o.T, e);
}

int cb_trainer_init_dp(cb_trainer *t, const cb_train_opts *o, const cb_tokens *data, cb_comm *dpc,
                       cb_err *e) {
    return cb_trainer_init_tp(t, o, data, dpc, NULL, NULL, e);
}

int cb_trainer_init_tp(cb_trainer *t, const cb_train_opts *o, const cb_tokens *data, cb_comm *dpc,
                       cb_layout *L, cb_comm *tpc, cb_err *e) {
    memset(t, 0, sizeof *t);
    t->o = *o;
    t->o.opt.steps = o->steps;
    t->tpc = tpc && tpc->size > 1 ? tpc : NULL;
    int p = dpc ? dpc->size : 1;
    if (o->B % p)
        return cb_fail(e, CB_EINPUT,
                       "--batch %d does not split over %d data-parallel ranks; use a multiple of %d",
                       o->B, p, p);
    /* the whole model, one micro-batch in flight: --recompute applies as under --pp */
    gpt_stage_opts st = {0, o->model.n_layer + 2, 1, {0}};
    int rc = gpt_recompute_parse(o->pipe.recompute, o->pipe.recompute_method,
                                 o->pipe.recompute_layers, &st.rc, e);
    if (!rc)
        rc = L ? gpt_create(&o->model, o->B / p, o->T, L, &st, &t->model, e)
               : gpt_create_serial(&o->model, o->B / p, o->T, &st, &t->model, e);
    if (!rc) rc = init_dp(t, dpc, e);
    if (rc) return rc;
    t->inp = malloc(sizeof(int) * 2 * (size_t)t->rows * o->T);
    if (!t->inp) return cb_fail(e, CB_ENOMEM, "out of memory for the batch");
    t->targets = t->inp + (size_t)t->rows * o->T;
    if (o->init) rc = cb_gpt_load(t->model, o->init, e);
    else cb_gpt_init_random(t->model, o->seed);
    size_t lo = t->dp ? t->dp->lo : 0, hi = t->dp ? t->dp->hi : cb_gpt_num_params(t->model);
    if (!rc) rc = cb_adamw_init(&t->opt, &t->o.opt, lo, hi, e);
    if (!rc && data)
        rc = cb_loader_init(&t->loader, data, o->B, o->T, o->shuffle, o->seed, o->data, e);
    return rc;
}

void cb_trainer_free(cb_trainer *t) {
    if (t->dp) cb_dp_free(t->dp);
    free(t->dp);
    cb_gpt_free(t->model);
    cb_adamw_free(&t->opt);
    free(t->inp);
    memset(t, 0, sizeof *t);
}

static double now_ms(void) { return omp_get_wtime() * 1e3; }

/* Micro-batches of one step: forward + backward on this rank's rows; under
 * data parallelism each rank's loss is a mean over its own tokens, so the
 * gradient is scaled by 1/dp too and the ranks' gradients are summed. */
static double accumulate(cb_trainer *t, double *fwd, double *bwd) {
    cb_gpt *m = t->model;
    int p = t->dp ? t->dp->c->size : 1;
    double loss = 0;
    for (int a = 0; a < t->o.accum; a++) {
        cb_loader_next(&t->loader, t->inp, t->targets, t->r0, t->rows);
        double ta = now_ms();
        loss += cb_gpt_forward(m, t->inp, t->targets, t->rows, t->o.T);
        if (t->exit_rank >= 0 && t->step + 1 == t->exit_step && cb_comm_world() &&
            cb_comm_world()->rank == t->exit_rank)
            _exit(3); /* test only: a rank that dies mid-step */
        double tb = now_ms();
        if (t->dp) cb_dp_begin_backward(t->dp, a == t->o.accum - 1);
        cb_gpt_backward(m, p == 1 ? 1.0f / t->o.accum : 1.0f / ((float)t->o.accum * p));
        if (t->dp) cb_dp_end_backward(t->dp);
        *fwd += tb - ta;
        *bwd += now_ms() - tb;
    }
    return loss;
}

void cb_trainer_step(cb_trainer *t, cb_step_stats *st) {
    cb_gpt *m = t->model;
    const cb_kernels *k = m->L->k;
    double t0 = now_ms(), fwd = 0, bwd = 0;
    cb_gpt_zero_grad(m);
    double loss = accumulate(t, &fwd, &bwd);
    double topt = now_ms(), wait = 0;
    if (t->dp) {
        cb_dp_reduce(t->dp);
        wait = t->dp->wait_ms;
        loss = cb_dp_mean(t->dp, loss);
    }
    /* the summed gradient; one writer; ZeRO keeps only shards (refused in run.c) */
    if (t->step == 0 && t->o.dump_grads && (!t->dp || t->dp->c->rank == 0)) {
        cb_err e;
        const float *g = m->grads;
        const char *prefix = "";
        if (gpt_save_blocks(m, 1, &g, &prefix, t->o.dump_grads, NULL, 0, &e))
            fprintf(stderr, "cubist: warning: %s\n", e.msg);
    }
    size_t lo = t->opt.lo, hi = t->opt.hi;
    double ss = t->dp ? cb_dp_grad_sumsq(t->dp) : gpt_grad_sumsq(m);
    if (t->tpc) cb_comm_allreduce_f64(t->tpc, "norm", NULL, &ss, 1, CB_COMM_SUM);
    double norm = sqrt(ss);
    float s = cb_clip_scale(t->o.opt.clip, norm);
    if (s < 1.0f) k->scale(k, m->grads + lo, s, hi - lo);
    float lr = cb_lr_at(&t->o.opt, t->step);
    cb_adamw_step(&t->opt, k, m->params, m->grads, gpt_tensors(m), gpt_ntensors(m), lr);
    if (t->dp) cb_dp_sync_params(t->dp);
    t->step++;
    t->tokens += (uint64_t)t->o.B * t->o.T * t->o.accum;
    double t1 = now_ms();
    *st = (cb_step_stats){.loss = (float)(loss / t->o.accum), .lr = lr, .grad_norm = (float)norm,
                          .step_ms = t1 - t0, .fwd_ms = fwd, .bwd_ms = bwd, .opt_ms = t1 - topt,
                          .comm_wait_ms = wait};
}

float cb_trainer_eval(cb_trainer *t, const cb_tokens *val, int n) {
    cb_loader l;
    if (cb_loader_init(&l, val, t->o.B, t->o.T, 0, 0, "", NULL)) return NAN;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        cb_loader_next(&l, t->inp, t->targets, t->r0, t->rows);
        sum += cb_gpt_forward(t->model, t->inp, t->targets, t->rows, t->o.T);
    }
    if (t->dp) sum = cb_dp_mean(t->dp, sum);
    return (float)(sum / n);
}

/* ------------------------------------------------------------ checkpoints */

static char *state_path(const char *path) {
    size_t n = strlen(path) + 7;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s.state", path);
    return s;
}

/* ZeRO: the AdamW shards gathered to full blocks on data-parallel rank 0,
 * so the file is the same whatever the layout. */
static float *gather_moments(cb_trainer *t) {
    size_t n = cb_gpt_num_params(t->model);
    float *full = NULL;
    if (t->dp->c->rank == 0 && !(full = malloc(sizeof(float) * 2 * n)))
        cb_comm_fatal("out of memory gathering the optimizer state for the checkpoint");
    cb_dp_gather(t->dp, t->opt.m, full);
    cb_dp_gather(t->dp, t->opt.v, full ? full + n : NULL);
    return full;
}

/* Data-parallel rank 0 writes, the weights first and then the state with
 * the same checkpoint id; the caller agrees on the result. */
int cb_trainer_save(cb_trainer *t, const char *path, cb_err *e) {
    float *full = t->dp && t->dp->zero ? gather_moments(t) : NULL;
    if (t->dp && t->dp->c->rank != 0) return CB_OK;
    cb_state_text text;
    const char *meta[2 * CB_STATE_NMETA];
    cb_state_meta(&text, meta, t->step, t->opt.t, &t->loader, t->tokens);
    const float *w = t->model->params;
    const char *none = "";
    int rc = gpt_save_blocks(t->model, 1, &w, &none, path, meta, CB_WEIGHTS_NMETA, e);
    char *sp = state_path(path);
    if (!sp) rc = rc ? rc : cb_fail(e, CB_ENOMEM, "out of memory");
    size_t n = cb_gpt_num_params(t->model);
    const float *blocks[2] = {full ? full : t->opt.m, full ? full + n : t->opt.v};
    const char *prefixes[2] = {"m.", "v."};
    if (!rc) rc = gpt_save_blocks(t->model, 2, blocks, prefixes, sp, meta, CB_STATE_NMETA, e);
    free(sp);
    free(full);
    return rc;
}

/* 64 random bits as 16 hex digits; the clock and pid if getrandom fails. */
static void new_ckpt_id(char *out, size_t cap) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
    }
    snprintf(out, cap, "%016" PRIx64, x);
}

void cb_state_meta(cb_state_text *text, const char *meta[2 * CB_STATE_NMETA], int step,
                   int adam_t, const cb_loader *ld, uint64_t tokens) {
    new_ckpt_id(text->v[0], sizeof text->v[0]);
    const char *tk = ld->tok ? cb_tokenizer_tag_name(ld->tok->tokenizer) : NULL;
    snprintf(text->v[1], sizeof text->v[1], "%s", tk ? tk : "unknown");
    snprintf(text->v[2], sizeof text->v[2], "%d", step);
    snprintf(text->v[3], sizeof text->v[3], "%d", adam_t);
    snprintf(text->v[4], sizeof text->v[4], "%" PRIu64, ld->k);
    snprintf(text->v[5], sizeof text->v[5], "%" PRIu64, ld->rng.s);
    snprintf(text->v[6], sizeof text->v[6], "%" PRIu64, tokens);
    const char *keys[CB_STATE_NMETA] = {"ckpt_id", "tokenizer", "step", "adam_t", "data_k", "data_rng", "tokens"};
    for (int i = 0; i < CB_STATE_NMETA; i++) {
        meta[2 * i] = keys[i];
        meta[2 * i + 1] = text->v[i];
    }
}

int cb_state_read(const cb_st_file *f, const char *path, int *step, int *adam_t, cb_loader *ld,
                  uint64_t *tokens, cb_err *e) {
    uint64_t s = 0, a = 0;
    int rc = cb_meta_u64(f, "step", path, &s, e);
    if (!rc) rc = cb_meta_u64(f, "adam_t", path, &a, e);
    if (!rc) rc = cb_meta_u64(f, "data_k", path, &ld->k, e);
    if (!rc) rc = cb_meta_u64(f, "data_rng", path, &ld->rng.s, e);
    if (!rc) rc = cb_meta_u64(f, "tokens", path, tokens, e);
    *step = (int)s;
    *adam_t = (int)a;
    return rc;
}

int cb_state_check_pair(const char *weights_path, const cb_st_file *state, const char *state_path,
                        cb_err *e) {
    cb_st_file w;
    int rc = cb_st_open(weights_path, &w, e);
    if (rc) return rc;
    const char *a = cb_st_meta(&w, "ckpt_id"), *b = cb_st_meta(state, "ckpt_id");
    if (!a || !b || strcmp(a, b))
        rc = cb_fail(e, CB_EINPUT,
                     "%s (checkpoint id %s) and %s (id %s) are not one checkpoint: a save was "
                     "interrupted between writing the two, or one was copied over; resume from a "
                     "matching pair (or start again with --init %s)",
                     weights_path, a ? a : "missing", state_path, b ? b : "missing", weights_path);
    cb_st_close(&w);
    return rc;
}

int cb_meta_u64(const cb_st_file *f, const char *key, const char *path, uint64_t *out,
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

/* Every rank reads the full block and keeps its range (a ZeRO shard). */
static int load_moment(cb_trainer *t, float *dst, const char *prefix, const cb_st_file *f,
                       const char *path, cb_err *e) {
    size_t n = cb_gpt_num_params(t->model), lo = t->opt.lo, hi = t->opt.hi;
    if (lo == 0 && hi == n) return gpt_load_block(t->model, dst, prefix, f, path, e);
    float *full = malloc(sizeof(float) * n);
    if (!full) return cb_fail(e, CB_ENOMEM, "out of memory reading %s", path);
    int rc = gpt_load_block(t->model, full, prefix, f, path, e);
    if (!rc) memcpy(dst, full + lo, sizeof(float) * (hi - lo));
    free(full);
    return rc;
}

static int load_state(cb_trainer *t, const char *weights_path, const char *path, cb_err *e) {
    cb_st_file f;
    int rc = cb_st_open(path, &f, e);
    if (rc) return rc;
    rc = cb_state_check_pair(weights_path, &f, path, e);
    if (!rc) rc = cb_state_read(&f, path, &t->step, &t->opt.t, &t->loader, &t->tokens, e);
    if (!rc) rc = load_moment(t, t->opt.m, "m.", &f, path, e);
    if (!rc) rc = load_moment(t, t->opt.v, "v.", &f, path, e);
    cb_st_close(&f);
    return rc;
}

int cb_trainer_resume(cb_trainer *t, const char *path, cb_err *e) {
    int rc = cb_gpt_load(t->model, path, e);
    char *sp = state_path(path);
    if (!sp) return rc ? rc : cb_fail(e, CB_ENOMEM, "out of memory");
    if (!rc) rc = load_state(t, path, sp, e);
    free(sp);
    return rc;
}
