/* Interaction pair files (recommendation data): what `cubist prepare
 * --interactions` writes and `cubist train --model ncf` reads.
 * Layout: "CBPAIRS1", int32 users, int32 items, int64 n, then n pairs of
 * int32 (user, item), dense indices in first-seen order, little-endian. The
 * original ids are in PATH.users and PATH.items, one per line: line k is
 * index k. */
#ifndef CB_DATA_PAIRS_H
#define CB_DATA_PAIRS_H

#include <stddef.h>
#include <stdint.h>

#include "cubist.h"

typedef struct cb_pairs {
    int users, items;
    size_t n;
    const int32_t *p; /* n x (user, item) */
    void *map;
    size_t maplen;
} cb_pairs;

/* Opens and validates (magic, size, every index in range). */
int cb_pairs_open(const char *path, cb_pairs *p, cb_err *e);
void cb_pairs_close(cb_pairs *p);

#endif
