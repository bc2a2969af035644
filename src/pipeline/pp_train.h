/* Pipeline parallelism inside the trainer: options, the plan (partition,
 * optionally from a profiling pass on world rank 0), one optimizer step of
 * M micro-batches composed with data parallelism (a cb_dp per chunk, ZeRO-1
 * included) and any tensor layout, exact global-norm clipping, AdamW per
 * chunk, and layout-independent checkpoints.
 *
 * Batch mapping: each micro-batch is --batch B sequences (global over the
 * data-parallel ranks, B/dp each), and a step is --micro-batches M of them,
 * read from the loader in order: `--pp N --micro-batches M --batch B`
 * follows the trajectory of the single process's `--batch B --grad-accum M`.
 *
 * Checkpoints: every virtual stage's tensor-rank-0 (of data-parallel rank
 * 0) writes its tensors to path.vsK; world rank 0 merges them into path,
 * wte once, and removes the parts. The file is the one-process file, so it
 * loads under any layout; loading reads each chunk's tensors from it. */
#ifndef CB_PP_TRAIN_H
#define CB_PP_TRAIN_H

#include <limits.h>

#include "comm/grid.h"
#include "data/loader.h"
#include "optim/adamw.h"
#include "pipeline/partition.h"
#include "pipeline/pipeline.h"
#include "train/dp.h"

/* An int flag not given. Flags not given are NULL, NAN or this, so that
 * pipeline flags without --pp can be refused (cb_pp_opts_resolve). */
#define CB_PP_UNSET INT_MIN

typedef struct cb_pp_opts {
    const char *schedule;  /* gpipe | 1f1b | interleaved (NULL: 1f1b) */
    int micro_batches;     /* M (unset: the --grad-accum value) */
    int virtual_stages;    /* chunks per rank, interleaved only (unset: 1; interleaved 2) */
    const char *partition; /* auto, equal or a list of module boundaries (NULL: auto) */
    double memory_weight;  /* NAN: 0.8 */
    int no_profile, print_partition;
    const char *recompute; /* none | block | selective (gpt_rc) */
    const char *recompute_method; /* block | uniform (NULL: block) */
    int recompute_layers;  /* block: the first n blocks of each chunk, 0 all; uniform: groups */
} cb_pp_opts;

void cb_pp_opts_defaults(cb_pp_opts *o);
/* For --pp pp: --micro-batches and --virtual-stages >= 1 where given;
 * --micro-batches M becomes *accum (refused when --grad-accum disagrees),
 * so at pp = 1 it means --grad-accum; the other pipeline flags need
 * pp > 1; then the defaults of what was not given. CB_EINPUT, one line. */
int cb_pp_opts_resolve(cb_pp_opts *o, int pp, int *accum, cb_err *e);

typedef struct cb_pp_step_stats {
    float loss, grad_norm, lr;
    double step_ms, opt_ms;
    /* per pipeline rank (stage), gathered to every rank of the pipeline */
    double busy_ms[CB_PP_MAX_STAGES]; /* forward + backward compute */
    double fwd_ms[CB_PP_MAX_STAGES], bwd_ms[CB_PP_MAX_STAGES];
    double wait_ms[CB_PP_MAX_STAGES]; /* blocked on point-to-point messages */
    double bubble[CB_PP_MAX_STAGES];
    double act_bytes[CB_PP_MAX_STAGES]; /* cb_pp_stats.act_bytes */
    double bubble_mean, bubble_formula;
} cb_pp_step_stats;

typedef struct cb_pp_trainer {
    cb_pipe pipe;
    cb_grid *g;
    cb_pp_partition part;
    cb_adamw *opt; /* per chunk */
    cb_dp *dp;     /* per chunk; NULL when the data-parallel group is 1 */
    int M, rows, T, zero;
    int *ids, *targets; /* M x rows x T */
    const char *dump_grads; /* --dump-grads: written at step index 0 (collective) */
} cb_pp_trainer;

/* Collective over the grid. B: the global micro-batch; rows B/dp per rank. */
int cb_pp_trainer_init(cb_pp_trainer *t, const cb_pp_opts *po, const cb_gpt_config *c, int B,
                       int T, int accum, cb_grid *g, cb_layout *L, const cb_adamw_config *opt,
                       uint64_t seed, int zero, double bucket_mb, cb_err *e);
void cb_pp_trainer_free(cb_pp_trainer *t);
/* One optimizer step at 0-based step index `step`; ld yields the global
 * micro-batches, this rank reads rows [r0, r0 + rows). */
void cb_pp_trainer_step(cb_pp_trainer *t, cb_loader *ld, int r0, int step, cb_pp_step_stats *st);
/* Collective: the mean loss of n sequential batches of val (forward only,
 * this rank's rows of each), the same on every rank; NAN when val holds
 * fewer than one batch. */
float cb_pp_trainer_eval(cb_pp_trainer *t, const cb_tokens *val, int n);
/* Collective: path (weights) and, when state_meta is not NULL, path.state
 * (AdamW moments "m."/"v." and nmeta metadata pairs). The first pair (the
 * checkpoint id, cb_state_meta) goes into the weights file too. */
int cb_pp_trainer_save(cb_pp_trainer *t, const char *path, const char *const *state_meta,
                       int nmeta, cb_err *e);
/* Weights from path into every chunk; with state, the moments of path.state
 * (the caller reads its metadata). */
int cb_pp_trainer_load(cb_pp_trainer *t, const char *path, int state, cb_err *e);
/* Collective over the pipeline group: each stage's planned activation
 * bytes, and had it no recompute (p each), and the recompute's extra
 * forward FLOPs over the step's, all stages together. */
void cb_pp_act_plan(cb_pp_trainer *t, double *bytes, double *none, double *extra_frac);
/* ,"pp_busy_ms":[..],"pp_bubble":[..],... for the JSONL log; snprintf-like. */
int cb_pp_log_fields(const cb_pp_trainer *t, const cb_pp_step_stats *st, char *buf, size_t cap);

/* Part files of a checkpoint: path.vsK for (virtual) stage K; merging
 * writes path with each tensor name once (the tied wte) and the metadata of
 * part 0, then removes the parts. Used by the GPT and by users' models. */
void cb_pp_part_path(char *out, size_t cap, const char *path, int vs);
int cb_pp_merge_parts(const char *path, int n, cb_err *e);

#endif
