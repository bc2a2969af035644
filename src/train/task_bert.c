/* BERT and RoBERTa masked-language models (cb_model_declare_bert) as a
 * training task (train.h, cb_train_task): sequences and masks are pure
 * functions of (seed, sequence, step), so every layout and a resumed run
 * see the same batches; --fill's guesses after training. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "data/tokenizer.h"
#include "train/train.h"

enum { SP_PAD, SP_CLS, SP_SEP, SP_MASK, N_SPECIAL }; /* ids special_base + these */

typedef struct bert_task {
    const cb_train_opts *to;
    const cb_bert_task_opts *n;
    cb_tokens tok, val;
    cb_tokenizer tk;      /* --fill's, opened before training */
    int roberta, V, T, batch;
    int P;                /* predictions per sequence at most (--max-predictions) */
    size_t nseq;          /* sequences in one epoch of the stream */
    FILE *dump;           /* --dump-batches, world rank 0 */
    int *lens;            /* this rank's rows' lengths */
    int *row;             /* one row: 2T ids, T targets, length, and T of scratch */
    cb_loader ld;         /* zeros: the rows follow from the step alone */
} bert_task;

/* splitmix64's finaliser: the counter-based draws of the recipes */
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double unif(uint64_t key, uint64_t i) { return (mix(key ^ mix(i)) >> 11) * 0x1p-53; }

/* The masked positions of a row of length p, as BERT's
 * create_pretraining_data: num = min(max predictions, max(1, round(p x
 * --mask-prob))) of its text positions (the specials never), drawn by a
 * partial Fisher-Yates shuffle of them; each becomes [MASK] (80%), a random
 * text token (10%) or stays (10%). bert: the draws of the sequence (static
 * masks); roberta: of the sighting g (drawn afresh each time). */
static void mask_row(const bert_task *r, const cb_bert_task_opts *o, uint64_t g, uint64_t seq,
                     int *ids, int *tg, int p) {
    int base = o->special_base, *cand = r->row, nc = 0; /* the text tokens are read: reuse */
    uint64_t key = mix(r->to->seed ^ 0x3a5c) ^ mix(r->roberta ? g : seq);
    for (int i = 0; i < p; i++)
        if (ids[2 * i] < base) cand[nc++] = i;
    int num = (int)(p * o->mask_prob + 0.5);
    num = num < 1 ? 1 : num > r->P ? r->P : num;
    if (num > nc) num = nc;
    for (int j = 0; j < num; j++) {
        int k = j + (int)(unif(key ^ 0x5eed, (uint64_t)j) * (nc - j)), i = cand[k];
        cand[k] = cand[j], cand[j] = i;
        tg[i] = ids[2 * i];
        double u = unif(key, 3 * (uint64_t)i + 1);
        if (u < 0.8) ids[2 * i] = base + SP_MASK;
        else if (u < 0.9) ids[2 * i] = (int)(unif(key, 3 * (uint64_t)i + 2) * r->V);
    }
}

/* Row g of the step stream (src: the training tokens; mask 0: no masks,
 * every sequence whole): its tokens (field 0), types (field 1), targets
 * and length. */
static void make_row(const bert_task *r, const cb_bert_task_opts *o, const cb_tokens *src, int mask,
                     uint64_t g, int *ids, int *tg, int *len) {
    int T = r->T, base = o->special_base, text = r->roberta ? T - 2 : T - 3;
    uint64_t seq = mask ? g % r->nseq : g;
    int L = T;
    if (mask && !r->roberta && unif(mix(r->to->seed) ^ 0x1e57, seq) < 0.1)
        L = 8 + (int)(unif(mix(r->to->seed) ^ 0x1e58, seq) * (T - 8));
    int n = r->roberta ? text : L - 3, na = n / 2;
    int *t = r->row; /* text tokens */
    cb_tokens_read(src, seq * text, (size_t)n, t);
    for (int i = 0; i < T; i++) ids[2 * i] = base + SP_PAD, ids[2 * i + 1] = 0, tg[i] = -1;
    int p = 0;
    ids[2 * p++] = base + SP_CLS;
    for (int i = 0; i < n; i++) {
        if (!r->roberta && i == na) ids[2 * p++] = base + SP_SEP;
        ids[2 * p] = t[i];
        ids[2 * p++ + 1] = !r->roberta && i >= na;
    }
    ids[2 * p] = base + SP_SEP;
    ids[2 * p++ + 1] = !r->roberta;
    *len = p;
    if (mask) mask_row(r, o, g, seq, ids, tg, p);
}

/* Step s's rows (--batch over the micro-batches): this rank's contiguous
 * part of them, ids (token, type), targets and lengths; every row of the
 * step to --dump-batches on world rank 0. */
static int bert_batch(void *ctx, int s, int M, int r0, int rows, int *out, int *tgs,
                      cb_err *e) {
    bert_task *r = ctx;
    (void)e;
    int T = r->T, *row = r->row + T, first = r0 * M, count = rows * M; /* row[0..T): scratch */
    for (int k = 0; k < r->batch; k++) {
        int mine = k >= first && k < first + count, j = k - first;
        if (!mine && !r->dump) continue;
        int *ids = row, *tg = row + 2 * T, *len = row + 3 * T;
        make_row(r, r->n, &r->tok, 1, (uint64_t)s * r->batch + k, ids, tg, len);
        if (mine) {
            memcpy(out + (size_t)j * 2 * T, ids, sizeof(int) * 2 * T);
            memcpy(tgs + (size_t)j * T, tg, sizeof(int) * T);
            r->lens[j] = *len;
        }
        if (!r->dump) continue;
        for (int f = 0; f < 2; f++)
            for (int i = 0; i < T; i++) fwrite(&ids[2 * i + f], sizeof(int), 1, r->dump);
        fwrite(tg, sizeof(int), (size_t)T + 1, r->dump);
    }
    return CB_OK;
}

/* --fill: the first word (a token decoding to a space and 3+ letters)
 * past the first quarter of row k's text, or -1 */
static int pick_word(const cb_tokenizer *tk, const int *ids, int len, int base) {
    uint8_t b[64];
    for (int i = len / 4; i < len; i++) {
        if (ids[2 * i] >= base) continue;
        size_t n = tk->decode(tk, ids[2 * i], b, sizeof b);
        int letters = 0;
        for (size_t j = 1; j < n && j < sizeof b; j++) letters += (b[j] | 32) >= 'a' && (b[j] | 32) <= 'z';
        if (n >= 4 && b[0] == ' ' && letters == (int)n - 1) return i;
    }
    return -1;
}

/* the 5 most probable of the n text ids, best first */
static void top5(const float *pr, int n, int *best) {
    for (int j = 0; j < 5; j++) {
        best[j] = -1;
        for (int v = 0; v < n; v++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= best[q] == v;
            if (!taken && (best[j] < 0 || pr[v] > pr[best[j]])) best[j] = v;
        }
    }
}

/* one id's text on one line (line breaks as spaces) */
static void print_id(FILE *f, const cb_tokenizer *tk, int id) {
    uint8_t b[64];
    size_t n = tk->decode(tk, id, b, sizeof b);
    for (size_t j = 0; j < n && j < sizeof b; j++) fputc(b[j] == '\n' ? ' ' : b[j], f);
}

static void print_ids(FILE *f, const cb_tokenizer *tk, const int *ids, int i0, int i1, int base) {
    for (int i = i0; i < i1; i++) {
        if (ids[2 * i] == base + SP_MASK) fputs(" ____", f);
        else if (ids[2 * i] < base) print_id(f, tk, ids[2 * i]);
    }
}

/* After training: one masked word in each of o->fill sequences of the
 * validation tokens, with the model's five best guesses (one process). */
static int fill(bert_task *r, cb_model *m, int *ids_buf, cb_err *e) {
    const cb_bert_task_opts *o = r->n;
    FILE *f = o->fill_out;
    const cb_tokenizer tk = r->tk;
    int rc = CB_OK, base = o->special_base;
    int T = r->T, B = r->batch, *row = r->row + T, len, *tg = row + 2 * T;
    int *pos = calloc((size_t)B, sizeof(int)), *truth = calloc((size_t)B, sizeof(int));
    if (!rc && (!pos || !truth)) rc = cb_fail(e, CB_ENOMEM, "out of memory for --fill");
    size_t text = (size_t)(r->roberta ? T - 2 : T - 3), nval = r->val.n / text;
    for (int k0 = 0; !rc && k0 < o->fill && (size_t)k0 < nval; k0 += B) {
        for (int k = 0; k < B; k++) {
            make_row(r, o, &r->val, 0, (uint64_t)((k0 + k) % nval), row, tg, &len);
            pos[k] = pick_word(&tk, row, len, base);
            truth[k] = pos[k] >= 0 ? row[2 * pos[k]] : 0;
            if (pos[k] >= 0) row[2 * pos[k]] = base + SP_MASK;
            memcpy(ids_buf + (size_t)k * 2 * T, row, sizeof(int) * 2 * T);
            r->lens[k] = len;
        }
        const float *p = cb_model_probs(m, ids_buf);
        for (int k = 0; k < B && k0 + k < o->fill && p; k++) {
            if (pos[k] < 0) continue;
            const int *ids = ids_buf + (size_t)k * 2 * T;
            const float *pr = p + ((size_t)k * T + pos[k]) * (base + N_SPECIAL);
            int best[5];
            top5(pr, base, best);
            fprintf(f, "...");
            print_ids(f, &tk, ids, pos[k] > 12 ? pos[k] - 12 : 1, pos[k] + 8 < len ? pos[k] + 8 : len, base);
            fprintf(f, " ...\n    answer:");
            print_id(f, &tk, truth[k]);
            fprintf(f, "   guesses:");
            for (int j = 0; j < 5; j++) {
                print_id(f, &tk, best[j]);
                fprintf(f, " (%.3f)%s", pr[best[j]], j < 4 ? "," : "\n");
            }
        }
        if (!p) rc = cb_fail(e, CB_EINPUT, "--fill needs one process and one micro-batch");
    }
    free(pos), free(truth);
    return rc;
}

static int bert_finish(void *ctx, cb_model *m, int *ids, cb_err *e) {
    bert_task *r = ctx;
    return r->n->fill > 0 ? fill(r, m, ids, e) : CB_OK;
}

static int bert_check(void *ctx, const cb_layout *L, int rows, cb_err *e) {
    (void)ctx, (void)L, (void)rows, (void)e; /* the engine's build checks the layers */
    return CB_OK;
}

static void bert_declare(void *ctx, cb_model *m) {
    bert_task *r = ctx;
    const cb_bert_task_opts *o = r->n;
    cb_bert_config c = {o->layers, o->d_model, o->heads, r->T, o->special_base + N_SPECIAL, 2,
                        r->roberta, o->dropout, o->attn_dropout, r->P};
    cb_model_declare_bert(m, &c);
    cb_model_set_lengths(m, r->lens);
}

static int bert_eval(void *ctx, cb_model *m, int r0, int rows, int *ids, int *targets,
                     cb_train_metric *out, int cap, cb_err *e) {
    (void)ctx, (void)m, (void)r0, (void)rows, (void)ids, (void)targets, (void)out, (void)cap;
    (void)e;
    return 0; /* --fill after training (finish) */
}

static int bert_meta(void *ctx, const char **kv, char (*text)[24], int cap) {
    bert_task *r = ctx;
    (void)text;
    if (cap < 2) return 0;
    kv[0] = "format", kv[1] = "pt", kv[2] = "model", kv[3] = r->roberta ? "roberta" : "bert";
    return 2;
}

static void bert_close(void *ctx) {
    bert_task *r = ctx;
    if (!r) return;
    if (r->dump) fclose(r->dump);
    free(r->lens), free(r->row);
    cb_tokens_close(&r->tok);
    cb_tokens_close(&r->val);
    cb_tokenizer_free(&r->tk);
    free(r);
}

int cb_bert_task_predictions(const cb_bert_task_opts *o) {
    int p = (int)(o->seq_len * o->mask_prob + 0.5f);
    return o->max_predictions > 0 ? o->max_predictions : p < 1 ? 1 : p;
}

/* The text vocabulary from the token file (--text-vocab, else its
 * tokenizer's), the special ids after it, and the flags' ranges. */
static int bert_prepare(cb_train_opts *to, cb_err *e) {
    cb_bert_task_opts *o = (cb_bert_task_opts *)to->family_opts;
    cb_tokens probe = {0};
    int rc = cb_tokens_open(to->data, 1 << 16, &probe, e);
    if (rc) return rc;
    o->V = o->text_vocab > 0 ? o->text_vocab : probe.tokenizer == 2 ? 50257 : 256;
    o->tokenizer = probe.tokenizer;
    cb_tokens_close(&probe);
    if (o->special_base < 0) o->special_base = o->V;
    to->T = o->seq_len;
    if (o->layers < 1 || o->d_model < 1 || o->heads < 1 || to->steps < 0 ||
        o->seq_len < 16 || !(o->mask_prob > 0 && o->mask_prob < 1) ||
        o->max_predictions < 0 || o->max_predictions > o->seq_len ||
        !(o->dropout >= 0 && o->dropout < 1) || !(o->attn_dropout >= 0 && o->attn_dropout < 1))
        return cb_fail(e, CB_EINPUT, "--layers, --d-model, --heads, --batch >= 1, --seq-len >= "
                                     "16, --steps >= 0, --mask-prob in (0, 1), --max-predictions "
                                     "in [0, --seq-len], --dropout and --attn-dropout in [0, "
                                     "1); fix the flag");
    if (cb_heads_check(o->heads, o->d_model, e)) return CB_EINPUT;
    if (o->special_base < o->V)
        return cb_fail(e, CB_EINPUT, "--special-base %d: the special ids %d..%d collide with the "
                                     "text vocabulary 0..%d; use --special-base >= %d",
                       o->special_base, o->special_base, o->special_base + N_SPECIAL - 1,
                       o->V - 1, o->V);
    if (o->fill > 0 && !to->val_data)
        return cb_fail(e, CB_EINPUT, "--fill needs --val-data TOKENS (held-out text)");
    return CB_OK;
}

static int bert_open(cb_train_task *task, const cb_train_opts *to, cb_err *e) {
    bert_task *r = calloc(1, sizeof *r);
    if (!r) return cb_fail(e, CB_ENOMEM, "out of memory for the BERT task");
    const cb_bert_task_opts *o = to->family_opts;
    r->to = to, r->n = o;
    r->roberta = o->roberta, r->V = o->V, r->T = o->seq_len, r->batch = to->B * to->accum;
    r->P = cb_bert_task_predictions(o);
    int T = r->T, nl = o->layers;
    *task = (cb_train_task){.ctx = r, .ld = &r->ld, .row_ids = 2 * T, .row_targets = T,
                            .row_tokens = T, .check = bert_check, .declare = bert_declare,
                            .batch = bert_batch, .eval = bert_eval, .meta = bert_meta,
                            .finish = bert_finish, .close = bert_close};
    (void)nl;
    int rc = cb_tokens_open(to->data, r->V, &r->tok, e);
    if (!rc && o->fill > 0) rc = cb_tokens_open(to->val_data, r->V, &r->val, e);
    const char *tkname = cb_tokenizer_tag_name(o->tokenizer);
    if (!rc && o->fill > 0) rc = cb_tokenizer_open(tkname ? tkname : "byte", o->bpe_dir, &r->tk, e);
    if (rc) return rc;
    size_t text = (size_t)(r->roberta ? T - 2 : T - 3);
    r->nseq = r->tok.n / text;
    if (r->nseq < 1)
        return cb_fail(e, CB_EINPUT, "%s: %zu tokens, fewer than one sequence's %zu; use a longer "
                                     "file", to->data, r->tok.n, text);
    r->lens = malloc(sizeof(int) * (size_t)r->batch);
    r->row = malloc(sizeof(int) * (4 * (size_t)T + 1));
    if (!r->lens || !r->row) return cb_fail(e, CB_ENOMEM, "out of memory for batches");
    if (o->dump_batches && cb_comm_world()->rank == 0 && !(r->dump = fopen(o->dump_batches, "wb")))
        return cb_fail(e, CB_EINPUT, "--dump-batches %s cannot be written; check the path",
                       o->dump_batches);
    return CB_OK;
}

const cb_train_family cb_train_bert = {"bert", 1, bert_prepare, bert_open};
