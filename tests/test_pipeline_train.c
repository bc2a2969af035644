/* The pipeline trainer step (src/pipeline/pp_train.c) follows the single
 * process's trajectory: `test_pipeline_train DP PP TP MODE SCHEDULE M ZERO
 * RECOMPUTE` under mpirun (DP x PP x TP ranks) trains 30 steps of a small
 * GPT on fixed tokens with --batch B --micro-batches M and compares each
 * step's loss and gradient norm with cb_trainer (one process, --batch B
 * --grad-accum M, run on world rank 0), to 1e-5 relative. Then it saves
 * under the pipeline (weights and AdamW state) and world rank 0 loads the
 * merged file into a one-process model: every tensor present once and equal
 * to the reference's final parameters (1e-5 relative), as ||got - ref|| /
 * ||ref|| per tensor; the
 * key third of attn.c_attn.bias is exempt, as in tests/compare.py: its
 * gradient is zero in exact arithmetic (softmax ignores a per-row
 * constant), so its values are rounding noise amplified by Adam. Instead
 * the reference's step-1 gradient must show that: ||g_key|| / ||g_q,v||
 * <= 1e-4 in every layer. Without arguments: 1 W 1 1d 1f1b 4 0 none. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/pp_train.h"
#include "train/train.h"

enum { STEPS = 30, NTOK = 20000 };
static int fails, rank;

/* the key third of a c_attn.bias of n = 3C: [C, 2C) */
static int key_third(const char *name, size_t j, size_t n) {
    return strstr(name, "c_attn.bias") && j >= n / 3 && j < 2 * n / 3;
}

/* max over layers of ||g_key|| / ||g_q,v|| of c_attn.bias in a gradient */
static double key_grad_ratio(cb_gpt *m) {
    double worst = 0;
    for (int i = 0; i < cb_gpt_num_tensors(m); i++) {
        const cb_tensor_info *x = cb_gpt_tensor(m, i);
        if (!strstr(x->name, "c_attn.bias")) continue;
        const float *g = cb_gpt_grads(m) + x->offset;
        double k = 0, qv = 0;
        for (size_t j = 0; j < x->numel; j++)
            key_third(x->name, j, x->numel) ? (k += (double)g[j] * g[j]) : (qv += (double)g[j] * g[j]);
        worst = fmax(worst, sqrt(k / fmax(qv, 1e-300)));
    }
    return worst;
}

/* max over tensors of ||a - b|| / ||b||, the key third of c_attn.bias left out */
static double param_diff(cb_gpt *a, cb_gpt *b) {
    double worst = 0;
    for (int i = 0; i < cb_gpt_num_tensors(a); i++) {
        const cb_tensor_info *x = cb_gpt_tensor(a, i);
        const float *pa = cb_gpt_params(a) + x->offset, *pb = cb_gpt_params(b) + x->offset;
        double num = 0, den = 0;
        for (size_t j = 0; j < x->numel; j++) {
            if (key_third(x->name, j, x->numel)) continue;
            num += ((double)pa[j] - pb[j]) * ((double)pa[j] - pb[j]);
            den += (double)pb[j] * pb[j];
        }
        double r = sqrt(num) / (den > 0 ? sqrt(den) : 1);
        if (getenv("PP_TEST_VERBOSE") && r > 1e-6) printf("  %s: rel diff %.2e\n", x->name, r);
        worst = fmax(worst, r);
    }
    return worst;
}

static void check(int ok, const char *name, const char *fmt, double v) {
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok) fails++;
    if (rank) return;
    printf("%s %s: ", ok ? "PASS" : "FAIL", name);
    printf(fmt, v);
    printf("\n");
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
    double keyg = 0; /* step 1: the gradient is left in the model, scaled by the clip only */
    cb_trainer rt;
    if (rank == 0) {
        if (cb_trainer_init(&rt, &o, &data, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
        for (int s = 0; s < STEPS; s++) {
            cb_step_stats st;
            cb_trainer_step(&rt, &st);
            ref[s][0] = st.loss, ref[s][1] = st.grad_norm;
            if (s == 0) keyg = key_grad_ratio(rt.model);
        }
    }
    MPI_Bcast(ref, 2 * STEPS, MPI_FLOAT, 0, MPI_COMM_WORLD);
    MPI_Bcast(&keyg, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    check(keyg <= 1e-4, "reference: the key third of c_attn.bias is exempt below (its gradient "
          "is rounding noise): step-1 ||g_key||/||g_q,v||", "%.2e (tol 1e-4)", keyg);
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
    double worst = 0, bubble = 0;
    for (int s = 0; s < STEPS; s++) {
        cb_pp_step_stats st;
        cb_pp_trainer_step(&t, &ld, g.dpg.rank * t.rows, s, &st);
        worst = fmax(worst, fabs(st.loss - ref[s][0]) / fabs(ref[s][0]));
        worst = fmax(worst, fabs(st.grad_norm - ref[s][1]) / fabs(ref[s][1]));
        bubble += st.bubble_mean / STEPS;
        if (getenv("PP_TEST_VERBOSE") && !rank) printf("  step %d loss %.9g ref %.9g norm %.9g ref %.9g\n", s, st.loss, ref[s][0], st.grad_norm, ref[s][1]);
    }
    char what[300];
    snprintf(what, sizeof what, "%s: %d-step loss and grad norm = one process (accum %d)", name,
             STEPS, M);
    check(worst <= 1e-5, what, "max rel diff %.2e (tol 1e-5)", worst);
    char path[64];
    snprintf(path, sizeof path, "/tmp/cubist_pp_test_%d.st", (int)getppid());
    const char *meta[] = {"step", "30"};
    rc = cb_pp_trainer_save(&t, path, meta, 1, &e);
    double pd = 0;
    int have = 0;
    if (!rc && rank == 0) {
        cb_gpt *m;
        rc = cb_gpt_create(&o.model, o.B, o.T, &m, &e);
        if (!rc) rc = cb_gpt_load(m, path, &e);
        cb_st_file f;
        if (!rc && !cb_st_open(path, &f, &e)) {
            have = f.n == cb_gpt_num_tensors(m);
            cb_st_close(&f);
        }
        if (!rc) pd = param_diff(m, rt.model);
        cb_gpt_free(m);
        char sp[80];
        snprintf(sp, sizeof sp, "%s.state", path);
        have &= access(sp, R_OK) == 0;
        unlink(path);
        unlink(sp);
    }
    MPI_Bcast(&pd, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(&have, 1, MPI_INT, 0, MPI_COMM_WORLD);
    snprintf(what, sizeof what, "%s: checkpoint saved under pp loads at pp=1, every tensor once, "
             "final parameters = one process", name);
    /* per tensor in L2, the key third left out, every configuration ends
     * within 2.4e-6 of the one-process parameters (measured: dp1 x pp2 x 3d8
     * 2.34e-6, dp2 x pp2 x 1d2 2.01e-6); the element-wise maximum with that
     * third in reached 7.9e-5 (dp2 x 1d2 M=8), which once needed 2e-4 here */
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
