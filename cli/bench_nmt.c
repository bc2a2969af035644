/* `cubist bench --model nmt`: the translation encoder-decoder's training
 * step (cb_model_declare_nmt: dropout 0.1, the sqrt(d) embedding scale,
 * label smoothing 0.1) through the graph engine next to the same model and
 * step in PyTorch (bench/torch_nmt.py) in the same invocation: real source
 * + target tokens/s, model GFLOP/s and MFU, and cubist's kernel classes.
 * Rows: random ids, row k's source T - k % (T/8) tokens long and its target
 * T - 3k % (T/8) (a length-bucketed batch), the rest padding. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "graph/graph.h"
#include "kernels/peak.h"
#include "kernels/profile.h"
#include "util/rng.h"

typedef struct nmt_bench {
    int layers, d_model, heads, ffn, seq_len, batch, vocab, steps, threads, no_torch, quick;
    int src_tokens, tgt_tokens; /* real tokens a step (the lengths' sums) */
    int rounds; /* --rounds: PyTorch's row and cubist's this many times, each side's best kept */
} nmt_bench;

/* row k's source and target lengths (EOS, BOS included): bench/torch_nmt.py's */
static int src_len(const nmt_bench *b, int k) { return b->seq_len - k % (b->seq_len / 8); }
static int tgt_len(const nmt_bench *b, int k) { return b->seq_len - 3 * k % (b->seq_len / 8); }

/* FLOPs of a step on its real tokens: 6 x the multiply-adds of the linears
 * (an encoder block 12 C^2 a source token; a decoder block 14 C^2 a target
 * token and the cross-attention's keys and values 2 C^2 a source token),
 * the tied output projection (V C a target token) and attention's two
 * products over T keys (12 C T a query, as GPT's count: encoder
 * self-attention, decoder self- and cross-attention) */
static double step_flops(const nmt_bench *b) {
    double C = b->d_model, L = b->layers, T = b->seq_len, V = b->vocab;
    double src = 6 * (L * 12 * C * C + L * 2 * C * C) + 12 * L * C * T;
    double tgt = 6 * (L * 14 * C * C + V * C) + 24 * L * C * T;
    return b->src_tokens * src + b->tgt_tokens * tgt;
}

/* PyTorch's tokens/s, parameter count and the windows of b->steps steps
 * its figure is the best of (its programs, one window each;
 * bench/torch_nmt.py) */
static int torch_run(const nmt_bench *b, double out[3], cb_err *e) {
    char args[256];
    snprintf(args, sizeof args, "--layers %d --d-model %d --heads %d --ffn %d --seq-len %d "
             "--batch %d --vocab %d --steps %d --threads %d", b->layers, b->d_model, b->heads,
             b->ffn, b->seq_len, b->batch, b->vocab, b->steps, b->threads);
    const char *keys[3] = {"tokens_per_s", "params", "timed"};
    return cli_torch_bench("torch_nmt.py", args, keys, out, 3, e);
}

/* one step's rows: ids (source, decoder input) interleaved, targets */
static void fill_rows(const nmt_bench *b, cb_rng *r, int *ids, int *tg) {
    int T = b->seq_len, V = b->vocab, pad = V - 3, bos = V - 2, eos = V - 1;
    for (int k = 0; k < b->batch; k++) {
        int sl = src_len(b, k), tl = tgt_len(b, k);
        int *id = ids + (size_t)k * 2 * T, *t = tg + (size_t)k * T;
        for (int j = 0; j < T; j++) {
            id[2 * j] = j < sl - 1 ? (int)cb_rng_below(r, (uint64_t)pad) : j == sl - 1 ? eos : pad;
            t[j] = j < tl - 1 ? (int)cb_rng_below(r, (uint64_t)pad) : j == tl - 1 ? eos : pad;
        }
        for (int j = 0; j < T; j++) id[2 * j + 1] = j == 0 ? bos : j < tl ? t[j - 1] : pad;
    }
}

/* cubist's tokens/s over b->steps steps after one untimed step, its
 * parameters (the fixed position table left out) and the milliseconds of
 * each kernel class per step: the fastest of `windows` windows of b->steps
 * steps (as many as PyTorch's figure is the best of); *first: the first
 * window's tokens/s */
static int cubist_run(const nmt_bench *b, cb_dist *d, int windows, double *tps, double *first,
                      size_t *params, double *prof_ms, cb_err *e) {
    int B = b->batch, T = b->seq_len;
    double tok = b->src_tokens + b->tgt_tokens; /* real tokens a step */
    cb_model *m = cb_model_new(d, B, T);
    cb_nmt_config c = {.enc_layers = b->layers, .dec_layers = b->layers, .d_model = b->d_model,
                       .n_head = b->heads, .d_ff = b->ffn, .vocab = b->vocab, .smoothing = 0.1f,
                       .pad = b->vocab - 3, .dropout = 0.1f, .emb_scale = 1};
    int *ids = malloc(sizeof(int) * 3 * B * T), *tg = ids ? ids + 2 * B * T : NULL;
    int *lens = malloc(sizeof(int) * 2 * B);
    for (int k = 0; lens && k < B; k++) lens[k] = src_len(b, k), lens[B + k] = tgt_len(b, k);
    if (m) {
        cb_model_declare_nmt(m, &c);
        cb_model_set_lengths_set(m, 0, lens);
        cb_model_set_lengths_set(m, 1, lens ? lens + B : NULL);
    }
    cb_adamw_config opt = {.lr = 1e-4f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.98f,
                           .eps = 1e-9f, .steps = windows * b->steps + 1};
    int rc = cb_model_build(m, 1, &opt, e);
    if (!rc && (!ids || !lens)) rc = cb_fail(e, CB_ENOMEM, "out of memory for a batch");
    cb_rng r;
    cb_rng_seed(&r, 1);
    double t0 = 0;
    cb_prof prof;
    const cb_kernels *k0 = rc ? NULL : m->L->k;
    if (!rc) cb_prof_init(&prof, k0), m->L->k = cb_prof_kernels(&prof);
    *tps = 0;
    for (int s = 0; !rc && s <= windows * b->steps; s++) {
        if (s >= 1 && (s - 1) % b->steps == 0) { /* a window starts */
            if (s > 1) cli_window_end(tok, b->steps, t0, &prof, tps, first, prof_ms);
            t0 = omp_get_wtime(), cb_prof_reset(&prof);
        }
        fill_rows(b, &r, ids, tg);
        cb_model_train_step(m, ids, tg, s, NULL);
    }
    if (!rc) {
        cli_window_end(tok, b->steps, t0, &prof, tps, first, prof_ms);
        size_t adam;
        cb_model_sizes(m, params, &adam);
        *params -= (size_t)T * b->d_model; /* emb.pos: fixed, a buffer in PyTorch */
        m->L->k = k0;
    }
    free(ids), free(lens);
    cb_model_free(m);
    return rc;
}

static void print_result(const nmt_bench *b, double tps, double first, int windows, double ttps,
                         size_t params, const double *prof, double peak) {
    double ftok = step_flops(b) / (b->src_tokens + b->tgt_tokens), gf = tps * ftok / 1e9;
    printf("nmt: %d + %d layers, d %d, %d heads, FFN %d, vocab %d, T %d, batch %d (%d + %d real "
           "tokens), %d threads, %zu parameters\n", b->layers, b->layers, b->d_model, b->heads,
           b->ffn, b->vocab, b->seq_len, b->batch, b->src_tokens, b->tgt_tokens, b->threads, params);
    printf("cubist:  %.0f tokens/s, %.2f model GFLOP/s, MFU %.2f%% of %.1f GFLOP/s\n", tps, gf,
           100 * gf / peak, peak);
    if (windows > 1)
        printf("         the fastest of %d windows of %d steps, as PyTorch's figure is the fastest "
               "of %d programs (the first window: %.0f tokens/s)\n",
               windows, b->steps, windows, first);
    printf("cubist kernels, ms per step:");
    for (int i = 0; i < PROF_N; i++) printf(" %s %.0f", cb_prof_names[i], prof[i]);
    printf("\n");
    if (!b->no_torch)
        printf("PyTorch: %.0f tokens/s, MFU %.2f%%; cubist / PyTorch = %.2f\n", ttps,
               100 * ttps * ftok / 1e9 / peak, tps / ttps);
}

static const char HELP[] =
    "The translation encoder-decoder's training step (forward, backward, AdamW on every\n"
    "parameter; post-LN, ReLU FFN, one shared embedding scaled by sqrt(d) in front of\n"
    "sinusoids, dropout 0.1, label smoothing 0.1), cubist's graph engine and PyTorch\n"
    "(bench/torch_nmt.py: the network as an nn.Module in float32, AdamW(foreach), the\n"
    "faster of two attention forms) on one process each, the same thread count.\n"
    "Defaults: Transformer-base (6 + 6 blocks, d 512, 8 heads, FFN 2048) at GPT-2 BPE's\n"
    "vocabulary + 3 (50260, `prepare --pairs --tokenizer gpt2`) and T 128 a side (the\n"
    "Bible pairs' BPE verses: 32 and 47 tokens on average, 113 and 180 at most). Row k\n"
    "holds T - k % (T/8) source and T - 3k % (T/8) target tokens, the rest padding.\n"
    "tokens/s counts the real source + target tokens; MFU = tokens/s x model FLOPs per\n"
    "token / the sgemm peak, measured at the run's start as `cubist bench --peak` does;\n"
    "a step's FLOPs = 6 x the linears' and the output projection's multiply-adds +\n"
    "12 C T per query of each attention.\n"
    "--quick: 2 + 2 blocks, d 128, 4 heads, FFN 512, vocabulary 259 (bytes), T 32,\n"
    "batch 8, 2 steps (seconds; the other flags given still apply).\n"
    "On a shared machine run it under OMP_WAIT_POLICY=PASSIVE (PyTorch always is):\n"
    "spinning OpenMP threads lose their cores to other processes at every barrier.\n";

int cmd_bench_nmt(int argc, char **argv) {
    nmt_bench b = {.layers = 6, .d_model = 512, .heads = 8, .ffn = 2048, .seq_len = 128,
                   .batch = 8, .vocab = 50260, .steps = 3, .rounds = 1};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--quick"))
            b = (nmt_bench){.layers = 2, .d_model = 128, .heads = 4, .ffn = 512, .seq_len = 32,
                            .batch = 8, .vocab = 259, .steps = 2, .rounds = 1};
    const char *model = NULL;
    const cli_flag flags[] = {
        {"model", ARG_STR, &model, "nmt"},
        {"quick", ARG_BOOL, &b.quick, "a small model for a smoke run (below)"},
        {"layers", ARG_INT, &b.layers, "encoder blocks, and as many decoder blocks (6)"},
        {"d-model", ARG_INT, &b.d_model, "hidden width (512)"},
        {"heads", ARG_INT, &b.heads, "attention heads (8)"},
        {"ffn", ARG_INT, &b.ffn, "feed-forward width (2048)"},
        {"seq-len", ARG_INT, &b.seq_len, "positions a side (128)"},
        {"batch", ARG_INT, &b.batch, "pairs per step (8)"},
        {"vocab", ARG_INT, &b.vocab, "vocabulary, the three specials included (50260)"},
        {"steps", ARG_INT, &b.steps, "timed steps after one warm-up (3)"},
        {"threads", ARG_INT, &b.threads, "threads of both (default: all cores)"},
        {"no-torch", ARG_BOOL, &b.no_torch, "cubist only"},
        {"rounds", ARG_INT, &b.rounds, "rounds of both rows, alternated, each side's best kept "
                                        "(1): ratios that hold on a busy machine"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help = 0;
    cb_err e = {0};
    int rc = cli_parse("bench", argc, argv, flags, n, &help, &e);
    if (help && !rc) {
        cli_usage(stdout, "bench", "--model nmt [--quick] [flags]", flags, n, HELP);
        return 0;
    }
    if (!rc && (b.layers < 1 || b.ffn < 1 || b.seq_len < 8 || b.batch < 1 || b.vocab < 8 ||
                b.steps < 1 || b.rounds < 1))
        rc = cb_fail(&e, CB_EINPUT, "--layers, --ffn, --batch, --steps, --rounds >= 1, --seq-len "
                                    ">= 8 and --vocab >= 8; fix the flag");
    if (!rc) rc = cb_heads_check(b.heads, b.d_model, &e);
    if (rc) return cli_fail(&e);
    if (b.threads < 1) b.threads = omp_get_max_threads();
    omp_set_num_threads(b.threads);
    for (int k = 0; k < b.batch; k++) b.src_tokens += src_len(&b, k), b.tgt_tokens += tgt_len(&b, k);
    /* PyTorch first: cubist's step is timed in as many windows as PyTorch's
     * figure is the best of (its programs) */
    double tps = 0, first = 0, tr[3] = {0, 0, 1}, peak = cb_peak_fresh(CB_PREC_FP32), prof[PROF_N] = {0};
    double ttps = 0;
    size_t params = 0;
    int windows = 1, rounds = b.rounds;
    char *argv0[] = {"bench", NULL}, **av = argv0;
    int ac = 1;
    cb_dist *d;
    if (cb_dist_init(&ac, &av, &d, &e)) return cli_fail(&e);
    for (int r = 0; r < rounds; r++) { /* --rounds: the rows alternate, each side's best kept */
        double t = 0, f = 0, pr[PROF_N];
        rc = !b.no_torch ? torch_run(&b, tr, &e) : CB_OK;
        windows = tr[2] >= 1 ? (int)tr[2] : 1;
        if (!rc) rc = cubist_run(&b, d, windows, &t, &f, &params, pr, &e);
        if (rc) {
            cb_dist_finalize(d);
            return cli_fail(&e);
        }
        if (!r) first = f;
        ttps = tr[0] > ttps ? tr[0] : ttps;
        if (t > tps) tps = t, memcpy(prof, pr, sizeof prof);
    }
    cb_dist_finalize(d);
    if (!b.no_torch && fabs(tr[1] - (double)params) > 0.5) {
        cb_fail(&e, CB_EINTERNAL, "PyTorch's model has %.0f parameters, cubist's %zu: the two "
                                  "benchmarks do not run the same model", tr[1], params);
        return cli_fail(&e);
    }
    print_result(&b, tps, first, windows, ttps, params, prof, peak);
    if (rounds > 1)
        printf("the best of %d rounds%s\n", rounds,
               b.no_torch ? "" : " for each side, PyTorch's and cubist's rows alternated");
    return 0;
}
