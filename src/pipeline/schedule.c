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

/* Interleaved groups: micro-batches sweep the chunks in groups of p, the
 * last group taking the remainder (p to 2p-1 micro-batches; all M when
 * M < p). A group of at least p never waits on itself: when a rank has
 * forwarded the group on one chunk, the group's first micro-batch is back
 * from the last rank for the next chunk. A short group last (Megatron's
 * choice when M % p != 0) stalls, and with few warm-up forwards deadlocks
 * (e.g. p=4 v=3 M=5). This is the largest group. */
static int last_group(int p, int M) { return M < p ? M : p + M % p; }

/* The k-th forward (or backward) of a rank: groups sweep the chunks in
 * order (backwards: in reverse), micro-batches in order within a chunk. */
static cb_pp_action nth(int p, int v, int M, int k, int bwd) {
    int gl = last_group(p, M), base = M - gl, c, mb; /* base: first mb of the last group */
    if (k < base * v) c = k % (p * v) / p, mb = k / (p * v) * p + k % p;
    else c = (k - base * v) / gl, mb = base + (k - base * v) % gl;
    return (cb_pp_action){bwd, mb, bwd ? v - 1 - c : c};
}

/* Megatron's warm-up, 2(p-s-1) + (v-1) x the group: when rank s's first
 * backward of a group is due, the group's forwards on every chunk have had
 * time to come back around. */
static int interleaved_warmup(int p, int v, int M, int s) {
    int w = (p - s - 1) * 2 + (v - 1) * last_group(p, M);
    return w < M * v ? w : M * v;
}

static int interleaved(int p, int v, int M, int s, cb_pp_action *a) {
    int total = M * v, n = 0, warm = interleaved_warmup(p, v, M, s);
    for (int k = 0; k < warm; k++) a[n++] = nth(p, v, M, k, 0);
    for (int k = 0; k < total - warm; k++) {
        a[n++] = nth(p, v, M, k + warm, 0);
        a[n++] = nth(p, v, M, k, 1);
    }
    for (int k = total - warm; k < total; k++) a[n++] = nth(p, v, M, k, 1);
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
    int w = interleaved_warmup(p, v, M, s) + 1;
    return w < M * v ? w : M * v;
}

/* A lower bound for any schedule in lock-step rounds of one action per
 * rank: the last rank starts after p-1 rounds, does 2vM actions and ends on
 * a backward that p-1 more rounds carry to the first stage: 2(vM + p-1).
 * And the last virtual stage sees its first forward at round vp, does its
 * 2M actions from there, ending on a backward that vp-1 rounds carry to
 * the first: 2(vp + M-1), larger when v > 1 and M < p. The schedules here
 * reach the bound (test_schedule). */
int cb_pp_ideal_rounds(int p, int v, int M) {
    int a = v * M + p - 1, b = v * p + M - 1;
    return 2 * (a > b ? a : b);
}

double cb_pp_bubble_formula(int p, int v, int M) {
    return 1.0 - 2.0 * v * M / cb_pp_ideal_rounds(p, v, M);
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
