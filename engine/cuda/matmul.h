// engine/cuda/matmul.h: GEMM on the GPU through cuBLAS, with the CPU's row-major interface
// (engine/cpu/matmul.h): a row-major C = op(A)·op(B) is the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, so
// each call passes B as cuBLAS's first operand and A as its second, with the same transpose flags.
//
// Implemented in engine/cuda/matmul.cu: one cuBLAS handle (created on first use, on the backend's
// stream), TF32 tensor-op math while engine::cuda::tf32() is set (re-applied when it changes).
// Errors throw engine::Error naming the function, M, N, K (batch) and the transposes: a cuBLAS
// status other than success (with cublasGetStatusName/String), or a size beyond INT_MAX (cuBLAS
// takes int sizes), refused before any call. M = 0 or N = 0 (or batch = 0) does nothing.
#pragma once
#include <cstdint>

namespace engine::cuda {

// C[M,N] = alpha·op(A)·op(B) + beta·C, where op(A) is [M,K] (A stored [K,M] when trans_a) and
// op(B) is [K,N] (B stored [N,K] when trans_b). All row-major, contiguous, device memory.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C);
// `batch` independent GEMMs (cublasSgemmStridedBatched); a stride of 0 shares that operand.
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                  int64_t stride_a, const float* B, int64_t stride_b, float* C, int64_t stride_c);

}  // namespace engine::cuda
