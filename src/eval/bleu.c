/* Corpus BLEU: tokens, clipped n-gram counts, the score. See bleu.h. */
#include "eval/bleu.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct span { const char *s; size_t n; } span;

/* Bytes of the punctuation mark at s (len bytes left), or 0 for none. */
static size_t punct_len(const unsigned char *s, size_t len) {
    if (*s < 0x80) return (*s > 0x20 && *s < 0x7f && !((*s >= '0' && *s <= '9') ||
                          ((*s | 0x20) >= 'a' && (*s | 0x20) <= 'z'))) ? 1 : 0;
    if (len >= 2 && s[0] == 0xc2 && (s[1] == 0xa1 || s[1] == 0xbf || s[1] == 0xab || s[1] == 0xbb))
        return 2; /* ¡ ¿ « » */
    if (len >= 3 && s[0] == 0xe2 && ((s[1] == 0x80 && s[2] >= 0x90) || (s[1] == 0x81 && s[2] < 0x9f)))
        return 3; /* U+2010 .. U+205E */
    return 0;
}

static int is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* text -> tokens; *tok is grown with realloc. Returns the count or -1. */
static long tokenize(const char *text, size_t len, span **tok, size_t *cap) {
    const unsigned char *s = (const unsigned char *)text;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        if (is_space(s[i])) { i++; continue; }
        size_t j = i, p = punct_len(s + i, len - i);
        if (p) j = i + p;
        else while (j < len && !is_space(s[j]) && !punct_len(s + j, len - j)) j++;
        if (n == *cap) {
            size_t c = *cap ? 2 * *cap : 64;
            span *t = realloc(*tok, c * sizeof *t);
            if (!t) return -1;
            *tok = t, *cap = c;
        }
        (*tok)[n++] = (span){text + i, j - i};
        i = j;
    }
    return (long)n;
}

static int gram_eq(const span *a, const span *b, int n) {
    for (int k = 0; k < n; k++)
        if (a[k].n != b[k].n || memcmp(a[k].s, b[k].s, a[k].n)) return 0;
    return 1;
}

/* Occurrences of the n-gram g in t (len tokens), starting before `before`. */
static size_t count(const span *g, const span *t, size_t len, size_t before, int n) {
    size_t c = 0;
    for (size_t i = 0; i + (size_t)n <= len && i < before; i++) c += gram_eq(g, t + i, n);
    return c;
}

/* Clipped matches of n-grams of h (hl) in r (rl): each distinct n-gram at
 * its first occurrence adds min(count in h, count in r). Quadratic in the
 * sentence length, which is a verse's. */
static size_t clipped(const span *h, size_t hl, const span *r, size_t rl, int n) {
    size_t m = 0;
    for (size_t i = 0; i + (size_t)n <= hl; i++) {
        if (count(h + i, h, hl, i, n)) continue;
        size_t ch = count(h + i, h, hl, SIZE_MAX, n), cr = count(h + i, r, rl, SIZE_MAX, n);
        m += ch < cr ? ch : cr;
    }
    return m;
}

int cb_bleu_add(cb_bleu *b, const char *hyp, size_t hlen, const char *ref, size_t rlen) {
    span *h = NULL, *r = NULL;
    size_t hc = 0, rc = 0;
    long hl = tokenize(hyp, hlen, &h, &hc), rl = hl < 0 ? -1 : tokenize(ref, rlen, &r, &rc);
    if (rl >= 0) {
        for (int n = 1; n <= CB_BLEU_N; n++) {
            b->match[n - 1] += clipped(h, (size_t)hl, r, (size_t)rl, n);
            b->total[n - 1] += hl >= n ? (size_t)(hl - n + 1) : 1; /* NLTK: max(1, count) */
        }
        b->hyp_len += (size_t)hl, b->ref_len += (size_t)rl;
    }
    free(h);
    free(r);
    return rl < 0 ? -1 : 0;
}

double cb_bleu_score(const cb_bleu *b, double p[CB_BLEU_N], double *bp) {
    double logp = 0, pen = 0;
    int zero = 0;
    for (int n = 0; n < CB_BLEU_N; n++) {
        double pn = b->total[n] ? (double)b->match[n] / (double)b->total[n] : 0;
        if (p) p[n] = pn;
        zero |= pn == 0;
        logp += zero ? 0 : 0.25 * log(pn);
    }
    if (b->hyp_len) pen = b->hyp_len >= b->ref_len ? 1 : exp(1 - (double)b->ref_len / (double)b->hyp_len);
    if (bp) *bp = pen;
    return zero ? 0 : pen * exp(logp);
}
