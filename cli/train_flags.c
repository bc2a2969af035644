/* The flags every trainer of `cubist train` shares (GPT, NCF...): the
 * run's checkpoints and signals, threads and reports; each family's own
 * flags come first. The distribution flags (layout, pipeline, recompute,
 * ZeRO, --max-memory, --precision) are read by the reader every program
 * uses (cb_dist_take, api/flags.h): cli_train_parse. */
#include <stdio.h>

#include "args.h"
#include "cli.h"
#include "api/flags.h"
#include "comm/comm.h"
#include "train/check.h"

/* The optimizer's and the run's files' flags, their defaults in the help
 * from o (each family sets its own before the table is built). */
int cli_train_opt_flags(cb_train_opts *o, cli_flag *f) {
    static char h[8][96];
    const cb_adamw_config *a = &o->opt;
    snprintf(h[0], sizeof h[0], "optimizer steps (%d)", o->steps);
    snprintf(h[1], sizeof h[1], "peak learning rate (%g)", a->lr);
    snprintf(h[2], sizeof h[2], "final learning rate of the cosine (%g)", a->min_lr);
    snprintf(h[3], sizeof h[3], "AdamW weight decay, never of biases and norms (%g%s)",
             a->weight_decay, a->decay_embeddings ? "; embeddings too" : "");
    snprintf(h[4], sizeof h[4], "AdamW beta1 (%g)", a->beta1);
    snprintf(h[5], sizeof h[5], "AdamW beta2 (%g)", a->beta2);
    snprintf(h[6], sizeof h[6], "AdamW epsilon (%g)", a->eps);
    snprintf(h[7], sizeof h[7], "global gradient-norm clip, 0 = off (%g)", a->clip);
    const cli_flag rows[] = {
        {"steps", ARG_INT, &o->steps, h[0]},
        {"lr", ARG_FLOAT, &o->opt.lr, h[1]},
        {"min-lr", ARG_FLOAT, &o->opt.min_lr, h[2]},
        {"warmup", ARG_INT, &o->opt.warmup, "linear warm-up steps (0)"},
        {"weight-decay", ARG_FLOAT, &o->opt.weight_decay, h[3]},
        {"beta1", ARG_FLOAT, &o->opt.beta1, h[4]},
        {"beta2", ARG_FLOAT, &o->opt.beta2, h[5]},
        {"eps", ARG_FLOAT, &o->opt.eps, h[6]},
        {"clip", ARG_FLOAT, &o->opt.clip, h[7]},
        {"init", ARG_STR, &o->init, "start from this weights file (safetensors)"},
        {"save", ARG_STR, &o->save, "checkpoint: FILE (and FILE.state) at the end, or DIR/"},
        {"log", ARG_STR, &o->log, "JSONL log, one object per step; --resume keeps its lines up "
                                  "to the resumed step and appends"},
        {"dump-grads", ARG_STR, &o->dump_grads, "write step 1's gradients (safetensors)"},
    };
    int n = (int)(sizeof rows / sizeof *rows);
    for (int i = 0; i < n; i++) f[i] = rows[i];
    return n;
}

int cli_train_run_flags(cb_train_opts *o, cli_flag *f) {
    const cli_flag rows[] = {
        {"save-every", ARG_INT, &o->save_every, "also save every N steps"},
        {"save-dtype", ARG_STR, &o->save_dtype, "weights file of --save in fp32, bf16 or f16 (fp32)"},
        {"resume", ARG_STR, &o->resume, "continue from this checkpoint"},
        {"exit-after", ARG_INT, &o->exit_after, "stop and save after N steps of this run"},
        {"keep-last", ARG_INT, &o->keep_last, "with --save DIR/: keep the newest N (0: all)"},
        {"exit-signal", ARG_STR, &o->exit_signal,
         "signal that also stops, saves and exits 75, like SIGTERM (USR1)"},
        {"stall-timeout", ARG_DOUBLE, &o->stall_timeout,
         "seconds a rank may wait in communication before the job ends (status 6); 0 = "
         "never (default: max(300, 20 x the slowest step))"},
        {"peak-gflops", ARG_DOUBLE, &o->peak_gflops, "peak GFLOP/s for MFU (default: measured)"},
        {"threads", ARG_INT, &o->threads, "threads (default: OMP_NUM_THREADS or all cores)"},
        {"quiet", ARG_BOOL, &o->quiet, "no progress output"},
        {"tp3d-save", ARG_STR, &o->tp3d_save,
         "3d: keep gathered inputs for backward (gathered) or re-gather (shard)"},
        {"print-grid", ARG_BOOL, &o->print_grid, "print every rank's grid placement"},
        {"comm-report", ARG_BOOL, &o->comm_report, "per-group communication table at the end"},
        {"bucket-mb", ARG_DOUBLE, &o->bucket_mb, "gradient fusion bucket size in MB (25)"},
    };
    int n = (int)(sizeof rows / sizeof *rows);
    for (int i = 0; i < n; i++) f[i] = rows[i];
    return n + cli_train_auto_flags(f + n);
}

/* The run's failure, agreed over the ranks, printed once with its status
 * (2 bad input, 4 out of memory, 75 stopped by a signal, else 1). */
void cli_train_exit(const cb_err *e) {
    char msg[sizeof e->msg + 8];
    snprintf(msg, sizeof msg, "%s%s", e->code == CB_ESTOPPED ? "" : "error: ", e->msg);
    cb_comm_exit(e->code == CB_EINPUT ? 2 : e->code == CB_ESTOPPED ? CB_ESTOPPED
                                        : e->code == CB_ENOMEM  ? 4
                                                               : 1, msg);
}

/* The distribution flags read as cb_dist_init reads them, into o. */
static int dist_flags(const cb_dist_args *a, cb_train_opts *o, cb_err *e) {
    cb_dist_opts d;
    int rc = cb_dist_read(a, &d, e);
    o->dp = d.dp, o->pp = d.pp, o->tp = d.tp, o->zero = d.zero, o->tp_mode = d.tp_mode;
    o->embed_grad = d.embed_grad, o->max_memory = d.max_memory, o->precision = d.precision;
    o->comm_dtype = d.comm_dtype;
    o->pipe = d.pipe;
    return rc;
}

int cli_train_parse(int argc, char **argv, const cli_flag *flags, int n, const char *usage,
                    const char *epilog, cb_train_opts *o, int *help, cb_err *e) {
    cb_dist_args da;
    int rc = cb_dist_take(&argc, argv, &da, e);
    if (!rc) rc = cli_parse("train", argc, argv, flags, n, help, e);
    if (*help && !rc) {
        cli_usage(stdout, "train", usage, flags, n, NULL);
        cb_dist_usage(stdout);
        printf("\n%s", epilog);
        return CB_OK;
    }
    return rc ? rc : dist_flags(&da, o, e);
}

int cli_train_family_run(int argc, char **argv, cb_train_opts *o, int batch, const char *rate,
                         int rc, cb_err *e) {
    int M = o->pipe.micro_batches != CB_PP_UNSET ? o->pipe.micro_batches : 1;
    if (!rc && (batch < 1 || (M >= 1 && batch % M)))
        rc = cb_fail(e, CB_EINPUT, "--batch %d: give a positive multiple of the %d micro-batches",
                     batch, M);
    o->B = batch / (M >= 1 ? M : 1);
    if (!rc) rc = cb_train_check_flags(o, e);
    if (!rc) rc = cli_train_family_auto(o, e);
    cb_precision prec;
    if (!rc) rc = cb_precision_parse(o->precision, &prec, e);
    if (!rc) rc = cb_kernels_select(prec, e);
    if (rc) return cli_fail(e);
    if (cb_comm_init(&argc, &argv, e)) return cli_fail(e);
    cli_train_lines lines;
    cb_train_sink sink = cli_train_lines_sink(&lines, o, rate);
    if (cb_train_run(o, &sink, e)) cli_train_exit(e);
    cb_comm_finalize();
    return 0;
}
