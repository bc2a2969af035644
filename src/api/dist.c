/* The process grid of a user's program: MPI, the --dp --tp --tp-mode
 * --pp flags and the pipeline, recompute and ZeRO options that
 * cb_dist_init takes out of argv, and the tensor layout. The model
 * (src/graph) runs on it. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/flags.h"
#include "graph/graph.h"

/* ---------------------------------------------------------------- dist */

/* Removes "--name value" from argv; returns the value, NULL when absent.
 * A bare "--name" as the last argument is reported through *missing. */
static const char *take_flag(int *argc, char **argv, const char *name, const char **missing) {
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], name)) continue;
        if (i + 1 == *argc) {
            *missing = name;
            *argc -= 1;
            return NULL;
        }
        const char *v = argv[i + 1];
        memmove(&argv[i], &argv[i + 2], sizeof(char *) * (*argc - i - 1));
        *argc -= 2;
        return v;
    }
    return NULL;
}

/* The collective entry points agree on e across ranks, so it must start clean. */
static void clear(cb_err *e) {
    e->code = CB_OK;
    e->msg[0] = '\0';
}

/* Removes a bare "--name"; returns whether it was there. */
static int take_bool(int *argc, char **argv, const char *name) {
    for (int i = 1; i < *argc; i++)
        if (!strcmp(argv[i], name)) {
            memmove(&argv[i], &argv[i + 1], sizeof(char *) * (*argc - i));
            *argc -= 1;
            return 1;
        }
    return 0;
}

/* *out = the integer s of flag, in [lo, hi]; unchanged when s is NULL. */
static int int_flag(const char *flag, const char *s, int lo, int hi, int *out, cb_err *e) {
    if (!s) return CB_OK;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if ((end == s || *end || errno || v < lo || v > hi) && hi == INT_MAX)
        return cb_fail(e, CB_EINPUT, "%s takes an integer >= %d; got '%s'", flag, lo, s);
    if (end == s || *end || errno || v < lo || v > hi)
        return cb_fail(e, CB_EINPUT, "%s takes an integer from %d to %d; got '%s'", flag, lo, hi, s);
    *out = (int)v;
    return CB_OK;
}

/* The flags cb_dist_init takes out of argv. */
typedef struct dist_flags {
    const char *dp, *tp, *pp, *mb, *mode, *part, *mw, *zero, *missing;
    const char *sched, *vs, *rec, *recl, *recm, *embed, *maxmem, *prec, *cdt;
    int print, noprof;
} dist_flags;

static dist_flags take_flags(int *argc, char **argv) {
    dist_flags f = {0};
    f.dp = take_flag(argc, argv, "--dp", &f.missing);
    f.tp = take_flag(argc, argv, "--tp", &f.missing);
    f.pp = take_flag(argc, argv, "--pp", &f.missing);
    f.mb = take_flag(argc, argv, "--micro-batches", &f.missing);
    f.mode = take_flag(argc, argv, "--tp-mode", &f.missing);
    f.part = take_flag(argc, argv, "--partition", &f.missing);
    f.mw = take_flag(argc, argv, "--partition-memory-weight", &f.missing);
    f.zero = take_flag(argc, argv, "--zero", &f.missing);
    f.sched = take_flag(argc, argv, "--schedule", &f.missing);
    f.vs = take_flag(argc, argv, "--virtual-stages", &f.missing);
    f.rec = take_flag(argc, argv, "--recompute", &f.missing);
    f.recl = take_flag(argc, argv, "--recompute-layers", &f.missing);
    f.recm = take_flag(argc, argv, "--recompute-method", &f.missing);
    f.embed = take_flag(argc, argv, "--embed-grad", &f.missing);
    f.maxmem = take_flag(argc, argv, "--max-memory", &f.missing);
    f.prec = take_flag(argc, argv, "--precision", &f.missing);
    f.cdt = take_flag(argc, argv, "--comm-dtype", &f.missing);
    f.print = take_bool(argc, argv, "--print-partition");
    f.noprof = take_bool(argc, argv, "--no-profile");
    return f;
}

/* ---------------------------------------------------------------- the rules (flags.h) */

void cb_pp_opts_defaults(cb_pp_opts *o) {
    *o = (cb_pp_opts){.micro_batches = CB_PP_UNSET, .virtual_stages = CB_PP_UNSET,
                      .memory_weight = NAN, .recompute_layers = CB_PP_UNSET};
}

int cb_dist_check_sizes(int dp, int pp, int tp, cb_err *e) {
    static const char *const flag[3] = {"--dp", "--pp", "--tp"};
    static const char *const why[3] = {"0 = processes / (pp*tp)", "0 or 1 = no pipeline",
                                       "0 or 1 = no tensor parallelism"};
    const int v[3] = {dp, pp, tp};
    for (int i = 0; i < 3; i++)
        if (v[i] < 0)
            return cb_fail(e, CB_EINPUT, "%s %d is out of range; pass %s >= 0 (%s)", flag[i], v[i],
                           flag[i], why[i]);
    return CB_OK;
}

int cb_dist_check_zero(int zero, cb_err *e) {
    if (zero == 0 || zero == 1) return CB_OK;
    return cb_fail(e, CB_EINPUT, "--zero %d is unknown; use 0 (off) or 1 (shard AdamW state)", zero);
}

int cb_dist_parse_size(const char *s, double *out, cb_err *e) {
    char *end;
    double v = s ? strtod(s, &end) : 0;
    if (!s) return CB_OK;
    double k = *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0 : 1;
    if (k > 1) end++;
    if (end == s || *end || !(v > 0))
        return cb_fail(e, CB_EINPUT, "--max-memory takes a size in bytes, e.g. 512M or 2G; got '%s'", s);
    *out = v * k;
    return CB_OK;
}

int cb_dist_recompute(cb_dist *d, const char *mode, const char *method, int layers, int given,
                      cb_err *e) {
    d->recompute = RC_NONE;
    if (mode && !strcmp(mode, "block")) d->recompute = RC_BLOCK;
    else if (mode && !strcmp(mode, "selective")) d->recompute = RC_SELECTIVE;
    else if (mode && strcmp(mode, "none"))
        return cb_fail(e, CB_EINPUT, "--recompute '%s' is unknown; use none, block or selective", mode);
    if (method && strcmp(method, "block") && strcmp(method, "uniform"))
        return cb_fail(e, CB_EINPUT, "--recompute-method '%s' is unknown; use block or uniform", method);
    if (layers < 0)
        return cb_fail(e, CB_EINPUT, "--recompute-layers %d must be >= 0 (0: every block)", layers);
    const char *f = method ? "--recompute-method" : given ? "--recompute-layers" : NULL;
    if (f && d->recompute != RC_BLOCK)
        return cb_fail(e, CB_EINPUT, "%s needs --recompute block; add it or drop %s", f, f);
    d->rc_uniform = method && !strcmp(method, "uniform");
    d->rc_layers = layers;
    return CB_OK;
}

/* The first flag given that only a pipeline uses, or NULL. */
static const char *pipeline_flag(const cb_pp_opts *o) {
    if (o->schedule) return "--schedule";
    if (o->virtual_stages != CB_PP_UNSET) return "--virtual-stages";
    if (o->partition) return "--partition";
    if (o->print_partition) return "--print-partition";
    if (!isnan(o->memory_weight)) return "--partition-memory-weight";
    if (o->no_profile) return "--no-profile";
    return NULL;
}

/* --micro-batches, --virtual-stages, the pipeline-only flags. */
static int pipeline_sizes(int pp, const cb_pp_opts *o, cb_err *e) {
    if (o->micro_batches != CB_PP_UNSET && o->micro_batches < 1)
        return cb_fail(e, CB_EINPUT, "--micro-batches %d must be >= 1 (micro-batches per step)",
                       o->micro_batches);
    if (o->virtual_stages != CB_PP_UNSET && o->virtual_stages < 1)
        return cb_fail(e, CB_EINPUT, "--virtual-stages %d must be >= 1 (model chunks per rank)",
                       o->virtual_stages);
    const char *f = pp > 1 ? NULL : pipeline_flag(o);
    if (f)
        return cb_fail(e, CB_EINPUT, "%s needs --pp > 1 (pipeline parallelism); add --pp N or "
                                     "drop %s", f, f);
    return CB_OK;
}

int cb_dist_pipeline(cb_dist *d, int pp, const cb_pp_opts *o, cb_err *e) {
    int rc = pipeline_sizes(pp, o, e);
    d->sched = CB_PP_1F1B;
    if (!rc && o->schedule) rc = cb_pp_parse_schedule(o->schedule, &d->sched, e);
    if (!rc && o->virtual_stages != CB_PP_UNSET && d->sched != CB_PP_INTERLEAVED)
        rc = cb_fail(e, CB_EINPUT, "--virtual-stages needs --schedule interleaved");
    double w = isnan(o->memory_weight) ? 0.8 : o->memory_weight;
    if (!rc && !(w >= 0 && w <= 1))
        rc = cb_fail(e, CB_EINPUT, "--partition-memory-weight %g must be in [0, 1] (0.8 default)", w);
    if (rc) return rc;
    d->M = o->micro_batches != CB_PP_UNSET ? o->micro_batches : 0;
    d->v = o->virtual_stages != CB_PP_UNSET ? o->virtual_stages : 0;
    d->partition = o->partition ? o->partition : "auto";
    d->mem_weight = w;
    d->print_partition = o->print_partition;
    d->profile = !o->no_profile;
    int given = o->recompute_layers != CB_PP_UNSET;
    return cb_dist_recompute(d, o->recompute, o->recompute_method, given ? o->recompute_layers : 0,
                             given, e);
}

/* ---------------------------------------------------------------- cb_dist_init */

/* *out = the integer s of flag (NULL: unchanged). Any value parses; the
 * rules above bound it. */
static int any_int(const char *flag, const char *s, int *out, cb_err *e) {
    return int_flag(flag, s, INT_MIN, INT_MAX, out, e);
}

/* The text flags of a user's program as cb_pp_opts. */
static int pp_opts(const dist_flags *f, cb_pp_opts *o, cb_err *e) {
    cb_pp_opts_defaults(o);
    o->schedule = f->sched, o->partition = f->part, o->recompute = f->rec;
    o->recompute_method = f->recm, o->print_partition = f->print, o->no_profile = f->noprof;
    int rc = any_int("--micro-batches", f->mb, &o->micro_batches, e);
    if (!rc) rc = any_int("--virtual-stages", f->vs, &o->virtual_stages, e);
    if (!rc) rc = any_int("--recompute-layers", f->recl, &o->recompute_layers, e);
    char *end = NULL;
    if (!rc && f->mw) o->memory_weight = strtod(f->mw, &end);
    if (!rc && f->mw && (end == f->mw || *end))
        rc = cb_fail(e, CB_EINPUT, "--partition-memory-weight '%s' must be a number in [0, 1] "
                                   "(0.8 default)", f->mw);
    return rc;
}

/* Parsed and checked flags: grid sizes, mode, pipeline options, ZeRO. */
static int parse_flags(const dist_flags *f, cb_dist *d, int *dp, int *pp, int *tp,
                       cb_tp_mode *mode, cb_err *e) {
    int world = cb_comm_world()->size, rc = CB_OK;
    if (f->missing) return cb_fail(e, CB_EINPUT, "%s needs a value, e.g. %s 2", f->missing, f->missing);
    *dp = *pp = *tp = 0;
    rc = any_int("--tp", f->tp, tp, e);
    if (!rc) rc = any_int("--pp", f->pp, pp, e);
    if (!rc) rc = any_int("--dp", f->dp, dp, e);
    if (!rc) rc = cb_dist_check_sizes(*dp, *pp, *tp, e);
    *tp = *tp ? *tp : 1, *pp = *pp ? *pp : 1;
    if (!*dp) *dp = world / (*tp * *pp) > 0 ? world / (*tp * *pp) : 1;
    cb_pp_opts po;
    if (!rc) rc = pp_opts(f, &po, e);
    if (!rc) rc = cb_dist_pipeline(d, *pp, &po, e);
    d->profile = 0; /* a user's partition follows FLOP counts, never timing */
    if (!rc) rc = any_int("--zero", f->zero, &d->zero, e);
    if (!rc) rc = cb_dist_check_zero(d->zero, e);
    d->embed_grad = CB_DP_EMBED_AUTO;
    if (!rc && f->embed) rc = cb_dp_embed_parse(f->embed, &d->embed_grad, e);
    if (!rc) rc = cb_dist_parse_size(f->maxmem, &d->max_memory, e);
    if (!rc && f->cdt) rc = cb_dp_comm_dtype_parse(f->cdt, &d->comm_bf16, e);
    cb_precision prec = CB_PREC_FP32;
    if (!rc && f->prec) rc = cb_precision_parse(f->prec, &prec, e);
    if (!rc) rc = cb_kernels_select(prec, e);
    if (!rc) rc = cb_grid_parse_mode(f->mode ? f->mode : "1d", mode, e);
    return rc;
}

int cb_dist_init(int *argc, char ***argv, cb_dist **out, cb_err *e) {
    clear(e);
    int rc = cb_comm_init(argc, argv, e);
    if (rc) return rc;
    dist_flags f = take_flags(argc, *argv);
    cb_dist *d = calloc(1, sizeof *d);
    if (!d) return cb_fail(e, CB_ENOMEM, "out of memory");
    int dp = 1, pp = 1, tp = 1;
    cb_tp_mode mode = CB_TP_1D;
    rc = parse_flags(&f, d, &dp, &pp, &tp, &mode, e);
    int have_grid = !rc && !cb_grid_create(&d->g, dp, pp, tp, mode, e);
    if (have_grid) cb_layout_create(&d->g, &d->L, e);
    rc = cb_comm_agree_err(cb_comm_world(), e);
    if (rc) {
        if (d->L) cb_layout_free(d->L);
        if (have_grid) cb_grid_free(&d->g);
        free(d);
        return rc;
    }
    *out = d;
    return CB_OK;
}

/* A grid of dp x 1 x tp (tp 0: each rank alone) with the defaults. */
static int dist_new(cb_dist **out, int dp, int tp, cb_tp_mode mode, cb_err *e) {
    cb_dist *d = calloc(1, sizeof *d);
    if (!d) return cb_fail(e, CB_ENOMEM, "out of memory");
    *d = (cb_dist){.sched = CB_PP_1F1B, .partition = "auto", .mem_weight = 0.8,
                   .embed_grad = CB_DP_EMBED_AUTO};
    int rc = tp ? cb_grid_create(&d->g, dp, 1, tp, mode, e) : cb_grid_create_self(&d->g, e);
    if (!rc) rc = cb_layout_create(&d->g, &d->L, e);
    if (rc) {
        if (d->L) cb_layout_free(d->L);
        free(d);
        return rc;
    }
    *out = d;
    return CB_OK;
}

int cb_dist_data_parallel(cb_dist **out, int alone, int zero, int embed_grad, double bucket_mb,
                          cb_err *e) {
    int rc = dist_new(out, cb_comm_world()->size, alone ? 0 : 1, CB_TP_1D, e);
    if (rc) return rc;
    (*out)->zero = zero, (*out)->embed_grad = embed_grad, (*out)->bucket_mb = bucket_mb;
    return CB_OK;
}

int cb_dist_tensor(cb_dist **out, int tp, cb_tp_mode mode, cb_err *e) {
    return dist_new(out, 1, tp, mode, e);
}

int cb_dist_rank(const cb_dist *d) { return d->g.world_rank; }

const char *cb_dist_precision(const cb_dist *d) {
    (void)d;
    return cb_kernels_note();
}

void cb_dist_exit(cb_dist *d, const cb_err *e) {
    (void)d;
    cb_comm_exit(e->code == CB_EINPUT ? 2 : e->code == CB_ENOMEM ? 4 : 1, e->msg);
}

void cb_dist_free(cb_dist *d) {
    cb_layout_free(d->L);
    cb_grid_free(&d->g);
    free(d);
}

void cb_dist_finalize(cb_dist *d) {
    cb_dist_free(d);
    cb_comm_finalize();
}

