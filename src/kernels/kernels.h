/* The narrow compute interface. Model code calls kernels only through this
 * table, so a GPU backend is one more table. Every kernel receives the table
 * it was called through (k->fn(k, ...)), so a table that wraps another, such
 * as the profiler (profile.h), finds its own state there instead of in
 * globals; the CPU kernels ignore it. Conventions: row-major;
 * activation gradients (d<inp>) are overwritten unless the comment says
 * "accumulates"; parameter gradients always accumulate (gradient
 * accumulation over micro-batches). Kernels assume valid shapes. */
#ifndef CB_KERNELS_H
#define CB_KERNELS_H

#include <stddef.h>

typedef struct cb_kernels cb_kernels;
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
    /* dinp accumulates (it is the residual stream); dw, db accumulate */
    void (*layernorm_backward)(const cb_kernels *k, float *dinp, float *dw, float *db,
                               const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C);
    /* out (N,OC) = inp (N,IC) @ w (IC,OC) + bias (OC, may be NULL) */
    void (*matmul_forward)(const cb_kernels *k, float *out, const float *inp, const float *w,
                           const float *bias, int N, int IC, int OC);
    /* dinp (may be NULL) overwritten; dw, dbias (may be NULL) accumulate */
    void (*matmul_backward)(const cb_kernels *k, float *dinp, float *dw, float *dbias,
                            const float *dout, const float *inp, const float *w, int N, int IC,
                            int OC);
    /* rows [r0, r1) of dw (IC,OC) accumulate inp[:, r0:r1]^T dout: matmul_backward's
     * dw in row blocks, so a caller can drive MPI between blocks (inp (N,IC),
     * dout (N,OC)); the same sums, rounded alike up to BLAS's own blocking */
    void (*matmul_backward_dw_rows)(const cb_kernels *k, float *dw, const float *dout,
                                    const float *inp, int N, int IC, int OC, int r0, int r1);
    /* out (N,V) = inp (N,C) @ w (V,C)^T: the tied LM head */
    void (*head_forward)(const cb_kernels *k, float *out, const float *inp, const float *w, int N,
                         int C, int V);
    /* dinp overwritten, dw accumulates */
    void (*head_backward)(const cb_kernels *k, float *dinp, float *dw, const float *dout,
                          const float *inp, const float *w, int N, int C, int V);
    /* qkv (B,T,3C) -> out (B,T,C); att (B,NH,T,T) causal softmax probabilities */
    void (*attention_forward)(const cb_kernels *k, float *out, float *att, const float *qkv, int B,
                              int T, int C, int NH);
    /* dqkv (B,T,3C) overwritten; scratch (B,NH,T,T) */
    void (*attention_backward)(const cb_kernels *k, float *dqkv, float *scratch, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C, int NH);
    /* elementwise over n; tanh approximation */
    void (*gelu_forward)(const cb_kernels *k, float *out, const float *inp, size_t n);
    void (*gelu_backward)(const cb_kernels *k, float *dinp, const float *inp, const float *dout,
                          size_t n);
    /* out = a + b over n (out may alias a) */
    void (*residual_forward)(const cb_kernels *k, float *out, const float *a, const float *b,
                             size_t n);
    /* logits (N,V) replaced by softmax probabilities; losses (N) = -log p[target] */
    void (*crossentropy_forward)(const cb_kernels *k, float *losses, float *logits,
                                 const int *targets, int N, int V);
    /* probs (N,V) replaced by d(sum losses * dloss)/dlogits */
    void (*crossentropy_backward)(const cb_kernels *k, float *probs, const int *targets,
                                  float dloss, int N, int V);
    /* sum of squares, in double, reproducible for a fixed thread count */
    double (*sumsq)(const cb_kernels *k, const float *x, size_t n);
    void (*scale)(const cb_kernels *k, float *x, float s, size_t n);
    /* one AdamW step on n parameters: p -= lr*(wd*p + mhat/(sqrt(vhat)+eps)) with
     * bias corrections bc1 = 1-beta1^t, bc2 = 1-beta2^t */
    void (*adamw)(const cb_kernels *k, float *p, const float *g, float *m, float *v, size_t n,
                  float lr, float beta1, float beta2, float eps, float wd, float bc1, float bc2);
    /* Recommendation layers (NCF). out (n) = a * b elementwise; backward
     * da = dout * b, db = dout * a, both overwritten */
    void (*mul_forward)(const cb_kernels *k, float *out, const float *a, const float *b, size_t n);
    void (*mul_backward)(const cb_kernels *k, float *da, float *db, const float *a, const float *b,
                         const float *dout, size_t n);
    /* out = max(inp, 0) over n; dinp = dout where inp > 0, else 0 */
    void (*relu_forward)(const cb_kernels *k, float *out, const float *inp, size_t n);
    void (*relu_backward)(const cb_kernels *k, float *dinp, const float *inp, const float *dout,
                          size_t n);
    /* out (N,C) = table[ids[i] - row0] (table nrows x C), zero where the id
     * is outside [row0, row0 + nrows): one shard's share of a lookup */
    void (*lookup_forward)(const cb_kernels *k, float *out, const float *table, const int *ids,
                           int N, int C, int row0, int nrows);
    /* dtable rows accumulate dout's rows at the ids in the shard, in row
     * order (repeated ids: the serial sum) */
    void (*lookup_backward)(const cb_kernels *k, float *dtable, const float *dout,
                            const int *ids, int N, int C, int row0, int nrows);
    /* losses (N) = log(1 + e^z) - y z of logits z and labels y in {0, 1}
     * (binary cross-entropy on sigmoid(z)); dlogits (N) = (sigmoid(z) - y)
     * x scale, overwritten */
    void (*logistic_forward)(const cb_kernels *k, float *losses, const float *logits,
                             const int *labels, int N);
    void (*logistic_backward)(const cb_kernels *k, float *dlogits, const float *logits,
                              const int *labels, float scale, int N);
};

const cb_kernels *cb_kernels_cpu(void);

#endif
