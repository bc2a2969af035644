/* `cubist plot`: training logs (--log JSONL) -> one PNG through gnuplot:
 * loss and validation loss against tokens, the learning rate and MFU below,
 * several runs overlaid in one colour each. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "formats/fileio.h"
#include "formats/json.h"

#define MAX_RUNS 16

static double field(const json_val *o, const char *k, int *ok) {
    const json_val *v = json_get(o, k);
    *ok = v && (v->type == JSON_INT || v->type == JSON_NUM);
    return *ok ? v->d : 0;
}

/* One log -> dir/run<i>.dat (tokens loss lr mfu) and dir/val<i>.dat
 * (tokens val_loss); the step count in *n. */
static int convert_log(const char *log, const char *dir, int i, int *n, cb_err *e) {
    char path[4200];
    FILE *in = fopen(log, "r"), *out = NULL, *val = NULL;
    if (!in) return cb_fail(e, CB_EINPUT, "%s: cannot open: %s; pass a log written by `cubist train --log`", log, strerror(errno));
    snprintf(path, sizeof path, "%s/run%d.dat", dir, i);
    out = fopen(path, "w");
    snprintf(path, sizeof path, "%s/val%d.dat", dir, i);
    val = fopen(path, "w");
    int rc = out && val ? CB_OK : cb_fail(e, CB_ESYS, "cannot write to %s: %s", dir, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    *n = 0;
    for (int ln = 1; !rc && getline(&line, &cap, in) > 0; ln++) {
        json_val o;
        json_error je;
        int ok[5];
        int bad = json_parse(line, strlen(line), &o, &je);
        if (bad && je.nomem) rc = cb_fail(e, CB_ENOMEM, "%s: out of memory reading line %d", log, ln);
        else if (bad || o.type != JSON_OBJ)
            rc = cb_fail(e, CB_EINPUT, "%s: line %d is not a JSON object; pass a log written by `cubist train --log`", log, ln);
        if (!bad && o.type != JSON_OBJ) json_free(&o);
        if (rc) break;
        double tok = field(&o, "tokens", &ok[0]), loss = field(&o, "loss", &ok[1]);
        double lr = field(&o, "lr", &ok[2]), mfu = field(&o, "mfu", &ok[3]), vl = field(&o, "val_loss", &ok[4]);
        json_free(&o);
        if (!ok[0] || !ok[1])
            rc = cb_fail(e, CB_EINPUT, "%s: line %d has no \"tokens\" and \"loss\"; pass a log written by `cubist train --log`", log, ln);
        else fprintf(out, "%.17g %.9g %.9g %.9g\n", tok, loss, ok[2] ? lr : 0, ok[3] ? 100 * mfu : 0), (*n)++;
        if (!rc && ok[4]) fprintf(val, "%.17g %.9g\n", tok, vl);
    }
    if (!rc && *n == 0) rc = cb_fail(e, CB_EINPUT, "%s: no steps logged; pass a log written by `cubist train --log`", log);
    free(line);
    fclose(in);
    if (out && fclose(out) && !rc) rc = cb_fail(e, CB_ESYS, "writing %s failed", dir);
    if (val && fclose(val) && !rc) rc = cb_fail(e, CB_ESYS, "writing %s failed", dir);
    return rc;
}

/* The run's name in the key: the log's file name without .jsonl, quoted for gnuplot. */
static void run_name(const char *log, char *out, size_t cap) {
    const char *b = strrchr(log, '/');
    b = b ? b + 1 : log;
    size_t n = strlen(b);
    if (n > 6 && !strcmp(b + n - 6, ".jsonl")) n -= 6;
    size_t k = 0;
    for (size_t i = 0; i < n && k + 2 < cap; i++) out[k++] = b[i] == '\'' ? ' ' : b[i];
    out[k] = 0;
}

/* One panel: column col of every run (and with val, the validation points). */
static void panel(FILE *g, const char *dir, char names[][128], int nruns, const char *ylabel, int col, int val) {
    fprintf(g, "set ylabel '%s'\nplot ", ylabel);
    for (int i = 0; i < nruns; i++) {
        fprintf(g, "%s'%s/run%d.dat' using 1:%d with lines lw 1.5 lc %d title '%s%s'", i ? ", " : "", dir, i, col,
                i + 1, names[i], val ? " loss" : "");
        if (val) fprintf(g, ", '%s/val%d.dat' using 1:2 with linespoints pt 7 ps 0.8 dt 2 lc %d title '%s val loss'",
                         dir, i, i + 1, names[i]);
    }
    fprintf(g, "\n");
}

static int write_script(const char *dir, const char *tmp_png, char names[][128], int nruns, int w, int h, cb_err *e) {
    char path[4200];
    snprintf(path, sizeof path, "%s/plot.gp", dir);
    FILE *g = fopen(path, "w");
    if (!g) return cb_fail(e, CB_ESYS, "cannot write %s: %s", path, strerror(errno));
    fprintf(g, "set terminal pngcairo size %d,%d noenhanced font ',10'\nset output '%s'\n", w, h, tmp_png);
    fprintf(g, "set multiplot layout 3,1\nset grid\nset key top right\nset xlabel 'tokens'\nset format x '%%.2s%%c'\n");
    panel(g, dir, names, nruns, "loss", 2, 1);
    panel(g, dir, names, nruns, "learning rate", 3, 0);
    panel(g, dir, names, nruns, "MFU (%)", 4, 0);
    fprintf(g, "unset multiplot\nset output\n");
    return fclose(g) ? cb_fail(e, CB_ESYS, "writing %s failed", path) : CB_OK;
}

/* gnuplot on the script; its last output line in the error if it fails. */
static int run_gnuplot(const char *dir, cb_err *e) {
    char cmd[4300], line[512] = "", last[512] = "";
    snprintf(cmd, sizeof cmd, "gnuplot '%s/plot.gp' 2>&1", dir);
    FILE *p = popen(cmd, "r");
    if (!p) return cb_fail(e, CB_ESYS, "cannot start gnuplot: %s", strerror(errno));
    while (fgets(line, sizeof line, p))
        if (line[0] != '\n') snprintf(last, sizeof last, "%.*s", (int)strcspn(line, "\n"), line);
    int st = pclose(p);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
        return cb_fail(e, CB_EINPUT, "gnuplot is not installed; install it with `make deps` (Debian gnuplot-nox)");
    if (st != 0) return cb_fail(e, CB_ESYS, "gnuplot failed: %s", last);
    return CB_OK;
}

/* The PNG gnuplot wrote to tmp, synced and renamed to out. */
static int commit_png(const char *tmp, const char *out, cb_err *e) {
    int fd = open(tmp, O_RDONLY);
    int rc = fd >= 0 && fsync(fd) == 0 ? CB_OK : cb_fail(e, CB_ESYS, "%s: gnuplot wrote no image", out);
    if (fd >= 0) close(fd);
    if (!rc && rename(tmp, out)) rc = cb_fail(e, CB_ESYS, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

static int plot(char **logs, int nruns, const char *out, int w, int h, cb_err *e) {
    char dir[] = "/tmp/cubist_plot_XXXXXX", names[MAX_RUNS][128], tmp[4200], path[4200];
    if (!mkdtemp(dir)) return cb_fail(e, CB_ESYS, "cannot make a directory in /tmp: %s", strerror(errno));
    int rc = CB_OK, n;
    for (int i = 0; i < nruns && !rc; i++) {
        rc = convert_log(logs[i], dir, i, &n, e);
        run_name(logs[i], names[i], sizeof names[i]);
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    if (!rc) rc = write_script(dir, tmp, names, nruns, w, h, e);
    if (!rc) rc = run_gnuplot(dir, e);
    if (!rc) rc = commit_png(tmp, out, e);
    else unlink(tmp);
    const char *files[] = {"plot.gp", "run%d.dat", "val%d.dat"};
    for (int i = 0; i < nruns; i++)
        for (int f = 0; f < 3; f++) {
            char name[32];
            snprintf(name, sizeof name, files[f], i);
            snprintf(path, sizeof path, "%s/%s", dir, name);
            unlink(path);
        }
    rmdir(dir);
    return rc;
}

static int parse_size(const char *s, int *w, int *h, cb_err *e) {
    char x;
    if (sscanf(s, "%d%c%d", w, &x, h) != 3 || (x != 'x' && x != 'X') || *w < 64 || *h < 64 || *w > 10000 || *h > 10000)
        return cb_fail(e, CB_EINPUT, "--size '%s' is not WxH in pixels, each 64 to 10000; pass e.g. 1200x900", s);
    return CB_OK;
}

int cmd_plot(int argc, char **argv) {
    const char *out = NULL, *size = "1200x900";
    const cli_flag flags[] = {
        {"out", ARG_STR, &out, "PNG file to write"},
        {"size", ARG_STR, &size, "image size WxH in pixels (1200x900)"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help = 0, nlogs = 0, nf = 0, w, h;
    char *logs[MAX_RUNS + 1], *fl[64];
    cb_err e = {0};
    for (int i = 0; i < argc; i++) { /* logs are the words that are neither flags nor their values */
        int flag = !strncmp(argv[i], "--", 2) || !strcmp(argv[i], "-h");
        if (flag && nf < 62) {
            fl[nf++] = argv[i];
            if (!strchr(argv[i], '=') && strcmp(argv[i], "--help") && strcmp(argv[i], "-h") && i + 1 < argc) fl[nf++] = argv[++i];
        } else if (!flag && nlogs <= MAX_RUNS) logs[nlogs++] = argv[i];
    }
    if (cli_parse("plot", nf, fl, flags, n, &help, &e)) return cli_fail(&e);
    if (help) {
        cli_usage(stdout, "plot", "LOG.jsonl [LOG2.jsonl ...] --out FILE.png [--size WxH]", flags, n,
                  "Draws, against tokens trained, the loss (lines) and validation loss (points)\n"
                  "of each log written by `cubist train --log`, the learning rate and the MFU\n"
                  "in three panels, one colour per run (named after its file), with gnuplot\n"
                  "(Debian gnuplot-nox, installed by `make deps`). Up to 16 runs.\n");
        return 0;
    }
    if (nlogs == 0) cb_fail(&e, CB_EINPUT, "plot needs at least one LOG.jsonl (from `cubist train --log`)");
    else if (nlogs > MAX_RUNS) cb_fail(&e, CB_EINPUT, "more than %d logs; plot fewer runs at once", MAX_RUNS);
    else if (!out) cb_fail(&e, CB_EINPUT, "plot needs --out FILE.png");
    else if (!parse_size(size, &w, &h, &e)) fio_check_writable("--out", out, &e);
    if (e.code || plot(logs, nlogs, out, w, h, &e)) return cli_fail(&e);
    return 0;
}
