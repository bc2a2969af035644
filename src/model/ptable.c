#include "model/ptable.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/rng.h"

int cb_ptable_add(cb_ptable *p, const char *name, int64_t d0, int64_t d1, int decay, int layer,
                  cb_param_kind kind, int parts, int parity) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        cb_tensor_info *t = realloc(p->t, sizeof *t * cap);
        if (t) p->t = t;
        cb_tensor_split *s = realloc(p->split, sizeof *s * cap);
        if (s) p->split = s;
        if (!t || !s) return -1;
        p->cap = cap;
    }
    int i = p->n++;
    cb_tensor_info *t = &p->t[i];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    p->split[i] = (cb_tensor_split){kind, parts, parity};
    cb_shard sh = cb_ptable_shard(p, i, p->L->tp_rank);
    t->numel = cb_shard_numel(&sh);
    t->owner = sh.owner;
    t->offset = p->nparams;
    t->decay = decay;
    t->layer = layer;
    p->nparams += t->numel;
    return i;
}

void cb_ptable_free(cb_ptable *p) {
    free(p->t);
    free(p->split);
    memset(p, 0, sizeof *p);
}

size_t cb_ptable_full_numel(const cb_ptable *p, int i) {
    const cb_tensor_info *t = &p->t[i];
    return (size_t)t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
}

cb_shard cb_ptable_shard(const cb_ptable *p, int i, int tp_rank) {
    const cb_tensor_info *t = &p->t[i];
    const cb_tensor_split *sp = &p->split[i];
    int two = t->ndim == 2;
    return cb_layout_shard(p->L, tp_rank, sp->kind, two ? t->shape[0] : 1,
                            two ? t->shape[1] : t->shape[0], sp->parts, sp->parity);
}

double cb_ptable_sumsq(const cb_ptable *p, const float *block) {
    double s = 0.0;
    for (int i = 0; i < p->n; i++)
        if (p->t[i].owner) s += p->L->k->sumsq(p->L->k, block + p->t[i].offset, p->t[i].numel);
    return s;
}

/* Full tensors of nb blocks, gathered over the tensor group, on tensor
 * rank 0 (NULL elsewhere, and *oom set when rank 0 is out of memory). */
static float *gather_blocks(const cb_ptable *p, int nb, const float *const *blocks,
                            size_t *full_n, int *oom) {
    size_t n = 0;
    for (int i = 0; i < p->n; i++) n += cb_ptable_full_numel(p, i);
    *full_n = n;
    float *full = p->L->tp_rank == 0 ? malloc(sizeof(float) * n * nb + 1) : NULL;
    *oom = p->L->tp_rank == 0 && !full;
    for (int b = 0; b < nb; b++) {
        size_t off = 0;
        for (int i = 0; i < p->n; i++) {
            const cb_tensor_info *t = &p->t[i];
            const cb_tensor_split *sp = &p->split[i];
            int two = t->ndim == 2;
            float *dst = full ? full + (size_t)b * n + off : NULL;
            cb_layout_gather(p->L, sp->kind, two ? t->shape[0] : 1,
                             two ? t->shape[1] : t->shape[0], sp->parts, sp->parity,
                             blocks[b] + t->offset, dst);
            off += cb_ptable_full_numel(p, i);
        }
    }
    return full;
}

int cb_ptable_save(const cb_ptable *p, int nb, const float *const *blocks,
                   const char *const *prefixes, const char *path, const char *const *meta,
                   int nmeta, cb_err *e) {
    size_t full_n;
    int oom;
    float *full = gather_blocks(p, nb, blocks, &full_n, &oom);
    if (oom) return cb_fail(e, CB_ENOMEM, "out of memory gathering %s", path);
    if (p->L->tp_rank != 0) return CB_OK;
    size_t n = (size_t)nb * p->n;
    cb_st_entry *t = calloc(n, sizeof *t);
    char(*names)[80] = calloc(n, sizeof *names);
    if (!t || !names) {
        free(t);
        free(names);
        free(full);
        return cb_fail(e, CB_ENOMEM, "out of memory writing %s", path);
    }
    size_t off = 0;
    for (size_t j = 0; j < n; j++) {
        const cb_tensor_info *ti = &p->t[j % p->n];
        snprintf(names[j], sizeof names[j], "%s%s", prefixes[j / p->n], ti->name);
        t[j] = (cb_st_entry){names[j], ti->ndim, {ti->shape[0], ti->shape[1]}, full + off};
        off += cb_ptable_full_numel(p, (int)(j % p->n));
    }
    int rc = cb_st_write(path, t, (int)n, meta, nmeta, e);
    free(t);
    free(names);
    free(full);
    return rc;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    int off = snprintf(buf, n, "[");
    for (int i = 0; i < ndim && off < (int)n; i++)
        off += snprintf(buf + off, n - off, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (off < (int)n) snprintf(buf + off, n - off, "]");
}

static int check_tensor(const cb_st_tensor *s, const cb_tensor_info *t, const char *name,
                        const char *path, cb_err *e) {
    if (!s)
        return cb_fail(e, CB_EINPUT,
                       "%s: tensor %s is missing; the file was not written for this model", path,
                       name);
    int same = s->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
    if (same) return CB_OK;
    char got[64], want[64];
    shape_str(got, sizeof got, s->ndim, s->shape);
    shape_str(want, sizeof want, t->ndim, t->shape);
    return cb_fail(e, CB_EINPUT,
                   "%s: tensor %s has shape %s, the model expects %s; pass the model sizes the "
                   "checkpoint was written with",
                   path, name, got, want);
}

int cb_ptable_load(const cb_ptable *p, float *block, const char *prefix, const cb_st_file *f,
                   const char *path, cb_err *e) {
    cb_kernels_params_written(block, p->nparams);
    for (int i = 0; i < p->n; i++) {
        const cb_tensor_info *t = &p->t[i];
        char name[80];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        /* published files: "transformer." names, F16/BF16, buffers (attn.bias) never looked up */
        const cb_st_tensor *s = cb_st_find_hf(f, name);
        int rc = check_tensor(s, t, name, path, e);
        if (rc) return rc;
        /* the data section need not be 4-byte aligned: convert to a copy, then cut the shard */
        float *full = malloc(cb_ptable_full_numel(p, i) * sizeof(float) + sizeof(float));
        if (!full) return cb_fail(e, CB_ENOMEM, "out of memory reading %s", path);
        cb_st_read_f32(f, s, full);
        cb_shard sh = cb_ptable_shard(p, i, p->L->tp_rank);
        cb_shard_extract(&sh, full, block + t->offset);
        free(full);
    }
    return CB_OK;
}

void cb_ptable_init(const cb_ptable *p, float *block, int i, int init, float sd, uint64_t seed) {
    cb_kernels_params_written(block, p->nparams);
    cb_shard sh = cb_ptable_shard(p, i, p->L->tp_rank);
    uint64_t key = cb_rng_key(seed, p->t[i].name);
    cb_shard_generate(&sh, init == CB_INIT_ONE, key, init == CB_INIT_NORMAL ? sd : 0.0f,
                      init == CB_INIT_SINUSOID, block + p->t[i].offset);
}
