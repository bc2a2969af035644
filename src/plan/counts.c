/* The exact per-rank costs of tensor parallelism: bytes sent and
 * collectives per layer type, parameter and activation bytes, for one
 * forward + backward of a GPT. They equal the counters of a real run
 * (tests/test_tp_compare.sh, tests/test_plan.sh); `cubist bench
 * --tp-compare` prints both, and the planner builds its predictions on them.
 *
 * Units: elements unless noted; bytes = 4 x floats, 8 x doubles, and 2 x
 * the activation elements that travel in bf16 (--comm-dtype bf16, shape
 * act_bf16: w below is that element's bytes on the wire). Ring
 * volume per rank as cb_comm counts it: all-reduce 2(p-1)/p n, all-gather
 * and reduce-scatter (p-1)/p n of the full vector n, broadcast and reduce
 * (p-1)/p n. N = B T tokens, C = d_model, L layers, T = seq_len, V_p the
 * padded vocabulary. Per layer the linears are QKV C->3C, proj C->C, fc
 * C->4C, fc-proj 4C->C: sum of inputs 7C, of outputs 9C, of in x out 12C^2. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "plan/plan.h"

/* bytes sent per rank by an all-reduce of `bytes` on p ranks */
double cb_plan_ring_allreduce(double p, double bytes) { return 2 * (p - 1) / p * bytes; }

static double ar(double p, double bytes) { return cb_plan_ring_allreduce(p, bytes); }

static double max2(double a, double b) { return a > b ? a : b; }

/* The gradient buffers src/graph/build.c (plan_grads) gives the GPT graph
 * of one chunk holding every node: backward runs loss, ln_f, then per
 * block add2, fc-proj, gelu, fc, ln2, add1, proj, attn, qkv, ln1 (times 1,
 * 2, ...); a value's gradient lives from its last reader's backward to its
 * producer's; the residual stream's gradient is handed from add to add in
 * one buffer; every other life takes the smallest buffer free before it
 * starts that holds it, else a new one. The same rule replayed on the
 * sizes, so the sum is the engine's for any widths (floats). */
typedef struct life {
    double size;
    int start, end, handed; /* handed: takes the residual buffer */
} life;

static double grad_floats(double L, double a0, double a1, double q1, double f1) {
    double size[16] = {0}, total = 0;
    int busy[16] = {0}, nb = 0, res = -1;
    for (int b = -1; b < (int)L; b++) {
        int t = 2 + 10 * b;
        life blk[] = {{a0, t + 1, t + 6, 1}, {a0, t + 1, t + 2, 0}, {f1, t + 2, t + 3, 0},
                      {f1, t + 3, t + 4, 0}, {a0, t + 4, t + 5, 0}, {a0, t + 6, t + 11, 1},
                      {a0, t + 6, t + 7, 0}, {a1, t + 7, t + 8, 0}, {q1, t + 8, t + 9, 0},
                      {a0, t + 9, t + 10, 0}};
        life head[] = {{a0, 1, 2, 0}, {a0, 2, 3, 1}}; /* ln_f's output, the last block's */
        life *v = b < 0 ? head : blk;
        for (int i = 0; i < (b < 0 ? 2 : 10); i++) {
            int k = -1;
            if (v[i].handed && res >= 0) k = res;
            if (k < 0)
                for (int j = 0; j < nb; j++)
                    if (busy[j] < v[i].start && size[j] >= v[i].size && (k < 0 || size[j] < size[k]))
                        k = j;
            if (k < 0 && nb < 16) k = nb++, size[k] = v[i].size, total += v[i].size;
            if (k < 0) return total; /* unreachable: a block needs at most 5 buffers */
            busy[k] = v[i].end;
            if (v[i].handed) res = k;
        }
    }
    return total;
}

/* The graph engine's plan (src/graph/build.c) of the GPT of src/graph/gpt.c
 * in one chunk: a slot of every node's output and kept state (LayerNorm 2
 * row statistics, attention's probabilities, the head's logits + losses),
 * per block ln1, qkv, attn, proj, add, ln2, fc, gelu, fc-proj, add; the
 * gradient buffers (grad_floats); each region one float over. */
static void graph_act(cb_plan_tp_cost *f, double L, double a0, double rows, double a1, double q1,
                      double f1, double att, double lg) {
    double block = 6 * a0 + a1 + q1 + 2 * f1 + 4 * rows + att;
    f->act_slot_bytes = 4 * (a0 + L * block + a0 + 2 * rows + lg + 1);
    f->act_grad_bytes = 4 * (grad_floats(L, a0, a1, q1, f1) + 1);
    f->act_model_bytes = f->act_slot_bytes + f->act_grad_bytes + 4; /* + the empty recompute block */
}

double cb_plan_pad(double V, double m) { return ceil(V / m) * m; }

/* The floats causal attention keeps for backward on a rank with B
 * sequences and NH heads of T tokens: B NH T^2, or under --precision
 * bf16 what the bf16 table's attention_saved says (its fused path keeps
 * each query block's keys only: 9/16 of that at T 1024); the one rule,
 * asked, not copied */
static double att_floats(const cb_plan_shape *s, double B, double NH) {
    const cb_kernels *k = s->bf16 ? cb_kernels_bf16() : NULL;
    if (!k || B < 1 || NH < 1) return B * NH * s->T * s->T;
    cb_attn a = cb_attn_self((int)B, (int)s->T, (int)NH, (int)NH, 1, NULL);
    return (double)k->attention_saved(k, &a);
}

static double pad(double V, double m) { return cb_plan_pad(V, m); }

/* ------------------------------------------------------------ per operator
 * One forward + backward of one operator on one rank, added to o->sent
 * (bytes) and o->calls; N the tokens of the rank's data-parallel
 * micro-batch. The closed forms of a GPT below are sums of these, and the
 * planner counts a declared graph (src/plan/graph.c) node by node with
 * them: one copy of the accounting. */

/* A linear (in -> out, with bias) whose input has parity p.
 *   1-D  column-parallel (p 0): dX all-reduced backward; row-parallel (p 1):
 *        Y all-reduced forward; 1 call
 *   2-D  SUMMA: forward q broadcasts of the X block (row) and the W block
 *        (column); backward broadcasts of both and reduces of dX (row) and
 *        dW (column): (q-1)/q^2 (3 w N in + 12 in out); the bias gradient
 *        all-reduced over the column 8(q-1) out/q^2; 6q + 1 calls
 *   3-D  X gathered over a line, W over WEIGHT, Y reduce-scattered; backward
 *        dY gathered, dX and dW reduce-scattered: (q-1)/q^3 (2 w N (in + out)
 *        + 8 in out), the bias over a plane 8(q^2-1) out/q^3; 7 calls;
 *        re-gathering X and W adds (q-1)/q^3 (w N in + 4 in out), 2 calls */
void cb_plan_tp_linear(cb_plan_tpop *o, double N, double in, double out, int parity) {
    double q = o->q, w = o->w;
    if (o->P <= 1) return;
    if (o->mode == CB_TP_1D) {
        o->sent += ar(o->P, w * N * (parity == 0 ? in : out)), o->calls += 1;
    } else if (o->mode == CB_TP_2D) {
        o->sent += (q - 1) / (q * q) * (3 * w * N * in + 12 * in * out) + 8 * (q - 1) * out / (q * q);
        o->calls += 6 * q + 1;
    } else {
        double q3 = q * q * q;
        o->sent += (q - 1) / q3 * (2 * w * N * (in + out) + 8 * in * out) +
                   8 * (q * q - 1) * out / q3 +
                   (o->gathered ? 0 : (q - 1) / q3 * (w * N * in + 4 * in * out));
        o->calls += 7 + (o->gathered ? 0 : 2);
    }
}

/* A LayerNorm of C features on an input of parity p: the row statistics
 * (2 doubles a row) all-reduced forward and backward over the ranks that
 * split the features, the weight and bias gradients over the ranks that
 * replicate them.
 *   1-D  p 0 replicated: nothing; p 1: 2 x 2(P-1)/P 16N, 2 calls
 *   2-D  16(q-1)(4N + C)/q^2, 3 calls
 *   3-D  64(q-1)N/q^3 + 16(q^2-1)C/q^3, 3 calls */
void cb_plan_tp_norm(cb_plan_tpop *o, double N, double C, int parity) {
    double q = o->q;
    if (o->P <= 1) return;
    if (o->mode == CB_TP_1D) {
        if (parity == 1) o->sent += 2 * ar(o->P, 16 * N), o->calls += 2;
    } else if (o->mode == CB_TP_2D) {
        o->sent += 16 * (q - 1) * (4 * N + C) / (q * q), o->calls += 3;
    } else {
        o->sent += 64 * (q - 1) * N / (q * q * q) + 16 * (q * q - 1) * C / (q * q * q);
        o->calls += 3;
    }
}

/* The token embedding (V rows, padded) and its T positions; learned: the
 * positions get a gradient (a fixed sinusoidal table does not).
 *   1-D  the vocabulary-parallel lookup's output all-reduced, 1 call
 *   2-D  the lookup reduce-scattered over the row and its gradient
 *        all-gathered 2w(q-1)NC/q^2; the positions (T_p C/q of the column,
 *        T_p = T up to q) all-gathered forward, their gradient
 *        reduce-scattered 4(q-1)T_p C/q^2 each; off the diagonal (o->diag 0)
 *        two swaps of NC/q^2 floats (isend + irecv each) 8NC/q^2, 4 calls
 *   3-D  wte gathered and its gradient reduce-scattered over WEIGHT
 *        8(q-1)V_p C/q^3, the product reduce-scattered and the gradient
 *        gathered over INPUT 2w(q-1)NC/q^3; the positions over a plane
 *        4(q^2-1)T_p C/q^3 each way, T_p = T up to q^2 */
void cb_plan_tp_embed(cb_plan_tpop *o, double N, double C, double V, double T, int learned) {
    double q = o->q, w = o->w, pos = learned ? 2 : 1;
    if (o->P <= 1) return;
    if (o->mode == CB_TP_1D) {
        o->sent += ar(o->P, w * N * C), o->calls += 1;
    } else if (o->mode == CB_TP_2D) {
        o->sent += (2 * w * (q - 1) * N * C + pos * 4 * (q - 1) * pad(T, q) * C) / (q * q) +
                   (o->diag ? 0 : 8 * N * C / (q * q));
        o->calls += 2 + pos + (o->diag ? 0 : 4);
    } else {
        double q3 = q * q * q;
        o->sent += (q - 1) * (2 * w * N * C + 8 * pad(V, q * q) * C) / q3 +
                   pos * 4 * (q * q - 1) * pad(T, q * q) * C / q3;
        o->calls += 4 + pos;
    }
}

/* The tied head and the vocabulary-parallel cross-entropy; weighted: label
 * smoothing or ignored targets (one all-reduce of 2 floats a row more);
 * bias: a decoder bias, split like the logits' vocabulary (CB_P_VOCAB):
 * its gradient block (V_p/q floats) summed over the ranks of the other
 * token blocks (2-D: the column, q; 3-D: the OUTPUT x WEIGHT plane, q^2);
 * 1-D holds every token: nothing.
 *   1-D  MAX of N, SUM of 2N, dX of N C all-reduced; 3 calls
 *   2-D  SUMMA of x and wte^T forward (q-1)(wNC + 4V_pC)/q^2, backward
 *        twice that; cross-entropy 24(q-1)N/q^2; the loss (1 double over
 *        the column) 16(q-1)/q; 6q + 3 calls
 *   3-D  2w(q-1)(NC + N V_p)/q^3 + 8(q-1)V_pC/q^3, cross-entropy over a
 *        line 24(q-1)N/q^3, the loss over a plane 16(q^2-1)/q^2; 9 calls;
 *        re-gathering adds (q-1)(wNC + 4V_pC)/q^3, 2 calls, and an input
 *        rewritten between forward and backward (input_rewritten: the MLM
 *        head's moved input) is gathered again, (q-1)wNC/q^3, 1 call */
void cb_plan_tp_head(cb_plan_tpop *o, double N, double C, double V, int weighted, int bias,
                     int rewritten) {
    double q = o->q, w = o->w, P = o->P;
    if (P <= 1) return;
    double rows = o->mode == CB_TP_1D ? N : o->mode == CB_TP_2D ? N / q : N / (q * q);
    double line = o->mode == CB_TP_1D ? P : q; /* the ranks of a row's vocabulary */
    if (o->mode == CB_TP_1D) {
        o->sent += ar(P, 4 * N) + ar(P, 8 * N) + ar(P, w * N * C), o->calls += 3;
    } else if (o->mode == CB_TP_2D) {
        double Vp = pad(V, q);
        o->sent += (q - 1) * (3 * w * N * C + 12 * Vp * C) / (q * q) + 24 * (q - 1) * N / (q * q) +
                   16 * (q - 1) / q;
        o->calls += 6 * q + 3;
    } else {
        double Vp = pad(V, q * q), q3 = q * q * q;
        o->sent += (q - 1) * (2 * w * (N * C + N * Vp) + 8 * Vp * C) / q3 +
                   24 * (q - 1) * N / q3 + 16 * (q * q - 1) / (q * q) +
                   (o->gathered ? 0 : (q - 1) * (w * N * C + 4 * Vp * C) / q3);
        o->calls += 9 + (o->gathered ? 0 : 2);
        if (o->gathered && rewritten) o->sent += (q - 1) * w * N * C / q3, o->calls += 1;
    }
    if (weighted) o->sent += ar(line, 8 * rows), o->calls += 1;
    if (bias && o->mode != CB_TP_1D) {
        double share = o->mode == CB_TP_2D ? q : q * q;
        o->sent += ar(share, 4 * pad(V, o->mode == CB_TP_3D ? q * q : q) / q), o->calls += 1;
    }
}

/* An all-reduce over the whole tensor group of `bytes` (the layouts'
 * whole-tensor moves: lookup tables, concatenation, the logistic head,
 * a change of parity; src/layout/rec.c) */
void cb_plan_tp_whole(cb_plan_tpop *o, double bytes) {
    if (o->P > 1) o->sent += ar(o->P, bytes), o->calls += 1;
}

/* The operators of a tensor layout: P ranks of mode, w bytes an activation
 * element on the wire. */
cb_plan_tpop cb_plan_tpop_of(cb_tp_mode mode, int P, int act_bf16, int gathered, int diag) {
    return (cb_plan_tpop){mode, P, cb_grid_side(P, mode), act_bf16 ? 2 : 4, gathered, diag, 0, 0};
}

/* o's sums into kind k of f, o emptied */
static void put(cb_plan_tp_cost *f, int k, cb_plan_tpop *o, double times) {
    f->sent[k] += times * o->sent, f->calls[k] += times * o->calls;
    o->sent = o->calls = 0;
}

/* The traffic of a GPT (layer counts in the header comment): its four
 * linears, 2L + 1 LayerNorms on the residual stream, embedding and head. */
static void gpt_traffic(const cb_plan_shape *s, cb_tp_mode mode, double P, int diag, int gathered,
                        cb_plan_tp_cost *f) {
    double N = s->N, C = s->C;
    cb_plan_tpop o = cb_plan_tpop_of(mode, (int)P, s->act_bf16, gathered, diag);
    cb_plan_tp_linear(&o, N, C, 3 * C, 0), cb_plan_tp_linear(&o, N, C, C, 1);
    cb_plan_tp_linear(&o, N, C, 4 * C, 0), cb_plan_tp_linear(&o, N, 4 * C, C, 1);
    put(f, CB_PK_LINEAR, &o, s->L);
    cb_plan_tp_norm(&o, N, C, 0);
    put(f, CB_PK_NORM, &o, 2 * s->L + 1);
    cb_plan_tp_embed(&o, N, C, s->V, s->T, 1);
    put(f, CB_PK_EMBED, &o, 1);
    cb_plan_tp_head(&o, N, C, s->V, 0, 0, 0);
    put(f, CB_PK_HEAD, &o, 1);
}

/* 1-D, P ranks, one group. Parity-0 LayerNorms are replicated: no traffic.
 *   linear  4L all-reduces of N C (row-parallel forward, column-parallel dX)
 *           = 8(P-1)/P * 4L N C bytes
 *   embed   1 all-reduce of N C (vocabulary-parallel lookup)
 *   head    all-reduce MAX of N, SUM of 2N (cross-entropy), N C (dX)
 *   params  V_p C/P + T C + L(12C^2/P + 7C/P + 6C) + 2C, V_p = V up to P
 *   scratch 3N floats (row max, exp-sum, target logit) */
static void cost_1d(const cb_plan_shape *s, double P, cb_plan_tp_cost *f) {
    double N = s->N, C = s->C, L = s->L, Vp = pad(s->V, P);
    gpt_traffic(s, CB_TP_1D, P, 1, 1, f);
    f->param_bytes = 8 * (Vp * C / P + s->T * C + L * (12 * C * C / P + 7 * C / P + 6 * C) + 2 * C);
    graph_act(f, L, N * C, N, N * C / P, 3 * N * C / P, 4 * N * C / P,
              att_floats(s, s->B, s->NH / P), N * Vp / P + N);
    f->act_scratch_bytes = 4 * 3 * N + (s->act_bf16 ? 2 * N * C : 0); /* + the sums' bf16 staging */
}

/* 2-D, q x q: row and column groups of q; diag: rank (r, r), whose
 * embedding block needs no transpose swap.
 *   linear  per layer 12(q-1)/q^2 (7NC + 12C^2) (SUMMA: forward q
 *           broadcasts of X and W blocks; backward broadcasts and reduces
 *           of both) + bias gradients all-reduced over the column,
 *           72(q-1)C/q^2; calls L(24q + 4)
 *   norm    (2L+1) x [all-reduces of 2N/q doubles on the row forward (sum
 *           x, sum x^2) and backward, of 2C/q floats (gamma, beta over the
 *           column)] = 16(q-1)(4N + C)/q^2 bytes, 3 calls each
 *   embed   reduce-scatter and all-gather of N C/q on the row
 *           8(q-1)NC/q^2, wpe (T_p C/q of the column) all-gathered forward
 *           and its gradient reduce-scattered 8(q-1)T_p C/q^2, T_p = T up to
 *           q; off the diagonal two swaps of NC/q^2 (isend + irecv each):
 *           8NC/q^2
 *   head    SUMMA of x and wte^T forward 4(q-1)(NC + V_p C)/q^2, backward
 *           twice that; cross-entropy 24(q-1)N/q^2; the loss (1 double over
 *           the column) 16(q-1)/q; calls 6q + 3
 *   params  V_p C/q^2 + T_p C/q^2 + L(12C^2/q^2 + 13C/q) + 2C/q, V_p = V up to q
 *   scratch two X blocks 2 max(4NC, NC)/q^2, two W blocks
 *           2 max(4C^2, V_p C)/q^2, T1 max(NC/q, 4NC/q^2, N V_p/q^2, 4N/q),
 *           T2 max(NC/q^2, T_p C/q, 4C^2/q^2, V_p C/q^2, 3N/q), T3 4C/q,
 *           and the copies of in-place reduces on the row max(4NC, NC)/q^2
 *           and the column max(4C^2, V_p C)/q^2 (the workspace the layout
 *           plans at build) */
static void cost_2d(const cb_plan_shape *s, double q, int diag, cb_plan_tp_cost *f) {
    double N = s->N, C = s->C, L = s->L, T = s->T, Vp = pad(s->V, q), Tp = pad(T, q), q2 = q * q;
    gpt_traffic(s, CB_TP_2D, q2, diag, 1, f);
    f->param_bytes = 8 * (Vp * C / q2 + Tp * C / q2 + L * (12 * C * C / q2 + 13 * C / q) + 2 * C / q);
    double a = N * C / q2;
    graph_act(f, L, a, N / q, a, 3 * a, 4 * a, att_floats(s, s->B / q, s->NH / q),
              (N / q) * (Vp / q) + N / q);
    double t1 = max2(max2(N * C / q, 4 * a), max2(N * Vp / q2, 4 * N / q));
    double t2 = max2(max2(max2(a, Tp * C / q), max2(4 * C * C / q2, Vp * C / q2)), 3 * N / q);
    double reduces = 4 * a + max2(4 * C * C, Vp * C) / q2; /* cb_comm_reserve's copies */
    f->act_scratch_bytes = 4 * (8 * a + 2 * max2(4 * C * C, Vp * C) / q2 + t1 + t2 + 4 * C / q +
                                reduces) +
                           (s->act_bf16 ? 4 * 4 * a + 2 * max2(8 * a, N * C / q) : 0); /* bf16 staging */
}

/* 3-D, q^3: lines of q (WEIGHT, INPUT, OUTPUT), planes of q^2; every rank
 * alike. gathered: X^ and W^ kept from forward (else gathered again).
 *   linear  per layer 8(q-1)/q^3 (16NC + 12C^2) (= 4(q-1)/q^3 (32NC +
 *           24C^2) bytes, the paper's (q-1)/q^3 (32Nh + 24h^2) elements; per
 *           linear gather X over a line, W over WEIGHT, reduce-scatter Y;
 *           backward gather dY, reduce-scatter dX and dW) + bias gradients
 *           all-reduced over a plane 72(q^2-1)C/q^3; calls 28 L; re-gathering
 *           adds 4(q-1)/q^3 (7NC + 12C^2) and 8 calls per layer
 *   norm    (2L+1) x [64(q-1)N/q^3 (sum x, sum x^2 and the backward pair, in
 *           double, over a line) + 16(q^2-1)C/q^3 (gamma, beta over a
 *           plane)], 3 calls each
 *   embed   8(q-1)(NC + V_p C)/q^3 (wte gathered, one-hot product
 *           reduce-scattered, and back) + 8(q^2-1)T_p C/q^3 (wpe, T_p C/q of
 *           the INPUT x WEIGHT plane, all-gathered forward, its gradient
 *           reduce-scattered; T_p = T up to q^2), 6 calls
 *   head    8(q-1)(NC + V_p C + N V_p)/q^3 + 24(q-1)N/q^3 (cross-entropy over
 *           INPUT) + 16(q^2-1)/q^2 (loss, 1 double over a plane); 9 calls,
 *           re-gathering adds 4(q-1)(NC + V_p C)/q^3 and 2 calls
 *   params  V_p C/q^3 + T_p C/q^3 + L(12C^2/q^3 + 13C/q) + 2C/q, V_p = V up to q^2
 *   scratch the slots planned at build: X^ 4NC/q^2, W^ max(4C^2, V_p C)/q^2;
 *           Z, dY^ max(4NC, N V_p)/q^2 each; dX^ 4NC/q^2; dW^ max(4C^2,
 *           V_p C)/q^2; dW max(4C^2, V_p C)/q^3; reductions max(4C/q, 4N/q^2,
 *           T_p C/q) (the statistics' 2 doubles a row, cross-entropy 3N/q^2)
 *           and 2C/q; gathered adds the kept inputs: per layer X^ 7NC/q^2 +
 *           W^ 12C^2/q^2, head X^ NC/q^2 + wte^ V_p C/q^2 */
static void cost_3d(const cb_plan_shape *s, double q, int gathered, cb_plan_tp_cost *f) {
    double N = s->N, C = s->C, L = s->L, T = s->T, Vp = pad(s->V, q * q), Tp = pad(T, q * q),
           q2 = q * q, q3 = q2 * q;
    gpt_traffic(s, CB_TP_3D, q3, 1, gathered, f);
    f->param_bytes = 8 * (Vp * C / q3 + Tp * C / q3 + L * (12 * C * C / q3 + 13 * C / q) + 2 * C / q);
    double a = N * C / q3;
    graph_act(f, L, a, N / q2, a, 3 * a, 4 * a, att_floats(s, s->B / q2, s->NH / q),
              (N / q2) * (Vp / q) + N / q2);
    double nx = N * C / q2, wv = Vp * C / q2, big = max2(4 * nx, N * Vp / q2);
    double slots = 2 * big + 4 * nx + max2(4 * C * C / q2, wv) + max2(4 * C * C, Vp * C) / q3 +
                   max2(max2(4 * C / q, 4 * N / q2), Tp * C / q) + 2 * C / q +
                   4 * nx + max2(4 * C * C / q2, wv); /* the X^ and W^ slots */
    double kept = gathered ? L * (7 * nx + 12 * C * C / q2) + nx + wv : 0;
    f->act_scratch_bytes = 4 * (slots + kept) + /* bf16 staging: S_H, INPUT's and OUTPUT's */
                           (s->act_bf16 ? 4 * 4 * nx + 2 * (max2(nx, N * C / q2) + max2(4 * nx, N * Vp / q2)) : 0);
}

void cb_plan_tp_cost_of(const cb_plan_shape *s, cb_tp_mode mode, int tp, int diag, int gathered,
                        cb_plan_tp_cost *c) {
    memset(c, 0, sizeof *c);
    if (mode == CB_TP_1D) cost_1d(s, tp, c);
    else if (mode == CB_TP_2D) cost_2d(s, cb_grid_side(tp, mode), diag, c);
    else cost_3d(s, cb_grid_side(tp, mode), gathered, c);
    if (tp == 1) /* the serial layout: no traffic, no scratch */
        memset(c->sent, 0, sizeof c->sent), memset(c->calls, 0, sizeof c->calls),
            c->act_scratch_bytes = 0;
}

double cb_plan_tp_sent(const cb_plan_tp_cost *c) {
    double t = 0;
    for (int k = 0; k < CB_PK_N; k++) t += c->sent[k];
    return t;
}

double cb_plan_tp_calls(const cb_plan_tp_cost *c) {
    double t = 0;
    for (int k = 0; k < CB_PK_N; k++) t += c->calls[k];
    return t;
}
