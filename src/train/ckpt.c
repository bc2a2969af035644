/* The checkpoint commit protocol of ckpt.h. */
#include "train/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/fileio.h"

#define CKPT_PATH 4096

int cb_ckpt_is_dir(const char *path) {
    struct stat st;
    size_t n = strlen(path);
    return (n && path[n - 1] == '/') || (stat(path, &st) == 0 && S_ISDIR(st.st_mode));
}

/* DIR/step-00000010.safetensors (no doubled slash). */
static void step_path(char *out, size_t cap, const char *dir, int step) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    snprintf(out, cap, "%.*s/step-%08d.safetensors", (int)n, dir, step);
}

/* The ckpt_id a file carries, or "" when it is missing or unreadable. */
static void id_of(const char *path, char *id, size_t cap) {
    cb_st_file f;
    cb_err e;
    id[0] = '\0';
    if (access(path, F_OK) || cb_st_open(path, &f, &e)) return;
    const char *v = cb_st_meta(&f, "ckpt_id");
    if (v) snprintf(id, cap, "%s", v);
    cb_st_close(&f);
}

static int same(const char *a, const char *b) { return a[0] && !strcmp(a, b); }

static int move(const char *from, const char *to, cb_err *e) {
    int err = rename(from, to) ? errno : fio_sync_dir(to);
    if (err)
        return cb_fail(e, CB_ESYS, "committing checkpoint %s: renaming %s failed: %s; check the "
                                   "file system", to, from, strerror(err));
    return CB_OK;
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* One-file checkpoints: each file is atomic, W.next complete once it exists. */
static int settle_single(const char *w, cb_err *e) {
    char wn[CKPT_PATH + 16];
    snprintf(wn, sizeof wn, "%s.next", w);
    if (exists(wn)) return move(wn, w, e);
    if (exists(w)) return CB_OK;
    return cb_fail(e, CB_EINPUT, "%s: cannot open: %s; check the path (a checkpoint file, or the "
                                 "--save DIR/ of a run)", w, strerror(ENOENT));
}

/* Leaves a complete pair at W, W.state if one of the three exists (ckpt.h);
 * CB_EINPUT when none does. */
static int settle(const char *w, int single, cb_err *e) {
    if (single) return settle_single(w, e);
    char wn[CKPT_PATH + 16], sn[CKPT_PATH + 16], s[CKPT_PATH + 16];
    char iw[32], is[32], iwn[32], isn[32];
    snprintf(wn, sizeof wn, "%s.next", w);
    snprintf(sn, sizeof sn, "%s.next.state", w);
    snprintf(s, sizeof s, "%s.state", w);
    id_of(w, iw, sizeof iw), id_of(s, is, sizeof is);
    id_of(wn, iwn, sizeof iwn), id_of(sn, isn, sizeof isn);
    int rc = CB_OK;
    if (same(iwn, isn)) {
        rc = move(wn, w, e);
        if (!rc) rc = move(sn, s, e);
    } else if (same(iw, isn)) {
        rc = move(sn, s, e);
    } else if (!same(iw, is)) {
        if (iw[0] || is[0]) /* the message of cb_state_check_pair, for the same case */
            return cb_fail(e, CB_EINPUT, "%s (checkpoint id %s) and %s (id %s) are not one "
                                         "checkpoint: a save was interrupted between writing the "
                                         "two, or one was copied over; resume from a matching "
                                         "pair (or start again with --init %s)",
                           w, iw[0] ? iw : "missing", s, is[0] ? is : "missing", w);
        if (!exists(w) && !exists(wn))
            return cb_fail(e, CB_EINPUT, "%s: cannot open: %s; check the path (a checkpoint "
                                         "file, or the --save DIR/ of a run)", w, strerror(ENOENT));
        return cb_fail(e, CB_EINPUT, "%s: no complete checkpoint (weights and .state with one "
                                     "checkpoint id); pass another --resume", w);
    }
    return rc;
}

/* Unlinks the entries of W's directory whose names start with W's name
 * followed by one of the suffixes. */
static void remove_prefixed(const char *w, const char *const *suffix, int ns) {
    const char *slash = strrchr(w, '/');
    const char *base = slash ? slash + 1 : w;
    char dir[CKPT_PATH], path[2 * CKPT_PATH + 2];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - w) + (slash == w) : 1, slash ? w : ".");
    DIR *d = opendir(dir);
    if (!d) return;
    size_t bl = strlen(base);
    for (struct dirent *de; (de = readdir(d));) {
        if (strncmp(de->d_name, base, bl)) continue;
        for (int i = 0; i < ns; i++)
            if (!strncmp(de->d_name + bl, suffix[i], strlen(suffix[i]))) {
                snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
                unlink(path);
                break;
            }
    }
    closedir(d);
}

void cb_ckpt_clean(const char *w) {
    const char *const sfx[] = {".next", ".tmp", ".state.tmp"};
    remove_prefixed(w, sfx, 3);
}

/* Removes a whole checkpoint: the state first, so a half-removed pair is
 * never taken for a complete one. */
static void drop(const char *w) {
    const char *const sfx[] = {".state", ".next", ".tmp", ".vs"};
    char s[CKPT_PATH + 16];
    snprintf(s, sizeof s, "%s.state", w);
    unlink(s);
    unlink(w);
    remove_prefixed(w, sfx, 4);
}

static int cmp_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}

/* The distinct steps of DIR/step-N.safetensors*, newest first; *n of them. */
static int *list_steps(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    int cap = 0, *s = NULL;
    for (struct dirent *de; (de = readdir(d));) {
        int step, len = 0;
        if (sscanf(de->d_name, "step-%d.safetensors%n", &step, &len) != 1 || !len) continue;
        int dup = 0;
        for (int i = 0; i < *n && !dup; i++) dup = s[i] == step;
        if (dup) continue;
        if (*n == cap) {
            int *t = realloc(s, sizeof *s * (size_t)(cap = cap ? 2 * cap : 16));
            if (!t) break;
            s = t;
        }
        s[(*n)++] = step;
    }
    closedir(d);
    if (s) qsort(s, (size_t)*n, sizeof *s, cmp_desc);
    return s;
}

/* Newest complete checkpoint in dir into out; keep > 0 drops those beyond
 * the newest keep complete ones, and every incomplete one older than the
 * newest complete. */
static int scan_dir(const char *dir, int single, char *out, size_t cap, int keep, cb_err *e) {
    int n, found = 0, *steps = list_steps(dir, &n);
    char w[CKPT_PATH];
    cb_err ignore;
    for (int i = 0; i < n; i++) {
        step_path(w, sizeof w, dir, steps[i]);
        int ok = !settle(w, single, &ignore);
        if (ok && !found++) snprintf(out, cap, "%s", w);
        if (keep > 0 && found && (!ok || found > keep)) drop(w);
    }
    free(steps);
    if (!found)
        return cb_fail(e, CB_EINPUT, "%s: no complete checkpoint (step-N.safetensors with its "
                                     ".state) in this directory; pass another --resume", dir);
    return CB_OK;
}

static int agree(cb_comm *w, int rc, cb_err *e) {
    if (!w) return rc;
    if (!rc) e->code = CB_OK;
    return cb_comm_agree_err(w, e);
}

static int is_root(cb_comm *w) { return !w || w->rank == 0; }

int cb_ckpt_find(cb_comm *w, const char *arg, int single, char *out, size_t cap, cb_err *e) {
    int rc = CB_OK;
    if (is_root(w)) {
        if (cb_ckpt_is_dir(arg)) rc = scan_dir(arg, single, out, cap, 0, e);
        else if (!(rc = settle(arg, single, e))) snprintf(out, cap, "%s", arg);
    }
    rc = agree(w, rc, e);
    if (!rc && w) cb_comm_bcast_bytes(w, CB_COMM_CONTROL, out, cap, 0);
    return rc;
}

/* Rank 0 before the writers: the target's directory exists and holds no
 * leftover of an interrupted save of the same name. */
static int prepare(const cb_ckpt_opts *o, const char *target, cb_err *e) {
    if (cb_ckpt_is_dir(o->save) && mkdir(o->save, 0755) && errno != EEXIST)
        return cb_fail(e, CB_ESYS, "--save %s: cannot create the directory: %s", o->save,
                       strerror(errno));
    cb_err ignore;
    settle(target, o->single, &ignore); /* a commit cut short is finished, not lost */
    cb_ckpt_clean(target);
    return CB_OK;
}

static int commit(const cb_ckpt_opts *o, const char *target, cb_err *e) {
    int rc = settle(target, o->single, e);
    if (rc) return cb_fail(e, CB_EINTERNAL, "%s: the writers finished but the pair is not "
                                            "complete (internal error)", target);
    char newest[CKPT_PATH];
    if (cb_ckpt_is_dir(o->save) && o->keep_last > 0)
        rc = scan_dir(o->save, o->single, newest, sizeof newest, o->keep_last, e);
    return rc;
}

int cb_ckpt_save(cb_comm *w, const cb_ckpt_opts *o, int step, cb_ckpt_writer write, void *ctx,
                 char *saved, size_t cap, cb_err *e) {
    char target[CKPT_PATH], next[CKPT_PATH + 8];
    if (cb_ckpt_is_dir(o->save)) step_path(target, sizeof target, o->save, step);
    else snprintf(target, sizeof target, "%s", o->save);
    snprintf(next, sizeof next, "%s.next", target);
    cb_comm_stall_pause(1); /* ranks wait here while rank 0 writes, however long */
    int rc = agree(w, is_root(w) ? prepare(o, target, e) : CB_OK, e);
    if (!rc) rc = agree(w, write(ctx, next, e), e);
    if (!rc) rc = agree(w, is_root(w) ? commit(o, target, e) : CB_OK, e);
    else if (is_root(w)) cb_ckpt_clean(target); /* a failed save leaves the previous only */
    cb_comm_stall_pause(0);
    if (saved) snprintf(saved, cap, "%s", target);
    return rc;
}
