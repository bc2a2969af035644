/* The checkpoint commit protocol (src/train/ckpt.h) on one process, state
 * by state: every file set a kill can leave between the steps of a commit
 * resolves to the previous or the new checkpoint, never a mix; --save DIR/
 * with keep_last; one-file checkpoints (the graph engine's); a writer that
 * fails leaves the previous checkpoint and no pending file. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/ckpt.h"

static int failures;

static void check(int ok, const char *what) {
    printf("%s ckpt: %s\n", ok ? "PASS" : "FAIL", what);
    if (!ok) failures++;
}

/* A file with metadata ckpt_id = id (one tensor: the id's first char). */
static void put(const char *path, const char *id) {
    float x = (float)id[0];
    cb_st_entry t = {.name = "x", .ndim = 1, .shape = {1}, .data = &x};
    const char *meta[2] = {"ckpt_id", id};
    cb_err e;
    if (cb_st_write(path, &t, 1, meta, 1, &e)) printf("FAIL ckpt: writing %s: %s\n", path, e.msg), failures++;
}

static int has_id(const char *path, const char *id) {
    cb_st_file f;
    cb_err e;
    if (cb_st_open(path, &f, &e)) return 0;
    const char *v = cb_st_meta(&f, "ckpt_id");
    int ok = v && !strcmp(v, id);
    cb_st_close(&f);
    return ok;
}

static void pair(const char *w, const char *id) {
    char s[512];
    snprintf(s, sizeof s, "%s.state", w);
    put(w, id);
    put(s, id);
}

typedef struct writer_ctx {
    const char *id;
    int single, fail;
} writer_ctx;

static int writer(void *ctx, const char *path, cb_err *e) {
    writer_ctx *c = ctx;
    if (c->single) put(path, c->id);
    else pair(path, c->id);
    return c->fail ? cb_fail(e, CB_ESYS, "disk full (simulated)") : CB_OK;
}

static int found(const char *arg, int single, const char *want) {
    char out[4096];
    cb_err e;
    return !cb_ckpt_find(NULL, arg, single, out, sizeof out, &e) && !strcmp(out, want);
}

static void crash_states(void) {
    char out[4096];
    cb_err e;
    pair("c.st", "A"), put("c.st.next", "B"); /* killed inside the new state */
    check(found("c.st", 0, "c.st") && has_id("c.st", "A") && has_id("c.st.state", "A"),
          "new weights written, state not: the previous pair");
    put("c.st.next.state", "B"); /* both pending: committed by the reader */
    check(found("c.st", 0, "c.st") && has_id("c.st", "B") && has_id("c.st.state", "B") &&
              access("c.st.next", F_OK) && access("c.st.next.state", F_OK),
          "both pending files written: the new pair, renames finished");
    put("c.st", "C"), put("c.st.next.state", "C"); /* killed between the two renames */
    check(found("c.st", 0, "c.st") && has_id("c.st.state", "C"),
          "killed between the renames: the new pair (state renamed by the reader)");
    put("c.st", "D");
    check(cb_ckpt_find(NULL, "c.st", 0, out, sizeof out, &e) == CB_EINPUT &&
              strstr(e.msg, "are not one checkpoint"),
          "a pair of two saves refused, naming both");
}

static void save_dir(void) {
    cb_ckpt_opts o = {"d/", 2, 0};
    cb_err e;
    char saved[4096];
    const char *ids[4] = {"s1", "s2", "s3", "s4"};
    int rc = 0;
    for (int s = 1; s <= 4; s++) {
        writer_ctx c = {ids[s - 1], 0, 0};
        rc |= cb_ckpt_save(NULL, &o, s, writer, &c, saved, sizeof saved, &e);
    }
    check(!rc && !strcmp(saved, "d/step-00000004.safetensors") &&
              access("d/step-00000002.safetensors", F_OK) && !access("d/step-00000003.safetensors.state", F_OK),
          "--save DIR/ --keep-last 2: steps 3 and 4 kept, 1 and 2 removed");
    put("d/step-00000005.safetensors.next", "s5"); /* a save cut short */
    check(found("d", 0, "d/step-00000004.safetensors"), "--resume DIR: the newest complete one");
    writer_ctx bad = {"s6", 0, 1};
    rc = cb_ckpt_save(NULL, &o, 6, writer, &bad, NULL, 0, &e);
    check(rc == CB_ESYS && access("d/step-00000006.safetensors.next", F_OK) &&
              access("d/step-00000006.safetensors", F_OK) && found("d", 0, "d/step-00000004.safetensors"),
          "a failing writer: its error, no pending file, the previous checkpoint stays newest");
}

static void single_file(void) {
    cb_ckpt_opts o = {"g/", 1, 1};
    cb_err e;
    writer_ctx a = {"g1", 1, 0}, b = {"g2", 1, 0};
    int rc = cb_ckpt_save(NULL, &o, 1, writer, &a, NULL, 0, &e);
    rc |= cb_ckpt_save(NULL, &o, 2, writer, &b, NULL, 0, &e);
    check(!rc && access("g/step-00000001.safetensors", F_OK) && has_id("g/step-00000002.safetensors", "g2"),
          "one-file checkpoints (graph engine) with --keep-last 1");
    put("g/step-00000003.safetensors.next", "g3"); /* atomic on its own: complete */
    check(found("g", 1, "g/step-00000003.safetensors") && has_id("g/step-00000003.safetensors", "g3"),
          "one-file: a written pending file is committed by the reader");
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(path);
}

int main(void) {
    char dir[] = "/tmp/cubist-ckpt-XXXXXX";
    if (!mkdtemp(dir) || chdir(dir)) return printf("FAIL ckpt: scratch directory\n"), 1;
    crash_states();
    save_dir();
    single_file();
    if (chdir("/") || nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS)) printf("note: could not remove %s\n", dir);
    return failures ? 1 : 0;
}
