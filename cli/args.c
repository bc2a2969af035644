#include "args.h"

#include <omp.h>

#include "kernels/profile.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Numbers must be all of the value and finite; --flag for a 0/1 switch takes
 * only 0 or 1, and an unsigned flag no sign ("-1" would wrap to 2^64-1). */
static int set_value(const char *cmd, const cli_flag *f, const char *v, cb_err *e) {
    char *end = NULL;
    double x = 0;
    errno = 0;
    switch (f->type) {
    case ARG_INT: {
        long i = strtol(v, &end, 10);
        if (i < -2147483647L || i > 2147483647L) errno = ERANGE;
        *(int *)f->dst = (int)i;
        break;
    }
    case ARG_FLOAT: *(float *)f->dst = (float)(x = strtof(v, &end)); break;
    case ARG_DOUBLE: *(double *)f->dst = x = strtod(v, &end); break;
    case ARG_U64:
        if (strchr(v, '-')) errno = ERANGE;
        *(uint64_t *)f->dst = strtoull(v, &end, 10);
        break;
    case ARG_BOOL:
        if (strcmp(v, "0") && strcmp(v, "1"))
            return cb_fail(e, CB_EINPUT, "--%s: '%s' is not 0 or 1; pass --%s 1 (or just --%s) "
                                         "to switch it on, --%s 0 to switch it off",
                           f->name, v, f->name, f->name, f->name);
        *(int *)f->dst = v[0] == '1';
        return CB_OK;
    case ARG_STR: *(const char **)f->dst = v; return CB_OK;
    }
    if (errno || end == v || *end || !isfinite(x))
        return cb_fail(e, CB_EINPUT, "--%s: '%s' is not a valid %s; see `cubist %s --help`",
                       f->name, v,
                       f->type == ARG_INT ? "integer"
                       : f->type == ARG_U64 ? "non-negative integer"
                                            : "finite number",
                       cmd);
    return CB_OK;
}

int cli_parse(const char *cmd, int argc, char **argv, const cli_flag *flags, int n, int *help,
              cb_err *e) {
    *help = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help = 1;
            return CB_OK;
        }
        if (strncmp(a, "--", 2))
            return cb_fail(e, CB_EINPUT, "unexpected argument '%s'; flags are --name value (see "
                                         "`cubist %s --help`)",
                           a, cmd);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const cli_flag *f = NULL;
        for (int j = 0; j < n && !f; j++)
            if (strlen(flags[j].name) == len && !strncmp(flags[j].name, name, len)) f = &flags[j];
        if (!f)
            return cb_fail(e, CB_EINPUT, "unknown flag --%.*s; see `cubist %s --help`", (int)len,
                           name, cmd);
        const char *v = eq ? eq + 1 : NULL;
        if (!v && f->type == ARG_BOOL && (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) v = "1";
        if (!v && i + 1 >= argc)
            return cb_fail(e, CB_EINPUT, "--%s needs a value; see `cubist %s --help`", f->name,
                           cmd);
        if (!v) v = argv[++i];
        int rc = set_value(cmd, f, v, e);
        if (rc) return rc;
    }
    return CB_OK;
}

void cli_usage(FILE *f, const char *cmd, const char *synopsis, const cli_flag *flags, int n,
               const char *epilog) {
    fprintf(f, "usage: cubist %s %s\n\n", cmd, synopsis);
    for (int i = 0; i < n; i++) {
        char name[40];
        snprintf(name, sizeof name, "--%s", flags[i].name);
        fprintf(f, "  %-22s %s\n", name, flags[i].help);
    }
    if (epilog) fprintf(f, "\n%s", epilog);
}

void cli_grad_accum_alias(int argc, char **argv) {
    static char mb[] = "--micro-batches";
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--grad-accum")) argv[i] = mb;
}

int cli_torch_bench(const char *script, const char *args, const char *const *keys,
                    double *values, int n, cb_err *e) {
    char exe[PATH_MAX], cmd[PATH_MAX + 1024], line[4096], last[400] = "no output", pat[64];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(cmd, sizeof cmd, "OMP_WAIT_POLICY=PASSIVE " CLI_TORCH_HUGEPAGES " /usr/bin/python3 "
                              "'%s/../bench/%s' %s 2>&1", exe, script, args);
    FILE *p = popen(cmd, "r");
    if (!p) return cb_fail(e, CB_ESYS, "cannot start /usr/bin/python3 for the PyTorch benchmark");
    values[0] = 0;
    while (fgets(line, sizeof line, p)) {
        if (line[0] != '{') {
            if (line[0] != '\n') snprintf(last, sizeof last, "%.*s", (int)strcspn(line, "\n"), line);
            continue;
        }
        for (int i = 0; i < n; i++) {
            snprintf(pat, sizeof pat, "\"%s\":", keys[i]);
            const char *s = strstr(line, pat);
            values[i] = s ? atof(s + strlen(pat)) : 0;
        }
    }
    int st = pclose(p);
    if (st != 0 || !(values[0] > 0))
        return cb_fail(e, CB_ESYS, "the PyTorch benchmark failed (status %d): %s; install "
                                   "python3-torch (make deps) or pass --no-torch", st, last);
    return CB_OK;
}

void cli_window_end(double tokens, int steps, double t0, const cb_prof *prof, double *tps,
                    double *first, double *prof_ms) {
    double t = tokens * steps / (omp_get_wtime() - t0);
    if (*tps == 0) *first = t;
    if (t <= *tps) return;
    *tps = t;
    for (int i = 0; i < PROF_N; i++) prof_ms[i] = cb_prof_ms(prof, i) / steps;
}
