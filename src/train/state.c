/* cubist train's option defaults and the resume metadata of its
 * checkpoints (the .state file's step, AdamW count, data position and RNG,
 * tokens, and the checkpoint id that pairs it with its weights file). */
#include "train/train.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

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
    o->comm_dtype = "fp32";
    o->precision = "fp32";
    o->tp3d_save = "gathered";
    o->save_dtype = "fp32";
    cb_pp_opts_defaults(&o->pipe);
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
