/* libFuzzer harness: cb_tokens_open on arbitrary bytes (llm.c header or
 * headerless uint16), every token it accepts read and checked against the
 * vocabulary it was opened with (the first byte picks 256 or 50257). */
#include <stdlib.h>

#include "cubist.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    int vocab = size && data[0] & 1 ? 256 : 50257;
    cb_tokens t;
    cb_err e;
    if (!path || cb_tokens_open(path, vocab, &t, &e)) return 0;
    for (size_t i = 0; i < t.n; i++)
        if (t.tok[i] >= vocab) abort(); /* accepted a token outside the vocabulary */
    cb_tokens_close(&t);
    return 0;
}
