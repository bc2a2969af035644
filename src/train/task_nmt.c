/* The translation encoder-decoder (cb_model_declare_nmt) as a training
 * task (train.h, cb_train_task): each step is one batch of
 * cb_bitext_batch's length-bucketed batches (the order of epoch e drawn
 * from the seed and e), so a batch is a function of the step and a resumed
 * run sees the same batches. A batch's pairs fill the step's first rows;
 * the rows it leaves are all padding (lengths 0, every target ignored). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "data/bitext.h"
#include "train/train.h"

typedef struct nmt_task {
    const cb_train_opts *to;
    const cb_nmt_task_opts *n;
    cb_bitext tr, va;
    cb_bitext_batches bt;
    long epoch;           /* of bt; -1 none */
    int T, batch;         /* positions a side; rows a step over every rank */
    int *src, *tgt;       /* this rank's rows' lengths, sets 0 and 1 */
    int *row;             /* one row: T source, T decoder input, T targets; then the
                             row as the step takes it: 2T ids, T targets */
    FILE *dump;           /* --dump-batches, world rank 0 */
    cb_loader ld;         /* zeros: the batches follow from the step alone */
} nmt_task;

/* pair p of b as row j of the output (p NULL: a padding row) */
static void put_row(nmt_task *r, const cb_bitext *b, const size_t *p, int *ids, int *tg, int *sl,
                    int *tl) {
    int T = r->T, *s = r->row, *d = s + T, *t = d + T;
    if (p) cb_bitext_fill(b, p, 1, T, T, s, d, t);
    for (int i = 0; !p && i < 3 * T; i++) s[i] = b->base;
    for (int i = 0; i < T; i++) ids[2 * i] = s[i], ids[2 * i + 1] = d[i], tg[i] = t[i];
    *sl = p ? b->slen[*p] + 1 : 0, *tl = p ? b->tlen[*p] + 1 : 0;
}

/* epoch e's batches (its order from the seed and e) into r->bt */
static int epoch_batches(nmt_task *r, long e, cb_err *err) {
    if (e == r->epoch) return CB_OK;
    cb_bitext_batches_free(&r->bt);
    size_t tok = r->n->max_tokens > 0 ? (size_t)r->n->max_tokens : (size_t)r->batch * r->T;
    int rc = cb_bitext_batch(&r->tr, tok, r->batch, r->to->seed + 0x9e37ull * (uint64_t)e, &r->bt, err);
    r->epoch = rc ? -1 : e;
    return rc;
}

static int nmt_batch(void *ctx, int s, int M, int r0, int rows, int *out, int *tgs, cb_err *err) {
    nmt_task *r = ctx;
    int T = r->T, first = r0 * M, count = rows * M;
    long e = r->bt.nb ? s / (long)r->bt.nb : 0;
    int rc = epoch_batches(r, e, err); /* open made epoch 0: later epochs differ only by
                                          seed, so only memory can fail here */
    if (rc) return rc;
    size_t b = (size_t)s % r->bt.nb, n = r->bt.start[b + 1] - r->bt.start[b];
    int *ids = r->row + 3 * T, *tg = ids + 2 * T, sl, tl;
    for (int k = 0; k < r->batch; k++) {
        int mine = k >= first && k < first + count, j = k - first;
        if (!mine && !r->dump) continue;
        put_row(r, &r->tr, (size_t)k < n ? r->bt.order + r->bt.start[b] + k : NULL, ids, tg, &sl, &tl);
        if (mine) {
            memcpy(out + (size_t)j * 2 * T, ids, sizeof(int) * 2 * T);
            memcpy(tgs + (size_t)j * T, tg, sizeof(int) * T);
            r->src[j] = sl, r->tgt[j] = tl;
        }
        if (!r->dump) continue;
        fwrite(r->row, sizeof(int), 3 * (size_t)T, r->dump);
        fwrite(&sl, sizeof(int), 1, r->dump), fwrite(&tl, sizeof(int), 1, r->dump);
    }
    if (r->dump) fflush(r->dump);
    return CB_OK;
}

static int nmt_check(void *ctx, const cb_layout *L, int rows, cb_err *e) {
    (void)ctx, (void)L, (void)rows, (void)e; /* the engine's build checks the layers */
    return CB_OK;
}

static void nmt_declare(void *ctx, cb_model *m) {
    nmt_task *r = ctx;
    cb_model_declare_nmt(m, &r->n->c);
    cb_model_set_lengths_set(m, 0, r->src);
    cb_model_set_lengths_set(m, 1, r->tgt);
}

/* val_loss: the mean of the batch losses over the held-out pairs in file
 * order, the step's rows at a time (the last batch padded), --eval-batches
 * batches at most. */
static int nmt_eval(void *ctx, cb_model *m, int r0, int rows, int *ids, int *targets,
                    cb_train_metric *out, int cap, cb_err *e) {
    nmt_task *r = ctx;
    (void)e;
    if (!r->to->val_data || cap < 1) return 0;
    int T = r->T, M = r->to->accum, first = r0 * M, count = rows * M, nb = 0;
    double sum = 0;
    for (size_t p0 = 0; p0 < r->va.n && nb < r->to->eval_batches;
         p0 += (size_t)r->batch, nb++) {
        for (int j = 0; j < count; j++) {
            size_t p = p0 + (size_t)(first + j);
            put_row(r, &r->va, p < r->va.n ? &p : NULL, ids + (size_t)j * 2 * T,
                    targets + (size_t)j * T, r->src + j, r->tgt + j);
        }
        sum += (double)cb_graph_eval(m, ids, targets, M);
    }
    out[0] = (cb_train_metric){"val_loss", nb ? sum / nb : 0, 0};
    return 1;
}

static int nmt_meta(void *ctx, const char **kv, char (*text)[24], int cap) {
    nmt_task *r = ctx;
    const cb_nmt_config *c = &r->n->c;
    if (cap < 5) return 0;
    snprintf(text[0], 24, "%d", c->enc_layers);
    snprintf(text[1], 24, "%d", c->dec_layers);
    snprintf(text[2], 24, "%d", c->pre_ln);
    snprintf(text[3], 24, "%d", c->emb_scale);
    kv[0] = "model", kv[1] = "nmt", kv[2] = "enc_layers", kv[3] = text[0];
    kv[4] = "dec_layers", kv[5] = text[1], kv[6] = "pre_ln", kv[7] = text[2];
    kv[8] = "emb_scale", kv[9] = text[3];
    return 5;
}

/* the startup line: the data, and the embedding-gradient path data
 * parallelism took for the shared table */
static void nmt_note(void *ctx, const cb_model *m, char *buf, size_t cap) {
    const nmt_task *r = ctx;
    snprintf(buf, cap, "nmt: %zu training pairs, vocabulary %d, %d positions a side, data "
                       "parallelism %d, embedding gradient %s", r->tr.n, r->n->c.vocab, r->T,
             m->d->g.dp, m->d->g.dp > 1 ? cb_dp_embed_name(&m->dp) : "local");
}

static void nmt_close(void *ctx) {
    nmt_task *r = ctx;
    if (!r) return;
    if (r->dump) fclose(r->dump);
    cb_bitext_batches_free(&r->bt);
    cb_bitext_close(&r->tr);
    cb_bitext_close(&r->va);
    free(r->src), free(r->tgt), free(r->row);
    free(r);
}

/* the vocabulary, padding id and T from the pair files, and the flags' ranges */
static int nmt_prepare(cb_train_opts *to, cb_err *e) {
    cb_nmt_task_opts *o = (cb_nmt_task_opts *)to->family_opts;
    cb_bitext tr = {0}, va = {0};
    int rc = cb_bitext_open(to->data, &tr, e);
    if (!rc && to->val_data) rc = cb_bitext_open(to->val_data, &va, e);
    if (!rc && to->val_data && va.base != tr.base)
        rc = cb_fail(e, CB_EINPUT, "%s and %s have different tokenizers; prepare both alike",
                     to->data, to->val_data);
    int need = tr.max_len > va.max_len ? tr.max_len : va.max_len;
    o->c.vocab = tr.base + CB_BITEXT_SPECIALS, o->c.pad = tr.base;
    cb_bitext_close(&tr), cb_bitext_close(&va);
    if (rc) return rc;
    if (o->seq_len == 0) o->seq_len = need;
    if (o->seq_len < need)
        return cb_fail(e, CB_EINPUT, "--seq-len %d: the pairs take up to %d tokens a side; pass "
                                     "--seq-len >= %d (or prepare with a smaller --context)",
                       o->seq_len, need, need);
    const cb_nmt_config *c = &o->c;
    if (c->enc_layers < 1 || c->dec_layers < 1 || c->d_model < 1 || c->n_head < 1 ||
        c->d_ff < 1 || to->steps < 0 || o->max_tokens < 0 ||
        !(c->smoothing >= 0 && c->smoothing < 1) || !(c->dropout >= 0 && c->dropout < 1))
        return cb_fail(e, CB_EINPUT, "--layers, --dec-layers, --d-model, --heads, --ffn >= 1, "
                                     "--steps, --max-tokens >= 0, --smoothing and --dropout in "
                                     "[0, 1); fix the flag");
    if (cb_heads_check(c->n_head, c->d_model, e)) return CB_EINPUT;
    to->T = o->seq_len;
    return CB_OK;
}

static int nmt_open(cb_train_task *task, const cb_train_opts *to, cb_err *e) {
    nmt_task *r = calloc(1, sizeof *r);
    if (!r) return cb_fail(e, CB_ENOMEM, "out of memory for the translation task");
    const cb_nmt_task_opts *o = to->family_opts;
    r->to = to, r->n = o, r->epoch = -1, r->T = o->seq_len, r->batch = to->B * to->accum;
    int T = r->T;
    /* pipeline modules: the source's lookup, each encoder block, the run
     * between the stacks (the encoder's final LN, the decoder's lookup),
     * each decoder block, the head; costed by FLOPs or timed as GPT's */
    *task = (cb_train_task){.ctx = r, .ld = &r->ld, .row_ids = 2 * T, .row_targets = T,
                            .row_tokens = T, .block_units = 1, .profile = 1,
                            .modules = o->c.enc_layers + o->c.dec_layers + 3,
                            .modules_what = "--layers + --dec-layers + 3",
                            .check = nmt_check, .declare = nmt_declare,
                            .batch = nmt_batch, .eval = nmt_eval, .meta = nmt_meta,
                            .note = nmt_note, .close = nmt_close};
    int rc = cb_bitext_open(to->data, &r->tr, e);
    if (!rc && to->val_data) rc = cb_bitext_open(to->val_data, &r->va, e);
    if (!rc) rc = epoch_batches(r, 0, e);
    if (rc) return rc;
    r->src = calloc((size_t)r->batch, sizeof(int));
    r->tgt = calloc((size_t)r->batch, sizeof(int));
    r->row = malloc(sizeof(int) * 6 * (size_t)T);
    if (!r->src || !r->tgt || !r->row) return cb_fail(e, CB_ENOMEM, "out of memory for batches");
    if (o->dump_batches && cb_comm_world()->rank == 0 && !(r->dump = fopen(o->dump_batches, "wb")))
        return cb_fail(e, CB_EINPUT, "--dump-batches %s cannot be written; check the path",
                       o->dump_batches);
    return CB_OK;
}

const cb_train_family cb_train_nmt = {"nmt", 0, nmt_prepare, nmt_open};
