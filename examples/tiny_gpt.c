/* A user-built transformer on cubist's public layers: GPT-2's pre-LN
 * blocks (LayerNorm, causal self-attention, MLP) declared once as a graph,
 * with the user's own training loop. The same binary runs serially or
 * under any layout, schedule, recompute and data parallelism:
 *
 *   build/examples/tiny_gpt --data train.bin --steps 30
 *   mpirun -np 8 build/examples/tiny_gpt --data train.bin --tp 8 --tp-mode 3d
 *   mpirun -np 16 build/examples/tiny_gpt --data train.bin --dp 2 --zero 1 --tp 8 --tp-mode 3d
 *   mpirun -np 4 build/examples/tiny_gpt --data train.bin --pp 2 --schedule interleaved \
 *       --micro-batches 4 --recompute block
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
 * x + . = the next block's x.
 *
 * --masked declares the general attention instead (not GPT-2): each
 * block's self-attention is bidirectional with padding masks, and a
 * causal, padded cross-attention follows it, whose queries come from the
 * block and whose keys and values from the normalised embedding output
 * (a value read by every block: under the pipeline it travels to each
 * stage), whose output passes dropout 0.1 (on the residual stream's
 * layout, the same mask everywhere). Every step gives each sequence a
 * length in [0, T] (0 and T included) through cb_model_set_lengths. Its QKV layers are named
 * h.<l>.attn.qkv, so that tests/compare.py holds their biases' key thirds
 * to the tolerance of every tensor (it exempts GPT-2's c_attn.bias).
 *
 * --bench [--seq-len T] [--steps N]: the same declaration at GPT-2 124M's
 * sizes (12 layers, d 768, 12 heads, vocab 50304; B = 4, T = 64) on
 * synthetic tokens, timed as `cubist bench` times its GPT (a warm-up
 * step, then the mean step_ms of N = 3 steps); one JSON line. With
 * --builtin it times the library's declaration instead: the pair is the
 * 124M declared through the public API against the built-in one
 * (scripts/bench_ab.sh runs both). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"

/* The model and batch; --bench makes them GPT-2 124M's. */
static int B = 8, T = 16, C = 32, NH = 4, V = 256, NLAYER = 2;

/* "h.<l>.<what>" */
static const char *nm(char *buf, int l, const char *what) {
    snprintf(buf, 48, "h.%d.%s", l, what);
    return buf;
}

static int masked; /* --masked */

/* --masked: x + the causal, padded cross-attention of x's queries over
 * the keys and values of enc */
static cb_act *cross(cb_model *m, int l, cb_act *x, cb_act *enc) {
    char s[48];
    cb_act *h = cb_op_layernorm(cb_model_layernorm(m, nm(s, l, "ln_x"), C), x);
    cb_act *q = cb_op_linear(cb_model_linear(m, nm(s, l, "xattn.q"), C, C), h);
    cb_act *kv = cb_op_linear(cb_model_linear_kv(m, nm(s, l, "xattn.kv"), C), enc);
    cb_layer *at = cb_model_attention_flags(m, nm(s, l, "xattn"), C, NH,
                                            CB_ATTN_CAUSAL | CB_ATTN_PADDED);
    cb_act *a = cb_op_cross_attention(at, q, kv);
    a = cb_op_linear(cb_model_linear(m, nm(s, l, "xattn.c_proj"), C, C), a);
    return cb_op_add(x, cb_op_dropout(a, 0.1f));
}

/* One pre-LN block on the residual stream x; returns the next x. */
static cb_act *block(cb_model *m, int l, cb_act *x, cb_act *enc) {
    char s[48];
    cb_model_begin_block(m);
    cb_act *h = cb_op_layernorm(cb_model_layernorm(m, nm(s, l, "ln_1"), C), x);
    cb_layer *lq = cb_model_linear_qkv(m, nm(s, l, masked ? "attn.qkv" : "attn.c_attn"), C);
    cb_act *qkv = cb_op_linear(lq, h);
    cb_layer *at = masked ? cb_model_attention_flags(m, nm(s, l, "attn"), C, NH, CB_ATTN_PADDED)
                          : cb_model_attention(m, nm(s, l, "attn"), C, NH);
    cb_act *a = cb_op_attention(at, qkv);
    x = cb_op_add(x, cb_op_linear(cb_model_linear(m, nm(s, l, "attn.c_proj"), C, C), a));
    if (masked) x = cross(m, l, x, enc);
    h = cb_op_layernorm(cb_model_layernorm(m, nm(s, l, "ln_2"), C), x);
    cb_act *u = cb_op_gelu(cb_op_linear(cb_model_linear(m, nm(s, l, "mlp.c_fc"), C, 4 * C), h));
    x = cb_op_add(x, cb_op_linear(cb_model_linear(m, nm(s, l, "mlp.c_proj"), 4 * C, C), u));
    cb_model_end_block(m);
    return x;
}

static void declare(cb_model *m) {
    cb_layer *emb = cb_model_embedding_named(m, "wte", "wpe", V, C);
    cb_act *x = cb_op_embedding(emb);
    cb_act *enc = masked ? cb_op_layernorm(cb_model_layernorm(m, "ln_enc", C), x) : NULL;
    for (int l = 0; l < NLAYER; l++) x = block(m, l, x, enc);
    cb_op_lm_loss(emb, cb_op_layernorm(cb_model_layernorm(m, "ln_f", C), x));
}

static const char *arg_str(int argc, char **argv, const char *name) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return NULL;
}

/* --bench: a warm-up step, then the mean of steps steps; ids of the global
 * batch a fixed hash of the position, as `cubist bench`'s. */
static void bench(cb_dist *d, cb_model *m, int steps, int builtin) {
    int first, count;
    cb_model_rows(m, &first, &count);
    size_t n = (size_t)count * T;
    int *ids = malloc(sizeof(int) * 2 * n);
    if (!ids) {
        cb_err e = {0};
        cb_fail(&e, CB_ENOMEM, "out of memory for the benchmark's tokens");
        cb_dist_exit(d, &e);
    }
    for (size_t i = 0; i < n; i++) {
        size_t g = (size_t)first * T + i;
        ids[i] = (int)((g * 2654435761u) % (unsigned)V);
        ids[n + i] = (int)(((g + 1) * 2654435761u) % (unsigned)V);
    }
    double ms = 0;
    for (int s = 0; s <= steps; s++) {
        cb_model_train_step(m, ids, ids + n, s, NULL);
        cb_model_step_info in;
        cb_model_last_step(m, &in);
        if (s) ms += in.step_ms;
    }
    size_t np, na;
    cb_model_sizes(m, &np, &na);
    if (cb_dist_rank(d) == 0)
        printf("{\"declared\":\"%s\",\"T\":%d,\"B\":%d,\"params\":%zu,\"step_ms\":%.1f,"
               "\"tokens_per_s\":%.2f}\n", builtin ? "builtin" : "api", T, B, np, ms / steps,
               (double)B * T * steps / (ms / 1e3));
    free(ids);
}

int main(int argc, char **argv) {
    cb_dist *d;
    cb_err e = {0};
    if (cb_dist_init(&argc, &argv, &d, &e)) cb_dist_exit(NULL, &e);
    int is_bench = 0;
    for (int i = 1; i < argc; i++) is_bench |= !strcmp(argv[i], "--bench");
    const char *seq_s = arg_str(argc, argv, "--seq-len");
    if (is_bench) B = 4, T = seq_s ? atoi(seq_s) : 64, C = 768, NH = 12, V = 50304, NLAYER = 12;
    if (is_bench && (T < 1 || T > 1024))
        cb_fail(&e, CB_EINPUT, "--seq-len '%s' must be from 1 to 1024", seq_s);
    if (e.code) cb_dist_exit(d, &e);
    const char *data = arg_str(argc, argv, "--data"), *save = arg_str(argc, argv, "--save");
    const char *steps_s = arg_str(argc, argv, "--steps"), *stop_s = arg_str(argc, argv, "--stop-after");
    const char *ckpt = arg_str(argc, argv, "--checkpoint"), *resume = arg_str(argc, argv, "--resume");
    char *end = NULL;
    long steps = steps_s ? strtol(steps_s, &end, 10) : is_bench ? 3 : 30;
    cb_tokens tok = {0};
    if (steps_s && (*end || end == steps_s || steps < is_bench))
        cb_fail(&e, CB_EINPUT, "--steps takes an integer >= %d; got '%s'", is_bench, steps_s);
    else if (is_bench) (void)0; /* synthetic tokens */
    else if (!data) cb_fail(&e, CB_EINPUT, "pass --data FILE (a token file: `cubist prepare`)");
    else cb_tokens_open(data, V, &tok, &e);
    if (!e.code && !is_bench && tok.n < (size_t)B * T + 1)
        cb_fail(&e, CB_EINPUT, "%s: one step needs %d tokens; use a longer file", data, B * T + 1);
    if (e.code) cb_dist_exit(d, &e);

    cb_model *m = cb_model_new(d, B, T);
    int builtin = 0; /* --builtin: the library's declaration of the same GPT */
    for (int i = 1; i < argc; i++) builtin |= !strcmp(argv[i], "--builtin");
    for (int i = 1; i < argc; i++) masked |= !strcmp(argv[i], "--masked");
    cb_gpt_config gc = {NLAYER, C, NH, T, V};
    if (builtin) cb_model_declare_gpt(m, &gc);
    else declare(m);
    /* eps 1e-6: see examples/mlp_lm.c (Adam and last-bit differences) */
    cb_adamw_config opt = {.lr = 1e-3f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-6f, .weight_decay = 0.1f, .clip = 1.0f, .warmup = 3,
                           .steps = (int)steps};
    if (cb_model_build(m, 1337, &opt, &e)) cb_dist_exit(d, &e);
    if (cb_dist_rank(d) == 0) cb_model_print_partition(m, stdout); /* --print-partition */
    if (is_bench) {
        bench(d, m, (int)steps, builtin);
        cb_model_free(m);
        cb_dist_finalize(d);
        return 0;
    }

    int first, count;
    size_t np, na;
    cb_model_rows(m, &first, &count);
    cb_model_sizes(m, &np, &na);
    if (cb_dist_rank(d) == 0) {
        printf("# rank 0: %zu parameters, %zu AdamW moments\n", np, na);
        printf("# rank 0: %zu activation bytes\n", cb_model_activation_bytes(m));
        printf("# precision: %s\n", cb_dist_precision(d));
    }
    /* --resume FILE continues a run that --checkpoint FILE saved (with
     * --stop-after N: after N steps); the learning-rate schedule is the
     * whole run's (--steps) either way */
    int s0 = 0, stop = stop_s ? atoi(stop_s) : (int)steps;
    if (resume && cb_model_load_checkpoint(m, resume, &s0, &e)) cb_dist_exit(d, &e);
    int *ids = malloc(sizeof(int) * count * T), *tg = malloc(sizeof(int) * count * T);
    int *lens = malloc(sizeof(int) * count);
    if (masked) cb_model_set_lengths(m, lens);
    size_t run = (size_t)B * T + 1, nruns = tok.n / run;
    for (int s = s0; s < steps && s < stop; s++) {
        size_t base = (s % nruns) * run + (size_t)first * T; /* the stream may be several shards */
        cb_tokens_read(&tok, base, (size_t)count * T, ids);
        cb_tokens_read(&tok, base + 1, (size_t)count * T, tg);
        for (int b = 0; b < count; b++) lens[b] = ((first + b) * 5 + s) % (T + 1);
        float norm, loss = cb_model_train_step(m, ids, tg, s, &norm);
        if (cb_dist_rank(d) == 0) printf("step %d loss %.9g grad_norm %.9g\n", s + 1, loss, norm);
    }
    cb_model_step_info in;
    cb_model_last_step(m, &in);
    if (cb_dist_rank(d) == 0 && steps > s0)
        printf("# rank 0: last step %.3f ms: forward %.3f, backward %.3f, waiting %.3f, update "
               "%.3f, bubble %.3f\n", in.step_ms, in.forward_ms, in.backward_ms, in.wait_ms,
               in.update_ms, in.bubble);
    if (save && cb_model_save(m, save, &e)) cb_dist_exit(d, &e);
    int done = steps < stop ? (int)steps : stop;
    if (ckpt && cb_model_save_checkpoint(m, ckpt, done, &e)) cb_dist_exit(d, &e);
    free(ids);
    free(tg);
    free(lens);
    cb_model_free(m);
    cb_tokens_close(&tok);
    cb_dist_finalize(d);
    return 0;
}
