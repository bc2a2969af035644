/* Tests of the communication layer and the process grid. Run under mpirun
 * with any number of ranks (tests/test_comm.sh runs 1, 2, 4, 8), or alone.
 *   test_comm                         every check, every grid the world fits
 *   test_comm --dp N --pp N --tp N --tp-mode M [--print-grid]
 *                                     that grid only; a bad one exits 2
 *   test_comm --die R | --fatal R | --local-error R | --stall R
 *                                     failure drills for the script
 * Every rank runs every check; rank 0 prints one PASS/FAIL line per check
 * after agreeing on the result (details from the first failing rank). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/grid.h"
#include "comm/stats.h"
#include "kernels/kernels.h"

static int g_rank, g_size, g_failed;

/* Under ASan: MPI's libraries keep allocations to the end (OpenMPI's
 * dlopen'ed components show as "<unknown module>", beyond suppression
 * files), so leak checking stays with the single-process tests. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }

/* ---------------------------------------------------------------- reporting */

/* Collective over the world: one line from rank 0. */
static void check(const char *name, int ok, const char *detail) {
    int mine = ok ? g_size : g_rank, first = 0, nbad = 0, bad = !ok;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    char d[400];
    snprintf(d, sizeof d, "%s", detail ? detail : "");
    MPI_Bcast(d, sizeof d, MPI_CHAR, first < g_size ? first : 0, MPI_COMM_WORLD);
    if (nbad) g_failed++;
    if (g_rank == 0) {
        if (nbad) printf("FAIL %s: %s (failed on %d of %d ranks, first rank %d)\n", name, d, nbad, g_size, first);
        else printf("PASS %s: %s (%d ranks)\n", name, d, g_size);
        fflush(stdout);
    }
}

/* Accumulates local failures of a group of checks with the first message. */
typedef struct errs { int n; char first[300]; } errs;

__attribute__((format(printf, 3, 4)))
static void expect(errs *e, int ok, const char *fmt, ...) {
    if (ok) return;
    if (e->n++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->first, sizeof e->first, fmt, ap);
        va_end(ap);
    }
}

static int has(const char *msg, const char *word) { return strstr(msg, word) != NULL && strchr(msg, '\n') == NULL; }

static void check_errs(const char *name, const errs *e, const char *pass_detail) {
    char d[400];
    if (e->n) snprintf(d, sizeof d, "%d mismatches, first: %s", e->n, e->first);
    else snprintf(d, sizeof d, "%s", pass_detail);
    check(name, e->n == 0, d);
}

/* ---------------------------------------------------------------- collectives */

enum { N = 1008 }; /* divisible by every group size used: ring bytes exact */

/* The ring formulas of comm.h, restated: k * (p-1) * bytes / p. */
static uint64_t want_ring(int p, uint64_t bytes, int k) { return (uint64_t)k * (uint64_t)(p - 1) * bytes / (uint64_t)p; }

static void expect_bytes(errs *e, const cb_comm *c, const char *tag, uint64_t sent, uint64_t recv, uint64_t calls) {
    const cb_comm_stat *s = cb_comm_stats_find(c, tag);
    if (!s) { expect(e, sent == 0 && recv == 0 && calls == 0, "%s: no counter for tag %s", c->name, tag); return; }
    expect(e, s->bytes_sent == sent && s->bytes_recv == recv && s->calls == calls && s->seconds >= 0,
           "%s tag %s: sent %llu recv %llu calls %llu, want %llu %llu %llu", c->name, tag,
           (unsigned long long)s->bytes_sent, (unsigned long long)s->bytes_recv, (unsigned long long)s->calls,
           (unsigned long long)sent, (unsigned long long)recv, (unsigned long long)calls);
}

static float val(int r, int i) { return (float)(r * 1000 + i); }
/* sum over ranks of val(r, i) */
static float sumval(int p, int i) { return (float)(1000.0 * p * (p - 1) / 2 + (double)p * i); }

static void t_allreduce(cb_comm *c, errs *v, errs *b) {
    int p = c->size, r = c->rank;
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++) x[i] = val(r, i), y[i] = -1;
    cb_comm_allreduce(c, "t.ar.sum", x, y, N, CB_COMM_SUM);
    for (int i = 0; i < N; i++) expect(v, y[i] == sumval(p, i), "%s allreduce sum [%d] = %g want %g", c->name, i, y[i], sumval(p, i));
    cb_comm_allreduce(c, "t.ar.max", NULL, x, N, CB_COMM_MAX);
    for (int i = 0; i < N; i++) expect(v, x[i] == val(p - 1, i), "%s allreduce max in place [%d] = %g", c->name, i, x[i]);
    for (int i = 0; i < N; i++) x[i] = val(r, i);
    cb_comm_allreduce(c, "t.ar.min", x, x, N, CB_COMM_MIN);
    for (int i = 0; i < N; i++) expect(v, x[i] == val(0, i), "%s allreduce min (send == recv) [%d] = %g", c->name, i, x[i]);
    uint64_t ar = want_ring(p, N * 4, 2);
    expect_bytes(b, c, "t.ar.sum", ar, ar, 1);
    expect_bytes(b, c, "t.ar.max", ar, ar, 1);
    expect_bytes(b, c, "t.ar.min", ar, ar, 1);
    free(x), free(y);
}

static void t_allreduce_wide(cb_comm *c, errs *v, errs *b) {
    int p = c->size, r = c->rank;
    double d[2] = { r + 0.25, -r };
    cb_comm_allreduce_f64(c, "t.f64", NULL, d, 2, CB_COMM_SUM);
    expect(v, d[0] == p * (p - 1) / 2.0 + 0.25 * p && d[1] == -p * (p - 1) / 2.0, "%s f64 sum = %g %g", c->name, d[0], d[1]);
    int64_t big = ((int64_t)1 << 40) + r, s = 0, m = 0;
    cb_comm_allreduce_i64(c, "t.i64", &big, &s, 1, CB_COMM_SUM);
    cb_comm_allreduce_i64(c, "t.i64", &big, &m, 1, CB_COMM_MAX);
    expect(v, s == ((int64_t)p << 40) + (int64_t)p * (p - 1) / 2, "%s i64 sum = %lld", c->name, (long long)s);
    expect(v, m == ((int64_t)1 << 40) + p - 1, "%s i64 max = %lld", c->name, (long long)m);
    expect_bytes(b, c, "t.f64", want_ring(p, 16, 2), want_ring(p, 16, 2), 1);
    expect_bytes(b, c, "t.i64", 2 * want_ring(p, 8, 2), 2 * want_ring(p, 8, 2), 2);
}

/* blocks of n: x (p*n) with x[blk*n + j] = val(r, blk*n + j) */
static void t_reduce_scatter(cb_comm *c, errs *v, errs *b) {
    int p = c->size, r = c->rank, n = N / p;
    float *x = malloc(N * sizeof *x), *y = malloc(n * sizeof *y);
    for (int i = 0; i < N; i++) x[i] = val(r, i);
    cb_comm_reduce_scatter(c, "t.rs", x, y, n);
    for (int j = 0; j < n; j++) expect(v, y[j] == sumval(p, r * n + j), "%s reduce-scatter [%d] = %g want %g", c->name, j, y[j], sumval(p, r * n + j));
    cb_comm_reduce_scatter(c, "t.rs.inplace", NULL, x, n);
    for (int j = 0; j < n; j++) expect(v, x[j] == sumval(p, r * n + j), "%s reduce-scatter in place [%d] = %g", c->name, j, x[j]);
    uint64_t rs = want_ring(p, N * 4, 1);
    expect_bytes(b, c, "t.rs", rs, rs, 1);
    expect_bytes(b, c, "t.rs.inplace", rs, rs, 1);
    free(x), free(y);
}

static void t_allgather(cb_comm *c, errs *v, errs *b) {
    int p = c->size, r = c->rank, n = N / p;
    float *x = malloc(n * sizeof *x), *y = malloc(N * sizeof *y);
    for (int j = 0; j < n; j++) x[j] = val(r, j);
    cb_comm_allgather(c, "t.ag", x, y, n);
    for (int i = 0; i < p * n; i++) expect(v, y[i] == val(i / n, i % n), "%s allgather [%d] = %g", c->name, i, y[i]);
    for (int i = 0; i < p * n; i++) y[i] = i / n == r ? val(r, i % n) : -1;
    cb_comm_allgather(c, "t.ag.inplace", NULL, y, n);
    for (int i = 0; i < p * n; i++) expect(v, y[i] == val(i / n, i % n), "%s allgather in place [%d] = %g", c->name, i, y[i]);
    uint64_t ag = want_ring(p, N * 4, 1);
    expect_bytes(b, c, "t.ag", ag, ag, 1);
    expect_bytes(b, c, "t.ag.inplace", ag, ag, 1);
    free(x), free(y);
}

static void t_rooted(cb_comm *c, errs *v, errs *b) {
    int p = c->size, r = c->rank, root = p - 1;
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++) x[i] = r == root ? val(root, i) : -1;
    cb_comm_bcast(c, "t.bcast", x, N, root);
    for (int i = 0; i < N; i++) expect(v, x[i] == val(root, i), "%s bcast [%d] = %g", c->name, i, x[i]);
    char s[32] = {0};
    if (r == root) snprintf(s, sizeof s, "hello %d", root);
    cb_comm_bcast_bytes(c, "t.bytes", s, sizeof s, root);
    char want[32];
    snprintf(want, sizeof want, "hello %d", root);
    expect(v, strcmp(s, want) == 0, "%s bcast bytes got '%s'", c->name, s);
    for (int i = 0; i < N; i++) x[i] = val(r, i), y[i] = -1;
    cb_comm_reduce(c, "t.reduce", x, y, N, 0);
    for (int i = 0; i < N && r == 0; i++) expect(v, y[i] == sumval(p, i), "%s reduce [%d] = %g", c->name, i, y[i]);
    cb_comm_reduce(c, "t.reduce", NULL, x, N, 0);
    for (int i = 0; i < N && r == 0; i++) expect(v, x[i] == sumval(p, i), "%s reduce in place [%d] = %g", c->name, i, x[i]);
    cb_comm_barrier(c, "t.barrier");
    uint64_t bc = want_ring(p, N * 4, 1);
    expect_bytes(b, c, "t.bcast", bc, bc, 1);
    expect_bytes(b, c, "t.bytes", want_ring(p, sizeof s, 1), want_ring(p, sizeof s, 1), 1);
    expect_bytes(b, c, "t.reduce", 2 * bc, 2 * bc, 2);
    expect_bytes(b, c, "t.barrier", 0, 0, 1);
    free(x), free(y);
}

/* All four non-blocking collectives in flight at once, then waited. */
static void t_nonblocking(cb_comm *c, errs *v, errs *b) {
    int p = c->size, r = c->rank, n = N / p;
    float *a = malloc(N * sizeof *a), *rs = malloc(N * sizeof *rs), *rso = malloc(n * sizeof *rso);
    float *ag = malloc(N * sizeof *ag), *bc = malloc(N * sizeof *bc);
    for (int i = 0; i < N; i++) a[i] = val(r, i), rs[i] = val(r, i), bc[i] = r == 0 ? val(0, i) : -1;
    for (int j = 0; j < n; j++) ag[r * n + j] = val(r, j);
    cb_comm_req q[4];
    cb_comm_iallreduce(c, "t.iar", NULL, a, N, CB_COMM_SUM, &q[0]);
    cb_comm_ireduce_scatter(c, "t.irs", rs, rso, n, &q[1]);
    cb_comm_iallgather(c, "t.iag", NULL, ag, n, &q[2]);
    cb_comm_ibcast(c, "t.ibc", bc, N, 0, &q[3]);
    cb_comm_waitall(q, 4);
    for (int i = 0; i < N; i++) expect(v, a[i] == sumval(p, i), "%s iallreduce [%d] = %g", c->name, i, a[i]);
    for (int j = 0; j < n; j++) expect(v, rso[j] == sumval(p, r * n + j), "%s ireduce-scatter [%d] = %g", c->name, j, rso[j]);
    for (int i = 0; i < p * n; i++) expect(v, ag[i] == val(i / n, i % n), "%s iallgather [%d] = %g", c->name, i, ag[i]);
    for (int i = 0; i < N; i++) expect(v, bc[i] == val(0, i), "%s ibcast [%d] = %g", c->name, i, bc[i]);
    uint64_t w1 = want_ring(p, N * 4, 1), w2 = want_ring(p, N * 4, 2);
    expect_bytes(b, c, "t.iar", w2, w2, 1);
    expect_bytes(b, c, "t.irs", w1, w1, 1);
    expect_bytes(b, c, "t.iag", w1, w1, 1);
    expect_bytes(b, c, "t.ibc", w1, w1, 1);
    free(a), free(rs), free(rso), free(ag), free(bc);
}

/* Blocking pairs (even sends first) and a non-blocking ring. */
static void t_p2p(cb_comm *c, errs *v, errs *b) {
    int p = c->size, r = c->rank, partner = r ^ 1, paired = partner < p;
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = val(r, i), y[i] = -1;
    if (paired && r % 2 == 0) cb_comm_send(c, "t.pair", x, 64, partner, 7), cb_comm_recv(c, "t.pair", y, 64, partner, 7);
    if (paired && r % 2 == 1) cb_comm_recv(c, "t.pair", y, 64, partner, 7), cb_comm_send(c, "t.pair", x, 64, partner, 7);
    for (int i = 0; i < 64 && paired; i++) expect(v, y[i] == val(partner, i), "%s send/recv [%d] = %g", c->name, i, y[i]);
    expect_bytes(b, c, "t.pair", paired ? 256 : 0, paired ? 256 : 0, paired ? 2 : 0);
    cb_comm_req q[2];
    int left = (r + p - 1) % p, right = (r + 1) % p;
    cb_comm_irecv(c, "t.ring", y, 64, left, 9, &q[0]);
    cb_comm_isend(c, "t.ring", x, 64, right, 9, &q[1]);
    cb_comm_waitall(q, 2);
    for (int i = 0; i < 64; i++) expect(v, y[i] == val(left, i), "%s isend/irecv ring [%d] = %g", c->name, i, y[i]);
    expect_bytes(b, c, "t.ring", 256, 256, 2);
}

/* Uneven blocks: rank r owns counts[r] = 3 + 5r elements at displs[r]
 * (p <= 64). */
static int uneven(int p, int *counts, int *displs) {
    int n = 0;
    if (p > 64) cb_comm_exit(1, "test_comm: the v-form checks take at most 64 ranks");
    for (int r = 0; r < p; r++) counts[r] = 3 + 5 * r, displs[r] = n, n += counts[r];
    return n;
}

static void t_vforms(cb_comm *c, errs *v, errs *b) {
    int p = c->size, r = c->rank, counts[64] = {0}, displs[64] = {0}, n = uneven(p, counts, displs);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *z = malloc(n * sizeof *z);
    for (int i = 0; i < n; i++) x[i] = val(r, i), y[i] = val(r, i);
    cb_comm_req q[2];
    cb_comm_ireduce_scatterv(c, "t.rsv", x, z, counts, &q[0]);
    cb_comm_ireduce_scatterv(c, "t.rsv.inplace", NULL, y, counts, &q[1]);
    cb_comm_waitall(q, 2);
    for (int j = 0; j < counts[r]; j++) {
        float want = sumval(p, displs[r] + j);
        expect(v, z[j] == want && y[j] == want, "%s reduce-scatterv [%d] = %g / in place %g, want %g", c->name, j, z[j], y[j], want);
    }
    for (int j = 0; j < counts[r]; j++) x[j] = val(r, j);
    for (int i = 0; i < n; i++) y[i] = -1, z[i] = -1;
    cb_comm_allgatherv(c, "t.agv", x, y, counts, displs);
    for (int j = 0; j < counts[r]; j++) z[displs[r] + j] = val(r, j);
    cb_comm_iallgatherv(c, "t.iagv.inplace", NULL, z, counts, displs, &q[0]);
    cb_comm_wait(&q[0]);
    for (int w = 0; w < p; w++)
        for (int j = 0; j < counts[w]; j++)
            expect(v, y[displs[w] + j] == val(w, j) && z[displs[w] + j] == val(w, j),
                   "%s allgatherv [%d] = %g / iallgatherv in place %g, want %g", c->name, displs[w] + j,
                   y[displs[w] + j], z[displs[w] + j], val(w, j));
    uint64_t mine = (uint64_t)(n - counts[r]) * 4;
    expect_bytes(b, c, "t.rsv", mine, mine, 1);
    expect_bytes(b, c, "t.rsv.inplace", mine, mine, 1);
    expect_bytes(b, c, "t.agv", mine, mine, 1);
    expect_bytes(b, c, "t.iagv.inplace", mine, mine, 1);
    free(x), free(y), free(z);
}

/* Rooted gathers at the last rank, exact bytes: a rank sends its block,
 * the root receives everyone else's. */
static void t_gathers(cb_comm *c, errs *v, errs *b) {
    int p = c->size, r = c->rank, root = p - 1, counts[64] = {0}, displs[64] = {0}, n = uneven(p, counts, displs);
    float *x = malloc(counts[r] * sizeof *x), *y = malloc(n * sizeof *y);
    for (int j = 0; j < counts[r]; j++) x[j] = val(r, j);
    for (int i = 0; i < n; i++) y[i] = -1;
    cb_comm_gatherv(c, "t.gv", x, y, counts, displs, root);
    for (int w = 0; w < p && r == root; w++)
        for (int j = 0; j < counts[w]; j++)
            expect(v, y[displs[w] + j] == val(w, j), "%s gatherv [%d] = %g", c->name, displs[w] + j, y[displs[w] + j]);
    char id[16], *ids = malloc(sizeof id * p);
    snprintf(id, sizeof id, "r%d", r);
    cb_comm_gather_bytes(c, "t.gb", id, ids, sizeof id, root);
    for (int w = 0; w < p && r == root; w++) {
        char want[16];
        snprintf(want, sizeof want, "r%d", w);
        expect(v, strcmp(ids + sizeof id * w, want) == 0, "%s gather_bytes block %d = '%.16s'", c->name, w, ids + sizeof id * w);
    }
    int32_t mi[3] = {r, -r, 7 * r}, *all = malloc(sizeof(int32_t) * 3 * p);
    cb_comm_allgather_i32(c, "t.agi", mi, all, 3);
    for (int w = 0; w < p; w++)
        expect(v, all[3 * w] == w && all[3 * w + 1] == -w && all[3 * w + 2] == 7 * w, "%s allgather_i32 block %d", c->name, w);
    uint64_t rest = (uint64_t)(n - counts[root]) * 4, own = (uint64_t)counts[r] * 4;
    expect_bytes(b, c, "t.gv", r == root ? 0 : own, r == root ? rest : 0, 1);
    expect_bytes(b, c, "t.gb", r == root ? 0 : sizeof id, r == root ? (uint64_t)(p - 1) * sizeof id : 0, 1);
    expect_bytes(b, c, "t.agi", want_ring(p, 12 * (uint64_t)p, 1), want_ring(p, 12 * (uint64_t)p, 1), 1);
    free(x), free(y), free(ids), free(all);
}

/* cb_comm_test drives a request to completion: one call counted however
 * many tests, its time charged, a wait after it returns at once. */
static void t_test_counters(cb_comm *c, errs *v, errs *b) {
    int p = c->size;
    float *x = malloc(N * sizeof *x);
    for (int i = 0; i < N; i++) x[i] = val(c->rank, i);
    cb_comm_req q;
    cb_comm_iallreduce(c, "t.test", NULL, x, N, CB_COMM_SUM, &q);
    long polls = 0;
    while (!cb_comm_test(&q)) polls++;
    cb_comm_wait(&q);
    for (int i = 0; i < N; i++) expect(v, x[i] == sumval(p, i), "%s iallreduce by test [%d] = %g", c->name, i, x[i]);
    const cb_comm_stat *s = cb_comm_stats_find(c, "t.test");
    expect(b, s && s->seconds > 0, "%s: cb_comm_test charged no time after %ld polls", c->name, polls);
    expect_bytes(b, c, "t.test", want_ring(p, N * 4, 2), want_ring(p, N * 4, 2), 1);
    free(x);
}

/* Every operation once on c after a reset: values into v, counters into b. */
static void run_collectives(cb_comm *c, errs *v, errs *b) {
    cb_comm_stats_reset(c);
    t_allreduce(c, v, b);
    t_allreduce_wide(c, v, b);
    t_reduce_scatter(c, v, b);
    t_allgather(c, v, b);
    t_rooted(c, v, b);
    t_nonblocking(c, v, b);
    t_p2p(c, v, b);
    t_vforms(c, v, b);
    t_gathers(c, v, b);
    t_test_counters(c, v, b);
}

/* ---------------------------------------------------------------- counters and reports */

static void t_counters_world(cb_comm *w) {
    errs v = {0}, b = {0};
    run_collectives(w, &v, &b);
    char d[160];
    snprintf(d, sizeof d, "every collective and p2p on %d ranks, %d floats", w->size, N);
    check_errs("collectives: values on world", &v, d);
    check_errs("collectives: byte and call counters match the ring formulas", &b,
               "all-reduce 2(p-1)/p n, reduce-scatter/all-gather/bcast/reduce (p-1)/p n, p2p exact");
    errs t = {0};
    cb_comm_stat sum = {0};
    for (int i = 0; i < w->ntags; i++) sum.bytes_sent += w->tags[i].bytes_sent, sum.calls += w->tags[i].calls;
    cb_comm_stat tot = cb_comm_stats_total(w);
    cb_comm *one[2] = { w, w };
    cb_comm_stat two = cb_comm_stats_sum(one, 2);
    expect(&t, tot.bytes_sent == sum.bytes_sent && tot.calls == sum.calls, "total %llu != sum of tags %llu",
           (unsigned long long)tot.bytes_sent, (unsigned long long)sum.bytes_sent);
    expect(&t, two.bytes_recv == 2 * tot.bytes_recv && two.calls == 2 * tot.calls, "sum over comms wrong");
    cb_comm_stats_reset(w);
    cb_comm_stat z = cb_comm_stats_total(w);
    expect(&t, z.bytes_sent == 0 && z.bytes_recv == 0 && z.calls == 0 && z.seconds == 0, "reset left counters");
    check_errs("counters: totals, sums over comms, reset", &t, "total = sum of tags, reset zeroes");
}

/* --comm-dtype bf16's float collectives (cb_comm_*_bf16f) on a fresh
 * communicator of the world. Each input is rounded to bf16 (relative error
 * u = 2^-8 at most) and each partial sum of the reduction is formed in fp32
 * and rounded once (u of the partial sum), so a sum over p ranks is within
 * (2p - 1) u (1 + u)^p sum |x| of the exact one; at p <= 2 it is exactly
 * round(round(a) + round(b)) whatever MPI's order. Gathers and broadcasts
 * deliver round(x) exactly, the sending rank's own copy included. Bytes:
 * exactly half the float forms' ring volumes, one call each. */
static float bfx(int r, int i) { return (float)(sin(0.7 * i + 1.3 * r) * (1 + i % 7)); }
static float bfr(float x) { return cb_bf16_widen(cb_bf16_round(x)); }

/* y[j] (a sum over ranks of bfx(., i0 + j)) within the bound; exact at p <= 2 */
static void expect_bf16_sum(errs *v, const char *what, int p, const float *y, int i0, int n) {
    double u = 1.0 / 256, grow = pow(1 + u, p);
    for (int j = 0; j < n; j++) {
        double exact = 0, abs_sum = 0;
        float pair = 0;
        for (int r = 0; r < p; r++) exact += bfx(r, i0 + j), abs_sum += fabs(bfx(r, i0 + j));
        if (p == 1) pair = bfr(bfx(0, i0 + j));
        if (p == 2) pair = bfr(bfr(bfx(0, i0 + j)) + bfr(bfx(1, i0 + j)));
        int ok = p <= 2 ? y[j] == pair : fabs(y[j] - exact) <= (2 * p - 1) * u * grow * abs_sum;
        expect(v, ok && y[j] == bfr(y[j]), "%s [%d] = %.9g, exact sum %.9g", what, j, y[j], exact);
    }
}

static void t_bf16f(cb_comm *w) {
    cb_comm c;
    cb_comm_split(w, 0, w->rank, "bf16f", &c);
    int p = c.size, r = c.rank, n = N / p;
    errs v = {0}, b = {0};
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint16_t *stage = malloc(N * sizeof *stage);
    cb_comm_req q;
    for (int i = 0; i < N; i++) x[i] = bfx(r, i);
    cb_comm_allreduce_bf16f(&c, "ar", x, N);
    expect_bf16_sum(&v, "all-reduce", p, x, 0, N);
    float *ref = malloc(N * sizeof *ref);
    memcpy(ref, x, N * sizeof *x);
    MPI_Bcast(ref, N, MPI_FLOAT, 0, c.comm);
    expect(&v, !memcmp(ref, x, N * sizeof *x), "all-reduce: ranks differ from rank 0");
    for (int root = 0; root < p; root += p > 1 ? p - 1 : 1) {
        for (int i = 0; i < N; i++) x[i] = bfx(r, i), y[i] = -1;
        cb_comm_reduce_bf16f(&c, "red", r == root ? NULL : x, r == root ? x : y, N, root);
        if (r == root) expect_bf16_sum(&v, "reduce (in place at the root)", p, x, 0, N);
        else expect(&v, y[0] == -1, "reduce wrote recv off the root");
    }
    for (int i = 0; i < N; i++) x[i] = bfx(r, i);
    cb_comm_reduce_scatter_bf16f(&c, "rs", x, y, n);
    expect_bf16_sum(&v, "reduce-scatter", p, y, r * n, n);
    cb_comm_ireduce_scatter_bf16f(&c, "irs", NULL, x, n, stage, &q);
    cb_comm_wait(&q);
    expect(&v, !memcmp(x, y, n * sizeof *x), "non-blocking in-place reduce-scatter differs from blocking");
    for (int i = 0; i < n; i++) x[i] = bfx(r, r * n + i);
    cb_comm_allgather_bf16f(&c, "ag", x, y, n);
    for (int i = 0; i < N; i++) expect(&v, y[i] == bfr(bfx(i / n, i)), "all-gather [%d] = %g", i, y[i]);
    for (int i = 0; i < N; i++) x[i] = i / n == r ? bfx(r, i) : -1;
    cb_comm_iallgather_bf16f(&c, "iag", NULL, x, n, stage, &q);
    cb_comm_wait(&q);
    expect(&v, !memcmp(x, y, N * sizeof *x), "non-blocking in-place all-gather differs from blocking");
    for (int i = 0; i < N; i++) x[i] = r == p - 1 ? bfx(r, i) : -1;
    cb_comm_ibcast_bf16f(&c, "bc", x, N, p - 1, stage, &q);
    cb_comm_wait(&q);
    for (int i = 0; i < N; i++) expect(&v, x[i] == bfr(bfx(p - 1, i)), "broadcast [%d] = %g", i, x[i]);
    uint64_t ar = want_ring(p, N * 2, 2), one = want_ring(p, N * 2, 1);
    expect_bytes(&b, &c, "ar", ar, ar, 1);
    expect_bytes(&b, &c, "red", 2 * one, 2 * one, 2 - (p == 1));
    expect_bytes(&b, &c, "rs", one, one, 1), expect_bytes(&b, &c, "irs", one, one, 1);
    expect_bytes(&b, &c, "ag", one, one, 1), expect_bytes(&b, &c, "iag", one, one, 1);
    expect_bytes(&b, &c, "bc", one, one, 1);
    char d[160];
    snprintf(d, sizeof d, "all-reduce, reduce at roots 0 and p-1, reduce-scatter, all-gather, broadcast; %d floats", N);
    check_errs("bf16 float collectives: values (exact at p <= 2, within (2p-1) u (1+u)^p sum|x| above)", &v, d);
    check_errs("bf16 float collectives: bytes half the fp32 ring volumes", &b, "every tag, one call per operation");
    free(x), free(y), free(ref), free(stage);
    cb_comm_free(&c);
}

static int braces_balanced(const char *s) {
    int depth = 0, in_str = 0;
    for (; *s; s++) {
        if (*s == '"') in_str = !in_str;
        else if (!in_str && *s == '{') depth++;
        else if (!in_str && *s == '}' && --depth < 0) return 0;
    }
    return depth == 0 && !in_str;
}

/* On a fresh copy of the world: the earlier checks used many tags. */
static void t_reports(cb_comm *world) {
    cb_comm fresh, *w = &fresh;
    cb_comm_split(world, 0, world->rank, "world", w);
    float x[N] = {0};
    cb_comm_allreduce(w, "grad", NULL, x, N, CB_COMM_SUM);
    cb_comm_allreduce(w, "attn.fwd", NULL, x, 10, CB_COMM_MAX);
    cb_comm *cs[1] = { w };
    size_t need = cb_comm_report_json(cs, 1, NULL, 0);
    char *js = malloc(need + 1);
    size_t got = cb_comm_report_json(cs, 1, js, need + 1);
    char small[8];
    cb_comm_report_json(cs, 1, small, sizeof small);
    char key[160];
    snprintf(key, sizeof key, "\"grad\":{\"bytes_sent\":%llu,\"bytes_recv\":%llu,\"calls\":1,",
             (unsigned long long)want_ring(w->size, N * 4, 2), (unsigned long long)want_ring(w->size, N * 4, 2));
    errs e = {0};
    expect(&e, got == need && strlen(js) == need, "length %zu, needed %zu", got, need);
    expect(&e, strlen(small) == 7, "truncated output not terminated at 7 chars");
    expect(&e, js[0] == '{' && js[need - 1] == '}' && braces_balanced(js), "not one balanced object: %.200s", js);
    expect(&e, strstr(js, key) != NULL, "missing %s in %.200s", key, js);
    expect(&e, strstr(js, "\"world\":{") && strstr(js, "\"attn.fwd\":{") && strstr(js, "\"total\":{"), "missing keys: %.200s", js);
    expect(&e, strchr(js, '\n') == NULL, "JSON has a newline");
    check_errs("report: JSON object of groups, tags and total", &e, "one balanced object, exact byte fields, snprintf-like");
    if (g_rank == 0 && getenv("TEST_COMM_VERBOSE")) printf("%s\n", js);
    free(js);
    errs t = {0};
    need = cb_comm_report_table(cs, 1, NULL, 0);
    char *tb = malloc(need + 1);
    cb_comm_report_table(cs, 1, tb, need + 1);
    int lines = 0;
    for (char *s = tb; *s; s++) lines += *s == '\n';
    expect(&t, strncmp(tb, "group", 5) == 0 && lines == 5 && strstr(tb, "attn.fwd") && strstr(tb, "\nall "),
           "table has %d lines: %.300s", lines, tb);
    check_errs("report: table with header, a line per tag, per group, and all", &t, "5 lines for 1 group x 2 tags");
    if (g_rank == 0 && getenv("TEST_COMM_VERBOSE")) fputs(tb, stdout);
    free(tb);
    cb_comm_free(w);
}

/* In-place reduce at the last rank with a large message: MPICH 4.0.2
 * segfaults there (pmodels/mpich#6540) unless cb_comm_reduce works around
 * it; and the scratch copy must leave the root's input out of the sum
 * exactly once. */
static void t_reduce_root_last(cb_comm *w) {
    enum { BIG = 1 << 16 };
    int p = w->size, r = w->rank, root = p - 1;
    float *x = malloc(BIG * sizeof *x);
    for (int i = 0; i < BIG; i++) x[i] = (float)(r + 1) * (float)(i % 1000);
    for (int rep = 0; rep < 2; rep++) { /* twice: the kept scratch buffer reused */
        if (rep) for (int i = 0; i < BIG; i++) x[i] = (float)(r + 1) * (float)(i % 1000);
        cb_comm_reduce(w, "t.reduce.last", NULL, x, BIG, root);
    }
    errs e = {0};
    float k = (float)p * (p + 1) / 2;
    for (int i = 0; i < BIG && r == root; i++)
        expect(&e, x[i] == k * (float)(i % 1000), "[%d] = %g want %g", i, x[i], k * (float)(i % 1000));
    char d[128];
    snprintf(d, sizeof d, "%d floats summed at root %d, twice", (int)BIG, root);
    check_errs("reduce: in place at the last rank, large n (MPICH bug 6540 workaround)", &e, d);
    free(x);
}

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Rank 0 sleeps S before a collective; every other rank's counted wait
 * must cover the part of the sleep after it entered: at least
 * (rank 0's sleep start + S) - (its own entry), read on the one
 * CLOCK_MONOTONIC the ranks of one machine share (the suite runs on one).
 * Usually a rank enters before the sleep starts, so the bound is >= S.
 * Blocking (time inside the call) and non-blocking (time inside the wait). */
static void t_wait_time(cb_comm *w, int nonblocking) {
    const double S = 0.25;
    cb_comm_stats_reset(w);
    const char *tag = nonblocking ? "t.wait.nb" : "t.wait";
    double start = 0, x = 1;
    cb_comm_barrier(w, "t.sync");
    if (w->rank == 0) start = mono_s(), usleep((useconds_t)(S * 1e6));
    double enter = mono_s();
    if (nonblocking) {
        cb_comm_req q;
        float f = 1;
        cb_comm_iallreduce(w, tag, NULL, &f, 1, CB_COMM_SUM, &q);
        enter = mono_s();
        cb_comm_wait(&q);
    } else {
        cb_comm_allreduce_f64(w, tag, NULL, &x, 1, CB_COMM_SUM);
    }
    cb_comm_bcast_bytes(w, "t.sync", &start, sizeof start, 0);
    const cb_comm_stat *s = cb_comm_stats_find(w, tag);
    double bound = start + S - enter, got = s ? s->seconds : -1;
    errs e = {0};
    if (w->rank) expect(&e, got >= bound - 1e-3, "rank %d waited %.4f s, want >= %.4f (entered %.4f s after the sleep began)",
                        w->rank, got, bound, enter - start);
    double lo = w->rank ? bound : 1e30;
    cb_comm_allreduce_f64(w, "t.sync", NULL, &lo, 1, CB_COMM_MIN);
    char name[96], d[160];
    snprintf(name, sizeof name, "counters: wait time of a %s collective covers a late rank's %.2f s sleep",
             nonblocking ? "non-blocking" : "blocking", S);
    if (w->size > 1) snprintf(d, sizeof d, "every other rank waited >= its bound (smallest bound %.3f s)", lo);
    else snprintf(d, sizeof d, "one rank: nobody waits");
    check_errs(name, &e, d);
}

/* The launcher guard reads only the environment: each variable alone, with
 * this process's own launcher variables cleared and restored after. */
static const char *const LAUNCH_VARS[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_STEP_ID",
                                          "SLURM_STEPID", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS",
                                          "PMIX_RANK", "CUBIST_SINGLETON_OK"};
enum { NLV = sizeof LAUNCH_VARS / sizeof *LAUNCH_VARS };

static int guard(int size, const char *k1, const char *v1, const char *k2, const char *v2, cb_err *er) {
    for (int i = 0; i < NLV; i++) unsetenv(LAUNCH_VARS[i]);
    if (k1) setenv(k1, v1, 1);
    if (k2) setenv(k2, v2, 1);
    memset(er, 0, sizeof *er);
    return cb_comm_launcher_check(size, er);
}

static void t_launcher_guard(void) {
    char *saved[NLV];
    for (int i = 0; i < NLV; i++) saved[i] = getenv(LAUNCH_VARS[i]) ? strdup(getenv(LAUNCH_VARS[i])) : NULL;
    errs e = {0};
    cb_err er;
    expect(&e, guard(1, NULL, NULL, NULL, NULL, &er) == CB_OK, "no launcher: '%s'", er.msg);
    expect(&e, guard(1, "SLURM_STEP_NUM_TASKS", "2", NULL, NULL, &er) == CB_EINPUT &&
               has(er.msg, "launched as 2 tasks by srun (SLURM_STEP_NUM_TASKS=2)") && has(er.msg, "srun --mpi="),
           "srun step: '%s'", er.msg);
    expect(&e, guard(1, "SLURM_NTASKS", "4", "SLURM_STEP_ID", "0", &er) == CB_EINPUT && has(er.msg, "SLURM_NTASKS=4"),
           "SLURM_NTASKS in a step: '%s'", er.msg);
    expect(&e, guard(1, "SLURM_NTASKS", "4", NULL, NULL, &er) == CB_OK, "SLURM_NTASKS of a batch script refused: '%s'", er.msg);
    expect(&e, guard(1, "OMPI_COMM_WORLD_SIZE", "2", NULL, NULL, &er) == CB_EINPUT && has(er.msg, "OpenMPI's mpirun"),
           "OpenMPI launcher: '%s'", er.msg);
    expect(&e, guard(1, "PMI_SIZE", "3", NULL, NULL, &er) == CB_EINPUT && has(er.msg, "PMI_SIZE=3") && has(er.msg, "make MPI="),
           "hydra: '%s'", er.msg);
    expect(&e, guard(1, "MPI_LOCALNRANKS", "2", NULL, NULL, &er) == CB_EINPUT, "hydra local ranks: '%s'", er.msg);
    expect(&e, guard(1, "PMIX_RANK", "1", NULL, NULL, &er) == CB_EINPUT && has(er.msg, "PMIx"), "PMIx task 1: '%s'", er.msg);
    expect(&e, guard(1, "PMIX_RANK", "0", NULL, NULL, &er) == CB_OK, "PMIx task 0 alone refused: '%s'", er.msg);
    expect(&e, guard(1, "PMI_SIZE", "1", NULL, NULL, &er) == CB_OK, "1 task refused: '%s'", er.msg);
    expect(&e, guard(2, "PMI_SIZE", "2", NULL, NULL, &er) == CB_OK, "matching size refused: '%s'", er.msg);
    expect(&e, guard(1, "PMI_SIZE", "2", "CUBIST_SINGLETON_OK", "1", &er) == CB_OK, "override ignored: '%s'", er.msg);
    for (int i = 0; i < NLV; i++) {
        if (saved[i]) setenv(LAUNCH_VARS[i], saved[i], 1);
        else unsetenv(LAUNCH_VARS[i]);
        free(saved[i]);
    }
    check_errs("launcher guard: N tasks but MPI size 1 refused, one line naming the variable and the fix", &e,
               "srun (in a step only), OpenMPI, hydra, PMIx, override, matching sizes");
}

/* ---------------------------------------------------------------- errors */

static void t_agree(cb_comm *w) {
    int p = w->size, r = w->rank;
    errs e = {0};
    expect(&e, cb_comm_agree_error(w, r) == p - 1, "agree_error max != %d", p - 1);
    expect(&e, cb_comm_agree_error(w, 0) == 0, "agree_error of no error != 0");
    cb_err err = {0};
    if (r >= p / 2) cb_fail(&err, CB_EINPUT, "from rank %d", r);
    int code = cb_comm_agree_err(w, &err);
    char want[32];
    snprintf(want, sizeof want, "from rank %d", p / 2);
    expect(&e, code == CB_EINPUT && err.code == CB_EINPUT && strcmp(err.msg, want) == 0,
           "agree_err gave %d '%s', want 2 '%s'", code, err.msg, want);
    cb_err ok = {0};
    expect(&e, cb_comm_agree_err(w, &ok) == CB_OK && ok.code == CB_OK, "agree_err invented an error");
    check_errs("errors: agreement on the largest code and the lowest failing rank's message", &e, "every rank got the same cb_err");
}


static void t_validation(void) {
    errs e = {0};
    cb_err er = {0};
    expect(&e, cb_grid_check(2, 2, 2, CB_TP_1D, 3, &er) == CB_EINPUT && has(er.msg, "needs 8 processes but the job has 3"),
           "product mismatch: '%s'", er.msg);
    expect(&e, cb_grid_check(1, 1, 8, CB_TP_2D, 8, &er) == CB_EINPUT && has(er.msg, "square"), "2d non-square: '%s'", er.msg);
    expect(&e, cb_grid_check(1, 1, 4, CB_TP_3D, 4, &er) == CB_EINPUT && has(er.msg, "cube"), "3d non-cube: '%s'", er.msg);
    expect(&e, cb_grid_check(0, 1, 1, CB_TP_1D, 0, &er) == CB_EINPUT && has(er.msg, "at least 1"), "dp=0: '%s'", er.msg);
    expect(&e, cb_grid_check(1, 1, 1, (cb_tp_mode)7, 1, &er) == CB_EINPUT && has(er.msg, "unknown"), "mode 7: '%s'", er.msg);
    cb_tp_mode m = CB_TP_1D;
    expect(&e, cb_grid_parse_mode("4d", &m, &er) == CB_EINPUT && has(er.msg, "'4d' is unknown"), "parse 4d: '%s'", er.msg);
    expect(&e, cb_grid_parse_mode("3d", &m, &er) == CB_OK && m == CB_TP_3D, "parse 3d");
    expect(&e, cb_grid_check(2, 3, 9, CB_TP_2D, 54, &er) == CB_OK && cb_grid_check(1, 2, 27, CB_TP_3D, 54, &er) == CB_OK,
           "valid grids rejected: '%s'", er.msg);
    expect(&e, cb_grid_side(64, CB_TP_3D) == 4 && cb_grid_side(64, CB_TP_2D) == 8 && cb_grid_side(12, CB_TP_2D) == 0 &&
           cb_grid_side(6, CB_TP_1D) == 6, "cb_grid_side wrong");
    check_errs("grid: validation messages (product, square, cube, sizes, mode)", &e, "one-line messages with the fix");
}

/* Pure arithmetic on grids too large to launch here: every world rank maps
 * to in-range coordinates that map back to it. */
static void t_coords_large(void) {
    struct { int dp, pp, tp; cb_tp_mode m; } gs[] = {
        { 2, 3, 27, CB_TP_3D }, { 3, 2, 16, CB_TP_2D }, { 5, 1, 64, CB_TP_3D }, { 2, 4, 6, CB_TP_1D },
    };
    errs e = {0};
    for (size_t n = 0; n < sizeof gs / sizeof gs[0]; n++) {
        int dp = gs[n].dp, pp = gs[n].pp, tp = gs[n].tp, q = cb_grid_side(tp, gs[n].m);
        for (int w = 0; w < dp * pp * tp; w++) {
            cb_grid_coord a = cb_grid_coords(dp, pp, tp, gs[n].m, w);
            int t = gs[n].m == CB_TP_3D ? (a.i * q + a.j) * q + a.k : gs[n].m == CB_TP_2D ? a.r * q + a.c : a.t;
            int mx = a.i > a.j ? a.i : a.j;
            mx = mx > a.k ? mx : a.k;
            mx = mx > a.r ? mx : a.r;
            mx = mx > a.c ? mx : a.c;
            expect(&e, (a.d * pp + a.p) * tp + a.t == w && t == a.t && a.d < dp && a.p < pp && mx < q,
                   "dp=%d pp=%d tp=%d %s: rank %d -> d=%d p=%d t=%d (%d,%d,%d)", dp, pp, tp,
                   cb_grid_mode_name(gs[n].m), w, a.d, a.p, a.t, a.i, a.j, a.k);
        }
    }
    check_errs("grid: coordinates invert for 2x3x27 3d, 3x2x16 2d, 5x1x64 3d, 2x4x6 1d", &e, "every rank round-trips");
}

/* ---------------------------------------------------------------- grid */

/* World rank of the member at group rank x of the group `which` of g's rank. */
static int member(const cb_grid *g, const cb_comm *which, int x) {
    const cb_grid_coord *a = &g->at;
    int q = g->q, base = (a->d * g->pp + a->p) * g->tp;
    if (which == &g->world) return x;
    if (which == &g->dpg) return (x * g->pp + a->p) * g->tp + a->t;
    if (which == &g->ppg) return (a->d * g->pp + x) * g->tp + a->t;
    if (which == &g->tpg) return base + x;
    if (which == &g->model) return a->d * g->pp * g->tp + x;
    if (which == &g->row) return base + a->r * q + x;
    if (which == &g->col) return base + x * q + a->c;
    if (which == &g->weight) return base + (x * q + a->j) * q + a->k;
    if (which == &g->input) return base + (a->i * q + x) * q + a->k;
    if (which == &g->output) return base + (a->i * q + a->j) * q + x;
    if (which == &g->in_w) return base + x * q + a->k;
    if (which == &g->out_w) return base + ((x / q) * q + a->j) * q + x % q;
    return -1;
}

/* Expected (size, rank) of each group for g's rank. */
static void want_shape(const cb_grid *g, const cb_comm *c, int *size, int *rank) {
    const cb_grid_coord *a = &g->at;
    int q = g->q;
    struct { const cb_comm *c; int size, rank; } t[] = {
        { &g->world, g->world_size, g->world_rank }, { &g->dpg, g->dp, a->d }, { &g->ppg, g->pp, a->p },
        { &g->tpg, g->tp, a->t }, { &g->model, g->pp * g->tp, a->p * g->tp + a->t },
        { &g->row, q, a->c }, { &g->col, q, a->r },
        { &g->weight, q, a->i }, { &g->input, q, a->j }, { &g->output, q, a->k },
        { &g->in_w, q * q, a->i * q + a->j }, { &g->out_w, q * q, a->i * q + a->k },
    };
    *size = *rank = -1;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].c == c) *size = t[i].size, *rank = t[i].rank;
}

static void check_coords(const cb_grid *g, errs *e) {
    const cb_grid_coord *a = &g->at;
    int q = g->q;
    expect(e, (a->d * g->pp + a->p) * g->tp + a->t == g->world_rank && a->d < g->dp && a->p < g->pp && a->t < g->tp,
           "rank %d -> d=%d p=%d t=%d", g->world_rank, a->d, a->p, a->t);
    if (g->mode == CB_TP_2D) expect(e, a->r * q + a->c == a->t && a->r < q && a->c < q, "t=%d -> r=%d c=%d", a->t, a->r, a->c);
    if (g->mode == CB_TP_3D)
        expect(e, (a->i * q + a->j) * q + a->k == a->t && a->i < q && a->j < q && a->k < q,
               "t=%d -> i=%d j=%d k=%d", a->t, a->i, a->j, a->k);
    int want_n = 5 + (g->mode == CB_TP_2D ? 2 : g->mode == CB_TP_3D ? 5 : 0);
    expect(e, g->ncomms == want_n, "%d communicators, want %d", g->ncomms, want_n);
}

static void check_groups(const cb_grid *g, errs *e) {
    for (int k = 0; k < g->ncomms; k++) {
        const cb_comm *c = g->comms[k];
        int size, rank;
        want_shape(g, c, &size, &rank);
        expect(e, c->size == size && c->rank == rank, "%s: size %d rank %d, want %d %d", c->name, c->size, c->rank, size, rank);
        int *ids = malloc((size_t)c->size * sizeof *ids);
        MPI_Allgather(&g->world_rank, 1, MPI_INT, ids, 1, MPI_INT, c->comm);
        for (int x = 0; x < c->size; x++)
            expect(e, ids[x] == member(g, c, x), "%s of world rank %d: member %d is world rank %d, want %d",
                   c->name, g->world_rank, x, ids[x], member(g, c, x));
        free(ids);
    }
}

static void t_grid(int dp, int pp, int tp, cb_tp_mode mode, int collectives) {
    cb_grid g;
    cb_err er = {0};
    char name[96], d[256];
    snprintf(name, sizeof name, "grid dp=%d pp=%d tp=%d %s", dp, pp, tp, cb_grid_mode_name(mode));
    errs e = {0};
    int rc = cb_grid_create(&g, dp, pp, tp, mode, &er);
    expect(&e, rc == CB_OK, "create failed: %s", er.msg);
    if (rc == CB_OK) check_coords(&g, &e), check_groups(&g, &e);
    snprintf(d, sizeof d, "%s: coordinates, group sizes, ranks and members in block order", name);
    check_errs(d, &e, rc == CB_OK ? "ok" : "");
    if (rc != CB_OK) return;
    if (collectives) {
        errs v = {0}, b = {0};
        int ran = 0;
        for (int k = 0; k < g.ncomms; k++) /* size 1 and the whole world are covered elsewhere */
            if (g.comms[k]->size > 1 && g.comms[k]->size < g.world_size) run_collectives(g.comms[k], &v, &b), ran++;
        snprintf(d, sizeof d, "%s: collectives and counters on each group of 1 < size < world (%d)", name, ran);
        if (b.n) expect(&v, 0, "counters: %s", b.first);
        check_errs(d, &v, "values and bytes ok");
    }
    cb_grid_free(&g);
}

/* Every (dp, pp, tp, mode) whose product is the world size; collectives
 * on the groups of those that mix two kinds of parallelism or have tensor
 * planes (oversubscribed MPICH spins: a collective costs ~10 ms at np 8). */
static void t_all_grids(int world) {
    for (int tp = 1; tp <= world; tp++)
        for (int pp = 1; pp <= world / tp; pp++) {
            if (world % (tp * pp)) continue;
            int dp = world / (tp * pp);
            for (int m = CB_TP_1D; m <= CB_TP_3D; m++)
                if (cb_grid_side(tp, (cb_tp_mode)m) && (m == CB_TP_1D || tp > 1 || pp == 1))
                    t_grid(dp, pp, tp, (cb_tp_mode)m, (dp > 1) + (pp > 1) + (tp > 1) >= 2 || (m != CB_TP_1D && tp > 1));
        }
}

/* ---------------------------------------------------------------- drills */

/* Rank `who` fails alone; the rest wait in a barrier the launcher must end. */
static void drill(const char *kind, int who, cb_comm *w) {
    if (w->rank == who && strcmp(kind, "--die") == 0) _exit(3);
    if (w->rank == who && strcmp(kind, "--fatal") == 0) cb_comm_fatal("drill: this rank found a fatal error");
    if (strcmp(kind, "--local-error") == 0) {
        cb_err e = {0};
        if (w->rank == who) cb_fail(&e, CB_EINPUT, "drill: data/x.bin seen by rank %d is empty; run `cubist prepare`", who);
        if (cb_comm_agree_err(w, &e)) cb_comm_exit(e.code, e.msg);
    }
    if (strcmp(kind, "--stall") == 0) {
        /* rank `who` stays away 30 s; root 0 waits for it in a gather under
         * a 2 s watchdog, which must name it as not arrived; the others
         * wait in the barrier (answering) under a 60 s one */
        cb_comm_set_stall_timeout(w->rank == 0 ? 2 : 60);
        if (w->rank == who) sleep(30);
        char mine = (char)w->rank, all[256];
        if (w->size > (int)sizeof all) cb_comm_exit(CB_EINPUT, "test_comm: --stall needs at most 256 ranks");
        cb_comm_gather_bytes(w, "drill", &mine, all, 1, 0);
    }
    cb_comm_barrier(w, "drill");
    cb_comm_exit(0, NULL);
}

static int arg_int(int argc, char **argv, int i) {
    if (i + 1 >= argc) cb_comm_exit(CB_EINPUT, "test_comm: a flag is missing its value");
    return atoi(argv[i + 1]);
}

int main(int argc, char **argv) {
    cb_err e = {0};
    if (cb_comm_init(&argc, &argv, &e)) { fprintf(stderr, "cubist: %s\n", e.msg); return CB_ESYS; }
    cb_comm *w = cb_comm_world();
    g_rank = w->rank, g_size = w->size;
    int dp = 1, pp = 1, tp = 1, print = 0, one_grid = 0;
    const char *mode_s = "1d";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--dp") || !strcmp(a, "--pp") || !strcmp(a, "--tp") || !strcmp(a, "--tp-mode")) {
            if (i + 1 >= argc) cb_comm_exit(CB_EINPUT, "test_comm: a flag is missing its value");
            one_grid = 1;
            const char *v = argv[++i];
            if (!strcmp(a, "--tp-mode")) mode_s = v;
            else *(a[2] == 'd' ? &dp : a[3] == 'p' && a[2] == 'p' ? &pp : &tp) = atoi(v);
        } else if (!strcmp(a, "--print-grid")) {
            print = 1;
        } else if (!strcmp(a, "--die") || !strcmp(a, "--fatal") || !strcmp(a, "--local-error") ||
                   !strcmp(a, "--stall")) {
            drill(a, arg_int(argc, argv, i), w);
        } else {
            cb_comm_exit(CB_EINPUT, "test_comm: unknown flag; use --dp --pp --tp --tp-mode --print-grid");
        }
    }
    if (one_grid) {
        cb_tp_mode mode = CB_TP_1D;
        cb_grid g = {0};
        int rc = cb_grid_parse_mode(mode_s, &mode, &e);
        if (!rc) rc = cb_grid_create(&g, dp, pp, tp, mode, &e);
        if (cb_comm_agree_err(w, &e)) cb_comm_exit(e.code, e.msg);
        char *hosts = print ? cb_grid_hosts(&g) : NULL;
        if (hosts) cb_grid_print(&g, hosts, stdout);
        free(hosts);
        cb_grid_free(&g);
        t_grid(dp, pp, tp, mode, 1);
    } else {
        t_counters_world(w);
        t_reduce_root_last(w);
        t_bf16f(w);
        t_wait_time(w, 0);
        t_wait_time(w, 1);
        t_launcher_guard();
        t_reports(w);
        t_agree(w);
        t_validation();
        t_coords_large();
        t_all_grids(g_size);
    }
    int failed = g_failed;
    cb_comm_finalize();
    return failed ? 1 : 0;
}
