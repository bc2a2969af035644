/* Deterministic random numbers: splitmix64 state, saveable as one uint64. */
#ifndef CB_RNG_H
#define CB_RNG_H
#include <stdint.h>

typedef struct cb_rng {
    uint64_t s;
} cb_rng;

void cb_rng_seed(cb_rng *r, uint64_t seed);
uint64_t cb_rng_u64(cb_rng *r);
/* uniform in [0, 1) with 24 random bits */
float cb_rng_uniform(cb_rng *r);
/* uniform integer in [0, n) */
uint64_t cb_rng_below(cb_rng *r, uint64_t n);
/* standard normal (Box-Muller) */
float cb_rng_normal(cb_rng *r);
#endif
