/* What every layout shares: shard arithmetic and the gather of a full
 * tensor for checkpoints. */
#include "layout/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/grid.h"

size_t cb_shard_cols(const cb_shard *s) {
    size_t n = 0;
    for (int i = 0; i < s->nseg; i++) n += (size_t)s->ncol[i];
    return n;
}

size_t cb_shard_numel(const cb_shard *s) { return (size_t)s->nrows * cb_shard_cols(s); }

/* Calls fn(local_offset, full_offset, n) for each contiguous run of the
 * shard that lies inside the true rows. */
#define FOR_RUNS(s, body)                                                                          \
    do {                                                                                           \
        size_t lo_ = 0, w_ = cb_shard_cols(s);                                                     \
        for (int64_t r_ = 0; r_ < (s)->nrows; r_++) {                                              \
            int64_t row_ = (s)->row0 + r_;                                                         \
            size_t lc_ = 0;                                                                        \
            for (int g_ = 0; g_ < (s)->nseg; g_++) {                                               \
                size_t loc = lo_ + lc_, ful = (size_t)row_ * (s)->C + (s)->col0[g_],               \
                       n = (size_t)(s)->ncol[g_];                                                  \
                int pad = row_ >= (s)->R;                                                          \
                body;                                                                              \
                lc_ += n;                                                                          \
            }                                                                                      \
            lo_ += w_;                                                                             \
        }                                                                                          \
    } while (0)

void cb_shard_extract(const cb_shard *s, const float *full, float *local) {
    FOR_RUNS(s, {
        if (pad) memset(local + loc, 0, n * sizeof(float));
        else memcpy(local + loc, full + ful, n * sizeof(float));
    });
}

void cb_shard_place(const cb_shard *s, const float *local, float *full) {
    FOR_RUNS(s, {
        if (!pad) memcpy(full + ful, local + loc, n * sizeof(float));
    });
}

/* Elements e0 .. e0 + n of the whole tensor (C columns) */
static void fill_run(const cb_kernels *k, float *o, size_t n, uint64_t key, uint64_t e0, float sd,
                     float value, int sinusoid, int64_t C) {
    if (sinusoid) k->fill_sinusoid(k, o, n, e0, (int)C);
    else k->fill_normal(k, o, n, key, e0, sd, value);
}

/* Runs of the shard through the CPU kernel (initial values are made on the
 * host); a whole unpadded tensor is one run. */
void cb_shard_generate(const cb_shard *s, float value, uint64_t key, float sd, int sinusoid,
                       float *local) {
    const cb_kernels *k = cb_kernels_cpu();
    size_t w = cb_shard_cols(s);
    if (s->nseg == 1 && s->col0[0] == 0 && s->ncol[0] == s->C && s->row0 + s->nrows <= s->R) {
        fill_run(k, local, (size_t)s->nrows * w, key, (uint64_t)s->row0 * (uint64_t)s->C, sd, value,
                 sinusoid, s->C);
        return;
    }
    for (int64_t r = 0; r < s->nrows; r++) {
        int64_t row = s->row0 + r;
        float *o = local + (size_t)r * w;
        for (int g = 0; g < s->nseg; g++) {
            uint64_t e0 = (uint64_t)row * (uint64_t)s->C + (uint64_t)s->col0[g];
            if (row >= s->R) memset(o, 0, sizeof(float) * (size_t)s->ncol[g]);
            else fill_run(k, o, (size_t)s->ncol[g], key, e0, sd, value, sinusoid, s->C);
            o += s->ncol[g];
        }
    }
}

int cb_layout_fix_width(int C, int m, int NH) {
    int c = C < 1 ? 1 : C;
    while (c % m || (NH > 0 && c % NH)) c++;
    return c;
}

int cb_layout_fix_heads(int C, int m, int NH) {
    int best = 0;
    for (int h = m; h <= C; h += m)
        if (C % h == 0 && (!best || abs(h - NH) < abs(best - NH))) best = h;
    return best;
}

int cb_layout_check_widths(int C, int NH, int mw, int mh, const char *who, const char *why,
                           const char *alt, cb_err *e) {
    int wbad = C % mw != 0, hbad = NH > 0 && NH % mh != 0;
    int h = hbad ? cb_layout_fix_heads(C, mh, NH) : NH;
    char or_[64] = "";
    if (alt) snprintf(or_, sizeof or_, ", or %s", alt);
    if (!wbad && !hbad) return CB_OK;
    if (!wbad && h)
        return cb_fail(e, CB_EINPUT,
                       "%s needs heads divisible by %d (each rank holds whole heads); got heads "
                       "%d: use heads %d%s",
                       who, mh, NH, h, or_);
    if (!hbad)
        return cb_fail(e, CB_EINPUT,
                       "%s needs d_model (the width) divisible by %d (%s); got d_model %d: use "
                       "d_model %d%s",
                       who, mw, why, C, cb_layout_fix_width(C, mw, NH), or_);
    h = (NH + mh - 1) / mh * mh;
    return cb_fail(e, CB_EINPUT,
                   "%s needs heads divisible by %d and d_model (the width) divisible by %d; got "
                   "heads %d, d_model %d: use heads %d and d_model %d%s",
                   who, mh, mw, NH, C, h, cb_layout_fix_width(C, mw, h), or_);
}

void cb_layout_note_pad(cb_layout *L, int64_t V, int64_t Vp, const char *what) {
    if (Vp == V || L->noted_pad) return;
    L->noted_pad = 1;
    if (L->grid && L->grid->world_rank != 0) return;
    fprintf(stderr,
            "cubist: note: --tp-mode %s pads the vocabulary %lld to %lld (a multiple of %s); the "
            "%lld padding row%s never used\n",
            L->ops->name, (long long)V, (long long)Vp, what, (long long)(Vp - V),
            Vp - V > 1 ? "s are" : " is");
}

void cb_layout_progress(cb_comm_req *const *pending, int n) {
    for (int i = 0; i < n; i++)
        if (pending[i]) cb_comm_test(pending[i]);
}

void cb_layout_dw_overlapped(cb_layout *L, float *dw, const float *dout, const float *inp, int N,
                             int IC, int OC, cb_comm_req *const *pending, int npending, int acc) {
    int k = L->overlap_chunks > 1 ? L->overlap_chunks : 1;
    for (int c = 0; c < k; c++) {
        int r0 = (int)((int64_t)IC * c / k), r1 = (int)((int64_t)IC * (c + 1) / k);
        if (r1 > r0) L->k->matmul_backward_dw_rows(L->k, dw, dout, inp, N, IC, OC, r0, r1, acc);
        if (c + 1 < k) cb_layout_progress(pending, npending);
    }
}

void cb_layout_grad_put(cb_layout *L, float *g, const float *x, size_t n, int overwrite) {
    if (overwrite) memcpy(g, x, sizeof(float) * n);
    else L->k->residual_forward(L->k, g, g, x, n);
}

void cb_layout_sum(cb_layout *L, cb_comm *c, const char *tag, float *x, size_t n) {
    if (L->wire_bf16) cb_comm_allreduce_bf16f(c, tag, x, n);
    else cb_comm_allreduce(c, tag, NULL, x, n, CB_COMM_SUM);
}

void cb_layout_reduce(cb_layout *L, cb_comm *c, const char *tag, const float *send, float *recv,
                      size_t n, int root) {
    if (L->wire_bf16) cb_comm_reduce_bf16f(c, tag, send, recv, n, root);
    else cb_comm_reduce(c, tag, send, recv, n, root);
}

void cb_layout_reduce_scatter(cb_layout *L, cb_comm *c, const char *tag, const float *send,
                              float *recv, size_t n) {
    if (L->wire_bf16) cb_comm_reduce_scatter_bf16f(c, tag, send, recv, n);
    else cb_comm_reduce_scatter(c, tag, send, recv, n);
}

void cb_layout_allgather(cb_layout *L, cb_comm *c, const char *tag, const float *send,
                         float *recv, size_t n) {
    if (L->wire_bf16) cb_comm_allgather_bf16f(c, tag, send, recv, n);
    else cb_comm_allgather(c, tag, send, recv, n);
}

void cb_layout_nothing_kept(cb_layout *L, const float *x) {
    (void)L;
    (void)x;
}

int cb_layout_create(cb_grid *g, cb_layout **out, cb_err *e) {
    if (!g || g->tp == 1) {
        *out = cb_layout_serial();
        return *out ? CB_OK : cb_fail(e, CB_ENOMEM, "out of memory");
    }
    switch (g->mode) {
    case CB_TP_1D: return cb_layout_1d(g, out, e);
    case CB_TP_2D: return cb_layout_2d(g, out, e);
    case CB_TP_3D: return cb_layout_3d(g, out, e);
    }
    return cb_fail(e, CB_EINTERNAL, "unknown tensor-parallel mode %d", (int)g->mode);
}

void cb_layout_free(cb_layout *L) {
    if (!L) return;
    cb_layout_workspace_free(L);
    if (L->ops->free) L->ops->free(L);
}

cb_shard cb_layout_shard(const cb_layout *L, int tp_rank, cb_param_kind kind, int64_t R,
                         int64_t C, int parts, int parity) {
    return L->ops->shard(L, tp_rank, kind, R, C, parts, parity);
}

void cb_layout_gather(cb_layout *L, cb_param_kind kind, int64_t R, int64_t C, int parts,
                      int parity, const float *local, float *full) {
    if (!L->grid || L->tp == 1) {
        cb_shard s = cb_layout_shard(L, 0, kind, R, C, parts, parity);
        cb_shard_place(&s, local, full);
        return;
    }
    cb_comm *tp = &L->grid->tpg;
    int P = L->tp;
    cb_shard mine = cb_layout_shard(L, L->tp_rank, kind, R, C, parts, parity);
    size_t n = cb_shard_numel(&mine);
    if (L->tp_rank != 0) {
        cb_comm_send(tp, "ckpt", local, n, 0, 77);
        return;
    }
    cb_shard_place(&mine, local, full);
    for (int r = 1; r < P; r++) {
        cb_shard s = cb_layout_shard(L, r, kind, R, C, parts, parity);
        size_t m = cb_shard_numel(&s);
        float *buf = malloc(sizeof(float) * (m ? m : 1));
        if (!buf) cb_layout_oom("gathering a checkpoint tensor");
        cb_comm_recv(tp, "ckpt", buf, m, r, 77);
        cb_shard_place(&s, buf, full);
        free(buf);
    }
}

/* ---------------------------------------------------------------- workspace */

_Noreturn void cb_layout_oom(const char *what) {
    char m[160];
    snprintf(m, sizeof m, "out of memory for %s; give the job more memory or spread the model "
                          "(--tp, --pp, --recompute block)", what);
    cb_comm_fatal_code(CB_ENOMEM, m);
}

void cb_layout_reserve(cb_layout *L, int slot, size_t bytes) {
    if (bytes > L->ws.need[slot]) L->ws.need[slot] = bytes;
}

/* Slot s grown to bytes (contents not kept); 0 when out of memory. */
static int grow_slot(cb_layout *L, int s, size_t bytes) {
    void *b = malloc(bytes ? bytes : 1);
    if (!b) return 0;
    free(L->ws.buf[s]);
    L->ws.buf[s] = b;
    L->scratch_bytes += bytes - L->ws.cap[s];
    L->ws.cap[s] = bytes;
    return 1;
}

void *cb_layout_scratch(cb_layout *L, int slot, size_t bytes) {
    if (bytes <= L->ws.cap[slot]) return L->ws.buf[slot];
    L->ws.grew += L->ws.planned;
    if (!grow_slot(L, slot, bytes)) cb_layout_oom("tensor-parallel scratch");
    return L->ws.buf[slot];
}

void *cb_layout_zeroed(cb_layout *L, int slot, size_t bytes) {
    void *p = cb_layout_scratch(L, slot, bytes);
    memset(p, 0, bytes);
    return p;
}

void cb_layout_plan(cb_layout *L, const cb_layout_use *u) {
    if (L->ops->plan) L->ops->plan(L, u);
}

size_t cb_layout_workspace_bytes(const cb_layout *L) {
    size_t n = L->ws.kept_need;
    for (int s = 0; s < CB_WS_SLOTS; s++) n += L->ws.need[s] > L->ws.cap[s] ? L->ws.need[s] : L->ws.cap[s];
    return n;
}

int cb_layout_workspace_alloc(cb_layout *L, cb_err *e) {
    for (int s = 0; s < CB_WS_SLOTS; s++)
        if (L->ws.need[s] > L->ws.cap[s] && !grow_slot(L, s, L->ws.need[s]))
            return cb_fail(e, CB_ENOMEM, "out of memory for the tensor-parallel workspace: %zu "
                                         "bytes", cb_layout_workspace_bytes(L));
    int rc = L->ops->plan_alloc ? L->ops->plan_alloc(L, e) : CB_OK;
    L->ws.planned = !rc;
    return rc;
}

void cb_layout_workspace_free(cb_layout *L) {
    for (int s = 0; s < CB_WS_SLOTS; s++) free(L->ws.buf[s]);
}
