/* The MFU peak: the sgemm rate of this machine, measured one way for both
 * `cubist bench --peak` and `cubist train`, and cached per BLAS core and
 * thread count in $XDG_CACHE_HOME/cubist/peak-<core>-<threads> (default
 * ~/.cache/cubist), a text file holding GFLOP/s. */
#ifndef CB_PEAK_H
#define CB_PEAK_H

#include <stddef.h>

#include "cubist.h"

/* Size of the square sgemm measured: C (N,N) = A (N,N) @ B (N,N). */
#define CB_PEAK_N 2048
/* Untimed calls first: the first calls include oneDNN's JIT, the AMX
 * state's first use and the buffers' first-touch page faults */
#define CB_PEAK_WARMUP_S 0.5
/* Then CB_PEAK_WINDOWS windows of at least CB_PEAK_WINDOW_S seconds each */
#define CB_PEAK_WINDOWS 16
#define CB_PEAK_WINDOW_S 0.15

/* One measurement (cb_peak_time): the peak (gflops) is the best window
 * by the wall clock when in some window the threads held their CPUs (at
 * least 90% of its time: clean), else the best window's rate per second
 * that the threads held a CPU (the team's CPU time over the thread
 * count), which time spent waiting for a CPU or stolen by the hypervisor
 * does not enter; wall_gflops is the best window by the wall clock, held
 * the threads' share of the windows' wall time on a CPU. */
typedef struct cb_peak_info {
    double gflops, wall_gflops, held;
    int clean;
    /* the bf16 peak's kernel (cb_peak_measure_bf16), and the other one's
     * figure; NULL and 0 for sgemm */
    const char *form, *other_form;
    double other_gflops;
} cb_peak_info;

/* Times calls of call(ctx), each one 2 N^3 FLOP product, as above on the
 * current OpenMP thread count; the peak in GFLOP/s, *info when not NULL. */
double cb_peak_time(void (*call)(void *), void *ctx, cb_peak_info *info);
/* The N^3 sgemm's peak; info as cb_peak_time's (may be NULL). */
double cb_peak_measure(cb_peak_info *info);
/* The same for the bf16 GEMM through oneDNN (fp32 result); 0 when oneDNN
 * cannot start. Not cached: only bench measures it. */
double cb_peak_measure_bf16(cb_peak_info *info);
/* The cache file's path; 0 when neither XDG_CACHE_HOME nor HOME is set. */
int cb_peak_cache_path(char *buf, size_t cap);
/* The cached figure, 0 when absent or unreadable. */
double cb_peak_cached(void);
/* Writes the figure (directory created, file replaced atomically). */
int cb_peak_store(double gflops, cb_err *e);
/* The cached figure, else measures and caches it (a failed write only
 * costs the next run another measurement). */
double cb_peak_gflops(void);
#endif
