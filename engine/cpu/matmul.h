// engine/cpu/matmul.h: GEMM on the CPU, row-major, through OpenBLAS's cblas_sgemm.
#pragma once
#include <cstdint>

namespace engine::cpu {

// C[M,N] = alpha·op(A)·op(B) + beta·C, where op(A) is [M,K] (A stored [K,M] when trans_a) and
// op(B) is [K,N] (B stored [N,K] when trans_b).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C);
// C[M,N] = op(A)·op(B) + bias + residual, bias [N] added to every row, residual [M,N] (either null:
// left out): the rows of bias + residual, then gemm with beta = 1 (linear's forward; the CUDA twin
// may fuse the bias into the GEMM).
void gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, const float* B,
               const float* bias, float* C, const float* residual = nullptr);
// C[M,N] = op(A)·op(B) + beta·C and dbias[M] = Σ_k op(A)[m, k]: linear's weight gradient and its
// bias gradient (A the output's gradient, transposed): gemm, then reduce.h's sum_dim over A (the
// CUDA twin may make the sums in the GEMM's pass over A).
void gemm_dbias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, const float* B,
                float beta, float* C, float* dbias);
// The same with explicit leading dimensions (elements between rows as stored; 0: packed rows), for
// operands that are column blocks of wider matrices (attention's heads in [B, T, H·D]).
void gemm_ld(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// `batch` independent GEMMs; a stride of 0 shares that operand across the batch. Batches run in
// parallel, each GEMM on one thread (OpenBLAS's OpenMP build does that inside our parallel loop).
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                  int64_t stride_a, const float* B, int64_t stride_b, float* C, int64_t stride_c);

}  // namespace engine::cpu
