#include "util/rng.h"

#include <math.h>

void cb_rng_seed(cb_rng *r, uint64_t seed) { r->s = seed ^ 0x9E3779B97F4A7C15ull; }

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t cb_rng_u64(cb_rng *r) { return mix(r->s += 0x9E3779B97F4A7C15ull); }

float cb_rng_uniform(cb_rng *r) { return (float)(cb_rng_u64(r) >> 40) / 16777216.0f; }

uint64_t cb_rng_below(cb_rng *r, uint64_t n) { return cb_rng_u64(r) % n; }

float cb_rng_normal(cb_rng *r) {
    double u1 = ((cb_rng_u64(r) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (cb_rng_u64(r) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* FNV-1a of the name, mixed with the seed */
uint64_t cb_rng_key(uint64_t seed, const char *name) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001B3ull;
    return mix(seed ^ mix(h));
}

uint64_t cb_rng_subkey(uint64_t key, uint64_t stream) { return cb_rng_bits_at(key, stream); }

float cb_rng_normal_at(uint64_t key, uint64_t i) {
    uint64_t p = i & ~(uint64_t)1;
    double u1 = ((cb_rng_bits_at(key, p) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (cb_rng_bits_at(key, p + 1) >> 11) / 9007199254740992.0, r = sqrt(-2.0 * log(u1));
    return (float)(i & 1 ? r * sin(6.283185307179586 * u2) : r * cos(6.283185307179586 * u2));
}
