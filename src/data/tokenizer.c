#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/bpe.h"
#include "data/tokenizer.h"

/* text (len) -> ids (len): the identity on bytes. */
static size_t byte_encode(const cb_tokenizer *tk, const uint8_t *text, size_t len, uint16_t *out) {
    (void)tk;
    for (size_t i = 0; i < len; i++) out[i] = text[i];
    return len;
}

static size_t byte_decode(const cb_tokenizer *tk, int id, uint8_t *out, size_t cap) {
    (void)tk;
    if (id < 0 || id >= 256) return 0;
    if (cap > 0) out[0] = (uint8_t)id;
    return 1;
}

cb_tokenizer cb_tokenizer_byte(void) {
    return (cb_tokenizer){.name = "byte", .vocab = 256, .encode = byte_encode, .decode = byte_decode, .ctx = 0};
}

int cb_tokenizer_open(const char *name, const char *bpe_dir, cb_tokenizer *tk, cb_err *e) {
    if (!strcmp(name, "byte")) {
        *tk = cb_tokenizer_byte();
        return CB_OK;
    }
    if (!strcmp(name, "gpt2")) return cb_tokenizer_gpt2(bpe_dir ? bpe_dir : CB_BPE_DIR, tk, e);
    return cb_fail(e, CB_EINPUT, "unknown tokenizer '%s'; use byte or gpt2", name);
}

void cb_tokenizer_free(cb_tokenizer *tk) {
    if (tk->release) tk->release(tk);
    else if (tk->ctx) cb_bpe_free(tk->ctx);
    tk->release = NULL;
    tk->ctx = NULL;
}

/* ------------------------------------------------------ compact vocabulary */

typedef struct compact {
    cb_tokenizer base;
    int32_t *ids;   /* (V) base id of each compact id */
    int32_t *inv;   /* (base V) compact id of each base id, -1 outside */
    int32_t byte[256]; /* compact id of each single byte */
} compact;

/* The base's id of each single byte: the base ids whose text is one byte. */
static void single_bytes(const cb_tokenizer *tk, int32_t byte[256]) {
    uint8_t b[8];
    for (int i = 0; i < 256; i++) byte[i] = -1;
    for (int id = 0; id < tk->vocab; id++)
        if (tk->decode(tk, id, b, sizeof b) == 1 && byte[b[0]] < 0) byte[b[0]] = id;
}

int cb_tokenizer_used_ids(const cb_tokenizer *tk, const uint16_t *tok, size_t n, int32_t **ids,
                          int *nids, cb_err *e) {
    uint8_t *used = calloc((size_t)tk->vocab, 1);
    *ids = malloc(sizeof(int32_t) * (size_t)tk->vocab);
    if (!used || !*ids) {
        free(used), free(*ids), *ids = NULL;
        return cb_fail(e, CB_ENOMEM, "out of memory for the compact vocabulary");
    }
    int32_t byte[256];
    single_bytes(tk, byte);
    for (int i = 0; i < 256; i++)
        if (byte[i] >= 0) used[byte[i]] = 1;
    for (size_t i = 0; i < n; i++)
        if (tok[i] < tk->vocab) used[tok[i]] = 1;
    *nids = 0;
    for (int id = 0; id < tk->vocab; id++)
        if (used[id]) (*ids)[(*nids)++] = id;
    free(used);
    return CB_OK;
}

/* base ids (k of them, in out) -> compact ids; an id outside as its bytes.
 * Never longer than the text (one byte a token at most). */
static size_t compact_encode(const cb_tokenizer *tk, const uint8_t *text, size_t len, uint16_t *out) {
    const compact *c = tk->ctx;
    uint16_t *base = malloc(sizeof *base * (len ? len : 1));
    if (!base) return SIZE_MAX;
    size_t k = c->base.encode(&c->base, text, len, base), o = 0;
    uint8_t b[256];
    for (size_t i = 0; i < k && k != SIZE_MAX; i++) {
        int32_t id = c->inv[base[i]];
        if (id >= 0) {
            out[o++] = (uint16_t)id;
            continue;
        }
        size_t w = c->base.decode(&c->base, base[i], b, sizeof b);
        for (size_t j = 0; j < w && j < sizeof b; j++) out[o++] = (uint16_t)c->byte[b[j]];
    }
    free(base);
    return k == SIZE_MAX ? SIZE_MAX : o;
}

static size_t compact_decode(const cb_tokenizer *tk, int id, uint8_t *out, size_t cap) {
    const compact *c = tk->ctx;
    return id < 0 || id >= tk->vocab ? 0 : c->base.decode(&c->base, c->ids[id], out, cap);
}

static void compact_release(cb_tokenizer *tk) {
    compact *c = tk->ctx;
    cb_tokenizer_free(&c->base);
    free(c->ids), free(c->inv), free(c);
}

int cb_tokenizer_parse_map(const char *text, size_t len, const char *what, int32_t **ids, int *n,
                           cb_err *e) {
    size_t cap = len / 2 + 1; /* an id and a separator at least */
    *n = 0, *ids = malloc(sizeof(int32_t) * cap);
    if (!*ids) return cb_fail(e, CB_ENOMEM, "%s: out of memory for the vocabulary map", what);
    for (size_t i = 0; i < len;) {
        if (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t') {
            i++;
            continue;
        }
        long v = 0;
        size_t j = i;
        while (j < len && text[j] >= '0' && text[j] <= '9' && v <= 65535) v = 10 * v + (text[j++] - '0');
        int sep = j == len || text[j] == ' ' || text[j] == '\n' || text[j] == '\r' || text[j] == '\t';
        if (j == i || !sep || v > 65535 || (*n && v <= (*ids)[*n - 1])) {
            free(*ids), *ids = NULL;
            return cb_fail(e, CB_EINPUT, "%s: entry %d is not a token id above the one before; expected "
                           "increasing ids, one a line; prepare the pairs again", what, *n + 1);
        }
        (*ids)[(*n)++] = (int32_t)v, i = j;
    }
    return CB_OK;
}

int cb_tokenizer_compact(cb_tokenizer *tk, const int32_t *ids, int n, cb_err *e) {
    compact *c = calloc(1, sizeof *c);
    if (!c) return cb_fail(e, CB_ENOMEM, "out of memory for the compact vocabulary");
    c->base = *tk, *tk = (cb_tokenizer){.name = c->base.name, .vocab = n, .encode = compact_encode,
                                        .decode = compact_decode, .ctx = c, .release = compact_release};
    c->ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    c->inv = malloc(sizeof(int32_t) * (size_t)c->base.vocab);
    if (!c->ids || !c->inv) return cb_fail(e, CB_ENOMEM, "out of memory for the compact vocabulary");
    for (int i = 0; i < c->base.vocab; i++) c->inv[i] = -1;
    for (int k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= c->base.vocab || (k && ids[k] <= ids[k - 1]))
            return cb_fail(e, CB_EINPUT, "compact vocabulary: entry %d (%d) is not an increasing id "
                           "of %s's %d; prepare the pairs again", k, ids[k], c->base.name, c->base.vocab);
        c->ids[k] = ids[k], c->inv[ids[k]] = k;
    }
    single_bytes(&c->base, c->byte);
    for (int b = 0; b < 256; b++) {
        if (c->byte[b] >= 0 && c->inv[c->byte[b]] >= 0) {
            c->byte[b] = c->inv[c->byte[b]];
            continue;
        }
        return cb_fail(e, CB_EINPUT, "compact vocabulary: byte %d has no id in it; prepare the pairs "
                       "again", b);
    }
    return CB_OK;
}
