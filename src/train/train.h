/* `cubist train`: its options, the resume metadata of its checkpoints and
 * the run (run.c: the GPT as a graph on the engine of src/graph, one step
 * of M micro-batches, global-norm clipping and one AdamW update). */
#ifndef CB_TRAIN_H
#define CB_TRAIN_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "comm/grid.h"
#include "comm/stats.h"
#include "cubist.h"
#include "data/loader.h"
#include "dp/dp.h"
#include "api/flags.h"
#include "optim/adamw.h"

/* For --pp pp: the pipeline and recompute flags checked by the rules
 * every program shares (cb_dist_pipeline, api/flags.h); --micro-batches M
 * becomes *accum (refused when --grad-accum disagrees), so at pp = 1 it
 * means --grad-accum (the engine takes the defaults of what was not
 * given). CB_EINPUT, one line. */
int cb_pp_opts_resolve(cb_pp_opts *o, int pp, int *accum, cb_err *e);

typedef struct cb_train_opts {
    cb_gpt_config model; /* zero fields: from the checkpoint, else defaults */
    int B, T, accum, steps;
    cb_adamw_config opt;
    uint64_t seed;
    int shuffle;
    const char *data, *val_data, *init, *save, *resume, *log, *dump_grads;
    int save_every, eval_every, eval_batches;
    int exit_after; /* stop (and save) after this many steps of this run */
    int keep_last;  /* --save DIR: keep the newest N checkpoints (0: all) */
    const char *exit_signal; /* besides SIGTERM and SIGINT: stop and save (USR1) */
    double stall_timeout;    /* seconds; 0 off, < 0 the default (comm.h) */
    double peak_gflops;
    int threads;
    int quiet;
    /* process grid and data parallelism (cubist train); dp 0 = world / (pp*tp) */
    int dp, pp, tp;
    const char *tp_mode;
    int print_grid, comm_report, zero;
    double bucket_mb;
    const char *embed_grad; /* "auto", "dense", "split" or "sparse" (src/dp/dp.h) */
    const char *tp3d_save;  /* "gathered" or "shard" */
    const char *save_dtype; /* "fp32", "bf16" or "f16": the weights file of --save */
    const char *max_memory; /* --max-memory SIZE (NULL: no limit; api/flags.h) */
    const char *precision;  /* --precision fp32|bf16 (cubist train selects the kernels) */
    cb_pp_opts pipe;        /* --pp > 1: schedule, micro-batches, partition, recompute */
} cb_train_opts;

void cb_train_defaults(cb_train_opts *o);

/* Figures of one step, for logs and the benchmark. */
typedef struct cb_step_stats {
    float loss, lr, grad_norm;
    double step_ms, fwd_ms, bwd_ms, opt_ms;
    double comm_wait_ms; /* waiting for gradient buckets after backward */
} cb_step_stats;

/* The resume metadata of a .state file, as (key, value) pairs in
 * meta[2 * CB_STATE_NMETA]; text holds the values. The first pair is the
 * checkpoint id, a fresh random value per save that the weights file
 * carries too: F and F.state are renamed one after the other, and a crash
 * between the renames leaves a pair whose ids differ. Then the data's
 * tokenizer (what `cubist sample` decodes with), step, AdamW update count,
 * data position, data RNG and tokens trained since step 0. The weights file
 * carries the first CB_WEIGHTS_NMETA pairs (the id and the tokenizer).
 * cb_state_read is the inverse. */
#define CB_STATE_NMETA 7
#define CB_WEIGHTS_NMETA 2
typedef struct cb_state_text {
    char v[CB_STATE_NMETA][24];
} cb_state_text;
void cb_state_meta(cb_state_text *text, const char *meta[2 * CB_STATE_NMETA], int step,
                   int adam_t, const cb_loader *ld, uint64_t tokens);
int cb_state_read(const cb_st_file *f, const char *path, int *step, int *adam_t, cb_loader *ld,
                  uint64_t *tokens, cb_err *e);
/* Refuses a weights file and an opened .state file whose checkpoint ids
 * differ (or are missing): one line naming both files. */
int cb_state_check_pair(const char *weights_path, const cb_st_file *state, const char *state_path,
                        cb_err *e);
/* An unsigned number from a checkpoint's metadata (step, data position...). */
int cb_meta_u64(const cb_st_file *f, const char *key, const char *path, uint64_t *out, cb_err *e);


/* One step as the command line reports it: the numbers of the progress
 * line and of the --log object. The communication and pipeline fields
 * come as ',"key":value' pairs (comm/stats.h builds the first from its
 * per-group counters; empty strings when none). */
typedef struct cb_train_record {
    int step, first_step;   /* this step (1-based); the step this run started after */
    cb_step_stats st;
    double tokens;          /* trained on since step 0, every rank */
    double tokens_per_s, mfu, elapsed_s;
    long peak_rss_bytes;
    size_t opt_state_bytes; /* AdamW m and v on this rank */
    float val_loss;         /* NAN: not evaluated */
    const char *comm_fields, *pp_fields;
    const char *warning;    /* NULL, or what went wrong beside the step (--dump-grads) */
} cb_train_record;

/* The run as the command line reports it before the first step: the
 * model and batch (o, resolved), this rank's parameters, the machine, the
 * grid, data parallelism's buckets and the activation plan per pipeline
 * stage with and without recompute. */
typedef struct cb_train_start {
    const cb_train_opts *o;
    size_t params;           /* floats on this rank */
    int threads;
    const char *blas, *kernels;
    double peak_gflops;
    int dp, pp, tp, M;
    const char *schedule, *layout; /* the pipeline's; the tensor layout's name */
    int rows, buckets;       /* dp > 1: rows per rank, fusion buckets */
    double adam_bytes;       /* dp > 1: AdamW state per rank */
    const char *embed;       /* dp > 1: the embedding gradient's path */
    const double *act, *act_none; /* pp of them, NULL under --quiet */
    double rc_flops_frac;    /* the recompute's forwards over the step's FLOPs */
    const cb_grid *grid;     /* the process grid */
    const cb_model *model;   /* built (cb_model_print_partition) */
    const char *hosts;       /* --print-grid: every world rank's host (cb_grid_hosts); else NULL */
} cb_train_start;

/* Where a run's records go, on world rank 0 only (cli/train_log.c):
 * begin once the model is built (resumed: the step a --resume continues
 * from, -1 for a fresh run), start with the setup, step after each,
 * report with --comm-report's table after the last step, end with the
 * run's status (returns it, or its own failure). A failure ends the run on every rank
 * with its message (a log that cannot be written: CB_ESYS). */
typedef struct cb_train_sink {
    void *ctx;
    int (*begin)(void *ctx, int resumed, cb_err *e);
    void (*start)(void *ctx, const cb_train_start *s);
    int (*step)(void *ctx, const cb_train_record *r, cb_err *e);
    void (*report)(void *ctx, const cb_comm_spread *s);
    int (*end)(void *ctx, int rc, cb_err *e);
} cb_train_sink;

/* `cubist train` end to end; the records to sink. */
int cb_train_run(const cb_train_opts *o, const cb_train_sink *sink, cb_err *e);
#endif
