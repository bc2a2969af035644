/* Module costs and the partitioning dynamic program; see partition.h. */
#include "pipeline/partition.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"

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
    int nr = pt->nranks > 0 ? pt->nranks : pt->nstages;
    pt->nranks = nr;
    pt->max_cost = pt->rank_max = 0;
    for (int r = 0; r < nr; r++) pt->rank_cost[r] = 0;
    for (int s = 0; s < pt->nstages; s++) {
        pt->cost[s] = 0;
        for (int i = pt->bound[s]; i < pt->bound[s + 1]; i++) pt->cost[s] += cost[i];
        if (pt->cost[s] > pt->max_cost) pt->max_cost = pt->cost[s];
        pt->rank_cost[s % nr] += pt->cost[s];
    }
    for (int r = 0; r < nr; r++)
        if (pt->rank_cost[r] > pt->rank_max) pt->rank_max = pt->rank_cost[r];
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
    out->nranks = p;
    out->bound[p] = n;
    for (int k = p; k >= 1; k--) out->bound[k - 1] = AT(cut, k, out->bound[k]);
#undef AT
    free(pre), free(best), free(cut);
    cb_pp_partition_score(out, cost);
    return CB_OK;
}

/* ---------------------------------------------- interleaved: rank sums */

/* What the rank search minimises: the largest rank sum, then the largest
 * stage, compared with a relative tolerance so rounding cannot pick. */
typedef struct rank_score {
    double rank, stage;
} rank_score;

static rank_score score_bounds(const int *b, int nvs, int p, const double *pre, double *sums) {
    rank_score r = {0, 0};
    for (int s = 0; s < p; s++) sums[s] = 0;
    for (int k = 0; k < nvs; k++) {
        double c = pre[b[k + 1]] - pre[b[k]];
        sums[k % p] += c;
        if (c > r.stage) r.stage = c;
    }
    for (int s = 0; s < p; s++)
        if (sums[s] > r.rank) r.rank = sums[s];
    return r;
}

static int better(rank_score a, rank_score b) {
    const double tol = 1e-12;
    if (a.rank < b.rank * (1 - tol)) return 1;
    if (a.rank > b.rank * (1 + tol)) return 0;
    return a.stage < b.stage * (1 - tol);
}

/* Moves one boundary, or two, by one module while that improves the
 * score; deterministic (moves tried in a fixed order, the best taken). */
static void local_search(int *b, int nvs, int p, const double *pre, double *sums) {
    rank_score cur = score_bounds(b, nvs, p, pre, sums);
    for (int improved = 1; improved;) {
        improved = 0;
        int bi = 0, bj = 0, di = 0, dj = 0;
        for (int i = 1; i < nvs; i++)
            for (int j = i; j < nvs; j++)
                for (int d = 0; d < 4; d++) {
                    int x = d & 1 ? 1 : -1, y = d & 2 ? 1 : -1;
                    if (j == i && y != x) continue; /* one boundary: move it once */
                    b[i] += x;
                    if (j != i) b[j] += y;
                    int ok = b[i] > b[i - 1] && b[i] < b[i + 1] && b[j] > b[j - 1] && b[j] < b[j + 1];
                    rank_score r = ok ? score_bounds(b, nvs, p, pre, sums) : cur;
                    if (ok && better(r, cur)) cur = r, bi = i, bj = j, di = x, dj = j != i ? y : 0;
                    b[i] -= x;
                    if (j != i) b[j] -= y;
                }
        if (bi) b[bi] += di, b[bj] += dj, improved = 1;
    }
}

/* Branch and bound over the placements of the cuts: stage k spans
 * [b[k], b[k+1]); a rank whose sum passes the best found stops that
 * branch (costs are >= 0, so a longer stage only adds). Returns 0 when the
 * node budget ran out (the best found so far stays). */
typedef struct bnb {
    const double *pre;
    int n, p, nvs, *b, *best;
    double *sums, stage;
    rank_score bs;
    double nodes, budget;
} bnb;

static int branch(bnb *S, int k) {
    if (++S->nodes > S->budget) return 0;
    double lim = S->bs.rank * (1 + 1e-12), keep = S->stage;
    int r = k % S->p, last = k == S->nvs - 1;
    for (int e = last ? S->n : S->b[k] + 1; e <= S->n - (S->nvs - 1 - k); e++) {
        double c = S->pre[e] - S->pre[S->b[k]];
        if (S->sums[r] + c > lim) break;
        S->b[k + 1] = e;
        S->sums[r] += c;
        S->stage = c > keep ? c : keep;
        int ok = 1;
        if (last) {
            rank_score x = {0, S->stage};
            for (int i = 0; i < S->p; i++) x.rank = fmax(x.rank, S->sums[i]);
            if (better(x, S->bs)) S->bs = x, memcpy(S->best, S->b, sizeof(int) * (S->nvs + 1));
        } else ok = branch(S, k + 1);
        S->sums[r] -= c;
        S->stage = keep;
        if (!ok) return 0;
    }
    return 1;
}

int cb_pp_partition_search(const double *cost, int n, int p, int v, double max_nodes,
                           cb_pp_partition *out, cb_err *e) {
    int nvs = p * v, rc = cb_pp_partition_auto(cost, n, nvs, out, e);
    out->exact = v == 1;
    if (rc || v == 1) return rc;
    double *pre = malloc(sizeof(double) * ((size_t)n + 1 + p));
    int *b = malloc(sizeof(int) * 2 * ((size_t)nvs + 1));
    if (!pre || !b) {
        free(pre), free(b);
        return cb_fail(e, CB_ENOMEM, "out of memory partitioning %d modules", n);
    }
    double *sums = pre + n + 1;
    pre[0] = 0;
    for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + cost[i];
    memcpy(b, out->bound, sizeof(int) * (nvs + 1));
    local_search(b, nvs, p, pre, sums);
    bnb S = {pre, n, p, nvs, b + nvs + 1, b, sums, 0, score_bounds(b, nvs, p, pre, sums), 0,
             max_nodes};
    for (int i = 0; i < p; i++) sums[i] = 0;
    S.b[0] = 0;
    out->exact = max_nodes > 0 && branch(&S, 0);
    memcpy(out->bound, b, sizeof(int) * (nvs + 1));
    out->nranks = p;
    cb_pp_partition_score(out, cost);
    free(pre), free(b);
    return CB_OK;
}

int cb_pp_partition_interleaved(const double *cost, int n, int p, int v, cb_pp_partition *out,
                                cb_err *e) {
    return cb_pp_partition_search(cost, n, p, v, 2e7, out, e);
}

int cb_pp_partition_equal(const double *cost, int n, int p, cb_pp_partition *out, cb_err *e) {
    int rc = check_sizes(n, p, e);
    if (rc) return rc;
    out->nstages = p;
    out->nmod = n;
    out->nranks = p;
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
    out->nranks = p;
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

/* Compute share, parameter and activation bytes of modules [a, b). */
static void sums_of(const cb_pp_module *m, int a, int b, int timed, double *c, double *pb,
                    double *ab) {
    for (int i = a; i < b; i++) {
        *c += timed ? m[i].time_ms : m[i].flops;
        *pb += m[i].param_bytes;
        *ab += m[i].act_bytes;
    }
}

/* Interleaved: each rank's stages and sums, which set its time. */
static void print_ranks(FILE *f, const cb_pp_partition *pt, const cb_pp_module *m, int timed,
                        double tc) {
    for (int r = 0; r < pt->nranks; r++) {
        double c = 0, pb = 0, ab = 0;
        char st[96] = "";
        for (int s = r; s < pt->nstages; s += pt->nranks) {
            sums_of(m, pt->bound[s], pt->bound[s + 1], timed, &c, &pb, &ab);
            snprintf(st + strlen(st), sizeof st - strlen(st), "%s%d", s == r ? "" : ",", s);
        }
        fprintf(f, "rank %d: stages %-14s cost %8.4f %7.1f%% %12.3f %12.3f\n", r, st,
                pt->rank_cost[r], 100 * c / (tc > 0 ? tc : 1), pb / 1e6, ab / 1e6);
    }
}

void cb_pp_partition_print(FILE *f, const cb_pp_partition *pt, const cb_pp_module *m, double w,
                           int nranks) {
    double tc = 0, pb = 0, ab = 0;
    int timed = 1;
    for (int i = 0; i < pt->nmod; i++) timed &= m[i].time_ms > 0;
    sums_of(m, 0, pt->nmod, timed, &tc, &pb, &ab);
    fprintf(f, "partition: %d stages over %d modules, memory weight %.2f, compute from %s\n",
            pt->nstages, pt->nmod, w, timed ? "profiled time" : "FLOP counts");
    fprintf(f, "%5s %4s %-22s %8s %8s %12s %12s\n", "stage", "rank", "modules", "cost",
            "compute", "param MB", "act MB/mb");
    for (int s = 0; s < pt->nstages; s++) {
        double c = 0;
        pb = ab = 0;
        sums_of(m, pt->bound[s], pt->bound[s + 1], timed, &c, &pb, &ab);
        char mods[64];
        snprintf(mods, sizeof mods, "[%d,%d) %s..%s", pt->bound[s], pt->bound[s + 1],
                 m[pt->bound[s]].name, m[pt->bound[s + 1] - 1].name);
        fprintf(f, "%5d %4d %-22s %8.4f %7.1f%% %12.3f %12.3f\n", s, s % nranks, mods,
                pt->cost[s], 100 * c / (tc > 0 ? tc : 1), pb / 1e6, ab / 1e6);
    }
    if (pt->nranks < pt->nstages) print_ranks(f, pt, m, timed, tc);
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
