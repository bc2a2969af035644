/* Large buffers on transparent huge pages. */
#ifndef CB_MEM_H
#define CB_MEM_H

#include <stddef.h>

/* Asks the kernel to back the 2 MiB-aligned interior of [p, p + bytes)
 * with huge pages (madvise MADV_HUGEPAGE) when bytes is at least 4 MiB;
 * call it before the pages are first touched (after calloc, whose large
 * blocks are fresh mmaps). A hint: where the kernel or the system has no
 * such pages it does nothing. */
void cb_mem_hugepages(void *p, size_t bytes);

#endif
