/* `cubist train --model bert|roberta`: masked-language-model training of
 * cb_model_declare_bert on a token file (the files GPT reads), through the
 * graph engine under --dp, --zero and the pipeline flags. Sequences and
 * masks are pure functions of (seed, sequence, step), so every layout
 * sees the same batches; docs/bert.md has the recipes. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "data/tokenizer.h"
#include "graph/graph.h"

enum { SP_PAD, SP_CLS, SP_SEP, SP_MASK, N_SPECIAL }; /* ids special_base + these */

typedef struct bert_opts {
    const char *model, *data, *val_data, *bpe_dir, *log, *save, *init, *dump_grads, *dump_batches;
    int layers, d_model, heads, seq_len, text_vocab, special_base, batch, steps, quiet, threads;
    int fill;
    float mask_prob, dropout;
    uint64_t seed;
    cb_adamw_config opt;
} bert_opts;

static const char EPILOG[] =
    "BERT (--model bert) and RoBERTa (--model roberta): Hugging Face BertForMaskedLM's\n"
    "network (post-LN, GELU erf, learned positions, token types, MLM head with the\n"
    "decoder tied to the word embeddings plus its own bias), loss = cross-entropy\n"
    "over the masked positions, mean over the step's. Special ids follow the text\n"
    "vocabulary V (--text-vocab, default the token file's: 256 bytes, 50257 gpt2):\n"
    "[PAD] = B, [CLS] = B+1, [SEP] = B+2, [MASK] = B+3 for B = --special-base\n"
    "(default V), vocabulary B+4. Sequence k of the stream (T-3 text tokens for\n"
    "bert, T-2 for roberta, read in order, epochs repeating): bert: [CLS] A [SEP]\n"
    "B [SEP] (types 0, then 1 from B on), 10% of sequences cut to a length drawn\n"
    "in [8, T) and padded; its masks are fixed per sequence by --seed. roberta:\n"
    "[CLS] text [SEP] at full length, type 0, masks drawn afresh each time a\n"
    "sequence is seen (dynamic). Masking: --mask-prob (0.15) of the text\n"
    "positions, of those 80% [MASK], 10% a random text token, 10% kept.\n"
    "Parallel flags: --dp --zero --tp --tp-mode --pp --schedule --micro-batches\n"
    "--virtual-stages --partition --recompute (the MLM head under every layout);\n"
    "--grad-accum M is --micro-batches M. Lines `step N loss L grad_norm G`;\n"
    "--log JSONL; --dump-batches F writes each step's rows (int32: T ids, T\n"
    "types, T targets (-1: not masked), length) for the PyTorch test;\n"
    "--dump-grads F step 1's gradients. --fill N (one process) after training\n"
    "masks one word in each of N sequences of --val-data and prints the model's\n"
    "five best guesses for it.\n";

/* splitmix64's finaliser: the counter-based draws of the recipes */
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double unif(uint64_t key, uint64_t i) { return (mix(key ^ mix(i)) >> 11) * 0x1p-53; }

typedef struct run {
    cb_dist *d;
    cb_model *m;
    cb_tokens tok, val;
    cb_tokenizer tk;      /* --fill's, opened before training */
    int roberta, V, T, tokenizer;
    size_t nseq;          /* sequences in one epoch of the stream */
    FILE *log, *dump;
    int *ids, *tg, *lens; /* this rank's rows */
    int *row;             /* one row: 2T ids, T targets, length */
    const char *dump_grads;
    cb_err dump_err;
} run;

/* Row g of the step stream (src: the training tokens; mask 0: no masks,
 * every sequence whole): its tokens (field 0), types (field 1), targets
 * and length. */
static void make_row(const run *r, const bert_opts *o, const cb_tokens *src, int mask,
                     uint64_t g, int *ids, int *tg, int *len) {
    int T = r->T, base = o->special_base, text = r->roberta ? T - 2 : T - 3;
    uint64_t seq = mask ? g % r->nseq : g;
    int L = T;
    if (mask && !r->roberta && unif(mix(o->seed) ^ 0x1e57, seq) < 0.1)
        L = 8 + (int)(unif(mix(o->seed) ^ 0x1e58, seq) * (T - 8));
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
    uint64_t key = mix(o->seed ^ 0x3a5c) ^ mix(r->roberta ? g : seq);
    for (int i = 0; i < p && mask; i++) {
        int x = ids[2 * i];
        if (x >= base || unif(key, 3 * (uint64_t)i) >= o->mask_prob) continue;
        tg[i] = x;
        double u = unif(key, 3 * (uint64_t)i + 1);
        if (u < 0.8) ids[2 * i] = base + SP_MASK;
        else if (u < 0.9) ids[2 * i] = (int)(unif(key, 3 * (uint64_t)i + 2) * r->V);
    }
}

/* This rank's rows of step s; every row of the step to the dump on rank 0 */
static void batch_rows(run *r, const bert_opts *o, int s, int first, int count) {
    int T = r->T, *row = r->row + T; /* row[0..T) is make_row's scratch */
    for (int k = 0; k < o->batch; k++) {
        int mine = k >= first && k < first + count, j = k - first;
        if (!mine && !r->dump) continue;
        int *ids = row, *tg = row + 2 * T, *len = row + 3 * T;
        make_row(r, o, &r->tok, 1, (uint64_t)s * o->batch + k, ids, tg, len);
        if (mine) {
            memcpy(r->ids + (size_t)j * 2 * T, ids, sizeof(int) * 2 * T);
            memcpy(r->tg + (size_t)j * T, tg, sizeof(int) * T);
            r->lens[j] = *len;
        }
        if (!r->dump) continue;
        for (int f = 0; f < 2; f++)
            for (int i = 0; i < T; i++) fwrite(&ids[2 * i + f], sizeof(int), 1, r->dump);
        fwrite(tg, sizeof(int), (size_t)T + 1, r->dump);
    }
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
static void print_id(const cb_tokenizer *tk, int id) {
    uint8_t b[64];
    size_t n = tk->decode(tk, id, b, sizeof b);
    for (size_t j = 0; j < n && j < sizeof b; j++) putchar(b[j] == '\n' ? ' ' : b[j]);
}

static void print_ids(const cb_tokenizer *tk, const int *ids, int i0, int i1, int base) {
    for (int i = i0; i < i1; i++) {
        if (ids[2 * i] == base + SP_MASK) fputs(" ____", stdout);
        else if (ids[2 * i] < base) print_id(tk, ids[2 * i]);
    }
}

/* After training: one masked word in each of o->fill sequences of the
 * validation tokens, with the model's five best guesses (one process). */
static int fill(run *r, const bert_opts *o, cb_err *e) {
    const cb_tokenizer tk = r->tk;
    int rc = CB_OK, base = o->special_base;
    int T = r->T, B = o->batch, *row = r->row + T, len, *tg = row + 2 * T;
    int *pos = calloc((size_t)B, sizeof(int)), *truth = calloc((size_t)B, sizeof(int));
    if (!rc && (!pos || !truth)) rc = cb_fail(e, CB_ENOMEM, "out of memory for --fill");
    size_t text = (size_t)(r->roberta ? T - 2 : T - 3), nval = r->val.n / text;
    for (int k0 = 0; !rc && k0 < o->fill && (size_t)k0 < nval; k0 += B) {
        for (int k = 0; k < B; k++) {
            make_row(r, o, &r->val, 0, (uint64_t)((k0 + k) % nval), row, tg, &len);
            pos[k] = pick_word(&tk, row, len, base);
            truth[k] = pos[k] >= 0 ? row[2 * pos[k]] : 0;
            if (pos[k] >= 0) row[2 * pos[k]] = base + SP_MASK;
            memcpy(r->ids + (size_t)k * 2 * T, row, sizeof(int) * 2 * T);
            r->lens[k] = len;
        }
        const float *p = cb_model_probs(r->m, r->ids);
        for (int k = 0; k < B && k0 + k < o->fill && p; k++) {
            if (pos[k] < 0) continue;
            const int *ids = r->ids + (size_t)k * 2 * T;
            const float *pr = p + ((size_t)k * T + pos[k]) * (base + N_SPECIAL);
            int best[5];
            top5(pr, base, best);
            printf("...");
            print_ids(&tk, ids, pos[k] > 12 ? pos[k] - 12 : 1, pos[k] + 8 < len ? pos[k] + 8 : len, base);
            printf(" ...\n    answer:");
            print_id(&tk, truth[k]);
            printf("   guesses:");
            for (int j = 0; j < 5; j++) {
                print_id(&tk, best[j]);
                printf(" (%.3f)%s", pr[best[j]], j < 4 ? "," : "\n");
            }
        }
        if (!p) rc = cb_fail(e, CB_EINPUT, "--fill needs one process and one micro-batch");
    }
    free(pos), free(truth);
    return rc;
}

static void on_grads(cb_model *m, int step, void *ctx) {
    run *r = ctx;
    if (step == 0 && r->dump_grads) cb_graph_save_grads(m, r->dump_grads, &r->dump_err);
}

static int check_opts(const bert_opts *o, run *r, cb_err *e) {
    if (!o->data)
        return cb_fail(e, CB_EINPUT, "--model %s needs --data TOKENS (`cubist prepare`)", o->model);
    if (o->layers < 1 || o->d_model < 1 || o->heads < 1 || o->batch < 1 || o->steps < 0 ||
        o->seq_len < 16 || !(o->mask_prob > 0 && o->mask_prob < 1) ||
        !(o->dropout >= 0 && o->dropout < 1))
        return cb_fail(e, CB_EINPUT, "--layers, --d-model, --heads, --batch >= 1, --seq-len >= "
                                     "16, --steps >= 0, --mask-prob in (0, 1) and --dropout in "
                                     "[0, 1); fix the flag");
    if (o->d_model % o->heads)
        return cb_fail(e, CB_EINPUT, "--heads %d does not divide --d-model %d; choose heads that "
                                     "divide it", o->heads, o->d_model);
    if (o->special_base < r->V)
        return cb_fail(e, CB_EINPUT, "--special-base %d: the special ids %d..%d collide with the "
                                     "text vocabulary 0..%d; use --special-base >= %d",
                       o->special_base, o->special_base, o->special_base + N_SPECIAL - 1,
                       r->V - 1, r->V);
    return CB_OK;
}

static int setup(run *r, bert_opts *o, cb_err *e) {
    r->roberta = !strcmp(o->model, "roberta");
    r->T = o->seq_len;
    cb_tokens probe = {0};
    int rc = cb_tokens_open(o->data, 1 << 16, &probe, e);
    if (rc) return rc;
    r->V = o->text_vocab > 0 ? o->text_vocab : probe.tokenizer == 2 ? 50257 : 256;
    r->tokenizer = probe.tokenizer;
    cb_tokens_close(&probe);
    if (o->special_base < 0) o->special_base = r->V;
    if ((rc = check_opts(o, r, e)) || (rc = cb_tokens_open(o->data, r->V, &r->tok, e))) return rc;
    if (o->fill > 0 && !o->val_data)
        return cb_fail(e, CB_EINPUT, "--fill needs --val-data TOKENS (held-out text)");
    if (o->fill > 0 && (rc = cb_tokens_open(o->val_data, r->V, &r->val, e))) return rc;
    const char *tkname = cb_tokenizer_tag_name(r->tokenizer);
    if (o->fill > 0 && (rc = cb_tokenizer_open(tkname ? tkname : "byte", o->bpe_dir, &r->tk, e)))
        return rc;
    size_t text = (size_t)(r->roberta ? r->T - 2 : r->T - 3);
    r->nseq = r->tok.n / text;
    if (r->nseq < 1)
        return cb_fail(e, CB_EINPUT, "%s: %zu tokens, fewer than one sequence's %zu; use a longer "
                                     "file", o->data, r->tok.n, text);
    r->m = cb_model_new(r->d, o->batch, r->T);
    cb_bert_config c = {o->layers, o->d_model, o->heads, r->T, o->special_base + N_SPECIAL, 2,
                        r->roberta, o->dropout};
    cb_model_declare_bert(r->m, &c);
    cb_adamw_config opt = o->opt;
    opt.steps = o->steps;
    opt.decay_embeddings = 1; /* every weight but biases and LayerNorm, as HF's run_mlm */
    if ((rc = cb_model_build(r->m, o->seed, &opt, e))) return rc;
    if (o->init && (rc = cb_model_load(r->m, o->init, e))) return rc;
    r->dump_grads = o->dump_grads;
    r->m->on_grads = on_grads;
    r->m->on_grads_ctx = r;
    int first, count, root = cb_dist_rank(r->d) == 0;
    cb_model_rows(r->m, &first, &count);
    r->ids = malloc(sizeof(int) * 2 * count * r->T);
    r->tg = malloc(sizeof(int) * count * r->T);
    r->lens = malloc(sizeof(int) * count);
    r->row = malloc(sizeof(int) * (4 * r->T + 1));
    if (!r->ids || !r->tg || !r->lens || !r->row)
        return cb_fail(e, CB_ENOMEM, "out of memory for batches");
    cb_model_set_lengths(r->m, r->lens);
    if (root && o->log && !(r->log = fopen(o->log, "w")))
        rc = cb_fail(e, CB_EINPUT, "--log %s cannot be written; check the path", o->log);
    if (root && !rc && o->dump_batches && !(r->dump = fopen(o->dump_batches, "wb")))
        rc = cb_fail(e, CB_EINPUT, "--dump-batches %s cannot be written; check the path",
                     o->dump_batches);
    return rc;
}

static int train(run *r, const bert_opts *o, cb_err *e) {
    int first, count, root = cb_dist_rank(r->d) == 0, rc = CB_OK;
    cb_model_rows(r->m, &first, &count);
    for (int s = 0; s < o->steps && !rc; s++) {
        batch_rows(r, o, s, first, count);
        double t0 = omp_get_wtime();
        float norm, loss = cb_model_train_step(r->m, r->ids, r->tg, s, &norm);
        double ms = (omp_get_wtime() - t0) * 1e3;
        if (s == 0 && r->dump_err.code) *e = r->dump_err, rc = e->code;
        if (root && !o->quiet) printf("step %d loss %.9g grad_norm %.9g\n", s + 1, loss, norm);
        if (root && r->log)
            fprintf(r->log, "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,"
                            "\"step_ms\":%.3f,\"tokens_per_s\":%.1f}\n", s + 1, loss,
                    cb_lr_at(&r->m->opt.c, s), norm, ms, (double)o->batch * r->T / (ms / 1e3));
    }
    if (!rc && o->save) rc = cb_model_save(r->m, o->save, e);
    if (!rc && o->fill > 0) rc = fill(r, o, e);
    return rc;
}

static void run_free(run *r) {
    if (r->log) fclose(r->log);
    if (r->dump) fclose(r->dump);
    free(r->ids), free(r->tg), free(r->lens), free(r->row);
    cb_model_free(r->m);
    cb_tokens_close(&r->tok);
    cb_tokens_close(&r->val);
    cb_tokenizer_free(&r->tk);
}

int cmd_train_bert(int argc, char **argv) {
    bert_opts o = {.layers = 2, .d_model = 128, .heads = 4, .seq_len = 64, .special_base = -1,
                   .batch = 8, .steps = 100, .mask_prob = 0.15f, .dropout = 0.1f, .seed = 1337,
                   .opt = {.lr = 1e-3f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f,
                           .eps = 1e-6f, .weight_decay = 0.01f, .clip = 1.0f}};
    const cli_flag flags[] = {
        {"model", ARG_STR, &o.model, "bert or roberta here (gpt: the default trainer)"},
        {"data", ARG_STR, &o.data, "training tokens (a file, glob or comma list, as for gpt)"},
        {"val-data", ARG_STR, &o.val_data, "held-out tokens for --fill"},
        {"fill", ARG_INT, &o.fill, "after training, guess a masked word in N held-out sequences (0)"},
        {"bpe-dir", ARG_STR, &o.bpe_dir, "GPT-2 tokenizer files for --fill (" CB_BPE_DIR ")"},
        {"layers", ARG_INT, &o.layers, "encoder blocks (2)"},
        {"d-model", ARG_INT, &o.d_model, "hidden width (128)"},
        {"heads", ARG_INT, &o.heads, "attention heads (4)"},
        {"seq-len", ARG_INT, &o.seq_len, "tokens per sequence, specials included (64)"},
        {"text-vocab", ARG_INT, &o.text_vocab, "the text's vocabulary (default: the file's tokenizer)"},
        {"special-base", ARG_INT, &o.special_base, "first special id, >= the text vocabulary (default: it)"},
        {"mask-prob", ARG_FLOAT, &o.mask_prob, "share of text positions masked (0.15)"},
        {"dropout", ARG_FLOAT, &o.dropout, "hidden dropout, the same mask under every layout (0.1)"},
        {"batch", ARG_INT, &o.batch, "sequences per step over every data-parallel rank (8)"},
        {"steps", ARG_INT, &o.steps, "optimizer steps (100)"},
        {"lr", ARG_FLOAT, &o.opt.lr, "peak learning rate (1e-3)"},
        {"min-lr", ARG_FLOAT, &o.opt.min_lr, "final learning rate of the cosine (1e-4)"},
        {"warmup", ARG_INT, &o.opt.warmup, "linear warm-up steps (0)"},
        {"weight-decay", ARG_FLOAT, &o.opt.weight_decay, "AdamW decay of weights and embeddings (0.01)"},
        {"beta1", ARG_FLOAT, &o.opt.beta1, "AdamW beta1 (0.9)"},
        {"beta2", ARG_FLOAT, &o.opt.beta2, "AdamW beta2 (0.999)"},
        {"eps", ARG_FLOAT, &o.opt.eps, "AdamW epsilon (1e-6)"},
        {"clip", ARG_FLOAT, &o.opt.clip, "global gradient-norm clip, 0 = off (1.0)"},
        {"seed", ARG_U64, &o.seed, "seed of initialisation, lengths and masks (1337)"},
        {"init", ARG_STR, &o.init, "start from this weights file (safetensors)"},
        {"save", ARG_STR, &o.save, "write the final weights (safetensors)"},
        {"log", ARG_STR, &o.log, "JSONL log, one object per step"},
        {"dump-grads", ARG_STR, &o.dump_grads, "write step 1's gradients"},
        {"dump-batches", ARG_STR, &o.dump_batches, "write every step's rows (int32, see below)"},
        {"threads", ARG_INT, &o.threads, "threads (default: OMP_NUM_THREADS or all cores)"},
        {"quiet", ARG_BOOL, &o.quiet, "no progress output"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help = 0;
    for (int i = 0; i < argc; i++) help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
    if (help) {
        cli_usage(stdout, "train", "--model bert|roberta --data TOKENS [flags]", flags, n, EPILOG);
        return 0;
    }
    cli_grad_accum_alias(argc, argv);
    run r = {0};
    cb_err e = {0};
    int ac = argc + 1; /* argv[-1] is the command's name, where cb_dist_init expects a program */
    char **av = argv - 1;
    if (cb_dist_init(&ac, &av, &r.d, &e)) cb_dist_exit(NULL, &e);
    int rc = cli_parse("train", ac - 1, av + 1, flags, n, &help, &e);
    if (!rc && o.threads > 0) omp_set_num_threads(o.threads);
    if (!rc) rc = setup(&r, &o, &e);
    if (!rc) rc = train(&r, &o, &e);
    run_free(&r);
    if (rc) cb_dist_exit(r.d, &e);
    cb_dist_finalize(r.d);
    return 0;
}
