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
#include "graph/graph.h"

enum { SP_PAD, SP_CLS, SP_SEP, SP_MASK, N_SPECIAL }; /* ids special_base + these */

typedef struct bert_opts {
    const char *model, *data, *log, *save, *init, *dump_grads, *dump_batches;
    int layers, d_model, heads, seq_len, text_vocab, special_base, batch, steps, quiet, threads;
    float mask_prob;
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
    "Parallel flags: --dp --zero --pp --schedule --micro-batches --virtual-stages\n"
    "--partition --recompute (not --tp: the MLM head runs on whole tensors);\n"
    "--grad-accum M is --micro-batches M. Lines `step N loss L grad_norm G`;\n"
    "--log JSONL; --dump-batches F writes each step's rows (int32: T ids, T\n"
    "types, T targets (-1: not masked), length) for the PyTorch test;\n"
    "--dump-grads F step 1's gradients.\n";

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
    cb_tokens tok;
    int roberta, V, T;
    size_t nseq;          /* sequences in one epoch of the stream */
    FILE *log, *dump;
    int *ids, *tg, *lens; /* this rank's rows */
    int *row;             /* one row: 2T ids, T targets, length */
    const char *dump_grads;
    cb_err dump_err;
} run;

/* Global row g of the step stream: its tokens (field 0), types (field 1),
 * targets and length. */
static void make_row(const run *r, const bert_opts *o, uint64_t g, int *ids, int *tg, int *len) {
    int T = r->T, base = o->special_base, text = r->roberta ? T - 2 : T - 3;
    uint64_t seq = g % r->nseq;
    int L = T;
    if (!r->roberta && unif(mix(o->seed) ^ 0x1e57, seq) < 0.1)
        L = 8 + (int)(unif(mix(o->seed) ^ 0x1e58, seq) * (T - 8));
    int n = r->roberta ? text : L - 3, na = n / 2;
    int *t = r->row; /* text tokens */
    cb_tokens_read(&r->tok, seq * text, (size_t)n, t);
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
    for (int i = 0; i < p; i++) {
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
        make_row(r, o, (uint64_t)s * o->batch + k, ids, tg, len);
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

static void on_grads(cb_model *m, int step, void *ctx) {
    run *r = ctx;
    if (step == 0 && r->dump_grads) cb_graph_save_grads(m, r->dump_grads, &r->dump_err);
}

static int check_opts(const bert_opts *o, run *r, cb_err *e) {
    if (!o->data)
        return cb_fail(e, CB_EINPUT, "--model %s needs --data TOKENS (`cubist prepare`)", o->model);
    if (o->layers < 1 || o->d_model < 1 || o->heads < 1 || o->batch < 1 || o->steps < 0 ||
        o->seq_len < 16 || !(o->mask_prob > 0 && o->mask_prob < 1))
        return cb_fail(e, CB_EINPUT, "--layers, --d-model, --heads, --batch >= 1, --seq-len >= "
                                     "16, --steps >= 0 and --mask-prob in (0, 1); fix the flag");
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
    cb_tokens_close(&probe);
    if (o->special_base < 0) o->special_base = r->V;
    if ((rc = check_opts(o, r, e)) || (rc = cb_tokens_open(o->data, r->V, &r->tok, e))) return rc;
    size_t text = (size_t)(r->roberta ? r->T - 2 : r->T - 3);
    r->nseq = r->tok.n / text;
    if (r->nseq < 1)
        return cb_fail(e, CB_EINPUT, "%s: %zu tokens, fewer than one sequence's %zu; use a longer "
                                     "file", o->data, r->tok.n, text);
    r->m = cb_model_new(r->d, o->batch, r->T);
    cb_bert_config c = {o->layers, o->d_model, o->heads, r->T, o->special_base + N_SPECIAL, 2,
                        r->roberta};
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
    return rc;
}

static void run_free(run *r) {
    if (r->log) fclose(r->log);
    if (r->dump) fclose(r->dump);
    free(r->ids), free(r->tg), free(r->lens), free(r->row);
    cb_model_free(r->m);
    cb_tokens_close(&r->tok);
}

/* --grad-accum M is --micro-batches M; --tp is refused by the build */
static void grad_accum_alias(int argc, char **argv) {
    static char mb[] = "--micro-batches";
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--grad-accum")) argv[i] = mb;
}

int cmd_train_bert(int argc, char **argv) {
    bert_opts o = {.layers = 2, .d_model = 128, .heads = 4, .seq_len = 64, .special_base = -1,
                   .batch = 8, .steps = 100, .mask_prob = 0.15f, .seed = 1337,
                   .opt = {.lr = 1e-3f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f,
                           .eps = 1e-6f, .weight_decay = 0.01f, .clip = 1.0f}};
    const cli_flag flags[] = {
        {"model", ARG_STR, &o.model, "bert or roberta here (gpt: the default trainer)"},
        {"data", ARG_STR, &o.data, "training tokens (a file, glob or comma list, as for gpt)"},
        {"layers", ARG_INT, &o.layers, "encoder blocks (2)"},
        {"d-model", ARG_INT, &o.d_model, "hidden width (128)"},
        {"heads", ARG_INT, &o.heads, "attention heads (4)"},
        {"seq-len", ARG_INT, &o.seq_len, "tokens per sequence, specials included (64)"},
        {"text-vocab", ARG_INT, &o.text_vocab, "the text's vocabulary (default: the file's tokenizer)"},
        {"special-base", ARG_INT, &o.special_base, "first special id, >= the text vocabulary (default: it)"},
        {"mask-prob", ARG_FLOAT, &o.mask_prob, "share of text positions masked (0.15)"},
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
    grad_accum_alias(argc, argv);
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
