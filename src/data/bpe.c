/* GPT-2's byte-level BPE. A text is cut at each <|endoftext|>, the pieces
 * between are cut into pre-tokens by GPT-2's regex (hand-compiled below),
 * and each pre-token's bytes are merged pair by pair, the lowest-ranked pair
 * of vocab.bpe first (leftmost on a tie), as OpenAI's encoder.py does.
 * Pre-tokens repeat (words), so their ids are cached. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/bpe.h"
#include "formats/fileio.h"
#include "formats/json.h"

#define EOT_TEXT "<|endoftext|>"
#define MERGE_SLOTS (1u << 18) /* > 2 x 50000 merges */
#define CACHE_SLOTS (1u << 16)
#define CACHE_MAX_PIECE 48    /* longer pre-tokens are rare: not cached */
#define CACHE_POOL (1u << 20) /* bytes of keys and ids before a reset */

enum { CL_O, CL_L, CL_N, CL_S };

typedef struct merge_slot {
    uint64_t key; /* left << 32 | right, + 1 (0 = empty) */
    int32_t rank, id;
} merge_slot;

typedef struct cache_slot {
    uint32_t key, klen, ids, nids; /* offsets into the pools; klen 0 = empty */
} cache_slot;

typedef struct bpe {
    int V, eot;
    uint32_t *off;  /* (V+1): token i's bytes are bytes[off[i], off[i+1]) */
    uint8_t *bytes;
    uint16_t byte_id[256];
    uint8_t bmp[65536]; /* class of each BMP code point */
    int16_t dec[324];   /* encoder.json's code points -> bytes (byte_decoder) */
    merge_slot *merges;
    cache_slot *cache;
    uint8_t *ckeys;
    uint16_t *cids;
    uint32_t ckeys_len, cids_len, cached;
} bpe;

/* ------------------------------------------------------------ classes */

static int in_ranges(const uint32_t (*r)[2], int n, uint32_t c) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < r[mid][0]) hi = mid - 1;
        else if (c > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static int class_of(uint32_t c) {
    if (in_ranges(cb_uc_L, cb_uc_L_n, c)) return CL_L;
    if (in_ranges(cb_uc_N, cb_uc_N_n, c)) return CL_N;
    if (in_ranges(cb_uc_S, cb_uc_S_n, c)) return CL_S;
    return CL_O;
}

/* Code point at s[i] (i < n): its class, and its byte length in *len. A
 * byte that starts no valid UTF-8 sequence is one code point of class O,
 * so any byte string pre-tokenises (and round-trips). */
static int class_at(const bpe *b, const uint8_t *s, size_t i, size_t n, size_t *len) {
    uint32_t c = s[i];
    *len = 1;
    if (c < 0x80) return b->bmp[c];
    int k = c >= 0xf0 && c < 0xf5 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 && c < 0xe0 ? 1 : 0;
    if (k == 0 || i + (size_t)k >= n) return CL_O;
    c &= 0x3f >> k;
    for (int j = 1; j <= k; j++) {
        if ((s[i + j] & 0xc0) != 0x80) return CL_O;
        c = c << 6 | (s[i + j] & 0x3f);
    }
    static const uint32_t min[4] = {0, 0x80, 0x800, 0x10000};
    if (c < min[k] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return CL_O;
    *len = (size_t)k + 1;
    return c < 65536 ? b->bmp[c] : class_of(c);
}

/* ------------------------------------------------------------ pre-tokens */

/* End of the run of code points of class cl from i. */
static size_t run_end(const bpe *b, const uint8_t *s, size_t i, size_t n, int cl, size_t *last) {
    size_t len;
    *last = i;
    while (i < n && class_at(b, s, i, n, &len) == cl) *last = i, i += len;
    return i;
}

static size_t contraction(const uint8_t *s, size_t i, size_t n) {
    if (i + 1 >= n) return 0;
    uint8_t c = s[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
    if (i + 2 >= n) return 0;
    uint8_t d = s[i + 2];
    if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return 3;
    return 0;
}

/* The regex's alternatives in its order; the first that matches wins. */
static size_t pretoken(const bpe *b, const uint8_t *s, size_t i, size_t n) {
    size_t len, last, k;
    if (s[i] == '\'' && (k = contraction(s, i, n))) return i + k;
    int cl = class_at(b, s, i, n, &len);
    size_t j = i;
    if (s[i] == ' ' && i + 1 < n) { /* " ?" before a letter, digit or other run */
        int next = class_at(b, s, i + 1, n, &len);
        if (next != CL_S) cl = next, j = i + 1;
    }
    if (cl != CL_S) return run_end(b, s, j, n, cl, &last);
    size_t end = run_end(b, s, i, n, CL_S, &last);
    /* \s+(?!\S): the run less its last code point, unless it ends the text
     * or is that one code point (then \s+ takes it whole) */
    return end == n || last == i ? end : last;
}

/* ------------------------------------------------------------ merges */

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static merge_slot *merge_find(const bpe *b, int l, int r) {
    uint64_t key = ((uint64_t)l << 32 | (uint32_t)r) + 1;
    for (uint32_t h = (uint32_t)mix(key) & (MERGE_SLOTS - 1);; h = (h + 1) & (MERGE_SLOTS - 1))
        if (b->merges[h].key == key || b->merges[h].key == 0) return &b->merges[h];
}

static int32_t pair_rank(const bpe *b, int l, int r) {
    merge_slot *m = merge_find(b, l, r);
    return m->key ? m->rank : INT32_MAX;
}

/* s (n bytes) -> ids (n at most); returns the count. Lowest rank first,
 * leftmost on a tie; rank[i] is the rank of the pair (ids[i], ids[i+1]).
 * Quadratic in the pre-token's length, as the reference encoders are. */
static size_t merge_piece(const bpe *b, const uint8_t *s, size_t n, uint16_t *ids, int32_t *rank) {
    for (size_t i = 0; i < n; i++) ids[i] = b->byte_id[s[i]];
    for (size_t i = 0; i + 1 < n; i++) rank[i] = pair_rank(b, ids[i], ids[i + 1]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        ids[best] = (uint16_t)merge_find(b, ids[best], ids[best + 1])->id;
        memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof *ids);
        memmove(rank + best, rank + best + 1, (n - best - 2) * sizeof *rank);
        n--;
        if (best > 0) rank[best - 1] = pair_rank(b, ids[best - 1], ids[best]);
        if (best + 1 < n) rank[best] = pair_rank(b, ids[best], ids[best + 1]);
    }
    return n;
}

/* ------------------------------------------------------------ cache */

static uint32_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return (uint32_t)mix(h);
}

static cache_slot *cache_find(bpe *b, const uint8_t *s, size_t n) {
    for (uint32_t h = hash_bytes(s, n) & (CACHE_SLOTS - 1);; h = (h + 1) & (CACHE_SLOTS - 1)) {
        cache_slot *c = &b->cache[h];
        if (c->klen == 0 || (c->klen == n && !memcmp(b->ckeys + c->key, s, n))) return c;
    }
}

/* Encodes one pre-token into out; returns the count. */
static size_t encode_piece(bpe *b, const uint8_t *s, size_t n, uint16_t *out, int32_t *rank) {
    if (n > CACHE_MAX_PIECE) return merge_piece(b, s, n, out, rank);
    cache_slot *c = cache_find(b, s, n);
    if (c->klen) {
        memcpy(out, b->cids + c->ids, c->nids * sizeof *out);
        return c->nids;
    }
    size_t k = merge_piece(b, s, n, out, rank);
    if (b->cached >= CACHE_SLOTS / 2 || b->ckeys_len + n > CACHE_POOL) {
        memset(b->cache, 0, CACHE_SLOTS * sizeof *b->cache);
        b->cached = b->ckeys_len = b->cids_len = 0;
        c = cache_find(b, s, n);
    }
    *c = (cache_slot){b->ckeys_len, (uint32_t)n, b->cids_len, (uint32_t)k};
    memcpy(b->ckeys + b->ckeys_len, s, n);
    memcpy(b->cids + b->cids_len, out, k * sizeof *out);
    b->ckeys_len += (uint32_t)n;
    b->cids_len += (uint32_t)k;
    b->cached++;
    return k;
}

/* ------------------------------------------------------------ interface */

static size_t encode_span(bpe *b, const uint8_t *s, size_t n, uint16_t *out, int32_t *rank) {
    size_t k = 0;
    for (size_t i = 0, j; i < n; i = j) {
        j = pretoken(b, s, i, n);
        k += encode_piece(b, s + i, j - i, out + k, rank);
    }
    return k;
}

/* text (len) -> ids (len at most). rank is scratch for the longest piece. */
static size_t bpe_encode(const cb_tokenizer *tk, const uint8_t *text, size_t len, uint16_t *out) {
    bpe *b = tk->ctx;
    int32_t *rank = malloc((len + 1) * sizeof *rank);
    if (!rank) return SIZE_MAX;
    size_t k = 0, m = sizeof EOT_TEXT - 1;
    for (size_t i = 0; i < len;) {
        const uint8_t *eot = memmem(text + i, len - i, EOT_TEXT, m);
        size_t end = eot ? (size_t)(eot - text) : len;
        k += encode_span(b, text + i, end - i, out + k, rank);
        if (eot) out[k++] = (uint16_t)b->eot;
        i = eot ? end + m : len;
    }
    free(rank);
    return k;
}

static size_t bpe_decode(const cb_tokenizer *tk, int id, uint8_t *out, size_t cap) {
    const bpe *b = tk->ctx;
    if (id < 0 || id >= b->V) return 0;
    size_t n = b->off[id + 1] - b->off[id];
    memcpy(out, b->bytes + b->off[id], n < cap ? n : cap);
    return n;
}

/* ------------------------------------------------------------ loading */

static const char *BPE_FIX = "reinstall GPT-2's files with `make deps`, or pass --bpe-dir DIR holding "
                             "GPT-2's encoder.json and vocab.bpe";

/* GPT-2 writes each byte as a printable code point so that tokens are JSON
 * text: ! to ~, ¡ to ¬ and ® to ÿ stand for themselves, the other 68 bytes
 * are 256, 257, ... in byte order. dec (324): code point -> byte, or -1. */
static void byte_decoder(int16_t *dec) {
    int next = 256;
    for (int c = 0; c < 324; c++) dec[c] = -1;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff);
        dec[printable ? c : next++] = (int16_t)c;
    }
}

/* A token's text (UTF-8 of the printable code points) -> its bytes; the
 * count, or -1 for a code point that stands for no byte. */
static int text_to_bytes(const int16_t *dec, const char *t, size_t n, uint8_t *out) {
    int k = 0;
    for (size_t i = 0; i < n; k++) {
        uint32_t c = (uint8_t)t[i];
        if (c < 0x80) i += 1;
        else if ((c & 0xe0) == 0xc0 && i + 1 < n) c = (c & 0x1f) << 6 | (t[i + 1] & 0x3f), i += 2;
        else return -1; /* every byte stands for a code point below 0x800 */
        if (c >= 324 || dec[c] < 0) return -1;
        out[k] = (uint8_t)dec[c];
    }
    return k;
}

/* Token bytes -> id, for reading vocab.bpe: open addressing over 2V slots. */
typedef struct vocab_index {
    int32_t *slot; /* id + 1, 0 = empty */
    uint32_t mask;
} vocab_index;

static int32_t *index_find(const bpe *b, const vocab_index *x, const uint8_t *s, size_t n) {
    for (uint32_t h = hash_bytes(s, n) & x->mask;; h = (h + 1) & x->mask) {
        int32_t id = x->slot[h] - 1;
        if (id < 0) return &x->slot[h];
        if (b->off[id + 1] - b->off[id] == n && !memcmp(b->bytes + b->off[id], s, n)) return &x->slot[h];
    }
}

static int bpe_alloc(bpe *b, size_t pool, cb_err *e) {
    b->off = calloc((size_t)b->V + 1, sizeof *b->off);
    b->bytes = malloc(pool + 1);
    b->merges = calloc(MERGE_SLOTS, sizeof *b->merges);
    b->cache = calloc(CACHE_SLOTS, sizeof *b->cache);
    b->ckeys = malloc(CACHE_POOL);
    b->cids = malloc(CACHE_POOL * sizeof *b->cids);
    if (!b->off || !b->bytes || !b->merges || !b->cache || !b->ckeys || !b->cids)
        return cb_fail(e, CB_ENOMEM, "out of memory for GPT-2's tokenizer tables");
    return CB_OK;
}

/* encoder.json's entries -> b->off, b->bytes (ordered by id). */
static int read_entries(bpe *b, const json_val *root, const char *path, cb_err *e) {
    uint32_t *len = calloc((size_t)b->V, sizeof *len);
    size_t *src = calloc((size_t)b->V, sizeof *src);
    uint8_t *tmp = malloc(b->off[b->V] + 1);
    int rc = len && src && tmp ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory reading %s", path);
    for (int i = 0, at = 0; i < root->n && !rc; i++) {
        const json_val *v = &root->v[i];
        int64_t id = v->type == JSON_INT ? v->i : -1;
        int n = text_to_bytes(b->dec, root->k[i], strlen(root->k[i]), tmp + at);
        if (id < 0 || id >= b->V || len[id] || n <= 0)
            rc = cb_fail(e, CB_EINPUT, "%s: entry %d (\"%.32s\") is not a byte-level token with a new id "
                         "below %d; the file is corrupt: %s", path, i, root->k[i], b->V, BPE_FIX);
        else len[id] = (uint32_t)n, src[id] = (size_t)at, at += n;
    }
    for (int id = 0; id < b->V && !rc; id++) {
        b->off[id + 1] = b->off[id] + len[id];
        memcpy(b->bytes + b->off[id], tmp + src[id], len[id]);
    }
    free(len), free(src), free(tmp);
    return rc;
}

static int read_encoder(bpe *b, const char *dir, cb_err *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    void *map;
    size_t size;
    int rc = fio_map(path, BPE_FIX, &map, &size, e);
    if (rc) return rc;
    json_val root;
    json_error je;
    if (json_parse(map, size, &root, &je)) {
        fio_unmap(map, size);
        if (je.nomem) return cb_fail(e, CB_ENOMEM, "out of memory reading %s", path);
        return cb_fail(e, CB_EINPUT, "%s: not valid JSON (%s at byte %zu): %s", path, je.msg, je.off, BPE_FIX);
    }
    fio_unmap(map, size);
    size_t pool = 0;
    for (int i = 0; root.type == JSON_OBJ && i < root.n; i++) pool += strlen(root.k[i]);
    b->V = root.type == JSON_OBJ ? root.n : 0;
    if (b->V < 257 || b->V > 65536)
        rc = cb_fail(e, CB_EINPUT, "%s: not an object of 257 to 65536 tokens; the file is corrupt: %s", path, BPE_FIX);
    if (!rc) rc = bpe_alloc(b, pool, e);
    if (!rc) b->off[b->V] = (uint32_t)pool; /* read_entries' scratch size */
    if (!rc) rc = read_entries(b, &root, path, e);
    json_free(&root);
    return rc;
}

/* Byte tokens and <|endoftext|> must be in the vocabulary. */
static int find_specials(bpe *b, const vocab_index *x, const char *dir, cb_err *e) {
    for (int c = 0; c < 256; c++) {
        uint8_t u = (uint8_t)c;
        int32_t id = *index_find(b, x, &u, 1) - 1;
        if (id < 0)
            return cb_fail(e, CB_EINPUT, "%s/encoder.json: no token for byte %d; the file is corrupt: %s", dir, c, BPE_FIX);
        b->byte_id[c] = (uint16_t)id;
    }
    b->eot = *index_find(b, x, (const uint8_t *)EOT_TEXT, sizeof EOT_TEXT - 1) - 1;
    if (b->eot < 0)
        return cb_fail(e, CB_EINPUT, "%s/encoder.json: no " EOT_TEXT " token; the file is corrupt: %s", dir, BPE_FIX);
    return CB_OK;
}

/* One merge line "left right" -> the merges table at rank. */
static int add_merge(bpe *b, const vocab_index *x, const char *line, size_t n, int rank, cb_err *e) {
    const char *sp = memchr(line, ' ', n);
    uint8_t buf[4096]; /* GPT-2's longest merge line has 257 bytes */
    int ln = sp && n < sizeof buf ? text_to_bytes(b->dec, line, (size_t)(sp - line), buf) : -1;
    int rn = ln > 0 ? text_to_bytes(b->dec, sp + 1, n - (size_t)(sp - line) - 1, buf + ln) : -1;
    int32_t l = ln > 0 ? *index_find(b, x, buf, (size_t)ln) - 1 : -1;
    int32_t r = rn > 0 ? *index_find(b, x, buf + ln, (size_t)rn) - 1 : -1;
    int32_t id = l >= 0 && r >= 0 ? *index_find(b, x, buf, (size_t)(ln + rn)) - 1 : -1;
    merge_slot *m = id >= 0 ? merge_find(b, l, r) : NULL;
    if (!m || m->key)
        return cb_fail(e, CB_EINPUT, "merge %d (\"%.*s\") is not two tokens of encoder.json whose join is one, "
                       "or repeats a merge", rank + 1, (int)(n < 40 ? n : 40), line);
    *m = (merge_slot){((uint64_t)l << 32 | (uint32_t)r) + 1, rank, id};
    return CB_OK;
}

static int read_merges(bpe *b, const vocab_index *x, const char *dir, cb_err *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    void *map;
    size_t size;
    int rc = fio_map(path, BPE_FIX, &map, &size, e), rank = 0;
    if (rc) return rc;
    const char *p = map, *end = p + size, *nl;
    if (size > 8 && !memcmp(p, "#version", 8)) p = (nl = memchr(p, '\n', size)) ? nl + 1 : end;
    while (!rc && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = (size_t)((nl ? nl : end) - p);
        if (n && rank >= (int)(MERGE_SLOTS / 2)) rc = cb_fail(e, CB_EINPUT, "more than %u merges", MERGE_SLOTS / 2);
        else if (n) rc = add_merge(b, x, p, n, rank++, e);
        p = nl ? nl + 1 : end;
    }
    if (!rc && rank == 0) rc = cb_fail(e, CB_EINPUT, "no merges");
    if (rc == CB_EINPUT) {
        cb_err inner = *e;
        cb_fail(e, CB_EINPUT, "%s: %s; the file is corrupt: %s", path, inner.msg, BPE_FIX);
    }
    fio_unmap(map, size);
    return rc;
}

static void bpe_free(bpe *b) {
    if (!b) return;
    free(b->off), free(b->bytes), free(b->merges), free(b->cache), free(b->ckeys), free(b->cids);
    free(b);
}

static int bpe_load(bpe *b, const char *dir, cb_err *e) {
    for (uint32_t c = 0; c < 65536; c++) b->bmp[c] = (uint8_t)(c >= 0xd800 && c <= 0xdfff ? CL_O : class_of(c));
    byte_decoder(b->dec);
    int rc = read_encoder(b, dir, e);
    if (rc) return rc;
    vocab_index x = {.mask = 1};
    while (x.mask < 2u * (uint32_t)b->V) x.mask <<= 1;
    x.slot = calloc(x.mask, sizeof *x.slot);
    x.mask--;
    if (!x.slot) return cb_fail(e, CB_ENOMEM, "out of memory for GPT-2's tokenizer tables");
    for (int id = 0; id < b->V; id++) {
        int32_t *s = index_find(b, &x, b->bytes + b->off[id], b->off[id + 1] - b->off[id]);
        if (*s) rc = cb_fail(e, CB_EINPUT, "%s/encoder.json: tokens %d and %d are the same bytes; the file "
                             "is corrupt: %s", dir, *s - 1, id, BPE_FIX);
        *s = id + 1;
        if (rc) break;
    }
    if (!rc) rc = find_specials(b, &x, dir, e);
    if (!rc) rc = read_merges(b, &x, dir, e);
    free(x.slot);
    return rc;
}

int cb_tokenizer_gpt2(const char *dir, cb_tokenizer *tk, cb_err *e) {
    bpe *b = calloc(1, sizeof *b);
    if (!b) return cb_fail(e, CB_ENOMEM, "out of memory for GPT-2's tokenizer");
    int rc = bpe_load(b, dir, e);
    if (rc) {
        bpe_free(b);
        return rc;
    }
    *tk = (cb_tokenizer){.name = "gpt2", .vocab = b->V, .encode = bpe_encode, .decode = bpe_decode, .ctx = b};
    return CB_OK;
}

void cb_bpe_free(void *ctx) {
    bpe_free(ctx);
}
