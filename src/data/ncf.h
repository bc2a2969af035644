/* NCF's data (He et al. 2017): a pair file split leave-last-out, the
 * training stream of observed pairs with sampled unobserved items, and
 * the evaluation candidates. Everything random is a function of (seed,
 * position), so every rank and every layout draws the same rows. */
#ifndef CB_DATA_NCF_H
#define CB_DATA_NCF_H

#include <stddef.h>
#include <stdint.h>

#include "data/pairs.h"

typedef struct cb_ncf_data {
    int users, items, neg;
    uint64_t seed;
    size_t ntrain;      /* observed training pairs */
    int32_t *tu, *ti;   /* [ntrain], file order, duplicates dropped */
    int *test;          /* [users]: the held-out item (the user's last), -1 none */
    size_t *off;        /* [users + 1]: CSR of each user's observed items, sorted */
    int32_t *seen;
    int *pop;           /* [items]: training pairs per item */
    uint32_t *perm;     /* the current epoch's order of ntrain x (1 + neg) rows */
    int64_t perm_epoch;
} cb_ncf_data;

/* Reads path and splits it; neg (>= 0) unobserved items per observed pair,
 * fewer than the item count. CB_EINPUT on a bad file or neg. */
int cb_ncf_open(const char *path, int neg, uint64_t seed, cb_ncf_data *d, cb_err *e);
void cb_ncf_close(cb_ncf_data *d);
/* Row r (0, 1, ...) of the training stream: epochs of every observed pair
 * followed by its neg sampled items, shuffled per epoch; label 1 observed. */
void cb_ncf_row(cb_ncf_data *d, uint64_t r, int *user, int *item, int *label);
/* Users with a held-out item and n unobserved items to rank it among, in
 * an order drawn from the seed; the first `max` (0: all) into users. */
int cb_ncf_eval_users(const cb_ncf_data *d, int n, int max, int *users);
/* The held-out item of user u (first) and n unobserved items: out[n + 1]. */
void cb_ncf_candidates(const cb_ncf_data *d, int u, int n, int *out);

#endif
