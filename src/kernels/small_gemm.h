/* Small row-major products for attention's (b,h) pairs (small_gemm.c). */
#ifndef CB_SMALL_GEMM_H
#define CB_SMALL_GEMM_H

/* C (M,N) = alpha op(A) op(B), overwritten (cblas_sgemm's row-major
 * arguments with beta 0; ta, tb: transposed), on the calling thread */
void cb_small_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float *C, int ldc);
#endif
