/* The process grid: world = dp x pp x tp, tensor ranks innermost (adjacent
 * world ranks, so a tensor group shares a node when it can), then pipeline,
 * then data:
 *     world_rank = (d * pp + p) * tp + t
 * Tensor coordinates inside a tp group of rank t:
 *   1d  t itself
 *   2d  tp = q^2, (r, c) with t = r * q + c: row groups (same r, c varies,
 *       rank = c) and column groups (same c, r varies, rank = r)
 *   3d  tp = q^3, (i, j, k) with t = (i * q + j) * q + k. Line groups
 *       WEIGHT (i varies, rank = i), INPUT (j varies, rank = j), OUTPUT
 *       (k varies, rank = k); plane groups INPUT x WEIGHT (k fixed,
 *       rank = i * q + j) and OUTPUT x WEIGHT (j fixed, rank = i * q + k).
 * Every sub-communicator's rank order is its block order: a gather over
 * INPUT of X shards (token block i*q + j) yields the tokens of block i in
 * order, a gather over the INPUT x WEIGHT plane yields token blocks
 * 0..q^2-1, and so on (see docs/parallelism.md, 3-D).
 * Other groups: dp (same p, t; rank = d), pp (same d, t; rank = p = stage),
 * tp (same d, p; rank = t), model (same d, all pp*tp ranks that together
 * hold one replica; rank = p * tp + t), for sums over every shard such as
 * the global gradient norm. */
#ifndef CB_GRID_H
#define CB_GRID_H

#include <stdio.h>

#include "comm/comm.h"

typedef enum cb_tp_mode { CB_TP_1D = 1, CB_TP_2D = 2, CB_TP_3D = 3 } cb_tp_mode;

/* Coordinates of one world rank; pure arithmetic, no MPI. */
typedef struct cb_grid_coord {
    int d, p, t;
    int r, c;     /* 2d, else 0 */
    int i, j, k;  /* 3d, else 0 */
} cb_grid_coord;

typedef struct cb_grid {
    int dp, pp, tp, q;
    cb_tp_mode mode;
    int world_rank, world_size;
    cb_grid_coord at;
    cb_comm world, dpg, ppg, tpg, model;
    cb_comm row, col;                              /* 2d */
    cb_comm weight, input, output, in_w, out_w;    /* 3d: lines, planes */
    int ncomms;
    cb_comm *comms[12];                            /* those in use, for reports */
} cb_grid;

/* "1d", "2d", "3d" -> mode; CB_EINPUT with a one-line message otherwise. */
int cb_grid_parse_mode(const char *s, cb_tp_mode *mode, cb_err *e);
const char *cb_grid_mode_name(cb_tp_mode mode);
/* Checks sizes >= 1, dp * pp * tp == world_size, tp a square (2d) or a cube
 * (3d). The same pure check on every rank, so every rank fails alike. */
int cb_grid_check(int dp, int pp, int tp, cb_tp_mode mode, int world_size, cb_err *e);
/* q of the mode: tp (1d), sqrt(tp) (2d), cbrt(tp) (3d); 0 if not exact. */
int cb_grid_side(int tp, cb_tp_mode mode);
cb_grid_coord cb_grid_coords(int dp, int pp, int tp, cb_tp_mode mode, int world_rank);

/* Collective over the world: checks, then splits every group. On CB_EINPUT
 * no communicator was created and every rank returned the same error. */
int cb_grid_create(cb_grid *g, int dp, int pp, int tp, cb_tp_mode mode, cb_err *e);
/* A grid of this rank alone (every group of size 1), whatever the world:
 * benchmarks of one rank's work beside others. */
int cb_grid_create_self(cb_grid *g, cb_err *e);
void cb_grid_free(cb_grid *g);
/* --print-grid. Collective over the world: every rank's host name
 * gathered to world rank 0 as control traffic on g->world; returns there
 * world_size names of CB_GRID_HOST bytes each (the caller frees them),
 * NULL on the other ranks. */
#define CB_GRID_HOST 256
char *cb_grid_hosts(cb_grid *g);
/* The table of the grid: a header, one line per world rank (d, p, t,
 * tensor coordinates, host from hosts) into f. Prints nothing itself. */
void cb_grid_print(const cb_grid *g, const char *hosts, FILE *f);

#endif
