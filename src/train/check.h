/* Validation of `cubist train`'s options, split by what an answer depends
 * on: the flags alone (checked before MPI starts, so a bad flag fails at
 * once), the file system (output paths, checked on every rank before any
 * training), and the data (a validation file too short for one batch). */
#ifndef CB_TRAIN_CHECK_H
#define CB_TRAIN_CHECK_H

#include "train/train.h"

/* Every flag within its range and the flags consistent with each other;
 * model sizes 0 mean "from the checkpoint or default". No I/O, no MPI. */
int cb_train_check_flags(const cb_train_opts *o, cb_err *e);
/* --save (and F.state, F.tmp, pipeline parts), --dump-grads and, on world
 * rank 0, --log: the directory exists and is writable and the path is not
 * a directory. Creates nothing. The caller agrees the result over ranks. */
int cb_train_check_paths(const cb_train_opts *o, int world_rank, cb_err *e);
/* The validation file holds at least one batch, B*T+1 tokens. */
int cb_train_check_val(const cb_train_opts *o, const cb_tokens *val, cb_err *e);
#endif
