// engine/cpu/matmul.cpp: thin wrappers over cblas_sgemm.
#include "engine/cpu/matmul.h"

#include <cblas.h>

#include "engine/cpu/elementwise.h"
#include "engine/cpu/reduce.h"
#include "engine/profile.h"

namespace engine::cpu {

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* B,
          float beta, float* C) {
    gemm_ld(ta, tb, M, N, K, alpha, A, 0, B, 0, beta, C, 0);
}

void gemm_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, const float* B, const float* bias,
               float* C, const float* residual) {
    bias_rows(bias, C, M, N, residual);
    gemm(ta, tb, M, N, K, 1.f, A, B, 1.f, C);
}

void gemm_dbias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float beta,
                float* C, float* dbias) {
    gemm(ta, tb, M, N, K, 1.f, A, B, beta, C);
    if (ta)  // A stored [K, M]: the sums over its rows
        sum_dim(A, dbias, 1, K, M);
    else
        sum_dim(A, dbias, M, K, 1);
}

void gemm_ld(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    profile::note_flops(2.0 * (double)M * (double)N * (double)K);
    if (lda <= 0) lda = ta ? M : K;
    if (ldb <= 0) ldb = tb ? K : N;
    if (ldc <= 0) ldc = N;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

void gemm_batched(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                  int64_t stride_a, const float* B, int64_t stride_b, float* C, int64_t stride_c) {
    // Big GEMMs parallelize well inside OpenBLAS; small ones (attention heads) across the batch
    // (a 128-cubed GEMM: 120 GFLOP/s across a batch of 16 on 2 threads, 80 one by one).
    bool across_batch = batch > 1 && M * N * K <= (1 << 21);
    if (across_batch) {
        #pragma omp parallel for
        for (int64_t i = 0; i < batch; i++)
            gemm(ta, tb, M, N, K, 1.f, A + i * stride_a, B + i * stride_b, 0.f, C + i * stride_c);
        return;
    }
    // Not inside `omp parallel if (false)`: in that inactive region each OpenBLAS call opened a
    // nested team of its own, and the GAU's [16, 128, 512] products ran at 10 GFLOP/s, not 110.
    for (int64_t i = 0; i < batch; i++)
        gemm(ta, tb, M, N, K, 1.f, A + i * stride_a, B + i * stride_b, 0.f, C + i * stride_c);
}

}  // namespace engine::cpu
