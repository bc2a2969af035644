/* `cubist plan --validate`: predicted against measured on this machine.
 * Every case is a real `cubist train` job (mpirun for more than one rank)
 * on random tokens; its log gives the step time (the fastest step after
 * the first: the machine is shared, and the model predicts an unloaded
 * step), rank 0's bytes and calls by tag and the planned activation and
 * optimizer bytes. Layouts with more ranks than cores cannot be timed
 * honestly: they compare bytes, calls and memory, which the scheduler does
 * not change, and per-rank compute in thread CPU time (`cubist bench
 * --tp-step`'s kernel CPU seconds, max over ranks). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"
#include "formats/json.h"
#include "kernels/peak.h"
#include "plan_cli.h"

typedef struct vcase {
    int quick, threads, L, C, H, T, B, dp, pp, tp;
    const char *mode, *sched;
    int M;
    const char *model; /* NULL: gpt; bert or nmt (planned from their graph) */
    int bf16;          /* --precision bf16 */
} vcase;

/* B is the micro-batch of `cubist train` (--batch); M micro-batches per step. */
static const vcase CASES[] = {
    {1, 1, 2, 128, 4, 64, 8, 1, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {0, 1, 4, 256, 8, 128, 8, 1, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {0, 1, 2, 512, 8, 128, 4, 1, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {0, 1, 6, 384, 6, 64, 16, 1, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {0, 2, 2, 128, 4, 64, 8, 1, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {0, 2, 4, 256, 8, 128, 8, 1, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {0, 2, 2, 512, 8, 128, 4, 1, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {0, 2, 6, 384, 6, 64, 16, 1, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {1, 1, 2, 128, 4, 64, 8, 2, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {0, 1, 4, 256, 8, 128, 8, 2, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {0, 1, 2, 512, 8, 128, 4, 2, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {1, 1, 2, 128, 4, 64, 8, 1, 2, 1, "1d", "1f1b", 4, NULL, 0},
    {0, 1, 4, 256, 8, 128, 8, 1, 2, 1, "1d", "1f1b", 4, NULL, 0},
    {0, 1, 6, 384, 6, 64, 16, 1, 2, 1, "1d", "gpipe", 4, NULL, 0},
    {1, 1, 2, 128, 4, 64, 8, 1, 1, 2, "1d", "gpipe", 1, NULL, 0},
    {0, 1, 4, 256, 8, 128, 8, 1, 1, 2, "1d", "gpipe", 1, NULL, 0},
    {0, 1, 2, 512, 8, 128, 4, 1, 1, 2, "1d", "gpipe", 1, NULL, 0},
    /* models planned from their declared graph (bert: vocabulary 256 + 4
     * specials; nmt: 256 + 3, L encoder and L decoder blocks, ffn 4C) */
    {0, 1, 2, 128, 4, 64, 8, 1, 1, 1, "1d", "gpipe", 1, "bert", 0},
    {0, 2, 2, 128, 4, 64, 8, 1, 1, 1, "1d", "gpipe", 1, "bert", 0},
    {0, 1, 2, 128, 4, 64, 8, 2, 1, 1, "1d", "gpipe", 1, "bert", 0},
    {0, 1, 1, 128, 4, 32, 8, 1, 1, 1, "1d", "gpipe", 1, "nmt", 0},
    {0, 1, 1, 128, 4, 32, 8, 2, 1, 1, "1d", "gpipe", 1, "nmt", 0},
    /* --precision bf16 (the cluster's bf16 rates): T 64 on the blocked
     * attention, T 256 on the fused one (the bf16 table's smaller att) */
    {0, 1, 2, 256, 4, 64, 8, 1, 1, 1, "1d", "gpipe", 1, NULL, 1},
    {0, 2, 2, 256, 4, 64, 8, 1, 1, 1, "1d", "gpipe", 1, NULL, 1},
    {0, 1, 2, 256, 4, 256, 4, 1, 1, 1, "1d", "gpipe", 1, NULL, 1},
    {0, 2, 2, 256, 4, 256, 4, 1, 1, 1, "1d", "gpipe", 1, NULL, 1},
    {0, 1, 2, 256, 4, 256, 4, 2, 1, 1, "1d", "gpipe", 1, NULL, 1},
    /* more ranks than cores: bytes, calls, memory and thread CPU */
    {1, 1, 2, 128, 4, 64, 8, 1, 1, 4, "2d", "gpipe", 1, NULL, 0},
    {0, 1, 2, 128, 4, 64, 8, 1, 1, 4, "1d", "gpipe", 1, NULL, 0},
    {0, 1, 2, 128, 4, 64, 8, 1, 1, 8, "3d", "gpipe", 1, NULL, 0},
    {0, 1, 4, 256, 8, 64, 8, 4, 1, 1, "1d", "gpipe", 1, NULL, 0},
    {0, 1, 4, 256, 8, 64, 8, 1, 4, 1, "1d", "1f1b", 8, NULL, 0},
};
#define NCASES (int)(sizeof CASES / sizeof *CASES)

#define RUNS_KEPT 16

typedef struct measured {
    double step_ms, bytes, calls, act, opt, kcpu;
    double cpu_ms;  /* one process, one thread: CPU time per step (NAN otherwise) */
    double slow_ms; /* the slowest run's fastest step: step_ms .. slow_ms is the spread */
    int runs;       /* runs merged in */
    double held;    /* --precision bf16: the bf16 table's copies and staging (NAN otherwise) */
    double rt_ns;   /* timed on both cores: their round trip (cb_core_round_trip) just before
                       the run that gave step_ms (NAN otherwise) */
    /* each run's round trip and fastest step, the first RUNS_KEPT runs:
     * the order of layouts with the cores near and apart (order_by_state) */
    double run_rt[RUNS_KEPT], run_ms[RUNS_KEPT];
} measured;

#define MEASURED_NONE {0, 0, 0, NAN, NAN, NAN, NAN, NAN, 0, NAN, NAN, {0}, {0}}

static double jd(const json_val *v, const char *k) {
    const json_val *x = json_get(v, k);
    return x && (x->type == JSON_INT || x->type == JSON_NUM) ? x->d : NAN;
}

/* rank 0's bytes and calls over the tags the model predicts: not the
 * gradient norm ("norm"), nor the pipeline's tie and timing stats */
static void tags(const json_val *by, measured *m) {
    static const char *const SKIP[] = {"norm", "pp.tie", "pp.stats"};
    m->bytes = m->calls = 0;
    for (int i = 0; by && by->type == JSON_OBJ && i < by->n; i++) {
        int skip = 0;
        for (size_t s = 0; s < sizeof SKIP / sizeof *SKIP; s++) skip |= !strcmp(by->k[i], SKIP[s]);
        if (skip) continue;
        m->bytes += jd(&by->v[i], "bytes");
        m->calls += jd(&by->v[i], "calls");
    }
}

/* the model's name in the table: bert, nmt, bf16 (GPT in bf16) or gpt */
static const char *case_name(const vcase *c) {
    return c->model ? c->model : c->bf16 ? "bf16" : "gpt";
}

static int runner(const vcase *c, char *pre, size_t cap) {
    int ranks = c->dp * c->pp * c->tp;
    const char *mr = cli_mpirun_cmd();
    if (ranks == 1) snprintf(pre, cap, "OMP_NUM_THREADS=%d timeout 300", c->threads);
    else snprintf(pre, cap, "OMP_NUM_THREADS=1 timeout 300 %s %s -np %d", mr, cli_mpirun_flags(mr), ranks);
    return ranks;
}

/* The job of case c for `steps` steps. part: the planner's stage
 * boundaries (--partition), so that the run splits the pipeline as the
 * prediction does. */
static int train_job(const vcase *c, const char *dir, const char *part, int steps) {
    char pre[512], cmd[2560];
    runner(c, pre, sizeof pre);
    char model[256];
    /* GPT's --batch is a micro-batch's; the graph models' the step's */
    if (!c->model)
        snprintf(model, sizeof model, "--data %s/tok.bin --vocab 256 --batch %d --grad-accum %d",
                 dir, c->B, c->M);
    else if (!strcmp(c->model, "bert"))
        snprintf(model, sizeof model, "--model bert --data %s/tok.bin --batch %d", dir, c->B * c->M);
    else
        snprintf(model, sizeof model, "--model nmt --data %s/pairs.bin --dec-layers %d --ffn %d "
                 "--batch %d", dir, c->L, 4 * c->C, c->B * c->M);
    snprintf(cmd, sizeof cmd,
             "%s '%s' train %s --layers %d --d-model %d --heads %d "
             "--seq-len %d --steps %d --threads %d --quiet --log %s/log.jsonl "
             "--dp %d --pp %d --tp %d --tp-mode %s --embed-grad dense%s%s --micro-batches %d"
             "%s%s%s >/dev/null 2>&1",
             pre, plan_exe(), model, c->L, c->C, c->H, c->T, steps, c->threads, dir, c->dp, c->pp,
             c->tp, c->mode, c->pp > 1 ? " --schedule " : "", c->pp > 1 ? c->sched : "", c->M,
             part[0] ? " --partition " : "", part, c->bf16 ? " --precision bf16" : "");
    return system(cmd) == 0;
}

/* The step time and, for one process of one thread, its CPU time: the
 * fastest step after the first of each. The CPU time is the process's
 * over the step itself, as the log reports it (`cpu_ms`): the job's
 * start (the MFU peak, measured on a first run), the evaluation after the
 * last step and time slices taken by other processes are not in it. */
static int measure_train(const vcase *c, const char *dir, const char *part, measured *m) {
    char log[600];
    snprintf(log, sizeof log, "%s/log.jsonl", dir);
    unlink(log);
    if (!train_job(c, dir, part, 6)) return 0;
    FILE *f = fopen(log, "r");
    char line[65536];
    int cpu = c->dp * c->pp * c->tp == 1 && c->threads == 1;
    m->step_ms = m->cpu_ms = 1e30;
    for (int s = 0; f && fgets(line, sizeof line, f); s++) {
        json_val v;
        json_error je;
        if (json_parse(line, strlen(line), &v, &je)) continue;
        if (s >= 1 && jd(&v, "step_ms") < m->step_ms) m->step_ms = jd(&v, "step_ms");
        if (s >= 1 && cpu && jd(&v, "cpu_ms") < m->cpu_ms) m->cpu_ms = jd(&v, "cpu_ms");
        tags(json_get(&v, "comm_by_tag"), m);
        m->act = jd(&v, "act_bytes"), m->opt = jd(&v, "opt_state_bytes");
        if (c->bf16) m->held = jd(&v, "bf16_copies_bytes") + jd(&v, "bf16_staging_bytes");
        const json_val *pa = json_get(&v, "pp_act_bytes"); /* the first stage's: rank 0's */
        if (pa && pa->type == JSON_ARR && pa->n > 0) m->act = pa->v[0].d;
        json_free(&v);
    }
    if (f) fclose(f);
    if (!(m->cpu_ms < 1e30)) m->cpu_ms = NAN;
    return m->step_ms < 1e30;
}

/* tensor layouts past the core count: bench --tp-step's counters and the
 * kernels' thread CPU seconds (forward + backward, no optimizer) */
static int measure_tpstep(const vcase *c, measured *m) {
    char pre[512], cmd[2048], out[65536];
    runner(c, pre, sizeof pre);
    snprintf(cmd, sizeof cmd, "%s '%s' bench --tp-step --tp %d --tp-mode %s --layers %d --d-model %d "
             "--heads %d --vocab 256 --batch %d --seq-len %d --steps 3 2>/dev/null",
             pre, plan_exe(), c->tp, c->mode, c->L, c->C, c->H, c->B, c->T);
    json_val v;
    json_error je;
    if (plan_run(cmd, "tp-step ", out, sizeof out) || !out[0] ||
        json_parse(out + 8, strlen(out + 8), &v, &je))
        return 0;
    const json_val *mx = json_get(json_get(&v, "max"), "measured");
    m->bytes = jd(mx, "sent_bytes"), m->calls = jd(mx, "calls"), m->act = jd(mx, "act_bytes");
    m->kcpu = jd(mx, "kernel_cpu_s"), m->opt = NAN, m->step_ms = NAN;
    json_free(&v);
    return 1;
}

/* The planner's stage boundaries of p (--partition), "" when it has none
 * to give (one stage, or the engine's own partition). */
static void partition(const cb_plan_pred *p, char *part, size_t cap) {
    part[0] = 0;
    for (int s = 0, n = 0; p->nstage && p->stage_bound[p->nstage] >= 0 && s <= p->nstage &&
                           n < (int)cap; s++)
        n += snprintf(part + n, cap - n, "%s%d", s ? "," : "", p->stage_bound[s]);
}

/* One run of the case merged into m: each figure the fastest over the
 * runs (the model predicts an unloaded machine, and a shared one slows
 * some runs); the slowest run's step kept for the spread. part: the
 * stage boundaries it runs under. */
static int measure(const vcase *c, const char *dir, int over, const char *part, measured *m) {
    measured x = MEASURED_NONE;
    double rt = !over && c->dp * c->pp * c->tp * c->threads == 2 ? 1e9 * cb_core_round_trip() : NAN;
    if (!(over ? measure_tpstep(c, &x) : measure_train(c, dir, part, &x))) return 0;
    x.slow_ms = x.step_ms, x.runs = m->runs + 1, x.rt_ns = rt;
    memcpy(x.run_rt, m->run_rt, sizeof x.run_rt), memcpy(x.run_ms, m->run_ms, sizeof x.run_ms);
    if (m->runs < RUNS_KEPT) x.run_rt[m->runs] = rt, x.run_ms[m->runs] = x.step_ms;
    if (m->runs && m->step_ms < x.step_ms) x.rt_ns = m->rt_ns;
    if (m->runs)
        x.step_ms = fmin(x.step_ms, m->step_ms), x.cpu_ms = fmin(x.cpu_ms, m->cpu_ms),
        x.kcpu = fmin(x.kcpu, m->kcpu), x.slow_ms = fmax(x.slow_ms, m->slow_ms);
    *m = x;
    return 1;
}

/* --profile, one process: `cubist bench`'s per-kernel-class profile of the
 * same model and step beside the prediction's split (cb_plan_pred.kern and
 * the update), ms per step: where a miss comes from. One thread in its CPU
 * time (the load does not inflate it); two in wall time (inflated on a
 * loaded machine like the step). */
static void profile(const vcase *c, const cb_plan_pred *p) {
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=%d timeout 300 '%s' bench --layers %d --d-model %d "
             "--heads %d --vocab 256 --ctx %d --seq-lens %d --batch %d --threads %d --no-torch "
             "--json --steps 3%s%s 2>/dev/null",
             c->threads, plan_exe(), c->L, c->C, c->H, c->T, c->T, c->B, c->threads,
             c->threads == 1 ? " --kernel-cpu" : "", c->bf16 ? " --precision bf16" : "");
    json_val v;
    json_error je;
    if (plan_run(cmd, "{", out, sizeof out) || !out[0] || json_parse(out, strlen(out), &v, &je)) {
        printf("    (profile failed to run)\n");
        return;
    }
    const json_val *runs = json_get(&v, "runs"), *r = runs && runs->n ? &runs->v[0] : NULL;
    if (c->bf16 && r) r = json_get(r, "bf16"); /* the bf16 step's classes */
    double mem = jd(r, "layernorm_ms") + jd(r, "elementwise_ms") + jd(r, "loss_ms");
    printf("    by class, ms predicted/profiled: GEMM %.2f/%.2f attention %.2f/%.2f memory-bound "
           "%.2f/%.2f update %.2f/%.2f\n",
           1e3 * (p->kern.gemm_s + p->pack_s), jd(r, "gemm_ms"), 1e3 * p->kern.attn_s,
           jd(r, "attention_ms"),
           1e3 * p->kern.mem_s, mem, 1e3 * p->opt_s, jd(r, "optimizer_ms"));
    json_free(&v);
}

static void predict(const vcase *c, const cb_plan_cluster *cl, cb_plan_pred *p) {
    cb_gpt_config g = {c->L, c->C, c->H, c->T, 256};
    cb_bert_config b = {c->L, c->C, c->H, c->T, 256 + 4, 2, 0, 0.1f, 0.1f, 0};
    cb_nmt_config n = {c->L, c->L, c->C, c->H, 4 * c->C, 256 + 3, 0.1f, 256, 0, 0.1f, 1};
    cb_plan_model m;
    cb_err e;
    if (!c->model) cb_plan_model_gpt(&g, &m);
    else if ((!strcmp(c->model, "bert") ? cb_plan_model_bert(&b, &m, &e)
                                        : cb_plan_model_nmt(&n, c->T, &m, &e))) {
        p->step_s = NAN;
        return;
    }
    cb_tp_mode mode;
    cb_grid_parse_mode(c->mode, &mode, NULL);
    int sched = !strcmp(c->sched, "1f1b") ? CB_PLAN_1F1B : CB_PLAN_GPIPE;
    cb_plan_job j = {&m, cl, c->B * c->M, c->T, 25e6, 0, c->bf16};
    cb_plan_layout l = {c->dp, c->pp, c->tp, mode, sched, c->M, 1, 0, 0, 1, 0};
    cb_plan_predict(&j, &l, p);
}

static int write_tokens(const char *dir, cb_err *e) {
    char path[600];
    snprintf(path, sizeof path, "%s/tok.bin", dir);
    FILE *f = fopen(path, "wb");
    int32_t h[256] = {20240520, 1, 200000};
    int ok = f && fwrite(h, sizeof h, 1, f) == 1;
    for (int i = 0; ok && i < 200000; i++) {
        uint16_t t = (uint16_t)((i * 2654435761u) >> 8 & 255);
        ok = fwrite(&t, 2, 1, f) == 1;
    }
    if (f) ok &= fclose(f) == 0;
    return ok ? CB_OK : cb_fail(e, CB_ESYS, "cannot write %s", path);
}

/* The translation cases' pairs: sentences of a small word list, 26 to
 * 29 bytes a side, prepared as `cubist prepare --pairs` does (at most 30
 * bytes a side): sequences of nearly the model's T, as the prediction
 * counts them. Short ones (1 to 5 words, until 2026-11-29) ran up to 30%
 * faster than predicted: attention and the loss skip the padding. */
static int write_pairs(const char *dir, cb_err *e) {
    static const char *const W[] = {"the", "a", "of", "and", "to", "in", "he", "she", "it", "was"};
    char path[600], cmd[1400];
    snprintf(path, sizeof path, "%s/pairs.tsv", dir);
    FILE *f = fopen(path, "w");
    unsigned r = 1;
    for (int i = 0; f && i < 400; i++)
        for (int side = 0; side < 2; side++) {
            for (size_t len = 0; len < 26;) {
                r = r * 1103515245u + 12345u;
                const char *w = W[r >> 16 & 7];
                fprintf(f, "%s%s", len ? " " : "", w);
                len += (len ? 1 : 0) + strlen(w);
            }
            fputc(side ? '\n' : '\t', f);
        }
    if (!f || fclose(f)) return cb_fail(e, CB_ESYS, "cannot write %s", path);
    snprintf(cmd, sizeof cmd, "'%s' prepare --pairs '%s' --output '%s/pairs.bin' --context 31 "
             ">/dev/null 2>&1", plan_exe(), path, dir);
    return system(cmd) ? cb_fail(e, CB_ESYS, "cubist prepare --pairs failed in %s", dir) : CB_OK;
}

static double rel(double pred, double meas) { return (pred - meas) / meas; }

typedef struct tally {
    double sum, worst, cpu_sum, cpu_worst;
    int n, exact, nexact, ncpu;
    /* the measurement against itself: the slowest run's fastest step over
     * the fastest run's, less 1, of each timed case run more than once */
    double spread_sum, spread_worst;
    int nspread;
    /* seconds per token; NAN: not timed on 2 cores. slow: the slowest
     * run's fastest step, the measurement's own spread above meas */
    double pred[NCASES], meas[NCASES], slow[NCASES];
    /* the cases timed on both cores by where the cores sat for their
     * fastest run: near when the round trip was within CB_RT_NEAR_NS
     * (kernels/peak.h), else apart; rt_seen: a round trip was measured
     * (after a calibration, or before any run) */
    double err_near, err_apart;
    int n_near, n_apart, rt_seen;
    /* by state (1 near, 0 apart): seconds per token predicted from the
     * calibrations of 2 threads from windows in it and of 1 thread a rank
     * with both at once, and how many of each (predict_by_state); none:
     * the overall prediction */
    double spred[2][NCASES];
    int scal[2], scal1[2];
    /* the pairs timed again back to back (back_to_back): for a < b,
     * pair_n[a][b] alternated pairs of runs (0: not timed), of which
     * pair_k[a][b] ran in the order predicted for where the cores sat
     * for them, pair_near[a][b] with the cores near */
    int pair_n[NCASES][NCASES], pair_k[NCASES][NCASES], pair_near[NCASES][NCASES];
} tally;

/* a round trip counts as the cores near: within CB_RT_NEAR_NS */
static int cores_near(double rt_ns) { return rt_ns <= CB_RT_NEAR_NS; }

static void row(const vcase *c, const cb_plan_pred *p, const measured *m, tally *t) {
    int ranks = c->dp * c->pp * c->tp, over = ranks * c->threads > 2, bench = over && c->tp > 1;
    /* the log is rank 0's: the first stage, which of a pipeline longer than
     * 2 sends only forward, half of a middle stage's (the prediction) */
    double pp0 = c->pp > 2 ? 0.5 : 1, lb = c->pp > 1 ? (c->pp - 1.0) / c->pp * 4 : 0;
    double lc = c->pp > 1; /* the loss's broadcast: alike on every stage */
    double pb = p->tp_bytes + pp0 * (p->pp_bytes - lb) + lb + p->dp_bytes;
    double pc = p->tp_calls + pp0 * (p->pp_calls - lc) + lc + p->dp_calls;
    /* train logs the graph engine's planned activations; bench --tp-step
     * reports one micro-batch's plan and the layout's planned workspace */
    double pa = bench       ? p->tp.act_model_bytes + p->tp.act_scratch_bytes
                : p->nstage ? p->stage_act[0]
                            : p->mem_act;
    if (bench) pb = p->tp_bytes, pc = p->tp_calls; /* bench --tp-step: no dp, one micro-batch */
    int eq = pb == m->bytes && pc == m->calls && (isnan(m->act) || pa == m->act) &&
             (isnan(m->held) || p->mem_bf16 == m->held);
    t->nexact++, t->exact += eq;
    printf("  %-4s L%d C%-4d T%-3d B%-2d dp%d pp%d tp%d %s %-5s M%d thr%d ", case_name(c), c->L,
           c->C, c->T, c->B, c->dp, c->pp, c->tp, c->mode, c->pp > 1 ? c->sched : "", c->M,
           c->threads);
    if (!over) {
        double e = rel(1e3 * p->step_s, m->step_ms), tok = (double)c->B * c->M * c->T;
        t->sum += fabs(e), t->n++, t->worst = fmax(t->worst, fabs(e));
        if (m->runs > 1) {
            double sp = m->slow_ms / m->step_ms - 1;
            t->spread_sum += sp, t->nspread++, t->spread_worst = fmax(t->spread_worst, sp);
        }
        if (ranks * c->threads == 2)
            t->pred[c - CASES] = p->step_s / tok, t->meas[c - CASES] = 1e-3 * m->step_ms / tok,
                        t->slow[c - CASES] = 1e-3 * m->slow_ms / tok;
        printf("step %8.2f %8.2f %+6.1f%%", 1e3 * p->step_s, m->step_ms, 100 * e);
        if (!isnan(m->rt_ns)) {
            int near = cores_near(m->rt_ns);
            if (near) t->err_near += fabs(e), t->n_near++;
            else t->err_apart += fabs(e), t->n_apart++;
            printf(" cores %3.0f ns%s", m->rt_ns, near ? " " : "*");
        }
        if (!isnan(m->cpu_ms)) {
            double ec = rel(1e3 * p->step_s, m->cpu_ms);
            t->cpu_sum += fabs(ec), t->ncpu++, t->cpu_worst = fmax(t->cpu_worst, fabs(ec));
            printf(" cpu %8.2f %+6.1f%%", m->cpu_ms, 100 * ec);
        }
    } else if (!isnan(m->kcpu))
        printf("cpu  %8.2f %8.2f %+6.1f%%", 1e3 * p->compute_s, 1e3 * m->kcpu,
               100 * rel(p->compute_s, m->kcpu));
    else
        printf("%-32s", "(oversubscribed: counts only)");
    printf("  bytes %.0f/%.0f calls %.0f/%.0f act %.0f/%.0f", pb, m->bytes, pc, m->calls, pa,
           m->act);
    if (!isnan(m->held)) printf(" bf16 %.0f/%.0f", p->mem_bf16, m->held);
    printf(" %s\n", eq ? "exact" : "DIFFER");
}

static const char *kind(const vcase *c) {
    return c->threads > 1 ? "2 threads" : c->dp > 1 ? "dp 2" : c->pp > 1 ? "pp 2" : "tp 2";
}

/* The group's cases (same model, timed on both cores) in order of x[];
 * hi (NULL: none): each one's slowest run, printed as a range. */
static void print_order(const int *idx, int n, const double *x, const double *hi) {
    int o[NCASES];
    for (int i = 0; i < n; i++) o[i] = idx[i];
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[o[j]] < x[o[j - 1]]; j--) {
            int s = o[j];
            o[j] = o[j - 1], o[j - 1] = s;
        }
    for (int i = 0; i < n; i++) {
        printf("%s%s %.2f", i ? " < " : "", kind(&CASES[o[i]]), 1e6 * x[o[i]]);
        if (hi && hi[o[i]] > x[o[i]]) printf("..%.2f", 1e6 * hi[o[i]]);
    }
}

static int same(const vcase *a, const vcase *b) {
    return a->L == b->L && a->C == b->C && a->T == b->T && a->bf16 == b->bf16 &&
           (a->model == b->model || (a->model && b->model && !strcmp(a->model, b->model)));
}

/* Pairs out of the predicted order timed again (back_to_back): this
 * many alternated pairs of runs, each run the fastest step of its job */
#define PAIR_RUNS 5

/* Measured a tie: the two cases' ranges over the runs (fastest ..
 * slowest run's fastest step) overlap, so the runs do not order them. */
static int tie(const tally *t, int a, int b) {
    return fmax(t->meas[a], t->meas[b]) <= fmin(t->slow[a], t->slow[b]);
}

/* Do the layouts of one model on both cores (1 process x 2 threads, dp 2,
 * pp 2, tp 2) come out in the measured order of time per token? Each
 * model's two orders are printed (microseconds per token; the measured
 * one with each case's range over the runs), and the pairs whose order
 * differs but whose measured ranges overlap, as ties: counted apart, the
 * strict order line stays as it is. */
static void order(const tally *t, const char *state, int b2b) {
    int groups = 0, kept = 0, kept_ties = 0, kept_b2b = 0, timed = 0;
    for (int i = 0; i < NCASES; i++) {
        int first = 1, idx[NCASES], n = 0, ok = 1, okt = 1, okb = 1, nb = 0;
        char back[512] = "";
        for (int j = 0; j < i && first; j++)
            first = !(same(&CASES[j], &CASES[i]) && !isnan(t->pred[j]));
        if (!first || isnan(t->pred[i])) continue;
        int all = 1; /* every case of the model measured (in this state) */
        for (int a = i; a < NCASES; a++)
            if (!isnan(t->pred[a]) && same(&CASES[a], &CASES[i]))
                idx[n++] = a, all &= !isnan(t->meas[a]);
        if (n < 2 || !all) continue;
        char lab[32], ties[512] = "";
        int w = snprintf(lab, sizeof lab, "%s L%d C%d:", case_name(&CASES[i]), CASES[i].L,
                         CASES[i].C),
            nt = 0;
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++) {
                int x = idx[a], y = idx[b];
                if ((t->pred[x] < t->pred[y]) == (t->meas[x] < t->meas[y])) continue;
                ok = 0;
                if (!tie(t, x, y)) okt = 0;
                else if (nt < (int)sizeof ties - 64)
                    nt += snprintf(ties + nt, sizeof ties - nt, "%s%s ~ %s", nt ? ", " : "",
                                   kind(&CASES[x]), kind(&CASES[y]));
                /* back to back: in their state's predicted order in k of K */
                int K = t->pair_n[x][y], k = t->pair_k[x][y];
                if (!K || !k) okb = 0; /* not timed, or every pair against its prediction */
                if (b2b && K && nb < (int)sizeof back - 96)
                    nb += snprintf(back + nb, sizeof back - nb,
                                   "%s%s ~ %s in order %d of %d (%d near)", nb ? ", " : "",
                                   kind(&CASES[x]), kind(&CASES[y]), k, K, t->pair_near[x][y]);
            }
        timed += b2b && nb;
        groups++, kept += ok, kept_ties += okt, kept_b2b += okb;
        printf("  %s predicted ", lab);
        print_order(idx, n, t->pred, NULL);
        printf("\n  %*s measured  ", w, "");
        print_order(idx, n, t->meas, t->slow);
        printf("  %s\n", ok ? "same order" : "DIFFER");
        if (nt) printf("  %*s ties (measured ranges overlap): %s\n", w, "", ties);
        if (b2b && nb) printf("  %*s back to back: %s\n", w, "", back);
    }
    if (state)
        printf("%s: predicted order = measured in %d of %d models (with ties %d)\n", state, kept,
               groups, kept_ties);
    else {
        printf("order of layouts on both cores (time per token, same model): predicted order = "
               "measured in %d of %d models\n",
               kept, groups);
        printf("the same, pairs whose measured ranges over the runs overlap counted as ties: %d of "
               "%d models\n",
               kept_ties, groups);
    }
    if (b2b && timed)
        printf("the same, each pair out of the predicted order timed again back to back (%d "
               "alternated pairs of runs, each against the prediction for where the cores sat "
               "for it): predicted order = measured in %d of %d models, a pair counted in order "
               "when any alternated pair ran in its predicted order (a split: the machine does "
               "not order it)\n",
               PAIR_RUNS, kept_b2b, groups);
}

/* The order again with each case's runs split by where the cores sat
 * (near: a round trip up to CB_RT_NEAR_NS): the
 * fastest run in each state against the same prediction, for the models
 * whose every case ran at least once in that state. Each case's fastest
 * run overall may come from either state, and the two favour different
 * layouts (docs/plan.md, Validation: two threads of one process ran L 2,
 * C 512 in 52.75 ms near and 58.5 apart, two ranks 61.5 and 56.4), so
 * the overall order mixes two machines. */
static void order_by_state(const tally *t, const measured *m) {
    for (int near = 1; near >= 0; near--) {
        tally u = *t;
        for (int i = 0; i < NCASES; i++) {
            u.meas[i] = u.slow[i] = NAN;
            if (isnan(t->pred[i])) continue;
            const vcase *c = &CASES[i];
            double tok = (double)c->B * c->M * c->T;
            for (int r = 0; r < m[i].runs && r < RUNS_KEPT; r++) {
                if (isnan(m[i].run_rt[r]) || cores_near(m[i].run_rt[r]) != near)
                    continue;
                double x = 1e-3 * m[i].run_ms[r] / tok;
                if (!(u.meas[i] <= x)) u.meas[i] = x;
                if (!(u.slow[i] >= x)) u.slow[i] = x;
            }
        }
        char state[96];
        snprintf(state, sizeof state, "the same, each case's runs with the cores %s only",
                 near ? "near" : "apart (*)");
        printf("%s\n", state);
        if (t->scal[near] || t->scal1[near]) {
            double err = 0;
            int n = 0;
            for (int i = 0; i < NCASES; i++) {
                if (isnan(u.pred[i])) continue;
                u.pred[i] = t->spred[near][i];
                if (!isnan(u.meas[i])) err += fabs(rel(u.pred[i], u.meas[i])), n++;
            }
            printf("  predicted from %d calibration%s of 2 threads and %d of 1 thread a rank with "
                   "both at once from windows with the cores %s (the best of each figure timed "
                   "so, every calibration's for the rest): mean error %.1f%% over the %d two-core "
                   "case%s run so\n",
                   t->scal[near], t->scal[near] == 1 ? "" : "s", t->scal1[near],
                   near ? "near" : "apart", n ? 100 * err / n : 0, n, n == 1 ? "" : "s");
        } else
            printf("  predicted from every calibration's best figures: no calibration kept a "
                   "window with the cores %s\n",
                   near ? "near" : "apart");
        order(&u, state, 0);
    }
}

/* Case i's prediction for the cores at round trip rt_ns: that state's
 * (predict_by_state) where it has calibrations, else (or rt_ns NAN) the
 * overall one */
static double pred_at(const tally *t, double rt_ns, int i) {
    if (isnan(t->pred[i]) || isnan(rt_ns)) return t->pred[i];
    int near = cores_near(rt_ns);
    return (t->scal[near] || t->scal1[near]) && !isnan(t->spred[near][i]) ? t->spred[near][i]
                                                                          : t->pred[i];
}

/* the prediction for where the cores sat in case i's fastest run */
static double matched_pred(const tally *t, const measured *m, int i) {
    return pred_at(t, m[i].rt_ns, i);
}

/* The overall order and error again, each two-core case against the
 * prediction for where the cores sat in its fastest run (the
 * calibrations from windows in that state, predict_by_state; the overall
 * prediction where no calibration kept such a window): the overall table
 * predicts every case from every calibration's best, each figure from
 * whichever state it was best in, while a case's fastest run was in one
 * state, and the states favour different layouts (order_by_state). */
static void order_matched(const tally *t, const measured *m) {
    tally u = *t;
    double err = 0, worst = 0;
    int n = 0, moved = 0;
    for (int i = 0; i < NCASES; i++) {
        if (isnan(t->pred[i]) || isnan(t->meas[i]) || isnan(m[i].rt_ns)) continue;
        u.pred[i] = matched_pred(t, m, i), moved += u.pred[i] != t->pred[i];
        double e = fabs(rel(u.pred[i], u.meas[i]));
        err += e, n++, worst = fmax(worst, e);
    }
    if (!n) return;
    printf("the two-core cases against the prediction for where the cores sat in each one's "
           "fastest run (%d of %d from that state's calibrations): mean error %.1f%% (worst "
           "%.1f%%)\n",
           moved, n, 100 * err / n, 100 * worst);
    order(&u, "the same, the order", 1);
}

/* The validation across its rounds: the rates each case is predicted
 * from, its predictions, what the runs measured. */
typedef struct vstate {
    const plan_opts *o;
    const char *dir;
    cb_plan_cluster cl[2]; /* by threads - 1 */
    int want[2], n;        /* the thread counts calibrated here, not read from --cluster */
    int rt_seen; /* a calibration's round trip was measured (two threads formed) */
    /* each round's calibrations of 2 threads from the windows with the
     * cores apart [0] or near [1] only (cb_plan_probe_placement), and the
     * windows each judged and kept; npcal: how many rounds made them */
    cb_plan_cluster pcal[CB_PLAN_MAXRUNS][2];
    int pjudged[CB_PLAN_MAXRUNS][2], pkept[CB_PLAN_MAXRUNS][2], npcal;
    /* the same rounds' figures of 1 thread a rank with both ranks at once
     * (plan_measure_shared) from the windows in each state, and theirs */
    cb_plan_cluster scal1[CB_PLAN_MAXRUNS][2];
    int sjudged[CB_PLAN_MAXRUNS][2], skept[CB_PLAN_MAXRUNS][2];
    cb_plan_pred *p;       /* NCASES */
    measured m[NCASES];
    int ok[NCASES], rounds;
    char part[NCASES][256]; /* the stage boundaries each case ran under */
} vstate;

/* Every case's prediction from s->cl; first: also which cases run (the
 * quick set; bf16 needs the calibration's bf16 rates). */
static void predict_all(vstate *s, int first) {
    for (int i = 0; i < NCASES; i++) {
        if (first) {
            s->ok[i] = !s->o->quick || CASES[i].quick;
            if (s->ok[i] && CASES[i].bf16 && !(s->cl[CASES[i].threads - 1].bf16.peak_flops > 0)) {
                printf("  case %d (bf16): the calibration of %d thread%s has no bf16 rates; skipped\n",
                       i + 1, CASES[i].threads, CASES[i].threads > 1 ? "s" : "");
                s->ok[i] = 0;
            }
        }
        if (s->ok[i]) predict(&CASES[i], &s->cl[CASES[i].threads - 1], &s->p[i]);
    }
}

/* Run r of every case (round-robin: run r of every case, then run r + 1,
 * so that the machine's slow spells (docs/plan.md, Validation) fall on
 * different cases' runs, not on every run of one). A pipeline runs under
 * the stage boundaries of the first prediction in every round. */
static void run_round(vstate *s) {
    for (int i = 0; i < NCASES; i++) {
        const vcase *c = &CASES[i];
        int over = c->dp * c->pp * c->tp * c->threads > 2 && c->tp > 1;
        if (!s->ok[i]) continue;
        if (!s->rounds) partition(&s->p[i], s->part[i], sizeof s->part[i]);
        if (!measure(c, s->dir, over, s->part[i], &s->m[i])) {
            printf("  case %d failed to run; skipped\n", i + 1);
            s->ok[i] = 0;
        }
    }
    s->rounds++;
}

/* After calibration i of every count: its figures stand in for the
 * best figures to come until the cases are first predicted (round 0: the
 * pipelines' stage boundaries), then round i of the cases runs. */
static int on_round(void *ctx, int i, const cb_plan_cluster *const now[2], cb_err *e) {
    vstate *s = ctx;
    (void)e;
    printf("round %d: calibrated", i + 1);
    for (int k = 0; k < s->n; k++)
        printf("%s %d thread%s (peak %.1f GFLOP/s)", k ? " and" : "", s->want[k],
               s->want[k] > 1 ? "s" : "", now[k]->peak_flops / 1e9);
    double rt = 1e9 * cb_core_round_trip();
    if (!isnan(rt)) printf(", the cores' round trip %.0f ns", rt), s->rt_seen = 1;
    /* 2 threads again, twice: from the windows with the cores apart, then
     * near (the other windows rerun up to 4x: a figure with none in the
     * state is not measured); after each, 1 thread a rank's figures with
     * both ranks at once from the windows in the same state (not with
     * --quick, which measures none of them) */
    int two = s->n == 2 || (s->n == 1 && s->want[0] == 2);
    for (int near = 0; two && s->npcal < CB_PLAN_MAXRUNS && near <= 1; near++) {
        int r = s->npcal, rc;
        cb_plan_probe_placement(near ? 1 : 2, NULL, NULL);
        rc = plan_measure(2, s->o->quick, 0, !s->o->quick, &s->pcal[r][near], e);
        cb_plan_probe_placement(near ? 1 : 2, &s->pjudged[r][near], &s->pkept[r][near]);
        if (!rc) rc = plan_measure_shared(s->o->quick, &s->scal1[r][near], e);
        cb_plan_probe_placement(0, &s->sjudged[r][near], &s->skept[r][near]);
        if (rc) return rc;
        printf("%s 2 threads with the cores %s only: %d of %d windows", near ? "," : ";",
               near ? "near" : "apart", s->pkept[r][near], s->pjudged[r][near]);
        if (s->sjudged[r][near])
            printf(" (1 thread a rank, both at once: %d of %d)", s->skept[r][near],
                   s->sjudged[r][near]);
        if (near) s->npcal++;
    }
    if (!i) {
        for (int k = 0; k < s->n; k++) s->cl[s->want[k] - 1] = *now[k];
        predict_all(s, 1);
    }
    if (s->rounds < s->o->repeat) {
        printf("; run %d of every case\n", s->rounds + 1);
        fflush(stdout);
        run_round(s);
    } else
        printf("\n");
    fflush(stdout);
    return CB_OK;
}

/* s->cl[0] in a state: its figures with both ranks at once (the GEMM's
 * share, the memory-bound kernels' and the update's rates) each the best
 * of the rounds' one-thread calibrations from windows in the state that
 * timed it, s->cl[0]'s where none did; returns how many calibrations
 * timed any. */
static int one_thread_in_state(const vstate *s, int near, cb_plan_cluster *c) {
    static const size_t F[] = {offsetof(cb_plan_cluster, gemm_shared),
                               offsetof(cb_plan_cluster, mem_bandwidth_shared),
                               offsetof(cb_plan_cluster, update_bandwidth_shared)};
    double best[3] = {0, 0, 0};
    int n = 0;
    *c = s->cl[0];
    for (int r = 0; r < s->npcal; r++) {
        int any = 0;
        for (int f = 0; f < 3; f++) {
            double v = *(const double *)((const char *)&s->scal1[r][near] + F[f]);
            best[f] = fmax(best[f], v), any |= v > 0;
        }
        n += any;
    }
    for (int f = 0; f < 3; f++)
        if (best[f] > 0) *(double *)((char *)c + F[f]) = best[f];
    return n;
}

/* t->spred[state], t->scal[state] and t->scal1[state]: the two-core cases
 * predicted with 2 threads at the best figures of the rounds'
 * calibrations from windows in that state (those that kept any window; a
 * figure none of them timed in the state, from every calibration's best)
 * and 1 thread a rank at the state's figures with both ranks at once
 * (one_thread_in_state), once any round trip was measured */
static void predict_by_state(const vstate *s, tally *t) {
    cb_plan_pred *p = malloc(sizeof *p);
    for (int near = 0; near <= 1 && p; near++) {
        cb_plan_cluster sel[CB_PLAN_MAXRUNS], cl[2] = {s->cl[0], s->cl[1]};
        int n = 0;
        for (int r = 0; r < s->npcal; r++)
            if (s->pkept[r][near] > 0) sel[n++] = s->pcal[r][near];
        t->scal[near] = n;
        t->scal1[near] = one_thread_in_state(s, near, &cl[0]);
        if (!n && !t->scal1[near]) continue;
        double spread[CB_PLAN_NSPREAD];
        if (n) cb_plan_cluster_best(sel, n, &s->cl[1], &cl[1], spread);
        for (int i = 0; i < NCASES; i++) {
            t->spred[near][i] = NAN;
            if (!s->ok[i] || isnan(t->pred[i])) continue;
            const vcase *c = &CASES[i];
            predict(c, &cl[c->threads - 1], p);
            t->spred[near][i] = p->step_s / ((double)c->B * c->M * c->T);
        }
    }
    free(p);
}

/* Each pair of one model's two-core cases whose fastest runs are out of
 * the order of the overall prediction or of the one for where the cores
 * sat (matched_pred), timed again back to back: PAIR_RUNS times a run of
 * each (which one first alternates), each run the fastest step after the
 * first of its job, per token, against the prediction for where the
 * cores sat just before the two (pred_at); into t->pair_n, pair_k and
 * pair_near. The rounds run a model's cases minutes apart, between which
 * this VM's speed and the cores' placement move (docs/plan.md,
 * Validation); runs seconds apart share them. */
static void back_to_back(const vstate *s, tally *t) {
    for (int a = 0; a < NCASES; a++)
        for (int b = a + 1; b < NCASES; b++) {
            const vcase *ca = &CASES[a], *cb = &CASES[b];
            if (isnan(t->meas[a]) || isnan(t->meas[b]) || isnan(t->pred[a]) || isnan(t->pred[b]) ||
                !same(ca, cb))
                continue;
            int faster = t->meas[a] < t->meas[b];
            if ((t->pred[a] < t->pred[b]) == faster &&
                (matched_pred(t, s->m, a) < matched_pred(t, s->m, b)) == faster)
                continue;
            double ta = (double)ca->B * ca->M * ca->T, tb = (double)cb->B * cb->M * cb->T;
            int n = 0, k = 0, near = 0;
            for (int r = 0; r < PAIR_RUNS; r++) {
                measured x = MEASURED_NONE, y = MEASURED_NONE;
                double rt = 1e9 * cb_core_round_trip();
                int ok = r & 1 ? measure_train(cb, s->dir, s->part[b], &y) &&
                                     measure_train(ca, s->dir, s->part[a], &x)
                               : measure_train(ca, s->dir, s->part[a], &x) &&
                                     measure_train(cb, s->dir, s->part[b], &y);
                if (!ok) break;
                n++, near += !isnan(rt) && cores_near(rt);
                k += (x.step_ms / ta < y.step_ms / tb) == (pred_at(t, rt, a) < pred_at(t, rt, b));
            }
            t->pair_n[a][b] = n, t->pair_k[a][b] = k, t->pair_near[a][b] = near;
        }
}

/* The 1- and 2-thread clusters: the files of --cluster F[,F2] by their
 * `threads`, the rest calibrated now (the best of --repeat runs, at
 * least 3 for the full set, the two counts' runs round-robin; the
 * collectives in each run, 1 thread per rank as every multi-rank case
 * runs),
 * each run of them followed by a round of the cases (on_round); the
 * calibration's figures printed. */
static int validate_clusters(vstate *s, cb_err *e) {
    const plan_opts *o = s->o;
    int have[2] = {0, 0}, rc = CB_OK;
    char list[4096], path[4096];
    snprintf(list, sizeof list, "%s", o->cluster ? o->cluster : "");
    for (char *save = NULL, *f = strtok_r(list, ",", &save); f && !rc; f = strtok_r(NULL, ",", &save)) {
        cb_plan_cluster c;
        rc = plan_find_cluster(f, path, sizeof path, e);
        if (!rc) rc = cb_plan_cluster_read(path, &c, e);
        if (!rc && (c.threads < 1 || c.threads > 2))
            rc = cb_fail(e, CB_EINPUT, "--validate --cluster %s: threads %d; give files calibrated "
                         "with --threads 1 and --threads 2", f, c.threads);
        if (!rc) s->cl[c.threads - 1] = c, have[c.threads - 1] = 1;
        if (!rc) printf("calibration of threads %d: %s (%s)\n", c.threads, path, c.name);
    }
    int runs = o->quick ? o->repeat : o->repeat > 3 ? o->repeat : 3;
    for (int t = 0; t < 2; t++)
        if (!have[t]) s->want[s->n++] = t + 1;
    cb_plan_cluster got[2];
    double spread[2][CB_PLAN_NSPREAD];
    if (rc || !s->n) return rc;
    /* the bf16 cases' rates with the full set (none of them is quick) */
    rc = plan_measure_best(s->n, s->want, o->quick, !have[0], !o->quick, runs, on_round, s, got,
                           spread, e);
    for (int i = 0; i < s->n && !rc; i++) {
        s->cl[s->want[i] - 1] = got[i];
        plan_print_spread(&got[i], runs, spread[i]);
    }
    return rc;
}

int plan_validate(const plan_opts *o, cb_err *e) {
    char dir[] = "/tmp/cubist-validate-XXXXXX";
    if (!mkdtemp(dir)) return cb_fail(e, CB_ESYS, "cannot make a temporary directory in /tmp");
    cli_mpirun_allow_root();
    double load[3] = {0};
    if (getloadavg(load, 3) < 1) load[0] = NAN;
    vstate *s = calloc(1, sizeof *s);
    cb_plan_pred *p = calloc(NCASES, sizeof *p);
    int rc = s && p ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory for the validation's predictions");
    if (!rc) {
        s->o = o, s->dir = dir, s->p = p;
        for (int i = 0; i < NCASES; i++) s->m[i] = (measured)MEASURED_NONE;
        rc = write_tokens(dir, e);
    }
    if (!rc && !o->quick) rc = write_pairs(dir, e);
    if (!rc) rc = validate_clusters(s, e);
    if (!rc && !s->rounds) predict_all(s, 1); /* every rate from --cluster files */
    while (!rc && s->rounds < o->repeat) run_round(s);
    /* the calibrated counts' best figures: the predictions printed */
    if (!rc) predict_all(s, 0);
    tally t = {0};
    for (int i = 0; i < NCASES; i++) t.pred[i] = t.meas[i] = t.slow[i] = NAN;
    t.rt_seen = s && s->rt_seen; /* after a calibration, or before any run (not only the fastest) */
    for (int i = 0; s && i < NCASES; i++)
        for (int r = 0; s->ok[i] && r < s->m[i].runs && r < RUNS_KEPT; r++)
            t.rt_seen |= !isnan(s->m[i].run_rt[r]);
    if (!rc)
        printf("validation on this machine (%ld cores, load average %.1f at the start: timings "
               "are contended when it exceeds the cores); predicted vs measured, the fastest of "
               "%d run%s (round-robin over the cases%s)\n"
               "  case                                             what  predicted measured  error\n",
               sysconf(_SC_NPROCESSORS_ONLN), load[0], o->repeat, o->repeat > 1 ? "s" : "",
               s->n ? ", each round after a calibration: the rates and the steps from the same "
                      "minutes" : "");
    for (int i = 0; i < NCASES && !rc; i++) {
        if (!s->ok[i]) continue;
        row(&CASES[i], &p[i], &s->m[i], &t);
        char now[256];
        partition(&p[i], now, sizeof now);
        if (strcmp(now, s->part[i]))
            printf("    (ran under the stage boundaries %s of the first calibration; the best "
                   "figures' plan has %s)\n", s->part[i], now);
        /* `cubist bench` profiles GPT's step only: a BERT or NMT case would
         * print a GPT of its sizes */
        if (o->profile && CASES[i].dp * CASES[i].pp * CASES[i].tp == 1 && !CASES[i].model)
            profile(&CASES[i], &p[i]);
        fflush(stdout);
    }
    if (s && !rc && t.rt_seen) predict_by_state(s, &t);
    if (s && !rc && t.n) back_to_back(s, &t);
    /* the runs by state, for order_by_state after the tables */
    measured *ms = s && !rc ? malloc(sizeof s->m) : NULL;
    if (ms) memcpy(ms, s->m, sizeof s->m);
    free(p);
    free(s);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm)) {}
    if (!rc && t.n)
        printf("mean step-time error %.1f%% (worst %.1f%%) over %d timed cases; bytes, calls and "
               "activations (and the bf16 table's memory) exact in %d of %d\n", 100 * t.sum / t.n, 100 * t.worst, t.n, t.exact,
               t.nexact);
    if (!rc && t.nspread)
        printf("the measurement against itself: the slowest of the %d runs' fastest steps is "
               "%.1f%% above the fastest on average (worst %.1f%%) over %d timed cases: the "
               "machine's own noise, which the step-time error above includes\n",
               o->repeat, 100 * t.spread_sum / t.nspread, 100 * t.spread_worst, t.nspread);
    if (!rc && t.n_near + t.n_apart)
        printf("the cases timed on both cores, by where the cores sat for their fastest run (a "
               "cache line's round trip between them, `cores`): within %.0f ns, mean error "
               "%.1f%% over %d; farther apart (*), %.1f%% over %d\n",
               CB_RT_NEAR_NS, t.n_near ? 100 * t.err_near / t.n_near : 0,
               t.n_near, t.n_apart ? 100 * t.err_apart / t.n_apart : 0, t.n_apart);
    if (!rc && t.ncpu)
        printf("one process, one thread, against its CPU time per step (what the load does not "
               "inflate): mean error %.1f%% (worst %.1f%%) over %d cases\n",
               100 * t.cpu_sum / t.ncpu, 100 * t.cpu_worst, t.ncpu);
    if (!rc && t.n) order(&t, NULL, 1);
    if (!rc && t.n && t.rt_seen && ms) order_matched(&t, ms), order_by_state(&t, ms);
    free(ms);
    return rc;
}
