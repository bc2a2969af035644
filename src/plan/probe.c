/* The calibration probe of this machine: cubist's own CPU kernels, timed
 * on the calling thread's OpenMP team, and MPI collectives on the world.
 * Each figure is the best of 15 repetitions of at least 5 ms (best, not
 * mean, and short windows: on a shared machine some window runs alone, and
 * what other processes steal is not a property of the kernel). One thread
 * is timed in its CPU time, which leaves out the slices other processes
 * take. A team of threads is timed by the wall clock in the windows where
 * its threads were on their CPUs 90% of the time (as the MFU peak is,
 * src/kernels/peak.c), as its steps are timed; the busiest thread's CPU
 * time, used before, does not see threads that ran one after the other,
 * each alone on the memory bus. With no such window (a loaded machine)
 * the busiest thread's CPU time stands in: wall time on a loaded machine
 * measured two threads slower than one. */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "kernels/peak.h"
#include "plan/plan.h"
#include "util/clock.h"

#define MIN_S 0.005
#define REPS 15

typedef void (*body_fn)(void *arg);

/* Each team thread's CPU seconds into t[thread] (OpenMP keeps the team's
 * threads from one parallel region to the next). */
static void team_cpu_s(double *t) {
#pragma omp parallel
    t[omp_get_thread_num()] = cb_clock_s(CLOCK_THREAD_CPUTIME_ID);
}

#define MAX_TEAM 256

/* A window of calls of f: seconds per call by the wall clock, and by the
 * team's busiest thread's CPU time; whether its threads were on their
 * CPUs (their mean CPU time at least CB_PEAK_HELD of the wall). The
 * window's length is judged on the calling thread's CPU time (cheap, and
 * it works in every call). */
typedef struct window {
    double wall, cpu;
    int held;
} window;

static window window_s(body_fn f, void *arg) {
    double a[MAX_TEAM] = {0}, b[MAX_TEAM] = {0}, busiest = 0, sum = 0;
    int it = 0, n = omp_get_max_threads() < MAX_TEAM ? omp_get_max_threads() : MAX_TEAM;
    team_cpu_s(a);
    double w0 = omp_get_wtime(), t0 = cb_clock_s(CLOCK_THREAD_CPUTIME_ID);
    do {
        f(arg);
        it++;
    } while (cb_clock_s(CLOCK_THREAD_CPUTIME_ID) - t0 < MIN_S);
    double wall = omp_get_wtime() - w0;
    team_cpu_s(b);
    for (int i = 0; i < n; i++) busiest = fmax(busiest, b[i] - a[i]), sum += b[i] - a[i];
    return (window){wall / it, busiest / it, sum / n >= CB_PEAK_HELD * wall};
}

/* cb_plan_probe_placement's state: the placement wanted, the windows
 * judged and kept */
static struct {
    int want, judged, kept;
} place;

void cb_plan_probe_placement(int want, int *judged, int *kept) {
    if (judged) *judged = place.judged;
    if (kept) *kept = place.kept;
    place.want = want, place.judged = place.kept = 0;
}

/* whether windows of `threads` threads are judged by placement: with one
 * wanted and more than one thread; such a figure tries up to 4 x its
 * windows for as many kept (best_of, together_s, probe_gemm_shared) */
static int judging(int threads) { return threads > 1 && place.want; }
#define JUDGED_TRIES 4

/* whether a team's window just ended counts: its cores where wanted
 * (asked only when judging) */
static int placed(void) {
    double rt = 1e9 * cb_core_round_trip_quick();
    if (isnan(rt)) return 1;
    int ok = (rt <= CB_RT_NEAR_NS) == (place.want == 1);
    place.judged++, place.kept += ok;
    return ok;
}

/* The best window of REPS: one thread's CPU time; a team's wall time over
 * the windows its threads held their CPUs, else (none did) its busiest
 * thread's CPU time. With a placement wanted, a team's windows count when
 * its cores sat there: up to 4 REPS windows for REPS such; with none,
 * INFINITY: not measured in that state (the calibration writes such a
 * figure as 0, and cb_plan_cluster_best takes it from the runs that
 * measured it; the best of every window, returned here before, wrote the
 * other state's figure into this state's calibration). */
static double best_of(body_fn f, void *arg) {
    double cpu = 1e30, wall = 1e30;
    if (omp_get_max_threads() > MAX_TEAM) omp_set_num_threads(MAX_TEAM);
    int team = omp_get_max_threads() > 1, judge = judging(omp_get_max_threads()), got = 0;
    f(arg); /* touch the buffers */
    for (int r = 0; got < REPS && r < (judge ? JUDGED_TRIES : 1) * REPS; r++) {
        window w = window_s(f, arg);
        if (judge && !placed()) continue;
        got++;
        cpu = fmin(cpu, w.cpu);
        if (w.held) wall = fmin(wall, w.wall);
    }
    if (!got) return INFINITY;
    return team && wall < 1e30 ? wall : cpu;
}

/* GEMM operands cycle through sets that together exceed a last-level
 * cache (64 MB, at most 64 sets): a step's weights and activations come
 * from memory, not from the cache the previous call left them in. */
#define GEMM_SETS_BYTES (64.0 * (1 << 20))
#define GEMM_MAX_SETS 64

/* The probe's kernel table: the CPU table (ctx NULL) or the one in ctx
 * (cb_plan_probe_cpu_bf16: the bf16 table) */
static const cb_kernels *table(const void *ctx) { return ctx ? ctx : cb_kernels_cpu(); }

typedef struct gemm_arg {
    const cb_kernels *kt;
    int m, k, n, nset, cur;
    float *x[GEMM_MAX_SETS], *w[GEMM_MAX_SETS], *y, *dx, *dw[GEMM_MAX_SETS], *b, *db;
    float *wblock; /* the sets' weights, one block: parameters to a table that keeps copies */
} gemm_arg;

/* with a bias, as the model's linears have one (its add and its gradient's
 * column sums are part of the linear's time) */
static void gemm_body(void *p) {
    gemm_arg *a = p;
    const cb_kernels *k = a->kt;
    int s = a->cur;
    a->cur = (a->cur + 1) % a->nset;
    k->matmul_forward(k, a->y, a->x[s], a->w[s], a->b, a->m, a->k, a->n);
    /* acc 0: the step's first write of a weight's gradient overwrites
     * (docs/engine.md); only later micro-batches accumulate */
    k->matmul_backward(k, a->dx, a->dw[s], a->db, a->y, a->x[s], a->w[s], a->m, a->k, a->n, 0);
}

static float *filled(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; p && i < n; i++) p[i] = (float)((i * 37) % 101) * 0.01f - 0.5f;
    return p;
}

/* A GEMM's operand sets and buffers; 0 when out of memory. The weights
 * are the parameters of a step: a table that keeps converted copies of
 * them (bf16) converts each once, as the step's forward and backward do
 * between two updates. */
static int gemm_alloc(gemm_arg *a, const cb_kernels *kt, int m, int k, int n) {
    size_t mk = (size_t)m * k, kn = (size_t)k * n, mn = (size_t)m * n;
    double set = 4.0 * (mk + 2 * kn);
    int nset = (int)fmin(GEMM_MAX_SETS, fmax(1, ceil(GEMM_SETS_BYTES / set)));
    *a = (gemm_arg){.kt = kt,
                    .m = m,
                    .k = k,
                    .n = n,
                    .nset = nset,
                    .y = filled(mn),
                    .dx = filled(mk),
                    .b = filled(n),
                    .db = filled(n),
                    .wblock = filled(kn * nset)};
    int ok = a->y && a->dx && a->b && a->db && a->wblock;
    for (int i = 0; i < a->nset; i++) {
        a->x[i] = filled(mk), a->w[i] = a->wblock ? a->wblock + kn * i : NULL,
        a->dw[i] = filled(kn);
        ok &= a->x[i] && a->dw[i];
    }
    if (ok && kt != cb_kernels_cpu()) cb_kernels_params_written(a->wblock, kn * nset);
    return ok;
}

static void gemm_free(gemm_arg *a) {
    if (a->wblock && a->kt != cb_kernels_cpu()) cb_kernels_params_freed(a->wblock);
    for (int i = 0; i < a->nset; i++) free(a->x[i]), free(a->dw[i]);
    free(a->y), free(a->dx), free(a->b), free(a->db), free(a->wblock);
}

static double probe_gemm(void *ctx, int m, int k, int n) {
    gemm_arg a;
    double t = gemm_alloc(&a, table(ctx), m, k, n) ? best_of(gemm_body, &a) : 1e30;
    gemm_free(&a);
    return t;
}

typedef struct mem_arg {
    int N, C;
    float *x, *y, *h, *g, *dx, *dh, *w, *b, *dw, *db, *mean, *rstd;
} mem_arg;

/* what a block runs besides GEMMs and attention: two LayerNorms, GELU over
 * 4C, two residuals, forward and backward */
static void mem_body(void *p) {
    mem_arg *a = p;
    const cb_kernels *k = cb_kernels_cpu();
    size_t nc = (size_t)a->N * a->C;
    for (int r = 0; r < 2; r++) {
        k->layernorm_forward(k, a->y, a->mean, a->rstd, a->x, a->w, a->b, a->N, a->C);
        k->residual_forward(k, a->y, a->y, a->x, nc);
        k->layernorm_backward(k, a->dx, a->dw, a->db, a->y, a->x, a->w, a->mean, a->rstd, a->N, a->C,
                              1);
    }
    k->gelu_forward(k, a->g, a->h, 4 * nc);
    k->gelu_backward(k, a->dh, a->h, a->g, 4 * nc);
}

typedef struct ew_arg {
    int kind, n;
    float *x, *y, *d;
} ew_arg;

/* the exact GELU forward and backward, or dropout's forward and its
 * backward (the same call on the gradient), over n elements */
static void ew_body(void *p) {
    ew_arg *a = p;
    const cb_kernels *k = cb_kernels_cpu();
    if (a->kind == CB_PLAN_EW_GELU_ERF) {
        k->gelu_erf_forward(k, a->y, a->x, (size_t)a->n);
        k->gelu_erf_backward(k, a->d, a->x, a->y, (size_t)a->n);
    } else {
        int cols = 1024, rows = a->n / cols;
        k->dropout(k, a->y, a->x, rows, cols, cols, 0, 0, cols, 7, 0.1f);
        k->dropout(k, a->d, a->y, rows, cols, cols, 0, 0, cols, 7, 0.1f);
    }
}

static double probe_elementwise(void *ctx, int kind, int n) {
    (void)ctx;
    ew_arg a = {kind, n, filled((size_t)n), filled((size_t)n), filled((size_t)n)};
    double t = a.x && a.y && a.d ? best_of(ew_body, &a) : 1e30;
    free(a.x), free(a.y), free(a.d);
    return t;
}

/* The memory-bound kernels' buffers on (N, C); 0 when out of memory. */
static int mem_alloc(mem_arg *a, int N, int C) {
    size_t nc = (size_t)N * C;
    *a = (mem_arg){N, C, filled(nc), filled(nc), filled(4 * nc), filled(4 * nc), filled(nc),
                   filled(4 * nc), filled(C), filled(C), filled(C), filled(C), filled(N), filled(N)};
    float *all[] = {a->x, a->y, a->h, a->g, a->dx, a->dh, a->w, a->b, a->dw, a->db, a->mean, a->rstd};
    int ok = 1;
    for (int i = 0; i < 12; i++) ok &= all[i] != NULL;
    return ok;
}

static void mem_free(mem_arg *a) {
    float *all[] = {a->x, a->y, a->h, a->g, a->dx, a->dh, a->w, a->b, a->dw, a->db, a->mean, a->rstd};
    for (int i = 0; i < 12; i++) free(all[i]);
}

static double probe_memory(void *ctx, int N, int C) {
    (void)ctx;
    mem_arg a;
    double t = mem_alloc(&a, N, C) ? best_of(mem_body, &a) : 1e30;
    mem_free(&a);
    return t;
}

#define MAX_STREAMS 64

/* One window of n threads, each running f alone (no nested team) `it`
 * times on its own arg[i], all at once: seconds per call. The threads
 * start together; each thread's span ends when its own calls are done,
 * and the window's time is the longest span (a step goes at its slowest
 * rank). The window counts when every thread was on its core 90% of its
 * own span or more (its CPU time against its span): on a shared machine a
 * thread that loses its core lets the others run alone (a window too
 * fast) or holds them up (too slow); neither is the figure. A thread that
 * finishes first is not judged on its wait: this VM's two vCPUs ran the
 * same GEMMs up to 10% apart, and judging both on the slower one's span
 * rejected every window of the 512 GEMMs. 1e30: the window did not run
 * together. *it grows until a window lasts MIN_S. */
static double together_window(body_fn f, void **arg, int n, int *it) {
    double span = 0, ok = 1;
    int levels = omp_get_max_active_levels(), k = *it;
    omp_set_max_active_levels(1); /* each thread's kernels on that thread */
#pragma omp parallel num_threads(n) reduction(max : span) reduction(min : ok)
    {
#pragma omp barrier
        double t0 = omp_get_wtime(), c0 = cb_clock_s(CLOCK_THREAD_CPUTIME_ID);
        for (int i = 0; i < k; i++) f(arg[omp_get_thread_num()]);
        double mine = omp_get_wtime() - t0;
        span = mine;
        ok = omp_get_num_threads() == n && cb_clock_s(CLOCK_THREAD_CPUTIME_ID) - c0 >= 0.9 * mine;
    }
    omp_set_max_active_levels(levels);
    if (span < MIN_S) *it = (int)(MIN_S * k / span) + 1;
    return ok ? span / k : 1e30;
}

/* The best of 3 x REPS windows together (after one that only touches).
 * With a placement wanted (cb_plan_probe_placement), of those that ran
 * together with the cores where wanted: up to 4 x 3 x REPS windows for 3
 * x REPS such; 1e30 with none, as with no window together. */
static double together_s(body_fn f, void **arg, int n) {
    double best = 1e30;
    int it = 1, want = 3 * REPS, judge = judging(n);
    together_window(f, arg, n, &it);
    for (int r = 0, got = 0; got < want && r < (judge ? JUDGED_TRIES : 1) * want; r++) {
        double t = together_window(f, arg, n, &it);
        if (t > 1e29 || (judge && !placed())) continue;
        got++, best = fmin(best, t);
    }
    return best;
}

/* the block's memory-bound kernels on every stream's own buffers at once */
static double probe_memory_shared(void *ctx, int N, int C, int streams) {
    (void)ctx;
    mem_arg a[MAX_STREAMS];
    void *arg[MAX_STREAMS];
    int ok = 1, n = streams < MAX_STREAMS ? streams : MAX_STREAMS;
    for (int i = 0; i < n; i++) ok &= mem_alloc(&a[i], N, C), arg[i] = &a[i];
    double t = ok ? together_s(mem_body, arg, n) : 1e30;
    for (int i = 0; i < n; i++) mem_free(&a[i]);
    return t;
}

/* The share of its rate alone that the GEMM keeps on each of `streams`
 * threads running it at once on their own operands: the best of 3 x REPS
 * windows of one thread alone against the best of as many windows of all
 * together (both timed and judged alike, together_window), the two
 * alternated window by window, so that the host's speed
 * moving between them (1.5-2x within an hour on this VM) is in both. With
 * a placement wanted, the pairs whose window together had the cores
 * where wanted, up to 4 x as many pairs (as together_s). 0: never ran
 * together (in the placement wanted). */
static double probe_gemm_shared(void *ctx, int m, int k, int n, int streams) {
    gemm_arg a[MAX_STREAMS];
    void *arg[MAX_STREAMS];
    int ok = 1, s = streams < MAX_STREAMS ? streams : MAX_STREAMS, it1 = 1, it = 1;
    int want = 3 * REPS, judge = judging(s), tries = (judge ? JUDGED_TRIES : 1) * want;
    for (int i = 0; i < s; i++) ok &= gemm_alloc(&a[i], table(ctx), m, k, n), arg[i] = &a[i];
    double alone = 1e30, both = 1e30;
    for (int r = 0, got = 0; ok && got < want && r <= tries; r++) {
        double t = together_window(gemm_body, arg, 1, &it1);
        double u = together_window(gemm_body, arg, s, &it);
        if (!r || u > 1e29 || (judge && !placed())) continue; /* r 0 touches */
        got++, alone = fmin(alone, t), both = fmin(both, u);
    }
    for (int i = 0; i < s; i++) gemm_free(&a[i]);
    return ok && both < 1e29 ? fmin(1, alone / both) : 0;
}

typedef struct upd_arg {
    size_t n;
    float *p, *g, *m, *v;
} upd_arg;

/* the step's update of n parameters: the gradient's squared norm, the
 * 1/dp scale, AdamW (40 bytes a parameter; the gradient is not cleared:
 * the engine overwrites it at its first write) */
static void upd_body(void *x) {
    upd_arg *a = x;
    const cb_kernels *k = cb_kernels_cpu();
    volatile double norm = k->sumsq(k, a->g, a->n);
    (void)norm;
    k->scale(k, a->g, 0.5f, a->n);
    k->adamw(k, a->p, a->g, 1, a->m, a->v, a->n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f);
}

static double probe_update(void *ctx, int n, int streams) {
    (void)ctx;
    upd_arg a[MAX_STREAMS];
    void *arg[MAX_STREAMS];
    int ok = 1, s = streams < MAX_STREAMS ? streams : MAX_STREAMS;
    for (int i = 0; i < s; i++) {
        a[i] = (upd_arg){(size_t)n, filled((size_t)n), filled((size_t)n), filled((size_t)n),
                         filled((size_t)n)};
        ok &= a[i].p && a[i].g && a[i].m && a[i].v, arg[i] = &a[i];
    }
    for (int i = 0; ok && i < s; i++) /* a second moment >= 0, as AdamW keeps it */
        for (int j = 0; j < n; j++) a[i].v[j] = fabsf(a[i].v[j]);
    double t = !ok ? 1e30 : s > 1 ? together_s(upd_body, arg, s) : best_of(upd_body, &a[0]);
    for (int i = 0; i < s; i++) free(a[i].p), free(a[i].g), free(a[i].m), free(a[i].v);
    return t;
}

/* The largest cache of cpu0 (sysfs; glibc's sysconf reports the host's on
 * some virtual machines), else sysconf's last level; 0: unknown. */
static double llc_bytes(void) {
    double most = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], unit = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        double v = 0;
        if (!f) continue;
        if (fscanf(f, "%lf%c", &v, &unit) >= 1)
            v *= unit == 'K' ? 1024 : unit == 'M' ? 1048576 : 1;
        fclose(f);
        if (v > most) most = v;
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (most <= 0) most = (double)sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return most > 0 ? most : 0;
}

typedef struct att_arg {
    const cb_kernels *kt;
    int B, T, C, NH;
    float *qkv, *out, *att, *dqkv, *sc;
} att_arg;

static void att_body(void *p) {
    att_arg *a = p;
    const cb_kernels *k = a->kt;
    cb_attn d = cb_attn_self(a->B, a->T, a->C, a->NH, 1, NULL);
    k->attention_forward(k, &d, a->out, a->att, a->qkv, a->qkv);
    k->attention_backward(k, &d, a->dqkv, a->dqkv, a->sc, a->out, a->qkv, a->qkv, a->att);
}

static double probe_attention(void *ctx, int B, int T, int C, int NH) {
    size_t btc = (size_t)B * T * C, att = (size_t)B * NH * T * T;
    att_arg a = {table(ctx),      B,          T, C, NH, filled(3 * btc), filled(btc), filled(att),
                 filled(3 * btc), filled(att)};
    double t = a.qkv && a.out && a.att && a.dqkv && a.sc ? best_of(att_body, &a) : 1e30;
    free(a.qkv), free(a.out), free(a.att), free(a.dqkv), free(a.sc);
    return t;
}

typedef struct coll_arg {
    const char *op;
    int n, p, rank;
    float *a, *b;
} coll_arg;

static void coll_body(void *v) {
    coll_arg *c = v;
    MPI_Comm w = MPI_COMM_WORLD;
    int blk = c->n / c->p;
    if (!strcmp(c->op, "allreduce")) MPI_Allreduce(c->a, c->b, c->n, MPI_FLOAT, MPI_SUM, w);
    else if (!strcmp(c->op, "allgather")) MPI_Allgather(c->a, blk, MPI_FLOAT, c->b, blk, MPI_FLOAT, w);
    else if (!strcmp(c->op, "reduce_scatter")) MPI_Reduce_scatter_block(c->a, c->b, blk, MPI_FLOAT, MPI_SUM, w);
    else if (!strcmp(c->op, "bcast")) MPI_Bcast(c->a, c->n, MPI_FLOAT, 0, w);
    else if (!strcmp(c->op, "iallreduce")) {
        MPI_Request q;
        int done = 0;
        /* in place, as the buckets are (out of place ran 2.5x faster) */
        MPI_Iallreduce(MPI_IN_PLACE, c->b, c->n, MPI_FLOAT, MPI_SUM, w, &q);
        while (!done) MPI_Test(&q, &done, MPI_STATUS_IGNORE);
    }
    else {
        int peer = c->rank ^ 1;
        MPI_Request r[2];
        MPI_Status st[2]; /* not MPI_STATUSES_IGNORE: MPICH's (a pointer of value 1)
                           * fails gcc's -Wstringop-overflow under -Werror */
        if (peer >= c->p) return;
        MPI_Irecv(c->b, c->n, MPI_FLOAT, peer, 7, w, &r[0]);
        MPI_Isend(c->a, c->n, MPI_FLOAT, peer, 7, w, &r[1]);
        MPI_Waitall(2, r, st);
    }
}

/* Every rank runs the same repetitions: the count is rank 0's, broadcast,
 * so that no rank waits in a collective the others have left. */
static double probe_coll(void *ctx, const char *op, int n) {
    (void)ctx;
    coll_arg c = {op, n, 1, 0, filled((size_t)n), filled((size_t)n)};
    MPI_Comm_size(MPI_COMM_WORLD, &c.p);
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    c.n = n / c.p * c.p;
    int it = 1;
    double best = 1e30;
    coll_body(&c);
    for (int r = 0; r < REPS; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < it; i++) coll_body(&c);
        double t = (MPI_Wtime() - t0) / it;
        MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (t < best) best = t;
        int more = t * it < MIN_S ? (int)(MIN_S / t) + 1 : it;
        MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
        it = more;
    }
    free(c.a), free(c.b);
    return best;
}

void cb_plan_probe_cpu(cb_plan_probe *pr) {
    int init = 0, size = 1;
    MPI_Initialized(&init);
    if (init) MPI_Comm_size(MPI_COMM_WORLD, &size);
    *pr = (cb_plan_probe){probe_gemm,        probe_memory,        probe_attention,
                          probe_coll,        NULL,                size,
                          probe_elementwise, probe_memory_shared, llc_bytes(),
                          probe_update,      probe_gemm_shared, NULL};
}

static double probe_reorder(void *ctx, int m, int k, int n, double *bytes) {
    *bytes = 0;
    return table(ctx) == cb_kernels_bf16() ? cb_kernels_bf16_reorder_s(m, k, n, bytes) : 0;
}

void cb_plan_probe_cpu_bf16(cb_plan_probe *pr) {
    cb_plan_probe_cpu(pr);
    pr->ctx = (void *)cb_kernels_bf16();
    pr->reorder = probe_reorder;
}
