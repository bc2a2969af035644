/* `cubist bench --model bert|roberta`: the MLM training step (hidden
 * and attention-probability dropout 0.1) through the graph engine next
 * to the same model and step in PyTorch (bench/torch_bert.py) in the
 * same invocation: tokens/s, model GFLOP/s
 * and MFU. Rows: uniform random text ids, two token types, full length,
 * round(0.15 T) positions of each sequence masked (targets), the decoder
 * on those rows only in both, AdamW on every parameter in both. */
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

typedef struct bert_bench {
    int layers, d_model, heads, seq_len, batch, vocab, steps, threads, no_torch, kernel_cpu;
    int rounds; /* --rounds: PyTorch's row and cubist's this many times, each side's best kept */
    int vs_gpt; /* --vs-gpt: the GPT benchmark's rows in every round too */
    float attn_dropout;
    const char *model;
} bert_bench;

/* the decoder's rows per sequence: BERT's max_predictions_per_seq, the
 * engine's default (cb_bert_config.max_predictions 0) */
static int predictions(const bert_bench *b) {
    cb_bert_config c = {.seq_len = b->seq_len};
    return cb_bert_predictions(&c);
}

/* FLOPs per token of a step: 6 x the multiply-adds of the linears and of
 * the tied decoder on the rows it runs on (predictions() of each sequence's
 * T), plus attention's two products (12 L C T, as GPT's count) */
static double flops_per_token(const bert_bench *b) {
    double C = b->d_model, L = b->layers, dec = (double)predictions(b) / b->seq_len;
    return 6 * (L * 12 * C * C + C * C + dec * b->vocab * C) + 12 * L * C * b->seq_len;
}

/* PyTorch's tokens/s (bench/torch_bert.py) and the windows of b->steps
 * steps it is the best of (its programs, one window each) */
static int torch_run(const bert_bench *b, double *tps, int *timed, cb_err *e) {
    char args[320];
    snprintf(args, sizeof args, "--model %s --layers %d --d-model %d --heads %d --seq-len %d "
             "--batch %d --vocab %d --steps %d --threads %d --attn-dropout %g --variant "
             "masked_rows --max-predictions %d", b->model, b->layers, b->d_model, b->heads,
             b->seq_len, b->batch, b->vocab, b->steps, b->threads, b->attn_dropout,
             predictions(b));
    const char *keys[2] = {"tokens_per_s", "timed"};
    double v[2];
    int rc = cli_torch_bench("torch_bert.py", args, keys, v, 2, e);
    *tps = v[0], *timed = v[1] >= 1 ? (int)v[1] : 1;
    return rc;
}

/* cubist's tokens/s over b->steps steps after one untimed step, and the
 * milliseconds of each kernel class per step (the profiler's table): the
 * fastest of `windows` windows of b->steps steps (as many as PyTorch's
 * figure is the best of); *first: the first window's tokens/s */
static int cubist_run(const bert_bench *b, cb_dist *d, int windows, double *tps, double *first,
                      size_t *params, double *prof_ms, cb_err *e) {
    int B = b->batch, T = b->seq_len, text = b->vocab - 4, P = predictions(b);
    cb_model *m = cb_model_new(d, B, T);
    cb_bert_config c = {b->layers, b->d_model, b->heads, T, b->vocab, 2,
                        !strcmp(b->model, "roberta"), 0.1f, b->attn_dropout, 0};
    cb_model_declare_bert(m, &c);
    cb_adamw_config opt = {.lr = 1e-4f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f,
                           .eps = 1e-6f, .steps = windows * b->steps + 1};
    int rc = cb_model_build(m, 1, &opt, e);
    int *ids = malloc(sizeof(int) * 2 * B * T), *tg = malloc(sizeof(int) * B * T);
    int *lens = malloc(sizeof(int) * B);
    if (!rc && (!ids || !tg || !lens)) rc = cb_fail(e, CB_ENOMEM, "out of memory for a batch");
    cb_rng r;
    cb_rng_seed(&r, 1);
    double t0 = 0;
    cb_prof prof;
    const cb_kernels *k0 = m->L->k;
    cb_prof_init(&prof, k0);
    prof.thread_cpu = b->kernel_cpu;
    m->L->k = cb_prof_kernels(&prof);
    for (int k = 0; !rc && k < B; k++) lens[k] = T;
    cb_model_set_lengths(m, lens);
    *tps = 0;
    for (int s = 0; !rc && s <= windows * b->steps; s++) {
        if (s >= 1 && (s - 1) % b->steps == 0) { /* a window starts */
            if (s > 1) cli_window_end((double)B * T, b->steps, t0, &prof, tps, first, prof_ms);
            t0 = omp_get_wtime(), cb_prof_reset(&prof);
        }
        for (int i = 0; i < B * T; i++) {
            ids[2 * i] = (int)cb_rng_below(&r, (uint64_t)text);
            ids[2 * i + 1] = i % T >= T / 2;
            tg[i] = -1;
        }
        for (int k = 0; k < B; k++) /* P distinct positions, as the BERT task's masking */
            for (int j = 0, *t = tg + (size_t)k * T; j < P;) {
                int i = (int)cb_rng_below(&r, (uint64_t)T);
                if (t[i] < 0) t[i] = ids[2 * ((size_t)k * T + i)], j++;
            }
        cb_model_train_step(m, ids, tg, s, NULL);
    }
    if (!rc) {
        cli_window_end((double)B * T, b->steps, t0, &prof, tps, first, prof_ms);
        size_t adam;
        cb_model_sizes(m, params, &adam);
    }
    free(ids), free(tg), free(lens);
    m->L->k = k0;
    cb_model_free(m);
    return rc;
}

int cmd_bench_bert(int argc, char **argv) {
    bert_bench b = {.layers = 12, .d_model = 768, .heads = 12, .seq_len = 128, .batch = 8,
                    .vocab = 30522, .steps = 3, .model = "bert", .attn_dropout = 0.1f,
                    .rounds = 1};
    const cli_flag flags[] = {
        {"model", ARG_STR, &b.model, "bert or roberta (the same network)"},
        {"layers", ARG_INT, &b.layers, "encoder blocks (12: BERT-base)"},
        {"d-model", ARG_INT, &b.d_model, "hidden width (768)"},
        {"heads", ARG_INT, &b.heads, "attention heads (12)"},
        {"seq-len", ARG_INT, &b.seq_len, "tokens per sequence (128)"},
        {"batch", ARG_INT, &b.batch, "sequences per step (8)"},
        {"vocab", ARG_INT, &b.vocab, "vocabulary, special ids included (30522)"},
        {"steps", ARG_INT, &b.steps, "timed steps after one warm-up (3)"},
        {"threads", ARG_INT, &b.threads, "threads of both (default: all cores)"},
        {"attn-dropout", ARG_FLOAT, &b.attn_dropout, "dropout of the attention probabilities in "
                                                      "both (0.1; 0: hidden dropout only)"},
        {"no-torch", ARG_BOOL, &b.no_torch, "cubist only"},
        {"rounds", ARG_INT, &b.rounds, "rounds of both rows, alternated, each side's best kept "
                                        "(1): ratios that hold on a busy machine"},
        {"kernel-cpu", ARG_BOOL, &b.kernel_cpu, "kernel times in the calling thread's CPU time "
                                                 "(with --threads 1: load-proof)"},
        {"vs-gpt", ARG_BOOL, &b.vs_gpt, "also `cubist bench --quick`'s rows (a GPT of the same "
                                        "depth, width and heads) in every round: BERT's ratio "
                                        "over the GPT benchmark's, from the same minutes"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help = 0;
    cb_err e = {0};
    int rc = cli_parse("bench", argc, argv, flags, n, &help, &e);
    if (help && !rc) {
        cli_usage(stdout, "bench", "--model bert|roberta [flags]", flags, n,
                  "BERT's masked-language-model training step (forward, backward, AdamW on every\n"
                  "parameter) on random rows (P = round(0.15 T) positions of each sequence\n"
                  "masked, BERT's max_predictions_per_seq), cubist's graph engine and PyTorch\n"
                  "(bench/torch_bert.py --variant masked_rows, the network of\n"
                  "tests/torch/bert_ref.py in float32, each of its programs in turn, the fastest\n"
                  "kept; OMP_WAIT_POLICY=PASSIVE, glibc's huge pages) on one process each, the\n"
                  "same thread count; both run the decoder on the P masked rows of each sequence\n"
                  "only. MFU = tokens/s x FLOPs per token / the sgemm peak, measured at the\n"
                  "run's start as `cubist bench --peak` measures and caches it; FLOPs per\n"
                  "token = 6 x (the linears' multiply-adds + the tied decoder's x P / T)\n"
                  "+ 12 L C T.\n");
        return 0;
    }
    if (!rc && (b.layers < 1 || b.d_model < 1 || b.heads < 1 || b.d_model % b.heads ||
                b.seq_len < 2 || b.batch < 1 || b.vocab < 8 || b.steps < 1 || b.rounds < 1 ||
                !(b.attn_dropout >= 0 && b.attn_dropout < 1) ||
                (strcmp(b.model, "bert") && strcmp(b.model, "roberta"))))
        rc = cb_fail(&e, CB_EINPUT, "--layers, --heads (dividing --d-model), --batch, --steps, "
                                    "--rounds >= 1, --seq-len >= 2, --vocab >= 8, --attn-dropout "
                                    "in [0, 1), --model bert or roberta");
    if (!rc && b.vs_gpt && b.no_torch)
        rc = cb_fail(&e, CB_EINPUT, "--vs-gpt compares two ratios against PyTorch: drop --no-torch");
    if (rc) return cli_fail(&e);
    if (b.threads < 1) b.threads = omp_get_max_threads();
    omp_set_num_threads(b.threads);
    /* PyTorch first: cubist's step is timed in as many windows as PyTorch's
     * figure is the best of (its programs), so that neither side's figure
     * is the best of more tries on a machine whose speed moves */
    double tps = 0, first = 0, ttps = 0, peak = cb_peak_fresh(CB_PREC_FP32), prof[PROF_N] = {0};
    size_t params = 0;
    int windows = 1;
    char *argv0[] = {"bench", NULL}, **av = argv0;
    int ac = 1;
    cb_dist *d;
    if (cb_dist_init(&ac, &av, &d, &e)) return cli_fail(&e);
    double gpt = 0, gpt_torch = 0; /* --vs-gpt: each side's best */
    for (int r = 0; r < b.rounds; r++) { /* --rounds: the rows alternate, each side's best kept */
        double t = 0, tt = 0, f = 0, pr[PROF_N], g = 0, gt = 0;
        if ((!b.no_torch && torch_run(&b, &tt, &windows, &e)) ||
            cubist_run(&b, d, windows, &t, &f, &params, pr, &e) ||
            (b.vs_gpt && cli_bench_gpt_quick(d, b.layers, b.d_model, b.heads, b.threads, peak,
                                             &g, &gt, &e))) {
            cb_dist_finalize(d);
            return cli_fail(&e);
        }
        if (!r) first = f;
        ttps = tt > ttps ? tt : ttps;
        if (t > tps) tps = t, memcpy(prof, pr, sizeof prof);
        gpt = g > gpt ? g : gpt, gpt_torch = gt > gpt_torch ? gt : gpt_torch;
    }
    cb_dist_finalize(d);
    double gf = tps * flops_per_token(&b) / 1e9;
    printf("%s: %d layers, d %d, %d heads, T %d, batch %d, vocab %d, %d threads, %zu parameters\n",
           b.model, b.layers, b.d_model, b.heads, b.seq_len, b.batch, b.vocab, b.threads, params);
    printf("cubist:  %.0f tokens/s, %.2f model GFLOP/s, MFU %.2f%% of %.1f GFLOP/s\n", tps, gf,
           100 * gf / peak, peak);
    if (windows > 1)
        printf("         the fastest of %d windows of %d steps, as PyTorch's figure is the fastest "
               "of %d programs (the first window: %.0f tokens/s)\n",
               windows, b.steps, windows, first);
    if (b.rounds > 1)
        printf("         the best of %d rounds%s\n", b.rounds,
               b.no_torch ? "" : " for each side, PyTorch's and cubist's rows alternated");
    printf("cubist kernels, ms per step:");
    for (int i = 0; i < PROF_N; i++) printf(" %s %.0f", cb_prof_names[i], prof[i]);
    printf("\n");
    if (!b.no_torch)
        printf("PyTorch: %.0f tokens/s, MFU %.2f%%; cubist / PyTorch = %.2f\n", ttps,
               100 * ttps * flops_per_token(&b) / 1e9 / peak, tps / ttps);
    if (b.vs_gpt)
        printf("GPT (%d layers, d %d, %d heads, vocab 50304, T 64, batch 4: `cubist bench "
               "--quick`), in the same round%s: cubist %.1f tokens/s, PyTorch %.1f; cubist / "
               "PyTorch = %.2f\n%s's ratio over the GPT benchmark's: %.2f\n",
               b.layers, b.d_model, b.heads, b.rounds > 1 ? "s, each side's best" : "", gpt,
               gpt_torch, gpt / gpt_torch, b.model, (tps / ttps) / (gpt / gpt_torch));
    return 0;
}
