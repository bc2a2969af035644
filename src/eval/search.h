/* Greedy and beam search over a translation model (cb_model_declare_nmt)
 * built for `rows` rows of T positions: the source in id field 0 (tokens,
 * EOS, padding), the decoder's input in field 1 (BOS, the tokens chosen so
 * far). With cache each position runs through cb_model_decode_* (the
 * decoder's nodes on that position alone, keys and values kept); without,
 * the whole model runs again for every position (cb_model_probs, one
 * micro-batch): the reference the cache is checked against. The encoder
 * runs once per source: greedy on each source's row, beam search on row 0,
 * its K beams reading that run (cb_model_decode_start's beams). Only ids
 * below pad and EOS are ever chosen. Private. */
#ifndef CB_EVAL_SEARCH_H
#define CB_EVAL_SEARCH_H

#include <stdint.h>

#include "cubist.h"

typedef struct cb_search {
    cb_model *m;
    int rows, T, V;   /* the model's rows and positions; vocabulary with the 3 specials */
    int pad, bos, eos;
    int cache;
    int *ids;         /* rows x T x 2 */
    int *slen, *tlen; /* the model's length sets 0 and 1 (rows each), registered by the caller */
    float *probs;     /* rows x V */
    double *logp;     /* rows: a beam's log-probability */
    int *hyp, *hyp2;  /* rows x T: beams' tokens */
    int *from;        /* rows: each new beam's parent */
} cb_search;

int cb_search_init(cb_search *s, cb_model *m, int rows, int T, int V, int *slen, int *tlen,
                   int cache, cb_err *e);
void cb_search_free(cb_search *s);

/* Greedy: n <= rows sources (src[i] of len[i] tokens, len[i] < T) at once;
 * out[i * max_len ..] gets row i's tokens up to its EOS (left out), at most
 * max_len (<= T) of them, olen[i] their count. */
int cb_search_greedy(cb_search *s, const uint16_t *const *src, const int *len, int n,
                     int max_len, int *out, int *olen, cb_err *e);

/* Beam search of width K <= rows for one source: each step keeps the K
 * best continuations of the live beams (log-probability); a continuation
 * ending in EOS is finished and its beam retires, so K = 1 is greedy.
 * The finished (and, at max_len, the live) hypotheses are ranked by
 * log P / ((5 + |Y|) / 6)^alpha (GNMT's length penalty, |Y| counting EOS). */
int cb_search_beam(cb_search *s, const uint16_t *src, int len, int K, double alpha, int max_len,
                   int *out, int *olen, cb_err *e);
#endif
