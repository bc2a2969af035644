/* The process grid of a user's program: MPI, the --dp --tp --tp-mode
 * --pp flags and the pipeline, recompute and ZeRO options that
 * cb_dist_init takes out of argv, and the tensor layout. The model
 * (src/graph) runs on it. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    const char *sched, *vs, *rec, *recl, *recm, *embed, *maxmem, *prec;
    int print;
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
    f.print = take_bool(argc, argv, "--print-partition");
    take_bool(argc, argv, "--no-profile");
    return f;
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

static int parse_recompute(const dist_flags *f, cb_dist *d, cb_err *e) {
    int layers = 0;
    int rc = int_flag("--recompute-layers", f->recl, INT_MIN, INT_MAX, &layers, e);
    return rc ? rc : cb_dist_recompute(d, f->rec, f->recm, layers, f->recl != NULL, e);
}

/* The pipeline flags need --pp > 1, except --schedule and
 * --micro-batches, which mean gradient accumulation at --pp 1. */
static int parse_pipeline(const dist_flags *f, cb_dist *d, int pp, cb_err *e) {
    int rc = int_flag("--micro-batches", f->mb, 1, INT_MAX, &d->M, e);
    if (!rc) rc = int_flag("--virtual-stages", f->vs, 1, INT_MAX, &d->v, e);
    d->sched = CB_PP_1F1B;
    if (!rc && f->sched) rc = cb_pp_parse_schedule(f->sched, &d->sched, e);
    if (!rc && f->vs && d->sched != CB_PP_INTERLEAVED)
        rc = cb_fail(e, CB_EINPUT, "--virtual-stages needs --schedule interleaved");
    if (!rc && pp == 1 && d->sched == CB_PP_INTERLEAVED)
        rc = cb_fail(e, CB_EINPUT, "--schedule interleaved needs --pp 2 or more");
    if (!rc && pp == 1 && f->part)
        rc = cb_fail(e, CB_EINPUT, "--partition needs --pp 2 or more");
    return rc;
}

/* --max-memory SIZE: bytes, or with K, M, G (powers of 1024). */
static int parse_size(const char *s, double *out, cb_err *e) {
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

/* Parsed and checked flags: grid sizes, mode, pipeline options, ZeRO. */
static int parse_flags(const dist_flags *f, cb_dist *d, int *dp, int *pp, int *tp,
                       cb_tp_mode *mode, cb_err *e) {
    int world = cb_comm_world()->size, rc = CB_OK;
    if (f->missing) return cb_fail(e, CB_EINPUT, "%s needs a value, e.g. %s 2", f->missing, f->missing);
    *tp = *pp = 1;
    rc = int_flag("--tp", f->tp, 1, INT_MAX, tp, e);
    if (!rc) rc = int_flag("--pp", f->pp, 1, INT_MAX, pp, e);
    *dp = world / (*tp * *pp) > 0 ? world / (*tp * *pp) : 1;
    if (!rc) rc = int_flag("--dp", f->dp, 1, INT_MAX, dp, e);
    if (!rc) rc = parse_pipeline(f, d, *pp, e);
    if (!rc) rc = parse_recompute(f, d, e);
    if (!rc) rc = int_flag("--zero", f->zero, 0, 1, &d->zero, e);
    d->embed_grad = CB_DP_EMBED_AUTO;
    if (!rc && f->embed) rc = cb_dp_embed_parse(f->embed, &d->embed_grad, e);
    if (!rc) rc = parse_size(f->maxmem, &d->max_memory, e);
    cb_precision prec = CB_PREC_FP32;
    if (!rc && f->prec) rc = cb_precision_parse(f->prec, &prec, e);
    if (!rc) rc = cb_kernels_select(prec, e);
    if (!rc) rc = cb_grid_parse_mode(f->mode ? f->mode : "1d", mode, e);
    char *end = NULL;
    d->mem_weight = f->mw ? strtod(f->mw, &end) : 0.8;
    if (!rc && f->mw && (end == f->mw || *end || !(d->mem_weight >= 0 && d->mem_weight <= 1)))
        rc = cb_fail(e, CB_EINPUT, "--partition-memory-weight '%s' must be a number in [0, 1] "
                                   "(0.8 default)", f->mw);
    d->partition = f->part ? f->part : "auto";
    d->print_partition = f->print;
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

