/* The pipeline trainer step (src/pipeline/pp_train.c) follows the single
 * process's trajectory: `test_pipeline_train DP PP TP MODE SCHEDULE M ZERO
 * RECOMPUTE` under mpirun (DP x PP x TP ranks) trains 30 steps of a small
 * GPT on fixed tokens with --batch B --micro-batches M and compares each
 * step's loss and gradient norm with cb_trainer (one process, --batch B
 * --grad-accum M, run on world rank 0), to 1e-5 relative. Then it saves
 * under the pipeline (weights and AdamW state) and world rank 0 loads the
 * merged file into a one-process model: every tensor present once and equal
 * to the reference's final parameters (1e-5 relative, 2e-4 with tensor or
 * data parallelism, see below; the key third of
 * attn.c_attn.bias, whose gradient is rounding noise, to an absolute bound
 * as tests/compare.py does). Without arguments: 1 W 1 1d 1f1b 4 0 none. */
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
        for (int i = 0; !rc && i < cb_gpt_num_tensors(m); i++) {
            const cb_tensor_info *x = cb_gpt_tensor(m, i);
            const float *a = cb_gpt_params(m) + x->offset, *b = cb_gpt_params(rt.model) + x->offset;
            int kb = strstr(x->name, "c_attn.bias") != NULL;
            double num = 0, den = 0;
            for (size_t j = 0; j < x->numel; j++) {
                int key = kb && j >= x->numel / 3 && j < 2 * x->numel / 3;
                if (key && fabs(a[j] - b[j]) < 0.05) continue; /* noise gradient, see above */
                num = fmax(num, fabs(a[j] - b[j]));
                den = fmax(den, fabs(b[j]));
            }
            if (getenv("PP_TEST_VERBOSE") && num / (den > 0 ? den : 1) > 1e-6)
                printf("  %s: rel diff %.2e\n", x->name, num / (den > 0 ? den : 1));
            pd = fmax(pd, num / (den > 0 ? den : 1));
        }
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
    /* with tensor or data parallelism the same layout at pp=1 already ends
     * ~1e-4 from the one-process parameters (fp32 reordering amplified by
     * Adam over 30 steps, measured: dp2 x 1d2 M=8 7.9e-5 at pp=1 and pp=2);
     * the losses and norms above stay within 1e-5 either way */
    double ptol = dp == 1 && tp == 1 ? 1e-5 : 2e-4;
    char fmt[64];
    snprintf(fmt, sizeof fmt, "max rel diff %%.2e (tol %.0e)", ptol);
    check(!rc && have && pd <= ptol, what, fmt, pd);
    if (rank == 0) printf("  (%s: mean bubble %.3f, formula %.3f)\n", name, bubble,
                          cb_pp_bubble_formula(pp, t.pipe.o.v, M));
    if (rank == 0) cb_trainer_free(&rt);
    cb_pp_trainer_free(&t);
    cb_layout_free(L);
    cb_grid_free(&g);
    cb_comm_finalize();
    return fails != 0;
}
