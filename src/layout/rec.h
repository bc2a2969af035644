/* Layers of recommendation models (NCF) under every tensor layout, written
 * once against the layout interface instead of once per layout: a lookup
 * table without positions (row-sharded like the vocabulary, CB_P_EMBED),
 * the concatenation of two activations' features, and the logistic loss on
 * one logit per row (x . w, w a vector sharded like a LayerNorm weight on
 * x's parity, CB_P_NORM). Each works in the whole-tensor space of the
 * micro-batch: every rank places what it owns of a value (act_shard's
 * owner flag marks one copy of each element) into a zeroed N x H buffer,
 * one all-reduce over the tensor group gives every rank the whole value,
 * and each rank keeps its own shard of the result. The sums add zeros to
 * one owner's element, so they are exact: the layouts give the serial
 * values. The exchanged bytes are N x H per value, which is small for
 * these layers (a row is a (user, item) pair, H <= a few hundred); the
 * arithmetic is the kernel table's. */
#ifndef CB_LAYOUT_REC_H
#define CB_LAYOUT_REC_H

#include "layout/layout.h"

/* floats of scratch the functions below need for N rows of widths up to H */
size_t cb_rec_scratch_floats(int N, int H);

/* y (parity 0, C features) = table[ids] of N rows; the table e->wte is this
 * rank's CB_P_EMBED shard of [e->V, e->C] (e->wpe unused) */
void cb_rec_lookup_forward(cb_layout *L, const cb_embed *e, const int *ids, int N, float *y,
                           float *scratch);
/* e->dwte accumulates the rows of dy at ids */
void cb_rec_lookup_backward(cb_layout *L, cb_embed *e, const int *ids, int N, const float *dy,
                            float *scratch);
/* y = x (N x H) moved from parity pin to parity pout (a value is the same
 * whole tensor in either; scratch N x H floats). Its own backward: the
 * gradient moved back. */
void cb_rec_reparity(cb_layout *L, const float *x, int N, int H, int pin, int pout, float *y,
                     float *scratch);
/* y (Ha + Hb features) = [a | b] per row; par[3]: the parities of a, b, y */
void cb_rec_concat_forward(cb_layout *L, const float *a, int Ha, const float *b, int Hb,
                           const int *par, int N, float *y, float *scratch);
/* da, db overwritten with their columns of dy */
void cb_rec_concat_backward(cb_layout *L, const float *dy, int Ha, int Hb, const int *par, int N,
                            float *da, float *db, float *scratch);
/* logits (N, every row, on every rank) = x . w; with labels, losses (N)
 * and the mean binary cross-entropy is returned, else 0. kept: 2N floats
 * (logits, losses) for backward and for scores. */
float cb_rec_logistic_forward(cb_layout *L, const cb_norm *w, const float *x, const int *labels,
                              float *kept, int N);
/* dx overwritten; w->dw accumulates; dloss scales the mean loss */
void cb_rec_logistic_backward(cb_layout *L, cb_norm *w, const float *x, const int *labels,
                              const float *kept, float dloss, float *dx, int N, float *scratch);

#endif
