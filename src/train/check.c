#include "train/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/fileio.h"
#include "dp/dp.h"
#include "graph/graph.h"
#include "train/ckpt.h"
#include "train/stop.h"

/* One lower bound: --flag >= min, or > min when strict. */
typedef struct bound {
    const char *flag;
    double v, min;
    int strict;
    const char *meaning;
} bound;

static int check_bounds(const bound *b, int n, cb_err *e) {
    for (int i = 0; i < n; i++)
        if (b[i].strict ? !(b[i].v > b[i].min) : !(b[i].v >= b[i].min))
            return cb_fail(e, CB_EINPUT, "%s %g is out of range; pass %s %s %g (%s)", b[i].flag,
                           b[i].v, b[i].flag, b[i].strict ? ">" : ">=", b[i].min, b[i].meaning);
    return CB_OK;
}

static int check_ranges(const cb_train_opts *o, cb_err *e) {
    const cb_gpt_config *c = &o->model;
    const cb_adamw_config *a = &o->opt;
    const bound b[] = {
        {"--layers", c->n_layer, 0, 0, "transformer blocks"},
        {"--d-model", c->d_model, 0, 0, "channels"},
        {"--heads", c->n_head, 0, 0, "attention heads"},
        {"--seq-len", c->seq_len, 0, 0, "tokens per sequence"},
        {"--vocab", c->vocab, 0, 0, "vocabulary size"},
        {"--batch", o->B, 1, 0, "sequences per micro-batch"},
        {"--grad-accum", o->accum, 1, 0, "micro-batches per step"},
        {"--steps", o->steps, 0, 0, "optimizer steps; 0 only initialises and saves"},
        {"--lr", a->lr, 0, 0, "peak learning rate"},
        {"--min-lr", a->min_lr, 0, 0, "final learning rate"},
        {"--warmup", a->warmup, 0, 0, "warm-up steps"},
        {"--weight-decay", a->weight_decay, 0, 0, "0 = no decay"},
        {"--beta1", a->beta1, 0, 0, "AdamW first-moment decay, below 1"},
        {"--beta2", a->beta2, 0, 0, "AdamW second-moment decay, below 1"},
        {"--eps", a->eps, 0, 1, "AdamW epsilon"},
        {"--clip", a->clip, 0, 0, "0 = no clipping"},
        {"--save-every", o->save_every, 0, 0, "0 = only at the end"},
        {"--exit-after", o->exit_after, 0, 0, "0 = run to --steps"},
        {"--eval-every", o->eval_every, 0, 0, "0 = no validation"},
        {"--eval-batches", o->eval_batches, 1, 0, "batches per validation"},
        {"--peak-gflops", o->peak_gflops, 0, 0, "0 = the measured sgemm peak"},
        {"--threads", o->threads, 0, 0, "0 = OMP_NUM_THREADS or all cores"},
        {"--bucket-mb", o->bucket_mb, 0, 1, "megabytes per fusion bucket"},
        {"--keep-last", o->keep_last, 0, 0, "0 = keep every checkpoint"},
        {"--stall-timeout", o->stall_timeout < 0 ? 0 : o->stall_timeout, 0, 0,
         "seconds; 0 = no watchdog"},
    };
    int rc = check_bounds(b, (int)(sizeof b / sizeof *b), e);
    if (!rc) rc = cb_dist_check_sizes(o->dp, o->pp, o->tp, e);
    if (!rc && (a->beta1 >= 1 || a->beta2 >= 1))
        rc = cb_fail(e, CB_EINPUT, "--beta1 %g / --beta2 %g must be below 1; use e.g. 0.9 and 0.95",
                     a->beta1, a->beta2);
    return rc;
}

/* Flags that only mean something together. */
static int check_combinations(const cb_train_opts *o, cb_err *e) {
    int own = o->family && o->family->own_eval; /* evaluates on its own data */
    if (!own && o->eval_every > 0 && !o->val_data)
        return cb_fail(e, CB_EINPUT, "--eval-every %d needs --val-data FILE (a validation token "
                                     "file, e.g. from `cubist prepare --val-output`)",
                       o->eval_every);
    if (!own && o->val_data && o->eval_every == 0)
        return cb_fail(e, CB_EINPUT, "--val-data %s is only read with --eval-every N; add "
                                     "--eval-every N (validation every N steps) or drop --val-data",
                       o->val_data);
    if (o->save_every > 0 && !o->save)
        return cb_fail(e, CB_EINPUT, "--save-every %d needs --save FILE (where to write the "
                                     "checkpoints)",
                       o->save_every);
    if (o->keep_last > 0 && (!o->save || !cb_ckpt_is_dir(o->save)))
        return cb_fail(e, CB_EINPUT, "--keep-last %d needs --save DIR/ (a directory: one "
                                     "checkpoint per save); --save FILE keeps one",
                       o->keep_last);
    if (o->init && o->resume)
        return cb_fail(e, CB_EINPUT, "--init %s and --resume %s both give the weights; --resume "
                                     "continues a run, --init starts one: drop one of them",
                       o->init, o->resume);
    if (!o->data && o->steps > 0)
        return cb_fail(e, CB_EINPUT, "no training data; pass --data FILE (make one with `cubist "
                                     "prepare`)");
    return CB_OK;
}

static int check_words(const cb_train_opts *o, cb_err *e) {
    double bytes;
    if (cb_dist_check_zero(o->zero, e) || cb_dist_parse_size(o->max_memory, &bytes, e))
        return CB_EINPUT;
    int mode, dtype, signo;
    if (cb_st_dtype_parse(o->save_dtype, &dtype, e)) return CB_EINPUT;
    int rc = cb_dp_embed_parse(o->embed_grad, &mode, e);
    if (!rc) rc = cb_dp_comm_dtype_parse(o->comm_dtype, &mode, e);
    return rc ? rc : cb_stop_parse(o->exit_signal, &signo, e);
}

int cb_train_check_flags(const cb_train_opts *o, cb_err *e) {
    int rc = check_ranges(o, e);
    if (!rc) rc = check_combinations(o, e);
    if (!rc) rc = check_words(o, e);
    return rc;
}

/* --save DIR/ must be creatable or writable; --save FILE as any output. */
static int check_save(const char *path, cb_err *e) {
    if (!cb_ckpt_is_dir(path)) return fio_check_writable("--save", path, e);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s%sstep-00000000.safetensors", path,
             path[strlen(path) - 1] == '/' ? "" : "/");
    struct stat st;
    if (stat(path, &st) == 0) return fio_check_writable("--save", probe, e);
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    snprintf(probe, sizeof probe, "%.*s", (int)n, path);
    return fio_check_writable("--save", probe, e); /* the directory to be created */
}

int cb_train_check_paths(const cb_train_opts *o, int world_rank, cb_err *e) {
    int rc = o->save ? check_save(o->save, e) : CB_OK;
    if (!rc && o->dump_grads) rc = fio_check_writable("--dump-grads", o->dump_grads, e);
    if (!rc && o->log && world_rank == 0) rc = fio_check_writable("--log", o->log, e);
    return rc;
}

int cb_train_check_val(const cb_train_opts *o, const cb_tokens *val, cb_err *e) {
    size_t need = (size_t)o->B * o->T + 1;
    if (val->n >= need) return CB_OK;
    return cb_fail(e, CB_EINPUT,
                   "--val-data %s: %zu tokens, but one validation batch needs B*T+1 = %zu; use a "
                   "longer validation file (cubist prepare --val-fraction) or lower --batch/--seq-len",
                   o->val_data, val->n, need);
}

/* ------------------------------------------------------------ pipeline flags */

int cb_pp_opts_resolve(cb_pp_opts *o, int pp, int *accum, cb_err *e) {
    cb_dist d = {0}; /* the rules' verdict only; the run fills its own (run.c) */
    int rc = cb_dist_pipeline(&d, pp, o, e), mb = o->micro_batches;
    if (rc) return rc;
    if (mb != CB_PP_UNSET && *accum > 1 && *accum != mb)
        return cb_fail(e, CB_EINPUT,
                       "--grad-accum %d and --micro-batches %d disagree: the micro-batches are "
                       "the accumulation steps; give one of them",
                       *accum, mb);
    if (mb != CB_PP_UNSET) *accum = mb;
    return CB_OK;
}
