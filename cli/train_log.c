/* `cubist train`'s output on world rank 0: the progress line and the
 * --log file (one JSON object per step), fed by the library's step
 * records (cb_train_sink, src/train/train.h): the library returns numbers,
 * the command line prints them. */
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

static int log_begin(void *ctx, int resumed, cb_err *e) {
    cli_train_log *l = ctx;
    l->f = NULL;
    l->tty = isatty(2);
    if (!l->o->log) return CB_OK;
    int rc = resumed >= 0 ? trim_log(l->o->log, resumed, e) : CB_OK;
    if (rc) return rc;
    l->f = fopen(l->o->log, resumed >= 0 ? "a" : "w");
    if (!l->f)
        return cb_fail(e, CB_EINPUT, "%s: cannot open the log for writing (%s); check the path",
                       l->o->log, strerror(errno));
    return CB_OK;
}

static int write_object(cli_train_log *l, const cb_train_record *r, cb_err *e) {
    const cb_step_stats *st = &r->st;
    fprintf(l->f,
            "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens\":%.0f,"
            "\"tokens_per_s\":%.2f,\"step_ms\":%.3f,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,"
            "\"opt_ms\":%.3f,\"mfu\":%.5f,\"peak_rss_bytes\":%ld,\"opt_state_bytes\":%zu,"
            "\"comm_wait_ms\":%.3f%s",
            r->step, st->loss, st->lr, st->grad_norm, r->tokens, r->tokens_per_s, st->step_ms,
            st->fwd_ms, st->bwd_ms, st->opt_ms, r->mfu, r->peak_rss_bytes, r->opt_state_bytes,
            st->comm_wait_ms, r->comm_fields);
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
    int rc = l->f ? write_object(l, r, e) : CB_OK;
    if (!l->o->quiet) progress(l, r);
    return rc;
}

/* The log's last buffered bytes may fail to land too. */
static int log_end(void *ctx, int rc, cb_err *e) {
    cli_train_log *l = ctx;
    if (l->f && fclose(l->f) && !rc)
        rc = cb_fail(e, CB_ESYS, "--log %s: closing failed: %s; free space or choose another path",
                     l->o->log, strerror(errno));
    l->f = NULL;
    return rc;
}

cb_train_sink cli_train_sink(cli_train_log *l, const cb_train_opts *o) {
    *l = (cli_train_log){.o = o};
    return (cb_train_sink){.ctx = l, .begin = log_begin, .step = log_step, .end = log_end};
}
