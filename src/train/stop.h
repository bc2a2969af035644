/* Clean shutdown on signals (docs/operations.md): SIGTERM, SIGINT and the
 * --exit-signal (SIGUSR1 by default) only set a flag; the training loop
 * polls it after every step, every rank agrees on it (one all-reduce), and
 * all of them save a checkpoint and exit with CB_ESTOPPED. A second SIGINT
 * abandons at once: the temporary file being written is removed and the
 * process exits 130. */
#ifndef CB_TRAIN_STOP_H
#define CB_TRAIN_STOP_H

#include "cubist.h"

/* --exit-signal NAME: USR1, SIGUSR1, USR2, HUP, TERM, INT... or a number. */
int cb_stop_parse(const char *name, int *signo, cb_err *e);
/* Installs the handlers (SIGTERM, SIGINT and extra; extra 0: none). */
void cb_stop_install(int extra);
/* The first signal this process received, 0 when none (the caller agrees
 * it over the ranks). */
int cb_stop_pending(void);
/* "SIGTERM" for its number. */
const char *cb_stop_name(int signo);

#endif
