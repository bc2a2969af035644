/* The flags every trainer of `cubist train` shares (GPT, NCF...): the
 * run's checkpoints and signals, the process grid, the pipeline and data
 * parallelism, the precision; each family's own flags come first. */
#include <stdio.h>

#include "args.h"
#include "cli.h"
#include "comm/comm.h"

int cli_train_run_flags(cb_train_opts *o, const char **precision, cli_flag *f) {
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
        {"precision", ARG_STR, precision,
         "fp32, or bf16: products in bf16 through oneDNN, fp32 weights, state and sums"},
        {"dp", ARG_INT, &o->dp, "data-parallel ranks (default: processes / (pp*tp))"},
        {"pp", ARG_INT, &o->pp, "pipeline stages (1)"},
        {"tp", ARG_INT, &o->tp, "tensor-parallel ranks (1)"},
        {"tp-mode", ARG_STR, &o->tp_mode, "tensor layout 1d, 2d (tp square) or 3d (tp cube)"},
        {"schedule", ARG_STR, &o->pipe.schedule, "pipeline schedule: gpipe, 1f1b, interleaved"},
        {"micro-batches", ARG_INT, &o->pipe.micro_batches,
         "micro-batches per step (default: --grad-accum; without --pp the same as it)"},
        {"virtual-stages", ARG_INT, &o->pipe.virtual_stages, "interleaved: chunks per rank (2)"},
        {"partition", ARG_STR, &o->pipe.partition, "auto, or module boundaries such as 0,3,7,12"},
        {"partition-memory-weight", ARG_DOUBLE, &o->pipe.memory_weight,
         "weight of memory against compute in the partition cost (0.8; 0.2 for speed)"},
        {"no-profile", ARG_BOOL, &o->pipe.no_profile, "partition from FLOP counts, no profiling"},
        {"print-partition", ARG_BOOL, &o->pipe.print_partition, "print the pipeline stages"},
        {"recompute", ARG_STR, &o->pipe.recompute,
         "activation checkpointing: none, block or selective"},
        {"recompute-layers", ARG_INT, &o->pipe.recompute_layers,
         "block: the first N blocks of each stage (0: all); uniform: groups of N (1)"},
        {"recompute-method", ARG_STR, &o->pipe.recompute_method,
         "with --recompute block: block (first N blocks) or uniform (every N-th input)"},
        {"tp3d-save", ARG_STR, &o->tp3d_save,
         "3d: keep gathered inputs for backward (gathered) or re-gather (shard)"},
        {"print-grid", ARG_BOOL, &o->print_grid, "print every rank's grid placement"},
        {"comm-report", ARG_BOOL, &o->comm_report, "per-group communication table at the end"},
        {"bucket-mb", ARG_DOUBLE, &o->bucket_mb, "gradient fusion bucket size in MB (25)"},
        {"zero", ARG_INT, &o->zero, "1: shard AdamW state over data-parallel ranks (ZeRO-1)"},
        {"max-memory", ARG_STR, &o->max_memory,
         "bytes a rank may plan (K, M, G: powers of 1024); over it the build ends with one "
         "line and status 4"},
        {"embed-grad", ARG_STR, &o->embed_grad,
         "auto (default), dense (all-reduce), split (wte's head part early, lookup rows "
         "apart) or sparse (all-gather rows, as TF+Horovod)"},
    };
    int n = (int)(sizeof rows / sizeof *rows);
    for (int i = 0; i < n; i++) f[i] = rows[i];
    return n;
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
