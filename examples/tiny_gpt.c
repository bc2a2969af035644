/* A user-built transformer on cubist's public layers: GPT-2's pre-LN
 * blocks (LayerNorm, causal self-attention, MLP) with the user's own
 * forward, backward and training loop. The same binary runs serially or
 * under any layout, data parallelism and ZeRO-1:
 *
 *   build/examples/tiny_gpt --data train.bin --steps 30
 *   mpirun -np 8 build/examples/tiny_gpt --data train.bin --tp 8 --tp-mode 3d
 *   mpirun -np 16 build/examples/tiny_gpt --data train.bin --dp 2 --zero 1 --tp 8 --tp-mode 3d
 *
 * The layers carry GPT-2's names (wte, wpe, h.<l>.ln_1, h.<l>.attn.c_attn,
 * ...), so --save writes a file that `cubist train --init` loads (--steps 0
 * --save: the initial weights), and the model computes what cubist train's
 * GPT computes: tests/test_example.sh checks that both trajectories agree.
 * Batches are sequential runs of the token file, as `cubist train
 * --shuffle 0`: step k reads the k-th run of B*T+1 tokens, row b its
 * tokens [b*T, b*T+T].
 *
 * One block, activations (parity): x (0) -> ln_1 -> h (0) -> c_attn ->
 * qkv (1, 3C) -> attention -> a (1) -> attn.c_proj -> x2 = x + . (0) ->
 * ln_2 -> h2 (0) -> c_fc -> u (1, 4C) -> gelu -> g (1) -> mlp.c_proj ->
 * x + . = the next block's x. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"

enum { B = 8, T = 16, C = 32, NH = 4, V = 256, NLAYER = 2 };

typedef struct block {
    cb_layer *ln1, *c_attn, *attn, *attn_proj, *ln2, *c_fc, *mlp_proj;
    cb_act *x, *h, *qkv, *a, *x2, *h2, *u, *g; /* kept from forward for backward */
} block;

typedef struct model {
    cb_layer *emb, *lnf;
    block blk[NLAYER];
    cb_act *x, *f;                               /* the last block's output, ln_f of it */
    cb_act *dx, *dt, *dqkv, *da, *du, *dg, *dp; /* gradients */
} model;

/* "h.<l>.<what>" */
static const char *nm(char *buf, int l, const char *what) {
    snprintf(buf, 48, "h.%d.%s", l, what);
    return buf;
}

static void declare(cb_model *m, model *g) {
    char s[48];
    g->emb = cb_model_embedding_named(m, "wte", "wpe", V, C);
    for (int l = 0; l < NLAYER; l++) {
        block *b = &g->blk[l];
        b->ln1 = cb_model_layernorm(m, nm(s, l, "ln_1"), C, 0);
        b->c_attn = cb_model_linear_qkv(m, nm(s, l, "attn.c_attn"), C);
        b->attn = cb_model_attention(m, nm(s, l, "attn"), C, NH);
        b->attn_proj = cb_model_linear(m, nm(s, l, "attn.c_proj"), C, C, 1);
        b->ln2 = cb_model_layernorm(m, nm(s, l, "ln_2"), C, 0);
        b->c_fc = cb_model_linear(m, nm(s, l, "mlp.c_fc"), C, 4 * C, 0);
        b->mlp_proj = cb_model_linear(m, nm(s, l, "mlp.c_proj"), 4 * C, C, 1);
        b->x = cb_model_act(m, C, 0), b->h = cb_model_act(m, C, 0);
        b->qkv = cb_model_act(m, 3 * C, 1), b->a = cb_model_act(m, C, 1);
        b->x2 = cb_model_act(m, C, 0), b->h2 = cb_model_act(m, C, 0);
        b->u = cb_model_act(m, 4 * C, 1), b->g = cb_model_act(m, 4 * C, 1);
    }
    g->lnf = cb_model_layernorm(m, "ln_f", C, 0);
    g->x = cb_model_act(m, C, 0), g->f = cb_model_act(m, C, 0);
    g->dx = cb_model_act(m, C, 0), g->dt = cb_model_act(m, C, 0), g->dp = cb_model_act(m, C, 0);
    g->dqkv = cb_model_act(m, 3 * C, 1), g->da = cb_model_act(m, C, 1);
    g->du = cb_model_act(m, 4 * C, 1), g->dg = cb_model_act(m, 4 * C, 1);
}

/* x (the block input, kept) -> out; p is scratch for the branches */
static void block_forward(block *b, cb_act *out, cb_act *p) {
    cb_layernorm_forward(b->ln1, b->x, b->h);
    cb_linear_forward(b->c_attn, b->h, b->qkv);
    cb_attention_forward(b->attn, b->qkv, b->a);
    cb_linear_forward(b->attn_proj, b->a, p);
    cb_act_add(b->x2, b->x, p);
    cb_layernorm_forward(b->ln2, b->x2, b->h2);
    cb_linear_forward(b->c_fc, b->h2, b->u);
    cb_gelu_forward(b->u, b->g);
    cb_linear_forward(b->mlp_proj, b->g, p);
    cb_act_add(out, b->x2, p);
}

/* g->dx: the gradient of the block's output on entry, of its input on
 * exit (the LayerNorms accumulate into it: the residual stream) */
static void block_backward(model *g, block *b) {
    cb_linear_backward(b->mlp_proj, b->g, g->dx, g->dg);
    cb_gelu_backward(b->u, g->dg, g->du);
    cb_linear_backward(b->c_fc, b->h2, g->du, g->dt);
    cb_layernorm_backward(b->ln2, b->x2, g->dt, g->dx);
    cb_linear_backward(b->attn_proj, b->a, g->dx, g->da);
    cb_attention_backward(b->attn, b->qkv, g->da, g->dqkv);
    cb_linear_backward(b->c_attn, b->h, g->dqkv, g->dt);
    cb_layernorm_backward(b->ln1, b->x, g->dt, g->dx);
}

/* One step's forward and backward; returns this rank's mean loss. */
static float forward_backward(model *g, const int *ids, const int *tg) {
    cb_embedding_forward(g->emb, ids, g->blk[0].x);
    for (int l = 0; l < NLAYER; l++)
        block_forward(&g->blk[l], l + 1 < NLAYER ? g->blk[l + 1].x : g->x, g->dp);
    cb_layernorm_forward(g->lnf, g->x, g->f);
    float loss = cb_head_forward(g->emb, g->f, tg);
    cb_head_backward(g->emb, g->f, 1.0f, g->dt);
    cb_act_zero(g->dx);
    cb_layernorm_backward(g->lnf, g->x, g->dt, g->dx);
    for (int l = NLAYER - 1; l >= 0; l--) block_backward(g, &g->blk[l]);
    cb_embedding_backward(g->emb, g->dx);
    return loss;
}

static const char *arg_str(int argc, char **argv, const char *name) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return NULL;
}

int main(int argc, char **argv) {
    cb_dist *d;
    cb_err e = {0};
    if (cb_dist_init(&argc, &argv, &d, &e)) cb_dist_exit(NULL, &e);
    const char *data = arg_str(argc, argv, "--data"), *save = arg_str(argc, argv, "--save");
    const char *steps_s = arg_str(argc, argv, "--steps");
    char *end = NULL;
    long steps = steps_s ? strtol(steps_s, &end, 10) : 30;
    cb_tokens tok = {0};
    if (steps_s && (*end || end == steps_s || steps < 0))
        cb_fail(&e, CB_EINPUT, "--steps takes an integer >= 0; got '%s'", steps_s);
    else if (!data) cb_fail(&e, CB_EINPUT, "pass --data FILE (a token file: `cubist prepare`)");
    else cb_tokens_open(data, V, &tok, &e);
    if (!e.code && tok.n < (size_t)B * T + 1)
        cb_fail(&e, CB_EINPUT, "%s: one step needs %d tokens; use a longer file", data, B * T + 1);
    if (e.code) cb_dist_exit(d, &e);

    cb_model *m = cb_model_new(d, B, T);
    model g;
    declare(m, &g);
    /* eps 1e-6: see examples/mlp_lm.c (Adam and last-bit differences) */
    cb_adamw_config opt = {.lr = 1e-3f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-6f, .weight_decay = 0.1f, .clip = 1.0f, .warmup = 3,
                           .steps = (int)steps};
    if (cb_model_build(m, 1337, &opt, &e)) cb_dist_exit(d, &e);

    int first, count;
    size_t np, na;
    cb_model_rows(m, &first, &count);
    cb_model_sizes(m, &np, &na);
    if (cb_dist_rank(d) == 0) printf("# rank 0: %zu parameters, %zu AdamW moments\n", np, na);
    int *ids = malloc(sizeof(int) * count * T), *tg = malloc(sizeof(int) * count * T);
    size_t run = (size_t)B * T + 1, nruns = tok.n / run;
    for (int s = 0; s < steps; s++) {
        const uint16_t *base = tok.tok + (s % nruns) * run + (size_t)first * T;
        for (int i = 0; i < count * T; i++) ids[i] = base[i], tg[i] = base[i + 1];
        cb_model_zero_grad(m);
        float loss = forward_backward(&g, ids, tg);
        float norm = cb_model_step(m, s);
        loss = cb_model_mean(m, loss);
        if (cb_dist_rank(d) == 0) printf("step %d loss %.9g grad_norm %.9g\n", s + 1, loss, norm);
    }
    if (save && cb_model_save(m, save, &e)) cb_dist_exit(d, &e);
    free(ids);
    free(tg);
    cb_model_free(m);
    cb_tokens_close(&tok);
    cb_dist_finalize(d);
    return 0;
}
