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

static void add_tensor(cb_gpt *m, const char *name, int64_t d0, int64_t d1, int decay,
                       int layer) {
    cb_tensor_info *t = &m->tensors[m->ntensor++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->numel = (size_t)d0 * (d1 ? d1 : 1);
    t->offset = m->nparams;
    t->decay = decay;
    t->layer = layer;
    m->nparams += t->numel;
}

static void build_tensor_table(cb_gpt *m) {
    const cb_gpt_config *c = &m->c;
    int64_t C = c->d_model;
    const int64_t shapes[NLAYER_TENSORS][2] = {{C, 0},     {C, 0},     {C, 3 * C}, {3 * C, 0},
                                               {C, C},     {C, 0},     {C, 0},     {C, 0},
                                               {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0}};
    add_tensor(m, "wte.weight", c->vocab, C, 0, -1);
    add_tensor(m, "wpe.weight", c->seq_len, C, 0, -1);
    for (int l = 0; l < c->n_layer; l++)
        for (int i = 0; i < NLAYER_TENSORS; i++) {
            char name[64];
            snprintf(name, sizeof name, "h.%d.%s", l, LAYER_NAMES[i]);
            add_tensor(m, name, shapes[i][0], shapes[i][1], shapes[i][1] != 0, l);
        }
    add_tensor(m, "ln_f.weight", C, 0, 0, -2);
    add_tensor(m, "ln_f.bias", C, 0, 0, -2);
}

/* Carves n floats from the activation block; with base NULL only counts. */
static float *carve(float *base, size_t *off, size_t n) {
    float *p = base ? base + *off : NULL;
    *off += n;
    return p;
}

/* Lays out (or, with base NULL, sizes) every activation of a (B,T) step. */
static size_t plan_activations(cb_gpt *m, float *base) {
    const cb_gpt_config *c = &m->c;
    size_t BT = (size_t)m->B * m->T, C = c->d_model, off = 0;
    size_t att = (size_t)m->B * c->n_head * m->T * m->T;
    m->encoded = carve(base, &off, BT * C);
    for (int l = 0; l < c->n_layer; l++) {
        gpt_layer_acts *a = &m->acts[l];
        a->ln1 = carve(base, &off, BT * C);
        a->ln1_mean = carve(base, &off, BT);
        a->ln1_rstd = carve(base, &off, BT);
        a->qkv = carve(base, &off, BT * 3 * C);
        a->att = carve(base, &off, att);
        a->atty = carve(base, &off, BT * C);
        a->res2 = carve(base, &off, BT * C);
        a->ln2 = carve(base, &off, BT * C);
        a->ln2_mean = carve(base, &off, BT);
        a->ln2_rstd = carve(base, &off, BT);
        a->fch = carve(base, &off, BT * 4 * C);
        a->fch_gelu = carve(base, &off, BT * 4 * C);
        a->res3 = carve(base, &off, BT * C);
    }
    m->lnf = carve(base, &off, BT * C);
    m->lnf_mean = carve(base, &off, BT);
    m->lnf_rstd = carve(base, &off, BT);
    m->logits = carve(base, &off, BT * c->vocab);
    m->losses = carve(base, &off, BT);
    m->d_res = carve(base, &off, BT * C);
    m->d_small = carve(base, &off, BT * C);
    m->d_qkv = carve(base, &off, BT * 3 * C);
    m->d_big = carve(base, &off, BT * 4 * C);
    m->d_att = carve(base, &off, att);
    m->proj = carve(base, &off, BT * C);
    return off;
}

static void bind_layer(gpt_layer_params *lp, float *block, const cb_tensor_info *t) {
    float **slot[NLAYER_TENSORS] = {&lp->ln1w,  &lp->ln1b,  &lp->qkvw, &lp->qkvb,
                                    &lp->projw, &lp->projb, &lp->ln2w, &lp->ln2b,
                                    &lp->fcw,   &lp->fcb,   &lp->fcprojw, &lp->fcprojb};
    for (int i = 0; i < NLAYER_TENSORS; i++) *slot[i] = block + t[i].offset;
}

static void bind_params(gpt_params *p, float *block, const cb_gpt *m) {
    int L = m->c.n_layer;
    p->wte = block + m->tensors[0].offset;
    p->wpe = block + m->tensors[1].offset;
    for (int l = 0; l < L; l++) bind_layer(&p->layer[l], block, &m->tensors[2 + l * NLAYER_TENSORS]);
    p->lnfw = block + m->tensors[2 + L * NLAYER_TENSORS].offset;
    p->lnfb = block + m->tensors[3 + L * NLAYER_TENSORS].offset;
}

void cb_gpt_free(cb_gpt *m) {
    if (!m) return;
    free(m->tensors);
    free(m->params);
    free(m->grads);
    free(m->actblock);
    free(m->acts);
    free(m->p.layer);
    free(m->g.layer);
    free(m->inp);
    free(m);
}

int cb_gpt_create(const cb_gpt_config *c, int B, int T, cb_gpt **out, cb_err *e) {
    int rc = cb_gpt_config_check(c, e);
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
    m->k = cb_kernels_cpu();
    m->tensors = calloc(4 + (size_t)c->n_layer * NLAYER_TENSORS, sizeof *m->tensors);
    m->acts = calloc(c->n_layer, sizeof *m->acts);
    m->p.layer = calloc(c->n_layer, sizeof *m->p.layer);
    m->g.layer = calloc(c->n_layer, sizeof *m->g.layer);
    m->inp = malloc(sizeof(int) * 2 * (size_t)B * T);
    if (!m->tensors || !m->acts || !m->p.layer || !m->g.layer || !m->inp) goto oom;
    m->targets = m->inp + (size_t)B * T;
    build_tensor_table(m);
    m->params = calloc(m->nparams, sizeof(float));
    m->grads = calloc(m->nparams, sizeof(float));
    size_t nact = plan_activations(m, NULL);
    m->actblock = calloc(nact, sizeof(float));
    if (!m->params || !m->grads || !m->actblock) goto oom;
    plan_activations(m, m->actblock);
    bind_params(&m->p, m->params, m);
    bind_params(&m->g, m->grads, m);
    *out = m;
    return CB_OK;
oom:
    cb_gpt_free(m);
    return cb_fail(e, CB_ENOMEM,
                   "out of memory for the model and activations of B=%d T=%d; lower --batch or "
                   "--seq-len",
                   B, T);
}

const cb_gpt_config *cb_gpt_get_config(const cb_gpt *m) { return &m->c; }
size_t cb_gpt_num_params(const cb_gpt *m) { return m->nparams; }
int cb_gpt_num_tensors(const cb_gpt *m) { return m->ntensor; }
const cb_tensor_info *cb_gpt_tensor(const cb_gpt *m, int i) { return &m->tensors[i]; }
float *cb_gpt_params(cb_gpt *m) { return m->params; }
float *cb_gpt_grads(cb_gpt *m) { return m->grads; }
const float *cb_gpt_probs(const cb_gpt *m) { return m->logits; }

void cb_gpt_set_grad_hook(cb_gpt *m, cb_grad_ready_fn fn, void *ctx) {
    m->hook = fn;
    m->hook_ctx = ctx;
}

void cb_gpt_init_random(cb_gpt *m, uint64_t seed) {
    cb_rng r;
    cb_rng_seed(&r, seed);
    float resid = 0.02f / sqrtf(2.0f * m->c.n_layer);
    for (int i = 0; i < m->ntensor; i++) {
        const cb_tensor_info *t = &m->tensors[i];
        float *p = m->params + t->offset;
        int is_ln = strstr(t->name, "ln_") != NULL, is_weight = strstr(t->name, ".weight") != NULL;
        int is_resid = strstr(t->name, "c_proj.weight") != NULL;
        for (size_t j = 0; j < t->numel; j++) {
            if (is_ln) p[j] = is_weight ? 1.0f : 0.0f;
            else if (is_weight) p[j] = cb_rng_normal(&r) * (is_resid ? resid : 0.02f);
            else p[j] = 0.0f;
        }
    }
}

double cb_gpt_flops_per_token(const cb_gpt_config *c, int T) {
    double C = c->d_model, L = c->n_layer;
    double n = (double)c->vocab * C + (double)c->seq_len * C + 2 * C +
               L * (12 * C * C + 13 * C);
    return 6.0 * n + 12.0 * L * C * T;
}

/* One block forward: x (B,T,C) -> a->res3 */
static void block_forward(cb_gpt *m, int l, const float *x, int B, int T) {
    const cb_kernels *k = m->k;
    const gpt_layer_params *p = &m->p.layer[l];
    gpt_layer_acts *a = &m->acts[l];
    int N = B * T, C = m->c.d_model;
    k->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C);
    k->matmul_forward(a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C);
    k->attention_forward(a->atty, a->att, a->qkv, B, T, C, m->c.n_head);
    k->matmul_forward(m->proj, a->atty, p->projw, p->projb, N, C, C);
    k->residual_forward(a->res2, x, m->proj, (size_t)N * C);
    k->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C);
    k->matmul_forward(a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C);
    k->gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C);
    k->matmul_forward(m->proj, a->fch_gelu, p->fcprojw, p->fcprojb, N, 4 * C, C);
    k->residual_forward(a->res3, a->res2, m->proj, (size_t)N * C);
}

float cb_gpt_forward(cb_gpt *m, const int *inp, const int *targets, int B, int T) {
    const cb_kernels *k = m->k;
    int N = B * T, C = m->c.d_model, V = m->c.vocab, L = m->c.n_layer;
    m->curB = B;
    m->curT = T;
    memcpy(m->inp, inp, sizeof(int) * N);
    m->has_targets = targets != NULL;
    if (targets) memcpy(m->targets, targets, sizeof(int) * N);
    k->encoder_forward(m->encoded, inp, m->p.wte, m->p.wpe, B, T, C);
    for (int l = 0; l < L; l++) block_forward(m, l, l ? m->acts[l - 1].res3 : m->encoded, B, T);
    k->layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, m->acts[L - 1].res3, m->p.lnfw,
                         m->p.lnfb, N, C);
    k->head_forward(m->logits, m->lnf, m->p.wte, N, C, V);
    k->crossentropy_forward(m->losses, m->logits, targets ? m->targets : NULL, N, V);
    if (!targets) return 0.0f;
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += m->losses[i];
    return (float)(sum / N);
}

void cb_gpt_zero_grad(cb_gpt *m) {
    size_t n = m->nparams;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) m->grads[i] = 0.0f;
}

/* One block backward: m->d_res holds dL/d(res3) on entry and dL/dx on exit. */
static void block_backward(cb_gpt *m, int l, const float *x, int B, int T) {
    const cb_kernels *k = m->k;
    const gpt_layer_params *p = &m->p.layer[l];
    gpt_layer_params *g = &m->g.layer[l];
    gpt_layer_acts *a = &m->acts[l];
    int N = B * T, C = m->c.d_model;
    k->matmul_backward(m->d_big, g->fcprojw, g->fcprojb, m->d_res, a->fch_gelu, p->fcprojw, N,
                       4 * C, C);
    k->gelu_backward(m->d_big, a->fch, m->d_big, (size_t)N * 4 * C);
    k->matmul_backward(m->d_small, g->fcw, g->fcb, m->d_big, a->ln2, p->fcw, N, C, 4 * C);
    k->layernorm_backward(m->d_res, g->ln2w, g->ln2b, m->d_small, a->res2, p->ln2w, a->ln2_mean,
                          a->ln2_rstd, N, C);
    k->matmul_backward(m->d_small, g->projw, g->projb, m->d_res, a->atty, p->projw, N, C, C);
    k->attention_backward(m->d_qkv, m->d_att, m->d_small, a->qkv, a->att, B, T, C, m->c.n_head);
    k->matmul_backward(m->d_small, g->qkvw, g->qkvb, m->d_qkv, a->ln1, p->qkvw, N, C, 3 * C);
    k->layernorm_backward(m->d_res, g->ln1w, g->ln1b, m->d_small, x, p->ln1w, a->ln1_mean,
                          a->ln1_rstd, N, C);
}

static void ready(cb_gpt *m, int first, int last) {
    if (m->hook) m->hook(m->hook_ctx, first, last);
}

void cb_gpt_backward(cb_gpt *m, float dloss_scale) {
    const cb_kernels *k = m->k;
    int B = m->curB, T = m->curT, N = B * T, C = m->c.d_model, V = m->c.vocab, L = m->c.n_layer;
    k->crossentropy_backward(m->logits, m->targets, dloss_scale / N, N, V);
    k->head_backward(m->d_small, m->g.wte, m->logits, m->lnf, m->p.wte, N, C, V);
    memset(m->d_res, 0, sizeof(float) * N * C);
    k->layernorm_backward(m->d_res, m->g.lnfw, m->g.lnfb, m->d_small, m->acts[L - 1].res3,
                          m->p.lnfw, m->lnf_mean, m->lnf_rstd, N, C);
    int lnf = 2 + L * NLAYER_TENSORS;
    ready(m, lnf, lnf + 1);
    for (int l = L - 1; l >= 0; l--) {
        block_backward(m, l, l ? m->acts[l - 1].res3 : m->encoded, B, T);
        ready(m, 2 + l * NLAYER_TENSORS, 1 + (l + 1) * NLAYER_TENSORS);
    }
    k->encoder_backward(m->g.wte, m->g.wpe, m->d_res, m->inp, B, T, C);
    ready(m, 0, 1);
}
