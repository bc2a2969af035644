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
#include "layout/layout.h"
#include "graph/graph.h"

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
    const char *comm_dtype; /* "fp32" or "bf16": the data-parallel gradient reduction */
    const char *tp3d_save;  /* "gathered" or "shard" */
    const char *save_dtype; /* "fp32", "bf16" or "f16": the weights file of --save */
    const char *max_memory; /* --max-memory SIZE (NULL: no limit; api/flags.h) */
    const char *precision;  /* --precision fp32|bf16 (cubist train selects the kernels) */
    cb_pp_opts pipe;        /* --pp > 1: schedule, micro-batches, partition, recompute */
    /* The model family (NULL: the GPT) and its own options (task_*.c). */
    const struct cb_train_family *family;
    const void *family_opts;
    /* --layout auto of a family: called on every rank after the family's
     * prepare (its sizes resolved), before the grid; sets dp, pp, tp. */
    int (*layout_auto)(struct cb_train_opts *o, cb_err *e);
} cb_train_opts;

void cb_train_defaults(cb_train_opts *o);

/* Figures of one step, for logs and the benchmark. */
typedef struct cb_step_stats {
    float loss, lr, grad_norm;
    double step_ms, fwd_ms, bwd_ms, opt_ms;
    double comm_wait_ms; /* waiting for gradient buckets after backward */
    /* this process's CPU time over the step (all its threads; the batch,
     * the step, its collectives): the load's time slices are not in it */
    double cpu_ms;
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
    const struct cb_train_metric *metrics; /* this step's evaluation, nmetrics of them */
    int nmetrics;
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
    const char *note;        /* the task's own startup text ("" if none) */
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
    /* optional: every evaluation, before its step's record (step 0: the
     * evaluation of a run of --steps 0) */
    void (*eval)(void *ctx, int step, const struct cb_train_metric *m, int n);
    int (*end)(void *ctx, int rc, cb_err *e);
} cb_train_sink;

/* A named figure of an evaluation (val_loss; val_hr10...). */
typedef struct cb_train_metric {
    const char *name;
    double value;
    int count; /* a count (eval_users): on the eval line, not in the log */
} cb_train_metric;

/* A model family as the one training loop (cb_train_run) sees it. The loop
 * owns the grid, the engine, the step, clipping and AdamW, the log, the
 * checkpoints (--save DIR/ --keep-last --resume), signals and the stall
 * watchdog; a task owns its model's layers, its data and its evaluation.
 * Batches are a function of what a checkpoint restores (the step, and ld
 * when the task reads a token stream), so a resumed run continues bit for
 * bit. docs/engine.md, "Training your own model family". */
typedef struct cb_train_task {
    void *ctx;
    cb_loader *ld;          /* the data position a checkpoint keeps; zeros if none */
    int row_ids, row_targets; /* ints per row of a micro-batch (ids, targets) */
    int row_tokens;         /* tokens a row counts for (tokens/s, MFU) */
    double flops_per_token; /* of a training step, for MFU */
    int modules;            /* pipeline units: --pp x --virtual-stages at most this (0: the
                               engine's partition decides) */
    int block_units;        /* partition whole declared blocks (cb_dist.block_units) */
    int profile;            /* the automatic partition may time the modules (else FLOP
                               counts, as for a user's program) */
    const char *modules_what; /* how the user changes it, e.g. "--layers + 2" */
    /* The layout's constraints for rows per data-parallel rank. */
    int (*check)(void *ctx, const cb_layout *L, int rows, cb_err *e);
    void (*declare)(void *ctx, cb_model *m);
    /* Step step's M micro-batches, rows [r0, r0 + rows) of each:
     * ids M x rows x row_ids, targets M x rows x row_targets. A failure
     * (e.g. memory for a new epoch's order) in e, its code returned: the
     * trainer agrees on it over the world and stops. */
    int (*batch)(void *ctx, int step, int M, int r0, int rows, int *ids, int *targets,
                 cb_err *e);
    /* Evaluation (collective; ids, targets: the batch buffers as scratch):
     * up to cap metrics into out, their count; < 0 a failure in e. */
    int (*eval)(void *ctx, cb_model *m, int r0, int rows, int *ids, int *targets,
                cb_train_metric *out, int cap, cb_err *e);
    /* The model's config as (key, value) pairs for every file's metadata:
     * their count; text holds the values. */
    int (*meta)(void *ctx, const char **kv, char (*text)[24], int cap);
    /* optional: startup text once the model is built (world rank 0 prints it) */
    void (*note)(void *ctx, const cb_model *m, char *buf, size_t cap);
    /* optional: after the run and its save (BERT's --fill) */
    int (*finish)(void *ctx, cb_model *m, int *ids, cb_err *e);
    void (*close)(void *ctx);
} cb_train_task;

/* A model family: prepare checks its flags and resolves its config before
 * the grid (GPT: sizes from the checkpoint); open makes the task on every
 * rank. own_eval: it evaluates on its own data (no --val-data), at the
 * last step when --eval-every is 0. */
typedef struct cb_train_family {
    const char *name;
    int own_eval;
    int (*prepare)(cb_train_opts *o, cb_err *e);
    int (*open)(cb_train_task *t, const cb_train_opts *o, cb_err *e);
} cb_train_family;
extern const cb_train_family cb_train_gpt, cb_train_ncf, cb_train_bert, cb_train_nmt;

/* --model ncf's options besides cb_train_opts (task_ncf.c); o->B is the
 * step's rows over its micro-batches. */
typedef struct cb_ncf_task_opts {
    cb_ncf_config c; /* mlp from --mlp, factors; users and items from the data */
    int negatives, eval_users, eval_neg;
    const char *dump_batches;
} cb_ncf_task_opts;

/* --model bert|roberta's options (task_bert.c); V and tokenizer are
 * filled by its prepare from the token file. */
typedef struct cb_bert_task_opts {
    int roberta, layers, d_model, heads, seq_len, text_vocab, special_base, fill;
    float mask_prob, dropout, attn_dropout;
    const char *bpe_dir, *dump_batches;
    FILE *fill_out; /* --fill's guesses are written here */
    int V, tokenizer;
    int max_predictions; /* --max-predictions, 0: its default (cb_bert_task_predictions) */
} cb_bert_task_opts;
/* masked positions per sequence at most: --max-predictions, else
 * max(1, round(seq_len x mask_prob)) (a whole sequence's share) */
int cb_bert_task_predictions(const cb_bert_task_opts *o);

/* --model nmt's options (task_nmt.c); vocab, pad and T are filled by its
 * prepare from the pair files. */
typedef struct cb_nmt_task_opts {
    cb_nmt_config c;
    int seq_len;          /* T: positions a side (0: the files' longest + 1) */
    int max_tokens;       /* padded tokens a step (0: rows x T) */
    const char *dump_batches;
    int bleu_pairs;       /* val_bleu: greedy translations of the first n held-out pairs (0 off) */
} cb_nmt_task_opts;
/* A checkpoint of `cubist train --model nmt`: its config and positions T
 * from the metadata (model=nmt and the keys task_nmt.c writes); another
 * file, or one without them: CB_EINPUT naming it. */
int cb_nmt_config_from_file(const char *path, cb_nmt_config *c, int *T, cb_err *e);

/* The GPT of cubist train (task_gpt.c): its token data and validation
 * opened, its loader at step 0. Collective only in its failures' agreement
 * (the caller agrees). */
int cb_train_task_gpt(cb_train_task *t, const cb_train_opts *o, cb_err *e);

/* `cubist train` end to end; the records to sink. */
int cb_train_run(const cb_train_opts *o, const cb_train_sink *sink, cb_err *e);
#endif
