/* Translation pairs (src/data/bitext.c): `prepare --pairs` written and read
 * back token for token, batches by token count over length buckets (every
 * pair once, within the budget, length ranges of batches not overlapping,
 * shuffled by the seed), padded batches, and a plain token file refused. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cubist.h"
#include "data/bitext.h"
#include "util/rng.h"

enum { NP = 600, MAXLEN = 120 };

static int nfail;
static char dir[] = "/tmp/cubist_test_bitext_XXXXXX";
static char src_txt[NP][MAXLEN + 1], tgt_txt[NP][MAXLEN + 1];

static void check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(int ok, const char *name, const char *fmt, ...) {
    va_list ap;
    printf("%s %s: ", ok ? "PASS" : "FAIL", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    nfail += !ok;
}

static const char *fx(const char *name) {
    static char buf[2][512];
    static int k;
    k ^= 1;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Random text of 1..MAXLEN bytes: letters, spaces, and UTF-8 (é is 2 bytes). */
static void random_text(cb_rng *r, char *out) {
    int n = 1 + (int)cb_rng_below(r, MAXLEN), j = 0;
    while (j < n) {
        uint64_t c = cb_rng_below(r, 30);
        if (c == 0 && j + 2 <= n) out[j++] = (char)0xc3, out[j++] = (char)0xa9;
        else out[j++] = c < 5 ? ' ' : (char)('a' + c % 26);
    }
    out[j] = 0;
}

static void write_tsv(const char *path) {
    cb_rng r;
    cb_rng_seed(&r, 7);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < NP; i++) {
        random_text(&r, src_txt[i]);
        random_text(&r, tgt_txt[i]);
        fprintf(f, "%s\t%s\n", src_txt[i], tgt_txt[i]);
    }
    fclose(f);
}

/* row == text's bytes with pre before (-1: none), post after, then PAD. */
static int row_is(const int *row, int T, int pre, const char *text, int post, int pad) {
    int j = 0, n = (int)strlen(text);
    if (pre >= 0 && row[j++] != pre) return 0;
    for (int i = 0; i < n; i++)
        if (row[j++] != (unsigned char)text[i]) return 0;
    if (post >= 0 && row[j++] != post) return 0;
    while (j < T)
        if (row[j++] != pad) return 0;
    return 1;
}

static void test_roundtrip(const cb_bitext *p) {
    int T = p->max_len, bad = 0;
    int *s = malloc(sizeof(int) * T), *d = malloc(sizeof(int) * T), *t = malloc(sizeof(int) * T);
    for (size_t i = 0; i < p->n; i++) {
        cb_bitext_fill(p, &i, 1, T, T, s, d, t);
        bad += !row_is(s, T, -1, src_txt[i], 258, 256) || !row_is(d, T, 257, tgt_txt[i], -1, 256) ||
               !row_is(t, T, -1, tgt_txt[i], 258, 256);
    }
    check(p->n == NP && p->base == 256 && bad == 0, "pairs round trip",
          "%zu pairs (want %d), base %d, %d rows differ from the TSV (src+EOS, BOS+tgt, tgt+EOS, PAD 256)",
          p->n, NP, p->base, bad);
    free(s), free(d), free(t);
}

static int plen(const cb_bitext *p, size_t i) { return (p->slen[i] > p->tlen[i] ? p->slen[i] : p->tlen[i]) + 1; }

/* Every pair once; each batch within rows and tokens; batches are runs of
 * the length order, so their [min, max] length ranges do not overlap. */
static void test_batches(const cb_bitext *p, size_t budget, int rows) {
    cb_bitext_batches b;
    cb_err e = {0};
    if (cb_bitext_batch(p, budget, rows, 11, &b, &e)) { check(0, "batches", "%s", e.msg); return; }
    int *seen = calloc(p->n, sizeof *seen), over = 0, overlap = 0, dup = 0;
    size_t padded = 0, real = 0;
    for (size_t k = 0; k < b.nb; k++) {
        int mn = 1 << 30, mx = 0, nr = (int)(b.start[k + 1] - b.start[k]);
        for (size_t j = b.start[k]; j < b.start[k + 1]; j++) {
            int l = plen(p, b.order[j]);
            mn = l < mn ? l : mn, mx = l > mx ? l : mx;
            dup += seen[b.order[j]]++ > 0;
            real += (size_t)p->slen[b.order[j]] + p->tlen[b.order[j]] + 2;
        }
        over += nr > rows || (size_t)nr * (size_t)mx > budget || nr == 0;
        padded += 2 * (size_t)nr * (size_t)mx;
        for (size_t q = 0; q < b.nb; q++) { /* another batch with a length strictly inside (mn, mx) */
            for (size_t j = b.start[q]; q != k && j < b.start[q + 1]; j++) {
                int l = plen(p, b.order[j]);
                overlap += l > mn && l < mx;
            }
        }
    }
    int missing = 0;
    for (size_t i = 0; i < p->n; i++) missing += !seen[i];
    cb_bitext_batches b2, b3;
    cb_bitext_batch(p, budget, rows, 11, &b2, &e);
    cb_bitext_batch(p, budget, rows, 12, &b3, &e);
    int same = !memcmp(b.order, b2.order, p->n * sizeof *b.order),
        differ = memcmp(b.order, b3.order, p->n * sizeof *b.order) != 0;
    check(!dup && !missing && !over && !overlap && same && differ, "batches by token count",
          "%zu batches of <= %d rows and <= %zu padded tokens: %d duplicated, %d missing, %d over budget, "
          "%d lengths inside another batch's range; seed 11 twice equal %d, seed 12 differs %d; "
          "padding %.1f%% of the padded tokens", b.nb, rows, budget, dup, missing, over, overlap,
          same, differ, 100.0 * (double)(padded - real) / (double)padded);
    free(seen);
    cb_bitext_batches_free(&b), cb_bitext_batches_free(&b2), cb_bitext_batches_free(&b3);
}

static void test_refused(const cb_bitext *p) {
    cb_err e = {0};
    FILE *f = fopen(fx("plain.txt"), "w");
    fprintf(f, "plain text, not pairs\n");
    fclose(f);
    cb_bitext q;
    int rc = cb_prepare_text(fx("plain.txt"), fx("plain.bin"), NULL, 0, "byte", NULL, &e);
    if (!rc) rc = cb_bitext_open(fx("plain.bin"), &q, &e) == CB_EINPUT ? 0 : -1;
    check(!rc && strstr(e.msg, "not of translation pairs"), "plain token file refused", "%s", e.msg);
    cb_bitext_batches b;
    e = (cb_err){0};
    rc = cb_bitext_batch(p, (size_t)p->max_len - 1, 4, 1, &b, &e);
    check(rc == CB_EINPUT && strstr(e.msg, "cannot hold the longest pair"), "budget below the longest pair",
          "%s", e.msg);
}

int main(void) {
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    cb_err e = {0};
    size_t n[2];
    write_tsv(fx("p.tsv"));
    cb_bitext p;
    if (cb_prepare_pairs(fx("p.tsv"), fx("p.bin"), NULL, NULL, MAXLEN + 1, "byte", NULL, 0, n, &e) ||
        cb_bitext_open(fx("p.bin"), &p, &e)) {
        printf("FAIL pairs: %s\n", e.msg);
        return 1;
    }
    test_roundtrip(&p);
    test_batches(&p, 2048, 64);
    test_batches(&p, 600, 8);
    test_refused(&p);
    cb_bitext_close(&p);
    const char *rm[] = {"p.tsv", "p.bin", "plain.txt", "plain.bin"};
    for (size_t i = 0; i < sizeof rm / sizeof *rm; i++) unlink(fx(rm[i]));
    rmdir(dir);
    return nfail != 0;
}
