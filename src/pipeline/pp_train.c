/* Pipeline parallelism in the trainer; see pp_train.h. */
#include "pipeline/pp_train.h"

#include <math.h>
#include <stdarg.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train.h"

static double now_ms(void) { return omp_get_wtime() * 1e3; }

void cb_pp_opts_defaults(cb_pp_opts *o) {
    *o = (cb_pp_opts){.micro_batches = CB_PP_UNSET, .virtual_stages = CB_PP_UNSET,
                      .memory_weight = NAN};
}

/* The first pipeline-only flag the user gave, or NULL. */
static const char *pipeline_flag(const cb_pp_opts *o) {
    if (o->schedule) return "--schedule";
    if (o->virtual_stages != CB_PP_UNSET) return "--virtual-stages";
    if (o->partition) return "--partition";
    if (o->print_partition) return "--print-partition";
    if (!isnan(o->memory_weight)) return "--partition-memory-weight";
    if (o->no_profile) return "--no-profile";
    return NULL;
}

int cb_pp_opts_resolve(cb_pp_opts *o, int pp, int *accum, cb_err *e) {
    int mb = o->micro_batches;
    if (mb != CB_PP_UNSET && mb < 1)
        return cb_fail(e, CB_EINPUT, "--micro-batches %d must be >= 1 (micro-batches per step)", mb);
    if (o->virtual_stages != CB_PP_UNSET && o->virtual_stages < 1)
        return cb_fail(e, CB_EINPUT, "--virtual-stages %d must be >= 1 (model chunks per rank)",
                       o->virtual_stages);
    if (mb != CB_PP_UNSET && *accum > 1 && *accum != mb)
        return cb_fail(e, CB_EINPUT,
                       "--grad-accum %d and --micro-batches %d disagree: the micro-batches are "
                       "the accumulation steps; give one of them",
                       *accum, mb);
    if (mb != CB_PP_UNSET) *accum = mb;
    const char *f = pp > 1 ? NULL : pipeline_flag(o);
    if (f)
        return cb_fail(e, CB_EINPUT, "%s needs --pp > 1 (pipeline parallelism); add --pp N or "
                                     "drop %s",
                       f, f);
    if (!o->schedule) o->schedule = "1f1b";
    if (!o->partition) o->partition = "auto";
    if (isnan(o->memory_weight)) o->memory_weight = 0.8;
    if (!(o->memory_weight >= 0 && o->memory_weight <= 1))
        return cb_fail(e, CB_EINPUT, "--partition-memory-weight must be in [0, 1] (0.8 default)");
    return CB_OK;
}

/* o resolved in place, and the schedule's sizes; p * v stages need at
 * least as many modules. The trainer runs any p >= 1 (a one-stage
 * pipeline too); refusing pipeline flags without --pp is the command
 * line's (cb_pp_opts_resolve with the real --pp). */
static int parse_opts(cb_pp_opts *o, int accum, int p, int nmod, cb_pp_config *cfg, cb_err *e) {
    int rc = cb_pp_opts_resolve(o, p > 1 ? p : 2, &accum, e);
    if (!rc) rc = cb_pp_parse_schedule(o->schedule, &cfg->kind, e);
    if (rc) return rc;
    int vset = o->virtual_stages != CB_PP_UNSET;
    cfg->p = p;
    cfg->M = accum;
    cfg->v = vset ? o->virtual_stages : cfg->kind == CB_PP_INTERLEAVED ? 2 : 1;
    rc = gpt_recompute_parse(o->recompute, o->recompute_method, o->recompute_layers, &cfg->rc, e);
    if (!rc) rc = cb_pp_schedule_check(cfg->kind, cfg->p, cfg->v, cfg->M, e);
    if (rc || p * cfg->v <= nmod) return rc;
    if (cfg->v == 1 || p > nmod)
        return cb_fail(e, CB_EINPUT, "--pp %d stages for a model of %d modules (--layers + 2); use "
                                     "--pp between 2 and %d, or more --layers",
                       p, nmod, nmod);
    return cb_fail(e, CB_EINPUT, "--pp %d x --virtual-stages %d = %d pipeline stages for a model of "
                                 "%d modules (--layers + 2); use --virtual-stages between 1 and %d",
                   p, cfg->v, p * cfg->v, nmod, nmod / p);
}

/* --partition auto | equal | LIST over p ranks of v chunks; the rank sums
 * are what an interleaved rank's time follows. */
static int partition(const char *how, const double *cost, int nmod, int p, int v,
                     cb_pp_partition *pt, cb_err *e) {
    int rc;
    if (!strcmp(how, "auto")) return cb_pp_partition_interleaved(cost, nmod, p, v, pt, e);
    if (!strcmp(how, "equal")) rc = cb_pp_partition_equal(cost, nmod, p * v, pt, e);
    else rc = cb_pp_partition_parse(how, cost, nmod, p * v, pt, e);
    if (rc) return rc;
    pt->nranks = p;
    cb_pp_partition_score(pt, cost);
    return CB_OK;
}

/* Module costs (profiled on world rank 0 and broadcast, so every rank
 * computes the same partition), then the partition. */
static int plan(cb_pp_trainer *t, const cb_pp_opts *po, const cb_gpt_config *c,
                const cb_pp_config *cfg, cb_err *e) {
    int nvs = cfg->p * cfg->v;
    int nmod = c->n_layer + 2, rc = CB_OK;
    cb_pp_module *m = calloc((size_t)nmod, sizeof *m);
    double *cost = calloc((size_t)nmod, sizeof *cost), *ms = calloc((size_t)nmod, sizeof *ms);
    if (!m || !cost || !ms) rc = cb_fail(e, CB_ENOMEM, "out of memory planning the pipeline");
    if (!rc) cb_pp_gpt_modules(c, t->rows, t->T, &cfg->rc, nvs, m);
    int auto_ = !strcmp(po->partition, "auto");
    if (!rc && auto_ && !po->no_profile) {
        if (t->g->world.rank == 0) rc = cb_pp_gpt_profile(c, t->rows, t->T, 2, m, e);
        rc = cb_comm_agree_err(&t->g->world, rc ? e : (e->code = 0, e));
        for (int i = 0; i < nmod; i++) ms[i] = m[i].time_ms;
        if (!rc) cb_comm_bcast_bytes(&t->g->world, "pp.plan", ms, sizeof(double) * nmod, 0);
        for (int i = 0; i < nmod; i++) m[i].time_ms = ms[i];
    }
    if (!rc) cb_pp_module_costs(m, nmod, po->memory_weight, cost);
    if (!rc) rc = partition(po->partition, cost, nmod, t->g->pp, nvs / t->g->pp, &t->part, e);
    if (!rc && po->print_partition && t->g->world.rank == 0) {
        cb_pp_partition_print(stdout, &t->part, m, po->memory_weight, t->g->pp);
        fflush(stdout);
    }
    free(m), free(cost), free(ms);
    return rc;
}

static int init_opt(cb_pp_trainer *t, const cb_adamw_config *opt, double bucket_mb, cb_err *e) {
    int v = t->pipe.o.v, rc = CB_OK;
    t->opt = calloc((size_t)v, sizeof *t->opt);
    if (t->g->dp > 1) t->dp = calloc((size_t)v, sizeof *t->dp);
    if (!t->opt || (t->g->dp > 1 && !t->dp)) return cb_fail(e, CB_ENOMEM, "out of memory");
    for (int c = 0; !rc && c < v; c++) {
        cb_gpt *m = t->pipe.ch[c].m;
        size_t lo = 0, hi = cb_gpt_num_params(m);
        if (t->dp) {
            rc = cb_dp_init(&t->dp[c], &t->g->dpg, m, t->zero, CB_DP_EMBED_DENSE, bucket_mb,
                            (size_t)t->M * t->rows * t->T, e);
            lo = t->dp[c].lo, hi = t->dp[c].hi;
        }
        if (!rc) rc = cb_adamw_init(&t->opt[c], opt, lo, hi, e);
    }
    if (!rc) cb_pipe_chain_hooks(&t->pipe);
    return rc;
}

int cb_pp_trainer_init(cb_pp_trainer *t, const cb_pp_opts *po, const cb_gpt_config *c, int B,
                       int T, int accum, cb_grid *g, cb_layout *L, const cb_adamw_config *opt,
                       uint64_t seed, int zero, double bucket_mb, cb_err *e) {
    memset(t, 0, sizeof *t);
    t->g = g;
    t->T = T;
    t->zero = zero;
    if (B % g->dp)
        return cb_fail(e, CB_EINPUT,
                       "--batch %d does not split over %d data-parallel ranks; use a multiple of %d",
                       B, g->dp, g->dp);
    t->rows = B / g->dp;
    cb_pp_config cfg = {0};
    cb_pp_opts o = *po;
    int rc = parse_opts(&o, accum, g->pp, c->n_layer + 2, &cfg, e);
    if (!rc) rc = plan(t, &o, c, &cfg, e);
    if (rc) return rc;
    t->M = cfg.M;
    cfg.bound = t->part.bound;
    rc = cb_pipe_init(&t->pipe, &g->ppg, c, t->rows, T, L, &cfg, seed, e);
    if (!rc) rc = init_opt(t, opt, bucket_mb, e);
    if (rc) return rc;
    t->ids = malloc(sizeof(int) * 2 * (size_t)t->M * t->rows * T);
    if (!t->ids) return cb_fail(e, CB_ENOMEM, "out of memory for %d micro-batches", t->M);
    t->targets = t->ids + (size_t)t->M * t->rows * T;
    return CB_OK;
}

void cb_pp_trainer_free(cb_pp_trainer *t) {
    for (int c = 0; c < t->pipe.o.v; c++) {
        if (t->dp) cb_dp_free(&t->dp[c]);
        if (t->opt) cb_adamw_free(&t->opt[c]);
    }
    free(t->dp);
    free(t->opt);
    cb_pipe_free(&t->pipe);
    free(t->ids);
    memset(t, 0, sizeof *t);
}

static void before_bwd(void *ctx, int chunk, int last) {
    cb_pp_trainer *t = ctx;
    cb_dp_begin_backward(&t->dp[chunk], last);
}

/* Owned gradients of this rank's optimizer ranges, wte once: under ZeRO
 * each data-parallel rank holds its shard of the reduced gradient, so the
 * shards' sums are added over the group too. */
static double grad_sumsq(cb_pp_trainer *t) {
    if (!t->dp || !t->zero) return cb_pipe_grad_sumsq(&t->pipe);
    double s = 0;
    for (int c = 0; c < t->pipe.o.v; c++) {
        const cb_gpt *m = t->pipe.ch[c].m;
        size_t lo = t->dp[c].lo, hi = t->dp[c].hi;
        for (int i = t->pipe.nvs > 1 && c == t->pipe.tie_last; i < m->pt.n; i++) {
            const cb_tensor_info *x = &m->pt.t[i];
            size_t a = x->offset > lo ? x->offset : lo, z = x->offset + x->numel;
            if (z > hi) z = hi;
            if (x->owner && z > a) s += m->L->k->sumsq(m->L->k, m->grads + a, z - a);
        }
    }
    cb_comm_allreduce_f64(&t->g->dpg, "norm", NULL, &s, 1, CB_COMM_SUM);
    return s;
}

/* Per-stage figures to every rank of the pipeline group (world rank 0 logs). */
enum { ST_BUSY, ST_FWD, ST_BWD, ST_WAIT, ST_BUBBLE, ST_ACT, NST };

static void gather_stats(cb_pp_trainer *t, cb_pp_step_stats *st) {
    int p = t->g->pp, s = t->pipe.s;
    double *v = calloc(NST * (size_t)p, sizeof *v);
    if (!v) return;
    const cb_pp_stats *x = &t->pipe.st;
    double mine[NST] = {x->busy_ms, x->fwd_ms, x->bwd_ms, x->wait_ms, x->bubble, x->act_bytes};
    for (int k = 0; k < NST; k++) v[k * p + s] = mine[k];
    cb_comm_allreduce_f64(&t->g->ppg, "pp.stats", NULL, v, NST * (size_t)p, CB_COMM_SUM);
    double *dst[NST] = {st->busy_ms, st->fwd_ms, st->bwd_ms, st->wait_ms, st->bubble, st->act_bytes};
    st->bubble_mean = 0;
    for (int i = 0; i < p && i < CB_PP_MAX_STAGES; i++) {
        for (int k = 0; k < NST; k++) dst[k][i] = v[k * p + i];
        st->bubble_mean += v[ST_BUBBLE * p + i] / p;
    }
    st->bubble_formula = cb_pp_bubble_formula(p, t->pipe.o.v, t->M);
    free(v);
}

static void dump_grads(cb_pp_trainer *t); /* with the checkpoints below */

void cb_pp_trainer_step(cb_pp_trainer *t, cb_loader *ld, int r0, int step, cb_pp_step_stats *st) {
    double t0 = now_ms();
    size_t mb = (size_t)t->rows * t->T;
    int dpn = t->g->dp, v = t->pipe.o.v;
    cb_pipe_zero_grad(&t->pipe);
    for (int k = 0; k < t->M; k++) cb_loader_next(ld, t->ids + k * mb, t->targets + k * mb, r0, t->rows);
    double loss = cb_pipe_step(&t->pipe, t->ids, t->targets, 1.0f / ((float)t->M * dpn),
                               t->dp ? before_bwd : NULL, t);
    double topt = now_ms();
    if (t->dp) {
        for (int c = 0; c < v; c++) cb_dp_reduce(&t->dp[c]);
        loss = cb_dp_mean(&t->dp[0], loss);
    }
    if (step == 0 && t->dump_grads) dump_grads(t);
    double ss = grad_sumsq(t);
    cb_comm_allreduce_f64(&t->g->model, "norm", NULL, &ss, 1, CB_COMM_SUM);
    double norm = sqrt(ss);
    float s = cb_clip_scale(t->opt[0].c.clip, norm), lr = cb_lr_at(&t->opt[0].c, step);
    for (int c = 0; c < v; c++) {
        cb_gpt *m = t->pipe.ch[c].m;
        cb_adamw *o = &t->opt[c];
        if (s < 1.0f) m->L->k->scale(m->L->k, m->grads + o->lo, s, o->hi - o->lo);
        cb_adamw_step(o, m->L->k, m->params, m->grads, gpt_tensors(m), gpt_ntensors(m), lr);
        if (t->dp) cb_dp_sync_params(&t->dp[c]);
    }
    gather_stats(t, st);
    st->loss = (float)(loss / t->M);
    st->grad_norm = (float)norm;
    st->lr = lr;
    st->step_ms = now_ms() - t0;
    st->opt_ms = now_ms() - topt;
}

/* ------------------------------------------------------------ checkpoints */

void cb_pp_part_path(char *out, size_t cap, const char *path, int vs) {
    snprintf(out, cap, "%s.vs%d", path, vs);
}

/* The parts' tensors into one file, each name once, metadata of part 0. */
int cb_pp_merge_parts(const char *path, int n, cb_err *e) {
    cb_st_file *f = calloc((size_t)n, sizeof *f);
    int total = 0, cnt = 0, rc = f ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory merging %s", path);
    char pp[4200];
    for (int i = 0; !rc && i < n; i++) {
        cb_pp_part_path(pp, sizeof pp, path, i);
        rc = cb_st_open(pp, &f[i], e);
        if (!rc) total += f[i].n;
    }
    cb_st_entry *t = rc ? NULL : calloc((size_t)total + 1, sizeof *t);
    const char **meta = rc ? NULL : calloc(2 * (size_t)f[0].nmeta + 1, sizeof *meta);
    if (!rc && (!t || !meta)) rc = cb_fail(e, CB_ENOMEM, "out of memory merging %s", path);
    for (int i = 0; !rc && i < n; i++)
        for (int j = 0; j < f[i].n; j++) {
            const cb_st_tensor *x = &f[i].t[j];
            int dup = 0;
            for (int k = 0; k < cnt && !dup; k++) dup = !strcmp(t[k].name, x->name);
            if (dup) continue; /* the tied wte, held by two stages */
            t[cnt] = (cb_st_entry){.name = x->name, .ndim = x->ndim,
                                   .data = (const float *)(f[i].data + x->offset)};
            memcpy(t[cnt++].shape, x->shape, sizeof x->shape);
        }
    for (int i = 0; !rc && i < f[0].nmeta; i++) meta[2 * i] = f[0].meta_key[i], meta[2 * i + 1] = f[0].meta_val[i];
    if (!rc) rc = cb_st_write(path, t, cnt, meta, f[0].nmeta, e);
    for (int i = 0; f && i < n; i++) {
        if (f[i].map) cb_st_close(&f[i]);
        cb_pp_part_path(pp, sizeof pp, path, i);
        unlink(pp);
    }
    free(f), free(t), free(meta);
    return rc;
}

/* ZeRO keeps moment shards: gathered to full blocks on data-parallel rank 0. */
static float *full_moments(cb_pp_trainer *t, int c) {
    cb_gpt *m = t->pipe.ch[c].m;
    size_t n = cb_gpt_num_params(m);
    float *full = NULL;
    if (t->g->dpg.rank == 0 && !(full = malloc(sizeof(float) * 2 * n + 1)))
        cb_comm_fatal("out of memory gathering the optimizer state for the checkpoint");
    cb_dp_gather(&t->dp[c], t->opt[c].m, full);
    cb_dp_gather(&t->dp[c], t->opt[c].v, full ? full + n : NULL);
    return full;
}

/* Each virtual stage's part of path: parameters (grads 0) or gradients,
 * and with meta the AdamW moments in path.state's parts. */
static int save_parts(cb_pp_trainer *t, const char *path, const char *const *meta, int nmeta,
                      int grads, cb_err *e) {
    char sp[4096], pp[4200];
    snprintf(sp, sizeof sp, "%s.state", path);
    int rc = CB_OK;
    for (int c = 0; c < t->pipe.o.v; c++) {
        cb_gpt *m = t->pipe.ch[c].m;
        int vs = t->pipe.ch[c].vs;
        float *full = t->dp && t->zero && meta ? full_moments(t, c) : NULL;
        if (t->g->dpg.rank != 0) continue;
        const float *w = grads ? m->grads : m->params;
        const char *none = "";
        cb_pp_part_path(pp, sizeof pp, path, vs);
        int r = gpt_save_blocks(m, 1, &w, &none, pp, meta, meta ? CB_WEIGHTS_NMETA : 0, e); /* id, tokenizer */
        if (!r && meta) {
            size_t n = cb_gpt_num_params(m);
            const float *b[2] = {full ? full : t->opt[c].m, full ? full + n : t->opt[c].v};
            const char *pre[2] = {"m.", "v."};
            cb_pp_part_path(pp, sizeof pp, sp, vs);
            r = gpt_save_blocks(m, 2, b, pre, pp, meta, nmeta, e);
        }
        free(full);
        if (r && !rc) rc = r;
    }
    return rc;
}

static int save_merged(cb_pp_trainer *t, const char *path, const char *const *state_meta,
                       int nmeta, int grads, cb_err *e) {
    cb_comm *w = &t->g->world;
    int rc = save_parts(t, path, state_meta, nmeta, grads, e);
    rc = cb_comm_agree_err(w, rc ? e : (e->code = 0, e));
    if (rc) return rc;
    if (w->rank == 0) {
        char sp[4096];
        snprintf(sp, sizeof sp, "%s.state", path);
        rc = cb_pp_merge_parts(path, t->pipe.nvs, e);
        if (!rc && state_meta) rc = cb_pp_merge_parts(sp, t->pipe.nvs, e);
    }
    return cb_comm_agree_err(w, rc ? e : (e->code = 0, e));
}

int cb_pp_trainer_save(cb_pp_trainer *t, const char *path, const char *const *state_meta,
                       int nmeta, cb_err *e) {
    return save_merged(t, path, state_meta, nmeta, 0, e);
}

/* --dump-grads: the step's reduced gradients, before clipping, one file as
 * without --pp (the tied wte once: both copies hold the sum). A failure
 * warns, as the one-process trainer does. */
static void dump_grads(cb_pp_trainer *t) {
    cb_err e = {0};
    if (save_merged(t, t->dump_grads, NULL, 0, 1, &e) && t->g->world.rank == 0)
        fprintf(stderr, "cubist: warning: %s\n", e.msg);
}

float cb_pp_trainer_eval(cb_pp_trainer *t, const cb_tokens *val, int n) {
    cb_loader l;
    if (cb_loader_init(&l, val, t->rows * t->g->dp, t->T, 0, 0, "", NULL)) return NAN;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        cb_loader_next(&l, t->ids, t->targets, t->g->dpg.rank * t->rows, t->rows);
        sum += cb_pipe_eval(&t->pipe, t->ids, t->targets);
    }
    if (t->dp) sum = cb_dp_mean(&t->dp[0], sum);
    return (float)(sum / n);
}

static int load_moment(cb_pp_trainer *t, int c, float *dst, const char *prefix,
                       const cb_st_file *f, const char *path, cb_err *e) {
    cb_gpt *m = t->pipe.ch[c].m;
    size_t n = cb_gpt_num_params(m), lo = t->opt[c].lo, hi = t->opt[c].hi;
    if (lo == 0 && hi == n) return gpt_load_block(m, dst, prefix, f, path, e);
    float *full = malloc(sizeof(float) * n);
    if (!full) return cb_fail(e, CB_ENOMEM, "out of memory reading %s", path);
    int rc = gpt_load_block(m, full, prefix, f, path, e);
    if (!rc) memcpy(dst, full + lo, sizeof(float) * (hi - lo));
    free(full);
    return rc;
}

int cb_pp_trainer_load(cb_pp_trainer *t, const char *path, int state, cb_err *e) {
    int rc = CB_OK;
    for (int c = 0; !rc && c < t->pipe.o.v; c++) rc = cb_gpt_load(t->pipe.ch[c].m, path, e);
    if (rc || !state) return rc;
    char sp[4096];
    snprintf(sp, sizeof sp, "%s.state", path);
    cb_st_file f;
    if ((rc = cb_st_open(sp, &f, e))) return rc;
    for (int c = 0; !rc && c < t->pipe.o.v; c++) {
        rc = load_moment(t, c, t->opt[c].m, "m.", &f, sp, e);
        if (!rc) rc = load_moment(t, c, t->opt[c].v, "v.", &f, sp, e);
    }
    cb_st_close(&f);
    return rc;
}

void cb_pp_act_plan(cb_pp_trainer *t, double *bytes, double *none, double *extra_frac) {
    int p = t->g->pp, s = t->pipe.s;
    double *v = calloc(2 * (size_t)p + 2, sizeof *v);
    if (!v) cb_comm_fatal("out of memory");
    v[s] = t->pipe.st.act_bytes;
    v[p + s] = t->pipe.st.act_bytes_none;
    v[2 * p] = t->pipe.st.recompute_flops;
    v[2 * p + 1] = t->pipe.st.flops;
    cb_comm_allreduce_f64(&t->g->ppg, "pp.stats", NULL, v, 2 * (size_t)p + 2, CB_COMM_SUM);
    for (int i = 0; i < p; i++) bytes[i] = v[i], none[i] = v[p + i];
    *extra_frac = v[2 * p + 1] > 0 ? v[2 * p] / v[2 * p + 1] : 0;
    free(v);
}

/* snprintf at the end of buf, counting what was needed. */
__attribute__((format(printf, 4, 5))) static void app(char *buf, size_t cap, int *len,
                                                      const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t at = (size_t)*len < cap ? (size_t)*len : cap;
    *len += vsnprintf(buf ? buf + at : NULL, cap - at, fmt, ap);
    va_end(ap);
}

static void put_array(char *buf, size_t cap, int *len, const char *key, const double *x, int n,
                      int digits) {
    app(buf, cap, len, ",\"%s\":[", key);
    for (int i = 0; i < n; i++) app(buf, cap, len, "%s%.*f", i ? "," : "", digits, x[i]);
    app(buf, cap, len, "]");
}

int cb_pp_log_fields(const cb_pp_trainer *t, const cb_pp_step_stats *st, char *buf, size_t cap) {
    int p = t->g->pp < CB_PP_MAX_STAGES ? t->g->pp : CB_PP_MAX_STAGES, len = 0;
    put_array(buf, cap, &len, "pp_busy_ms", st->busy_ms, p, 3);
    put_array(buf, cap, &len, "pp_fwd_ms", st->fwd_ms, p, 3);
    put_array(buf, cap, &len, "pp_bwd_ms", st->bwd_ms, p, 3);
    put_array(buf, cap, &len, "pp_wait_ms", st->wait_ms, p, 3);
    put_array(buf, cap, &len, "pp_bubble", st->bubble, p, 4);
    put_array(buf, cap, &len, "pp_act_bytes", st->act_bytes, p, 0);
    app(buf, cap, &len, ",\"pp_bubble_mean\":%.4f,\"pp_bubble_formula\":%.4f", st->bubble_mean,
        st->bubble_formula);
    return len;
}
