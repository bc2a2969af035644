/* The Transformer encoder-decoder for translation as a graph
 * (cb_model_declare_nmt, include/cubist.h), from the public layers. */
#include <math.h>
#include <stdio.h>

#include "graph/graph.h"

enum { SRC = 0, TGT = 1 }; /* length sets */

typedef struct nmt_ctx {
    cb_model *m;
    const cb_nmt_config *c;
    char buf[64];
} nmt_ctx;

static const char *nm(nmt_ctx *n, const char *stack, int l, const char *what) {
    snprintf(n->buf, sizeof n->buf, "%s.%d.%s", stack, l, what);
    return n->buf;
}

/* the sublayer's input: LN(x) under pre-LN, x under post-LN */
static cb_act *pre(nmt_ctx *n, const char *ln, cb_act *x) {
    return n->c->pre_ln ? cb_op_layernorm(cb_model_layernorm(n->m, ln, n->c->d_model), x) : x;
}

static cb_act *drop(nmt_ctx *n, cb_act *x) {
    return n->c->dropout > 0 ? cb_op_dropout(x, n->c->dropout) : x;
}

/* the residual of the sublayer's output y, dropped out: x + y under pre-LN,
 * LN(x + y) under post-LN */
static cb_act *post(nmt_ctx *n, const char *ln, cb_act *x, cb_act *y) {
    cb_act *s = cb_op_add(x, drop(n, y));
    return n->c->pre_ln ? s : cb_op_layernorm(cb_model_layernorm(n->m, ln, n->c->d_model), s);
}

/* self-attention of x padded by length set `set` */
static cb_act *self_attn(nmt_ctx *n, const char *st, int l, cb_act *h, unsigned flags, int set) {
    int C = n->c->d_model;
    cb_act *qkv = cb_op_linear(cb_model_linear_qkv(n->m, nm(n, st, l, "attn.qkv"), C), h);
    cb_layer *at = cb_model_attention_flags(n->m, nm(n, st, l, "attn"), C, n->c->n_head,
                                            flags | CB_ATTN_PADDED);
    cb_layer_use_lengths(at, set, set);
    return cb_op_linear(cb_model_linear(n->m, nm(n, st, l, "attn.proj"), C, C),
                        cb_op_attention(at, qkv));
}

static cb_act *ffn(nmt_ctx *n, const char *st, int l, cb_act *h) {
    int C = n->c->d_model, F = n->c->d_ff;
    cb_act *u = cb_op_relu(cb_op_linear(cb_model_linear(n->m, nm(n, st, l, "fc1"), C, F), h));
    return cb_op_linear(cb_model_linear(n->m, nm(n, st, l, "fc2"), F, C), u);
}

static cb_act *encoder(nmt_ctx *n, cb_act *x, int l) {
    char a[64], b[64];
    snprintf(a, sizeof a, "enc.%d.ln1", l), snprintf(b, sizeof b, "enc.%d.ln2", l);
    cb_model_begin_block(n->m);
    x = post(n, a, x, self_attn(n, "enc", l, pre(n, a, x), 0, SRC));
    x = post(n, b, x, ffn(n, "enc", l, pre(n, b, x)));
    cb_model_end_block(n->m);
    return x;
}

/* cross-attention of h's target queries over enc's source keys */
static cb_act *cross(nmt_ctx *n, int l, cb_act *h, cb_act *enc) {
    int C = n->c->d_model;
    cb_act *q = cb_op_linear(cb_model_linear(n->m, nm(n, "dec", l, "xattn.q"), C, C), h);
    cb_act *kv = cb_op_linear(cb_model_linear_kv(n->m, nm(n, "dec", l, "xattn.kv"), C), enc);
    cb_layer *at = cb_model_attention_flags(n->m, nm(n, "dec", l, "xattn"), C, n->c->n_head,
                                            CB_ATTN_PADDED);
    cb_layer_use_lengths(at, TGT, SRC);
    return cb_op_linear(cb_model_linear(n->m, nm(n, "dec", l, "xattn.proj"), C, C),
                        cb_op_cross_attention(at, q, kv));
}

static cb_act *decoder(nmt_ctx *n, cb_act *y, cb_act *enc, int l) {
    char a[64], b[64], c[64];
    snprintf(a, sizeof a, "dec.%d.ln1", l), snprintf(b, sizeof b, "dec.%d.ln2", l);
    snprintf(c, sizeof c, "dec.%d.ln3", l);
    cb_model_begin_block(n->m);
    y = post(n, a, y, self_attn(n, "dec", l, pre(n, a, y), CB_ATTN_CAUSAL, TGT));
    y = post(n, b, y, cross(n, l, pre(n, b, y), enc));
    y = post(n, c, y, ffn(n, "dec", l, pre(n, c, y)));
    cb_model_end_block(n->m);
    return y;
}

void cb_model_declare_nmt(cb_model *m, const cb_nmt_config *c) {
    nmt_ctx n = {.m = m, .c = c};
    cb_model_set_id_fields(m, 2);
    cb_layer *emb = cb_model_embedding(m, "emb", c->vocab, c->d_model);
    cb_layer_set_sinusoidal(emb);
    cb_layer_set_loss(emb, c->smoothing, c->pad);
    if (c->emb_scale) cb_layer_set_embed_scale(emb, sqrtf((float)c->d_model));
    cb_act *x = drop(&n, cb_op_embedding_field(emb, 0));
    for (int l = 0; l < c->enc_layers; l++) x = encoder(&n, x, l);
    x = pre(&n, "enc.ln_f", x);
    cb_act *y = drop(&n, cb_op_embedding_field(emb, 1));
    for (int l = 0; l < c->dec_layers; l++) y = decoder(&n, y, x, l);
    cb_op_lm_loss(emb, pre(&n, "dec.ln_f", y));
}
