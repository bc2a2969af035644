#include "formats/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int fio_map(const char *path, const char *hint, void **map, size_t *size, cb_err *e) {
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int code = errno == ENOENT || errno == ENOTDIR || errno == EACCES ? CB_EINPUT : CB_ESYS;
        return cb_fail(e, code, "%s: cannot open: %s; %s", path, strerror(errno), hint);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return cb_fail(e, CB_ESYS, "%s: cannot stat: %s; %s", path, strerror(err), hint);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cb_fail(e, CB_EINPUT, "%s: not a regular file; %s", path, hint);
    }
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int err = errno;
            close(fd);
            return cb_fail(e, CB_ESYS, "%s: cannot map %lld bytes: %s; check free memory and the file",
                           path, (long long)st.st_size, strerror(err));
        }
        *map = m;
        *size = (size_t)st.st_size;
    }
    close(fd);
    return CB_OK;
}

void fio_unmap(void *map, size_t size) {
    if (map && size) munmap(map, size);
}

/* The temporary file being written now, for fio_abandon (a signal handler
 * may read it at any instant: set before the file exists, cleared after it
 * is gone). One at a time: cubist writes its files one after the other. */
static char g_tmp[4096];
static volatile sig_atomic_t g_tmp_set;

static void track(const char *tmp) {
    g_tmp_set = 0;
    if (tmp && strlen(tmp) < sizeof g_tmp) {
        memcpy(g_tmp, tmp, strlen(tmp) + 1);
        g_tmp_set = 1;
    }
}

void fio_abandon(void) {
    if (g_tmp_set) unlink(g_tmp);
}

void fio_atomic_abort(fio_atomic *a) {
    track(NULL);
    if (a->fd >= 0) close(a->fd);
    if (a->tmp) unlink(a->tmp);
    free(a->tmp);
    a->fd = -1;
    a->tmp = NULL;
}

static int sys_fail(fio_atomic *a, cb_err *e, const char *what, int err) {
    int rc = cb_fail(e, CB_ESYS, "%s: %s %s failed: %s; check that the directory exists, is writable and has space",
                     a->path, what, a->tmp ? a->tmp : a->path, strerror(err));
    fio_atomic_abort(a);
    return rc;
}

int fio_atomic_open(fio_atomic *a, const char *path, cb_err *e) {
    size_t n = strlen(path);
    a->path = path;
    a->fd = -1;
    a->tmp = malloc(n + 5);
    if (!a->tmp) return cb_fail(e, CB_ENOMEM, "%s: out of memory naming the temporary file", path);
    memcpy(a->tmp, path, n);
    memcpy(a->tmp + n, ".tmp", 5);
    track(a->tmp);
    a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (a->fd < 0) {
        int err = errno;
        track(NULL);
        free(a->tmp); /* never created: nothing to unlink, and it may be someone else's */
        a->tmp = NULL;
        return cb_fail(e, CB_ESYS, "%s: cannot create %s.tmp: %s; check that the directory exists and is writable",
                       path, path, strerror(err));
    }
    return CB_OK;
}

int fio_atomic_write(fio_atomic *a, const void *buf, size_t n, cb_err *e) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(a->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return sys_fail(a, e, "writing", w < 0 ? errno : ENOSPC);
        p += w;
        n -= (size_t)w;
    }
    return CB_OK;
}

/* The rename is only durable once the directory entry is on disk. */
int fio_sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return ENOMEM;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;
    free(dir);
    if (fd < 0) return errno;
    if (fsync(fd) != 0 && errno != EINVAL) err = errno; /* some filesystems cannot sync directories */
    close(fd);
    return err;
}

int fio_atomic_commit(fio_atomic *a, cb_err *e) {
    if (fsync(a->fd) != 0) return sys_fail(a, e, "syncing", errno);
    int fd = a->fd;
    a->fd = -1;
    if (close(fd) != 0) return sys_fail(a, e, "closing", errno);
    if (rename(a->tmp, a->path) != 0) return sys_fail(a, e, "renaming", errno);
    track(NULL);
    free(a->tmp);
    a->tmp = NULL;
    int err = fio_sync_dir(a->path);
    if (err) return cb_fail(e, CB_ESYS, "%s: written, but syncing its directory failed: %s; the file may not survive a crash",
                            a->path, strerror(err));
    return CB_OK;
}

/* The directory part of path ("." for a bare name, "/" for "/x"). */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
}

int fio_check_writable(const char *flag, const char *path, cb_err *e) {
    struct stat st;
    if (!path[0])
        return cb_fail(e, CB_EINPUT, "%s: the path is empty; pass a file name", flag);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return cb_fail(e, CB_EINPUT, "%s %s is a directory; pass a file name inside it", flag, path);
    if (access(path, F_OK) == 0 && access(path, W_OK) != 0)
        return cb_fail(e, CB_EINPUT, "%s %s exists and cannot be written (%s); make it writable or "
                                     "choose another name", flag, path, strerror(errno));
    char *dir = dir_of(path);
    if (!dir) return cb_fail(e, CB_ENOMEM, "out of memory checking %s", path);
    int rc = CB_OK;
    if (stat(dir, &st) != 0)
        rc = cb_fail(e, CB_EINPUT, "%s %s: cannot write there: directory %s: %s; create it first or "
                                   "fix the path", flag, path, dir, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        rc = cb_fail(e, CB_EINPUT, "%s %s: cannot write there: %s is not a directory; fix the path",
                     flag, path, dir);
    else if (access(dir, W_OK | X_OK) != 0)
        rc = cb_fail(e, CB_EINPUT, "%s %s: cannot write there: directory %s: %s; choose a writable "
                                   "directory", flag, path, dir, strerror(errno));
    free(dir);
    return rc;
}
