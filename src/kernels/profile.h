/* A kernel table that times every call of an inner table, for the
 * benchmark's breakdown of where a step goes. The caller owns the profiler:
 * any number can run side by side, each with its own counters. */
#ifndef CB_PROFILE_H
#define CB_PROFILE_H

#include "kernels/kernels.h"

enum { PROF_GEMM, PROF_ATTENTION, PROF_NORM, PROF_ELEMENTWISE, PROF_LOSS, PROF_OPTIMIZER, PROF_N };
extern const char *const cb_prof_names[PROF_N];

typedef struct cb_prof {
    cb_kernels table; /* first: a kernel called through it gets &table, i.e. the profiler */
    const cb_kernels *inner;
    double ms[PROF_N]; /* milliseconds per class since init or reset */
    int thread_cpu;    /* 1: the calling thread's CPU time instead of wall time, for ranks
                          that share cores (one OpenMP thread each): a kernel descheduled
                          while another rank runs is not charged for it; 0 after init */
} cb_prof;

/* Wraps inner; cb_prof_kernels(p) is the table to install (valid while p lives). */
void cb_prof_init(cb_prof *p, const cb_kernels *inner);
const cb_kernels *cb_prof_kernels(const cb_prof *p);
void cb_prof_reset(cb_prof *p);
double cb_prof_ms(const cb_prof *p, int cls);
#endif
