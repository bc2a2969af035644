/* GPipe, 1F1B and interleaved 1F1B action lists; see schedule.h. */
#include "pipeline/schedule.h"

#include <stdlib.h>
#include <string.h>

static const char *const NAMES[] = {"gpipe", "1f1b", "interleaved"};

int cb_pp_parse_schedule(const char *s, cb_pp_kind *k, cb_err *e) {
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, NAMES[i])) {
            *k = (cb_pp_kind)i;
            return CB_OK;
        }
    return cb_fail(e, CB_EINPUT, "--schedule '%s' is unknown; use gpipe, 1f1b or interleaved",
                   s ? s : "");
}

const char *cb_pp_schedule_name(cb_pp_kind k) { return NAMES[k]; }

int cb_pp_schedule_check(cb_pp_kind k, int p, int v, int M, cb_err *e) {
    if (p < 1 || M < 1 || v < 1)
        return cb_fail(e, CB_EINPUT, "--pp, --micro-batches and --virtual-stages must be >= 1");
    if (k != CB_PP_INTERLEAVED && v != 1)
        return cb_fail(e, CB_EINPUT,
                       "--virtual-stages %d needs --schedule interleaved; drop it or switch", v);
    if (k == CB_PP_INTERLEAVED && M % p)
        return cb_fail(e, CB_EINPUT,
                       "--schedule interleaved runs micro-batches in groups of --pp %d, but "
                       "--micro-batches is %d; use a multiple of %d",
                       p, M, p);
    return CB_OK;
}

static int gpipe(int M, cb_pp_action *a) {
    int n = 0;
    for (int i = 0; i < M; i++) a[n++] = (cb_pp_action){0, i, 0};
    for (int i = 0; i < M; i++) a[n++] = (cb_pp_action){1, i, 0};
    return n;
}

static int one_f_one_b(int p, int M, int s, cb_pp_action *a) {
    int warm = p - s - 1 < M ? p - s - 1 : M, n = 0, f = 0, b = 0;
    while (f < warm) a[n++] = (cb_pp_action){0, f++, 0};
    while (f < M) {
        a[n++] = (cb_pp_action){0, f++, 0};
        a[n++] = (cb_pp_action){1, b++, 0};
    }
    while (b < M) a[n++] = (cb_pp_action){1, b++, 0};
    return n;
}

/* Megatron's k-th forward (or backward) of a rank: groups of p micro-batches
 * sweep the chunks in order (backwards: in reverse). */
static cb_pp_action nth(int p, int v, int k, int bwd) {
    int g = k % (p * v), c = g / p;
    return (cb_pp_action){bwd, (k / (p * v)) * p + g % p, bwd ? v - 1 - c : c};
}

static int interleaved(int p, int v, int M, int s, cb_pp_action *a) {
    int total = M * v, n = 0;
    int warm = M == p ? total : (p - s - 1) * 2 + (v - 1) * p;
    if (warm > total) warm = total;
    for (int k = 0; k < warm; k++) a[n++] = nth(p, v, k, 0);
    for (int k = 0; k < total - warm; k++) {
        a[n++] = nth(p, v, k + warm, 0);
        a[n++] = nth(p, v, k, 1);
    }
    for (int k = total - warm; k < total; k++) a[n++] = nth(p, v, k, 1);
    return n;
}

int cb_pp_schedule(cb_pp_kind k, int p, int v, int M, int s, cb_pp_action *a) {
    if (k == CB_PP_GPIPE) return gpipe(M, a);
    if (k == CB_PP_1F1B) return one_f_one_b(p, M, s, a);
    return interleaved(p, v, M, s, a);
}

int cb_pp_max_inflight(const cb_pp_action *a, int n, int chunk) {
    int cur = 0, most = 0;
    for (int i = 0; i < n; i++) {
        if (chunk >= 0 && a[i].chunk != chunk) continue;
        cur += a[i].bwd ? -1 : 1;
        if (cur > most) most = cur;
    }
    return most;
}

int cb_pp_inflight_bound(cb_pp_kind k, int p, int v, int M, int s) {
    if (k == CB_PP_GPIPE) return M;
    if (k == CB_PP_1F1B) return p - s < M ? p - s : M;
    int w = M == p ? M * v : (p - s - 1) * 2 + (v - 1) * p + 1;
    return w < M * v ? w : M * v;
}

double cb_pp_bubble_formula(int p, int v, int M) {
    return (double)(p - 1) / ((double)v * M + p - 1);
}

int cb_pp_simulate(cb_pp_kind k, int p, int v, int M, int *rounds) {
    int per = 2 * M * v, nvs = p * v, rc = -1;
    cb_pp_action *a = malloc(sizeof *a * (size_t)per * p);
    int *next = calloc((size_t)p, sizeof(int));
    /* done[(bwd * nvs + vs) * M + mb]: the round that finished it, 0 = not yet */
    int *done = calloc((size_t)2 * nvs * M, sizeof(int));
    if (!a || !next || !done) goto out;
    for (int s = 0; s < p; s++)
        if (cb_pp_schedule(k, p, v, M, s, a + (size_t)s * per) != per) goto out;
    int left = per * p, r = 0;
    while (left > 0) {
        r++;
        int ran = 0;
        for (int s = 0; s < p; s++) {
            if (next[s] == per) continue;
            cb_pp_action x = a[(size_t)s * per + next[s]];
            int vs = x.chunk * p + s, dep;
            if (x.mb < 0 || x.mb >= M || x.chunk < 0 || x.chunk >= v) goto out;
            if (!x.bwd) dep = vs == 0 ? -1 : done[(vs - 1) * M + x.mb];
            else {
                dep = done[vs * M + x.mb]; /* own forward */
                if (vs < nvs - 1 && dep && dep < r) dep = done[(nvs + vs + 1) * M + x.mb];
            }
            if (dep == 0 || dep >= r) continue;
            int *slot = &done[(x.bwd * nvs + vs) * M + x.mb];
            if (*slot) goto out; /* ran twice */
            *slot = r;
            next[s]++;
            left--;
            ran = 1;
        }
        if (!ran) goto out;
    }
    *rounds = r;
    rc = 0;
out:
    free(a);
    free(next);
    free(done);
    return rc;
}
