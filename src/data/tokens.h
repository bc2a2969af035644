/* Token-file writing in two phases, for callers that write several files
 * as one output (`cubist prepare`: train and validation): stage each to
 * path.tmp, then commit them all. Private. */
#ifndef CB_DATA_TOKENS_H
#define CB_DATA_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "cubist.h"
#include "formats/fileio.h"

/* Writes the llm.c header (words 3..6 from head: the tokenizer tag, then
 * 0 0 0 for plain tokens, bitext.h's kind, vocabulary and map flag for
 * pairs) and tok (n)
 * to path.tmp; commit with fio_atomic_commit, drop with fio_atomic_abort. On
 * failure nothing is left. */
int cb_tokens_stage(fio_atomic *a, const char *path, const uint16_t *tok, size_t n,
                    const int32_t head[4], cb_err *e);
/* Word i of a single llm.c file's header; 0 for headerless files and shards. */
int32_t cb_tokens_header(const cb_tokens *t, int i);
/* Tag of a tokenizer name (cb_tokenizer_tag_name's inverse); 0 if unknown. */
int cb_tokenizer_tag(const char *name);
#endif
