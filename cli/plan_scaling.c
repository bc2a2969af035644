/* `cubist plan --scaling`: predicted weak and strong scaling of
 * data-parallel training of a model (the translation model by default in
 * docs/results.md) under each embedding-gradient path, beyond the ranks
 * this machine can time. Weak: --batch sequences a rank, efficiency
 * t(1 rank) / t(n ranks); strong: --strong-batch sequences in all (default
 * --batch), efficiency t(1) / (n t(n)), at the counts that divide it. The
 * cluster given (--cluster, ranks up to --devices), else this machine's
 * calibration up to 64 ranks and the Stampede2 preset up to 1,200
 * processes (the Horovod seed's). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "plan_cli.h"

static const int EMBEDS[3] = {CB_DP_EMBED_DENSE, CB_DP_EMBED_SPARSE, CB_DP_EMBED_SPLIT};

double plan_dp_step(const cb_plan_job *base, int dp, int batch, int embed, cb_plan_pred *p) {
    cb_plan_job j = *base;
    j.batch = batch;
    cb_plan_layout l = {dp, 1, 1, CB_TP_1D, CB_PLAN_GPIPE, 1, 1, 0, 0, 1, dp > 1 ? embed : 0};
    cb_err e;
    if (cb_plan_check(&j, &l, &e)) return -1;
    cb_plan_predict(&j, &l, p);
    return p->step_s;
}

static double step_s(const cb_plan_job *base, int dp, int batch, int embed) {
    cb_plan_pred p;
    return plan_dp_step(base, dp, batch, embed, &p);
}

/* The rank counts of a table: powers of 2 below `most`, the Horovod
 * seed's 400 where it fits, and `most`, ascending. */
static int counts(int most, int *n) {
    int k = 0;
    for (int r = 1; r < most && k < 24; r *= 2) n[k++] = r;
    if (most > 400) n[k++] = 400;
    n[k++] = most;
    for (int i = 1; i < k; i++) /* insertion: only 400 is out of place */
        for (int x = i; x > 0 && n[x - 1] > n[x]; x--) {
            int t = n[x];
            n[x] = n[x - 1], n[x - 1] = t;
        }
    int u = 0;
    for (int i = 0; i < k; i++)
        if (!u || n[u - 1] != n[i]) n[u++] = n[i];
    return u;
}

static int table(const plan_opts *o, const cb_plan_job *j, int most) {
    int n[32], k = counts(most, n), G = o->strong_batch ? o->strong_batch : o->batch;
    double w1 = step_s(j, 1, o->batch, 0), s1 = step_s(j, 1, G, 0);
    if (w1 <= 0 || s1 <= 0) return -1;
    printf("cluster: %s\n  %6s %11s | %-22s | %-21s\n  %6s %11s | %6s %6s %6s  | %6s %6s %6s\n",
           j->cluster->name, "ranks", "step ms", "weak efficiency", "strong efficiency", "",
           "weak dense", "dense", "sparse", "split", "dense", "sparse", "split");
    for (int i = 0; i < k; i++) {
        double w[3], s[3];
        for (int x = 0; x < 3; x++) {
            double tw = step_s(j, n[i], n[i] * o->batch, EMBEDS[x]);
            double ts = G % n[i] ? -1 : step_s(j, n[i], G, EMBEDS[x]);
            w[x] = tw > 0 ? w1 / tw : -1, s[x] = ts > 0 ? s1 / (n[i] * ts) : -1;
        }
        printf("  %6d %11.2f |", n[i], w[0] > 0 ? 1e3 * w1 / w[0] : 0.0);
        for (int x = 0; x < 6; x++) {
            double v = x < 3 ? w[x] : s[x - 3];
            if (v < 0) printf(" %6s", "-");
            else printf(" %6.3f", v);
            if (x == 2) printf("  |");
        }
        printf("\n");
    }
    return 0;
}

int plan_scaling(const plan_opts *o, cb_err *e) {
    cb_plan_model m;
    cb_plan_cluster c;
    cb_plan_job j;
    if (o->strong_batch < 0 || o->devices < 0 || o->devices > 65536)
        return cb_fail(e, CB_EINPUT, "--scaling: --strong-batch >= 0 and --devices 0 to 65536");
    int rc = plan_load_job(o, &m, &c, &j, e);
    if (rc) return rc;
    printf("data-parallel scaling of %s (%dL d%d %dH V%d, %.3g parameters), %d sequences of T %d "
           "a rank (weak), %d in all (strong); one micro-batch, no tensor or pipeline "
           "parallelism; efficiency: weak t(1)/t(n), strong t(1)/(n t(n)); '-': n does not divide "
           "the strong batch\n", m.name, m.gpt.n_layer, m.gpt.d_model, m.gpt.n_head, m.gpt.vocab,
           m.family ? m.params : cb_plan_model_params(&m), o->batch, m.T,
           o->strong_batch ? o->strong_batch : o->batch);
    if (table(o, &j, o->devices ? o->devices : 64))
        return cb_fail(e, CB_EINPUT, "--scaling: the model does not run on one rank with --batch "
                       "%d (and --strong-batch); fix the sizes", o->batch);
    if (o->cluster) return CB_OK;
    char path[4096];
    rc = plan_find_cluster("stampede2", path, sizeof path, e);
    if (!rc) rc = cb_plan_cluster_read(path, &c, e);
    if (!rc) table(o, &j, 1200);
    return rc;
}
