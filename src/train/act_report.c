/* The startup report of `cubist train` on activation memory: what the
 * chosen --recompute plans (per pipeline stage under --pp), what `none`
 * would plan on the same layout and schedule, the saving, and the extra
 * forward FLOPs the recompute costs as a share of the step's. */
#include <stdio.h>

#include "train/train.h"

/* "--recompute block --recompute-method uniform --recompute-layers 2" */
static void describe(const cb_pp_opts *o, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "--recompute %s", o->recompute ? o->recompute : "none");
    if (o->recompute_method && n < (int)cap)
        n += snprintf(buf + n, cap - n, " --recompute-method %s", o->recompute_method);
    if (o->recompute_layers != CB_PP_UNSET && n < (int)cap)
        snprintf(buf + n, cap - n, " --recompute-layers %d", o->recompute_layers);
}

static void list_mb(FILE *f, const double *x, int n) {
    for (int i = 0; i < n; i++) fprintf(f, "%s%.1f", i ? " / " : "", x[i] / 1e6);
}

void cb_act_report(FILE *f, const cb_pp_opts *o, const double *bytes, const double *none, int n,
                   double extra_frac) {
    char how[160];
    double b = 0, z = 0;
    describe(o, how, sizeof how);
    for (int i = 0; i < n; i++) b += bytes[i], z += none[i];
    fprintf(f, "cubist: activation memory planned%s: ", n > 1 ? " per stage" : "");
    list_mb(f, bytes, n);
    fprintf(f, " MB with %s", how);
    if (z > b) {
        fprintf(f, "; ");
        list_mb(f, none, n);
        fprintf(f, " MB with none: %.1f MB saved (x%.3f); the recompute's forwards add %.1f%% "
                   "to the step's FLOPs",
                (z - b) / 1e6, b / z, 100 * extra_frac);
    } else if (extra_frac > 0) {
        fprintf(f, " (none plans as much); the recompute's forwards add %.1f%% to the step's FLOPs",
                100 * extra_frac);
    }
    fprintf(f, "\n");
}
