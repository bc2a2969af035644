/* LD_PRELOAD shim for the operations tests: files whose path contains
 * $CUBIST_SHIM_PATH are written slowly ($CUBIST_SHIM_DELAY_US per write, so
 * a signal can land inside a save) and fail with ENOSPC once
 * $CUBIST_SHIM_LIMIT bytes have gone to them (a full disk, where no small
 * tmpfs can be mounted). Covers open/openat (checkpoints) and fopen (the
 * log, through fopencookie: stdio's own writes bypass the write symbol). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static char marked[4096];
static long long written;

static int matches(const char *path) {
    const char *m = getenv("CUBIST_SHIM_PATH");
    return path && m && *m && strstr(path, m);
}

/* The shim's decision for n bytes to a marked file: how many may go. */
static ssize_t allow(size_t n) {
    const char *d = getenv("CUBIST_SHIM_DELAY_US"), *l = getenv("CUBIST_SHIM_LIMIT");
    if (d) usleep((useconds_t)atoi(d));
    if (l && written + (long long)n > atoll(l)) {
        errno = ENOSPC;
        return -1;
    }
    written += (long long)n;
    return (ssize_t)n;
}

static void mark(int fd, const char *path) {
    if (fd >= 0 && fd < (int)sizeof marked) marked[fd] = (char)matches(path);
}

typedef int (*open_fn)(const char *, int, ...);

static int opened(open_fn *real, const char *sym, const char *path, int flags, mode_t mode) {
    if (!*real) *real = (open_fn)dlsym(RTLD_NEXT, sym);
    int fd = (*real)(path, flags, mode);
    mark(fd, path);
    return fd;
}

/* the mode argument is read whatever the flags: harmless when absent */
#define MODE(flags) (va_start(ap, flags), m = (mode_t)va_arg(ap, int), va_end(ap), m)

int open(const char *path, int flags, ...) {
    static open_fn real;
    va_list ap;
    mode_t m;
    return opened(&real, "open", path, flags, MODE(flags));
}

int open64(const char *path, int flags, ...) {
    static open_fn real;
    va_list ap;
    mode_t m;
    return opened(&real, "open64", path, flags, MODE(flags));
}

ssize_t write(int fd, const void *buf, size_t n) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    if (fd >= 0 && fd < (int)sizeof marked && marked[fd] && allow(n) < 0) return -1;
    return real(fd, buf, n);
}

static ssize_t cookie_write(void *c, const char *buf, size_t n) {
    if (allow(n) < 0) return -1;
    return fwrite(buf, 1, n, (FILE *)c) == n ? (ssize_t)n : -1;
}

static int cookie_close(void *c) { return fclose((FILE *)c); }

FILE *fopen(const char *path, const char *mode) {
    static FILE *(*real)(const char *, const char *);
    if (!real) real = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
    FILE *f = real(path, mode);
    if (!f || !matches(path)) return f;
    setvbuf(f, NULL, _IONBF, 0);
    cookie_io_functions_t io = {.write = cookie_write, .close = cookie_close};
    return fopencookie(f, mode, io);
}
