/* Automatic partitioning of a model's ordered modules into contiguous
 * pipeline stages, as SageMaker's model parallelism does it: each module
 * has a compute cost (profiled milliseconds, else FLOPs) and a memory cost
 * (3 x parameter bytes + activation bytes of one micro-batch); the two are
 * normalised by their totals and mixed with a memory weight w:
 *     cost_i = (1 - w) * compute_i / sum(compute) + w * mem_i / sum(mem)
 * and a dynamic program over contiguous ranges minimises the largest
 * stage's cost. Interleaved pipelines place several stages on one rank,
 * whose time is their sum: there the largest rank sum is minimised. Modules that share a weight (the GPT's embedding and tied
 * LM head, tie >= 0) cannot be adjacent; when they land on different stages
 * each stage holds a copy (counted in its memory) and the pipeline sums
 * their gradients every step. */
#ifndef CB_PP_PARTITION_H
#define CB_PP_PARTITION_H

#include <stdio.h>

#include "cubist.h"

#define CB_PP_MAX_STAGES 256

typedef struct cb_pp_module {
    char name[24];
    double flops;       /* forward + backward of one micro-batch */
    double time_ms;     /* profiled forward + backward; <= 0: use flops */
    double param_bytes; /* parameters held (a tied copy counts where it is held) */
    double act_bytes;   /* activations kept for backward, one micro-batch */
    int tie;            /* modules with the same tie >= 0 share a weight; -1 none */
} cb_pp_module;

typedef struct cb_pp_partition {
    int nstages, nmod;
    int bound[CB_PP_MAX_STAGES + 1]; /* stage s holds modules [bound[s], bound[s+1]) */
    double cost[CB_PP_MAX_STAGES];   /* weighted cost of each stage */
    double max_cost;
    int nranks;                         /* stage s runs on rank s % nranks (interleaved) */
    double rank_cost[CB_PP_MAX_STAGES]; /* sum of each rank's stages' costs */
    double rank_max;
    int exact; /* interleaved search: the optimum was proven */
} cb_pp_partition;

/* cost[n] of n modules under memory weight w in [0, 1]. Uses profiled times
 * when every module has one, else FLOPs. */
void cb_pp_module_costs(const cb_pp_module *m, int n, double w, double *cost);
/* Contiguous non-empty stages minimising the maximum stage cost (ties: the
 * earliest boundaries). CB_EINPUT when p > n or p > CB_PP_MAX_STAGES. */
int cb_pp_partition_auto(const double *cost, int n, int p, cb_pp_partition *out, cb_err *e);
/* Interleaved: p ranks of v chunks, virtual stage c*p + s on rank s. A
 * rank's time is the sum of its chunks', so this minimises the largest
 * rank sum (then the largest virtual stage, then the earliest boundaries):
 * the dynamic program's stages, improved by moving one or two boundaries
 * at a time while that helps, then a branch and bound over every placement
 * of the cuts, which proves the optimum unless it visits more than
 * max_nodes (0: no branch and bound; out->exact says which). Its largest
 * rank sum is never above that of the dynamic program's stages. */
int cb_pp_partition_search(const double *cost, int n, int p, int v, double max_nodes,
                           cb_pp_partition *out, cb_err *e);
/* cb_pp_partition_search with 2e7 nodes (well under a second); v = 1 is
 * cb_pp_partition_auto. */
int cb_pp_partition_interleaved(const double *cost, int n, int p, int v, cb_pp_partition *out,
                                cb_err *e);
/* Equal module counts, the remainder one each to the last stages. */
int cb_pp_partition_equal(const double *cost, int n, int p, cb_pp_partition *out, cb_err *e);
/* --partition LIST: p+1 boundaries "0,3,7,12" (0 first, n last), p stage
 * starts "0,3,7", or p-1 inner cuts "3,7"; strictly increasing. */
int cb_pp_partition_parse(const char *list, const double *cost, int n, int p,
                          cb_pp_partition *out, cb_err *e);
/* Fills cost, max_cost and the rank sums (nranks: 0 or nstages, one stage
 * per rank) from bound. */
void cb_pp_partition_score(cb_pp_partition *pt, const double *cost);
/* --print-partition: one line per stage (modules, cost, compute share,
 * parameter and activation memory) and the tied weights' stages. stage_of
 * maps a partition stage to the rank that runs it (NULL: itself). */
void cb_pp_partition_print(FILE *f, const cb_pp_partition *pt, const cb_pp_module *m, double w,
                           int nranks);

#endif
