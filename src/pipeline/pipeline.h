/* The pipeline engine: one optimizer step's M micro-batches through this
 * rank's stage chunks, following a schedule (schedule.h). Chunk c of
 * pipeline rank s is virtual stage c * p + s, a cb_gpt holding the module
 * range [bound[vs], bound[vs+1]) of a partition (partition.h), on the
 * caller's tensor layout (every chunk shares it).
 *
 * Messages: activations go forward and their gradients backward as
 * non-blocking point-to-point messages on the pipeline group (rank =
 * stage), tag "pp.act" / "pp.grad". Receives are posted as early as a
 * buffer is free (a forward's receive lands in the stage input of the slot
 * reserved for that micro-batch, a backward's in a per-slot buffer), sends
 * are waited on only before their buffer is reused, and outstanding
 * requests are tested between actions, so transfers overlap compute.
 *
 * Tied weight: the first virtual stage (embedding) and the last (head) each
 * hold wte; their gradients are summed (both then hold the same sum,
 * a + b = b + a exactly): each side starts its non-blocking exchange right
 * after its last micro-batch's backward on the tied chunk, and the sum is
 * taken after the step's backwards. A grad hook installed on a tied chunk
 * (data parallelism) sees wte ready only after that sum.
 *
 * Loss: the head's stage adds its micro-batches' mean losses; every rank
 * of the pipeline gets the mean over M. Busy time counts forward and
 * backward compute only; the bubble is 1 - busy / step time. */
#ifndef CB_PIPELINE_H
#define CB_PIPELINE_H

#include "comm/comm.h"
#include "model/gpt_internal.h"
#include "pipeline/schedule.h"

typedef struct cb_pp_config {
    cb_pp_kind kind;
    int p, v, M;     /* stages (ranks), chunks per rank, micro-batches per step */
    const int *bound; /* p*v + 1 module boundaries, 0 .. n_layer + 2 */
    gpt_rc rc;        /* recompute, per chunk */
} cb_pp_config;

typedef struct cb_pp_stats {
    double step_ms, busy_ms, fwd_ms, bwd_ms;
    double wait_ms;       /* blocked on activation, gradient and tied-wte messages */
    double tie_ms;        /* the tied wte's sum after the last backward */
    double bubble;        /* 1 - busy / step */
    double act_bytes;     /* planned: the chunks' slots in flight, the per-slot message
                             buffers (dy, dx) and the tied-gradient buffer */
    double act_bytes_none; /* the same had the chunks been built without recompute */
    double flops, recompute_flops; /* per micro-batch: the chunks' step, the recompute's
                                      extra forwards (gpt_recompute_flops) */
    int max_inflight;     /* micro-batches forwarded and not yet backwarded, at most */
} cb_pp_stats;

struct cb_pipe;

typedef struct cb_pp_chunk {
    struct cb_pipe *pp;
    cb_gpt *m;
    int vs, nslots;
    int *slot_of;          /* [M]: slot of a micro-batch, -1 none */
    int *free_slots, nfree;
    float *dy, *dx;        /* [nslots][act]: received output gradient, input gradient sent */
    cb_comm_req *rx_act, *rx_grad, *tx_act, *tx_grad; /* per slot */
    cb_grad_ready_fn hook; /* the chained hook of a tied chunk */
    void *hook_ctx;
} cb_pp_chunk;

typedef struct cb_pipe {
    cb_comm *c;
    cb_pp_config o;
    int s, nvs, B, T;
    size_t act;              /* floats of one exchanged activation */
    cb_pp_chunk *ch;         /* v */
    cb_pp_action *acts;
    int nacts, posted;       /* receives posted for actions [0, posted) */
    int inflight, tie_first, tie_last; /* chunks holding the tied wte, -1 elsewhere */
    int tie_hold;            /* during the step: wte readiness deferred */
    float *tie_buf;
    cb_comm_req tie_req[2];  /* the tied exchange in flight: receive, send */
    cb_pp_stats st;
} cb_pipe;

/* Builds this rank's chunks on layout L for micro-batches of B x T (B: this
 * data-parallel rank's rows). c: the pipeline group (rank = stage). Every
 * chunk's parameters start from seed's serial initialisation. */
int cb_pipe_init(cb_pipe *pp, cb_comm *c, const cb_gpt_config *cfg, int B, int T, cb_layout *L,
                 const cb_pp_config *o, uint64_t seed, cb_err *e);
void cb_pipe_free(cb_pipe *pp);
/* Zeroes every chunk's gradients. */
void cb_pipe_zero_grad(cb_pipe *pp);
/* The step's M micro-batches (ids, targets: M x B x T, read by the first
 * and the last stage): forward and backward with the loss scaled by
 * dloss_scale, gradients accumulated, the tied wte summed. before_bwd (may
 * be NULL) runs before each backward with the chunk and whether it is that
 * chunk's last micro-batch. Returns the sum of the M mean losses, the same
 * on every rank of the pipeline. */
typedef void (*cb_pp_bwd_fn)(void *ctx, int chunk, int last);
double cb_pipe_step(cb_pipe *pp, const int *ids, const int *targets, float dloss_scale,
                    cb_pp_bwd_fn before_bwd, void *ctx);
/* Forward only of one micro-batch (ids, targets: B x T) through every
 * chunk, between steps: the mean loss, the same on every rank of the
 * pipeline. Validation under --pp. */
double cb_pipe_eval(cb_pipe *pp, const int *ids, const int *targets);
/* Sum of squares of the gradients this rank owns, wte counted once (on the
 * embedding's stage); the caller adds it up over the tensor and pipeline
 * ranks (grid->model). */
double cb_pipe_grad_sumsq(const cb_pipe *pp);
/* Installs the wrapper that holds wte's readiness back until the tied sum
 * on chunks holding wte, chaining the hook the chunk has now. Call after
 * installing other hooks (cb_dp_init). */
void cb_pipe_chain_hooks(cb_pipe *pp);

#endif
