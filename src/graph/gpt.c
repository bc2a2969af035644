/* GPT-2 declared from the public layers, with Hugging Face GPT-2's tensor
 * names: the built-in model as a graph, run by the same engine as any
 * user's model. Pre-LN blocks, each a recompute block; GPT-2's
 * initialisation (residual projections at 0.02/sqrt(2L)). Also the
 * config's checks, its FLOPs and its keys in a weights file's metadata. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "graph/graph.h"

/* "h.<l>.<what>" */
static const char *nm(char *buf, int l, const char *what) {
    snprintf(buf, 48, "h.%d.%s", l, what);
    return buf;
}

/* x -> x + attn(ln_1(x)) -> that + mlp(ln_2(that)) */
static cb_act *block(cb_model *m, int l, int C, int NH, float resid_sd, cb_act *x) {
    char s[48];
    cb_model_begin_block(m);
    cb_act *h = cb_op_layernorm(cb_model_layernorm(m, nm(s, l, "ln_1"), C), x);
    cb_act *qkv = cb_op_linear(cb_model_linear_qkv(m, nm(s, l, "attn.c_attn"), C), h);
    cb_act *a = cb_op_attention(cb_model_attention(m, nm(s, l, "attn"), C, NH), qkv);
    cb_layer *proj = cb_model_linear(m, nm(s, l, "attn.c_proj"), C, C);
    cb_layer_set_init_std(proj, resid_sd);
    x = cb_op_add(x, cb_op_linear(proj, a));
    h = cb_op_layernorm(cb_model_layernorm(m, nm(s, l, "ln_2"), C), x);
    cb_act *u = cb_op_gelu(cb_op_linear(cb_model_linear(m, nm(s, l, "mlp.c_fc"), C, 4 * C), h));
    proj = cb_model_linear(m, nm(s, l, "mlp.c_proj"), 4 * C, C);
    cb_layer_set_init_std(proj, resid_sd);
    x = cb_op_add(x, cb_op_linear(proj, u));
    cb_model_end_block(m);
    return x;
}

void cb_model_declare_gpt(cb_model *m, const cb_gpt_config *c) {
    cb_layer *emb = cb_model_embedding_named(m, "wte", "wpe", c->vocab, c->d_model);
    if (emb && c->seq_len > emb->emb.T) emb->emb.T = c->seq_len; /* wpe: the whole context */
    cb_act *x = cb_op_embedding(emb);
    float resid_sd = 0.02f / sqrtf(2.0f * c->n_layer); /* GPT-2's residual projections */
    for (int l = 0; l < c->n_layer; l++) x = block(m, l, c->d_model, c->n_head, resid_sd, x);
    cb_op_lm_loss(emb, cb_op_layernorm(cb_model_layernorm(m, "ln_f", c->d_model), x));
}

int cb_gpt_config_check(const cb_gpt_config *c, cb_err *e) {
    if (c->n_layer < 1 || c->d_model < 1 || c->n_head < 1 || c->seq_len < 1 || c->vocab < 2)
        return cb_fail(e, CB_EINPUT,
                       "model size must be positive (layers %d, d-model %d, heads %d, seq-len %d, "
                       "vocab %d); set --layers --d-model --heads --seq-len --vocab",
                       c->n_layer, c->d_model, c->n_head, c->seq_len, c->vocab);
    if (cb_heads_check(c->n_head, c->d_model, e)) return CB_EINPUT;
    if (c->vocab > 65536)
        return cb_fail(e, CB_EINPUT, "--vocab %d exceeds 65536, the limit of uint16 token files",
                       c->vocab);
    return CB_OK;
}

double cb_gpt_flops_per_token(const cb_gpt_config *c, int T) {
    double C = c->d_model, L = c->n_layer;
    double n = (double)c->vocab * C + (double)c->seq_len * C + 2 * C +
               L * (12 * C * C + 13 * C);
    return 6.0 * n + 12.0 * L * C * T;
}

const char *const cb_gpt_config_keys[5] = {"n_layer", "d_model", "n_head", "seq_len", "vocab"};

static int *config_field(cb_gpt_config *c, int i) {
    int *f[5] = {&c->n_layer, &c->d_model, &c->n_head, &c->seq_len, &c->vocab};
    return f[i];
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
