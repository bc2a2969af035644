/* The GPT graph on the 2-D layout against the serial one, without the
 * trainer: run under mpirun with a square number of ranks (tp = world).
 *   build/tests/test_layout_2d [--layers L] [--steps S]
 * Both models are cb_model_declare_gpt built from the same seed (the same
 * values under every layout); each step runs two micro-batches
 * (cb_graph_grad_step: their gradients averaged) and a plain SGD update on
 * the local shards. Checks: every step's loss, every gathered gradient of
 * step 1, every gathered parameter after the last step (1e-5 relative,
 * the max error over the max magnitude per tensor); the per-rank bytes the
 * linears send for one forward + backward of a block against
 * docs/parallelism.md's 3 (q-1)/q^2 (7 N h + 12 h^2) elements; check()
 * rejecting each divisibility violation with CB_EINPUT and a message
 * naming the flag. */
#include "gpt_pair.h"
#include "util/rng.h"

#define TOL 1e-5

static int fails, rank0;

static void report(int ok, const char *fmt, double a, double b, double c) {
    if (!ok) fails++;
    if (!rank0) return;
    printf("%s ", ok ? "PASS" : "FAIL");
    printf(fmt, a, b, c);
    printf("\n");
}

static uint64_t sent(cb_comm *c, const char *tag) {
    const cb_comm_stat *s = cb_comm_stats_find(c, tag);
    return s ? s->bytes_sent : 0;
}

/* check() must refuse each violated constraint with CB_EINPUT */
static void check_errors(cb_layout *L, int B, int T, int C, int NH, int V) {
    int q = L->q;
    struct {
        int B, C, NH;
        const char *flag;
    } bad[] = {{B + 1, C, NH, "batch"}, {B, C + 1, NH, "d_model"}, {B, C, NH + 1, "heads"}};
    for (int i = 0; i < 3; i++) {
        cb_err e = {0};
        int rc = L->ops->check(L, bad[i].B, T, bad[i].C, bad[i].NH, V, &e);
        int ok = rc == CB_EINPUT && strstr(e.msg, bad[i].flag) && !strchr(e.msg, '\n');
        if (!ok) fails++;
        if (rank0)
            printf("%s 2d check() q=%d rejects %s (B=%d C=%d NH=%d): rc %d \"%s\"\n",
                   ok ? "PASS" : "FAIL", q, bad[i].flag, bad[i].B, bad[i].C, bad[i].NH, rc, e.msg);
    }
    cb_err e = {0};
    int rc = L->ops->check(L, B, T, C, NH, V, &e);
    if (rc) fails++;
    if (rank0)
        printf("%s 2d check() q=%d accepts B=%d C=%d NH=%d V=%d (vocabulary padded to %d)\n",
               rc ? "FAIL" : "PASS", q, B, C, NH, V, (V + q - 1) / q * q);
}

static void report_worst(cb_model *m, int i) {
    if (rank0) printf("#   worst tensor %s\n", m->pt.t[i].name);
}

int main(int argc, char **argv) {
    cb_err e = {0};
    if (cb_comm_init(&argc, &argv, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    cb_comm *W = cb_comm_world();
    rank0 = W->rank == 0;
    int layers = 2, steps = 5;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
    }
    cb_dist *ds = NULL, *d = NULL;
    if (cb_dist_tensor(&d, W->size, CB_TP_2D, &e) || cb_dist_tensor(&ds, 0, CB_TP_1D, &e)) {
        if (rank0) printf("FAIL 2d layout on %d ranks: %s\n", W->size, e.msg);
        cb_comm_finalize();
        return 1;
    }
    cb_layout *L = d->L;
    cb_grid *g = &d->g;
    int q = g->q, B = 2 * q, T = 16, N = B * T;
    cb_gpt_config cfg = {.n_layer = layers, .d_model = 16 * q, .n_head = 2 * q, .seq_len = T,
                         .vocab = 67};
    int C = cfg.d_model;
    check_errors(L, B, T, C, cfg.n_head, cfg.vocab);
    cb_model *s = pair_build(ds, &cfg, B, 2, 7, &e), *m = s ? pair_build(d, &cfg, B, 2, 7, &e) : NULL;
    if (!m) {
        if (rank0) printf("FAIL 2d model q=%d: %s\n", q, e.msg);
        cb_comm_finalize();
        return 1;
    }
    if (rank0)
        printf("# 2d q=%d: L=%d C=%d NH=%d T=%d V=%d B=%d x 2 micro-batches; local params %zu of %zu\n",
               q, layers, C, cfg.n_head, T, cfg.vocab, B, m->pt.nparams, s->pt.nparams);
    int *ids = malloc(sizeof(int) * 4 * N), *tg = ids + 2 * N, wi = 0;
    cb_rng r;
    cb_rng_seed(&r, 11);
    double lerr = 0;
    for (int step = 1; step <= steps; step++) {
        for (int i = 0; i < 4 * N; i++) ids[i] = (int)cb_rng_below(&r, cfg.vocab);
        float ls = pair_grads(s, ids, tg), lm = pair_grads(m, ids, tg);
        lerr = fmax(lerr, fabs((double)lm - ls) / fabs(ls));
        if (rank0 && (step == 1 || step == steps))
            printf("#   step %d loss serial %.7f 2d %.7f\n", step, ls, lm);
        if (step == 1) {
            double ge = pair_diff(s, m, s->grads, m->grads, &wi);
            report(ge <= TOL, "2d q=%.0f step 1 gradients of every tensor (2 micro-batches): "
                   "worst %.2e (tol %.0e)", q, ge, TOL);
            report_worst(m, wi);
        }
        pair_sgd(s, 0.5f);
        pair_sgd(m, 0.5f);
    }
    report(lerr <= TOL, "2d q=%.0f losses of %.0f steps x 2 micro-batches: worst rel %.2e", q,
           steps, lerr);
    double pe = pair_diff(s, m, s->params, m->params, &wi);
    report(pe <= TOL, "2d q=%.0f parameters after %.0f SGD steps: worst %.2e", q, steps, pe);
    report_worst(m, wi);

    /* communication of one forward + backward (of the two micro-batches), per rank */
    for (int i = 0; i < g->ncomms; i++) cb_comm_stats_reset(g->comms[i]);
    pair_grads(m, ids, tg);
    const char *tags[] = {"linear.fwd", "linear.bwd", "norm.fwd", "norm.bwd", "embed.fwd",
                          "embed.bwd", "head.fwd", "head.bwd", "attn.fwd", "attn.bwd"};
    double by[10] = {0};
    for (int k = 0; k < 10; k++)
        by[k] = (double)(sent(&g->row, tags[k]) + sent(&g->col, tags[k]) + sent(&g->tpg, tags[k])) / 2;
    /* the SUMMA products, plus the bias-gradient all-reduces (9h/q per block) */
    double lin = (by[0] + by[1]) / 4 / layers, h = C;
    double summa = 3.0 * (q - 1) / ((double)q * q) * (7 * N * h + 12 * h * h);
    double bias = 2.0 * (q - 1) / q * (9 * h / q), want = summa + bias;
    double mx[10], lmin = lin;
    cb_comm_allreduce_f64(W, "test", by, mx, 10, CB_COMM_MAX);
    cb_comm_allreduce_f64(W, "test", &lin, &lmin, 1, CB_COMM_MIN);
    if (rank0)
        for (int k = 0; k < 10; k++)
            printf("#   %-10s max bytes sent per rank per micro-batch %.0f\n", tags[k], mx[k]);
    double lmax = (mx[0] + mx[1]) / 4 / layers;
    report(fabs(lmin - want) <= 0.005 * want && fabs(lmax - want) <= 0.005 * want,
           "2d linears: elements sent per rank per block %.0f = SUMMA 3(q-1)/q^2 (7Nh+12h^2) "
           "%.0f + bias all-reduces 2(q-1)/q 9h/q %.0f", lin, summa, bias);
    free(ids);
    cb_model_free(s);
    cb_model_free(m);
    cb_dist_free(ds);
    cb_dist_free(d);
    cb_comm_finalize();
    return fails != 0;
}
