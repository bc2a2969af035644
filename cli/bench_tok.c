/* `cubist bench --tokenizer`: GPT-2 BPE encoding speed on one core, next to
 * the reference (js-tiktoken, bench/bpe_ref.js under the machine's Node.js)
 * on the same text in the same run, and whether the ids are identical. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "data/tokenizer.h"
#include "formats/fileio.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Best of reps encodes, each by a freshly loaded tokenizer (its pre-token
 * cache empty: the speed a `cubist prepare` of this text sees). */
static int time_encode(const char *bpe_dir, const void *text, size_t len, int reps, uint16_t *ids,
                       size_t *n, double *best, cb_err *e) {
    *best = 1e30;
    for (int r = 0; r < reps; r++) {
        cb_tokenizer tk;
        int rc = cb_tokenizer_open("gpt2", bpe_dir, &tk, e);
        if (rc) return rc;
        double t0 = now();
        *n = tk.encode(&tk, text, len, ids);
        double dt = now() - t0;
        cb_tokenizer_free(&tk);
        if (*n == SIZE_MAX) return cb_fail(e, CB_ENOMEM, "out of memory encoding");
        if (dt < *best) *best = dt;
    }
    return CB_OK;
}

/* Runs the reference on text; its ids into ref_path, its seconds into *sec. */
static int run_reference(const char *text, const char *ref_path, double *sec, cb_err *e) {
    char script[PATH_MAX + 32], cmd[3 * PATH_MAX + 64];
    cli_bench_file(script, sizeof script, "bpe_ref.js");
    snprintf(cmd, sizeof cmd, "node '%s' '%s' '%s'", script, text, ref_path);
    FILE *p = popen(cmd, "r");
    double bytes = 0;
    int got = p && fscanf(p, "%lf %lf", &bytes, sec) == 2;
    int st = p ? pclose(p) : -1;
    if (!got || st != 0)
        return cb_fail(e, CB_EINPUT, "the reference (%s) failed; install Node.js and run `make deps` "
                       "(js-tiktoken into deps/)", script);
    return CB_OK;
}

static int bench(const char *text, const char *bpe_dir, int reps, cb_err *e) {
    void *map;
    size_t len, n = 0, rn = 0;
    int rc = fio_map(text, "pass --text FILE, a text file", &map, &len, e);
    if (rc) return rc;
    uint16_t *ids = malloc((len + 1) * sizeof *ids);
    char ref_path[] = "/tmp/cubist_bpe_ref_XXXXXX";
    int fd = mkstemp(ref_path);
    double ours = 0, ref = 0;
    if (!ids || fd < 0) rc = cb_fail(e, CB_ESYS, "out of memory or /tmp unwritable");
    if (!rc && len == 0) rc = cb_fail(e, CB_EINPUT, "%s is empty; pass a text file", text);
    if (!rc) rc = time_encode(bpe_dir, map, len, reps, ids, &n, &ours, e);
    if (!rc) rc = run_reference(text, ref_path, &ref, e);
    void *rmap = NULL;
    if (!rc) rc = fio_map(ref_path, "", &rmap, &rn, e);
    if (!rc) {
        int same = rn == n * sizeof *ids && (n == 0 || !memcmp(rmap, ids, rn));
        printf("text %s: %zu bytes, %zu tokens\n", text, len, n);
        printf("cubist      %8.1f MB/s  (%.3f s, best of %d, one core)\n", len / ours / 1e6, ours, reps);
        printf("js-tiktoken %8.1f MB/s  (%.3f s, one encode under Node.js)\n", len / ref / 1e6, ref);
        printf("ratio %.2fx; ids %s\n", ref / ours, same ? "identical" : "DIFFER");
        if (!same) rc = cb_fail(e, CB_EINTERNAL, "cubist's ids differ from js-tiktoken's on %s", text);
    }
    fio_unmap(rmap, rn);
    if (fd >= 0) close(fd), unlink(ref_path);
    free(ids);
    fio_unmap(map, len);
    return rc;
}

int cmd_bench_tok(int argc, char **argv) {
    const char *text = NULL, *bpe_dir = NULL;
    int tok = 0, reps = 3, help;
    const cli_flag flags[] = {
        {"tokenizer", ARG_BOOL, &tok, "time GPT-2 BPE encoding against js-tiktoken"},
        {"text", ARG_STR, &text, "text file to encode"},
        {"bpe-dir", ARG_STR, &bpe_dir, "directory of encoder.json and vocab.bpe (" CB_BPE_DIR ")"},
        {"reps", ARG_INT, &reps, "timed encodes, best kept (3)"},
    };
    int n = (int)(sizeof flags / sizeof *flags);
    cb_err e = {0};
    if (cli_parse("bench", argc, argv, flags, n, &help, &e)) return cli_fail(&e);
    if (help) {
        cli_usage(stdout, "bench", "--tokenizer --text FILE [--bpe-dir DIR] [--reps N]", flags, n,
                  "Encodes FILE with cubist's GPT-2 BPE (one thread, each rep a fresh tokenizer,\n"
                  "so its pre-token cache starts empty) and with js-tiktoken (bench/bpe_ref.js,\n"
                  "Node.js, one encode); prints both rates, their ratio, and whether the ids\n"
                  "are identical (exit 5 if not).\n");
        return 0;
    }
    if (!text) cb_fail(&e, CB_EINPUT, "bench --tokenizer needs --text FILE (e.g. `bible gen1:1-rev22:21 > kjv.txt`)");
    else if (reps < 1) cb_fail(&e, CB_EINPUT, "--reps %d must be >= 1", reps);
    if (e.code || bench(text, bpe_dir, reps, &e)) return cli_fail(&e);
    return 0;
}
