/* Weights files: the parameter block written tensor by tensor under Hugging
 * Face GPT-2 names, so PyTorch and transformers load them as they are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"
#include "model/gpt_internal.h"

const char *const cb_gpt_config_keys[5] = {"n_layer", "d_model", "n_head", "seq_len", "vocab"};

static int *config_field(cb_gpt_config *c, int i) {
    int *f[5] = {&c->n_layer, &c->d_model, &c->n_head, &c->seq_len, &c->vocab};
    return f[i];
}

int gpt_save_blocks(const cb_gpt *m, int nb, const float *const *blocks,
                    const char *const *prefixes, const char *path, const char *const *extra,
                    int nextra, cb_err *e) {
    const char **meta = calloc(12 + 2 * (size_t)nextra, sizeof *meta);
    if (!meta) return cb_fail(e, CB_ENOMEM, "out of memory writing %s", path);
    char vals[5][24];
    for (int i = 0; i < 5; i++) {
        snprintf(vals[i], sizeof vals[i], "%d", *config_field((cb_gpt_config *)&m->c, i));
        meta[2 * i] = cb_gpt_config_keys[i];
        meta[2 * i + 1] = vals[i];
    }
    meta[10] = "format";
    meta[11] = "pt";
    for (int i = 0; i < 2 * nextra; i++) meta[12 + i] = extra[i];
    int rc = cb_ptable_save(&m->pt, nb, blocks, prefixes, path, meta, 6 + nextra, e);
    free(meta);
    return rc;
}

int cb_gpt_save(cb_gpt *m, const char *path, cb_err *e) {
    const float *block = m->params;
    const char *prefix = "";
    return gpt_save_blocks(m, 1, &block, &prefix, path, NULL, 0, e);
}

int gpt_load_block(const cb_gpt *m, float *block, const char *prefix, const cb_st_file *f,
                   const char *path, cb_err *e) {
    return cb_ptable_load(&m->pt, block, prefix, f, path, e);
}

/* Without metadata (a file from elsewhere), the sizes follow from shapes. */
static int infer_config(const cb_st_file *f, const char *path, cb_gpt_config *c, cb_err *e) {
    const cb_st_tensor *wte = cb_st_find_hf(f, "wte.weight"), *wpe = cb_st_find_hf(f, "wpe.weight");
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
        if (!cb_st_find_hf(f, name)) break;
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
        const char *v = cb_st_meta(&f, cb_gpt_config_keys[i]);
        if (!v) continue;
        char *end;
        long x = strtol(v, &end, 10);
        if (*end || x < 1 || x > 1 << 30) {
            cb_st_close(&f);
            return cb_fail(e, CB_EINPUT, "%s: metadata %s=\"%s\" is not a positive integer", path,
                           cb_gpt_config_keys[i], v);
        }
        *config_field(c, i) = (int)x;
        have++;
    }
    rc = have == 5 ? CB_OK : infer_config(&f, path, c, e);
    cb_st_close(&f);
    return rc ? rc : cb_gpt_config_check(c, e);
}

int cb_gpt_load(cb_gpt *m, const char *path, cb_err *e) {
    cb_st_file f;
    int rc = cb_st_open(path, &f, e);
    if (rc) return rc;
    rc = gpt_load_block(m, m->params, "", &f, path, e);
    cb_st_close(&f);
    return rc;
}
