/* MPI wrapper with per-communicator, per-tag traffic counters; see comm.h
 * for the byte formulas and the error conventions. */
#include "comm/comm.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

/* The one global state of the library, on purpose: MPI itself is
 * per-process global (MPI_Init once, MPI_COMM_WORLD), so a context object
 * passed around would only wrap these. They hold the world wrapper (its
 * counters) and whether cubist must finalise MPI. Everything else (grids,
 * sub-communicators, models, trainers) is an object its caller owns. */
static cb_comm g_world;
static int g_have_world;
static int g_we_initialised;
static MPI_Comm g_watch = MPI_COMM_NULL; /* the stall watchdog's duplicate of the world */
static MPI_Op g_bf16_sum = MPI_OP_NULL;   /* created on first use */

/* ---------------------------------------------------------------- lifetime */

int cb_comm_init(int *argc, char ***argv, cb_err *e) {
    int done = 0, provided = 0;
    MPI_Initialized(&done);
    if (!done) {
        /* OpenMPI's non-blocking all-reduce (libnbc) picks a binomial tree
         * (reduce + broadcast: twice the ring's bytes) for in-place and
         * small-group calls, half the bandwidth of the blocking one; the
         * ring matches it (cubist bench --allreduce). A user's setting wins;
         * MPICH ignores the variable. */
        setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
        /* FUNNELED: OpenMP threads compute, only the main thread talks */
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return cb_fail(e, CB_ESYS, "MPI_Init failed; check the MPI installation (make deps) and the launcher");
        g_we_initialised = 1;
    }
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rc = cb_comm_launcher_check(size, e);
    if (rc) { /* a singleton among singletons: end MPI cleanly, report */
        if (g_we_initialised) MPI_Finalize();
        g_we_initialised = 0;
        return rc;
    }
    if (!g_have_world) {
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup); /* cubist's traffic never matches the user's */
        cb_comm_wrap(&g_world, dup, "world");
        MPI_Comm_dup(MPI_COMM_WORLD, &g_watch);
        g_have_world = 1;
    }
    return CB_OK;
}

void cb_comm_finalize(void) {
    int done = 0;
    if (g_have_world) cb_comm_free(&g_world);
    if (g_have_world && g_watch != MPI_COMM_NULL) MPI_Comm_free(&g_watch);
    g_watch = MPI_COMM_NULL;
    if (g_bf16_sum != MPI_OP_NULL) MPI_Op_free(&g_bf16_sum);
    g_bf16_sum = MPI_OP_NULL;
    g_have_world = 0;
    MPI_Finalized(&done);
    if (g_we_initialised && !done) MPI_Finalize();
    g_we_initialised = 0;
}

cb_comm *cb_comm_world(void) { return g_have_world ? &g_world : NULL; }

void cb_comm_wrap(cb_comm *c, MPI_Comm comm, const char *name) {
    memset(c, 0, sizeof *c);
    c->comm = comm;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "comm");
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
}

void cb_comm_split(cb_comm *parent, int color, int key, const char *name, cb_comm *out) {
    MPI_Comm sub;
    MPI_Comm_split(parent->comm, color, key, &sub);
    cb_comm_wrap(out, sub, name);
}

void cb_comm_free(cb_comm *c) {
    free(c->scratch);
    c->scratch = NULL;
    c->scratch_n = 0;
    free(c->wire);
    c->wire = NULL;
    c->wire_n = 0;
    int done = 0;
    MPI_Finalized(&done);
    if (!done && c->comm != MPI_COMM_NULL && c->comm != MPI_COMM_WORLD && c->comm != MPI_COMM_SELF)
        MPI_Comm_free(&c->comm);
    c->comm = MPI_COMM_NULL;
}

/* ---------------------------------------------------------------- errors */

static int mpi_up(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

_Noreturn void cb_comm_fatal_code(int code, const char *msg) {
    int rank = 0;
    if (!mpi_up()) {
        fprintf(stderr, "cubist: %s\n", msg);
        exit(code);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "cubist: rank %d: %s\n", rank, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); /* MPI_Abort does not return; this keeps _Noreturn honest */
}

_Noreturn void cb_comm_fatal(const char *msg) { cb_comm_fatal_code(CB_EINPUT, msg); }

_Noreturn void cb_comm_exit(int code, const char *msg) {
    int rank = 0;
    if (mpi_up()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0 && msg && msg[0]) fprintf(stderr, "cubist: %s\n", msg);
    fflush(stderr);
    fflush(stdout);
    cb_comm_finalize();
    if (mpi_up()) MPI_Finalize(); /* initialised by someone else: still end cleanly */
    exit(code);
}

/* ---------------------------------------------------------------- counters */

static int stat_slot(cb_comm *c, const char *tag) {
    if (!tag) tag = "-";
    for (int i = 0; i < c->ntags; i++)
        if (strncmp(c->tags[i].tag, tag, CB_COMM_TAG_LEN - 1) == 0) return i;
    if (c->ntags == CB_COMM_MAX_TAGS) return CB_COMM_MAX_TAGS - 1; /* "other" */
    int i = c->ntags++;
    snprintf(c->tags[i].tag, CB_COMM_TAG_LEN, "%s", c->ntags == CB_COMM_MAX_TAGS ? "other" : tag);
    return i;
}

/* Starts the accounting of one operation: sent/recv bytes, one call. */
static int charge(cb_comm *c, const char *tag, uint64_t sent, uint64_t recv) {
    int s = stat_slot(c, tag);
    c->tags[s].bytes_sent += sent;
    c->tags[s].bytes_recv += recv;
    c->tags[s].calls++;
    return s;
}

/* Ring share (p-1)/p of nbytes, times k (2 for all-reduce). */
static uint64_t ring(const cb_comm *c, size_t nbytes, int k) {
    return (uint64_t)k * (uint64_t)(c->size - 1) * nbytes / (uint64_t)c->size;
}

void cb_comm_stats_reset(cb_comm *c) {
    for (int i = 0; i < c->ntags; i++) {
        cb_comm_stat *s = &c->tags[i];
        s->bytes_sent = s->bytes_recv = s->calls = 0;
        s->seconds = 0;
    }
}

static void stat_add(cb_comm_stat *a, const cb_comm_stat *b) {
    a->bytes_sent += b->bytes_sent;
    a->bytes_recv += b->bytes_recv;
    a->calls += b->calls;
    a->seconds += b->seconds;
}

cb_comm_stat cb_comm_stats_total(const cb_comm *c) {
    cb_comm_stat t = { .tag = "total" };
    for (int i = 0; i < c->ntags; i++) stat_add(&t, &c->tags[i]);
    return t;
}

cb_comm_stat cb_comm_stats_sum(cb_comm *const *cs, int n) {
    cb_comm_stat t = { .tag = "total" };
    for (int i = 0; i < n; i++) {
        cb_comm_stat s = cb_comm_stats_total(cs[i]);
        stat_add(&t, &s);
    }
    return t;
}

const cb_comm_stat *cb_comm_stats_find(const cb_comm *c, const char *tag) {
    if (!tag) tag = "-";
    for (int i = 0; i < c->ntags; i++)
        if (strcmp(c->tags[i].tag, tag) == 0) return &c->tags[i];
    return NULL;
}

/* ---------------------------------------------------------------- helpers */

static MPI_Op mpi_op(cb_comm_op op) {
    return op == CB_COMM_MAX ? MPI_MAX : op == CB_COMM_MIN ? MPI_MIN : MPI_SUM;
}

/* MPI counts are int; a larger message is a caller bug (bucket smaller). */
static int count(cb_comm *c, size_t n) {
    if (n > (size_t)INT_MAX) {
        char m[160];
        snprintf(m, sizeof m, "%s: message of %zu elements exceeds MPI's int count; split it into buckets (internal error)", c->name, n);
        cb_comm_fatal(m);
    }
    return (int)n;
}

static const void *in_place(const void *send, const void *recv) {
    return send == NULL || send == recv ? MPI_IN_PLACE : send;
}

static void req_start(cb_comm_req *r, cb_comm *c, int slot, const char *op, int peer, int mtag) {
    r->c = c;
    r->slot = slot;
    r->op = op;
    r->peer = peer;
    r->mtag = mtag;
    r->wire = NULL;
}

/* ---------------------------------------------------------------- stall watchdog */

/* Every blocking wait goes through wait_for: it polls with MPI_Test,
 * spinning for the first millisecond (a short wait costs what MPI's own
 * blocking call costs), yielding up to 50 ms, then sleeping 1/16 of the
 * time waited so far (at most 20 ms, so a long wait wakes late by at most
 * 6%) instead of burning a core. Past the deadline it asks every rank, on
 * a communicator of its own, where it waits; a rank that is itself waiting
 * answers within 0.1 s, a stopped or hung one does not. It prints what it
 * waited for, the ranks that did not answer and where the others wait, and
 * aborts the job with CB_ESTALL. */
typedef struct wait_info {
    cb_comm *c;
    const char *op, *tag;
    int peer, mtag; /* root or partner, -1 none; message tag of point to point, -1 for a
                     * collective (missing() then asks every member, not the root alone) */
} wait_info;

enum { TAG_QUERY = 1, TAG_ANSWER = 2, DESC_LEN = 200 };
static double g_stall_s;       /* 0: no deadline */
static int g_stall_paused;

void cb_comm_set_stall_timeout(double seconds) { g_stall_s = seconds > 0 ? seconds : 0; }
void cb_comm_stall_pause(int paused) { g_stall_paused += paused ? 1 : -1; }

static int world_rank_of(cb_comm *c, int r) {
    MPI_Group g, wg;
    int out = r;
    MPI_Comm_group(c->comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_translate_ranks(g, 1, &r, wg, &out);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    return out;
}

static void describe(const wait_info *w, char *out) {
    if (w->mtag >= 0 && w->peer >= 0 && (!strcmp(w->op, "send") || !strcmp(w->op, "receive")))
        snprintf(out, DESC_LEN, "%s '%s' (message tag %d) %s world rank %d on communicator '%s'",
                 w->op, w->tag ? w->tag : "-", w->mtag, strcmp(w->op, "send") ? "from" : "to",
                 world_rank_of(w->c, w->peer), w->c->name);
    else
        snprintf(out, DESC_LEN, "%s '%s' on communicator '%s' (%d ranks)", w->op,
                 w->tag ? w->tag : "-", w->c->name, w->c->size);
}

/* Answers the stall queries that have arrived with where this rank waits. */
static void answer_queries(const wait_info *w) {
    static char reply[DESC_LEN];
    int flag = 1;
    while (flag) {
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_QUERY, g_watch, &flag, &st);
        if (!flag) break;
        char q[DESC_LEN];
        MPI_Recv(q, DESC_LEN, MPI_CHAR, st.MPI_SOURCE, TAG_QUERY, g_watch, MPI_STATUS_IGNORE);
        describe(w, reply);
        MPI_Request r;
        MPI_Isend(reply, DESC_LEN, MPI_CHAR, st.MPI_SOURCE, TAG_ANSWER, g_watch, &r);
        MPI_Request_free(&r);
    }
}

/* Collects answers for 2 s; answered[r] = 1 for each world rank heard,
 * and the first few answers into where. */
static void collect(const wait_info *w, char *answered, int n, char *where, size_t cap) {
    double t0 = MPI_Wtime();
    int got = 1;
    while (got < n && MPI_Wtime() - t0 < 2.0) {
        int flag;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_ANSWER, g_watch, &flag, &st);
        answer_queries(w); /* another stalled rank asks too */
        if (!flag) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
            continue;
        }
        char a[DESC_LEN];
        MPI_Recv(a, DESC_LEN, MPI_CHAR, st.MPI_SOURCE, TAG_ANSWER, g_watch, MPI_STATUS_IGNORE);
        if (!answered[st.MPI_SOURCE]++) got++;
        size_t len = strlen(where);
        if (got <= 5 && len + 64 < cap)
            snprintf(where + len, cap - len, "; world rank %d waits in %.*s", st.MPI_SOURCE,
                     (int)(cap - len - 40), a);
    }
}

/* The members of w's communicator (or its partner) that did not answer. */
static void missing(const wait_info *w, const char *answered, char *out, size_t cap) {
    out[0] = '\0';
    int lone = w->peer >= 0 && w->mtag >= 0, n = lone ? 1 : w->c->size;
    for (int i = 0; i < n; i++) {
        int wr = world_rank_of(w->c, lone ? w->peer : i);
        size_t len = strlen(out);
        if (wr >= 0 && !answered[wr] && len + 16 < cap)
            snprintf(out + len, cap - len, "%s%d", len ? "," : "", wr);
    }
}

_Noreturn static void stall(const wait_info *w, double waited) {
    static char query[DESC_LEN], me[DESC_LEN], where[1024], absent[256];
    int n, self;
    MPI_Comm_size(g_watch, &n);
    MPI_Comm_rank(g_watch, &self);
    char *answered = calloc((size_t)n, 1);
    if (!answered) cb_comm_fatal("stalled, and out of memory to say where");
    answered[self] = 1;
    describe(w, me);
    for (int r = 0; r < n; r++) {
        if (r == self) continue;
        MPI_Request q;
        MPI_Isend(query, DESC_LEN, MPI_CHAR, r, TAG_QUERY, g_watch, &q);
        MPI_Request_free(&q);
    }
    collect(w, answered, n, where, sizeof where);
    missing(w, answered, absent, sizeof absent);
    fprintf(stderr, "cubist: rank %d: stalled %.0f s (--stall-timeout %g) in %s; %s%s%s%s\n", self,
            waited, g_stall_s, me, absent[0] ? "not arrived (no answer: stopped, hung or busy "
                                               "outside communication): world rank " : "",
            absent, absent[0] ? "" : "every rank involved is waiting too", where);
    fflush(stderr);
    free(answered);
    MPI_Abort(MPI_COMM_WORLD, CB_ESTALL);
    exit(CB_ESTALL);
}

static void backoff(double waited) {
    if (waited < 1e-3) return;
    if (waited < 0.05) {
        sched_yield();
        return;
    }
    double s = waited / 16 < 0.02 ? waited / 16 : 0.02;
    struct timespec ts = {0, (long)(s * 1e9)};
    nanosleep(&ts, NULL);
}

static void wait_for(MPI_Request *req, const wait_info *w) {
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    double t0 = MPI_Wtime(), probe = 0.1;
    while (!done) {
        double waited = MPI_Wtime() - t0;
        if (g_stall_s > 0 && !g_stall_paused && waited > g_stall_s && g_watch != MPI_COMM_NULL)
            stall(w, waited);
        if (waited > probe && g_watch != MPI_COMM_NULL) {
            answer_queries(w);
            probe = waited + 0.1;
        }
        backoff(waited);
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
    }
}

/* A blocking operation: its request waited for, the time charged to slot. */
static void block(cb_comm *c, int slot, MPI_Request *req, const char *op, int peer, int mtag) {
    double t0 = MPI_Wtime();
    wait_info w = {c, op, c->tags[slot].tag, peer, mtag};
    wait_for(req, &w);
    c->tags[slot].seconds += MPI_Wtime() - t0;
}

/* ---------------------------------------------------------------- collectives */

static void allreduce(cb_comm *c, const char *tag, const void *send, void *recv, size_t n,
                      size_t esize, MPI_Datatype dt, cb_comm_op op) {
    uint64_t b = ring(c, n * esize, 2);
    int s = charge(c, tag, b, b);
    MPI_Request q;
    MPI_Iallreduce(in_place(send, recv), recv, count(c, n), dt, mpi_op(op), c->comm, &q);
    block(c, s, &q, "all-reduce", -1, -1);
}

void cb_comm_allreduce(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, cb_comm_op op) {
    allreduce(c, tag, send, recv, n, sizeof(float), MPI_FLOAT, op);
}

void cb_comm_allreduce_f64(cb_comm *c, const char *tag, const double *send, double *recv, size_t n, cb_comm_op op) {
    allreduce(c, tag, send, recv, n, sizeof(double), MPI_DOUBLE, op);
}

void cb_comm_allreduce_i64(cb_comm *c, const char *tag, const int64_t *send, int64_t *recv, size_t n, cb_comm_op op) {
    allreduce(c, tag, send, recv, n, sizeof(int64_t), MPI_INT64_T, op);
}

/* send (p*n) -> recv (n) */
void cb_comm_reduce_scatter(cb_comm *c, const char *tag, const float *send, float *recv, size_t n) {
    uint64_t b = ring(c, (size_t)c->size * n * sizeof(float), 1);
    int s = charge(c, tag, b, b);
    MPI_Request q;
    MPI_Ireduce_scatter_block(send ? (const void *)send : MPI_IN_PLACE, recv, count(c, n), MPI_FLOAT, MPI_SUM, c->comm, &q);
    block(c, s, &q, "reduce-scatter", -1, -1);
}

/* send (n) -> recv (p*n) */
void cb_comm_allgather(cb_comm *c, const char *tag, const float *send, float *recv, size_t n) {
    uint64_t b = ring(c, (size_t)c->size * n * sizeof(float), 1);
    int s = charge(c, tag, b, b);
    MPI_Request q;
    MPI_Iallgather(send ? (const void *)send : MPI_IN_PLACE, count(c, n), MPI_FLOAT, recv, count(c, n), MPI_FLOAT, c->comm, &q);
    block(c, s, &q, "all-gather", -1, -1);
}

static void bcast(cb_comm *c, const char *tag, void *buf, size_t n, size_t esize, MPI_Datatype dt, int root) {
    uint64_t b = ring(c, n * esize, 1);
    int s = charge(c, tag, b, b);
    MPI_Request q;
    MPI_Ibcast(buf, count(c, n), dt, root, c->comm, &q);
    block(c, s, &q, "broadcast", root, -1);
}

void cb_comm_bcast(cb_comm *c, const char *tag, float *buf, size_t n, int root) {
    bcast(c, tag, buf, n, sizeof(float), MPI_FLOAT, root);
}

void cb_comm_bcast_bytes(cb_comm *c, const char *tag, void *buf, size_t nbytes, int root) {
    bcast(c, tag, buf, nbytes, 1, MPI_BYTE, root);
}

/* MPICH 4.0.2 (Debian 12) segfaults in MPI_Reduce(MPI_IN_PLACE, ...) at a
 * non-zero root for messages of about 1000 elements and more
 * (pmodels/mpich#6540). An in-place reduce at such a root therefore copies
 * the root's input into c's scratch buffer (kept, grown on demand) and
 * reduces out of place; under every MPI, so both builds test this path. */
/* *buf (*have elements of esize bytes) holding at least n; contents dropped */
static int reserve_buf(void **buf, size_t *have, size_t n, size_t esize) {
    if (*have >= n) return CB_OK;
    void *b = malloc(esize * n);
    if (!b) return CB_ENOMEM;
    free(*buf);
    *buf = b;
    *have = n;
    return CB_OK;
}

int cb_comm_reserve(cb_comm *c, size_t n) {
    return reserve_buf((void **)&c->scratch, &c->scratch_n, n, sizeof(float));
}

static const float *root_copy(cb_comm *c, const float *x, size_t n) {
    if (cb_comm_reserve(c, n)) cb_comm_fatal_code(CB_ENOMEM, "out of memory for the reduce's send buffer");
    memcpy(c->scratch, x, sizeof(float) * n);
    return c->scratch;
}

void cb_comm_reduce(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, int root) {
    uint64_t b = ring(c, n * sizeof(float), 1);
    int s = charge(c, tag, b, b);
    const void *sb = send ? (const void *)send : recv;
    if (c->rank == root && sb == recv) sb = root == 0 ? MPI_IN_PLACE : (const void *)root_copy(c, recv, n);
    MPI_Request q;
    MPI_Ireduce(sb, recv, count(c, n), MPI_FLOAT, MPI_SUM, root, c->comm, &q);
    block(c, s, &q, "reduce", root, -1);
}

void cb_comm_barrier(cb_comm *c, const char *tag) {
    int s = charge(c, tag, 0, 0);
    MPI_Request q;
    MPI_Ibarrier(c->comm, &q);
    block(c, s, &q, "barrier", -1, -1);
}

void cb_comm_iallreduce(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, cb_comm_op op, cb_comm_req *r) {
    uint64_t b = ring(c, n * sizeof(float), 2);
    req_start(r, c, charge(c, tag, b, b), "all-reduce", -1, 0);
    MPI_Iallreduce(in_place(send, recv), recv, count(c, n), MPI_FLOAT, mpi_op(op), c->comm, &r->req);
}

void cb_comm_ireduce_scatter(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, cb_comm_req *r) {
    uint64_t b = ring(c, (size_t)c->size * n * sizeof(float), 1);
    req_start(r, c, charge(c, tag, b, b), "reduce-scatter", -1, 0);
    MPI_Ireduce_scatter_block(send ? (const void *)send : MPI_IN_PLACE, recv, count(c, n), MPI_FLOAT, MPI_SUM, c->comm, &r->req);
}

void cb_comm_iallgather(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, cb_comm_req *r) {
    uint64_t b = ring(c, (size_t)c->size * n * sizeof(float), 1);
    req_start(r, c, charge(c, tag, b, b), "all-gather", -1, 0);
    MPI_Iallgather(send ? (const void *)send : MPI_IN_PLACE, count(c, n), MPI_FLOAT, recv, count(c, n), MPI_FLOAT, c->comm, &r->req);
}

void cb_comm_ibcast(cb_comm *c, const char *tag, float *buf, size_t n, int root, cb_comm_req *r) {
    uint64_t b = ring(c, n * sizeof(float), 1);
    req_start(r, c, charge(c, tag, b, b), "broadcast", root, 0);
    MPI_Ibcast(buf, count(c, n), MPI_FLOAT, root, c->comm, &r->req);
}

/* n - counts[rank]: the uneven-ring volume (comm.h) */
static uint64_t ringv(const cb_comm *c, const int *counts, size_t esize) {
    uint64_t n = 0;
    for (int i = 0; i < c->size; i++) n += (uint64_t)counts[i];
    return (n - (uint64_t)counts[c->rank]) * esize;
}

void cb_comm_ireduce_scatterv(cb_comm *c, const char *tag, const float *send, float *recv, const int *counts, cb_comm_req *r) {
    uint64_t b = ringv(c, counts, sizeof(float));
    req_start(r, c, charge(c, tag, b, b), "reduce-scatter", -1, 0);
    MPI_Ireduce_scatter(send ? (const void *)send : MPI_IN_PLACE, recv, counts, MPI_FLOAT, MPI_SUM, c->comm, &r->req);
}

/* inout[i] = bf16(in[i] + inout[i]), the sum in fp32 */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = cb_bf16_round(cb_bf16_widen(a[i]) + cb_bf16_widen(b[i]));
}

static MPI_Op bf16_op(void) {
    if (g_bf16_sum == MPI_OP_NULL) MPI_Op_create(bf16_sum, 1, &g_bf16_sum);
    return g_bf16_sum;
}

void cb_comm_iallreduce_bf16(cb_comm *c, const char *tag, uint16_t *buf, size_t n, cb_comm_req *r) {
    uint64_t b = ring(c, n * sizeof(uint16_t), 2);
    req_start(r, c, charge(c, tag, b, b), "all-reduce", -1, 0);
    MPI_Iallreduce(MPI_IN_PLACE, buf, count(c, n), MPI_UINT16_T, bf16_op(), c->comm, &r->req);
}

void cb_comm_ireduce_scatterv_bf16(cb_comm *c, const char *tag, uint16_t *buf, const int *counts, cb_comm_req *r) {
    uint64_t b = ringv(c, counts, sizeof(uint16_t));
    req_start(r, c, charge(c, tag, b, b), "reduce-scatter", -1, 0);
    MPI_Ireduce_scatter(MPI_IN_PLACE, buf, counts, MPI_UINT16_T, bf16_op(), c->comm, &r->req);
}

int cb_comm_reserve_wire(cb_comm *c, size_t n) {
    return reserve_buf((void **)&c->wire, &c->wire_n, n, sizeof(uint16_t));
}

/* h (n) = bf16(x (n)) */
static void wire_round(uint16_t *h, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) h[i] = cb_bf16_round(x[i]);
}

static void wire_widen(const uint16_t *h, float *x, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = cb_bf16_widen(h[i]);
}

static uint16_t *wire(cb_comm *c, size_t n) {
    if (cb_comm_reserve_wire(c, n)) cb_comm_fatal_code(CB_ENOMEM, "out of memory for the bf16 staging of a collective");
    return c->wire;
}

/* r, just started, widens h (n) into out when waited for */
static void widen_at_wait(cb_comm_req *r, const uint16_t *h, float *out, size_t n) {
    r->wire = h;
    r->out = out;
    r->nout = n;
}

void cb_comm_allreduce_bf16f(cb_comm *c, const char *tag, float *x, size_t n) {
    uint16_t *h = wire(c, n);
    cb_comm_req r;
    wire_round(h, x, n);
    uint64_t b = ring(c, n * sizeof(uint16_t), 2);
    req_start(&r, c, charge(c, tag, b, b), "all-reduce", -1, 0);
    MPI_Iallreduce(MPI_IN_PLACE, h, count(c, n), MPI_UINT16_T, bf16_op(), c->comm, &r.req);
    widen_at_wait(&r, h, x, n);
    cb_comm_wait(&r);
}

/* out of place in the staging (send, then the root's result): no
 * in-place reduce at a non-zero root (cb_comm_reserve) */
void cb_comm_reduce_bf16f(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, int root) {
    uint16_t *h = wire(c, 2 * n);
    cb_comm_req r;
    wire_round(h, send ? send : recv, n);
    uint64_t b = ring(c, n * sizeof(uint16_t), 1);
    req_start(&r, c, charge(c, tag, b, b), "reduce", root, 0);
    MPI_Ireduce(h, h + n, count(c, n), MPI_UINT16_T, bf16_op(), root, c->comm, &r.req);
    if (c->rank == root) widen_at_wait(&r, h + n, recv, n);
    cb_comm_wait(&r);
}

void cb_comm_ireduce_scatter_bf16f(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, uint16_t *stage, cb_comm_req *r) {
    size_t all = (size_t)c->size * n;
    wire_round(stage, send ? send : recv, all);
    uint64_t b = ring(c, all * sizeof(uint16_t), 1);
    req_start(r, c, charge(c, tag, b, b), "reduce-scatter", -1, 0);
    MPI_Ireduce_scatter_block(MPI_IN_PLACE, stage, count(c, n), MPI_UINT16_T, bf16_op(), c->comm, &r->req);
    widen_at_wait(r, stage, recv, n);
}

void cb_comm_reduce_scatter_bf16f(cb_comm *c, const char *tag, const float *send, float *recv, size_t n) {
    cb_comm_req r;
    cb_comm_ireduce_scatter_bf16f(c, tag, send, recv, n, wire(c, (size_t)c->size * n), &r);
    cb_comm_wait(&r);
}

void cb_comm_iallgather_bf16f(cb_comm *c, const char *tag, const float *send, float *recv, size_t n, uint16_t *stage, cb_comm_req *r) {
    size_t all = (size_t)c->size * n, mine = (size_t)c->rank * n;
    wire_round(stage + mine, send ? send : recv + mine, n);
    uint64_t b = ring(c, all * sizeof(uint16_t), 1);
    req_start(r, c, charge(c, tag, b, b), "all-gather", -1, 0);
    MPI_Iallgather(MPI_IN_PLACE, count(c, n), MPI_UINT16_T, stage, count(c, n), MPI_UINT16_T, c->comm, &r->req);
    widen_at_wait(r, stage, recv, all);
}

void cb_comm_allgather_bf16f(cb_comm *c, const char *tag, const float *send, float *recv, size_t n) {
    cb_comm_req r;
    cb_comm_iallgather_bf16f(c, tag, send, recv, n, wire(c, (size_t)c->size * n), &r);
    cb_comm_wait(&r);
}

void cb_comm_ibcast_bf16f(cb_comm *c, const char *tag, float *buf, size_t n, int root, uint16_t *stage, cb_comm_req *r) {
    if (c->rank == root) wire_round(stage, buf, n);
    uint64_t b = ring(c, n * sizeof(uint16_t), 1);
    req_start(r, c, charge(c, tag, b, b), "broadcast", root, 0);
    MPI_Ibcast(stage, count(c, n), MPI_UINT16_T, root, c->comm, &r->req);
    widen_at_wait(r, stage, buf, n);
}

void cb_comm_allgatherv(cb_comm *c, const char *tag, const float *send, float *recv, const int *counts, const int *displs) {
    uint64_t b = ringv(c, counts, sizeof(float));
    int s = charge(c, tag, b, b);
    MPI_Request q;
    const void *sb = send ? (const void *)send : MPI_IN_PLACE;
    MPI_Iallgatherv(sb, counts[c->rank], MPI_FLOAT, recv, counts, displs, MPI_FLOAT, c->comm, &q);
    block(c, s, &q, "all-gather", -1, -1);
}

void cb_comm_iallgatherv(cb_comm *c, const char *tag, const float *send, float *recv, const int *counts, const int *displs, cb_comm_req *r) {
    uint64_t b = ringv(c, counts, sizeof(float));
    req_start(r, c, charge(c, tag, b, b), "all-gather", -1, 0);
    const void *sb = send ? (const void *)send : MPI_IN_PLACE;
    MPI_Iallgatherv(sb, counts[c->rank], MPI_FLOAT, recv, counts, displs, MPI_FLOAT, c->comm, &r->req);
}

void cb_comm_gatherv(cb_comm *c, const char *tag, const float *send, float *recv, const int *counts, const int *displs, int root) {
    uint64_t mine = (uint64_t)counts[c->rank] * sizeof(float);
    uint64_t rest = c->rank == root ? ringv(c, counts, sizeof(float)) : 0;
    int s = charge(c, tag, c->rank == root ? 0 : mine, rest);
    MPI_Request q;
    const void *sb = send;
    if (c->rank == root && send == recv + displs[root]) sb = MPI_IN_PLACE;
    MPI_Igatherv(sb, counts[c->rank], MPI_FLOAT, recv, counts, displs, MPI_FLOAT, root, c->comm, &q);
    block(c, s, &q, "gather", root, -1);
}

void cb_comm_gather_bytes(cb_comm *c, const char *tag, const void *send, void *recv, size_t nbytes, int root) {
    int at_root = c->rank == root;
    int s = charge(c, tag, at_root ? 0 : nbytes, at_root ? (uint64_t)(c->size - 1) * nbytes : 0);
    MPI_Request q;
    MPI_Igather(send, count(c, nbytes), MPI_BYTE, recv, count(c, nbytes), MPI_BYTE, root, c->comm, &q);
    block(c, s, &q, "gather", root, -1);
}

void cb_comm_allgather_i32(cb_comm *c, const char *tag, const int32_t *send, int32_t *recv, size_t n) {
    uint64_t b = ring(c, (size_t)c->size * n * sizeof(int32_t), 1);
    int s = charge(c, tag, b, b);
    MPI_Request q;
    MPI_Iallgather(send, count(c, n), MPI_INT32_T, recv, count(c, n), MPI_INT32_T, c->comm, &q);
    block(c, s, &q, "all-gather", -1, -1);
}

/* ---------------------------------------------------------------- agreement */

/* The agreement's one element (an int, or an MPI_2INT pair), counted under
 * the control tag like every other use of MPI. */
static void control_allreduce(cb_comm *c, const void *send, void *recv, MPI_Datatype dt, size_t esize, MPI_Op op) {
    uint64_t b = ring(c, esize, 2);
    int s = charge(c, CB_COMM_CONTROL, b, b);
    MPI_Request q;
    MPI_Iallreduce(send, recv, 1, dt, op, c->comm, &q);
    block(c, s, &q, "all-reduce", -1, -1);
}

int cb_comm_agree_error(cb_comm *c, int local_code) {
    int code = local_code;
    control_allreduce(c, MPI_IN_PLACE, &code, MPI_INT, sizeof code, MPI_MAX);
    return code;
}

int cb_comm_agree_err(cb_comm *c, cb_err *e) {
    struct { int code, rank; } mine = { e->code, c->rank }, top;
    control_allreduce(c, &mine, &top, MPI_2INT, sizeof mine, MPI_MAXLOC);
    if (top.code == CB_OK) return CB_OK;
    bcast(c, CB_COMM_CONTROL, e->msg, sizeof e->msg, 1, MPI_CHAR, top.rank);
    e->msg[sizeof e->msg - 1] = '\0';
    e->code = top.code;
    return top.code;
}

/* ---------------------------------------------------------------- point to point */

void cb_comm_send(cb_comm *c, const char *tag, const float *buf, size_t n, int dest, int mtag) {
    int s = charge(c, tag, n * sizeof(float), 0);
    MPI_Request q;
    MPI_Isend(buf, count(c, n), MPI_FLOAT, dest, mtag, c->comm, &q);
    block(c, s, &q, "send", dest, mtag);
}

void cb_comm_recv(cb_comm *c, const char *tag, float *buf, size_t n, int src, int mtag) {
    int s = charge(c, tag, 0, n * sizeof(float));
    MPI_Request q;
    MPI_Irecv(buf, count(c, n), MPI_FLOAT, src, mtag, c->comm, &q);
    block(c, s, &q, "receive", src, mtag);
}

void cb_comm_isend(cb_comm *c, const char *tag, const float *buf, size_t n, int dest, int mtag, cb_comm_req *r) {
    req_start(r, c, charge(c, tag, n * sizeof(float), 0), "send", dest, mtag);
    MPI_Isend(buf, count(c, n), MPI_FLOAT, dest, mtag, c->comm, &r->req);
}

void cb_comm_irecv(cb_comm *c, const char *tag, float *buf, size_t n, int src, int mtag, cb_comm_req *r) {
    req_start(r, c, charge(c, tag, 0, n * sizeof(float)), "receive", src, mtag);
    MPI_Irecv(buf, count(c, n), MPI_FLOAT, src, mtag, c->comm, &r->req);
}

int cb_comm_test(cb_comm_req *r) {
    int done = 0;
    double t0 = MPI_Wtime();
    MPI_Test(&r->req, &done, MPI_STATUS_IGNORE);
    if (r->c) r->c->tags[r->slot].seconds += MPI_Wtime() - t0;
    return done;
}

void cb_comm_wait(cb_comm_req *r) {
    if (!r->c) { /* already waited for, or never charged */
        MPI_Wait(&r->req, MPI_STATUS_IGNORE);
        return;
    }
    block(r->c, r->slot, &r->req, r->op, r->peer, r->mtag);
    r->c = NULL;
    if (r->wire) wire_widen(r->wire, r->out, r->nout);
    r->wire = NULL;
}

/* Each request waited in turn so each is charged its own (marginal) time. */
void cb_comm_waitall(cb_comm_req *r, int n) {
    for (int i = 0; i < n; i++) cb_comm_wait(&r[i]);
}
