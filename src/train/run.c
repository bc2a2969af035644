/* `cubist train` end to end: resolve the model config, open data, loop,
 * log, evaluate, save. */
#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/grid.h"
#include "kernels/peak.h"
#include "comm/stats.h"
#include "layout/layout.h"
#include "graph/graph.h"
#include "formats/fileio.h"
#include "train/check.h"
#include "train/ckpt.h"
#include "train/stop.h"
#include "train/train.h"
#include "util/clock.h"


static int check_opts(const cb_train_opts *o, cb_err *e) {
    return cb_train_check_flags(o, e);
}

static long peak_rss_bytes(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_maxrss * 1024L;
}

typedef struct run_state {
    const cb_train_sink *sink; /* world rank 0: where the records go; NULL elsewhere */
    double peak, flops_per_token, t_start;
    long tokens;
    int row_tokens;         /* tokens per row (the task's) */
    int first_step;
    cb_grid *grid;          /* NULL without MPI */
    int rank;               /* world rank: only 0 prints and writes */
    cb_comm_steplog comm;   /* with grid: the step's traffic, every rank's */
    size_t opt_bytes;       /* AdamW m and v on this rank */
    cb_err log_err;         /* a failed record (world rank 0: the log), agreed after the step */
    double slowest_ms;      /* the longest step so far: the default stall timeout */
} run_state;

/* The step's traffic over every group of the grid; with a log, every
 * rank's totals gathered to world rank 0 (the same decision on every rank:
 * --log is one flag for all). */
static void comm_delta(run_state *r, const cb_train_opts *o) {
    if (r->grid) cb_comm_steplog_end(&r->comm, o->log != NULL);
}

static int comm_init(run_state *r, cb_err *e) {
    if (!r->grid) return CB_OK;
    return cb_comm_steplog_init(&r->comm, &r->grid->world, r->grid->comms, r->grid->ncomms, e);
}

/* The first step starts here: the setup's traffic is no step's. */
static void comm_start(run_state *r) {
    if (r->grid) cb_comm_steplog_mark(&r->comm);
}

/* The step's communication fields (comm/stats.h) as ',"key":value'
 * pairs, allocated; zeros without MPI. */
static char *comm_fields(run_state *r) {
    static const char ZERO[] = ",\"comm_bytes\":0,\"comm_bytes_recv\":0,\"comm_calls\":0,\"comm_ms\":0";
    size_t n = r->grid ? cb_comm_steplog_json(&r->comm, NULL, 0) + 1 : sizeof ZERO;
    char *buf = malloc(n);
    if (!buf) cb_comm_fatal("out of memory for the log's communication fields");
    if (r->grid) cb_comm_steplog_json(&r->comm, buf, n);
    else memcpy(buf, ZERO, sizeof ZERO);
    return buf;
}

/* Every rank ends with the same status and message (rank order decides). */
static int agree(cb_comm *w, int rc, cb_err *e) {
    if (!w) return rc;
    if (!rc) e->code = CB_OK;
    return cb_comm_agree_err(w, e);
}

/* After a save (result rc, agreed): --save-dtype bf16|f16 rewrites the
 * weights file in that dtype (export; F.state keeps the fp32 moments). */
static int export_dtype(cb_comm *w, const cb_train_opts *o, const char *path, int rc, cb_err *e) {
    int dtype = CB_ST_F32;
    cb_st_dtype_parse(o->save_dtype, &dtype, e); /* checked with the flags */
    if (rc || dtype == CB_ST_F32) return rc;
    if (!w || w->rank == 0) rc = cb_st_convert(path, dtype, e);
    return agree(w, rc, e);
}

/* One step's record to the sink (world rank 0); its failure is kept in
 * r->log_err, agreed after the step. pp: the pipeline's fields. */
static void report(const cb_train_opts *o, int step, run_state *r, const cb_step_stats *st,
                   float val_loss, const cb_train_metric *mt, int nmt, const char *pp,
                   const char *warning) {
    long step_tokens = (long)o->B * r->row_tokens * o->accum;
    r->tokens += step_tokens;
    if (!r->sink) return;
    double tps = step_tokens / (st->step_ms / 1e3);
    char *comm = o->log ? comm_fields(r) : NULL;
    cb_train_record rec = {.step = step, .first_step = r->first_step, .st = *st,
                           .tokens = (double)r->tokens, .tokens_per_s = tps,
                           .mfu = tps * r->flops_per_token / (r->peak * 1e9),
                           .elapsed_s = omp_get_wtime() - r->t_start,
                           .peak_rss_bytes = peak_rss_bytes(), .opt_state_bytes = r->opt_bytes,
                           .val_loss = val_loss, .metrics = mt, .nmetrics = nmt,
                           .comm_fields = comm ? comm : "", .pp_fields = pp, .warning = warning};
    cb_err e = {0};
    if (r->sink->step(r->sink->ctx, &rec, &e) && !r->log_err.code) r->log_err = e;
    free(comm);
}

/* ------------------------------------------------------------ the trainer */

/* A task's model (cb_train_task: GPT, NCF, BERT...) as a graph on the
 * engine that runs every model: a step is M micro-batches of --batch B
 * rows from the task, this data-parallel rank's rows of each. */
typedef struct trainer {
    const cb_train_opts *o;
    const cb_train_task *task;
    cb_dist d;
    cb_model *m;
    int step;        /* steps done */
    uint64_t tokens; /* since step 0, every rank and micro-batch */
    int *ids, *targets; /* M x rows x the task's row_ids, row_targets */
    int rows, r0;    /* this rank's rows [r0, r0 + rows) of each micro-batch */
    int exit_rank, exit_step; /* test only: CUBIST_TEST_EXIT_RANK/_STEP */
    cb_err dump_err; /* world rank 0: --dump-grads failed (a warning in the step's record) */
} trainer;

/* The task's config (n_layer...) travels in every file's metadata, then
 * extra. */
enum { TASK_NMETA = 16 };
static int save_file(trainer *t, int nb, const float *const *blocks, const char *const *prefix,
                     const char *path, const char *const *extra, int nextra, cb_err *e) {
    char text[TASK_NMETA][24];
    const char *meta[2 * (TASK_NMETA + CB_STATE_NMETA)];
    int k = t->task->meta(t->task->ctx, meta, text, TASK_NMETA);
    for (int i = 0; i < 2 * nextra; i++) meta[2 * k + i] = extra[i];
    return cb_graph_save_blocks(t->m, nb, blocks, prefix, path, meta, k + nextra, e);
}

/* path: the weights and the checkpoint id; path.state: the AdamW moments
 * (whole tensors, ZeRO shards gathered), step, data position and RNG,
 * tokens, with the same id. Collective. */
static int trainer_save(trainer *t, const char *path, cb_err *e) {
    cb_state_text text;
    const char *meta[2 * CB_STATE_NMETA];
    cb_state_meta(&text, meta, t->step, t->m->opt.t, t->task->ld, t->tokens);
    int oom;
    float *full = cb_graph_full_moments(t->m, &oom);
    e->code = CB_OK;
    if (oom) cb_fail(e, CB_ENOMEM, "out of memory gathering the optimizer state for %s", path);
    int rc = cb_comm_agree_err(cb_comm_world(), e);
    const float *w = t->m->params;
    const char *none = "", *prefix[2] = {"m.", "v."};
    if (!rc) rc = save_file(t, 1, &w, &none, path, meta, CB_WEIGHTS_NMETA, e); /* id, tokenizer */
    char sp[4200];
    snprintf(sp, sizeof sp, "%s.state", path);
    const float *mv[2] = {full, full ? full + t->m->pt.nparams : NULL};
    if (!rc) rc = save_file(t, 2, mv, prefix, sp, meta, CB_STATE_NMETA, e);
    free(full);
    return rc;
}

/* --resume: the weights, then from path.state (its id checked against the
 * weights') the moments, step, AdamW count, data position and tokens. */
static int trainer_resume(trainer *t, const char *path, cb_err *e) {
    int rc = cb_model_load(t->m, path, e), at = 0;
    if (rc) return rc;
    char sp[4200];
    snprintf(sp, sizeof sp, "%s.state", path);
    cb_st_file f;
    rc = cb_st_open(sp, &f, e);
    if (!rc) {
        rc = cb_state_check_pair(path, &f, sp, e);
        if (!rc) rc = cb_state_read(&f, sp, &t->step, &at, t->task->ld, &t->tokens, e);
        if (!rc) rc = cb_graph_load_moments(t->m, &f, sp, e);
        cb_st_close(&f);
    }
    t->m->opt.t = at;
    if (!rc) e->code = CB_OK;
    return cb_comm_agree_err(cb_comm_world(), e);
}

/* --dump-grads: step 1's gradients, reduced and averaged, before clipping;
 * test only: a rank that dies mid-step (CUBIST_TEST_EXIT_RANK/_STEP). */
static void on_grads(cb_model *m, int step, void *ctx) {
    trainer *t = ctx;
    if (t->exit_rank >= 0 && step + 1 == t->exit_step && m->d->g.world_rank == t->exit_rank)
        _exit(3);
    if (step != 0 || !t->o->dump_grads) return;
    cb_err e = {0};
    const float *g = m->grads;
    const char *none = "";
    if (save_file(t, 1, &g, &none, t->o->dump_grads, NULL, 0, &e) && m->d->g.world_rank == 0)
        t->dump_err = e;
}

/* One optimizer step on the task's M micro-batches of this step; a batch
 * that failed on any rank fails every rank before the step (collective). */
static int trainer_step(trainer *t, cb_step_stats *st, cb_model_step_info *info, cb_err *e) {
    const cb_train_opts *o = t->o;
    double cpu0 = 1e3 * cb_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    int rc = t->task->batch(t->task->ctx, t->step, o->accum, t->r0, t->rows, t->ids, t->targets, e);
    if ((rc = agree(cb_comm_world(), rc, e))) return rc;
    float norm = 0;
    float loss = cb_model_train_step(t->m, t->ids, t->targets, t->step, &norm);
    cb_model_last_step(t->m, info);
    *st = (cb_step_stats){.loss = loss, .lr = cb_lr_at(&t->m->opt.c, t->step), .grad_norm = norm,
                          .step_ms = info->step_ms, .fwd_ms = info->forward_ms,
                          .bwd_ms = info->backward_ms, .opt_ms = info->update_ms,
                          .comm_wait_ms = t->d.g.dp > 1 ? t->m->dp.wait_ms : 0,
                          .cpu_ms = 1e3 * cb_clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0};
    t->step++;
    t->tokens += (uint64_t)o->B * t->task->row_tokens * o->accum;
    return CB_OK;
}

/* The task's evaluation (at most 8 metrics) to the sink; val_loss for
 * the record (left as it was when the task has none). */
static int trainer_eval(trainer *t, const cb_train_sink *sink, cb_train_metric *mt, int *n,
                        float *val_loss, cb_err *e) {
    *n = t->task->eval(t->task->ctx, t->m, t->r0, t->rows, t->ids, t->targets, mt, 8, e);
    if (*n < 0) return e->code;
    for (int i = 0; i < *n; i++)
        if (!strcmp(mt[i].name, "val_loss")) *val_loss = (float)mt[i].value;
    if (sink && sink->eval && *n) sink->eval(sink->ctx, t->step, mt, *n);
    return CB_OK;
}

/* Test-only failure drill: rank CUBIST_TEST_EXIT_RANK exits in the middle
 * of step CUBIST_TEST_EXIT_STEP (1-based), as a crashed rank would. */
static void test_exit_env(trainer *t) {
    const char *r = getenv("CUBIST_TEST_EXIT_RANK"), *s = getenv("CUBIST_TEST_EXIT_STEP");
    t->exit_rank = r ? atoi(r) : -1;
    t->exit_step = s ? atoi(s) : 1;
}

/* The engine's options from cubist train's flags (resolved and checked by
 * cb_pp_opts_resolve and cb_train_check_flags). */
static int dist_opts(trainer *t, cb_err *e) {
    const cb_train_opts *o = t->o;
    const cb_pp_opts *po = &o->pipe;
    cb_dist *d = &t->d;
    cb_grid *g = &d->g;
    int r = cb_dist_pipeline(d, g->pp, po, e);
    if (!r) r = cb_dp_embed_parse(o->embed_grad, &d->embed_grad, e);
    if (!r) r = cb_dp_comm_dtype_parse(o->comm_dtype, &d->comm_bf16, e);
    if (!r) r = cb_dist_parse_size(o->max_memory, &d->max_memory, e);
    if (r) return r;
    d->M = o->accum, d->zero = o->zero, d->bucket_mb = o->bucket_mb;
    d->block_units = t->task->block_units;
    if (!t->task->profile) d->profile = 0;
    int v = po->virtual_stages != CB_PP_UNSET ? po->virtual_stages
            : d->sched == CB_PP_INTERLEAVED   ? 2
                                              : 1;
    d->v = v;
    int p = g->pp, nmod = t->task->modules;
    if (p > 1) r = cb_pp_schedule_check(d->sched, p, v, o->accum, e);
    if (r || !nmod || p * v <= nmod) return r;
    if (v == 1 || p > nmod)
        return cb_fail(e, CB_EINPUT, "--pp %d stages for a model of %d modules (%s); use "
                                     "--pp between 2 and %d, or a larger model",
                       p, nmod, t->task->modules_what, nmod);
    return cb_fail(e, CB_EINPUT, "--pp %d x --virtual-stages %d = %d pipeline stages for a model of "
                                 "%d modules (%s); use --virtual-stages between 1 and %d",
                   p, v, p * v, nmod, t->task->modules_what, nmod / p);
}

/* Declares and builds the task's model on t's grid and layout (t->d.g,
 * t->d.L); loads --init or --resume over the seed's values. Collective. */
static int trainer_init(trainer *t, const cb_train_opts *o, const cb_train_task *task, cb_err *e) {
    cb_grid *g = &t->d.g;
    t->o = o;
    t->task = task;
    test_exit_env(t);
    int rc = dist_opts(t, e);
    if (!rc && o->B % g->dp)
        rc = cb_fail(e, CB_EINPUT,
                     "--batch %d does not split over %d data-parallel ranks; use a multiple of %d",
                     o->B, g->dp, g->dp);
    if (!rc) rc = task->check(task->ctx, t->d.L, o->B / g->dp, e); /* the layout's constraints */
    if ((rc = agree(cb_comm_world(), rc, e))) return rc; /* not counted as the run's traffic */
    t->rows = o->B / g->dp;
    t->r0 = g->at.d * t->rows;
    cb_adamw_config opt = o->opt;
    opt.steps = o->steps; /* the cosine schedule's length */
    t->m = cb_model_new(&t->d, o->B * o->accum, o->T);
    if (t->m) task->declare(task->ctx, t->m);
    if ((rc = cb_model_build(t->m, o->seed, &opt, e))) return rc;
    t->m->on_grads = on_grads;
    t->m->on_grads_ctx = t;
    size_t n = (size_t)o->accum * t->rows;
    t->ids = malloc(sizeof(int) * n * (task->row_ids + task->row_targets));
    if (!t->ids) rc = cb_fail(e, CB_ENOMEM, "out of memory for the batch");
    else t->targets = t->ids + n * task->row_ids;
    if ((rc = agree(cb_comm_world(), rc, e))) return rc; /* not counted as the run's traffic */
    if (o->init) rc = cb_model_load(t->m, o->init, e);
    if (!rc && o->resume) rc = trainer_resume(t, o->resume, e);
    return rc;
}

static void trainer_free(trainer *t) {
    cb_model_free(t->m);
    free(t->ids);
}

/* The log's activation and pipeline fields: act_bytes without --pp; with
 * it, per stage (gathered over the pipeline group) forward and backward
 * compute, their sum, blocked time, bubble and planned activation bytes;
 * fwd_ms and bwd_ms become stage 0's. */
enum { PF_FWD, PF_BWD, PF_BUSY, PF_WAIT, PF_BUBBLE, PF_ACT, PF_N };
static void put_array(char *buf, size_t cap, int *len, const char *key, const double *v, int k,
                      int p, int prec) {
    *len += snprintf(buf + *len, cap - *len, ",\"%s\":[", key);
    for (int i = 0; i < p && *len < (int)cap; i++)
        *len += snprintf(buf + *len, cap - *len, "%s%.*f", i ? "," : "", prec, v[i * PF_N + k]);
    if (*len < (int)cap) *len += snprintf(buf + *len, cap - *len, "]");
}

static void pp_fields(trainer *t, const cb_model_step_info *in, cb_step_stats *st, char *buf,
                      size_t cap) {
    int p = t->d.g.pp, len = 0;
    double mine[PF_N] = {in->forward_ms, in->backward_ms, in->forward_ms + in->backward_ms,
                         in->wait_ms, in->bubble, (double)cb_model_activation_bytes(t->m)};
    if (p == 1) {
        snprintf(buf, cap, ",\"act_bytes\":%.0f", mine[PF_ACT]);
        return;
    }
    double *all = calloc((size_t)PF_N * p, sizeof *all), mean = 0;
    if (!all) cb_comm_fatal("out of memory for the log's pipeline fields");
    for (int i = 0; i < PF_N; i++) all[t->d.g.at.p * PF_N + i] = mine[i];
    cb_comm_allreduce_f64(&t->d.g.ppg, "pp.stats", all, all, (size_t)PF_N * p, CB_COMM_SUM);
    for (int i = 0; i < p; i++) mean += all[i * PF_N + PF_BUBBLE] / p;
    st->fwd_ms = all[PF_FWD], st->bwd_ms = all[PF_BWD];
    const char *keys[PF_N] = {"pp_fwd_ms", "pp_bwd_ms", "pp_busy_ms", "pp_wait_ms", "pp_bubble",
                              "pp_act_bytes"};
    int prec[PF_N] = {3, 3, 3, 3, 4, 0};
    buf[0] = '\0';
    for (int k = 0; k < PF_N; k++) put_array(buf, cap, &len, keys[k], all, k, p, prec[k]);
    if (len < (int)cap)
        snprintf(buf + len, cap - len, ",\"pp_bubble_mean\":%.4f,\"pp_bubble_formula\":%.4f", mean,
                 cb_pp_bubble_formula(p, t->m->v, t->m->M));
    free(all);
}

/* --precision bf16: the bytes this rank's bf16 table holds outside the
 * engine's plan (cb_kernels_bf16_held), appended to the log's fields */
static void bf16_fields(char *buf, size_t cap) {
    if (cb_kernels_precision() != CB_PREC_BF16) return;
    double copies, staging;
    size_t len = strlen(buf);
    cb_kernels_bf16_held(&copies, &staging);
    if (len < cap)
        snprintf(buf + len, cap - len, ",\"bf16_copies_bytes\":%.0f,\"bf16_staging_bytes\":%.0f",
                 copies, staging);
}

static cb_comm *world_of(run_state *r) { return r->grid ? &r->grid->world : NULL; }

static int save(run_state *r, const cb_train_opts *o, int step, cb_ckpt_writer wr, void *ctx,
                char *saved, size_t cap, cb_err *e) {
    cb_ckpt_opts co = {o->save, o->keep_last, 0};
    char path[4096] = "";
    int rc = cb_ckpt_save(world_of(r), &co, step, wr, ctx, path, sizeof path, e);
    if (saved) snprintf(saved, cap, "%s", path);
    return export_dtype(world_of(r), o, path, rc, e);
}

/* The one line of a stop by signal, as the run's result (CB_ESTOPPED). */
static int stopped(cb_err *e, int sig, int step, const char *saved) {
    if (saved)
        return cb_fail(e, CB_ESTOPPED, "stopped by %s after step %d; checkpoint %s saved, continue "
                                       "with --resume %s", cb_stop_name(sig), step, saved, saved);
    return cb_fail(e, CB_ESTOPPED, "stopped by %s after step %d; nothing saved (no --save)",
                   cb_stop_name(sig), step);
}

/* Hook after every step (and its log line), on every rank: the log's write
 * errors and a stop signal agreed over the world; the periodic save, or the
 * save of a stop; the default stall timeout follows the slowest step. */
static int step_end(run_state *r, const cb_train_opts *o, int step, int last, double step_ms,
                    cb_ckpt_writer wr, void *ctx, cb_err *e) {
    cb_comm *w = world_of(r);
    if (step_ms > r->slowest_ms) r->slowest_ms = step_ms;
    if (o->stall_timeout < 0) cb_comm_set_stall_timeout(fmax(300, 20 * r->slowest_ms / 1e3));
    int mine = (r->log_err.code ? 1 << 16 : 0) | cb_stop_pending(), rc = CB_OK;
    int all = w ? cb_comm_agree_error(w, mine) : mine; /* one all-reduce (max) */
    if (all >> 16) { /* world rank 0's message to every rank */
        *e = r->log_err;
        return w ? cb_comm_agree_err(w, e) : e->code;
    }
    int sig = all & 0xffff;
    int periodic = o->save_every > 0 && step % o->save_every == 0 && step < last;
    char saved[4096];
    if (o->save && (sig || periodic)) rc = save(r, o, step, wr, ctx, saved, sizeof saved, e);
    comm_start(r); /* this hook's traffic is no step's */
    return !rc && sig ? stopped(e, sig, step, o->save ? saved : NULL) : rc;
}

static int trainer_writer(void *ctx, const char *path, cb_err *e) {
    return trainer_save(ctx, path, e);
}

/* Evaluates after step s of --steps n: every --eval-every steps and at the
 * last; a run of 0 steps, once (step 0). */
static int eval_due(const cb_train_opts *o, int s) {
    return (o->eval_every > 0 && s % o->eval_every == 0) || s == o->steps;
}

static int train_loop(trainer *t, run_state *r, cb_err *e) {
    const cb_train_opts *o = t->o;
    r->t_start = omp_get_wtime();
    r->first_step = t->step;
    int last = o->steps;
    if (o->exit_after > 0 && t->step + o->exit_after < last) last = t->step + o->exit_after;
    char extra[4096];
    cb_train_metric mt[8];
    int nmt = 0, rc = CB_OK;
    if (!o->steps) rc = trainer_eval(t, r->sink, mt, &nmt, &(float){0}, e);
    while (!rc && t->step < last) {
        cb_step_stats st;
        cb_model_step_info info;
        if ((rc = trainer_step(t, &st, &info, e))) return rc;
        comm_delta(r, o);
        pp_fields(t, &info, &st, extra, sizeof extra);
        bf16_fields(extra, sizeof extra);
        float vl = NAN;
        nmt = 0;
        if (eval_due(o, t->step)) rc = trainer_eval(t, r->sink, mt, &nmt, &vl, e);
        if (rc) return rc;
        report(o, t->step, r, &st, vl, mt, nmt, extra, t->dump_err.code ? t->dump_err.msg : NULL);
        t->dump_err.code = CB_OK;
        rc = step_end(r, o, t->step, last, st.step_ms, trainer_writer, t, e);
        if (rc) return rc;
    }
    if (rc) return rc;
    rc = o->save ? save(r, o, t->step, trainer_writer, t, NULL, 0, e) : CB_OK;
    if (!rc && t->task->finish)
        rc = agree(world_of(r), t->task->finish(t->task->ctx, t->m, t->ids, e), e);
    return rc;
}

/* The process grid of --dp --pp --tp --tp-mode (--print-grid: its hosts on
 * world rank 0 into *hosts); dp defaults to the world size over pp * tp. Same checks on every rank, so every rank fails alike. */
static int setup_grid(cb_train_opts *o, cb_grid *g, char **hosts, cb_err *e) {
    cb_comm *w = cb_comm_world();
    int pp = o->pp ? o->pp : 1, tp = o->tp ? o->tp : 1, size = w ? w->size : 1;
    int dp = o->dp ? o->dp : (size / (pp * tp) > 0 ? size / (pp * tp) : 1);
    cb_tp_mode mode;
    int rc = cb_grid_parse_mode(o->tp_mode, &mode, e);
    if (!rc && !w) rc = cb_grid_check(dp, pp, tp, mode, 1, e);
    if (rc || !w) return rc;
    rc = cb_grid_create(g, dp, pp, tp, mode, e);
    if (rc) return rc;
    if (o->print_grid) *hosts = cb_grid_hosts(g); /* printed from the start record */
    if ((tp > 1 || pp > 1) && (!strcmp(o->embed_grad, "sparse") || !strcmp(o->embed_grad, "split")))
        rc = cb_fail(e, CB_EINPUT, "--embed-grad %s needs the whole embedding on every rank; "
                                   "use it with --tp 1 --pp 1, or drop it", o->embed_grad);
    else if (strcmp(o->tp3d_save, "gathered") && strcmp(o->tp3d_save, "shard"))
        rc = cb_fail(e, CB_EINPUT, "--tp3d-save '%s' is unknown; use gathered or shard",
                     o->tp3d_save);
    else if (dp > 1 && o->zero && o->dump_grads)
        rc = cb_fail(e, CB_EINPUT, "--dump-grads needs the whole gradient; drop --zero 1");
    if (rc) cb_grid_free(g), free(*hosts), *hosts = NULL;
    o->dp = dp;
    return rc;
}

/* The activation plan per pipeline stage, with and without recompute, and
 * the recompute's forward FLOPs over the step's (all stages): v[0, p),
 * v[p, 2p), v[2p]. Collective over the pipeline group. */
static double *act_plan(const trainer *t) {
    const cb_model *m = t->m;
    int p = t->d.g.pp, me = t->d.g.at.p;
    double *v = calloc(2 * (size_t)p + 1, sizeof *v);
    if (!v) cb_comm_fatal("out of memory for the activation report");
    v[me] = (double)cb_model_activation_bytes(m);
    v[p + me] = (double)m->act_none_bytes;
    v[2 * p] = m->rc_flops;
    cb_comm_allreduce_f64((cb_comm *)&t->d.g.ppg, "report", v, v, 2 * (size_t)p + 1, CB_COMM_SUM);
    v[2 * p] /= m->flops;
    return v;
}

/* The setup to the sink (world rank 0); the activation plan gathered on
 * every rank unless --quiet. */
static void start_record(const cb_train_opts *o, const trainer *t, const run_state *r,
                         const char *hosts) {
    char note[512] = "";
    if (t->task->note) t->task->note(t->task->ctx, t->m, note, sizeof note);
    const cb_grid *g = &t->d.g;
    double *act = o->quiet ? NULL : act_plan(t);
    size_t np, adam;
    cb_model_sizes(t->m, &np, &adam);
    const cb_dp *d = &t->m->dp;
    int dp = g->dp > 1;
    cb_train_start s = {.o = o, .params = np, .threads = omp_get_max_threads(),
                        .blas = cb_blas_note(), .kernels = cb_kernels_note(),
                        .peak_gflops = r->peak, .dp = g->dp, .pp = g->pp, .tp = g->tp, .M = t->m->M,
                        .schedule = cb_pp_schedule_name(t->d.sched), .layout = t->d.L->ops->name,
                        .rows = t->rows, .buckets = dp ? d->nb + d->nsplit : 0,
                        .adam_bytes = dp ? 8.0 * (double)(d->hi - d->lo) : 0,
                        .embed = dp ? cb_dp_embed_name(d) : NULL, .act = act,
                        .act_none = act ? act + g->pp : NULL,
                        .rc_flops_frac = act ? act[2 * g->pp] : 0, .grid = g, .hosts = hosts,
                        .model = t->m, .note = note};
    if (r->sink && r->sink->start) r->sink->start(r->sink->ctx, &s);
    free(act);
}

/* --comm-report: per group and tag, min and max over the ranks, to the
 * sink. Collective. */
static void comm_report(run_state *r) {
    if (!r->grid) return;
    cb_comm_spread *s = cb_comm_spread_gather(&r->grid->world, r->grid->comms, r->grid->ncomms);
    if (s && r->sink && r->sink->report) r->sink->report(r->sink->ctx, s);
    cb_comm_spread_free(s);
}

int cb_train_run(const cb_train_opts *in, const cb_train_sink *sink, cb_err *e) {
    cb_train_opts o = *in;
    if (o.threads > 0) omp_set_num_threads(o.threads);
    cb_comm *w = cb_comm_world();
    int rc = check_opts(&o, e), signo = 0;
    if (!rc) rc = cb_pp_opts_resolve(&o.pipe, o.pp, &o.accum, e);
    if (!rc) rc = cb_train_check_paths(&o, w->rank, e);
    if (!rc) rc = cb_stop_parse(o.exit_signal, &signo, e);
    if ((rc = agree(w, rc, e))) return rc;
    cb_stop_install(signo);
    cb_comm_set_stall_timeout(o.stall_timeout < 0 ? 600 : o.stall_timeout);
    char ck[4096]; /* --resume DIR: its newest complete checkpoint */
    if (o.resume && (rc = cb_ckpt_find(w, o.resume, 0, ck, sizeof ck, e))) return rc;
    if (o.resume) o.resume = ck;
    const cb_train_family *fam = o.family ? o.family : &cb_train_gpt;
    rc = fam->prepare(&o, e);
    if (!rc && o.layout_auto) rc = o.layout_auto(&o, e);
    if ((rc = agree(w, rc, e))) return rc;
    trainer t = {0}; /* its grid and layout are the run's */
    cb_grid *g = &t.d.g;
    char *hosts = NULL;
    if ((rc = setup_grid(&o, g, &hosts, e))) return rc;
    cb_train_task task = {0};
    run_state r = {.peak = o.peak_gflops, .grid = g, .rank = w->rank};
    rc = fam->open(&task, &o, e);
    if (!rc) rc = cb_layout_create(g, &t.d.L, e);
    if (t.d.L) t.d.L->save_gathered = !strcmp(o.tp3d_save, "gathered");
    if (!(rc = agree(w, rc, e))) rc = trainer_init(&t, &o, &task, e);
    if (!rc && r.rank == 0 && sink && !(rc = sink->begin(sink->ctx, o.resume ? t.step : -1, e)))
        r.sink = sink;
    if (!rc) rc = comm_init(&r, e);
    rc = agree(w, rc, e);
    if (!rc) {
        if (r.peak <= 0) r.peak = r.rank ? 1 : cb_peak_gflops(cb_kernels_precision());
        r.flops_per_token = task.flops_per_token;
        r.row_tokens = task.row_tokens;
        r.tokens = (long)t.tokens;
        size_t np;
        cb_model_sizes(t.m, &np, &r.opt_bytes);
        r.opt_bytes *= sizeof(float);
        comm_start(&r);
        start_record(&o, &t, &r, hosts);
        rc = train_loop(&t, &r, e);
        if (!rc && o.comm_report) comm_report(&r);
    }
    if (r.sink) rc = r.sink->end(r.sink->ctx, rc, e);
    cb_comm_steplog_free(&r.comm);
    trainer_free(&t);
    if (t.d.L) cb_layout_free(t.d.L);
    if (task.close) task.close(task.ctx);
    cb_grid_free(g);
    free(hosts);
    return rc;
}
