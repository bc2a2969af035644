/* NeuMF (cb_model_declare_ncf) as a training task (train.h,
 * cb_train_task): rows of a pair file with sampled negatives, a function
 * of the step alone; leave-last-out HR@10 and NDCG@10 against the
 * popularity ranking. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "data/ncf.h"
#include "train/train.h"

typedef struct evalset {
    int n, neg;   /* users, negatives per user */
    int *cand;    /* n x (1 + neg) items, the held-out one first */
    int *users;
    float *score; /* n x (1 + neg) */
    double pop_hr, pop_ndcg;
} evalset;

typedef struct ncf_task {
    const cb_train_opts *o;
    const cb_ncf_task_opts *n;
    cb_ncf_config c;
    cb_ncf_data data;
    evalset ev;
    float *out; /* a step's scores */
    FILE *dump; /* --dump-batches, world rank 0 */
    cb_loader ld; /* zeros: the rows follow from the step alone */
} ncf_task;

/* HR@10 and NDCG@10 of candidate 0 among a row's n scores, expected over
 * a uniform order of ties (the popularity baseline ties often: items of
 * equal counts): g candidates score higher, t tie, rank g + j for j
 * uniform in [0, t]. */
static void hit(const float *s, int n, double *hr, double *ndcg) {
    int g = 0, t = 0;
    for (int k = 1; k < n; k++) g += s[k] > s[0], t += s[k] == s[0];
    for (int j = 0; j <= t && g + j < 10; j++) {
        *hr += 1.0 / (t + 1);
        *ndcg += 1.0 / ((t + 1) * log2(2.0 + g + j));
    }
}

static void metrics(const evalset *v, const float *score, double *hr, double *ndcg) {
    int w = 1 + v->neg;
    *hr = *ndcg = 0;
    for (int u = 0; u < v->n; u++) hit(score + (size_t)u * w, w, hr, ndcg);
    *hr /= v->n > 0 ? v->n : 1;
    *ndcg /= v->n > 0 ? v->n : 1;
}

static int eval_init(const cb_ncf_data *d, const cb_ncf_task_opts *o, evalset *v) {
    v->neg = o->eval_neg;
    int w = 1 + v->neg;
    v->users = malloc(sizeof(int) * (d->users + 1));
    if (!v->users) return -1;
    v->n = cb_ncf_eval_users(d, v->neg, o->eval_users, v->users);
    v->cand = malloc(sizeof(int) * ((size_t)v->n * w + 1));
    v->score = malloc(sizeof(float) * ((size_t)v->n * w + 1));
    if (!v->cand || !v->score) return -1;
    for (int u = 0; u < v->n; u++) cb_ncf_candidates(d, v->users[u], v->neg, v->cand + (size_t)u * w);
    for (size_t k = 0; k < (size_t)v->n * w; k++) v->score[k] = (float)d->pop[v->cand[k]];
    metrics(v, v->score, &v->pop_hr, &v->pop_ndcg);
    return 0;
}

/* The model's logit of every candidate, B rows at a time (the last batch
 * padded by repeating its first row). */
static int eval_scores(cb_model *m, const evalset *v, int B, int *ids, float *out, cb_err *e) {
    int first, count, w = 1 + v->neg;
    size_t total = (size_t)v->n * w;
    cb_model_rows(m, &first, &count);
    for (size_t b0 = 0; b0 < total; b0 += B) {
        for (int k = 0; k < count; k++) {
            size_t r = b0 + first + k < total ? b0 + first + k : b0;
            ids[2 * k] = v->users[r / w], ids[2 * k + 1] = v->cand[r];
        }
        int rc = cb_model_scores(m, ids, out, e);
        if (rc) return rc;
        memcpy(v->score + b0, out, sizeof(float) * (total - b0 < (size_t)B ? total - b0 : (size_t)B));
    }
    return CB_OK;
}

static int ncf_check(void *ctx, const cb_layout *L, int rows, cb_err *e) {
    (void)ctx, (void)L, (void)rows, (void)e; /* the engine's build checks the layers */
    return CB_OK;
}

static void ncf_declare(void *ctx, cb_model *m) {
    cb_model_declare_ncf(m, &((ncf_task *)ctx)->c);
}

/* Step s's B x M rows: this rank's contiguous part of them (the engine's
 * rows, cb_model_rows), user and item ids and labels; every row to
 * --dump-batches on world rank 0. */
static int ncf_batch(void *ctx, int s, int M, int r0, int rows, int *ids, int *tg, cb_err *e) {
    ncf_task *t = ctx;
    (void)e;
    int B = t->o->B * M, first = r0 * M, count = rows * M;
    for (int k = 0; k < B; k++) {
        int u, it, y;
        cb_ncf_row(&t->data, (uint64_t)s * B + k, &u, &it, &y);
        if (k >= first && k < first + count) {
            ids[2 * (k - first)] = u, ids[2 * (k - first) + 1] = it, tg[k - first] = y;
        }
        int32_t row[3] = {u, it, y};
        if (t->dump) fwrite(row, sizeof row, 1, t->dump);
    }
    return CB_OK;
}

/* val_hr10, val_ndcg10, pop_hr10, pop_ndcg10 and the users ranked. */
static int ncf_eval(void *ctx, cb_model *m, int r0, int rows, int *ids, int *targets,
                    cb_train_metric *out, int cap, cb_err *e) {
    ncf_task *t = ctx;
    double hr, ndcg;
    (void)r0, (void)rows, (void)targets;
    if (cap < 5) return 0;
    if (eval_scores(m, &t->ev, t->o->B * t->o->accum, ids, t->out, e)) return -1;
    metrics(&t->ev, t->ev.score, &hr, &ndcg);
    out[0] = (cb_train_metric){"val_hr10", hr, 0};
    out[1] = (cb_train_metric){"val_ndcg10", ndcg, 0};
    out[2] = (cb_train_metric){"pop_hr10", t->ev.pop_hr, 0};
    out[3] = (cb_train_metric){"pop_ndcg10", t->ev.pop_ndcg, 0};
    out[4] = (cb_train_metric){"users", t->ev.n, 1};
    return 5;
}

static int ncf_meta(void *ctx, const char **kv, char (*text)[24], int cap) {
    (void)ctx, (void)text;
    if (cap < 2) return 0;
    kv[0] = "format", kv[1] = "pt", kv[2] = "model", kv[3] = "ncf";
    return 2;
}

static void ncf_note(void *ctx, const cb_model *m, char *buf, size_t cap) {
    const ncf_task *t = ctx;
    snprintf(buf, cap, "ncf: %d users, %d items, %zu training pairs, data parallelism %d, "
                       "embedding gradient %s", t->c.users, t->c.items, t->data.ntrain, m->d->g.dp,
             m->d->g.dp > 1 ? cb_dp_embed_name(&m->dp) : "local");
}

static void ncf_close(void *ctx) {
    ncf_task *t = ctx;
    if (!t) return;
    if (t->dump) fclose(t->dump);
    free(t->ev.users), free(t->ev.cand), free(t->ev.score), free(t->out);
    cb_ncf_close(&t->data);
    free(t);
}

/* A row is one (user, item) pair: T = 1; the sizes come from the data. */
static int ncf_prepare(cb_train_opts *o, cb_err *e) {
    (void)e;
    o->T = 1;
    return CB_OK;
}

static int ncf_open(cb_train_task *task, const cb_train_opts *o, cb_err *e) {
    ncf_task *t = calloc(1, sizeof *t);
    if (!t) return cb_fail(e, CB_ENOMEM, "out of memory for the NCF task");
    t->o = o;
    t->n = o->family_opts;
    *task = (cb_train_task){.ctx = t, .ld = &t->ld, .row_ids = 2, .row_targets = 1,
                            .row_tokens = 1, .check = ncf_check, .declare = ncf_declare,
                            .batch = ncf_batch, .eval = ncf_eval, .meta = ncf_meta,
                            .note = ncf_note, .close = ncf_close};
    int rc = cb_ncf_open(o->data, t->n->negatives, o->seed, &t->data, e);
    if (rc) return rc;
    t->c = t->n->c;
    t->c.users = t->data.users, t->c.items = t->data.items;
    task->flops_per_token = cb_ncf_flops_per_row(&t->c);
    t->out = malloc(sizeof(float) * o->B * o->accum);
    if (!t->out || eval_init(&t->data, t->n, &t->ev))
        return cb_fail(e, CB_ENOMEM, "out of memory for the evaluation set");
    const char *dump = t->n->dump_batches;
    if (dump && cb_comm_world()->rank == 0 && !(t->dump = fopen(dump, "wb")))
        return cb_fail(e, CB_EINPUT, "--dump-batches %s cannot be written; check the path", dump);
    return CB_OK;
}

const cb_train_family cb_train_ncf = {"ncf", 1, ncf_prepare, ncf_open};
