/* BERT and RoBERTa masked-language models (cb_model_declare_bert) as a
 * training task (train.h, cb_train_task): sequences and masks are pure
 * functions of (seed, sequence, step), so every layout and a resumed run
 * see the same batches; --fill's guesses after training. */
#include <math.h>
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
    cb_tokens tok, val;   /* val: --val-data's held-out tokens */
    cb_tokenizer tk;      /* --fill's, opened before training */
    float *uni;           /* with --val-data: the training text's unigram frequencies (V) */
    int freq[5];          /* and its five most frequent ids, most first */
    int roberta, V, T, batch;
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
    /* bert: static masks, one draw per sequence; roberta: per sighting */
    uint64_t key = mix(r->to->seed ^ 0x3a5c) ^ mix(r->roberta ? g : seq);
    for (int i = 0; i < p && mask; i++) {
        int x = ids[2 * i];
        if (x >= base || unif(key, 3 * (uint64_t)i) >= o->mask_prob) continue;
        tg[i] = x;
        double u = unif(key, 3 * (uint64_t)i + 1);
        if (u < 0.8) ids[2 * i] = base + SP_MASK;
        else if (u < 0.9) ids[2 * i] = (int)(unif(key, 3 * (uint64_t)i + 2) * r->V);
    }
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

/* decodes id into b (cap 64): its length, at most 64 */
static size_t decode(const cb_tokenizer *tk, int id, uint8_t *b) {
    size_t n = tk->decode(tk, id, b, 64);
    return n < 64 ? n : 64;
}

/* where a verse starts: at token i of a row, a space and 1-3 digits (its
 * number), or a blank line (a book's or chapter's heading follows); GPT-2
 * splits "\n\n" before a non-space into two tokens */
static int verse_break(const cb_tokenizer *tk, const int *ids, int i, int base) {
    uint8_t b[64], a[64];
    if (ids[2 * i] >= base) return 0;
    size_t n = decode(tk, ids[2 * i], b), digits = 0, blank = 0;
    for (size_t j = 0; j < n; j++) digits += b[j] >= '0' && b[j] <= '9';
    for (size_t j = 1; j < n; j++) blank |= b[j] == '\n' && b[j - 1] == '\n';
    if (n && b[0] == '\n' && i > 0 && ids[2 * (i - 1)] < base) {
        size_t m = decode(tk, ids[2 * (i - 1)], a);
        blank |= m && a[m - 1] == '\n';
    }
    return blank || (n >= 2 && n <= 4 && b[0] == ' ' && digits == n - 1);
}

/* The verse around position pos of a row: [*i0, *i1), *i0 its break's
 * position (0, [CLS], when the row starts inside it), *i1 the next break's (len
 * when the row ends inside it); 1 if both lie inside the row. */
static int verse_span(const cb_tokenizer *tk, const int *ids, int len, int base, int pos,
                      int *i0, int *i1) {
    int a = pos - 1, b = pos + 1;
    while (a >= 1 && !verse_break(tk, ids, a, base)) a--;
    while (b < len && !verse_break(tk, ids, b, base)) b++;
    *i0 = a >= 1 ? a : 0, *i1 = b;
    return a >= 1 && b < len;
}

/* a word to mask: a GPT-2 token of a space and 3+ letters; a letter when
 * the tokens are bytes */
static int is_word(const cb_tokenizer *tk, int id) {
    uint8_t b[64];
    size_t n = decode(tk, id, b), letters = 0;
    for (size_t j = 0; j < n; j++) letters += (b[j] | 32) >= 'a' && (b[j] | 32) <= 'z';
    if (tk->vocab <= 256) return n == 1 && letters == 1;
    return n >= 4 && b[0] == ' ' && letters == n - 1;
}

/* --fill: the first word past the first quarter of the row's text in a
 * verse the row holds whole, else the first word past it; -1 if none */
static int pick_word(const cb_tokenizer *tk, const int *ids, int len, int base) {
    int first = -1, i0, i1;
    for (int i = len / 4; i < len; i++) {
        if (ids[2 * i] >= base || !is_word(tk, ids[2 * i])) continue;
        if (verse_span(tk, ids, len, base, i, &i0, &i1)) return i;
        if (first < 0) first = i;
    }
    return first;
}

/* the k (<= 5) most probable of the n ids, best first (ties: the lower id) */
static void top_k(const float *pr, int n, int k, int *best) {
    for (int j = 0; j < k; j++) best[j] = -1;
    for (int v = 0; v < n; v++) {
        int j = k;
        while (j > 0 && (best[j - 1] < 0 || pr[v] > pr[best[j - 1]])) j--;
        if (j == k) continue;
        for (int q = k - 1; q > j; q--) best[q] = best[q - 1];
        best[j] = v;
    }
}

/* one id's text on one line (line breaks as spaces) */
static void print_id(FILE *f, const cb_tokenizer *tk, int id) {
    uint8_t b[64];
    size_t n = decode(tk, id, b);
    for (size_t j = 0; j < n; j++) fputc(b[j] == '\n' ? ' ' : b[j], f);
}

static void print_ids(FILE *f, const cb_tokenizer *tk, const int *ids, int i0, int i1, int base) {
    for (int i = i0; i < i1; i++) {
        if (ids[2 * i] == base + SP_MASK) fputs(" ____", f);
        else if (ids[2 * i] < base) print_id(f, tk, ids[2 * i]);
    }
}

/* a guess or an answer: without its leading space; a token of only
 * spaces and line breaks quoted, C-escaped */
static void print_word(FILE *f, const cb_tokenizer *tk, int id) {
    uint8_t b[64];
    size_t n = decode(tk, id, b), blank = 0;
    if (!n) return; /* an id the tokenizer lacks (between V and --special-base) */
    for (size_t j = 0; j < n; j++) blank += b[j] == ' ' || b[j] == '\n';
    if (blank == n) {
        fputc('"', f);
        for (size_t j = 0; j < n; j++) fputs(b[j] == '\n' ? "\\n" : " ", f);
        fputc('"', f);
    } else fwrite(b + (b[0] == ' '), 1, n - (b[0] == ' '), f);
}

/* the verse of a row's masked word pos, its answer and the five best
 * guesses of pr (the position's probabilities) */
static void print_fill(const bert_task *r, FILE *f, const int *ids, int len, int pos, int truth,
                       const float *pr) {
    int base = r->n->special_base, best[5], i0, i1;
    verse_span(&r->tk, ids, len, base, pos, &i0, &i1);
    fputs(i0 > 0 ? "" : "...", f);
    print_ids(f, &r->tk, ids, i0, i1, base);
    fputs(i1 < len ? "\n    answer: " : " ...\n    answer: ", f);
    print_word(f, &r->tk, truth);
    fputs("   guesses: ", f);
    top_k(pr, base, 5, best);
    for (int j = 0; j < 5; j++) {
        print_word(f, &r->tk, best[j]);
        fprintf(f, " %.3f%s", pr[best[j]], j < 4 ? " | " : "\n");
    }
}

/* After training: one masked word in each of o->fill sequences of the
 * validation tokens, with the model's five best guesses (one process). */
static int fill(bert_task *r, cb_model *m, int *ids_buf, cb_err *e) {
    const cb_bert_task_opts *o = r->n;
    int rc = CB_OK, base = o->special_base;
    int T = r->T, B = r->batch, *row = r->row + T, len, *tg = row + 2 * T;
    int *pos = calloc((size_t)B, sizeof(int)), *truth = calloc((size_t)B, sizeof(int));
    if (!rc && (!pos || !truth)) rc = cb_fail(e, CB_ENOMEM, "out of memory for --fill");
    size_t text = (size_t)(r->roberta ? T - 2 : T - 3), nval = r->val.n / text;
    for (int k0 = 0; !rc && k0 < o->fill && (size_t)k0 < nval; k0 += B) {
        for (int k = 0; k < B; k++) {
            make_row(r, o, &r->val, 0, (uint64_t)((k0 + k) % nval), row, tg, &len);
            pos[k] = pick_word(&r->tk, row, len, base);
            truth[k] = pos[k] >= 0 ? row[2 * pos[k]] : 0;
            if (pos[k] >= 0) row[2 * pos[k]] = base + SP_MASK;
            memcpy(ids_buf + (size_t)k * 2 * T, row, sizeof(int) * 2 * T);
            r->lens[k] = len;
        }
        const float *p = cb_model_probs(m, ids_buf);
        for (int k = 0; k < B && k0 + k < o->fill && p; k++)
            if (pos[k] >= 0)
                print_fill(r, o->fill_out, ids_buf + (size_t)k * 2 * T, r->lens[k], pos[k],
                           truth[k], p + ((size_t)k * T + pos[k]) * (base + N_SPECIAL));
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
                        r->roberta, o->dropout, o->attn_dropout};
    cb_model_declare_bert(m, &c);
    cb_model_set_lengths(m, r->lens);
}

/* Held-out accuracy: every EVAL_STRIDE-th text position of a sequence is
 * masked (as [MASK]: about the 15% training masks), shifted by one per
 * sequence so every position of the text is scored once in 7 sequences. */
enum { EVAL_STRIDE = 7 };

/* held-out sequence k with its scored positions masked; targets -1 elsewhere */
static void eval_row(const bert_task *r, uint64_t k, int *ids, int *tg, int *len) {
    int base = r->n->special_base;
    make_row(r, r->n, &r->val, 0, k, ids, tg, len);
    for (int i = 0; i < *len; i++) {
        int x = ids[2 * i];
        tg[i] = x < base && (i + k) % EVAL_STRIDE == 0 ? x : -1;
        if (tg[i] >= 0) ids[2 * i] = base + SP_MASK;
    }
}

/* sums over the scored positions: the model's, the most frequent training
 * tokens' and a guess drawn from the training unigram frequencies' */
typedef struct mlm_score {
    double n, loss, top1, top5, freq1, freq5, uni1, uni_loss;
} mlm_score;

/* one scored position: pr its probabilities (V + specials), y the answer */
static void score(const bert_task *r, const float *pr, int y, mlm_score *s) {
    int best[5], in5 = 0, f5 = 0;
    top_k(pr, r->n->special_base, 5, best);
    for (int j = 0; j < 5; j++) in5 |= best[j] == y, f5 |= r->freq[j] == y;
    s->n++;
    s->loss -= log(pr[y] > 1e-30f ? pr[y] : 1e-30f); /* a float that underflowed */
    s->top1 += best[0] == y, s->top5 += in5;
    s->freq1 += r->freq[0] == y, s->freq5 += f5;
    s->uni1 += r->uni[y], s->uni_loss -= log(r->uni[y]);
}

/* --val-data: the model's masked-token accuracy and loss over every
 * held-out sequence next to the two frequency baselines (one process). */
static int bert_eval(void *ctx, cb_model *m, int r0, int rows, int *ids, int *targets,
                     cb_train_metric *out, int cap, cb_err *e) {
    bert_task *r = ctx;
    (void)r0, (void)rows;
    if (!r->uni || cap < 8) return 0;
    int T = r->T, B = r->batch, VS = r->n->special_base + N_SPECIAL;
    size_t nval = r->val.n / (size_t)(r->roberta ? T - 2 : T - 3);
    mlm_score s = {0};
    for (size_t k0 = 0; k0 < nval; k0 += (size_t)B) {
        for (int k = 0; k < B; k++)
            eval_row(r, (k0 + k) % nval, ids + (size_t)k * 2 * T, targets + (size_t)k * T, &r->lens[k]);
        const float *p = cb_model_probs(m, ids);
        if (!p) return cb_fail(e, CB_EINPUT, "--val-data needs one process and one micro-batch"), -1;
        for (size_t i = 0; i < (size_t)B * T && k0 + i / T < nval; i++)
            if (targets[i] >= 0) score(r, p + i * VS, targets[i], &s);
    }
    double n = s.n > 0 ? s.n : 1;
    out[0] = (cb_train_metric){"val_loss", s.loss / n, 0};
    out[1] = (cb_train_metric){"val_acc", s.top1 / n, 0};
    out[2] = (cb_train_metric){"val_top5", s.top5 / n, 0};
    out[3] = (cb_train_metric){"freq_acc", s.freq1 / n, 0};
    out[4] = (cb_train_metric){"freq_top5", s.freq5 / n, 0};
    out[5] = (cb_train_metric){"unigram_acc", s.uni1 / n, 0};
    out[6] = (cb_train_metric){"unigram_loss", s.uni_loss / n, 0};
    out[7] = (cb_train_metric){"val_masked", s.n, 1};
    return 8;
}

/* the training text's unigram frequencies (add-one smoothed over the V
 * text ids, so an unseen held-out word has a finite loss) and its five
 * most frequent ids */
static int unigram(bert_task *r, cb_err *e) {
    enum { CHUNK = 1 << 16 };
    int *buf = malloc(sizeof(int) * CHUNK);
    size_t *count = calloc((size_t)r->V, sizeof(size_t));
    r->uni = malloc(sizeof(float) * (size_t)r->V);
    int rc = buf && count && r->uni ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory for the unigram");
    for (size_t p = 0; !rc && p < r->tok.n; p += CHUNK) {
        size_t n = r->tok.n - p < CHUNK ? r->tok.n - p : CHUNK;
        cb_tokens_read(&r->tok, p, n, buf);
        for (size_t i = 0; i < n; i++) count[buf[i]]++;
    }
    for (int v = 0; !rc && v < r->V; v++)
        r->uni[v] = (float)((count[v] + 1.0) / ((double)r->tok.n + r->V));
    if (!rc) top_k(r->uni, r->V, 5, r->freq);
    free(buf), free(count);
    return rc;
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
    free(r->lens), free(r->row), free(r->uni);
    cb_tokens_close(&r->tok);
    cb_tokens_close(&r->val);
    cb_tokenizer_free(&r->tk);
    free(r);
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
        !(o->dropout >= 0 && o->dropout < 1) || !(o->attn_dropout >= 0 && o->attn_dropout < 1))
        return cb_fail(e, CB_EINPUT, "--layers, --d-model, --heads, --batch >= 1, --seq-len >= "
                                     "16, --steps >= 0, --mask-prob in (0, 1), --dropout and "
                                     "--attn-dropout in [0, 1); fix the flag");
    if (cb_heads_check(o->heads, o->d_model, e)) return CB_EINPUT;
    if (o->special_base < o->V)
        return cb_fail(e, CB_EINPUT, "--special-base %d: the special ids %d..%d collide with the "
                                     "text vocabulary 0..%d; use --special-base >= %d",
                       o->special_base, o->special_base, o->special_base + N_SPECIAL - 1,
                       o->V - 1, o->V);
    if (o->fill > 0 && !to->val_data)
        return cb_fail(e, CB_EINPUT, "--fill needs --val-data TOKENS (held-out text)");
    if (to->eval_every > 0 && !to->val_data)
        return cb_fail(e, CB_EINPUT, "--eval-every %d needs --val-data TOKENS (held-out text)",
                       to->eval_every);
    if (to->val_data && (cb_comm_world()->size > 1 || to->accum > 1))
        return cb_fail(e, CB_EINPUT, "--val-data (held-out accuracy, --fill) needs one process and "
                                     "one micro-batch; drop it or the parallel flags");
    return CB_OK;
}

static int bert_open(cb_train_task *task, const cb_train_opts *to, cb_err *e) {
    bert_task *r = calloc(1, sizeof *r);
    if (!r) return cb_fail(e, CB_ENOMEM, "out of memory for the BERT task");
    const cb_bert_task_opts *o = to->family_opts;
    r->to = to, r->n = o;
    r->roberta = o->roberta, r->V = o->V, r->T = o->seq_len, r->batch = to->B * to->accum;
    int T = r->T, nl = o->layers;
    *task = (cb_train_task){.ctx = r, .ld = &r->ld, .row_ids = 2 * T, .row_targets = T,
                            .row_tokens = T, .check = bert_check, .declare = bert_declare,
                            .batch = bert_batch, .eval = bert_eval, .meta = bert_meta,
                            .finish = bert_finish, .close = bert_close};
    (void)nl;
    int rc = cb_tokens_open(to->data, r->V, &r->tok, e);
    if (!rc && to->val_data) rc = cb_tokens_open(to->val_data, r->V, &r->val, e);
    const char *tkname = cb_tokenizer_tag_name(o->tokenizer);
    if (!rc && o->fill > 0) rc = cb_tokenizer_open(tkname ? tkname : "byte", o->bpe_dir, &r->tk, e);
    if (rc) return rc;
    size_t text = (size_t)(r->roberta ? T - 2 : T - 3);
    r->nseq = r->tok.n / text;
    if (r->nseq < 1)
        return cb_fail(e, CB_EINPUT, "%s: %zu tokens, fewer than one sequence's %zu; use a longer "
                                     "file", to->data, r->tok.n, text);
    if (to->val_data && r->val.n < text)
        return cb_fail(e, CB_EINPUT, "--val-data %s: %zu tokens, fewer than one sequence's %zu; "
                                     "use a longer file", to->val_data, r->val.n, text);
    if (to->val_data && (rc = unigram(r, e))) return rc;
    r->lens = malloc(sizeof(int) * (size_t)r->batch);
    r->row = malloc(sizeof(int) * (4 * (size_t)T + 1));
    if (!r->lens || !r->row) return cb_fail(e, CB_ENOMEM, "out of memory for batches");
    if (o->dump_batches && cb_comm_world()->rank == 0 && !(r->dump = fopen(o->dump_batches, "wb")))
        return cb_fail(e, CB_EINPUT, "--dump-batches %s cannot be written; check the path",
                       o->dump_batches);
    return CB_OK;
}

const cb_train_family cb_train_bert = {"bert", 1, bert_prepare, bert_open};
