#include "kernels/peak.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "formats/fileio.h"
#include "util/clock.h"

char *openblas_get_corename(void);

enum { CB_PEAK_MAX_AGE_S = 24 * 3600 };

/* CPU seconds of the OpenMP team's threads (the threads OpenBLAS and
 * oneDNN compute on), each read by the thread itself: exact, where the
 * process clock misses other threads' time since their last tick */
static double team_cpu_s(void) {
    double s = 0;
#pragma omp parallel reduction(+ : s)
    s += cb_clock_s(CLOCK_THREAD_CPUTIME_ID);
    return s;
}

/* The best window by the wall clock when any window had its threads on
 * their CPUs (the rate of the threads running together, which is what a
 * step gets); else, on a busy machine, the best by the seconds the
 * threads ran (their CPU time over the thread count), which waiting for
 * a CPU or a stolen slice does not lower: one process's bf16 windows ran
 * 80-190 GFLOP/s by the wall clock and 570-760 per CPU-second there
 * (docs/precision.md, "The GEMM peaks"). Best, not mean: disturbance
 * only ever slows a window. */
double cb_peak_time(void (*call)(void *), void *ctx, cb_peak_info *info) {
    const double flops = 2.0 * CB_PEAK_N * CB_PEAK_N * CB_PEAK_N;
    const int nt = omp_get_max_threads();
    double t0 = omp_get_wtime();
    do call(ctx);
    while (omp_get_wtime() - t0 < CB_PEAK_WARMUP_S);
    double best_cpu = 0, best_wall = 0, wall_sum = 0, cpu_sum = 0;
    int clean = 0;
    for (int w = 0; w < CB_PEAK_WINDOWS; w++) {
        double w0 = omp_get_wtime(), c0 = team_cpu_s(), dt;
        int calls = 0;
        do call(ctx), calls++;
        while ((dt = omp_get_wtime() - w0) < CB_PEAK_WINDOW_S);
        double dc = (team_cpu_s() - c0) / nt;
        if (dc > dt) dc = dt;
        clean |= dc >= CB_PEAK_HELD * dt;
        best_cpu = fmax(best_cpu, flops * calls / dc / 1e9);
        best_wall = fmax(best_wall, flops * calls / dt / 1e9);
        wall_sum += dt, cpu_sum += dc;
    }
    double peak = clean ? best_wall : best_cpu;
    if (info) *info = (cb_peak_info){peak, best_wall, cpu_sum / wall_sum, clean, NULL, NULL, 0};
    return peak;
}

typedef struct sgemm_ctx {
    const float *a, *b;
    float *c;
} sgemm_ctx;

static void sgemm_call(void *p) {
    const sgemm_ctx *x = p;
    const int N = CB_PEAK_N;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1, x->a, N, x->b, N, 0, x->c, N);
}

double cb_peak_measure(cb_peak_info *info) {
    const size_t nn = (size_t)CB_PEAK_N * CB_PEAK_N;
    float *a = malloc(sizeof(float) * 3 * nn);
    if (!a) return 0;
    for (size_t i = 0; i < 3 * nn; i++) a[i] = (float)(i % 7) * 0.1f;
    sgemm_ctx x = {a, a + nn, a + 2 * nn};
    double p = cb_peak_time(sgemm_call, &x, info);
    free(a);
    return p;
}

/* $XDG_CACHE_HOME/cubist, else $HOME/.cache/cubist, into dir. */
static int cache_dir(char *dir, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/') n = snprintf(dir, cap, "%s/cubist", xdg);
    else if (home && home[0]) n = snprintf(dir, cap, "%s/.cache/cubist", home);
    else return 0;
    return n > 0 && (size_t)n < cap;
}

int cb_peak_cache_path(cb_precision p, char *buf, size_t cap) {
    char dir[4096];
    if (!cache_dir(dir, sizeof dir)) return 0;
    /* the host's name is in the key: a home directory shared between
     * machines (or a session moved to another host) must not hand one
     * machine's peak to another */
    char host[256] = "host";
    if (gethostname(host, sizeof host - 1)) strcpy(host, "host");
    host[sizeof host - 1] = 0;
    for (char *h = host; *h; h++)
        if (*h == '/') *h = '_';
    /* fp32's rate is the BLAS core's; bf16's is oneDNN's, which picks its
     * own kernels for the CPU (the host names it) */
    int n = p == CB_PREC_BF16
                ? snprintf(buf, cap, "%s/peak-bf16-%s-%d", dir, host, omp_get_max_threads())
                : snprintf(buf, cap, "%s/peak-%s-%s-%d", dir, host, openblas_get_corename(),
                           omp_get_max_threads());
    return n > 0 && (size_t)n < cap;
}

double cb_peak_cached(cb_precision prec) {
    char path[4200];
    if (!cb_peak_cache_path(prec, path, sizeof path)) return 0;
    /* a figure older than a day is measured again: a peak taken while the
     * machine was busy would otherwise inflate every MFU printed after it */
    struct stat st;
    if (stat(path, &st) || time(NULL) - st.st_mtime > CB_PEAK_MAX_AGE_S) return 0;
    FILE *f = fopen(path, "r");
    double p = 0;
    if (!f) return 0;
    if (fscanf(f, "%lf", &p) != 1 || !(p > 0)) p = 0;
    fclose(f);
    return p;
}

/* mkdir -p of dir (a path under the cache root). */
static void make_dirs(char *dir) {
    for (char *s = dir + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(dir, 0755);
            *s = '/';
        }
    mkdir(dir, 0755);
}

int cb_peak_store(cb_precision prec, double gflops, cb_err *e) {
    char dir[4096], path[4200], text[64];
    if (!cache_dir(dir, sizeof dir) || !cb_peak_cache_path(prec, path, sizeof path))
        return cb_fail(e, CB_EINPUT, "no cache directory: set XDG_CACHE_HOME or HOME");
    make_dirs(dir);
    int len = snprintf(text, sizeof text, "%.1f\n", gflops);
    /* staged under a name of this process's own, then renamed over the
     * cache file: processes measuring side by side (the ranks of one job)
     * never share a temporary file, and the last rename wins whole */
    char own[4300];
    snprintf(own, sizeof own, "%s.%ld", path, (long)getpid());
    fio_atomic a;
    int rc = fio_atomic_open(&a, own, e);
    if (!rc) rc = fio_atomic_write(&a, text, (size_t)len, e);
    if (!rc) rc = fio_atomic_commit(&a, e);
    if (!rc && rename(own, path)) {
        rc = cb_fail(e, CB_ESYS, "%s: renaming %s failed: %s; check that the directory is writable",
                     path, own, strerror(errno));
        unlink(own);
    }
    return rc;
}

double cb_peak_fresh(cb_precision prec) {
    double p = prec == CB_PREC_BF16 ? cb_peak_measure_bf16(NULL) : cb_peak_measure(NULL);
    cb_err e;
    if (p > 0) cb_peak_store(prec, p, &e);
    return p;
}

double cb_peak_gflops(cb_precision prec) {
    double p = cb_peak_cached(prec);
    return p > 0 ? p : cb_peak_fresh(prec);
}

/* Two threads hand a cache line back and forth: in trip i thread 0
 * writes 2i + 1 and waits for 2i + 2, which thread 1 writes once it sees
 * 2i + 1. A thread that waits past the budget (its partner off its CPU)
 * stops both; the trips made so far count. Seconds per trip, NAN when no
 * team of two threads forms or no trip was made. */
typedef struct rt_line {
    _Alignas(64) atomic_int turn;
    _Alignas(64) atomic_int stop;
} rt_line;

static int rt_wait(rt_line *l, int want, double t0, double budget_s) {
    for (unsigned spin = 1; atomic_load_explicit(&l->turn, memory_order_acquire) != want; spin++)
        if (!(spin & 1023) && (atomic_load_explicit(&l->stop, memory_order_relaxed) ||
                               omp_get_wtime() - t0 > budget_s)) {
            atomic_store(&l->stop, 1);
            return 0;
        }
    return 1;
}

static double round_trip_once(rt_line *l, int trips, double budget_s) {
    double per = NAN;
    atomic_store(&l->turn, 0);
    atomic_store(&l->stop, 0);
#pragma omp parallel num_threads(2)
    if (omp_get_num_threads() == 2) {
        int me = omp_get_thread_num(), done = 0;
#pragma omp barrier
        double t0 = omp_get_wtime();
        for (int i = 0; i < trips; i++) {
            if (!me) atomic_store_explicit(&l->turn, 2 * i + 1, memory_order_release);
            if (!rt_wait(l, 2 * i + 1 + !me, t0, budget_s)) break;
            if (me) atomic_store_explicit(&l->turn, 2 * i + 2, memory_order_release);
            done++;
        }
        if (!me && done) per = (omp_get_wtime() - t0) / done;
    }
    return per;
}

static double round_trip_best(int reps, int trips, double budget_s) {
    static rt_line line;
    double best = NAN;
    for (int r = 0; r < reps; r++) {
        double t = round_trip_once(&line, trips, budget_s);
        if (isnan(best) || t < best) best = t;
    }
    return best;
}

double cb_core_round_trip(void) { return round_trip_best(CB_RT_REPS, CB_RT_TRIPS, CB_RT_BUDGET_S); }

double cb_core_round_trip_quick(void) { return round_trip_best(2, 2000, 0.01); }
