/* Pipeline schedules as pure functions: the ordered actions (forward or
 * backward of micro-batch mb on the rank's chunk c) of pipeline rank s of p,
 * for M micro-batches per optimizer step. Chunk c of rank s is virtual stage
 * c * p + s (v chunks per rank; v = 1 except interleaved).
 *   gpipe        every forward, then every backward; M in flight.
 *   1f1b         PipeDream-flush: min(p-s-1, M) warm-up forwards, then one
 *                forward and one backward alternately, then the remaining
 *                backwards; at most p - s in flight.
 *   interleaved  Megatron's interleaved 1F1B: forwards go through the chunks
 *                in groups of p micro-batches, the last group taking the
 *                remainder (p to 2p-1; all M when M < p), backwards the
 *                same with the chunks reversed; (p-s-1)*2 + (v-1)*G
 *                warm-up forwards (G the last group), at most one more in
 *                flight. Any M >= 1. Bubble (p-1)/(v*M + p-1) for M >= p.
 * Backwards of each chunk run in micro-batch order, so gradients accumulate
 * in the order of the single-process run. */
#ifndef CB_PP_SCHEDULE_H
#define CB_PP_SCHEDULE_H

#include "cubist.h"

typedef enum cb_pp_kind { CB_PP_GPIPE, CB_PP_1F1B, CB_PP_INTERLEAVED } cb_pp_kind;

typedef struct cb_pp_action {
    int bwd;   /* 0 forward, 1 backward */
    int mb;    /* micro-batch 0..M-1 */
    int chunk; /* 0..v-1 */
} cb_pp_action;

int cb_pp_parse_schedule(const char *s, cb_pp_kind *k, cb_err *e);
const char *cb_pp_schedule_name(cb_pp_kind k);
/* p >= 1, M >= 1, v >= 1, v == 1 unless interleaved. */
int cb_pp_schedule_check(cb_pp_kind k, int p, int v, int M, cb_err *e);
/* Writes the 2*M*v actions of rank s into a; returns their count. */
int cb_pp_schedule(cb_pp_kind k, int p, int v, int M, int s, cb_pp_action *a);
/* The most micro-batches forwarded but not yet backwarded at any point, on
 * one chunk (chunk >= 0) or over all chunks (chunk < 0). */
int cb_pp_max_inflight(const cb_pp_action *a, int n, int chunk);
/* The bound the schedule promises for rank s (over all its chunks). */
int cb_pp_inflight_bound(cb_pp_kind k, int p, int v, int M, int s);
/* The fewest lock-step rounds (one forward or backward of a chunk each)
 * any schedule needs: 2 max(vM + p-1, vp + M-1); every schedule here takes
 * exactly that many. */
int cb_pp_ideal_rounds(int p, int v, int M);
/* Ideal bubble fraction with equal chunk times, 1 - 2vM / ideal rounds:
 * (p-1)/(v*M + p-1), except interleaved with M < p, where the chunks of
 * one rank wait on each other: 1 - vM/(vp + M-1). */
double cb_pp_bubble_formula(int p, int v, int M);
/* Runs every rank's actions in lock-step rounds (an action may use results
 * of earlier rounds only; forward and backward take one round each): 0 when
 * every action ran, with the rounds taken in *rounds; -1 on a deadlock or a
 * broken dependency. For tests and for --print-partition. */
int cb_pp_simulate(cb_pp_kind k, int p, int v, int M, int *rounds);

#endif
