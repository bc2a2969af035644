/* The kernel profiler is a context object: two profilers count only the
 * calls made through their own tables, a profiler can wrap another, and the
 * profiled kernels compute exactly what the inner ones do. */
#include <stdio.h>
#include <string.h>

#include "kernels/profile.h"

static int nfail;

static void check(int ok, const char *name, const char *detail) {
    printf("%s profile: %s: %s\n", ok ? "PASS" : "FAIL", name, detail);
    nfail += !ok;
}

enum { N = 64, IC = 96, OC = 128 };
static float x[N * IC], w[IC * OC], y_ref[N * OC], y[N * OC];

/* y = x @ w through table k, repeated so the time is well above the clock's grain */
static void matmul(const cb_kernels *k, float *out) {
    for (int r = 0; r < 20; r++) k->matmul_forward(k, out, x, w, NULL, N, IC, OC);
}

int main(void) {
    for (int i = 0; i < N * IC; i++) x[i] = (float)(i % 13) * 0.1f - 0.6f;
    for (int i = 0; i < IC * OC; i++) w[i] = (float)(i % 7) * 0.05f - 0.15f;
    const cb_kernels *cpu = cb_kernels_cpu();
    cb_prof a, b, outer;
    cb_prof_init(&a, cpu);
    cb_prof_init(&b, cpu);
    matmul(cpu, y_ref);
    matmul(cb_prof_kernels(&a), y);
    char msg[200];
    snprintf(msg, sizeof msg, "gemm ms: a %.3f, b %.3f", cb_prof_ms(&a, PROF_GEMM),
             cb_prof_ms(&b, PROF_GEMM));
    check(cb_prof_ms(&a, PROF_GEMM) > 0 && cb_prof_ms(&b, PROF_GEMM) == 0,
          "calls through a count in a only", msg);
    check(!memcmp(y, y_ref, sizeof y), "profiled matmul equals the inner kernel bit for bit",
          "20 x [64,96]@[96,128]");
    double a_before = cb_prof_ms(&a, PROF_GEMM);
    double ss = cb_prof_kernels(&b)->sumsq(cb_prof_kernels(&b), y, N * OC);
    snprintf(msg, sizeof msg, "b optimizer %.4f ms, a gemm unchanged %d, sumsq %.3f = %.3f",
             cb_prof_ms(&b, PROF_OPTIMIZER), cb_prof_ms(&a, PROF_GEMM) == a_before, ss,
             cpu->sumsq(cpu, y, N * OC));
    check(cb_prof_ms(&b, PROF_OPTIMIZER) > 0 && cb_prof_ms(&b, PROF_GEMM) == 0 &&
              cb_prof_ms(&a, PROF_GEMM) == a_before && ss == cpu->sumsq(cpu, y, N * OC),
          "b counts its own sumsq as optimizer, a is untouched", msg);
    cb_prof_reset(&a);
    cb_prof_init(&outer, cb_prof_kernels(&a)); /* a profiler of a profiler */
    matmul(cb_prof_kernels(&outer), y);
    snprintf(msg, sizeof msg, "outer %.3f ms >= inner a %.3f ms > 0", cb_prof_ms(&outer, PROF_GEMM),
             cb_prof_ms(&a, PROF_GEMM));
    check(cb_prof_ms(&a, PROF_GEMM) > 0 &&
              cb_prof_ms(&outer, PROF_GEMM) >= cb_prof_ms(&a, PROF_GEMM),
          "a stacked profiler counts in both", msg);
    return nfail ? 1 : 0;
}
