/* cubist train's GPT as a training task (train.h, cb_train_task): the
 * declared GPT graph, batches from a token stream's loader, the mean
 * validation loss. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/check.h"
#include "train/train.h"

static const char *const FIELD_FLAGS[5] = {"--layers", "--d-model", "--heads", "--seq-len",
                                           "--vocab"};

/* A flag given by the user (non-zero) must agree with the checkpoint. */
static int merge_field(int *dst, int file_val, const char *flag, const char *path, cb_err *e) {
    if (*dst && *dst != file_val)
        return cb_fail(e, CB_EINPUT, "%s %d differs from %s, which has %d; drop the flag", flag,
                       *dst, path, file_val);
    *dst = file_val;
    return CB_OK;
}

/* Fills the model config from --init/--resume or defaults; the training
 * sequence length T must fit the model's context. */
static int resolve_config(cb_train_opts *o, cb_err *e) {
    const char *ck = o->resume ? o->resume : o->init;
    cb_gpt_config *c = &o->model;
    if (ck) {
        cb_gpt_config f = {.n_head = c->n_head};
        int rc = cb_gpt_config_from_file(ck, &f, e);
        int *dst[5] = {&c->n_layer, &c->d_model, &c->n_head, &c->seq_len, &c->vocab};
        int src[5] = {f.n_layer, f.d_model, f.n_head, f.seq_len, f.vocab};
        for (int i = 0; !rc && i < 5; i++) {
            if (i == 3) continue;
            rc = merge_field(dst[i], src[i], FIELD_FLAGS[i], ck, e);
        }
        if (rc) return rc;
        if (c->seq_len > f.seq_len)
            return cb_fail(e, CB_EINPUT,
                           "--seq-len %d is over the context of %s (%d); use --seq-len %d or less",
                           c->seq_len, ck, f.seq_len, f.seq_len);
        o->T = c->seq_len ? c->seq_len : f.seq_len;
        c->seq_len = f.seq_len;
        return CB_OK;
    }
    if (!c->n_layer) c->n_layer = 4;
    if (!c->d_model) c->d_model = 128;
    if (!c->n_head) c->n_head = 4;
    if (!c->seq_len) c->seq_len = 64;
    if (!c->vocab) c->vocab = 256;
    o->T = c->seq_len;
    return cb_gpt_config_check(c, e);
}

typedef struct gpt_task {
    const cb_train_opts *o;
    cb_tokens data, val;
    cb_loader ld;
} gpt_task;

static int gpt_check(void *ctx, const cb_layout *L, int rows, cb_err *e) {
    const gpt_task *g = ctx;
    const cb_gpt_config *c = &g->o->model;
    return L->ops->check(L, rows, g->o->T, c->d_model, c->n_head, c->vocab, e);
}

static void gpt_declare(void *ctx, cb_model *m) {
    gpt_task *g = ctx;
    cb_model_declare_gpt(m, &g->o->model);
}

/* The loader's next M micro-batches: step is implied by its position. */
static int gpt_batch(void *ctx, int step, int M, int r0, int rows, int *ids, int *targets,
                     cb_err *e) {
    gpt_task *g = ctx;
    size_t n = (size_t)rows * g->o->T;
    (void)step, (void)e;
    for (int a = 0; a < M; a++) cb_loader_next(&g->ld, ids + a * n, targets + a * n, r0, rows);
    return CB_OK;
}

/* val_loss: the mean loss of --eval-batches sequential batches of
 * --val-data, M at a time. */
static int gpt_eval(void *ctx, cb_model *m, int r0, int rows, int *ids, int *targets,
                    cb_train_metric *out, int cap, cb_err *e) {
    gpt_task *g = ctx;
    const cb_train_opts *o = g->o;
    int n = o->eval_batches;
    (void)e;
    if (!o->val_data || cap < 1) return 0;
    cb_loader l;
    double sum = 0;
    if (cb_loader_init(&l, &g->val, o->B, o->T, 0, 0, "", NULL)) sum = NAN;
    size_t sz = (size_t)rows * o->T;
    for (int i = 0; i < n && !isnan(sum); i += o->accum) {
        int k = n - i < o->accum ? n - i : o->accum;
        for (int a = 0; a < k; a++) cb_loader_next(&l, ids + a * sz, targets + a * sz, r0, rows);
        sum += (double)cb_graph_eval(m, ids, targets, k) * k;
    }
    out[0] = (cb_train_metric){"val_loss", (float)(sum / n), 0};
    return 1;
}

/* n_layer, d_model, n_head, seq_len, vocab and format "pt". */
static int gpt_meta(void *ctx, const char **kv, char (*text)[24], int cap) {
    const cb_gpt_config *c = &((gpt_task *)ctx)->o->model;
    int v[5] = {c->n_layer, c->d_model, c->n_head, c->seq_len, c->vocab};
    if (cap < 6) return 0;
    for (int i = 0; i < 5; i++) {
        snprintf(text[i], sizeof text[i], "%d", v[i]);
        kv[2 * i] = cb_gpt_config_keys[i];
        kv[2 * i + 1] = text[i];
    }
    kv[10] = "format", kv[11] = "pt";
    return 6;
}

static void gpt_close(void *ctx) {
    gpt_task *g = ctx;
    if (!g) return;
    cb_tokens_close(&g->data); /* safe when nothing was opened */
    cb_tokens_close(&g->val);
    free(g);
}

int cb_train_task_gpt(cb_train_task *t, const cb_train_opts *o, cb_err *e) {
    gpt_task *g = calloc(1, sizeof *g);
    if (!g) return cb_fail(e, CB_ENOMEM, "out of memory for the GPT task");
    g->o = o;
    *t = (cb_train_task){.ctx = g, .ld = &g->ld, .row_ids = o->T, .row_targets = o->T,
                         .row_tokens = o->T,
                         .flops_per_token = cb_gpt_flops_per_token(&o->model, o->T),
                         .modules = o->model.n_layer + 2, .modules_what = "--layers + 2",
                         .block_units = 1, .profile = 1, .check = gpt_check,
                         .declare = gpt_declare, .batch = gpt_batch, .eval = gpt_eval,
                         .meta = gpt_meta, .close = gpt_close};
    int rc = CB_OK;
    if (o->data) rc = cb_tokens_open(o->data, o->model.vocab, &g->data, e);
    if (!rc && o->val_data) rc = cb_tokens_open(o->val_data, o->model.vocab, &g->val, e);
    if (!rc && o->val_data) rc = cb_train_check_val(o, &g->val, e);
    if (!rc && o->data)
        rc = cb_loader_init(&g->ld, &g->data, o->B, o->T, o->shuffle, o->seed, o->data, e);
    return rc;
}

const cb_train_family cb_train_gpt = {"gpt", 0, resolve_config, cb_train_task_gpt};
