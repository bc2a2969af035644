/* Seconds on a POSIX clock: CLOCK_MONOTONIC, or the CPU time of the
 * process (CLOCK_PROCESS_CPUTIME_ID) or of the calling thread
 * (CLOCK_THREAD_CPUTIME_ID). */
#ifndef CB_CLOCK_H
#define CB_CLOCK_H

#include <time.h>

static inline double cb_clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

#endif
