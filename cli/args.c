#include "args.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int set_value(const char *cmd, const cli_flag *f, const char *v, cb_err *e) {
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case ARG_INT: {
        long x = strtol(v, &end, 10);
        if (x < -2147483647L || x > 2147483647L) errno = ERANGE;
        *(int *)f->dst = (int)x;
        break;
    }
    case ARG_FLOAT: *(float *)f->dst = strtof(v, &end); break;
    case ARG_DOUBLE: *(double *)f->dst = strtod(v, &end); break;
    case ARG_U64: *(uint64_t *)f->dst = strtoull(v, &end, 10); break;
    case ARG_BOOL: *(int *)f->dst = (int)strtol(v, &end, 10); break;
    case ARG_STR: *(const char **)f->dst = v; return CB_OK;
    }
    if (errno || end == v || *end)
        return cb_fail(e, CB_EINPUT, "--%s: '%s' is not a valid %s; see `cubist %s --help`",
                       f->name, v, f->type == ARG_INT || f->type == ARG_U64 ? "integer" : "number",
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
