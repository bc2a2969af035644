/* The planner: a performance model of one training step under any layout
 * (dp x pp x tp with mode 1d/2d/3d), from per-layer costs of the model and a
 * cluster description (calibrated on this machine or from datasheets).
 * Private to cubist; the command line (cli/cmd_plan.c) prints, the library
 * computes. Units: bytes, seconds, FLOPs. See docs/plan.md. */
#ifndef CB_PLAN_H
#define CB_PLAN_H

#include "comm/grid.h"
#include "cubist.h"

/* ------------------------------------------------------------ exact counts */

/* The tensor-parallel traffic of one forward + backward, by the tag prefix
 * of the collectives (cb_comm counters): linear (+ bias), norm, embed,
 * head, attn, other. */
enum { CB_PK_LINEAR, CB_PK_NORM, CB_PK_EMBED, CB_PK_HEAD, CB_PK_ATTN, CB_PK_OTHER, CB_PK_N };

/* A GPT step in doubles: N = B T tokens, C d_model, NH heads, V vocabulary
 * (unpadded), L layers. */
typedef struct cb_plan_shape {
    double N, B, T, C, NH, V, L;
} cb_plan_shape;

/* Per rank, one step (forward + backward, no optimizer): bytes sent as
 * cb_comm counts them (ring volume), collective calls, parameter +
 * gradient bytes (fp32), the model's planned activation floats x 4 and the
 * layout's scratch bytes. These equal the counters of a real run. */
typedef struct cb_plan_tp_cost {
    double sent[CB_PK_N], calls[CB_PK_N];
    double param_bytes, act_model_bytes, act_scratch_bytes;
} cb_plan_tp_cost;

/* tp ranks of mode; diag: 2-D rank (r, r); gathered: 3-D keeps X^, W^. */
void cb_plan_tp_cost_of(const cb_plan_shape *s, cb_tp_mode mode, int tp, int diag, int gathered,
                        cb_plan_tp_cost *c);
double cb_plan_tp_sent(const cb_plan_tp_cost *c);
double cb_plan_tp_calls(const cb_plan_tp_cost *c);
/* bytes sent per rank by a ring all-reduce of `bytes` on p ranks */
double cb_plan_ring_allreduce(double p, double bytes);
/* V rounded up to a multiple of m: the padded vocabulary of a layout */
double cb_plan_pad(double V, double m);

#endif
