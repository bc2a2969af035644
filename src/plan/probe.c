/* The calibration probe of this machine: cubist's own CPU kernels, timed
 * on the calling thread's OpenMP team, and MPI collectives on the world.
 * Each figure is the best of 15 repetitions of at least 5 ms (best, not
 * mean, and short windows: on a shared machine some window runs alone, and
 * what other processes steal is not a property of the kernel). One thread
 * is timed in its own CPU time, which is its wall time on an idle core and
 * leaves out the slices other processes take; a team of threads in wall
 * time (a thread that waits for a descheduled one spins, and would count). */
#include <mpi.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "plan/plan.h"

#define MIN_S 0.005
#define REPS 15

typedef void (*body_fn)(void *arg);

static double now_s(void) {
    struct timespec ts;
    if (omp_get_max_threads() > 1) return omp_get_wtime();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double best_of(body_fn f, void *arg) {
    double best = 1e30;
    f(arg); /* touch the buffers */
    for (int r = 0; r < REPS; r++) {
        int it = 0;
        double t0 = now_s(), t;
        do {
            f(arg);
            it++;
            t = now_s() - t0;
        } while (t < MIN_S);
        if (t / it < best) best = t / it;
    }
    return best;
}

typedef struct gemm_arg {
    int m, k, n;
    float *x, *w, *y, *dx, *dw;
} gemm_arg;

static void gemm_body(void *p) {
    gemm_arg *a = p;
    const cb_kernels *k = cb_kernels_cpu();
    k->matmul_forward(k, a->y, a->x, a->w, NULL, a->m, a->k, a->n);
    k->matmul_backward(k, a->dx, a->dw, NULL, a->y, a->x, a->w, a->m, a->k, a->n);
}

static float *filled(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; p && i < n; i++) p[i] = (float)((i * 37) % 101) * 0.01f - 0.5f;
    return p;
}

static double probe_gemm(void *ctx, int m, int k, int n) {
    (void)ctx;
    gemm_arg a = {m, k, n, filled((size_t)m * k), filled((size_t)k * n), filled((size_t)m * n),
                  filled((size_t)m * k), filled((size_t)k * n)};
    double t = a.x && a.w && a.y && a.dx && a.dw ? best_of(gemm_body, &a) : 1e30;
    free(a.x), free(a.w), free(a.y), free(a.dx), free(a.dw);
    return t;
}

typedef struct mem_arg {
    int N, C;
    float *x, *y, *h, *g, *dx, *dh, *w, *b, *dw, *db, *mean, *rstd;
} mem_arg;

/* what a block runs besides GEMMs and attention: two LayerNorms, GELU over
 * 4C, two residuals, forward and backward */
static void mem_body(void *p) {
    mem_arg *a = p;
    const cb_kernels *k = cb_kernels_cpu();
    size_t nc = (size_t)a->N * a->C;
    for (int r = 0; r < 2; r++) {
        k->layernorm_forward(k, a->y, a->mean, a->rstd, a->x, a->w, a->b, a->N, a->C);
        k->residual_forward(k, a->y, a->y, a->x, nc);
        k->layernorm_backward(k, a->dx, a->dw, a->db, a->y, a->x, a->w, a->mean, a->rstd, a->N, a->C);
    }
    k->gelu_forward(k, a->g, a->h, 4 * nc);
    k->gelu_backward(k, a->dh, a->h, a->g, 4 * nc);
}

static double probe_memory(void *ctx, int N, int C) {
    (void)ctx;
    size_t nc = (size_t)N * C;
    mem_arg a = {N, C, filled(nc), filled(nc), filled(4 * nc), filled(4 * nc), filled(nc),
                 filled(4 * nc), filled(C), filled(C), filled(C), filled(C), filled(N), filled(N)};
    float *all[] = {a.x, a.y, a.h, a.g, a.dx, a.dh, a.w, a.b, a.dw, a.db, a.mean, a.rstd};
    int ok = 1;
    for (int i = 0; i < 12; i++) ok &= all[i] != NULL;
    double t = ok ? best_of(mem_body, &a) : 1e30;
    for (int i = 0; i < 12; i++) free(all[i]);
    return t;
}

typedef struct att_arg {
    int B, T, C, NH;
    float *qkv, *out, *att, *dqkv, *sc;
} att_arg;

static void att_body(void *p) {
    att_arg *a = p;
    const cb_kernels *k = cb_kernels_cpu();
    cb_attn d = cb_attn_self(a->B, a->T, a->C, a->NH, 1, NULL);
    k->attention_forward(k, &d, a->out, a->att, a->qkv, a->qkv);
    k->attention_backward(k, &d, a->dqkv, a->dqkv, a->sc, a->out, a->qkv, a->qkv, a->att);
}

static double probe_attention(void *ctx, int B, int T, int C, int NH) {
    (void)ctx;
    size_t btc = (size_t)B * T * C, att = (size_t)B * NH * T * T;
    att_arg a = {B, T, C, NH, filled(3 * btc), filled(btc), filled(att), filled(3 * btc), filled(att)};
    double t = a.qkv && a.out && a.att && a.dqkv && a.sc ? best_of(att_body, &a) : 1e30;
    free(a.qkv), free(a.out), free(a.att), free(a.dqkv), free(a.sc);
    return t;
}

typedef struct coll_arg {
    const char *op;
    int n, p, rank;
    float *a, *b;
} coll_arg;

static void coll_body(void *v) {
    coll_arg *c = v;
    MPI_Comm w = MPI_COMM_WORLD;
    int blk = c->n / c->p;
    if (!strcmp(c->op, "allreduce")) MPI_Allreduce(c->a, c->b, c->n, MPI_FLOAT, MPI_SUM, w);
    else if (!strcmp(c->op, "allgather")) MPI_Allgather(c->a, blk, MPI_FLOAT, c->b, blk, MPI_FLOAT, w);
    else if (!strcmp(c->op, "reduce_scatter")) MPI_Reduce_scatter_block(c->a, c->b, blk, MPI_FLOAT, MPI_SUM, w);
    else if (!strcmp(c->op, "bcast")) MPI_Bcast(c->a, c->n, MPI_FLOAT, 0, w);
    else {
        int peer = c->rank ^ 1;
        MPI_Request r[2];
        if (peer >= c->p) return;
        MPI_Irecv(c->b, c->n, MPI_FLOAT, peer, 7, w, &r[0]);
        MPI_Isend(c->a, c->n, MPI_FLOAT, peer, 7, w, &r[1]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    }
}

/* Every rank runs the same repetitions: the count is rank 0's, broadcast,
 * so that no rank waits in a collective the others have left. */
static double probe_coll(void *ctx, const char *op, int n) {
    (void)ctx;
    coll_arg c = {op, n, 1, 0, filled((size_t)n), filled((size_t)n)};
    MPI_Comm_size(MPI_COMM_WORLD, &c.p);
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    c.n = n / c.p * c.p;
    int it = 1;
    double best = 1e30;
    coll_body(&c);
    for (int r = 0; r < REPS; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < it; i++) coll_body(&c);
        double t = (MPI_Wtime() - t0) / it;
        MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (t < best) best = t;
        int more = t * it < MIN_S ? (int)(MIN_S / t) + 1 : it;
        MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
        it = more;
    }
    free(c.a), free(c.b);
    return best;
}

void cb_plan_probe_cpu(cb_plan_probe *pr) {
    int init = 0, size = 1;
    MPI_Initialized(&init);
    if (init) MPI_Comm_size(MPI_COMM_WORLD, &size);
    *pr = (cb_plan_probe){probe_gemm, probe_memory, probe_attention, probe_coll, NULL, size};
}
