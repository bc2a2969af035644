/* An out-of-memory that tests can force (test_workspace.sh builds this as
 * a shared object and LD_PRELOADs it into the ranks only): malloc, calloc
 * and realloc return NULL for requests of at least CB_FAIL_ALLOC_MIN bytes.
 * calloc serves dlsym's own first calls from a static buffer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static size_t limit(void) {
    static size_t lim = (size_t)-1;
    static int read;
    if (!read) {
        const char *s = getenv("CB_FAIL_ALLOC_MIN");
        read = 1;
        if (s) lim = (size_t)strtoull(s, NULL, 10);
    }
    return lim;
}

static char boot[4096];
static size_t boot_used;

void *malloc(size_t n) {
    static void *(*real)(size_t);
    if (!real) real = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    return n >= limit() ? NULL : real(n);
}

void *calloc(size_t a, size_t b) {
    static void *(*real)(size_t, size_t);
    static int resolving;
    if (!real) {
        if (resolving) { /* dlsym's own calloc */
            void *p = boot + boot_used;
            boot_used += (a * b + 15) & ~(size_t)15;
            return p;
        }
        resolving = 1;
        real = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    }
    return a * b >= limit() ? NULL : real(a, b);
}

void *realloc(void *p, size_t n) {
    static void *(*real)(void *, size_t);
    if (!real) real = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    return n >= limit() ? NULL : real(p, n);
}

void free(void *p) {
    static void (*real)(void *);
    if ((char *)p >= boot && (char *)p < boot + sizeof boot) return;
    if (!real) real = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    real(p);
}
