/* A kernel table that times every call of an inner table, for the
 * benchmark's breakdown of where a step goes. One profiler per process. */
#ifndef CB_PROFILE_H
#define CB_PROFILE_H

#include "kernels/kernels.h"

enum { PROF_GEMM, PROF_ATTENTION, PROF_NORM, PROF_ELEMENTWISE, PROF_LOSS, PROF_OPTIMIZER, PROF_N };
extern const char *const cb_prof_names[PROF_N];

/* Wraps inner; cb_prof_ms accumulates milliseconds per class until reset. */
const cb_kernels *cb_kernels_profiled(const cb_kernels *inner);
void cb_prof_reset(void);
double cb_prof_ms(int cls);
#endif
