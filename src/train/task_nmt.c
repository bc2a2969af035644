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
#include "data/tokenizer.h"
#include "eval/bleu.h"
#include "eval/search.h"
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
    cb_tokenizer tk;      /* --bleu-pairs: the pair files' tokenizer, to score text */
    char *map_text;       /* a compact vocabulary's ids, for the checkpoint's vocab_map */
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

/* ids as text (tk) into buf (cap bytes, cut there): its length */
static size_t detok(const cb_tokenizer *tk, const int *ids, int n, char *buf, size_t cap) {
    size_t k = 0;
    for (int i = 0; i < n && k < cap; i++) {
        size_t w = tk->decode(tk, ids[i], (uint8_t *)buf + k, cap - k);
        k += w < cap - k ? w : cap - k;
    }
    return k;
}

/* Held-out pair p's greedy translation (hyp, n ids) against its target,
 * as text, into b. */
static int bleu_pair(nmt_task *r, size_t p, const int *hyp, int n, int *ref, char *text,
                     cb_bleu *b) {
    size_t cap = (size_t)64 * r->T, s0 = r->va.src[p] + r->va.slen[p] + 1;
    for (int i = 0; i < r->va.tlen[p]; i++) ref[i] = r->va.tok.tok[s0 + i];
    size_t hl = detok(&r->tk, hyp, n, text, cap), rl = detok(&r->tk, ref, r->va.tlen[p], text + cap, cap);
    return cb_bleu_add(b, text, hl, text + cap, rl);
}

/* val_bleu: corpus BLEU of the greedy translations of the first
 * --bleu-pairs held-out pairs, `rows` at a time through the engine's
 * incremental decoding; every data-parallel rank decodes all of them
 * (the same weights give the same translations, no communication). */
static int val_bleu(nmt_task *r, cb_model *m, int rows, double *out, cb_err *e) {
    int T = r->T, n = r->n->bleu_pairs < (int)r->va.n ? r->n->bleu_pairs : (int)r->va.n;
    cb_search s;
    int rc = cb_search_init(&s, m, rows, T, r->n->c.vocab, r->src, r->tgt, 1, e);
    if (rc) return rc;
    int *hyp = malloc(sizeof(int) * (size_t)rows * T), *olen = malloc(sizeof(int) * rows);
    int *len = malloc(sizeof(int) * rows), *ref = malloc(sizeof(int) * T);
    const uint16_t **src = malloc(sizeof(*src) * rows);
    char *text = malloc((size_t)128 * T);
    cb_bleu b = {0};
    if (!hyp || !olen || !len || !ref || !src || !text)
        rc = cb_fail(e, CB_ENOMEM, "out of memory for val_bleu");
    for (int p0 = 0; !rc && p0 < n; p0 += rows) {
        int k = n - p0 < rows ? n - p0 : rows;
        for (int j = 0; j < k; j++)
            src[j] = r->va.tok.tok + r->va.src[p0 + j], len[j] = r->va.slen[p0 + j];
        rc = cb_search_greedy(&s, src, len, k, T - 1, hyp, olen, e);
        for (int j = 0; !rc && j < k; j++)
            if (bleu_pair(r, (size_t)(p0 + j), hyp + (size_t)j * (T - 1), olen[j], ref, text, &b))
                rc = cb_fail(e, CB_ENOMEM, "out of memory for val_bleu");
    }
    *out = cb_bleu_score(&b, NULL, NULL);
    cb_search_free(&s);
    free(hyp), free(olen), free(len), free(ref), free(src), free(text);
    return rc;
}

/* val_loss: the mean of the batch losses over the held-out pairs in file
 * order, the step's rows at a time (the last batch padded), --eval-batches
 * batches at most; val_bleu with --bleu-pairs. */
static int nmt_eval(void *ctx, cb_model *m, int r0, int rows, int *ids, int *targets,
                    cb_train_metric *out, int cap, cb_err *e) {
    nmt_task *r = ctx;
    if (!r->to->val_data || cap < 2) return 0;
    int T = r->T, M = r->to->accum, first = r0 * M, count = rows * M, nb = 0;
    double sum = 0, bleu = 0;
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
    if (!r->n->bleu_pairs) return 1;
    if (val_bleu(r, m, rows, &bleu, e)) return -1;
    out[1] = (cb_train_metric){"val_bleu", bleu, 0};
    return 2;
}

/* The config's keys in every file's metadata after model=nmt, in the
 * order of nmt_fields (cb_nmt_config_from_file reads them back). */
static const char *const NMT_KEYS[] = {"enc_layers", "dec_layers", "pre_ln", "n_head",
                                       "d_model", "d_ff", "vocab", "seq_len", "emb_scale"};
enum { NMT_NKEYS = 9 };

static void nmt_fields(cb_nmt_config *c, int *T, int **f) {
    int *p[NMT_NKEYS] = {&c->enc_layers, &c->dec_layers, &c->pre_ln, &c->n_head,
                         &c->d_model, &c->d_ff, &c->vocab, T, &c->emb_scale};
    memcpy(f, p, sizeof p);
}

static int nmt_meta(void *ctx, const char **kv, char (*text)[24], int cap) {
    nmt_task *r = ctx;
    cb_nmt_config c = r->n->c;
    int T = r->T, *f[NMT_NKEYS];
    if (cap < NMT_NKEYS + 2) return 0;
    if (r->map_text) kv[2 * NMT_NKEYS + 2] = "vocab_map", kv[2 * NMT_NKEYS + 3] = r->map_text;
    nmt_fields(&c, &T, f);
    kv[0] = "model", kv[1] = "nmt";
    for (int i = 0; i < NMT_NKEYS; i++) {
        snprintf(text[i], 24, "%d", *f[i]);
        kv[2 * i + 2] = NMT_KEYS[i], kv[2 * i + 3] = text[i];
    }
    return NMT_NKEYS + 1 + (r->map_text != NULL);
}

/* A compact vocabulary's ids as text, space-separated (vocab_map). */
static char *map_text(const cb_bitext *b) {
    size_t cap = 8 * (size_t)b->base + 1, k = 0;
    char *s = malloc(cap);
    for (int i = 0; s && i < b->base; i++)
        k += (size_t)snprintf(s + k, cap - k, i ? " %d" : "%d", b->map[i]);
    return s;
}

int cb_nmt_config_from_file(const char *path, cb_nmt_config *c, int *T, cb_err *e) {
    cb_st_file f;
    int rc = cb_st_open(path, &f, e), *fl[NMT_NKEYS];
    if (rc) return rc;
    const char *model = cb_st_meta(&f, "model");
    if (!model || strcmp(model, "nmt"))
        rc = cb_fail(e, CB_EINPUT, "%s is not a translation model (model=%s); pass a checkpoint of "
                                   "`cubist train --model nmt`", path, model ? model : "none");
    *c = (cb_nmt_config){0};
    nmt_fields(c, T, fl);
    uint64_t v = 0;
    for (int i = 0; !rc && i < NMT_NKEYS; i++) {
        rc = cb_meta_u64(&f, NMT_KEYS[i], path, &v, e);
        *fl[i] = (int)v;
        if (!rc && v > (1u << 30))
            rc = cb_fail(e, CB_EINPUT, "%s: metadata %s=%llu is out of range", path, NMT_KEYS[i],
                         (unsigned long long)v);
    }
    if (!rc && (c->vocab <= CB_BITEXT_SPECIALS || c->n_head < 1 || c->d_model % c->n_head || *T < 2))
        rc = cb_fail(e, CB_EINPUT, "%s: its metadata (vocab %d, heads %d, d_model %d, seq_len %d) "
                                   "is not a translation model's", path, c->vocab, c->n_head,
                     c->d_model, *T);
    c->pad = c->vocab - CB_BITEXT_SPECIALS;
    cb_st_close(&f);
    return rc;
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
    cb_tokenizer_free(&r->tk);
    free(r->map_text);
    cb_bitext_batches_free(&r->bt);
    cb_bitext_close(&r->tr);
    cb_bitext_close(&r->va);
    free(r->src), free(r->tgt), free(r->row);
    free(r);
}

/* val_bleu decodes on this rank alone: one stage, whole tensors, nothing
 * recomputed (cb_model_decode_start). */
static int bleu_flags(const cb_train_opts *to, const cb_nmt_task_opts *o, cb_err *e) {
    if (!o->bleu_pairs) return CB_OK;
    if (o->bleu_pairs < 0 || !to->val_data || to->eval_every <= 0)
        return cb_fail(e, CB_EINPUT, "--bleu-pairs %d needs a count >= 0, --val-data and "
                                     "--eval-every N; pass them", o->bleu_pairs);
    if (to->tp > 1 || to->pp > 1 || (to->pipe.recompute && strcmp(to->pipe.recompute, "none")))
        return cb_fail(e, CB_EINPUT, "--bleu-pairs decodes on each data-parallel rank alone: it "
                                     "takes --dp, not --tp, --pp or --recompute; drop one");
    return CB_OK;
}

/* the vocabulary, padding id and T from the pair files, and the flags' ranges */
static int nmt_prepare(cb_train_opts *to, cb_err *e) {
    cb_nmt_task_opts *o = (cb_nmt_task_opts *)to->family_opts;
    cb_bitext tr = {0}, va = {0};
    int rc = cb_bitext_open(to->data, &tr, e);
    if (!rc && to->val_data) rc = cb_bitext_open(to->val_data, &va, e);
    if (!rc && to->val_data &&
        (va.base != tr.base || !va.map != !tr.map ||
         (va.map && memcmp(va.map, tr.map, sizeof(int32_t) * (size_t)tr.base))))
        rc = cb_fail(e, CB_EINPUT, "%s and %s have different tokenizers or vocabularies; prepare "
                     "both alike, in one `cubist prepare --pairs ... --val-pairs ...`",
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
    return bleu_flags(to, o, e);
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
    r->ld.tok = &r->tr.tok; /* the checkpoint records the pair files' tokenizer */
    const char *tk = cb_tokenizer_tag_name(r->va.tok.tokenizer);
    if (o->bleu_pairs && (rc = cb_tokenizer_open(tk ? tk : "byte", NULL, &r->tk, e))) return rc;
    if (o->bleu_pairs && r->va.map && (rc = cb_tokenizer_compact(&r->tk, r->va.map, r->va.base, e)))
        return rc;
    if (r->tr.map && !(r->map_text = map_text(&r->tr)))
        return cb_fail(e, CB_ENOMEM, "out of memory for the vocabulary map");
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
