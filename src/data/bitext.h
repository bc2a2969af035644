/* Translation pairs: `cubist prepare --pairs` turns a `source<TAB>target`
 * file into a pair file, and training reads it back in batches of about
 * equal length. Private.
 *
 * A pair file is an llm.c token file (tokens.c) whose header word 4 is
 * CB_BITEXT_KIND and word 5 the tokenizer's vocabulary V; its stream is
 * source, EOS, target, EOS for every pair. Three ids follow the
 * tokenizer's: PAD = V, BOS = V + 1, EOS = V + 2 (vocab V + 3).
 * Header word 6 = 1: a compact vocabulary (`prepare --compact-vocab`), V
 * ids of the tokenizer's listed in PATH.vocab, one a line (line k: the
 * tokenizer's id of id k; cb_tokenizer_compact). */
#ifndef CB_DATA_BITEXT_H
#define CB_DATA_BITEXT_H

#include <stddef.h>
#include <stdint.h>

#include "cubist.h"
#include "formats/fileio.h"

enum { CB_BITEXT_KIND = 1, CB_BITEXT_SPECIALS = 3 };

typedef struct cb_bitext {
    cb_tokens tok;
    int base;          /* V: pad = V, bos = V + 1, eos = V + 2 */
    size_t n;          /* pairs */
    size_t *src;       /* (n) stream position of each source */
    uint16_t *slen;    /* (n) source tokens, without EOS */
    uint16_t *tlen;    /* (n) target tokens, without EOS */
    int max_len;       /* longest side of any pair, + 1 (its EOS or BOS) */
    int32_t *map;      /* (base) a compact vocabulary's tokenizer ids; NULL: none */
} cb_bitext;

/* Opens a pair file and indexes its pairs. Not a pair file, or a stream
 * that does not alternate source and target: CB_EINPUT. */
int cb_bitext_open(const char *path, cb_bitext *p, cb_err *e);
void cb_bitext_close(cb_bitext *p); /* safe on a zeroed cb_bitext */

/* A compact vocabulary's map (n ids) to map_path (a pair file's path +
 * ".vocab"; kept by the caller until commit), staged (fileio.h). */
int cb_bitext_stage_map(fio_atomic *a, const char *map_path, const int32_t *ids, int n, cb_err *e);

/* Batches by token count over length-bucketed pairs: the pairs are sorted
 * by length (longer side, ties in random order), cut into runs of at most
 * max_rows pairs whose padded size rows x (longest + 1) stays within
 * max_tokens, and the runs shuffled. order (n) holds pair indices, batch b
 * being order[start[b] .. start[b + 1]). */
typedef struct cb_bitext_batches {
    size_t nb;
    size_t *start; /* (nb + 1) */
    size_t *order; /* (n) */
} cb_bitext_batches;
int cb_bitext_batch(const cb_bitext *p, size_t max_tokens, int max_rows, uint64_t seed,
                   cb_bitext_batches *b, cb_err *e);
void cb_bitext_batches_free(cb_bitext_batches *b);

/* One padded batch of `rows` pairs idx: src (rows, Ts) = source, EOS, PAD...;
 * dec (rows, Tt) = BOS, target, PAD...; tgt (rows, Tt) = target, EOS, PAD...
 * Ts and Tt must hold the longest pair (+1). */
void cb_bitext_fill(const cb_bitext *p, const size_t *idx, int rows, int Ts, int Tt, int *src,
                   int *dec, int *tgt);
#endif
