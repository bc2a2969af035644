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

static const char *rc_name(gpt_rc rc) {
    static char buf[4][48];
    static int i;
    char *b = buf[i++ % 4];
    const char *m[] = {"none", "block", "selective"};
    if (rc.mode != GPT_RECOMPUTE_BLOCK) snprintf(b, 48, "%s", m[rc.mode]);
    else snprintf(b, 48, "block %s %d", rc.uniform ? "uniform" : "first", rc.layers);
    return b;
}

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

static void run(int cut, gpt_rc rc) {
    cb_gpt_config c = {3, 32, 4, 8, 64};
    int B = 2, T = 8, N = B * T;
    cb_err e;
    cb_gpt *whole, *a, *b;
    gpt_stage_opts sa = {0, cut, 2, rc}, sb = {cut, c.n_layer + 2, 2, rc};
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
    snprintf(what, sizeof what, "stages [0,%d) [%d,%d) recompute %s: loss", cut, cut,
             c.n_layer + 2, rc_name(rc));
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
    snprintf(what, sizeof what, "stages [0,%d) [%d,%d) recompute %s: every gradient", cut, cut,
             c.n_layer + 2, rc_name(rc));
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

static void run_whole(gpt_rc rc) {
    cb_gpt_config c = {3, 32, 4, 8, 64};
    int B = 2, T = 8, N = B * T;
    cb_err e;
    cb_gpt *none, *r;
    gpt_stage_opts st = {0, c.n_layer + 2, 1, rc};
    if (gpt_create_serial(&c, B, T, NULL, &none, &e) || gpt_create_serial(&c, B, T, &st, &r, &e)) {
        printf("FAIL whole model recompute %s: %s\n", rc_name(rc), e.msg);
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
    snprintf(what, sizeof what, "whole model recompute %s: loss and every gradient = none",
             rc_name(rc));
    check(d <= 1e-6, "%s max rel diff %.2e", what, d);
    /* one slot: keeping every block's input saves (block(all), uniform
     * groups shorter than the model, selective); a partial block rerun or
     * one group of every block does not */
    if (rc.mode == GPT_RECOMPUTE_SELECTIVE || rc.layers == 0 || (rc.uniform && rc.layers < 3)) {
        snprintf(what, sizeof what, "whole model recompute %s: activation floats < none",
                 rc_name(rc));
        check(r->act_floats < none->act_floats, "%s ratio %.3f", what,
              (double)r->act_floats / none->act_floats);
    }
    cb_gpt_free(none);
    cb_gpt_free(r);
}

/* Planned activation floats of stage [0, 4) (the 3 blocks) with 2 slots. */
static size_t stage_floats(gpt_rc rc) {
    cb_gpt_config c = {3, 32, 4, 8, 64};
    gpt_stage_opts st = {0, 4, 2, rc};
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

static void refusals(void) {
    struct {
        const char *mode, *method;
        int layers;
        const char *want;
    } bad[] = {{"block", "blocks", 0, "use uniform or block"},
               {"none", "uniform", 2, "needs --recompute block"},
               {"selective", "block", 0, "needs --recompute block"},
               {"block", "uniform", -1, "must be >= 0"},
               {"none", NULL, 2, "needs --recompute block"}};
    for (int i = 0; i < 5; i++) {
        gpt_rc rc;
        cb_err e = {0};
        int r = gpt_recompute_parse(bad[i].mode, bad[i].method, bad[i].layers, &rc, &e);
        int ok = r == CB_EINPUT && strstr(e.msg, bad[i].want) && !strchr(e.msg, '\n');
        fails += !ok;
        printf("%s --recompute %s --recompute-method %s --recompute-layers %d refused: %s\n",
               ok ? "PASS" : "FAIL", bad[i].mode, bad[i].method ? bad[i].method : "-",
               bad[i].layers, e.msg);
    }
    gpt_rc rc;
    cb_err e;
    int ok = !gpt_recompute_parse("block", "uniform", 0, &rc, &e) && rc.uniform && rc.layers == 1;
    fails += !ok;
    printf("%s --recompute block --recompute-method uniform: groups of 1 by default\n",
           ok ? "PASS" : "FAIL");
}

int main(void) {
    const gpt_rc none = {0}, block = {GPT_RECOMPUTE_BLOCK, 0, 0}, sel = {GPT_RECOMPUTE_SELECTIVE, 0, 0};
    run(2, none); /* embedding + block 0 | blocks 1, 2 + head */
    run(2, block);
    run(2, sel);
    run(1, none); /* embedding alone | everything else */
    run(1, sel);
    run(4, block); /* all blocks | head alone */
    run(4, sel);
    run_whole(block);
    run_whole(sel);
    /* --recompute-layers: block recompute of the first n blocks of a stage */
    run(4, (gpt_rc){GPT_RECOMPUTE_BLOCK, 1, 0}); /* blocks 0 rerun, 1-2 kept | head */
    run(2, (gpt_rc){GPT_RECOMPUTE_BLOCK, 1, 0}); /* stage b: block 1 rerun, block 2 (last, head) kept */
    run(1, (gpt_rc){GPT_RECOMPUTE_BLOCK, 2, 0}); /* stage b: blocks 0-1 rerun, 2 kept, head */
    run_whole((gpt_rc){GPT_RECOMPUTE_BLOCK, 1, 0});
    run_whole((gpt_rc){GPT_RECOMPUTE_BLOCK, 2, 0});
    /* --recompute-method uniform: groups of k blocks rerun together */
    for (int k = 1; k <= 4; k++) {
        gpt_rc u = {GPT_RECOMPUTE_BLOCK, k, 1};
        run(1, u); /* stage b: blocks 0-2 + head, groups {0..k-1}, ... */
        run(4, u); /* stage a: embedding + blocks 0-2 */
        run_whole(u);
    }
    run(2, (gpt_rc){GPT_RECOMPUTE_BLOCK, 2, 1}); /* stage b: blocks 1-2 + head, one group */
    size_t fn = stage_floats(none), f1 = stage_floats((gpt_rc){GPT_RECOMPUTE_BLOCK, 1, 0});
    size_t fa = stage_floats(block);
    check(fa > 0 && fa < f1 && f1 < fn, "%s block(1)/none %.3f",
          "stage of 3 blocks, 2 slots: activation floats block(all) < block(1) < none:",
          fn ? (double)f1 / fn : 0.0);
    size_t u[5];
    for (int k = 1; k <= 4; k++) u[k] = stage_floats((gpt_rc){GPT_RECOMPUTE_BLOCK, k, 1});
    char what[200];
    snprintf(what, sizeof what, "stage of 3 blocks, 2 slots, uniform groups of k: block(all) = "
             "uniform(1) < uniform(2) < uniform(3) = uniform(4) < none:%s", "");
    check(u[1] == fa && u[1] < u[2] && u[2] < u[3] && u[3] == u[4] && u[3] < fn, "%s uniform(2)/none %.3f",
          what, fn ? (double)u[2] / fn : 0.0);
    printf("  (floats: none %zu, block 1 of 3 %zu, block all %zu, uniform 1/2/3 %zu/%zu/%zu)\n", fn,
           f1, fa, u[1], u[2], u[3]);
    refusals();
    return fails != 0;
}
