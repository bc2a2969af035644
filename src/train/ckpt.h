/* Checkpoints that commit as one unit (docs/operations.md).
 *
 * A checkpoint is a pair: the weights W and W.state (AdamW moments, step,
 * data position, RNG), both carrying one random checkpoint id. Writers
 * write the pending pair W.next and W.next.state (each file atomic on its
 * own: tmp, fsync, rename); once every writer has finished (agreed over the
 * world), world rank 0 commits: rename W.next -> W, fsync the directory,
 * rename W.next.state -> W.state, fsync the directory. The new pair is
 * durable before anything old is touched, and at every instant one of
 * (W.next, W.next.state), (W, W.next.state), (W, W.state) is a complete
 * pair with equal ids: cb_ckpt_find takes the newest and finishes the
 * renames, so a kill -9, a signal or a full disk leaves the previous
 * checkpoint or the new one, never a mix.
 *
 * --save DIR (an existing directory, or a path ending in '/') keeps one
 * pair per save, DIR/step-00000010.safetensors, and with keep_last > 0
 * removes all but the newest keep_last complete ones after each commit.
 * --save FILE keeps one pair, FILE and FILE.state. */
#ifndef CB_TRAIN_CKPT_H
#define CB_TRAIN_CKPT_H

#include <stddef.h>

#include "comm/comm.h"
#include "cubist.h"

typedef struct cb_ckpt_opts {
    const char *save; /* FILE or DIR */
    int keep_last;    /* DIR only; 0 keeps every checkpoint */
    int single;       /* 1: a checkpoint is one file, W (the graph engine's
                         cb_model_save_checkpoint: weights and moments in one
                         atomic file); the writer writes W.next, the commit
                         renames it, and no .state is involved */
} cb_ckpt_opts;

/* Writes the weights to path and the state to path.state (a writer for
 * cubist train's trainers, or any other pair with equal ckpt_id); with
 * single, the one file path. */
typedef int (*cb_ckpt_writer)(void *ctx, const char *path, cb_err *e);

/* Collective over w (NULL: one process): the checkpoint of step through
 * write, committed as above. saved (cap bytes) receives W. */
int cb_ckpt_save(cb_comm *w, const cb_ckpt_opts *o, int step, cb_ckpt_writer write, void *ctx,
                 char *saved, size_t cap, cb_err *e);
/* Collective over w: the newest complete checkpoint under arg (a DIR, or a
 * weights FILE), pending renames finished; its weights path into out. */
int cb_ckpt_find(cb_comm *w, const char *arg, int single, char *out, size_t cap, cb_err *e);
/* Is --save path the directory form? */
int cb_ckpt_is_dir(const char *path);
/* Removes every pending (.next) and temporary (.tmp) file of W, e.g. after
 * an interrupted save: async-signal-unsafe, call from the main flow. */
void cb_ckpt_clean(const char *weights);

#endif
