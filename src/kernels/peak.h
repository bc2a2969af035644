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
/* Seconds of timed repetitions after one untimed call. */
#define CB_PEAK_SECONDS 1.0

/* Measures GFLOP/s of the N^3 sgemm on the current OpenMP thread count. */
double cb_peak_measure(void);
/* The same for the bf16 GEMM through oneDNN (fp32 result); 0 when oneDNN
 * cannot start. Not cached: only bench measures it. */
double cb_peak_measure_bf16(void);
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
