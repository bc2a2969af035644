/* Weights files: the parameter block written tensor by tensor under Hugging
 * Face GPT-2 names, so PyTorch and transformers load them as they are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"
#include "model/gpt_internal.h"

static const char *const CONFIG_KEYS[5] = {"n_layer", "d_model", "n_head", "seq_len", "vocab"};

static int check_tensor(const cb_st_tensor *s, const cb_tensor_info *t, const char *name,
                        const char *path, cb_err *e);

static int *config_field(cb_gpt_config *c, int i) {
    int *f[5] = {&c->n_layer, &c->d_model, &c->n_head, &c->seq_len, &c->vocab};
    return f[i];
}

/* Full tensors of nb blocks, gathered over the tensor group; NULL on other
 * tensor ranks (and when out of memory on rank 0: *oom set). */
static float *gather_blocks(const cb_gpt *m, int nb, const float *const *blocks, size_t *full_n,
                            int *oom) {
    size_t n = 0;
    for (int i = 0; i < m->ntensor; i++) {
        const cb_tensor_info *t = &m->tensors[i];
        n += (size_t)t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
    }
    *full_n = n;
    float *full = m->L->tp_rank == 0 ? malloc(sizeof(float) * n * nb + 1) : NULL;
    *oom = m->L->tp_rank == 0 && !full;
    for (int b = 0; b < nb; b++) {
        size_t off = 0;
        for (int i = 0; i < m->ntensor; i++) {
            const cb_tensor_info *t = &m->tensors[i];
            const gpt_tensor_split *sp = &m->split[i];
            int two = t->ndim == 2;
            float *dst = full ? full + (size_t)b * n + off : NULL;
            cb_layout_gather(m->L, sp->kind, two ? t->shape[0] : 1, two ? t->shape[1] : t->shape[0],
                             sp->parts, sp->parity, blocks[b] + t->offset, dst);
            off += (size_t)t->shape[0] * (two ? t->shape[1] : 1);
        }
    }
    return full;
}

int gpt_save_blocks(const cb_gpt *m, int nb, const float *const *blocks,
                    const char *const *prefixes, const char *path, const char *const *extra,
                    int nextra, cb_err *e) {
    size_t full_n;
    int oom;
    float *full = gather_blocks(m, nb, blocks, &full_n, &oom);
    if (oom) return cb_fail(e, CB_ENOMEM, "out of memory gathering %s", path);
    if (m->L->tp_rank != 0) return CB_OK;
    size_t n = (size_t)nb * m->ntensor;
    cb_st_entry *t = calloc(n, sizeof *t);
    char(*names)[80] = calloc(n, sizeof *names);
    const char **meta = calloc(12 + 2 * (size_t)nextra, sizeof *meta);
    if (!t || !names || !meta) {
        free(t);
        free(names);
        free(meta);
        free(full);
        return cb_fail(e, CB_ENOMEM, "out of memory writing %s", path);
    }
    size_t off = 0;
    for (size_t j = 0; j < n; j++) {
        const cb_tensor_info *ti = &m->tensors[j % m->ntensor];
        if (j % m->ntensor == 0) off = (j / m->ntensor) * full_n;
        snprintf(names[j], sizeof names[j], "%s%s", prefixes[j / m->ntensor], ti->name);
        t[j].name = names[j];
        t[j].ndim = ti->ndim;
        t[j].shape[0] = ti->shape[0];
        t[j].shape[1] = ti->shape[1];
        t[j].data = full + off;
        off += (size_t)ti->shape[0] * (ti->ndim == 2 ? ti->shape[1] : 1);
    }
    char vals[5][24];
    for (int i = 0; i < 5; i++) {
        snprintf(vals[i], sizeof vals[i], "%d", *config_field((cb_gpt_config *)&m->c, i));
        meta[2 * i] = CONFIG_KEYS[i];
        meta[2 * i + 1] = vals[i];
    }
    meta[10] = "format";
    meta[11] = "pt";
    for (int i = 0; i < 2 * nextra; i++) meta[12 + i] = extra[i];
    int rc = cb_st_write(path, t, (int)n, meta, 6 + nextra, e);
    free(t);
    free(names);
    free(meta);
    free(full);
    return rc;
}

int cb_gpt_save(cb_gpt *m, const char *path, cb_err *e) {
    const float *block = m->params;
    const char *prefix = "";
    return gpt_save_blocks(m, 1, &block, &prefix, path, NULL, 0, e);
}

int gpt_load_block(const cb_gpt *m, float *block, const char *prefix, const cb_st_file *f,
                   const char *path, cb_err *e) {
    for (int i = 0; i < m->ntensor; i++) {
        const cb_tensor_info *t = &m->tensors[i];
        char name[80];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        const cb_st_tensor *s = cb_st_find(f, name);
        int rc = check_tensor(s, t, name, path, e);
        if (rc) return rc;
        /* the data section need not be 4-byte aligned: copy, then cut the shard */
        float *full = malloc(s->nbytes + sizeof(float));
        if (!full) return cb_fail(e, CB_ENOMEM, "out of memory reading %s", path);
        memcpy(full, f->data + s->offset, s->nbytes);
        cb_shard sh = gpt_shard(m, i, m->L->tp_rank);
        cb_shard_extract(&sh, full, block + t->offset);
        free(full);
    }
    return CB_OK;
}

/* Without metadata (a file from elsewhere), the sizes follow from shapes. */
static int infer_config(const cb_st_file *f, const char *path, cb_gpt_config *c, cb_err *e) {
    const cb_st_tensor *wte = cb_st_find(f, "wte.weight"), *wpe = cb_st_find(f, "wpe.weight");
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2)
        return cb_fail(e, CB_EINPUT,
                       "%s: no wte.weight/wpe.weight tensors; is this a GPT-2 safetensors file?",
                       path);
    c->vocab = (int)wte->shape[0];
    c->d_model = (int)wte->shape[1];
    c->seq_len = (int)wpe->shape[0];
    c->n_layer = 0;
    char name[64];
    for (;;) {
        snprintf(name, sizeof name, "h.%d.ln_1.weight", c->n_layer);
        if (!cb_st_find(f, name)) break;
        c->n_layer++;
    }
    if (c->n_head < 1)
        return cb_fail(e, CB_EINPUT, "%s: no n_head in its metadata; pass --heads", path);
    return CB_OK;
}

int cb_gpt_config_from_file(const char *path, cb_gpt_config *c, cb_err *e) {
    cb_st_file f;
    int rc = cb_st_open(path, &f, e);
    if (rc) return rc;
    int have = 0;
    for (int i = 0; i < 5; i++) {
        const char *v = cb_st_meta(&f, CONFIG_KEYS[i]);
        if (!v) continue;
        char *end;
        long x = strtol(v, &end, 10);
        if (*end || x < 1 || x > 1 << 30) {
            cb_st_close(&f);
            return cb_fail(e, CB_EINPUT, "%s: metadata %s=\"%s\" is not a positive integer", path,
                           CONFIG_KEYS[i], v);
        }
        *config_field(c, i) = (int)x;
        have++;
    }
    rc = have == 5 ? CB_OK : infer_config(&f, path, c, e);
    cb_st_close(&f);
    return rc ? rc : cb_gpt_config_check(c, e);
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
        return cb_fail(e, CB_EINPUT, "%s: tensor %s is missing; the file is not a GPT-2 checkpoint "
                                     "of this size",
                       path, name);
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

int cb_gpt_load(cb_gpt *m, const char *path, cb_err *e) {
    cb_st_file f;
    int rc = cb_st_open(path, &f, e);
    if (rc) return rc;
    rc = gpt_load_block(m, m->params, "", &f, path, e);
    cb_st_close(&f);
    return rc;
}
