/* Greedy and beam search (search.h) on the engine's decoding
 * (cb_model_decode_*) or its full forward (cb_model_probs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/search.h"

int cb_search_init(cb_search *s, cb_model *m, int rows, int T, int V, int *slen, int *tlen,
                   int cache, cb_err *e) {
    *s = (cb_search){.m = m, .rows = rows, .T = T, .V = V, .pad = V - 3, .bos = V - 2,
                     .eos = V - 1, .cache = cache, .slen = slen, .tlen = tlen};
    size_t n = (size_t)rows * T;
    s->ids = malloc(sizeof(int) * 2 * n);
    s->probs = malloc(sizeof(float) * (size_t)rows * V);
    s->logp = malloc(sizeof(double) * rows);
    s->hyp = malloc(sizeof(int) * n), s->hyp2 = malloc(sizeof(int) * n);
    s->from = malloc(sizeof(int) * rows);
    if (!s->ids || !s->probs || !s->logp || !s->hyp || !s->hyp2 || !s->from) {
        cb_search_free(s);
        return cb_fail(e, CB_ENOMEM, "out of memory for decoding");
    }
    return CB_OK;
}

void cb_search_free(cb_search *s) {
    free(s->ids), free(s->probs), free(s->logp), free(s->hyp), free(s->hyp2), free(s->from);
    s->ids = NULL, s->probs = NULL, s->logp = NULL, s->hyp = s->hyp2 = s->from = NULL;
}

/* Row b: source src (len tokens, EOS, padding; NULL: a padding row), the
 * decoder's input BOS then padding. */
static void set_row(cb_search *s, int b, const uint16_t *src, int len) {
    int *r = s->ids + (size_t)b * 2 * s->T;
    for (int t = 0; t < s->T; t++) {
        r[2 * t] = !src ? s->pad : t < len ? src[t] : t == len ? s->eos : s->pad;
        r[2 * t + 1] = t == 0 ? s->bos : s->pad;
    }
    s->slen[b] = src ? len + 1 : 0;
    s->tlen[b] = s->T; /* causal: position t never sees the padding after it */
}

/* The encoder on the first n rows, once; row r decodes source r / beams. */
static int start(cb_search *s, int n, int beams, cb_err *e) {
    return s->cache && n ? cb_model_decode_start(s->m, s->ids, 1, n, beams, e) : CB_OK;
}

/* Next-token probabilities of rows [0, rows) at position t into s->probs. */
static int probs_at(cb_search *s, int t, int rows, cb_err *e) {
    if (s->cache) {
        cb_model_decode_step(s->m, t, rows, s->probs);
        return CB_OK;
    }
    const float *p = cb_model_probs(s->m, s->ids);
    if (!p) return cb_fail(e, CB_EINPUT, "decoding without the cache needs one process and one "
                                         "micro-batch");
    for (int b = 0; b < rows; b++)
        memcpy(s->probs + (size_t)b * s->V, p + ((size_t)b * s->T + t) * s->V,
               sizeof(float) * s->V);
    return CB_OK;
}

/* The ids a translation may hold: the tokenizer's and EOS. */
static int choosable(const cb_search *s, int v) { return v < s->pad || v == s->eos; }

static int argmax(const cb_search *s, const float *p) {
    int best = s->eos;
    for (int v = 0; v < s->pad; v++)
        if (p[v] > p[best] || (p[v] == p[best] && v < best)) best = v;
    return best;
}

static void put_next(cb_search *s, int b, int t, int tok) {
    if (t + 1 < s->T) s->ids[((size_t)b * s->T + t + 1) * 2 + 1] = tok;
}

int cb_search_greedy(cb_search *s, const uint16_t *const *src, const int *len, int n,
                     int max_len, int *out, int *olen, cb_err *e) {
    for (int b = 0; b < s->rows; b++) set_row(s, b, b < n ? src[b] : NULL, b < n ? len[b] : 0);
    int rc = start(s, n, 1, e), live = n;
    for (int b = 0; b < n; b++) olen[b] = 0, s->from[b] = 1; /* from[b]: row b still decoding */
    for (int t = 0; !rc && live && t < max_len && t < s->T; t++) {
        if ((rc = probs_at(s, t, n, e))) break;
        for (int b = 0; b < n; b++) {
            if (!s->from[b]) continue;
            int tok = argmax(s, s->probs + (size_t)b * s->V);
            if (tok == s->eos) s->from[b] = 0, live--;
            else out[(size_t)b * max_len + olen[b]++] = tok, put_next(s, b, t, tok);
        }
    }
    return rc;
}

/* ------------------------------------------------------------ beam search */

typedef struct cand {
    double score;
    int beam, tok;
} cand;

/* c (K, sorted best first) takes x if it beats the last; ties keep the
 * earlier beam, then the smaller id, so K = 1 picks greedy's argmax. */
static void offer(cand *c, int K, int *nc, cand x) {
    int i = *nc < K ? (*nc)++ : K;
    if (i == K && !(x.score > c[K - 1].score)) return;
    if (i == K) i = K - 1;
    while (i > 0 && x.score > c[i - 1].score) c[i] = c[i - 1], i--;
    c[i] = x;
}

static double penalty(int len, double alpha) { return pow((5.0 + len) / 6.0, alpha); }

typedef struct best {
    double score;
    int len, found;
} best;

/* A hypothesis of len tokens (then EOS when eos) and log-probability lp:
 * kept in out when its normalised score beats the best so far. */
static void finish(const int *toks, int len, int eos, double lp, double alpha, best *bt, int *out,
                   int max_len) {
    double sc = lp / penalty(len + eos, alpha);
    if (bt->found && !(sc > bt->score)) return;
    *bt = (best){sc, len, 1};
    memcpy(out, toks, sizeof(int) * (size_t)(len < max_len ? len : max_len));
}

/* The live beams after step t: cands c[0..nc) that do not end in EOS; each
 * row's tokens and decoder input copied from its parent, its cache too. */
static int advance(cb_search *s, const cand *c, int nc, int t, double alpha, best *bt, int *out,
                   int max_len) {
    int live = 0, T = s->T;
    for (int i = 0; i < nc; i++) {
        const int *ph = s->hyp + (size_t)c[i].beam * T;
        if (c[i].tok == s->eos) {
            finish(ph, t, 1, c[i].score, alpha, bt, out, max_len);
            continue;
        }
        int *h = s->hyp2 + (size_t)live * T;
        memcpy(h, ph, sizeof(int) * t), h[t] = c[i].tok;
        s->from[live] = c[i].beam, s->logp[live++] = c[i].score;
    }
    memcpy(s->hyp, s->hyp2, sizeof(int) * (size_t)live * T);
    for (int r = 0; r < live; r++) /* the decoder's input: BOS, then the row's tokens */
        for (int p = 1; p <= t + 1 && p < T; p++) s->ids[((size_t)r * T + p) * 2 + 1] = s->hyp[(size_t)r * T + p - 1];
    if (s->cache && live) cb_model_decode_reorder(s->m, s->from, live, t);
    return live;
}

int cb_search_beam(cb_search *s, const uint16_t *src, int len, int K, double alpha, int max_len,
                   int *out, int *olen, cb_err *e) {
    for (int b = 0; b < s->rows; b++) set_row(s, b, b < K ? src : NULL, len); /* all K: --no-cache */
    cand *c = malloc(sizeof(cand) * (size_t)K);
    int rc = c ? start(s, 1, K, e) : cb_fail(e, CB_ENOMEM, "out of memory for the beam"), live = 1, t;
    best bt = {0};
    s->logp[0] = 0;
    for (t = 0; !rc && live && t < max_len && t < s->T; t++) {
        if ((rc = probs_at(s, t, live, e))) break;
        int nc = 0;
        for (int b = 0; b < live; b++)
            for (int v = 0; v < s->V; v++) {
                float p = s->probs[(size_t)b * s->V + v];
                if (choosable(s, v) && p > 0) offer(c, K, &nc, (cand){s->logp[b] + log((double)p), b, v});
            }
        live = advance(s, c, nc, t, alpha, &bt, out, max_len);
    }
    for (int b = 0; !rc && b < live; b++) /* out of positions: the live beams as they are */
        finish(s->hyp + (size_t)b * s->T, t, 0, s->logp[b], alpha, &bt, out, max_len);
    *olen = bt.found ? (bt.len < max_len ? bt.len : max_len) : 0;
    free(c);
    return rc;
}
