/* `cubist bench --pipeline`: the pipeline schedules on a GPT-2 124M-shaped
 * model. Every configuration (pp, schedule, virtual stages v, micro-batches
 * M, recompute) is one job
 *   $MPIRUN -q --oversubscribe -np P cubist train --pp P --schedule S ...
 *           --threads 1 --log DIR/log.jsonl
 * on a synthetic token file, OMP_NUM_THREADS=1; the parent reads the job's
 * JSONL log and averages its steps after the warm-up ones:
 *   bubble         mean over stages of pp_bubble = 1 - busy / pipeline step
 *                  time (busy: forward + backward compute of that stage)
 *   formula        (p-1) / (v*M + p-1), equal stage times (interleaved
 *                  with M < p: 1 - v*M / (v*p + M-1), cb_pp_bubble_formula)
 *   formula_imb    the same ideal schedule with the measured stage times:
 *                  1 - mean(busy) / (max(busy) * (v*M + p-1) / (v*M)) (with
 *                  M < p interleaved, v*p + M-1 for v*M + p-1); the
 *                  slowest stage sets the pace, the others idle the rest
 *   act_bytes      per stage, the activation memory the stage planned for
 *                  the micro-batches its schedule keeps in flight (what
 *                  `train` logs as pp_act_bytes: backward scratch, message
 *                  and tied-gradient buffers included)
 *   tokens_per_s   B*T*M / step time (the optimizer step included)
 * and, at one point (--recompute-at), --recompute none, block and selective,
 * run back to back: activation bytes per stage and step time, block's and
 * selective's as ratios against none.
 * With P ranks on fewer cores the ranks time-share the cores: wall-clock
 * figures are then shared, the bubble is what is meaningful. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "comm/comm.h"
#include "formats/json.h"
#include "pipeline/schedule.h"

#define MAXP 16
#define MAXRUNS 64
#define NREC 3 /* the --recompute modes compared, none first */

static const char *const RECOMPUTE[NREC] = {"none", "block", "selective"};

typedef struct pp_bench {
    int layers, d_model, heads, vocab, batch, seq_len, steps, warmup, v, timeout_s, json;
    int profile, no_compare, compare_only;
    double mem_weight;
    const char *pp_list, *mb_list, *schedules, *recompute_at;
} pp_bench;

typedef struct pp_run {
    int p, v, M;
    char sched[16], recompute[16];
    int nsteps;
    double bubble, formula, formula_imb, step_ms, tokens_per_s, wall_s;
    double busy[MAXP], bubble_s[MAXP], act[MAXP];
} pp_run;

/* ------------------------------------------------------------ launching */

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Enough synthetic tokens (< vocab) for every step of the largest job. */
static int write_tokens(const pp_bench *b, const char *dir, int maxM, cb_err *e) {
    size_t n = (size_t)(b->steps + b->warmup + 1) * maxM * b->batch * b->seq_len + 1;
    if (n < 65536) n = 65536;
    uint16_t *tok = malloc(sizeof(uint16_t) * n);
    if (!tok) return cb_fail(e, CB_ENOMEM, "out of memory for the benchmark tokens");
    for (size_t i = 0; i < n; i++) tok[i] = (uint16_t)((i * 2654435761u) % (unsigned)b->vocab);
    char path[600];
    snprintf(path, sizeof path, "%s/tok.bin", dir);
    int rc = cb_tokens_write(path, tok, n, e);
    free(tok);
    return rc;
}

/* The first line of the job's stderr, for the error message. */
static void first_line(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    buf[0] = 0;
    if (f && fgets(buf, (int)n, f)) buf[strcspn(buf, "\n")] = 0;
    if (f) fclose(f);
}

/* v[key] as up to MAXP numbers; returns how many. */
static int jarr(const json_val *v, const char *key, double *out) {
    const json_val *a = json_get(v, key);
    int n = 0;
    for (int i = 0; a && a->type == JSON_ARR && i < a->n && i < MAXP; i++)
        if (a->v[i].type == JSON_INT || a->v[i].type == JSON_NUM) out[n++] = a->v[i].d;
    return n;
}

static double jnum(const json_val *v, const char *key) {
    const json_val *x = json_get(v, key);
    return x && (x->type == JSON_INT || x->type == JSON_NUM) ? x->d : NAN;
}

/* Adds one timed step's log object to r's sums. */
static void add_step(pp_run *r, const json_val *v) {
    double busy[MAXP], bub[MAXP], act[MAXP];
    int n = jarr(v, "pp_busy_ms", busy), nb = jarr(v, "pp_bubble", bub);
    int na = jarr(v, "pp_act_bytes", act);
    for (int s = 0; s < r->p && s < n && s < nb && s < na; s++) {
        r->busy[s] += busy[s];
        r->bubble_s[s] += bub[s];
        r->act[s] = act[s];
    }
    r->bubble += jnum(v, "pp_bubble_mean");
    r->formula = jnum(v, "pp_bubble_formula");
    r->step_ms += jnum(v, "step_ms");
    r->nsteps++;
}

/* Averages the log's steps after the warm-up into r. */
static int read_log(const pp_bench *b, const char *path, pp_run *r, cb_err *e) {
    FILE *f = fopen(path, "r");
    if (!f) return cb_fail(e, CB_ESYS, "%s: the job wrote no log", path);
    char line[8192];
    int step = 0;
    while (fgets(line, sizeof line, f)) {
        json_val v;
        json_error je;
        if (json_parse(line, strlen(line), &v, &je)) continue;
        if (++step > b->warmup) add_step(r, &v);
        json_free(&v);
    }
    fclose(f);
    if (r->nsteps < 1)
        return cb_fail(e, CB_ESYS, "%s: %d steps logged, none after the %d warm-up step(s)", path,
                       step, b->warmup);
    double k = r->nsteps, mean = 0, max = 0;
    double span = cb_pp_ideal_rounds(r->p, r->v, r->M) / (2.0 * r->v * r->M); /* (vM+p-1)/vM when M >= p */
    for (int s = 0; s < r->p; s++) {
        r->busy[s] /= k;
        r->bubble_s[s] /= k;
        mean += r->busy[s] / r->p;
        if (r->busy[s] > max) max = r->busy[s];
    }
    r->bubble /= k;
    r->step_ms /= k;
    r->tokens_per_s = (double)b->batch * b->seq_len * r->M / (r->step_ms / 1e3);
    r->formula_imb = max > 0 ? 1 - mean / (max * span) : 0;
    return CB_OK;
}

/* Runs one configuration as an mpirun job of `cubist train`. */
static int run_job(const pp_bench *b, const char *dir, pp_run *r, cb_err *e) {
    char exe[1024], cmd[4096], log[600], err[600], vs[32] = "";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    snprintf(log, sizeof log, "%s/log.jsonl", dir);
    snprintf(err, sizeof err, "%s/err.txt", dir);
    unlink(log);
    if (!strcmp(r->sched, "interleaved")) snprintf(vs, sizeof vs, "--virtual-stages %d", r->v);
    const char *mr = cli_mpirun_cmd();
    snprintf(cmd, sizeof cmd,
             "timeout %d %s %s -np %d '%s' train --data '%s/tok.bin' --layers %d --d-model %d "
             "--heads %d --seq-len %d --vocab %d --batch %d --steps %d --pp %d --schedule %s %s "
             "--micro-batches %d --recompute %s --partition auto --partition-memory-weight %g %s "
             "--threads 1 --quiet --peak-gflops 1 --log '%s' >/dev/null 2>'%s'",
             b->timeout_s, mr, cli_mpirun_flags(mr), r->p, exe, dir, b->layers, b->d_model, b->heads,
             b->seq_len, b->vocab, b->batch, b->warmup + b->steps, r->p, r->sched, vs, r->M,
             r->recompute, b->mem_weight, b->profile ? "" : "--no-profile", log, err);
    double t0 = wall_s();
    int st = system(cmd);
    r->wall_s = wall_s() - t0;
    if (st) {
        char msg[300];
        first_line(err, msg, sizeof msg);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        return cb_fail(e, code == 2 ? CB_EINPUT : CB_ESYS,
                       "pp %d %s M=%d failed (exit %d%s) under `%s`: %s", r->p, r->sched, r->M,
                       code, code == 124 ? ": timed out, raise --pp-timeout" : "", mr, msg);
    }
    return read_log(b, log, r, e);
}

/* ------------------------------------------------------------ output */

/* The 1-minute load average, to say how busy the machine was. */
static double load1(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    double x = -1;
    if (f && fscanf(f, "%lf", &x) != 1) x = -1;
    if (f) fclose(f);
    return x;
}

static void print_head(const pp_bench *b) {
    printf("GPT %dL d%d %dH V%d, micro-batch B=%d T=%d, fp32; one `%s -np P cubist train` job "
           "per row, 1 thread per rank, %d warm-up + %d timed steps; load average %.2f\n",
           b->layers, b->d_model, b->heads, b->vocab, b->batch, b->seq_len, cli_mpirun_cmd(),
           b->warmup, b->steps, load1());
    printf("%3s %-11s %2s %3s %-9s %8s %8s %8s %9s %9s %8s  %s\n", "pp", "schedule", "v", "M",
           "recompute", "bubble", "formula", "f(imb)", "tokens/s", "step ms", "job s",
           "activation MB per stage");
}

static void print_row(const pp_run *r) {
    printf("%3d %-11s %2d %3d %-9s %8.3f %8.3f %8.3f %9.1f %9.1f %8.1f ", r->p, r->sched, r->v,
           r->M, r->recompute, r->bubble, r->formula, r->formula_imb, r->tokens_per_s, r->step_ms,
           r->wall_s);
    for (int s = 0; s < r->p; s++) printf("%s%.1f", s ? " / " : " ", r->act[s] / 1e6);
    printf("\n");
    fflush(stdout);
}

static void json_arr(const char *key, const double *x, int n, const char *fmt) {
    printf(",\"%s\":[", key);
    for (int i = 0; i < n; i++) {
        if (i) printf(",");
        printf(fmt, x[i]);
    }
    printf("]");
}

static void json_run(const pp_run *r) {
    printf("{\"pp\":%d,\"schedule\":\"%s\",\"v\":%d,\"M\":%d,\"recompute\":\"%s\","
           "\"bubble\":%.5f,\"bubble_formula\":%.5f,\"bubble_formula_imbalance\":%.5f,"
           "\"tokens_per_s\":%.2f,\"step_ms\":%.2f,\"job_s\":%.2f",
           r->p, r->sched, r->v, r->M, r->recompute, r->bubble, r->formula, r->formula_imb,
           r->tokens_per_s, r->step_ms, r->wall_s);
    json_arr("bubble_stages", r->bubble_s, r->p, "%.5f");
    json_arr("busy_ms", r->busy, r->p, "%.3f");
    json_arr("act_bytes", r->act, r->p, "%.0f");
    printf("}");
}

/* ,"recompute":{"none":run,"block":run,"selective":run,"against_none":{"block":
 * {"act_ratio":[..],"act_saved_bytes":[..],"step_time_ratio":x},"selective":{..}}} */
static void json_compare(const pp_run *r, double ratio[][MAXP], double saved[][MAXP],
                         const double *t) {
    printf(",\"recompute\":{");
    for (int i = 0; i < NREC; i++) {
        printf("%s\"%s\":", i ? "," : "", RECOMPUTE[i]);
        json_run(&r[i]);
    }
    printf(",\"against_none\":{");
    for (int i = 1; i < NREC; i++) {
        printf("%s\"%s\":{\"step_time_ratio\":%.4f", i > 1 ? "," : "", RECOMPUTE[i], t[i]);
        json_arr("act_ratio", ratio[i], r->p, "%.4f");
        json_arr("act_saved_bytes", saved[i], r->p, "%.0f");
        printf("}");
    }
    printf("}}");
}

/* block and selective against none (r[0]): per stage memory, step time */
static void print_compare(const pp_run *r, int json) {
    double ratio[NREC][MAXP], saved[NREC][MAXP], t[NREC];
    for (int i = 0; i < NREC; i++) {
        t[i] = r[i].step_ms / r[0].step_ms;
        for (int s = 0; s < r->p; s++) {
            ratio[i][s] = r[i].act[s] / r[0].act[s];
            saved[i][s] = r[0].act[s] - r[i].act[s];
        }
    }
    if (json) {
        json_compare(r, ratio, saved, t);
        return;
    }
    printf("\nactivation checkpointing at pp %d %s M=%d (--recompute none, block, selective, run "
           "back to back; x ratio to none, MB saved):\n",
           r->p, r->sched, r->M);
    for (int s = 0; s < r->p; s++) {
        printf("  stage %d: none %8.1f MB", s, r[0].act[s] / 1e6);
        for (int i = 1; i < NREC; i++)
            printf(" | %s %8.1f MB (x%.3f, %.1f saved)", RECOMPUTE[i], r[i].act[s] / 1e6,
                   ratio[i][s], saved[i][s] / 1e6);
        printf("\n");
    }
    printf("  step time: none %.1f ms", r[0].step_ms);
    for (int i = 1; i < NREC; i++)
        printf(" | %s %.1f ms (x%.3f)", RECOMPUTE[i], r[i].step_ms, t[i]);
    printf("\n  bubble: none %.3f", r[0].bubble);
    for (int i = 1; i < NREC; i++) printf(" | %s %.3f", RECOMPUTE[i], r[i].bubble);
    printf("\n");
}

/* ------------------------------------------------------------ the sweep */

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 1) return -1;
        out[n++] = (int)x;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

/* The runs of schedule `name` on p stages: every M of ms that it can run. */
static int add_runs(const pp_bench *b, int p, const char *name, const int *ms, int nm, pp_run *r,
                    int *n, cb_err *e) {
    cb_pp_kind k;
    if (cb_pp_parse_schedule(name, &k, e)) return e->code;
    int v = k == CB_PP_INTERLEAVED ? b->v : 1;
    for (int j = 0; j < nm && *n < MAXRUNS; j++) {
        cb_err ig = {0};
        if (cb_pp_schedule_check(k, p, v, ms[j], &ig)) continue;
        if (p * v > b->layers + 2) continue;                      /* a module per stage at least */
        pp_run *x = &r[(*n)++];
        *x = (pp_run){.p = p, .v = v, .M = ms[j]};
        snprintf(x->sched, sizeof x->sched, "%s", name);
        snprintf(x->recompute, sizeof x->recompute, "none");
    }
    return CB_OK;
}

/* The sweep's configurations: every pp, schedule and M that can run. */
static int plan_runs(const pp_bench *b, pp_run *r, int *nruns, int *maxM, cb_err *e) {
    int ps[8], ms[16], np = parse_list(b->pp_list, ps, 8), nm = parse_list(b->mb_list, ms, 16);
    if (np < 1 || nm < 1)
        return cb_fail(e, CB_EINPUT, "--pp-list and --mb-list are comma-separated integers >= 1, "
                                     "e.g. --pp-list 2,4 --mb-list 1,4,16");
    *nruns = 0;
    *maxM = 1;
    for (int i = 0; i < nm; i++) *maxM = ms[i] > *maxM ? ms[i] : *maxM;
    for (int i = 0; i < np; i++)
        if (ps[i] < 2 || ps[i] > MAXP)
            return cb_fail(e, CB_EINPUT, "--pp-list: %d stages; use 2 to %d", ps[i], MAXP);
    char *list = strdup(b->schedules), *save = NULL;
    int rc = list ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory");
    for (int i = 0; i < np && !rc && !b->compare_only; i++) {
        strcpy(list, b->schedules);
        for (char *t = strtok_r(list, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save))
            rc = add_runs(b, ps[i], t, ms, nm, r, nruns, e);
    }
    free(list);
    return rc;
}

/* --recompute-at P:SCHEDULE:M */
static int parse_point(const pp_bench *b, pp_run *r, cb_err *e) {
    char s[16];
    cb_pp_kind k;
    if (sscanf(b->recompute_at, "%d:%15[a-z0-9]:%d", &r->p, s, &r->M) != 3 || r->p < 2 ||
        r->p > MAXP || r->M < 1 || cb_pp_parse_schedule(s, &k, e))
        return cb_fail(e, CB_EINPUT, "--recompute-at '%s' is not P:SCHEDULE:M; use e.g. 4:1f1b:8",
                       b->recompute_at);
    r->v = k == CB_PP_INTERLEAVED ? b->v : 1;
    snprintf(r->sched, sizeof r->sched, "%s", s);
    if (r->p * r->v > b->layers + 2)
        return cb_fail(e, CB_EINPUT, "--recompute-at %s: %d stages for %d modules (layers + 2); "
                                     "use fewer stages",
                       b->recompute_at, r->p * r->v, b->layers + 2);
    return cb_pp_schedule_check(k, r->p, r->v, r->M, e);
}

static int sweep(const pp_bench *b, const char *dir, cb_err *e) {
    static pp_run runs[MAXRUNS];
    pp_run cmp[NREC] = {{0}};
    int maxM = 1, n = 0, rc = plan_runs(b, runs, &n, &maxM, e);
    int compare = !b->no_compare;
    if (!rc && compare && (rc = parse_point(b, &cmp[0], e)) == CB_OK) {
        for (int i = 0; i < NREC; i++) {
            cmp[i] = cmp[0];
            snprintf(cmp[i].recompute, sizeof cmp[i].recompute, "%s", RECOMPUTE[i]);
        }
        if (cmp[0].M > maxM) maxM = cmp[0].M;
    }
    if (!rc) rc = write_tokens(b, dir, maxM, e);
    double load0 = load1();
    if (rc) return rc;
    if (!b->json) print_head(b);
    for (int i = 0; i < n && !rc; i++)
        if (!(rc = run_job(b, dir, &runs[i], e)) && !b->json) print_row(&runs[i]);
    for (int i = 0; i < NREC && compare && !rc; i++)
        if (!(rc = run_job(b, dir, &cmp[i], e)) && !b->json) print_row(&cmp[i]);
    if (rc) return rc;
    if (b->json) {
        printf("{\"model\":{\"layers\":%d,\"d_model\":%d,\"heads\":%d,\"vocab\":%d,\"batch\":%d,"
               "\"seq_len\":%d},\"steps\":%d,\"warmup\":%d,\"load_start\":%.2f,"
               "\"load_end\":%.2f,\"runs\":[",
               b->layers, b->d_model, b->heads, b->vocab, b->batch, b->seq_len, b->steps,
               b->warmup, load0, load1());
        for (int i = 0; i < n; i++) {
            if (i) printf(",");
            json_run(&runs[i]);
        }
        printf("]");
    }
    if (compare) print_compare(cmp, b->json);
    if (!b->json) printf("load average at the end: %.2f\n", load1());
    if (b->json) printf("}\n");
    return CB_OK;
}

static const char PP_EPILOG[] =
    "Each row is one `$MPIRUN -np P cubist train --pp P ...` job (1 thread per rank) on\n"
    "synthetic tokens; its JSONL log is averaged over the steps after --warmup.\n"
    "  bubble     mean over stages of 1 - busy / step (busy: forward + backward)\n"
    "  formula    (p-1)/(v*M + p-1), equal stage times (interleaved with M < p:\n"
    "             1 - v*M/(v*p + M-1): a rank's chunks wait on each other)\n"
    "  f(imb)     the same with the measured stage times: the slowest stage sets the\n"
    "             pace, 1 - mean(busy) / (max(busy) (v*M + p-1) / (v*M))\n"
    "  act MB     activation memory each stage planned for its micro-batches in flight\n"
    "             (pp_act_bytes: backward scratch, message and tied-gradient buffers)\n"
    "Then --recompute none, block and selective at --recompute-at P:SCHEDULE:M, block's\n"
    "and selective's memory per stage and step time as ratios against none.\n"
    "Partition: auto from FLOP counts with memory weight --partition-memory-weight (0:\n"
    "balance compute, which the bubble formula assumes). With more ranks than cores\n"
    "the ranks time-share them: tokens/s is then shared, the bubble is what counts.\n";

static int check(const pp_bench *b, cb_err *e) {
    if (b->layers < 1 || b->d_model < 1 || b->heads < 1 || b->vocab < 2 || b->batch < 1 ||
        b->seq_len < 1 || b->steps < 1 || b->warmup < 0 || b->v < 1 || b->timeout_s < 1)
        return cb_fail(e, CB_EINPUT, "--layers --d-model --heads --batch --seq-len --steps "
                                     "--virtual-stages --pp-timeout must be >= 1, --warmup >= 0");
    if (!(b->mem_weight >= 0 && b->mem_weight <= 1))
        return cb_fail(e, CB_EINPUT, "--partition-memory-weight must be in [0, 1]");
    cb_gpt_config c = {b->layers, b->d_model, b->heads, b->seq_len, b->vocab};
    return cb_gpt_config_check(&c, e);
}

int cmd_bench_pp(int argc, char **argv) {
    pp_bench b = {.layers = 12, .d_model = 768, .heads = 12, .vocab = 50304, .batch = 1,
                  .seq_len = 64, .steps = 2, .warmup = 1, .v = 2, .timeout_s = 300,
                  .pp_list = "2,4", .mb_list = "1,2,4,8,16", .schedules = "gpipe,1f1b,interleaved",
                  .recompute_at = "4:1f1b:8"};
    int pipeline = 0;
    const cli_flag flags[] = {
        {"pipeline", ARG_BOOL, &pipeline, "run the sweep and print the table"},
        {"json", ARG_BOOL, &b.json, "print one JSON object"},
        {"pp-list", ARG_STR, &b.pp_list, "pipeline stages to run (2,4)"},
        {"mb-list", ARG_STR, &b.mb_list, "micro-batches M per step (1,2,4,8,16)"},
        {"schedules", ARG_STR, &b.schedules, "(gpipe,1f1b,interleaved)"},
        {"virtual-stages", ARG_INT, &b.v, "interleaved: chunks per rank (2)"},
        {"recompute-at", ARG_STR, &b.recompute_at, "P:SCHEDULE:M of the recompute comparison "
                                                    "(4:1f1b:8)"},
        {"no-recompute-compare", ARG_BOOL, &b.no_compare, "skip the recompute comparison"},
        {"recompute-compare", ARG_BOOL, &b.compare_only, "only the recompute comparison"},
        {"partition-memory-weight", ARG_DOUBLE, &b.mem_weight,
         "auto partition's memory weight (0)"},
        {"profile", ARG_BOOL, &b.profile, "partition from a profiling pass, not FLOP counts"},
        {"steps", ARG_INT, &b.steps, "timed steps per job (2)"},
        {"warmup", ARG_INT, &b.warmup, "steps before them, not counted (1)"},
        {"pp-timeout", ARG_INT, &b.timeout_s, "seconds per job before it is killed (300)"},
        {"layers", ARG_INT, &b.layers, "(12)"},
        {"d-model", ARG_INT, &b.d_model, "(768)"},
        {"heads", ARG_INT, &b.heads, "(12)"},
        {"vocab", ARG_INT, &b.vocab, "(50304)"},
        {"batch", ARG_INT, &b.batch, "sequences per micro-batch B (1)"},
        {"seq-len", ARG_INT, &b.seq_len, "T (64)"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help = 0;
    cb_err e = {0};
    int rc = cli_parse("bench", argc, argv, flags, n, &help, &e);
    if (help && !rc) {
        cli_usage(stdout, "bench", "--pipeline [--json] [flags]", flags, n, PP_EPILOG);
        return 0;
    }
    if (!rc) rc = check(&b, &e);
    if (rc) return cli_fail(&e);
    cli_mpirun_allow_root();
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    const char *tmp = getenv("TMPDIR");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/cubist-pp-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        cb_fail(&e, CB_ESYS, "cannot make a directory under %s; set TMPDIR", dir);
        return cli_fail(&e);
    }
    rc = sweep(&b, dir, &e);
    const char *files[] = {"tok.bin", "log.jsonl", "err.txt"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
    return rc ? cli_fail(&e) : 0;
}
