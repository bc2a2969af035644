/* GPT-2: token + position embedding, L pre-LayerNorm blocks (causal
 * attention, GELU MLP), final LayerNorm, LM head tied to wte, on any
 * tensor-parallel layout, whole or as one pipeline stage (gpt_internal.h).
 * Parameters live in one block ordered layer by layer (wte, wpe, h.0 ...
 * h.{L-1}, ln_f), so the gradients that backward finishes first form a
 * contiguous tail: what fusion buckets want. Activations are planned once
 * for the largest micro-batch (B,T) times the slots in flight. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"
#include "kernels/kernels.h"
#include "model/gpt_internal.h"

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

/* shape (in units of C), kind, parts, parity of the activation it acts on */
static const struct {
    int64_t d0, d1;
    cb_param_kind kind;
    int parts, parity;
} SPEC[NLAYER_TENSORS] = {
    {1, 0, CB_P_NORM, 1, 0},     {1, 0, CB_P_NORM, 1, 0},     {1, 3, CB_P_LINEAR_W, 3, 0},
    {3, 0, CB_P_LINEAR_B, 3, 0}, {1, 1, CB_P_LINEAR_W, 1, 1}, {1, 0, CB_P_LINEAR_B, 1, 1},
    {1, 0, CB_P_NORM, 1, 0},     {1, 0, CB_P_NORM, 1, 0},     {1, 4, CB_P_LINEAR_W, 1, 0},
    {4, 0, CB_P_LINEAR_B, 1, 0}, {4, 1, CB_P_LINEAR_W, 1, 1}, {1, 0, CB_P_LINEAR_B, 1, 1}};

static void build_tensor_table(cb_gpt *m) {
    const cb_gpt_config *c = &m->c;
    int64_t C = c->d_model;
    if (m->has_embed || m->has_head) add_tensor(m, "wte.weight", c->vocab, C, 0, -1, CB_P_EMBED, 1, 0);
    if (m->has_embed) add_tensor(m, "wpe.weight", c->seq_len, C, 0, -1, CB_P_POS, 1, 0);
    for (int b = 0; b < m->nblk; b++)
        for (int i = 0; i < NLAYER_TENSORS; i++) {
            char name[64];
            int l = m->blk0 + b;
            snprintf(name, sizeof name, "h.%d.%s", l, LAYER_NAMES[i]);
            add_tensor(m, name, SPEC[i].d0 * C, SPEC[i].d1 * C, SPEC[i].d1 != 0, l, SPEC[i].kind,
                       SPEC[i].parts, SPEC[i].parity);
        }
    if (m->has_head) {
        add_tensor(m, "ln_f.weight", C, 0, 0, -2, CB_P_NORM, 1, 0);
        add_tensor(m, "ln_f.bias", C, 0, 0, -2, CB_P_NORM, 1, 0);
    }
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

/* sel: under selective recompute, the shared att and fch_gelu; else NULL. */
static void plan_block(cb_gpt *m, gpt_layer_acts *a, const gpt_layer_acts *sel, float *base,
                       size_t *off) {
    int C = m->c.d_model, rows;
    size_t a0 = act(m, C, 0, &rows), q1 = act(m, 3 * C, 1, NULL), a1 = act(m, C, 1, NULL);
    size_t f1 = act(m, 4 * C, 1, NULL),
           att = m->L->ops->att_numel(m->L, m->B, m->T, m->T, m->c.n_head);
    a->ln1 = carve(base, off, a0);
    a->ln1_mean = carve(base, off, rows);
    a->ln1_rstd = carve(base, off, rows);
    a->qkv = carve(base, off, q1);
    a->att = sel ? sel->att : carve(base, off, att);
    a->atty = carve(base, off, a1);
    a->res2 = carve(base, off, a0);
    a->ln2 = carve(base, off, a0);
    a->ln2_mean = carve(base, off, rows);
    a->ln2_rstd = carve(base, off, rows);
    a->fch = carve(base, off, f1);
    a->fch_gelu = sel ? sel->fch_gelu : carve(base, off, f1);
    a->res3 = carve(base, off, a0);
}

/* Block recompute. Rerun blocks: [0, nrc) (uniform: all). A rerun block
 * writes one of the activation sets every slot shares: the block method's
 * single set, or set b % k of a uniform group of k. Its input is kept
 * apart when the set holding it will be overwritten before its backward:
 * under the block method the inputs of blocks 1..nrc (block nrc reads the
 * shared set's output), under uniform those of groups' first blocks;
 * block 0 reads x_in, which stays the slot's until its backward. */
static int rerun(const cb_gpt *m, int b) { return b < m->nrc; }
static int shared_set(const cb_gpt *m, int b) { return m->rc_group ? b % m->rc_group : 0; }
static int keeps_input(const cb_gpt *m, int b) {
    if (b == 0 || b >= m->nblk) return 0;
    return m->rc_group ? b % m->rc_group == 0 : b <= m->nrc;
}
/* The first and last block of b's recompute group (block method: b). */
static int group_first(const cb_gpt *m, int b) { return m->rc_group ? b - b % m->rc_group : b; }
static int group_last(const cb_gpt *m, int b) {
    int l = m->rc_group ? group_first(m, b) + m->rc_group - 1 : b;
    return l < m->nblk ? l : m->nblk - 1;
}
static int nshared(const cb_gpt *m) {
    if (!m->nrc) return 0;
    return m->rc_group ? (m->rc_group < m->nblk ? m->rc_group : m->nblk) : 1;
}

/* Rerun blocks of every slot share the sets of slot 0 (a block's backward
 * follows its group's recomputed forward, so only the kept inputs are per
 * slot); the other blocks keep their activations per slot. */
static void plan_slot(cb_gpt *m, gpt_slot *s, int first, const gpt_layer_acts *sel, float *base,
                      size_t *off) {
    int C = m->c.d_model, rows;
    size_t a0 = act(m, C, 0, &rows);
    s->x_in = carve(base, off, a0);
    for (int b = m->nrc; b < m->nblk; b++) plan_block(m, &s->acts[b], sel, base, off);
    for (int j = 0; first && j < nshared(m); j++) plan_block(m, &s->acts[j], sel, base, off);
    for (int b = 0; first && b < m->nrc; b++) s->acts[b] = s->acts[shared_set(m, b)];
    for (int b = 0; b < m->nblk; b++)
        if (keeps_input(m, b)) s->blk_in[b] = carve(base, off, a0);
    if (!m->has_head) s->x_out = carve(base, off, a0);
    if (!m->has_head) return;
    s->lnf_out = carve(base, off, a0);
    s->lnf_mean = carve(base, off, rows);
    s->lnf_rstd = carve(base, off, rows);
    s->logits = carve(base, off, m->L->ops->logits_numel(m->L, m->B * m->T, m->c.vocab));
}

/* Lays out (or, with base NULL, sizes) the activations of every slot and
 * the backward scratch. */
static size_t plan_activations(cb_gpt *m, float *base) {
    int C = m->c.d_model;
    size_t a0 = act(m, C, 0, NULL), q1 = act(m, 3 * C, 1, NULL), a1 = act(m, C, 1, NULL);
    size_t f1 = act(m, 4 * C, 1, NULL), off = 0;
    size_t att = m->L->ops->att_numel(m->L, m->B, m->T, m->T, m->c.n_head);
    gpt_layer_acts shared = {0}, *sel = NULL;
    if (m->recompute == GPT_RECOMPUTE_SELECTIVE && m->nblk) {
        sel = &shared;
        sel->att = carve(base, &off, att);
        sel->fch_gelu = carve(base, &off, f1);
    }
    for (int i = 0; i < m->nslots; i++) {
        if (m->nrc && i) memcpy(m->slots[i].acts, m->slots[0].acts, sizeof(gpt_layer_acts) * m->nrc);
        plan_slot(m, &m->slots[i], i == 0, sel, base, &off);
    }
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
    int C = m->c.d_model, i = 0;
    const cb_tensor_info *t = m->pt.t;
    m->embed = (cb_embed){.V = m->c.vocab, .C = C, .T = m->c.seq_len};
    if (m->has_embed || m->has_head) {
        m->embed.wte = at(m->params, &t[i]);
        m->embed.dwte = at(m->grads, &t[i++]);
    }
    if (m->has_embed) {
        m->embed.wpe = at(m->params, &t[i]);
        m->embed.dwpe = at(m->grads, &t[i++]);
    }
    for (int b = 0; b < m->nblk; b++, i += NLAYER_TENSORS) {
        gpt_block *k = &m->blocks[b];
        bind_norm(&k->ln1, C, m, &t[i]);
        bind_linear(&k->qkv, C, 3 * C, 3, 0, m, &t[i + 2]);
        bind_linear(&k->proj, C, C, 1, 1, m, &t[i + 4]);
        bind_norm(&k->ln2, C, m, &t[i + 6]);
        bind_linear(&k->fc, C, 4 * C, 1, 0, m, &t[i + 8]);
        bind_linear(&k->fcproj, 4 * C, C, 1, 1, m, &t[i + 10]);
    }
    if (m->has_head) bind_norm(&m->lnf, C, m, &t[i]);
}

void cb_gpt_free(cb_gpt *m) {
    if (!m) return;
    if (m->own_layout) cb_layout_free(m->L);
    cb_ptable_free(&m->pt);
    cb_kernels_params_freed(m->params);
    free(m->params);
    free(m->grads);
    free(m->actblock);
    for (int i = 0; m->slots && i < m->nslots; i++) {
        free(m->slots[i].acts);
        free(m->slots[i].blk_in);
        free(m->slots[i].inp);
    }
    free(m->slots);
    free(m->blocks);
    free(m);
}

static int alloc_slots(cb_gpt *m) {
    m->slots = calloc(m->nslots, sizeof *m->slots);
    if (!m->slots) return 0;
    for (int i = 0; i < m->nslots; i++) {
        gpt_slot *s = &m->slots[i];
        s->acts = calloc(m->nblk + 1, sizeof *s->acts);
        s->blk_in = calloc(m->nblk + 1, sizeof *s->blk_in);
        s->inp = malloc(sizeof(int) * 2 * (size_t)m->B * m->T);
        if (!s->acts || !s->blk_in || !s->inp) return 0;
        s->targets = s->inp + (size_t)m->B * m->T;
    }
    return 1;
}

static int parse_mode(const char *s, int *out, cb_err *e) {
    static const char *const NAMES[] = {"none", "block", "selective"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s ? s : "none", NAMES[i])) {
            *out = i;
            return CB_OK;
        }
    return cb_fail(e, CB_EINPUT, "--recompute '%s' is unknown; use none, block or selective", s);
}

int gpt_recompute_parse(const char *mode, const char *method, int layers, gpt_rc *rc, cb_err *e) {
    *rc = (gpt_rc){0};
    int r = parse_mode(mode, &rc->mode, e), block = rc->mode == GPT_RECOMPUTE_BLOCK;
    if (r) return r;
    if (method && strcmp(method, "block") && strcmp(method, "uniform"))
        return cb_fail(e, CB_EINPUT, "--recompute-method '%s' is unknown; use uniform or block",
                       method);
    if (method && !block)
        return cb_fail(e, CB_EINPUT, "--recompute-method needs --recompute block; add it or drop "
                                     "--recompute-method");
    if (layers < 0)
        return cb_fail(e, CB_EINPUT, "--recompute-layers %d must be >= 0 (0: every block)", layers);
    if (layers && !block)
        return cb_fail(e, CB_EINPUT, "--recompute-layers needs --recompute block; add it or drop "
                                     "--recompute-layers");
    rc->uniform = method && !strcmp(method, "uniform");
    rc->layers = rc->uniform && layers == 0 ? 1 : layers;
    return CB_OK;
}

/* The recompute fields for the blocks m holds. */
static void set_rc(cb_gpt *m, const gpt_rc *rc) {
    int k = rc->layers, block = rc->mode == GPT_RECOMPUTE_BLOCK;
    m->recompute = rc->mode;
    m->rc_group = block && rc->uniform ? k : 0;
    m->nrc = !block ? 0 : rc->uniform || k == 0 || k > m->nblk ? m->nblk : k;
}

static int set_stage(cb_gpt *m, const gpt_stage_opts *st, cb_err *e) {
    int nmod = m->c.n_layer + 2;
    gpt_stage_opts whole = {0, nmod, 1, {0}};
    if (!st) st = &whole;
    const gpt_rc *rc = &st->rc;
    if (st->mod0 < 0 || st->mod1 > nmod || st->mod0 >= st->mod1 || st->nslots < 1 ||
        rc->mode < GPT_RECOMPUTE_NONE || rc->mode > GPT_RECOMPUTE_SELECTIVE || rc->layers < 0 ||
        (rc->uniform && rc->layers < 1))
        return cb_fail(e, CB_EINTERNAL, "bad stage modules [%d, %d) of %d, recompute %d/%d/%d",
                       st->mod0, st->mod1, nmod, rc->mode, rc->layers, rc->uniform);
    m->mod0 = st->mod0;
    m->mod1 = st->mod1;
    m->nslots = st->nslots;
    m->has_embed = st->mod0 == 0;
    m->has_head = st->mod1 == nmod;
    m->blk0 = st->mod0 > 0 ? st->mod0 - 1 : 0;
    int blk1 = st->mod1 - 1 < m->c.n_layer ? st->mod1 - 1 : m->c.n_layer;
    m->nblk = blk1 - m->blk0;
    set_rc(m, rc);
    return CB_OK;
}

size_t gpt_act_floats_with(const cb_gpt *m, const gpt_rc *rc) {
    cb_gpt t = *m; /* planning writes only t's slot tables: give it its own */
    set_rc(&t, rc);
    t.slots = calloc((size_t)t.nslots, sizeof *t.slots);
    size_t n = t.slots != NULL;
    for (int i = 0; n && i < t.nslots; i++) {
        t.slots[i].acts = calloc((size_t)t.nblk + 1, sizeof(gpt_layer_acts));
        t.slots[i].blk_in = calloc((size_t)t.nblk + 1, sizeof(float *));
        n = t.slots[i].acts && t.slots[i].blk_in;
    }
    if (n) n = plan_activations(&t, NULL);
    for (int i = 0; t.slots && i < t.nslots; i++) {
        free(t.slots[i].acts);
        free(t.slots[i].blk_in);
    }
    free(t.slots);
    return n;
}

double gpt_module_flops(const cb_gpt_config *c, double N, int T, int kind) {
    double C = c->d_model, V = c->vocab;
    if (kind == GPT_MOD_EMBED) return 3 * N * C;
    if (kind == GPT_MOD_BLOCK) return 72 * N * C * C + 12 * N * T * C;
    return 6 * N * C * V + 24 * N * C;
}

double gpt_stage_flops(const cb_gpt *m) {
    double N = (double)m->B * m->T;
    return m->has_embed * gpt_module_flops(&m->c, N, m->T, GPT_MOD_EMBED) +
           m->nblk * gpt_module_flops(&m->c, N, m->T, GPT_MOD_BLOCK) +
           m->has_head * gpt_module_flops(&m->c, N, m->T, GPT_MOD_HEAD);
}

double gpt_recompute_flops(const cb_gpt *m) {
    double N = (double)m->B * m->T, C = m->c.d_model;
    if (m->recompute == GPT_RECOMPUTE_SELECTIVE) return m->nblk * 4 * N * m->T * C;
    return m->nrc * gpt_module_flops(&m->c, N, m->T, GPT_MOD_BLOCK) / 3;
}

int gpt_create(const cb_gpt_config *c, int B, int T, cb_layout *L, const gpt_stage_opts *stage,
               cb_gpt **out, cb_err *e) {
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
    rc = set_stage(m, stage, e);
    if (rc) {
        free(m);
        return rc;
    }
    m->blocks = calloc(m->nblk + 1, sizeof *m->blocks);
    if (!m->blocks || !alloc_slots(m)) goto oom;
    build_tensor_table(m);
    if (m->oom) goto oom;
    m->params = calloc(m->pt.nparams + 1, sizeof(float));
    m->grads = calloc(m->pt.nparams + 1, sizeof(float));
    m->act_floats = plan_activations(m, NULL);
    m->actblock = calloc(m->act_floats, sizeof(float));
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

int gpt_create_serial(const cb_gpt_config *c, int B, int T, const gpt_stage_opts *stage,
                      cb_gpt **out, cb_err *e) {
    cb_layout *L = cb_layout_serial();
    if (!L) return cb_fail(e, CB_ENOMEM, "out of memory");
    int rc = gpt_create(c, B, T, L, stage, out, e);
    if (rc) cb_layout_free(L);
    else (*out)->own_layout = 1;
    return rc;
}

int cb_gpt_create(const cb_gpt_config *c, int B, int T, cb_gpt **out, cb_err *e) {
    return gpt_create_serial(c, B, T, NULL, out, e);
}

const cb_gpt_config *cb_gpt_get_config(const cb_gpt *m) { return &m->c; }
size_t cb_gpt_num_params(const cb_gpt *m) { return m->pt.nparams; }
int cb_gpt_num_tensors(const cb_gpt *m) { return m->pt.n; }
const cb_tensor_info *cb_gpt_tensor(const cb_gpt *m, int i) { return &m->pt.t[i]; }
float *cb_gpt_params(cb_gpt *m) { return m->params; }
float *cb_gpt_grads(cb_gpt *m) { return m->grads; }
const float *cb_gpt_probs(const cb_gpt *m) { return m->slots[0].logits; }

void cb_gpt_set_grad_hook(cb_gpt *m, cb_grad_ready_fn fn, void *ctx) {
    m->hook = fn;
    m->hook_ctx = ctx;
}

/* GPT-2's initialisation: weights N(0, 0.02), residual projections
 * (c_proj) N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1. Each rank
 * draws only its shards, element by element from the counter-based
 * generator (cb_ptable_init), so every layout and pipeline stage holds the
 * serial model's values without materialising a full tensor. */
void cb_gpt_init_random(cb_gpt *m, uint64_t seed) {
    float resid = 0.02f / sqrtf(2.0f * m->c.n_layer);
    for (int i = 0; i < m->pt.n; i++) {
        const char *name = m->pt.t[i].name;
        int ln = strstr(name, "ln_") != NULL, weight = strstr(name, ".weight") != NULL;
        int init = !weight ? CB_INIT_ZERO : ln ? CB_INIT_ONE : CB_INIT_NORMAL;
        float sd = strstr(name, "c_proj.weight") ? resid : 0.02f;
        cb_ptable_init(&m->pt, m->params, i, init, sd, seed);
    }
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

size_t gpt_act_floats(const cb_gpt *m) { return cur(m, m->c.d_model, 0); }

/* One block forward: x -> a->res3 */
static void block_forward(cb_gpt *m, int b, gpt_layer_acts *a, const float *x, int B, int T) {
    cb_layout *L = m->L;
    const cb_layout_ops *o = L->ops;
    gpt_block *k = &m->blocks[b];
    int N = B * T, C = m->c.d_model;
    o->norm_forward(L, &k->ln1, x, a->ln1, a->ln1_mean, a->ln1_rstd, N);
    o->linear_forward(L, &k->qkv, a->ln1, a->qkv, N);
    cb_attn at = cb_attn_self(B, T, C, m->c.n_head, 1, NULL);
    o->attention_forward(L, &at, a->qkv, a->qkv, a->atty, a->att);
    o->linear_forward(L, &k->proj, a->atty, m->proj, N);
    L->k->residual_forward(L->k, a->res2, x, m->proj, cur(m, C, 0));
    o->norm_forward(L, &k->ln2, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, N);
    o->linear_forward(L, &k->fc, a->ln2, a->fch, N);
    L->k->gelu_forward(L->k, a->fch_gelu, a->fch, cur(m, 4 * C, 1));
    o->linear_forward(L, &k->fcproj, a->fch_gelu, m->proj, N);
    L->k->residual_forward(L->k, a->res3, a->res2, m->proj, cur(m, C, 0));
}

float *gpt_stage_input(cb_gpt *m, int slot) { return m->slots[slot].x_in; }

const float *gpt_stage_output(const cb_gpt *m, int slot) { return m->slots[slot].x_out; }

const float *gpt_stage_dinput(const cb_gpt *m) { return m->d_res; }

/* The input of local block b in slot s (kept per slot under block recompute). */
static const float *block_input(cb_gpt *m, gpt_slot *s, int b) {
    if (keeps_input(m, b)) return s->blk_in[b];
    return b ? s->acts[b - 1].res3 : s->x_in;
}

float gpt_stage_forward(cb_gpt *m, int slot, const int *ids, const int *targets, int B, int T) {
    cb_layout *L = m->L;
    gpt_slot *s = &m->slots[slot];
    int N = B * T, C = m->c.d_model;
    m->curB = s->B = B;
    m->curT = s->T = T;
    if (ids) memcpy(s->inp, ids, sizeof(int) * N);
    if (targets) memcpy(s->targets, targets, sizeof(int) * N);
    if (m->has_embed) L->ops->embed_forward(L, &m->embed, s->inp, B, T, s->x_in);
    const float *x = s->x_in;
    for (int b = 0; b < m->nblk; b++) {
        if (keeps_input(m, b)) memcpy(s->blk_in[b], x, sizeof(float) * cur(m, C, 0));
        block_forward(m, b, &s->acts[b], block_input(m, s, b), B, T);
        x = s->acts[b].res3;
    }
    if (!m->has_head) {
        memcpy(s->x_out, x, sizeof(float) * cur(m, C, 0));
        return 0.0f;
    }
    L->ops->norm_forward(L, &m->lnf, x, s->lnf_out, s->lnf_mean, s->lnf_rstd, N);
    return L->ops->head_forward(L, &m->embed, s->lnf_out, targets ? s->targets : NULL, s->logits,
                                N);
}

float cb_gpt_forward(cb_gpt *m, const int *inp, const int *targets, int B, int T) {
    return gpt_stage_forward(m, 0, inp, targets, B, T);
}

void cb_gpt_zero_grad(cb_gpt *m) {
    size_t n = m->pt.nparams;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) m->grads[i] = 0.0f;
}

double gpt_grad_sumsq(const cb_gpt *m) { return cb_ptable_sumsq(&m->pt, m->grads); }

/* A hook call with first > last: no tensor is new, but communication in
 * flight gets a chance to progress between two operators. */
static void progress(cb_gpt *m) {
    if (m->hook) m->hook(m->hook_ctx, 1, 0);
}

/* One block backward: m->d_res holds dL/d(res3) on entry and dL/dx on exit.
 * Under selective recompute fch_gelu and att are recomputed just before
 * their use (every tensor rank at the same point, as in forward); the
 * attention output then goes to d_big, free by then, so the kept atty is
 * not written. The shared fch_gelu held another micro-batch's values since
 * this one's forward: the layout must not reuse what it kept of it. */
static void block_backward(cb_gpt *m, int b, gpt_layer_acts *a, const float *x, int B, int T) {
    cb_layout *L = m->L;
    const cb_layout_ops *o = L->ops;
    gpt_block *k = &m->blocks[b];
    int N = B * T, C = m->c.d_model, sel = m->recompute == GPT_RECOMPUTE_SELECTIVE;
    if (sel) {
        L->k->gelu_forward(L->k, a->fch_gelu, a->fch, cur(m, 4 * C, 1));
        o->input_rewritten(L, a->fch_gelu);
    }
    o->linear_backward(L, &k->fcproj, a->fch_gelu, m->d_res, m->d_big, N);
    progress(m);
    L->k->gelu_backward(L->k, m->d_big, a->fch, m->d_big, cur(m, 4 * C, 1));
    o->linear_backward(L, &k->fc, a->ln2, m->d_big, m->d_small, N);
    progress(m);
    o->norm_backward(L, &k->ln2, a->res2, m->d_small, m->d_res, a->ln2_mean, a->ln2_rstd, N);
    o->linear_backward(L, &k->proj, a->atty, m->d_res, m->d_small, N);
    progress(m);
    cb_attn at = cb_attn_self(B, T, C, m->c.n_head, 1, NULL);
    if (sel) o->attention_forward(L, &at, a->qkv, a->qkv, m->d_big, a->att);
    o->attention_backward(L, &at, a->qkv, a->qkv, a->att, m->d_small, m->d_qkv, m->d_qkv,
                          m->d_att);
    progress(m);
    o->linear_backward(L, &k->qkv, a->ln1, m->d_qkv, m->d_small, N);
    o->norm_backward(L, &k->ln1, x, m->d_small, m->d_res, a->ln1_mean, a->ln1_rstd, N);
}

static void ready(cb_gpt *m, int first, int last) {
    if (m->hook && first <= last) m->hook(m->hook_ctx, first, last);
}

/* Block recompute: the forward of the group ending at local block b again. */
static void recompute_group(cb_gpt *m, gpt_slot *s, int b) {
    for (int j = group_first(m, b); j <= b; j++)
        block_forward(m, j, &s->acts[j], block_input(m, s, j), s->B, s->T);
}

void gpt_stage_backward(cb_gpt *m, int slot, float dloss_scale, const float *dy) {
    cb_layout *L = m->L;
    gpt_slot *s = &m->slots[slot];
    int B = s->B, T = s->T, N = B * T, C = m->c.d_model;
    m->curB = B;
    m->curT = T;
    int nemb = (m->has_embed || m->has_head) + m->has_embed; /* wte, wpe at the front */
    int first_blk = nemb, nt = m->pt.n, last = m->nblk - 1;
    int head_rerun = m->has_head && m->nblk && rerun(m, last); /* head needs its output */
    if (m->has_head) {
        L->ops->head_backward(L, &m->embed, s->lnf_out, s->targets, s->logits, dloss_scale,
                              m->d_small, N);
        memset(m->d_res, 0, sizeof(float) * cur(m, C, 0));
        if (head_rerun) recompute_group(m, s, last);
        const float *x = m->nblk ? s->acts[last].res3 : s->x_in;
        L->ops->norm_backward(L, &m->lnf, x, m->d_small, m->d_res, s->lnf_mean, s->lnf_rstd, N);
        ready(m, nt - 2, nt - 1);
    } else {
        memcpy(m->d_res, dy, sizeof(float) * cur(m, C, 0));
    }
    for (int b = last; b >= 0; b--) {
        if (rerun(m, b) && group_last(m, b) == b && !(head_rerun && b == last))
            recompute_group(m, s, b);
        block_backward(m, b, &s->acts[b], block_input(m, s, b), B, T);
        ready(m, first_blk + b * NLAYER_TENSORS, first_blk + (b + 1) * NLAYER_TENSORS - 1);
    }
    if (m->has_embed) {
        float *dwte = m->embed.dwte;
        if (m->no_lookup_grad) m->embed.dwte = NULL; /* the kernel then adds wpe's rows only */
        L->ops->embed_backward(L, &m->embed, s->inp, B, T, m->d_res);
        m->embed.dwte = dwte;
    }
    if (nemb) ready(m, 0, nemb - 1);
}

void cb_gpt_backward(cb_gpt *m, float dloss_scale) { gpt_stage_backward(m, 0, dloss_scale, NULL); }
