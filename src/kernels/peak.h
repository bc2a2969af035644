/* The MFU peak: the GEMM rate of this machine at a precision (fp32: the
 * sgemm's; bf16: oneDNN's bf16 matmul's), measured one way for both
 * `cubist bench --peak` and `cubist train`, and cached per host, kernel
 * and thread count in $XDG_CACHE_HOME/cubist (default ~/.cache/cubist):
 * peak-<host>-<BLAS core>-<threads> and peak-bf16-<host>-<threads>, text
 * files holding GFLOP/s. */
#ifndef CB_PEAK_H
#define CB_PEAK_H

#include <stddef.h>

#include "cubist.h"
#include "kernels/kernels.h"

/* Size of the square sgemm measured: C (N,N) = A (N,N) @ B (N,N). */
#define CB_PEAK_N 2048
/* Untimed calls first: the first calls include oneDNN's JIT, the AMX
 * state's first use and the buffers' first-touch page faults */
#define CB_PEAK_WARMUP_S 0.5
/* Then CB_PEAK_WINDOWS windows of at least CB_PEAK_WINDOW_S seconds each */
#define CB_PEAK_WINDOWS 16
#define CB_PEAK_WINDOW_S 0.15
/* Quiet enough for the wall clock: a window whose threads were on a CPU
 * this share of its time (their mean CPU time over its wall time; the
 * planner's calibration of a team judges its windows by it too) */
#define CB_PEAK_HELD 0.9

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
    /* the bf16 peak's form (cb_peak_measure_bf16), and the next fastest one's
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
 * cannot start (bf16.c). */
double cb_peak_measure_bf16(cb_peak_info *info);
/* The cache file's path of precision p's peak; 0 when neither
 * XDG_CACHE_HOME nor HOME is set. */
int cb_peak_cache_path(cb_precision p, char *buf, size_t cap);
/* The cached figure, 0 when absent, older than a day or unreadable. */
double cb_peak_cached(cb_precision p);
/* Writes the figure (directory created, file replaced atomically). */
int cb_peak_store(cb_precision p, double gflops, cb_err *e);
/* Measures precision p's peak now and caches it (a failed write only
 * costs the next run another measurement); 0 when it cannot be measured
 * (bf16 without oneDNN). The benchmarks' MFU: a peak of the same run. */
double cb_peak_fresh(cb_precision p);
/* The cached figure, else cb_peak_fresh's (`cubist train`'s MFU). */
double cb_peak_gflops(cb_precision p);

/* Where the CPUs sit: the round trip of a cache line between two threads
 * of the OpenMP team, in seconds, the best of CB_RT_REPS runs of
 * CB_RT_TRIPS trips (a run stops after CB_RT_BUDGET_S, counting the trips
 * made); NAN without a team of two. On a VM it tells where the hypervisor
 * put the two CPUs: on the 2-vCPU AMD EPYC (Zen 5) host of 2026-11-29 it
 * read 45-125 ns (near) or 345-430 ns (apart) for minutes at a time, and
 * two-thread steps of small models ran 25-40% slower apart, one thread's
 * not at all (docs/results.md, 2026-11-29). */
#define CB_RT_REPS 5
#define CB_RT_TRIPS 20000
#define CB_RT_BUDGET_S 0.05
double cb_core_round_trip(void);
/* A round trip up to this counts as the cores near each other (sharing a
 * last-level cache), beyond it apart: on the host of 2026-11-29 the two
 * placements read 45-125 and 330-434 ns */
#define CB_RT_NEAR_NS 200.0
/* The same, cheaper (the best of 2 runs of 2000 trips): a probe's check
 * of where its cores sat right after each of its windows */
double cb_core_round_trip_quick(void);
#endif
