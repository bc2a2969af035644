#include <stdlib.h>
#include <string.h>

#include "data/bpe.h"
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
    return (cb_tokenizer){.name = "byte", .vocab = 256, .encode = byte_encode, .decode = byte_decode, .ctx = 0};
}

int cb_tokenizer_open(const char *name, const char *bpe_dir, cb_tokenizer *tk, cb_err *e) {
    if (!strcmp(name, "byte")) {
        *tk = cb_tokenizer_byte();
        return CB_OK;
    }
    if (!strcmp(name, "gpt2")) return cb_tokenizer_gpt2(bpe_dir ? bpe_dir : CB_BPE_DIR, tk, e);
    return cb_fail(e, CB_EINPUT, "unknown tokenizer '%s'; use byte or gpt2", name);
}

void cb_tokenizer_free(cb_tokenizer *tk) {
    if (tk->ctx) cb_bpe_free(tk->ctx);
    tk->ctx = NULL;
}
