/* `cubist prepare`: text -> train and validation token files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cubist.h"
#include "data/bitext.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "formats/fileio.h"

/* Token counts of the two files; both must be trainable (>= 2 tokens). */
static int split(const char *text_path, size_t n, int has_val, double val_frac,
                 size_t *ntrain, size_t *nval, cb_err *e) {
    *nval = has_val ? (size_t)((double)n * val_frac) : 0;
    *ntrain = n - *nval;
    if (*ntrain < 2 || (has_val && *nval < 2))
        return cb_fail(e, CB_EINPUT, "%s: %zu tokens split into %zu for training and %zu for validation; "
                       "each needs at least 2: use a longer text or change the validation fraction",
                       text_path, n, *ntrain, *nval);
    return CB_OK;
}

/* Both files or neither (path[1] NULL: one file), and with a compact
 * vocabulary (map, nmap ids) its map beside each: every file is staged to
 * its .tmp first, and if a later rename fails the earlier files are
 * removed again. */
static int write_both(const char *const path[2], const uint16_t *const ids[2], const size_t n[2],
                      const int32_t head[4], const int32_t *map, int nmap, cb_err *e) {
    fio_atomic a[4] = {{.fd = -1}, {.fd = -1}, {.fd = -1}, {.fd = -1}};
    int rc = CB_OK, k = 0, done = 0;
    char mp[2][4096];
    for (int i = 0; i < 2 && !rc && path[i]; i++) {
        snprintf(mp[i], sizeof mp[i], "%s.vocab", path[i]);
        rc = cb_tokens_stage(&a[k++], path[i], ids[i], n[i], head, e);
        if (!rc && map) rc = cb_bitext_stage_map(&a[k++], mp[i], map, nmap, e);
    }
    for (; !rc && done < k; done++) rc = fio_atomic_commit(&a[done], e);
    for (int i = done; rc && i < k; i++) fio_atomic_abort(&a[i]);
    for (int i = 0; rc && done > 0 && i < 2 && path[i]; i++) {
        unlink(path[i]);
        if (map) unlink(mp[i]);
    }
    return rc;
}

static int write_split(const char *text_path, const uint16_t *ids, size_t n, int tag,
                       const char *train_path, const char *val_path, double val_frac, cb_err *e) {
    size_t ntrain, nval;
    int rc = split(text_path, n, val_path != NULL, val_frac, &ntrain, &nval, e);
    return rc ? rc : write_both((const char *const[2]){train_path, val_path},
                                (const uint16_t *const[2]){ids, ids + ntrain},
                                (const size_t[2]){ntrain, nval}, (const int32_t[4]){tag, 0, 0, 0}, NULL, 0, e);
}

static int encode_split(const char *text_path, const void *text, size_t len, const cb_tokenizer *tk,
                        const char *train_path, const char *val_path, double val_frac, cb_err *e) {
    uint16_t *ids = malloc(len * sizeof *ids);
    size_t n = ids ? tk->encode(tk, text, len, ids) : SIZE_MAX;
    int rc = n == SIZE_MAX ? cb_fail(e, CB_ENOMEM, "%s: out of memory for %zu tokens", text_path, len)
           : write_split(text_path, ids, n, cb_tokenizer_tag(tk->name), train_path, val_path, val_frac, e);
    free(ids);
    return rc;
}

int cb_prepare_text(const char *text_path, const char *train_path, const char *val_path,
                    double val_frac, const char *tokenizer, const char *bpe_dir, cb_err *e) {
    if (!(val_frac >= 0 && val_frac < 1))
        return cb_fail(e, CB_EINPUT, "validation fraction %g is outside [0, 1); pass a value like 0.1", val_frac);
    if (val_path && val_frac == 0)
        return cb_fail(e, CB_EINPUT, "%s: a validation file with a validation fraction of 0 would be "
                       "empty; pass a fraction like 0.05 or drop the validation file", val_path);
    cb_tokenizer tk;
    int rc = cb_tokenizer_open(tokenizer ? tokenizer : "byte", bpe_dir, &tk, e);
    if (rc) return rc;
    void *text;
    size_t len;
    if (!(rc = fio_map(text_path, "check the path to the text file", &text, &len, e))) {
        if (len == 0) rc = cb_fail(e, CB_EINPUT, "%s: file is empty; give a text file to train on", text_path);
        else rc = encode_split(text_path, text, len, &tk, train_path, val_path, val_frac, e);
        fio_unmap(text, len);
    }
    cb_tokenizer_free(&tk);
    return rc;
}

/* ---------------------------------------------------------------- pairs */

typedef struct pair_ctx {
    const char *path;  /* the TSV, for messages */
    const cb_tokenizer *tk;
    int context;       /* most tokens a side may take with its EOS or BOS */
    uint16_t *ids;     /* the stream: source, EOS, target, EOS, ... */
    size_t n, npairs;
} pair_ctx;

static int encode_side(pair_ctx *c, const char *s, size_t len, size_t line, const char *side, cb_err *e) {
    if (len == 0)
        return cb_fail(e, CB_EINPUT, "%s:%zu: the %s side is empty; write `source<TAB>target` with text on "
                       "both sides, or drop the line", c->path, line, side);
    size_t k = c->tk->encode(c->tk, (const uint8_t *)s, len, c->ids + c->n);
    if (k == SIZE_MAX) return cb_fail(e, CB_ENOMEM, "%s:%zu: out of memory tokenising", c->path, line);
    if (k + 1 > (size_t)c->context)
        return cb_fail(e, CB_EINPUT, "%s:%zu: the %s is %zu tokens with its end token, longer than the "
                       "context of %d; pass --context %zu or more, or shorten or drop the line",
                       c->path, line, side, k + 1, c->context, k + 1);
    c->n += k;
    c->ids[c->n++] = (uint16_t)(c->tk->vocab + 2);
    return CB_OK;
}

/* One line (without its newline; a trailing CR is dropped). */
static int encode_line(pair_ctx *c, const char *s, size_t len, size_t line, cb_err *e) {
    if (len && s[len - 1] == '\r') len--;
    const char *tab = memchr(s, '\t', len);
    if (!tab)
        return cb_fail(e, CB_EINPUT, "%s:%zu: no tab; write one `source<TAB>target` pair a line",
                       c->path, line);
    size_t ls = (size_t)(tab - s), lt = len - ls - 1;
    if (memchr(tab + 1, '\t', lt))
        return cb_fail(e, CB_EINPUT, "%s:%zu: more than one tab; write one `source<TAB>target` pair a "
                       "line, with no tab inside the text", c->path, line);
    int rc = encode_side(c, s, ls, line, "source", e);
    if (!rc) rc = encode_side(c, tab + 1, lt, line, "target", e);
    c->npairs += !rc;
    return rc;
}

static int encode_pairs(pair_ctx *c, const char *text, size_t len, cb_err *e) {
    c->ids = malloc((len + 2) * sizeof *c->ids); /* a token per byte at most, and the EOS of each side replaces the tab or the newline */
    if (!c->ids) return cb_fail(e, CB_ENOMEM, "%s: out of memory for %zu tokens", c->path, len);
    int rc = CB_OK;
    size_t line = 1;
    for (const char *s = text, *end = text + len; s < end && !rc; line++) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t l = nl ? (size_t)(nl - s) : (size_t)(end - s);
        rc = encode_line(c, s, l, line, e);
        s += l + 1;
    }
    return rc;
}

/* tsv -> c->ids; an empty file is bad input. */
static int read_pairs(pair_ctx *c, cb_err *e) {
    void *text;
    size_t len;
    int rc = fio_map(c->path, "check the path to the pair file", &text, &len, e);
    if (rc) return rc;
    if (len == 0) rc = cb_fail(e, CB_EINPUT, "%s: file is empty; give `source<TAB>target` lines", c->path);
    else rc = encode_pairs(c, text, len, e);
    fio_unmap(text, len);
    return rc;
}

/* The training pairs' ids (c, encoded by tk) -> the compact vocabulary:
 * tk becomes the compact tokenizer (the held-out pairs are encoded with it)
 * and c's ids are renumbered into it. */
static int compact_vocab(pair_ctx *c, cb_tokenizer *tk, int32_t **map, int *nmap, cb_err *e) {
    int V = tk->vocab, rc = cb_tokenizer_used_ids(tk, c->ids, c->n, map, nmap, e);
    if (!rc) rc = cb_tokenizer_compact(tk, *map, *nmap, e);
    if (rc) return rc;
    int32_t *inv = malloc(sizeof(int32_t) * (size_t)V);
    if (!inv) return cb_fail(e, CB_ENOMEM, "out of memory for the compact vocabulary");
    for (int k = 0; k < *nmap; k++) inv[(*map)[k]] = k;
    for (size_t i = 0; i < c->n; i++) /* the ids, and the EOS V + 2 -> nmap + 2 */
        c->ids[i] = (uint16_t)(c->ids[i] < V ? inv[c->ids[i]] : c->ids[i] - V + *nmap);
    free(inv);
    return CB_OK;
}

int cb_prepare_pairs(const char *pairs_path, const char *out_path, const char *val_pairs,
                     const char *val_out, int context, const char *tokenizer, const char *bpe_dir,
                     int compact, size_t *npairs, cb_err *e) {
    cb_tokenizer tk;
    int rc = cb_tokenizer_open(tokenizer ? tokenizer : "byte", bpe_dir, &tk, e), nmap = 0;
    if (rc) return rc;
    pair_ctx c[2] = {{.path = pairs_path, .tk = &tk, .context = context},
                     {.path = val_pairs, .tk = &tk, .context = context}};
    int32_t *map = NULL;
    rc = read_pairs(&c[0], e);
    if (!rc && compact) rc = compact_vocab(&c[0], &tk, &map, &nmap, e);
    if (!rc && val_pairs) rc = read_pairs(&c[1], e);
    if (!rc)
        rc = write_both((const char *const[2]){out_path, val_pairs ? val_out : NULL},
                        (const uint16_t *const[2]){c[0].ids, c[1].ids}, (const size_t[2]){c[0].n, c[1].n},
                        (const int32_t[4]){cb_tokenizer_tag(tk.name), CB_BITEXT_KIND, tk.vocab, compact != 0},
                        map, nmap, e);
    free(map);
    if (!rc && npairs) npairs[0] = c[0].npairs, npairs[1] = c[1].npairs;
    free(c[0].ids);
    free(c[1].ids);
    cb_tokenizer_free(&tk);
    return rc;
}
