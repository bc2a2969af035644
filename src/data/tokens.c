/* Token files. llm.c: 256 int32 header (magic 20240520, version 1, count),
 * then count uint16 tokens at byte 1024; cubist puts its tokenizer tag in
 * word 3, which llm.c leaves 0. nanoGPT: headerless uint16. Both
 * are mapped read-only; tokens are used in place. */
#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"
#include "data/tokens.h"
#include "formats/fileio.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are little-endian; add byte swapping");

#define LLMC_MAGIC 20240520
#define LLMC_VERSION 1
#define LLMC_HEADER 1024

static const char *PREPARE_HINT = "run `cubist prepare` to make a token file";

/* llm.c layout: header counts the tokens; extra bytes after them are ignored. */
static int open_llmc(const char *path, cb_tokens *t, cb_err *e) {
    int32_t h[4];
    memcpy(h, t->map, sizeof h);
    if (h[1] != LLMC_VERSION)
        return cb_fail(e, CB_EINPUT, "%s: llm.c token file version %d; cubist reads version 1 (uint16 tokens): "
                       "re-export the tokens as version 1", path, h[1]);
    size_t count = (uint32_t)h[2], need = LLMC_HEADER + 2 * count;
    if (t->maplen < need)
        return cb_fail(e, CB_EINPUT, "%s: truncated: the header says %zu tokens, so %zu bytes, but the file has %zu; "
                       "copy it again or re-run `cubist prepare`", path, count, need, t->maplen);
    t->tok = (const uint16_t *)((const uint8_t *)t->map + LLMC_HEADER);
    t->n = count;
    t->format = CB_TOK_LLMC;
    t->tokenizer = cb_tokenizer_tag_name(h[3]) ? h[3] : 0;
    return CB_OK;
}

static int open_nanogpt(const char *path, cb_tokens *t, cb_err *e) {
    if (t->maplen % 2)
        return cb_fail(e, CB_EINPUT, "%s: %zu bytes is odd, so neither an llm.c token file (magic %d) nor "
                       "headerless uint16 tokens; %s", path, t->maplen, LLMC_MAGIC, PREPARE_HINT);
    t->tok = t->map;
    t->n = t->maplen / 2;
    t->format = CB_TOK_NANOGPT;
    return CB_OK;
}

/* Text passed where tokens belong: every byte of the first 4 KB is
 * printable ASCII, whitespace or UTF-8. Token files never are: byte tokens
 * have a zero high byte, and any tokenizer's frequent small ids put bytes
 * below 0x20 into the file. */
static int looks_like_text(const uint8_t *p, size_t n) {
    if (n > 4096) n = 4096;
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 && p[i] != '\n' && p[i] != '\r' && p[i] != '\t') return 0;
    return 1;
}

/* Token streams are heavy-tailed (Zipf): the 256 most frequent ids cover
 * half of English text in GPT-2's BPE and all of a byte-level file, while
 * uniform garbage spreads over all 65536 values (a few percent for 256 ids).
 * Below 1024 tokens the test cannot tell, and the file gets the benefit. */
static int looks_like_tokens(const uint16_t *tok, size_t n) {
    if (n < 1024) return 1;
    uint32_t *count = calloc(65536, sizeof *count);
    if (!count) return 1;
    for (size_t i = 0; i < n; i++) count[tok[i]]++;
    uint32_t top[256] = {0}; /* the 256 largest counts, top[0] the smallest */
    for (size_t v = 0; v < 65536; v++) {
        if (count[v] <= top[0]) continue;
        int j = 0;
        while (j < 255 && top[j + 1] < count[v]) top[j] = top[j + 1], j++;
        top[j] = count[v];
    }
    free(count);
    uint64_t covered = 0;
    for (int j = 0; j < 256; j++) covered += top[j];
    return covered * 4 >= n; /* at least 25% */
}

/* Finds the first token >= vocab; the common all-valid case is one pass. A
 * file that does not look like tokens is called so, not sent to --vocab. */
static int check_vocab(const char *path, const cb_tokens *t, int vocab, cb_err *e) {
    if (vocab >= 65536) return CB_OK;
    unsigned mx = 0;
    for (size_t i = 0; i < t->n; i++) mx = t->tok[i] > mx ? t->tok[i] : mx;
    if (mx < (unsigned)vocab) return CB_OK;
    size_t i = 0;
    while (t->tok[i] < vocab) i++;
    if (t->format == CB_TOK_NANOGPT && !looks_like_tokens(t->tok, t->n))
        return cb_fail(e, CB_EINPUT, "%s: not a token file: no llm.c header, and read as uint16 "
                       "tokens its values spread like random data (token %zu is %u, vocab %d); %s",
                       path, i, t->tok[i], vocab, PREPARE_HINT);
    return cb_fail(e, CB_EINPUT, "%s: token %zu is %u, not below the vocab size %d; pass `--vocab N` with N > %u "
                   "(or the tokenizer's vocab)", path, i, t->tok[i], vocab, mx);
}

static int detect(const char *path, int vocab, cb_tokens *t, cb_err *e) {
    int32_t magic = 0;
    if (t->maplen == 0) return cb_fail(e, CB_EINPUT, "%s: file is empty; %s", path, PREPARE_HINT);
    if (t->maplen >= sizeof magic) memcpy(&magic, t->map, sizeof magic);
    if (magic == LLMC_MAGIC && t->maplen < LLMC_HEADER)
        return cb_fail(e, CB_EINPUT, "%s: truncated llm.c header: the file starts with the llm.c magic %d "
                       "but has %zu bytes, fewer than the %d-byte header; copy it again or re-run "
                       "`cubist prepare`", path, LLMC_MAGIC, t->maplen, LLMC_HEADER);
    if (magic != LLMC_MAGIC && looks_like_text(t->map, t->maplen))
        return cb_fail(e, CB_EINPUT, "%s: looks like a text file, not a token file; turn it into tokens "
                       "with `cubist prepare --input %s --output FILE.bin`", path, path);
    int rc = magic == LLMC_MAGIC ? open_llmc(path, t, e) : open_nanogpt(path, t, e);
    if (rc) return rc;
    if (t->n < 2)
        return cb_fail(e, CB_EINPUT, "%s: holds %zu token(s); training needs at least 2 (an input and its target): "
                       "use a longer text", path, t->n);
    return check_vocab(path, t, vocab, e);
}

static int open_file(const char *path, int vocab, cb_tokens *t, cb_err *e) {
    memset(t, 0, sizeof *t);
    int rc = fio_map(path, PREPARE_HINT, &t->map, &t->maplen, e);
    if (rc) return rc;
    if ((rc = detect(path, vocab, t, e))) cb_tokens_close(t);
    return rc;
}

/* ------------------------------------------------------------ shards */

/* path's comma-separated items, each pattern expanded (sorted), appended to g. */
static int expand(const char *path, glob_t *g, cb_err *e) {
    char *list = strdup(path), *save = NULL;
    if (!list) return cb_fail(e, CB_ENOMEM, "out of memory");
    int rc = CB_OK, flags = 0;
    for (char *it = strtok_r(list, ",", &save); it && !rc; it = strtok_r(NULL, ",", &save)) {
        int r = glob(it, flags | (strpbrk(it, "*?[") ? 0 : GLOB_NOCHECK), NULL, g);
        if (r == GLOB_NOMATCH)
            rc = cb_fail(e, CB_EINPUT, "the pattern '%s' matches no file; check the directory and "
                         "the pattern (llm.c shards: 'dir/*_train_*.bin')", it);
        else if (r) rc = cb_fail(e, r == GLOB_NOSPACE ? CB_ENOMEM : CB_EINPUT, "cannot read the "
                                 "directories of '%s'; check the path", it);
        flags = GLOB_APPEND;
    }
    if (!rc && g->gl_pathc == 0) rc = cb_fail(e, CB_EINPUT, "'%s' names no file; pass FILE or a list FILE,FILE,...", path);
    free(list);
    return rc;
}

/* Shards must agree: one format, one tokenizer (when recorded). */
static int check_shard(const cb_tokens *first, const char *p0, const cb_tokens *s, const char *p, cb_err *e) {
    static const char *fmt[3] = {"", "an llm.c token file", "headerless (nanoGPT) tokens"};
    if (s->format != first->format)
        return cb_fail(e, CB_EINPUT, "%s is %s but %s is %s; give shards of one format (re-export them "
                       "with `cubist prepare`)", p0, fmt[first->format], p, fmt[s->format]);
    if (s->tokenizer && first->tokenizer && s->tokenizer != first->tokenizer)
        return cb_fail(e, CB_EINPUT, "%s was tokenised with %s but %s with %s; give shards of one tokenizer",
                       p0, cb_tokenizer_tag_name(first->tokenizer), p, cb_tokenizer_tag_name(s->tokenizer));
    return CB_OK;
}

static int open_shards(const glob_t *g, int vocab, cb_tokens *t, cb_err *e) {
    int n = (int)g->gl_pathc, rc = CB_OK;
    t->shard = calloc((size_t)n, sizeof *t->shard);
    t->start = calloc((size_t)n + 1, sizeof *t->start);
    if (!t->shard || !t->start) return cb_fail(e, CB_ENOMEM, "out of memory for %d token files", n);
    for (int i = 0; i < n && !rc; i++) {
        rc = open_file(g->gl_pathv[i], vocab, &t->shard[i], e);
        if (!rc) rc = check_shard(&t->shard[0], g->gl_pathv[0], &t->shard[i], g->gl_pathv[i], e);
        t->nshard = i + 1;
        t->start[i + 1] = t->start[i] + t->shard[i].n;
    }
    t->n = t->start[t->nshard];
    t->format = t->shard[0].format;
    t->tokenizer = t->shard[0].tokenizer;
    return rc;
}

int cb_tokens_open(const char *path, int vocab, cb_tokens *t, cb_err *e) {
    memset(t, 0, sizeof *t);
    if (vocab <= 0)
        return cb_fail(e, CB_EINPUT, "%s: vocab size %d must be positive; pass `--vocab N`", path, vocab);
    if (!strpbrk(path, ",*?[")) return open_file(path, vocab, t, e);
    glob_t g = {0};
    int rc = expand(path, &g, e);
    if (!rc && g.gl_pathc == 1) rc = open_file(g.gl_pathv[0], vocab, t, e);
    else if (!rc) rc = open_shards(&g, vocab, t, e);
    if (rc) cb_tokens_close(t);
    globfree(&g);
    return rc;
}

void cb_tokens_close(cb_tokens *t) {
    for (int i = 0; i < t->nshard; i++) cb_tokens_close(&t->shard[i]);
    free(t->shard);
    free(t->start);
    fio_unmap(t->map, t->maplen);
    memset(t, 0, sizeof *t);
}

void cb_tokens_read(const cb_tokens *t, size_t pos, size_t n, int *out) {
    if (t->nshard <= 1) {
        const uint16_t *p = (t->nshard ? t->shard[0].tok : t->tok) + pos;
        for (size_t i = 0; i < n; i++) out[i] = p[i];
        return;
    }
    int lo = 0, hi = t->nshard - 1; /* the shard holding pos: start[lo] <= pos < start[lo + 1] */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t->start[mid] <= pos) lo = mid;
        else hi = mid - 1;
    }
    for (int s = lo; n > 0; s++) {
        size_t off = pos - t->start[s], k = t->shard[s].n - off < n ? t->shard[s].n - off : n;
        for (size_t i = 0; i < k; i++) out[i] = t->shard[s].tok[off + i];
        out += k, pos += k, n -= k;
    }
}

const char *cb_tokenizer_tag_name(int tag) {
    return tag == 1 ? "byte" : tag == 2 ? "gpt2" : NULL;
}

int cb_tokenizer_tag(const char *name) {
    for (int tag = 1; tag <= 2; tag++)
        if (name && !strcmp(name, cb_tokenizer_tag_name(tag))) return tag;
    return 0;
}

int32_t cb_tokens_header(const cb_tokens *t, int i) {
    if (t->nshard > 1 || t->format != CB_TOK_LLMC || i < 0 || i >= LLMC_HEADER / 4) return 0;
    int32_t w;
    memcpy(&w, (const uint8_t *)t->map + 4 * (size_t)i, sizeof w);
    return w;
}

int cb_tokens_stage(fio_atomic *a, const char *path, const uint16_t *tok, size_t n,
                    const int32_t head[4], cb_err *e) {
    if (n > INT32_MAX)
        return cb_fail(e, CB_EINPUT, "%s: %zu tokens is more than an llm.c header can count (2^31 - 1); "
                       "split the text into shards", path, n);
    int32_t h[LLMC_HEADER / 4] = {LLMC_MAGIC, LLMC_VERSION, (int32_t)n, head[0], head[1], head[2], head[3]};
    int rc = fio_atomic_open(a, path, e);
    if (!rc) rc = fio_atomic_write(a, h, sizeof h, e);
    if (!rc && n) rc = fio_atomic_write(a, tok, n * sizeof *tok, e);
    return rc;
}

int cb_tokens_write(const char *path, const uint16_t *tok, size_t n, cb_err *e) {
    fio_atomic a;
    int rc = cb_tokens_stage(&a, path, tok, n, (const int32_t[4]){0, 0, 0, 0}, e);
    return rc ? rc : fio_atomic_commit(&a, e);
}
