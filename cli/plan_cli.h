/* `cubist plan`, split by job: the command and the layout list
 * (cmd_plan.c), calibration (plan_calib.c), validation (plan_validate.c),
 * the seeds' results (plan_reproduce.c). */
#ifndef CB_CLI_PLAN_H
#define CB_CLI_PLAN_H

#include "plan/plan.h"

typedef struct plan_opts {
    const char *model, *cluster, *out, *plot, *reproduce, *init;
    int dp, pp, tp;                       /* 0: any */
    const char *tp_mode, *schedule, *save; /* NULL: any; save: 3-D gathered or shard */
    const char *comm_dtype;               /* fp32 (default) or bf16 */
    const char *precision;                /* fp32 (default) or bf16: the products' arithmetic */
    const char *embed_grad;                /* --embed-grad; embed: its cb_dp_embed */
    int embed;
    int layers, d_model, heads, vocab, batch, seq_len, devices, micro_batches, top;
    int dec_layers, ffn, pre_ln, no_scale, types, users, items, factors; /* nmt, bert, ncf */
    double dropout, attn_dropout;                              /* bert */
    int max_predictions; /* bert: the decoder's rows per sequence, 0: round(0.15 seq_len) */
    const char *mlp;                                           /* ncf */
    double max_memory_gb;
    int json, calibrate, calibrate_comm, validate, quick, threads, repeat, profile;
    int scaling, strong_batch; /* --scaling: the strong-scaling batch in all (0: --batch) */
} plan_opts;

/* A cluster preset by name (clusters/NAME.json, found next to the source
 * tree the binary was built in or under the current directory) or a path. */
int plan_find_cluster(const char *name, char *path, size_t cap, cb_err *e);
/* The cluster this machine calibrated (the cache file), else a quick
 * calibration now. */
int plan_local_cluster(int threads, cb_plan_cluster *c, cb_err *e);
/* $XDG_CACHE_HOME/cubist/cluster-T<threads>.json */
int plan_cache_path(int threads, char *buf, size_t cap);

/* The model of the flags: gpt (sizes, --init), bert, roberta, nmt, ncf. */
int plan_model_of(const plan_opts *o, cb_plan_model *m, cb_err *e);
/* The model, cluster and job of the flags. */
int plan_load_job(const plan_opts *o, cb_plan_model *m, cb_plan_cluster *c, cb_plan_job *j,
                  cb_err *e);
/* --plot: best step time and its memory against devices, per tensor mode. */
int plan_plot(const plan_opts *o, const cb_plan_job *j, cb_err *e);
int plan_calibrate(const plan_opts *o, cb_err *e);
/* The child under mpirun: prints "plan-comm OP RANKS ALPHA BETA" lines. */
int plan_calibrate_comm(int quick, cb_err *e);
/* Calibrates in this process (compute; with bf16 also the bf16 rates)
 * and, with comm, through an mpirun child of 2 ranks, the collectives;
 * fake rates from CUBIST_PLAN_FAKE (tests). */
int plan_measure(int threads, int quick, int comm, int bf16, cb_plan_cluster *c, cb_err *e);
/* Only one thread a rank's figures with every device of the node at once
 * (cb_plan_calibrate_shared) into c, its other figures 0 (the validation's
 * calibrations by placement). */
int plan_measure_shared(int quick, cb_plan_cluster *c, cb_err *e);
/* After run i of every thread count (now[t]: those runs' figures): the
 * validation runs round i of its cases there, so that the calibrations
 * and the measurements share the same minutes. */
typedef int (*plan_round_fn)(void *ctx, int i, const cb_plan_cluster *const now[2], cb_err *e);
/* plan_measure `runs` times (at most CB_PLAN_MAXRUNS) for each of n (1 or
 * 2) thread counts, round-robin over the counts so that their runs share
 * the same minutes (this VM's speed moves between minutes), calling round
 * (when not NULL) after each, and the best of each figure into c[t]
 * (cb_plan_cluster_best), spread[t] its spread. With comm, the
 * collectives too, in every run of c[0]'s count. */
int plan_measure_best(int n, const int *threads, int quick, int comm, int bf16, int runs,
                      plan_round_fn round, void *ctx, cb_plan_cluster *c,
                      double (*spread)[CB_PLAN_NSPREAD], cb_err *e);
/* One line: the calibration's headline figures and, over several runs,
 * their spread. */
void plan_print_spread(const cb_plan_cluster *c, int runs, const double *spread);
int plan_validate(const plan_opts *o, cb_err *e);
int plan_reproduce(const plan_opts *o, cb_err *e);
/* --scaling: predicted weak and strong data-parallel scaling per
 * --embed-grad path (plan_scaling.c) */
int plan_scaling(const plan_opts *o, cb_err *e);
/* Seconds of one step of `batch` sequences on dp ranks (data parallelism
 * alone, one micro-batch, embedding path `embed`), p filled; < 0 when the
 * layout cannot run. */
double plan_dp_step(const cb_plan_job *j, int dp, int batch, int embed, cb_plan_pred *p);
/* The prediction table of one layout, one line (as `cubist plan` lists). */
void plan_print_header(void);
void plan_print_row(int rank, const cb_plan_choice *c);
/* Runs `exe args` (through sh), keeps stdout lines that start with
 * `prefix` into buf; returns the exit status. */
int plan_run(const char *cmd, const char *prefix, char *buf, size_t cap);
const char *plan_exe(void);
#endif
