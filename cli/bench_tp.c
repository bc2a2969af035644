/* `cubist bench --tp-compare`: the paper's comparison of 1-D, 2-D and 3-D
 * tensor parallelism (Bian et al., docs/parallelism.md). One
 * training step (forward + backward, no optimizer) of the same GPT under
 * P = 8 (1d, 3d 2x2x2), 16 (1d, 2d 4x4), 64 (1d, 2d 8x8, 3d 4x4x4), every
 * measured figure next to its analytic formula.
 *
 * The parent spawns one MPI job per configuration:
 *   $MPIRUN -q --oversubscribe -np P cubist bench --tp-step --tp P --tp-mode M
 * and reads one "tp-step {json}" line from rank 0. The child builds the
 * GPT graph (cb_model_declare_gpt, the engine of `cubist train`) on the
 * layout and runs forward + backward of the whole batch as one
 * micro-batch (cb_graph_grad_step). It counts, per rank:
 *   param_bytes   local parameter shards + their gradients, fp32: 8 bytes per
 *                 local float; AdamW would add 8 more
 *   act_bytes     the engine's activation plan (cb_model_activation_bytes:
 *                 one micro-batch's values and kept state, the gradient
 *                 buffers) + the layout's workspace planned at build
 *                 (cb_layout_workspace_bytes: scratch slots and kept
 *                 gathers), counted where they are planned rather than read
 *                 from the heap, so the figure holds under ASan too
 *   sent, calls   cb_comm counters summed over every communicator of the
 *                 grid and every tag, split by tag prefix into linear (+
 *                 bias), norm, embed, head, attn; calls count collectives and
 *                 the point-to-point isend/irecv of the 2-D embedding swap
 *   cpu_s         thread CPU time of the last step (CLOCK_THREAD_CPUTIME_ID,
 *                 one OpenMP thread): it includes MPI's busy polling
 *   kernel_cpu_s  the part of it inside the kernel table, timed in thread
 *                 CPU time by the kernel profiler (src/kernels/profile.c)
 *                 installed in the layout's table: every arithmetic loop
 *                 (the layouts' own loops included since they became
 *                 kernels), no MPI
 *   wall_s, comm_s  wall time of the last step; wall time inside MPI calls
 * The counters and timings are those of the last step (--steps, default 2:
 * the first touches every buffer).
 *
 * Formulas (elements unless noted; bytes = 4 x floats, 8 x doubles; ring
 * volume per rank as cb_comm counts it: all-reduce 2(p-1)/p n, all-gather
 * and reduce-scatter (p-1)/p n of the full vector n, broadcast and reduce
 * (p-1)/p n). N = B T tokens, C = d_model, L layers, T = seq_len, V_p the
 * padded vocabulary. Per layer the linears are QKV C->3C, proj C->C, fc
 * C->4C, fc-proj 4C->C: sum of inputs 7C, of outputs 9C, of in x out 12C^2.
 * The closed forms are in src/plan/counts.c (one copy, the planner uses
 * them too) and docs/plan.md. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "comm/grid.h"
#include "formats/json.h"
#include "graph/graph.h"
#include "kernels/profile.h"
#include "plan/plan.h"
#include "util/clock.h"

enum { K_LINEAR, K_NORM, K_EMBED, K_HEAD, K_ATTN, K_OTHER, NKIND };
_Static_assert((int)NKIND == (int)CB_PK_N && (int)K_OTHER == (int)CB_PK_OTHER, "kinds follow src/plan/plan.h");
static const char *const KIND[NKIND] = {"linear", "norm", "embed", "head", "attn", "other"};

/* Per-rank figures, flat so that MPI can gather them. */
enum {
    F_PARAM, F_ACT, F_ACT_MODEL, F_ACT_SCRATCH, F_SENT, F_CALLS,
    F_SENT_K,                 /* NKIND entries */
    F_CALLS_K = F_SENT_K + NKIND,
    F_CPU = F_CALLS_K + NKIND, F_KCPU, F_WALL, F_COMM_S, F_RSS, NF
};
#define NFORMULA F_CPU /* the fields that have a formula */

typedef struct tp_bench {
    int compare, step, json, tp, layers, d_model, heads, vocab, batch, seq_len, steps, timeout_s;
    const char *mode, *only, *save;
    int chunks; /* the layout's overlap_chunks (layout.h) */
} tp_bench;

static const char DEFAULT_CONFIGS[] = "1d:8,3d:8,1d:16,2d:16,1d:64,2d:64,3d:64";

/* ------------------------------------------------------------ formulas */

static double max2(double a, double b) { return a > b ? a : b; }

/* Fills the totals of a figures array from its parts. */
static void totals(double *f) {
    f[F_ACT] = f[F_ACT_MODEL] + f[F_ACT_SCRATCH];
    f[F_SENT] = f[F_CALLS] = 0;
    for (int k = 0; k < NKIND; k++) {
        f[F_SENT] += f[F_SENT_K + k];
        f[F_CALLS] += f[F_CALLS_K + k];
    }
}

/* The formulas (src/plan/counts.c) into a figures array. */
static void formula(const cb_plan_shape *s, const cb_grid *g, int gathered, double *f) {
    cb_plan_tp_cost c;
    memset(f, 0, sizeof(double) * NF);
    cb_plan_tp_cost_of(s, g->mode, g->tp, g->at.r == g->at.c, gathered, &c);
    for (int k = 0; k < NKIND; k++) f[F_SENT_K + k] = c.sent[k], f[F_CALLS_K + k] = c.calls[k];
    f[F_PARAM] = c.param_bytes;
    f[F_ACT_MODEL] = c.act_model_bytes;
    f[F_ACT_SCRATCH] = c.act_scratch_bytes;
    totals(f);
}

/* ------------------------------------------------------------ one step (child) */

static int kind_of(const char *tag) {
    if (!strncmp(tag, "linear", 6) || !strncmp(tag, "bias", 4)) return K_LINEAR;
    for (int k = K_NORM; k < K_OTHER; k++)
        if (!strncmp(tag, KIND[k], strlen(KIND[k]))) return k;
    return K_OTHER;
}

/* This rank's counters over every communicator of the grid, by kind. */
static void count_comm(const cb_grid *g, double *f) {
    for (int i = 0; i < g->ncomms; i++) {
        const cb_comm *c = g->comms[i];
        for (int t = 0; t < c->ntags; t++) {
            int k = kind_of(c->tags[t].tag);
            f[F_SENT_K + k] += (double)c->tags[t].bytes_sent;
            f[F_CALLS_K + k] += (double)c->tags[t].calls;
            f[F_COMM_S] += c->tags[t].seconds;
        }
    }
}

static void reset_comm(cb_grid *g) {
    for (int i = 0; i < g->ncomms; i++) cb_comm_stats_reset(g->comms[i]);
}

/* steps forward + backward (cb_graph_grad_step: no update) on
 * deterministic tokens; the counters and timings of the last one */
static int run_steps(cb_grid *g, cb_model *m, cb_prof *prof, int steps, double *f, cb_err *e) {
    int N = m->B * m->T, V = m->layers[0]->emb.V;
    int *ids = malloc(sizeof(int) * 2 * (size_t)N), *tg = ids + N;
    if (!ids) return cb_fail(e, CB_ENOMEM, "out of memory for benchmark tokens");
    for (int i = 0; i < N; i++) ids[i] = (i * 7 + 3) % V, tg[i] = (i * 13 + 5) % V;
    double cpu = 0, wall = 0;
    for (int s = 0; s < steps; s++) {
        reset_comm(g);
        cb_prof_reset(prof);
        MPI_Barrier(g->world.comm);
        double c0 = cb_clock_s(CLOCK_THREAD_CPUTIME_ID), w0 = MPI_Wtime();
        memset(m->grads, 0, sizeof(float) * m->pt.nparams);
        cb_graph_grad_step(m, ids, tg);
        cpu = cb_clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        wall = MPI_Wtime() - w0;
    }
    f[F_CPU] = cpu;
    for (int k = 0; k < PROF_N; k++) f[F_KCPU] += cb_prof_ms(prof, k) / 1e3;
    f[F_WALL] = wall;
    count_comm(g, f);
    free(ids);
    return CB_OK;
}

static double rss_bytes(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return 1024.0 * u.ru_maxrss;
}

static void put_figs(const char *name, const double *f, int n) {
    static const char *const NAMES[NF] = {
        "param_bytes", "act_bytes", "act_model_bytes", "act_scratch_bytes", "sent_bytes", "calls",
        "sent_linear", "sent_norm", "sent_embed", "sent_head", "sent_attn", "sent_other",
        "calls_linear", "calls_norm", "calls_embed", "calls_head", "calls_attn", "calls_other",
        "cpu_s", "kernel_cpu_s", "wall_s", "comm_s", "rss_bytes"};
    printf("\"%s\":{", name);
    for (int i = 0; i < n; i++) printf("%s\"%s\":%.10g", i ? "," : "", NAMES[i], f[i]);
    printf("}");
}

/* Rank 0 prints one line "tp-step {json}": per figure the maximum over
 * ranks and rank 0's, measured and formula. all: nranks x (measured,
 * formula) rows of NF each. */
static void report(const tp_bench *b, const cb_grid *g, const double *all, double vpad) {
    double mx[2][NF];
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < NF; i++) {
            mx[w][i] = all[w * NF + i];
            for (int r = 1; r < g->world_size; r++)
                mx[w][i] = max2(mx[w][i], all[(size_t)r * 2 * NF + w * NF + i]);
        }
    double rss = 0;
    for (int r = 0; r < g->world_size; r++) rss += all[(size_t)r * 2 * NF + F_RSS];
    printf("tp-step {\"config\":\"%s:%d\",\"mode\":\"%s\",\"tp\":%d,\"q\":%d,\"save\":\"%s\","
           "\"layers\":%d,\"d_model\":%d,\"heads\":%d,\"batch\":%d,\"seq_len\":%d,\"vocab\":%d,"
           "\"vocab_pad\":%.0f,\"steps\":%d,\"overlap_chunks\":%d,\"rss_total_bytes\":%.0f,"
           "\"max\":{",
           b->mode, b->tp, b->mode, g->tp, g->q, b->save, b->layers, b->d_model, b->heads,
           b->batch, b->seq_len, b->vocab, vpad, b->steps, b->chunks, rss);
    put_figs("measured", mx[0], NF);
    printf(",");
    put_figs("formula", mx[1], NFORMULA);
    printf("},\"rank0\":{");
    put_figs("measured", all, NF);
    printf(",");
    put_figs("formula", all + NF, NFORMULA);
    printf("}}\n");
    fflush(stdout);
}

/* The GPT graph on tp ranks of mode: the layout's options set before
 * the build, so its workspace is planned for them. */
static int build(const tp_bench *b, cb_dist **d, cb_model **m, cb_err *e) {
    cb_tp_mode mode;
    int rc = cb_grid_parse_mode(b->mode, &mode, e);
    if (!rc) rc = cb_dist_tensor(d, b->tp, mode, e);
    if (rc) return cb_comm_agree_err(cb_comm_world(), e);
    (*d)->L->save_gathered = strcmp(b->save, "shard") != 0;
    (*d)->L->overlap_chunks = b->chunks;
    cb_gpt_config c = {b->layers, b->d_model, b->heads, b->seq_len, b->vocab};
    cb_adamw_config opt = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .steps = 1};
    *m = cb_model_new(*d, b->batch, b->seq_len);
    if (*m) cb_model_declare_gpt(*m, &c);
    return cb_model_build(*m, 1337, &opt, e);
}

static int tp_step(const tp_bench *b, cb_err *e) {
    cb_dist *d = NULL;
    cb_model *m = NULL;
    int rc = build(b, &d, &m, e);
    if (rc) {
        cb_model_free(m);
        if (d) cb_dist_free(d);
        return rc;
    }
    cb_grid *g = &d->g;
    cb_layout *L = d->L;
    cb_prof prof;
    cb_prof_init(&prof, L->k);
    prof.thread_cpu = 1; /* ranks share the cores */
    L->k = cb_prof_kernels(&prof);
    double f[2 * NF] = {0}, *fm = f + NF;
    rc = run_steps(g, m, &prof, b->steps, f, e);
    f[F_PARAM] = 8.0 * (double)m->pt.nparams;
    f[F_ACT_MODEL] = (double)cb_model_activation_bytes(m);
    f[F_ACT_SCRATCH] = (double)cb_layout_workspace_bytes(L);
    f[F_RSS] = rss_bytes();
    totals(f);
    /* the fp32 wire, fp32 products */
    cb_plan_shape s = {(double)b->batch * b->seq_len, b->batch, b->seq_len, b->d_model, b->heads,
                       b->vocab, b->layers, 0, 0};
    formula(&s, g, L->save_gathered, fm);
    double *all = g->world_rank == 0 ? malloc(sizeof(double) * 2 * NF * g->world_size) : NULL;
    MPI_Gather(f, 2 * NF, MPI_DOUBLE, all, 2 * NF, MPI_DOUBLE, 0, g->world.comm);
    double q = g->mode == CB_TP_1D ? b->tp : g->mode == CB_TP_2D ? g->q : (double)g->q * g->q;
    if (all) report(b, g, all, cb_plan_pad(b->vocab, q));
    free(all);
    L->k = prof.inner;
    cb_model_free(m);
    cb_dist_free(d);
    return rc;
}

/* ------------------------------------------------------------ the comparison (parent) */

typedef struct tp_run {
    char config[16];
    char *line; /* the child's JSON */
    json_val v;
} tp_run;

/* "3d:64" -> mode, tp; CB_EINPUT otherwise */
static int parse_config(const char *s, char *mode, int *tp, cb_err *e) {
    if (sscanf(s, "%2[123d]:%d", mode, tp) != 2 || strlen(mode) != 2 || mode[1] != 'd' || *tp < 1)
        return cb_fail(e, CB_EINPUT,
                       "--tp-compare-only: '%s' is not MODE:P; use e.g. 3d:8 or 1d:8,3d:8", s);
    return CB_OK;
}

/* Spawns the child job of one configuration and keeps its JSON line. */
static int spawn(const tp_bench *b, const char *config, tp_run *r, cb_err *e) {
    char mode[4], exe[1024], cmd[4096];
    int tp, rc = parse_config(config, mode, &tp, e);
    if (rc) return rc;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    const char *mr = cli_mpirun_cmd();
    snprintf(cmd, sizeof cmd,
             "timeout %d %s %s -np %d '%s' bench --tp-step --tp %d --tp-mode %s --layers %d "
             "--d-model %d --heads %d --vocab %d --batch %d --seq-len %d --steps %d "
             "--tp3d-save %s --overlap-chunks %d",
             b->timeout_s, mr, cli_mpirun_flags(mr), tp, exe, tp, mode, b->layers, b->d_model,
             b->heads, b->vocab, b->batch, b->seq_len, b->steps, b->save, b->chunks);
    snprintf(r->config, sizeof r->config, "%s:%d", mode, tp);
    FILE *p = popen(cmd, "r");
    if (!p) return cb_fail(e, CB_ESYS, "cannot run %s; set MPIRUN to the MPI launcher", mr);
    char line[16384];
    while (fgets(line, sizeof line, p))
        if (!strncmp(line, "tp-step ", 8) && !r->line) r->line = strdup(line + 8);
    int st = pclose(p);
    json_error je;
    if (st || !r->line || json_parse(r->line, strlen(r->line), &r->v, &je)) {
        free(r->line);
        r->line = NULL;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        return cb_fail(e, code == 2 ? CB_EINPUT : CB_ESYS,
                       "configuration %s failed (exit %d%s) under `%s`; its error is above, "
                       "or run it alone with `cubist bench --tp-compare-only %s`",
                       r->config, code, code == 124 ? ": timed out, raise --tp-timeout" : "", mr,
                       r->config);
    }
    return CB_OK;
}

/* v.who.what.key, NAN when absent */
static double jnum(const json_val *v, const char *who, const char *what, const char *key) {
    const json_val *x = json_get(json_get(json_get(v, who), what), key);
    return x && (x->type == JSON_INT || x->type == JSON_NUM) ? x->d : NAN;
}

static double ratio(double m, double f) { return f != 0 ? m / f : (m == 0 ? 1 : NAN); }

typedef struct row_def {
    const char *label, *key;
    double unit;
} row_def;

static const row_def ROWS[] = {
    {"param + grad MB", "param_bytes", 1e6},      {"activation MB", "act_bytes", 1e6},
    {"  model acts MB", "act_model_bytes", 1e6},  {"  layout scratch MB", "act_scratch_bytes", 1e6},
    {"sent MB", "sent_bytes", 1e6},               {"collectives", "calls", 1},
    {"  linear sent MB", "sent_linear", 1e6},     {"  linear calls", "calls_linear", 1},
    {"  norm sent MB", "sent_norm", 1e6},         {"  norm calls", "calls_norm", 1},
    {"  embed sent MB", "sent_embed", 1e6},       {"  embed calls", "calls_embed", 1},
    {"  head sent MB", "sent_head", 1e6},         {"  head calls", "calls_head", 1},
    {"  attn sent MB", "sent_attn", 1e6},         {"  attn calls", "calls_attn", 1},
};

static void print_run(const tp_run *r) {
    const json_val *v = &r->v, *q = json_get(v, "q");
    printf("\n%s (q=%d)                 max over ranks: measured  formula   ratio | rank 0: "
           "measured  formula   ratio\n",
           r->config, q ? (int)q->i : 0);
    for (size_t i = 0; i < sizeof ROWS / sizeof *ROWS; i++) {
        const row_def *d = &ROWS[i];
        double mm = jnum(v, "max", "measured", d->key), fm = jnum(v, "max", "formula", d->key);
        double m0 = jnum(v, "rank0", "measured", d->key), f0 = jnum(v, "rank0", "formula", d->key);
        printf("  %-22s %24.3f %10.3f %7.3f | %16.3f %10.3f %7.3f\n", d->label, mm / d->unit,
               fm / d->unit, ratio(mm, fm), m0 / d->unit, f0 / d->unit, ratio(m0, f0));
    }
    const json_val *rt = json_get(v, "rss_total_bytes");
    printf("  compute: thread CPU %.3f s max, %.3f s rank 0 (incl. MPI polling), in kernels "
           "%.3f s max; wall %.3f s, in MPI %.3f s; RSS %.0f MB max per rank, %.0f MB all "
           "ranks\n",
           jnum(v, "max", "measured", "cpu_s"), jnum(v, "rank0", "measured", "cpu_s"),
           jnum(v, "max", "measured", "kernel_cpu_s"),
           jnum(v, "max", "measured", "wall_s"), jnum(v, "max", "measured", "comm_s"),
           jnum(v, "max", "measured", "rss_bytes") / 1e6, rt ? rt->d / 1e6 : NAN);
}

static const tp_run *find_run(const tp_run *r, int n, const char *config) {
    for (int i = 0; i < n; i++)
        if (!strcmp(r[i].config, config)) return &r[i];
    return NULL;
}

/* The paper's ratios, where both configurations ran: bytes sent per rank
 * (max over ranks), measured and formula, and compute time per rank. */
static void print_ratios(const tp_run *r, int n, int json) {
    static const char *const PAIRS[][2] = {{"3d:8", "1d:8"}, {"3d:64", "1d:64"},
                                           {"3d:64", "2d:64"}, {"2d:16", "1d:16"},
                                           {"2d:64", "1d:64"}};
    int first = 1;
    if (!json) printf("\nratios per rank (bytes sent: max over ranks):\n");
    for (size_t i = 0; i < sizeof PAIRS / sizeof *PAIRS; i++) {
        const tp_run *a = find_run(r, n, PAIRS[i][0]), *b = find_run(r, n, PAIRS[i][1]);
        if (!a || !b) continue;
        double ms = jnum(&a->v, "max", "measured", "sent_bytes") /
                    jnum(&b->v, "max", "measured", "sent_bytes");
        double fs = jnum(&a->v, "max", "formula", "sent_bytes") /
                    jnum(&b->v, "max", "formula", "sent_bytes");
        double cpu = jnum(&a->v, "max", "measured", "cpu_s") / jnum(&b->v, "max", "measured", "cpu_s");
        double kc = jnum(&a->v, "max", "measured", "kernel_cpu_s") /
                    jnum(&b->v, "max", "measured", "kernel_cpu_s");
        if (json)
            printf("%s\"%s/%s\":{\"sent_measured\":%.4f,\"sent_formula\":%.4f,\"cpu\":%.4f,"
                   "\"kernel_cpu\":%.4f}",
                   first ? "" : ",", a->config, b->config, ms, fs, cpu, kc);
        else
            printf("  %-6s / %-6s  sent %.3f (formula %.3f); compute per rank: thread CPU %.3f, "
                   "kernels %.3f\n",
                   a->config, b->config, ms, fs, cpu, kc);
        first = 0;
    }
}

static void print_summary(const tp_run *r, int n) {
    printf("\nper rank, measured (max over ranks); cpu = thread CPU of the step incl. MPI "
           "polling, kernels = its compute kernels:\n"
           "  %-7s %13s %10s %10s %6s %8s %8s %8s %8s\n",
           "config", "param+grad MB", "activ. MB", "sent MB", "calls", "cpu s", "kernels", "wall s",
           "RSS MB");
    for (int i = 0; i < n; i++) {
        const json_val *v = &r[i].v;
        printf("  %-7s %13.2f %10.2f %10.2f %6.0f %8.3f %8.3f %8.3f %8.0f\n", r[i].config,
               jnum(v, "max", "measured", "param_bytes") / 1e6,
               jnum(v, "max", "measured", "act_bytes") / 1e6,
               jnum(v, "max", "measured", "sent_bytes") / 1e6, jnum(v, "max", "measured", "calls"),
               jnum(v, "max", "measured", "cpu_s"), jnum(v, "max", "measured", "kernel_cpu_s"),
               jnum(v, "max", "measured", "wall_s"), jnum(v, "max", "measured", "rss_bytes") / 1e6);
    }
}

static int tp_compare(const tp_bench *b, cb_err *e) {
    cli_mpirun_allow_root();
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    tp_run runs[16];
    memset(runs, 0, sizeof runs);
    int n = 0, rc = CB_OK;
    char *list = strdup(b->only ? b->only : DEFAULT_CONFIGS), *save = NULL;
    if (!b->json)
        printf("GPT %dL d%d %dH V%d, B=%d T=%d: one step (forward + backward), fp32; %s ranks "
               "oversubscribed, 1 thread each\n",
               b->layers, b->d_model, b->heads, b->vocab, b->batch, b->seq_len, cli_mpirun_cmd());
    for (char *t = strtok_r(list, ",", &save); t && n < 16 && !rc; t = strtok_r(NULL, ",", &save)) {
        rc = spawn(b, t, &runs[n], e);
        if (!rc && !b->json) print_run(&runs[n]);
        fflush(stdout);
        n += !rc;
    }
    if (!rc && b->json) {
        printf("{\"configs\":[");
        for (int i = 0; i < n; i++) printf("%s%s", i ? "," : "", strtok(runs[i].line, "\n"));
        printf("],\"ratios\":{");
        print_ratios(runs, n, 1);
        printf("}}\n");
    } else if (!rc) {
        print_summary(runs, n);
        print_ratios(runs, n, 0);
    }
    for (int i = 0; i < n; i++) {
        free(runs[i].line);
        json_free(&runs[i].v);
    }
    free(list);
    return rc;
}

static const char TP_EPILOG[] =
    "  cubist bench --tp-compare              every configuration: 1d:8 3d:8 1d:16 2d:16 1d:64\n"
    "                                         2d:64 3d:64, each an mpirun job of P ranks\n"
    "  cubist bench --tp-compare-only 3d:8    some of them (comma-separated MODE:P)\n"
    "  mpirun -np 8 cubist bench --tp-step --tp 8 --tp-mode 3d   one job: rank 0 prints the\n"
    "                                         \"tp-step {json}\" line the comparison reads\n"
    "MPIRUN names the launcher (default mpirun.openmpi or mpirun.mpich, as linked). The\n"
    "vocabulary is small (1024) so that the head's logits (N x V/P per rank) and its GEMMs\n"
    "do not swamp the transformer layers the comparison is about; 1024 divides by every\n"
    "P, q and q^2 here, so no layout pads it. Formulas: see the README, \"Tensor\n"
    "parallelism: the paper's comparison\".\n";

static int check_opts(const tp_bench *b, cb_err *e) {
    if (b->layers < 1 || b->d_model < 1 || b->heads < 1 || b->vocab < 2 || b->batch < 1 ||
        b->seq_len < 1 || b->steps < 1 || b->timeout_s < 1 || b->chunks < 1)
        return cb_fail(e, CB_EINPUT, "--layers, --d-model, --heads, --batch, --seq-len, --steps, "
                                     "--tp-timeout, --overlap-chunks must be >= 1 and --vocab >= 2");
    if (strcmp(b->save, "gathered") && strcmp(b->save, "shard"))
        return cb_fail(e, CB_EINPUT, "--tp3d-save must be gathered or shard; got '%s'", b->save);
    cb_gpt_config c = {b->layers, b->d_model, b->heads, b->seq_len, b->vocab};
    return cb_gpt_config_check(&c, e);
}

/* The child: under the launcher, one step on --tp ranks. */
static int run_child(tp_bench *b, int argc, char **argv, cb_err *e) {
    cb_err me = {0};
    if (cb_comm_init(&argc, &argv, &me)) return cli_fail(&me);
    omp_set_num_threads(1);
    cb_comm *w = cb_comm_world();
    int rc = e->code ? e->code : check_opts(b, e);
    if (!rc && w->size != b->tp)
        rc = cb_fail(e, CB_EINPUT, "--tp-step --tp %d needs %d ranks; got %d: run it under "
                                   "`mpirun -np %d`",
                     b->tp, b->tp, w->size, b->tp);
    rc = cb_comm_agree_err(w, e);
    if (!rc) rc = tp_step(b, e);
    if (rc) {
        char msg[sizeof e->msg + 8];
        snprintf(msg, sizeof msg, "error: %s", e->msg);
        cb_comm_exit(rc == CB_EINPUT ? 2 : 1, msg);
    }
    cb_comm_finalize();
    return 0;
}

int cmd_bench_tp(int argc, char **argv) {
    tp_bench b = {0, 0, 0, 0, 2, 1024, 64, 1024, 16, 128, 2, 900, "1d", NULL, "gathered",
                  CB_OVERLAP_CHUNKS};
    const cli_flag flags[] = {
        {"tp-compare", ARG_BOOL, &b.compare, "run every configuration and print the table"},
        {"tp-compare-only", ARG_STR, &b.only, "comma-separated MODE:P, e.g. 3d:8 or 1d:8,3d:8"},
        {"tp-step", ARG_BOOL, &b.step, "the child job: one configuration under mpirun"},
        {"tp", ARG_INT, &b.tp, "--tp-step: tensor-parallel ranks"},
        {"tp-mode", ARG_STR, &b.mode, "--tp-step: 1d, 2d or 3d"},
        {"tp3d-save", ARG_STR, &b.save, "3-D: gathered (keep X^, W^) or shard (re-gather)"},
        {"overlap-chunks", ARG_INT, &b.chunks,
         "2-D, 3-D: row blocks of a GEMM overlapped with a collective, MPI tests between "
         "them (4; 1: one GEMM, no progress until its end)"},
        {"json", ARG_BOOL, &b.json, "print one JSON object"},
        {"steps", ARG_INT, &b.steps, "steps per job; figures of the last (2)"},
        {"tp-timeout", ARG_INT, &b.timeout_s, "seconds per job before it is killed (900)"},
        {"layers", ARG_INT, &b.layers, "(2)"},
        {"d-model", ARG_INT, &b.d_model, "(1024)"},
        {"heads", ARG_INT, &b.heads, "(64)"},
        {"vocab", ARG_INT, &b.vocab, "(1024)"},
        {"batch", ARG_INT, &b.batch, "sequences B (16)"},
        {"seq-len", ARG_INT, &b.seq_len, "T (128)"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help = 0;
    cb_err e = {0};
    int rc = cli_parse("bench", argc, argv, flags, n, &help, &e);
    if (help && !rc) {
        cli_usage(stdout, "bench", "--tp-compare | --tp-compare-only LIST | --tp-step [flags]",
                  flags, n, TP_EPILOG);
        return 0;
    }
    if (b.step) return run_child(&b, argc, argv, &e);
    if (!rc) rc = check_opts(&b, &e);
    if (!rc) rc = tp_compare(&b, &e);
    return rc ? cli_fail(&e) : 0;
}
