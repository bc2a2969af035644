/* A user's own model on cubist's parallel layers: a residual-MLP language
 * model (no attention) with its own training loop. The same binary runs
 * serially or under any layout and data parallelism:
 *
 *   build/examples/mlp_lm --data train.bin --steps 30
 *   mpirun -np 8 build/examples/mlp_lm --data train.bin --tp 8 --tp-mode 3d
 *   mpirun -np 4 build/examples/mlp_lm --data train.bin --dp 2 --tp 2 --tp-mode 1d
 *   mpirun -np 4 build/examples/mlp_lm --data train.bin --pp 2 --dp 2 --micro-batches 4
 *
 * Model: x = wte[id] + wpe[t]; two blocks x += fc2(gelu(fc1(ln(x)))); the
 * loss of the tied head on ln_f(x). Batches are sequential runs of the token
 * file: batch k holds sequences [k*B*T, (k+1)*B*T) plus the next token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"

enum { B = 8, T = 16, C = 48, V = 256, NBLOCK = 2 };

typedef struct block {
    cb_layer *ln, *fc1, *fc2;
    cb_act *xin, *h, *u, *g, *du, *dg; /* xin p0, h p0 (ln out), u/g p1 (4C) */
} block;

static int arg_int(int argc, char **argv, const char *name, int def) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return atoi(argv[i + 1]);
    return def;
}

static const char *arg_str(int argc, char **argv, const char *name) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return NULL;
}

int main(int argc, char **argv) {
    cb_dist *d;
    cb_err e;
    if (cb_dist_init(&argc, &argv, &d, &e)) cb_dist_exit(NULL, &e);
    int steps = arg_int(argc, argv, "--steps", 30);
    const char *data = arg_str(argc, argv, "--data"), *save = arg_str(argc, argv, "--save");
    cb_tokens tok = {0};
    if (!data) cb_fail(&e, CB_EINPUT, "pass --data FILE (a token file: `cubist prepare`)");
    else cb_tokens_open(data, V, &tok, &e);
    if (e.code) cb_dist_exit(d, &e);

    cb_model *m = cb_model_new(d, B, T);
    cb_layer *emb = cb_model_embedding(m, "wte", V, C);
    block blk[NBLOCK];
    char name[32];
    for (int i = 0; i < NBLOCK; i++) {
        block *b = &blk[i];
        snprintf(name, sizeof name, "b%d.ln", i);
        b->ln = cb_model_layernorm(m, name, C, 0);
        snprintf(name, sizeof name, "b%d.fc1", i);
        b->fc1 = cb_model_linear(m, name, C, 4 * C, 0);
        snprintf(name, sizeof name, "b%d.fc2", i);
        b->fc2 = cb_model_linear(m, name, 4 * C, C, 1);
        b->xin = cb_model_act(m, C, 0);
        b->h = cb_model_act(m, C, 0);
        b->u = cb_model_act(m, 4 * C, 1);
        b->g = cb_model_act(m, 4 * C, 1);
        b->du = cb_model_act(m, 4 * C, 1);
        b->dg = cb_model_act(m, 4 * C, 1);
    }
    cb_layer *lnf = cb_model_layernorm(m, "ln_f", C, 0);
    cb_act *x = cb_model_act(m, C, 0), *y = cb_model_act(m, C, 0), *f = cb_model_act(m, C, 0);
    cb_act *dx = cb_model_act(m, C, 0), *dt = cb_model_act(m, C, 0);
    /* eps 1e-6 rather than 1e-8: with tiny eps, Adam turns the last-bit
     * differences of near-zero gradients (sums split over ranks round
     * differently) into visible steps, and tests/test_example.sh compares
     * the weights of every layout with the serial run to 1e-5. */
    cb_adamw_config opt = {.lr = 1e-3f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-6f, .weight_decay = 0.1f, .clip = 1.0f, .warmup = 3,
                           .steps = steps};
    if (cb_model_build(m, 1337, &opt, &e)) cb_dist_exit(d, &e);

    int first, count;
    cb_model_rows(m, &first, &count);
    int *ids = malloc(sizeof(int) * count * T), *tg = malloc(sizeof(int) * count * T);
    size_t run = (size_t)B * T + 1, nruns = tok.n / run;
    for (int s = 0; s < steps; s++) {
        const uint16_t *base = tok.tok + (s % nruns) * run + (size_t)first * T;
        for (int i = 0; i < count * T; i++) {
            ids[i] = base[i];
            tg[i] = base[i + 1];
        }
        cb_model_zero_grad(m);
        cb_embedding_forward(emb, ids, x);
        for (int i = 0; i < NBLOCK; i++) {
            block *b = &blk[i];
            cb_act_copy(b->xin, x);
            cb_layernorm_forward(b->ln, b->xin, b->h);
            cb_linear_forward(b->fc1, b->h, b->u);
            cb_gelu_forward(b->u, b->g);
            cb_linear_forward(b->fc2, b->g, y);
            cb_act_add(x, b->xin, y);
        }
        cb_layernorm_forward(lnf, x, f);
        float loss = cb_head_forward(emb, f, tg);

        cb_head_backward(emb, f, 1.0f, dt);
        cb_act_zero(dx);
        cb_layernorm_backward(lnf, x, dt, dx);
        for (int i = NBLOCK - 1; i >= 0; i--) {
            block *b = &blk[i];
            cb_linear_backward(b->fc2, b->g, dx, b->dg);
            cb_gelu_backward(b->u, b->dg, b->du);
            cb_linear_backward(b->fc1, b->h, b->du, dt);
            cb_layernorm_backward(b->ln, b->xin, dt, dx);
        }
        cb_embedding_backward(emb, dx);
        float norm = cb_model_step(m, s);
        loss = cb_model_mean(m, loss);
        if (cb_dist_rank(d) == 0) printf("step %d loss %.7f grad_norm %.7f\n", s + 1, loss, norm);
    }
    if (save && cb_model_save(m, save, &e)) cb_dist_exit(d, &e);
    free(ids);
    free(tg);
    cb_model_free(m);
    cb_tokens_close(&tok);
    cb_dist_finalize(d);
    return 0;
}
