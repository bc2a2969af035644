/* GPT-2 declared from the public layers, with Hugging Face GPT-2's tensor
 * names: the built-in model as a graph, run by the same engine as any
 * user's model. Pre-LN blocks, each a recompute block; GPT-2's
 * initialisation (residual projections at 0.02/sqrt(2L)), so a seed gives
 * cb_gpt_init_random's values. */
#include <math.h>
#include <stdio.h>

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
