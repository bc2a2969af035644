/* NCF's data: split, training stream, evaluation candidates (ncf.h). */
#include "data/ncf.h"

#include <stdlib.h>
#include <string.h>

#include "util/rng.h"

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int observed(const cb_ncf_data *d, int u, int item) {
    const int32_t *s = d->seen + d->off[u];
    size_t lo = 0, hi = d->off[u + 1] - d->off[u];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s[mid] < item) lo = mid + 1;
        else hi = mid;
    }
    return lo < d->off[u + 1] - d->off[u] && s[lo] == item;
}

/* The CSR of each user's distinct items (sorted), from the pairs. */
static int build_seen(cb_ncf_data *d, const cb_pairs *p) {
    size_t *fill = calloc((size_t)d->users + 1, sizeof(size_t));
    d->off = calloc((size_t)d->users + 1, sizeof(size_t));
    d->seen = malloc(sizeof(int32_t) * p->n);
    if (!fill || !d->off || !d->seen) return free(fill), -1;
    for (size_t k = 0; k < p->n; k++) d->off[p->p[2 * k] + 1]++;
    for (int u = 0; u < d->users; u++) d->off[u + 1] += d->off[u];
    for (size_t k = 0; k < p->n; k++) {
        int u = p->p[2 * k];
        d->seen[d->off[u] + fill[u]++] = p->p[2 * k + 1];
    }
    size_t w = 0, start = 0; /* sort and drop duplicates, compacting */
    for (int u = 0; u < d->users; u++) {
        size_t a = start, b = d->off[u + 1];
        qsort(d->seen + a, b - a, sizeof(int32_t), cmp_i32);
        d->off[u] = w;
        for (size_t k = a; k < b; k++)
            if (k == a || d->seen[k] != d->seen[k - 1]) d->seen[w++] = d->seen[k];
        start = b;
    }
    d->off[d->users] = w;
    free(fill);
    return 0;
}

/* Each user's last distinct pair is held out when it has two or more
 * items; the rest (first occurrences, file order) is the training set. */
static int split(cb_ncf_data *d, const cb_pairs *p) {
    d->test = malloc(sizeof(int) * d->users);
    d->pop = calloc((size_t)d->items, sizeof(int));
    d->tu = malloc(sizeof(int32_t) * p->n);
    d->ti = malloc(sizeof(int32_t) * p->n);
    unsigned char *used = calloc(d->off[d->users] + 1, 1);
    if (!d->test || !d->pop || !d->tu || !d->ti || !used) return free(used), -1;
    for (int u = 0; u < d->users; u++) d->test[u] = -1;
    for (size_t k = p->n; k-- > 0;) {
        int u = p->p[2 * k];
        if (d->test[u] < 0 && d->off[u + 1] - d->off[u] >= 2) d->test[u] = p->p[2 * k + 1];
    }
    for (size_t k = 0; k < p->n; k++) {
        int u = p->p[2 * k], it = p->p[2 * k + 1];
        const int32_t *s = d->seen + d->off[u];
        size_t j = (size_t)((const int32_t *)bsearch(&it, s, d->off[u + 1] - d->off[u],
                                                     sizeof(int32_t), cmp_i32) - d->seen);
        if (used[j] || it == d->test[u]) continue;
        used[j] = 1;
        d->tu[d->ntrain] = u, d->ti[d->ntrain++] = it;
        d->pop[it]++;
    }
    free(used);
    return 0;
}

int cb_ncf_open(const char *path, int neg, uint64_t seed, cb_ncf_data *d, cb_err *e) {
    memset(d, 0, sizeof *d);
    d->perm_epoch = -1;
    cb_pairs p;
    int rc = cb_pairs_open(path, &p, e);
    if (rc) return rc;
    d->users = p.users, d->items = p.items, d->neg = neg, d->seed = seed;
    if (neg < 0 || neg >= p.items)
        rc = cb_fail(e, CB_EINPUT, "--negatives %d: %s has %d items, so a pair can have at most "
                                   "%d unobserved ones; use --negatives 0..%d", neg, path, p.items,
                     p.items - 1, p.items - 1);
    if (!rc && (build_seen(d, &p) || split(d, &p)))
        rc = cb_fail(e, CB_ENOMEM, "out of memory reading %s", path);
    for (int u = 0; !rc && neg > 0 && u < d->users; u++)
        if (d->off[u + 1] - d->off[u] >= (size_t)d->items)
            rc = cb_fail(e, CB_EINPUT, "%s: user %d has every item, so no negative can be drawn "
                                       "for it; drop its pairs or use --negatives 0", path, u);
    if (!rc && !d->ntrain) rc = cb_fail(e, CB_EINPUT, "%s: no training pairs", path);
    size_t R = d->ntrain * (size_t)(1 + neg);
    if (!rc && R > UINT32_MAX)
        rc = cb_fail(e, CB_EINPUT, "%s: %zu training rows per epoch is over 2^32; use fewer "
                                   "pairs or negatives", path, R);
    if (!rc && !(d->perm = malloc(sizeof(uint32_t) * R)))
        rc = cb_fail(e, CB_ENOMEM, "out of memory for %zu training rows", R);
    cb_pairs_close(&p);
    if (rc) cb_ncf_close(d);
    return rc;
}

void cb_ncf_close(cb_ncf_data *d) {
    free(d->tu), free(d->ti), free(d->test), free(d->off), free(d->seen), free(d->pop);
    free(d->perm);
    memset(d, 0, sizeof *d);
}

/* A uniform item that user u has not interacted with, from stream key. */
static int unobserved(const cb_ncf_data *d, int u, uint64_t key) {
    cb_rng r;
    cb_rng_seed(&r, key);
    int it;
    do it = (int)cb_rng_below(&r, (uint64_t)d->items);
    while (observed(d, u, it));
    return it;
}

static uint64_t mix(uint64_t seed, uint64_t a, uint64_t b) {
    cb_rng r;
    cb_rng_seed(&r, seed ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full));
    return cb_rng_u64(&r);
}

void cb_ncf_row(cb_ncf_data *d, uint64_t r, int *user, int *item, int *label) {
    uint64_t per = 1 + (uint64_t)d->neg, R = d->ntrain * per;
    int64_t ep = (int64_t)(r / R);
    if (ep != d->perm_epoch) { /* Fisher-Yates from (seed, epoch) */
        cb_rng g;
        cb_rng_seed(&g, mix(d->seed, 1, (uint64_t)ep));
        for (uint64_t k = 0; k < R; k++) d->perm[k] = (uint32_t)k;
        for (uint64_t k = R - 1; k > 0; k--) {
            uint64_t j = cb_rng_below(&g, k + 1);
            uint32_t t = d->perm[k];
            d->perm[k] = d->perm[j], d->perm[j] = t;
        }
        d->perm_epoch = ep;
    }
    uint64_t x = d->perm[r % R], pos = x / per, j = x % per;
    *user = d->tu[pos];
    *label = j == 0;
    *item = j == 0 ? d->ti[pos] : unobserved(d, *user, mix(d->seed, 2, (uint64_t)ep * R + x));
}

int cb_ncf_eval_users(const cb_ncf_data *d, int n, int max, int *users) {
    int k = 0;
    for (int u = 0; u < d->users; u++)
        if (d->test[u] >= 0 && (size_t)d->items - (d->off[u + 1] - d->off[u]) >= (size_t)n)
            users[k++] = u;
    cb_rng g;
    cb_rng_seed(&g, mix(d->seed, 3, 0));
    for (int i = k - 1; i > 0; i--) {
        int j = (int)cb_rng_below(&g, (uint64_t)i + 1), t = users[i];
        users[i] = users[j], users[j] = t;
    }
    return max > 0 && max < k ? max : k;
}

void cb_ncf_candidates(const cb_ncf_data *d, int u, int n, int *out) {
    out[0] = d->test[u];
    cb_rng g;
    cb_rng_seed(&g, mix(d->seed, 4, (uint64_t)u));
    for (int k = 1; k <= n; k++) { /* distinct unobserved items */
        int it, dup;
        do {
            it = (int)cb_rng_below(&g, (uint64_t)d->items);
            dup = observed(d, u, it);
            for (int j = 1; j < k && !dup; j++) dup = out[j] == it;
        } while (dup);
        out[k] = it;
    }
}
