/* `cubist prepare --interactions`: user<TAB>item lines -> a pair file and
 * the two id maps beside it (pairs.h). */
#include "data/pairs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/fileio.h"

static const char MAGIC[8] = {'C', 'B', 'P', 'A', 'I', 'R', 'S', '1'};
enum { HEADER = 24 };

/* String ids -> dense indices in first-seen order: open addressing over
 * (pointer, length) into the mapped text. */
typedef struct idmap {
    const char **s;
    int *len, *slot, n, cap; /* slot: hash table of indices + 1, cap entries */
} idmap;

static uint64_t fnv(const char *s, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int idmap_grow(idmap *m) {
    int cap = m->cap ? 2 * m->cap : 1024;
    int *slot = calloc((size_t)cap, sizeof(int));
    const char **s = realloc(m->s, sizeof(char *) * cap);
    if (s) m->s = s;
    int *len = realloc(m->len, sizeof(int) * cap);
    if (len) m->len = len;
    if (!slot || !s || !len) return free(slot), -1;
    for (int i = 0; i < m->n; i++) {
        size_t h = fnv(m->s[i], m->len[i]) & (cap - 1);
        while (slot[h]) h = (h + 1) & (cap - 1);
        slot[h] = i + 1;
    }
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return 0;
}

/* The index of s[0..n), added if new; -1 out of memory. */
static int idmap_get(idmap *m, const char *s, int n) {
    if (2 * (m->n + 1) > m->cap && idmap_grow(m)) return -1;
    size_t h = fnv(s, n) & (m->cap - 1);
    for (; m->slot[h]; h = (h + 1) & (m->cap - 1)) {
        int i = m->slot[h] - 1;
        if (m->len[i] == n && !memcmp(m->s[i], s, n)) return i;
    }
    m->s[m->n] = s, m->len[m->n] = n;
    m->slot[h] = ++m->n;
    return m->n - 1;
}

static void idmap_free(idmap *m) { free(m->s), free(m->len), free(m->slot); }

/* One line [s, end): "user<TAB>item", both non-empty, no second tab. */
static int parse_line(const char *s, const char *end, const char **tab) {
    if (end > s && end[-1] == '\r') end--;
    *tab = memchr(s, '\t', end - s);
    return *tab && *tab > s && *tab + 1 < end && !memchr(*tab + 1, '\t', end - *tab - 1);
}

static int parse(const char *path, const char *text, size_t len, idmap *us, idmap *it,
                 int32_t **pairs, size_t *n, cb_err *e) {
    size_t cap = 1024, line = 0;
    *pairs = malloc(sizeof(int32_t) * 2 * cap);
    *n = 0;
    for (const char *s = text, *end = text + len; s < end && *pairs;) {
        const char *nl = memchr(s, '\n', end - s), *le = nl ? nl : end, *tab;
        line++;
        if (!parse_line(s, le, &tab))
            return cb_fail(e, CB_EINPUT, "%s:%zu: expected user<TAB>item (two non-empty ids "
                                         "separated by one tab); fix or remove the line", path, line);
        const char *ie = le > s && le[-1] == '\r' ? le - 1 : le;
        if (*n == cap) {
            int32_t *q = realloc(*pairs, sizeof(int32_t) * 4 * cap);
            if (!q) break;
            *pairs = q, cap *= 2;
        }
        int u = idmap_get(us, s, (int)(tab - s)), i = idmap_get(it, tab + 1, (int)(ie - tab - 1));
        if (u < 0 || i < 0) break;
        (*pairs)[2 * *n] = u, (*pairs)[2 * *n + 1] = i, ++*n;
        s = nl ? nl + 1 : end;
    }
    if (!*pairs || line != *n) return cb_fail(e, CB_ENOMEM, "%s: out of memory reading pairs", path);
    if (!*n) return cb_fail(e, CB_EINPUT, "%s: no pairs; give one user<TAB>item per line", path);
    return CB_OK;
}

/* Stages one id map (a line per index) at path. */
static int stage_map(fio_atomic *a, const char *path, const idmap *m, cb_err *e) {
    int rc = fio_atomic_open(a, path, e);
    for (int i = 0; !rc && i < m->n; i++) {
        rc = fio_atomic_write(a, m->s[i], m->len[i], e);
        if (!rc) rc = fio_atomic_write(a, "\n", 1, e);
    }
    return rc;
}

static int stage_pairs(fio_atomic *a, const char *path, const idmap *us, const idmap *it,
                       const int32_t *pairs, size_t n, cb_err *e) {
    unsigned char h[HEADER];
    int32_t nu = us->n, ni = it->n;
    int64_t nn = (int64_t)n;
    memcpy(h, MAGIC, 8), memcpy(h + 8, &nu, 4), memcpy(h + 12, &ni, 4), memcpy(h + 16, &nn, 8);
    int rc = fio_atomic_open(a, path, e);
    if (!rc) rc = fio_atomic_write(a, h, HEADER, e);
    if (!rc) rc = fio_atomic_write(a, pairs, sizeof(int32_t) * 2 * n, e);
    return rc;
}

/* The three files or none: all staged, then committed; a failed commit
 * removes the ones already renamed. */
static int write_all(const char *out, const idmap *us, const idmap *it, const int32_t *pairs,
                     size_t n, cb_err *e) {
    char pu[4200], pi[4200];
    snprintf(pu, sizeof pu, "%s.users", out);
    snprintf(pi, sizeof pi, "%s.items", out);
    const char *paths[3] = {out, pu, pi};
    fio_atomic a[3] = {{.fd = -1}, {.fd = -1}, {.fd = -1}};
    int rc = stage_pairs(&a[0], out, us, it, pairs, n, e);
    if (!rc) rc = stage_map(&a[1], pu, us, e);
    if (!rc) rc = stage_map(&a[2], pi, it, e);
    int done = 0;
    for (; !rc && done < 3; done++) rc = fio_atomic_commit(&a[done], e);
    for (int k = done; rc && k < 3; k++) fio_atomic_abort(&a[k]);
    for (int k = 0; rc && k < done - 1; k++) unlink(paths[k]);
    return rc;
}

int cb_prepare_interactions(const char *tsv, const char *out, cb_err *e) {
    void *text;
    size_t len;
    int rc = fio_map(tsv, "check the path to the user<TAB>item file", &text, &len, e);
    if (rc) return rc;
    idmap us = {0}, it = {0};
    int32_t *pairs = NULL;
    size_t n = 0;
    rc = parse(tsv, text, len, &us, &it, &pairs, &n, e);
    if (!rc) rc = write_all(out, &us, &it, pairs, n, e);
    free(pairs);
    idmap_free(&us), idmap_free(&it);
    fio_unmap(text, len);
    return rc;
}

int cb_pairs_open(const char *path, cb_pairs *p, cb_err *e) {
    memset(p, 0, sizeof *p);
    int rc = fio_map(path, "make one with `cubist prepare --interactions FILE.tsv --output FILE`",
                     &p->map, &p->maplen, e);
    if (rc) return rc;
    const unsigned char *b = p->map;
    int64_t n = -1;
    if (p->maplen >= HEADER && !memcmp(b, MAGIC, 8)) {
        memcpy(&p->users, b + 8, 4), memcpy(&p->items, b + 12, 4), memcpy(&n, b + 16, 8);
    }
    if (n < 1 || p->users < 1 || p->items < 1 || (size_t)n != (p->maplen - HEADER) / 8 ||
        p->maplen != HEADER + 8 * (size_t)n) {
        cb_pairs_close(p);
        return cb_fail(e, CB_EINPUT, "%s is not a pair file (or is truncated); make one with "
                                     "`cubist prepare --interactions FILE.tsv --output FILE`", path);
    }
    p->n = (size_t)n;
    p->p = (const int32_t *)(b + HEADER);
    for (size_t k = 0; k < p->n; k++)
        if (p->p[2 * k] < 0 || p->p[2 * k] >= p->users || p->p[2 * k + 1] < 0 ||
            p->p[2 * k + 1] >= p->items) {
            cb_pairs_close(p);
            return cb_fail(e, CB_EINPUT, "%s: pair %zu is out of range (a damaged file); prepare "
                                         "it again", path, k);
        }
    return CB_OK;
}

void cb_pairs_close(cb_pairs *p) {
    if (p->map) fio_unmap(p->map, p->maplen);
    p->map = NULL;
}
