/* The distribution flags, read and checked in one place (dist.c) for
 * every program: cb_dist_init (a user's program) and `cubist train` take
 * them out of argv with cb_dist_take (one table: names, syntax, --help
 * lines), read them with cb_dist_read and apply the same rules. Errors:
 * CB_EINPUT, one line naming the flag and the fix. */
#ifndef CB_API_FLAGS_H
#define CB_API_FLAGS_H

#include <limits.h>

#include "cubist.h"

typedef struct cb_dist cb_dist;

/* An int flag not given. Flags not given are NULL, NAN or this, so that
 * pipeline flags without --pp can be refused. */
#define CB_PP_UNSET INT_MIN

/* The pipeline and recompute flags as given. */
typedef struct cb_pp_opts {
    const char *schedule;  /* gpipe | 1f1b | interleaved (NULL: 1f1b) */
    int micro_batches;     /* M (unset: the default; at --pp 1 gradient accumulation) */
    int virtual_stages;    /* chunks per rank, interleaved only (unset: 2 when interleaved) */
    const char *partition; /* auto, equal or a list of module boundaries (NULL: auto) */
    double memory_weight;  /* NAN: 0.8 */
    int no_profile, print_partition;
    const char *recompute; /* none | block | selective (NULL: none) */
    const char *recompute_method; /* block | uniform (NULL: block) */
    int recompute_layers;  /* block: the first n blocks of each chunk, 0 all; uniform: groups;
                              CB_PP_UNSET: not given */
} cb_pp_opts;

void cb_pp_opts_defaults(cb_pp_opts *o);

/* The distribution flags of the table, as given (NULL: absent). */
enum { CB_DF_DP, CB_DF_PP, CB_DF_TP, CB_DF_MODE, CB_DF_SCHED, CB_DF_MB, CB_DF_VS, CB_DF_PART,
       CB_DF_MW, CB_DF_NOPROF, CB_DF_PRINT, CB_DF_REC, CB_DF_RECL, CB_DF_RECM, CB_DF_ZERO,
       CB_DF_EMBED, CB_DF_MAXMEM, CB_DF_PREC, CB_DF_CDT, CB_DF_N };
typedef struct cb_dist_args {
    const char *v[CB_DF_N];
} cb_dist_args;

/* Takes the table's flags out of argv[0..*argc) (the rest keep their
 * order), as cubist's commands read theirs: "--name value" or
 * "--name=value"; a switch (--no-profile, --print-partition) bare (next
 * argument absent or a flag) or 0 or 1; the last of a repeated flag
 * counts. A flag without its value is CB_EINPUT. */
int cb_dist_take(int *argc, char **argv, cb_dist_args *a, cb_err *e);

/* The flags read: each value's syntax and meaning checked (sizes, ZeRO,
 * tensor mode, embedding path, --max-memory, precision), the pipeline
 * and recompute flags as given (their rules need --pp: cb_dist_pipeline). */
typedef struct cb_dist_opts {
    int dp, pp, tp, zero;   /* 0: not given (dp: processes / (pp*tp)) */
    const char *tp_mode;    /* "1d" when not given */
    const char *embed_grad; /* "auto" */
    const char *max_memory; /* NULL: no limit */
    const char *precision;  /* "fp32" */
    const char *comm_dtype; /* "fp32": the data-parallel gradient buckets' wire type */
    cb_pp_opts pipe;
} cb_dist_opts;
int cb_dist_read(const cb_dist_args *a, cb_dist_opts *o, cb_err *e);
/* --dp, --pp, --tp >= 0 (0: dp = processes / (pp*tp); pp, tp 1). */
int cb_dist_check_sizes(int dp, int pp, int tp, cb_err *e);
/* --zero 0 or 1. */
int cb_dist_check_zero(int zero, cb_err *e);
/* --max-memory SIZE: bytes, or with K, M, G (powers of 1024); NULL: 0. */
int cb_dist_parse_size(const char *s, double *bytes, cb_err *e);
/* The pipeline and recompute flags of o under --pp pp (< 2: none) into d
 * (its M, v, sched, partition, mem_weight, print_partition, profile and
 * recompute fields): --micro-batches and --virtual-stages >= 1, the other
 * pipeline flags only with --pp > 1, --virtual-stages only interleaved,
 * the memory weight in [0, 1], then the recompute rules. */
int cb_dist_pipeline(cb_dist *d, int pp, const cb_pp_opts *o, cb_err *e);
/* --recompute none|block|selective (NULL: none), --recompute-method
 * block|uniform (NULL: block), --recompute-layers (given: on the command
 * line) into d. */
int cb_dist_recompute(cb_dist *d, const char *mode, const char *method, int layers, int given,
                      cb_err *e);

#endif
