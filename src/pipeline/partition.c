/* Module costs and the partitioning dynamic program; see partition.h. */
#include "pipeline/partition.h"

#include <float.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"
#include "model/gpt_internal.h"

static double mem_of(const cb_pp_module *m) { return 3.0 * m->param_bytes + m->act_bytes; }

void cb_pp_module_costs(const cb_pp_module *m, int n, double w, double *cost) {
    int timed = 1;
    double sc = 0, sm = 0;
    for (int i = 0; i < n; i++) timed &= m[i].time_ms > 0;
    for (int i = 0; i < n; i++) {
        sc += timed ? m[i].time_ms : m[i].flops;
        sm += mem_of(&m[i]);
    }
    for (int i = 0; i < n; i++) {
        double c = (timed ? m[i].time_ms : m[i].flops) / (sc > 0 ? sc : 1);
        cost[i] = (1 - w) * c + w * mem_of(&m[i]) / (sm > 0 ? sm : 1);
    }
}

void cb_pp_partition_score(cb_pp_partition *pt, const double *cost) {
    pt->max_cost = 0;
    for (int s = 0; s < pt->nstages; s++) {
        pt->cost[s] = 0;
        for (int i = pt->bound[s]; i < pt->bound[s + 1]; i++) pt->cost[s] += cost[i];
        if (pt->cost[s] > pt->max_cost) pt->max_cost = pt->cost[s];
    }
}

static int check_sizes(int n, int p, cb_err *e) {
    if (p < 1 || p > n || p > CB_PP_MAX_STAGES)
        return cb_fail(e, CB_EINPUT,
                       "%d pipeline stages for a model of %d modules; use between 1 and %d stages",
                       p, n, n < CB_PP_MAX_STAGES ? n : CB_PP_MAX_STAGES);
    return CB_OK;
}

/* best[k][j]: the smallest maximum cost of modules [0, j) in k stages;
 * cut[k][j] the start of the k-th stage there. O(p n^2). */
int cb_pp_partition_auto(const double *cost, int n, int p, cb_pp_partition *out, cb_err *e) {
    int rc = check_sizes(n, p, e);
    if (rc) return rc;
    double *pre = calloc((size_t)n + 1, sizeof *pre);
    double *best = malloc(sizeof(double) * (size_t)(p + 1) * (n + 1));
    int *cut = malloc(sizeof(int) * (size_t)(p + 1) * (n + 1));
    if (!pre || !best || !cut) {
        free(pre), free(best), free(cut);
        return cb_fail(e, CB_ENOMEM, "out of memory partitioning %d modules", n);
    }
    for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + cost[i];
#define AT(a, k, j) a[(size_t)(k) * (n + 1) + (j)]
    for (int j = 0; j <= n; j++) AT(best, 1, j) = pre[j], AT(cut, 1, j) = 0;
    for (int k = 2; k <= p; k++)
        for (int j = k; j <= n; j++) {
            AT(best, k, j) = DBL_MAX;
            for (int i = k - 1; i < j; i++) {
                double v = AT(best, k - 1, i), last = pre[j] - pre[i];
                if (last > v) v = last;
                if (v < AT(best, k, j) * (1 - 1e-12)) AT(best, k, j) = v, AT(cut, k, j) = i;
            }
        }
    out->nstages = p;
    out->nmod = n;
    out->bound[p] = n;
    for (int k = p; k >= 1; k--) out->bound[k - 1] = AT(cut, k, out->bound[k]);
#undef AT
    free(pre), free(best), free(cut);
    cb_pp_partition_score(out, cost);
    return CB_OK;
}

int cb_pp_partition_equal(const double *cost, int n, int p, cb_pp_partition *out, cb_err *e) {
    int rc = check_sizes(n, p, e);
    if (rc) return rc;
    out->nstages = p;
    out->nmod = n;
    for (int s = 0; s <= p; s++) out->bound[s] = s * (n / p) + (s > p - n % p ? s - (p - n % p) : 0);
    cb_pp_partition_score(out, cost);
    return CB_OK;
}

int cb_pp_partition_parse(const char *list, const double *cost, int n, int p,
                          cb_pp_partition *out, cb_err *e) {
    int rc = check_sizes(n, p, e), v[CB_PP_MAX_STAGES + 2], k = 0;
    if (rc) return rc;
    const char *s = list;
    while (*s && k < CB_PP_MAX_STAGES + 2) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',')) break;
        v[k++] = (int)x;
        s = *end ? end + 1 : end;
    }
    int off = k == p + 1 ? 0 : k == p ? (v[0] == 0 ? 0 : -1) : k == p - 1 ? 1 : -1;
    if (*s || off < 0 || (k == p + 1 && (v[0] != 0 || v[p] != n)))
        return cb_fail(e, CB_EINPUT,
                       "--partition '%s' is not %d module boundaries from 0 to %d; give e.g. "
                       "--partition 0,...,%d (stage starts and the end) or use --partition auto",
                       list, p + 1, n, n);
    out->nstages = p;
    out->nmod = n;
    out->bound[0] = 0;
    out->bound[p] = n;
    for (int i = 0; i < k; i++) out->bound[i + off] = v[i];
    for (int i = 0; i < p; i++)
        if (out->bound[i] >= out->bound[i + 1])
            return cb_fail(e, CB_EINPUT,
                           "--partition '%s': stage %d would be empty or reversed ([%d, %d)); "
                           "boundaries must increase strictly from 0 to %d",
                           list, i, out->bound[i], out->bound[i + 1], n);
    cb_pp_partition_score(out, cost);
    return CB_OK;
}

void cb_pp_partition_print(FILE *f, const cb_pp_partition *pt, const cb_pp_module *m, double w,
                           int nranks) {
    double tc = 0;
    int timed = 1;
    for (int i = 0; i < pt->nmod; i++) timed &= m[i].time_ms > 0;
    for (int i = 0; i < pt->nmod; i++) tc += timed ? m[i].time_ms : m[i].flops;
    fprintf(f, "partition: %d stages over %d modules, memory weight %.2f, compute from %s\n",
            pt->nstages, pt->nmod, w, timed ? "profiled time" : "FLOP counts");
    fprintf(f, "%5s %4s %-22s %8s %8s %12s %12s\n", "stage", "rank", "modules", "cost",
            "compute", "param MB", "act MB/mb");
    for (int s = 0; s < pt->nstages; s++) {
        double c = 0, pb = 0, ab = 0;
        for (int i = pt->bound[s]; i < pt->bound[s + 1]; i++) {
            c += timed ? m[i].time_ms : m[i].flops;
            pb += m[i].param_bytes;
            ab += m[i].act_bytes;
        }
        char mods[64];
        snprintf(mods, sizeof mods, "[%d,%d) %s..%s", pt->bound[s], pt->bound[s + 1],
                 m[pt->bound[s]].name, m[pt->bound[s + 1] - 1].name);
        fprintf(f, "%5d %4d %-22s %8.4f %7.1f%% %12.3f %12.3f\n", s, s % nranks, mods,
                pt->cost[s], 100 * c / (tc > 0 ? tc : 1), pb / 1e6, ab / 1e6);
    }
    for (int i = 0; i < pt->nmod; i++)
        for (int j = i + 1; j < pt->nmod; j++) {
            if (m[i].tie < 0 || m[j].tie != m[i].tie) continue;
            int si = 0, sj = 0;
            while (pt->bound[si + 1] <= i) si++;
            while (pt->bound[sj + 1] <= j) sj++;
            fprintf(f, "tied weight: modules %s (stage %d) and %s (stage %d)%s\n", m[i].name, si,
                    m[j].name, sj,
                    si == sj ? ", one copy" : ": a copy on each, gradients summed every step");
        }
}

void cb_pp_gpt_modules(const cb_gpt_config *c, int B, int T, cb_pp_module *m) {
    double C = c->d_model, V = c->vocab, N = (double)B * T, L = c->n_layer, f = sizeof(float);
    m[0] = (cb_pp_module){.flops = 3 * N * C, .param_bytes = f * (V + c->seq_len) * C,
                          .act_bytes = f * N * C, .tie = 0};
    snprintf(m[0].name, sizeof m[0].name, "embed");
    for (int l = 1; l <= L; l++) {
        m[l] = (cb_pp_module){.flops = 72 * N * C * C + 12 * N * T * C,
                              .param_bytes = f * (12 * C * C + 13 * C),
                              .act_bytes = f * (N * (16 * C + 4) + (double)B * c->n_head * T * T),
                              .tie = -1};
        snprintf(m[l].name, sizeof m[l].name, "h.%d", l - 1);
    }
    m[c->n_layer + 1] = (cb_pp_module){.flops = 6 * N * C * V + 24 * N * C,
                                       .param_bytes = f * (V * C + 2 * C),
                                       .act_bytes = f * (N * (C + 2) + N * V), .tie = 0};
    snprintf(m[c->n_layer + 1].name, sizeof m[0].name, "head");
}

/* Best of reps forward + backward times of a one-stage model of modules
 * [mod0, mod1), in milliseconds; the first stage's output gradient is zero. */
static int time_stage(const cb_gpt_config *c, int B, int T, int mod0, int mod1, int reps,
                      double *ms, cb_err *e) {
    cb_layout *L = cb_layout_serial();
    if (!L) return cb_fail(e, CB_ENOMEM, "out of memory profiling");
    gpt_stage_opts st = {mod0, mod1, 1, 0, 0};
    cb_gpt *g;
    int rc = gpt_create(c, B, T, L, &st, &g, e);
    if (rc) {
        cb_layout_free(L);
        return rc;
    }
    cb_gpt_init_random(g, 1);
    int N = B * T;
    int *ids = malloc(sizeof(int) * 2 * (size_t)N);
    float *dy = calloc((size_t)N * c->d_model, sizeof(float));
    if (!ids || !dy) rc = cb_fail(e, CB_ENOMEM, "out of memory profiling");
    for (int i = 0; !rc && i < 2 * N; i++) ids[i] = (i * 7919) % c->vocab;
    *ms = DBL_MAX;
    for (int r = 0; !rc && r < reps + 1; r++) {
        double t0 = omp_get_wtime();
        gpt_stage_forward(g, 0, ids, ids + N, B, T);
        gpt_stage_backward(g, 0, 1.0f, dy);
        double t = (omp_get_wtime() - t0) * 1e3;
        if (r && t < *ms) *ms = t; /* the first run warms caches up */
    }
    free(ids);
    free(dy);
    cb_gpt_free(g);
    cb_layout_free(L);
    return rc;
}

int cb_pp_gpt_profile(const cb_gpt_config *c, int B, int T, int reps, cb_pp_module *m, cb_err *e) {
    int L = c->n_layer;
    double te, tb, th;
    int rc = time_stage(c, B, T, 0, 1, reps, &te, e);
    if (!rc) rc = time_stage(c, B, T, 1, 2, reps, &tb, e);
    if (!rc) rc = time_stage(c, B, T, L + 1, L + 2, reps, &th, e);
    if (rc) return rc;
    m[0].time_ms = te > 1e-6 ? te : 1e-6;
    for (int l = 1; l <= L; l++) m[l].time_ms = tb > 1e-6 ? tb : 1e-6;
    m[L + 1].time_ms = th > 1e-6 ? th : 1e-6;
    return CB_OK;
}
