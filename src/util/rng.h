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

/* Counter-based draws: a pure function of (key, index), so any element of
 * a tensor can be drawn without the ones before it and every layout gets
 * the same value for the same global element without materialising the
 * tensor. key = cb_rng_key(seed, tensor name). Standard normal of element
 * i: Box-Muller on the uniform pair u1 = U(key, 2 (i/2)), u2 = U(key,
 * 2 (i/2) + 1), U = splitmix64's finaliser of key + (counter+1) * golden
 * ratio; even i takes r cos(2 pi u2), odd i r sin(2 pi u2). */
uint64_t cb_rng_key(uint64_t seed, const char *name);
float cb_rng_normal_at(uint64_t key, uint64_t i);
/* U(key, i): splitmix64's finaliser of key + (i+1) * golden ratio. Inline
 * (not in rng.c) so that a kernel drawing one per element, dropout's,
 * vectorises the 64-bit multiplies instead of calling per element. */
static inline uint64_t cb_rng_bits_at(uint64_t key, uint64_t i) {
    uint64_t z = key + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* uniform in [0, 1) with 24 bits: (U(key, i) >> 40) / 2^24 */
static inline float cb_rng_uniform_at(uint64_t key, uint64_t i) {
    return (float)(cb_rng_bits_at(key, i) >> 40) / 16777216.0f;
}
/* the key of draw stream `stream` of key (dropout: a node's key per step):
 * U(key, stream) */
uint64_t cb_rng_subkey(uint64_t key, uint64_t stream);
#endif
