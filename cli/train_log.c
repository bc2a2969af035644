/* `cubist train`'s output on world rank 0: the startup lines, the
 * progress line and the --log file (one JSON object per step), fed by the
 * library's records (cb_train_sink, src/train/train.h): the library
 * returns numbers, the command line prints them. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "formats/fileio.h"
#include "train/train.h"

/* The step of a log line ({"step":N,...}), -1 for any other line. */
static long line_step(const char *line) {
    const char *key = "{\"step\":";
    return strncmp(line, key, strlen(key)) ? -1 : strtol(line + strlen(key), NULL, 10);
}

/* --resume: the log keeps its lines up to step `resumed` (the ones after
 * it were logged by a run the checkpoint does not hold), rewritten
 * atomically, then appended to; so the resumed log is the uninterrupted one. */
static int trim_log(const char *path, int resumed, cb_err *e) {
    void *map;
    size_t n, keep = 0;
    if (access(path, F_OK)) return CB_OK;
    int rc = fio_map(path, "check the --log path", &map, &n, e);
    const char *s = map;
    while (!rc && keep < n) {
        const char *nl = memchr(s + keep, '\n', n - keep);
        if (!nl || line_step(s + keep) > resumed) break;
        keep = (size_t)(nl - s) + 1;
    }
    fio_atomic a;
    if (!rc && keep < n && !(rc = fio_atomic_open(&a, path, e))) {
        rc = fio_atomic_write(&a, s, keep, e);
        if (!rc) rc = fio_atomic_commit(&a, e);
    }
    fio_unmap(map, n);
    return rc;
}

int cli_train_log_open(const char *path, int resumed, FILE **f, cb_err *e) {
    *f = NULL;
    if (!path) return CB_OK;
    int rc = resumed >= 0 ? trim_log(path, resumed, e) : CB_OK;
    if (rc) return rc;
    *f = fopen(path, resumed >= 0 ? "a" : "w");
    if (!*f)
        return cb_fail(e, CB_EINPUT, "%s: cannot open the log for writing (%s); check the path",
                       path, strerror(errno));
    return CB_OK;
}

static int log_begin(void *ctx, int resumed, cb_err *e) {
    cli_train_log *l = ctx;
    l->tty = isatty(2);
    return cli_train_log_open(l->o->log, resumed, &l->f, e);
}

static int write_object(cli_train_log *l, const cb_train_record *r, cb_err *e) {
    const cb_step_stats *st = &r->st;
    fprintf(l->f,
            "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens\":%.0f,"
            "\"tokens_per_s\":%.2f,\"step_ms\":%.3f,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,"
            "\"opt_ms\":%.3f,\"mfu\":%.5f,\"peak_rss_bytes\":%ld,\"opt_state_bytes\":%zu,"
            "\"comm_wait_ms\":%.3f,\"cpu_ms\":%.3f%s",
            r->step, st->loss, st->lr, st->grad_norm, r->tokens, r->tokens_per_s, st->step_ms,
            st->fwd_ms, st->bwd_ms, st->opt_ms, r->mfu, r->peak_rss_bytes, r->opt_state_bytes,
            st->comm_wait_ms, st->cpu_ms, r->comm_fields);
    if (!isnan(r->val_loss)) fprintf(l->f, ",\"val_loss\":%.9g", r->val_loss);
    fprintf(l->f, "%s}\n", r->pp_fields);
    if (!fflush(l->f) && !ferror(l->f)) return CB_OK;
    return cb_fail(e, CB_ESYS, "--log %s: writing step %d failed: %s; free space or choose "
                               "another path, then --resume", l->o->log, r->step, strerror(errno));
}

/* On a terminal the line is rewritten in place; else one every 5% of the run. */
static void progress(const cli_train_log *l, const cb_train_record *r) {
    const cb_train_opts *o = l->o;
    double eta = r->elapsed_s / (r->step - r->first_step) * (o->steps - r->step);
    int every = o->steps >= 20 ? o->steps / 20 : 1, val = !isnan(r->val_loss);
    if (!l->tty && r->step % every && r->step != o->steps && !val) return;
    fprintf(stderr, "%sstep %d/%d | loss %.4f", l->tty ? "\r\033[K" : "", r->step, o->steps,
            r->st.loss);
    if (val) fprintf(stderr, " | val %.4f", r->val_loss);
    fprintf(stderr, " | %.0f tok/s | MFU %.1f%% | ETA %.0fs%s", r->tokens_per_s, 100 * r->mfu, eta,
            l->tty ? "" : "\n");
    if (l->tty && (r->step == o->steps || val)) fprintf(stderr, "\n");
}

static int log_step(void *ctx, const cb_train_record *r, cb_err *e) {
    cli_train_log *l = ctx;
    if (r->warning) fprintf(stderr, "cubist: warning: %s\n", r->warning);
    int rc = l->f ? write_object(l, r, e) : CB_OK;
    if (!l->o->quiet) progress(l, r);
    return rc;
}

/* --comm-report's table after the last step. */
static void log_report(void *ctx, const cb_comm_spread *s) {
    (void)ctx;
    cb_comm_spread_print(s, stdout);
}

/* The log's last buffered bytes may fail to land too. */
static int close_log(FILE **f, const char *path, int rc, cb_err *e) {
    if (*f && fclose(*f) && !rc)
        rc = cb_fail(e, CB_ESYS, "--log %s: closing failed: %s; free space or choose another path",
                     path, strerror(errno));
    *f = NULL;
    return rc;
}

static int log_end(void *ctx, int rc, cb_err *e) {
    cli_train_log *l = ctx;
    return close_log(&l->f, l->o->log, rc, e);
}

/* "--recompute block --recompute-method uniform --recompute-layers 2" */
static void describe(const cb_pp_opts *o, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "--recompute %s", o->recompute ? o->recompute : "none");
    if (o->recompute_method && n < (int)cap)
        n += snprintf(buf + n, cap - n, " --recompute-method %s", o->recompute_method);
    if (o->recompute_layers != CB_PP_UNSET && n < (int)cap)
        snprintf(buf + n, cap - n, " --recompute-layers %d", o->recompute_layers);
}

static void list_mb(const double *x, int n) {
    for (int i = 0; i < n; i++) fprintf(stderr, "%s%.1f", i ? " / " : "", x[i] / 1e6);
}

/* What the recompute plans per stage, what none would, and the
 * recompute's share of the step's FLOPs. */
static void act_report(const cb_train_start *s) {
    char how[160];
    double b = 0, z = 0;
    int n = s->pp;
    describe(&s->o->pipe, how, sizeof how);
    for (int i = 0; i < n; i++) b += s->act[i], z += s->act_none[i];
    fprintf(stderr, "cubist: activation memory planned%s: ", n > 1 ? " per stage" : "");
    list_mb(s->act, n);
    fprintf(stderr, " MB with %s", how);
    if (z > b) {
        fprintf(stderr, "; ");
        list_mb(s->act_none, n);
        fprintf(stderr, " MB with none: %.1f MB saved (x%.3f); the recompute's forwards add "
                        "%.1f%% to the step's FLOPs",
                (z - b) / 1e6, b / z, 100 * s->rc_flops_frac);
    } else if (s->rc_flops_frac > 0) {
        fprintf(stderr, " (none plans as much); the recompute's forwards add %.1f%% to the step's "
                        "FLOPs", 100 * s->rc_flops_frac);
    }
    fprintf(stderr, "\n");
}

/* The startup lines: the model and machine, the grid, the activations. */
static void log_start(void *ctx, const cb_train_start *s) {
    const cb_train_opts *o = ((cli_train_log *)ctx)->o, *r = s->o;
    if (s->hosts) cb_grid_print(s->grid, s->hosts, stdout); /* --print-grid, even --quiet */
    cb_model_print_partition(s->model, stdout);              /* --print-partition, likewise */
    fflush(stdout);
    if (o->quiet) return;
    const cb_gpt_config *c = &r->model;
    fprintf(stderr,
            "cubist: GPT %d layers, d_model %d, %d heads, context %d, vocab %d: %zu "
            "parameters here | B=%d T=%d accum %d | %d threads, BLAS %s, %speak %.0f GFLOP/s | %s\n",
            c->n_layer, c->d_model, c->n_head, c->seq_len, c->vocab, s->params, r->B, r->T,
            r->accum, s->threads, s->blas, r->precision && !strcmp(r->precision, "bf16") ? "bf16 " : "",
            s->peak_gflops, s->kernels);
    int bf16 = !strcmp(r->comm_dtype, "bf16");
    const char *tp_wire = bf16 && s->tp > 1 ? " | activation collectives in bf16 (--comm-dtype bf16)" : "";
    if (s->pp > 1)
        fprintf(stderr, "cubist: pipeline of %d stages, %s schedule, %d micro-batches of %d "
                        "sequences, tensor %s x %d, data x %d%s\n",
                s->pp, s->schedule, s->M, r->B, s->layout, s->tp, s->dp, tp_wire);
    else if (s->tp > 1)
        fprintf(stderr, "cubist: tensor parallel %s over %d ranks (layout %s)%s\n", r->tp_mode, s->tp,
                s->layout, tp_wire);
    if (s->dp > 1)
        fprintf(stderr,
                "cubist: data parallel over %d ranks, %d rows each | %d buckets of %g MB | zero %d: "
                "AdamW state %.1f MB per rank | embedding gradient %s%s | comm %s%s\n",
                s->dp, s->rows, s->buckets, r->bucket_mb, r->zero, s->adam_bytes / 1e6, s->embed,
                strcmp(r->embed_grad, "auto") ? "" : " (auto)", r->comm_dtype,
                !bf16       ? ""
                : s->tp > 1 ? " (gradient buckets and tensor-parallel activations; pipeline traffic fp32)"
                : s->pp > 1 ? " (gradient buckets only; pipeline traffic fp32)"
                            : " (gradient buckets only)");
    if (s->act) act_report(s);
}

cb_train_sink cli_train_sink(cli_train_log *l, const cb_train_opts *o) {
    *l = (cli_train_log){.o = o};
    return (cb_train_sink){.ctx = l, .begin = log_begin, .start = log_start, .step = log_step,
                           .report = log_report, .end = log_end};
}

/* ------------------------------------------- the graph models' lines */

static int lines_begin(void *ctx, int resumed, cb_err *e) {
    cli_train_lines *s = ctx;
    return cli_train_log_open(s->o->log, resumed, &s->f, e);
}

static void lines_start(void *ctx, const cb_train_start *st) {
    cb_model_print_partition(st->model, stdout); /* --print-partition, even --quiet */
    fflush(stdout);
    if (!((cli_train_lines *)ctx)->o->quiet && st->note[0]) printf("%s\n", st->note);
}

static void lines_eval(void *ctx, int step, const cb_train_metric *m, int n) {
    if (((cli_train_lines *)ctx)->o->quiet) return;
    printf("eval step %d", step);
    for (int i = 0; i < n; i++) printf(m[i].count ? " %s %.0f" : " %s %.6f", m[i].name, m[i].value);
    printf("\n");
}

static int lines_step(void *ctx, const cb_train_record *r, cb_err *e) {
    cli_train_lines *s = ctx;
    const cb_step_stats *st = &r->st;
    if (!s->o->quiet) printf("step %d loss %.9g grad_norm %.9g\n", r->step, st->loss, st->grad_norm);
    if (!s->f) return CB_OK;
    fprintf(s->f, "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"step_ms\":%.3f,"
                  "\"%s\":%.1f", r->step, st->loss, st->lr, st->grad_norm, st->step_ms, s->rate,
            r->tokens_per_s);
    for (int i = 0; i < r->nmetrics; i++)
        if (!r->metrics[i].count)
            fprintf(s->f, ",\"%s\":%.6f", r->metrics[i].name, r->metrics[i].value);
    /* the planner's counts (tests/test_plan.sh): as the GPT log has them */
    fprintf(s->f, ",\"opt_state_bytes\":%zu%s%s}\n", r->opt_state_bytes, r->comm_fields,
            r->pp_fields);
    if (!fflush(s->f) && !ferror(s->f)) return CB_OK;
    return cb_fail(e, CB_ESYS, "--log %s: writing step %d failed: %s; free space or choose "
                               "another path, then --resume", s->o->log, r->step, strerror(errno));
}

static int lines_end(void *ctx, int rc, cb_err *e) {
    cli_train_lines *s = ctx;
    return close_log(&s->f, s->o->log, rc, e);
}

cb_train_sink cli_train_lines_sink(cli_train_lines *l, const cb_train_opts *o, const char *rate) {
    *l = (cli_train_lines){.o = o, .rate = rate};
    return (cb_train_sink){.ctx = l, .begin = lines_begin, .start = lines_start,
                           .step = lines_step, .eval = lines_eval, .end = lines_end};
}
