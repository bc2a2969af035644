/* The parameter table: every tensor of a model with its full shape, how the
 * layout splits it, and where this rank's shard sits in the flat parameter
 * block. Every model's (src/graph). */
#ifndef CB_PTABLE_H
#define CB_PTABLE_H

#include "cubist.h"
#include "layout/layout.h"

typedef struct cb_tensor_split {
    cb_param_kind kind;
    int parts, parity;
} cb_tensor_split;

typedef struct cb_ptable {
    cb_layout *L;
    int n, cap;
    cb_tensor_info *t;
    cb_tensor_split *split;
    size_t nparams; /* local floats: the sum of the shards */
} cb_ptable;

/* Appends a tensor of full shape [d0, d1] (d1 = 0: a vector of d0); its
 * shard follows the block so far. Returns the index, -1 when out of memory. */
int cb_ptable_add(cb_ptable *p, const char *name, int64_t d0, int64_t d1, int decay, int layer,
                  cb_param_kind kind, int parts, int parity);
void cb_ptable_free(cb_ptable *p);
/* Full element count of tensor i, and its shard on tensor rank tp_rank. */
size_t cb_ptable_full_numel(const cb_ptable *p, int i);
cb_shard cb_ptable_shard(const cb_ptable *p, int i, int tp_rank);
/* Sum of squares of the owned shards of a parameter-shaped block. */
double cb_ptable_sumsq(const cb_ptable *p, const float *block);
/* Collective over the tensor group: nb parameter-shaped blocks gathered to
 * full tensors and written into one safetensors file on tensor rank 0,
 * block b under prefixes[b] + name; meta holds nmeta (key, value) pairs. */
int cb_ptable_save(const cb_ptable *p, int nb, const float *const *blocks,
                   const char *const *prefixes, const char *path, const char *const *meta,
                   int nmeta, cb_err *e);
/* This rank's shards of prefix + name from an open file, shapes checked. */
int cb_ptable_load(const cb_ptable *p, float *block, const char *prefix, const cb_st_file *f,
                   const char *path, cb_err *e);
/* Initial values of tensor i's local shard: CB_INIT_ZERO, CB_INIT_ONE, or
 * CB_INIT_NORMAL: sd x N(0, 1) drawn per global element by the
 * counter-based generator keyed by (seed, the tensor's name)
 * (util/rng.h), so every layout and pipeline stage holds the serial
 * model's values and no rank ever holds a full tensor. CB_INIT_SINUSOID:
 * the sinusoidal position table (T rows of C). */
enum { CB_INIT_ZERO, CB_INIT_ONE, CB_INIT_NORMAL, CB_INIT_SINUSOID };
void cb_ptable_init(const cb_ptable *p, float *block, int i, int init, float sd, uint64_t seed);
#endif
