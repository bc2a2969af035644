/* Issue 13's layers through the graph engine, for tests/test_nmt_layers.sh:
 *
 *   test_nmt_layers --model sinusoid|lengths --data train.bin --steps 30 --save out.st [layout flags]
 *
 * --model sinusoid: fixed sinusoidal positions (cb_layer_set_sinusoidal)
 * in an MLP language model (no attention).
 * --model smooth: the same with label smoothing 0.1 and padding targets
 * (0) left out of the loss (cb_layer_set_loss): row r of step s ends in
 * (r + s) % 8 of them.
 * --model lengths: two length sets (cb_model_set_lengths_set,
 * cb_layer_use_lengths) in a toy encoder-decoder on one token stream: the
 * "encoder" is bidirectional self-attention padded by set 0 (the source
 * lengths), the "decoder" causal self-attention padded by set 1 (the target
 * lengths), and the cross-attention queries by set 1 over keys by set 0.
 * Row r of step s has source length (5r + s) % (T + 1) and target length
 * (3r + 2s + 1) % (T + 1), 0 and T included.
 *
 * --model shared: the encoder-decoder of those pieces: two id fields a
 * position (source, decoder input; cb_op_embedding_field) looked up in one
 * table with fixed sinusoids that is also the output projection, the
 * encoder padded by the source lengths, the decoder by the target lengths,
 * cross-attention, label smoothing 0.1 and padding targets left out.
 *
 * All train with the user's loop on sequential batches and print
 * "step N loss L grad_norm G" lines (tests/compare.py logs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"

enum { B = 8, T = 16, C = 32, NH = 4, V = 256, SRC = 0, TGT = 1, NBLOCK = 2 };
enum { IGNORE = 0 }; /* --model smooth: the padding target, left out */
/* initial weights of the attention inputs and the embedding (lengths):
 * large enough that the masks move the loss visibly (0.02 moves it by 1e-4) */
#define SD 0.3f

static void declare_sinusoid(cb_model *m, int smooth) {
    char s[48];
    cb_layer *emb = cb_model_embedding(m, "emb", V, C);
    cb_layer_set_sinusoidal(emb);
    if (smooth) cb_layer_set_loss(emb, 0.1f, IGNORE);
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

/* x + proj(attention of ln(x)) with the given masks and length sets */
static cb_act *self_block(cb_model *m, const char *p, cb_act *x, unsigned flags, int set) {
    char s[48];
    snprintf(s, sizeof s, "%s.ln", p);
    cb_act *h = cb_op_layernorm(cb_model_layernorm(m, s, C), x);
    snprintf(s, sizeof s, "%s.qkv", p);
    cb_layer *lq = cb_model_linear_qkv(m, s, C);
    cb_layer_set_init_std(lq, SD);
    cb_act *qkv = cb_op_linear(lq, h);
    snprintf(s, sizeof s, "%s.attn", p);
    cb_layer *at = cb_model_attention_flags(m, s, C, NH, flags | CB_ATTN_PADDED);
    cb_layer_use_lengths(at, set, set);
    snprintf(s, sizeof s, "%s.proj", p);
    return cb_op_add(x, cb_op_linear(cb_model_linear(m, s, C, C), cb_op_attention(at, qkv)));
}

/* y + proj(cross-attention of ln(y)'s target queries over enc's source keys) */
static cb_act *cross_block(cb_model *m, cb_act *y, cb_act *enc) {
    cb_act *h = cb_op_layernorm(cb_model_layernorm(m, "x.ln", C), y);
    cb_layer *lq = cb_model_linear(m, "x.q", C, C), *lkv = cb_model_linear_kv(m, "x.kv", C);
    cb_layer_set_init_std(lq, SD);
    cb_layer_set_init_std(lkv, SD);
    cb_act *q = cb_op_linear(lq, h), *kv = cb_op_linear(lkv, enc);
    cb_layer *at = cb_model_attention_flags(m, "x.attn", C, NH, CB_ATTN_PADDED);
    cb_layer_use_lengths(at, TGT, SRC);
    return cb_op_add(y, cb_op_linear(cb_model_linear(m, "x.proj", C, C), cb_op_cross_attention(at, q, kv)));
}

/* encoder block on xs, decoder block on xt with cross-attention, the tied head */
static void enc_dec(cb_model *m, cb_layer *emb, cb_act *xs, cb_act *xt) {
    cb_model_begin_block(m);
    cb_act *enc = self_block(m, "enc", xs, 0, SRC);
    cb_model_end_block(m);
    cb_model_begin_block(m);
    cb_act *y = cross_block(m, self_block(m, "dec", xt, CB_ATTN_CAUSAL, TGT), enc);
    cb_model_end_block(m);
    cb_op_lm_loss(emb, cb_op_layernorm(cb_model_layernorm(m, "ln_f", C), y));
}

static void declare_lengths(cb_model *m) {
    cb_layer *emb = cb_model_embedding(m, "emb", V, C);
    cb_layer_set_init_std(emb, SD);
    cb_act *x = cb_op_embedding(emb);
    enc_dec(m, emb, x, x);
}

/* The encoder-decoder: two id fields a position (source, decoder input)
 * looked up in one table with fixed sinusoids, which is also the output
 * projection; smoothed loss, padding targets left out. */
static void declare_shared(cb_model *m) {
    cb_model_set_id_fields(m, 2);
    cb_layer *emb = cb_model_embedding(m, "emb", V, C);
    cb_layer_set_init_std(emb, SD);
    cb_layer_set_sinusoidal(emb);
    cb_layer_set_loss(emb, 0.1f, IGNORE);
    cb_act *xs = cb_op_embedding_field(emb, 0);
    enc_dec(m, emb, xs, cb_op_embedding_field(emb, 1));
}

/* --model shared's batch rows: field 0 the source run[t], field 1 the
 * decoder's input run[t + 1], target run[t + 2], each padded past its
 * length (run: count * T + 2 tokens of this rank's rows) */
static void shared_rows(const int *run, int count, const int *src, const int *tgt, int *ids, int *tg) {
    for (int b = 0; b < count; b++)
        for (int t = 0; t < T; t++) {
            const int *r = run + b * T + t;
            ids[2 * (b * T + t)] = t < src[b] ? r[0] : IGNORE;
            ids[2 * (b * T + t) + 1] = t < tgt[b] ? r[1] : IGNORE;
            tg[b * T + t] = t < tgt[b] ? r[2] : IGNORE;
        }
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
    const char *model = arg_str(argc, argv, "--model");
    int sinusoid = model && !strcmp(model, "sinusoid"), smooth = model && !strcmp(model, "smooth");
    int shared = model && !strcmp(model, "shared");
    if (!sinusoid && !smooth && !shared && !(model && !strcmp(model, "lengths")))
        cb_fail(&e, CB_EINPUT, "pass --model sinusoid, smooth, lengths or shared");
    if (e.code) cb_dist_exit(d, &e);
    cb_model *m = cb_model_new(d, B, T);
    if (sinusoid || smooth) declare_sinusoid(m, smooth);
    else if (shared) declare_shared(m);
    else declare_lengths(m);
    /* eps 1e-3: the key biases' gradient is zero in exact arithmetic (softmax
     * ignores a constant added to a row of scores), so what they get is
     * rounding noise (~1e-9) that depends on each layout's order of sums;
     * Adam with a small eps turns that noise into steps of lr and the layouts'
     * key biases apart, eps 1e-3 into steps of ~1e-6 lr. Decay on embeddings:
     * the fixed sinusoidal table must be exempt */
    cb_adamw_config opt = {.lr = 3e-3f, .min_lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-3f,
                           .weight_decay = 0.1f, .clip = 1.0f, .warmup = 3, .steps = steps,
                           .decay_embeddings = 1};
    if (cb_model_build(m, 1337, &opt, &e)) cb_dist_exit(d, &e);
    int first, count;
    cb_model_rows(m, &first, &count);
    int *ids = malloc(sizeof(int) * count * T * 2), *tg = malloc(sizeof(int) * count * T);
    int *src = malloc(sizeof(int) * count), *tgt = malloc(sizeof(int) * count);
    int *rows = malloc(sizeof(int) * (count * T + 2));
    cb_model_set_lengths_set(m, SRC, src);
    cb_model_set_lengths_set(m, TGT, tgt);
    size_t run = (size_t)B * T + 1, nruns = (tok.n - 1) / run;
    for (int s = 0; s < steps; s++) {
        size_t base = (s % nruns) * run + (size_t)first * T;
        cb_tokens_read(&tok, base, (size_t)count * T, ids);
        cb_tokens_read(&tok, base + 1, (size_t)count * T, tg);
        for (int b = 0; b < count; b++) {
            src[b] = (5 * (first + b) + s) % (T + 1);
            tgt[b] = (3 * (first + b) + 2 * s + 1) % (T + 1);
        }
        if (shared) cb_tokens_read(&tok, base, (size_t)count * T + 2, rows);
        if (shared) shared_rows(rows, count, src, tgt, ids, tg);
        for (int b = 0; smooth && b < count; b++)
            for (int t = T - (first + b + s) % 8; t < T; t++) tg[b * T + t] = IGNORE;
        float norm, loss = cb_model_train_step(m, ids, tg, s, &norm);
        if (cb_dist_rank(d) == 0) printf("step %d loss %.9g grad_norm %.9g\n", s + 1, loss, norm);
    }
    if (save && cb_model_save(m, save, &e)) cb_dist_exit(d, &e);
    free(ids), free(tg), free(src), free(tgt), free(rows);
    cb_model_free(m);
    cb_tokens_close(&tok);
    cb_dist_finalize(d);
    return 0;
}
