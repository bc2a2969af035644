/* `cubist train --layout auto`: the planner's best layout for the ranks
 * the job was launched with. */
#include <stdio.h>
#include <stdlib.h>

#include "plan/plan.h"

#define CAP 8192

static int plain(const cb_plan_layout *l) { return !l->recompute && !l->zero; }

static void explain(const cb_plan_choice *b, const cb_plan_choice *next, int fits, char *why,
                    size_t cap) {
    char nb[96], nn[96] = "none";
    const cb_plan_pred *p = &b->p;
    cb_plan_layout_name(&b->l, nb, sizeof nb);
    if (next) cb_plan_layout_name(&next->l, nn, sizeof nn);
    snprintf(why, cap, "%s: predicted %.2f ms per step (compute %.2f, tensor %.2f, pipeline "
             "%.2f + bubble %.2f, data-parallel exposed %.2f, optimizer %.2f), %.3f GB per "
             "device; fastest of %d layouts that fit; next: %s %.2f ms", nb, 1e3 * p->step_s,
             1e3 * p->compute_s, 1e3 * p->tp_s, 1e3 * p->pp_s, 1e3 * p->bubble_s,
             1e3 * p->dp_exposed_s, 1e3 * p->opt_s, p->mem_total / 1e9, fits, nn,
             next ? 1e3 * next->p.step_s : 0.0);
}

int cb_plan_auto(const cb_plan_job *j, int world, int M, cb_plan_layout *best, char *why,
                 size_t cap, cb_err *e) {
    cb_plan_choice *ch = malloc(sizeof *ch * CAP);
    if (!ch) return cb_fail(e, CB_ENOMEM, "out of memory planning the layout");
    int n = cb_plan_enumerate(j, world, 0, M, ch, CAP), first = -1, second = -1, fits = 0;
    for (int i = 0; i < (n < CAP ? n : CAP); i++) {
        if (!plain(&ch[i].l)) continue;
        fits++;
        if (first < 0) first = i;
        else if (second < 0) second = i;
    }
    if (first >= 0) {
        *best = ch[first].l;
        explain(&ch[first], second >= 0 ? &ch[second] : NULL, fits, why, cap);
    }
    free(ch);
    if (first < 0)
        return cb_fail(e, CB_EINPUT, "--layout auto: no layout of %d ranks divides this model "
                       "and batch and fits memory; change the rank count, --batch or the sizes",
                       world);
    return CB_OK;
}
