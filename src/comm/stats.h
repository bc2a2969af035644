/* Communication accounting across communicators and ranks: the per-step
 * fields of the training log and the --comm-report table.
 *
 * A tally merges the counters of several communicators (a grid's groups) by
 * tag: the tags name layer type and direction (linear.fwd, head.bwd, ...),
 * or the data-parallel traffic (grad, params, norm, loss), or cubist's own
 * bookkeeping (control). The step log keeps this rank's tally of one step
 * and gathers every rank's step totals to world rank 0: one gather of
 * 32 bytes per rank, counted as control traffic but outside the step. */
#ifndef CB_COMM_STATS_H
#define CB_COMM_STATS_H

#include <stdio.h>

#include "comm/comm.h"

#define CB_COMM_TALLY_MAX 128 /* distinct tags over all groups; more count as "other" */

typedef struct cb_comm_tally {
    int n;
    cb_comm_stat tag[CB_COMM_TALLY_MAX]; /* by tag name, in first-seen order */
} cb_comm_tally;

/* t = the counters of cs[0..n) summed by tag over the communicators. */
void cb_comm_tally_take(cb_comm_tally *t, cb_comm *const *cs, int n);
/* out = now - before, tag by tag; out keeps only tags with calls. */
void cb_comm_tally_diff(cb_comm_tally *out, const cb_comm_tally *now, const cb_comm_tally *before);
cb_comm_stat cb_comm_tally_total(const cb_comm_tally *t);

typedef struct cb_comm_steplog {
    cb_comm *world;      /* the gathers run over it */
    cb_comm *const *cs;  /* the communicators counted */
    int n;
    cb_comm_tally before, step; /* counters at the step's start; its share */
    cb_comm_stat *ranks; /* world rank 0: every rank's step total (world size) */
    int gathered;        /* ranks holds this step */
} cb_comm_steplog;

/* ranks is allocated on world rank 0 only. */
int cb_comm_steplog_init(cb_comm_steplog *l, cb_comm *world, cb_comm *const *cs, int n, cb_err *e);
void cb_comm_steplog_free(cb_comm_steplog *l);
/* A step starts now (snapshot of the counters). */
void cb_comm_steplog_mark(cb_comm_steplog *l);
/* The step ended: its share of the counters; with gather (the same on every
 * rank), collective over world: every rank's total to world rank 0. Then
 * marks the next step's start, so the gather itself is no step's traffic. */
void cb_comm_steplog_end(cb_comm_steplog *l, int gather);
/* The log fields of the step as a JSON fragment starting with a comma:
 *   ,"comm_bytes":S,"comm_bytes_recv":R,"comm_calls":K,"comm_ms":M  this rank
 *   ,"comm_ranks":{"sent":[..],"recv":[..],"calls":[..],"ms":[..]}  after a gather
 *   ,"comm_by_tag":{"<tag>":{"bytes":..,"bytes_recv":..,"calls":..,"ms":..},..}
 * (this rank's, summed over its groups). snprintf-like. */
size_t cb_comm_steplog_json(const cb_comm_steplog *l, char *buf, size_t cap);

/* Reports leave out tags without calls since the last reset, and keep every
 * communicator (zeros included) so the keys are stable from step to step. */
/* This rank's counters of n communicators as one JSON object:
 * {"<comm>":{"bytes_sent":..,"bytes_recv":..,"calls":..,"seconds":..,
 *   "tags":{"<tag>":{same fields},..}},.., "total":{same fields}}.
 * snprintf-like: writes at most cap bytes, returns the length needed. */
size_t cb_comm_report_json(cb_comm *const *cs, int n, char *buf, size_t cap);
/* The same as a table, one line per (comm, tag), a line per comm, a total;
 * snprintf-like. */
size_t cb_comm_report_table(cb_comm *const *cs, int n, char *buf, size_t cap);


/* --comm-report, collective over world: every rank's cumulative counters
 * of cs, per (group, tag), a total per group and over all groups, gathered
 * to world rank 0; returned there (NULL on the other ranks). */
typedef struct cb_comm_spread cb_comm_spread;
cb_comm_spread *cb_comm_spread_gather(cb_comm *world, cb_comm *const *cs, int n);
/* Its table into f: min and max over the ranks per row (a rank without the
 * tag counts as 0), then the spread of communication seconds. */
void cb_comm_spread_print(const cb_comm_spread *s, FILE *f);
void cb_comm_spread_free(cb_comm_spread *s);

#endif
