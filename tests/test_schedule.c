/* Pipeline schedules: for gpipe, 1f1b and interleaved over p stages, v
 * chunks and M micro-batches, every rank's action list runs to the end in a
 * lock-step simulation (every forward after the previous stage's, every
 * backward after its own forward and the next stage's backward, no action
 * twice, no deadlock), holds at most the promised micro-batches in flight,
 * and backwards each chunk's micro-batches in order, for every M from 1 to
 * 17 (interleaved: also M < p and M not a multiple of p). Every schedule
 * takes exactly the ideal number of rounds, 2 max(vM + p-1, vp + M-1)
 * (gpipe/1f1b: 2(M+p-1)), so the simulated bubble is the formula's, and
 * interleaving makes it smaller than 1f1b's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/schedule.h"

static int fails;

static void check(int ok, const char *name, const char *detail) {
    if (!ok) fails++;
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, detail[0] ? ": " : "", detail);
}

/* In-flight bound and in-order backwards on every rank. */
static int per_rank(cb_pp_kind k, int p, int v, int M, char *why, size_t cap) {
    cb_pp_action *a = malloc(sizeof *a * 2 * (size_t)M * v);
    int ok = 1;
    for (int s = 0; ok && s < p; s++) {
        int n = cb_pp_schedule(k, p, v, M, s, a);
        int got = cb_pp_max_inflight(a, n, -1), bound = cb_pp_inflight_bound(k, p, v, M, s);
        if (n != 2 * M * v || got > bound) {
            snprintf(why, cap, "rank %d: %d actions, %d in flight > bound %d", s, n, got, bound);
            ok = 0;
        }
        for (int c = 0; ok && c < v; c++) {
            int want = 0;
            for (int i = 0; i < n; i++)
                if (a[i].bwd && a[i].chunk == c && a[i].mb != want++) ok = 0;
            if (!ok) snprintf(why, cap, "rank %d chunk %d: backwards out of order", s, c);
        }
    }
    free(a);
    return ok;
}

/* Simulation, promised bound, in-order backwards and the ideal round
 * count of one configuration; 0 and a reason when one fails. */
static int one(cb_pp_kind k, int p, int v, int M, char *why, size_t cap) {
    int rounds = 0;
    if (cb_pp_simulate(k, p, v, M, &rounds)) {
        snprintf(why, cap, "p=%d v=%d M=%d: deadlock or broken dependency", p, v, M);
        return 0;
    }
    if (!per_rank(k, p, v, M, why, cap)) return 0;
    int ideal = cb_pp_ideal_rounds(p, v, M);
    if (rounds != ideal) {
        snprintf(why, cap, "p=%d v=%d M=%d: %d rounds, ideal 2 max(vM+p-1, vp+M-1) = %d", p, v, M,
                 rounds, ideal);
        return 0;
    }
    return 1;
}

/* One PASS/FAIL line per schedule and p over every v and M listed. */
static void sweep(cb_pp_kind k, int p, const int *vs, int nv, int Mmax) {
    char name[96], why[200] = "";
    int ok = 1, n = 0;
    for (int i = 0; ok && i < nv; i++)
        for (int M = 1; ok && M <= Mmax; M++, n++) ok = one(k, p, vs[i], M, why, sizeof why);
    int len = snprintf(name, sizeof name, "%s p=%d", cb_pp_schedule_name(k), p);
    if (nv > 1) len += snprintf(name + len, sizeof name - len, ", v = %d..%d", vs[0], vs[nv - 1]);
    snprintf(name + len, sizeof name - len, ", M = 1..%d", Mmax);
    if (ok)
        snprintf(why, sizeof why, "%d configurations: no deadlock, in flight <= bound, backwards "
                 "in order, rounds = 2 max(vM+p-1, vp+M-1)", n);
    check(ok, name, why);
}

int main(void) {
    int ps[] = {1, 2, 3, 4, 5, 8}, one_v[] = {1}, vs[] = {1, 2, 3, 4};
    for (int i = 0; i < 6; i++) {
        sweep(CB_PP_GPIPE, ps[i], one_v, 1, 17);
        sweep(CB_PP_1F1B, ps[i], one_v, 1, 17);
        sweep(CB_PP_INTERLEAVED, ps[i], vs, 4, 17); /* M % p != 0 and M < p included */
    }
    /* the ideal itself: the chain bound wins for interleaved with M < p */
    check(cb_pp_ideal_rounds(4, 2, 8) == 2 * (16 + 3) && cb_pp_ideal_rounds(4, 2, 1) == 2 * 8 &&
              cb_pp_ideal_rounds(4, 1, 1) == 2 * 4,
          "ideal rounds", "p=4: v=2 M=8 -> 38, v=2 M=1 -> 16, v=1 M=1 -> 8");
    /* 1f1b keeps fewer in flight than gpipe once M > p */
    cb_pp_action a[64];
    int n = cb_pp_schedule(CB_PP_1F1B, 4, 1, 16, 0, a), f = cb_pp_max_inflight(a, n, -1);
    n = cb_pp_schedule(CB_PP_GPIPE, 4, 1, 16, 0, a);
    int g = cb_pp_max_inflight(a, n, -1);
    char d[160];
    snprintf(d, sizeof d, "p=4 M=16 rank 0: 1f1b %d, gpipe %d", f, g);
    check(f == 4 && g == 16, "in flight: 1f1b bounded by p, gpipe by M", d);
    /* interleaving shrinks the simulated pipeline's idle rounds, also when
     * M is not a multiple of p */
    int Ms[] = {8, 6}, ok = 1;
    d[0] = 0;
    for (int i = 0; i < 2; i++) {
        int r1, r2, M = Ms[i];
        cb_pp_simulate(CB_PP_1F1B, 4, 1, M, &r1);
        cb_pp_simulate(CB_PP_INTERLEAVED, 4, 2, M, &r2);
        double b1 = 1 - 2.0 * M / r1, b2 = 1 - 4.0 * M / r2; /* idle share of a rank's rounds */
        ok &= b2 < b1 && fabs(b1 - cb_pp_bubble_formula(4, 1, M)) < 1e-12 &&
              fabs(b2 - cb_pp_bubble_formula(4, 2, M)) < 1e-12;
        snprintf(d + strlen(d), sizeof d - strlen(d), "%sM=%d: 1f1b %.3f, interleaved v=2 %.3f",
                 i ? "; " : "p=4 ", M, b1, b2);
    }
    check(ok, "interleaved bubble smaller in simulation, both = formula", d);
    cb_err e;
    check(cb_pp_schedule_check(CB_PP_INTERLEAVED, 4, 2, 6, &e) == CB_OK &&
              cb_pp_schedule_check(CB_PP_1F1B, 4, 2, 6, &e) == CB_EINPUT,
          "interleaved takes M % p != 0; --virtual-stages without interleaved refused", e.msg);
    return fails != 0;
}
