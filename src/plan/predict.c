/* The step-time and memory model (docs/plan.md). Compute from per-kernel
 * rates: a GEMM at the cluster's efficiency for its arithmetic intensity,
 * attention at its own efficiency, memory-bound kernels at the device's
 * bandwidth. Communication: the exact per-rank bytes and calls of
 * src/plan/counts.c (tensor), the gradient volume (data) and the boundary
 * activations (pipeline), timed by an alpha-beta model per group. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

const char *cb_plan_schedule_name(int s) {
    return s == CB_PLAN_GPIPE ? "gpipe" : s == CB_PLAN_1F1B ? "1f1b" : "interleaved";
}

static double minf(double a, double b) { return a < b ? a : b; }
static double maxf(double a, double b) { return a > b ? a : b; }

static const cb_plan_coll *measured(const cb_plan_cluster *c, const char *op, int size) {
    for (int i = 0; i < c->ncoll; i++)
        if (c->coll[i].ranks == size && !strcmp(c->coll[i].op, op)) return &c->coll[i];
    return NULL;
}

/* The tier a group of size ranks `stride` apart uses, and the bandwidth
 * each of its ranks gets: a group inside a node uses the intra-node links;
 * a group across nodes shares each node's port with the other groups that
 * have members on that node (devices_per_node / members per node). */
static cb_plan_tier tier_of(const cb_plan_cluster *c, int size, int stride) {
    int dpn = c->devices_per_node;
    int per_node = stride >= dpn ? 1 : (int)minf(size, dpn / stride);
    if (per_node >= size) return c->intra;
    cb_plan_tier t = c->inter;
    t.bandwidth = minf(c->intra.bandwidth, c->inter.bandwidth / ((double)dpn / per_node));
    return t;
}

double cb_plan_coll_time(const cb_plan_cluster *c, const char *op, int size, int stride,
                         double sent, double calls) {
    if (size <= 1 || calls <= 0) return 0;
    const cb_plan_coll *m = measured(c, op, size);
    if (m) return calls * m->alpha + sent / m->beta;
    cb_plan_tier t = tier_of(c, size, stride);
    double p = size, msg = sent / calls, ar = !strcmp(op, "allreduce");
    /* ring: 2(p-1) steps (all-reduce) or p-1, moving msg in all; recursive
     * doubling: log2 p steps moving log2 p times the vector, which MPI
     * libraries pick for small messages. */
    double ring = (ar ? 2 : 1) * (p - 1) * t.latency + msg / t.bandwidth;
    double vec = msg / ((ar ? 2 : 1) * (p - 1) / p), lg = ceil(log2(p));
    double rd = lg * t.latency + lg * vec / t.bandwidth;
    return calls * minf(ring, rd);
}

/* ------------------------------------------------------------ divisibility */

static int side(const cb_plan_layout *l) { return cb_grid_side(l->tp, l->mode); }

int cb_plan_check(const cb_plan_job *j, const cb_plan_layout *l, cb_err *e) {
    const cb_gpt_config *g = &j->model->gpt;
    int q = side(l), mb = l->M > 0 ? j->batch / l->M : 0, v = l->schedule == CB_PLAN_INTERLEAVED ? l->v : 1;
    if (l->dp < 1 || l->pp < 1 || l->tp < 1 || l->M < 1 || v < 1 || q < 1)
        return cb_fail(e, CB_EINPUT, "layout sizes must be >= 1 and tp a square (2d) or cube (3d)");
    if (j->batch % l->M || mb % l->dp)
        return cb_fail(e, CB_EINPUT, "batch %d does not split into %d micro-batches of dp %d rows",
                       j->batch, l->M, l->dp);
    int rows = mb / l->dp, rq = l->mode == CB_TP_3D ? q * q : l->mode == CB_TP_2D ? q : 1;
    if (rows % rq || g->n_head % (l->mode == CB_TP_1D ? l->tp : q) ||
        g->d_model % (l->mode == CB_TP_3D ? q * q : q))
        return cb_fail(e, CB_EINPUT, "tp %d %s does not divide rows %d, heads %d or d-model %d",
                       l->tp, cb_grid_mode_name(l->mode), rows, g->n_head, g->d_model);
    if (g->n_layer < l->pp * v)
        return cb_fail(e, CB_EINPUT, "%d layers cannot fill %d stages of %d chunks", g->n_layer,
                       l->pp, v);
    return CB_OK;
}

/* ------------------------------------------------------------ compute */

/* Seconds of one forward GEMM (m, k) @ (k, n), `calls` times. */
static double gemm_s(const cb_plan_cluster *c, double m, double k, double n, double calls) {
    double flops = 2 * m * k * n, intensity = flops / (4 * (m * k + k * n + m * n));
    return calls * flops / (c->peak_flops * cb_plan_gemm_eff(c, intensity));
}

/* Forward seconds of one layer on this rank for `tok` tokens of its tensor
 * group: 1-D splits each GEMM's output (or input) P ways; 2-D runs q SUMMA
 * steps of (tok/q, in/q, out/q); 3-D one GEMM of (tok/q, in/q, out/q). */
static double layer_fwd_s(const cb_plan_cluster *c, const cb_plan_layer *y, const cb_plan_layout *l,
                          double tok) {
    double q = side(l), P = l->tp, t = 0;
    for (int i = 0; i < y->ngemm; i++) {
        double in = y->gemm[i].in, out = y->gemm[i].out;
        if (l->mode == CB_TP_1D) t += gemm_s(c, tok, in, out / P, 1);
        else if (l->mode == CB_TP_2D) t += gemm_s(c, tok / q, in / q, out / q, q);
        else t += gemm_s(c, tok / q, in / q, out / q, 1);
    }
    t += y->attn_flops * tok / P / (c->peak_flops * c->attn_efficiency);
    double norm = l->mode == CB_TP_1D ? y->mem_norm : y->mem_norm / P;
    return t + (y->mem_bytes / P + norm) * tok / c->mem_bandwidth;
}

/* ------------------------------------------------------------ pipeline stages */

/* The slowest chunk of a pipeline: its blocks, whether it holds the
 * embedding / the head, and its forward seconds. */
typedef struct stage {
    int blocks, embed, head;
    double fwd_s;
} stage;

/* The contiguous split of n items (forward seconds of the embedding, the
 * blocks, the head) into `parts` chunks whose largest is smallest (what a
 * compute-balanced partition gives), by dynamic programming; n <= 130,
 * parts <= 64. */
static stage slowest_stage(const double *item, int n, int parts) {
    /* best[k][i]: smallest max over the first i items in k parts */
    double best[65][130];
    int cut[65][130];
    for (int i = 0; i <= n; i++) {
        double s = 0;
        for (int a = 0; a < i; a++) s += item[a];
        best[1][i] = s, cut[1][i] = 0;
    }
    for (int k = 2; k <= parts; k++)
        for (int i = 0; i <= n; i++) {
            best[k][i] = 1e300, cut[k][i] = i;
            double s = 0;
            for (int a = i; a >= 0; a--) {
                if (a < i) s += item[a];
                double m = maxf(best[k - 1][a], s);
                if (m < best[k][i]) best[k][i] = m, cut[k][i] = a;
            }
        }
    stage w = {0, 0, 0, -1};
    for (int k = parts, i = n; k >= 1; k--) {
        int a = cut[k][i];
        double s = 0;
        for (int x = a; x < i; x++) s += item[x];
        if (s > w.fwd_s) {
            w = (stage){0, a == 0, i == n, s};
            for (int x = a; x < i; x++) w.blocks += x > 0 && x < n - 1;
        }
        i = a;
    }
    return w;
}

static stage split_stages(const cb_plan_job *j, const cb_plan_layout *l, double tok) {
    const cb_plan_model *m = j->model;
    const cb_plan_layer *emb = &m->layer[0], *blk = &m->layer[1], *head = &m->layer[m->nlayer - 1];
    int L = blk->count, parts = l->pp * (l->schedule == CB_PLAN_INTERLEAVED ? l->v : 1);
    double item[130];
    /* deeper models are split as 128 blocks and scaled back below */
    if (L > 128) L = 128;
    if (parts > 64) parts = 64;
    item[0] = layer_fwd_s(j->cluster, emb, l, tok);
    for (int i = 0; i < L; i++) item[1 + i] = layer_fwd_s(j->cluster, blk, l, tok);
    item[L + 1] = layer_fwd_s(j->cluster, head, l, tok);
    stage s = slowest_stage(item, L + 2, parts);
    if (blk->count > L) s.blocks = s.blocks * blk->count / L, s.fwd_s *= (double)blk->count / L;
    return s;
}

/* ------------------------------------------------------------ the step */

/* The exact tensor counts of a stage: the whole-model formulas at the
 * stage's blocks, less the embedding/head terms when it holds neither. */
static void stage_counts(const cb_plan_job *j, const cb_plan_layout *l, int rows, stage s,
                         cb_plan_tp_cost *c) {
    const cb_gpt_config *g = &j->model->gpt;
    cb_plan_shape sh = {(double)rows * j->T, rows, j->T, g->d_model, g->n_head, g->vocab, s.blocks};
    int diag = side(l) == 1; /* off the 2-D diagonal a rank sends more: the maximum */
    cb_plan_tp_cost_of(&sh, l->mode, l->tp, diag, l->gathered, c);
    if (s.embed || s.head) return;
    cb_plan_tp_cost z;
    sh.L = 0;
    cb_plan_tp_cost_of(&sh, l->mode, l->tp, diag, l->gathered, &z);
    for (int k = 0; k < CB_PK_N; k++) c->sent[k] -= z.sent[k], c->calls[k] -= z.calls[k];
    c->param_bytes -= z.param_bytes, c->act_model_bytes -= z.act_model_bytes;
    c->act_slot_bytes -= z.act_slot_bytes, c->act_grad_bytes -= z.act_grad_bytes;
}

/* The slot bytes of one block (the plan is linear in the blocks). */
static double block_slot_bytes(const cb_plan_job *j, const cb_plan_layout *l, int rows) {
    const cb_gpt_config *g = &j->model->gpt;
    cb_plan_shape sh = {(double)rows * j->T, rows, j->T, g->d_model, g->n_head, g->vocab, 1};
    cb_plan_tp_cost one, none;
    cb_plan_tp_cost_of(&sh, l->mode, l->tp, side(l) == 1, l->gathered, &one);
    sh.L = 0;
    cb_plan_tp_cost_of(&sh, l->mode, l->tp, side(l) == 1, l->gathered, &none);
    return one.act_slot_bytes - none.act_slot_bytes;
}

/* Tensor communication seconds of one micro-batch, per group: 1-D one
 * all-reduce group; 2-D rows and columns (SUMMA broadcasts, half each);
 * 3-D the three lines, weights' share (12C^2 of 16NC + 12C^2) on WEIGHT,
 * the rest on INPUT and OUTPUT alike. */
static double tp_time(const cb_plan_cluster *c, const cb_plan_layout *l, const cb_plan_tp_cost *t,
                      double N, double C) {
    double sent = cb_plan_tp_sent(t), calls = cb_plan_tp_calls(t);
    int q = side(l);
    if (l->tp == 1) return 0;
    if (l->mode == CB_TP_1D) return cb_plan_coll_time(c, "allreduce", l->tp, 1, sent, calls);
    if (l->mode == CB_TP_2D)
        return cb_plan_coll_time(c, "bcast", q, 1, sent / 2, calls / 2) +
               cb_plan_coll_time(c, "bcast", q, q, sent / 2, calls / 2);
    double w = t->sent[CB_PK_LINEAR] * 12 * C * C / (16 * N * C + 12 * C * C), rest = sent - w;
    return cb_plan_coll_time(c, "allgather", q, 1, rest / 2, calls / 3) +
           cb_plan_coll_time(c, "allgather", q, q, rest / 2, calls / 3) +
           cb_plan_coll_time(c, "allgather", q, q * q, w, calls / 3);
}

static double in_flight(const cb_plan_layout *l) {
    if (l->pp == 1) return 1;
    if (l->schedule == CB_PLAN_GPIPE) return l->M;
    double f = minf(l->M, l->pp);
    return l->schedule == CB_PLAN_INTERLEAVED ? f * (1 + (l->pp - 1.0) / (l->pp * l->v)) : f;
}

/* The graph engine's activation plan (src/graph/build.c): a slot per
 * micro-batch in flight, the gradient buffers, the region recompute
 * shares (one float without it) and, with a pipeline, a message buffer per
 * micro-batch and boundary. Recompute (block): a block's values and kept
 * state live in the shared region, its output (read by the next block)
 * stays in the slot. Scratch: the layout's workspace and the engine's
 * (the widest value and attention's backward). */
static void memory(const cb_plan_job *j, const cb_plan_layout *l, double tok, stage s,
                   double blk, double msg, cb_plan_pred *p) {
    double params = p->tp.param_bytes / 8, C = j->model->gpt.d_model;
    p->mem_params = 4 * params, p->mem_grads = 4 * params;
    p->mem_opt = 8 * params / (l->zero ? l->dp : 1);
    double slot = p->tp.act_slot_bytes, shared = 4, out = 4 * tok * C / (l->mode == CB_TP_1D ? 1 : l->tp);
    if (l->recompute && s.blocks > 0)
        slot -= s.blocks * (blk - out), shared += blk - out;
    p->mem_act = slot * in_flight(l) + p->tp.act_grad_bytes + shared + l->M * msg;
    p->mem_scratch = p->tp.act_scratch_bytes;
    p->mem_comm = l->dp > 1 ? minf(j->bucket_bytes, p->mem_grads) : 0;
    p->mem_total = p->mem_params + p->mem_grads + p->mem_opt + p->mem_act + p->mem_scratch +
                   p->mem_comm;
}

/* Data parallelism: the gradients of the stage, ring all-reduced in
 * buckets (ZeRO-1: reduce-scatter + all-gather, the same volume), overlapped
 * with the last micro-batch's backward except the last bucket. With
 * --comm-dtype bf16 the gradient travels in half the bytes (all-reduce, or
 * ZeRO's reduce-scatter); ZeRO's parameter all-gather stays fp32. Buckets
 * are counted in floats, so the calls do not change. */
static void data_parallel(const cb_plan_job *j, const cb_plan_layout *l, double bwd_s,
                          cb_plan_pred *p) {
    if (l->dp == 1) return;
    double grad = p->mem_grads, calls = ceil(grad / j->bucket_bytes);
    /* + the step's loss, one float all-reduced (src/graph/exec.c); ZeRO-1
     * takes two collectives per bucket (reduce-scatter, all-gather) */
    double wire = j->comm_bf16 ? grad / 2 : grad; /* the bytes of the gradient as sent */
    double moved = l->zero ? (wire + grad) / 2 : wire; /* ZeRO: reduce-scatter + fp32 all-gather */
    p->dp_bytes = cb_plan_ring_allreduce(l->dp, moved) + cb_plan_ring_allreduce(l->dp, 4);
    p->dp_calls = calls * (l->zero ? 2 : 1) + 1;
    p->dp_s = cb_plan_coll_time(j->cluster, "allreduce", l->dp, l->tp * l->pp, p->dp_bytes, p->dp_calls);
    p->dp_exposed_s = maxf(p->dp_s / p->dp_calls, p->dp_s - bwd_s);
}

void cb_plan_predict(const cb_plan_job *j, const cb_plan_layout *l, cb_plan_pred *p) {
    const cb_plan_cluster *c = j->cluster;
    int rows = j->batch / l->M / l->dp, v = l->schedule == CB_PLAN_INTERLEAVED ? l->v : 1;
    double tok = (double)rows * j->T, C = j->model->gpt.d_model;
    memset(p, 0, sizeof *p);
    stage s = split_stages(j, l, tok);
    stage_counts(j, l, rows, s, &p->tp);
    double fwd = s.fwd_s * v, tp_mb = tp_time(c, l, &p->tp, tok, C);
    double rec = l->recompute ? fwd : 0, rec_tp = l->recompute ? tp_mb / 2 : 0;
    /* a stage sends its output forward and its input's gradient back: one
     * message per micro-batch and chunk at either end of a 2-stage pipe, two
     * in the middle of a longer one */
    double act = 4 * tok * C / (l->mode == CB_TP_1D ? 1 : l->tp);
    double sends = l->pp == 1 ? 0 : (l->pp == 2 && v == 1 ? 1.0 : 2.0) * v;
    double pp_mb = cb_plan_coll_time(c, "p2p", 2, l->tp, sends * act, sends);
    double mb = 3 * fwd + rec + tp_mb + rec_tp + pp_mb;
    p->compute_s = 3 * fwd * l->M, p->recompute_s = rec * l->M;
    p->tp_s = (tp_mb + rec_tp) * l->M, p->pp_s = pp_mb * l->M;
    p->bubble_s = (l->pp - 1.0) / v * mb;
    p->tp_bytes = cb_plan_tp_sent(&p->tp) * l->M, p->tp_calls = cb_plan_tp_calls(&p->tp) * l->M;
    /* calls: cb_comm counts the matching receives too; + the step's loss,
     * one float broadcast from the last stage ((pp-1)/pp of it per rank) */
    p->pp_bytes = sends * act * l->M, p->pp_calls = 2 * sends * l->M;
    if (l->pp > 1) p->pp_bytes += (l->pp - 1.0) / l->pp * 4, p->pp_calls += 1;
    memory(j, l, tok, s, block_slot_bytes(j, l, rows), sends * act, p);
    data_parallel(j, l, 2 * fwd, p);
    p->opt_s = 28 * (p->mem_params / 4) / (l->zero ? l->dp : 1) / c->mem_bandwidth;
    p->step_s = mb * l->M + p->bubble_s + p->dp_exposed_s + p->opt_s;
}

void cb_plan_layout_name(const cb_plan_layout *l, char *buf, size_t cap) {
    snprintf(buf, cap, "dp%d pp%d tp%d %s", l->dp, l->pp, l->tp, cb_grid_mode_name(l->mode));
    size_t n = strlen(buf);
    if (l->pp > 1 && n < cap)
        snprintf(buf + n, cap - n, " %s", cb_plan_schedule_name(l->schedule));
    n = strlen(buf);
    if (l->schedule == CB_PLAN_INTERLEAVED && n < cap) snprintf(buf + n, cap - n, " v%d", l->v);
    n = strlen(buf);
    if ((l->pp > 1 || l->M > 1) && n < cap) snprintf(buf + n, cap - n, " M%d", l->M);
    n = strlen(buf);
    if (n < cap) snprintf(buf + n, cap - n, "%s%s", l->recompute ? " recompute" : "", l->zero ? " zero1" : "");
}

/* ------------------------------------------------------------ every layout */

typedef struct enum_ctx {
    const cb_plan_job *j;
    double max_mem;
    cb_plan_choice *out;
    int cap, n;
} enum_ctx;

static void consider(enum_ctx *x, const cb_plan_layout *l) {
    cb_err e;
    cb_plan_pred p;
    if (cb_plan_check(x->j, l, &e)) return;
    cb_plan_predict(x->j, l, &p);
    if (p.mem_total > x->max_mem) return;
    if (x->n < x->cap) x->out[x->n] = (cb_plan_choice){*l, p};
    x->n++;
}

/* schedules, micro-batches, recompute and ZeRO of one dp x pp x tp mode */
static void variants(enum_ctx *x, cb_plan_layout l, int fixed_M) {
    static const int SCHED[][2] = {{CB_PLAN_GPIPE, 1}, {CB_PLAN_1F1B, 1}, {CB_PLAN_INTERLEAVED, 2}};
    for (int s = 0; s < (l.pp > 1 ? 3 : 1); s++)
        for (int mf = 1; mf <= 8; mf *= 2) {
            l.schedule = SCHED[s][0], l.v = SCHED[s][1];
            l.M = fixed_M > 0 ? fixed_M : l.pp > 1 ? l.pp * mf : mf;
            if (fixed_M > 0 && mf > 1) break;
            for (l.recompute = 0; l.recompute <= 1; l.recompute++)
                for (l.zero = 0; l.zero <= (l.dp > 1); l.zero++) consider(x, &l);
        }
}

static int by_time(const void *a, const void *b) {
    double x = ((const cb_plan_choice *)a)->p.step_s, y = ((const cb_plan_choice *)b)->p.step_s;
    return (x > y) - (x < y);
}

/* Past cap the layouts are counted but not kept: the sort sees the first cap. */
int cb_plan_enumerate(const cb_plan_job *j, int devices, double max_mem, int fixed_M,
                      cb_plan_choice *out, int cap) {
    enum_ctx x = {j, max_mem > 0 ? max_mem : j->cluster->memory_bytes, out, cap, 0};
    for (int tp = 1; tp <= devices; tp++)
        for (int pp = 1; tp * pp <= devices; pp++) {
            if (devices % (tp * pp)) continue;
            for (int mode = CB_TP_1D; mode <= CB_TP_3D; mode++) {
                if ((tp == 1 && mode != CB_TP_1D) || cb_grid_side(tp, mode) < 1) continue;
                if (mode != CB_TP_1D && cb_grid_side(tp, mode) < 2) continue;
                cb_plan_layout l = {devices / (tp * pp), pp, tp, mode, CB_PLAN_GPIPE, 1, 1, 0, 0, 1};
                variants(&x, l, fixed_M);
            }
        }
    qsort(out, x.n < cap ? x.n : cap, sizeof *out, by_time);
    return x.n;
}
