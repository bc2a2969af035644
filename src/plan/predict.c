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

#include "kernels/kernels.h"
#include "layout/layout.h"
#include "pipeline/schedule.h"
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

/* The graph models: the dense embedding path; a stage per block at most;
 * under tensor parallelism the engine's own checks of the layout (batch,
 * heads, widths), by planning the first stage. */
static int graph_check(const cb_plan_job *j, const cb_plan_layout *l, cb_err *e) {
    const cb_plan_model *m = j->model;
    int v = l->schedule == CB_PLAN_INTERLEAVED ? l->v : 1;
    if (l->embed != CB_DP_EMBED_DENSE && (m->family == CB_PLAN_FAM_NCF || l->tp > 1 || l->pp > 1))
        return cb_fail(e, CB_EINPUT, "--model %s: --embed-grad sparse and split need a tied "
                       "embedding (bert, roberta, nmt) and --tp 1 --pp 1", m->name);
    if (m->gpt.n_layer < l->pp * v)
        return cb_fail(e, CB_EINPUT, "%d blocks cannot fill %d stages of %d chunks", m->gpt.n_layer,
                       l->pp, v);
    cb_plan_gstage g;
    return l->tp > 1 ? cb_plan_graph_stage(j, l, 0, NULL, 0, &g, e) : CB_OK;
}

int cb_plan_check(const cb_plan_job *j, const cb_plan_layout *l, cb_err *e) {
    const cb_gpt_config *g = &j->model->gpt;
    int q = side(l), mb = l->M > 0 ? j->batch / l->M : 0, v = l->schedule == CB_PLAN_INTERLEAVED ? l->v : 1;
    if (l->dp < 1 || l->pp < 1 || l->tp < 1 || l->M < 1 || v < 1 || q < 1)
        return cb_fail(e, CB_EINPUT, "layout sizes must be >= 1 and tp a square (2d) or cube (3d)");
    if (j->bf16 && cb_plan_cluster_bf16(j->cluster, NULL, e)) return CB_EINPUT;
    if (j->batch % l->M || mb % l->dp)
        return cb_fail(e, CB_EINPUT, "batch %d does not split into %d micro-batches of dp %d rows",
                       j->batch, l->M, l->dp);
    if (j->model->family != CB_PLAN_FAM_GPT) return graph_check(j, l, e);
    int rows = mb / l->dp, rq = l->mode == CB_TP_3D ? q * q : l->mode == CB_TP_2D ? q : 1;
    if (rows % rq || g->n_head % (l->mode == CB_TP_1D ? l->tp : q) ||
        g->d_model % (l->mode == CB_TP_3D ? q * q : q))
        return cb_fail(e, CB_EINPUT, "tp %d %s does not divide rows %d, heads %d or d-model %d",
                       l->tp, cb_grid_mode_name(l->mode), rows, g->n_head, g->d_model);
    if (l->embed != CB_DP_EMBED_DENSE && (l->tp > 1 || l->pp > 1))
        return cb_fail(e, CB_EINPUT, "--embed-grad sparse and split need --tp 1 --pp 1");
    if (g->n_layer < l->pp * v)
        return cb_fail(e, CB_EINPUT, "%d layers cannot fill %d stages of %d chunks", g->n_layer,
                       l->pp, v);
    return CB_OK;
}

/* ------------------------------------------------------------ compute */

/* Seconds of one forward GEMM (m, k) @ (k, n), `calls` times. */
static double gemm_s(const cb_plan_cluster *c, double m, double k, double n, double calls) {
    return calls * 2 * m * k * n / (c->peak_flops * cb_plan_gemm_eff_at(c, m, k, n));
}

/* Forward seconds of one layer on this rank for `tok` tokens of its tensor
 * group, by kernel class (GEMM, attention, memory-bound): 1-D splits each
 * GEMM's output (or input) P ways; 2-D runs q SUMMA steps of (tok/q, in/q,
 * out/q); 3-D one GEMM of (tok/q, in/q, out/q). */
cb_plan_kparts cb_plan_layer_parts(const cb_plan_cluster *c, const cb_plan_layer *y,
                                   const cb_plan_layout *l, double tok) {
    double q = side(l), P = l->tp;
    cb_plan_kparts k = {0, 0, 0};
    for (int i = 0; i < y->ngemm; i++) {
        double in = y->gemm[i].in, out = y->gemm[i].out;
        if (l->mode == CB_TP_1D)
            k.gemm_s += gemm_s(c, tok, in, out / P, 1);
        else if (l->mode == CB_TP_2D)
            k.gemm_s += gemm_s(c, tok / q, in / q, out / q, q);
        else
            k.gemm_s += gemm_s(c, tok / q, in / q, out / q, 1);
    }
    if (y->attn_flops > 0)
        k.attn_s =
            y->attn_flops * tok / P / (c->peak_flops * cb_plan_attn_eff(c, y->head_size, y->seq));
    double norm = l->mode == CB_TP_1D ? y->mem_norm : y->mem_norm / P, ew = 0;
    for (int i = 0; i < CB_PLAN_NEW; i++) /* forward's third of forward + backward */
        ew += y->ew[i] * (c->ew_s[i] > 0 ? c->ew_s[i] / 3 : 8 / c->mem_bandwidth);
    k.mem_s = (y->mem_bytes / P + norm) * tok / c->mem_bandwidth + ew * tok / P;
    return k;
}

static double layer_fwd_s(const cb_plan_cluster *c, const cb_plan_layer *y, const cb_plan_layout *l,
                          double tok) {
    cb_plan_kparts k = cb_plan_layer_parts(c, y, l, tok);
    return k.gemm_s + k.attn_s + k.mem_s;
}

/* ------------------------------------------------------------ pipeline stages */

/* The slowest chunk of a pipeline: its blocks, whether it holds the
 * embedding / the head, and its forward seconds. */
typedef struct stage {
    int blocks, embed, head;
    double fwd_s;
    cb_plan_kparts k; /* fwd_s by kernel class */
    int nbound;       /* chunk c holds items [bound[c], bound[c+1]); 0: not kept */
    int bound[CB_PLAN_MAXSTAGE + 1];
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
    stage w = {0, 0, 0, -1, {0, 0, 0}, parts + 1, {0}};
    int bound[CB_PLAN_MAXSTAGE + 1];
    bound[parts] = n;
    for (int k = parts, i = n; k >= 1; k--) {
        int a = cut[k][i];
        double s = 0;
        for (int x = a; x < i; x++) s += item[x];
        if (s > w.fwd_s) {
            w.blocks = 0, w.embed = a == 0, w.head = i == n, w.fwd_s = s;
            for (int x = a; x < i; x++) w.blocks += x > 0 && x < n - 1;
        }
        bound[k - 1] = i = a;
    }
    memcpy(w.bound, bound, sizeof(int) * (size_t)(parts + 1));
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
    if (blk->count > L) /* the split is of 128 blocks: no stage boundaries */
        s.blocks = s.blocks * blk->count / L, s.fwd_s *= (double)blk->count / L, s.nbound = 0;
    const cb_plan_layer *ly[3] = {emb, blk, head};
    double n[3] = {s.embed, s.blocks, s.head};
    for (int i = 0; i < 3; i++) {
        cb_plan_kparts k = cb_plan_layer_parts(j->cluster, ly[i], l, tok);
        s.k.gemm_s += n[i] * k.gemm_s, s.k.attn_s += n[i] * k.attn_s, s.k.mem_s += n[i] * k.mem_s;
    }
    return s;
}

/* ------------------------------------------------------------ the step */

/* The exact tensor counts of a stage: the whole-model formulas at the
 * stage's blocks, less the embedding/head terms when it holds neither. */
static void stage_counts(const cb_plan_job *j, const cb_plan_layout *l, int rows, stage s,
                         cb_plan_tp_cost *c) {
    const cb_gpt_config *g = &j->model->gpt;
    cb_plan_shape sh = {
        (double)rows * j->T, rows,   j->T, g->d_model, g->n_head, g->vocab, s.blocks,
        j->comm_bf16,        j->bf16};
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
    cb_plan_shape sh = {(double)rows * j->T, rows,   j->T, g->d_model, g->n_head, g->vocab, 1,
                        j->comm_bf16,        j->bf16};
    cb_plan_tp_cost one, none;
    cb_plan_tp_cost_of(&sh, l->mode, l->tp, side(l) == 1, l->gathered, &one);
    sh.L = 0;
    cb_plan_tp_cost_of(&sh, l->mode, l->tp, side(l) == 1, l->gathered, &none);
    return one.act_slot_bytes - none.act_slot_bytes;
}

/* Tensor communication seconds of one micro-batch, per group: 1-D one
 * all-reduce group; 2-D rows and columns (SUMMA broadcasts, half each);
 * 3-D the three lines, `wsent` of the bytes on WEIGHT, the rest on INPUT
 * and OUTPUT alike. */
static double tp_groups_s(const cb_plan_cluster *c, const cb_plan_layout *l, double sent,
                          double calls, double wsent) {
    int q = side(l);
    if (l->tp == 1) return 0;
    if (l->mode == CB_TP_1D) return cb_plan_coll_time(c, "allreduce", l->tp, 1, sent, calls);
    if (l->mode == CB_TP_2D)
        return cb_plan_coll_time(c, "bcast", q, 1, sent / 2, calls / 2) +
               cb_plan_coll_time(c, "bcast", q, q, sent / 2, calls / 2);
    double rest = sent - wsent;
    return cb_plan_coll_time(c, "allgather", q, 1, rest / 2, calls / 3) +
           cb_plan_coll_time(c, "allgather", q, q, rest / 2, calls / 3) +
           cb_plan_coll_time(c, "allgather", q, q * q, wsent, calls / 3);
}

/* A GPT's: the weights' share of the 3-D linears 12C^2 of 16NC + 12C^2. */
static double tp_time(const cb_plan_cluster *c, const cb_plan_layout *l, const cb_plan_tp_cost *t,
                      double N, double C) {
    double w = t->sent[CB_PK_LINEAR] * 12 * C * C / (16 * N * C + 12 * C * C);
    return tp_groups_s(c, l, cb_plan_tp_sent(t), cb_plan_tp_calls(t), w);
}

static double in_flight(const cb_plan_layout *l) {
    if (l->pp == 1) return 1;
    if (l->schedule == CB_PLAN_GPIPE) return l->M;
    double f = minf(l->M, l->pp);
    return l->schedule == CB_PLAN_INTERLEAVED ? f * (1 + (l->pp - 1.0) / (l->pp * l->v)) : f;
}

/* --precision bf16: the bf16 table keeps a copy (2 bytes a float) of
 * each weight a product reads from the parameters, made once per update:
 * every weight on one rank, the rank's shard under 1-D; 2-D and 3-D
 * products read broadcast or gathered panels, rounded at each call, and
 * keep none (src/kernels/bf16.c; the log's bf16_copies_bytes, checked in
 * tests/test_plan.sh). weights: the floats of the stage's product
 * weights, whole (1-D's share of a padded vocabulary is the caller's). */
static int own_weights(const cb_plan_layout *l) { return l->tp == 1 || l->mode == CB_TP_1D; }

static double bf16_copies(const cb_plan_job *j, const cb_plan_layout *l, double weights) {
    if (!j->bf16 || !own_weights(l)) return 0;
    return 2 * weights / l->tp;
}

/* The largest of the k row chunks [n c / k, n (c + 1) / k) of n rows (the
 * 2-D layout's products between its MPI progress calls) */
static int max_chunk(int n, int k) {
    int most = 0;
    for (int c = 0; c < k; c++) {
        int r = (int)((int64_t)n * (c + 1) / k - (int64_t)n * c / k);
        most = r > most ? r : most;
    }
    return most;
}

/* A 2-D or 3-D product's rows on a rank, N/q, and into *ch those of one
 * call: 2-D runs its forward and dX products in CB_OVERLAP_CHUNKS chunks
 * of them between MPI progress calls, 3-D on all it gathers at once */
static int grid_rows(const cb_plan_layout *l, int N, int *ch) {
    int n = N / side(l);
    *ch = l->mode == CB_TP_3D ? n : max_chunk(n, CB_OVERLAP_CHUNKS);
    return n;
}

/* The share of the tokens in a rank's block of an activation: all on one
 * rank and 1-D, 1/q under 2-D, 1/q^2 under 3-D */
static int block_div(const cb_plan_layout *l) {
    int q = own_weights(l) ? 1 : side(l);
    return l->mode == CB_TP_3D ? q * q : q;
}

/* The rows of a 2-D or 3-D rank's accumulating dW products (each of
 * CB_OVERLAP_CHUNKS chunks of its a rows; cb_layout_dw_overlapped), 0
 * where none accumulates: 2-D's owner of the panel adds into the gradient
 * from the second micro-batch on, 3-D always writes a scratch that it
 * reduce-scatters */
static int grid_acc_rows(const cb_plan_layout *l, int a) {
    return l->mode == CB_TP_2D && l->M > 1 ? max_chunk(a, CB_OVERLAP_CHUNKS) : 0;
}

/* --precision bf16: what the bf16 table holds for one operation of a
 * rank beside the weights' plain copies (bf16_copies): the operands it
 * stages (need[], the slots' maxima: each scratch slot grows to the
 * largest operand it holds) and, on CPUs without AMX, the copies of the
 * weights in oneDNN's own layout (*packed, bytes); the table says what
 * each call stages and keeps (cb_kernels_bf16_need_*, _packed). One rank
 * and 1-D read their own weights: 1-D splits a linear on a parity-0 input
 * by its columns, on parity 1 by its rows (its bias added after the sum,
 * outside the product). 2-D and 3-D stage every weight panel they
 * receive and keep no copy (grid_rows; src/layout/tp1d.c, tp2d.c,
 * tp3d.c). */
void cb_plan_bf16_linear(const cb_plan_layout *l, int nthr, double *need, double *packed, int N,
                         int in, int out, int parity) {
    int P = l->tp;
    if (own_weights(l)) {
        int row = P > 1 && parity == 1, i = row ? in / P : in, o = row ? out : out / P;
        cb_kernels_bf16_need_linear(need, N, i, o, 1, l->M > 1);
        *packed += cb_kernels_bf16_linear_packed(nthr, l->M, N, i, o, !row);
        return;
    }
    int q = side(l), ch, n = grid_rows(l, N, &ch);
    cb_kernels_bf16_need_product(need, ch, in / q, out / q, 0);
    cb_kernels_bf16_need_product(need, ch, out / q, in / q, 0); /* dX = dY W^T: head_forward */
    cb_kernels_bf16_need_dw_rows(need, n, in / q, out / q, grid_acc_rows(l, in / q));
}

double cb_plan_bf16_head_weights(const cb_plan_layout *l, int V, int C) {
    return cb_plan_pad(V, l->mode == CB_TP_1D ? l->tp : 1) * C;
}

/* the tied head on N rows: logits = x wte^T, dX = dlogits wte, dwte =
 * dlogits^T x, over the rank's share of the padded vocabulary */
void cb_plan_bf16_head(const cb_plan_layout *l, int nthr, double *need, double *packed, int N,
                       int C, int V) {
    if (own_weights(l)) {
        int Vl = (int)cb_plan_pad(V, l->tp) / l->tp;
        cb_kernels_bf16_need_head(need, N, C, Vl, 1, l->M > 1);
        *packed += cb_kernels_bf16_head_packed(nthr, l->M, N, C, Vl);
        return;
    }
    int q = side(l), ch, n = grid_rows(l, N, &ch), c = C / q;
    int Vq = (int)cb_plan_pad(V, l->mode == CB_TP_3D ? q * q : q) / q;
    cb_kernels_bf16_need_product(need, ch, c, Vq, 0);
    cb_kernels_bf16_need_product(need, ch, Vq, c, 0);
    cb_kernels_bf16_need_dw_rows(need, n, Vq, c, grid_acc_rows(l, Vq));
}

/* attention a on N = a->B a->Tq tokens, as the rank runs it: its heads
 * on the tokens of its block */
void cb_plan_bf16_attention(const cb_plan_layout *l, int nthr, double *need, cb_attn a) {
    int f = own_weights(l) ? l->tp : side(l);
    a.B /= block_div(l), a.C /= f, a.NH /= f;
    cb_kernels_bf16_need_attention(need, &a, nthr);
}

/* The logistic head (NCF) on N rows: its weight, a vector of C that every
 * layout reads in place (so kept, plain copy included in *packed), dotted
 * with each row of the rank's block forward, its outer product with the
 * rows' gradient backward (src/layout/rec.c); the block's features: all
 * under 1-D on a parity-0 input, else the rank's share */
void cb_plan_bf16_logit(const cb_plan_layout *l, double *need, double *packed, int N, int C,
                        int parity) {
    int rows = N / block_div(l);
    int cols = !own_weights(l) ? C / side(l) : l->tp > 1 && parity == 1 ? C / l->tp : C;
    cb_kernels_bf16_need_product(need, rows, cols, 1, 1);
    cb_kernels_bf16_need_product(need, rows, 1, cols, 1);
    cb_kernels_bf16_need_dw_rows(need, rows, cols, 1, cols); /* accumulates into cleared dw */
    *packed += 2.0 * cols;
}

/* A GPT stage's: a block's four linears and attention, the head */
static double bf16_held(const cb_plan_job *j, const cb_plan_layout *l, int rows, int blocks,
                        int head, double *packed_out) {
    *packed_out = 0;
    if (!j->bf16) return 0;
    const cb_gpt_config *g = &j->model->gpt;
    int N = rows * j->T, C = g->d_model, nt = j->cluster->threads;
    double need[CB_BF16_SLOTS] = {0}, block = 0, packed = 0;
    if (blocks > 0) {
        cb_plan_bf16_linear(l, nt, need, &block, N, C, 3 * C, 0);
        cb_plan_bf16_linear(l, nt, need, &block, N, C, C, 1);
        cb_plan_bf16_linear(l, nt, need, &block, N, C, 4 * C, 0);
        cb_plan_bf16_linear(l, nt, need, &block, N, 4 * C, C, 1);
        cb_plan_bf16_attention(l, nt, need, cb_attn_self(rows, j->T, C, g->n_head, 1, NULL));
    }
    if (head) cb_plan_bf16_head(l, nt, need, &packed, N, C, g->vocab);
    *packed_out = blocks * block + packed;
    return cb_kernels_bf16_need_bytes(need) + blocks * block + packed;
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
    const cb_gpt_config *g = &j->model->gpt;
    int rows = (int)(tok / j->T);
    double head = s.head ? cb_plan_bf16_head_weights(l, g->vocab, C) : 0;
    p->mem_bf16 = bf16_copies(j, l, head + s.blocks * 12 * C * C) +
                  bf16_held(j, l, rows, s.blocks, s.head, &p->bf16_packed);
    p->mem_total = p->mem_params + p->mem_grads + p->mem_opt + p->mem_act + p->mem_scratch +
                   p->mem_comm + p->mem_bf16;
}

/* The tied embedding's exchange under --embed-grad sparse or split
 * (src/dp/dp.c), for S = the local tokens of a step and V rows, C wide:
 * sparse all-gathers S + V (index, row) slices; split all-gathers its S'
 * = min(S, V) token ids and all-reduces the rows of the group's union of
 * tokens, at most U = min(V, p S') (the figure taken: exact when the
 * tokens cover the vocabulary or no two ranks share one). Both after
 * backward, exposed. Bytes sent, calls, seconds and buffer bytes. */
typedef struct embed_x {
    double bytes, calls, s, buf;
} embed_x;

static embed_x embed_exchange(const cb_plan_job *j, const cb_plan_layout *l, double S) {
    double p = l->dp, V = j->model->gpt.vocab, C = j->model->gpt.d_model;
    embed_x x = {0, 0, 0, 0};
    const cb_plan_cluster *c = j->cluster;
    if (l->embed == CB_DP_EMBED_SPARSE) {
        double n = S + V, ids = (p - 1) * 4 * n, rows = (p - 1) * 4 * n * C;
        x.bytes = ids + rows, x.calls = 2, x.buf = (p + 1) * n * (4 + 4 * C);
        x.s = cb_plan_coll_time(c, "allgather", l->dp, 1, ids, 1) +
              cb_plan_coll_time(c, "allgather", l->dp, 1, rows, 1);
    } else if (l->embed == CB_DP_EMBED_SPLIT) {
        double u = minf(S, V), U = minf(V, p * u), ids = (p - 1) * 4 * u;
        double rows = cb_plan_ring_allreduce(p, 4 * U * C);
        x.bytes = ids + rows, x.calls = 2;
        x.buf = 8 * V + 4 * u * (1 + p) + 4 * (u + U) * C;
        x.s = cb_plan_coll_time(c, "allgather", l->dp, 1, ids, 1) +
              cb_plan_coll_time(c, "allreduce", l->dp, 1, rows, 1);
    }
    return x;
}

/* Fusion buckets of `per` floats over n gradient floats (src/dp/dp.c's
 * plan): the dense path one run over all; sparse one over all but wte;
 * split wte's own, wpe's own and the rest. */
static double buckets(const cb_plan_job *j, const cb_plan_layout *l, double n) {
    const cb_gpt_config *g = &j->model->gpt;
    double per = (double)cb_dp_bucket_floats(j->bucket_bytes / 1e6);
    double wte = (double)g->vocab * g->d_model, wpe = (double)g->seq_len * g->d_model;
    if (l->embed == CB_DP_EMBED_SPARSE) return ceil((n - wte) / per);
    if (l->embed == CB_DP_EMBED_SPLIT)
        return ceil(wte / per) + ceil(wpe / per) + ceil((n - wte - wpe) / per);
    return ceil(n / per);
}

/* The graph engine's plan of every pipeline stage (src/graph/build.c, one
 * chunk per stage): the schedule's micro-batches in flight on the stage x
 * its slot, its blocks' gradient buffers, the shared recompute region and
 * a message buffer per micro-batch and boundary. A slot holds the received
 * value and its gradient (stages after the first), the embedding's output,
 * every block's values and kept state, and the head's (ln_f, logits,
 * losses); each region one float over. */
static double stage_act(const cb_plan_job *j, const cb_plan_layout *l, int rows, const stage *w,
                        int s, double blk) {
    const cb_gpt_config *g = &j->model->gpt;
    double act = 4.0 * rows * j->T * g->d_model / (l->mode == CB_TP_1D ? 1 : l->tp);
    int a = w->bound[s], b = w->bound[s + 1], n = w->bound[l->pp], nb = 0;
    for (int x = a; x < b; x++) nb += x > 0 && x < n - 1;
    cb_plan_shape sh = {(double)rows * j->T, rows,   j->T, g->d_model, g->n_head, g->vocab, nb,
                        j->comm_bf16,        j->bf16};
    cb_plan_tp_cost mine, none;
    cb_plan_tp_cost_of(&sh, l->mode, l->tp, side(l) == 1, l->gathered, &mine);
    sh.L = 0;
    cb_plan_tp_cost_of(&sh, l->mode, l->tp, side(l) == 1, l->gathered, &none);
    double head = none.act_slot_bytes - 4 - act; /* ln_f, logits, losses */
    double slot = (a == 0 ? act : 0) + nb * blk + (b == n ? head : 0) + (s > 0 ? 2 * act : 0) + 4;
    double shared = 4;
    if (l->recompute && nb > 0) slot -= nb * (blk - act), shared += blk - act;
    int flight = cb_pp_inflight_bound(l->schedule == CB_PLAN_GPIPE ? CB_PP_GPIPE : CB_PP_1F1B,
                                      l->pp, 1, l->M, s);
    return flight * slot + mine.act_grad_bytes + shared + l->M * act * ((s > 0) + (s < l->pp - 1));
}

/* Per stage, when the pipeline has one chunk per stage; mem_act the largest. */
static void stages_memory(const cb_plan_job *j, const cb_plan_layout *l, int rows, const stage *w,
                          double blk, cb_plan_pred *p) {
    if (l->pp == 1 || l->schedule == CB_PLAN_INTERLEAVED || w->nbound != l->pp + 1) return;
    double most = 0;
    p->nstage = l->pp;
    for (int s = 0; s <= l->pp; s++) p->stage_bound[s] = w->bound[s];
    for (int s = 0; s < l->pp; s++) {
        p->stage_act[s] = stage_act(j, l, rows, w, s, blk);
        most = maxf(most, p->stage_act[s]);
    }
    p->mem_total += most - p->mem_act;
    p->mem_act = most;
}

/* Data parallelism: the gradients of the stage, ring all-reduced in
 * buckets (ZeRO-1: reduce-scatter, the parameters all-gathered after the
 * update: the same volume), overlapped with the last micro-batch's
 * backward except the last bucket; the embedding paths' exchange after
 * backward; the step's loss, one float all-reduced (src/graph/exec.c).
 * With --comm-dtype bf16 the buckets (all-reduce, or ZeRO's reduce-scatter)
 * send 2 bytes an element; ZeRO's parameter all-gather stays fp32. */
static void data_parallel(const cb_plan_job *j, const cb_plan_layout *l, double bwd_s, double S,
                          cb_plan_pred *p) {
    if (l->dp == 1) return;
    double n = p->mem_grads / 4, nb = buckets(j, l, n);
    const cb_gpt_config *g = &j->model->gpt;
    double wte = l->embed == CB_DP_EMBED_SPARSE ? (double)g->vocab * g->d_model : 0;
    embed_x x = embed_exchange(j, l, S);
    /* ZeRO-1, as cb_comm counts rank 0: the buckets' reduce-scatter sends
     * all but its own shard [0, n/dp) of [wte, n), the parameters'
     * all-gather all but that shard of n */
    double own = floor(n / l->dp);
    double e = j->comm_bf16 ? 2 : 4; /* bytes of a bucket's element as sent */
    double ring = l->zero ? e * ((n - wte) - maxf(0, own - wte)) + 4 * (n - own)
                          : cb_plan_ring_allreduce(l->dp, e * (n - wte));
    p->dp_bytes = ring + x.bytes + cb_plan_ring_allreduce(l->dp, 4);
    p->dp_calls = nb + (l->zero ? 1 : 0) + x.calls + 1;
    double buckets_s =
        cb_plan_coll_time(j->cluster, "allreduce", l->dp, l->tp * l->pp, ring, nb + l->zero);
    /* A cluster that timed the non-blocking all-reduce as the buckets run
     * it (cubist's calibration of CPU ranks): its rate, and no overlap.
     * On CPUs it advances only inside MPI calls, made between operators,
     * and its reduction takes the cores backward runs on; 2 ranks here
     * spent 6-15 ms a step in communication where the all-reduce alone
     * takes 4-5 (L 2, C 512: 26 MB), 35-60 when they drifted apart
     * (docs/plan.md, Limits). */
    const cb_plan_coll *ia = measured(j->cluster, "iallreduce", l->dp);
    if (ia && !l->zero) buckets_s = nb * ia->alpha + ring / ia->beta;
    p->dp_s = buckets_s + x.s;
    p->dp_exposed_s = (ia && !l->zero ? buckets_s : maxf(buckets_s / nb, buckets_s - bwd_s)) + x.s;
    p->mem_comm += x.buf;
    p->mem_total += x.buf;
}

/* the update's rate: calibrated, else the memory-bound kernels' */
static double update_bw(const cb_plan_cluster *c) {
    return c->update_bandwidth > 0 ? c->update_bandwidth : c->mem_bandwidth;
}

/* The update's memory traffic per parameter (src/graph/exec.c): the
 * gradients of the zeroed floats cleared when the step starts (4 bytes
 * written; the engine overwrites every other gradient at its first write,
 * docs/engine.md), the squared norm (4 read; one process reads it in
 * backward, in cache), AdamW (p, g, m, v read, p, m, v written: 28) and
 * under data parallelism the averaging scale (8); ZeRO-1 shards all but
 * the clearing. Clipping's scale (8 more) runs only when the norm exceeds
 * the clip: not counted. */
static double optimizer_s(const cb_plan_cluster *c, const cb_plan_layout *l, double params,
                          double zeroed) {
    double shard = params / (l->zero ? l->dp : 1), rate = update_bw(c);
    /* one process takes each gradient's norm in backward, in cache: not here */
    double norm = l->dp * l->pp * l->tp > 1 ? 4 : 0;
    return (4 * zeroed + (norm + 28 + (l->dp > 1 ? 8 : 0)) * shard) / rate;
}

/* The bf16 table's copies of the weights in oneDNN's layout (CPUs
 * without AMX; `packed` bytes) go stale at every update and are written
 * again at their first read after it: the plain bf16 copy read, the
 * layout's written, at the calibrated reorder rate (oneDNN's reorder runs
 * at a fraction of the update's streaming rate: a third to a fifth of it here), else the
 * update's. The calibration's GEMM probe pays it once, not per step
 * (docs/plan.md). */
static double reorder_s(const cb_plan_cluster *c, double packed) {
    return 2 * packed / (c->reorder_bandwidth > 0 ? c->reorder_bandwidth : update_bw(c));
}

/* Interleaved GPT pipelines on one tensor rank: every stage's
 * activations as the engine plans them (several chunks per rank, the
 * partition auto from FLOP counts, as `cubist train --no-profile`). */
static void interleaved_memory(const cb_plan_job *j, const cb_plan_layout *l, cb_plan_pred *p) {
    if (l->pp == 1 || l->schedule != CB_PLAN_INTERLEAVED || l->tp > 1 || l->pp > CB_PLAN_MAXSTAGE)
        return;
    double most = 0;
    for (int s = 0; s < l->pp; s++) {
        cb_plan_gstage g;
        cb_err e;
        if (cb_plan_graph_stage(j, l, s, NULL, 0, &g, &e)) return;
        p->stage_act[s] = g.act, most = maxf(most, g.act);
    }
    p->nstage = l->pp, p->stage_bound[l->pp] = -1; /* the engine's partition: not listed */
    p->mem_total += most - p->mem_act;
    p->mem_act = most;
}

static void data_parallel(const cb_plan_job *j, const cb_plan_layout *l, double bwd_s, double S,
                          cb_plan_pred *p);
static double optimizer_s(const cb_plan_cluster *c, const cb_plan_layout *l, double params,
                          double zeroed);

/* A model from its graph (src/plan/graph.c): each pipeline rank planned
 * by the engine; the device is the rank of most memory, the pace the rank
 * of most forward work per micro-batch. */
static void graph_predict(const cb_plan_job *j, const cb_plan_layout *l, cb_plan_pred *p) {
    const cb_plan_cluster *c = j->cluster;
    int rows = j->batch / l->M / l->dp, v = l->schedule == CB_PLAN_INTERLEAVED ? l->v : 1;
    double tok = (double)rows * j->T, fwd = -1, mem = -1, sendf = 0, msgs = 0;
    cb_plan_gstage w = {0}, big = {0};
    char part[4096] = "";
    for (int s = 0; s < l->pp && s < CB_PLAN_MAXSTAGE; s++) {
        cb_plan_gstage g;
        cb_err e;
        if (cb_plan_graph_stage(j, l, s, part, sizeof part, &g, &e)) { /* never chosen */
            p->step_s = p->mem_total = 1e300;
            return;
        }
        double f = g.k.gemm_s + g.k.attn_s + g.k.mem_s, m = 16 * g.params + g.act + g.ws +
                                                            bf16_copies(j, l, g.bf16_weights) +
                                                            g.bf16_staging;
        if (f > fwd) fwd = f, w = g;
        if (m > mem) mem = m, big = g;
        sendf = maxf(sendf, g.send_floats), msgs = maxf(msgs, g.msgs);
        p->stage_act[s] = g.act;
        if (l->tp > 1 && l->pp > 1)
            p->stage_tp_bytes[s] = g.tp_sent * l->M, p->stage_tp_calls[s] = g.tp_calls * l->M;
    }
    if (l->pp > 1) p->nstage = l->pp, p->stage_bound[l->pp] = -1;
    double tp_mb = tp_groups_s(c, l, w.tp_sent, w.tp_calls, w.tp_sent / 3);
    double rec = l->recompute ? fwd : 0, rec_tp = l->recompute ? tp_mb / 2 : 0;
    double pp_mb = cb_plan_coll_time(c, "p2p", 2, l->tp, 4 * sendf, msgs);
    double mb = 3 * fwd + rec + tp_mb + rec_tp + pp_mb;
    p->compute_s = 3 * fwd * l->M, p->recompute_s = rec * l->M;
    p->kern = (cb_plan_kparts){3 * l->M * w.k.gemm_s, 3 * l->M * w.k.attn_s, 3 * l->M * w.k.mem_s};
    p->tp_s = (tp_mb + rec_tp) * l->M, p->pp_s = pp_mb * l->M;
    p->bubble_s = (l->pp - 1.0) / v * mb;
    p->tp_bytes = w.tp_sent * l->M, p->tp_calls = w.tp_calls * l->M;
    p->pp_bytes = 4 * sendf * l->M, p->pp_calls = 2 * msgs * l->M;
    if (l->pp > 1) p->pp_bytes += (l->pp - 1.0) / l->pp * 4, p->pp_calls += 1;
    p->mem_params = p->mem_grads = 4 * big.params;
    p->mem_opt = 8 * big.params / (l->zero ? l->dp : 1);
    p->mem_act = big.act, p->mem_scratch = big.ws;
    p->mem_comm = l->dp > 1 ? minf(j->bucket_bytes, p->mem_grads) : 0;
    p->mem_bf16 = bf16_copies(j, l, big.bf16_weights) + big.bf16_staging;
    p->mem_total = p->mem_params + p->mem_grads + p->mem_opt + p->mem_act + p->mem_scratch +
                   p->mem_comm + p->mem_bf16;
    p->tp.param_bytes = 8 * big.params;
    data_parallel(j, l, 2 * fwd, w.lookups * tok * l->M, p); /* every lookup's rows */
    for (int k = 0; k < 2 && l->dp > 1; k++)
        if (w.stat_bytes[k] > 0)
            p->dp_bytes += cb_plan_ring_allreduce(l->dp, w.stat_bytes[k]), p->dp_calls += 1;
    p->opt_s = optimizer_s(c, l, big.params, big.zeroed);
    p->bf16_packed = big.bf16_packed, p->pack_s = reorder_s(c, w.bf16_packed);
    p->step_s = mb * l->M + p->bubble_s + p->dp_exposed_s + p->opt_s + p->pack_s;
}

static void predict_at(const cb_plan_job *j, const cb_plan_layout *l, cb_plan_pred *p) {
    const cb_plan_cluster *c = j->cluster;
    if (j->model->family != CB_PLAN_FAM_GPT) {
        memset(p, 0, sizeof *p);
        graph_predict(j, l, p);
        return;
    }
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
    p->kern = (cb_plan_kparts){3 * v * l->M * s.k.gemm_s, 3 * v * l->M * s.k.attn_s,
                               3 * v * l->M * s.k.mem_s};
    p->tp_s = (tp_mb + rec_tp) * l->M, p->pp_s = pp_mb * l->M;
    p->bubble_s = (l->pp - 1.0) / v * mb;
    p->tp_bytes = cb_plan_tp_sent(&p->tp) * l->M, p->tp_calls = cb_plan_tp_calls(&p->tp) * l->M;
    /* calls: cb_comm counts the matching receives too; + the step's loss,
     * one float broadcast from the last stage ((pp-1)/pp of it per rank) */
    p->pp_bytes = sends * act * l->M, p->pp_calls = 2 * sends * l->M;
    if (l->pp > 1) p->pp_bytes += (l->pp - 1.0) / l->pp * 4, p->pp_calls += 1;
    memory(j, l, tok, s, block_slot_bytes(j, l, rows), sends * act, p);
    stages_memory(j, l, rows, &s, block_slot_bytes(j, l, rows), p);
    interleaved_memory(j, l, p);
    data_parallel(j, l, 2 * fwd, tok * l->M, p);
    /* GPT's one cleared gradient is wpe's (the head writes all of wte
     * before the lookup adds its rows), on the first stage: whole under
     * 1-D, a 1/tp share under 2-D and 3-D */
    double wpe = (double)j->model->gpt.seq_len * C / (l->mode == CB_TP_1D ? 1 : l->tp);
    p->opt_s = optimizer_s(c, l, p->mem_params / 4, wpe);
    p->pack_s = reorder_s(c, p->bf16_packed);
    p->step_s = mb * l->M + p->bubble_s + p->dp_exposed_s + p->opt_s + p->pack_s;
}

/* A node's ranks (min(world, devices per node)) each with a working set of
 * ws bytes: all of them in the last-level cache, the in-cache rate; else
 * from memory, each rank at most its rate alone and together at most
 * what the node delivers with every device streaming (devices per node x
 * the shared rate). */
static double rate_of(const cb_plan_cluster *c, const cb_plan_layout *l, double ws, double alone,
                      double shared) {
    double world = (double)l->dp * l->pp * l->tp, dpn = c->devices_per_node;
    double ranks = minf(world, dpn);
    if (c->cache_bytes > 0 && ranks * ws <= c->cache_bytes)
        return alone * c->cache_bandwidth / c->mem_bandwidth;
    if (shared <= 0 || ranks <= 1) return alone;
    return minf(alone, dpn * shared / ranks);
}

double cb_plan_mem_rate(const cb_plan_cluster *c, const cb_plan_layout *l, double ws) {
    return rate_of(c, l, ws, c->mem_bandwidth, c->mem_bandwidth_shared);
}

double cb_plan_update_rate(const cb_plan_cluster *c, const cb_plan_layout *l, double ws) {
    if (c->update_bandwidth <= 0) return cb_plan_mem_rate(c, l, ws);
    return rate_of(c, l, ws, c->update_bandwidth, c->update_bandwidth_shared);
}

/* The compute rate a rank gets: its rate alone, times the GEMM's shared
 * share when the node runs more than one rank (calibrated with one thread
 * a device; docs/plan.md, Compute shared). */
static double compute_share(const cb_plan_cluster *c, const cb_plan_layout *l) {
    double world = (double)l->dp * l->pp * l->tp;
    return c->gemm_shared > 0 && minf(world, c->devices_per_node) > 1 ? c->gemm_shared : 1;
}

/* The compute at the rank's shared rate; the memory-bound kernels and the
 * update at the bandwidth the layout's working set (the device's memory,
 * every byte of which a step touches) gets: predicted once for the
 * memory, again at that rate. */
void cb_plan_predict(const cb_plan_job *j, const cb_plan_layout *l, cb_plan_pred *p) {
    cb_plan_cluster c = *j->cluster;
    cb_plan_job at = *j;
    cb_err e;
    if (j->bf16 && cb_plan_cluster_bf16(j->cluster, &c, &e)) { /* cb_plan_check refuses it */
        memset(p, 0, sizeof *p);
        p->step_s = p->mem_total = 1e300;
        return;
    }
    c.peak_flops *= compute_share(&c, l), at.cluster = &c;
    predict_at(&at, l, p);
    double rate = cb_plan_mem_rate(&c, l, p->mem_total);
    double upd = cb_plan_update_rate(&c, l, p->mem_total);
    if (!(p->mem_total < 1e300) ||
        (rate == c.mem_bandwidth &&
         upd == (c.update_bandwidth > 0 ? c.update_bandwidth : c.mem_bandwidth)))
        return;
    c.mem_bandwidth = rate, c.update_bandwidth = upd;
    predict_at(&at, l, p);
}

const char *cb_plan_embed_name(int embed) {
    return embed == CB_DP_EMBED_SPARSE ? "sparse" : embed == CB_DP_EMBED_SPLIT ? "split" : "dense";
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
    n = strlen(buf);
    if (l->embed != CB_DP_EMBED_DENSE && n < cap)
        snprintf(buf + n, cap - n, " %s", cb_plan_embed_name(l->embed));
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
                cb_plan_layout l = {
                    devices / (tp * pp), pp, tp, mode, CB_PLAN_GPIPE, 1, 1, 0, 0, 1, 0};
                variants(&x, l, fixed_M);
            }
        }
    qsort(out, x.n < cap ? x.n : cap, sizeof *out, by_time);
    return x.n;
}
