/* Pair files read back: the index of pairs, batches by token count over
 * length buckets, padded batches. Layout in bitext.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/bitext.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "util/rng.h"

static const char *BITEXT_HINT = "make it with `cubist prepare --pairs FILE.tsv --output FILE.bin`";

/* Walks the stream once: sources and targets alternate, each ended by EOS. */
static int index_pairs(const char *path, cb_bitext *p, cb_err *e) {
    const uint16_t *t = p->tok.tok;
    const size_t n = p->tok.n;
    const int eos = p->base + 2;
    size_t cap = n / 2 + 1, start = 0;
    p->src = malloc(cap * sizeof *p->src);
    p->slen = malloc(cap * sizeof *p->slen);
    p->tlen = malloc(cap * sizeof *p->tlen);
    if (!p->src || !p->slen || !p->tlen) return cb_fail(e, CB_ENOMEM, "%s: out of memory for its index", path);
    for (size_t i = 0, side = 0; i < n; i++) {
        if (t[i] >= p->base && t[i] != eos)
            return cb_fail(e, CB_EINPUT, "%s: token %zu is %u, a padding or start id inside a pair; %s",
                           path, i, t[i], BITEXT_HINT);
        if (t[i] != eos) continue;
        size_t len = i - start;
        if (len == 0 || len + 1 > UINT16_MAX)
            return cb_fail(e, CB_EINPUT, "%s: pair %zu has a side of %zu tokens; %s", path, p->n, len, BITEXT_HINT);
        if (side == 0) p->src[p->n] = start, p->slen[p->n] = (uint16_t)len;
        else p->tlen[p->n++] = (uint16_t)len;
        if ((int)len + 1 > p->max_len) p->max_len = (int)len + 1;
        side ^= 1, start = i + 1;
    }
    if (start != n || p->n == 0)
        return cb_fail(e, CB_EINPUT, "%s: the stream does not end with a whole pair (source, EOS, "
                       "target, EOS); %s", path, BITEXT_HINT);
    return CB_OK;
}

/* path.vocab: p->base increasing ids, one a line */
static int read_map(const char *path, cb_bitext *p, cb_err *e) {
    char mp[4096];
    snprintf(mp, sizeof mp, "%s.vocab", path);
    void *text;
    size_t len;
    int n = 0, rc = fio_map(mp, "keep the map `prepare --compact-vocab` wrote beside the pair file, "
                                "or prepare again", &text, &len, e);
    if (rc) return rc;
    rc = cb_tokenizer_parse_map(text, len, mp, &p->map, &n, e);
    fio_unmap(text, len);
    if (!rc && n != p->base)
        rc = cb_fail(e, CB_EINPUT, "%s: %d ids where %s's vocabulary has %d; expected increasing "
                     "token ids, one a line; prepare the pairs again", mp, n, path, p->base);
    return rc;
}

int cb_bitext_stage_map(fio_atomic *a, const char *map_path, const int32_t *ids, int n, cb_err *e) {
    char line[16];
    int rc = fio_atomic_open(a, map_path, e);
    for (int k = 0; !rc && k < n; k++) {
        int w = snprintf(line, sizeof line, "%d\n", ids[k]);
        rc = fio_atomic_write(a, line, (size_t)w, e);
    }
    return rc;
}

int cb_bitext_open(const char *path, cb_bitext *p, cb_err *e) {
    memset(p, 0, sizeof *p);
    int rc = cb_tokens_open(path, 65536, &p->tok, e);
    if (rc) return rc;
    p->base = cb_tokens_header(&p->tok, 5);
    if (p->tok.nshard > 1)
        rc = cb_fail(e, CB_EINPUT, "%s: pairs are read from one file, not a list of shards; %s", path, BITEXT_HINT);
    else if (cb_tokens_header(&p->tok, 4) != CB_BITEXT_KIND || p->base <= 0 || p->base + CB_BITEXT_SPECIALS > 65536)
        rc = cb_fail(e, CB_EINPUT, "%s: a token file, but not of translation pairs; %s", path, BITEXT_HINT);
    if (!rc) rc = index_pairs(path, p, e);
    if (!rc && cb_tokens_header(&p->tok, 6) == 1) rc = read_map(path, p, e);
    if (rc) cb_bitext_close(p);
    return rc;
}

void cb_bitext_close(cb_bitext *p) {
    cb_tokens_close(&p->tok);
    free(p->src);
    free(p->slen);
    free(p->tlen);
    free(p->map);
    memset(p, 0, sizeof *p);
}

static int pair_len(const cb_bitext *p, size_t i) {
    return (p->slen[i] > p->tlen[i] ? p->slen[i] : p->tlen[i]) + 1;
}

typedef struct { int len; uint64_t r; size_t i; } keyed;

static int by_len(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->r < y->r ? -1 : x->r > y->r;
}

/* Cuts the sorted pairs greedily: a run ends before the pair that would
 * push rows x longest past max_tokens or rows past max_rows. */
static void cut(const keyed *k, size_t n, size_t max_tokens, int max_rows, cb_bitext_batches *b) {
    size_t s = 0;
    b->nb = 0;
    for (size_t i = 0; i < n; i++) {
        size_t rows = i - s + 1;
        if (i > s && ((int)rows > max_rows || rows * (size_t)k[i].len > max_tokens))
            b->start[++b->nb] = s = i;
        b->order[i] = k[i].i;
    }
    b->start[++b->nb] = n;
}

/* Fisher-Yates over the runs, then order rewritten run by run. */
static int shuffle_runs(cb_bitext_batches *b, size_t n, cb_rng *rng) {
    size_t *perm = malloc(b->nb * sizeof *perm), *order = malloc(n * sizeof *order),
           *start = malloc((b->nb + 1) * sizeof *start);
    if (!perm || !order || !start) return free(perm), free(order), free(start), CB_ENOMEM;
    for (size_t r = 0; r < b->nb; r++) perm[r] = r;
    for (size_t r = b->nb; r > 1; r--) {
        size_t j = cb_rng_below(rng, r), t = perm[r - 1];
        perm[r - 1] = perm[j], perm[j] = t;
    }
    start[0] = 0;
    for (size_t r = 0, o = 0; r < b->nb; r++) {
        for (size_t i = b->start[perm[r]]; i < b->start[perm[r] + 1]; i++) order[o++] = b->order[i];
        start[r + 1] = start[r] + (b->start[perm[r] + 1] - b->start[perm[r]]);
    }
    free(perm), free(b->order), free(b->start);
    b->order = order, b->start = start;
    return CB_OK;
}

int cb_bitext_batch(const cb_bitext *p, size_t max_tokens, int max_rows, uint64_t seed,
                   cb_bitext_batches *b, cb_err *e) {
    memset(b, 0, sizeof *b);
    if (max_rows < 1 || max_tokens < (size_t)p->max_len)
        return cb_fail(e, CB_EINPUT, "a batch of %zu tokens and %d rows cannot hold the longest pair "
                       "(%d tokens); raise the batch size", max_tokens, max_rows, p->max_len);
    keyed *k = malloc(p->n * sizeof *k);
    b->order = malloc(p->n * sizeof *b->order);
    b->start = malloc((p->n + 1) * sizeof *b->start);
    int rc = k && b->order && b->start ? CB_OK : CB_ENOMEM;
    if (!rc) {
        cb_rng rng;
        cb_rng_seed(&rng, seed);
        for (size_t i = 0; i < p->n; i++) k[i] = (keyed){pair_len(p, i), cb_rng_u64(&rng), i};
        qsort(k, p->n, sizeof *k, by_len);
        b->start[0] = 0;
        cut(k, p->n, max_tokens, max_rows, b);
        rc = shuffle_runs(b, p->n, &rng);
    }
    free(k);
    if (rc) cb_bitext_batches_free(b);
    return rc ? cb_fail(e, CB_ENOMEM, "out of memory batching %zu pairs", p->n) : CB_OK;
}

void cb_bitext_batches_free(cb_bitext_batches *b) {
    free(b->start);
    free(b->order);
    memset(b, 0, sizeof *b);
}

/* row (T) = pre (or nothing when pre < 0), tok (n), post (or nothing), PAD... */
static void fill_row(int *row, int T, int pre, const uint16_t *tok, int n, int post, int pad) {
    int j = 0;
    if (pre >= 0) row[j++] = pre;
    for (int i = 0; i < n; i++) row[j++] = tok[i];
    if (post >= 0) row[j++] = post;
    while (j < T) row[j++] = pad;
}

void cb_bitext_fill(const cb_bitext *p, const size_t *idx, int rows, int Ts, int Tt, int *src,
                   int *dec, int *tgt) {
    const int pad = p->base, bos = p->base + 1, eos = p->base + 2;
    for (int r = 0; r < rows; r++) {
        size_t i = idx[r];
        const uint16_t *s = p->tok.tok + p->src[i], *t = s + p->slen[i] + 1;
        fill_row(src + (size_t)r * Ts, Ts, -1, s, p->slen[i], eos, pad);
        fill_row(dec + (size_t)r * Tt, Tt, bos, t, p->tlen[i], -1, pad);
        fill_row(tgt + (size_t)r * Tt, Tt, -1, t, p->tlen[i], eos, pad);
    }
}
