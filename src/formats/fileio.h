/* File helpers shared by the file formats: read-only mapping, and atomic
 * replacement (write path.tmp, fsync, rename, fsync the directory) so a
 * crash or a full disk never leaves a partial file under the final name. */
#ifndef CUBIST_FORMATS_FILEIO_H
#define CUBIST_FORMATS_FILEIO_H

#include <stddef.h>

#include "cubist.h"

/* Maps a whole regular file read-only. An empty file gives *map = NULL and
 * *size = 0 with CB_OK: the caller says why empty is wrong for it. A
 * missing or unreadable file is CB_EINPUT, its message ending in `hint` (the fix). */
int fio_map(const char *path, const char *hint, void **map, size_t *size, cb_err *e);
void fio_unmap(void *map, size_t size);

typedef struct fio_atomic {
    int fd;
    char *tmp;        /* path.tmp */
    const char *path;
} fio_atomic;

/* On failure every function below has already removed path.tmp. */
int fio_atomic_open(fio_atomic *a, const char *path, cb_err *e);
int fio_atomic_write(fio_atomic *a, const void *buf, size_t n, cb_err *e);
int fio_atomic_commit(fio_atomic *a, cb_err *e);
/* Async-signal-safe: removes the temporary file being written, if any, for
 * a process that must end at once (a second SIGINT). */
void fio_abandon(void);
/* fsyncs the directory holding path, so a rename in it is durable: 0 or
 * an errno value. */
int fio_sync_dir(const char *path);
/* Drops the temporary file; safe after a failed call. */
void fio_atomic_abort(fio_atomic *a);

/* Can path be written (atomically or not) later: its directory exists, is a
 * directory and is writable, and path itself is not a directory (nor, if it
 * exists, read-only). Creates nothing. CB_EINPUT naming `flag` and the fix. */
int fio_check_writable(const char *flag, const char *path, cb_err *e);

#endif
