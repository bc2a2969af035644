/* The pipeline trainer step (src/pipeline/pp_train.c) follows the single
 * process's trajectory: `test_pipeline_train DP PP TP MODE SCHEDULE M ZERO
 * RECOMPUTE` under mpirun (DP x PP x TP ranks) trains 30 steps of a small
 * GPT on fixed tokens with --batch B --micro-batches M and compares each
 * step's loss and gradient norm with cb_trainer (one process, --batch B
 * --grad-accum M, run on world rank 0), to 1e-5 relative. Then it saves
 * under the pipeline (weights and AdamW state) and world rank 0 loads the
 * merged file into a one-process model: every tensor present once and
 * equal, to 1e-5 relative (per tensor ||a-b|| / ||b||), to the final
 * parameters of the same dp x tp layout at pp=1 (trained on the ranks of
 * pipeline stage 0; the one process when dp = tp = 1). The key third of
 * each attn.c_attn.bias is left out of that comparison: its gradient is
 * zero in exact arithmetic (softmax ignores the constant q . b_k added to
 * a row of scores), so its values are rounding noise that Adam turns into
 * steps; instead its step-1 gradient must be below 1e-5 of the bias's
 * largest. Without arguments: 1 W 1 1d 1f1b 4 0 none. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/pp_train.h"
#include "train/train.h"

enum { STEPS = 30, NTOK = 20000 };
static int fails, rank;

static void check(int ok, const char *name, const char *fmt, double v) {
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok) fails++;
    if (rank) return;
    printf("%s %s: ", ok ? "PASS" : "FAIL", name);
    printf(fmt, v);
    printf("\n");
}

/* The largest |gradient| of the key third of every c_attn.bias over the
 * largest of the whole bias, this rank's chunks, max over the world; under
 * ZeRO only this rank's optimizer range holds the reduced gradient. Each
 * tensor shard holds [q | k | v] of its heads (parts 3), so the key third
 * is the middle third of the local shard. Zero in exact arithmetic: softmax
 * ignores the constant q . b_k added to a row of scores. */
static double key_bias_grad(const cb_pp_trainer *t) {
    double v[2] = {0, 0}; /* -max key, max all: one MAX reduction */
    for (int c = 0; c < t->pipe.o.v; c++) {
        const cb_gpt *m = t->pipe.ch[c].m;
        for (int i = 0; i < m->pt.n; i++) {
            const cb_tensor_info *x = &m->pt.t[i];
            if (!strstr(x->name, "c_attn.bias")) continue;
            const float *gr = m->grads + x->offset;
            for (size_t j = 0; j < x->numel; j++) {
                int key = j >= x->numel / 3 && j < 2 * x->numel / 3;
                if (x->offset + j < t->opt[c].lo || x->offset + j >= t->opt[c].hi) continue;
                if (key) v[0] = fmax(v[0], fabs(gr[j]));
                v[1] = fmax(v[1], fabs(gr[j]));
            }
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return v[1] > 0 ? v[0] / v[1] : 1;
}

/* A barrier whose waiting ranks sleep instead of spinning: the ranks that
 * wait for others' work must not take the cores (oversubscribed runs). */
static void idle_barrier(void) {
    MPI_Request r;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &r);
    while (MPI_Test(&r, &done, MPI_STATUS_IGNORE), !done) usleep(2000);
}

/* The same dp x tp layout at pp = 1 on the ranks of pipeline stage 0 (its
 * data-parallel and tensor groups are that layout's), 30 steps, saved to
 * path; the other ranks wait. */
static int layout_reference(const cb_train_opts *o, const cb_tokens *data, cb_grid *g, int zero,
                            const char *path, cb_err *e) {
    int rc = CB_OK;
    if (g->at.p == 0) {
        cb_train_opts r = *o;
        cb_layout *L;
        cb_trainer lt;
        r.zero = zero;
        rc = cb_layout_create(g, &L, e);
        if (!rc) rc = cb_trainer_init_tp(&lt, &r, data, &g->dpg, L, &g->tpg, e);
        for (int s = 0; !rc && s < STEPS; s++) {
            cb_step_stats st;
            cb_trainer_step(&lt, &st);
        }
        if (!rc) rc = cb_trainer_save(&lt, path, e);
        cb_trainer_free(&lt);
        cb_layout_free(L);
    }
    idle_barrier();
    return rc;
}

/* Largest per-tensor ||a - b|| / ||b|| (L2, as tests/compare.py) of the pipeline's merged file
 * against the reference (the file ref_path, else the model ref), the key
 * third of c_attn.bias left out (see key_bias_grad); *have: every tensor
 * once and the .state beside it. Removes the files. */
static double final_diff(const cb_gpt_config *c, int B, int T, const char *path,
                         const char *ref_path, const cb_gpt *ref, int *have) {
    cb_gpt *m, *r = NULL;
    cb_err e;
    double pd = INFINITY;
    int rc = cb_gpt_create(c, B, T, &m, &e);
    if (!rc) rc = cb_gpt_load(m, path, &e);
    if (!rc && ref_path && !(rc = cb_gpt_create(c, B, T, &r, &e))) rc = cb_gpt_load(r, ref_path, &e);
    cb_st_file f;
    *have = 0;
    if (!rc && !cb_st_open(path, &f, &e)) {
        *have = f.n == cb_gpt_num_tensors(m);
        cb_st_close(&f);
    }
    if (!rc) pd = 0;
    for (int i = 0; !rc && i < cb_gpt_num_tensors(m); i++) {
        const cb_tensor_info *x = cb_gpt_tensor(m, i);
        const float *a = cb_gpt_params(m) + x->offset;
        const float *b = (r ? cb_gpt_params(r) : ((cb_gpt *)ref)->params) + x->offset;
        int kb = strstr(x->name, "c_attn.bias") != NULL;
        double num = 0, den = 0;
        for (size_t j = 0; j < x->numel; j++) {
            if (kb && j >= x->numel / 3 && j < 2 * x->numel / 3) continue;
            num += ((double)a[j] - b[j]) * ((double)a[j] - b[j]);
            den += (double)b[j] * b[j];
        }
        num = sqrt(num), den = sqrt(den);
        if (getenv("PP_TEST_VERBOSE") && num / (den > 0 ? den : 1) > 1e-6)
            printf("  %s: rel diff %.2e\n", x->name, num / (den > 0 ? den : 1));
        pd = fmax(pd, num / (den > 0 ? den : 1));
    }
    if (rc) printf("  %s\n", e.msg);
    cb_gpt_free(m);
    cb_gpt_free(r);
    const char *paths[2] = {path, ref_path};
    for (int k = 0; k < 2 && paths[k]; k++) {
        char sp[80];
        snprintf(sp, sizeof sp, "%s.state", paths[k]);
        if (k == 0) *have &= access(sp, R_OK) == 0;
        unlink(paths[k]);
        unlink(sp);
    }
    return pd;
}

int main(int argc, char **argv) {
    cb_err e = {0};
    if (cb_comm_init(&argc, &argv, &e)) return 1;
    rank = cb_comm_world()->rank;
    char wsz[16];
    snprintf(wsz, sizeof wsz, "%d", cb_comm_world()->size);
    char *dflt[] = {argv[0], "1", wsz, "1", "1d", "1f1b", "4", "0", "none"};
    if (argc < 9) argv = dflt; /* no arguments: every rank a pipeline stage */
    int dp = atoi(argv[1]), pp = atoi(argv[2]), tp = atoi(argv[3]), M = atoi(argv[6]);
    cb_pp_opts po;
    cb_pp_opts_defaults(&po);
    po.schedule = argv[5];
    po.micro_batches = M;
    po.recompute = argv[8];
    po.no_profile = 1;
    cb_train_opts o;
    cb_train_defaults(&o);
    o.model = (cb_gpt_config){6, 32, 4, 16, 64};
    o.B = 4;
    o.T = 16;
    o.accum = M;
    o.steps = STEPS;
    o.seed = 5;
    o.opt.lr = 1e-3f, o.opt.min_lr = 1e-4f, o.opt.warmup = 3, o.opt.clip = 0.5f, o.opt.steps = STEPS;
    o.opt.eps = 1e-6f;
    static uint16_t tok[NTOK];
    /* random tokens, as the data-parallel tests use: a learnable pattern makes
     * the trajectory chaotic enough that fp32 reordering alone (the
     * data-parallel trainer's too) drifts past 1e-5 by step 5 */
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < NTOK; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (uint16_t)(x % 64);
    }
    cb_tokens data = {.tok = tok, .n = NTOK};
    char name[200];
    snprintf(name, sizeof name, "dp%d x pp%d x %s%d %s M=%d zero %s recompute %s", dp, pp, argv[4],
             tp, argv[5], M, argv[7], argv[8]);
    /* the reference, on world rank 0 */
    float ref[STEPS][2] = {{0}};
    cb_trainer rt;
    if (rank == 0) {
        if (cb_trainer_init(&rt, &o, &data, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
        for (int s = 0; s < STEPS; s++) {
            cb_step_stats st;
            cb_trainer_step(&rt, &st);
            ref[s][0] = st.loss, ref[s][1] = st.grad_norm;
        }
    }
    idle_barrier(); /* the other ranks sleep while rank 0 trains the reference */
    MPI_Bcast(ref, 2 * STEPS, MPI_FLOAT, 0, MPI_COMM_WORLD);
    cb_grid g;
    cb_tp_mode mode;
    cb_layout *L;
    if (cb_grid_parse_mode(argv[4], &mode, &e) || cb_grid_create(&g, dp, pp, tp, mode, &e) ||
        cb_layout_create(&g, &L, &e))
        return fprintf(stderr, "%s\n", e.msg), 1;
    cb_pp_trainer t;
    cb_loader ld;
    int rc = cb_pp_trainer_init(&t, &po, &o.model, o.B, o.T, 1, &g, L, &o.opt, o.seed,
                                atoi(argv[7]), 0.01, &e);
    if (!rc) rc = cb_loader_init(&ld, &data, o.B, o.T, 1, o.seed, "mem", &e);
    rc = cb_comm_agree_err(&g.world, rc ? &e : (e.code = 0, &e));
    if (rc) {
        check(0, name, "%g: init failed", 0);
        if (!rank) printf("  %s\n", e.msg);
        return 1;
    }
    double worst = 0, bubble = 0, kb = 0;
    for (int s = 0; s < STEPS; s++) {
        cb_pp_step_stats st;
        cb_pp_trainer_step(&t, &ld, g.dpg.rank * t.rows, s, &st);
        if (s == 0) kb = key_bias_grad(&t);
        worst = fmax(worst, fabs(st.loss - ref[s][0]) / fabs(ref[s][0]));
        worst = fmax(worst, fabs(st.grad_norm - ref[s][1]) / fabs(ref[s][1]));
        bubble += st.bubble_mean / STEPS;
        if (getenv("PP_TEST_VERBOSE") && !rank) printf("  step %d loss %.9g ref %.9g norm %.9g ref %.9g\n", s, st.loss, ref[s][0], st.grad_norm, ref[s][1]);
    }
    char what[512];
    snprintf(what, sizeof what, "%s: %d-step loss and grad norm = one process (accum %d)", name,
             STEPS, M);
    check(worst <= 1e-5, what, "max rel diff %.2e (tol 1e-5)", worst);
    snprintf(what, sizeof what, "%s: step 1 gradient of the key third of c_attn.bias is rounding "
             "noise (so its parameters are not compared)", name);
    check(kb <= 1e-5, what, "max |g key| / max |g c_attn.bias| %.1e (tol 1e-5)", kb);
    char path[64], rpath[64];
    snprintf(path, sizeof path, "/tmp/cubist_pp_test_%d.st", (int)getppid());
    snprintf(rpath, sizeof rpath, "/tmp/cubist_pp_test_%d_ref.st", (int)getppid());
    const char *meta[] = {"step", "30"};
    rc = cb_pp_trainer_save(&t, path, meta, 1, &e);
    int same_layout = dp > 1 || tp > 1; /* else the one process is that layout */
    if (!rc && same_layout) rc = layout_reference(&o, &data, &g, atoi(argv[7]), rpath, &e);
    rc = cb_comm_agree_err(&g.world, rc ? &e : (e.code = 0, &e));
    double pd = 0;
    int have = 0;
    if (!rc && rank == 0) pd = final_diff(&o.model, o.B, o.T, path, same_layout ? rpath : NULL, rt.model, &have);
    MPI_Bcast(&pd, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(&have, 1, MPI_INT, 0, MPI_COMM_WORLD);
    /* Against the same dp x tp layout at pp = 1 (trained here on the ranks
     * of pipeline stage 0): only the pipeline differs, so 1e-5 holds. The
     * one process is ~1e-4 away from any tp/dp layout's parameters after
     * 30 steps (fp32 regrouping amplified by Adam; dp2 x 1d2 M=8: 7.9e-5 at
     * pp=1 and pp=2), while the losses and norms above stay within 1e-5. */
    snprintf(what, sizeof what, "%s: checkpoint saved under pp loads at pp=1, every tensor once, "
             "final parameters = %s", name, same_layout ? "the same dp x tp layout at pp=1" : "one process");
    check(!rc && have && pd <= 1e-5, what, "max rel diff %.2e (tol 1e-5)", pd);
    if (rank == 0) printf("  (%s: mean bubble %.3f, formula %.3f)\n", name, bubble,
                          cb_pp_bubble_formula(pp, t.pipe.o.v, M));
    if (rank == 0) cb_trainer_free(&rt);
    cb_pp_trainer_free(&t);
    cb_layout_free(L);
    cb_grid_free(&g);
    cb_comm_finalize();
    return fails != 0;
}
