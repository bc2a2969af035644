/* The data-parallel plan's limits (src/dp/dp.c, cb_dp_check_plan), on
 * sizes too large to allocate here: ZeRO's MPI int counts and offsets
 * (a replica over 2^31-1 parameters is refused with a clear message, not
 * cast to int), and the bound on the number of fusion buckets (a tiny
 * --bucket-mb would allocate a request and, with ZeRO, p counts per
 * bucket). Single process, no MPI. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/dp.h"

static int failed;

static void check(const char *name, int ok, const char *detail) {
    printf("%s %s: %s\n", ok ? "PASS" : "FAIL", name, detail);
    failed += !ok;
}

static int one_line(const cb_err *e, const char *word) { return strstr(e->msg, word) && !strchr(e->msg, '\n'); }

int main(void) {
    cb_err e = {0};
    int nb = -1, rc;
    char d[600];

    rc = cb_dp_check_plan(3000000000u, 0, 1, 25, &nb, &e);
    snprintf(d, sizeof d, "3e9 parameters, --zero 1: rc %d, '%s'", rc, e.msg);
    check("ZeRO over INT_MAX parameters refused", rc == CB_EINPUT && one_line(&e, "3000000000") && one_line(&e, "--zero 0"), d);

    e = (cb_err){0};
    rc = cb_dp_check_plan(3000000000u, 0, 0, 25, &nb, &e);
    snprintf(d, sizeof d, "3e9 parameters without ZeRO, 25 MB: rc %d, %d buckets (want 480)", rc, nb);
    check("dense path over INT_MAX parameters planned in 64-bit offsets", rc == CB_OK && nb == 480, d);

    rc = cb_dp_check_plan(2147483647u, 0, 1, 25, &nb, &e);
    snprintf(d, sizeof d, "INT_MAX parameters, --zero 1: rc %d '%s'", rc, rc ? e.msg : "");
    check("ZeRO at exactly INT_MAX parameters accepted", rc == CB_OK, d);

    e = (cb_err){0};
    rc = cb_dp_check_plan(1000000, 0, 1, 1e-9, &nb, &e);
    const char *use = strstr(e.msg, "use --bucket-mb ");
    double suggested = use ? atof(use + 16) : 0;
    snprintf(d, sizeof d, "1e6 floats at 1e-9 MB: rc %d, '%s'", rc, e.msg);
    check("a --bucket-mb giving over 65536 buckets refused with the smallest that fits",
          rc == CB_EINPUT && one_line(&e, "1000000 buckets") && suggested > 0, d);
    rc = cb_dp_check_plan(1000000, 0, 1, suggested, &nb, &e);
    snprintf(d, sizeof d, "--bucket-mb %g: rc %d, %d buckets", suggested, rc, nb);
    check("the suggested --bucket-mb is accepted", rc == CB_OK && nb <= CB_DP_MAX_BUCKETS, d);

    rc = cb_dp_check_plan(CB_DP_MAX_BUCKETS + 10, 10, 0, 1e-9, &nb, &e);
    int at = rc == CB_OK && nb == CB_DP_MAX_BUCKETS;
    rc = cb_dp_check_plan(CB_DP_MAX_BUCKETS + 11, 10, 0, 1e-9, &nb, &e);
    snprintf(d, sizeof d, "65536 one-float buckets after start 10: %s; one more: rc %d", at ? "ok" : "refused", rc);
    check("bucket bound counts [start, n) exactly", at && rc == CB_EINPUT, d);

    int bad = 0;
    double mbs[3] = {0, -1, NAN};
    for (int i = 0; i < 3; i++) bad += cb_dp_check_plan(1000, 0, 0, mbs[i], &nb, &e) == CB_EINPUT && one_line(&e, "> 0");
    snprintf(d, sizeof d, "0, -1, NaN: %d of 3 refused", bad);
    check("--bucket-mb must be > 0", bad == 3, d);

    size_t f25 = cb_dp_bucket_floats(25), f0 = cb_dp_bucket_floats(1e-9), fbig = cb_dp_bucket_floats(1e12);
    snprintf(d, sizeof d, "25 MB -> %zu, 1e-9 MB -> %zu, 1e12 MB -> %zu", f25, f0, fbig);
    check("floats per bucket: MB / 4 bytes, at least 1, at most 2^30 (MPI int counts)",
          f25 == 6250000 && f0 == 1 && fbig == (size_t)1 << 30, d);
    return failed ? 1 : 0;
}
