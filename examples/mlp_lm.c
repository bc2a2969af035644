/* A user's own model on cubist's parallel layers: a residual-MLP language
 * model (no attention) with its own training loop. The same binary runs
 * serially or under any layout and data parallelism:
 *
 *   build/examples/mlp_lm --data train.bin --steps 30
 *   mpirun -np 8 build/examples/mlp_lm --data train.bin --tp 8 --tp-mode 3d
 *   mpirun -np 4 build/examples/mlp_lm --data train.bin --dp 2 --tp 2 --tp-mode 1d
 *   mpirun -np 4 build/examples/mlp_lm --data train.bin --pp 2 --dp 2 --micro-batches 4
 *   mpirun -np 3 build/examples/mlp_lm --data train.bin --pp 3 --shared-skip
 *
 * Model: x = wte[id] + wpe[t]; two blocks x += fc2(gelu(fc1(ln(x)))); the
 * loss of the tied head on ln_f(x). With --shared-skip, a third block
 * applies the first block's fc1 again (a weight shared by two layers that
 * are not adjacent) and ln_f reads x + the embedding's output (a residual
 * that skips every stage in between under --pp). Batches are sequential
 * runs of the token file: batch k holds sequences [k*B*T, (k+1)*B*T) plus
 * the next token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"

enum { B = 8, T = 16, C = 48, V = 256 };

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

static int arg_bool(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return 1;
    return 0;
}

/* The graph: blocks x += fc2(gelu(fc1(ln(x)))), the loss on ln_f(x). */
static void declare(cb_model *m, int shared_skip) {
    cb_layer *emb = cb_model_embedding(m, "wte", V, C), *fc1_0 = NULL;
    cb_act *x0 = cb_op_embedding(emb), *x = x0;
    char name[32];
    for (int i = 0; i < 2 + shared_skip; i++) {
        snprintf(name, sizeof name, "b%d.ln", i);
        cb_act *h = cb_op_layernorm(cb_model_layernorm(m, name, C), x);
        snprintf(name, sizeof name, "b%d.fc1", i);
        cb_layer *fc1 = i == 2 ? fc1_0 : cb_model_linear(m, name, C, 4 * C);
        if (i == 0) fc1_0 = fc1;
        cb_act *u = cb_op_gelu(cb_op_linear(fc1, h));
        snprintf(name, sizeof name, "b%d.fc2", i);
        x = cb_op_add(x, cb_op_linear(cb_model_linear(m, name, 4 * C, C), u));
    }
    if (shared_skip) x = cb_op_add(x, x0);
    cb_op_lm_loss(emb, cb_op_layernorm(cb_model_layernorm(m, "ln_f", C), x));
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
    declare(m, arg_bool(argc, argv, "--shared-skip"));
    /* eps 1e-6 rather than 1e-8: with tiny eps, Adam turns the last-bit
     * differences of near-zero gradients (sums split over ranks round
     * differently) into visible steps, and tests/test_example.sh compares
     * the weights of every layout with the serial run to 1e-5. */
    cb_adamw_config opt = {.lr = 1e-3f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-6f, .weight_decay = 0.1f, .clip = 1.0f, .warmup = 3,
                           .steps = steps};
    if (cb_model_build(m, 1337, &opt, &e)) cb_dist_exit(d, &e);
    if (cb_dist_rank(d) == 0) cb_model_print_partition(m, stdout); /* --print-partition */

    int first, count;
    cb_model_rows(m, &first, &count);
    int *ids = malloc(sizeof(int) * count * T), *tg = malloc(sizeof(int) * count * T);
    size_t run = (size_t)B * T + 1, nruns = tok.n / run;
    for (int s = 0; s < steps; s++) {
        size_t base = (s % nruns) * run + (size_t)first * T; /* the stream may be several shards */
        cb_tokens_read(&tok, base, (size_t)count * T, ids);
        cb_tokens_read(&tok, base + 1, (size_t)count * T, tg);
        float norm, loss = cb_model_train_step(m, ids, tg, s, &norm);
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
