/* The element-wise kernels of BERT-base's step (B=8, T=128, C=768) that
 * are not products: the erf GELU forward and backward over the MLP's
 * (B*T, 4C), hidden dropout over (B*T, C), and attention forward and
 * backward without and with dropout 0.1 of its (B*NH, T, T)
 * probabilities (the products included). Best of R rounds,
 * milliseconds per call, on the threads OpenMP gives; build the tree
 * before a change beside this one to compare (docs/bert.md).
 * Run: make && OMP_NUM_THREADS=2 build/bench/bert_elementwise [R] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

enum { B = 8, T = 128, C = 768, NH = 12, N = B * T };

static double ms_since(double t0) { return (omp_get_wtime() - t0) * 1e3; }

/* attention forward + backward of one BERT-base layer, drop 0 and 0.1 */
static void attention(const cb_kernels *k, int R) {
    size_t na = (size_t)B * NH * T * T, nq = (size_t)N * 3 * C;
    float *qkv = malloc(nq * 4), *o = malloc((size_t)N * C * 4), *dq = malloc(nq * 4);
    float *att = malloc(2 * na * 4), *sc = malloc(na * 4), *dy = calloc((size_t)N * C, 4);
    if (!qkv || !o || !dq || !att || !sc || !dy) return;
    for (size_t i = 0; i < nq; i++) qkv[i] = (float)((int)(i % 201) - 100) * 1e-2f;
    for (int d = 0; d < 2; d++) {
        cb_attn a = cb_attn_self(B, T, C, NH, 0, NULL);
        if (d) a.drop = 0.1f, a.drop_key = 0x5eed, a.NHg = NH;
        double best = 1e30, t;
        for (int r = 0; r < R; r++) {
            t = omp_get_wtime();
            k->attention_forward(k, &a, o, att, qkv, qkv);
            k->attention_backward(k, &a, dq, dq, sc, dy, qkv, qkv, att);
            if ((t = ms_since(t)) < best) best = t;
        }
        printf("attention fwd+bwd, dropout %.1f  %8.2f ms\n", a.drop, best);
    }
    free(qkv), free(o), free(dq), free(att), free(sc), free(dy);
}

int main(int argc, char **argv) {
    int R = argc > 1 ? atoi(argv[1]) : 5;
    size_t nm = (size_t)N * 4 * C;
    float *x = malloc(nm * 4), *y = malloc(nm * 4), *dy = malloc(nm * 4);
    if (!x || !y || !dy || R < 1) {
        fprintf(stderr, "bert_elementwise: out of memory (40 MB) or R < 1\n");
        return 3;
    }
    for (size_t i = 0; i < nm; i++) x[i] = (float)((int)(i % 2001) - 1000) * 4e-3f, dy[i] = 1.0f;
    const cb_kernels *k = cb_kernels_cpu();
    const char *what[3] = {"gelu_erf_forward (B*T, 4C)", "gelu_erf_backward (B*T, 4C)",
                           "dropout 0.1 (B*T, C)"};
    double best[3] = {1e30, 1e30, 1e30}, t;
    for (int r = 0; r < R; r++) {
        t = omp_get_wtime();
        k->gelu_erf_forward(k, y, x, nm);
        if ((t = ms_since(t)) < best[0]) best[0] = t;
        t = omp_get_wtime();
        k->gelu_erf_backward(k, y, x, dy, nm);
        if ((t = ms_since(t)) < best[1]) best[1] = t;
        t = omp_get_wtime();
        k->dropout(k, y, x, N, C, C, 0, 0, C, 0x5eed, 0.1f);
        if ((t = ms_since(t)) < best[2]) best[2] = t;
    }
    for (int i = 0; i < 3; i++) printf("%-30s %8.2f ms\n", what[i], best[i]);
    printf("per BERT-base step (12 blocks of a GELU forward and backward and two dropouts "
           "forward and backward, the embeddings' dropout): %.0f ms\n",
           12 * (best[0] + best[1] + 4 * best[2]) + 2 * best[2]);
    attention(k, R);
    free(x), free(y), free(dy);
    return 0;
}
