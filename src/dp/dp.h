/* Data parallelism: every rank of a data-parallel group holds the whole
 * model, computes its slice of the global micro-batch, and the gradients are
 * summed over the group.
 *
 * Dense path: the gradient block itself is cut into fusion buckets of
 * bucket_mb megabytes, planned from the END of the block (backward finishes
 * ln_f first, wte last), so a bucket is a contiguous slice and needs no
 * packing copy; a tensor may straddle two buckets. The model's grad hook
 * fires once per block of tensors as backward finishes it (ln_f with the
 * head's share of wte, then each transformer block from the last, then the
 * embeddings); a bucket's non-blocking all-reduce (ZeRO-1: reduce-scatter
 * into the owners' shards) starts in the first hook call after which every
 * tensor overlapping it is final, on the last micro-batch of a step only, and
 * every hook call tests the requests in flight so MPI progresses them while
 * backward computes (the model also calls the hook with first > last
 * between the operators of a block, for progress only). The buckets
 * overlapping wte and wpe start only in the last call, with nothing left to
 * overlap, unless the split path below takes wte out of them.
 *
 * Split embedding path (--embed-grad split; `auto`, the default, picks it
 * when it pays): with a tied embedding, wte's gradient has two parts, the
 * head's (dense, every row, final right after the head's backward, i.e.
 * first) and the input lookup's (one row per token, final last). The model
 * leaves the lookup's rows out of wte's gradient; wte's own buckets start in
 * the first hook call of the step's last micro-batch and overlap the whole
 * transformer backward. The lookup rows are summed per token on each rank
 * over the step's micro-batches, and after backward the group all-reduces
 * them densely over the union of the group's tokens (sorted token order),
 * then adds them into the reduced wte gradient. Needs the whole wte and both
 * ends of the model on this rank (the serial layout, no pipeline). `auto`
 * picks it when p x (local tokens of a step) <= V/4, so the union's rows
 * are at most a quarter of wte's.
 *
 * Sparse embedding path (--embed-grad sparse): the tied wte gradient leaves
 * the buckets and travels as TensorFlow's IndexedSlices did under Horovod:
 * one (token, row) pair per local token of every micro-batch plus the head's
 * dense contribution as V (row index, row) pairs, all-gathered over the
 * group and summed into the dense gradient by every rank. Its volume grows
 * with the number of ranks; the dense all-reduce's does not.
 *
 * Both paths apply to each of a model's lookup tables (cb_dp_model: the
 * leading tensors, each read by one or more lookups; NCF has four, the
 * translation model one read by two lookups and the head); an untied table
 * has no head share: no buckets of its own on the split path, no V dense
 * slices on the sparse one, only its lookup rows. The rows come from each
 * lookup's backward (cb_dp_lookup_rows), as it runs: the engine reuses the
 * gradient buffers of values once their producer's backward is done.
 *
 * ZeRO-1: rank r owns the parameters [S_r, S_r+1) with S_r = r * n / p; its
 * AdamW moments cover only that range; after the update the parameter shards
 * are all-gathered. */
#ifndef CB_DP_H
#define CB_DP_H

#include "comm/comm.h"
#include "cubist.h"
#include "kernels/kernels.h"

typedef struct cb_dp_bucket {
    size_t lo, hi;    /* gradient slice [lo, hi) */
    int *counts;      /* ZeRO: elements of each rank's shard inside the slice */
    int started, done;
    cb_comm_req req;
} cb_dp_bucket;

/* What data parallelism asks of a model beyond its parameter block, for
 * the sparse and split embedding paths: an interface, so it reads no
 * model's fields. */
typedef struct cb_dp_model {
    void *ctx;
    /* tensors [0, ntables) are the model's lookup tables (rows x width,
     * whole on this rank, contiguous from offset 0, each read by one or
     * more lookups), whose backward hands its rows to cb_dp_lookup_rows
     * (every lookup's, so max_tokens counts them all); 0: none
     * (the dense path only) */
    int ntables;
    /* table 0 is also the tied head's weight (GPT's wte): its gradient has
     * a dense share on every row besides the lookup rows */
    int tied;
    /* the tables whole here, and the tied head too: split can apply */
    int split_ok;
    /* from now on backward leaves the lookup rows out of the tables'
     * gradients (the split path adds them itself) */
    void (*exclude_lookup)(void *ctx);
    /* the model forgets this cb_dp (its hook, the exclusion); may be NULL */
    void (*detach)(void *ctx);
    /* sum of squares of the owned gradients; NULL: the owned shards in
     * table order */
    double (*grad_sumsq)(void *ctx);
} cb_dp_model;

/* One lookup table of the sparse and split paths. */
typedef struct cb_dp_table {
    size_t vocab, chan, off; /* rows, width, offset of its gradient in the block */
    int tied;                /* the head's dense share too (cb_dp_model.tied) */
    /* sparse path */
    size_t max_tok, ntok;    /* lookup rows capacity, used */
    int32_t *idx, *gidx;
    float *rows, *grows;
    /* split path */
    size_t ucap, nuniq;      /* compact rows: capacity, used */
    int32_t *slot;           /* vocab: id -> compact row this step, -1 */
    int32_t *uid, *gid;      /* ids of the compact rows; every rank's (p x ucap) */
    int32_t *upos;           /* vocab: id -> row of the union, -1 */
    float *urows, *ubuf;     /* local compact rows; union rows (min(p x ucap, vocab)) */
    size_t nunion;           /* rows of the last union */
} cb_dp_table;

typedef struct cb_dp {
    cb_comm *c;
    cb_dp_model src;      /* zero for a plain block (cb_dp_init_block) */
    float *params, *grads;
    const cb_tensor_info *t;
    int nt;
    int zero, sparse;
    size_t n, lo, hi;     /* parameters; this rank's optimizer range */
    int *shard_n, *shard_off; /* ZeRO shards (p each) */
    int nb, next;         /* buckets (nb[0] ends at n), next to start */
    cb_dp_bucket *b;
    int *ready, ft;       /* tensors [ft, ntensor) are final */
    int armed;            /* this backward is the step's last */
    double wait_ms;       /* last step: waiting for buckets after backward */
    int early;            /* last step: buckets started while backward still had
                             tensors to finish (all but the embeddings' ones) */
    /* split path: buckets [nb, nb + nsplit) cover a tied table 0 */
    int split, nsplit, split_started;
    /* sparse and split paths: the lookup tables */
    cb_dp_table *tab;
    int ntab;
    size_t buf_bytes;     /* bytes of the sparse or split buffers, as allocated */
    uint16_t *h;          /* --comm-dtype bf16: the buckets' bf16 copy (n); NULL: fp32 */
} cb_dp;

#define CB_DP_MAX_BUCKETS 65536 /* a smaller --bucket-mb is refused */

/* Floats per bucket of bucket_mb megabytes: at least 1, at most 2^30 (MPI
 * int counts). */
size_t cb_dp_bucket_floats(double bucket_mb);
/* Pure checks of a plan for n parameters whose buckets cover [start, n):
 * bucket_mb > 0, at most CB_DP_MAX_BUCKETS buckets (each costs a request
 * and, with ZeRO, p counts), and with ZeRO n <= INT_MAX (MPI's int counts
 * and displacements of the shards). CB_EINPUT with a one-line message. */
int cb_dp_check_plan(size_t n, size_t start, int zero, double bucket_mb, int *nbuckets, cb_err *e);
/* How the tied embedding's gradient is reduced (see above). */
typedef enum { CB_DP_EMBED_DENSE, CB_DP_EMBED_SPARSE, CB_DP_EMBED_SPLIT, CB_DP_EMBED_AUTO } cb_dp_embed;
/* "dense", "sparse", "split", "auto" into *mode; anything else is
 * CB_EINPUT with the one-line message naming the four. */
int cb_dp_embed_parse(const char *s, int *mode, cb_err *e);
/* The path d takes: "dense", "sparse" or "split". */
const char *cb_dp_embed_name(const cb_dp *d);
/* Plans buckets and shards for a model's parameter block (params, grads:
 * n floats in nt tensors t) on group c (size >= 1); max_tokens is the local
 * token rows of one step (grad_accum * B/dp * T, times the most lookups
 * of one table), for the sparse and split paths' buffers. embed: a cb_dp_embed (AUTO resolved here; SPLIT on a
 * model whose src says it cannot is CB_EINPUT). The model calls
 * cb_dp_ready as tensors finish and cb_dp_lookup_rows from its lookups'
 * backward. */
int cb_dp_init_model(cb_dp *d, cb_comm *c, const cb_dp_model *src, float *params, float *grads,
                     const cb_tensor_info *t, int nt, size_t n, int zero, int embed,
                     double bucket_mb, size_t max_tokens, cb_err *e);
/* The same for a plain parameter block of n floats with nt tensors t (a
 * user's model, src/api/model.c): no grad hook, so every bucket starts in
 * cb_dp_reduce (call cb_dp_begin_backward(d, 1) first), no sparse path. */
int cb_dp_init_block(cb_dp *d, cb_comm *c, float *params, float *grads, const cb_tensor_info *t,
                     int nt, size_t n, int zero, double bucket_mb, cb_err *e);
void cb_dp_free(cb_dp *d);
/* --comm-dtype: "fp32" or "bf16" into *bf16 (0 or 1); anything else is
 * CB_EINPUT with a one-line message. */
int cb_dp_comm_dtype_parse(const char *s, int *bf16, cb_err *e);
/* After init: the buckets travel in bf16 (rounded to nearest even, summed
 * in fp32 by the collective, widened on receipt), half the bytes; the
 * embeddings' sparse and split exchanges, the norm and ZeRO's parameter
 * all-gather stay fp32. CB_ENOMEM for the n bf16 staging copy. */
int cb_dp_comm_bf16(cb_dp *d, cb_err *e);
/* Tensors [first, last] hold their final gradient of the step (first >
 * last: nothing new, a chance for MPI to progress): the model's grad hook,
 * also called directly by a model that drives its own (src/graph). Buckets
 * start once armed (cb_dp_begin_backward with last = 1). */
void cb_dp_ready(cb_dp *d, int first, int last);
/* Before each micro-batch's backward; last = 1 on the step's last one. */
void cb_dp_begin_backward(cb_dp *d, int last);
/* From the backward of table k's lookup, each micro-batch: row i of the
 * gradient of its output (n rows x the table's width) belongs to row
 * ids[i] of the table. Recorded for the sparse and split paths. */
void cb_dp_lookup_rows(cb_dp *d, int k, const int *ids, const float *rows, size_t n);
/* After the last backward: finishes every reduction. Then the gradient is
 * the group's sum on [lo, hi) (the whole block without ZeRO). */
void cb_dp_reduce(cb_dp *d);
/* Sum of squares of the whole reduced gradient (ZeRO: shard sums, summed
 * over the group), so clipping uses the exact global norm. */
double cb_dp_grad_sumsq(cb_dp *d);
/* After the update: all-gathers the parameter shards (ZeRO), else nothing. */
void cb_dp_sync_params(cb_dp *d);
/* Mean over the group of one number per rank (the loss). */
double cb_dp_mean(cb_dp *d, double x);
/* Gathers a shard-sized block (hi - lo floats) into full (n floats) on group
 * rank 0; full is unused elsewhere. */
void cb_dp_gather(cb_dp *d, const float *shard, float *full);
/* One lookup table's gradient (V rows x C, `tokens` lookup rows per rank
 * per step, tied: the head's dense share too) at p ranks under a path
 * (cb_dp_embed: dense, sparse, split): the bytes a rank sends per step
 * (messages times the ring share, as comm.h counts them) and the peak
 * bytes its exchange holds (the table's dense gradient included). dense:
 * one all-reduce of V x C, reduced in place. sparse: an all-gather of
 * S = tokens (+ V tied) (index, row) slices, buffers for the local and p
 * gathered slices. split: an all-gather of min(tokens, V) ids and an
 * all-reduce of the union's U rows (U <= min(p x tokens, V), data
 * dependent), tied plus the dense all-reduce of the head's share; buffers
 * two V maps, the ids, the compact and the union rows. */
double cb_dp_embed_bytes_moved(int path, int p, size_t V, size_t C, size_t tokens, int tied,
                               size_t U);
double cb_dp_embed_buffer_bytes(int path, int p, size_t V, size_t C, size_t tokens, int tied);
#endif
