/* Why huge pages: the step's buffers (parameters, gradients, AdamW's m and
 * v, the activation slots) are hundreds of MB read in streams and by
 * OpenBLAS's packing, which strides across rows of several KB; on 4 KiB
 * pages every few KB is a TLB miss, and under a hypervisor each miss is a
 * two-level page walk. Linux's default THP mode ("madvise") gives huge
 * pages only to regions that ask (docs/bert.md, Benchmark). */
#include "util/mem.h"

#include <stdint.h>
#include <sys/mman.h>

#define HUGE_PAGE ((uintptr_t)2 << 20)

void cb_mem_hugepages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    if (!p || bytes < 2 * HUGE_PAGE) return;
    uintptr_t lo = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(HUGE_PAGE - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* a hint: failure is fine */
#else
    (void)p, (void)bytes;
#endif
}
