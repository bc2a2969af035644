/* The pipeline engine across ranks equals the whole model: run under
 * `mpirun -np W` (W = pp x tp; W = 1 runs pp = 1, with virtual stages
 * sending to itself). For each schedule, micro-batch count (M = 1, 4, 6, 8:
 * interleaved v=2 also with M < p and M not a multiple of p), partition and
 * recompute setting, one step of M micro-batches through cb_pipe_step gives
 * the whole model's summed loss on every rank, every gradient (the tied wte
 * summed on both of its stages) and the global gradient norm (owned shards,
 * wte once, summed over pp x tp), to 1e-5 relative. Also: the in-flight
 * bound of each schedule on every rank, 1F1B's smaller activation memory
 * than GPipe's, and selective recompute against none on the same pipeline
 * (1f1b, M=4): loss and every local gradient equal to 1e-6 (the same
 * kernels rerun: 0 expected), activation memory lower on stage 0 and
 * nowhere higher. Usage: test_pipeline [TP [1d|2d|3d]]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/grid.h"
#include "pipeline/partition.h"
#include "pipeline/pipeline.h"

static int fails, world_rank;
static cb_grid G;
static cb_layout *LT;

static void check(int ok, const char *name, const char *fmt, double v) {
    int all = ok;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) fails++;
    if (world_rank) return;
    printf("%s %s: ", all ? "PASS" : "FAIL", name);
    printf(fmt, v);
    printf("\n");
}

static const cb_gpt_config CFG = {6, 32, 4, 8, 64};
enum { B = 4, T = 8 };

static double rel(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / (den > 0 ? den : 1);
}

static const cb_tensor_info *find(const cb_gpt *m, const char *name) {
    for (int i = 0; i < m->pt.n; i++)
        if (!strcmp(m->pt.t[i].name, name)) return &m->pt.t[i];
    return NULL;
}

/* Worst relative gradient difference of this rank's chunks against the
 * whole model (gathered over the tensor group, compared on its rank 0). */
static double grad_diff(const cb_pipe *pp, const cb_gpt *whole) {
    double worst = 0;
    for (int c = 0; c < pp->o.v; c++) {
        const cb_gpt *m = pp->ch[c].m;
        for (int i = 0; i < m->pt.n; i++) {
            const cb_tensor_info *t = &m->pt.t[i], *w = find(whole, t->name);
            const cb_tensor_split *sp = &m->pt.split[i];
            size_t n = w ? w->numel : 1;
            float *full = malloc(sizeof(float) * n);
            int two = t->ndim == 2;
            cb_layout_gather(m->L, sp->kind, two ? t->shape[0] : 1, two ? t->shape[1] : t->shape[0],
                             sp->parts, sp->parity, m->grads + t->offset, full);
            if (!w) worst = INFINITY;
            else if (m->L->tp_rank == 0) worst = fmax(worst, rel(full, whole->grads + w->offset, n));
            free(full);
        }
    }
    return worst;
}

typedef struct pcase {
    cb_pp_kind kind;
    int v, M, recompute;
    const char *partition; /* "auto", "equal" or a list */
} pcase;

/* The pipeline of case k on the grid, every chunk from the serial weights. */
static int make_pipe(const pcase *k, cb_pipe *pp, cb_err *e) {
    int p = G.pp, v = k->v, nvs = p * v, nmod = CFG.n_layer + 2;
    cb_pp_module mods[16];
    double cost[16];
    cb_pp_gpt_modules(&CFG, B, T, NULL, nvs, mods);
    cb_pp_module_costs(mods, nmod, 0.8, cost);
    cb_pp_partition pt;
    int rc = !strcmp(k->partition, "auto") ? cb_pp_partition_auto(cost, nmod, nvs, &pt, e)
             : !strcmp(k->partition, "equal") ? cb_pp_partition_equal(cost, nmod, nvs, &pt, e)
                                               : cb_pp_partition_parse(k->partition, cost, nmod, nvs, &pt, e);
    cb_pp_config o = {k->kind, p, v, k->M, pt.bound, {k->recompute, 0, 0}};
    return rc ? rc : cb_pipe_init(pp, &G.ppg, &CFG, B, T, LT, &o, 5, e);
}

static void run(const pcase *k, const cb_gpt *whole, double wloss, double wnorm, int ids[][B * T],
                int tg[][B * T], double *act_bytes) {
    int p = G.pp, v = k->v;
    char name[160];
    snprintf(name, sizeof name, "pp=%d tp=%d %s v=%d M=%d recompute %d partition %s", p, G.tp,
             cb_pp_schedule_name(k->kind), v, k->M, k->recompute, k->partition);
    cb_pipe pp;
    cb_err e;
    if (make_pipe(k, &pp, &e)) {
        check(0, name, "%g (init failed)", 0);
        if (!world_rank) printf("  %s\n", e.msg);
        return;
    }
    cb_pipe_zero_grad(&pp);
    double loss = cb_pipe_step(&pp, &ids[0][0], &tg[0][0], 1.0f / k->M, NULL, NULL);
    double ss = cb_pipe_grad_sumsq(&pp);
    cb_comm_allreduce_f64(&G.model, "norm", NULL, &ss, 1, CB_COMM_SUM);
    double gd = grad_diff(&pp, whole), lrel = fabs(loss / k->M - wloss) / fabs(wloss);
    double nrel = fabs(sqrt(ss) - wnorm) / wnorm;
    double worst = fmax(gd, fmax(lrel, nrel));
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    char full[400];
    snprintf(full, sizeof full, "%s: loss, every gradient, grad norm", name);
    check(worst <= 1e-5, full, "max rel diff %.2e (tol 1e-5)", worst);
    int bound = cb_pp_inflight_bound(k->kind, p, v, k->M, pp.s);
    snprintf(full, sizeof full, "%s: in flight <= schedule bound", name);
    check(pp.st.max_inflight <= bound, full, "rank 0 holds %g", pp.st.max_inflight);
    *act_bytes = pp.st.act_bytes;
    /* the log's pp_act_bytes: every chunk's planned slots, its dy and dx
     * message buffers per slot, and the tied-gradient buffer at the ends */
    double want = 0, ok;
    for (int c = 0; c < v; c++)
        want += 4.0 * pp.ch[c].m->act_floats + 4.0 * 2 * pp.ch[c].nslots * pp.act;
    if (pp.tie_buf) want += 4.0 * (pp.ch[pp.tie_first >= 0 ? pp.tie_first : pp.tie_last].m->pt.t[0].numel + 1);
    ok = pp.st.act_bytes == want &&
         (k->recompute ? pp.st.act_bytes_none >= want : pp.st.act_bytes_none == want);
    snprintf(full, sizeof full, "%s: planned activation bytes = slots + message buffers + tied "
             "buffer; none plans %s", name, k->recompute ? "no less" : "the same");
    check(ok, full, "rank 0: %.0f bytes", pp.st.act_bytes);
    cb_pipe_free(&pp);
}

/* Selective recompute against none, 1f1b M=4, the same partition and grid. */
static void selective_vs_none(int ids[][B * T], int tg[][B * T]) {
    pcase k[2] = {{CB_PP_1F1B, 1, 4, GPT_RECOMPUTE_NONE, "auto"},
                  {CB_PP_1F1B, 1, 4, GPT_RECOMPUTE_SELECTIVE, "auto"}};
    cb_pipe pp[2];
    double loss[2];
    char name[160];
    snprintf(name, sizeof name, "pp=%d tp=%d 1f1b M=4: recompute selective against none", G.pp,
             G.tp);
    for (int i = 0; i < 2; i++) {
        cb_err e;
        if (make_pipe(&k[i], &pp[i], &e)) {
            check(0, name, "%g (init failed)", 0);
            if (!world_rank) printf("  %s\n", e.msg);
            if (i) cb_pipe_free(&pp[0]);
            return;
        }
        cb_pipe_zero_grad(&pp[i]);
        loss[i] = cb_pipe_step(&pp[i], &ids[0][0], &tg[0][0], 1.0f / 4, NULL, NULL);
    }
    double d = fabs(loss[1] - loss[0]) / fabs(loss[0]);
    for (int c = 0; c < pp[0].o.v; c++) {
        const cb_gpt *a = pp[0].ch[c].m, *s = pp[1].ch[c].m;
        d = fmax(d, rel(s->grads, a->grads, a->pt.nparams));
    }
    MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    char full[400];
    snprintf(full, sizeof full, "%s: loss and every gradient", name);
    check(d <= 1e-6, full, "max rel diff %.2e (tol 1e-6)", d);
    /* stage 0 keeps p micro-batches in flight: selective saves there; a
     * stage with one block and one slot keeps the same */
    double ratio = pp[1].st.act_bytes / pp[0].st.act_bytes, r[2] = {ratio, 0};
    if (G.ppg.rank == 0) r[1] = ratio;
    MPI_Allreduce(MPI_IN_PLACE, r, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    snprintf(full, sizeof full, "%s: activation memory < none on stage 0, <= on every stage",
             name);
    check(r[1] < 1 && r[0] <= 1, full, "stage 0 selective/none = %.3f", r[1]);
    cb_pipe_free(&pp[0]);
    cb_pipe_free(&pp[1]);
}

int main(int argc, char **argv) {
    cb_err e;
    if (cb_comm_init(&argc, &argv, &e)) return 1;
    world_rank = cb_comm_world()->rank;
    int W = cb_comm_world()->size, tp = argc > 1 ? atoi(argv[1]) : 1;
    cb_tp_mode mode = CB_TP_1D;
    if (argc > 2 && cb_grid_parse_mode(argv[2], &mode, &e)) return 1;
    if (cb_grid_create(&G, 1, W / tp, tp, mode, &e) || cb_layout_create(&G, &LT, &e)) {
        if (!world_rank) printf("FAIL grid: %s\n", e.msg);
        return 1;
    }
    cb_gpt *whole;
    cb_layout *ls = cb_layout_serial();
    if (gpt_create(&CFG, B, T, ls, NULL, &whole, &e)) return 1;
    cb_gpt_init_random(whole, 5);
    enum { MAXM = 8 };
    static int ids[MAXM][B * T], tg[MAXM][B * T];
    for (int k = 0; k < MAXM; k++)
        for (int i = 0; i < B * T; i++)
            ids[k][i] = (i * 7 + k * 13 + 1) % CFG.vocab, tg[k][i] = (i * 5 + k * 11 + 3) % CFG.vocab;
    int Ms[] = {1, 4, 6, 8};
    double refl[MAXM + 1], refn[MAXM + 1];
    for (int j = 0; j < 4; j++) { /* the whole model, M micro-batches accumulated */
        int M = Ms[j];
        double l = 0;
        cb_gpt_zero_grad(whole);
        for (int k = 0; k < M; k++) {
            l += cb_gpt_forward(whole, ids[k], tg[k], B, T);
            cb_gpt_backward(whole, 1.0f / M);
        }
        refl[M] = l / M;
        refn[M] = sqrt(gpt_grad_sumsq(whole));
        /* keep this M's gradients for the comparisons below */
        int p = G.pp;
        double act[2] = {0, 0};
        for (int s = 0; s < 3; s++) {
            pcase c = {(cb_pp_kind)s, s == 2 ? 2 : 1, M, 0, "auto"};
            if (s == 2 && p * 2 > CFG.n_layer + 2) continue;
            run(&c, whole, refl[M], refn[M], ids, tg, s < 2 ? &act[s] : &(double){0});
        }
        if (M == 8 && p > 1) {
            double r[2] = {act[0], act[1]};
            if (G.ppg.rank != 0) r[0] = r[1] = 0;
            MPI_Allreduce(MPI_IN_PLACE, r, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            char nm[96];
            snprintf(nm, sizeof nm, "pp=%d M=8: stage 0 activation memory 1f1b < gpipe", p);
            check(r[1] < r[0], nm, "1f1b/gpipe = %.3f", r[1] / r[0]);
        }
        if (M != 4) continue;
        pcase rc1 = {CB_PP_1F1B, 1, 4, GPT_RECOMPUTE_BLOCK, "auto"};
        run(&rc1, whole, refl[4], refn[4], ids, tg, &(double){0});
        pcase rc2 = {CB_PP_1F1B, 1, 4, GPT_RECOMPUTE_SELECTIVE, "auto"};
        run(&rc2, whole, refl[4], refn[4], ids, tg, &(double){0});
        if (p > 1) selective_vs_none(ids, tg);
        if (p == 2) {
            pcase un = {CB_PP_1F1B, 1, 4, 0, "0,1,8"}, un2 = {CB_PP_GPIPE, 1, 4, 1, "0,7,8"};
            run(&un, whole, refl[4], refn[4], ids, tg, &(double){0});
            run(&un2, whole, refl[4], refn[4], ids, tg, &(double){0});
        }
        if (p == 1) { /* one rank, three chunks messaging themselves */
            pcase self = {CB_PP_INTERLEAVED, 3, 4, 1, "equal"};
            run(&self, whole, refl[4], refn[4], ids, tg, &(double){0});
        }
        pcase eq = {CB_PP_INTERLEAVED, 2, 4, 1, "equal"};
        if (p * 2 <= CFG.n_layer + 2) run(&eq, whole, refl[4], refn[4], ids, tg, &(double){0});
    }
    cb_gpt_free(whole);
    cb_layout_free(ls);
    cb_layout_free(LT);
    cb_grid_free(&G);
    cb_comm_finalize();
    return fails != 0;
}
