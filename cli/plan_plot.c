/* `cubist plan --plot F.png`: the best predicted step time, and the memory
 * of that layout, against the device count, one line per tensor mode (and
 * one without tensor parallelism), drawn by gnuplot. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan_cli.h"

#define NSERIES 4 /* none, 1d, 2d, 3d */

/* best[s] of n devices: the fastest layout of series s (NAN: none fits) */
static void best_of(const cb_plan_job *j, int n, double max_mem, cb_plan_choice *ch, int cap,
                    double *t, double *mem) {
    int k = cb_plan_enumerate(j, n, max_mem, 0, ch, cap);
    for (int s = 0; s < NSERIES; s++) t[s] = mem[s] = NAN;
    for (int i = 0; i < (k < cap ? k : cap); i++) {
        int s = ch[i].l.tp == 1 ? 0 : (int)ch[i].l.mode;
        if (isnan(t[s])) t[s] = 1e3 * ch[i].p.step_s, mem[s] = ch[i].p.mem_total / 1e9;
    }
}

static int write_data(const plan_opts *o, const cb_plan_job *j, const char *path, cb_err *e) {
    FILE *f = fopen(path, "w");
    cb_plan_choice *ch = malloc(sizeof *ch * 8192);
    if (!f || !ch) {
        if (f) fclose(f);
        free(ch);
        return cb_fail(e, CB_ESYS, "cannot write the plot data %s", path);
    }
    for (int n = 1; n <= o->devices; n *= 2) {
        double t[NSERIES], m[NSERIES];
        best_of(j, n, o->max_memory_gb * 1e9, ch, 8192, t, m);
        fprintf(f, "%d", n);
        for (int s = 0; s < NSERIES; s++) fprintf(f, " %g", t[s]);
        for (int s = 0; s < NSERIES; s++) fprintf(f, " %g", m[s]);
        fprintf(f, "\n");
    }
    free(ch);
    return fclose(f) ? cb_fail(e, CB_ESYS, "cannot write the plot data %s", path) : CB_OK;
}

static const char SCRIPT[] =
    "set terminal pngcairo size 1000,420 font ',10'\n"
    "set output '%s'\n"
    "set datafile missing 'nan'\n"
    "set multiplot layout 1,2 title '%s'\n"
    "set logscale x 2; set logscale y; set xlabel 'devices'; set grid; set key top right\n"
    "set ylabel 'predicted step time (ms)'\n"
    "plot for [s=2:5] '%s' using 1:s with linespoints title word('none 1d 2d 3d', s-1)\n"
    "set ylabel 'memory per device of that layout (GB)'\n"
    "plot for [s=6:9] '%s' using 1:s with linespoints title word('none 1d 2d 3d', s-5)\n"
    "unset multiplot\n";

int plan_plot(const plan_opts *o, const cb_plan_job *j, cb_err *e) {
    char dir[] = "/tmp/cubist-plot-XXXXXX", dat[64], gp[64], tmp[4200], cmd[4400], title[256];
    if (!mkdtemp(dir)) return cb_fail(e, CB_ESYS, "cannot make a temporary directory in /tmp");
    snprintf(dat, sizeof dat, "%s/plot.dat", dir);
    snprintf(gp, sizeof gp, "%s/plot.gp", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", o->plot);
    snprintf(title, sizeof title, "GPT %dL d%d, batch %d x T %d on %.60s (best layout per tensor mode)",
             j->model->gpt.n_layer, j->model->gpt.d_model, j->batch, j->T, j->cluster->name);
    for (char *c = title; *c; c++) if (*c == '\'') *c = ' ';
    int rc = write_data(o, j, dat, e);
    FILE *f = rc ? NULL : fopen(gp, "w");
    if (!rc && (!f || fprintf(f, SCRIPT, tmp, title, dat, dat) < 0 || fclose(f)))
        rc = cb_fail(e, CB_ESYS, "cannot write the gnuplot script %s", gp);
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", gp);
    if (!rc && system(cmd))
        rc = cb_fail(e, CB_ESYS, "gnuplot failed or is missing; install gnuplot-nox (make deps)");
    if (!rc && rename(tmp, o->plot))
        rc = cb_fail(e, CB_ESYS, "cannot rename %s to %s", tmp, o->plot);
    if (rc) unlink(tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    if (!rc) printf("wrote %s\n", o->plot);
    return rc;
}
