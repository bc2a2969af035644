/* Pipeline schedules: for gpipe, 1f1b and interleaved over p stages, v
 * chunks and M micro-batches, every rank's action list runs to the end in a
 * lock-step simulation (every forward after the previous stage's, every
 * backward after its own forward and the next stage's backward, no action
 * twice, no deadlock), holds at most the promised micro-batches in flight,
 * and backwards each chunk's micro-batches in order. Rounds of the
 * simulation follow the bubble: gpipe/1f1b take 2(M+p-1), interleaved
 * fewer per unit of work. */
#include <stdio.h>
#include <stdlib.h>

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

static void one(cb_pp_kind k, int p, int v, int M) {
    char name[96], why[160] = "";
    snprintf(name, sizeof name, "%s p=%d v=%d M=%d", cb_pp_schedule_name(k), p, v, M);
    int rounds = 0, ok = cb_pp_simulate(k, p, v, M, &rounds) == 0;
    if (!ok) snprintf(why, sizeof why, "deadlock or broken dependency in the simulation");
    if (ok) ok = per_rank(k, p, v, M, why, sizeof why);
    /* one forward and one backward per round per rank: the ideal pipeline */
    int ideal = 2 * (M * v + p - 1);
    if (ok && k != CB_PP_INTERLEAVED && rounds != ideal) {
        snprintf(why, sizeof why, "%d rounds, want 2(M+p-1) = %d", rounds, ideal);
        ok = 0;
    }
    if (ok)
        snprintf(why, sizeof why, "%d rounds, in flight <= bound on every rank", rounds);
    check(ok, name, why);
}

int main(void) {
    int ps[] = {1, 2, 3, 4}, Ms[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            one(CB_PP_GPIPE, ps[i], 1, Ms[j]);
            one(CB_PP_1F1B, ps[i], 1, Ms[j]);
        }
    int cases[][3] = {{2, 2, 2}, {2, 2, 4}, {2, 3, 8}, {4, 2, 4}, {4, 2, 8}, {4, 3, 8}, {3, 2, 6}, {1, 3, 4}};
    for (int i = 0; i < 8; i++) one(CB_PP_INTERLEAVED, cases[i][0], cases[i][1], cases[i][2]);
    /* 1f1b keeps fewer in flight than gpipe once M > p */
    cb_pp_action a[64];
    int n = cb_pp_schedule(CB_PP_1F1B, 4, 1, 16, 0, a), f = cb_pp_max_inflight(a, n, -1);
    n = cb_pp_schedule(CB_PP_GPIPE, 4, 1, 16, 0, a);
    int g = cb_pp_max_inflight(a, n, -1);
    char d[96];
    snprintf(d, sizeof d, "p=4 M=16 rank 0: 1f1b %d, gpipe %d", f, g);
    check(f == 4 && g == 16, "in flight: 1f1b bounded by p, gpipe by M", d);
    /* interleaving shrinks the simulated pipeline's idle rounds */
    int r1, r2;
    cb_pp_simulate(CB_PP_1F1B, 4, 1, 8, &r1);
    cb_pp_simulate(CB_PP_INTERLEAVED, 4, 2, 8, &r2);
    double b1 = 1 - 16.0 / r1, b2 = 1 - 32.0 / r2; /* busy rounds per rank over all rounds */
    snprintf(d, sizeof d, "p=4 M=8: 1f1b %.3f (formula %.3f), interleaved v=2 %.3f", b1,
             cb_pp_bubble_formula(4, 1, 8), b2);
    check(b2 < b1, "interleaved bubble smaller in simulation", d);
    cb_err e;
    check(cb_pp_schedule_check(CB_PP_INTERLEAVED, 4, 2, 6, &e) == CB_EINPUT,
          "interleaved M % p != 0 refused", e.msg);
    return fails != 0;
}
