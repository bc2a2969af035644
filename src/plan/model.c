/* Models as data for the planner: per layer kind, the forward GEMMs, the
 * attention FLOPs and the memory-bound traffic per token, and the
 * parameters. Adding a model is adding a function that fills these rows. */
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"

/* GPT-2: wte (V,C) + wpe (T,C); blocks of LayerNorm, QKV C->3C, attention,
 * proj C->C, LayerNorm, fc C->4C, GELU, fc-proj 4C->C, two residuals; ln_f
 * and the tied head C->V with cross-entropy.
 * Memory-bound forward bytes per token, fp32: a LayerNorm reads and writes
 * C floats (8C bytes), GELU reads and writes 4C (32C), a residual reads two
 * and writes one (12C); the head's cross-entropy reads and writes V logits.
 * Softmax inside attention is in the attention kernel's measured rate. */
void cb_plan_model_gpt(const cb_gpt_config *c, cb_plan_model *m) {
    double C = c->d_model, T = c->seq_len, V = c->vocab;
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "gpt");
    m->gpt = *c;
    m->T = c->seq_len;
    m->nlayer = 3;
    m->layer[0] = (cb_plan_layer){"embed", 1, 0, {{0, 0}}, 0, 0, 0, 12 * C, (V + T) * C, {0, 0}, 0};
    m->layer[1] = (cb_plan_layer){"block",
                                  c->n_layer,
                                  4,
                                  {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}},
                                  4 * T * C,
                                  C / c->n_head,
                                  32 * C,
                                  2 * 8 * C + 2 * 12 * C,
                                  12 * C * C + 13 * C,
                                  {0, 0},
                                  T};
    m->layer[2] = (cb_plan_layer){"head", 1, 1, {{C, V}}, 0, 0, 12 * V, 8 * C, 2 * C, {0, 0}, 0};
}

double cb_plan_model_params(const cb_plan_model *m) {
    double p = 0;
    for (int i = 0; i < m->nlayer; i++) p += m->layer[i].count * m->layer[i].params;
    return p;
}

double cb_plan_model_flops(const cb_plan_model *m) {
    double f = 0;
    for (int i = 0; i < m->nlayer; i++) {
        const cb_plan_layer *l = &m->layer[i];
        double g = l->attn_flops;
        for (int j = 0; j < l->ngemm; j++) g += 2 * l->gemm[j].in * l->gemm[j].out;
        f += l->count * g;
    }
    return f;
}
