/* Fixed sinusoidal positions (cb_layer_set_sinusoidal) through the graph
 * engine, for tests/test_positions.sh: a small MLP language model whose
 * embedding adds the sinusoid table, trained with the user's loop on
 * sequential batches, weight decay on embeddings switched on (the fixed
 * table must be exempt). No attention, so no GPT attention-bias exemption
 * is needed when comparing layouts.
 *
 *   test_positions --data train.bin --steps 30 --save out.st [layout flags]
 *
 * prints "step N loss L grad_norm G" lines (tests/compare.py logs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"

enum { B = 8, T = 16, C = 32, V = 256, NBLOCK = 2 };

static void declare(cb_model *m) {
    char s[48];
    cb_layer *emb = cb_model_embedding(m, "emb", V, C);
    cb_layer_set_sinusoidal(emb);
    cb_act *x = cb_op_embedding(emb);
    for (int l = 0; l < NBLOCK; l++) {
        cb_model_begin_block(m);
        snprintf(s, sizeof s, "b.%d.ln", l);
        cb_act *h = cb_op_layernorm(cb_model_layernorm(m, s, C), x);
        snprintf(s, sizeof s, "b.%d.fc", l);
        cb_act *u = cb_op_gelu(cb_op_linear(cb_model_linear(m, s, C, 4 * C), h));
        snprintf(s, sizeof s, "b.%d.proj", l);
        x = cb_op_add(x, cb_op_linear(cb_model_linear(m, s, 4 * C, C), u));
        cb_model_end_block(m);
    }
    cb_op_lm_loss(emb, cb_op_layernorm(cb_model_layernorm(m, "ln_f", C), x));
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
    int steps = steps_s ? atoi(steps_s) : 30;
    cb_tokens tok = {0};
    if (!data) cb_fail(&e, CB_EINPUT, "pass --data FILE");
    else cb_tokens_open(data, V, &tok, &e);
    if (e.code) cb_dist_exit(d, &e);
    cb_model *m = cb_model_new(d, B, T);
    declare(m);
    /* eps 1e-6 as examples/mlp_lm.c; decay on embeddings to show the fixed table is exempt */
    cb_adamw_config opt = {.lr = 3e-3f, .min_lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-6f,
                           .weight_decay = 0.1f, .clip = 1.0f, .warmup = 3, .steps = steps,
                           .decay_embeddings = 1};
    if (cb_model_build(m, 1337, &opt, &e)) cb_dist_exit(d, &e);
    int first, count;
    cb_model_rows(m, &first, &count);
    int *ids = malloc(sizeof(int) * count * T), *tg = malloc(sizeof(int) * count * T);
    size_t run = (size_t)B * T + 1, nruns = tok.n / run;
    for (int s = 0; s < steps; s++) {
        size_t base = (s % nruns) * run + (size_t)first * T;
        cb_tokens_read(&tok, base, (size_t)count * T, ids);
        cb_tokens_read(&tok, base + 1, (size_t)count * T, tg);
        float norm, loss = cb_model_train_step(m, ids, tg, s, &norm);
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
