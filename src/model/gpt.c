/* GPT-2: token + position embedding, L pre-LayerNorm blocks (causal
 * attention, GELU MLP), final LayerNorm, LM head tied to wte.
 * Parameters live in one block ordered layer by layer (wte, wpe, h.0 ...
 * h.{L-1}, ln_f), so the gradients that backward finishes first form a
 * contiguous tail: what fusion buckets and pipeline stages want.
 * Activations are planned once for the largest micro-batch (B,T). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"
#include "kernels/kernels.h"
#include "model/gpt_internal.h"
#include "util/rng.h"

static const char *const LAYER_NAMES[NLAYER_TENSORS] = {
    "ln_1.weight",      "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",      "ln_2.bias",
    "mlp.c_fc.weight",  "mlp.c_fc.bias",  "mlp.c_proj.weight",  "mlp.c_proj.bias"};

int cb_gpt_config_check(const cb_gpt_config *c, cb_err *e) {
    if (c->n_layer < 1 || c->d_model < 1 || c->n_head < 1 || c->seq_len < 1 || c->vocab < 2)
        return cb_fail(e, CB_EINPUT,
                       "model size must be positive (layers %d, d-model %d, heads %d, seq-len %d, "
                       "vocab %d); set --layers --d-model --heads --seq-len --vocab",
                       c->n_layer, c->d_model, c->n_head, c->seq_len, c->vocab);
    if (c->d_model % c->n_head) {
        int h = c->n_head;
        while (c->d_model % h) h--;
        return cb_fail(e, CB_EINPUT,
                       "--heads %d does not divide --d-model %d; choose heads that divide d-model "
                       "(e.g. --heads %d)",
                       c->n_head, c->d_model, h);
    }
    if (c->vocab > 65536)
        return cb_fail(e, CB_EINPUT, "--vocab %d exceeds 65536, the limit of uint16 token files",
                       c->vocab);
    return CB_OK;
}

static void add_tensor(cb_gpt *m, const char *name, int64_t d0, int64_t d1, int decay, int layer,
                       cb_param_kind kind, int parts, int parity) {
    if (cb_ptable_add(&m->pt, name, d0, d1, decay, layer, kind, parts, parity) < 0) m->oom = 1;
}

static void build_tensor_table(cb_gpt *m) {
    const cb_gpt_config *c = &m->c;
    int64_t C = c->d_model;
    /* shape, matmul weight, kind, parts, parity (of the activation it acts on) */
    static const struct {
        int64_t d0, d1;
        cb_param_kind kind;
        int parts, parity;
    } spec[NLAYER_TENSORS] = {
        {1, 0, CB_P_NORM, 1, 0},     {1, 0, CB_P_NORM, 1, 0},        {1, 3, CB_P_LINEAR_W, 3, 0},
        {3, 0, CB_P_LINEAR_B, 3, 0}, {1, 1, CB_P_LINEAR_W, 1, 1},    {1, 0, CB_P_LINEAR_B, 1, 1},
        {1, 0, CB_P_NORM, 1, 0},     {1, 0, CB_P_NORM, 1, 0},        {1, 4, CB_P_LINEAR_W, 1, 0},
        {4, 0, CB_P_LINEAR_B, 1, 0}, {4, 1, CB_P_LINEAR_W, 1, 1},    {1, 0, CB_P_LINEAR_B, 1, 1}};
    add_tensor(m, "wte.weight", c->vocab, C, 0, -1, CB_P_EMBED, 1, 0);
    add_tensor(m, "wpe.weight", c->seq_len, C, 0, -1, CB_P_POS, 1, 0);
    for (int l = 0; l < c->n_layer; l++)
        for (int i = 0; i < NLAYER_TENSORS; i++) {
            char name[64];
            snprintf(name, sizeof name, "h.%d.%s", l, LAYER_NAMES[i]);
            add_tensor(m, name, spec[i].d0 * C, spec[i].d1 * C, spec[i].d1 != 0, l, spec[i].kind,
                       spec[i].parts, spec[i].parity);
        }
    add_tensor(m, "ln_f.weight", C, 0, 0, -2, CB_P_NORM, 1, 0);
    add_tensor(m, "ln_f.bias", C, 0, 0, -2, CB_P_NORM, 1, 0);
}

/* Carves n floats from the activation block; with base NULL only counts. */
static float *carve(float *base, size_t *off, size_t n) {
    float *p = base ? base + *off : NULL;
    *off += n;
    return p;
}

/* Local floats of an N x H activation of the given parity, and its rows. */
static size_t act(const cb_gpt *m, int H, int parity, int *rows) {
    int r, c;
    m->L->ops->act_shape(m->L, m->B * m->T, H, parity, &r, &c);
    if (rows) *rows = r;
    return (size_t)r * c;
}

/* Lays out (or, with base NULL, sizes) every activation of a (B,T) step. */
static size_t plan_activations(cb_gpt *m, float *base) {
    const cb_gpt_config *c = &m->c;
    int C = c->d_model, rows;
    size_t a0 = act(m, C, 0, &rows), q1 = act(m, 3 * C, 1, NULL), a1 = act(m, C, 1, NULL);
    size_t f1 = act(m, 4 * C, 1, NULL), off = 0;
    size_t att = m->L->ops->att_numel(m->L, m->B, m->T, c->n_head);
    m->encoded = carve(base, &off, a0);
    for (int l = 0; l < c->n_layer; l++) {
        gpt_layer_acts *a = &m->acts[l];
        a->ln1 = carve(base, &off, a0);
        a->ln1_mean = carve(base, &off, rows);
        a->ln1_rstd = carve(base, &off, rows);
        a->qkv = carve(base, &off, q1);
        a->att = carve(base, &off, att);
        a->atty = carve(base, &off, a1);
        a->res2 = carve(base, &off, a0);
        a->ln2 = carve(base, &off, a0);
        a->ln2_mean = carve(base, &off, rows);
        a->ln2_rstd = carve(base, &off, rows);
        a->fch = carve(base, &off, f1);
        a->fch_gelu = carve(base, &off, f1);
        a->res3 = carve(base, &off, a0);
    }
    m->lnf_out = carve(base, &off, a0);
    m->lnf_mean = carve(base, &off, rows);
    m->lnf_rstd = carve(base, &off, rows);
    m->logits = carve(base, &off, m->L->ops->logits_numel(m->L, m->B * m->T, c->vocab));
    m->d_res = carve(base, &off, a0);
    m->d_small = carve(base, &off, a0 > a1 ? a0 : a1);
    m->d_qkv = carve(base, &off, q1);
    m->d_big = carve(base, &off, f1);
    m->d_att = carve(base, &off, att);
    m->proj = carve(base, &off, a0);
    return off;
}

static float *at(float *block, const cb_tensor_info *t) { return block + t->offset; }

static void bind_linear(cb_linear *l, int in, int out, int parts, int parity, cb_gpt *m,
                        const cb_tensor_info *w) {
    *l = (cb_linear){.in = in, .out = out, .parts = parts, .parity = parity,
                     .w = at(m->params, w), .b = at(m->params, w + 1),
                     .dw = at(m->grads, w), .db = at(m->grads, w + 1)};
}

static void bind_norm(cb_norm *n, int C, cb_gpt *m, const cb_tensor_info *w) {
    *n = (cb_norm){.C = C, .parity = 0, .w = at(m->params, w), .b = at(m->params, w + 1),
                   .dw = at(m->grads, w), .db = at(m->grads, w + 1)};
}

static void bind_params(cb_gpt *m) {
    int C = m->c.d_model, L = m->c.n_layer;
    const cb_tensor_info *t = m->pt.t;
    m->embed = (cb_embed){.V = m->c.vocab, .C = C, .T = m->c.seq_len,
                          .wte = at(m->params, &t[0]), .wpe = at(m->params, &t[1]),
                          .dwte = at(m->grads, &t[0]), .dwpe = at(m->grads, &t[1])};
    for (int l = 0; l < L; l++) {
        const cb_tensor_info *b = &t[2 + l * NLAYER_TENSORS];
        gpt_block *k = &m->blocks[l];
        bind_norm(&k->ln1, C, m, &b[0]);
        bind_linear(&k->qkv, C, 3 * C, 3, 0, m, &b[2]);
        bind_linear(&k->proj, C, C, 1, 1, m, &b[4]);
        bind_norm(&k->ln2, C, m, &b[6]);
        bind_linear(&k->fc, C, 4 * C, 1, 0, m, &b[8]);
        bind_linear(&k->fcproj, 4 * C, C, 1, 1, m, &b[10]);
    }
    bind_norm(&m->lnf, C, m, &t[2 + L * NLAYER_TENSORS]);
}

void cb_gpt_free(cb_gpt *m) {
    if (!m) return;
    if (m->own_layout) cb_layout_free(m->L);
    cb_ptable_free(&m->pt);
    free(m->params);
    free(m->grads);
    free(m->actblock);
    free(m->acts);
    free(m->blocks);
    free(m->inp);
    free(m);
}

int gpt_create(const cb_gpt_config *c, int B, int T, cb_layout *L, cb_gpt **out, cb_err *e) {
    int rc = cb_gpt_config_check(c, e);
    if (!rc) rc = L->ops->check(L, B, T, c->d_model, c->n_head, c->vocab, e);
    if (rc) return rc;
    if (B < 1 || T < 1 || T > c->seq_len)
        return cb_fail(e, CB_EINPUT,
                       "sequence length %d exceeds the model's context %d; lower --seq-len or use "
                       "a model with a longer context",
                       T, c->seq_len);
    cb_gpt *m = calloc(1, sizeof *m);
    if (!m) return cb_fail(e, CB_ENOMEM, "out of memory allocating the model");
    m->c = *c;
    m->B = B;
    m->T = T;
    m->L = L;
    m->pt.L = L;
    m->acts = calloc(c->n_layer, sizeof *m->acts);
    m->blocks = calloc(c->n_layer, sizeof *m->blocks);
    m->inp = malloc(sizeof(int) * 2 * (size_t)B * T);
    if (!m->acts || !m->blocks || !m->inp) goto oom;
    m->targets = m->inp + (size_t)B * T;
    build_tensor_table(m);
    if (m->oom) goto oom;
    m->params = calloc(m->pt.nparams + 1, sizeof(float));
    m->grads = calloc(m->pt.nparams + 1, sizeof(float));
    size_t nact = plan_activations(m, NULL);
    m->actblock = calloc(nact, sizeof(float));
    if (!m->params || !m->grads || !m->actblock) goto oom;
    plan_activations(m, m->actblock);
    bind_params(m);
    *out = m;
    return CB_OK;
oom:
    cb_gpt_free(m);
    return cb_fail(e, CB_ENOMEM,
                   "out of memory for the model and activations of B=%d T=%d; lower --batch or "
                   "--seq-len",
                   B, T);
}

int cb_gpt_create(const cb_gpt_config *c, int B, int T, cb_gpt **out, cb_err *e) {
    cb_layout *L = cb_layout_serial();
    if (!L) return cb_fail(e, CB_ENOMEM, "out of memory");
    int rc = gpt_create(c, B, T, L, out, e);
    if (rc) cb_layout_free(L);
    else (*out)->own_layout = 1;
    return rc;
}

const cb_gpt_config *cb_gpt_get_config(const cb_gpt *m) { return &m->c; }
size_t cb_gpt_num_params(const cb_gpt *m) { return m->pt.nparams; }
int cb_gpt_num_tensors(const cb_gpt *m) { return m->pt.n; }
const cb_tensor_info *cb_gpt_tensor(const cb_gpt *m, int i) { return &m->pt.t[i]; }
float *cb_gpt_params(cb_gpt *m) { return m->params; }
float *cb_gpt_grads(cb_gpt *m) { return m->grads; }
const float *cb_gpt_probs(const cb_gpt *m) { return m->logits; }

void cb_gpt_set_grad_hook(cb_gpt *m, cb_grad_ready_fn fn, void *ctx) {
    m->hook = fn;
    m->hook_ctx = ctx;
}

/* GPT-2's initialisation of one full tensor, drawn in table order from one
 * stream on every rank, so every layout starts from the serial weights. */
typedef struct init_ctx {
    cb_rng r;
    float resid;
} init_ctx;

static void init_tensor(void *ctx, const cb_tensor_info *t, float *full, size_t n) {
    init_ctx *c = ctx;
    int is_ln = strstr(t->name, "ln_") != NULL, is_weight = strstr(t->name, ".weight") != NULL;
    float sd = strstr(t->name, "c_proj.weight") ? c->resid : 0.02f;
    for (size_t j = 0; j < n; j++) {
        if (is_ln) full[j] = is_weight ? 1.0f : 0.0f;
        else full[j] = is_weight ? cb_rng_normal(&c->r) * sd : 0.0f;
    }
}

void cb_gpt_init_random(cb_gpt *m, uint64_t seed) {
    init_ctx c = {.resid = 0.02f / sqrtf(2.0f * m->c.n_layer)};
    cb_rng_seed(&c.r, seed);
    if (cb_ptable_fill(&m->pt, m->params, init_tensor, &c)) abort();
}

double cb_gpt_flops_per_token(const cb_gpt_config *c, int T) {
    double C = c->d_model, L = c->n_layer;
    double n = (double)c->vocab * C + (double)c->seq_len * C + 2 * C +
               L * (12 * C * C + 13 * C);
    return 6.0 * n + 12.0 * L * C * T;
}

/* Local floats of an N x H activation of the given parity for the last forward. */
static size_t cur(const cb_gpt *m, int H, int parity) {
    int r, c;
    m->L->ops->act_shape(m->L, m->curB * m->curT, H, parity, &r, &c);
    return (size_t)r * c;
}

/* One block forward: x (B,T,C) -> a->res3 */
static void block_forward(cb_gpt *m, int l, const float *x, int B, int T) {
    cb_layout *L = m->L;
    const cb_layout_ops *o = L->ops;
    gpt_block *k = &m->blocks[l];
    gpt_layer_acts *a = &m->acts[l];
    int N = B * T, C = m->c.d_model;
    o->norm_forward(L, &k->ln1, x, a->ln1, a->ln1_mean, a->ln1_rstd, N);
    o->linear_forward(L, &k->qkv, a->ln1, a->qkv, N);
    o->attention_forward(L, a->qkv, a->atty, a->att, B, T, C, m->c.n_head);
    o->linear_forward(L, &k->proj, a->atty, m->proj, N);
    L->k->residual_forward(a->res2, x, m->proj, cur(m, C, 0));
    o->norm_forward(L, &k->ln2, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, N);
    o->linear_forward(L, &k->fc, a->ln2, a->fch, N);
    L->k->gelu_forward(a->fch_gelu, a->fch, cur(m, 4 * C, 1));
    o->linear_forward(L, &k->fcproj, a->fch_gelu, m->proj, N);
    L->k->residual_forward(a->res3, a->res2, m->proj, cur(m, C, 0));
}

float cb_gpt_forward(cb_gpt *m, const int *inp, const int *targets, int B, int T) {
    cb_layout *L = m->L;
    int N = B * T, Lyr = m->c.n_layer;
    m->curB = B;
    m->curT = T;
    memcpy(m->inp, inp, sizeof(int) * N);
    m->has_targets = targets != NULL;
    if (targets) memcpy(m->targets, targets, sizeof(int) * N);
    L->ops->embed_forward(L, &m->embed, m->inp, B, T, m->encoded);
    for (int l = 0; l < Lyr; l++) block_forward(m, l, l ? m->acts[l - 1].res3 : m->encoded, B, T);
    L->ops->norm_forward(L, &m->lnf, m->acts[Lyr - 1].res3, m->lnf_out, m->lnf_mean, m->lnf_rstd,
                         N);
    return L->ops->head_forward(L, &m->embed, m->lnf_out, targets ? m->targets : NULL, m->logits,
                                N);
}

void cb_gpt_zero_grad(cb_gpt *m) {
    size_t n = m->pt.nparams;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) m->grads[i] = 0.0f;
}

double gpt_grad_sumsq(const cb_gpt *m) { return cb_ptable_sumsq(&m->pt, m->grads); }

/* One block backward: m->d_res holds dL/d(res3) on entry and dL/dx on exit. */
static void block_backward(cb_gpt *m, int l, const float *x, int B, int T) {
    cb_layout *L = m->L;
    const cb_layout_ops *o = L->ops;
    gpt_block *k = &m->blocks[l];
    gpt_layer_acts *a = &m->acts[l];
    int N = B * T, C = m->c.d_model;
    o->linear_backward(L, &k->fcproj, a->fch_gelu, m->d_res, m->d_big, N);
    L->k->gelu_backward(m->d_big, a->fch, m->d_big, cur(m, 4 * C, 1));
    o->linear_backward(L, &k->fc, a->ln2, m->d_big, m->d_small, N);
    o->norm_backward(L, &k->ln2, a->res2, m->d_small, m->d_res, a->ln2_mean, a->ln2_rstd, N);
    o->linear_backward(L, &k->proj, a->atty, m->d_res, m->d_small, N);
    o->attention_backward(L, a->qkv, a->att, m->d_small, m->d_qkv, m->d_att, B, T, C,
                          m->c.n_head);
    o->linear_backward(L, &k->qkv, a->ln1, m->d_qkv, m->d_small, N);
    o->norm_backward(L, &k->ln1, x, m->d_small, m->d_res, a->ln1_mean, a->ln1_rstd, N);
}

static void ready(cb_gpt *m, int first, int last) {
    if (m->hook) m->hook(m->hook_ctx, first, last);
}

void cb_gpt_backward(cb_gpt *m, float dloss_scale) {
    cb_layout *L = m->L;
    int B = m->curB, T = m->curT, N = B * T, C = m->c.d_model, Lyr = m->c.n_layer;
    L->ops->head_backward(L, &m->embed, m->lnf_out, m->targets, m->logits, dloss_scale,
                          m->d_small, N);
    memset(m->d_res, 0, sizeof(float) * cur(m, C, 0));
    L->ops->norm_backward(L, &m->lnf, m->acts[Lyr - 1].res3, m->d_small, m->d_res, m->lnf_mean,
                          m->lnf_rstd, N);
    int lnf = 2 + Lyr * NLAYER_TENSORS;
    ready(m, lnf, lnf + 1);
    for (int l = Lyr - 1; l >= 0; l--) {
        block_backward(m, l, l ? m->acts[l - 1].res3 : m->encoded, B, T);
        ready(m, 2 + l * NLAYER_TENSORS, 1 + (l + 1) * NLAYER_TENSORS);
    }
    L->ops->embed_backward(L, &m->embed, m->inp, B, T, m->d_res);
    ready(m, 0, 1);
}
