/* Recommendation layers under every layout through the whole-tensor space
 * (rec.h). Data movement only: the arithmetic is the kernel table's. */
#include "layout/rec.h"

#include <string.h>

#include "comm/grid.h"

size_t cb_rec_scratch_floats(int N, int H) { return 3 * (size_t)N * H + 4 * (size_t)N + 2 * H + 8; }

static void tp_sum(cb_layout *L, float *x, size_t n, const char *tag) {
    if (L->grid && L->tp > 1) cb_comm_allreduce(&L->grid->tpg, tag, NULL, x, n, CB_COMM_SUM);
}

/* full (N x H) on every rank from the local pieces of a value */
static void act_full(cb_layout *L, const float *local, int N, int H, int parity, float *full,
                     const char *tag) {
    cb_shard s = L->ops->act_shard(L, L->tp_rank, N, H, parity, 1);
    memset(full, 0, sizeof(float) * N * H);
    if (s.owner) cb_shard_place(&s, local, full);
    tp_sum(L, full, (size_t)N * H, tag);
}

static void act_local(cb_layout *L, const float *full, int N, int H, int parity, float *local) {
    cb_shard s = L->ops->act_shard(L, L->tp_rank, N, H, parity, 1);
    cb_shard_extract(&s, full, local);
}

void cb_rec_reparity(cb_layout *L, const float *x, int N, int H, int pin, int pout, float *y,
                     float *scratch) {
    act_full(L, x, N, H, pin, scratch, "reparity");
    act_local(L, scratch, N, H, pout, y);
}

/* The columns [col0, col0 + n) of all N rows, as a shard of N x H. */
static cb_shard cols(int N, int H, int64_t col0, int64_t n) {
    return (cb_shard){.R = N, .C = H, .rows_pad = N, .row0 = 0, .nrows = N, .nseg = 1,
                      .col0 = {col0}, .ncol = {n}, .owner = 1};
}

void cb_rec_lookup_forward(cb_layout *L, const cb_embed *e, const int *ids, int N, float *y,
                           float *scratch) {
    cb_shard t = L->ops->shard(L, L->tp_rank, CB_P_EMBED, e->V, e->C, 1, 0);
    float *full = scratch, *part = scratch + (size_t)N * e->C;
    int w = (int)t.ncol[0];
    L->k->embedding_rows(L->k, part, ids, e->wte, (int)t.row0, (int)t.nrows, N, w);
    memset(full, 0, sizeof(float) * N * e->C);
    cb_shard c = cols(N, e->C, t.col0[0], w);
    cb_shard_place(&c, part, full); /* each (row, column) comes from the one shard holding it */
    tp_sum(L, full, (size_t)N * e->C, "lookup.fwd");
    act_local(L, full, N, e->C, 0, y);
}

void cb_rec_lookup_backward(cb_layout *L, cb_embed *e, const int *ids, int N, const float *dy,
                            float *scratch) {
    cb_shard t = L->ops->shard(L, L->tp_rank, CB_P_EMBED, e->V, e->C, 1, 0);
    float *full = scratch, *part = scratch + (size_t)N * e->C;
    act_full(L, dy, N, e->C, 0, full, "lookup.bwd");
    cb_shard c = cols(N, e->C, t.col0[0], t.ncol[0]);
    cb_shard_extract(&c, full, part);
    L->k->embedding_rows_backward(L->k, e->dwte, part, ids, (int)t.row0, (int)t.nrows, N,
                                  (int)t.ncol[0]);
}

void cb_rec_concat_forward(cb_layout *L, const float *a, int Ha, const float *b, int Hb,
                           const int *par, int N, float *y, float *scratch) {
    int H = Ha + Hb;
    float *fa = scratch, *fb = fa + (size_t)N * Ha, *fy = fb + (size_t)N * Hb;
    act_full(L, a, N, Ha, par[0], fa, "concat.fwd");
    act_full(L, b, N, Hb, par[1], fb, "concat.fwd");
    cb_shard sa = cols(N, H, 0, Ha), sb = cols(N, H, Ha, Hb);
    cb_shard_place(&sa, fa, fy);
    cb_shard_place(&sb, fb, fy);
    act_local(L, fy, N, H, par[2], y);
}

void cb_rec_concat_backward(cb_layout *L, const float *dy, int Ha, int Hb, const int *par, int N,
                            float *da, float *db, float *scratch) {
    int H = Ha + Hb;
    float *fy = scratch, *fa = fy + (size_t)N * H, *fb = fa + (size_t)N * Ha;
    act_full(L, dy, N, H, par[2], fy, "concat.bwd");
    cb_shard sa = cols(N, H, 0, Ha), sb = cols(N, H, Ha, Hb);
    cb_shard_extract(&sa, fy, fa);
    cb_shard_extract(&sb, fy, fb);
    act_local(L, fa, N, Ha, par[0], da);
    act_local(L, fb, N, Hb, par[1], db);
}

float cb_rec_logistic_forward(cb_layout *L, const cb_norm *w, const float *x, const int *labels,
                              float *kept, int N) {
    cb_shard s = L->ops->act_shard(L, L->tp_rank, N, w->C, w->parity, 1);
    float *z = kept, *losses = kept + N;
    memset(z, 0, sizeof(float) * N);
    if (s.owner) /* this rank's rows: the partial dot over its features */
        L->k->matmul_forward(L->k, z + s.row0, x, w->w, NULL, (int)s.nrows, (int)s.ncol[0], 1);
    tp_sum(L, z, (size_t)N, "logistic.fwd");
    if (!labels) return 0.0f;
    L->k->logistic_forward(L->k, losses, z, labels, N);
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += losses[i];
    return (float)(sum / N);
}

void cb_rec_logistic_backward(cb_layout *L, cb_norm *w, const float *x, const int *labels,
                              const float *kept, float dloss, float *dx, int N, float *scratch) {
    cb_shard s = L->ops->act_shard(L, L->tp_rank, N, w->C, w->parity, 1);
    cb_shard ws = L->ops->shard(L, L->tp_rank, CB_P_NORM, 1, w->C, 1, w->parity);
    float *dz = scratch, *dwf = scratch + N;
    int rows = (int)s.nrows, nc = (int)s.ncol[0];
    L->k->logistic_backward(L->k, dz, kept, labels, dloss / N, N);
    /* dx (rows x nc) = dz (rows x 1) w (1 x nc): every copy of the rows */
    L->k->matmul_forward(L->k, dx, dz + s.row0, w->w, NULL, rows, 1, nc);
    /* dw: each owned element's share once, summed over the group, then this
     * rank's columns of w (its copies replicated alike) */
    memset(dwf, 0, sizeof(float) * w->C);
    if (s.owner)
        L->k->matmul_backward(L->k, NULL, dwf + s.col0[0], NULL, dz + s.row0, x, w->w, rows, nc, 1,
                              1);
    tp_sum(L, dwf, (size_t)w->C, "logistic.bwd");
    float *mine = dwf + w->C;
    cb_shard_extract(&ws, dwf, mine);
    L->k->residual_forward(L->k, w->dw, w->dw, mine, cb_shard_numel(&ws));
}
