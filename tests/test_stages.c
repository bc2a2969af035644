/* Recompute on the GPT graph in one process (one stage, two micro-batches
 * accumulated, one in flight): under block (every block, the first n, and
 * Megatron's uniform groups of k) and selective recompute, the losses and
 * every gradient equal those without recompute to 1e-6 relative (a rerun
 * repeats the same kernels on the same numbers: 0 expected), and the
 * planned activation bytes order as the plan says: what blocks can share
 * is saved (block(all) = uniform(1) < uniform(2) < uniform(3) = uniform(4),
 * block(all) < none, selective < none; with one micro-batch in flight a
 * rerun of the first block only keeps as much as none: its rerun set
 * replaces its kept set; the pipeline's in-flight savings are measured
 * by tests/test_pp_cli.sh). The step's first write of each parameter
 * gradient overwrites it (no zeroing pass): bit for bit the step over
 * zeros, only wpe cleared. The parser of
 * --recompute, --recompute-method and --recompute-layers (one for
 * cb_dist_init and cubist train) refuses bad combinations with one line.
 * Split into pipeline stages the same graph runs under mpirun:
 * tests/test_example.sh and test_pp_cli.sh compare every schedule and
 * recompute with the single process. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

static int fails;

static const cb_adamw_config OPT = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                    .steps = 1};

typedef struct rc_case {
    const char *mode, *method;
    int layers;
} rc_case;

static const char *rc_name(rc_case r) {
    static char buf[4][48];
    static int i;
    char *b = buf[i++ % 4];
    if (r.method || r.layers)
        snprintf(b, 48, "%s %s %d", r.mode, r.method ? r.method : "block", r.layers);
    else snprintf(b, 48, "%s", r.mode);
    return b;
}

static double rel(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / (den > 0 ? den : 1);
}

static void check(int ok, const char *fmt, const char *what, double v) {
    if (!ok) fails++;
    printf("%s ", ok ? "PASS" : "FAIL");
    printf(fmt, what, v);
    printf("\n");
}

typedef struct run_out {
    float loss;
    float *grads;
    size_t n, act_bytes;
} run_out;

/* GPT L=3 C=32 NH=4 T=8 V=64, 2 micro-batches of 2 sequences, under r:
 * one step's loss, gradients and planned activation bytes. */
static int run(rc_case r, run_out *o) {
    cb_gpt_config c = {3, 32, 4, 8, 64};
    enum { B = 4, T = 8, N = B * T };
    cb_dist *d = NULL;
    cb_err e = {0};
    if (cb_dist_tensor(&d, 0, CB_TP_1D, &e) ||
        cb_dist_recompute(d, r.mode, r.method, r.layers, r.layers != 0, &e)) {
        printf("FAIL recompute %s: %s\n", rc_name(r), e.msg);
        if (d) cb_dist_free(d);
        return fails++, 1;
    }
    d->M = 2;
    cb_model *m = cb_model_new(d, B, T);
    cb_model_declare_gpt(m, &c);
    int rc = cb_model_build(m, 5, &OPT, &e);
    int ids[N], tg[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 3 + 5) % 64, tg[i] = (i * 11 + 1) % 64;
    if (!rc) {
        o->loss = cb_graph_grad_step(m, ids, tg);
        o->n = m->pt.nparams;
        o->grads = malloc(sizeof(float) * o->n);
        memcpy(o->grads, m->grads, sizeof(float) * o->n);
        o->act_bytes = cb_model_activation_bytes(m);
    } else {
        printf("FAIL recompute %s: %s\n", rc_name(r), e.msg);
        fails++;
    }
    cb_model_free(m);
    cb_dist_free(d);
    return rc;
}

/* r against none: loss and every gradient; returns r's activation bytes */
static size_t against(rc_case r, const run_out *none) {
    run_out o = {0};
    if (run(r, &o)) return 0;
    double dl = fabs((double)o.loss - none->loss) / fabs(none->loss);
    double d = fmax(dl, rel(o.grads, none->grads, none->n));
    char what[96];
    snprintf(what, sizeof what, "recompute %s: loss and every gradient = none", rc_name(r));
    check(d <= 1e-6, "%s max rel diff %.2e", what, d);
    free(o.grads);
    return o.act_bytes;
}

/* The step's first write of each parameter gradient overwrites it (graph.h):
 * the same GPT (two micro-batches accumulated, tied wte) stepped over a
 * gradient block filled with NaN gives the bits of a step over a zeroed
 * one, and the plan clears only wpe (the lookup adds its rows; wte is
 * first written whole by the head). */
static void first_writes(void) {
    cb_gpt_config c = {3, 32, 4, 8, 64};
    enum { B = 4, T = 8, N = B * T };
    cb_dist *d = NULL;
    cb_err e = {0};
    int ids[N], tg[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 5 + 2) % 64, tg[i] = (i * 7 + 3) % 64;
    cb_model *m = NULL;
    if (!cb_dist_tensor(&d, 0, CB_TP_1D, &e)) {
        d->M = 2;
        m = cb_model_new(d, B, T);
        cb_model_declare_gpt(m, &c);
    }
    if (!m || cb_model_build(m, 9, &OPT, &e)) {
        printf("FAIL first writes: %s\n", e.msg);
        fails++;
        if (d) cb_dist_free(d);
        return;
    }
    size_t n = m->pt.nparams, bad = 0, nan = 0;
    float *want = malloc(sizeof(float) * n);
    memset(m->grads, 0, sizeof(float) * n);
    cb_graph_grad_step(m, ids, tg);
    memcpy(want, m->grads, sizeof(float) * n);
    for (size_t i = 0; i < n; i++) m->grads[i] = NAN;
    cb_graph_grad_step(m, ids, tg);
    for (size_t i = 0; i < n; i++)
        bad += memcmp(m->grads + i, want + i, sizeof(float)) != 0, nan += isnan(m->grads[i]);
    check(bad == 0, "%s %.0f differ",
          "first writes: a step over NaN gradients = one over zeros, bit for bit:", (double)bad);
    int wpe = -1;
    for (int t = 0; t < m->pt.n; t++)
        if (!strcmp(m->pt.t[t].name, "wpe.weight")) wpe = t;
    int only = wpe >= 0 && m->nzero == 1 && m->zero_runs[0] == m->pt.t[wpe].offset &&
               m->zero_runs[1] == m->pt.t[wpe].numel;
    check(only && nan == 0, "%s %.0f runs", "first writes: only wpe is cleared at the step's start:",
          (double)m->nzero);
    free(want);
    cb_model_free(m);
    cb_dist_free(d);
}

static void refusals(void) {
    struct {
        const char *mode, *method;
        int layers;
        const char *want;
    } bad[] = {{"block", "blocks", 0, "use block or uniform"},
               {"none", "uniform", 2, "needs --recompute block"},
               {"selective", "block", 0, "needs --recompute block"},
               {"block", "uniform", -1, "must be >= 0"},
               {"none", NULL, 2, "needs --recompute block"},
               {"all", NULL, 0, "use none, block or selective"}};
    cb_dist d = {0};
    for (int i = 0; i < 6; i++) {
        cb_err e = {0};
        int r = cb_dist_recompute(&d, bad[i].mode, bad[i].method, bad[i].layers, bad[i].layers != 0, &e);
        int ok = r == CB_EINPUT && strstr(e.msg, bad[i].want) && !strchr(e.msg, '\n');
        fails += !ok;
        printf("%s --recompute %s --recompute-method %s --recompute-layers %d refused: %s\n",
               ok ? "PASS" : "FAIL", bad[i].mode, bad[i].method ? bad[i].method : "-",
               bad[i].layers, e.msg);
    }
}

int main(int argc, char **argv) {
    cb_err e = {0};
    if (cb_comm_init(&argc, &argv, &e)) return 1;
    run_out none = {0};
    if (run((rc_case){"none", NULL, 0}, &none)) return 1;
    size_t fa = against((rc_case){"block", NULL, 0}, &none);
    size_t fs = against((rc_case){"selective", NULL, 0}, &none);
    size_t f1 = against((rc_case){"block", NULL, 1}, &none);
    against((rc_case){"block", NULL, 2}, &none);
    size_t u[5];
    for (int k = 1; k <= 4; k++) u[k] = against((rc_case){"block", "uniform", k}, &none);
    size_t fn = none.act_bytes;
    check(fs > 0 && fs < fn, "%s selective/none %.3f", "activation bytes selective < none:",
          (double)fs / fn);
    /* one micro-batch in flight: block 0's rerun set replaces its kept set */
    check(fa > 0 && fa < fn && f1 == fn, "%s block(all)/none %.3f",
          "activation bytes block(all) < block(1) = none (one in flight):", (double)fa / fn);
    check(u[1] == fa && u[1] < u[2] && u[2] < u[3] && u[3] == u[4], "%s uniform(2)/none %.3f",
          "activation bytes block(all) = uniform(1) < uniform(2) < uniform(3) = uniform(4):",
          (double)u[2] / fn);
    printf("  (bytes: none %zu, selective %zu, block 1 of 3 %zu, block all %zu, uniform 1/2/3/4 "
           "%zu/%zu/%zu/%zu)\n", fn, fs, f1, fa, u[1], u[2], u[3], u[4]);
    first_writes();
    refusals();
    free(none.grads);
    cb_comm_finalize();
    return fails != 0;
}
