/* BERT and RoBERTa as graphs: Hugging Face BertForMaskedLM's network
 * (post-LN blocks, GELU as erf, learned positions, token types, the MLM
 * head) declared from the public layers, with HF's tensor names. */
#include <stdio.h>

#include "graph/graph.h"

typedef struct names {
    const char *enc, *head, *head_norm, *bias; /* "bert" / "roberta" prefixes */
    char buf[96];
} names;

static const char *nm(names *n, const char *a, int l, const char *b) {
    if (l < 0) snprintf(n->buf, sizeof n->buf, "%s.%s", a, b);
    else snprintf(n->buf, sizeof n->buf, "%s.encoder.layer.%d.%s", a, l, b);
    return n->buf;
}

static cb_act *drop(cb_act *x, const cb_bert_config *c) {
    return c->dropout > 0 ? cb_op_dropout(x, c->dropout) : x;
}

/* x = LN(x + attention(x)); x = LN(x + MLP(x)): one post-LN block */
static cb_act *block(cb_model *m, names *n, int l, const cb_bert_config *c, cb_act *x) {
    int C = c->d_model;
    cb_model_begin_block(m);
    cb_act *qkv = cb_op_linear(cb_model_linear_qkv(m, nm(n, n->enc, l, "attention.self.qkv"), C), x);
    cb_layer *at = cb_model_attention_flags(m, nm(n, n->enc, l, "attention.self"), C, c->n_head,
                                            CB_ATTN_PADDED);
    if (c->attn_dropout > 0) cb_layer_attention_dropout(at, c->attn_dropout);
    cb_act *a = cb_op_attention(at, qkv);
    a = cb_op_linear(cb_model_linear(m, nm(n, n->enc, l, "attention.output.dense"), C, C), a);
    a = drop(a, c);
    x = cb_op_layernorm(cb_model_layernorm(m, nm(n, n->enc, l, "attention.output.LayerNorm"), C),
                        cb_op_add(x, a));
    cb_act *h = cb_op_linear(cb_model_linear(m, nm(n, n->enc, l, "intermediate.dense"), C, 4 * C), x);
    h = cb_op_linear(cb_model_linear(m, nm(n, n->enc, l, "output.dense"), 4 * C, C),
                     cb_op_gelu_erf(h));
    h = drop(h, c);
    x = cb_op_layernorm(cb_model_layernorm(m, nm(n, n->enc, l, "output.LayerNorm"), C),
                        cb_op_add(x, h));
    cb_model_end_block(m);
    return x;
}

void cb_model_declare_bert(cb_model *m, const cb_bert_config *c) {
    names n = {.enc = c->roberta ? "roberta" : "bert",
               .head = c->roberta ? "lm_head.dense" : "cls.predictions.transform.dense",
               .head_norm = c->roberta ? "lm_head.layer_norm" : "cls.predictions.transform.LayerNorm",
               .bias = c->roberta ? "lm_head" : "cls.predictions"};
    int C = c->d_model;
    char pos[96];
    snprintf(pos, sizeof pos, "%s.embeddings.position_embeddings", n.enc);
    cb_model_set_id_fields(m, 2);
    cb_layer *emb = cb_model_embedding_named(m, nm(&n, n.enc, -1, "embeddings.word_embeddings"),
                                             pos, c->vocab, C);
    cb_act *x = cb_op_embedding(emb);
    cb_layer *tt = cb_model_lookup(m, nm(&n, n.enc, -1, "embeddings.token_type_embeddings"),
                                   c->types, C);
    x = cb_op_add(x, cb_op_lookup(tt, 1));
    x = cb_op_layernorm(cb_model_layernorm(m, nm(&n, n.enc, -1, "embeddings.LayerNorm"), C), x);
    x = drop(x, c);
    for (int l = 0; l < c->n_layer; l++) x = block(m, &n, l, c, x);
    cb_act *h = cb_op_gelu_erf(cb_op_linear(cb_model_linear(m, n.head, C, C), x));
    h = cb_op_layernorm(cb_model_layernorm(m, n.head_norm, C), h);
    cb_op_mlm_loss(emb, cb_model_bias(m, n.bias, c->vocab), h);
    m->mlm_slots = cb_bert_predictions(c);
}

/* BERT's create_pretraining_data: max_predictions_per_seq, by default
 * the share 0.15 of a whole sequence; at least 1, at most seq_len */
int cb_bert_predictions(const cb_bert_config *c) {
    int p = c->max_predictions > 0 ? c->max_predictions : (int)(c->seq_len * 0.15f + 0.5f);
    return p < 1 ? 1 : p > c->seq_len ? c->seq_len : p;
}
