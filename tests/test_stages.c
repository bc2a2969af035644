/* The GPT split into modules: two stages in one process, fed by hand, with
 * two micro-batches in flight (forward 0, forward 1, backward 0, backward
 * 1), with recompute none, block and selective, must give the whole
 * model's losses and gradients: the mechanics pipeline parallelism
 * schedules across ranks. The tied wte lives on both stages; the sum of
 * their gradients is the whole model's. Tolerance 1e-6 relative: the same
 * kernels on the same numbers, only wte's two halves are added in another
 * order. The whole model (one slot, the path without --pp) under block and
 * selective recompute gives the same losses and gradients as none, to
 * 1e-6 too (recompute reruns the same kernels: 0 expected), and selective
 * plans fewer activation floats than none. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"
#include "model/gpt_internal.h"

static int fails;

static const float *grad_of(cb_gpt *m, const char *name) {
    for (int i = 0; i < m->pt.n; i++)
        if (!strcmp(m->pt.t[i].name, name)) return m->grads + m->pt.t[i].offset;
    return NULL;
}

static double rel(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / (den > 0 ? den : 1);
}

static void check(int ok, const char *fmt, const char *what, double v) {
    if (!ok) fails++;
    printf("%s ", ok ? "PASS" : "FAIL");
    printf(fmt, what, v);
    printf("\n");
}

static void run(int cut, int recompute, int nrc) {
    cb_gpt_config c = {3, 32, 4, 8, 64};
    int B = 2, T = 8, N = B * T;
    cb_err e;
    cb_gpt *whole, *a, *b;
    gpt_stage_opts sa = {0, cut, 2, recompute, nrc}, sb = {cut, c.n_layer + 2, 2, recompute, nrc};
    if (gpt_create(&c, B, T, cb_layout_serial(), NULL, &whole, &e) ||
        gpt_create(&c, B, T, cb_layout_serial(), &sa, &a, &e) ||
        gpt_create(&c, B, T, cb_layout_serial(), &sb, &b, &e)) {
        printf("FAIL stages: %s\n", e.msg);
        fails++;
        return;
    }
    cb_gpt_init_random(whole, 5);
    cb_gpt_init_random(a, 5);
    cb_gpt_init_random(b, 5);
    int ids[2][16], tg[2][16];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++) ids[k][i] = (i * 7 + k * 3) % 64, tg[k][i] = (i * 5 + k) % 64;
    double lw = 0, ls = 0;
    for (int k = 0; k < 2; k++) {
        lw += cb_gpt_forward(whole, ids[k], tg[k], B, T);
        cb_gpt_backward(whole, 0.5f);
    }
    for (int k = 0; k < 2; k++) {
        gpt_stage_forward(a, k, ids[k], NULL, B, T);
        memcpy(gpt_stage_input(b, k), gpt_stage_output(a, k), sizeof(float) * gpt_act_floats(a));
        ls += gpt_stage_forward(b, k, NULL, tg[k], B, T);
    }
    for (int k = 0; k < 2; k++) {
        gpt_stage_backward(b, k, 0.5f, NULL);
        gpt_stage_backward(a, k, 0.5f, gpt_stage_dinput(b));
    }
    char what[128];
    snprintf(what, sizeof what, "stages [0,%d) [%d,%d) recompute %d: loss", cut, cut,
             c.n_layer + 2, recompute);
    check(fabs(lw - ls) <= 1e-6 * fabs(lw), "%s rel diff %.2e", what, fabs(lw - ls) / fabs(lw));
    double worst = 0;
    for (int i = 0; i < whole->pt.n; i++) {
        const cb_tensor_info *t = &whole->pt.t[i];
        const float *ga = grad_of(a, t->name), *gb = grad_of(b, t->name);
        float *sum = calloc(t->numel, sizeof(float));
        for (size_t j = 0; j < t->numel; j++) sum[j] = (ga ? ga[j] : 0) + (gb ? gb[j] : 0);
        double r = rel(sum, whole->grads + t->offset, t->numel);
        worst = r > worst ? r : worst;
        free(sum);
    }
    snprintf(what, sizeof what, "stages [0,%d) [%d,%d) recompute %d: every gradient", cut, cut,
             c.n_layer + 2, recompute);
    check(worst <= 1e-6, "%s max rel diff %.2e", what, worst);
    cb_layout *la = a->L, *lb = b->L, *lwh = whole->L;
    cb_gpt_free(whole);
    cb_gpt_free(a);
    cb_gpt_free(b);
    cb_layout_free(la);
    cb_layout_free(lb);
    cb_layout_free(lwh);
}

/* Two micro-batches accumulated through the whole model; returns the loss sum. */
static double two_steps(cb_gpt *m, int ids[2][16], int tg[2][16], int B, int T) {
    double l = 0;
    for (int k = 0; k < 2; k++) {
        l += cb_gpt_forward(m, ids[k], tg[k], B, T);
        cb_gpt_backward(m, 0.5f);
    }
    return l;
}

static void run_whole(int recompute, int nrc) {
    cb_gpt_config c = {3, 32, 4, 8, 64};
    int B = 2, T = 8, N = B * T;
    cb_err e;
    cb_gpt *none, *r;
    gpt_stage_opts st = {0, c.n_layer + 2, 1, recompute, nrc};
    if (gpt_create_serial(&c, B, T, NULL, &none, &e) || gpt_create_serial(&c, B, T, &st, &r, &e)) {
        printf("FAIL whole model recompute %d/%d: %s\n", recompute, nrc, e.msg);
        fails++;
        return;
    }
    cb_gpt_init_random(none, 5);
    cb_gpt_init_random(r, 5);
    int ids[2][16], tg[2][16];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++) ids[k][i] = (i * 3 + k * 5) % 64, tg[k][i] = (i * 11 + k) % 64;
    double ln = two_steps(none, ids, tg, B, T), lr = two_steps(r, ids, tg, B, T);
    double d = fmax(fabs(lr - ln) / fabs(ln), rel(r->grads, none->grads, none->pt.nparams));
    char what[96];
    snprintf(what, sizeof what, "whole model recompute %d (blocks %d): loss and every gradient = none",
             recompute, nrc);
    check(d <= 1e-6, "%s max rel diff %.2e", what, d);
    if (recompute == GPT_RECOMPUTE_SELECTIVE) {
        snprintf(what, sizeof what, "whole model recompute %d: activation floats < none",
                 recompute);
        check(r->act_floats < none->act_floats, "%s ratio %.3f", what,
              (double)r->act_floats / none->act_floats);
    }
    cb_gpt_free(none);
    cb_gpt_free(r);
}

/* Planned activation floats of stage [0, 4) (the 3 blocks) with 2 slots. */
static size_t stage_floats(int recompute, int nrc) {
    cb_gpt_config c = {3, 32, 4, 8, 64};
    gpt_stage_opts st = {0, 4, 2, recompute, nrc};
    cb_gpt *m;
    cb_err e;
    cb_layout *L = cb_layout_serial();
    size_t n = 0;
    if (L && !gpt_create(&c, 2, 8, L, &st, &m, &e)) {
        n = m->act_floats;
        cb_gpt_free(m);
    }
    cb_layout_free(L);
    return n;
}

int main(void) {
    run(2, GPT_RECOMPUTE_NONE, 0); /* embedding + block 0 | blocks 1, 2 + head */
    run(2, GPT_RECOMPUTE_BLOCK, 0);
    run(2, GPT_RECOMPUTE_SELECTIVE, 0);
    run(1, GPT_RECOMPUTE_NONE, 0); /* embedding alone | everything else */
    run(1, GPT_RECOMPUTE_SELECTIVE, 0);
    run(4, GPT_RECOMPUTE_BLOCK, 0); /* all blocks | head alone */
    run(4, GPT_RECOMPUTE_SELECTIVE, 0);
    run_whole(GPT_RECOMPUTE_BLOCK, 0);
    run_whole(GPT_RECOMPUTE_SELECTIVE, 0);
    /* --recompute-layers: block recompute of the first n blocks of a stage */
    run(4, GPT_RECOMPUTE_BLOCK, 1); /* blocks 0 rerun, 1-2 kept | head */
    run(2, GPT_RECOMPUTE_BLOCK, 1); /* stage b: block 1 rerun, block 2 (last, head) kept */
    run(1, GPT_RECOMPUTE_BLOCK, 2); /* stage b: blocks 0-1 rerun, 2 kept, head */
    run_whole(GPT_RECOMPUTE_BLOCK, 1);
    run_whole(GPT_RECOMPUTE_BLOCK, 2);
    size_t fn = stage_floats(GPT_RECOMPUTE_NONE, 0), f1 = stage_floats(GPT_RECOMPUTE_BLOCK, 1);
    size_t fa = stage_floats(GPT_RECOMPUTE_BLOCK, 0);
    check(fa > 0 && fa < f1 && f1 < fn, "%s block(1)/none %.3f",
          "stage of 3 blocks, 2 slots: activation floats block(all) < block(1) < none:",
          fn ? (double)f1 / fn : 0.0);
    printf("  (floats: none %zu, block 1 of 3 %zu, block all %zu)\n", fn, f1, fa);
    return fails != 0;
}
