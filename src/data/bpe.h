/* GPT-2 byte-level BPE: OpenAI's encoder.json + vocab.bpe, pre-tokenised by
 * GPT-2's regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with <|endoftext|> in the text read as the special token. Private. */
#ifndef CB_DATA_BPE_H
#define CB_DATA_BPE_H

#include <stdint.h>

#include "cubist.h"
#include "data/tokenizer.h"

/* Code point classes of the regex, generated (scripts/gen_unicode.js). */
extern const uint32_t cb_uc_L[][2], cb_uc_N[][2], cb_uc_S[][2];
extern const int cb_uc_L_n, cb_uc_N_n, cb_uc_S_n;

/* Reads dir/encoder.json and dir/vocab.bpe; a missing or malformed file is
 * CB_EINPUT naming it. Free with cb_tokenizer_free. */
int cb_tokenizer_gpt2(const char *dir, cb_tokenizer *tk, cb_err *e);
void cb_bpe_free(void *ctx);

#endif
