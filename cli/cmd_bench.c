/* `cubist bench`: a training step of GPT-2 124M next to PyTorch on the same
 * model in the same invocation, and `--peak`: the sgemm rate MFU is
 * measured against. */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "kernels/peak.h"
#include "kernels/profile.h"
#include "graph/graph.h"

char *openblas_get_corename(void);

#define MAX_SEQ_LENS 8

typedef struct bench_opts {
    int layers, d_model, heads, vocab, ctx, batch, steps, threads, quick, peak_only, json, no_torch;
    int graph;      /* --graph: also the GPT declared through the public API */
    int kernel_cpu; /* --kernel-cpu: kernels timed in the calling thread's CPU time */
    cb_dist *dist;  /* its process grid (one process) */
    const char *seq_lens, *torch_script;
    int T[MAX_SEQ_LENS], nT; /* --seq-lens parsed */
    int rounds;     /* --rounds: best of this many interleaved measurements */
    int accum;      /* --grad-accum: micro-batches of --batch sequences per optimizer step */
    const char *precision; /* --precision: bf16 adds the bf16 rows to fp32's */
    int bf16;
    double peak_again; /* --peak-again: seconds of a length's rows after which the peaks are
                          measured again */
} bench_opts;

typedef struct bench_result {
    int T;
    size_t params; /* cubist's model; PyTorch's must be the same */
    double tokens_per_s, gflops, mfu, step_ms, fwd_ms, bwd_ms, opt_ms, prof[PROF_N];
    double rnd[CB_RND_N]; /* bf16 rounding passes per step, ms (kernels.h) */
    double torch_tokens_per_s;
    double graph_tokens_per_s; /* --graph */
    int windows;               /* cubist's timed windows, the best kept */
    double first_tokens_per_s; /* cubist's first window */
    double rt_ns[2]; /* the threads' cache-line round trip before and after the length's rows,
                        NAN with one thread (cb_core_round_trip) */
    double win_rt_ns; /* the same just before cubist's fastest window */
} bench_result;

/* --precision bf16: cubist's bf16 step (MFU against the bf16 GEMM peak) and
 * PyTorch's under bf16 autocast, beside the fp32 rows */
typedef struct bench_bf16 {
    double tokens_per_s, gflops, mfu, step_ms, prof[PROF_N], torch_tokens_per_s;
    double rnd[CB_RND_N];
    int windows;
    double first_tokens_per_s;
    double win_rt_ns; /* the cores' round trip just before the fastest window (bench_result's) */
} bench_bf16;


void cli_bench_file(char *buf, size_t n, const char *name) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(buf, n, "%s/../bench/%s", exe, name);
}

/* One line of the PyTorch script's output: its JSON figures (tokens/s,
 * parameters, the windows its figure is the best of), or anything else (a
 * traceback), of which the last non-empty line is kept for the error
 * message. */
static void torch_line(const char *line, double *tps, double *params, int *timed, char *last,
                       size_t cap) {
    const char *k = strstr(line, "\"tokens_per_s\":"), *n = strstr(line, "\"params\":");
    const char *w = strstr(line, "\"timed\":");
    if (line[0] == '{' && k && n) {
        *tps = atof(k + 15);
        *params = atof(n + 9);
        *timed = w ? atoi(w + 8) : 1;
        return;
    }
    if (line[0] != '\n') snprintf(last, cap, "%.*s", (int)strcspn(line, "\n"), line);
}

/* Runs the PyTorch benchmark at its best settings (OMP_WAIT_POLICY=PASSIVE,
 * huge pages as cubist's buffers have (CLI_TORCH_HUGEPAGES), OpenBLAS's own core detection, the fastest of its program variants in
 * this run: --variant best) on the same model (context ctx, so wpe has
 * the same rows): its tokens/s into *out, its parameter count into
 * *nparams (same_model compares it with cubist's) and the windows its
 * figure is the best of into *timed. A failure is an error carrying the
 * script's last line. */
static int torch_bench(const bench_opts *b, int T, int bf16, double *out, double *nparams,
                       int *timed, cb_err *e) {
    char cmd[2048], line[4096], last[400] = "no output";
    snprintf(cmd, sizeof cmd,
             "OMP_WAIT_POLICY=PASSIVE " CLI_TORCH_HUGEPAGES " /usr/bin/python3 '%s' --layers %d "
             "--d-model %d --heads %d --vocab %d --ctx %d --batch %d --seq-len %d --threads %d "
             "--grad-accum %d --steps %d --variant best%s 2>&1",
             b->torch_script, b->layers, b->d_model, b->heads, b->vocab, b->ctx, b->batch, T,
             b->threads, b->accum, b->steps, bf16 ? " --bf16" : "");
    FILE *p = popen(cmd, "r");
    if (!p) return cb_fail(e, CB_ESYS, "cannot start /usr/bin/python3 for the PyTorch benchmark");
    double tps = 0, params = 0;
    *timed = 1;
    while (fgets(line, sizeof line, p)) torch_line(line, &tps, &params, timed, last, sizeof last);
    int st = pclose(p);
    if (st != 0 || !(tps > 0))
        return cb_fail(e, CB_ESYS, "the PyTorch benchmark failed (status %d): %s; install "
                                   "python3-torch (make deps), fix --torch-script, or pass --no-torch",
                       WIFEXITED(st) ? WEXITSTATUS(st) : st, last);
    *out = tps, *nparams = params;
    return CB_OK;
}

/* PyTorch's model must be cubist's: the same parameter count */
static int same_model(const bench_opts *b, double torch_params, size_t params, cb_err *e) {
    if ((size_t)torch_params == params) return CB_OK;
    return cb_fail(e, CB_EINTERNAL,
                   "PyTorch's model has %.0f parameters, cubist's %zu: the two "
                   "benchmarks do not run the same model; check %s",
                   torch_params, params, b->torch_script);
}

/* tokens of one optimizer step: every micro-batch's */
static size_t step_tokens(const bench_opts *b, int T) {
    return (size_t)b->batch * b->accum * T;
}

/* The benchmark's model: the GPT of b as a graph of a step of batch x accum
 * sequences of T tokens (accum micro-batches, b->dist's --micro-batches),
 * and its step's token ids and targets (a fixed hash of the position). */
static int bench_model(const bench_opts *b, int T, cb_model **m, int **ids, int windows,
                       cb_err *e) {
    cb_gpt_config c = {b->layers, b->d_model, b->heads, b->ctx, b->vocab};
    cb_adamw_config opt = {.lr = 6e-4f, .min_lr = 6e-5f, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-8f, .weight_decay = 0.1f, .clip = 1.0f, .warmup = 1,
                           .steps = windows * b->steps + 1};
    b->dist->L->k = cb_kernels_default(); /* the table cb_kernels_select installed last */
    *m = cb_model_new(b->dist, b->batch * b->accum, T);
    if (*m) cb_model_declare_gpt(*m, &c);
    int rc = cb_model_build(*m, 1337, &opt, e);
    size_t n = step_tokens(b, T);
    *ids = malloc(sizeof(int) * 2 * n);
    if (!rc && !*ids) rc = cb_fail(e, CB_ENOMEM, "out of memory for benchmark tokens");
    for (size_t i = 0; !rc && i < n; i++) {
        (*ids)[i] = (int)((i * 2654435761u) % b->vocab);
        (*ids)[n + i] = (int)(((i + 1) * 2654435761u) % b->vocab);
    }
    return rc;
}

/* Where the threads' cores sit now (a VM's hypervisor moves them): their
 * cache-line round trip in ns, NAN with one thread */
static double cores_rt_ns(const bench_opts *b) {
    return b->threads > 1 ? 1e9 * cb_core_round_trip() : NAN;
}

/* cubist's step (the engine `cubist train` runs), timed per phase and per
 * kernel after a warm-up step that touches every buffer, in `windows`
 * windows of b->steps steps: the fastest window's figures (docs/cli.md,
 * Matched windows) */
static int bench_cubist_with(const bench_opts *b, int T, double peak, int windows, bench_result *r,
                             cb_err *e) {
    cb_model *m = NULL;
    int *ids = NULL;
    int rc = bench_model(b, T, &m, &ids, windows, e);
    if (rc) {
        cb_model_free(m), free(ids);
        return rc;
    }
    size_t n = step_tokens(b, T);
    cb_layout *L = m->L;
    const cb_kernels *k0 = L->k;
    cb_prof prof;
    cb_prof_init(&prof, k0);
    prof.thread_cpu = b->kernel_cpu;
    L->k = cb_prof_kernels(&prof);
    cb_gpt_config c = {b->layers, b->d_model, b->heads, b->ctx, b->vocab};
    cb_model_train_step(m, ids, ids + n, 0, NULL);
    for (int w = 0, s = 1; w < windows; w++) {
        cb_model_step_info in, sum = {0};
        double rt = cores_rt_ns(b); /* where the cores sat for this window */
        cb_prof_reset(&prof);
        double rnd0[CB_RND_N], rnd[CB_RND_N];
        cb_kernels_bf16_round_ms(rnd0);
        for (int k = 0; k < b->steps; k++, s++) {
            cb_model_train_step(m, ids, ids + n, s, NULL);
            cb_model_last_step(m, &in);
            sum.step_ms += in.step_ms, sum.forward_ms += in.forward_ms;
            sum.backward_ms += in.backward_ms, sum.update_ms += in.update_ms;
        }
        double tps = (double)n / (sum.step_ms / b->steps / 1e3);
        if (w == 0) r->first_tokens_per_s = tps;
        if (w > 0 && tps <= r->tokens_per_s) continue;
        r->step_ms = sum.step_ms / b->steps;
        r->fwd_ms = sum.forward_ms / b->steps;
        r->bwd_ms = sum.backward_ms / b->steps;
        r->opt_ms = sum.update_ms / b->steps;
        for (int i = 0; i < PROF_N; i++) r->prof[i] = cb_prof_ms(&prof, i) / b->steps;
        cb_kernels_bf16_round_ms(rnd);
        for (int i = 0; i < CB_RND_N; i++) r->rnd[i] = (rnd[i] - rnd0[i]) / b->steps;
        r->tokens_per_s = tps, r->win_rt_ns = rt;
    }
    L->k = k0;
    size_t adam;
    r->T = T;
    r->windows = windows;
    cb_model_sizes(m, &r->params, &adam);
    r->gflops = r->tokens_per_s * cb_gpt_flops_per_token(&c, T) / 1e9;
    r->mfu = r->gflops / peak;
    cb_model_free(m);
    free(ids);
    return CB_OK;
}

static int bench_cubist(const bench_opts *b, int T, double peak, int windows, bench_result *r,
                        cb_err *e) {
    int rc = cb_kernels_select(CB_PREC_FP32, e);
    return rc ? rc : bench_cubist_with(b, T, peak, windows, r, e);
}

/* The bf16 row: the same step with the bf16 kernel table installed. */
static int bench_cubist_bf16(const bench_opts *b, int T, double peak, int windows, bench_bf16 *r,
                             size_t *params, cb_err *e) {
    int rc = cb_kernels_select(CB_PREC_BF16, e);
    bench_result x = {0};
    if (!rc) rc = bench_cubist_with(b, T, peak, windows, &x, e);
    cb_kernels_select(CB_PREC_FP32, e);
    r->tokens_per_s = x.tokens_per_s, r->gflops = x.gflops, r->mfu = x.mfu, r->step_ms = x.step_ms;
    r->windows = x.windows, r->first_tokens_per_s = x.first_tokens_per_s, *params = x.params;
    r->win_rt_ns = x.win_rt_ns;
    memcpy(r->prof, x.prof, sizeof r->prof);
    memcpy(r->rnd, x.rnd, sizeof r->rnd);
    return rc;
}

/* The same step through the public API only (--graph): tokens/s into
 * r->graph_tokens_per_s, timed around the calls. */
static int bench_graph(const bench_opts *b, int T, bench_result *r, cb_err *e) {
    cb_model *m = NULL;
    int *ids = NULL;
    int rc = bench_model(b, T, &m, &ids, 1, e);
    size_t n = step_tokens(b, T);
    double ms = 0;
    for (int s = 0; !rc && s <= b->steps; s++) { /* step 0 warms up */
        double t0 = omp_get_wtime() * 1e3;
        cb_model_train_step(m, ids, ids + n, s, NULL);
        if (s) ms += omp_get_wtime() * 1e3 - t0;
    }
    if (!rc) r->graph_tokens_per_s = (double)n * b->steps / (ms / 1e3);
    free(ids);
    cb_model_free(m);
    return rc;
}

/* cubist's windows, when more than one (as many as PyTorch's figure is the
 * best of) */
static void print_windows(const bench_opts *b, int windows, double first) {
    if (windows > 1)
        printf("           the fastest of %d windows of %d steps, as PyTorch's figure is the "
               "fastest of %d programs (the first window: %.1f tokens/s)\n",
               windows, b->steps, windows, first);
}

static void print_result(const bench_opts *b, const bench_result *r, double peak) {
    printf("GPT-2 %dL d%d %dH V%d context %d (%zu parameters)  B=%d T=%d", b->layers, b->d_model,
           b->heads, b->vocab, b->ctx, r->params, b->batch, r->T);
    if (b->accum > 1)
        printf(" x %d micro-batches (%zu tokens an optimizer step)", b->accum, step_tokens(b, r->T));
    printf("  fp32, %d threads\n", b->threads);
    printf("  cubist   %8.1f tokens/s  %7.1f model GFLOP/s  MFU %5.1f%% of %.0f  step %.0f ms\n",
           r->tokens_per_s, r->gflops, 100 * r->mfu, peak, r->step_ms);
    print_windows(b, r->windows, r->first_tokens_per_s);
    if (!isnan(r->rt_ns[0]))
        printf("           the threads' cores: a cache line's round trip %.0f ns before the "
               "fastest window (the length's rows: %.0f ns before, %.0f after)\n",
               r->win_rt_ns, r->rt_ns[0], r->rt_ns[1]);
    printf("           forward %.0f ms, backward %.0f ms, optimizer %.0f ms | by kernel:",
           r->fwd_ms, r->bwd_ms, r->opt_ms);
    for (int i = 0; i < PROF_N; i++) printf(" %s %.0f", cb_prof_names[i], r->prof[i]);
    printf(" ms\n");
    if (b->graph)
        printf("  graph    %8.1f tokens/s  (the same step timed around the public API's calls)\n"
               "  ratio    %8.2fx the above\n",
               r->graph_tokens_per_s, r->graph_tokens_per_s / r->tokens_per_s);
    if (!b->no_torch)
        printf("  PyTorch  %8.1f tokens/s  (same %zu parameters; fastest variant, "
               "OMP_WAIT_POLICY=PASSIVE, the same OpenBLAS kernels)\n  ratio    %8.2fx PyTorch\n",
               r->torch_tokens_per_s, r->params, r->tokens_per_s / r->torch_tokens_per_s);
}

static void print_bf16(const bench_opts *b, const bench_result *f, const bench_bf16 *r,
                       double peak) {
    printf("  bf16     %8.1f tokens/s  %7.1f model GFLOP/s  MFU %5.1f%% of the bf16 GEMM's %.0f  "
           "step %.0f ms (%s)\n           by kernel:",
           r->tokens_per_s, r->gflops, 100 * r->mfu, peak, r->step_ms, cb_kernels_bf16_note());
    for (int i = 0; i < PROF_N; i++) printf(" %s %.0f", cb_prof_names[i], r->prof[i]);
    printf(" ms\n           of which rounding to bf16: activations %.1f, again in backward %.1f, "
           "gradients %.1f, weights %.1f ms\n",
           r->rnd[CB_RND_ACT_FWD], r->rnd[CB_RND_ACT_BWD], r->rnd[CB_RND_GRAD],
           r->rnd[CB_RND_WEIGHT]);
    print_windows(b, r->windows, r->first_tokens_per_s);
    if (!isnan(r->win_rt_ns))
        printf("           the threads' cores: a cache line's round trip %.0f ns before the "
               "fastest window\n", r->win_rt_ns);
    printf("  ratio    %8.2fx cubist fp32\n", r->tokens_per_s / f->tokens_per_s);
    if (!b->no_torch)
        printf("  PyTorch bf16 autocast %8.1f tokens/s\n  ratio    %8.2fx PyTorch bf16 autocast\n",
               r->torch_tokens_per_s, r->tokens_per_s / r->torch_tokens_per_s);
}

/* A PyTorch figure, null when --no-torch left it unmeasured. */
static void json_torch(const char *key, double v, int measured) {
    if (measured) printf(",\"%s\":%.3f", key, v);
    else printf(",\"%s\":null", key);
}

/* a round trip in ns, null when not measured (one thread) or when every
 * trip of the probe timed out (NAN) */
static void json_ns(double ns) {
    if (isnan(ns)) printf("null");
    else printf("%.1f", ns);
}

static void print_json(const bench_opts *b, const bench_result *r, const bench_bf16 *r16, int n,
                       double peak, double peak_bf16) {
    const bench_result *f = &r[0];
    int torch = !b->no_torch;
    printf("{\"tokens_per_s\":%.2f,\"model_gflops\":%.2f,\"mfu\":%.4f,\"peak_gflops\":%.1f,"
           "\"params\":%zu,\"T\":%d,\"batch\":%d,\"grad_accum\":%d",
           f->tokens_per_s, f->gflops, f->mfu, peak, f->params, f->T, b->batch, b->accum);
    json_torch("pytorch_tokens_per_s", f->torch_tokens_per_s, torch);
    json_torch("ratio_vs_pytorch", torch ? f->tokens_per_s / f->torch_tokens_per_s : 0, torch);
    printf(",\"runs\":[");
    for (int i = 0; i < n; i++) {
        printf("%s{\"T\":%d,\"tokens_per_s\":%.2f,\"model_gflops\":%.2f,\"mfu\":%.4f,"
               "\"step_ms\":%.1f,\"windows\":%d,\"first_tokens_per_s\":%.2f",
               i ? "," : "", r[i].T, r[i].tokens_per_s, r[i].gflops, r[i].mfu, r[i].step_ms,
               r[i].windows, r[i].first_tokens_per_s);
        json_torch("pytorch_tokens_per_s", r[i].torch_tokens_per_s, torch);
        if (b->threads < 2) printf(",\"round_trip_ns\":null");
        else {
            printf(",\"round_trip_ns\":[");
            json_ns(r[i].rt_ns[0]), printf(","), json_ns(r[i].rt_ns[1]), printf("]");
        }
        printf(",\"window_round_trip_ns\":"), json_ns(r[i].win_rt_ns);
        for (int k = 0; k < PROF_N; k++) printf(",\"%s_ms\":%.1f", cb_prof_names[k], r[i].prof[k]);
        if (b->bf16) {
            printf(",\"bf16\":{\"tokens_per_s\":%.2f,\"model_gflops\":%.2f,\"mfu\":%.4f,"
                   "\"peak_gflops\":%.1f,\"step_ms\":%.1f,\"windows\":%d,"
                   "\"first_tokens_per_s\":%.2f",
                   r16[i].tokens_per_s, r16[i].gflops, r16[i].mfu, peak_bf16, r16[i].step_ms,
                   r16[i].windows, r16[i].first_tokens_per_s);
            json_torch("pytorch_tokens_per_s", r16[i].torch_tokens_per_s, torch);
            printf(",\"window_round_trip_ns\":"), json_ns(r16[i].win_rt_ns);
            for (int k = 0; k < PROF_N; k++)
                printf(",\"%s_ms\":%.1f", cb_prof_names[k], r16[i].prof[k]);
            printf(
                ",\"round_ms\":{\"act_fwd\":%.2f,\"act_bwd\":%.2f,\"grad\":%.2f,\"weight\":%.2f}}",
                r16[i].rnd[CB_RND_ACT_FWD], r16[i].rnd[CB_RND_ACT_BWD], r16[i].rnd[CB_RND_GRAD],
                r16[i].rnd[CB_RND_WEIGHT]);
        }
        printf("}");
    }
    printf("]}\n");
}

/* The MFU peak, measured as `cubist train` would and written to its cache,
 * so that train's MFU is against this figure; with --peak or --precision
 * bf16 also the bf16 GEMM's (*bf16, else 0). With --peak only this prints. */
static const char *peak_how(const cb_peak_info *i) {
    return i->clean ? "best of the windows whose threads held their CPUs, by the wall clock"
                    : "no window had its threads on their CPUs (a busy machine): the best window "
                      "per second on a CPU";
}

/* gflops written to precision p's cache, its path into path: "" when
 * none was written (no cache directory, or the write failed; the lines
 * then say "(nowhere)"), the reason warned of on stderr */
static void cache_peak(cb_precision p, const char *what, double gflops, char *path, size_t cap) {
    cb_err e = {0};
    if (!cb_peak_cache_path(p, path, cap) || cb_peak_store(p, gflops, &e)) {
        fprintf(stderr, "cubist: warning: %s is not cached: %s\n", what,
                path[0] ? e.msg : "set XDG_CACHE_HOME or HOME");
        path[0] = 0;
    }
}

static double measure_peak(const bench_opts *b, double *bf16) {
    cb_peak_info si, bi = {0};
    double peak = cb_peak_measure(&si);
    *bf16 = b->bf16 || b->peak_only ? cb_peak_measure_bf16(&bi) : 0;
    char path[4200] = "", path16[4200] = "";
    cache_peak(CB_PREC_FP32, "the peak", peak, path, sizeof path);
    if (*bf16 > 0) cache_peak(CB_PREC_BF16, "the bf16 peak", *bf16, path16, sizeof path16);
    if (b->json && b->peak_only)
        printf("{\"peak_gflops\":%.1f,\"threads\":%d,\"blas_core\":\"%s\",\"sgemm_n\":%d,"
               "\"cache\":\"%s\",\"bf16_gemm_gflops\":%.1f,\"wall_gflops\":%.1f,"
               "\"bf16_wall_gflops\":%.1f,\"held\":%.3f,\"bf16_held\":%.3f,\"clean\":%s,"
               "\"bf16_clean\":%s,\"bf16_kernel\":\"%s\",\"bf16_other_gflops\":%.1f,"
               "\"bf16_cache\":\"%s\"}\n",
               peak, b->threads, openblas_get_corename(), CB_PEAK_N, path, *bf16, si.wall_gflops,
               bi.wall_gflops, si.held, bi.held, si.clean ? "true" : "false",
               bi.clean ? "true" : "false", bi.form ? bi.form : "", bi.other_gflops, path16);
    else if (!b->json)
        printf("sgemm peak %.1f GFLOP/s: %d^3 sgemm on %d threads, OpenBLAS kernels %s; cached "
               "in %s\n  %s; by the wall clock %.1f, the threads on a CPU %.0f%% of the time\n",
               peak, CB_PEAK_N, b->threads, cb_blas_note(), path[0] ? path : "(nowhere)",
               peak_how(&si), si.wall_gflops, 100 * si.held);
    if (*bf16 > 0 && !b->json)
        printf("bf16 GEMM peak %.1f GFLOP/s: %d^3 oneDNN bf16 matmul (fp32 result) on %d threads, "
               "%.2fx sgemm; %s; cached in %s\n  the fastest of oneDNN's forms: %s (the next, %s: %.1f); "
               "%s; by the wall clock %.1f, the threads on a CPU %.0f%% of the time\n",
               *bf16, CB_PEAK_N, b->threads, *bf16 / peak, cb_kernels_bf16_note(),
               path16[0] ? path16 : "(nowhere)", bi.form, bi.other_form, bi.other_gflops,
               peak_how(&bi), bi.wall_gflops, 100 * bi.held);
    return peak;
}

/* Every row at T once, into r and r16: each PyTorch row first, then
 * cubist's in as many windows of --steps steps as PyTorch's figure is the
 * best of (its programs, one window each; docs/cli.md, Matched windows),
 * so that neither side's figure is the best of more tries on a machine
 * whose speed moves between them. */
static int measure_T(const bench_opts *b, int T, double peak, double peak_bf16, bench_result *r,
                     bench_bf16 *r16, cb_err *e) {
    double tp = 0, tp16 = 0;
    int w = 1, w16 = 1;
    size_t p16 = 0;
    return (!b->no_torch && torch_bench(b, T, 0, &r->torch_tokens_per_s, &tp, &w, e)) ||
           bench_cubist(b, T, peak, w, r, e) || (!b->no_torch && same_model(b, tp, r->params, e)) ||
           (b->graph && bench_graph(b, T, r, e)) ||
           (b->bf16 && !b->no_torch &&
            torch_bench(b, T, 1, &r16->torch_tokens_per_s, &tp16, &w16, e)) ||
           (b->bf16 && bench_cubist_bf16(b, T, peak_bf16, w16, r16, &p16, e)) ||
           (b->bf16 && !b->no_torch && same_model(b, tp16, p16, e));
}

/* --rounds: each row's fastest round, the least disturbed on a shared
 * machine; the rows of a round run back to back, so rounds interleave them.
 * cubist's first window stays the first round's, as the model benches'. */
static void keep_best(bench_result *best, const bench_result *r, bench_bf16 *best16,
                      const bench_bf16 *r16) {
    bench_result keep = *best;
    bench_bf16 keep16 = *best16;
    if (r->tokens_per_s > best->tokens_per_s) {
        *best = *r;
        best->torch_tokens_per_s = keep.torch_tokens_per_s;
        best->graph_tokens_per_s = keep.graph_tokens_per_s;
        if (keep.tokens_per_s > 0) best->first_tokens_per_s = keep.first_tokens_per_s;
    }
    best->torch_tokens_per_s = fmax(keep.torch_tokens_per_s, r->torch_tokens_per_s);
    best->graph_tokens_per_s = fmax(keep.graph_tokens_per_s, r->graph_tokens_per_s);
    if (r16->tokens_per_s > best16->tokens_per_s) {
        *best16 = *r16;
        if (keep16.tokens_per_s > 0) best16->first_tokens_per_s = keep16.first_tokens_per_s;
    }
    best16->torch_tokens_per_s = fmax(keep16.torch_tokens_per_s, r16->torch_tokens_per_s);
}

/* The benchmark's flags before parsing: GPT-2 124M, B 4, T 64 and 1024, 2
 * threads; script: a buffer for bench/torch_bench.py's path */
static bench_opts gpt_defaults(char *script, size_t cap) {
    cli_bench_file(script, cap, "torch_bench.py");
    return (bench_opts){.layers = 12, .d_model = 768, .heads = 12, .vocab = 50304, .ctx = 1024,
                        .batch = 4, .steps = 3, .threads = 2, .seq_lens = "64,1024",
                        .torch_script = script, .precision = "fp32", .rounds = 1, .accum = 1,
                        .peak_again = 30};
}

int cli_bench_gpt_quick(cb_dist *d, int layers, int d_model, int heads, int threads, double peak,
                        double *cubist_tps, double *torch_tps, cb_err *e) {
    char script[PATH_MAX + 32];
    bench_opts b = gpt_defaults(script, sizeof script);
    b.layers = layers, b.d_model = d_model, b.heads = heads, b.threads = threads, b.dist = d;
    bench_result r = {0};
    bench_bf16 r16 = {0};
    omp_set_num_threads(threads);
    int rc = measure_T(&b, 64, peak, 0, &r, &r16, e);
    *cubist_tps = r.tokens_per_s, *torch_tps = r.torch_tokens_per_s;
    return rc;
}

/* A length whose rows ran --peak-again seconds or more measures the peaks
 * again: the seconds the first measurement took may have fallen in a
 * slow spell of the host (2026-11-28: an sgemm peak of 173 GFLOP/s at the
 * start of a run whose fp32 step then ran at 199, MFU 114.8%), and a peak
 * is the best rate seen, so the higher of the two stands (and is cached). */
static void peak_again(const bench_opts *b, double rows_s, double *peak, double *bf16) {
    cb_peak_info si, bi = {0};
    double p = cb_peak_measure(&si), p16 = *bf16 > 0 ? cb_peak_measure_bf16(&bi) : 0;
    cb_err e = {0}; /* a failed write was warned of at the first measurement */
    if (!b->json) {
        printf("peaks measured again after %.0f s of rows: sgemm %.1f GFLOP/s (before %.1f)", rows_s,
               p, *peak);
        if (*bf16 > 0) printf(", bf16 %.1f (before %.1f)", p16, *bf16);
        printf("; MFU below against the higher of each\n");
    }
    if (p > *peak) *peak = p, cb_peak_store(CB_PREC_FP32, p, &e);
    if (p16 > *bf16) *bf16 = p16, cb_peak_store(CB_PREC_BF16, p16, &e);
}

static int run_bench(bench_opts *b) {
    omp_set_num_threads(b->threads);
    double peak_bf16, peak = measure_peak(b, &peak_bf16);
    if (b->peak_only) return 0;
    bench_result res[MAX_SEQ_LENS] = {0};
    bench_bf16 r16[MAX_SEQ_LENS] = {0};
    for (int i = 0; i < b->nT; i++) {
        cb_err e = {0};
        bench_result *r = &res[i];
        double t0 = omp_get_wtime(), rt0 = cores_rt_ns(b);
        for (int k = 0; k < b->rounds; k++) {
            bench_result one = {0};
            bench_bf16 one16 = {0};
            if (measure_T(b, b->T[i], peak, peak_bf16, &one, &one16, &e)) return cli_fail(&e);
            keep_best(r, &one, &r16[i], &one16);
        }
        r->rt_ns[0] = rt0, r->rt_ns[1] = cores_rt_ns(b);
        if (omp_get_wtime() - t0 >= b->peak_again)
            peak_again(b, omp_get_wtime() - t0, &peak, &peak_bf16);
        for (int j = 0; j <= i; j++) { /* every row's MFU against the peaks as they stand */
            res[j].mfu = res[j].gflops / peak;
            if (peak_bf16 > 0) r16[j].mfu = r16[j].gflops / peak_bf16;
        }
        if (!b->json) print_result(b, r, peak);
        if (!b->json && b->bf16) print_bf16(b, r, &r16[i], peak_bf16);
        fflush(stdout);
    }
    if (b->json) print_json(b, res, r16, b->nT, peak, peak_bf16);
    return 0;
}

/* --seq-lens "64,1024" into b->T; each a whole number in [1, ctx]. */
static int parse_seq_lens(bench_opts *b, cb_err *e) {
    const char *s = b->seq_lens;
    b->nT = 0;
    for (;;) {
        char *end;
        long T = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || T < 1 || T > b->ctx || b->nT == MAX_SEQ_LENS)
            return cb_fail(e, CB_EINPUT, "--seq-lens '%s': need up to %d comma-separated lengths "
                                         "between 1 and the context %d, e.g. 64,1024",
                           b->seq_lens, MAX_SEQ_LENS, b->ctx);
        b->T[b->nT++] = (int)T;
        if (!*end) return CB_OK;
        s = end + 1;
    }
}

/* printf format: %d is the peak's sgemm size */
static const char BENCH_EPILOG[] =
    "Model GFLOP/s counts 6*N + 12*L*C*T FLOPs per token (N parameters, wpe included);\n"
    "MFU is against the sgemm peak measured in the same run (%d^3 sgemm; again after a\n"
    "length's rows that took --peak-again seconds, the higher kept), which is\n"
    "also written to the cache `cubist train` reads. PyTorch (bench/torch_bench.py)\n"
    "runs the same model (same parameter count, checked) and step (forward, backward,\n"
    "AdamW) with OMP_WAIT_POLICY=PASSIVE, glibc's huge pages (GLIBC_TUNABLES=\n"
    "glibc.malloc.hugetlb=1, as cubist's buffers have) and the OpenBLAS kernels cubist\n"
    "chose (its best settings on this machine), each of its program variants in turn (functional,\n"
    "nn.Module, foreach AdamW, baddbmm attention), the fastest kept; if it fails, the\n"
    "benchmark fails (or pass --no-torch).\n"
    "--precision bf16 adds cubist's bf16 step (docs/precision.md) and PyTorch under bf16\n"
    "autocast, with MFU against the bf16 GEMM peak (a %d^3 oneDNN bf16 matmul, the fastest\n"
    "of three forms of it: dense, B in oneDNN's layout, A's rows padded) measured in the\n"
    "same run, and the time of the bf16 step's rounding passes by what they round; --peak\n"
    "prints both peaks.\n"
    "\n"
    "Other modes, each with its own --help:\n"
    "  mpirun -np 2 cubist bench --allreduce   fused buckets vs a raw MPI_Allreduce\n"
    "  mpirun -np 2 cubist bench --dp-step     data-parallel training steps\n"
    "  mpirun -np 2 cubist bench --embed-grad  dense vs sparse embedding gradients\n"
    "  cubist bench --tp-compare               1-D/2-D/3-D tensor parallelism vs formulas\n"
    "  cubist bench --tp-compare-only 3d:8     some of those configurations (MODE:P,...)\n"
    "  cubist bench --tp-step                  (the child job of --tp-compare)\n"
    "  cubist bench --pipeline                 schedules x stages x micro-batches\n"
    "  cubist bench --recompute-compare        activation recompute none/block/selective\n"
    "  cubist bench --tokenizer --text FILE    GPT-2 BPE encoding MB/s vs js-tiktoken\n"
    "  cubist bench --model bert|roberta|nmt|ncf   the other models' steps vs PyTorch;\n"
    "    --model bert --vs-gpt                 with this benchmark's --quick rows in the same\n"
    "                                          rounds: BERT's ratio over GPT's\n";

int cmd_bench_tp(int argc, char **argv); /* cli/bench_tp.c */
int cmd_bench_pp(int argc, char **argv); /* cli/bench_pp.c */

int cmd_bench_ncf(int argc, char **argv); /* cli/bench_ncf.c */
int cmd_bench_bert(int argc, char **argv); /* cli/bench_bert.c */
int cmd_bench_nmt(int argc, char **argv);  /* cli/bench_nmt.c */

int cmd_bench(int argc, char **argv) {
    for (int i = 0; i < argc; i++) /* the data-parallel benchmarks: cli/bench_dp.c */
        if (!strcmp(argv[i], "--allreduce") || !strcmp(argv[i], "--dp-step") ||
            !strcmp(argv[i], "--embed-grad"))
            return cmd_bench_dp(argc, argv);
    for (int i = 0; i + 1 < argc; i++) /* NeuMF's step: cli/bench_ncf.c */
        if (!strcmp(argv[i], "--model") && !strcmp(argv[i + 1], "ncf")) return cmd_bench_ncf(argc, argv);
    for (int i = 0; i + 1 < argc; i++) /* BERT's and RoBERTa's step: cli/bench_bert.c */
        if (!strcmp(argv[i], "--model") && (!strcmp(argv[i + 1], "bert") || !strcmp(argv[i + 1], "roberta")))
            return cmd_bench_bert(argc, argv);
    for (int i = 0; i + 1 < argc; i++) /* the translation model's step: cli/bench_nmt.c */
        if (!strcmp(argv[i], "--model") && !strcmp(argv[i + 1], "nmt")) return cmd_bench_nmt(argc, argv);
    for (int i = 0; i < argc; i++) /* the tensor-parallel comparison: cli/bench_tp.c */
        if (!strcmp(argv[i], "--tp-compare") || !strcmp(argv[i], "--tp-compare-only") ||
            !strcmp(argv[i], "--tp-step"))
            return cmd_bench_tp(argc, argv);
    for (int i = 0; i < argc; i++) /* the pipeline schedules: cli/bench_pp.c */
        if (!strcmp(argv[i], "--pipeline") || !strcmp(argv[i], "--recompute-compare"))
            return cmd_bench_pp(argc, argv);
    for (int i = 0; i < argc; i++) /* GPT-2's BPE against js-tiktoken: cli/bench_tok.c */
        if (!strcmp(argv[i], "--tokenizer")) return cmd_bench_tok(argc, argv);
    char script[PATH_MAX + 32];
    bench_opts b = gpt_defaults(script, sizeof script);
    const cli_flag flags[] = {
        {"peak", ARG_BOOL, &b.peak_only,
         "only measure the sgemm and bf16 GEMM GFLOP/s (MFU peaks)"},
        {"json", ARG_BOOL, &b.json, "print one JSON object"},
        {"quick", ARG_BOOL, &b.quick, "only T=64"},
        {"threads", ARG_INT, &b.threads, "threads for cubist and PyTorch (2)"},
        {"steps", ARG_INT, &b.steps, "timed steps after one warm-up step (3)"},
        {"seq-lens", ARG_STR, &b.seq_lens, "comma-separated T values (64,1024)"},
        {"layers", ARG_INT, &b.layers, "model (GPT-2 124M: 12)"},
        {"d-model", ARG_INT, &b.d_model, "(768)"},
        {"heads", ARG_INT, &b.heads, "(12)"},
        {"vocab", ARG_INT, &b.vocab, "(50304)"},
        {"ctx", ARG_INT, &b.ctx, "context: rows of wpe, at least every T (1024)"},
        {"batch", ARG_INT, &b.batch, "sequences B of a micro-batch (4)"},
        {"grad-accum", ARG_INT, &b.accum,
         "micro-batches of B sequences per optimizer step, gradients accumulated (1)"},
        {"no-torch", ARG_BOOL, &b.no_torch, "skip the PyTorch reference"},
        {"kernel-cpu", ARG_BOOL, &b.kernel_cpu,
         "per-kernel times in the thread's CPU time (one thread: load-proof)"},
        {"graph", ARG_BOOL, &b.graph, "also the same GPT declared through the public API"},
        {"torch-script", ARG_STR, &b.torch_script, "path of bench/torch_bench.py"},
        {"rounds", ARG_INT, &b.rounds,
         "rounds of every row, each row's best kept: same-run ratios on a busy machine (1)"},
        {"precision", ARG_STR, &b.precision,
         "fp32, or bf16: also cubist bf16 and PyTorch bf16 autocast, MFU vs the bf16 GEMM peak"},
        {"peak-again", ARG_DOUBLE, &b.peak_again,
         "seconds of one length's rows after which the peaks are measured again, the higher kept "
         "(30)"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help;
    cb_err e = {0};
    if (cli_parse("bench", argc, argv, flags, n, &help, &e)) return cli_fail(&e);
    if (help) {
        char epilog[sizeof BENCH_EPILOG + 16];
        snprintf(epilog, sizeof epilog, BENCH_EPILOG, CB_PEAK_N, CB_PEAK_N);
        cli_usage(stdout, "bench", "[--peak] [--json] [--quick] [flags]", flags, n, epilog);
        return 0;
    }
    if (b.quick) b.seq_lens = "64";
    cb_gpt_config c = {b.layers, b.d_model, b.heads, b.ctx, b.vocab};
    if (b.threads < 1 || b.steps < 1 || b.batch < 1 || b.rounds < 1 || b.accum < 1)
        cb_fail(&e, CB_EINPUT,
                "--threads, --steps, --batch, --grad-accum and --rounds must be >= 1");
    else if (!(b.peak_again >= 0))
        cb_fail(&e, CB_EINPUT, "--peak-again %g: give seconds >= 0 (0: after every length)",
                b.peak_again);
    else if (!cb_gpt_config_check(&c, &e) && !parse_seq_lens(&b, &e)) {
        cb_precision prec;
        if (!cb_precision_parse(b.precision, &prec, &e)) b.bf16 = prec == CB_PREC_BF16;
    }
    if (e.code) return cli_fail(&e);
    char accum[16];
    snprintf(accum, sizeof accum, "%d", b.accum);
    int argn = 3;
    char *args[] = {"cubist", "--micro-batches", accum, NULL}, **argp = args;
    if (cb_dist_init(&argn, &argp, &b.dist, &e)) return cli_fail(&e);
    int rc = run_bench(&b);
    cb_dist_finalize(b.dist);
    return rc;
}
