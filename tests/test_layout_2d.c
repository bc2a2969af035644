/* The whole GPT on the 2-D layout against the serial model, without the
 * trainer: run under mpirun with a square number of ranks (tp = world).
 *   build/tests/test_layout_2d [--layers L] [--steps S]
 * Both models start from the same seed; each step runs two micro-batches
 * (gradient accumulation, loss scale 1/2) and a plain SGD update on the
 * local shards. Checks: every step's loss, every gathered gradient of step
 * 1, every gathered parameter after the last step (1e-5 relative, the max
 * error over the max magnitude per tensor); the per-rank bytes the linears
 * send for one forward + backward of a block against docs/parallelism.md's
 * 3 (q-1)/q^2 (7 N h + 12 h^2) elements; check() rejecting each
 * divisibility violation with CB_EINPUT and a message naming the flag. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/grid.h"
#include "layout/layout.h"
#include "model/gpt_internal.h"
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

/* max |got - want| / max |want| over n */
static double relerr(const float *got, const float *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)got[i] - want[i]));
        den = fmax(den, fabs((double)want[i]));
    }
    return num / (den > 0 ? den : 1);
}

/* Gathers block (params or grads layout) of m tensor by tensor and compares
 * with the serial model's block; returns the worst relative error (rank 0). */
static double compare_block(cb_gpt *m, const float *local, cb_gpt *s, const float *full_block,
                            char *worst, size_t wn) {
    double w = 0;
    for (int i = 0; i < gpt_ntensors(m); i++) {
        const cb_tensor_info *t = &gpt_tensors(m)[i];
        const cb_tensor_split *sp = &m->pt.split[i];
        int two = t->ndim == 2;
        int64_t R = two ? t->shape[0] : 1, C = two ? t->shape[1] : t->shape[0];
        float *full = malloc(sizeof(float) * R * C);
        cb_layout_gather(m->L, sp->kind, R, C, sp->parts, sp->parity, local + t->offset, full);
        if (rank0) {
            double e = relerr(full, full_block + cb_gpt_tensor(s, i)->offset, (size_t)(R * C));
            if (e >= w) {
                w = e;
                snprintf(worst, wn, "%s", t->name);
            }
        }
        free(full);
    }
    return w;
}

static void sgd(float *p, const float *g, size_t n, float lr) {
    for (size_t i = 0; i < n; i++) p[i] -= lr * g[i];
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
    cb_grid g;
    cb_layout *L = NULL;
    if (cb_grid_create(&g, 1, 1, W->size, CB_TP_2D, &e) || cb_layout_create(&g, &L, &e)) {
        if (rank0) printf("FAIL 2d layout on %d ranks: %s\n", W->size, e.msg);
        cb_comm_finalize();
        return 1;
    }
    int q = g.q, B = 2 * q, T = 16, N = B * T;
    cb_gpt_config cfg = {.n_layer = layers, .d_model = 16 * q, .n_head = 2 * q, .seq_len = T,
                         .vocab = 67};
    int C = cfg.d_model;
    check_errors(L, B, T, C, cfg.n_head, cfg.vocab);
    cb_gpt *s = NULL, *m = NULL;
    if (cb_gpt_create(&cfg, B, T, &s, &e) || gpt_create(&cfg, B, T, L, NULL, &m, &e)) {
        if (rank0) printf("FAIL 2d model q=%d: %s\n", q, e.msg);
        cb_comm_finalize();
        return 1;
    }
    if (rank0)
        printf("# 2d q=%d: L=%d C=%d NH=%d T=%d V=%d B=%d; local params %zu of %zu\n", q, layers,
               C, cfg.n_head, T, cfg.vocab, B, cb_gpt_num_params(m), cb_gpt_num_params(s));
    cb_gpt_init_random(s, 7);
    cb_gpt_init_random(m, 7);
    int *ids = malloc(sizeof(int) * 2 * N);
    cb_rng r;
    cb_rng_seed(&r, 11);
    char worst[64] = "";
    double lerr = 0;
    for (int step = 1; step <= steps; step++) {
        cb_gpt_zero_grad(s);
        cb_gpt_zero_grad(m);
        for (int micro = 0; micro < 2; micro++) {
            for (int i = 0; i < 2 * N; i++) ids[i] = (int)cb_rng_below(&r, cfg.vocab);
            float ls = cb_gpt_forward(s, ids, ids + N, B, T);
            float lm = cb_gpt_forward(m, ids, ids + N, B, T);
            lerr = fmax(lerr, fabs((double)lm - ls) / fabs(ls));
            if (rank0 && micro == 0 && (step == 1 || step == steps))
                printf("#   step %d loss serial %.7f 2d %.7f\n", step, ls, lm);
            cb_gpt_backward(s, 0.5f);
            cb_gpt_backward(m, 0.5f);
        }
        if (step == 1) {
            double ge = compare_block(m, cb_gpt_grads(m), s, cb_gpt_grads(s), worst, sizeof worst);
            report(ge <= TOL, "2d q=%.0f step 1 gradients of every tensor (2 micro-batches): "
                   "worst %.2e (tol %.0e)", q, ge, TOL);
            if (rank0) printf("#   worst tensor %s\n", worst);
        }
        sgd(cb_gpt_params(s), cb_gpt_grads(s), cb_gpt_num_params(s), 0.5f);
        sgd(cb_gpt_params(m), cb_gpt_grads(m), cb_gpt_num_params(m), 0.5f);
    }
    report(lerr <= TOL, "2d q=%.0f losses of %.0f steps x 2 micro-batches: worst rel %.2e", q,
           steps, lerr);
    double pe = compare_block(m, cb_gpt_params(m), s, cb_gpt_params(s), worst, sizeof worst);
    report(pe <= TOL, "2d q=%.0f parameters after %.0f SGD steps: worst %.2e", q, steps, pe);
    if (rank0) printf("#   worst tensor %s\n", worst);

    /* communication of one forward + backward, per rank */
    for (int i = 0; i < g.ncomms; i++) cb_comm_stats_reset(g.comms[i]);
    cb_gpt_zero_grad(m);
    cb_gpt_forward(m, ids, ids + N, B, T);
    cb_gpt_backward(m, 1.0f);
    const char *tags[] = {"linear.fwd", "linear.bwd", "norm.fwd", "norm.bwd", "embed.fwd",
                          "embed.bwd", "head.fwd", "head.bwd", "attn.fwd", "attn.bwd"};
    double by[10] = {0};
    for (int k = 0; k < 10; k++)
        by[k] = (double)(sent(&g.row, tags[k]) + sent(&g.col, tags[k]) + sent(&g.tpg, tags[k]));
    /* the SUMMA products, plus the bias-gradient all-reduces (9h/q per block) */
    double lin = (by[0] + by[1]) / 4 / layers, h = C;
    double summa = 3.0 * (q - 1) / ((double)q * q) * (7 * N * h + 12 * h * h);
    double bias = 2.0 * (q - 1) / q * (9 * h / q), want = summa + bias;
    double mx[10], lmin = lin;
    cb_comm_allreduce_f64(W, "test", by, mx, 10, CB_COMM_MAX);
    cb_comm_allreduce_f64(W, "test", &lin, &lmin, 1, CB_COMM_MIN);
    if (rank0)
        for (int k = 0; k < 10; k++)
            printf("#   %-10s max bytes sent per rank %.0f\n", tags[k], mx[k]);
    double lmax = (mx[0] + mx[1]) / 4 / layers;
    report(fabs(lmin - want) <= 0.005 * want && fabs(lmax - want) <= 0.005 * want,
           "2d linears: elements sent per rank per block %.0f = SUMMA 3(q-1)/q^2 (7Nh+12h^2) "
           "%.0f + bias all-reduces 2(q-1)/q 9h/q %.0f", lin, summa, bias);
    free(ids);
    cb_gpt_free(s);
    cb_gpt_free(m);
    cb_layout_free(L);
    cb_grid_free(&g);
    cb_comm_finalize();
    return fails != 0;
}
