/* Token-file writing in two phases, for callers that write several files
 * as one output (`cubist prepare`: train and validation): stage each to
 * path.tmp, then commit them all. Private. */
#ifndef CB_DATA_TOKENS_H
#define CB_DATA_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "cubist.h"
#include "formats/fileio.h"

/* Writes the llm.c header (tokenizer tag in word 3) and tok (n) to
 * path.tmp; commit with fio_atomic_commit, drop with fio_atomic_abort. On
 * failure nothing is left. */
int cb_tokens_stage(fio_atomic *a, const char *path, const uint16_t *tok, size_t n, int tag, cb_err *e);
/* Tag of a tokenizer name (cb_tokenizer_tag_name's inverse); 0 if unknown. */
int cb_tokenizer_tag(const char *name);
#endif
