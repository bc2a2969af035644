#include "kernels/profile.h"

#include <omp.h>

#include "util/clock.h"

const char *const cb_prof_names[PROF_N] = {"gemm",        "attention", "layernorm",
                                           "elementwise", "loss",      "optimizer"};

void cb_prof_reset(cb_prof *p) {
    for (int i = 0; i < PROF_N; i++) p->ms[i] = 0;
}

double cb_prof_ms(const cb_prof *p, int cls) { return p->ms[cls]; }

const cb_kernels *cb_prof_kernels(const cb_prof *p) { return &p->table; }

/* The table a wrapper was called through is its profiler's first member;
 * the profiler itself is the caller's (never const), so the cast is sound. */
static cb_prof *prof_of(const cb_kernels *k) { return (cb_prof *)k; }

/* Seconds on the profiler's clock. */
static double now_s(const cb_prof *p) {
    return p->thread_cpu ? cb_clock_s(CLOCK_THREAD_CPUTIME_ID) : omp_get_wtime();
}

/* Times inner->fn(inner, ...) into class cls of the profiler owning k. */
#define TIMED(cls, fn, ...)                                                                        \
    do {                                                                                           \
        cb_prof *p_ = prof_of(k);                                                                  \
        double t0_ = now_s(p_);                                                                    \
        p_->inner->fn(p_->inner, __VA_ARGS__);                                                     \
        p_->ms[cls] += (now_s(p_) - t0_) * 1e3;                                                    \
    } while (0)

static void p_encoder_forward(const cb_kernels *k, float *out, const int *inp, const float *wte,
                              const float *wpe, int B, int T, int C) {
    TIMED(PROF_ELEMENTWISE, encoder_forward, out, inp, wte, wpe, B, T, C);
}

static void p_encoder_backward(const cb_kernels *k, float *dwte, float *dwpe, const float *dout,
                               const int *inp, int B, int T, int C) {
    TIMED(PROF_ELEMENTWISE, encoder_backward, dwte, dwpe, dout, inp, B, T, C);
}

static void p_layernorm_forward(const cb_kernels *k, float *out, float *mean, float *rstd,
                                const float *inp, const float *w, const float *b, int N, int C) {
    TIMED(PROF_NORM, layernorm_forward, out, mean, rstd, inp, w, b, N, C);
}

static void p_layernorm_backward(const cb_kernels *k, float *dinp, float *dw, float *db,
                                 const float *dout, const float *inp, const float *w,
                                 const float *mean, const float *rstd, int N, int C, int acc) {
    TIMED(PROF_NORM, layernorm_backward, dinp, dw, db, dout, inp, w, mean, rstd, N, C, acc);
}

static void p_matmul_forward(const cb_kernels *k, float *out, const float *inp, const float *w,
                             const float *bias, int N, int IC, int OC) {
    TIMED(PROF_GEMM, matmul_forward, out, inp, w, bias, N, IC, OC);
}

static void p_matmul_backward(const cb_kernels *k, float *dinp, float *dw, float *dbias,
                              const float *dout, const float *inp, const float *w, int N, int IC,
                              int OC, int acc) {
    TIMED(PROF_GEMM, matmul_backward, dinp, dw, dbias, dout, inp, w, N, IC, OC, acc);
}

static void p_head_forward(const cb_kernels *k, float *out, const float *inp, const float *w, int N,
                           int C, int V) {
    TIMED(PROF_GEMM, head_forward, out, inp, w, N, C, V);
}

static void p_head_backward(const cb_kernels *k, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, int N, int C, int V, int acc) {
    TIMED(PROF_GEMM, head_backward, dinp, dw, dout, inp, w, N, C, V, acc);
}

static void p_attention_forward(const cb_kernels *k, const cb_attn *a, float *out, float *att,
                                const float *q, const float *kv) {
    TIMED(PROF_ATTENTION, attention_forward, a, out, att, q, kv);
}

static size_t p_attention_saved(const cb_kernels *k, const cb_attn *a) {
    const cb_prof *p = prof_of(k);
    return p->inner->attention_saved(p->inner, a);
}

static void p_attention_backward(const cb_kernels *k, const cb_attn *a, float *dq, float *dkv,
                                 float *scratch, const float *dout, const float *q,
                                 const float *kv, const float *att) {
    TIMED(PROF_ATTENTION, attention_backward, a, dq, dkv, scratch, dout, q, kv, att);
}

static void p_gelu_erf_forward(const cb_kernels *k, float *out, const float *inp, size_t n) {
    TIMED(PROF_ELEMENTWISE, gelu_erf_forward, out, inp, n);
}

static void p_gelu_erf_backward(const cb_kernels *k, float *dinp, const float *inp,
                                const float *dout, size_t n) {
    TIMED(PROF_ELEMENTWISE, gelu_erf_backward, dinp, inp, dout, n);
}

static void p_dropout(const cb_kernels *k, float *y, const float *x, int rows, int ncol, int ld,
                      int64_t row0, int64_t col0, int64_t H, uint64_t key, float p) {
    TIMED(PROF_ELEMENTWISE, dropout, y, x, rows, ncol, ld, row0, col0, H, key, p);
}

static void p_gelu_forward(const cb_kernels *k, float *out, const float *inp, size_t n) {
    TIMED(PROF_ELEMENTWISE, gelu_forward, out, inp, n);
}

static void p_gelu_backward(const cb_kernels *k, float *dinp, const float *inp, const float *dout,
                            size_t n) {
    TIMED(PROF_ELEMENTWISE, gelu_backward, dinp, inp, dout, n);
}

static void p_residual_forward(const cb_kernels *k, float *out, const float *a, const float *b,
                               size_t n) {
    TIMED(PROF_ELEMENTWISE, residual_forward, out, a, b, n);
}

static void p_crossentropy_forward(const cb_kernels *k, float *losses, float *logits,
                                   const int *targets, int N, int V) {
    TIMED(PROF_LOSS, crossentropy_forward, losses, logits, targets, N, V);
}

static void p_crossentropy_backward(const cb_kernels *k, float *probs, const int *targets,
                                    float dloss, int N, int V) {
    TIMED(PROF_LOSS, crossentropy_backward, probs, targets, dloss, N, V);
}

static void p_scale(const cb_kernels *k, float *x, float s, size_t n) {
    TIMED(PROF_OPTIMIZER, scale, x, s, n);
}

static void p_matmul_backward_dw_rows(const cb_kernels *k, float *dw, const float *dout,
                                      const float *inp, int N, int IC, int OC, int r0, int r1,
                                      int acc) {
    TIMED(PROF_GEMM, matmul_backward_dw_rows, dw, dout, inp, N, IC, OC, r0, r1, acc);
}

static void p_adamw(const cb_kernels *k, float *p, const float *g, float gs, float *m, float *v,
                    size_t n, float lr, float beta1, float beta2, float eps, float wd, float bc1,
                    float bc2) {
    TIMED(PROF_OPTIMIZER, adamw, p, g, gs, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2);
}

static double p_sumsq(const cb_kernels *k, const float *x, size_t n) {
    cb_prof *p = prof_of(k);
    double t0 = now_s(p), s = p->inner->sumsq(p->inner, x, n);
    p->ms[PROF_OPTIMIZER] += (now_s(p) - t0) * 1e3;
    return s;
}

static void p_mul_forward(const cb_kernels *k, float *out, const float *a, const float *b,
                          size_t n) {
    TIMED(PROF_ELEMENTWISE, mul_forward, out, a, b, n);
}

static void p_mul_backward(const cb_kernels *k, float *da, float *db, const float *a,
                           const float *b, const float *dout, size_t n) {
    TIMED(PROF_ELEMENTWISE, mul_backward, da, db, a, b, dout, n);
}

static void p_relu_forward(const cb_kernels *k, float *out, const float *inp, size_t n) {
    TIMED(PROF_ELEMENTWISE, relu_forward, out, inp, n);
}

static void p_relu_backward(const cb_kernels *k, float *dinp, const float *inp, const float *dout,
                            size_t n) {
    TIMED(PROF_ELEMENTWISE, relu_backward, dinp, inp, dout, n);
}

static void p_logistic_forward(const cb_kernels *k, float *losses, const float *logits,
                               const int *labels, int N) {
    TIMED(PROF_LOSS, logistic_forward, losses, logits, labels, N);
}

static void p_logistic_backward(const cb_kernels *k, float *dlogits, const float *logits,
                                const int *labels, float scale, int N) {
    TIMED(PROF_LOSS, logistic_backward, dlogits, logits, labels, scale, N);
}

static void p_layernorm_stats(const cb_kernels *k, double *stats, const float *inp, int N, int C) {
    TIMED(PROF_NORM, layernorm_stats, stats, inp, N, C);
}

static void p_layernorm_apply(const cb_kernels *k, float *out, float *mean, float *rstd,
                              const float *inp, const float *w, const float *b,
                              const double *stats, int N, int C, int Ctot) {
    TIMED(PROF_NORM, layernorm_apply, out, mean, rstd, inp, w, b, stats, N, C, Ctot);
}

static void p_layernorm_backward_stats(const cb_kernels *k, double *stats, const float *dout,
                                       const float *inp, const float *w, const float *mean,
                                       const float *rstd, int N, int C) {
    TIMED(PROF_NORM, layernorm_backward_stats, stats, dout, inp, w, mean, rstd, N, C);
}

static void p_layernorm_backward_apply(const cb_kernels *k, float *dinp, const double *stats,
                                       const float *dout, const float *inp, const float *w,
                                       const float *mean, const float *rstd, int N, int C,
                                       int Ctot) {
    TIMED(PROF_NORM, layernorm_backward_apply, dinp, stats, dout, inp, w, mean, rstd, N, C, Ctot);
}

static void p_layernorm_param_grads(const cb_kernels *k, float *dw, float *db, const float *dout,
                                    const float *inp, const float *mean, const float *rstd, int N,
                                    int C, int acc) {
    TIMED(PROF_NORM, layernorm_param_grads, dw, db, dout, inp, mean, rstd, N, C, acc);
}

static void p_crossentropy_max(const cb_kernels *k, float *mx, const float *logits, int N, int V,
                               int valid) {
    TIMED(PROF_LOSS, crossentropy_max, mx, logits, N, V, valid);
}

static void p_crossentropy_exp(const cb_kernels *k, float *stats, float *logits, const float *mx,
                               const int *targets, int v0, int N, int V, int valid) {
    TIMED(PROF_LOSS, crossentropy_exp, stats, logits, mx, targets, v0, N, V, valid);
}

static double p_crossentropy_normalize(const cb_kernels *k, float *losses, float *logits,
                                       const float *stats, const float *mx, int N, int V,
                                       int valid) {
    cb_prof *p = prof_of(k);
    double t0 = now_s(p);
    double s = p->inner->crossentropy_normalize(p->inner, losses, logits, stats, mx, N, V, valid);
    p->ms[PROF_LOSS] += (now_s(p) - t0) * 1e3;
    return s;
}

static void p_crossentropy_backward_cols(const cb_kernels *k, float *probs, const int *targets,
                                         int v0, float dloss, int N, int V) {
    TIMED(PROF_LOSS, crossentropy_backward_cols, probs, targets, v0, dloss, N, V);
}

static void p_crossentropy_smooth_stats(const cb_kernels *k, float *st, const float *logits,
                                        const int *targets, int v0, int N, int V, int valid) {
    TIMED(PROF_LOSS, crossentropy_smooth_stats, st, logits, targets, v0, N, V, valid);
}

static void p_crossentropy_smooth_loss(const cb_kernels *k, float *losses, const float *st,
                                       const int *targets, float eps, int Vtot, int ignore,
                                       float scale, int N) {
    TIMED(PROF_LOSS, crossentropy_smooth_loss, losses, st, targets, eps, Vtot, ignore, scale, N);
}

static void p_crossentropy_smooth_backward(const cb_kernels *k, float *probs, const int *targets,
                                           int v0, float dloss, float eps, int Vtot, int ignore,
                                           float scale, int N, int V, int valid) {
    TIMED(PROF_LOSS, crossentropy_smooth_backward, probs, targets, v0, dloss, eps, Vtot, ignore,
          scale, N, V, valid);
}

static void p_embedding_rows(const cb_kernels *k, float *out, const int *ids, const float *table,
                             int v0, int Vl, int N, int C) {
    TIMED(PROF_ELEMENTWISE, embedding_rows, out, ids, table, v0, Vl, N, C);
}

static void p_embedding_rows_backward(const cb_kernels *k, float *dtable, const float *dout,
                                      const int *ids, int v0, int Vl, int N, int C) {
    TIMED(PROF_ELEMENTWISE, embedding_rows_backward, dtable, dout, ids, v0, Vl, N, C);
}

static void p_position_add(const cb_kernels *k, float *out, const float *wpe, int t0, int T,
                           int N, int C) {
    TIMED(PROF_ELEMENTWISE, position_add, out, wpe, t0, T, N, C);
}

static void p_position_backward(const cb_kernels *k, float *dwpe, const float *dout, int t0,
                                int T, int N, int C) {
    TIMED(PROF_ELEMENTWISE, position_backward, dwpe, dout, t0, T, N, C);
}

static void p_bias_add(const cb_kernels *k, float *out, const float *bias, int N, int OC) {
    TIMED(PROF_ELEMENTWISE, bias_add, out, bias, N, OC);
}

static void p_bias_backward(const cb_kernels *k, float *dbias, const float *dout, int N, int OC) {
    TIMED(PROF_ELEMENTWISE, bias_backward, dbias, dout, N, OC);
}

static double p_sum(const cb_kernels *k, const float *x, size_t n) {
    cb_prof *p = prof_of(k);
    double t0 = now_s(p), s = p->inner->sum(p->inner, x, n);
    p->ms[PROF_LOSS] += (now_s(p) - t0) * 1e3;
    return s;
}

static void p_fill_normal(const cb_kernels *k, float *out, size_t n, uint64_t key, uint64_t e0,
                          float sd, float value) {
    TIMED(PROF_OPTIMIZER, fill_normal, out, n, key, e0, sd, value);
}

static void p_fill_sinusoid(const cb_kernels *k, float *out, size_t n, uint64_t e0, int C) {
    TIMED(PROF_OPTIMIZER, fill_sinusoid, out, n, e0, C);
}

void cb_prof_init(cb_prof *p, const cb_kernels *inner) {
    p->inner = inner;
    p->thread_cpu = 0;
    cb_prof_reset(p);
    p->table = (cb_kernels){
        .name = "profiled",
        .encoder_forward = p_encoder_forward,
        .encoder_backward = p_encoder_backward,
        .layernorm_forward = p_layernorm_forward,
        .layernorm_backward = p_layernorm_backward,
        .matmul_forward = p_matmul_forward,
        .matmul_backward = p_matmul_backward,
        .matmul_backward_dw_rows = p_matmul_backward_dw_rows,
        .head_forward = p_head_forward,
        .head_backward = p_head_backward,
        .attention_forward = p_attention_forward,
        .attention_backward = p_attention_backward,
        .attention_saved = p_attention_saved,
        .gelu_forward = p_gelu_forward,
        .gelu_backward = p_gelu_backward,
        .gelu_erf_forward = p_gelu_erf_forward,
        .gelu_erf_backward = p_gelu_erf_backward,
        .dropout = p_dropout,
        .residual_forward = p_residual_forward,
        .crossentropy_forward = p_crossentropy_forward,
        .crossentropy_backward = p_crossentropy_backward,
        .scale = p_scale,
        .adamw = p_adamw,
        .sumsq = p_sumsq,
        .mul_forward = p_mul_forward,
        .mul_backward = p_mul_backward,
        .relu_forward = p_relu_forward,
        .relu_backward = p_relu_backward,
        .logistic_forward = p_logistic_forward,
        .logistic_backward = p_logistic_backward,
        .layernorm_stats = p_layernorm_stats,
        .layernorm_apply = p_layernorm_apply,
        .layernorm_backward_stats = p_layernorm_backward_stats,
        .layernorm_backward_apply = p_layernorm_backward_apply,
        .layernorm_param_grads = p_layernorm_param_grads,
        .crossentropy_max = p_crossentropy_max,
        .crossentropy_exp = p_crossentropy_exp,
        .crossentropy_normalize = p_crossentropy_normalize,
        .crossentropy_backward_cols = p_crossentropy_backward_cols,
        .crossentropy_smooth_stats = p_crossentropy_smooth_stats,
        .crossentropy_smooth_loss = p_crossentropy_smooth_loss,
        .crossentropy_smooth_backward = p_crossentropy_smooth_backward,
        .embedding_rows = p_embedding_rows,
        .embedding_rows_backward = p_embedding_rows_backward,
        .position_add = p_position_add,
        .position_backward = p_position_backward,
        .bias_add = p_bias_add,
        .bias_backward = p_bias_backward,
        .fill_normal = p_fill_normal,
        .fill_sinusoid = p_fill_sinusoid,
        .sum = p_sum,
    };
}
