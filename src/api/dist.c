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

/* The collective entry points agree on e across ranks, so it must start clean. */
static void clear(cb_err *e) {
    e->code = CB_OK;
    e->msg[0] = '\0';
}

/* *out = the integer s of flag, in [lo, hi]; unchanged when s is NULL. */
static int int_flag(const char *flag, const char *s, int lo, int hi, int *out, cb_err *e) {
    if (!s) return CB_OK;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if ((end == s || *end || errno) && lo == INT_MIN)
        return cb_fail(e, CB_EINPUT, "%s takes an integer; got '%s'", flag, s);
    if ((end == s || *end || errno || v < lo || v > hi) && hi == INT_MAX)
        return cb_fail(e, CB_EINPUT, "%s takes an integer >= %d; got '%s'", flag, lo, s);
    if (end == s || *end || errno || v < lo || v > hi)
        return cb_fail(e, CB_EINPUT, "%s takes an integer from %d to %d; got '%s'", flag, lo, hi, s);
    *out = (int)v;
    return CB_OK;
}

/* The distribution flags: names, switches and --help lines, for every
 * program (cb_dist_take, cb_dist_usage). */
static const struct {
    const char *name;
    int is_switch;
    const char *example, *help;
} FLAGS[CB_DF_N] = {
    [CB_DF_DP] = {"dp", 0, "2", "data-parallel ranks (default: processes / (pp*tp))"},
    [CB_DF_PP] = {"pp", 0, "2", "pipeline stages (1)"},
    [CB_DF_TP] = {"tp", 0, "4", "tensor-parallel ranks (1)"},
    [CB_DF_MODE] = {"tp-mode", 0, "2d", "tensor layout 1d, 2d (tp square) or 3d (tp cube)"},
    [CB_DF_SCHED] = {"schedule", 0, "1f1b", "pipeline schedule: gpipe, 1f1b, interleaved"},
    [CB_DF_MB] = {"micro-batches", 0, "8",
                  "micro-batches per step; without --pp the gradient accumulation (cubist "
                  "train: --grad-accum)"},
    [CB_DF_VS] = {"virtual-stages", 0, "2", "interleaved: chunks per rank (2)"},
    [CB_DF_PART] = {"partition", 0, "auto", "auto, or module boundaries such as 0,3,7,12"},
    [CB_DF_MW] = {"partition-memory-weight", 0, "0.8",
                  "weight of memory against compute in the partition cost (0.8; 0.2 for speed)"},
    [CB_DF_NOPROF] = {"no-profile", 1, "1", "partition from FLOP counts, no profiling"},
    [CB_DF_PRINT] = {"print-partition", 1, "1", "print the pipeline stages"},
    [CB_DF_REC] = {"recompute", 0, "block", "activation checkpointing: none, block or selective"},
    [CB_DF_RECL] = {"recompute-layers", 0, "1",
                    "block: the first N blocks of each stage (0: all); uniform: groups of N (1)"},
    [CB_DF_RECM] = {"recompute-method", 0, "uniform",
                    "with --recompute block: block (first N blocks) or uniform (every N-th input)"},
    [CB_DF_ZERO] = {"zero", 0, "1", "1: shard AdamW state over data-parallel ranks (ZeRO-1)"},
    [CB_DF_EMBED] = {"embed-grad", 0, "dense",
                     "auto (default), dense (all-reduce), split (wte's head part early, lookup "
                     "rows apart) or sparse (all-gather rows, as TF+Horovod)"},
    [CB_DF_MAXMEM] = {"max-memory", 0, "2G",
                      "bytes a rank may plan (K, M, G: powers of 1024); over it the build ends "
                      "with one line and status 4"},
    [CB_DF_PREC] = {"precision", 0, "bf16",
                    "fp32, or bf16: products in bf16 through oneDNN, fp32 weights, state and sums"},
    [CB_DF_CDT] = {"comm-dtype", 0, "bf16",
                   "fp32 (default) or bf16: the data-parallel gradient buckets and the "
                   "tensor-parallel activation collectives travel in bf16, half the bytes, "
                   "summed in fp32"},
};

/* The table's index of argument s ("--name" or "--name=value"; *eq: the
 * value after '=', else NULL), or -1. */
static int flag_index(const char *s, const char **eq) {
    if (strncmp(s, "--", 2)) return -1;
    const char *name = s + 2, *q = strchr(name, '=');
    size_t len = q ? (size_t)(q - name) : strlen(name);
    *eq = q ? q + 1 : NULL;
    for (int k = 0; k < CB_DF_N; k++)
        if (strlen(FLAGS[k].name) == len && !strncmp(FLAGS[k].name, name, len)) return k;
    return -1;
}

static int is_01(const char *s) { return !strcmp(s, "0") || !strcmp(s, "1"); }

int cb_dist_take(int *argc, char **argv, cb_dist_args *a, cb_err *e) {
    *a = (cb_dist_args){0};
    int kept = 0, rc = CB_OK;
    for (int i = 0; i < *argc; i++) {
        const char *v;
        int k = flag_index(argv[i], &v);
        if (k < 0) {
            argv[kept++] = argv[i];
            continue;
        }
        const char *flag = FLAGS[k].name;
        int next = i + 1 < *argc && strncmp(argv[i + 1], "--", 2); /* a value follows */
        if (!v && FLAGS[k].is_switch) v = next ? argv[++i] : "1";
        else if (!v && i + 1 < *argc) v = argv[++i];
        if (!v && !rc)
            rc = cb_fail(e, CB_EINPUT, "--%s needs a value, e.g. --%s %s", flag, flag,
                         FLAGS[k].example);
        else if (FLAGS[k].is_switch && !is_01(v) && !rc)
            rc = cb_fail(e, CB_EINPUT, "--%s: '%s' is not 0 or 1; pass --%s (or --%s 1) to switch "
                                       "it on, --%s 0 to switch it off", flag, v, flag, flag, flag);
        a->v[k] = v;
    }
    if (kept < *argc) argv[kept] = NULL;
    *argc = kept;
    return rc;
}

void cb_dist_usage(FILE *f) {
    for (int k = 0; k < CB_DF_N; k++) {
        char name[40];
        snprintf(name, sizeof name, "--%s", FLAGS[k].name);
        fprintf(f, "  %-22s %s\n", name, FLAGS[k].help);
    }
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

/* The pipeline and recompute flags' values as cb_pp_opts. */
static int pp_opts(const char *const *v, cb_pp_opts *o, cb_err *e) {
    cb_pp_opts_defaults(o);
    o->schedule = v[CB_DF_SCHED], o->partition = v[CB_DF_PART], o->recompute = v[CB_DF_REC];
    o->recompute_method = v[CB_DF_RECM];
    o->print_partition = v[CB_DF_PRINT] && v[CB_DF_PRINT][0] == '1';
    o->no_profile = v[CB_DF_NOPROF] && v[CB_DF_NOPROF][0] == '1';
    int rc = any_int("--micro-batches", v[CB_DF_MB], &o->micro_batches, e);
    if (!rc) rc = any_int("--virtual-stages", v[CB_DF_VS], &o->virtual_stages, e);
    if (!rc) rc = any_int("--recompute-layers", v[CB_DF_RECL], &o->recompute_layers, e);
    const char *mw = v[CB_DF_MW];
    char *end = NULL;
    if (!rc && mw) o->memory_weight = strtod(mw, &end);
    if (!rc && mw && (end == mw || *end))
        rc = cb_fail(e, CB_EINPUT, "--partition-memory-weight '%s' must be a number in [0, 1] "
                                   "(0.8 default)", mw);
    return rc;
}

int cb_dist_read(const cb_dist_args *a, cb_dist_opts *o, cb_err *e) {
    const char *const *v = a->v;
    *o = (cb_dist_opts){.tp_mode = v[CB_DF_MODE] ? v[CB_DF_MODE] : "1d",
                        .embed_grad = v[CB_DF_EMBED] ? v[CB_DF_EMBED] : "auto",
                        .max_memory = v[CB_DF_MAXMEM],
                        .precision = v[CB_DF_PREC] ? v[CB_DF_PREC] : "fp32",
                        .comm_dtype = v[CB_DF_CDT] ? v[CB_DF_CDT] : "fp32"};
    int rc = any_int("--tp", v[CB_DF_TP], &o->tp, e);
    if (!rc) rc = any_int("--pp", v[CB_DF_PP], &o->pp, e);
    if (!rc) rc = any_int("--dp", v[CB_DF_DP], &o->dp, e);
    if (!rc) rc = cb_dist_check_sizes(o->dp, o->pp, o->tp, e);
    if (!rc) rc = pp_opts(v, &o->pipe, e);
    if (!rc) rc = any_int("--zero", v[CB_DF_ZERO], &o->zero, e);
    if (!rc) rc = cb_dist_check_zero(o->zero, e);
    int embed;
    double bytes;
    cb_precision prec;
    cb_tp_mode mode;
    if (!rc) rc = cb_dp_embed_parse(o->embed_grad, &embed, e);
    if (!rc) rc = cb_dist_parse_size(o->max_memory, &bytes, e);
    if (!rc) rc = cb_precision_parse(o->precision, &prec, e);
    if (!rc) rc = cb_dp_comm_dtype_parse(o->comm_dtype, &embed, e);
    if (!rc) rc = cb_grid_parse_mode(o->tp_mode, &mode, e);
    return rc;
}

/* The flags of a user's program: grid sizes (dp from the world), mode,
 * pipeline rules, ZeRO, the kernels of --precision. */
static int parse_flags(const cb_dist_args *a, cb_dist *d, int *dp, int *pp, int *tp,
                       cb_tp_mode *mode, cb_err *e) {
    int world = cb_comm_world()->size;
    cb_dist_opts o;
    int rc = cb_dist_read(a, &o, e);
    *tp = o.tp ? o.tp : 1, *pp = o.pp ? o.pp : 1;
    *dp = o.dp ? o.dp : world / (*tp * *pp) > 0 ? world / (*tp * *pp) : 1;
    if (!rc) rc = cb_dist_pipeline(d, *pp, &o.pipe, e);
    d->profile = 0; /* a user's partition follows FLOP counts, never timing */
    d->zero = o.zero;
    d->embed_grad = CB_DP_EMBED_AUTO;
    if (!rc) rc = cb_dp_embed_parse(o.embed_grad, &d->embed_grad, e);
    if (!rc) rc = cb_dist_parse_size(o.max_memory, &d->max_memory, e);
    if (!rc) rc = cb_dp_comm_dtype_parse(o.comm_dtype, &d->comm_bf16, e);
    cb_precision prec = CB_PREC_FP32;
    if (!rc) rc = cb_precision_parse(o.precision, &prec, e);
    if (!rc) rc = cb_kernels_select(prec, e);
    if (!rc) rc = cb_grid_parse_mode(o.tp_mode, mode, e);
    return rc;
}

int cb_dist_init(int *argc, char ***argv, cb_dist **out, cb_err *e) {
    clear(e);
    int rc = cb_comm_init(argc, argv, e);
    if (rc) return rc;
    cb_dist_args a;
    int bad = cb_dist_take(argc, *argv, &a, e);
    cb_dist *d = calloc(1, sizeof *d);
    if (!d) return cb_fail(e, CB_ENOMEM, "out of memory");
    int dp = 1, pp = 1, tp = 1;
    cb_tp_mode mode = CB_TP_1D;
    rc = bad ? bad : parse_flags(&a, d, &dp, &pp, &tp, &mode, e);
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

