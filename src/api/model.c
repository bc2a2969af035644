/* Users' own models from cubist's parallel-aware layers: a thin layer over
 * the layout operators (src/layout), the parameter table (src/model/ptable)
 * and AdamW. The built-in GPT uses the same operators. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/grid.h"
#include "cubist.h"
#include "layout/layout.h"
#include "model/ptable.h"
#include "optim/adamw.h"
#include "util/rng.h"

struct cb_dist {
    cb_grid g;
    cb_layout *L;
};

enum { L_EMBED, L_LINEAR, L_NORM };

struct cb_layer {
    cb_model *m;
    int kind, t0;  /* first tensor in the table: weight, then bias / wpe */
    cb_linear lin;
    cb_norm norm;
    cb_embed emb;
    float *mean, *rstd, *logits;
    int *ids, *targets;
};

struct cb_act {
    float *data;
    int H, parity;
    size_t n; /* local floats */
};

struct cb_model {
    cb_dist *d;
    int B, T, Bl; /* global and local sequences */
    cb_ptable pt;
    float *params, *grads;
    cb_adamw opt;
    int nlayers, nacts, oom;
    cb_layer *layers[256];
    cb_act *acts[1024];
};

/* ---------------------------------------------------------------- dist */

/* Removes "--name value" from argv; returns the value or NULL. */
static const char *take_flag(int *argc, char **argv, const char *name) {
    for (int i = 1; i + 1 < *argc; i++)
        if (!strcmp(argv[i], name)) {
            const char *v = argv[i + 1];
            memmove(&argv[i], &argv[i + 2], sizeof(char *) * (*argc - i - 1));
            *argc -= 2;
            return v;
        }
    return NULL;
}

/* The collective entry points agree on e across ranks, so it must start clean. */
static void clear(cb_err *e) {
    e->code = CB_OK;
    e->msg[0] = '\0';
}

int cb_dist_init(int *argc, char ***argv, cb_dist **out, cb_err *e) {
    clear(e);
    int rc = cb_comm_init(argc, argv, e);
    if (rc) return rc;
    const char *dp_s = take_flag(argc, *argv, "--dp"), *tp_s = take_flag(argc, *argv, "--tp");
    const char *mode_s = take_flag(argc, *argv, "--tp-mode");
    int world = cb_comm_world()->size, tp = tp_s ? atoi(tp_s) : 1;
    int dp = dp_s ? atoi(dp_s) : (tp > 0 ? world / tp : 0);
    cb_tp_mode mode = CB_TP_1D;
    cb_dist *d = calloc(1, sizeof *d);
    if (!d) return cb_fail(e, CB_ENOMEM, "out of memory");
    rc = cb_grid_parse_mode(mode_s ? mode_s : "1d", &mode, e);
    int have_grid = !rc && !cb_grid_create(&d->g, dp, 1, tp, mode, e);
    if (have_grid) cb_layout_create(&d->g, &d->L, e);
    rc = cb_comm_agree_err(cb_comm_world(), e);
    if (rc) {
        if (d->L) cb_layout_free(d->L);
        if (have_grid) cb_grid_free(&d->g);
        free(d);
        return rc;
    }
    *out = d;
    return CB_OK;
}

int cb_dist_rank(const cb_dist *d) { return d->g.world_rank; }

void cb_dist_exit(cb_dist *d, const cb_err *e) {
    (void)d;
    cb_comm_exit(e->code == CB_EINPUT ? 2 : 1, e->msg);
}

void cb_dist_finalize(cb_dist *d) {
    cb_layout_free(d->L);
    cb_grid_free(&d->g);
    free(d);
    cb_comm_finalize();
}

/* ---------------------------------------------------------------- declaring */

cb_model *cb_model_new(cb_dist *d, int batch, int seq_len) {
    cb_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->d = d;
    m->B = batch;
    m->T = seq_len;
    m->Bl = d->g.dp > 0 ? batch / d->g.dp : batch;
    m->pt.L = d->L;
    return m;
}

static cb_layer *new_layer(cb_model *m, int kind, int t0) {
    cb_layer *l = calloc(1, sizeof *l);
    if (!l || t0 < 0 || m->nlayers == 256) {
        free(l);
        m->oom = 1;
        return NULL;
    }
    l->m = m;
    l->kind = kind;
    l->t0 = t0;
    m->layers[m->nlayers++] = l;
    return l;
}

static int add(cb_model *m, const char *name, const char *suffix, int64_t d0, int64_t d1,
               int decay, cb_param_kind kind, int parity) {
    char full[64];
    snprintf(full, sizeof full, "%s.%s", name, suffix);
    return cb_ptable_add(&m->pt, full, d0, d1, decay, m->nlayers, kind, 1, parity);
}

cb_layer *cb_model_embedding(cb_model *m, const char *name, int vocab, int C) {
    int t0 = add(m, name, "weight", vocab, C, 0, CB_P_EMBED, 0);
    add(m, name, "pos", m->T, C, 0, CB_P_POS, 0);
    cb_layer *l = new_layer(m, L_EMBED, t0);
    if (l) l->emb = (cb_embed){.V = vocab, .C = C, .T = m->T};
    return l;
}

cb_layer *cb_model_linear(cb_model *m, const char *name, int in, int out, int parity) {
    int t0 = add(m, name, "weight", in, out, 1, CB_P_LINEAR_W, parity);
    add(m, name, "bias", out, 0, 0, CB_P_LINEAR_B, parity);
    cb_layer *l = new_layer(m, L_LINEAR, t0);
    if (l) l->lin = (cb_linear){.in = in, .out = out, .parts = 1, .parity = parity};
    return l;
}

cb_layer *cb_model_layernorm(cb_model *m, const char *name, int C, int parity) {
    int t0 = add(m, name, "weight", C, 0, 0, CB_P_NORM, parity);
    add(m, name, "bias", C, 0, 0, CB_P_NORM, parity);
    cb_layer *l = new_layer(m, L_NORM, t0);
    if (l) l->norm = (cb_norm){.C = C, .parity = parity};
    return l;
}

cb_act *cb_model_act(cb_model *m, int H, int parity) {
    int rows, cols;
    m->d->L->ops->act_shape(m->d->L, m->Bl * m->T, H, parity, &rows, &cols);
    cb_act *a = calloc(1, sizeof *a);
    if (a) a->data = calloc((size_t)rows * cols + 1, sizeof(float));
    if (!a || !a->data || m->nacts == 1024) {
        if (a) free(a->data);
        free(a);
        m->oom = 1;
        return NULL;
    }
    *a = (cb_act){a->data, H, parity, (size_t)rows * cols};
    m->acts[m->nacts++] = a;
    return a;
}

/* ---------------------------------------------------------------- building */

static void init_tensor(void *ctx, const cb_tensor_info *t, float *full, size_t n) {
    cb_rng *r = ctx;
    int ln = t->ndim == 1 && strstr(t->name, ".weight") != NULL;
    int normal = t->ndim == 2;
    for (size_t j = 0; j < n; j++) full[j] = normal ? 0.02f * cb_rng_normal(r) : (ln ? 1.f : 0.f);
}

/* Points each layer at its shards and gives it its saved-state buffers. */
static int bind(cb_model *m, cb_layer *l) {
    cb_layout *L = m->d->L;
    const cb_tensor_info *t = &m->pt.t[l->t0];
    float *p0 = m->params + t[0].offset, *p1 = m->params + t[1].offset;
    float *g0 = m->grads + t[0].offset, *g1 = m->grads + t[1].offset;
    int N = m->Bl * m->T, rows, cols;
    if (l->kind == L_LINEAR) {
        l->lin.w = p0, l->lin.b = p1, l->lin.dw = g0, l->lin.db = g1;
        return CB_OK;
    }
    if (l->kind == L_NORM) {
        l->norm.w = p0, l->norm.b = p1, l->norm.dw = g0, l->norm.db = g1;
        L->ops->act_shape(L, N, l->norm.C, l->norm.parity, &rows, &cols);
        l->mean = calloc(2 * (size_t)rows + 1, sizeof(float));
        l->rstd = l->mean ? l->mean + rows : NULL;
        return l->mean ? CB_OK : CB_ENOMEM;
    }
    l->emb.wte = p0, l->emb.wpe = p1, l->emb.dwte = g0, l->emb.dwpe = g1;
    l->logits = calloc(L->ops->logits_numel(L, N, l->emb.V) + 1, sizeof(float));
    l->ids = malloc(sizeof(int) * 2 * N);
    l->targets = l->ids ? l->ids + N : NULL;
    return l->logits && l->ids ? CB_OK : CB_ENOMEM;
}

static int check_layers(cb_model *m, cb_err *e) {
    cb_layout *L = m->d->L;
    if (m->oom) return cb_fail(e, CB_ENOMEM, "out of memory declaring the model");
    if (m->B % m->d->g.dp)
        return cb_fail(e, CB_EINPUT, "batch %d does not divide over --dp %d; use a multiple of %d",
                       m->B, m->d->g.dp, m->d->g.dp);
    for (int i = 0; i < m->nlayers; i++) {
        cb_layer *l = m->layers[i];
        int C = l->kind == L_EMBED ? l->emb.C : l->kind == L_NORM ? l->norm.C : l->lin.in;
        int V = l->kind == L_EMBED ? l->emb.V : 2;
        int rc = L->ops->check(L, m->Bl, m->T, C, L->tp, V, e);
        if (!rc && l->kind == L_LINEAR) rc = L->ops->check(L, m->Bl, m->T, l->lin.out, L->tp, V, e);
        if (rc) return rc;
    }
    return CB_OK;
}

int cb_model_build(cb_model *m, uint64_t seed, const cb_adamw_config *opt, cb_err *e) {
    clear(e);
    int rc = check_layers(m, e);
    if (!rc) {
        m->params = calloc(m->pt.nparams + 1, sizeof(float));
        m->grads = calloc(m->pt.nparams + 1, sizeof(float));
        if (!m->params || !m->grads) rc = cb_fail(e, CB_ENOMEM, "out of memory for parameters");
    }
    for (int i = 0; !rc && i < m->nlayers; i++)
        if (bind(m, m->layers[i])) rc = cb_fail(e, CB_ENOMEM, "out of memory for layer state");
    cb_rng r;
    cb_rng_seed(&r, seed);
    if (!rc && cb_ptable_fill(&m->pt, m->params, init_tensor, &r))
        rc = cb_fail(e, CB_ENOMEM, "out of memory initialising parameters");
    if (!rc) rc = cb_adamw_init(&m->opt, opt, 0, m->pt.nparams, e);
    return cb_comm_agree_err(cb_comm_world(), e);
}

void cb_model_rows(const cb_model *m, int *first, int *count) {
    *first = m->d->g.at.d * m->Bl;
    *count = m->Bl;
}

/* ---------------------------------------------------------------- operators */

void cb_embedding_forward(cb_layer *l, const int *ids, cb_act *x) {
    cb_layout *L = l->m->d->L;
    memcpy(l->ids, ids, sizeof(int) * l->m->Bl * l->m->T);
    L->ops->embed_forward(L, &l->emb, l->ids, l->m->Bl, l->m->T, x->data);
}

void cb_embedding_backward(cb_layer *l, const cb_act *dx) {
    cb_layout *L = l->m->d->L;
    L->ops->embed_backward(L, &l->emb, l->ids, l->m->Bl, l->m->T, dx->data);
}

void cb_linear_forward(cb_layer *l, const cb_act *x, cb_act *y) {
    cb_layout *L = l->m->d->L;
    L->ops->linear_forward(L, &l->lin, x->data, y->data, l->m->Bl * l->m->T);
}

void cb_linear_backward(cb_layer *l, const cb_act *x, const cb_act *dy, cb_act *dx) {
    cb_layout *L = l->m->d->L;
    L->ops->linear_backward(L, &l->lin, x->data, dy->data, dx->data, l->m->Bl * l->m->T);
}

void cb_layernorm_forward(cb_layer *l, const cb_act *x, cb_act *y) {
    cb_layout *L = l->m->d->L;
    L->ops->norm_forward(L, &l->norm, x->data, y->data, l->mean, l->rstd, l->m->Bl * l->m->T);
}

void cb_layernorm_backward(cb_layer *l, const cb_act *x, const cb_act *dy, cb_act *dx) {
    cb_layout *L = l->m->d->L;
    L->ops->norm_backward(L, &l->norm, x->data, dy->data, dx->data, l->mean, l->rstd,
                          l->m->Bl * l->m->T);
}

void cb_gelu_forward(const cb_act *x, cb_act *y) {
    cb_kernels_cpu()->gelu_forward(y->data, x->data, x->n);
}

void cb_gelu_backward(const cb_act *x, const cb_act *dy, cb_act *dx) {
    cb_kernels_cpu()->gelu_backward(dx->data, x->data, dy->data, x->n);
}

void cb_act_add(cb_act *y, const cb_act *a, const cb_act *b) {
    cb_kernels_cpu()->residual_forward(y->data, a->data, b->data, a->n);
}

void cb_act_copy(cb_act *dst, const cb_act *src) {
    memcpy(dst->data, src->data, sizeof(float) * src->n);
}

void cb_act_zero(cb_act *x) { memset(x->data, 0, sizeof(float) * x->n); }

float cb_head_forward(cb_layer *l, const cb_act *x, const int *targets) {
    cb_layout *L = l->m->d->L;
    int N = l->m->Bl * l->m->T;
    memcpy(l->targets, targets, sizeof(int) * N);
    return L->ops->head_forward(L, &l->emb, x->data, l->targets, l->logits, N);
}

void cb_head_backward(cb_layer *l, const cb_act *x, float dloss, cb_act *dx) {
    cb_layout *L = l->m->d->L;
    L->ops->head_backward(L, &l->emb, x->data, l->targets, l->logits, dloss, dx->data,
                          l->m->Bl * l->m->T);
}

/* ---------------------------------------------------------------- training */

void cb_model_zero_grad(cb_model *m) { memset(m->grads, 0, sizeof(float) * m->pt.nparams); }

float cb_model_mean(cb_model *m, float v) {
    cb_comm_allreduce(&m->d->g.dpg, "loss", &v, &v, 1, CB_COMM_SUM);
    return v / m->d->g.dp;
}

float cb_model_step(cb_model *m, int step) {
    const cb_kernels *k = cb_kernels_cpu();
    cb_grid *g = &m->d->g;
    size_t n = m->pt.nparams;
    if (g->dp > 1) {
        cb_comm_allreduce(&g->dpg, "grad", m->grads, m->grads, n, CB_COMM_SUM);
        k->scale(m->grads, 1.0f / g->dp, n);
    }
    double ss = cb_ptable_sumsq(&m->pt, m->grads);
    cb_comm_allreduce_f64(&g->model, "norm", &ss, &ss, 1, CB_COMM_SUM);
    double norm = sqrt(ss);
    float s = cb_clip_scale(m->opt.c.clip, norm);
    if (s < 1.0f) k->scale(m->grads, s, n);
    cb_adamw_step(&m->opt, k, m->params, m->grads, m->pt.t, m->pt.n, cb_lr_at(&m->opt.c, step));
    return (float)norm;
}

int cb_model_save(cb_model *m, const char *path, cb_err *e) {
    clear(e);
    if (m->d->g.at.d == 0) {
        const float *blocks[1] = {m->params};
        const char *prefix[1] = {""}, *meta[2] = {"format", "pt"};
        cb_ptable_save(&m->pt, 1, blocks, prefix, path, meta, 1, e);
    }
    return cb_comm_agree_err(cb_comm_world(), e);
}

int cb_model_load(cb_model *m, const char *path, cb_err *e) {
    clear(e);
    cb_st_file f;
    if (!cb_st_open(path, &f, e)) {
        cb_ptable_load(&m->pt, m->params, "", &f, path, e);
        cb_st_close(&f);
    }
    return cb_comm_agree_err(cb_comm_world(), e);
}

void cb_model_free(cb_model *m) {
    if (!m) return;
    for (int i = 0; i < m->nlayers; i++) {
        cb_layer *l = m->layers[i];
        free(l->mean);
        free(l->logits);
        free(l->ids);
        free(l);
    }
    for (int i = 0; i < m->nacts; i++) {
        free(m->acts[i]->data);
        free(m->acts[i]);
    }
    cb_ptable_free(&m->pt);
    cb_adamw_free(&m->opt);
    free(m->params);
    free(m->grads);
    free(m);
}
