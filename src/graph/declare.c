/* Declaring a model: layers (parameters) and the operations that connect
 * them (cb_op_*), recorded as nodes in order. A mistake (a width that does
 * not match, a layer used on two parities) is kept and reported by
 * cb_model_build, so declaring code needs no checks of its own. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

static void declare_fail(cb_model *m, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void declare_fail(cb_model *m, int code, const char *fmt, ...) {
    if (!m || m->err.code) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err.msg, sizeof m->err.msg, fmt, ap);
    va_end(ap);
    m->err.code = code;
}

static int grow(void **p, int *cap, int need, size_t size) {
    if (need <= *cap) return 0;
    int c = *cap ? 2 * *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

cb_model *cb_model_new(cb_dist *d, int batch, int seq_len) {
    cb_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->d = d;
    m->L = d->L;
    m->B = batch;
    m->T = seq_len;
    m->Bl = d->g.dp > 0 ? batch / d->g.dp : batch;
    m->P = d->g.pp;
    m->me = d->g.at.p;
    m->seg = -1;
    m->loss_node = -1;
    m->fields = 1;
    m->pt.L = d->L;
    if (batch < 1 || seq_len < 1)
        declare_fail(m, CB_EINPUT, "cb_model_new: batch %d and seq_len %d must be >= 1", batch,
                     seq_len);
    return m;
}

int cb_model_set_precision(cb_model *m, const char *precision, cb_err *e) {
    cb_precision p;
    int rc = cb_precision_parse(precision, &p, e);
    if (!rc && m->built) rc = cb_fail(e, CB_EINPUT, "cb_model_set_precision: call it before cb_model_build");
    if (!rc) rc = cb_kernels_select(p, e);
    if (!rc) m->L->k = cb_kernels_default();
    return rc;
}

static cb_layer *new_layer(cb_model *m, int kind, const char *name) {
    if (!m) return NULL;
    cb_layer *l = calloc(1, sizeof *l);
    if (!l || grow((void **)&m->layers, &m->clayers, m->nlayers + 1, sizeof *m->layers)) {
        free(l);
        declare_fail(m, CB_ENOMEM, "out of memory declaring layer %s", name);
        return NULL;
    }
    l->m = m;
    l->kind = kind;
    l->idx = m->nlayers;
    l->parity = -1;
    l->parts = 1;
    l->t[0] = l->t[1] = -1;
    l->owner_vs[0] = l->owner_vs[1] = -1;
    l->init_sd = 0.02f;
    snprintf(l->name, sizeof l->name, "%s", name);
    if (strlen(name) > CB_LAYER_NAME_MAX) /* its tensors' names fit cb_tensor_info's */
        declare_fail(m, CB_EINPUT, "layer name %s is longer than %d characters; shorten it", name,
                     CB_LAYER_NAME_MAX);
    for (int i = 0; i < m->nlayers; i++)
        if (!strcmp(m->layers[i]->name, l->name))
            declare_fail(m, CB_EINPUT, "two layers are named %s; give each layer its own name", name);
    m->layers[m->nlayers++] = l;
    return l;
}

cb_layer *cb_model_embedding(cb_model *m, const char *name, int vocab, int C) {
    cb_layer *l = new_layer(m, G_EMBED, name);
    if (l) l->emb = (cb_embed){.V = vocab, .C = C, .T = m->T};
    if (l && (vocab < 1 || C < 1))
        declare_fail(m, CB_EINPUT, "embedding %s: vocab %d and width %d must be >= 1", name, vocab, C);
    return l;
}

cb_layer *cb_model_embedding_named(cb_model *m, const char *tok, const char *pos, int vocab,
                                   int C) {
    cb_layer *l = cb_model_embedding(m, tok, vocab, C);
    if (l) snprintf(l->pos, sizeof l->pos, "%s", pos);
    if (l && strlen(pos) > CB_LAYER_NAME_MAX)
        declare_fail(m, CB_EINPUT, "position tensor name %s is longer than %d characters; "
                                   "shorten it", pos, CB_LAYER_NAME_MAX);
    return l;
}

static cb_layer *linear(cb_model *m, const char *name, int in, int out, int parts) {
    cb_layer *l = new_layer(m, G_LINEAR, name);
    if (l) l->lin = (cb_linear){.in = in, .out = out, .parts = parts};
    if (l) l->parts = parts;
    if (l && (in < 1 || out < 1))
        declare_fail(m, CB_EINPUT, "linear %s: widths %d -> %d must be >= 1", name, in, out);
    return l;
}

cb_layer *cb_model_linear(cb_model *m, const char *name, int in, int out) {
    return linear(m, name, in, out, 1);
}

cb_layer *cb_model_linear_qkv(cb_model *m, const char *name, int C) {
    return linear(m, name, C, 3 * C, 3);
}

cb_layer *cb_model_linear_kv(cb_model *m, const char *name, int C) {
    return linear(m, name, C, 2 * C, 2);
}

cb_layer *cb_model_attention(cb_model *m, const char *name, int C, int heads) {
    return cb_model_attention_flags(m, name, C, heads, CB_ATTN_CAUSAL);
}

cb_layer *cb_model_attention_flags(cb_model *m, const char *name, int C, int heads,
                                   unsigned flags) {
    cb_layer *l = new_layer(m, G_ATTN, name);
    if (l) l->C = C, l->heads = heads, l->attn_flags = flags;
    if (l && (flags & ~(unsigned)(CB_ATTN_CAUSAL | CB_ATTN_PADDED)))
        declare_fail(m, CB_EINPUT, "attention %s: flags 0x%x are not CB_ATTN_CAUSAL | "
                                   "CB_ATTN_PADDED; pass those only", name, flags);
    if (l && (heads < 1 || C < 1 || C % heads))
        declare_fail(m, CB_EINPUT, "attention %s: %d heads do not divide its width %d; choose "
                                   "heads that divide the width", name, heads, C);
    return l;
}

int cb_heads_check(int heads, int d_model, cb_err *e) {
    if (heads >= 1 && d_model >= 1 && d_model % heads == 0) return CB_OK;
    int h = heads > d_model ? d_model : heads;
    while (h > 1 && d_model % h) h--;
    return cb_fail(e, CB_EINPUT,
                   "--heads %d does not divide --d-model %d; choose heads that divide d-model "
                   "(e.g. --heads %d)", heads, d_model, h < 1 ? 1 : h);
}

void cb_layer_set_init_std(cb_layer *l, float sd) {
    if (!l) return;
    if (!(sd >= 0) || l->kind == G_NORM || l->kind == G_ATTN)
        declare_fail(l->m, CB_EINPUT, "layer %s: an initial standard deviation applies to linears "
                                      "and embeddings, and is >= 0", l->name);
    l->init_sd = sd;
}

cb_layer *cb_model_layernorm(cb_model *m, const char *name, int C) {
    cb_layer *l = new_layer(m, G_NORM, name);
    if (l) l->norm = (cb_norm){.C = C};
    if (l && C < 1) declare_fail(m, CB_EINPUT, "layernorm %s: width %d must be >= 1", name, C);
    return l;
}

void cb_model_begin_block(cb_model *m) {
    if (!m) return;
    if (m->seg >= 0) declare_fail(m, CB_EINPUT, "cb_model_begin_block inside a block; end it first");
    int n = 0;
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].seg >= n) n = m->nodes[i].seg + 1;
    m->seg = n;
}

void cb_model_end_block(cb_model *m) {
    if (!m) return;
    if (m->seg < 0) declare_fail(m, CB_EINPUT, "cb_model_end_block without cb_model_begin_block");
    m->seg = -1;
}

static cb_act *new_act(cb_model *m, int H, int parity, int parts) {
    cb_act *a = calloc(1, sizeof *a);
    if (!a || grow((void **)&m->acts, &m->cacts, m->nacts + 1, sizeof *m->acts)) {
        free(a);
        declare_fail(m, CB_ENOMEM, "out of memory declaring an activation");
        return NULL;
    }
    *a = (cb_act){.m = m, .id = m->nacts, .H = H, .parity = parity, .parts = parts,
                  .node = m->nnodes};
    m->acts[m->nacts++] = a;
    return a;
}

/* Appends a node reading x0, x1 (may be NULL) and writing a new value of
 * H features (H 0: the loss, no value). */
static cb_act *node(cb_model *m, int kind, cb_layer *l, const cb_act *x0, const cb_act *x1, int H,
                    int parity, int parts) {
    if (m->built) declare_fail(m, CB_EINPUT, "operations are declared before cb_model_build");
    if (grow((void **)&m->nodes, &m->cnodes, m->nnodes + 1, sizeof *m->nodes)) {
        declare_fail(m, CB_ENOMEM, "out of memory declaring the graph");
        return NULL;
    }
    cb_act *y = H ? new_act(m, H, parity, parts) : NULL;
    if (H && !y) return NULL;
    gnode *n = &m->nodes[m->nnodes++];
    *n = (gnode){.kind = kind, .l = l, .in = {x0 ? x0->id : -1, x1 ? x1->id : -1},
                 .nin = x1 ? 2 : x0 ? 1 : 0, .out = y ? y->id : -1, .seg = m->seg};
    return y ? y : (cb_act *)x0;
}

/* The layer's parity is its first input's; later uses must agree (the
 * shards of its tensors depend on it). */
static int bind_parity(cb_layer *l, const cb_act *x) {
    if (l->parity < 0) l->parity = x->parity;
    if (l->parity == x->parity) return 1;
    declare_fail(l->m, CB_EINPUT, "layer %s is applied to activations of parity %d and %d; a "
                                  "shared layer needs inputs of the same parity", l->name,
                 l->parity, x->parity);
    return 0;
}

/* Both arguments exist and belong to the same model. */
static cb_model *owner(const cb_layer *l, const cb_act *x, const char *what) {
    cb_model *m = l ? l->m : x ? x->m : NULL;
    if (!m) return NULL;
    if ((l && x && l->m != x->m) || (!x && what))
        declare_fail(m, CB_EINPUT, "%s: %s", what ? what : "operation",
                     x ? "layer and activation belong to different models"
                       : "its input is NULL (an earlier declaration failed)");
    return m->err.code ? NULL : m;
}

static int is_kind(cb_layer *l, int kind, const char *op) {
    if (l->kind == kind) return 1;
    declare_fail(l->m, CB_EINPUT, "%s takes a layer of the matching kind; %s is not one", op, l->name);
    return 0;
}

void cb_layer_set_loss(cb_layer *l, float label_smoothing, int ignore_target) {
    if (!l || !is_kind(l, G_EMBED, "cb_layer_set_loss")) return;
    if (!(label_smoothing >= 0.0f && label_smoothing < 1.0f) || ignore_target < -1 ||
        ignore_target >= l->emb.V)
        declare_fail(l->m, CB_EINPUT, "embedding %s: label smoothing %g and ignored target %d; "
                     "pass a smoothing in [0, 1) and -1 (none) or an id below %d", l->name,
                     (double)label_smoothing, ignore_target, l->emb.V);
    else l->emb.smooth = label_smoothing, l->emb.ignore = ignore_target,
         l->emb.has_ignore = ignore_target >= 0;
}

void cb_layer_set_sinusoidal(cb_layer *l) {
    if (l && is_kind(l, G_EMBED, "cb_layer_set_sinusoidal")) l->sinusoid = 1;
}

void cb_layer_set_embed_scale(cb_layer *l, float s) {
    if (!l || !is_kind(l, G_EMBED, "cb_layer_set_embed_scale")) return;
    if (!l->sinusoid || !(s > 0))
        declare_fail(l->m, CB_EINPUT, "cb_layer_set_embed_scale: %s needs fixed sinusoidal "
                     "positions (cb_layer_set_sinusoidal first) and a scale > 0 (got %g)", l->name,
                     (double)s);
    else l->emb_scale = s;
}

cb_act *cb_op_embedding(cb_layer *emb) {
    cb_model *m = owner(emb, NULL, NULL);
    if (!m || !is_kind(emb, G_EMBED, "cb_op_embedding")) return NULL;
    if (emb->parity < 0) emb->parity = 0; /* with several id fields it reads field 0 */
    return node(m, N_EMBED, emb, NULL, NULL, emb->emb.C, 0, 1);
}

cb_act *cb_op_linear(cb_layer *l, const cb_act *x) {
    cb_model *m = owner(l, x, "cb_op_linear");
    if (!m || !is_kind(l, G_LINEAR, "cb_op_linear") || !bind_parity(l, x)) return NULL;
    if (x->H != l->lin.in)
        declare_fail(m, CB_EINPUT, "linear %s takes %d features; its input has %d: declare it "
                                   "with in = %d or apply it to %d features", l->name, l->lin.in,
                     x->H, x->H, l->lin.in);
    return node(m, N_LINEAR, l, x, NULL, l->lin.out, 1 - x->parity, l->parts);
}

cb_act *cb_op_layernorm(cb_layer *l, const cb_act *x) {
    cb_model *m = owner(l, x, "cb_op_layernorm");
    if (!m || !is_kind(l, G_NORM, "cb_op_layernorm") || !bind_parity(l, x)) return NULL;
    if (x->H != l->norm.C)
        declare_fail(m, CB_EINPUT, "layernorm %s takes %d features; its input has %d: declare it "
                                   "with C = %d", l->name, l->norm.C, x->H, x->H);
    return node(m, N_NORM, l, x, NULL, x->H, x->parity, 1);
}

/* The layouts hold whole heads and sequences of parity-1 values only:
 * what a linear makes of the residual stream. */
static int attn_input(cb_layer *l, const cb_act *x, int parts, const char *what) {
    if (x->parts == parts && x->H == parts * l->C && x->parity == 1) return 1;
    declare_fail(l->m, CB_EINPUT, "attention %s reads the output of a %s of width %d (%d x %d "
                                  "features) applied to the residual stream (parity 0); this one "
                                  "has %d features in %d sections, parity %d", l->name, what,
                 l->C, parts, l->C, x->H, x->parts, x->parity);
    return 0;
}

void cb_layer_attention_dropout(cb_layer *l, float p) {
    if (!l || !is_kind(l, G_ATTN, "cb_layer_attention_dropout")) return;
    if (!(p >= 0 && p < 1))
        declare_fail(l->m, CB_EINPUT, "attention %s: dropout %g must be in [0, 1)", l->name, p);
    else l->attn_drop = p;
}

cb_act *cb_op_attention(cb_layer *l, const cb_act *qkv) {
    cb_model *m = owner(l, qkv, "cb_op_attention");
    if (!m || !is_kind(l, G_ATTN, "cb_op_attention")) return NULL;
    if (!attn_input(l, qkv, 3, "cb_model_linear_qkv")) return NULL;
    if (l->parity < 0) l->parity = 1;
    return node(m, N_ATTN, l, qkv, NULL, l->C, qkv->parity, 1);
}

cb_act *cb_op_cross_attention(cb_layer *l, const cb_act *q, const cb_act *kv) {
    cb_model *m = owner(l, q, "cb_op_cross_attention");
    if (!m || !owner(l, kv, "cb_op_cross_attention") ||
        !is_kind(l, G_ATTN, "cb_op_cross_attention"))
        return NULL;
    if (!attn_input(l, q, 1, "cb_model_linear") || !attn_input(l, kv, 2, "cb_model_linear_kv"))
        return NULL;
    if (l->parity < 0) l->parity = 1;
    return node(m, N_ATTN, l, q, kv, l->C, 1, 1);
}

void cb_model_set_lengths(cb_model *m, const int *lens) {
    cb_model_set_lengths_set(m, 0, lens);
}

void cb_model_set_lengths_set(cb_model *m, int set, const int *lens) {
    if (m && set >= 0 && set < CB_LENGTH_SETS) m->lens[set] = lens;
    else if (m) declare_fail(m, CB_EINPUT, "length set %d is outside [0, %d); use a set below %d",
                             set, CB_LENGTH_SETS, CB_LENGTH_SETS);
}

void cb_layer_use_lengths(cb_layer *l, int query_set, int key_set) {
    if (!l || !is_kind(l, G_ATTN, "cb_layer_use_lengths")) return;
    if (!(l->attn_flags & CB_ATTN_PADDED) || query_set < 0 || key_set < 0 ||
        query_set >= CB_LENGTH_SETS || key_set >= CB_LENGTH_SETS)
        declare_fail(l->m, CB_EINPUT, "attention %s: length sets %d, %d need CB_ATTN_PADDED and sets in "
                     "[0, %d); declare it padded and pass sets below %d", l->name, query_set, key_set,
                     CB_LENGTH_SETS, CB_LENGTH_SETS);
    else l->len_set[0] = query_set, l->len_set[1] = key_set;
}

cb_act *cb_op_gelu(const cb_act *x) {
    cb_model *m = owner(NULL, x, "cb_op_gelu");
    return m ? node(m, N_GELU, NULL, x, NULL, x->H, x->parity, x->parts) : NULL;
}

cb_act *cb_op_add(const cb_act *a, const cb_act *b) {
    cb_model *m = owner(NULL, a, "cb_op_add");
    if (!m || !owner(NULL, b, "cb_op_add")) return NULL;
    if (a->m != b->m || a->H != b->H || a->parity != b->parity || a->parts != b->parts) {
        declare_fail(m, CB_EINPUT, "cb_op_add: the two activations differ (%d and %d features, "
                                   "parity %d and %d); add activations of one shape",
                     a->H, b->H, a->parity, b->parity);
        return NULL;
    }
    return node(m, N_ADD, NULL, a, b, a->H, a->parity, a->parts);
}

void cb_op_lm_loss(cb_layer *emb, const cb_act *x) {
    cb_model *m = owner(emb, x, "cb_op_lm_loss");
    if (!m || !is_kind(emb, G_EMBED, "cb_op_lm_loss")) return;
    if (x->H != emb->emb.C || x->parity != 0)
        declare_fail(m, CB_EINPUT, "cb_op_lm_loss: the head of %s reads %d features on the residual "
                                   "stream (parity 0); its input has %d, parity %d",
                     emb->name, emb->emb.C, x->H, x->parity);
    if (m->loss_node >= 0) declare_fail(m, CB_EINPUT, "a model has one loss; a second loss was declared");
    m->loss_node = m->nnodes;
    node(m, N_LOSS, emb, x, NULL, 0, 0, 1);
}

cb_act *cb_op_gelu_erf(const cb_act *x) {
    cb_act *y = cb_op_gelu(x);
    if (y) x->m->nodes[x->m->nnodes - 1].erf = 1;
    return y;
}

cb_act *cb_op_dropout(const cb_act *x, float p) {
    cb_model *m = owner(NULL, x, "cb_op_dropout");
    if (!m) return NULL;
    if (!(p >= 0 && p < 1)) {
        declare_fail(m, CB_EINPUT, "cb_op_dropout: p %g must be in [0, 1)", p);
        return NULL;
    }
    cb_act *y = node(m, N_DROP, NULL, x, NULL, x->H, x->parity, x->parts);
    if (y) m->nodes[m->nnodes - 1].p = p, m->nodes[m->nnodes - 1].drop_ix = m->ndrop++;
    return y;
}

cb_layer *cb_model_bias(cb_model *m, const char *name, int n) {
    cb_layer *l = new_layer(m, G_BIAS, name);
    if (l) l->lin = (cb_linear){.out = n};
    if (l && n < 1) declare_fail(m, CB_EINPUT, "bias %s: length %d must be >= 1", name, n);
    return l;
}

void cb_op_mlm_loss(cb_layer *emb, cb_layer *bias, const cb_act *x) {
    cb_model *m = owner(emb, x, "cb_op_mlm_loss");
    if (!m || !owner(bias, x, "cb_op_mlm_loss") || !is_kind(bias, G_BIAS, "cb_op_mlm_loss"))
        return;
    if (bias->lin.out != emb->emb.V)
        declare_fail(m, CB_EINPUT, "cb_op_mlm_loss: the decoder bias %s has %d entries, the "
                                   "vocabulary of %s %d; declare it with %d", bias->name,
                     bias->lin.out, emb->name, emb->emb.V, emb->emb.V);
    if (x->H != emb->emb.C)
        declare_fail(m, CB_EINPUT, "cb_op_mlm_loss: the decoder of %s reads %d features; its "
                                   "input has %d", emb->name, emb->emb.C, x->H);
    if (m->loss_node >= 0) declare_fail(m, CB_EINPUT, "a model has one loss; a second loss was declared");
    /* any parity: the head moves its input to parity 0 where the layout needs it */
    m->loss_node = m->nnodes;
    node(m, N_LOSS, emb, x, NULL, 0, 0, 1);
    m->nodes[m->loss_node].l2 = bias;
    bias->parity = 0;
}

/* ---------------------------------------------------------------- recommendation layers */

void cb_model_set_id_fields(cb_model *m, int fields) {
    if (!m) return;
    if (fields < 1 || m->nnodes)
        declare_fail(m, CB_EINPUT, "cb_model_set_id_fields(%d): give >= 1 fields, before the "
                                   "first operation", fields);
    else m->fields = fields;
}

cb_layer *cb_model_lookup(cb_model *m, const char *name, int rows, int C) {
    cb_layer *l = new_layer(m, G_LOOKUP, name);
    if (l) l->emb = (cb_embed){.V = rows, .C = C, .T = m->T};
    if (l && (rows < 1 || C < 1))
        declare_fail(m, CB_EINPUT, "lookup %s: rows %d and width %d must be >= 1", name, rows, C);
    return l;
}

cb_layer *cb_model_logistic(cb_model *m, const char *name, int C) {
    cb_layer *l = new_layer(m, G_LOGIT, name);
    if (l) l->norm = (cb_norm){.C = C};
    if (l && C < 1) declare_fail(m, CB_EINPUT, "logistic head %s: width %d must be >= 1", name, C);
    return l;
}

/* A lookup of id field `field`: an embedding (with positions) or a table. */
static cb_act *field_node(cb_layer *l, int gkind, int nkind, int field, const char *op) {
    cb_model *m = owner(l, NULL, NULL);
    if (!m || !is_kind(l, gkind, op)) return NULL;
    if (field < 0 || field >= m->fields)
        declare_fail(m, CB_EINPUT, "%s of %s reads id field %d; the rows have %d "
                                   "(cb_model_set_id_fields)", op, l->name, field, m->fields);
    if (l->parity < 0) l->parity = 0;
    cb_act *y = node(m, nkind, l, NULL, NULL, l->emb.C, 0, 1);
    if (y) m->nodes[m->nnodes - 1].field = field;
    return y;
}

cb_act *cb_op_embedding_field(cb_layer *emb, int field) {
    return field_node(emb, G_EMBED, N_EMBED, field, "cb_op_embedding_field");
}

cb_act *cb_op_lookup(cb_layer *table, int field) {
    return field_node(table, G_LOOKUP, N_LOOKUP, field, "cb_op_lookup");
}

/* Two activations of one width, parts 1 (element-wise operations). */
static cb_model *pair(const cb_act *a, const cb_act *b, const char *op, int same_width) {
    cb_model *m = owner(NULL, a, op);
    if (!m || !owner(NULL, b, op)) return NULL;
    if (a->m != b->m || a->parts != 1 || b->parts != 1 ||
        (same_width && (a->H != b->H || a->parity != b->parity))) {
        declare_fail(m, CB_EINPUT, "%s: the activations have %d and %d features, parity %d and "
                                   "%d, sections %d and %d; use activations of one model%s, one "
                                   "section each", op, a->H, b->H, a->parity, b->parity, a->parts,
                     b->parts, same_width ? " and one shape" : "");
        return NULL;
    }
    return m;
}

cb_act *cb_op_mul(const cb_act *a, const cb_act *b) {
    cb_model *m = pair(a, b, "cb_op_mul", 1);
    return m ? node(m, N_MUL, NULL, a, b, a->H, a->parity, 1) : NULL;
}

cb_act *cb_op_relu(const cb_act *x) {
    cb_model *m = owner(NULL, x, "cb_op_relu");
    return m ? node(m, N_RELU, NULL, x, NULL, x->H, x->parity, x->parts) : NULL;
}

cb_act *cb_op_concat(const cb_act *a, const cb_act *b) {
    cb_model *m = pair(a, b, "cb_op_concat", 0);
    return m ? node(m, N_CONCAT, NULL, a, b, a->H + b->H, a->parity, 1) : NULL;
}

void cb_op_logistic_loss(cb_layer *head, const cb_act *x) {
    cb_model *m = owner(head, x, "cb_op_logistic_loss");
    if (!m || !is_kind(head, G_LOGIT, "cb_op_logistic_loss") || !bind_parity(head, x)) return;
    if (x->H != head->norm.C || x->parts != 1)
        declare_fail(m, CB_EINPUT, "cb_op_logistic_loss: %s reads %d features of one section; "
                                   "its input has %d in %d sections", head->name, head->norm.C,
                     x->H, x->parts);
    if (m->loss_node >= 0)
        declare_fail(m, CB_EINPUT, "a model has one loss; a second loss was declared");
    m->loss_node = m->nnodes;
    node(m, N_LOGIT, head, x, NULL, 0, x->parity, 1);
}
