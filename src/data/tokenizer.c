#include "data/tokenizer.h"

/* text (len) -> ids (len): the identity on bytes. */
static size_t byte_encode(const cb_tokenizer *tk, const uint8_t *text, size_t len, uint16_t *out) {
    (void)tk;
    for (size_t i = 0; i < len; i++) out[i] = text[i];
    return len;
}

static size_t byte_decode(const cb_tokenizer *tk, int id, uint8_t *out, size_t cap) {
    (void)tk;
    if (id < 0 || id >= 256) return 0;
    if (cap > 0) out[0] = (uint8_t)id;
    return 1;
}

cb_tokenizer cb_tokenizer_byte(void) {
    return (cb_tokenizer){.vocab = 256, .encode = byte_encode, .decode = byte_decode, .ctx = 0};
}
