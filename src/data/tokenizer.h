/* Tokenizer interface: text bytes <-> token ids. Byte-level today; a BPE
 * tokenizer fills the same struct and slots in unchanged. Private. */
#ifndef CUBIST_DATA_TOKENIZER_H
#define CUBIST_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct cb_tokenizer {
    int vocab; /* V: every id is below it */
    /* text (len bytes) -> ids; returns the count. out must hold len ids:
     * no token of a byte-level vocabulary is shorter than one byte. */
    size_t (*encode)(const struct cb_tokenizer *tk, const uint8_t *text, size_t len, uint16_t *out);
    /* One id -> its bytes, up to cap of them in out; returns the full byte
     * length (0 for an id outside the vocabulary). */
    size_t (*decode)(const struct cb_tokenizer *tk, int id, uint8_t *out, size_t cap);
    void *ctx; /* tables of a learned tokenizer; NULL for bytes */
} cb_tokenizer;

/* Token = byte value, vocab 256. */
cb_tokenizer cb_tokenizer_byte(void);

#endif
