/* Corpus BLEU-4 (Papineni et al. 2002) against one reference a sentence, as
 * NLTK's corpus_bleu computes it with its defaults: clipped n-gram counts
 * summed over the corpus before dividing, uniform weights 1/4, no
 * smoothing (any order without a match gives 0; NLTK gives ~1e-77),
 * a sentence shorter than n counting one unmatched n-gram, brevity penalty
 * exp(1 - r/c) when the hypotheses are shorter than the references. Private. */
#ifndef CB_EVAL_BLEU_H
#define CB_EVAL_BLEU_H

#include <stddef.h>

enum { CB_BLEU_N = 4 };

typedef struct cb_bleu {
    size_t match[CB_BLEU_N]; /* clipped n-gram matches, n = 1..4 */
    size_t total[CB_BLEU_N]; /* hypothesis n-grams */
    size_t hyp_len, ref_len; /* tokens */
} cb_bleu;

/* Adds one sentence pair (UTF-8 text, lengths in bytes) to the counts.
 * Tokens: runs of non-space bytes, with every punctuation mark its own
 * token (ASCII punctuation, and ¡ ¿ « » and U+2010..U+205E: dashes,
 * curly quotes, the ellipsis). Returns -1 when out of memory. */
int cb_bleu_add(cb_bleu *b, const char *hyp, size_t hlen, const char *ref, size_t rlen);
/* BLEU in [0, 1]; p (may be NULL) gets the four precisions, bp the penalty. */
double cb_bleu_score(const cb_bleu *b, double p[CB_BLEU_N], double *bp);
#endif
