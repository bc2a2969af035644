/* The narrow compute interface. Model code calls kernels only through this
 * table, so a GPU backend is one more table. Every kernel receives the table
 * it was called through (k->fn(k, ...)), so a table that wraps another, such
 * as the profiler (profile.h), finds its own state there instead of in
 * globals; the CPU kernels ignore it. Conventions: row-major;
 * activation gradients (d<inp>) are overwritten unless the comment says
 * "accumulates"; parameter gradients accumulate (gradient accumulation
 * over micro-batches), or, where a kernel takes `acc`, are overwritten
 * when acc is 0 (the step's first write of them: the engine then needs no
 * zeroing pass; the results are the bits of accumulating into zeros).
 * Kernels assume valid shapes. */
#ifndef CB_KERNELS_H
#define CB_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cubist.h"

typedef struct cb_kernels cb_kernels;

/* One attention call: B sequences, NH heads of hs = C/NH features. Query
 * i of sequence b is row b*Tq + i of q (row stride ldq, head h at column
 * h*hs); key and value j are row b*Tk + j of kv (stride ldkv, head h at
 * koff + h*hs and voff + h*hs). Query i sees key j when j < klen[b] and,
 * causal, j <= i; rows i >= qlen[b] are padding: their output,
 * probabilities and gradients are zero. qlen, klen NULL: every row.
 * Self-attention reads q = kv = qkv (B,T,3C) (cb_attn_self).
 * Dropout of the probabilities (drop > 0): this call's sequences and heads
 * start at sequence b0 and head h0 of the step's (B*, NHg, Tq, Tk) whole;
 * probability (b, h, i, j) is kept, scaled by 1/(1-drop), when
 * cb_rng_uniform_at(drop_key, ((b0+b) NHg + h0+h) Tq Tk + i Tk + j) >= drop,
 * so every layout drops the same ones; att is then 2 (B,NH,Tq,Tk): the
 * probabilities, then the dropped ones. */
typedef struct cb_attn {
    int B, Tq, Tk, C, NH;
    int ldq, ldkv, koff, voff;
    int causal;
    const int *qlen, *klen;
    float drop;
    uint64_t drop_key;
    int64_t b0;
    int h0, NHg;
} cb_attn;
/* self-attention over qkv (B,T,3C) = [q | k | v], lens (B) or NULL for
 * both queries and keys */
cb_attn cb_attn_self(int B, int T, int C, int NH, int causal, const int *lens);
struct cb_kernels {
    const char *name;
    /* out (B,T,C) = wte[inp (B,T)] + wpe[t] */
    void (*encoder_forward)(const cb_kernels *k, float *out, const int *inp, const float *wte,
                            const float *wpe, int B, int T, int C);
    /* dwte, dwpe accumulate; dwte NULL: wpe only */
    void (*encoder_backward)(const cb_kernels *k, float *dwte, float *dwpe, const float *dout,
                             const int *inp, int B, int T, int C);
    /* out (N,C); mean, rstd (N) saved for backward */
    void (*layernorm_forward)(const cb_kernels *k, float *out, float *mean, float *rstd,
                              const float *inp, const float *w, const float *b, int N, int C);
    /* dinp accumulates (it is the residual stream); dw, db accumulate (acc) or
     * are overwritten */
    void (*layernorm_backward)(const cb_kernels *k, float *dinp, float *dw, float *db,
                               const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C, int acc);
    /* out (N,OC) = inp (N,IC) @ w (IC,OC) + bias (OC, may be NULL) */
    void (*matmul_forward)(const cb_kernels *k, float *out, const float *inp, const float *w,
                           const float *bias, int N, int IC, int OC);
    /* dinp (may be NULL) overwritten; dw, dbias (may be NULL) accumulate (acc)
     * or are overwritten */
    void (*matmul_backward)(const cb_kernels *k, float *dinp, float *dw, float *dbias,
                            const float *dout, const float *inp, const float *w, int N, int IC,
                            int OC, int acc);
    /* rows [r0, r1) of dw (IC,OC) accumulate (acc) or get inp[:, r0:r1]^T dout:
     * matmul_backward's dw in row blocks, so a caller can drive MPI between
     * blocks (inp (N,IC), dout (N,OC)); the same sums, rounded alike up to
     * BLAS's own blocking */
    void (*matmul_backward_dw_rows)(const cb_kernels *k, float *dw, const float *dout,
                                    const float *inp, int N, int IC, int OC, int r0, int r1,
                                    int acc);
    /* out (N,V) = inp (N,C) @ w (V,C)^T: the tied LM head */
    void (*head_forward)(const cb_kernels *k, float *out, const float *inp, const float *w, int N,
                         int C, int V);
    /* dinp overwritten, dw accumulates (acc) or is overwritten */
    void (*head_backward)(const cb_kernels *k, float *dinp, float *dw, const float *dout,
                          const float *inp, const float *w, int N, int C, int V, int acc);
    /* out (B,Tq,C) = attention of a's queries in q over its keys and values
     * in kv (cb_attn); att (B,NH,Tq,Tk) the softmax probabilities, zero
     * where masked (the bf16 table's fused path: its own compact layout of
     * each row's block of keys, cb_kernels_bf16_att_at; attention_saved
     * floats either way) */
    void (*attention_forward)(const cb_kernels *k, const cb_attn *a, float *out, float *att,
                              const float *q, const float *kv);
    /* dq, dkv overwritten in the columns attention reads (rows of ldq and
     * ldkv; dq may be dkv: self-attention's dqkv), zero on padding rows;
     * scratch (B,NH,Tq,Tk) */
    void (*attention_backward)(const cb_kernels *k, const cb_attn *a, float *dq, float *dkv,
                               float *scratch, const float *dout, const float *q, const float *kv,
                               const float *att);
    /* the floats of att that attention_forward writes for this call (what
     * the engine plans for it): B NH Tq Tk, twice that with dropout; the
     * bf16 table's fused causal path keeps each row's block of keys only */
    size_t (*attention_saved)(const cb_kernels *k, const cb_attn *a);
    /* elementwise over n; tanh approximation */
    void (*gelu_forward)(const cb_kernels *k, float *out, const float *inp, size_t n);
    void (*gelu_backward)(const cb_kernels *k, float *dinp, const float *inp, const float *dout,
                          size_t n);
    /* elementwise over n; the exact GELU x Phi(x) (erf) */
    void (*gelu_erf_forward)(const cb_kernels *k, float *out, const float *inp, size_t n);
    void (*gelu_erf_backward)(const cb_kernels *k, float *dinp, const float *inp,
                              const float *dout, size_t n);
    /* Dropout of a block of a value of H features: rows x ncol floats at x
     * and y (row stride ld, y may be x) hold the value's rows row0.. and
     * columns col0..; element (r, c) is kept, scaled by 1/(1-p), when
     * cb_rng_uniform_at(key, r * H + c) >= p, else zeroed: a function of
     * the global index, so every layout drops the same elements. The
     * backward is the same call on the gradient. */
    void (*dropout)(const cb_kernels *k, float *y, const float *x, int rows, int ncol, int ld,
                    int64_t row0, int64_t col0, int64_t H, uint64_t key, float p);
    /* out = a + b over n (out may alias a) */
    void (*residual_forward)(const cb_kernels *k, float *out, const float *a, const float *b,
                             size_t n);
    /* logits (N,V) replaced by softmax probabilities; losses (N) = -log p[target],
     * 0 where the target is negative (ignored) */
    void (*crossentropy_forward)(const cb_kernels *k, float *losses, float *logits,
                                 const int *targets, int N, int V);
    /* probs (N,V) replaced by d(sum losses * dloss)/dlogits (zero rows where
     * the target is negative). The bf16 table also keeps their bf16 copy
     * for the next head_backward reading probs as its dout: nothing may
     * write probs between the two (the serial layout's head does not). */
    void (*crossentropy_backward)(const cb_kernels *k, float *probs, const int *targets,
                                  float dloss, int N, int V);
    /* Pieces of the operators whose rows or vocabulary are split over ranks
     * (src/layout/ops.c): each computes its rank's part, the layout
     * reduces between them. C is the local width, Ctot the full one. */
    /* stats (N,2) doubles: [sum x, sum x^2] over the C local features of each row */
    void (*layernorm_stats)(const cb_kernels *k, double *stats, const float *inp, int N, int C);
    /* out (N,C) normalised with the row statistics of Ctot features summed in
     * stats (N,2); mean, rstd (N) saved for backward */
    void (*layernorm_apply)(const cb_kernels *k, float *out, float *mean, float *rstd,
                            const float *inp, const float *w, const float *b,
                            const double *stats, int N, int C, int Ctot);
    /* stats (N,2) doubles: [sum w dout, sum w dout xhat] over the local features */
    void (*layernorm_backward_stats)(const cb_kernels *k, double *stats, const float *dout,
                                     const float *inp, const float *w, const float *mean,
                                     const float *rstd, int N, int C);
    /* dinp (N,C) accumulates, from the row sums of Ctot features in stats (N,2) */
    void (*layernorm_backward_apply)(const cb_kernels *k, float *dinp, const double *stats,
                                     const float *dout, const float *inp, const float *w,
                                     const float *mean, const float *rstd, int N, int C,
                                     int Ctot);
    /* dw, db (C) accumulate (acc) or get the sums over rows of xhat dout and of dout */
    void (*layernorm_param_grads)(const cb_kernels *k, float *dw, float *db, const float *dout,
                                  const float *inp, const float *mean, const float *rstd, int N,
                                  int C, int acc);
    /* logits (N,V) local columns, the first `valid` real (the rest padding):
     * mx (N) = the row maxima over the valid columns */
    void (*crossentropy_max)(const cb_kernels *k, float *mx, const float *logits, int N, int V,
                             int valid);
    /* logits (N,V) <- exp(logits - mx) on the valid columns, 0 on padding;
     * stats (N,2) = [row sum, the target's logit (targets[i] - v0 in
     * [0, valid)) or 0]; targets NULL: no target */
    void (*crossentropy_exp)(const cb_kernels *k, float *stats, float *logits, const float *mx,
                             const int *targets, int v0, int N, int V, int valid);
    /* logits (N,V) <- probabilities from the full row sums in stats (N,2);
     * losses (N) = log sum - (target logit - mx); returns the losses' sum in
     * row order (double, reproducible) */
    double (*crossentropy_normalize)(const cb_kernels *k, float *losses, float *logits,
                                     const float *stats, const float *mx, int N, int V,
                                     int valid);
    /* probs (N,V) of columns v0.. replaced by dloss (p - onehot(targets - v0)) */
    void (*crossentropy_backward_cols)(const cb_kernels *k, float *probs, const int *targets,
                                       int v0, float dloss, int N, int V);
    /* Label smoothing eps and ignored targets (cb_layer_set_loss) over a
     * vocabulary of Vtot ids, row i weighted w_i = 0 where targets[i] ==
     * ignore (ignore < 0: none), else scale. st (N,2) = [sum of the row's
     * valid logits, the target's logit (targets[i] - v0 in [0, valid)) or
     * 0], from the logits before crossentropy_exp overwrites them */
    void (*crossentropy_smooth_stats)(const cb_kernels *k, float *st, const float *logits,
                                      const int *targets, int v0, int N, int V, int valid);
    /* losses (N) <- w_i (losses_i + eps (target logit - mean logit)), from
     * the full row sums in st: (1 - eps) nll + eps mean_v(-log p_v) */
    void (*crossentropy_smooth_loss)(const cb_kernels *k, float *losses, const float *st,
                                     const int *targets, float eps, int Vtot, int ignore,
                                     float scale, int N);
    /* probs (N,V) of columns v0.. <- w_i dloss (p - (1 - eps) onehot - eps / Vtot) on the
     * valid columns, 0 on padding */
    void (*crossentropy_smooth_backward)(const cb_kernels *k, float *probs, const int *targets,
                                         int v0, float dloss, float eps, int Vtot, int ignore,
                                         float scale, int N, int V, int valid);
    /* out (N,C) = table[ids - v0] for ids in [v0, v0 + Vl), else 0 */
    void (*embedding_rows)(const cb_kernels *k, float *out, const int *ids, const float *table,
                           int v0, int Vl, int N, int C);
    /* dtable (Vl,C) accumulates rows of dout (N,C) at ids - v0 in [0, Vl),
     * in token order (a token may repeat) */
    void (*embedding_rows_backward)(const cb_kernels *k, float *dtable, const float *dout,
                                    const int *ids, int v0, int Vl, int N, int C);
    /* out (N,C) += wpe[(t0 + i) % T] (wpe (T,C)) */
    void (*position_add)(const cb_kernels *k, float *out, const float *wpe, int t0, int T, int N,
                         int C);
    /* dwpe[(t0 + i) % T] accumulates dout (N,C) row i, in row order */
    void (*position_backward)(const cb_kernels *k, float *dwpe, const float *dout, int t0, int T,
                              int N, int C);
    /* out (N,OC) += bias (OC) on every row */
    void (*bias_add)(const cb_kernels *k, float *out, const float *bias, int N, int OC);
    /* dbias (OC) accumulates the column sums of dout (N,OC) */
    void (*bias_backward)(const cb_kernels *k, float *dbias, const float *dout, int N, int OC);
    /* out (n) = sd * cb_rng_normal_at(key, e0 + i), or value when sd is 0:
     * a run of a generated tensor (initial weights), the same on any thread count */
    void (*fill_normal)(const cb_kernels *k, float *out, size_t n, uint64_t key, uint64_t e0,
                        float sd, float value);
    /* out (n) = elements e0 .. e0 + n of the sinusoidal position table (T,C)
     * of Vaswani et al.: element e = t C + j is sin(t / 10000^(2i/C)) for
     * j = 2i, cos of the same for j = 2i + 1 (computed in double) */
    void (*fill_sinusoid)(const cb_kernels *k, float *out, size_t n, uint64_t e0, int C);
    /* sum of x (n) in double, in index order: the same on every run and rank */
    double (*sum)(const cb_kernels *k, const float *x, size_t n);
    /* sum of squares, in double, reproducible for a fixed thread count */
    double (*sumsq)(const cb_kernels *k, const float *x, size_t n);
    void (*scale)(const cb_kernels *k, float *x, float s, size_t n);
    /* one AdamW step on n parameters from the gradient g * gs (gs: the clip
     * factor, 1 for none): p -= lr*(wd*p + mhat/(sqrt(vhat)+eps)) with
     * bias corrections bc1 = 1-beta1^t, bc2 = 1-beta2^t */
    void (*adamw)(const cb_kernels *k, float *p, const float *g, float gs, float *m, float *v,
                  size_t n, float lr, float beta1, float beta2, float eps, float wd, float bc1,
                  float bc2);
    /* Recommendation layers (NCF). out (n) = a * b elementwise; backward
     * da = dout * b, db = dout * a, both overwritten */
    void (*mul_forward)(const cb_kernels *k, float *out, const float *a, const float *b, size_t n);
    void (*mul_backward)(const cb_kernels *k, float *da, float *db, const float *a, const float *b,
                         const float *dout, size_t n);
    /* out = max(inp, 0) over n; dinp = dout where inp > 0, else 0 */
    void (*relu_forward)(const cb_kernels *k, float *out, const float *inp, size_t n);
    void (*relu_backward)(const cb_kernels *k, float *dinp, const float *inp, const float *dout,
                          size_t n);
    /* losses (N) = log(1 + e^z) - y z of logits z and labels y in {0, 1}
     * (binary cross-entropy on sigmoid(z)); dlogits (N) = (sigmoid(z) - y)
     * x scale, overwritten */
    void (*logistic_forward)(const cb_kernels *k, float *losses, const float *logits,
                             const int *labels, int N);
    void (*logistic_backward)(const cb_kernels *k, float *dlogits, const float *logits,
                              const int *labels, float scale, int N);
};

const cb_kernels *cb_kernels_cpu(void);

/* The bf16 table (bf16.c): the CPU table with GEMMs and attention's two
 * batched products through oneDNN bf16 matmuls, fp32 accumulation. NULL
 * when oneDNN cannot start. The note says which instructions it runs on,
 * or that there are none and it will be slow (startup lines print it). */
const cb_kernels *cb_kernels_bf16(void);
const char *cb_kernels_bf16_note(void);
/* fused causal attention on (1) or off (0; the unfused path that writes
 * att), for benchmarks and tests; returns the setting before */
int cb_kernels_bf16_fuse(int on);
/* where the bf16 table's attention_forward keeps probability (pair bh =
 * b NH + h, query t, key j) in att: (bh Tq + t) Tk + j, except on its
 * fused causal path (no dropout, Tq of at least two blocks of 128 query
 * rows), which keeps each pair's blocks of rows one after another, each
 * row only up to the last key its block sees; -1 where not kept (its
 * backward never needs those) */
long long cb_kernels_bf16_att_at(const cb_attn *a, int bh, int t, int j);
/* Milliseconds the bf16 table spent in its rounding passes since the
 * process began, by what was rounded: activations for a forward product,
 * the same activations again for a backward product (both would go with
 * activations stored in bf16), gradients (a linear's with its bias
 * gradient's sums, taken in the same pass), weights (the kept copies
 * refreshed outside AdamW, and panels outside the parameters) */
enum { CB_RND_ACT_FWD, CB_RND_ACT_BWD, CB_RND_GRAD, CB_RND_WEIGHT, CB_RND_N };
void cb_kernels_bf16_round_ms(double ms[CB_RND_N]);
/* Bytes the bf16 table holds outside the engine's plan: the weights'
 * kept bf16 copies (and their packed layouts), and the operand staging
 * (its scratch slots, each grown to the largest operand it has held) */
void cb_kernels_bf16_held(double *copies, double *staging);
/* The bf16 table's operand staging, predicted (the planner): each call
 * adds the bf16 values it stages per scratch slot to need[] as maxima,
 * whose sum x 2 bytes is what cb_kernels_bf16_held's staging reaches
 * after a step of those calls; kept: the weight is a parameter (its copy
 * is read, not staged) */
#define CB_BF16_SLOTS 11
/* acc: the weight gradient's product accumulates (not the step's first
 * write: a second micro-batch), which stages blocks of the product on
 * CPUs without AMX */
void cb_kernels_bf16_need_linear(double need[CB_BF16_SLOTS], int N, int IC, int OC, int kept,
                                 int acc);
void cb_kernels_bf16_need_head(double need[CB_BF16_SLOTS], int N, int C, int V, int kept, int acc);
void cb_kernels_bf16_need_attention(double need[CB_BF16_SLOTS], const cb_attn *a, int nthr);
/* one matmul_forward (N rows, K -> M) or head_forward (N rows, C -> V:
 * K = C, M = V) call; one matmul_backward_dw_rows call over N rows,
 * acc_ic > 0 when it accumulates, over acc_ic of dW's IC rows */
void cb_kernels_bf16_need_product(double need[CB_BF16_SLOTS], int N, int K, int M, int kept);
void cb_kernels_bf16_need_dw_rows(double need[CB_BF16_SLOTS], int N, int IC, int OC, int acc_ic);
/* The weight copies the table keeps in oneDNN's own layout beside the
 * plain bf16 copy (CPUs without AMX, products that read 1024 rows and
 * more an update; 0 elsewhere), on a team of nthr threads: a linear's
 * (IC x OC, with or without a bias) and the tied head's (V x C), read on
 * N rows by reads products of each kind an update (the micro-batches) */
double cb_kernels_bf16_linear_packed(int nthr, int reads, int N, int IC, int OC, int bias);
double cb_kernels_bf16_head_packed(int nthr, int reads, int N, int C, int V);
/* the bytes of the slots need[] asks for */
double cb_kernels_bf16_need_bytes(const double need[CB_BF16_SLOTS]);
/* seconds of rewriting the copy in oneDNN's layout that the table keeps
 * of a (K, N) weight read by products of M rows, *bytes its size (0 and
 * 0: the table keeps none); the planner's calibration */
double cb_kernels_bf16_reorder_s(int M, int K, int N, double *bytes);

/* --precision fp32|bf16: the table every layout built afterwards installs
 * (cb_kernels_default), chosen once per process before the model. */
typedef enum cb_precision { CB_PREC_FP32 = 0, CB_PREC_BF16 = 1 } cb_precision;
int cb_precision_parse(const char *s, cb_precision *p, cb_err *e);
int cb_kernels_select(cb_precision p, cb_err *e);
const cb_kernels *cb_kernels_default(void);
cb_precision cb_kernels_precision(void);
/* OpenBLAS's core and why it runs (src/kernels/cpu.c), e.g. "SkylakeX (chosen by
 * cubist from CPUID)": for startup lines */
const char *cb_blas_note(void);

/* "fp32", or cb_kernels_bf16_note(): for startup lines */
const char *cb_kernels_note(void);

/* The parameters in block (n floats) were just written (an optimizer
 * step, a load, initialisation): kernels that keep converted copies of
 * weights (the bf16 table) drop them. Every writer of parameters calls it. */
void cb_kernels_params_written(const float *block, size_t n);
/* block is about to be freed: its copies go, and a later buffer at its
 * address is not taken for parameters */
void cb_kernels_params_freed(const float *block);
/* Each weight is read by this many products of each kind (a forward, a
 * backward dX) between two parameter writes: a step's micro-batches. The
 * bf16 table keeps a weight in oneDNN's own layout when those products
 * read PACK_ROWS rows or more in all, where the reorder pays for itself
 * (src/kernels/bf16.c). The graph engine sets it at every training step;
 * 1 until then. */
void cb_kernels_reads_per_update(int n);

/* Round to nearest even, the rounding of the hardware's vcvtneps2bf16 */
static inline uint16_t cb_bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The float a bf16 stands for (exact: bf16 is fp32's top half) */
static inline float cb_bf16_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* x (n) = 0, split over the OpenMP threads (a step's gradient: one
 * thread's memset of GPT-2 124M's 498 MB ran at about two thirds of the
 * rate of two, bench/opt_passes) */
void cb_cpu_zero(float *x, size_t n);
/* CPU pieces the bf16 table reuses around its products */
/* the table's AdamW on p, g, m, v (n); bf (n, may be NULL) also gets the new p in bf16 */
void cb_cpu_adamw(float *p, const float *g, float gs, float *m, float *v, uint16_t *bf, size_t n,
                  float lr, float beta1, float beta2, float eps, float wd, float bc1, float bc2);
/* dbias (OC) += (acc) or = the column sums of dout (N,OC); h (N,OC, may
 * be NULL) also gets dout in bf16, from the same pass */
void cb_cpu_bias_backward(float *dbias, const float *dout, int N, int OC, int acc, uint16_t *h);
/* the table's crossentropy_backward; h (N rows of stride ldh, may be
 * NULL) also gets the gradient in bf16, from the same pass */
void cb_cpu_crossentropy_backward(float *probs, const int *targets, float dloss, int N, int V,
                                  uint16_t *h, int64_t ldh);
/* s (Tq,Tk) in place: the softmax of each row i < nq over the keys it
 * sees (j < nk and, causal, j <= i), zero elsewhere; s16 (Tq,Tk, may be
 * NULL) also gets it in bf16, from the same pass */
void cb_cpu_masked_softmax(float *s, uint16_t *s16, int Tq, int Tk, int nq, int nk, int causal);
/* dp (Tq,Tk): dL/dP in, dL/dS (scaled) out, zero where masked; with ds16
 * (Tq,Tk) given, dL/dS goes there in bf16 instead (dp is left as read),
 * and p16 (Tq,Tk, may be NULL) gets P in bf16, from the same pass */
void cb_cpu_masked_softmax_backward(float *dp, uint16_t *ds16, uint16_t *p16, const float *p,
                                    int Tq, int Tk, int nq, int nk, int causal, float scale);
/* a->drop > 0: the dropped probabilities (second half of att) from the
 * probabilities (first half), every (b,h) of a */
void cb_cpu_attn_dropout(const cb_attn *a, float *att);
/* valid query and key rows of sequence b of a (qlen, klen clamped) */
void cb_attn_rows(const cb_attn *a, int b, int *nq, int *nk);
/* how many keys (from the first) query row t sees, nq and nk its
 * sequence's valid query and key rows: none past nq, and with causal at
 * most t + 1 */
int cb_attn_seen(int t, int nq, int nk, int causal);
/* the CPU table's attention_saved (every table's outside a fused path) */
size_t cb_cpu_attention_saved(const cb_kernels *k, const cb_attn *a);
/* g (n): dL/d(dropped) in, dL/dP out, read off the dropped probabilities
 * d (n) of dropout p: zero where d dropped, else scaled by 1/(1-p)
 * (both tables' attention backward, row by row over the keys a row sees) */
void cb_attn_drop_grad_row(float *g, const float *d, int n, float p);

#endif
