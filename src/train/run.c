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
#include <unistd.h>

#include "comm/grid.h"
#include "kernels/peak.h"
#include "comm/stats.h"
#include "layout/layout.h"
#include "model/gpt_internal.h"
#include "train/check.h"
#include "train/train.h"

char *openblas_get_corename(void);

static const char *const FIELD_FLAGS[5] = {"--layers", "--d-model", "--heads", "--seq-len",
                                           "--vocab"};

/* A flag given by the user (non-zero) must agree with the checkpoint. */
static int merge_field(int *dst, int file_val, const char *flag, const char *path, cb_err *e) {
    if (*dst && *dst != file_val)
        return cb_fail(e, CB_EINPUT, "%s %d differs from %s, which has %d; drop the flag", flag,
                       *dst, path, file_val);
    *dst = file_val;
    return CB_OK;
}

/* Fills the model config from --init/--resume or defaults; the training
 * sequence length T must fit the model's context. */
static int resolve_config(cb_train_opts *o, cb_err *e) {
    const char *ck = o->resume ? o->resume : o->init;
    cb_gpt_config *c = &o->model;
    if (ck) {
        cb_gpt_config f = {.n_head = c->n_head};
        int rc = cb_gpt_config_from_file(ck, &f, e);
        int *dst[5] = {&c->n_layer, &c->d_model, &c->n_head, &c->seq_len, &c->vocab};
        int src[5] = {f.n_layer, f.d_model, f.n_head, f.seq_len, f.vocab};
        for (int i = 0; !rc && i < 5; i++) {
            if (i == 3) continue;
            rc = merge_field(dst[i], src[i], FIELD_FLAGS[i], ck, e);
        }
        if (rc) return rc;
        if (c->seq_len > f.seq_len)
            return cb_fail(e, CB_EINPUT,
                           "--seq-len %d is over the context of %s (%d); use --seq-len %d or less",
                           c->seq_len, ck, f.seq_len, f.seq_len);
        o->T = c->seq_len ? c->seq_len : f.seq_len;
        c->seq_len = f.seq_len;
        return CB_OK;
    }
    if (!c->n_layer) c->n_layer = 4;
    if (!c->d_model) c->d_model = 128;
    if (!c->n_head) c->n_head = 4;
    if (!c->seq_len) c->seq_len = 64;
    if (!c->vocab) c->vocab = 256;
    o->T = c->seq_len;
    return cb_gpt_config_check(c, e);
}

static int check_opts(const cb_train_opts *o, cb_err *e) {
    return cb_train_check_flags(o, e);
}

static long peak_rss_bytes(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_maxrss * 1024L;
}

typedef struct run_state {
    FILE *log;
    double peak, flops_per_token, t_start;
    long tokens;
    int tty, first_step;
    cb_grid *grid;          /* NULL without MPI */
    int rank;               /* world rank: only 0 prints and writes */
    cb_comm_steplog comm;   /* with grid: the step's traffic, every rank's */
    size_t opt_bytes;       /* AdamW m and v on this rank */
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

/* The step's communication fields (comm/stats.h); zeros without MPI. */
static void log_comm(run_state *r) {
    if (!r->grid) {
        fprintf(r->log, ",\"comm_bytes\":0,\"comm_bytes_recv\":0,\"comm_calls\":0,\"comm_ms\":0");
        return;
    }
    size_t n = cb_comm_steplog_json(&r->comm, NULL, 0) + 1;
    char *buf = malloc(n);
    if (!buf) cb_comm_fatal("out of memory for the log's communication fields");
    cb_comm_steplog_json(&r->comm, buf, n);
    fputs(buf, r->log);
    free(buf);
}

/* Every rank ends with the same status and message (rank order decides). */
static int agree(cb_comm *w, int rc, cb_err *e) {
    if (!w) return rc;
    if (!rc) e->code = CB_OK;
    return cb_comm_agree_err(w, e);
}

/* One step's log object and progress line; extra (may be empty) is appended
 * to the object, e.g. the pipeline's per-stage fields. */
static void report(const cb_train_opts *o, int step, run_state *r, const cb_step_stats *st,
                   float val_loss, const char *extra) {
    long step_tokens = (long)o->B * o->T * o->accum;
    r->tokens += step_tokens;
    double tps = step_tokens / (st->step_ms / 1e3);
    double mfu = tps * r->flops_per_token / (r->peak * 1e9);
    if (r->log) {
        fprintf(r->log,
                "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens\":%ld,"
                "\"tokens_per_s\":%.2f,\"step_ms\":%.3f,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,"
                "\"opt_ms\":%.3f,\"mfu\":%.5f,\"peak_rss_bytes\":%ld,\"opt_state_bytes\":%zu,"
                "\"comm_wait_ms\":%.3f",
                step, st->loss, st->lr, st->grad_norm, r->tokens, tps, st->step_ms, st->fwd_ms,
                st->bwd_ms, st->opt_ms, mfu, peak_rss_bytes(), r->opt_bytes, st->comm_wait_ms);
        log_comm(r);
        if (!isnan(val_loss)) fprintf(r->log, ",\"val_loss\":%.9g", val_loss);
        fprintf(r->log, "%s}\n", extra);
        fflush(r->log);
    }
    if (o->quiet || r->rank) return;
    double elapsed = omp_get_wtime() - r->t_start;
    double eta = elapsed / (step - r->first_step) * (o->steps - step);
    int every = o->steps >= 20 ? o->steps / 20 : 1;
    if (!r->tty && step % every && step != o->steps && isnan(val_loss)) return;
    fprintf(stderr, "%sstep %d/%d | loss %.4f", r->tty ? "\r\033[K" : "", step, o->steps,
            st->loss);
    if (!isnan(val_loss)) fprintf(stderr, " | val %.4f", val_loss);
    fprintf(stderr, " | %.0f tok/s | MFU %.1f%% | ETA %.0fs%s", tps, 100 * mfu, eta,
            r->tty ? "" : "\n");
    if (r->tty && (step == o->steps || !isnan(val_loss))) fprintf(stderr, "\n");
}

static int train_loop(cb_trainer *t, const cb_tokens *val, run_state *r, cb_err *e) {
    const cb_train_opts *o = &t->o;
    r->t_start = omp_get_wtime();
    r->first_step = t->step;
    char act[64]; /* planned activation bytes (with --pp: pp_act_bytes per stage) */
    snprintf(act, sizeof act, ",\"act_bytes\":%.0f", sizeof(float) * (double)t->model->act_floats);
    int last = o->steps;
    if (o->exit_after > 0 && t->step + o->exit_after < last) last = t->step + o->exit_after;
    while (t->step < last) {
        cb_step_stats st;
        cb_trainer_step(t, &st);
        comm_delta(r, o);
        float vl = NAN;
        if (val && o->eval_every > 0 && (t->step % o->eval_every == 0 || t->step == o->steps))
            vl = cb_trainer_eval(t, val, o->eval_batches);
        report(o, t->step, r, &st, vl, act);
        if (o->save && o->save_every > 0 && t->step % o->save_every == 0 && t->step < last) {
            int rc = agree(r->grid ? &r->grid->world : NULL, cb_trainer_save(t, o->save, e), e);
            if (rc) return rc;
        }
    }
    if (!o->save) return CB_OK;
    return agree(r->grid ? &r->grid->world : NULL, cb_trainer_save(t, o->save, e), e);
}

static int open_log(const char *path, FILE **f, cb_err *e);

/* ------------------------------------------------------------ pipeline */

static int pp_save(cb_pp_trainer *pt, const cb_loader *ld, int step, uint64_t tokens,
                   const char *path, cb_err *e) {
    cb_state_text text;
    const char *meta[2 * CB_STATE_NMETA];
    cb_state_meta(&text, meta, step, pt->opt[0].t, ld, tokens);
    return cb_pp_trainer_save(pt, path, meta, CB_STATE_NMETA, e);
}

/* --resume under a pipeline: weights and moments into every chunk, then the
 * step, AdamW count, data position and tokens from path.state. */
static int pp_resume(cb_pp_trainer *pt, cb_loader *ld, const char *path, int *step,
                     uint64_t *tokens, cb_err *e) {
    int rc = cb_pp_trainer_load(pt, path, 1, e);
    char sp[4096];
    snprintf(sp, sizeof sp, "%s.state", path);
    cb_st_file f;
    if (rc || (rc = cb_st_open(sp, &f, e))) return rc;
    int at = 0;
    rc = cb_state_check_pair(path, &f, sp, e);
    if (!rc) rc = cb_state_read(&f, sp, step, &at, ld, tokens, e);
    cb_st_close(&f);
    for (int c = 0; c < pt->pipe.o.v; c++) pt->opt[c].t = at; /* this rank's chunks */
    return rc;
}

static int pp_loop(cb_train_opts *o, cb_pp_trainer *pt, cb_loader *ld, const cb_tokens *val,
                   int step, run_state *r, cb_err *e) {
    cb_comm *w = &r->grid->world;
    r->t_start = omp_get_wtime();
    r->first_step = step;
    int last = o->steps;
    if (o->exit_after > 0 && step + o->exit_after < last) last = step + o->exit_after;
    char extra[2048];
    while (step < last) {
        cb_pp_step_stats ps;
        cb_pp_trainer_step(pt, ld, r->grid->dpg.rank * pt->rows, step, &ps);
        step++;
        comm_delta(r, o);
        /* fwd_ms, bwd_ms: world rank 0's stage (pipeline stage 0) */
        cb_step_stats st = {.loss = ps.loss, .lr = ps.lr, .grad_norm = ps.grad_norm,
                            .step_ms = ps.step_ms, .fwd_ms = ps.fwd_ms[0], .bwd_ms = ps.bwd_ms[0],
                            .opt_ms = ps.opt_ms};
        float vl = NAN;
        if (val && o->eval_every > 0 && (step % o->eval_every == 0 || step == o->steps))
            vl = cb_pp_trainer_eval(pt, val, o->eval_batches);
        cb_pp_log_fields(pt, &ps, extra, sizeof extra);
        report(o, step, r, &st, vl, extra);
        if (o->save && o->save_every > 0 && step % o->save_every == 0 && step < last) {
            int rc = agree(w, pp_save(pt, ld, step, (uint64_t)r->tokens, o->save, e), e);
            if (rc) return rc;
        }
    }
    return o->save ? agree(w, pp_save(pt, ld, step, (uint64_t)r->tokens, o->save, e), e) : CB_OK;
}

/* Collective over the pipeline group; world rank 0 prints. */
static void pp_act_report(const cb_train_opts *o, cb_pp_trainer *pt, int rank) {
    int p = pt->g->pp;
    double *v = calloc(2 * (size_t)p, sizeof *v), frac = 0;
    if (!v) return;
    cb_pp_act_plan(pt, v, v + p, &frac);
    if (rank == 0) cb_act_report(stderr, &o->pipe, v, v + p, p, frac);
    free(v);
}

/* `cubist train --pp N`: the pipeline trainer on this rank's stage(s). */
static int pp_run(cb_train_opts *o, cb_grid *g, cb_layout *L, const cb_tokens *data,
                  const cb_tokens *val, run_state *r, cb_err *e) {
    cb_pp_trainer pt;
    cb_loader ld = {0}; /* no --data (--steps 0): nothing read, position 0 saved */
    int step = 0;
    uint64_t tokens = 0;
    o->opt.steps = o->steps; /* the cosine schedule's length */
    int rc = cb_pp_trainer_init(&pt, &o->pipe, &o->model, o->B, o->T, o->accum, g, L, &o->opt,
                                o->seed, o->zero, o->bucket_mb, e);
    int built = !rc;
    if (built) o->accum = pt.M; /* tokens per step in the log */
    pt.dump_grads = o->dump_grads;
    if (!rc && o->data) rc = cb_loader_init(&ld, data, o->B, o->T, o->shuffle, o->seed, o->data, e);
    if (!rc && o->init) rc = cb_pp_trainer_load(&pt, o->init, 0, e);
    if (!rc && o->resume) rc = pp_resume(&pt, &ld, o->resume, &step, &tokens, e);
    r->tokens = (long)tokens;
    if (!rc && r->rank == 0) rc = open_log(o->log, &r->log, e);
    if (!rc) rc = comm_init(r, e);
    rc = agree(&g->world, rc, e);
    if (!rc) {
        if (r->peak <= 0) r->peak = r->rank ? 1 : cb_peak_gflops();
        r->flops_per_token = cb_gpt_flops_per_token(&o->model, o->T);
        for (int c = 0; c < pt.pipe.o.v; c++) r->opt_bytes += 2 * sizeof(float) * (pt.opt[c].hi - pt.opt[c].lo);
        comm_start(r);
        if (!o->quiet && r->rank == 0)
            fprintf(stderr, "cubist: pipeline of %d stages, %s schedule, %d micro-batches of %d "
                            "sequences, tensor %s x %d, data x %d\n",
                    g->pp, cb_pp_schedule_name(pt.pipe.o.kind), pt.M, o->B, L->ops->name, g->tp,
                    g->dp);
        if (!o->quiet) pp_act_report(o, &pt, r->rank);
        rc = pp_loop(o, &pt, &ld, val, step, r, e);
    }
    if (built) cb_pp_trainer_free(&pt);
    return rc;
}

static int open_log(const char *path, FILE **f, cb_err *e) {
    *f = NULL;
    if (!path) return CB_OK;
    *f = fopen(path, "w");
    if (!*f)
        return cb_fail(e, CB_EINPUT, "%s: cannot open the log for writing (%s); check the path",
                       path, strerror(errno));
    return CB_OK;
}

/* The process grid of --dp --pp --tp --tp-mode; dp defaults to the world
 * size over pp * tp. Same checks on every rank, so every rank fails alike. */
static int setup_grid(cb_train_opts *o, cb_grid *g, cb_err *e) {
    cb_comm *w = cb_comm_world();
    int pp = o->pp ? o->pp : 1, tp = o->tp ? o->tp : 1, size = w ? w->size : 1;
    int dp = o->dp ? o->dp : (size / (pp * tp) > 0 ? size / (pp * tp) : 1);
    cb_tp_mode mode;
    int rc = cb_grid_parse_mode(o->tp_mode, &mode, e);
    if (!rc && !w) rc = cb_grid_check(dp, pp, tp, mode, 1, e);
    if (rc || !w) return rc;
    rc = cb_grid_create(g, dp, pp, tp, mode, e);
    if (rc) return rc;
    if (o->print_grid) cb_grid_print(g, stdout);
    if ((tp > 1 || pp > 1) && (!strcmp(o->embed_grad, "sparse") || !strcmp(o->embed_grad, "split")))
        rc = cb_fail(e, CB_EINPUT, "--embed-grad %s needs the whole embedding on every rank; "
                                   "use it with --tp 1 --pp 1, or drop it", o->embed_grad);
    else if (strcmp(o->tp3d_save, "gathered") && strcmp(o->tp3d_save, "shard"))
        rc = cb_fail(e, CB_EINPUT, "--tp3d-save '%s' is unknown; use gathered or shard",
                     o->tp3d_save);
    else if (dp > 1 && o->zero && o->dump_grads)
        rc = cb_fail(e, CB_EINPUT, "--dump-grads needs the whole gradient; drop --zero 1");
    if (rc) cb_grid_free(g);
    o->dp = dp;
    return rc;
}

static void startup_line(const cb_train_opts *o, const cb_trainer *t, const run_state *r) {
    if (o->quiet || r->rank) return;
    fprintf(stderr,
            "cubist: GPT %d layers, d_model %d, %d heads, context %d, vocab %d: %zu "
            "parameters here | B=%d T=%d accum %d | %d threads, BLAS %s, peak %.0f GFLOP/s | %s\n",
            o->model.n_layer, o->model.d_model, o->model.n_head, o->model.seq_len, o->model.vocab,
            cb_gpt_num_params(t->model), o->B, o->T, o->accum, omp_get_max_threads(),
            openblas_get_corename(), r->peak, cb_kernels_note());
    if (t->tpc)
        fprintf(stderr, "cubist: tensor parallel %s over %d ranks (layout %s)\n", o->tp_mode,
                t->tpc->size, t->model->L->ops->name);
    if (!t->dp) return;
    const cb_dp *d = t->dp;
    fprintf(stderr,
            "cubist: data parallel over %d ranks, %d rows each | %d buckets of %g MB | zero %d: "
            "AdamW state %.1f MB per rank | embedding gradient %s%s\n",
            d->c->size, t->rows, d->nb + d->nsplit, o->bucket_mb, o->zero, 8.0 * (d->hi - d->lo) / 1e6,
            cb_dp_embed_name(d),
            strcmp(o->embed_grad, "auto") ? "" : " (auto)");
}

static void act_report(const cb_train_opts *o, const cb_gpt *m) {
    gpt_rc none = {0};
    double b = sizeof(float) * (double)m->act_floats;
    double z = sizeof(float) * (double)gpt_act_floats_with(m, &none);
    cb_act_report(stderr, &o->pipe, &b, &z, 1, gpt_recompute_flops(m) / gpt_stage_flops(m));
}

/* --comm-report: per group and tag, min and max over the ranks. */
static void comm_report(run_state *r) {
    if (r->grid) cb_comm_report_ranks(&r->grid->world, r->grid->comms, r->grid->ncomms, stdout);
}

int cb_train_run(const cb_train_opts *in, cb_err *e) {
    cb_train_opts o = *in;
    if (o.threads > 0) omp_set_num_threads(o.threads);
    cb_comm *w = cb_comm_world();
    int rc = check_opts(&o, e);
    if (!rc) rc = cb_pp_opts_resolve(&o.pipe, o.pp, &o.accum, e);
    if (!rc) rc = cb_train_check_paths(&o, w ? w->rank : 0, e);
    if (!rc) rc = resolve_config(&o, e);
    if ((rc = agree(w, rc, e))) return rc;
    cb_grid g = {0};
    if ((rc = setup_grid(&o, &g, e))) return rc;
    cb_tokens data = {0}, val = {0};
    cb_trainer t = {0};
    run_state r = {.peak = o.peak_gflops, .tty = isatty(2), .grid = w ? &g : NULL,
                   .rank = w ? w->rank : 0};
    if (o.data) rc = cb_tokens_open(o.data, o.model.vocab, &data, e);
    if (!rc && o.val_data) rc = cb_tokens_open(o.val_data, o.model.vocab, &val, e);
    if (!rc && o.val_data) rc = cb_train_check_val(&o, &val, e);
    cb_layout *L = NULL;
    if (!rc && w && (g.tp > 1 || g.pp > 1)) rc = cb_layout_create(&g, &L, e);
    if (L) L->save_gathered = !strcmp(o.tp3d_save, "gathered");
    if (w && g.pp > 1) {
        rc = agree(w, rc, e);
        if (!rc) rc = pp_run(&o, &g, L, &data, o.val_data ? &val : NULL, &r, e);
        if (!rc && o.comm_report) comm_report(&r);
        if (r.log) fclose(r.log);
        cb_comm_steplog_free(&r.comm);
        if (L) cb_layout_free(L);
        if (data.map) cb_tokens_close(&data);
        if (val.map) cb_tokens_close(&val);
        cb_grid_free(&g);
        return rc;
    }
    if (!rc)
        rc = cb_trainer_init_tp(&t, &o, o.data ? &data : NULL, w ? &g.dpg : NULL, L,
                                w ? &g.tpg : NULL, e);
    if (!rc && o.resume) rc = cb_trainer_resume(&t, o.resume, e);
    if (!rc && r.rank == 0) rc = open_log(o.log, &r.log, e);
    if (!rc) rc = comm_init(&r, e);
    rc = agree(w, rc, e);
    if (!rc) {
        if (r.peak <= 0) r.peak = r.rank ? 1 : cb_peak_gflops();
        r.flops_per_token = cb_gpt_flops_per_token(&o.model, o.T);
        r.tokens = (long)t.tokens;
        r.opt_bytes = 2 * sizeof(float) * (t.opt.hi - t.opt.lo);
        comm_start(&r);
        startup_line(&o, &t, &r);
        if (!o.quiet && r.rank == 0) act_report(&o, t.model);
        rc = train_loop(&t, o.val_data ? &val : NULL, &r, e);
        if (!rc && o.comm_report) comm_report(&r);
    }
    if (r.log) fclose(r.log);
    cb_comm_steplog_free(&r.comm);
    cb_trainer_free(&t);
    if (L) cb_layout_free(L);
    if (data.map) cb_tokens_close(&data);
    if (val.map) cb_tokens_close(&val);
    if (w) cb_grid_free(&g);
    return rc;
}
