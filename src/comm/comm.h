/* cubist's communication layer: a thin wrapper over MPI that names every
 * communicator and counts what goes through it, per caller-supplied tag.
 *
 * Lifetime: cb_comm_init once at the start of main (safe without a launcher:
 * a lone process is an MPI singleton of size 1), cb_comm_finalize at the end.
 * Only the thread that called cb_comm_init may call into MPI (the OpenMP
 * threads of the kernels never do), so MPI_THREAD_FUNNELED is requested.
 *
 * Errors: MPI's default handler (MPI_ERRORS_ARE_FATAL) stays installed, so a
 * failing MPI call ends the whole job; the wrappers therefore return nothing.
 * A rank that exits without MPI_Finalize, or exits non-zero, also ends the
 * job: OpenMPI's mpirun kills the remaining ranks ("mpirun detected that one
 * or more processes exited with non-zero status") and MPICH's hydra does the
 * same, so no rank is left waiting in a collective (tests/test_comm.sh checks
 * both). Bad user input is agreed across ranks with cb_comm_agree_err and
 * ends every rank with cb_comm_exit, so the job prints one message and exits
 * 2 without MPI_Abort's banner.
 *
 * Byte counters use the bandwidth-optimal (ring) volume per rank, for a
 * message of n bytes (the full vector) on a group of p ranks:
 *   all-reduce        sent = recv = 2 (p-1) n / p
 *   reduce-scatter    sent = recv =   (p-1) n / p   (n = p blocks)
 *   all-gather        sent = recv =   (p-1) n / p   (n = p blocks)
 *   broadcast, reduce sent = recv =   (p-1) n / p   (the (p-1) n bytes that
 *                     must arrive somewhere, shared evenly: scatter + ring
 *                     all-gather for broadcast, its mirror for reduce)
 *   send / recv       exact: n on the sender, n on the receiver
 * Integer division, so p = 1 moves 0 bytes. Time is the wall time
 * (MPI_Wtime) spent inside blocking calls and inside cb_comm_wait for the
 * non-blocking ones; bytes and calls are counted when an operation starts. */
#ifndef CB_COMM_H
#define CB_COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cubist.h"

#define CB_COMM_MAX_TAGS 32  /* per communicator; further tags count as "other" */
#define CB_COMM_TAG_LEN 24
/* The tag of cubist's own bookkeeping traffic: error agreement, the
 * per-step gather of the log's counters, reports, --print-grid. */
#define CB_COMM_CONTROL "control"

typedef struct cb_comm_stat {
    char tag[CB_COMM_TAG_LEN];
    uint64_t bytes_sent, bytes_recv, calls;
    double seconds;
} cb_comm_stat;

typedef struct cb_comm {
    MPI_Comm comm;
    char name[32];
    int rank, size;
    int ntags;
    cb_comm_stat tags[CB_COMM_MAX_TAGS];
    float *scratch;   /* cb_comm_reduce's send copy at a non-zero root */
    size_t scratch_n;
    uint16_t *wire;   /* the *_bf16f collectives' bf16 staging */
    size_t wire_n;
} cb_comm;

typedef enum cb_comm_op { CB_COMM_SUM, CB_COMM_MAX, CB_COMM_MIN } cb_comm_op;

/* A non-blocking operation in flight; cb_comm_wait completes it and charges
 * the waiting time to its communicator and tag. */
typedef struct cb_comm_req {
    MPI_Request req;
    cb_comm *c;
    int slot;
    const char *op; /* "all-reduce", "receive"...: the stall watchdog's words */
    int peer, mtag; /* root or partner (-1: none) and message tag */
    const uint16_t *wire; /* the *_bf16f forms: cb_comm_wait widens wire (nout) into out */
    float *out;
    size_t nout;
} cb_comm_req;

/* ---------------------------------------------------------------- lifetime */
/* Initialises MPI unless already done (then only wraps the world).
 * CB_EINPUT when the launcher started more tasks than MPI sees
 * (cb_comm_launcher_check); MPI is then finalised again. */
int cb_comm_init(int *argc, char ***argv, cb_err *e);
/* CB_EINPUT with a one-line message when MPI sees mpi_size == 1 process but
 * the environment says the launcher started more (SLURM_STEP_NUM_TASKS, or
 * SLURM_NTASKS/SLURM_NPROCS inside a step, OMPI_COMM_WORLD_SIZE, PMI_SIZE,
 * MPI_LOCALNRANKS, PMIX_RANK >= 1): a cubist built with one MPI under the
 * other's launcher, where every task would train alone and overwrite the
 * others' files. CUBIST_SINGLETON_OK=1 allows it (independent runs on
 * purpose). Pure: reads only the environment (src/comm/launcher.c). */
int cb_comm_launcher_check(int mpi_size, cb_err *e);
/* Frees the world wrapper; finalises MPI if cb_comm_init initialised it. */
void cb_comm_finalize(void);
/* The world communicator (a duplicate of MPI_COMM_WORLD named "world");
 * NULL before cb_comm_init. */
cb_comm *cb_comm_world(void);

/* Wraps a communicator that c now owns (cb_comm_free frees it). */
void cb_comm_wrap(cb_comm *c, MPI_Comm comm, const char *name);
/* Splits parent like MPI_Comm_split; collective over parent. */
void cb_comm_split(cb_comm *parent, int color, int key, const char *name, cb_comm *out);
void cb_comm_free(cb_comm *c);

/* ---------------------------------------------------------------- stall watchdog */
/* Every blocking wait (the blocking calls below, cb_comm_wait) polls and
 * backs off once it is long (sleeps instead of spinning a core). A wait
 * longer than seconds (0: never, the default) prints which operation, tag
 * and communicator, which ranks have not arrived and where the others wait
 * (asked on a communicator of the watchdog's own), and aborts the job with
 * status CB_ESTALL. Paused (nesting) while a rank legitimately waits long,
 * e.g. for another rank writing a checkpoint. */
void cb_comm_set_stall_timeout(double seconds);
void cb_comm_stall_pause(int paused);

/* ---------------------------------------------------------------- errors */
/* For an error only this rank knows: prints "cubist: rank R: msg" and ends
 * the whole job with MPI_Abort(MPI_COMM_WORLD, 2). */
_Noreturn void cb_comm_fatal(const char *msg);
/* cb_comm_fatal with its exit status: CB_ENOMEM for resources, not input. */
_Noreturn void cb_comm_fatal_code(int code, const char *msg);
/* Collective over c: the largest error code of any rank (0 when none). */
int cb_comm_agree_error(cb_comm *c, int local_code);
/* Collective over c: every rank ends with the same cb_err, the one of the
 * lowest rank with the largest code; returns that code. */
int cb_comm_agree_err(cb_comm *c, cb_err *e);
/* Collective over the world, after an agreement: rank 0 prints msg (one line,
 * "cubist: " prefix) if non-empty, then every rank finalises and exits code. */
_Noreturn void cb_comm_exit(int code, const char *msg);

/* ---------------------------------------------------------------- collectives */
/* tag names the traffic in the counters ("grad", "attn.fwd"); NULL is "-".
 * send == NULL or send == recv means in place. */
/* recv[n] = op over ranks of send[n]. */
void cb_comm_allreduce(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, cb_comm_op op);
void cb_comm_allreduce_f64(cb_comm *c, const char *tag, const double *send, double *recv, size_t n, cb_comm_op op);
void cb_comm_allreduce_i64(cb_comm *c, const char *tag, const int64_t *send, int64_t *recv, size_t n, cb_comm_op op);
/* send[p*n] summed over ranks; rank r keeps block r in recv[n]. In place:
 * send NULL, recv holds p*n and the result is left in its first n. */
void cb_comm_reduce_scatter(cb_comm *c, const char *tag, const float *send, float *recv, size_t n);
/* recv[p*n] = the send[n] of every rank, in rank order. In place: send NULL,
 * this rank's block already at recv + rank*n. */
void cb_comm_allgather(cb_comm *c, const char *tag, const float *send, float *recv, size_t n);
void cb_comm_bcast(cb_comm *c, const char *tag, float *buf, size_t n, int root);
void cb_comm_bcast_bytes(cb_comm *c, const char *tag, void *buf, size_t nbytes, int root);
/* recv[n] on root = sum of send[n] over ranks (recv unused elsewhere unless
 * send is NULL: then recv is the input on every rank). In place at a root
 * other than 0, recv is first copied to c->scratch (an MPICH bug, comm.c). */
void cb_comm_reduce(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, int root);
/* c->scratch sized for in-place reduces of n floats at a non-zero root, so
 * none allocates later; CB_ENOMEM (0 otherwise) when it cannot be. */
int cb_comm_reserve(cb_comm *c, size_t n);
void cb_comm_barrier(cb_comm *c, const char *tag);

void cb_comm_iallreduce(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, cb_comm_op op, cb_comm_req *r);
void cb_comm_ireduce_scatter(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, cb_comm_req *r);
void cb_comm_iallgather(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, cb_comm_req *r);
void cb_comm_ibcast(cb_comm *c, const char *tag, float *buf, size_t n, int root, cb_comm_req *r);

/* Variable-count forms, for shards of uneven size (ZeRO): counts[p] and
 * displs[p] in elements, block r belongs to rank r; n = sum of counts.
 * Counted as a ring over uneven blocks: sent = recv = n - counts[rank]
 * (equal blocks give (p-1) n / p as above).
 * reduce_scatterv: send holds n (blocks in rank order); rank r gets its
 * counts[r] summed elements in recv. In place: send NULL, recv holds the n
 * inputs and the result is left in its first counts[rank]. */
void cb_comm_ireduce_scatterv(cb_comm *c, const char *tag, const float *send, float *recv, const int *counts, cb_comm_req *r);
/* bf16 forms of the gradient reduction (--comm-dtype bf16): buf holds
 * bf16 values (cb_bf16_round), in place, half the bytes of the float
 * forms and counted as such. Each partial sum is formed in fp32 (a
 * custom MPI op: both operands widened, added, rounded to nearest even
 * once), never in bf16 arithmetic. */
void cb_comm_iallreduce_bf16(cb_comm *c, const char *tag, uint16_t *buf, size_t n, cb_comm_req *r);
void cb_comm_ireduce_scatterv_bf16(cb_comm *c, const char *tag, uint16_t *buf, const int *counts, cb_comm_req *r);
/* Float collectives that travel in bf16 (--comm-dtype bf16 for
 * tensor-parallel activations): the floats are rounded to nearest even into
 * a bf16 staging buffer, sent, and widened back (every rank, the root of a
 * broadcast and this rank's own block of a gather included, ends with the
 * same rounded values); sums are formed in fp32 (the op above). Half the
 * bytes of the float forms, in the same calls, counted as such. Arguments
 * as the float forms': allreduce sums x (n) in place; reduce: recv (n) on
 * root = the sum of send (n), send NULL meaning recv; reduce_scatter: send
 * (p*n) -> recv (n), send NULL meaning recv; allgather: send (n) -> recv
 * (p*n), send NULL meaning this rank's block of recv; bcast: buf (n) from
 * root. The blocking forms stage in c->wire (grown on demand); the
 * non-blocking ones in the caller's stage (p*n values for the gather and
 * the reduce-scatter, n for the broadcast), which must stay untouched until
 * cb_comm_wait, which widens the result into recv (buf). */
void cb_comm_allreduce_bf16f(cb_comm *c, const char *tag, float *x, size_t n);
void cb_comm_reduce_bf16f(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, int root);
void cb_comm_reduce_scatter_bf16f(cb_comm *c, const char *tag, const float *send, float *recv, size_t n);
void cb_comm_allgather_bf16f(cb_comm *c, const char *tag, const float *send, float *recv, size_t n);
void cb_comm_ireduce_scatter_bf16f(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, uint16_t *stage, cb_comm_req *r);
void cb_comm_iallgather_bf16f(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, uint16_t *stage, cb_comm_req *r);
void cb_comm_ibcast_bf16f(cb_comm *c, const char *tag, float *buf, size_t n, int root, uint16_t *stage, cb_comm_req *r);
/* c->wire sized for n bf16 values, so no step allocates; CB_ENOMEM (0
 * otherwise) when it cannot be. */
int cb_comm_reserve_wire(cb_comm *c, size_t n);
/* recv + displs[r] = rank r's counts[r] elements. In place: send NULL, this
 * rank's block already at recv + displs[rank]. */
void cb_comm_allgatherv(cb_comm *c, const char *tag, const float *send, float *recv, const int *counts, const int *displs);
void cb_comm_iallgatherv(cb_comm *c, const char *tag, const float *send, float *recv, const int *counts, const int *displs, cb_comm_req *r);
/* Rank r's send[counts[r]] lands at recv + displs[r] on root (recv unused
 * elsewhere). Exact bytes: a rank sends its block, root receives the rest. */
void cb_comm_gatherv(cb_comm *c, const char *tag, const float *send, float *recv, const int *counts, const int *displs, int root);
/* recv[p*nbytes] on root = every rank's send[nbytes] in rank order (recv
 * unused elsewhere; send and recv distinct). Exact bytes: a rank sends its
 * block, root receives the p-1 others. */
void cb_comm_gather_bytes(cb_comm *c, const char *tag, const void *send, void *recv, size_t nbytes, int root);
/* recv[p*n] = the int32 send[n] of every rank, in rank order. */
void cb_comm_allgather_i32(cb_comm *c, const char *tag, const int32_t *send, int32_t *recv, size_t n);

/* ---------------------------------------------------------------- point to point */
/* mtag is the MPI message tag that matches sends to receives. */
void cb_comm_send(cb_comm *c, const char *tag, const float *buf, size_t n, int dest, int mtag);
void cb_comm_recv(cb_comm *c, const char *tag, float *buf, size_t n, int src, int mtag);
void cb_comm_isend(cb_comm *c, const char *tag, const float *buf, size_t n, int dest, int mtag, cb_comm_req *r);
void cb_comm_irecv(cb_comm *c, const char *tag, float *buf, size_t n, int src, int mtag, cb_comm_req *r);

/* Drives MPI's progress engine (non-blocking collectives only advance
 * inside MPI calls); returns 1 when r has completed. The time spent inside
 * is charged like a wait; waiting on a completed request returns at once. */
int cb_comm_test(cb_comm_req *r);
void cb_comm_wait(cb_comm_req *r);
void cb_comm_waitall(cb_comm_req *r, int n);

/* ---------------------------------------------------------------- counters */
void cb_comm_stats_reset(cb_comm *c);
/* Sum over the tags of one communicator (tag "total"). */
cb_comm_stat cb_comm_stats_total(const cb_comm *c);
/* Sum over the tags of n communicators. */
cb_comm_stat cb_comm_stats_sum(cb_comm *const *cs, int n);
/* NULL when c has no counter for tag. */
const cb_comm_stat *cb_comm_stats_find(const cb_comm *c, const char *tag);
/* Reports of these counters: comm/stats.h. */

#endif
