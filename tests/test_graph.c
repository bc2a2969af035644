/* The graph engine in one process: the GPT declared from the public layers
 * (cb_model_declare_gpt) gives next-token probabilities (cb_model_probs)
 * whose rows sum to 1 and whose mean -log p(target) is the loss the
 * engine's cross-entropy reports for the same batch (cb_model_eval);
 * declaration mistakes end cb_model_build with CB_EINPUT and a message
 * that names the layer and the fix. (Against PyTorch: test_hf_weights.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"

static int failures;

static void check(int ok, const char *what, const char *detail) {
    printf("%s graph: %s%s%s\n", ok ? "PASS" : "FAIL", what, detail[0] ? ": " : "", detail);
    failures += !ok;
}

enum { B = 2, T = 8, C = 16, NH = 2, V = 64, NL = 2 };

static const cb_adamw_config OPT = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                    .clip = 1.0f, .steps = 10};

/* Rows sum to 1 within 1e-5 (V = 64 floats summed); the two losses
 * within 1e-5 relative: log of a float probability against the
 * cross-entropy's log-sum-exp, each rounded in float. */
static void probabilities(cb_dist *d) {
    cb_gpt_config c = {NL, C, NH, T, V};
    int ids[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (i * 7 + 3) % V, tg[i] = (i * 5 + 1) % V;
    cb_err e = {0};
    cb_model *m = cb_model_new(d, B, T);
    cb_model_declare_gpt(m, &c);
    int ok = !cb_model_build(m, 1337, &OPT, &e);
    const float *p = ok ? cb_model_probs(m, ids) : NULL;
    double rowerr = 0, nll = 0;
    for (int r = 0; p && r < B * T; r++) {
        double sum = 0;
        for (int v = 0; v < V; v++) sum += p[(size_t)r * V + v];
        rowerr = fmax(rowerr, fabs(sum - 1));
        nll -= log(p[(size_t)r * V + tg[r]]) / (B * T);
    }
    float loss = p ? cb_model_eval(m, ids, tg) : 0;
    double rel = fabs(nll - loss) / fabs(loss);
    char s[700];
    snprintf(s, sizeof s, "max |row sum - 1| %.2e; mean -log p(target) %.7f, eval loss %.7f, rel %.2e%s%s",
             rowerr, nll, loss, rel, e.code ? "; " : "", e.msg);
    check(p && rowerr <= 1e-5 && rel <= 1e-5, "GPT graph's probabilities agree with its loss", s);
    cb_model_free(m);
}

/* Builds the model declare() makes; expects CB_EINPUT with want in the message. */
static void refused(cb_dist *d, const char *what, void (*declare)(cb_model *), const char *want) {
    cb_model *m = cb_model_new(d, B, T);
    declare(m);
    cb_err e = {0};
    int rc = cb_model_build(m, 1, &OPT, &e);
    char s[700];
    snprintf(s, sizeof s, "status %d, \"%s\"", rc, e.msg);
    check(rc == CB_EINPUT && strstr(e.msg, want) && !strchr(e.msg, '\n'), what, s);
    cb_model_free(m);
}

static cb_act *embed(cb_model *m, cb_layer **emb) {
    *emb = cb_model_embedding(m, "wte", V, C);
    return cb_op_embedding(*emb);
}

static void width_mismatch(cb_model *m) {
    cb_layer *emb;
    cb_act *x = embed(m, &emb);
    cb_op_lm_loss(emb, cb_op_linear(cb_model_linear(m, "fc", 2 * C, C), x));
}

static void parity_mismatch(cb_model *m) { /* one linear on parities 0 and 1 */
    cb_layer *emb, *sq = cb_model_linear(m, "square", C, C);
    cb_act *x = embed(m, &emb);
    cb_act *y = cb_op_linear(sq, x);
    cb_op_lm_loss(emb, cb_op_linear(sq, y));
}

static void unused_layer(cb_model *m) {
    cb_layer *emb;
    cb_act *x = embed(m, &emb);
    cb_model_layernorm(m, "ln_unused", C);
    cb_op_lm_loss(emb, x);
}

static void no_loss(cb_model *m) {
    cb_layer *emb;
    embed(m, &emb);
}

static void same_name(cb_model *m) {
    cb_layer *emb;
    cb_act *x = embed(m, &emb);
    x = cb_op_layernorm(cb_model_layernorm(m, "ln", C), x);
    cb_op_lm_loss(emb, cb_op_layernorm(cb_model_layernorm(m, "ln", C), x));
}

static void attention_on_plain(cb_model *m) {
    cb_layer *emb;
    cb_act *x = embed(m, &emb);
    cb_act *h = cb_op_linear(cb_model_linear(m, "fc", C, 3 * C), x);
    cb_act *a = cb_op_attention(cb_model_attention(m, "attn", C, NH), h);
    cb_op_lm_loss(emb, cb_op_linear(cb_model_linear(m, "proj", C, C), a));
}

static void add_mismatch(cb_model *m) {
    cb_layer *emb;
    cb_act *x = embed(m, &emb);
    cb_act *u = cb_op_linear(cb_model_linear(m, "up", C, 2 * C), x);
    cb_op_lm_loss(emb, cb_op_add(x, u));
}

static void lengths_unpadded(cb_model *m) { /* length sets on a layer without padding */
    cb_layer *emb;
    cb_act *x = embed(m, &emb);
    cb_act *h = cb_op_linear(cb_model_linear_qkv(m, "qkv", C), x);
    cb_layer *at = cb_model_attention(m, "attn", C, NH);
    cb_layer_use_lengths(at, 1, 0);
    cb_op_lm_loss(emb, cb_op_linear(cb_model_linear(m, "proj", C, C), cb_op_attention(at, h)));
}

static void sinusoid_on_linear(cb_model *m) {
    cb_layer *emb;
    cb_act *x = embed(m, &emb);
    cb_layer *fc = cb_model_linear(m, "fc", C, C);
    cb_layer_set_sinusoidal(fc);
    cb_op_lm_loss(emb, cb_op_linear(fc, x));
}

static void bad_smoothing(cb_model *m) {
    cb_layer *emb;
    cb_act *x = embed(m, &emb);
    cb_layer_set_loss(emb, 1.5f, -1);
    cb_op_lm_loss(emb, x);
}

int main(int argc, char **argv) {
    cb_dist *d;
    cb_err e = {0};
    if (cb_dist_init(&argc, &argv, &d, &e)) {
        printf("FAIL graph: cb_dist_init: %s\n", e.msg);
        return 1;
    }
    probabilities(d);
    refused(d, "a linear's width differs from its input's", width_mismatch,
            "linear fc takes 32 features; its input has 16");
    refused(d, "a shared layer on two parities", parity_mismatch,
            "a shared layer needs inputs of the same parity");
    refused(d, "a layer declared and never used", unused_layer, "ln_unused is declared but never used");
    refused(d, "a graph without a loss", no_loss, "end the graph with cb_op_lm_loss");
    refused(d, "two layers of one name", same_name, "two layers are named ln");
    refused(d, "attention on a plain linear's output", attention_on_plain,
            "reads the output of a cb_model_linear_qkv");
    refused(d, "an add of two shapes", add_mismatch, "add activations of one shape");
    refused(d, "length sets on an unpadded attention", lengths_unpadded,
            "attention attn: length sets 1, 0 need CB_ATTN_PADDED");
    refused(d, "label smoothing outside [0, 1)", bad_smoothing,
            "label smoothing 1.5 and ignored target -1; pass a smoothing in [0, 1)");
    refused(d, "sinusoidal positions on a linear", sinusoid_on_linear,
            "cb_layer_set_sinusoidal takes a layer of the matching kind; fc is not one");
    cb_dist_finalize(d);
    return failures != 0;
}
