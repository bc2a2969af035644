/* Batches from a token stream: one file, or shards read as their
 * concatenation (so both modes, and the position a checkpoint saves, are
 * the same across shards). Sequential mode: micro-batch k is the k-th run
 * of B*T+1 tokens from the start (wrapping), row b being tokens
 * [b*T, b*T+T] of the run. Shuffled mode: each row starts at an offset drawn
 * from the loader's RNG. The whole micro-batch is drawn on every rank; a
 * data-parallel rank then keeps its rows, so any layout sees the same data. */
#ifndef CB_LOADER_H
#define CB_LOADER_H

#include <stdint.h>

#include "cubist.h"
#include "util/rng.h"

typedef struct cb_loader {
    const cb_tokens *tok;
    int B, T, shuffle;
    uint64_t k; /* micro-batches drawn so far */
    cb_rng rng;
} cb_loader;

/* Fails when the file holds fewer than B*T+1 tokens. */
int cb_loader_init(cb_loader *l, const cb_tokens *tok, int B, int T, int shuffle, uint64_t seed,
                   const char *path, cb_err *e);
/* Fills rows [r0, r0+nrows) of the next micro-batch: inp, targets (nrows,T). */
void cb_loader_next(cb_loader *l, int *inp, int *targets, int r0, int nrows);
#endif
