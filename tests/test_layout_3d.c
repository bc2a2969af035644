/* Every 3-D layout operator against the serial one, under mpirun with a
 * cube of ranks (tests/test_tp3d.sh runs it at 8 and 27): inputs and
 * parameters are cut from the same full tensors with act_shard/shard, and
 * each rank compares its own piece of every output and gradient (every copy
 * of a replicated one) with the serial result, to 1e-5 relative. Also
 * measures the traffic of one layer's four linears against
 * (q-1)/q^3 (32 N h + 24 h^2) elements in 24 collectives. Then the GPT
 * graph (cb_model_declare_gpt) built on the 3-D layout against the serial
 * one (no trainer, tests/gpt_pair.h): SGD steps of two accumulated
 * micro-batches; every loss, the first step's gradients and the final
 * parameters.
 * Alone (one process) it prints a note and checks nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_pair.h"
#include "util/rng.h"

#define TOL 1e-5

static cb_layout *L, *S;
static cb_grid G;
static cb_rng R;
static int failed;

static float *rnd(size_t n, float scale) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = cb_rng_normal(&R) * scale;
    return p;
}

static float *zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static float *cut(const cb_shard *s, const float *full) {
    float *p = zeros(cb_shard_numel(s));
    cb_shard_extract(s, full, p);
    return p;
}

static cb_shard act(int N, int H, int parity, int parts) {
    return L->ops->act_shard(L, L->tp_rank, N, H, parity, parts);
}

static cb_shard par(cb_param_kind kind, int64_t R_, int64_t C, int parts, int parity) {
    return L->ops->shard(L, L->tp_rank, kind, R_, C, parts, parity);
}

/* Compares local with the shard s of full on every rank; one line on rank 0
 * with the worst error of any rank (max |diff| / max |expected| of the
 * whole tensor). */
static void expect(const char *name, const cb_shard *s, const float *full, const float *local) {
    float *want = cut(s, full);
    size_t n = cb_shard_numel(s);
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)local[i] - want[i]);
        d = diff > d || isnan(diff) ? diff : d;
        m = fabs(want[i]) > m ? fabs(want[i]) : m;
    }
    double v[2] = {d, m};
    cb_comm_allreduce_f64(&G.tpg, "test", NULL, v, 2, CB_COMM_MAX);
    double rel = v[0] / (v[1] > 1e-30 ? v[1] : 1e-30);
    int ok = rel <= TOL && !isnan(rel);
    if (!ok) failed++;
    if (G.world_rank == 0)
        printf("%s %s rel %.2e (tol %.0e, q=%d, save=%s)\n", ok ? "PASS" : "FAIL", name, rel, TOL,
               L->q, L->save_gathered ? "gathered" : "shard");
    free(want);
}

/* One linear: parity, parts, bias; forward y, backward dx, dw, db. */
static void test_linear(int N, int in, int out, int parts, int parity, const char *name) {
    float *x = rnd((size_t)N * in, 1.0f), *w = rnd((size_t)in * out, 0.2f), *b = rnd(out, 0.1f);
    float *dy = rnd((size_t)N * out, 1.0f);
    float *y = zeros((size_t)N * out), *dx = zeros((size_t)N * in);
    float *dw = rnd((size_t)in * out, 0.01f), *db = rnd(out, 0.01f); /* accumulate onto these */
    cb_shard sx = act(N, in, parity, 1), sy = act(N, out, 1 - parity, parts);
    cb_shard sw = par(CB_P_LINEAR_W, in, out, parts, parity);
    cb_shard sb = par(CB_P_LINEAR_B, 1, out, parts, parity);
    cb_linear ls = {.in = in, .out = out, .parts = parts, .parity = parity, .w = w, .b = b,
                    .dw = zeros((size_t)in * out), .db = zeros(out)};
    memcpy(ls.dw, dw, sizeof(float) * in * out);
    memcpy(ls.db, db, sizeof(float) * out);
    cb_linear ll = {.in = in, .out = out, .parts = parts, .parity = parity, .w = cut(&sw, w),
                    .b = cut(&sb, b), .dw = cut(&sw, dw), .db = cut(&sb, db)};
    float *xl = cut(&sx, x), *dyl = cut(&sy, dy), *yl = zeros(cb_shard_numel(&sy)),
          *dxl = rnd(cb_shard_numel(&sx), 1.0f); /* overwritten */
    S->ops->linear_forward(S, &ls, x, y, N);
    S->ops->linear_backward(S, &ls, x, dy, dx, N);
    L->ops->linear_forward(L, &ll, xl, yl, N);
    L->ops->linear_backward(L, &ll, xl, dyl, dxl, N);
    char t[96];
    snprintf(t, sizeof t, "%s.y", name), expect(t, &sy, y, yl);
    snprintf(t, sizeof t, "%s.dx", name), expect(t, &sx, dx, dxl);
    snprintf(t, sizeof t, "%s.dw", name), expect(t, &sw, ls.dw, ll.dw);
    snprintf(t, sizeof t, "%s.db", name), expect(t, &sb, ls.db, ll.db);
    float *fr[] = {x, w, b, dy, y, dx, dw, db, ls.dw, ls.db, ll.w, ll.b, ll.dw, ll.db, xl, dyl,
                   yl, dxl};
    for (size_t i = 0; i < sizeof fr / sizeof *fr; i++) free(fr[i]);
}

/* Three linears in a row (parity 0 -> 1 -> 0 -> 1) without bias, so an odd
 * number of role swaps lies between input and output. */
static void test_chain(int N, int C) {
    int dims[4] = {C, 2 * C, C, 3 * C};
    float *x[4], *xl[4], *w[3];
    cb_linear ls[3], ll[3];
    cb_shard sx[4], sw[3];
    x[0] = rnd((size_t)N * C, 1.0f);
    for (int l = 0; l < 4; l++) sx[l] = act(N, dims[l], l % 2, 1);
    xl[0] = cut(&sx[0], x[0]);
    for (int l = 0; l < 3; l++) {
        w[l] = rnd((size_t)dims[l] * dims[l + 1], 0.3f);
        sw[l] = par(CB_P_LINEAR_W, dims[l], dims[l + 1], 1, l % 2);
        ls[l] = (cb_linear){.in = dims[l], .out = dims[l + 1], .parts = 1, .parity = l % 2,
                            .w = w[l], .dw = zeros((size_t)dims[l] * dims[l + 1])};
        ll[l] = ls[l];
        ll[l].w = cut(&sw[l], w[l]);
        ll[l].dw = zeros(cb_shard_numel(&sw[l]));
        x[l + 1] = zeros((size_t)N * dims[l + 1]);
        xl[l + 1] = zeros(cb_shard_numel(&sx[l + 1]));
        S->ops->linear_forward(S, &ls[l], x[l], x[l + 1], N);
        L->ops->linear_forward(L, &ll[l], xl[l], xl[l + 1], N);
    }
    expect("chain3.y", &sx[3], x[3], xl[3]);
    float *d = rnd((size_t)N * dims[3], 1.0f), *dl = cut(&sx[3], d);
    for (int l = 2; l >= 0; l--) {
        float *nd = zeros((size_t)N * dims[l]), *ndl = zeros(cb_shard_numel(&sx[l]));
        S->ops->linear_backward(S, &ls[l], x[l], d, nd, N);
        L->ops->linear_backward(L, &ll[l], xl[l], dl, ndl, N);
        free(d), free(dl);
        d = nd, dl = ndl;
        char t[32];
        snprintf(t, sizeof t, "chain3.dw%d", l), expect(t, &sw[l], ls[l].dw, ll[l].dw);
    }
    expect("chain3.dx", &sx[0], d, dl);
    free(d), free(dl);
    for (int l = 0; l < 4; l++) free(x[l]), free(xl[l]);
    for (int l = 0; l < 3; l++) free(w[l]), free(ls[l].dw), free(ll[l].w), free(ll[l].dw);
}

/* Two micro-batches in flight on one linear (a pipeline's slots): forward
 * x1, forward x2, backward x1, backward x2; the kept X^ must be x1's. */
static void test_interleaved(int N, int in, int out) {
    float *x[2], *dy[2], *dx[2], *xl[2], *dyl[2], *dxl[2], *y = zeros((size_t)N * out);
    float *w = rnd((size_t)in * out, 0.3f);
    cb_shard sx = act(N, in, 0, 1), sy = act(N, out, 1, 1), sw = par(CB_P_LINEAR_W, in, out, 1, 0);
    cb_linear ls = {.in = in, .out = out, .parts = 1, .parity = 0, .w = w,
                    .dw = zeros((size_t)in * out)};
    cb_linear ll = {.in = in, .out = out, .parts = 1, .parity = 0, .w = cut(&sw, w),
                    .dw = zeros(cb_shard_numel(&sw))};
    float *yl = zeros(cb_shard_numel(&sy));
    for (int m = 0; m < 2; m++) {
        x[m] = rnd((size_t)N * in, 1.0f), dy[m] = rnd((size_t)N * out, 1.0f);
        dx[m] = zeros((size_t)N * in), xl[m] = cut(&sx, x[m]), dyl[m] = cut(&sy, dy[m]);
        dxl[m] = zeros(cb_shard_numel(&sx));
        S->ops->linear_forward(S, &ls, x[m], y, N);
        S->ops->linear_backward(S, &ls, x[m], dy[m], dx[m], N);
        L->ops->linear_forward(L, &ll, xl[m], yl, N);
    }
    for (int m = 0; m < 2; m++) L->ops->linear_backward(L, &ll, xl[m], dyl[m], dxl[m], N);
    expect("interleaved.dx1", &sx, dx[0], dxl[0]);
    expect("interleaved.dx2", &sx, dx[1], dxl[1]);
    expect("interleaved.dw", &sw, ls.dw, ll.dw);
    for (int m = 0; m < 2; m++)
        free(x[m]), free(dy[m]), free(dx[m]), free(xl[m]), free(dyl[m]), free(dxl[m]);
    free(y), free(w), free(ls.dw), free(ll.w), free(ll.dw), free(yl);
}

static void test_norm(int N, int C, int parity) {
    float *x = rnd((size_t)N * C, 1.0f), *dy = rnd((size_t)N * C, 1.0f);
    for (size_t i = 0; i < (size_t)N * C; i++) x[i] += 3.0f; /* a mean far from 0 */
    float *w = rnd(C, 0.5f), *b = rnd(C, 0.5f), *dw = rnd(C, 0.1f), *db = rnd(C, 0.1f);
    float *y = zeros((size_t)N * C), *dx = rnd((size_t)N * C, 1.0f), *mean = zeros(N),
          *rstd = zeros(N);
    cb_shard sa = act(N, C, parity, 1), sp = par(CB_P_NORM, 1, C, 1, parity);
    cb_norm ns = {.C = C, .parity = parity, .w = w, .b = b, .dw = zeros(C), .db = zeros(C)};
    memcpy(ns.dw, dw, sizeof(float) * C);
    memcpy(ns.db, db, sizeof(float) * C);
    cb_norm nl = {.C = C, .parity = parity, .w = cut(&sp, w), .b = cut(&sp, b),
                  .dw = cut(&sp, dw), .db = cut(&sp, db)};
    size_t n = cb_shard_numel(&sa);
    float *xl = cut(&sa, x), *dyl = cut(&sa, dy), *dxl = cut(&sa, dx), *yl = zeros(n),
          *ml = zeros(sa.nrows), *rl = zeros(sa.nrows);
    S->ops->norm_forward(S, &ns, x, y, mean, rstd, N);
    S->ops->norm_backward(S, &ns, x, dy, dx, mean, rstd, N);
    L->ops->norm_forward(L, &nl, xl, yl, ml, rl, N);
    L->ops->norm_backward(L, &nl, xl, dyl, dxl, ml, rl, N);
    const char *nm[4][4] = {{"norm_p0.y", "norm_p0.dx", "norm_p0.dw", "norm_p0.db"},
                            {"norm_p1.y", "norm_p1.dx", "norm_p1.dw", "norm_p1.db"}};
    expect(nm[parity][0], &sa, y, yl);
    expect(nm[parity][1], &sa, dx, dxl);
    expect(nm[parity][2], &sp, ns.dw, nl.dw);
    expect(nm[parity][3], &sp, ns.db, nl.db);
    float *fr[] = {x, dy, w, b, dw, db, y, dx, mean, rstd, ns.dw, ns.db, nl.w, nl.b, nl.dw,
                   nl.db, xl, dyl, dxl, yl, ml, rl};
    for (size_t i = 0; i < sizeof fr / sizeof *fr; i++) free(fr[i]);
}

/* One attention variant against the serial one (see test_layout.c) */
static void attention_variant(int B, int T, int C, int NH, int cross, int causal, const int *lens,
                              const char *tag) {
    int N = B * T, wq = cross ? C : 3 * C, wkv = cross ? 2 * C : 3 * C;
    cb_attn a = cb_attn_self(B, T, C, NH, causal, lens);
    if (cross) a.ldq = C, a.ldkv = 2 * C, a.koff = 0, a.voff = C;
    float *q = rnd((size_t)N * wq, 1.0f), *kv = cross ? rnd((size_t)N * wkv, 1.0f) : q;
    float *dy = rnd((size_t)N * C, 1.0f), *y = zeros((size_t)N * C);
    size_t sn = S->ops->att_numel(S, &a);
    float *att = zeros(sn), *sc = zeros(sn);
    float *dq = zeros((size_t)N * wq), *dkv = cross ? zeros((size_t)N * wkv) : dq;
    cb_shard sq = act(N, wq, 1, cross ? 1 : 3), skv = act(N, wkv, 1, cross ? 2 : 3),
             sy = act(N, C, 1, 1);
    size_t an = L->ops->att_numel(L, &a);
    float *ql = cut(&sq, q), *kvl = cross ? cut(&skv, kv) : ql, *dyl = cut(&sy, dy);
    float *yl = zeros(cb_shard_numel(&sy)), *al = zeros(an), *scl = zeros(an);
    float *dql = zeros(cb_shard_numel(&sq)), *dkvl = cross ? zeros(cb_shard_numel(&skv)) : dql;
    S->ops->attention_forward(S, &a, q, kv, y, att);
    S->ops->attention_backward(S, &a, q, kv, att, dy, dq, dkv, sc);
    L->ops->attention_forward(L, &a, ql, kvl, yl, al);
    L->ops->attention_backward(L, &a, ql, kvl, al, dyl, dql, dkvl, scl);
    char what[96];
    snprintf(what, sizeof what, "attention.%s.y", tag);
    expect(what, &sy, y, yl);
    snprintf(what, sizeof what, "attention.%s.%s", tag, cross ? "dq" : "dqkv");
    expect(what, &sq, dq, dql);
    if (cross) {
        snprintf(what, sizeof what, "attention.%s.dkv", tag);
        expect(what, &skv, dkv, dkvl);
    }
    float *fr[] = {q, dy, y, att, sc, dq, ql, dyl, yl, al, scl, dql};
    for (size_t i = 0; i < sizeof fr / sizeof *fr; i++) free(fr[i]);
    if (cross) free(kv), free(dkv), free(kvl), free(dkvl);
}

static void test_attention(int B, int T, int C, int NH) {
    int *lens = malloc(sizeof(int) * B);
    for (int b = 0; b < B; b++) lens[b] = b == 0 ? T : b == 1 ? 0 : 1 + b % T;
    attention_variant(B, T, C, NH, 0, 1, NULL, "causal");
    attention_variant(B, T, C, NH, 0, 0, lens, "padded");
    attention_variant(B, T, C, NH, 0, 1, lens, "causal_padded");
    attention_variant(B, T, C, NH, 1, 0, lens, "cross_padded");
    attention_variant(B, T, C, NH, 1, 1, NULL, "cross_causal");
    free(lens);
}

/* Embedding, then the tied head and cross-entropy on a separate input, on
 * a vocabulary that needs padding; dwte collects both gradients. */
static void test_embed_head(int B, int T, int C, int V) {
    int N = B * T, Tm = T + 2;
    int *ids = malloc(sizeof(int) * N), *tg = malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) {
        ids[i] = (int)cb_rng_below(&R, (uint64_t)V);
        tg[i] = i % 5 == 0 ? V - 1 : (int)cb_rng_below(&R, (uint64_t)V); /* hit the last row */
    }
    float *wte = rnd((size_t)V * C, 0.5f), *wpe = rnd((size_t)Tm * C, 0.5f);
    float *dwte = rnd((size_t)V * C, 0.01f), *dwpe = rnd((size_t)Tm * C, 0.01f);
    cb_shard se = par(CB_P_EMBED, V, C, 1, 0), sp = par(CB_P_POS, Tm, C, 1, 0);
    cb_shard sa = act(N, C, 0, 1);
    cb_embed es = {.V = V, .C = C, .T = Tm, .wte = wte, .wpe = wpe, .dwte = zeros((size_t)V * C),
                   .dwpe = zeros((size_t)Tm * C)};
    memcpy(es.dwte, dwte, sizeof(float) * V * C);
    memcpy(es.dwpe, dwpe, sizeof(float) * Tm * C);
    cb_embed el = {.V = V, .C = C, .T = Tm, .wte = cut(&se, wte), .wpe = cut(&sp, wpe),
                   .dwte = cut(&se, dwte), .dwpe = cut(&sp, dwpe)};
    float *x = zeros((size_t)N * C), *xl = zeros(cb_shard_numel(&sa));
    S->ops->embed_forward(S, &es, ids, B, T, x);
    L->ops->embed_forward(L, &el, ids, B, T, xl);
    expect("embed.x", &sa, x, xl);
    float *h = rnd((size_t)N * C, 1.0f), *hl = cut(&sa, h);
    float *lg = zeros(S->ops->logits_numel(S, N, V)), *lgl = zeros(L->ops->logits_numel(L, N, V));
    float loss = S->ops->head_forward(S, &es, h, tg, lg, N);
    float lossl = L->ops->head_forward(L, &el, hl, tg, lgl, N);
    cb_shard one = {.R = 1, .C = 1, .rows_pad = 1, .nrows = 1, .nseg = 1, .ncol = {1}};
    expect("head.loss", &one, &loss, &lossl);
    float *dh = zeros((size_t)N * C), *dhl = rnd(cb_shard_numel(&sa), 1.0f);
    S->ops->head_backward(S, &es, h, tg, lg, 0.7f, dh, N);
    L->ops->head_backward(L, &el, hl, tg, lgl, 0.7f, dhl, N);
    expect("head.dx", &sa, dh, dhl);
    float *dx = rnd((size_t)N * C, 1.0f), *dxl = cut(&sa, dx);
    S->ops->embed_backward(S, &es, ids, B, T, dx);
    L->ops->embed_backward(L, &el, ids, B, T, dxl);
    expect("embed+head.dwte", &se, es.dwte, el.dwte);
    expect("embed.dwpe", &sp, es.dwpe, el.dwpe);
    float *pad = zeros(cb_shard_numel(&se));
    int bad = 0; /* padding rows of the local dwte must stay zero */
    for (int64_t r = 0; r < se.nrows; r++)
        if (se.row0 + r >= V)
            for (size_t c = 0; c < cb_shard_cols(&se); c++)
                bad |= el.dwte[r * cb_shard_cols(&se) + c] != 0.0f;
    bad = cb_comm_agree_error(&G.tpg, bad);
    if (bad) failed++;
    if (G.world_rank == 0)
        printf("%s embed.padding rows %lld..%lld of wte stay zero (vocab %d padded to %lld)\n",
               bad ? "FAIL" : "PASS", (long long)V, (long long)se.rows_pad - 1, V,
               (long long)se.rows_pad);
    float *fr[] = {wte, wpe, dwte, dwpe, es.dwte, es.dwpe, el.wte, el.wpe, el.dwte, el.dwpe, x,
                   xl, h, hl, lg, lgl, dh, dhl, dx, dxl, pad};
    for (size_t i = 0; i < sizeof fr / sizeof *fr; i++) free(fr[i]);
    free(ids), free(tg);
}

/* Bytes and calls of the "linear.*" tags over every communicator. */
static void linear_traffic(uint64_t *bytes, uint64_t *calls) {
    *bytes = *calls = 0;
    const char *tags[2] = {"linear.fwd", "linear.bwd"};
    for (int c = 0; c < G.ncomms; c++)
        for (int t = 0; t < 2; t++) {
            const cb_comm_stat *s = cb_comm_stats_find(G.comms[c], tags[t]);
            if (s) *bytes += s->bytes_sent, *calls += s->calls;
        }
}

/* One transformer layer's linears (QKV h->3h, proj h->h, fc h->4h,
 * fcproj 4h->h) forward and backward; measured per rank against the
 * formula, exactly (the counters use the ring volume). */
static void test_traffic(int N, int C) {
    int dims[4][3] = {{C, 3 * C, 3}, {C, C, 1}, {C, 4 * C, 1}, {4 * C, C, 1}};
    for (int c = 0; c < G.ncomms; c++) cb_comm_stats_reset(G.comms[c]);
    for (int l = 0; l < 4; l++) {
        int in = dims[l][0], out = dims[l][1], parity = l % 2;
        cb_shard sx = act(N, in, parity, 1), sy = act(N, out, 1 - parity, dims[l][2]);
        cb_shard sw = par(CB_P_LINEAR_W, in, out, dims[l][2], parity);
        cb_linear ll = {.in = in, .out = out, .parts = dims[l][2], .parity = parity,
                        .w = rnd(cb_shard_numel(&sw), 0.1f), .dw = zeros(cb_shard_numel(&sw))};
        float *x = rnd(cb_shard_numel(&sx), 1.0f), *y = zeros(cb_shard_numel(&sy)),
              *dx = zeros(cb_shard_numel(&sx));
        L->ops->linear_forward(L, &ll, x, y, N);
        L->ops->linear_backward(L, &ll, x, y, dx, N);
        free(ll.w), free(ll.dw), free(x), free(y), free(dx);
    }
    uint64_t bytes, calls, mx[2], mn[2];
    linear_traffic(&bytes, &calls);
    int64_t v[4] = {(int64_t)bytes, (int64_t)calls, -(int64_t)bytes, -(int64_t)calls};
    cb_comm_allreduce_i64(&G.tpg, "test", NULL, v, 4, CB_COMM_MAX);
    mx[0] = v[0], mx[1] = v[1], mn[0] = -v[2], mn[1] = -v[3];
    double q = L->q, h = C;
    double elems = (q - 1) / (q * q * q) * (32.0 * N * h + 24.0 * h * h);
    /* re-gathering X^ (7 N h over the four inputs) and W^ (12 h^2) */
    double extra = L->save_gathered ? 0 : (q - 1) / (q * q * q) * (7.0 * N * h + 12.0 * h * h);
    double want = 4.0 * (elems + extra);
    int want_calls = L->save_gathered ? 24 : 32;
    int ok = mx[0] == mn[0] && fabs((double)mx[0] - want) < 0.5 && mx[1] == (uint64_t)want_calls &&
             mn[1] == mx[1];
    if (!ok) failed++;
    if (G.world_rank == 0)
        printf("%s traffic.linears one layer N=%d h=%d q=%d save=%s: %llu bytes sent per rank in "
               "%llu collectives (every rank alike); formula %.0f bytes in %d\n",
               ok ? "PASS" : "FAIL", N, C, L->q, L->save_gathered ? "gathered" : "shard",
               (unsigned long long)mx[0], (unsigned long long)mx[1], want, want_calls);
}

/* every element of every tensor owned by exactly one tensor rank: the
 * owned shard sizes add up to the (padded) full size */
static void test_owners(cb_model *m) {
    int bad = 0;
    for (int i = 0; i < m->pt.n; i++) {
        cb_shard sh = cb_ptable_shard(&m->pt, i, L->tp_rank);
        int64_t n[1] = {sh.owner ? (int64_t)cb_shard_numel(&sh) : 0};
        cb_comm_allreduce_i64(&G.tpg, "test", NULL, n, 1, CB_COMM_SUM);
        bad |= n[0] != sh.rows_pad * sh.C;
    }
    failed += bad;
    if (G.world_rank == 0)
        printf("%s gpt q=%d: owned shards cover every tensor exactly once (%d tensors)\n",
               bad ? "FAIL" : "PASS", L->q, m->pt.n);
}

/* The GPT graph on a 3-D layout (X^ kept as L's) and serially. */
static int gpt_pair(const cb_gpt_config *c, int B, cb_dist **ds, cb_dist **d, cb_model **s,
                    cb_model **m, cb_err *e) {
    int rc = cb_dist_tensor(d, G.world_size, CB_TP_3D, e);
    if (!rc) rc = cb_dist_tensor(ds, 0, CB_TP_1D, e);
    if (rc) return rc;
    (*d)->L->save_gathered = L->save_gathered;
    *s = pair_build(*ds, c, B, 2, 11, e);
    *m = *s ? pair_build(*d, c, B, 2, 11, e) : NULL;
    return *m ? CB_OK : e->code;
}

/* the GPT on the 3-D layout against the serial GPT for `steps` SGD steps */
static void test_gpt(int layers, int C, int NH, int B, int T, int V, int steps) {
    cb_gpt_config c = {.n_layer = layers, .d_model = C, .n_head = NH, .seq_len = T, .vocab = V};
    cb_dist *ds = NULL, *d = NULL;
    cb_model *s = NULL, *m = NULL;
    cb_err e = {0};
    if (gpt_pair(&c, B, &ds, &d, &s, &m, &e)) {
        failed++;
        if (G.world_rank == 0) printf("FAIL gpt: %s\n", e.msg);
        return;
    }
    if (L->save_gathered) test_owners(m);
    int N = B * T, *ids = malloc(sizeof(int) * 4 * N), wi = 0;
    double wl = 0.0, wg = 0.0;
    for (int step = 0; step < steps; step++) {
        for (int k = 0; k < 4 * N; k++) ids[k] = (int)cb_rng_below(&R, (uint64_t)V);
        float ls = pair_grads(s, ids, ids + 2 * N), lm = pair_grads(m, ids, ids + 2 * N);
        wl = fmax(wl, fabs((double)ls - lm) / fabs((double)ls));
        if (step == 0) wg = pair_diff(s, m, s->grads, m->grads, &wi);
        pair_sgd(s, 0.3f);
        pair_sgd(m, 0.3f);
    }
    int wp = 0;
    double dp = pair_diff(s, m, s->params, m->params, &wp);
    const char *st = L->save_gathered ? "gathered" : "shard";
    int ok[3] = {wl <= TOL, wg <= TOL, dp <= TOL};
    for (int k = 0; k < 3; k++) failed += !ok[k];
    if (G.world_rank == 0) {
        printf("%s gpt q=%d save=%s L=%d C=%d: %d-step losses max rel %.2e (tol %.0e)\n",
               ok[0] ? "PASS" : "FAIL", L->q, st, layers, C, steps, wl, TOL);
        printf("%s gpt q=%d save=%s: step-1 gradients max rel %.2e (%s)\n", ok[1] ? "PASS" : "FAIL",
               L->q, st, wg, m->pt.t[wi].name);
        printf("%s gpt q=%d save=%s: final parameters max rel %.2e (%s)\n", ok[2] ? "PASS" : "FAIL",
               L->q, st, dp, m->pt.t[wp].name);
    }
    free(ids);
    cb_model_free(s);
    cb_model_free(m);
    cb_dist_free(ds);
    cb_dist_free(d);
}

static void test_check(int B, int T, int C, int NH, int V) {
    cb_err e = {0};
    int q = L->q;
    struct { int B, C, NH; const char *what; } bad[3] = {
        {B + 1, C, NH, "batch"}, {B, C + q, NH, "d_model"}, {B, C, NH + 1, "heads"}};
    int ok = L->ops->check(L, B, T, C, NH, V, &e) == CB_OK;
    for (int i = 0; i < 3; i++) {
        int rc = L->ops->check(L, bad[i].B, T, bad[i].C, bad[i].NH, V, &e);
        int good = rc == CB_EINPUT && strstr(e.msg, "3d") != NULL;
        if (G.world_rank == 0 && !good) printf("# check(%s): rc %d: %s\n", bad[i].what, rc, e.msg);
        if (G.world_rank == 0 && good) printf("# check(%s): %s\n", bad[i].what, e.msg);
        ok &= good;
    }
    if (!ok) failed++;
    if (G.world_rank == 0)
        printf("%s check: batch, d_model, heads refused with CB_EINPUT\n", ok ? "PASS" : "FAIL");
}

int main(int argc, char **argv) {
    cb_err e = {0};
    if (cb_comm_init(&argc, &argv, &e)) return 1;
    int P = cb_comm_world()->size;
    if (cb_grid_side(P, CB_TP_3D) < 2) {
        if (cb_comm_world()->rank == 0)
            printf("# test_layout_3d needs a cube of ranks: mpirun -np 8 (tests/test_tp3d.sh)\n");
        cb_comm_finalize();
        return 0;
    }
    if (cb_grid_create(&G, 1, 1, P, CB_TP_3D, &e) || cb_layout_create(&G, &L, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    S = cb_layout_serial();
    int q = L->q, q2 = q * q;
    int B = q2, T = 3, C = 2 * q2, NH = q, V = 3 * q2 + 1, N = B * T;
    for (int save = 1; save >= 0; save--) {
        L->save_gathered = save;
        cb_rng_seed(&R, 1234);
        test_linear(N, C, 3 * C, 3, 0, "linear_qkv_p0");
        test_linear(N, C, C, 1, 1, "linear_p1");
        test_linear(N, 4 * C, C, 1, 1, "linear_fcproj_p1");
        test_chain(N, C);
        test_interleaved(N, C, 2 * C);
        test_norm(N, C, 0);
        test_norm(N, C, 1);
        test_attention(B, T, C, NH);
        test_embed_head(B, T, C, V);
        test_embed_head(2 * B, T, C, q2 * 4); /* a vocabulary without padding */
        test_traffic(N, C);
        if (q == 2) test_gpt(2, 32, 4, 8, 16, 50, 30);
        else test_gpt(1, 18, 3, 9, 4, 40, 30);
    }
    test_check(B, T, C, NH, V);
    cb_layout_free(L);
    cb_layout_free(S);
    cb_grid_free(&G);
    cb_comm_finalize();
    return failed ? 1 : 0;
}
