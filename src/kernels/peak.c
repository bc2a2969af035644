#include "kernels/peak.h"

#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "formats/fileio.h"

char *openblas_get_corename(void);

enum { CB_PEAK_MAX_AGE_S = 24 * 3600 };

double cb_peak_measure(void) {
    const size_t n = CB_PEAK_N, nn = n * n;
    float *a = malloc(sizeof(float) * 3 * nn);
    if (!a) return 0;
    for (size_t i = 0; i < 3 * nn; i++) a[i] = (float)(i % 7) * 0.1f;
    float *b = a + nn, *c = b + nn;
    const int N = CB_PEAK_N;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1, a, N, b, N, 0, c, N);
    double t0 = omp_get_wtime(), t;
    int it = 0;
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1, a, N, b, N, 0, c, N);
        it++;
        t = omp_get_wtime() - t0;
    } while (t < CB_PEAK_SECONDS);
    free(a);
    return 2.0 * (double)nn * (double)n * it / t / 1e9;
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

int cb_peak_cache_path(char *buf, size_t cap) {
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
    int n = snprintf(buf, cap, "%s/peak-%s-%s-%d", dir, host, openblas_get_corename(),
                     omp_get_max_threads());
    return n > 0 && (size_t)n < cap;
}

double cb_peak_cached(void) {
    char path[4200];
    if (!cb_peak_cache_path(path, sizeof path)) return 0;
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

int cb_peak_store(double gflops, cb_err *e) {
    char dir[4096], path[4200], text[64];
    if (!cache_dir(dir, sizeof dir) || !cb_peak_cache_path(path, sizeof path))
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

double cb_peak_gflops(void) {
    double p = cb_peak_cached();
    if (p > 0) return p;
    p = cb_peak_measure();
    cb_err e;
    if (p > 0) cb_peak_store(p, &e);
    return p;
}
